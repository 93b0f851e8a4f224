/*
 * dex 1.0 -> 1.1: ALTER EXTENSION dex UPDATE TO '1.1'.
 *
 * What 1.1 adds: queue capacity enforced (the most tasks leased at once) and
 * dex.alter_queue; monitoring views and counters; the roles dex_client,
 * dex_worker and dex_admin, with the API running as the extension's owner;
 * queue grants (which roles may use which queue).
 * The library of 1.1 works with a 1.0 schema until the update: runs that
 * exist go on as they were.  test/t/009_upgrade.pl checks that an updated
 * database has exactly the objects of a fresh 1.1 install.
 */
\echo Use "ALTER EXTENSION dex UPDATE TO '1.1'" to load this file. \quit

/*
 * Queues: 1.0 stored a capacity (default 1000) but did not enforce it; 1.1
 * enforces it, so existing queues keep what they had: no limit.
 */
ALTER TABLE dex.queue ALTER COLUMN capacity DROP NOT NULL, ALTER COLUMN capacity DROP DEFAULT;
UPDATE dex.queue SET capacity = NULL;

/* A null run id is an error (22004), as for every other function taking one. */
CREATE OR REPLACE FUNCTION dex.get_run(run_id uuid)
RETURNS dex.runs
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    run dex.runs;
BEGIN
    IF get_run.run_id IS NULL THEN
        RAISE EXCEPTION 'run id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO run FROM dex.runs r WHERE r.id OPERATOR(pg_catalog.=) get_run.run_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow run % does not exist', get_run.run_id
            USING ERRCODE = 'undefined_object';
    END IF;
    RETURN run;
END
$$;
COMMENT ON FUNCTION dex.get_run(uuid) IS
    'A workflow run with its status, argument, result and failure; an error if it does not exist or its queue is not one the caller may use.';
ALTER FUNCTION dex.run_history(uuid) CALLED ON NULL INPUT;

CREATE OR REPLACE FUNCTION dex.create_queue(name text, kind text, capacity integer DEFAULT NULL)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_create_queue';
COMMENT ON FUNCTION dex.create_queue(text, text, integer) IS
    'Create a task queue of kind ''workflow'' or ''activity'' with its task partition; capacity, if given, is the most tasks leased at once.';

CREATE FUNCTION dex.alter_queue(name text, capacity integer DEFAULT NULL, paused boolean DEFAULT NULL)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_alter_queue';
COMMENT ON FUNCTION dex.alter_queue(text, integer, boolean) IS
    'Change a queue at run time: its capacity (most tasks leased at once; 0 removes the limit) and whether it is paused (polls hand out nothing); NULL leaves a setting as it is.';

/*
 * Monitoring.  Everything here is cheap to read every few seconds whatever
 * the backlog: counters from shared memory (stats.c), counts capped at
 * 10,000 rows per queue and figure, index probes, and the planner's
 * statistics for runs.  The views are for pg_monitor (and superusers);
 * dex.reset_stats is for superusers, who may grant it.
 */

CREATE FUNCTION dex.stat_counters(
    OUT datid oid, OUT queue_id integer,
    OUT tasks_created bigint, OUT polls bigint, OUT polls_empty bigint, OUT tasks_leased bigint,
    OUT tasks_completed bigint, OUT tasks_failed bigint, OUT completions_superseded bigint,
    OUT retries_due bigint, OUT leases_expired bigint, OUT leases_lost bigint,
    OUT runs_woken bigint, OUT scheduler_passes bigint, OUT scheduler_errors bigint,
    OUT scheduler_time double precision, OUT scheduler_max_time double precision,
    OUT stats_reset timestamptz)
RETURNS SETOF record
LANGUAGE C
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'dex_stat_counters';
COMMENT ON FUNCTION dex.stat_counters() IS
    'The activity counters in shared memory, one row per (database, queue) counted since the server started or dex.reset_stats; queue_id 0 holds a database''s own counters, null datid and queue_id the overflow entry. Calls count even if their transaction rolls back. Empty if dex is not preloaded.';

