/* dex--1.7.sql: the dex schema and SQL API (a fresh install of 1.7) */

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
    capacity    integer CHECK (capacity > 0),   -- most tasks leased at once; NULL: no limit
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
                        CHECK (status IN ('CREATED', 'RUNNING', 'SUSPENDED', 'CANCELLED', 'COMPLETED', 'FAILED',
                                          'TERMINATED', 'BLOCKED', 'TIMED_OUT', 'DELAYED')),
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
    completed_at        timestamptz,
    -- what a child does when its parent ends: NULL terminate, else these
    parent_close_policy text CHECK (parent_close_policy IN ('REQUEST_CANCEL', 'ABANDON')),
    origin_run_id       uuid,           -- the run this one restarts or resets
    origin              text CHECK (origin IN ('RESTART', 'RESET')),
    history_bytes       bigint NOT NULL DEFAULT 0   -- encoded size of the history (dex.max_history_size)
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

-- At most one non-terminal run per instance id and queue: a row here while
-- the run is not terminal (a partial unique index on workflow_run would need
-- the status in its predicate and make every status change a non-HOT
-- update).  Per queue, so that tenants of different queues cannot learn of
-- each other's runs through their instance ids (src/instances.c).
CREATE TABLE dex.run_instance (
    queue_id    integer NOT NULL,
    instance_id text NOT NULL,
    run_id      uuid NOT NULL,
    PRIMARY KEY (queue_id, instance_id)
);
COMMENT ON TABLE dex.run_instance IS
    'Instance ids of the runs that are not terminal: one active run per instance id and workflow queue.';

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

-- A run's own timers, logged: when a DELAYED run starts (START) and when a
-- run with an execution timeout ends TIMED_OUT (DEADLINE).  A row lives until
-- the scheduler fires it or the run ends, so the scheduler's probe reads only
-- pending ones; a continue-as-new keeps the run id, and with it the deadline.
CREATE TABLE dex.run_timer (
    run_id      uuid NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('START', 'DEADLINE')),
    due_at      timestamptz NOT NULL,
    PRIMARY KEY (run_id, kind)
);
CREATE INDEX run_timer_due_idx ON dex.run_timer (due_at);
COMMENT ON TABLE dex.run_timer IS
    'When each delayed run starts and each run with an execution timeout times out; fired by the scheduler.';

-- The attempts that did not succeed: a completed attempt is in the run's
-- history (workflowTaskStarted/Completed, activityTaskCompleted), so the
-- success path writes nothing here.  event_id 0 is the workflow task.
CREATE TABLE dex.task_attempt (
    run_id      uuid NOT NULL,
    id          bigint GENERATED ALWAYS AS IDENTITY,
    event_id    integer NOT NULL,   -- the activity's ActivityTaskCreated event; 0: the workflow task
    attempt     integer NOT NULL,
    worker_id   text,
    leased_at   timestamptz,
    ended_at    timestamptz NOT NULL,
    outcome     text NOT NULL CHECK (outcome IN ('FAILED', 'LEASE_EXPIRED', 'VOIDED')),
    failure     bytea,              -- dex.v1.Failure
    PRIMARY KEY (run_id, id)
);
COMMENT ON TABLE dex.task_attempt IS
    'Task attempts that failed, lost their lease or were voided (completed ones are in the history); read with dex.run_attempts.';

CREATE TABLE dex.workflow_history (
    run_id      uuid NOT NULL,
    sequence    integer NOT NULL,       -- sequence number of the first event in the batch
    events      bytea NOT NULL,         -- dex.v1.EventBatch
    PRIMARY KEY (run_id, sequence)
);
COMMENT ON TABLE dex.workflow_history IS
    'Append-only event history: one row per completed workflow task, holding its events as one dex.v1.EventBatch.';

-- Concurrency keys: runs of a workflow queue sharing a key execute one at a
-- time.  The slot names the run that holds a key, from its admission until
-- it ends (suspended runs keep it); runs that wait for the key queue in
-- dex.concurrency_wait, taken in priority, then creation (id), order.
-- Admission never scans the backlog.  Keys are per queue, as instance ids
-- are: runs of other tenants never wait for each other.
CREATE TABLE dex.concurrency_slot (
    queue_id    integer NOT NULL,
    key         text NOT NULL,
    run_id      uuid NOT NULL,
    PRIMARY KEY (queue_id, key)
);
COMMENT ON TABLE dex.concurrency_slot IS
    'The run that holds each concurrency key of a workflow queue.';
CREATE TABLE dex.concurrency_wait (
    queue_id    integer NOT NULL,
    key         text NOT NULL,
    priority    smallint NOT NULL,
    run_id      uuid NOT NULL,
    PRIMARY KEY (queue_id, key, run_id)
);
CREATE INDEX concurrency_wait_next_idx ON dex.concurrency_wait (queue_id, key, priority DESC, run_id);
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
    workflow_name   text NOT NULL,      -- the run's, for polls that declare what they run
    workflow_version integer NOT NULL,
    PRIMARY KEY (run_id, queue_id)
) PARTITION BY LIST (queue_id);
COMMENT ON TABLE dex.workflow_task IS
    'Pending and leased workflow tasks, one per run with visible unseen events; rebuilt from runs and inbox after a crash.';
CREATE INDEX workflow_task_poll_idx ON dex.workflow_task (queue_id, priority DESC, created_at);
CREATE INDEX workflow_task_lease_idx ON dex.workflow_task (locked_until) WHERE locked_by IS NOT NULL;
-- Polls that declare the (workflow, version) pairs they run read one range
-- of this index per pair.  Its order is on (- priority), an expression the
-- poll index does not have, so that the planner cannot take that index
-- instead for a declared poll (filtering the whole queue) however the
-- statistics make the two look.
CREATE INDEX workflow_task_version_idx
    ON dex.workflow_task (queue_id, workflow_name, workflow_version, (- priority), created_at);

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
-- Polls that declare the activities they run read one range of this index per
-- name (on (- priority), as workflow_task_version_idx).
CREATE INDEX activity_task_name_idx ON dex.activity_task (queue_id, name, (- priority), created_at)
    WHERE status = 'QUEUED' AND locked_by IS NULL;

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

-- Queue grants: the roles that may use each queue (besides superusers and
-- dex_admin; see src/privileges.c).  dex.create_queue grants a new queue to
-- dex_client and dex_worker.  A grantee is a role: roles belong to the
-- cluster, and the maintenance worker removes the rows of dropped ones.  Its
-- type is regrole, an oid that pg_dump writes as the role's name, so that a
-- restore into another cluster grants the role of that name, not whichever
-- has the oid there (see Backups below).  queue_id names a queue but is no
-- foreign key: a parallel pg_restore loads the rows of extension tables in
-- any order, and a grant could come before its queue.  Grants are written
-- by dex.create_queue and dex.grant_queue only, for queues that exist.
CREATE TABLE dex.queue_grant (
    queue_id    integer NOT NULL,
    grantee     regrole NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (queue_id, grantee)
);
COMMENT ON TABLE dex.queue_grant IS
    'The roles that may use each queue: start, read and steer its runs, lease and report on its tasks (dex.grant_queue, dex.revoke_queue).';

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

CREATE FUNCTION dex.create_queue(name text, kind text, capacity integer DEFAULT NULL)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_create_queue';
COMMENT ON FUNCTION dex.create_queue(text, text, integer) IS
    'Create a task queue of kind ''workflow'' or ''activity'' with its task partition; capacity, if given, is the most tasks leased at once.';

CREATE FUNCTION dex.alter_queue(name text, capacity integer DEFAULT NULL, paused boolean DEFAULT NULL,
                                rate_limit integer DEFAULT NULL, rate_period interval DEFAULT NULL,
                                concurrency_limit integer DEFAULT NULL)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_alter_queue';
COMMENT ON FUNCTION dex.alter_queue(text, integer, boolean, integer, interval, integer) IS
    'Change a queue at run time: its capacity (most tasks leased at once; 0 removes the limit), whether it is paused (polls hand out nothing), its rate limit (most tasks handed out per rate_period, 1 second unless given; 0 removes it) and the concurrency limit of its keys (runs of a key active at once); NULL leaves a setting as it is.';

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
    if_active text DEFAULT 'error',
    start_at timestamptz DEFAULT NULL,
    execution_timeout interval DEFAULT NULL,
    debounce_key text DEFAULT NULL,
    debounce interval DEFAULT NULL,
    debounce_max interval DEFAULT NULL)
RETURNS uuid
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_create_run';
COMMENT ON FUNCTION dex.create_run(text, text, jsonb, integer, text, integer, jsonb, text, text, timestamptz, interval, text, interval, interval) IS
    'Start a workflow run on a workflow queue; returns its id (a UUIDv7). If the instance id has an active run: an error (if_active => ''error'') or that run''s id (''return''). With start_at in the future the run is DELAYED until then; with execution_timeout it ends TIMED_OUT when it has not ended that long after its start. With debounce_key and debounce (1.7): calls with the same key, workflow and queue while the run they made has not started update it (the latest argument wins) and push its start to debounce after the call, never past debounce_max after the first call; returns that run''s id.';

