/* dex--1.0.sql: the dex schema and SQL API */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION dex" to load this file. \quit

/*
 * Tables.  Clients never write them: every change goes through the dex.*
 * functions, which own every state transition.  Task tables are LIST
 * partitioned, one partition per queue (created by dex.create_queue).
 */

CREATE TABLE dex.queue (
    id          integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    kind        text NOT NULL CHECK (kind IN ('workflow', 'activity')),
    status      text NOT NULL DEFAULT 'ACTIVE' CHECK (status IN ('ACTIVE', 'PAUSED')),
    capacity    integer NOT NULL DEFAULT 1000 CHECK (capacity > 0),
    partition   name NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at  timestamptz
);
COMMENT ON TABLE dex.queue IS
    'Task queues: workflow queues hold workflow tasks, activity queues activity tasks; one task partition each.';

CREATE TABLE dex.workflow_run (
    id                  uuid PRIMARY KEY,
    workflow_name       text NOT NULL,
    workflow_version    integer NOT NULL CHECK (workflow_version > 0),
    queue_id            integer NOT NULL,
    status              text NOT NULL DEFAULT 'CREATED'
                        CHECK (status IN ('CREATED', 'RUNNING', 'SUSPENDED', 'CANCELLED', 'COMPLETED', 'FAILED')),
    instance_id         text,
    priority            smallint NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 100),
    labels              jsonb,
    concurrency_key     text,
    custom_status       text,
    parent_id           uuid,
    parent_event_id     integer,        -- the parent's ChildRunCreated event
    argument            bytea,          -- dex.v1.Payload
    result              bytea,          -- dex.v1.Payload
    failure             bytea,          -- dex.v1.Failure
    history_length      integer NOT NULL DEFAULT 0,
    last_event_id       integer NOT NULL DEFAULT 0,
    generation          integer NOT NULL DEFAULT 0,
    cancel_requested    boolean NOT NULL DEFAULT false,
    task_failures       integer NOT NULL DEFAULT 0,     -- consecutive failed workflow tasks
    last_task_failure   bytea,          -- dex.v1.Failure
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz,
    started_at          timestamptz,
    completed_at        timestamptz
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.02);
COMMENT ON TABLE dex.workflow_run IS
    'Workflow runs: the projection of each run''s event history.';

-- The primary key is the only index of dex.workflow_run, on purpose: no other
-- indexed column or index predicate changes when a run advances, so the
-- projection's updates are HOT and write no index entries.

-- Indexes on columns that never change after insert, partial so that runs
-- without them pay nothing: they keep the projection's updates HOT.
CREATE INDEX workflow_run_labels_idx ON dex.workflow_run USING gin (labels jsonb_path_ops)
    WHERE labels IS NOT NULL;
CREATE INDEX workflow_run_parent_idx ON dex.workflow_run (parent_id) WHERE parent_id IS NOT NULL;

-- At most one non-terminal run per instance id: a row here while the run is
-- not terminal (a partial unique index on workflow_run would need the status
-- in its predicate and make every status change a non-HOT update).
CREATE TABLE dex.run_instance (
    instance_id text PRIMARY KEY,
    run_id      uuid NOT NULL
);
COMMENT ON TABLE dex.run_instance IS
    'Instance ids of the runs that are not terminal: one active run per instance id.';

CREATE TABLE dex.workflow_inbox (
    id              bigint GENERATED ALWAYS AS IDENTITY,
    run_id          uuid NOT NULL,
    visible_from    timestamptz NOT NULL,
    delayed         boolean NOT NULL DEFAULT false,
    timer_id        integer,            -- for TimerElapsed rows: the timer, so it can be cancelled
    event           bytea NOT NULL,     -- dex.v1.WorkflowEvent
    PRIMARY KEY (run_id, id)
) WITH (autovacuum_vacuum_scale_factor = 0.02);
COMMENT ON TABLE dex.workflow_inbox IS
    'Events a run''s workflow has not seen yet; timers and other delayed events are rows visible from a future time.';
