--
-- blocked: a run whose workflow task keeps failing is parked, visible, until resumed
--
SET dex.max_workflow_task_failures = 3;
SET dex.retry_initial_delay = '1ms';
SET dex.retry_randomization = 0;
SELECT dex.create_queue('blk-wf', 'workflow');

-- fail the run's workflow task n times (waiting out each backoff; a transaction per try,
-- since the backoff counts from the failing transaction's start); how many it failed is in
-- the session's blk.failed
CREATE PROCEDURE pg_temp.fail_tasks(run uuid, n integer) LANGUAGE plpgsql AS $$
DECLARE
    failed integer := 0;
    t record;
BEGIN
    FOR try IN 1..1000 LOOP
        EXIT WHEN failed >= n;
        SELECT * INTO t FROM dex.poll_tasks('blk-wf', 'w', 10) p WHERE p.run_id = run;
        IF FOUND THEN
            PERFORM dex.fail_task(t.run_id, 0, t.lock_version, '{"message": "no such workflow"}');
            failed := failed + 1;
        ELSIF (SELECT status FROM dex.workflow_run WHERE id = run) NOT IN ('CREATED', 'RUNNING') THEN
            EXIT;
        ELSE
            PERFORM pg_sleep(0.01);
        END IF;
        COMMIT;
    END LOOP;
    PERFORM set_config('blk.failed', failed::text, false);
END $$;

-- complete the run's next workflow task with no command, once its backoff has passed
CREATE PROCEDURE pg_temp.complete_next(run uuid) LANGUAGE plpgsql AS $$
DECLARE
    t record;
BEGIN
    FOR try IN 1..1000 LOOP
        SELECT * INTO t FROM dex.poll_tasks('blk-wf', 'w', 10) p WHERE p.run_id = run;
        IF FOUND THEN
            PERFORM dex.complete_task(t.run_id, 0, t.lock_version, '[]');
            RETURN;
        END IF;
        PERFORM pg_sleep(0.01);
        COMMIT;
    END LOOP;
END $$;

-- a run that never started: three failures in a row park it
SELECT dex.create_run('poison', 'blk-wf') AS run \gset
CALL pg_temp.fail_tasks(:'run', 5);
SELECT current_setting('blk.failed') AS failed;
SELECT status, task_failures, last_task_failure->>'message' AS last_failure
  FROM dex.runs WHERE id = :'run';
SELECT count(*) AS handed_out FROM dex.poll_tasks('blk-wf', 'w', 10) WHERE run_id = :'run';
SELECT count(*) AS listed FROM dex.list_runs(status => 'BLOCKED') WHERE id = :'run';
SELECT runs FROM dex.runs_by_status WHERE workflow_name = 'poison' AND status = 'BLOCKED';
-- an event for it waits; resume retries it: CREATED again, the count starts over
SELECT dex.send_external_event(:'run', 'meanwhile');
SELECT dex.resume_run(:'run');
SELECT status, task_failures FROM dex.workflow_run WHERE id = :'run';
SELECT jsonb_path_query_array(task, '$.newEvents[*].keyvalue() ? (@.key != "timestamp" && @.key != "id").key') AS shown,
       count(dex.complete_task(run_id, 0, lock_version, '[]')) OVER () AS completed
  FROM dex.poll_tasks('blk-wf', 'w', 10) WHERE run_id = :'run';
-- a running run is parked the same way, and resumed RUNNING; a completed task resets the count
SELECT dex.send_external_event(:'run', 'again');
CALL pg_temp.fail_tasks(:'run', 5);
SELECT current_setting('blk.failed') AS failed;
SELECT status FROM dex.workflow_run WHERE id = :'run';
SELECT dex.resume_run(:'run');
SELECT status, task_failures FROM dex.workflow_run WHERE id = :'run';
CALL pg_temp.fail_tasks(:'run', 1);
SELECT current_setting('blk.failed') AS failed;
CALL pg_temp.complete_next(:'run');
SELECT status, task_failures FROM dex.workflow_run WHERE id = :'run';

-- 0: retried for ever
SET dex.max_workflow_task_failures = 0;
SELECT dex.send_external_event(:'run', 'once more');
CALL pg_temp.fail_tasks(:'run', 5);
SELECT current_setting('blk.failed') AS failed;
SELECT status, task_failures FROM dex.workflow_run WHERE id = :'run';

-- a blocked run can be cancelled or terminated at once; suspend is refused
SET dex.max_workflow_task_failures = 1;
CALL pg_temp.fail_tasks(:'run', 1);
SELECT current_setting('blk.failed') AS failed;
\set VERBOSITY sqlstate
SELECT dex.suspend_run(:'run');
\set VERBOSITY terse
SELECT dex.cancel_run(:'run', 'given up');
SELECT status FROM dex.workflow_run WHERE id = :'run';
\set VERBOSITY sqlstate
SELECT dex.resume_run(:'run');
\set VERBOSITY terse
-- a run blocked before it ever started ends with a history that starts as every history does
SELECT dex.create_run('poison-2', 'blk-wf') AS run2 \gset
CALL pg_temp.fail_tasks(:'run2', 1);
SELECT dex.cancel_run(:'run2');
SELECT r.status, string_agg((SELECT k FROM jsonb_object_keys(h.event - 'id' - 'timestamp') k), ','
                            ORDER BY h.sequence) AS history
  FROM dex.workflow_run r, dex.run_history(r.id) h WHERE r.id = :'run2' GROUP BY r.status;
\set VERBOSITY sqlstate
SET dex.max_workflow_task_failures = -1;