CREATE FUNCTION dex.reset_stats()
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'dex_reset_stats';
COMMENT ON FUNCTION dex.reset_stats() IS
    'Zero the activity counters of the current database (dex.stat_queues, dex.stat_database) and of the overflow entry. Superusers only, unless granted.';
REVOKE EXECUTE ON FUNCTION dex.reset_stats() FROM PUBLIC;

CREATE VIEW dex.stat_queues AS
SELECT q.name AS queue,
       q.kind,
       coalesce(s.tasks_created, 0) AS tasks_created,
       coalesce(s.polls, 0) AS polls,
       coalesce(s.polls_empty, 0) AS polls_empty,
       coalesce(s.tasks_leased, 0) AS tasks_leased,
       coalesce(s.tasks_completed, 0) AS tasks_completed,
       coalesce(s.tasks_failed, 0) AS tasks_failed,
       coalesce(s.completions_superseded, 0) AS completions_superseded,
       coalesce(s.retries_due, 0) AS retries_due,
       coalesce(s.leases_expired, 0) AS leases_expired,
       s.stats_reset
  FROM dex.queue q
  LEFT JOIN dex.stat_counters() s
    ON s.datid OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                        WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
   AND s.queue_id OPERATOR(pg_catalog.=) q.id;
COMMENT ON VIEW dex.stat_queues IS
    'Activity counters of each queue since the server started or dex.reset_stats: tasks created, polls (empty ones too), tasks leased, completed and failed, workflow completions superseded, activity retries that fell due and activity leases that expired. From shared memory: free to read.';

CREATE VIEW dex.stat_database AS
SELECT pg_catalog.current_database() AS database,
       coalesce(s.leases_lost, 0) AS leases_lost,
       coalesce(s.runs_woken, 0) AS runs_woken,
       coalesce(s.scheduler_passes, 0) AS scheduler_passes,
       coalesce(s.scheduler_errors, 0) AS scheduler_errors,
       coalesce(s.scheduler_time, 0) AS scheduler_time,
       coalesce(s.scheduler_max_time, 0) AS scheduler_max_time,
       s.stats_reset
  FROM (SELECT) AS one
  LEFT JOIN dex.stat_counters() s
    ON s.datid OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                        WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
   AND s.queue_id OPERATOR(pg_catalog.=) 0;
COMMENT ON VIEW dex.stat_database IS
    'Activity counters of this database that belong to no queue, since the server started or dex.reset_stats: completions and failures refused for a lost lease, runs the scheduler woke for due timers and delayed events, and its passes (errors, total and longest time in ms). From shared memory: free to read.';

-- What the queues hold now: a function behind a view of the same name.  As
-- a plain view over the task tables, its plan costs enough (it grows with the
-- number of queues) for JIT to compile hundreds of expressions per scrape:
-- seconds, for what runs in milliseconds; a function can turn JIT off.  It
-- runs with the caller's rights: pg_monitor may read the columns it needs,
-- none that holds a payload.

CREATE FUNCTION dex.queue_depth(
    OUT queue text, OUT kind text, OUT status text, OUT capacity integer,
    OUT ready bigint, OUT leased bigint, OUT delayed bigint,
    OUT oldest_ready_at timestamptz, OUT backlog_age interval, OUT estimated boolean)
RETURNS SETOF record
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_hashjoin = off
SET enable_mergejoin = off SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    cap constant integer := 10000;     -- each count stops there
    q record;
    p integer;
    oldest timestamptz;
    tuples float8;