CREATE FUNCTION dex.create_runs(
    workflow_name text,
    queue text,
    arguments jsonb[],
    workflow_version integer DEFAULT 1,
    priority integer DEFAULT 0,
    labels jsonb DEFAULT NULL,
    start_at timestamptz DEFAULT NULL,
    execution_timeout interval DEFAULT NULL,
    instance_ids text[] DEFAULT NULL,
    concurrency_keys text[] DEFAULT NULL,
    priorities integer[] DEFAULT NULL,
    run_labels jsonb[] DEFAULT NULL,
    start_times timestamptz[] DEFAULT NULL)
RETURNS TABLE (id uuid, created boolean)
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_create_runs';
COMMENT ON FUNCTION dex.create_runs(text, text, jsonb[], integer, integer, jsonb, timestamptz, interval, text[], text[], integer[], jsonb[], timestamptz[]) IS
    'Start many runs of one workflow on one queue in one call: one run per element of arguments; returns their ids in order, created true. start_at and execution_timeout as for dex.create_run. Per run (1.7; arrays as long as arguments, a NULL element takes the default): instance_ids, concurrency_keys, priorities (else priority), run_labels (else labels), start_times (else start_at). A run whose instance id has an active run is not created: its row has that run''s id and created false.';

CREATE FUNCTION dex.send_external_event(run_id uuid, event_id text, payload jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_send_external_event';
COMMENT ON FUNCTION dex.send_external_event(uuid, text, jsonb) IS
    'Send an external event to a run: true when delivered, false when the run already received an event with this id (dropped).';

CREATE FUNCTION dex.send_external_event_to_instance(instance_id text, event_id text, payload jsonb DEFAULT NULL,
                                                    queue text DEFAULT NULL)
RETURNS boolean
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_send_external_event_to_instance';
COMMENT ON FUNCTION dex.send_external_event_to_instance(text, text, jsonb, text) IS
    'dex.send_external_event to the active run of a workflow instance on the given queue, or on any queue the caller may use (an error if on several).';

CREATE FUNCTION dex.cancel_run(run_id uuid, reason text DEFAULT NULL)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_cancel_run';
COMMENT ON FUNCTION dex.cancel_run(uuid, text) IS
    'Cancel a run: an executing run gets runCancelRequested and ends CANCELLED when its workflow sends cancelRun (after cleaning up); a run not executing ends CANCELLED at once.';

CREATE FUNCTION dex.terminate_run(run_id uuid, reason text DEFAULT NULL)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_terminate_run';
COMMENT ON FUNCTION dex.terminate_run(uuid, text) IS
    'End a run at once as TERMINATED, without running its workflow code: its pending tasks, timers and leases are void, and runTerminated records the reason and the session user.';

CREATE FUNCTION dex.purge_run(run_id uuid)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_purge_run';
COMMENT ON FUNCTION dex.purge_run(uuid) IS
    'Delete a run that has ended now, with its history and every row it owns (a data-deletion request); an active run is refused.';

CREATE FUNCTION dex.purge_runs(status text DEFAULT NULL, queue text DEFAULT NULL,
                               ended_before timestamptz DEFAULT now(), "limit" integer DEFAULT 1000)
RETURNS bigint
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_purge_runs';
COMMENT ON FUNCTION dex.purge_runs(text, text, timestamptz, integer) IS
    'Delete up to limit (at most 10,000) runs that ended before ended_before, of that status and queue (NULL: any), oldest first, now; returns how many. Call it again until it returns 0.';

CREATE FUNCTION dex.suspend_run(run_id uuid, reason text DEFAULT NULL)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_suspend_run';
COMMENT ON FUNCTION dex.suspend_run(uuid, text) IS
    'Suspend a running run: nothing of it is handed out and no command of it takes effect until dex.resume_run; runSuspended records the reason and the session user.';

CREATE FUNCTION dex.resume_run(run_id uuid, reason text DEFAULT NULL)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_resume_run';
COMMENT ON FUNCTION dex.resume_run(uuid, text) IS
    'Resume a suspended run (the workflow sees runSuspended and runResumed, with their reasons and session users, in its next task), or retry a run BLOCKED by failing workflow tasks.';

CREATE FUNCTION dex.restart_run(run_id uuid)
RETURNS uuid
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_restart_run';
COMMENT ON FUNCTION dex.restart_run(uuid) IS
    'Start a new run with the workflow, version, argument, queue, priority, labels and concurrency key of a run (and its instance id once that run has ended; no start_at or execution timeout); returns the new run''s id. The new run records where it came from (origin_run_id, origin RESTART).';

CREATE FUNCTION dex.set_run_version(run_id uuid, version integer)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_set_run_version';
COMMENT ON FUNCTION dex.set_run_version(uuid, integer) IS
    'Move a run that has not ended to another version of its workflow: its next workflow tasks go to workers that declared (workflow, version). For an operator who has checked that the new version''s code replays the run''s history. Refused for an ended run (55000).';

CREATE FUNCTION dex.reset_run(run_id uuid, event_id integer, reason text DEFAULT NULL)
RETURNS uuid
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_reset_run';
COMMENT ON FUNCTION dex.reset_run(uuid, integer, text) IS
    'Start a new run that goes back to the run''s last workflow task completed at or before event_id (a sequence of dex.run_history) and decides it again with the code deployed now: the history before that task is kept, what the task was shown is shown again, activities completed before it are not run again, those pending are queued again, timers keep their fire time, and external events received after it are delivered again. An active run is terminated first. Returns the new run''s id (origin RESET).';

CREATE FUNCTION dex.run_attempts(run_id uuid)
RETURNS TABLE (task text, event_id integer, name text, attempt integer, worker_id text,
               leased_at timestamptz, ended_at timestamptz, outcome text, failure jsonb)
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_run_attempts';
COMMENT ON FUNCTION dex.run_attempts(uuid) IS
    'Every attempt of the run''s workflow tasks (task ''workflow'', event_id 0) and activities (task ''activity'', event_id of its activityTaskCreated, name): worker, when leased and ended, outcome (COMPLETED, FAILED, LEASE_EXPIRED, VOIDED) and failure, in the order they ended. Completed attempts are those of the history of the current generation.';

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
       r.queue_id,
       r.origin_run_id,
       r.origin
  FROM dex.workflow_run r
  LEFT JOIN dex.queue q ON q.id OPERATOR(pg_catalog.=) r.queue_id;
COMMENT ON VIEW dex.all_runs IS
    'Every workflow run as dex.runs shows it, with its queue id last: read by dex.list_runs, which filters by queue itself; closed to all roles.';

-- A security barrier: a reader's own functions in a WHERE clause see only
-- the rows of the queues the reader may use.
CREATE VIEW dex.runs WITH (security_barrier) AS
SELECT id, workflow_name, workflow_version, queue, status, instance_id, priority, labels,
       concurrency_key, custom_status, parent_id, argument, result, failure, history_length,
       created_at, updated_at, started_at, completed_at, task_failures, last_task_failure,
       origin_run_id, origin
  FROM dex.all_runs
 WHERE queue_id OPERATOR(pg_catalog.=) ANY ((SELECT dex.usable_queue_ids())::integer[]);
COMMENT ON VIEW dex.runs IS
    'Workflow runs with JSON argument, result and failure: those of the queues the reader may use.';

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
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'dex_list_runs';
COMMENT ON FUNCTION dex.list_runs(text, text, jsonb, timestamptz, timestamptz, timestamptz, timestamptz, uuid, uuid, integer) IS
    'Runs matching the filters, of the queues the caller may use, newest first, a page at a time: pass the last id of a page as before_id to get the next.';

CREATE FUNCTION dex.get_run(run_id uuid)
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

CREATE FUNCTION dex.run_history(run_id uuid)
RETURNS TABLE (sequence integer, event jsonb)
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_run_history';
COMMENT ON FUNCTION dex.run_history(uuid) IS
    'The event history of a workflow run, in order, each event as canonical dex.v1.WorkflowEvent JSON.';

CREATE FUNCTION dex.run_history_pb(run_id uuid)
RETURNS bytea
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_run_history_pb';
COMMENT ON FUNCTION dex.run_history_pb(uuid) IS
    'The event history of a workflow run as one encoded dex.v1.EventBatch: what a worker reads when a task left out a history it no longer holds (WorkflowTask.history_omitted).';

/*
 * Tasks.
 */

CREATE FUNCTION dex.poll_tasks(
    queue text,
    worker_id text,
    max_tasks integer DEFAULT 1,
    lease_duration interval DEFAULT '5 minutes',
    worker_cache boolean DEFAULT false,
    names text[] DEFAULT NULL,
    versions integer[] DEFAULT NULL)
RETURNS TABLE (kind text, run_id uuid, task_id integer, lock_version bigint,
               locked_until timestamptz, task jsonb)
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_poll_tasks';
COMMENT ON FUNCTION dex.poll_tasks(text, text, integer, interval, boolean, text[], integer[]) IS
    'Lease up to max_tasks tasks of a queue to a worker; each row''s task is a dex.v1.WorkflowTask or dex.v1.ActivityTask as JSON. With worker_cache (the worker keeps the state of runs whose workflow tasks it completed), a workflow task of a run this worker completed last leaves out the history it has seen (historyOmitted). A worker that declares what it runs gets only those tasks: on a workflow queue names and versions are the (workflow, version) pairs it runs, on an activity queue names are its activities (versions NULL); NULL names: every task of the queue.';

CREATE FUNCTION dex.poll_tasks_pb(
    queue text,
    worker_id text,
    max_tasks integer DEFAULT 1,
    lease_duration interval DEFAULT '5 minutes',
    worker_cache boolean DEFAULT false,
    names text[] DEFAULT NULL,
    versions integer[] DEFAULT NULL)
RETURNS TABLE (kind text, run_id uuid, task_id integer, lock_version bigint,
               locked_until timestamptz, task bytea)
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_poll_tasks_pb';
COMMENT ON FUNCTION dex.poll_tasks_pb(text, text, integer, interval, boolean, text[], integer[]) IS
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

CREATE PROCEDURE dex.poll_tasks_wait(queue text, worker_id text, max_tasks integer DEFAULT 1,
                                     lease interval DEFAULT '5 min', timeout interval DEFAULT '60 s',
                                     INOUT tasks jsonb DEFAULT NULL, worker_cache boolean DEFAULT false,
                                     run_ids uuid[] DEFAULT NULL, task_ids integer[] DEFAULT NULL,
                                     lock_versions bigint[] DEFAULT NULL, results jsonb[] DEFAULT NULL,
                                     INOUT completed boolean[] DEFAULT NULL,
                                     names text[] DEFAULT NULL, versions integer[] DEFAULT NULL)
LANGUAGE C
AS 'MODULE_PATHNAME', 'dex_poll_tasks_wait';
COMMENT ON PROCEDURE dex.poll_tasks_wait(text, text, integer, interval, interval, jsonb, boolean, uuid[], integer[], bigint[], jsonb[], boolean[], text[], integer[]) IS
    'The poll and the long poll in one call: leases up to max_tasks tasks of the queue and returns them as a JSON array of task messages (as dex.poll_tasks''s task column, worker_cache as there), waiting for some, holding no snapshot, until the timeout (then an empty array). Completions given (run_ids, task_ids, lock_versions, results, as dex.complete_tasks) are made first, in the same transaction as the first look; completed says whether each was applied (false: its lease was lost). names and versions declare what the worker runs, as for dex.poll_tasks. Call outside a transaction block.';

CREATE PROCEDURE dex.poll_tasks_wait_pb(queue text, worker_id text, max_tasks integer DEFAULT 1,
                                        lease interval DEFAULT '5 min', timeout interval DEFAULT '60 s',
                                        INOUT tasks bytea[] DEFAULT NULL, worker_cache boolean DEFAULT false,
                                        run_ids uuid[] DEFAULT NULL, task_ids integer[] DEFAULT NULL,
                                        lock_versions bigint[] DEFAULT NULL, results bytea[] DEFAULT NULL,
                                        INOUT completed boolean[] DEFAULT NULL,
                                        names text[] DEFAULT NULL, versions integer[] DEFAULT NULL)
LANGUAGE C
AS 'MODULE_PATHNAME', 'dex_poll_tasks_wait_pb';
COMMENT ON PROCEDURE dex.poll_tasks_wait_pb(text, text, integer, interval, interval, bytea[], boolean, uuid[], integer[], bigint[], bytea[], boolean[], text[], integer[]) IS
    'dex.poll_tasks_wait with the tasks as encoded dex.v1.WorkflowTask or dex.v1.ActivityTask messages, and results as encoded dex.v1.WorkflowTaskCompletion or dex.v1.Payload (as dex.complete_tasks_pb).';

CREATE FUNCTION dex.stop_waiting(worker_id text)
RETURNS integer
LANGUAGE C
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'dex_stop_waiting';
COMMENT ON FUNCTION dex.stop_waiting(text) IS
    'End the waits of the worker''s dex.poll_tasks_wait(_pb) calls in this database now: each returns what it leased (nothing), as at its timeout, so that a worker shutting down needs no cancel request (which the server logs as an error); how many waits it ended. A call that enters its wait afterwards waits on: call it until the worker''s calls have returned.';

-- No SET clause, as dex.wait_for_tasks: its statements qualify every object and operator.
CREATE PROCEDURE dex.wait_for_run(run_id uuid, timeout interval DEFAULT '60 s',
                                  INOUT status text DEFAULT NULL, INOUT result jsonb DEFAULT NULL,
                                  INOUT failure jsonb DEFAULT NULL)
LANGUAGE C
AS 'MODULE_PATHNAME', 'dex_wait_for_run';
COMMENT ON PROCEDURE dex.wait_for_run(uuid, interval, text, jsonb, jsonb) IS
    'Wait until the run has ended (at once if it has): its status, result and failure; after the timeout its status then. Holds no snapshot while it waits. Call outside a transaction block.';

CREATE PROCEDURE dex.wait_for_runs(run_ids uuid[], timeout interval DEFAULT '60 s', mode text DEFAULT 'any',
                                   INOUT ended uuid[] DEFAULT NULL)
LANGUAGE C
AS 'MODULE_PATHNAME', 'dex_wait_for_runs';
COMMENT ON PROCEDURE dex.wait_for_runs(uuid[], interval, text, uuid[]) IS
    'Wait until one of the runs (mode ''any'') or all of them (''all'') have ended: ended lists those that have, in the order given; after the timeout those that had then. Holds no snapshot while it waits. Call outside a transaction block.';

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
                                    lease_duration interval DEFAULT '5 minutes',
                                    queue text DEFAULT NULL)
