--
-- monitoring: the counters move as tasks are created, polled, completed and
-- failed (asserted as deltas: other tests and the scheduler count too), so do
-- the latency histograms, a reset zeroes both, and the views over the tables
-- say what queues hold
--
SELECT dex.create_queue('mon-wf', 'workflow'), dex.create_queue('mon-act', 'activity');

-- the columns of the monitoring views
SELECT c.relname AS view, string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', '
                                     ORDER BY a.attnum) AS columns
  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
 WHERE c.relnamespace = 'dex'::regnamespace
   AND c.relname IN ('stat_queues', 'stat_database', 'queue_depth', 'runs_by_status', 'stat_latency')
 GROUP BY c.relname ORDER BY 1;

-- counters as they are now, and what changed since
CREATE TEMP TABLE q0 AS SELECT * FROM dex.stat_queues WHERE queue LIKE 'mon-%';
CREATE TEMP TABLE d0 AS SELECT * FROM dex.stat_database;
CREATE FUNCTION pg_temp.queue_deltas()
RETURNS TABLE (queue text, created bigint, polls bigint, empty bigint, leased bigint,
               completed bigint, failed bigint, superseded bigint)
LANGUAGE sql AS $$
    SELECT s.queue, s.tasks_created - q.tasks_created, s.polls - q.polls,
           s.polls_empty - q.polls_empty, s.tasks_leased - q.tasks_leased,
           s.tasks_completed - q.tasks_completed, s.tasks_failed - q.tasks_failed,
           s.completions_superseded - q.completions_superseded
      FROM dex.stat_queues s JOIN q0 q USING (queue) ORDER BY s.queue DESC
$$;

-- three runs: three workflow tasks created
SELECT array_agg(id) AS runs FROM dex.create_runs('mon', 'mon-wf', ARRAY['1', '2', '3']::jsonb[]) AS id \gset
SELECT * FROM pg_temp.queue_deltas();

-- what the queues hold now: three ready workflow tasks, none leased
SELECT queue, kind, status, ready, leased, delayed, oldest_ready_at IS NOT NULL AS has_oldest,
       backlog_age >= '0'::interval AS age_known, estimated
  FROM dex.queue_depth WHERE queue LIKE 'mon-%' ORDER BY queue DESC;

-- a poll leasing two, an empty poll of the activity queue
SELECT array_agg(run_id ORDER BY run_id) AS r, array_agg(lock_version ORDER BY run_id) AS v
  FROM dex.poll_tasks('mon-wf', 'w', 2) \gset
SELECT count(*) AS got FROM dex.poll_tasks('mon-act', 'w');
SELECT * FROM pg_temp.queue_deltas();
SELECT queue, ready, leased FROM dex.queue_depth WHERE queue = 'mon-wf';

-- one completion schedules an activity (one activity task created), the other
-- workflow task fails; completing the first again is refused: a lost lease
SELECT dex.complete_task((:'r'::uuid[])[1], 0, (:'v'::bigint[])[1],
    '[{"id": 1, "scheduleActivity": {"name": "a", "queue": "mon-act", "retryPolicy": {"maxAttempts": 1}}}]');
SELECT dex.fail_task((:'r'::uuid[])[2], 0, (:'v'::bigint[])[2], '{"message": "no such workflow"}');
SELECT completed FROM dex.complete_tasks(ARRAY[(:'r'::uuid[])[1]], '{0}', ARRAY[(:'v'::bigint[])[1]],
                                         ARRAY['[]']::jsonb[]);
SELECT * FROM pg_temp.queue_deltas();
SELECT s.leases_lost - d.leases_lost AS leases_lost FROM dex.stat_database s, d0 d;

-- the activity: leased, then failed for good (one attempt)
SELECT run_id AS ar, task_id AS at, lock_version AS av FROM dex.poll_tasks('mon-act', 'w') \gset
SELECT queue, ready, leased FROM dex.queue_depth WHERE queue = 'mon-act';
SELECT dex.fail_task(:'ar', :'at', :'av', '{"message": "boom"}');
SELECT * FROM pg_temp.queue_deltas();

