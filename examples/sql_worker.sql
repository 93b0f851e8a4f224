-- A worker in plain SQL: an order workflow with one activity, driven by a loop of
-- dex.poll_tasks_wait / dex.complete_task / dex.fail_task.  It shows how thin a client can
-- be; the Python SDK (clients/python) does the same with replay, batches and a cache.
-- Run it with psql on a database whose server preloads dex:  psql -f examples/sql_worker.sql
\set ON_ERROR_STOP 1
\pset footer off

SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dex;
SELECT dex.create_queue('sql-orders', 'workflow'), dex.create_queue('sql-payments', 'activity') \g /dev/null

-- A client starts a run.
SELECT dex.create_run('checkout', 'sql-orders', '{"order": 1042, "amount": 41}',
                      labels => '{"shop": "demo"}') AS run \gset
\echo started run :run

-- A worker, in SQL.  Each pass takes the tasks of a queue with one CALL of
-- dex.poll_tasks_wait (it leases what is there, or sleeps until a commit makes a task
-- pollable, holding no snapshot, up to its timeout), acts, completes, and commits.  One
-- session serves both queues here, so each wait is short; a worker of one queue would
-- wait a minute.
--   workflow "checkout": charge the amount (an activity); when the charge
--     succeeds, complete the run with the receipt; if it fails, fail the run.
--   activity "charge": the first attempt fails with a retryable error (the
--     payment network "times out"), the retry succeeds and returns amount + 1.
DO $$
DECLARE
    tasks jsonb;
    t record;
    events jsonb;
    done boolean := false;
    deadline timestamptz := clock_timestamp() + interval '30 seconds';
BEGIN
    WHILE NOT done LOOP
        -- workflow tasks: each message carries its run id, task id and lock version
        CALL dex.poll_tasks_wait('sql-orders', 'sql-worker', 10, '1 min', '0.2 s', tasks);
        FOR t IN SELECT (m->>'runId')::uuid AS run_id, coalesce((m->>'taskId')::int, 0) AS task_id,
                        (m->>'lockVersion')::bigint AS lock_version, m AS task
                   FROM jsonb_array_elements(tasks) m LOOP
            events := t.task->'newEvents';
            IF events @> '[{"runStarted": {}}]' THEN
                RAISE NOTICE 'workflow: run started, scheduling charge';
                PERFORM dex.complete_task(t.run_id, t.task_id, t.lock_version, jsonb_build_array(
                    jsonb_build_object('id', 1, 'scheduleActivity', jsonb_build_object(
                        'name', 'charge', 'queue', 'sql-payments',
                        'argument', events->1->'runCreated'->'argument',
                        'retryPolicy', '{"maxAttempts": 3, "initialDelay": "0.5s"}'::jsonb))));
            ELSIF events @> '[{"activityTaskCompleted": {}}]' THEN
                RAISE NOTICE 'workflow: charge succeeded, completing the run';
                PERFORM dex.complete_task(t.run_id, t.task_id, t.lock_version, jsonb_build_array(
                    jsonb_build_object('completeRun', jsonb_build_object('result',
                        jsonb_path_query_first(events, '$[*].activityTaskCompleted.result')))));
                done := true;
            ELSIF events @> '[{"activityTaskFailed": {}}]' THEN
                RAISE NOTICE 'workflow: charge failed, failing the run';
                PERFORM dex.complete_task(t.run_id, t.task_id, t.lock_version,
                    '[{"failRun": {"failure": {"message": "payment failed"}}}]');
                done := true;
            END IF;
        END LOOP;
        COMMIT;
        -- activity tasks
        CALL dex.poll_tasks_wait('sql-payments', 'sql-worker', 10, '1 min', '0.2 s', tasks);
        FOR t IN SELECT (m->>'runId')::uuid AS run_id, (m->>'taskId')::int AS task_id,
                        (m->>'lockVersion')::bigint AS lock_version, m AS task
                   FROM jsonb_array_elements(tasks) m LOOP
            IF (t.task->>'attempt')::int = 1 THEN
                RAISE NOTICE 'activity: charge attempt 1 times out';
                PERFORM dex.fail_task(t.run_id, t.task_id, t.lock_version,
                                      '{"message": "payment network timed out"}');
            ELSE
                RAISE NOTICE 'activity: charge attempt % succeeds', t.task->>'attempt';
                PERFORM dex.complete_task(t.run_id, t.task_id, t.lock_version,
                    jsonb_build_object('receipt', 'R-1042',
                        'charged', ((t.task->'argument'->>'json')::jsonb->>'amount')::int + 1));
            END IF;
        END LOOP;
        COMMIT;
        IF clock_timestamp() > deadline THEN
            RAISE EXCEPTION 'the demo run did not finish in time';
        END IF;
    END LOOP;
END $$;

\echo
\echo The run:
SELECT id, workflow_name, status, argument, result, history_length,
       completed_at - created_at AS took
  FROM dex.get_run(:'run');

\echo The history, event by event:
SELECT h.sequence AS seq,
       to_char((h.event->>'timestamp')::timestamptz, 'HH24:MI:SS.MS') AS at,
       k.key AS event,
       coalesce(h.event->>'id', '') AS id,
       (h.event->k.key)::text AS details
  FROM dex.run_history(:'run') h,
       LATERAL (SELECT key FROM jsonb_object_keys(h.event - 'id' - 'timestamp') key) k
 ORDER BY h.sequence;