RETURNS TABLE (run_id uuid, task_id integer, locked_until timestamptz)
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_heartbeat_tasks';
COMMENT ON FUNCTION dex.heartbeat_tasks(uuid[], integer[], bigint[], interval, text) IS
    'Extend many leases at once; one row per lease still held, none for lost ones. With queue (the queue all the tasks were leased from), only that queue''s tasks are looked at, which with many queues is much cheaper.';

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

-- What waits for a worker that never comes: ready tasks of a (workflow,
-- version) or activity that no polling worker has declared lately, during a
-- rolling deploy or after the last worker of an old version stopped.

CREATE FUNCTION dex.last_polled(queue_id integer, name text DEFAULT NULL, version integer DEFAULT NULL)
RETURNS timestamptz
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'dex_last_polled';
COMMENT ON FUNCTION dex.last_polled(integer, text, integer) IS
    'When a worker that could take the queue''s tasks of this workflow (name and version) or activity (name, NULL version) last polled the queue: one that declared it, or one that declared nothing; NULL name: any poll of the queue. NULL if none did since the server started. From shared memory, to the second.';

CREATE FUNCTION dex.unserved(
    idle interval DEFAULT '1 minute',
    OUT queue text, OUT kind text, OUT name text, OUT version integer,
    OUT tasks bigint, OUT waiting_since timestamptz, OUT last_polled timestamptz)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS $$
SELECT q.name, q.kind, w.name, w.version, w.tasks, w.since, p.at
  FROM (SELECT t.queue_id, t.workflow_name AS name, t.workflow_version AS version,
               count(*) AS tasks, min(t.created_at) AS since
          FROM dex.workflow_task t
         WHERE t.locked_until IS NULL OR t.locked_until <= now()
         GROUP BY t.queue_id, t.workflow_name, t.workflow_version
        UNION ALL
        SELECT a.queue_id, a.name, NULL::integer, count(*), min(a.created_at)
          FROM dex.activity_task a
         WHERE a.status = 'QUEUED' AND a.locked_by IS NULL
         GROUP BY a.queue_id, a.name) w
  JOIN dex.queue q ON q.id = w.queue_id AND q.status = 'ACTIVE'
 CROSS JOIN LATERAL (SELECT dex.last_polled(w.queue_id, w.name, w.version) AS at) p
 WHERE w.since <= now() - idle AND (p.at IS NULL OR p.at <= now() - idle)
 ORDER BY q.name, w.name, w.version
$$;
COMMENT ON FUNCTION dex.unserved(interval) IS
    'Ready tasks that no worker serves (the view dex.unserved, with idle one minute): per queue and workflow (name, version) or activity (name), how many wait, since when, and when a worker that could take them last polled (NULL: none since the server started); only those waiting longer than idle on which no such worker polled for idle. Paused queues are left out. Reads the ready tasks of every queue.';

