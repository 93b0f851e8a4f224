--
-- suspend: while a run is SUSPENDED nothing of it is handed out and no command
-- of it takes effect; what arrives meanwhile is kept and seen after resume
--
SELECT dex.create_queue('sus-wf', 'workflow'), dex.create_queue('sus-act', 'activity');

-- the events a poll's task shows, by kind
CREATE FUNCTION pg_temp.kinds(task jsonb) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_path_query_array(task, '$.newEvents[*].keyvalue() ? (@.key != "timestamp" && @.key != "id").key')
$$;
-- 'ok', or the SQLSTATE and the detail of the error a statement raised
CREATE FUNCTION pg_temp.outcome(statement text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    detail text;
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
    RETURN SQLSTATE || ': ' || detail;
END $$;
-- wait until the scheduler has made a due activity pollable
CREATE FUNCTION pg_temp.wait_queued(queue_name text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + interval '10 s';
BEGIN
    WHILE clock_timestamp() < deadline LOOP
        IF EXISTS (SELECT FROM dex.activity_task a JOIN dex.queue q ON q.id = a.queue_id
                    WHERE q.name = queue_name AND a.status = 'QUEUED' AND a.locked_by IS NULL) THEN
            RETURN true;
        END IF;
        PERFORM pg_sleep(0.02);
    END LOOP;
    RETURN false;
END $$;

-- a run with three activities: one leased, one queued, one that will fail and retry
SELECT dex.create_run('s', 'sus-wf') AS run \gset
SELECT lock_version AS v FROM dex.poll_tasks('sus-wf', 'w') \gset
SELECT dex.complete_task(:'run', 0, :v, '[
  {"id": 1, "scheduleActivity": {"name": "leased", "queue": "sus-act", "priority": 90}},
  {"id": 2, "scheduleActivity": {"name": "failing", "queue": "sus-act", "priority": 80,
     "retryPolicy": {"initialDelay": "3s", "randomizationFactor": 0}}},
  {"id": 3, "scheduleActivity": {"name": "queued", "queue": "sus-act", "priority": 10}}]');
SELECT max(lock_version) FILTER (WHERE task->>'name' = 'leased') AS leased_v,
       max(lock_version) FILTER (WHERE task->>'name' = 'failing') AS failing_v
  FROM dex.poll_tasks('sus-act', 'w', 2) \gset
-- an event makes a workflow task, which a worker leases before the suspension
SELECT dex.send_external_event(:'run', 'before');
SELECT lock_version AS wv FROM dex.poll_tasks('sus-wf', 'w') \gset

SELECT dex.suspend_run(:'run');

-- the completion of the task leased before the suspension is refused, and its
-- command takes no effect
SELECT pg_temp.outcome(format('SELECT dex.complete_task(%L, 0, %s, %L)', :'run', :wv,
  '[{"id": 4, "scheduleActivity": {"name": "new", "queue": "sus-act"}}]')) AS completion;
SELECT count(*) AS new_activities FROM dex.activity_task WHERE run_id = :'run' AND name = 'new';
-- the queued activity is held back, a failed attempt's retry too, and no
-- workflow task is handed out: not for an event, nor for a timer, nor a result
SELECT dex.fail_task(:'run', 2, :failing_v, '{"message": "flaky"}');
SELECT name, status, visible_from = 'infinity' AS held FROM dex.activity_task
 WHERE run_id = :'run' ORDER BY event_id;
SELECT dex.send_external_event(:'run', 'during');
SELECT dex.complete_task(:'run', 1, :leased_v, '"done while suspended"');
SELECT pg_sleep(0.5);
SELECT count(*) AS handed_out FROM (
  SELECT FROM dex.poll_tasks('sus-act', 'w', 10) UNION ALL SELECT FROM dex.poll_tasks('sus-wf', 'w', 10)) t;
-- a failing workflow task of a suspended run is refused the same way
SELECT pg_temp.outcome(format('SELECT dex.fail_task(%L, 0, %s, %L)', :'run', :wv,
  '{"message": "crash"}')) AS failure;
SELECT status, task_failures FROM dex.workflow_run WHERE id = :'run';

-- resumed: the queued activity is handed out at once, the retried one when
-- its backoff (3 s after the failure, without jitter) has passed, and the
-- new workflow task shows everything that arrived
SELECT dex.resume_run(:'run');
SELECT task->>'name' AS name, task->>'attempt' AS attempt FROM dex.poll_tasks('sus-act', 'w', 10);
SELECT pg_temp.wait_queued('sus-act');
SELECT task->>'name' AS name, task->>'attempt' AS attempt FROM dex.poll_tasks('sus-act', 'w', 10);
SELECT pg_temp.kinds(task) AS shown FROM dex.poll_tasks('sus-wf', 'w');

-- wrong states and bad input change nothing
\set VERBOSITY sqlstate
SELECT dex.resume_run(:'run');
SELECT dex.suspend_run(:'run');
SELECT dex.suspend_run(:'run');
SELECT dex.suspend_run(NULL);
SELECT dex.resume_run('00000000-0000-7000-8000-000000000000');
\set VERBOSITY terse
SELECT status FROM dex.workflow_run WHERE id = :'run';
