/*
 * dex 1.7 -> 1.8: ALTER EXTENSION dex UPDATE TO '1.8'.
 *
 * A fresh install of 1.8 is dex--1.7.sql followed by this script (CREATE
 * EXTENSION runs the chain): there is no dex--1.8.sql to keep in step.
 * test/t/009_upgrade.pl checks that every released version updated to 1.8
 * has exactly the objects of a fresh install.
 */
\echo Use "ALTER EXTENSION dex UPDATE TO '1.8'" to load this file. \quit

/* ---- The task tables: one table each, whatever the number of queues (1.8) ---- */

/*
 * Until 1.7 each queue had a LIST partition of its kind's task table.  A
 * statement planned once for all queues (every statement of dex is) then
 * locked every partition and every index of every partition each time it
 * ran, so a workflow cost more with every queue the database had (4x the
 * server CPU at 400 queues), and sessions ran the shared lock table out of
 * space ("53200 out of shared memory" at a few hundred queues with
 * max_locks_per_transaction at its default).  From 1.8 each kind of task
 * has one UNLOGGED table; every index that a statement of one queue reads
 * leads with queue_id, so a statement reads its own queue's rows and locks
 * the same relations at any number of queues.
 *
 * The tasks in flight are copied, leases and lock versions included: a
 * worker that leased a task before the update completes it after.
 */
CREATE UNLOGGED TABLE dex.workflow_task_1_8 (
    queue_id        integer NOT NULL,
    run_id          uuid NOT NULL,
    priority        smallint NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    locked_by       text,
    locked_until    timestamptz,
    lock_version    bigint NOT NULL DEFAULT 0,
    started_at      timestamptz,
    inbox_ids       bigint[],
    workflow_name   text NOT NULL,      -- the run's, for polls that declare what they run
    workflow_version integer NOT NULL
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.02);
INSERT INTO dex.workflow_task_1_8 SELECT * FROM dex.workflow_task;

CREATE UNLOGGED TABLE dex.activity_task_1_8 (
    queue_id        integer NOT NULL,
    run_id          uuid NOT NULL,
    event_id        integer NOT NULL,   -- id of the ActivityTaskCreated event
    name            text NOT NULL,
    priority        smallint NOT NULL DEFAULT 0,
    status          text NOT NULL CHECK (status IN ('CREATED', 'QUEUED')),
    attempt         integer NOT NULL DEFAULT 1,
    visible_from    timestamptz NOT NULL,
    argument        bytea,              -- dex.v1.Payload
    retry_policy    bytea NOT NULL,     -- dex.v1.RetryPolicy, defaults applied
    locked_by       text,
    locked_until    timestamptz,
    lock_version    bigint NOT NULL DEFAULT 0,
    last_failure    bytea,              -- dex.v1.Failure of the previous attempt
    heartbeat_details bytea,            -- dex.v1.Payload of the last heartbeat, kept for the next attempt
    start_to_close_ms bigint,           -- timeouts of the ScheduleActivity command
    heartbeat_timeout_ms bigint,
    schedule_deadline timestamptz,      -- scheduled at + schedule-to-close timeout
    attempt_started_at timestamptz,
    created_at      timestamptz NOT NULL
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.02);
INSERT INTO dex.activity_task_1_8 SELECT * FROM dex.activity_task;

-- the partitioned tables go with every queue's partition
DROP TABLE dex.workflow_task, dex.activity_task;
ALTER TABLE dex.workflow_task_1_8 RENAME TO workflow_task;
ALTER TABLE dex.activity_task_1_8 RENAME TO activity_task;
ALTER TABLE dex.activity_task RENAME CONSTRAINT activity_task_1_8_status_check TO activity_task_status_check;

-- The primary keys lead with the run, as before: fences, heartbeats and the
-- end of a run find a run's tasks by it, with or without their queue.
ALTER TABLE dex.workflow_task ADD PRIMARY KEY (run_id, queue_id);
COMMENT ON TABLE dex.workflow_task IS
    'Pending and leased workflow tasks of every workflow queue, one per run with visible unseen events; UNLOGGED: rebuilt from runs and inbox after a crash.';
CREATE INDEX workflow_task_poll_idx ON dex.workflow_task (queue_id, priority DESC, created_at);
CREATE INDEX workflow_task_lease_idx ON dex.workflow_task (locked_until) WHERE locked_by IS NOT NULL;
-- Polls that declare the (workflow, version) pairs they run read one range
-- of this index per pair.  Its order is on (- priority), an expression the
-- poll index does not have, so that the planner cannot take that index
-- instead for a declared poll (filtering the whole queue) however the
-- statistics make the two look.
CREATE INDEX workflow_task_version_idx
    ON dex.workflow_task (queue_id, workflow_name, workflow_version, (- priority), created_at);

ALTER TABLE dex.activity_task ADD PRIMARY KEY (run_id, event_id, queue_id);
COMMENT ON TABLE dex.activity_task IS
    'Activity tasks of every activity queue: CREATED until due (retry backoff), then QUEUED for workers; leased while running. UNLOGGED: rebuilt from history, inbox and dex.activity_retry after a crash.';