-- the scheduler's due-event probe: only delayed rows not yet handed to a task
CREATE INDEX workflow_inbox_delayed_idx ON dex.workflow_inbox (visible_from) WHERE delayed;

CREATE TABLE dex.workflow_history (
    run_id      uuid NOT NULL,
    sequence    integer NOT NULL,       -- sequence number of the first event in the batch
    events      bytea NOT NULL,         -- dex.v1.EventBatch
    PRIMARY KEY (run_id, sequence)
);
COMMENT ON TABLE dex.workflow_history IS
    'Append-only event history: one row per completed workflow task, holding its events as one dex.v1.EventBatch.';

-- Concurrency keys: runs sharing a key execute one at a time.  The slot names
-- the run that holds a key, from its admission until it ends (suspended runs
-- keep it); runs that wait for the key queue in dex.concurrency_wait, taken
-- in priority, then creation (id), order.  Admission never scans the backlog.
CREATE TABLE dex.concurrency_slot (
    key         text PRIMARY KEY,
    run_id      uuid NOT NULL
);
COMMENT ON TABLE dex.concurrency_slot IS
    'The run that holds each concurrency key.';
CREATE TABLE dex.concurrency_wait (
    key         text NOT NULL,
    priority    smallint NOT NULL,
    run_id      uuid NOT NULL,
    PRIMARY KEY (key, run_id)
);
CREATE INDEX concurrency_wait_next_idx ON dex.concurrency_wait (key, priority DESC, run_id);
COMMENT ON TABLE dex.concurrency_wait IS
    'Runs waiting for their concurrency key, admitted in priority then creation order.';

-- External events a run received, by id: a second event with the same id is
-- dropped (dex.send_external_event returns false).
CREATE TABLE dex.external_event (
    run_id      uuid NOT NULL,
    event_id    text NOT NULL,
    received_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, event_id)
);
COMMENT ON TABLE dex.external_event IS
    'Ids of the external events each active run received, to drop duplicates.';

-- Workflow tasks: at most one per run.  The partitions are UNLOGGED: after a
-- crash the scheduler rebuilds them from runs and inbox.
CREATE TABLE dex.workflow_task (
    queue_id        integer NOT NULL,
    run_id          uuid NOT NULL,
    priority        smallint NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    locked_by       text,
    locked_until    timestamptz,
    lock_version    bigint NOT NULL DEFAULT 0,
    started_at      timestamptz,
    inbox_ids       bigint[],
    PRIMARY KEY (run_id, queue_id)
) PARTITION BY LIST (queue_id);
COMMENT ON TABLE dex.workflow_task IS
    'Pending and leased workflow tasks, one per run with visible unseen events; rebuilt from runs and inbox after a crash.';
CREATE INDEX workflow_task_poll_idx ON dex.workflow_task (queue_id, priority DESC, created_at);
CREATE INDEX workflow_task_lease_idx ON dex.workflow_task (locked_until) WHERE locked_by IS NOT NULL;

CREATE TABLE dex.activity_task (
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
    created_at      timestamptz NOT NULL,
    PRIMARY KEY (run_id, event_id, queue_id)
) PARTITION BY LIST (queue_id);
COMMENT ON TABLE dex.activity_task IS
    'Activity tasks: CREATED until due (retry backoff), then QUEUED for workers; leased while running. Partitions are UNLOGGED: rebuilt from history, inbox and dex.activity_retry after a crash.';
CREATE INDEX activity_task_poll_idx ON dex.activity_task (queue_id, priority DESC, created_at)
    WHERE status = 'QUEUED' AND locked_by IS NULL;
CREATE INDEX activity_task_due_idx ON dex.activity_task (visible_from)
    WHERE status = 'CREATED';
CREATE INDEX activity_task_lease_idx ON dex.activity_task (locked_until)
    WHERE locked_by IS NOT NULL;