BEGIN
    FOR q IN SELECT x.id, x.name, x.kind, x.status, x.capacity, x.partition
               FROM dex.queue x ORDER BY x.name LOOP
        queue := q.name;
        kind := q.kind;
        status := q.status;
        capacity := q.capacity;
        oldest_ready_at := NULL;
        -- capped counts on the partition's indexes; the oldest ready task by one
        -- probe of the poll index per priority in use (highest first)
        IF q.kind = 'workflow' THEN
            SELECT count(*) INTO ready FROM (
                SELECT FROM dex.workflow_task t WHERE t.queue_id = q.id
                   AND (t.locked_until IS NULL OR t.locked_until <= now()) LIMIT cap) c;
            SELECT count(*) INTO leased FROM (
                SELECT FROM dex.workflow_task t WHERE t.queue_id = q.id
                   AND t.locked_by IS NOT NULL AND t.locked_until > now() LIMIT cap) c;
            delayed := 0;
            SELECT t.priority INTO p FROM dex.workflow_task t
             WHERE t.queue_id = q.id AND (t.locked_until IS NULL OR t.locked_until <= now())
             ORDER BY t.priority DESC LIMIT 1;
            WHILE p IS NOT NULL LOOP
                SELECT t.created_at INTO oldest FROM dex.workflow_task t
                 WHERE t.queue_id = q.id AND t.priority = p
                   AND (t.locked_until IS NULL OR t.locked_until <= now())
                 ORDER BY t.created_at LIMIT 1;
                oldest_ready_at := least(oldest_ready_at, oldest);
                SELECT t.priority INTO p FROM dex.workflow_task t
                 WHERE t.queue_id = q.id AND t.priority < p
                   AND (t.locked_until IS NULL OR t.locked_until <= now())
                 ORDER BY t.priority DESC LIMIT 1;
            END LOOP;
        ELSE
            SELECT count(*) INTO ready FROM (
                SELECT FROM dex.activity_task t WHERE t.queue_id = q.id
                   AND t.status = 'QUEUED' AND t.locked_by IS NULL LIMIT cap) c;
            SELECT count(*) INTO leased FROM (
                SELECT FROM dex.activity_task t WHERE t.queue_id = q.id
                   AND t.locked_by IS NOT NULL AND t.locked_until > now() LIMIT cap) c;
            SELECT count(*) INTO delayed FROM (
                SELECT FROM dex.activity_task t WHERE t.queue_id = q.id
                   AND t.status = 'CREATED' LIMIT cap) c;
            SELECT t.priority INTO p FROM dex.activity_task t
             WHERE t.queue_id = q.id AND t.status = 'QUEUED' AND t.locked_by IS NULL
             ORDER BY t.priority DESC LIMIT 1;
            WHILE p IS NOT NULL LOOP
                SELECT t.created_at INTO oldest FROM dex.activity_task t
                 WHERE t.queue_id = q.id AND t.priority = p
                   AND t.status = 'QUEUED' AND t.locked_by IS NULL
                 ORDER BY t.created_at LIMIT 1;
                oldest_ready_at := least(oldest_ready_at, oldest);
                SELECT t.priority INTO p FROM dex.activity_task t
                 WHERE t.queue_id = q.id AND t.priority < p
                   AND t.status = 'QUEUED' AND t.locked_by IS NULL
                 ORDER BY t.priority DESC LIMIT 1;
            END LOOP;
        END IF;
        estimated := ready >= cap OR leased >= cap OR delayed >= cap;
        IF ready >= cap THEN
            -- the planner's estimate of the partition's rows (density times
            -- current size), less the other counts
            SELECT CASE WHEN c.relpages > 0
                        THEN c.reltuples / c.relpages
                             * (pg_relation_size(c.oid) / current_setting('block_size')::integer)
                        ELSE greatest(c.reltuples, 0) END
              INTO tuples
              FROM pg_class c
             WHERE c.oid = to_regclass(quote_ident('dex') || '.' || quote_ident(q.partition));
            ready := greatest(ready, (tuples - leased - delayed)::bigint);
        END IF;
        backlog_age := now() - oldest_ready_at;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION dex.queue_depth() IS
    'What each queue holds now (the view dex.queue_depth): tasks ready to lease, leased, and (activity queues) waiting out a retry backoff; the oldest ready task and its age. Counts are exact up to 10,000 per figure; past that ready is estimated from the partition''s size and statistics (estimated = true). Never counts a whole table.';

