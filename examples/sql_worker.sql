-- A worker in plain SQL: an order workflow with one activity, driven by a loop of
-- CALL dex.poll_tasks_wait, which makes the worker's last results and leases its next tasks
-- (dex.fail_task for failures).  It shows how thin a client can
-- be; the Python SDK (clients/python) does the same with replay, batches and a cache.
-- Run it with psql on a database whose server preloads dex:  psql -f examples/sql_worker.sql
\set ON_ERROR_STOP 1
\pset footer off

SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dex;
SELECT dex.create_queue(name, kind)
  FROM (VALUES ('sql-orders', 'workflow'), ('sql-payments', 'activity')) AS q(name, kind)
 WHERE NOT EXISTS (SELECT FROM dex.queue_limits l WHERE l.queue = q.name) \g /dev/null

-- A client starts a run.
SELECT dex.create_run('checkout', 'sql-orders', '{"order": 1042, "amount": 41}',
                      labels => '{"shop": "demo"}') AS run \gset
\echo started run :run

-- A worker, in SQL.  Each pass takes the tasks of a queue with one CALL of
-- dex.poll_tasks_wait (it leases what is there, or sleeps until a commit makes a task
-- pollable, holding no snapshot, up to its timeout), acts, and keeps the results for the
-- next CALL of that queue, which makes them first, in the transaction of its look: a task
-- costs its lease and one transaction more, and a worker one round trip per pass.  One
-- session serves both queues here, so each wait is short; a worker of one queue would wait
-- a minute.
--   workflow "checkout": charge the amount (an activity); when the charge
--     succeeds, complete the run with the receipt; if it fails, fail the run.
--   activity "charge": the first attempt fails with a retryable error (the
--     payment network "times out"; failures go through dex.fail_task), the retry
--     succeeds and returns amount + 1.
DO $$
DECLARE
    tasks jsonb;
    t record;
    events jsonb;
    done boolean := false;
    deadline timestamptz := clock_timestamp() + interval '30 seconds';
    -- the results the next CALL of each queue makes: run, task, lock version, result
    wf_runs uuid[] := '{}';
    wf_tasks integer[] := '{}';
    wf_versions bigint[] := '{}';
    wf_results jsonb[] := '{}';
    act_runs uuid[] := '{}';
    act_tasks integer[] := '{}';
    act_versions bigint[] := '{}';
    act_results jsonb[] := '{}';
    completed boolean[];
BEGIN
    -- after the run's end, one more pass sends the last result
    WHILE NOT done OR cardinality(wf_runs) > 0 LOOP
        -- workflow tasks: each message carries its run id, task id and lock version
        CALL dex.poll_tasks_wait('sql-orders', 'sql-worker', 10, '1 min', '0.2 s', tasks, false,
                                 wf_runs, wf_tasks, wf_versions, wf_results, completed);
        IF false = ANY (completed) THEN
            RAISE NOTICE 'workflow: a lease was lost, its result was not applied';
        END IF;
        wf_runs := '{}'; wf_tasks := '{}'; wf_versions := '{}'; wf_results := '{}';
        FOR t IN SELECT (m->>'runId')::uuid AS run_id, coalesce((m->>'taskId')::int, 0) AS task_id,
                        (m->>'lockVersion')::bigint AS lock_version, m AS task
                   FROM jsonb_array_elements(tasks) m LOOP
            events := t.task->'newEvents';
            wf_runs := wf_runs || t.run_id;
            wf_tasks := wf_tasks || t.task_id;
            wf_versions := wf_versions || t.lock_version;
            IF events @> '[{"runStarted": {}}]' THEN
                RAISE NOTICE 'workflow: run started, scheduling charge';
                wf_results := wf_results || jsonb_build_array(
                    jsonb_build_object('id', 1, 'scheduleActivity', jsonb_build_object(
                        'name', 'charge', 'queue', 'sql-payments',
                        'argument', events->1->'runCreated'->'argument',
                        'retryPolicy', '{"maxAttempts": 3, "initialDelay": "0.5s"}'::jsonb)));
            ELSIF events @> '[{"activityTaskCompleted": {}}]' THEN
                RAISE NOTICE 'workflow: charge succeeded, completing the run';
                wf_results := wf_results || jsonb_build_array(
                    jsonb_build_object('completeRun', jsonb_build_object('result',
                        jsonb_path_query_first(events, '$[*].activityTaskCompleted.result'))));
                done := true;
            ELSIF events @> '[{"activityTaskFailed": {}}]' THEN
                RAISE NOTICE 'workflow: charge failed, failing the run';
                wf_results := wf_results ||
                    '[{"failRun": {"failure": {"message": "payment failed"}}}]'::jsonb;
                done := true;
            ELSE
                wf_results := wf_results || '[]'::jsonb;     -- nothing to do yet
            END IF;
        END LOOP;
        COMMIT;
        -- activity tasks
        CALL dex.poll_tasks_wait('sql-payments', 'sql-worker', 10, '1 min', '0.2 s', tasks, false,
                                 act_runs, act_tasks, act_versions, act_results, completed);
        act_runs := '{}'; act_tasks := '{}'; act_versions := '{}'; act_results := '{}';
        FOR t IN SELECT (m->>'runId')::uuid AS run_id, (m->>'taskId')::int AS task_id,
                        (m->>'lockVersion')::bigint AS lock_version, m AS task
                   FROM jsonb_array_elements(tasks) m LOOP
            IF (t.task->>'attempt')::int = 1 THEN
                RAISE NOTICE 'activity: charge attempt 1 times out';
                PERFORM dex.fail_task(t.run_id, t.task_id, t.lock_version,
                                      '{"message": "payment network timed out"}');
            ELSE
                RAISE NOTICE 'activity: charge attempt % succeeds', t.task->>'attempt';
                act_runs := act_runs || t.run_id;
                act_tasks := act_tasks || t.task_id;
                act_versions := act_versions || t.lock_version;
                act_results := act_results || jsonb_build_object('receipt', 'R-1042',
                    'charged', ((t.task->'argument'->>'json')::jsonb->>'amount')::int + 1);
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