-- a rolled-back call still counts (as pg_stat_statements' calls do)
BEGIN;
SELECT count(*) FROM dex.create_runs('mon', 'mon-wf', ARRAY['4']::jsonb[]);
ROLLBACK;
SELECT queue, created FROM pg_temp.queue_deltas() WHERE queue = 'mon-wf';

-- runs by workflow and status: dex.workflow_run is small here, so exact
SELECT workflow_name, status, runs, estimated FROM dex.runs_by_status
 WHERE workflow_name = 'mon' ORDER BY status;

-- the scheduler counts its passes: wake it and wait for one
CREATE FUNCTION pg_temp.wait_for_pass(timeout_s float8 DEFAULT 10)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + make_interval(secs => timeout_s);
    before bigint := (SELECT scheduler_passes FROM dex.stat_database);
BEGIN
    LOOP
        IF (SELECT scheduler_passes FROM dex.stat_database) > before THEN
            RETURN true;
        END IF;
        IF clock_timestamp() > deadline THEN
            RETURN false;
        END IF;
        PERFORM dex.wake_scheduler();   -- wakes it when this statement's transaction commits
        PERFORM pg_sleep(0.05);
    END LOOP;
END $$;
SELECT pg_temp.wait_for_pass() AS scheduler_passed;
SELECT scheduler_time > 0 AND scheduler_max_time > 0 AND scheduler_max_time <= scheduler_time
       AS times_kept
  FROM dex.stat_database;

-- the raw function: one row per queue counted in this database, and this database's own
SELECT count(*) FILTER (WHERE queue_id = 0) AS own_rows,
       count(*) FILTER (WHERE queue_id IN (SELECT id FROM dex.queue WHERE name LIKE 'mon-%')) AS mon_rows
  FROM dex.stat_counters()
 WHERE datid = (SELECT oid FROM pg_database WHERE datname = current_database());

-- the latency histograms (1.6): a task_wait observation per task handed out
-- (two workflow tasks, one activity); the activity failed, so it has no
-- activity_execution, and no run ended, so no run_duration
SELECT histogram, queue, workflow, count, sum >= 0 AS sum_known,
       cardinality(le) = cardinality(bucket) AS one_count_per_bound,
       bucket[cardinality(bucket)] <= count AS last_bound_within_count
  FROM dex.stat_latency WHERE queue LIKE 'mon-%' OR workflow = 'mon' ORDER BY 1, 2;
-- the bounds in seconds, increasing; the cumulative counts never decrease
SELECT le FROM dex.stat_latency WHERE queue = 'mon-wf';
SELECT bool_and(b.n >= b.before) AS cumulative
  FROM dex.stat_latency h,
       LATERAL (SELECT n, coalesce(lag(n) OVER (ORDER BY i), 0) AS before
                  FROM unnest(h.bucket) WITH ORDINALITY u(n, i)) b
 WHERE h.queue LIKE 'mon-%';
-- run_duration: a run of its own ends
SELECT dex.create_run('mon-end', 'mon-wf') AS er \gset
SELECT dex.terminate_run(:'er');
SELECT histogram, workflow, count, queue IS NULL AS no_queue FROM dex.stat_latency WHERE workflow = 'mon-end';

-- a reset zeroes this database's counters and records when
SELECT dex.reset_stats();
SELECT histogram, queue, workflow, count, sum, bucket[cardinality(bucket)] AS last_bucket
  FROM dex.stat_latency WHERE queue LIKE 'mon-%' OR workflow = 'mon-end' ORDER BY 1, 2, 3;
SELECT queue, tasks_created, polls, polls_empty, tasks_leased, tasks_completed, tasks_failed,
       completions_superseded, retries_due, leases_expired,
       stats_reset BETWEEN now() - interval '1 minute' AND clock_timestamp() AS reset_now
  FROM dex.stat_queues WHERE queue LIKE 'mon-%' ORDER BY queue DESC;
SELECT leases_lost, stats_reset IS NOT NULL AS reset_recorded FROM dex.stat_database;

-- counting goes on after a reset
SELECT count(*) AS got FROM dex.poll_tasks('mon-act', 'w');
SELECT queue, polls, polls_empty FROM dex.stat_queues WHERE queue = 'mon-act';

-- who may read and reset: the views are for pg_monitor (which may read the columns of the
-- task tables that dex.queue_depth() counts, no payload), the reset is not for PUBLIC
SELECT has_function_privilege('public', 'dex.reset_stats()', 'EXECUTE') AS public_can_reset,
       has_schema_privilege('pg_monitor', 'dex', 'USAGE') AS monitor_uses_schema,
       bool_and(has_table_privilege('pg_monitor', v, 'SELECT')) AS monitor_reads_views,
       bool_or(has_table_privilege('pg_monitor', 'dex.workflow_run', 'SELECT')) AS monitor_reads_runs,
       bool_or(has_column_privilege('pg_monitor', 'dex.activity_task', 'argument', 'SELECT'))
         AS monitor_reads_payloads
  FROM unnest(ARRAY['dex.stat_queues', 'dex.stat_database', 'dex.queue_depth', 'dex.runs_by_status',
                    'dex.stat_latency']) v;
CREATE ROLE regress_dex_monitor IN ROLE pg_monitor;
SET ROLE regress_dex_monitor;
SELECT count(*) > 0 AS reads_stat_queues FROM dex.stat_queues;
SELECT count(*) = 1 AS reads_stat_database FROM dex.stat_database;
SELECT count(*) > 0 AS reads_queue_depth FROM dex.queue_depth;
SELECT count(*) > 0 AS reads_runs_by_status FROM dex.runs_by_status;
SELECT count(*) >= 0 AS reads_stat_latency FROM dex.stat_latency;
SELECT dex.reset_stats();
RESET ROLE;
DROP ROLE regress_dex_monitor;