CREATE VIEW dex.queue_depth AS SELECT * FROM dex.queue_depth();
COMMENT ON VIEW dex.queue_depth IS
    'What each queue holds now: tasks ready to lease, leased, and (activity queues) waiting out a retry backoff; the oldest ready task and its age. Counts are exact up to 10,000 per figure; past that ready is estimated from the partition''s size and statistics (estimated = true). No count(*) over whole tables: a few milliseconds per queue at any backlog.';

-- Runs by workflow and status.  Counting a large dex.workflow_run would read
-- all of it (it has no index on status, so that runs advance with HOT
-- updates), so past 1,024 pages (8 MB) the counts come from the planner's
-- statistics: the most common (workflow_name, status) pairs that ANALYZE
-- (autovacuum) sampled, scaled to the table's current size.
CREATE STATISTICS dex.workflow_run_name_status (mcv) ON workflow_name, status FROM dex.workflow_run;

-- A view, which reads the statistics with its owner's rights; its plan stays
-- cheap (no JIT) at any table size: the exact branch, never run on a large
-- table, is planned as reading at most the rows 1,024 pages can hold.
CREATE VIEW dex.runs_by_status AS
WITH size AS MATERIALIZED (
    SELECT pg_catalog.pg_relation_size(c.oid) OPERATOR(pg_catalog./)
               pg_catalog.current_setting('block_size')::integer AS pages,
           -- rows per page as of the last ANALYZE, times today's pages
           CASE WHEN c.relpages OPERATOR(pg_catalog.>) 0
                THEN c.reltuples OPERATOR(pg_catalog./) c.relpages
                     OPERATOR(pg_catalog.*) (pg_catalog.pg_relation_size(c.oid)
                                             OPERATOR(pg_catalog./)
                                             pg_catalog.current_setting('block_size')::integer)
           END AS tuples
      FROM pg_catalog.pg_class c
     WHERE c.oid OPERATOR(pg_catalog.=) 'dex.workflow_run'::pg_catalog.regclass
), mcv AS MATERIALIZED (
    SELECT i."values"[1] AS workflow_name, i."values"[2] AS status, i.frequency
      FROM pg_catalog.pg_statistic_ext s
      JOIN pg_catalog.pg_statistic_ext_data d ON d.stxoid OPERATOR(pg_catalog.=) s.oid
                                              AND NOT d.stxdinherit
     CROSS JOIN LATERAL pg_catalog.pg_mcv_list_items(d.stxdmcv) i
     WHERE s.stxname OPERATOR(pg_catalog.=) 'workflow_run_name_status'
       AND s.stxnamespace OPERATOR(pg_catalog.=) 'dex'::pg_catalog.regnamespace
       AND (SELECT pages FROM size) OPERATOR(pg_catalog.>) 1024
)
SELECT r.workflow_name, r.status, pg_catalog.count(*) AS runs, false AS estimated
  FROM (SELECT x.workflow_name, x.status FROM dex.workflow_run x
         WHERE (SELECT pages FROM size) OPERATOR(pg_catalog.<=) 1024
         LIMIT 1024 * 291) r    -- MaxHeapTuplesPerPage: never cuts, bounds the plan's cost
 GROUP BY r.workflow_name, r.status
UNION ALL
SELECT m.workflow_name, m.status,
       pg_catalog.round(m.frequency OPERATOR(pg_catalog.*) (SELECT tuples FROM size))::bigint, true
  FROM mcv m
UNION ALL
-- the pairs too rare to be among the most common, as one row
SELECT NULL, NULL,
       pg_catalog.round((1 OPERATOR(pg_catalog.-) pg_catalog.sum(m.frequency))
                        OPERATOR(pg_catalog.*) (SELECT tuples FROM size))::bigint, true
  FROM mcv m
HAVING pg_catalog.round((1 OPERATOR(pg_catalog.-) pg_catalog.sum(m.frequency))
                        OPERATOR(pg_catalog.*) (SELECT tuples FROM size)) OPERATOR(pg_catalog.>) 0;
