-- poll_limits: dex.poll_tasks leases at most max_tasks tasks, whatever plan the planner picks.
--
-- A regression test: the lease statements of the poll (now src/api/api_poll.c) once had the form
--     UPDATE task t ... FROM (SELECT ... LIMIT $2 FOR UPDATE SKIP LOCKED) c WHERE t.run_id = c.run_id
-- When the planner estimated the queue's task table (a partition up to 1.7) at about one row (statistics taken while
-- the queue was empty: reltuples 0, relpages > 0, which autovacuum produces after a queue
-- drains), it put the LIMIT subquery on the inner side of a nested loop and rescanned it for
-- every task row.  Each rescan skipped the rows the UPDATE had already changed and returned
-- the next ones, so poll_tasks(..., max_tasks => 1) leased the whole queue.  The LIMIT is now
-- a MATERIALIZED CTE, evaluated once.
--
-- The tests below reproduce those statistics inside the transaction (ANALYZE of the drained
-- task tables) and then poll, with plans made for the actual parameters (custom plans: what
-- the first five executions of the statement in each backend get).  Runs in one transaction
-- that is rolled back.
\set ON_ERROR_STOP 1
\pset format unaligned
\pset tuples_only true
\pset pager off

BEGIN;
SET LOCAL client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;
-- plans made for the actual parameters, as a backend's first executions of a statement get
-- them (the generic plan that may replace them later happens to be safe here)
SET LOCAL plan_cache_mode = force_custom_plan;

SELECT plan(12);

SELECT dex.create_queue('tap-limits-wf', 'workflow') \gset
SELECT dex.create_queue('tap-limits-act', 'activity') \gset

-- n new runs: n pending workflow tasks
CREATE FUNCTION pg_temp.new_runs(n integer) RETURNS void LANGUAGE sql AS $$
    SELECT FROM (SELECT dex.create_run('tap-limits', 'tap-limits-wf') FROM generate_series(1, n)) r
$$;
-- n new runs whose first workflow task schedules an activity: n queued activity tasks
CREATE FUNCTION pg_temp.new_activities(n integer) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    t record;
BEGIN
    PERFORM pg_temp.new_runs(n);
    FOR t IN SELECT * FROM dex.poll_tasks('tap-limits-wf', 'setup', 1000) LOOP
        PERFORM dex.complete_task(t.run_id, 0, t.lock_version,
            '[{"id": 1, "scheduleActivity": {"name": "a", "queue": "tap-limits-act"}}]');
    END LOOP;
END $$;
-- finish everything on both queues: complete leased and pending tasks, end the runs
CREATE FUNCTION pg_temp.drain() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    t record;
BEGIN
    PERFORM dex.poll_tasks('tap-limits-act', 'drain', 1000);
    FOR t IN SELECT a.run_id, a.event_id, a.lock_version FROM dex.activity_task a
               JOIN dex.queue q ON q.id = a.queue_id WHERE q.name = 'tap-limits-act' LOOP
        PERFORM dex.complete_task(t.run_id, t.event_id, t.lock_version, '1');
    END LOOP;
    PERFORM dex.poll_tasks('tap-limits-wf', 'drain', 1000);
    FOR t IN SELECT w.run_id, w.lock_version FROM dex.workflow_task w
               JOIN dex.queue q ON q.id = w.queue_id WHERE q.name = 'tap-limits-wf' LOOP
        PERFORM dex.complete_task(t.run_id, 0, t.lock_version, '[{"completeRun": {}}]');
    END LOOP;
END $$;
CREATE FUNCTION pg_temp.pending(queue_name text) RETURNS integer LANGUAGE sql AS $$
    SELECT ((SELECT count(*) FROM dex.workflow_task w JOIN dex.queue q ON q.id = w.queue_id
              WHERE q.name = queue_name AND w.locked_by IS NULL)
          + (SELECT count(*) FROM dex.activity_task a JOIN dex.queue q ON q.id = a.queue_id
              WHERE q.name = queue_name AND a.locked_by IS NULL AND a.status = 'QUEUED'))::integer
$$;

--
-- new queues: the limit holds
--
SELECT pg_temp.new_runs(4) \gset
SELECT is((SELECT count(*)::int FROM dex.poll_tasks('tap-limits-wf', 'w1', 1)), 1,
          'a new workflow queue: max_tasks 1 leases 1 of 4 tasks');
SELECT is((SELECT count(*)::int FROM dex.poll_tasks('tap-limits-wf', 'w1', 2)), 2,
          'max_tasks 2 leases 2 of the 3 left');
SELECT is((SELECT count(*)::int FROM dex.poll_tasks('tap-limits-wf', 'w1', 10)), 1,
          'max_tasks 10 leases the last one');
SELECT pg_temp.drain() \gset

SELECT pg_temp.new_activities(4) \gset
SELECT is((SELECT count(*)::int FROM dex.poll_tasks('tap-limits-act', 'w1', 1)), 1,
          'a new activity queue: max_tasks 1 leases 1 of 4 tasks');
SELECT is((SELECT count(*)::int FROM dex.poll_tasks('tap-limits-act', 'w1', 2)), 2,
          'max_tasks 2 leases 2 of the 3 left');
SELECT is((SELECT count(*)::int FROM dex.poll_tasks('tap-limits-act', 'w1', 10)), 1,
          'max_tasks 10 leases the last one');
SELECT pg_temp.drain() \gset

--
-- queues whose statistics were taken while they were empty
--
SELECT is(pg_temp.pending('tap-limits-wf') + pg_temp.pending('tap-limits-act'), 0, 'both queues are drained');
-- the tasks the database's other queues hold go too, until the rollback: the task tables
-- are shared by every queue (1.8), and the statistics must say empty
DELETE FROM dex.workflow_task;
DELETE FROM dex.activity_task;
ANALYZE dex.workflow_task;
ANALYZE dex.activity_task;
SELECT ok((SELECT bool_and(reltuples = 0 AND relpages > 0) FROM pg_class
            WHERE oid IN ('dex.workflow_task'::regclass, 'dex.activity_task'::regclass)),
          'the task tables'' statistics say: empty, but with pages');

SELECT pg_temp.new_runs(4) \gset
SELECT is((SELECT count(*)::int FROM dex.poll_tasks('tap-limits-wf', 'w2', 1)), 1,
                       'a drained workflow queue: max_tasks 1 leases 1 of 4 new tasks');
SELECT is(pg_temp.pending('tap-limits-wf'), 3, 'and leaves 3 for other workers');
SELECT pg_temp.drain() \gset

SELECT pg_temp.new_activities(4) \gset
SELECT is((SELECT count(*)::int FROM dex.poll_tasks('tap-limits-act', 'w2', 1)), 1,
                       'a drained activity queue: max_tasks 1 leases 1 of 4 new tasks');
SELECT is(pg_temp.pending('tap-limits-act'), 3, 'and leaves 3 for other workers');

SELECT * FROM finish();
ROLLBACK;