-- The logged record of an activity's retries, the one piece of activity state
-- that its history does not hold: a row while an activity that failed an
-- attempt is retried.
CREATE TABLE dex.activity_retry (
    run_id          uuid NOT NULL,
    event_id        integer NOT NULL,
    attempt         integer NOT NULL,   -- the attempt to run next
    visible_from    timestamptz NOT NULL,
    last_failure    bytea,              -- dex.v1.Failure
    heartbeat_details bytea,            -- dex.v1.Payload
    PRIMARY KEY (run_id, event_id)
);
COMMENT ON TABLE dex.activity_retry IS
    'Attempt counts and backoff of activities being retried; with history and inbox, what rebuilds activity tasks after a crash.';

-- Fencing tokens: every lease takes a new, ever-growing lock version, so a
-- task recreated after its row was deleted can never match an old token.
CREATE SEQUENCE dex.lease_version AS bigint;

CREATE UNLOGGED TABLE dex.lease (
    name        text PRIMARY KEY,
    holder      text NOT NULL,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);
COMMENT ON TABLE dex.lease IS
    'Named leases that make singleton duties of the background workers run once.';

REVOKE ALL ON ALL TABLES IN SCHEMA dex FROM PUBLIC;

/*
 * Functions.  Every function pins its search_path.  Those that run statements
 * also turn off sequential scans, hash and merge joins and JIT: their
 * statements are planned once, generically, and must keep index plans at any
 * table size (see src/spi_util.c).
 */

/*
 * Codec: protobuf <-> canonical proto3 JSON for every dex.v1 message.
 */

CREATE FUNCTION dex.to_json(message_type text, data bytea)
RETURNS jsonb
LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'dex_to_json';
COMMENT ON FUNCTION dex.to_json(text, bytea) IS
    'Decode a protobuf-encoded dex.v1 message (e.g. ''dex.v1.WorkflowEvent'') into its canonical proto3 JSON.';

CREATE FUNCTION dex.from_json(message_type text, data jsonb)
RETURNS bytea
LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'dex_from_json';
COMMENT ON FUNCTION dex.from_json(text, jsonb) IS
    'Encode the canonical proto3 JSON of a dex.v1 message as protobuf.';

CREATE FUNCTION dex.payload_value(payload bytea)
RETURNS jsonb
LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'dex_payload_value';
COMMENT ON FUNCTION dex.payload_value(bytea) IS
    'The JSON value of a protobuf-encoded dex.v1.Payload: the value itself for JSON payloads, the canonical Payload JSON otherwise.';

/*
 * Queues.
 */

CREATE FUNCTION dex.create_queue(name text, kind text, capacity integer DEFAULT 1000)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_create_queue';
COMMENT ON FUNCTION dex.create_queue(text, text, integer) IS
    'Create a task queue of kind ''workflow'' or ''activity'' with its task partition.';

/*
 * Runs.
 */

CREATE FUNCTION dex.create_run(
    workflow_name text,
    queue text,
    argument jsonb DEFAULT NULL,
    workflow_version integer DEFAULT 1,
    instance_id text DEFAULT NULL,
    priority integer DEFAULT 0,
    labels jsonb DEFAULT NULL,
    concurrency_key text DEFAULT NULL,
    if_active text DEFAULT 'error')
RETURNS uuid
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_create_run';
COMMENT ON FUNCTION dex.create_run(text, text, jsonb, integer, text, integer, jsonb, text, text) IS
    'Start a workflow run on a workflow queue; returns its id (a UUIDv7). If the instance id has an active run: an error (if_active => ''error'') or that run''s id (''return'').';

CREATE FUNCTION dex.create_runs(
    workflow_name text,
    queue text,
    arguments jsonb[],
    workflow_version integer DEFAULT 1,
    priority integer DEFAULT 0,
    labels jsonb DEFAULT NULL)
RETURNS SETOF uuid
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_create_runs';
COMMENT ON FUNCTION dex.create_runs(text, text, jsonb[], integer, integer, jsonb) IS
    'Start many runs of one workflow on one queue in one call: one run per element of arguments; returns their ids in order.';