COMMENT ON VIEW dex.runs_by_status IS
    'Runs by workflow and status. Exact while dex.workflow_run is at most 8 MB; past that estimated (estimated = true) from the statistics ANALYZE keeps on (workflow_name, status), scaled to the table''s current size, with the pairs too rare to be sampled in one row of null workflow_name and status (nothing before the first ANALYZE). Never counts a large table: about a millisecond at any size.';

GRANT USAGE ON SCHEMA dex TO pg_monitor;
GRANT SELECT ON dex.stat_queues, dex.stat_database, dex.queue_depth, dex.runs_by_status TO pg_monitor;
-- what dex.queue_depth() reads: no payload, no run id
GRANT SELECT (id, name, kind, status, capacity, partition) ON dex.queue TO pg_monitor;
GRANT SELECT (queue_id, priority, created_at, locked_by, locked_until) ON dex.workflow_task TO pg_monitor;
GRANT SELECT (queue_id, priority, status, created_at, locked_by, locked_until)
    ON dex.activity_task TO pg_monitor;

-- a new install (after DROP EXTENSION, queue ids start again) starts from zero
SELECT dex.reset_stats();

/*
 * Queue grants: which roles may use which queue (src/privileges.c).  The
 * queues that exist are granted to dex_client and dex_worker below, once the
 * roles exist: every role of dex may use them, as before.
 */
-- Queue grants: the roles that may use each queue (besides superusers and
-- dex_admin; see src/privileges.c).  dex.create_queue grants a new queue to
-- dex_client and dex_worker.  A grantee is a role's oid: roles belong to the
-- cluster, and the maintenance worker removes the rows of dropped ones.
CREATE TABLE dex.queue_grant (
    queue_id    integer NOT NULL REFERENCES dex.queue (id),
    grantee     oid NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (queue_id, grantee)
);
COMMENT ON TABLE dex.queue_grant IS
    'The roles that may use each queue: start, read and steer its runs, lease and report on its tasks (dex.grant_queue, dex.revoke_queue).';
REVOKE ALL ON dex.queue_grant FROM PUBLIC;

CREATE FUNCTION dex.grant_queue(queue text, role regrole)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_grant_queue';
COMMENT ON FUNCTION dex.grant_queue(text, regrole) IS
    'Let a role (and the roles that have its privileges) use a queue: start, read and steer its runs, lease its tasks and report on them, and target it from a workflow.';

CREATE FUNCTION dex.revoke_queue(queue text, role regrole)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_revoke_queue';
COMMENT ON FUNCTION dex.revoke_queue(text, regrole) IS
    'Take back dex.grant_queue. New queues are granted to dex_client and dex_worker: revoke those to keep a queue to the roles granted it by name.';

CREATE FUNCTION dex.usable_queue_ids()
RETURNS integer[]
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_usable_queue_ids';
COMMENT ON FUNCTION dex.usable_queue_ids() IS
    'The ids of the queues the calling role may use: every queue for superusers and dex_admin, else those granted to a role whose privileges it has.';

CREATE VIEW dex.queue_privileges AS
SELECT q.name AS queue,
       q.kind,
       g.grantee::pg_catalog.regrole AS role,
       g.granted_at
  FROM dex.queue_grant g
  JOIN dex.queue q ON q.id OPERATOR(pg_catalog.=) g.queue_id;
COMMENT ON VIEW dex.queue_privileges IS
    'Which role may use which queue (dex.grant_queue); superusers and dex_admin may use every queue.';