CREATE VIEW dex.unserved AS SELECT * FROM dex.unserved();
COMMENT ON VIEW dex.unserved IS
    'Ready tasks that no worker serves: per queue and workflow (name, version) or activity (name), the tasks waiting over a minute on which no worker that declared them, nor one that declared nothing, polled for a minute; since when they wait, and when such a worker last polled (NULL: none since the server started).';

GRANT USAGE ON SCHEMA dex TO pg_monitor;
GRANT SELECT ON dex.stat_queues, dex.stat_database, dex.queue_depth, dex.runs_by_status, dex.unserved TO pg_monitor;
-- what dex.queue_depth() reads: no payload, no run id
GRANT SELECT (id, name, kind, status, capacity, partition) ON dex.queue TO pg_monitor;
GRANT SELECT (queue_id, priority, created_at, locked_by, locked_until, workflow_name, workflow_version)
    ON dex.workflow_task TO pg_monitor;
GRANT SELECT (queue_id, priority, status, created_at, locked_by, locked_until, name)
    ON dex.activity_task TO pg_monitor;

-- a new install (after DROP EXTENSION, queue ids start again) starts from zero
SELECT dex.reset_stats();

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
ALTER FUNCTION dex.alter_queue(text, integer, boolean, integer, interval, integer) SECURITY DEFINER;
ALTER FUNCTION dex.grant_queue(text, regrole) SECURITY DEFINER;
ALTER FUNCTION dex.revoke_queue(text, regrole) SECURITY DEFINER;
ALTER FUNCTION dex.reset_stats() SECURITY DEFINER;

GRANT EXECUTE ON FUNCTION
    dex.to_json(text, bytea), dex.from_json(text, jsonb), dex.payload_value(bytea),
    dex.wake_scheduler(), dex.usable_queue_ids()
    TO dex_client, dex_worker, dex_admin;
GRANT EXECUTE ON FUNCTION
    dex.create_run(text, text, jsonb, integer, text, integer, jsonb, text, text, timestamptz, interval, text, interval, interval),
    dex.create_runs(text, text, jsonb[], integer, integer, jsonb, timestamptz, interval, text[], text[], integer[], jsonb[], timestamptz[]),
    dex.get_run(uuid),
    dex.list_runs(text, text, jsonb, timestamptz, timestamptz, timestamptz, timestamptz, uuid, uuid, integer),
    dex.send_external_event(uuid, text, jsonb),
    dex.send_external_event_to_instance(text, text, jsonb, text),
    dex.cancel_run(uuid, text), dex.suspend_run(uuid, text), dex.resume_run(uuid, text),
    dex.terminate_run(uuid, text), dex.restart_run(uuid), dex.reset_run(uuid, integer, text),
    dex.run_attempts(uuid)
    TO dex_client;
GRANT EXECUTE ON PROCEDURE dex.wait_for_run(uuid, interval, text, jsonb, jsonb),
    dex.wait_for_runs(uuid[], interval, text, uuid[]) TO dex_client;
GRANT SELECT ON dex.runs TO dex_client;
GRANT EXECUTE ON FUNCTION
    dex.poll_tasks(text, text, integer, interval, boolean, text[], integer[]),
    dex.poll_tasks_pb(text, text, integer, interval, boolean, text[], integer[]),
    dex.complete_task(uuid, integer, bigint, jsonb), dex.complete_task_pb(uuid, integer, bigint, bytea),
    dex.complete_tasks(uuid[], integer[], bigint[], jsonb[]),
    dex.complete_tasks_pb(uuid[], integer[], bigint[], bytea[]),
    dex.fail_task(uuid, integer, bigint, jsonb), dex.fail_task_pb(uuid, integer, bigint, bytea),
    dex.fail_tasks(uuid[], integer[], bigint[], jsonb[]), dex.fail_tasks_pb(uuid[], integer[], bigint[], bytea[]),
    dex.heartbeat_task(uuid, integer, bigint, interval, jsonb),
    dex.heartbeat_tasks(uuid[], integer[], bigint[], interval, text), dex.stop_waiting(text)
    TO dex_worker;
GRANT EXECUTE ON PROCEDURE dex.wait_for_tasks(text, interval, boolean),
    dex.poll_tasks_wait(text, text, integer, interval, interval, jsonb, boolean, uuid[], integer[], bigint[], jsonb[], boolean[], text[], integer[]),
    dex.poll_tasks_wait_pb(text, text, integer, interval, interval, bytea[], boolean, uuid[], integer[], bigint[], bytea[], boolean[], text[], integer[]) TO dex_worker;
GRANT EXECUTE ON FUNCTION dex.run_history(uuid), dex.run_history_pb(uuid) TO dex_client, dex_worker;
GRANT EXECUTE ON FUNCTION
    dex.create_queue(text, text, integer), dex.alter_queue(text, integer, boolean, integer, interval, integer),
    dex.grant_queue(text, regrole), dex.revoke_queue(text, regrole),
    dex.reset_stats(), dex.stat_counters(), dex.queue_depth(),
    dex.terminate_run(uuid, text), dex.purge_run(uuid), dex.purge_runs(text, text, timestamptz, integer),
    dex.restart_run(uuid), dex.reset_run(uuid, integer, text), dex.run_attempts(uuid),
    dex.set_run_version(uuid, integer), dex.last_polled(integer, text, integer), dex.unserved(interval)
    TO dex_admin;
GRANT SELECT ON dex.stat_queues, dex.stat_database, dex.queue_depth, dex.runs_by_status,
    dex.queue_privileges, dex.unserved TO dex_admin;
-- the monitoring views run their functions with the reader's rights
GRANT EXECUTE ON FUNCTION dex.stat_counters(), dex.queue_depth(), dex.last_polled(integer, text, integer),
    dex.unserved(interval) TO pg_monitor;
GRANT SELECT (id, name, kind, status, capacity, partition) ON dex.queue TO dex_admin;
GRANT SELECT (queue_id, priority, created_at, locked_by, locked_until, workflow_name, workflow_version)
    ON dex.workflow_task TO dex_admin;
GRANT SELECT (queue_id, priority, status, created_at, locked_by, locked_until, name)
    ON dex.activity_task TO dex_admin;

/*
 * Backups: pg_dump dumps the rows of the logged tables and the values of the
 * sequences; pg_restore (or psql) brings them back into a database where it
 * first runs CREATE EXTENSION dex.  See README.md, "Backup and restore", and
 * test/t/010_backup.pl.
 *
 * What is dumped: every logged table (its rows; CREATE EXTENSION makes the
 * table), and the sequences whose values must not go back: lease_version,
 * so that a lock version handed out after a restore is greater than every
 * one handed out before (fencing), and the identity sequences of dex.queue
 * and dex.workflow_inbox, so that new rows do not take ids restored rows
 * hold.  Grants of roles that were dropped (rows the maintenance worker has
 * not removed yet) are left out: their oid would name no role, or another.
 *
 * What is not: the task tables and dex.lease.  Both are UNLOGGED, derived
 * data: tasks are rebuilt from runs, history, inbox and activity_retry, and
 * a lease held at the time of the dump is void in the restored database.
 * The queues' task partitions are members of the extension (src/api_queues.c),
 * so pg_dump leaves them out; the trigger below makes them again as the
 * restored queues arrive, and the scheduler then rebuilds the tasks
 * (src/scheduler.c).
 */
CREATE FUNCTION dex.queue_partition()
RETURNS trigger
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_queue_partition_trigger';
COMMENT ON FUNCTION dex.queue_partition() IS
    'Trigger AFTER INSERT on dex.queue: makes the task partition of each new queue, as a member of the extension; a queue row that dex.create_queue did not insert is a restore, after which the scheduler rebuilds the task tables.';
REVOKE ALL ON FUNCTION dex.queue_partition() FROM PUBLIC;
CREATE TRIGGER queue_partition AFTER INSERT ON dex.queue
    FOR EACH ROW EXECUTE FUNCTION dex.queue_partition();

SELECT pg_catalog.pg_extension_config_dump('dex.queue', '');
SELECT pg_catalog.pg_extension_config_dump('dex.queue_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('dex.queue_grant',
    'WHERE EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) grantee)');
