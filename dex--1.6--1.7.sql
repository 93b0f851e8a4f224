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