CREATE VIEW dex.all_runs AS
SELECT r.id,
       r.workflow_name,
       r.workflow_version,
       q.name AS queue,
       r.status,
       r.instance_id,
       r.priority,
       r.labels,
       r.concurrency_key,
       r.custom_status,
       r.parent_id,
       dex.payload_value(r.argument) AS argument,
       dex.payload_value(r.result) AS result,
       dex.to_json('dex.v1.Failure', r.failure) AS failure,
       r.history_length,
       r.created_at,
       r.updated_at,
       r.started_at,
       r.completed_at,
       r.task_failures,
       dex.to_json('dex.v1.Failure', r.last_task_failure) AS last_task_failure,
       r.queue_id
  FROM dex.workflow_run r
  LEFT JOIN dex.queue q ON q.id OPERATOR(pg_catalog.=) r.queue_id;
COMMENT ON VIEW dex.all_runs IS
    'Every workflow run as dex.runs shows it, with its queue id last: read by dex.list_runs, which filters by queue itself; closed to all roles.';

-- A security barrier: a reader's own functions in a WHERE clause see only
-- the rows of the queues the reader may use.
CREATE OR REPLACE VIEW dex.runs WITH (security_barrier) AS
SELECT id, workflow_name, workflow_version, queue, status, instance_id, priority, labels,
       concurrency_key, custom_status, parent_id, argument, result, failure, history_length,
       created_at, updated_at, started_at, completed_at, task_failures, last_task_failure
  FROM dex.all_runs
 WHERE queue_id OPERATOR(pg_catalog.=) ANY ((SELECT dex.usable_queue_ids())::integer[]);
COMMENT ON VIEW dex.runs IS
    'Workflow runs with JSON argument, result and failure: those of the queues the reader may use.';

CREATE OR REPLACE FUNCTION dex.list_runs(
    workflow_name text DEFAULT NULL,
    status text DEFAULT NULL,
    labels jsonb DEFAULT NULL,
    created_after timestamptz DEFAULT NULL,
    created_before timestamptz DEFAULT NULL,
    completed_after timestamptz DEFAULT NULL,
    completed_before timestamptz DEFAULT NULL,
    parent_id uuid DEFAULT NULL,
    before_id uuid DEFAULT NULL,
    page_size integer DEFAULT 100)
RETURNS SETOF dex.runs
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'dex_list_runs';
COMMENT ON FUNCTION dex.list_runs(text, text, jsonb, timestamptz, timestamptz, timestamptz, timestamptz, uuid, uuid, integer) IS
    'Runs matching the filters, of the queues the caller may use, newest first, a page at a time: pass the last id of a page as before_id to get the next.';

/*
 * Roles and privileges.
 *
 * Three roles, created if they do not exist (roles belong to the cluster, so
 * they outlive the extension and are shared by the databases that have it):
 *   dex_client  starts runs, sends them events, cancels, suspends and resumes
 *               them, and reads them;
 *   dex_worker  leases tasks and reports on them (poll, complete, fail,
 *               heartbeat, wait);
 *   dex_admin   both, and manages queues, their grants and statistics.
 * Nobody else may call dex's functions, and the tables stay closed to all.
 * Queue grants (dex.grant_queue) say which queues a role may use; every new
 * queue is granted to dex_client and dex_worker.  The API functions that
 * check them are SECURITY INVOKER and take the rights of their owner by
 * themselves, keeping the caller for the checks (src/privileges.c); the
 * administrators' functions are SECURITY DEFINER.  Every function pins its
 * search_path.  A worker completes only the tasks whose lease it holds (the
 * lock version), of queues it may use.
 */
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) 'dex_client') THEN
        CREATE ROLE dex_client NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) 'dex_worker') THEN
        CREATE ROLE dex_worker NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) 'dex_admin') THEN
        CREATE ROLE dex_admin NOLOGIN;
    END IF;
    IF NOT pg_catalog.pg_has_role('dex_admin', 'dex_client', 'MEMBER') THEN
        GRANT dex_client TO dex_admin;
    END IF;
    IF NOT pg_catalog.pg_has_role('dex_admin', 'dex_worker', 'MEMBER') THEN
        GRANT dex_worker TO dex_admin;
    END IF;
END
$roles$;

REVOKE ALL ON ALL ROUTINES IN SCHEMA dex FROM PUBLIC;
GRANT USAGE ON SCHEMA dex TO dex_client, dex_worker, dex_admin;