CREATE FUNCTION dex.send_external_event(run_id uuid, event_id text, payload jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_send_external_event';
COMMENT ON FUNCTION dex.send_external_event(uuid, text, jsonb) IS
    'Send an external event to a run: true when delivered, false when the run already received an event with this id (dropped).';

CREATE FUNCTION dex.send_external_event_to_instance(instance_id text, event_id text, payload jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_send_external_event_to_instance';
COMMENT ON FUNCTION dex.send_external_event_to_instance(text, text, jsonb) IS
    'dex.send_external_event to the active run of a workflow instance.';

CREATE FUNCTION dex.cancel_run(run_id uuid, reason text DEFAULT NULL)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_cancel_run';
COMMENT ON FUNCTION dex.cancel_run(uuid, text) IS
    'Cancel a run: an executing run gets runCancelRequested and ends CANCELLED after the workflow task that shows it; a run not executing ends CANCELLED at once.';

CREATE FUNCTION dex.suspend_run(run_id uuid)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_suspend_run';
COMMENT ON FUNCTION dex.suspend_run(uuid) IS
    'Suspend a running run: it gets no workflow task until dex.resume_run.';

CREATE FUNCTION dex.resume_run(run_id uuid)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_resume_run';
COMMENT ON FUNCTION dex.resume_run(uuid) IS
    'Resume a suspended run; the workflow sees runSuspended and runResumed in its next task.';

CREATE VIEW dex.runs AS
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
       dex.to_json('dex.v1.Failure', r.last_task_failure) AS last_task_failure
  FROM dex.workflow_run r
  LEFT JOIN dex.queue q ON q.id OPERATOR(pg_catalog.=) r.queue_id;
COMMENT ON VIEW dex.runs IS
    'Workflow runs with JSON argument, result and failure.';

CREATE FUNCTION dex.list_runs(
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
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF page_size IS NULL OR page_size < 1 OR page_size > 1000 THEN
        RAISE EXCEPTION 'page size must be between 1 and 1000'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF list_runs.status IS NOT NULL AND list_runs.status OPERATOR(pg_catalog.<>) ALL
       ('{CREATED,RUNNING,SUSPENDED,CANCELLED,COMPLETED,FAILED}'::text[]) THEN
        RAISE EXCEPTION 'invalid run status "%"', list_runs.status
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A status is CREATED, RUNNING, SUSPENDED, CANCELLED, COMPLETED or FAILED.';
    END IF;
    IF list_runs.labels IS NOT NULL AND pg_catalog.jsonb_typeof(list_runs.labels) OPERATOR(pg_catalog.<>) 'object' THEN
        RAISE EXCEPTION 'labels must be a JSON object'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    SELECT v.* FROM dex.runs v
     WHERE (list_runs.workflow_name IS NULL OR v.workflow_name OPERATOR(pg_catalog.=) list_runs.workflow_name)
       AND (list_runs.status IS NULL OR v.status OPERATOR(pg_catalog.=) list_runs.status)
       AND (list_runs.labels IS NULL OR v.labels OPERATOR(pg_catalog.@>) list_runs.labels)
       AND (created_after IS NULL OR v.created_at OPERATOR(pg_catalog.>=) created_after)
       AND (created_before IS NULL OR v.created_at OPERATOR(pg_catalog.<) created_before)
       AND (completed_after IS NULL OR v.completed_at OPERATOR(pg_catalog.>=) completed_after)
       AND (completed_before IS NULL OR v.completed_at OPERATOR(pg_catalog.<) completed_before)
       AND (list_runs.parent_id IS NULL OR v.parent_id OPERATOR(pg_catalog.=) list_runs.parent_id)
       AND (before_id IS NULL OR v.id OPERATOR(pg_catalog.<) before_id)
     ORDER BY v.id DESC
     LIMIT page_size;
END
$$;
COMMENT ON FUNCTION dex.list_runs(text, text, jsonb, timestamptz, timestamptz, timestamptz, timestamptz, uuid, uuid, integer) IS
    'Runs matching the filters, newest first, a page at a time: pass the last id of a page as before_id to get the next.';

CREATE FUNCTION dex.get_run(run_id uuid)
RETURNS dex.runs
LANGUAGE plpgsql STRICT STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    run dex.runs;
BEGIN
    SELECT * INTO run FROM dex.runs r WHERE r.id OPERATOR(pg_catalog.=) get_run.run_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow run % does not exist', get_run.run_id
            USING ERRCODE = 'undefined_object';
    END IF;
    RETURN run;
END
$$;
COMMENT ON FUNCTION dex.get_run(uuid) IS
    'A workflow run with its status, argument, result and failure; an error if it does not exist.';

CREATE FUNCTION dex.run_history(run_id uuid)
RETURNS TABLE (sequence integer, event jsonb)
LANGUAGE C STRICT STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_run_history';
COMMENT ON FUNCTION dex.run_history(uuid) IS
    'The event history of a workflow run, in order, each event as canonical dex.v1.WorkflowEvent JSON.';

/*
 * Tasks.
 */

CREATE FUNCTION dex.poll_tasks(
    queue text,
    worker_id text,
    max_tasks integer DEFAULT 1,
    lease_duration interval DEFAULT '5 minutes')
RETURNS TABLE (kind text, run_id uuid, task_id integer, lock_version bigint,
               locked_until timestamptz, task jsonb)
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_poll_tasks';
COMMENT ON FUNCTION dex.poll_tasks(text, text, integer, interval) IS
    'Lease up to max_tasks tasks of a queue to a worker; each row''s task is a dex.v1.WorkflowTask or dex.v1.ActivityTask as JSON.';

CREATE FUNCTION dex.poll_tasks_pb(
    queue text,
    worker_id text,
    max_tasks integer DEFAULT 1,
    lease_duration interval DEFAULT '5 minutes')
RETURNS TABLE (kind text, run_id uuid, task_id integer, lock_version bigint,
               locked_until timestamptz, task bytea)
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_poll_tasks_pb';
COMMENT ON FUNCTION dex.poll_tasks_pb(text, text, integer, interval) IS
    'dex.poll_tasks with each task protobuf-encoded, for SDKs.';

CREATE FUNCTION dex.complete_task(run_id uuid, task_id integer, lock_version bigint, result jsonb)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_complete_task';
COMMENT ON FUNCTION dex.complete_task(uuid, integer, bigint, jsonb) IS
    'Complete a leased task: for a workflow task (task_id 0) result is its dex.v1.WorkflowTaskCompletion (or its commands array); for an activity task, the activity''s JSON result.';

CREATE FUNCTION dex.complete_task_pb(run_id uuid, task_id integer, lock_version bigint, result bytea)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_complete_task_pb';
COMMENT ON FUNCTION dex.complete_task_pb(uuid, integer, bigint, bytea) IS
    'Complete a leased task with protobuf: a dex.v1.WorkflowTaskCompletion for a workflow task, a dex.v1.Payload for an activity task.';

CREATE FUNCTION dex.fail_task(run_id uuid, task_id integer, lock_version bigint, failure jsonb)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_fail_task';
COMMENT ON FUNCTION dex.fail_task(uuid, integer, bigint, jsonb) IS
    'Fail a leased task with a dex.v1.Failure. An activity is retried per its retry policy unless terminal or out of attempts, then reported to the workflow; a workflow task is handed out again after a growing backoff, counted on the run.';

CREATE FUNCTION dex.fail_task_pb(run_id uuid, task_id integer, lock_version bigint, failure bytea)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_fail_task_pb';
COMMENT ON FUNCTION dex.fail_task_pb(uuid, integer, bigint, bytea) IS
    'dex.fail_task with a protobuf-encoded dex.v1.Failure.';

-- No SET clause: it would forbid the transaction control this procedure needs;
-- its statements qualify every object and operator instead.
CREATE PROCEDURE dex.wait_for_tasks(queue text, timeout interval, INOUT ready boolean DEFAULT NULL)
LANGUAGE C
AS 'MODULE_PATHNAME', 'dex_wait_for_tasks';
COMMENT ON PROCEDURE dex.wait_for_tasks(text, interval, boolean) IS
    'Long poll: ready = true as soon as the queue may have pollable tasks, false after the timeout; holds no snapshot while it waits. Call outside a transaction block.';

/*
 * Batches: many tasks in one call and one transaction.  A lost lease is
 * reported for its task (completed = false) without failing the others.
 */

CREATE FUNCTION dex.complete_tasks(run_ids uuid[], task_ids integer[], lock_versions bigint[], results jsonb[])
RETURNS TABLE (run_id uuid, task_id integer, completed boolean)
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_complete_tasks';
COMMENT ON FUNCTION dex.complete_tasks(uuid[], integer[], bigint[], jsonb[]) IS
    'Complete many leased tasks at once (as dex.complete_task); completed is false for a task whose lease was lost.';

CREATE FUNCTION dex.complete_tasks_pb(run_ids uuid[], task_ids integer[], lock_versions bigint[], results bytea[])
RETURNS TABLE (run_id uuid, task_id integer, completed boolean)
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_complete_tasks_pb';
COMMENT ON FUNCTION dex.complete_tasks_pb(uuid[], integer[], bigint[], bytea[]) IS
    'dex.complete_tasks with protobuf results (dex.v1.WorkflowTaskCompletion or dex.v1.Payload).';

CREATE FUNCTION dex.fail_tasks(run_ids uuid[], task_ids integer[], lock_versions bigint[], failures jsonb[])
RETURNS TABLE (run_id uuid, task_id integer, failed boolean)
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_fail_tasks';
COMMENT ON FUNCTION dex.fail_tasks(uuid[], integer[], bigint[], jsonb[]) IS
    'Fail many leased activity attempts at once (as dex.fail_task); failed is false for a task whose lease was lost.';

CREATE FUNCTION dex.fail_tasks_pb(run_ids uuid[], task_ids integer[], lock_versions bigint[], failures bytea[])
RETURNS TABLE (run_id uuid, task_id integer, failed boolean)
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_fail_tasks_pb';
COMMENT ON FUNCTION dex.fail_tasks_pb(uuid[], integer[], bigint[], bytea[]) IS
    'dex.fail_tasks with protobuf failures (dex.v1.Failure).';

CREATE FUNCTION dex.heartbeat_task(run_id uuid, task_id integer, lock_version bigint,
                                   lease_duration interval DEFAULT '5 minutes',
                                   details jsonb DEFAULT NULL)
RETURNS timestamptz
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_heartbeat_task';
COMMENT ON FUNCTION dex.heartbeat_task(uuid, integer, bigint, interval, jsonb) IS
    'Extend a held lease to now + lease_duration (capped by the activity''s timeouts); returns the new expiry; refused (WD001) if the lease is lost, WD002 if the run was cancelled. Details are kept for the next attempt.';

CREATE FUNCTION dex.heartbeat_tasks(run_ids uuid[], task_ids integer[], lock_versions bigint[],
                                    lease_duration interval DEFAULT '5 minutes')
RETURNS TABLE (run_id uuid, task_id integer, locked_until timestamptz)
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_heartbeat_tasks';
COMMENT ON FUNCTION dex.heartbeat_tasks(uuid[], integer[], bigint[], interval) IS
    'Extend many leases at once; one row per lease still held, none for lost ones.';

/*
 * Workers.
 */

CREATE FUNCTION dex.wake_scheduler()
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'dex_wake_scheduler';
COMMENT ON FUNCTION dex.wake_scheduler() IS
    'Wake the scheduler when the calling transaction commits (it also wakes by itself when work falls due).';

-- the scheduler starts serving this database once this commits
SELECT dex.wake_scheduler();
