/*
 * dex 1.9 -> 1.10: ALTER EXTENSION dex UPDATE TO '1.10'.
 *
 * A fresh install of 1.10 is dex--1.7.sql followed by the updates to 1.8,
 * 1.9 and 1.10 (CREATE EXTENSION runs the chain).  test/t/009_upgrade.pl
 * checks that every released version updated to 1.10 has exactly the
 * objects of a fresh install.
 */
\echo Use "ALTER EXTENSION dex UPDATE TO '1.10'" to load this file. \quit

/* ---- Runs' events published through logical decoding (1.10) ---- */

/*
 * A queue that publishes (dex.queue.publish not NULL) sends each event its
 * runs record, in the transaction that records it, as a transactional
 * logical decoding message (pg_logical_emit_message's kind): prefix 'dex'
 * with the event as JSON, or 'dex.pb' with its protobuf form, a
 * dex.v1.PublishedEvent either way (src/engine/publish.c,
 * docs/publishing.md).  Any logical decoding consumer (wal2json, pgoutput
 * with messages, Debezium) receives exactly the committed events, in commit
 * order.  Off by default; with wal_level below logical nothing is sent.
 */
ALTER TABLE dex.queue ADD COLUMN publish text CHECK (publish IN ('json', 'protobuf'));
COMMENT ON COLUMN dex.queue.publish IS
    'Whether the events of this queue''s runs are published as logical decoding messages, and in which form: ''json'' (prefix dex) or ''protobuf'' (prefix dex.pb); NULL: not published.';

-- dex.alter_queue gains publish and publish_format: a new signature.
DROP FUNCTION dex.alter_queue(text, integer, boolean, integer, interval, integer);
CREATE FUNCTION dex.alter_queue(name text, capacity integer DEFAULT NULL, paused boolean DEFAULT NULL,
                                rate_limit integer DEFAULT NULL, rate_period interval DEFAULT NULL,
                                concurrency_limit integer DEFAULT NULL,
                                publish boolean DEFAULT NULL, publish_format text DEFAULT NULL)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_alter_queue';
COMMENT ON FUNCTION dex.alter_queue(text, integer, boolean, integer, interval, integer, boolean, text) IS
    'Change a queue at run time: its capacity (most tasks leased at once; 0 removes the limit), whether it is paused (polls hand out nothing), its rate limit (most tasks handed out per rate_period, 1 second unless given; 0 removes it), the concurrency limit of its keys (runs of a key active at once), and whether its runs'' events are published as logical decoding messages (publish; publish_format ''json'', the default, or ''protobuf''); NULL leaves a setting as it is.';
ALTER FUNCTION dex.alter_queue(text, integer, boolean, integer, interval, integer, boolean, text) SECURITY DEFINER;
REVOKE ALL ON FUNCTION dex.alter_queue(text, integer, boolean, integer, interval, integer, boolean, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.alter_queue(text, integer, boolean, integer, interval, integer, boolean, text) TO dex_admin;
GRANT SELECT (publish) ON dex.queue TO dex_admin;
