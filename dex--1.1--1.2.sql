/*
 * dex 1.1 -> 1.2: ALTER EXTENSION dex UPDATE TO '1.2'.
 *
 * What 1.2 changes: security and data safety (issue 13).  Each section below
 * says what it fixes.  The library of 1.2 works with a 1.1 schema until the
 * update.  test/t/009_upgrade.pl checks that an updated database has exactly
 * the objects of a fresh 1.2 install.
 */
\echo Use "ALTER EXTENSION dex UPDATE TO '1.2'" to load this file. \quit

/*
 * Instance ids: unique per workflow queue instead of across all queues, so
 * that a tenant cannot learn of another's runs by starting a run with its
 * instance id (src/instances.c).  The active ids keep their runs.
 */
ALTER TABLE dex.run_instance ADD COLUMN queue_id integer;
UPDATE dex.run_instance i SET queue_id = r.queue_id FROM dex.workflow_run r WHERE r.id = i.run_id;
DELETE FROM dex.run_instance WHERE queue_id IS NULL;
ALTER TABLE dex.run_instance ALTER COLUMN queue_id SET NOT NULL,
    ALTER COLUMN instance_id SET NOT NULL,
    DROP CONSTRAINT run_instance_pkey,
    ADD PRIMARY KEY (queue_id, instance_id);
COMMENT ON TABLE dex.run_instance IS
    'Instance ids of the runs that are not terminal: one active run per instance id and workflow queue.';

-- an instance id may now be active on several queues: which one to send to
DROP FUNCTION dex.send_external_event_to_instance(text, text, jsonb);
CREATE FUNCTION dex.send_external_event_to_instance(instance_id text, event_id text, payload jsonb DEFAULT NULL,
                                                    queue text DEFAULT NULL)
RETURNS boolean
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_send_external_event_to_instance';
COMMENT ON FUNCTION dex.send_external_event_to_instance(text, text, jsonb, text) IS
    'dex.send_external_event to the active run of a workflow instance on the given queue, or on any queue the caller may use (an error if on several).';
REVOKE ALL ON FUNCTION dex.send_external_event_to_instance(text, text, jsonb, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.send_external_event_to_instance(text, text, jsonb, text) TO dex_client;

/*
 * Concurrency keys: per workflow queue too, so that runs of different
 * tenants never wait for each other (src/history.c).  A key held across
 * queues before the update is held by its run on that run's queue; a run
 * waiting for it on another queue is admitted now, as it would be if the
 * key had been per queue all along.
 */
ALTER TABLE dex.concurrency_slot ADD COLUMN queue_id integer;
UPDATE dex.concurrency_slot s SET queue_id = r.queue_id FROM dex.workflow_run r WHERE r.id = s.run_id;
DELETE FROM dex.concurrency_slot WHERE queue_id IS NULL;
ALTER TABLE dex.concurrency_slot ALTER COLUMN queue_id SET NOT NULL,
    DROP CONSTRAINT concurrency_slot_pkey,
    ADD PRIMARY KEY (queue_id, key);
COMMENT ON TABLE dex.concurrency_slot IS
    'The run that holds each concurrency key of a workflow queue.';
ALTER TABLE dex.concurrency_wait ADD COLUMN queue_id integer;
UPDATE dex.concurrency_wait w SET queue_id = r.queue_id FROM dex.workflow_run r WHERE r.id = w.run_id;
DELETE FROM dex.concurrency_wait WHERE queue_id IS NULL;
ALTER TABLE dex.concurrency_wait ALTER COLUMN queue_id SET NOT NULL,
    DROP CONSTRAINT concurrency_wait_pkey,
    ADD PRIMARY KEY (queue_id, key, run_id);
DROP INDEX dex.concurrency_wait_next_idx;
CREATE INDEX concurrency_wait_next_idx ON dex.concurrency_wait (queue_id, key, priority DESC, run_id);
-- a key that now has no holder on a queue goes to the first run waiting
-- there for it, which gets its first workflow task
WITH next AS (
    SELECT DISTINCT ON (w.queue_id, w.key) w.queue_id, w.key, w.run_id
      FROM dex.concurrency_wait w
     WHERE NOT EXISTS (SELECT FROM dex.concurrency_slot s
                        WHERE s.queue_id = w.queue_id AND s.key = w.key)
     ORDER BY w.queue_id, w.key, w.priority DESC, w.run_id),
     admitted AS (
    DELETE FROM dex.concurrency_wait w USING next n
     WHERE w.queue_id = n.queue_id AND w.key = n.key AND w.run_id = n.run_id
    RETURNING n.queue_id, n.key, n.run_id),
     slot AS (
    INSERT INTO dex.concurrency_slot (queue_id, key, run_id)
    SELECT queue_id, key, run_id FROM admitted RETURNING run_id)
INSERT INTO dex.workflow_task (queue_id, run_id, priority)
SELECT r.queue_id, r.id, r.priority FROM dex.workflow_run r JOIN slot ON slot.run_id = r.id
 WHERE r.status IN ('CREATED', 'RUNNING')
ON CONFLICT DO NOTHING;
