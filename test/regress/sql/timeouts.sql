--
-- timeouts: activity timeouts cap leases; heartbeat details reach the next attempt
--
SET dex.retry_randomization = 0;
SET dex.retry_initial_delay = '100ms';
SELECT dex.create_queue('to-wf', 'workflow'), dex.create_queue('to-act', 'activity');
CREATE FUNCTION pg_temp.wait_until(query text, timeout_s float8 DEFAULT 10) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE ok boolean;
BEGIN
    FOR i IN 1..(timeout_s * 50)::int LOOP
        EXECUTE query INTO ok;
        IF ok THEN RETURN true; END IF;
        PERFORM pg_sleep(0.02);
    END LOOP;
    RETURN false;
END $$;

SELECT dex.create_run('t', 'to-wf') AS run \gset
SELECT lock_version AS v FROM dex.poll_tasks('to-wf', 'w') \gset
SELECT dex.complete_task(:'run', 0, :v,
    '[{"id": 1, "scheduleActivity": {"name": "beat", "queue": "to-act",
       "startToCloseTimeout": "60s", "heartbeatTimeout": "0.5s", "retryPolicy": {"maxAttempts": 3}}},
      {"id": 2, "scheduleActivity": {"name": "bounded", "queue": "to-act",
       "scheduleToCloseTimeout": "0.6s", "retryPolicy": {"maxAttempts": 10, "initialDelay": "1s"}}}]');

-- the leases are capped by the heartbeat and schedule-to-close timeouts, not the 5 minutes asked
SELECT task_id, locked_until - now() <= interval '0.6 s' AS capped
  FROM dex.poll_tasks('to-act', 'w', 10) ORDER BY task_id;

-- a heartbeat keeps "beat" alive and records its progress; it stays capped by the heartbeat timeout
SELECT lock_version AS bv FROM dex.activity_task WHERE run_id = :'run' AND event_id = 1 \gset
SELECT dex.heartbeat_task(:'run', 1, :bv, '5 minutes', '{"done": 40}') - now() <= interval '0.5 s' AS capped;

-- no more heartbeats: the lease expires, the attempt counts, the next attempt sees the details
SELECT pg_temp.wait_until($$SELECT attempt = 2 FROM dex.activity_task WHERE run_id = '$$ || :'run' || $$' AND event_id = 1$$);
SELECT pg_temp.wait_until($$SELECT status = 'QUEUED' FROM dex.activity_task WHERE run_id = '$$ || :'run' || $$' AND event_id = 1$$);
SELECT task->'heartbeatDetails' AS details, task->'lastFailure'->>'type' AS last_failure,
       lock_version AS bv
  FROM dex.poll_tasks('to-act', 'w', 10) WHERE task_id = 1 \gset
\echo details :details after :last_failure
SELECT dex.complete_task(:'run', 1, :bv, '"beat done"');

-- "bounded" is not heartbeated: its lease expires at the schedule-to-close deadline, and
-- a retry would come after it, so it fails for good
SELECT pg_temp.wait_until($$SELECT count(*) = 0 FROM dex.activity_task WHERE run_id = '$$ || :'run' || $$'$$);
SELECT pg_temp.wait_until($$SELECT count(*) = 1 FROM dex.workflow_task WHERE run_id = '$$ || :'run' || $$' AND locked_by IS NULL$$);
SELECT lock_version AS v,
       jsonb_path_query_array(task, '$.newEvents[*].activityTaskFailed.failure.type') AS failures,
       jsonb_path_query_array(task, '$.newEvents[*].activityTaskCompleted.result') AS results
  FROM dex.poll_tasks('to-wf', 'w') \gset
\echo failures :failures results :results
SELECT dex.complete_task(:'run', 0, :v, '[{"completeRun": {}}]');
SELECT count(*) AS retry_records FROM dex.activity_retry WHERE run_id = :'run';

\set VERBOSITY sqlstate
SELECT dex.create_run('t', 'to-wf') AS run2 \gset
SELECT lock_version AS v FROM dex.poll_tasks('to-wf', 'w') \gset
SELECT dex.complete_task(:'run2', 0, :v, '[{"id": 1, "scheduleActivity": {"name": "x", "queue": "to-act", "heartbeatTimeout": "0s"}}]');
SELECT dex.complete_task(:'run2', 0, :v, '[{"id": 1, "scheduleActivity": {"name": "x", "queue": "to-act", "startToCloseTimeout": "-5s"}}]');
\set VERBOSITY default
SELECT dex.complete_task(:'run2', 0, :v, '[{"completeRun": {}}]');
RESET dex.retry_randomization;
RESET dex.retry_initial_delay;