-- the administrators' functions run with the owner's rights
ALTER FUNCTION dex.create_queue(text, text, integer) SECURITY DEFINER;
ALTER FUNCTION dex.alter_queue(text, integer, boolean) SECURITY DEFINER;
ALTER FUNCTION dex.grant_queue(text, regrole) SECURITY DEFINER;
ALTER FUNCTION dex.revoke_queue(text, regrole) SECURITY DEFINER;
ALTER FUNCTION dex.reset_stats() SECURITY DEFINER;

GRANT EXECUTE ON FUNCTION
    dex.to_json(text, bytea), dex.from_json(text, jsonb), dex.payload_value(bytea),
    dex.wake_scheduler(), dex.usable_queue_ids()
    TO dex_client, dex_worker, dex_admin;
GRANT EXECUTE ON FUNCTION
    dex.create_run(text, text, jsonb, integer, text, integer, jsonb, text, text),
    dex.create_runs(text, text, jsonb[], integer, integer, jsonb),
    dex.get_run(uuid),
    dex.list_runs(text, text, jsonb, timestamptz, timestamptz, timestamptz, timestamptz, uuid, uuid, integer),
    dex.run_history(uuid),
    dex.send_external_event(uuid, text, jsonb),
    dex.send_external_event_to_instance(text, text, jsonb),
    dex.cancel_run(uuid, text), dex.suspend_run(uuid), dex.resume_run(uuid)
    TO dex_client;
GRANT SELECT ON dex.runs TO dex_client;
GRANT EXECUTE ON FUNCTION
    dex.poll_tasks(text, text, integer, interval), dex.poll_tasks_pb(text, text, integer, interval),
    dex.complete_task(uuid, integer, bigint, jsonb), dex.complete_task_pb(uuid, integer, bigint, bytea),
    dex.complete_tasks(uuid[], integer[], bigint[], jsonb[]),
    dex.complete_tasks_pb(uuid[], integer[], bigint[], bytea[]),
    dex.fail_task(uuid, integer, bigint, jsonb), dex.fail_task_pb(uuid, integer, bigint, bytea),
    dex.fail_tasks(uuid[], integer[], bigint[], jsonb[]), dex.fail_tasks_pb(uuid[], integer[], bigint[], bytea[]),
    dex.heartbeat_task(uuid, integer, bigint, interval, jsonb),
    dex.heartbeat_tasks(uuid[], integer[], bigint[], interval)
    TO dex_worker;
GRANT EXECUTE ON PROCEDURE dex.wait_for_tasks(text, interval, boolean) TO dex_worker;
GRANT EXECUTE ON FUNCTION
    dex.create_queue(text, text, integer), dex.alter_queue(text, integer, boolean),
    dex.grant_queue(text, regrole), dex.revoke_queue(text, regrole),
    dex.reset_stats(), dex.stat_counters(), dex.queue_depth()
    TO dex_admin;
GRANT SELECT ON dex.stat_queues, dex.stat_database, dex.queue_depth, dex.runs_by_status,
    dex.queue_privileges TO dex_admin;
-- the monitoring views run their functions with the reader's rights
GRANT EXECUTE ON FUNCTION dex.stat_counters(), dex.queue_depth() TO pg_monitor;
GRANT SELECT (id, name, kind, status, capacity, partition) ON dex.queue TO dex_admin;
GRANT SELECT (queue_id, priority, created_at, locked_by, locked_until) ON dex.workflow_task TO dex_admin;
GRANT SELECT (queue_id, priority, status, created_at, locked_by, locked_until)
    ON dex.activity_task TO dex_admin;

-- the queues of 1.0 stay open to every role of dex
INSERT INTO dex.queue_grant (queue_id, grantee)
SELECT q.id, r.oid
  FROM dex.queue q CROSS JOIN pg_catalog.pg_roles r
 WHERE r.rolname OPERATOR(pg_catalog.=) ANY ('{dex_client,dex_worker}'::text[]);