SELECT pg_catalog.pg_extension_config_dump('dex.workflow_run', '');
SELECT pg_catalog.pg_extension_config_dump('dex.run_instance', '');
SELECT pg_catalog.pg_extension_config_dump('dex.workflow_inbox', '');
SELECT pg_catalog.pg_extension_config_dump('dex.workflow_inbox_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('dex.workflow_history', '');
SELECT pg_catalog.pg_extension_config_dump('dex.concurrency_slot', '');
SELECT pg_catalog.pg_extension_config_dump('dex.concurrency_wait', '');
SELECT pg_catalog.pg_extension_config_dump('dex.external_event', '');
SELECT pg_catalog.pg_extension_config_dump('dex.activity_retry', '');
SELECT pg_catalog.pg_extension_config_dump('dex.run_timer', '');
SELECT pg_catalog.pg_extension_config_dump('dex.task_attempt', '');
SELECT pg_catalog.pg_extension_config_dump('dex.task_attempt_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('dex.lease_version', '');

-- API tokens (REST API, issue 19)
/*
 * API tokens let clients that do not speak SQL use dex through the REST API
 * (python3 -m dex serve): each token maps to a database role, and the server,
 * whose login role is a member of the roles it may act as, runs every request
 * of the token with SET ROLE to that role, so that PostgreSQL's grants and
 * dex's queue grants decide what it may do, never more.  A token is 'dex_'
 * and 64 hex digits (244 random bits from gen_random_uuid), shown once by
 * dex.create_api_token; only its SHA-256 is stored (no salt is needed at
 * that entropy).  A token names its role by oid and by name: a dropped role,
 * or another created later with its oid, has no token, and renaming a role
 * voids its tokens.  A token never acts as a superuser.
 *
 * The caller of these functions is the role set with SET ROLE, else the
 * session user: a SECURITY DEFINER function cannot see the role that called
 * it (see Roles and privileges), and these write a table nobody else may.
 * Called from another role's SECURITY DEFINER function they still check the
 * session's role, which only ever refuses more.
 */
CREATE TABLE dex.api_token (
    name        text PRIMARY KEY,
    role        regrole NOT NULL,
    role_name   name NOT NULL,          -- the role's name when the token was made
    token_hash  bytea NOT NULL UNIQUE,  -- sha256 of the token
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    created_by  name NOT NULL,
    expires_at  timestamptz
);
COMMENT ON TABLE dex.api_token IS
    'API tokens of the REST API: the SHA-256 of each token and the role its requests run as (dex.create_api_token, dex.revoke_api_token).';
REVOKE ALL ON dex.api_token FROM PUBLIC;

CREATE FUNCTION dex.create_api_token(name text, role regrole, expires_at timestamptz DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller name := CASE pg_catalog.current_setting('role')
                       WHEN 'none' THEN SESSION_USER
                       ELSE pg_catalog.current_setting('role') END;
    token text;
BEGIN
    IF create_api_token.name IS NULL OR create_api_token.role IS NULL THEN
        RAISE EXCEPTION 'token name and role must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF create_api_token.name OPERATOR(pg_catalog.!~) '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$' THEN
        RAISE EXCEPTION 'invalid token name "%"', create_api_token.name
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A name has 1 to 128 letters, digits, "_", "-" or ".", and starts with a letter or digit.';
    END IF;
    IF create_api_token.expires_at IS NOT NULL
       AND NOT (pg_catalog.isfinite(create_api_token.expires_at)
                AND create_api_token.expires_at OPERATOR(pg_catalog.>) pg_catalog.now()) THEN
        RAISE EXCEPTION 'a token must expire at a finite time in the future'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r
         WHERE r.oid OPERATOR(pg_catalog.=) create_api_token.role) THEN
        RAISE EXCEPTION 'a token may not act as superuser %', create_api_token.role
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NOT pg_catalog.pg_has_role(caller, create_api_token.role, 'MEMBER') THEN
        RAISE EXCEPTION 'permission denied to make a token for role %', create_api_token.role
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = pg_catalog.format('Only members of role %s may make its tokens; %I is not one.',
                                             create_api_token.role, caller);
    END IF;
    token := 'dex_' OPERATOR(pg_catalog.||)
             pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', '') OPERATOR(pg_catalog.||)
             pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', '');
    INSERT INTO dex.api_token (name, role, role_name, token_hash, created_by, expires_at)
    SELECT create_api_token.name, r.oid, r.rolname,
           pg_catalog.sha256(pg_catalog.convert_to(token, 'UTF8')), caller, create_api_token.expires_at
      FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) create_api_token.role
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'API token "%" already exists', create_api_token.name
            USING ERRCODE = 'duplicate_object';
    END IF;
    RETURN token;
END
$$;
COMMENT ON FUNCTION dex.create_api_token(text, regrole, timestamptz) IS
    'Make an API token of the REST API whose requests run as role (never a superuser; the caller must be a member of it), valid until expires_at (NULL: until revoked); returns the token, which is not stored and cannot be shown again.';

CREATE FUNCTION dex.revoke_api_token(name text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF revoke_api_token.name IS NULL THEN
        RAISE EXCEPTION 'token name must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    DELETE FROM dex.api_token t WHERE t.name OPERATOR(pg_catalog.=) revoke_api_token.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'API token "%" does not exist', revoke_api_token.name
            USING ERRCODE = 'undefined_object';
    END IF;
END
$$;
COMMENT ON FUNCTION dex.revoke_api_token(text) IS
    'Delete an API token: the REST API refuses it from its next request on.';

CREATE FUNCTION dex.authenticate_api_token(token text)
RETURNS name
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT r.rolname
  FROM dex.api_token t
  JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) t.role
                            AND r.rolname OPERATOR(pg_catalog.=) t.role_name
 WHERE t.token_hash OPERATOR(pg_catalog.=) pg_catalog.sha256(pg_catalog.convert_to(authenticate_api_token.token, 'UTF8'))
   AND (t.expires_at IS NULL OR t.expires_at OPERATOR(pg_catalog.>) pg_catalog.now())
   AND NOT r.rolsuper
   AND pg_catalog.pg_has_role(CASE pg_catalog.current_setting('role')
                                  WHEN 'none' THEN SESSION_USER
                                  ELSE pg_catalog.current_setting('role')::name END,
                              r.oid, 'MEMBER')
$$;
COMMENT ON FUNCTION dex.authenticate_api_token(text) IS
    'The role an API token''s requests run as, for the REST API server: NULL when the token is unknown, expired or revoked, its role was dropped, renamed or made superuser, or the caller (the server''s login role) is not a member of it.';

CREATE VIEW dex.api_tokens AS
SELECT t.name, t.role, t.created_at, t.created_by, t.expires_at
  FROM dex.api_token t;
COMMENT ON VIEW dex.api_tokens IS
    'The API tokens of the REST API, without their hashes: name, the role their requests run as, who made them and when, when they expire.';

ALTER FUNCTION dex.create_api_token(text, regrole, timestamptz) SECURITY DEFINER;
ALTER FUNCTION dex.revoke_api_token(text) SECURITY DEFINER;
ALTER FUNCTION dex.authenticate_api_token(text) SECURITY DEFINER;
REVOKE ALL ON FUNCTION dex.create_api_token(text, regrole, timestamptz), dex.revoke_api_token(text),
    dex.authenticate_api_token(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.create_api_token(text, regrole, timestamptz), dex.revoke_api_token(text)
    TO dex_admin;
GRANT EXECUTE ON FUNCTION dex.authenticate_api_token(text) TO dex_client, dex_worker, dex_admin;
GRANT SELECT ON dex.api_tokens TO dex_admin;
SELECT pg_catalog.pg_extension_config_dump('dex.api_token',
    'WHERE EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) role)');

-- Latency histograms (metrics, issue 19)
/*
 * Kept by dex in shared memory (src/shmem/latency.c), like the counters of
 * dex.stat_counters(): no table is written, a rolled-back call still
 * counts, and dex.reset_stats() zeroes the current database's.  Each row is
 * one histogram in the shape Prometheus wants: le holds the finite upper
 * bounds of the buckets in seconds, bucket the cumulative count of
 * observations at most each bound (the +Inf bucket is count), sum the total
 * in seconds.  prometheus-postgres-exporter reads them with the usage
 * HISTOGRAM (contrib/prometheus/dex-queries.yaml).
 */
CREATE FUNCTION dex.latency_histograms(
    OUT datid oid, OUT histogram text, OUT queue_id integer, OUT workflow text,
    OUT le double precision[], OUT bucket bigint[], OUT sum double precision, OUT count bigint)
RETURNS SETOF record
LANGUAGE C
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'dex_latency_histograms';
COMMENT ON FUNCTION dex.latency_histograms() IS
    'The latency histograms in shared memory, one row per histogram in use of every database since the server started or dex.reset_stats: task_wait, activity_execution and timer_lag per queue (queue_id), run_duration per workflow name (workflow); le, the buckets'' upper bounds in seconds; bucket, the cumulative counts (the +Inf bucket is count); sum in seconds; count. Calls count even if their transaction rolls back. Empty if dex is not preloaded.';

CREATE VIEW dex.stat_latency AS
SELECT h.histogram, q.name AS queue, h.workflow, h.le, h.bucket, h.sum, h.count
  FROM dex.latency_histograms() h
  LEFT JOIN dex.queue q ON q.id OPERATOR(pg_catalog.=) h.queue_id
 WHERE h.datid OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                        WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
   AND (h.workflow IS NOT NULL OR q.name IS NOT NULL);
COMMENT ON VIEW dex.stat_latency IS
    'Latency histograms of this database since the server started or dex.reset_stats, in Prometheus'' shape: task_wait (per queue: from a task becoming ready, made, its lease expired or its retry backoff over, to a poll handing it out), activity_execution (per activity queue: from an attempt''s lease to its completion), run_duration (per workflow: from a run''s creation to its end) and timer_lag (per workflow queue: from a timer or delayed event falling due to the scheduler waking its run); le, the buckets'' upper bounds in seconds, bucket the cumulative counts (+Inf: count), sum in seconds, count. From shared memory: free to read.';

COMMENT ON FUNCTION dex.reset_stats() IS
    'Zero the activity counters (dex.stat_queues, dex.stat_database) and the latency histograms (dex.stat_latency) of the current database, and the counters'' overflow entry. Superusers only, unless granted.';

REVOKE ALL ON FUNCTION dex.latency_histograms() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.latency_histograms() TO pg_monitor, dex_admin;
GRANT SELECT ON dex.stat_latency TO pg_monitor, dex_admin;

/* ---- Queue lookups kept across transactions (1.7) ---- */

/*
 * Backends keep the queues they looked up from one transaction to the next
 * (src/engine/queues.c); these triggers tell them, at commit, that a queue
 * or its grants changed, whoever wrote them.
 */
CREATE FUNCTION dex.queue_changed()
RETURNS trigger
LANGUAGE C
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'dex_queue_changed_trigger';
COMMENT ON FUNCTION dex.queue_changed() IS
    'Trigger AFTER INSERT, UPDATE, DELETE or TRUNCATE FOR EACH STATEMENT on dex.queue and dex.queue_grant: every backend forgets the queues it looked up when the transaction commits.';
REVOKE ALL ON FUNCTION dex.queue_changed() FROM PUBLIC;
CREATE TRIGGER queue_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON dex.queue
    FOR EACH STATEMENT EXECUTE FUNCTION dex.queue_changed();
CREATE TRIGGER queue_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON dex.queue_grant
    FOR EACH STATEMENT EXECUTE FUNCTION dex.queue_changed();

/* ---- Debounce, batch forms, signalling another run (1.7) ---- */

-- Debounce (dex.create_run's debounce_key): per queue, workflow and key, the
-- run the key's calls update while it has not started (status DELAYED), and
-- when the first of them came.  A row whose run has started or ended is
-- replaced by the next call's; dex.purge_run(s) and retention delete it with
-- its run.
CREATE TABLE dex.run_debounce (
    queue_id        integer NOT NULL,
    workflow_name   text NOT NULL,
    debounce_key    text NOT NULL,
    run_id          uuid NOT NULL,
    first_at        timestamptz NOT NULL,
    PRIMARY KEY (queue_id, workflow_name, debounce_key)
);
CREATE INDEX run_debounce_run_idx ON dex.run_debounce (run_id);
COMMENT ON TABLE dex.run_debounce IS
    'The run each debounce key (dex.create_run''s debounce_key, per queue and workflow) updates while it has not started, and when the key''s window opened.';
SELECT pg_catalog.pg_extension_config_dump('dex.run_debounce', '');

CREATE FUNCTION dex.send_external_events(run_ids uuid[], event_ids text[], payloads jsonb[] DEFAULT NULL)
RETURNS TABLE (run_id uuid, event_id text, delivered boolean, outcome text)
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_send_external_events';
COMMENT ON FUNCTION dex.send_external_events(uuid[], text[], jsonb[]) IS
    'Send many external events in one call (as dex.send_external_event): event_ids[i] with payloads[i] to run_ids[i]; one row per event, in order, with its outcome: DELIVERED, DUPLICATE (the run received an event with this id before: dropped), TARGET_ENDED or TARGET_NOT_FOUND (delivered false) instead of an error.';
REVOKE ALL ON FUNCTION dex.send_external_events(uuid[], text[], jsonb[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.send_external_events(uuid[], text[], jsonb[]) TO dex_client;

/* ---- Schedules (1.7) ---- */
/*
 * A schedule starts runs of a workflow at the ticks of a cron expression in
 * a time zone, or every fixed interval (src/util/cron.c,
 * src/engine/schedules.c).  The scheduler background worker fires each tick
 * at its due time (the tick plus the schedule's deterministic jitter) in the
 * transaction that advances the schedule, so a tick starts at most one run
 * whatever crashes; the run's instance id is derived from the schedule and
 * the tick.  next_tick is the next tick not yet handled (NULL: the schedule
 * has ended), next_fire_at when it fires (next_tick plus jitter), due_at
 * when the scheduler looks at the schedule next (the fire time, or sooner
 * to start a buffered tick; NULL while paused or ended): the scheduler
 * sleeps until the earliest.
 */
CREATE TABLE dex.schedule (
    id               integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name             text NOT NULL UNIQUE,
    workflow_name    text NOT NULL,
    workflow_version integer NOT NULL,
    queue_id         integer NOT NULL,
    cron             text,
    every            interval,
    argument         bytea,
    timezone         text NOT NULL,
    overlap          text NOT NULL
                     CHECK (overlap IN ('skip', 'buffer_one', 'allow_all', 'cancel_other', 'terminate_other')),
    catchup_window   interval NOT NULL,
    jitter           interval NOT NULL,
    start_at         timestamptz,
    end_at           timestamptz,
    paused           boolean NOT NULL DEFAULT false,
    note             text,
    labels           jsonb,
    next_tick        timestamptz,
    next_fire_at     timestamptz,
    due_at           timestamptz,
    buffered_tick    timestamptz,
    last_tick        timestamptz,
    last_run_id      uuid,
    runs_started     bigint NOT NULL DEFAULT 0,
    skipped_overlap  bigint NOT NULL DEFAULT 0,
    skipped_missed   bigint NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CHECK ((cron IS NULL) <> (every IS NULL))
);
CREATE INDEX schedule_due ON dex.schedule (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX schedule_buffered ON dex.schedule (id) WHERE buffered_tick IS NOT NULL;
COMMENT ON TABLE dex.schedule IS
    'Schedules: a workflow started at the ticks of a cron expression (in a time zone) or every interval, by the scheduler worker. Written by the dex.*_schedule functions and the scheduler only.';

-- The runs a schedule started that may still be active: what its overlap
-- policy looks at.  Rows of runs that ended are removed when the schedule
-- next looks (schedules.c).
CREATE TABLE dex.schedule_run (
    schedule_id integer NOT NULL,
    run_id      uuid NOT NULL,
    tick        timestamptz NOT NULL,
    PRIMARY KEY (schedule_id, run_id)
);
COMMENT ON TABLE dex.schedule_run IS
    'The runs each schedule started that may still be active (its overlap policy looks at them); rows of ended runs go when the schedule next fires.';
REVOKE ALL ON dex.schedule, dex.schedule_run FROM PUBLIC;

CREATE FUNCTION dex.create_schedule(
    name text,
    workflow text,
    queue text,
    cron text DEFAULT NULL,
    every interval DEFAULT NULL,
    argument jsonb DEFAULT NULL,
    version integer DEFAULT 1,
    timezone text DEFAULT 'UTC',
    overlap text DEFAULT 'skip',
    catchup_window interval DEFAULT '1 minute',
    jitter interval DEFAULT '0',
    start_at timestamptz DEFAULT NULL,
    end_at timestamptz DEFAULT NULL,
    paused boolean DEFAULT false,
    labels jsonb DEFAULT NULL)
RETURNS timestamptz
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_create_schedule';
COMMENT ON FUNCTION dex.create_schedule(text, text, text, text, interval, jsonb, integer, text, text, interval, interval, timestamptz, timestamptz, boolean, jsonb) IS
    'Create a schedule that starts runs of a workflow on a workflow queue at the ticks of a five-field cron expression (or @hourly-style shorthand) in a time zone, or every fixed interval (from start_at, else from 1970-01-01 UTC); overlap (skip, buffer_one, allow_all, cancel_other, terminate_other) decides what a tick does while a run it started is active; ticks missed by more than catchup_window are skipped and counted; jitter delays each tick by a deterministic amount below it. Returns the next fire time (NULL if paused or none).';

CREATE FUNCTION dex.alter_schedule(
    name text,
    cron text DEFAULT NULL,
    every interval DEFAULT NULL,
    argument jsonb DEFAULT NULL,
    version integer DEFAULT NULL,
    timezone text DEFAULT NULL,
    overlap text DEFAULT NULL,
    catchup_window interval DEFAULT NULL,
    jitter interval DEFAULT NULL,
    start_at timestamptz DEFAULT NULL,
    end_at timestamptz DEFAULT NULL,
    labels jsonb DEFAULT NULL,
    workflow text DEFAULT NULL,
    queue text DEFAULT NULL)
RETURNS timestamptz
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_alter_schedule';
COMMENT ON FUNCTION dex.alter_schedule(text, text, interval, jsonb, integer, text, text, interval, interval, timestamptz, timestamptz, jsonb, text, text) IS
    'Change a schedule; NULL leaves a setting as it is (a cron replaces an every and the reverse; start_at => ''-infinity'' and end_at => ''infinity'' remove them). The next tick is computed afresh from now. Returns the next fire time.';

CREATE FUNCTION dex.pause_schedule(name text, note text DEFAULT NULL)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_pause_schedule';
COMMENT ON FUNCTION dex.pause_schedule(text, text) IS
    'Pause a schedule, with an optional note saying why: its ticks start nothing until it is unpaused (they are not caught up).';

CREATE FUNCTION dex.unpause_schedule(name text)
RETURNS timestamptz
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_unpause_schedule';
COMMENT ON FUNCTION dex.unpause_schedule(text) IS
    'Unpause a schedule: it fires again from its next tick after now; returns that fire time.';

CREATE FUNCTION dex.delete_schedule(name text)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_delete_schedule';
COMMENT ON FUNCTION dex.delete_schedule(text) IS
    'Delete a schedule; the runs it started go on.';

CREATE FUNCTION dex.trigger_schedule(name text, overlap text DEFAULT NULL)
RETURNS uuid
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_trigger_schedule';
COMMENT ON FUNCTION dex.trigger_schedule(text, text) IS
    'Fire a schedule now, as a tick at the transaction''s time, under its overlap policy or the one given; returns the run started, or NULL if the policy started none. Its regular ticks are unchanged.';

CREATE FUNCTION dex.backfill_schedule(name text, "from" timestamptz, "to" timestamptz, overlap text DEFAULT NULL)
RETURNS TABLE (tick timestamptz, run_id uuid)
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_backfill_schedule';
COMMENT ON FUNCTION dex.backfill_schedule(text, timestamptz, timestamptz, text) IS
    'Fire the ticks of a schedule''s cron expression or interval from "from" (included) to "to" (excluded), whatever its start_at and end_at, at most 1000, one after another now, under its overlap policy or the one given: a row per tick with the run started (NULL if the policy started none).';

CREATE FUNCTION dex.schedule_next_times(name text, n integer DEFAULT 10)
RETURNS SETOF timestamptz
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_schedule_next_times';
COMMENT ON FUNCTION dex.schedule_next_times(text, integer) IS
    'The next n (1 to 1000) ticks of a schedule after now, within its start_at and end_at, paused or not (without jitter).';

CREATE VIEW dex.schedules AS
SELECT s.name, s.workflow_name, s.workflow_version, q.name AS queue, s.cron, s.every, s.timezone,
       s.overlap, s.catchup_window, s.jitter, s.start_at, s.end_at, s.paused, s.note,
       dex.payload_value(s.argument) AS argument,
       s.labels, s.next_tick, CASE WHEN NOT s.paused THEN s.next_fire_at END AS next_fire_at,
       s.buffered_tick, s.last_tick, s.last_run_id, r.status AS last_run_status,
       s.runs_started, s.skipped_overlap, s.skipped_missed,
       s.skipped_overlap OPERATOR(pg_catalog.+) s.skipped_missed AS skipped,
       s.created_at, s.updated_at
  FROM dex.schedule s
  JOIN dex.queue q ON q.id OPERATOR(pg_catalog.=) s.queue_id
  LEFT JOIN dex.workflow_run r ON r.id OPERATOR(pg_catalog.=) s.last_run_id;
COMMENT ON VIEW dex.schedules IS
    'Schedules: their settings; next_tick, the next tick, and next_fire_at, when it fires (the tick plus jitter; NULL while paused or after the end); the last tick that started a run, that run and its status; runs started; ticks skipped because a run was active (skipped_overlap), because they were missed by more than catchup_window (skipped_missed), and both (skipped).';

ALTER FUNCTION dex.create_schedule(text, text, text, text, interval, jsonb, integer, text, text, interval, interval, timestamptz, timestamptz, boolean, jsonb) SECURITY DEFINER;
ALTER FUNCTION dex.alter_schedule(text, text, interval, jsonb, integer, text, text, interval, interval, timestamptz, timestamptz, jsonb, text, text) SECURITY DEFINER;
ALTER FUNCTION dex.pause_schedule(text, text) SECURITY DEFINER;
ALTER FUNCTION dex.unpause_schedule(text) SECURITY DEFINER;
ALTER FUNCTION dex.delete_schedule(text) SECURITY DEFINER;
ALTER FUNCTION dex.trigger_schedule(text, text) SECURITY DEFINER;
ALTER FUNCTION dex.backfill_schedule(text, timestamptz, timestamptz, text) SECURITY DEFINER;
ALTER FUNCTION dex.schedule_next_times(text, integer) SECURITY DEFINER;
REVOKE ALL ON FUNCTION
    dex.create_schedule(text, text, text, text, interval, jsonb, integer, text, text, interval, interval, timestamptz, timestamptz, boolean, jsonb),
    dex.alter_schedule(text, text, interval, jsonb, integer, text, text, interval, interval, timestamptz, timestamptz, jsonb, text, text),
    dex.pause_schedule(text, text), dex.unpause_schedule(text), dex.delete_schedule(text),
    dex.trigger_schedule(text, text), dex.backfill_schedule(text, timestamptz, timestamptz, text),
    dex.schedule_next_times(text, integer)
    FROM PUBLIC;
-- schedules are managed like queues: by dex_admin (and superusers)
GRANT EXECUTE ON FUNCTION
    dex.create_schedule(text, text, text, text, interval, jsonb, integer, text, text, interval, interval, timestamptz, timestamptz, boolean, jsonb),
    dex.alter_schedule(text, text, interval, jsonb, integer, text, text, interval, interval, timestamptz, timestamptz, jsonb, text, text),
    dex.pause_schedule(text, text), dex.unpause_schedule(text), dex.delete_schedule(text),
    dex.trigger_schedule(text, text), dex.backfill_schedule(text, timestamptz, timestamptz, text),
    dex.schedule_next_times(text, integer)
    TO dex_admin;
GRANT SELECT ON dex.schedules TO dex_admin;
SELECT pg_catalog.pg_extension_config_dump('dex.schedule', '');
SELECT pg_catalog.pg_extension_config_dump('dex.schedule_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('dex.schedule_run', '');

/* ---- Flow control: rate limits and concurrency limits (1.7) ---- */
/*
 * Rate limits: a queue with rate_limit n and rate_period p hands out at most
 * n tasks at once and then n per p, across every worker and backend.  The
 * limit is kept here; its token bucket lives in shared memory
 * (src/shmem/rate.c): polls write no table.  dex.alter_queue sets it.
 *
 * Concurrency limits: a concurrency key admits up to n runs at once, n the
 * key's own limit (dex.concurrency_limit, dex.set_concurrency_limit) or else
 * its queue's concurrency_limit (1 by default: one run at a time).  Each
 * admitted run holds a numbered slot of its key (dex.concurrency_slot.slot,
 * 0 to n - 1; src/engine/keys.c).
 */
ALTER TABLE dex.queue
    ADD COLUMN rate_limit integer CHECK (rate_limit BETWEEN 1 AND 1000000),
    ADD COLUMN rate_period interval CHECK (rate_period BETWEEN interval '1 millisecond' AND interval '1 day'),
    ADD COLUMN concurrency_limit integer NOT NULL DEFAULT 1 CHECK (concurrency_limit BETWEEN 1 AND 1000),
    ADD CONSTRAINT queue_rate_check CHECK ((rate_limit IS NULL) = (rate_period IS NULL));
COMMENT ON COLUMN dex.queue.rate_limit IS
    'Most tasks handed out per rate_period (a token bucket in shared memory); NULL: no rate limit.';
COMMENT ON COLUMN dex.queue.concurrency_limit IS
    'Most runs of one concurrency key active at once, for keys without a limit of their own (dex.concurrency_limit).';

ALTER TABLE dex.concurrency_slot
    ADD COLUMN slot integer NOT NULL DEFAULT 0,
    DROP CONSTRAINT concurrency_slot_pkey,
    ADD PRIMARY KEY (queue_id, key, slot);
COMMENT ON COLUMN dex.concurrency_slot.slot IS
    'Which of the key''s slots the run holds: 0 to its concurrency limit - 1.';

CREATE TABLE dex.concurrency_limit (
    queue_id    integer NOT NULL,
    key         text NOT NULL,
    max_runs    integer NOT NULL CHECK (max_runs BETWEEN 1 AND 1000),
    PRIMARY KEY (queue_id, key)
);
COMMENT ON TABLE dex.concurrency_limit IS
    'Concurrency keys with a limit of their own: most runs of the key active at once on its workflow queue.';
SELECT pg_catalog.pg_extension_config_dump('dex.concurrency_limit', '');

CREATE FUNCTION dex.set_concurrency_limit(queue text, key text, max_runs integer)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_set_concurrency_limit';
COMMENT ON FUNCTION dex.set_concurrency_limit(text, text, integer) IS
    'Let up to max_runs runs of a concurrency key of a workflow queue be active at once (1 to 1000); NULL gives the key its queue''s concurrency_limit back. Raised, it admits waiting runs at once; lowered, the runs above it finish first.';
ALTER FUNCTION dex.set_concurrency_limit(text, text, integer) SECURITY DEFINER;
REVOKE ALL ON FUNCTION dex.set_concurrency_limit(text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.set_concurrency_limit(text, text, integer) TO dex_admin;

CREATE FUNCTION dex.rate_limits(
    OUT datid oid, OUT queue_id integer, OUT rate_limit integer, OUT rate_period interval,
    OUT tokens double precision, OUT tasks_granted bigint, OUT polls_throttled bigint,
    OUT next_token_at timestamptz)
RETURNS SETOF record
LANGUAGE C
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'dex_rate_limits';
COMMENT ON FUNCTION dex.rate_limits() IS
    'The token buckets of rate-limited queues in shared memory, of every database: the limit they enforce, the tokens they hold now, the tasks they let polls lease and the polls they cut short since they were made (a bucket is made full by the first poll after the server starts or the limit is set), and when the next token comes (NULL: one is there). Empty if dex is not preloaded.';
REVOKE ALL ON FUNCTION dex.rate_limits() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.rate_limits() TO pg_monitor, dex_admin;

CREATE VIEW dex.queue_limits AS
SELECT q.name AS queue,
       q.kind,
       q.capacity,
       q.rate_limit,
       q.rate_period,
       b.tokens,
       b.next_token_at,
       coalesce(b.tasks_granted, 0) AS tasks_granted,
       coalesce(b.polls_throttled, 0) AS polls_throttled,
       q.concurrency_limit,
       (SELECT pg_catalog.count(*) FROM dex.concurrency_limit l
         WHERE l.queue_id OPERATOR(pg_catalog.=) q.id) AS keys_with_limits
  FROM dex.queue q
  LEFT JOIN dex.rate_limits() b
    ON b.datid OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                        WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
   AND b.queue_id OPERATOR(pg_catalog.=) q.id
   AND q.rate_limit IS NOT NULL;
COMMENT ON VIEW dex.queue_limits IS
    'The flow control of each queue: capacity, rate limit (tasks per period) with its bucket now (tokens NULL: no poll made it yet, it is full), tasks it let through and polls it cut short, and the concurrency limit of its keys with how many keys have their own.';

CREATE VIEW dex.concurrency_limits AS
SELECT q.name AS queue,
       l.key,
       l.max_runs,
       (SELECT pg_catalog.count(*) FROM dex.concurrency_slot s
         WHERE s.queue_id OPERATOR(pg_catalog.=) l.queue_id AND s.key OPERATOR(pg_catalog.=) l.key) AS active,
       (SELECT pg_catalog.count(*) FROM dex.concurrency_wait w
         WHERE w.queue_id OPERATOR(pg_catalog.=) l.queue_id AND w.key OPERATOR(pg_catalog.=) l.key) AS waiting
  FROM dex.concurrency_limit l
  JOIN dex.queue q ON q.id OPERATOR(pg_catalog.=) l.queue_id;
COMMENT ON VIEW dex.concurrency_limits IS
    'Concurrency keys with a limit of their own: the limit, the runs of the key active now (holding a slot) and those waiting.';
GRANT SELECT ON dex.queue_limits, dex.concurrency_limits TO dex_admin;
GRANT SELECT ON dex.queue_limits TO pg_monitor;

/* ---- Workflows defined in JSON (1.7) ---- */

/*
 * A definition is a workflow written as a JSON document (README.md,
 * "Workflows defined in JSON"): its steps are interpreted inside the server
 * by the dex interpreter worker (src/workers/interpreter.c), which takes the
 * workflow tasks of the runs of a definition and completes them with the
 * same commands a coded workflow returns.  A run of a definition is an
 * ordinary run, started with dex.create_run by the definition's name and
 * version.  owner: the role that created the definition, whose privileges
 * its SQL steps run with.
 */
CREATE TABLE dex.definition (
    name        text NOT NULL,
    version     integer NOT NULL CHECK (version > 0),
    definition  jsonb NOT NULL,
    owner       regrole NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version)
);
COMMENT ON TABLE dex.definition IS
    'Workflows defined in JSON (dex.create_definition): validated documents the interpreter worker runs; owner is the role whose privileges their SQL steps have.';

/*
 * The user tasks that wait for a person: a row while the step waits, written
 * by the interpreter in the transaction that starts the wait and deleted by
 * dex.complete_user_task (which delivers the external event the run waits
 * for, "user:<step>:<wait id>"), so that a second completion finds no row.
 */
CREATE TABLE dex.user_task (
    run_id            uuid NOT NULL REFERENCES dex.workflow_run (id) ON DELETE CASCADE,
    step              text NOT NULL,
    wait_id           integer NOT NULL,
    assignee          text,
    candidate_groups  text[],
    form              jsonb,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, step)
);
COMMENT ON TABLE dex.user_task IS
    'User tasks of runs of definitions that wait for a person (dex.user_tasks, dex.complete_user_task).';

SELECT pg_catalog.pg_extension_config_dump('dex.definition', '');
SELECT pg_catalog.pg_extension_config_dump('dex.user_task', '');

CREATE FUNCTION dex.create_definition(name text, version integer, definition jsonb)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_create_definition';
COMMENT ON FUNCTION dex.create_definition(text, integer, jsonb) IS
    'Store a workflow defined in JSON under a name and version, after validating it against the schema of README.md "Workflows defined in JSON" (22023 with the JSON path of the offending element); 42710 if that version exists. Its SQL steps run with the privileges of the calling role. Runs start with dex.create_run(name, queue, variables, version).';

CREATE FUNCTION dex.get_definition(name text, version integer DEFAULT NULL)
RETURNS jsonb
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_get_definition';
COMMENT ON FUNCTION dex.get_definition(text, integer) IS
    'A definition''s JSON document: the given version, or the latest; NULL if there is none.';

CREATE FUNCTION dex.list_definitions(name text DEFAULT NULL)
RETURNS TABLE (name text, version integer, owner regrole, created_at timestamptz, steps integer)
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_list_definitions';
COMMENT ON FUNCTION dex.list_definitions(text) IS
    'The definitions (of one name, or all), by name and version: owner, creation time, number of steps.';

CREATE FUNCTION dex.delete_definition(name text, version integer)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_delete_definition';
COMMENT ON FUNCTION dex.delete_definition(text, integer) IS
    'Delete a definition; refused (55006) while runs of it have not ended (it reads every run to know), 42704 if it does not exist. Runs that ended keep their history.';

CREATE FUNCTION dex.user_tasks(run_id uuid DEFAULT NULL, assignee text DEFAULT NULL,
                               candidate_group text DEFAULT NULL)
RETURNS TABLE (run_id uuid, step text, assignee text, candidate_groups text[], form jsonb,
               workflow_name text, workflow_version integer, created_at timestamptz)
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_user_tasks';
COMMENT ON FUNCTION dex.user_tasks(uuid, text, text) IS
    'The user tasks waiting for a person, of runs that have not ended, on queues the caller may use: of one run, of an assignee, or of a candidate group (all when NULL), oldest first.';

CREATE FUNCTION dex.complete_user_task(run_id uuid, step text, variables jsonb DEFAULT NULL)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_complete_user_task';
COMMENT ON FUNCTION dex.complete_user_task(uuid, text, jsonb) IS
    'Complete the user task a run of a definition waits for at a step: variables (a JSON object) are merged into the run''s variables and the run goes on. Once only: a second completion, or one for a step that does not wait, is refused (55000).';

REVOKE ALL ON dex.definition, dex.user_task FROM PUBLIC;
REVOKE ALL ON FUNCTION dex.create_definition(text, integer, jsonb), dex.get_definition(text, integer),
    dex.list_definitions(text), dex.delete_definition(text, integer), dex.user_tasks(uuid, text, text),
    dex.complete_user_task(uuid, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.create_definition(text, integer, jsonb), dex.delete_definition(text, integer)
    TO dex_admin;
GRANT EXECUTE ON FUNCTION dex.get_definition(text, integer), dex.list_definitions(text),
    dex.user_tasks(uuid, text, text), dex.complete_user_task(uuid, text, jsonb)
    TO dex_client, dex_admin;
