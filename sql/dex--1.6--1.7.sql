/*
 * dex 1.6 -> 1.7: ALTER EXTENSION dex UPDATE TO '1.7'.
 *
 * test/t/009_upgrade.pl checks that an updated database has exactly the
 * objects of a fresh 1.7 install.
 */
\echo Use "ALTER EXTENSION dex UPDATE TO '1.7'" to load this file. \quit

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

-- dex.create_run takes debounce_key, debounce and debounce_max; dex.create_runs
-- takes per-run arrays and returns (id, created): new signatures, the old
-- ones go (calls written for them still work: the new arguments come last,
-- with defaults).
DROP FUNCTION dex.create_run(text, text, jsonb, integer, text, integer, jsonb, text, text, timestamptz, interval);
DROP FUNCTION dex.create_runs(text, text, jsonb[], integer, integer, jsonb, timestamptz, interval);

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

REVOKE ALL ON FUNCTION dex.create_run(text, text, jsonb, integer, text, integer, jsonb, text, text, timestamptz, interval, text, interval, interval),
    dex.create_runs(text, text, jsonb[], integer, integer, jsonb, timestamptz, interval, text[], text[], integer[], jsonb[], timestamptz[])
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.create_run(text, text, jsonb, integer, text, integer, jsonb, text, text, timestamptz, interval, text, interval, interval), dex.create_runs(text, text, jsonb[], integer, integer, jsonb, timestamptz, interval, text[], text[], integer[], jsonb[], timestamptz[]) TO dex_client;

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
-- dex.alter_queue gains the limits of flow control: a new signature (the old
-- calls, by position or by name, keep working)
DROP FUNCTION dex.alter_queue(text, integer, boolean);
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
ALTER FUNCTION dex.alter_queue(text, integer, boolean, integer, interval, integer) SECURITY DEFINER;
REVOKE ALL ON FUNCTION dex.alter_queue(text, integer, boolean, integer, interval, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.alter_queue(text, integer, boolean, integer, interval, integer) TO dex_admin;

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
