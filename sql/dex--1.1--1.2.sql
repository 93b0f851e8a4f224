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

/*
 * Backups: pg_dump dumps the rows of the logged tables and the values of the
 * sequences that must not go back; the queues' task partitions (UNLOGGED,
 * derived) are members of the extension, left out of dumps and made again by
 * a trigger as restored queues arrive; the scheduler then rebuilds the tasks.
 * The reasons are given at the same section of dex--1.2.sql.
 */

-- Queue grants name their roles by name in a dump: grantee becomes regrole.
-- Rows of dropped roles (the maintenance worker removes them too) would
-- have no name, and the view over the column is made again around the change.
DELETE FROM dex.queue_grant g
 WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid = g.grantee);
DROP VIEW dex.queue_privileges;
ALTER TABLE dex.queue_grant ALTER COLUMN grantee TYPE regrole;
CREATE VIEW dex.queue_privileges AS
SELECT q.name AS queue,
       q.kind,
       g.grantee::pg_catalog.regrole AS role,
       g.granted_at
  FROM dex.queue_grant g
  JOIN dex.queue q ON q.id OPERATOR(pg_catalog.=) g.queue_id;
COMMENT ON VIEW dex.queue_privileges IS
    'Which role may use which queue (dex.grant_queue); superusers and dex_admin may use every queue.';
GRANT SELECT ON dex.queue_privileges TO dex_admin;
-- and no foreign key to dex.queue: a parallel pg_restore (-j) loads the rows
-- of extension tables in any order, so a grant may come before its queue
ALTER TABLE dex.queue_grant DROP CONSTRAINT queue_grant_queue_id_fkey;

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

-- the partitions of the existing queues become members of the extension
DO $backups$
DECLARE
    partition text;
BEGIN
    FOR partition IN
        SELECT c.relname FROM dex.queue q
          JOIN pg_catalog.pg_class c ON c.relname = q.partition
                                    AND c.relnamespace = 'dex'::pg_catalog.regnamespace
         WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_depend d
                            WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                              AND d.objid = c.oid AND d.deptype = 'e')
         ORDER BY q.id
    LOOP
        EXECUTE pg_catalog.format('ALTER EXTENSION dex ADD TABLE dex.%I', partition);
    END LOOP;
END
$backups$;

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
SELECT pg_catalog.pg_extension_config_dump('dex.lease_version', '');
