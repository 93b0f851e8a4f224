/*
 * dex 1.5 -> 1.6: ALTER EXTENSION dex UPDATE TO '1.6'.
 *
 * Version-aware dispatch (issue 17): a workflow task carries its run's
 * workflow name and version, and polls may declare the (workflow, version)
 * pairs or the activities a worker runs, each read from an index of its
 * own; dex.unserved shows the tasks no worker serves (dex.last_polled, from
 * shared memory, says when a worker that could take them last polled);
 * dex.set_run_version moves a run to another version; dex.stop_waiting ends
 * a worker's waits for its shutdown.
 * The library of 1.6 works with a 1.5 schema until the update (polls then
 * take no declarations).  test/t/009_upgrade.pl checks that an updated
 * database has exactly the objects of a fresh 1.6 install.
 */
\echo Use "ALTER EXTENSION dex UPDATE TO '1.6'" to load this file. \quit

-- The tasks in flight get their runs' workflow and version.
ALTER TABLE dex.workflow_task ADD COLUMN workflow_name text, ADD COLUMN workflow_version integer;
UPDATE dex.workflow_task t SET workflow_name = r.workflow_name, workflow_version = r.workflow_version
  FROM dex.workflow_run r WHERE r.id = t.run_id;
DELETE FROM dex.workflow_task WHERE workflow_name IS NULL;    -- a run purged under it
ALTER TABLE dex.workflow_task ALTER COLUMN workflow_name SET NOT NULL,
                              ALTER COLUMN workflow_version SET NOT NULL;
-- Polls that declare the (workflow, version) pairs they run read one range
-- of this index per pair.  Its order is on (- priority), an expression the
-- poll index does not have, so that the planner cannot take that index
-- instead for a declared poll (filtering the whole queue) however the
-- statistics make the two look.
CREATE INDEX workflow_task_version_idx
    ON dex.workflow_task (queue_id, workflow_name, workflow_version, (- priority), created_at);
-- Polls that declare the activities they run read one range of this index per
-- name (on (- priority), as workflow_task_version_idx).
CREATE INDEX activity_task_name_idx ON dex.activity_task (queue_id, name, (- priority), created_at)
    WHERE status = 'QUEUED' AND locked_by IS NULL;

-- The polls gain arguments: the old signatures go (a new one would be an
-- overload that makes calls without them ambiguous).
DROP FUNCTION dex.poll_tasks(text, text, integer, interval, boolean);
DROP FUNCTION dex.poll_tasks_pb(text, text, integer, interval, boolean);
DROP PROCEDURE dex.poll_tasks_wait(text, text, integer, interval, interval, jsonb, boolean, uuid[], integer[], bigint[], jsonb[], boolean[]);
DROP PROCEDURE dex.poll_tasks_wait_pb(text, text, integer, interval, interval, bytea[], boolean, uuid[], integer[], bigint[], bytea[], boolean[]);

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

CREATE FUNCTION dex.set_run_version(run_id uuid, version integer)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_set_run_version';
COMMENT ON FUNCTION dex.set_run_version(uuid, integer) IS
    'Move a run that has not ended to another version of its workflow: its next workflow tasks go to workers that declared (workflow, version). For an operator who has checked that the new version''s code replays the run''s history. Refused for an ended run (55000).';

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

CREATE FUNCTION dex.stop_waiting(worker_id text)
RETURNS integer
LANGUAGE C
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'dex_stop_waiting';
COMMENT ON FUNCTION dex.stop_waiting(text) IS
    'End the waits of the worker''s dex.poll_tasks_wait(_pb) calls in this database now: each returns what it leased (nothing), as at its timeout, so that a worker shutting down needs no cancel request (which the server logs as an error); how many waits it ended. A call that enters its wait afterwards waits on: call it until the worker''s calls have returned.';

REVOKE ALL ON FUNCTION dex.poll_tasks(text, text, integer, interval, boolean, text[], integer[]),
    dex.poll_tasks_pb(text, text, integer, interval, boolean, text[], integer[]),
    dex.set_run_version(uuid, integer), dex.last_polled(integer, text, integer), dex.unserved(interval),
    dex.stop_waiting(text)
    FROM PUBLIC;
REVOKE ALL ON PROCEDURE
    dex.poll_tasks_wait(text, text, integer, interval, interval, jsonb, boolean, uuid[], integer[], bigint[], jsonb[], boolean[], text[], integer[]),
    dex.poll_tasks_wait_pb(text, text, integer, interval, interval, bytea[], boolean, uuid[], integer[], bigint[], bytea[], boolean[], text[], integer[])
    FROM PUBLIC;
REVOKE ALL ON dex.unserved FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.poll_tasks(text, text, integer, interval, boolean, text[], integer[]),
    dex.poll_tasks_pb(text, text, integer, interval, boolean, text[], integer[]),
    dex.stop_waiting(text) TO dex_worker;
GRANT EXECUTE ON PROCEDURE
    dex.poll_tasks_wait(text, text, integer, interval, interval, jsonb, boolean, uuid[], integer[], bigint[], jsonb[], boolean[], text[], integer[]),
    dex.poll_tasks_wait_pb(text, text, integer, interval, interval, bytea[], boolean, uuid[], integer[], bigint[], bytea[], boolean[], text[], integer[])
    TO dex_worker;
GRANT EXECUTE ON FUNCTION dex.set_run_version(uuid, integer), dex.last_polled(integer, text, integer),
    dex.unserved(interval) TO dex_admin;
GRANT EXECUTE ON FUNCTION dex.last_polled(integer, text, integer), dex.unserved(interval) TO pg_monitor;
GRANT SELECT ON dex.unserved TO pg_monitor, dex_admin;
GRANT SELECT (workflow_name, workflow_version) ON dex.workflow_task TO pg_monitor, dex_admin;
GRANT SELECT (name) ON dex.activity_task TO pg_monitor, dex_admin;