CREATE INDEX activity_task_poll_idx ON dex.activity_task (queue_id, priority DESC, created_at)
    WHERE status = 'QUEUED' AND locked_by IS NULL;
CREATE INDEX activity_task_due_idx ON dex.activity_task (visible_from)
    WHERE status = 'CREATED';
CREATE INDEX activity_task_lease_idx ON dex.activity_task (locked_until)
    WHERE locked_by IS NOT NULL;
-- Polls that declare the activities they run read one range of this index per
-- name (on (- priority), as workflow_task_version_idx).
CREATE INDEX activity_task_name_idx ON dex.activity_task (queue_id, name, (- priority), created_at)
    WHERE status = 'QUEUED' AND locked_by IS NULL;

-- what dex.queue_depth() and dex.unserved() read: no payload, no run id
GRANT SELECT (queue_id, priority, created_at, locked_by, locked_until, workflow_name, workflow_version)
    ON dex.workflow_task TO pg_monitor, dex_admin;
GRANT SELECT (queue_id, priority, status, created_at, locked_by, locked_until, name)
    ON dex.activity_task TO pg_monitor, dex_admin;

/* ---- Queues: no partition of their own ---- */

ALTER TABLE dex.queue DROP COLUMN partition;
COMMENT ON TABLE dex.queue IS
    'Task queues: workflow queues hold workflow tasks (dex.workflow_task), activity queues activity tasks (dex.activity_task).';

/*
 * Backups.  The task tables are members of the extension and UNLOGGED, so
 * pg_dump leaves them out; a restore brings the queues, runs, history and
 * inbox back, and the scheduler then rebuilds the tasks (src/scheduler.c).
 * A queue row that dex.create_queue did not insert can only come from a
 * restore: the trigger notes the restoring session for the scheduler.
 */
DROP TRIGGER queue_partition ON dex.queue;
DROP FUNCTION dex.queue_partition();
CREATE FUNCTION dex.queue_restored()
RETURNS trigger
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_queue_restored_trigger';
COMMENT ON FUNCTION dex.queue_restored() IS
    'Trigger AFTER INSERT on dex.queue: a queue row that dex.create_queue did not insert is a restore, after which the scheduler rebuilds the task tables.';
REVOKE ALL ON FUNCTION dex.queue_restored() FROM PUBLIC;
CREATE TRIGGER queue_restored AFTER INSERT ON dex.queue
    FOR EACH ROW EXECUTE FUNCTION dex.queue_restored();

/* ---- What each queue holds, estimated past 10,000 from one table's statistics ---- */

CREATE OR REPLACE FUNCTION dex.queue_depth(
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
    share float8;
BEGIN
    FOR q IN SELECT x.id, x.name, x.kind, x.status, x.capacity
               FROM dex.queue x ORDER BY x.name LOOP
        queue := q.name;
        kind := q.kind;
        status := q.status;
        capacity := q.capacity;
        oldest_ready_at := NULL;
        -- capped counts on the queue's range of the indexes; the oldest ready
        -- task by one probe of the poll index per priority in use (highest first)
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
            -- the planner's estimate of the table's rows (density times its
            -- current size) times the queue's share of them in the table's
            -- statistics (the most common queue ids ANALYZE sampled), less
            -- the other counts; nothing more than the count when the
            -- statistics do not have the queue
            SELECT CASE WHEN c.relpages > 0
                        THEN c.reltuples / c.relpages
                             * (pg_relation_size(c.oid) / current_setting('block_size')::integer)
                        ELSE greatest(c.reltuples, 0) END
              INTO tuples
              FROM pg_class c
             WHERE c.oid = CASE q.kind WHEN 'workflow' THEN 'dex.workflow_task'::regclass
                                       ELSE 'dex.activity_task'::regclass END;
            SELECT f.freq INTO share
              FROM pg_stats s,
                   unnest(s.most_common_vals::text::integer[], s.most_common_freqs) AS f(id, freq)
             WHERE s.schemaname = 'dex' AND s.tablename = q.kind || '_task'
               AND s.attname = 'queue_id' AND f.id = q.id;
            ready := greatest(ready, (tuples * coalesce(share, 0) - leased - delayed)::bigint);
        END IF;
        backlog_age := now() - oldest_ready_at;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION dex.queue_depth() IS
    'What each queue holds now (the view dex.queue_depth): tasks ready to lease, leased, and (activity queues) waiting out a retry backoff; the oldest ready task and its age. Counts are exact up to 10,000 per figure; past that ready is estimated from the task table''s size and the queue''s share of it in the table''s statistics (estimated = true). Never counts a whole table.';
COMMENT ON VIEW dex.queue_depth IS
    'What each queue holds now: tasks ready to lease, leased, and (activity queues) waiting out a retry backoff; the oldest ready task and its age. Counts are exact up to 10,000 per figure; past that ready is estimated from the task table''s size and the queue''s share of it in its statistics (estimated = true). No count(*) over whole tables: a few milliseconds per queue at any backlog.';
