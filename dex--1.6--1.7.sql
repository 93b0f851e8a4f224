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
