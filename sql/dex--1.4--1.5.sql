/*
 * dex 1.4 -> 1.5: ALTER EXTENSION dex UPDATE TO '1.5'.
 *
 * Incremental histories (issue 16): the polls take worker_cache, with which
 * a workflow task of a run the polling worker completed last leaves out the
 * history that worker has seen (dex.v1.WorkflowTask.history_omitted); a
 * worker that no longer holds the run's state reads it with
 * dex.run_history_pb, and workers may read histories (dex.run_history too).
 * dex.heartbeat_tasks takes the tasks' queue, so that it looks at that
 * queue's partition only.
 * The library of 1.5 works with a 1.4 schema until the update (the polls
 * then send whole histories).  test/t/009_upgrade.pl checks that an updated
 * database has exactly the objects of a fresh 1.5 install.
 */
\echo Use "ALTER EXTENSION dex UPDATE TO '1.5'" to load this file. \quit

-- The polls gain an argument: the old signatures go (a new one would be an
-- overload that makes calls without it ambiguous).
DROP FUNCTION dex.poll_tasks(text, text, integer, interval);
DROP FUNCTION dex.poll_tasks_pb(text, text, integer, interval);
DROP PROCEDURE dex.poll_tasks_wait(text, text, integer, interval, interval, jsonb);
DROP PROCEDURE dex.poll_tasks_wait_pb(text, text, integer, interval, interval, bytea[]);
DROP FUNCTION dex.heartbeat_tasks(uuid[], integer[], bigint[], interval);

CREATE FUNCTION dex.run_history_pb(run_id uuid)
RETURNS bytea
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_run_history_pb';
COMMENT ON FUNCTION dex.run_history_pb(uuid) IS
    'The event history of a workflow run as one encoded dex.v1.EventBatch: what a worker reads when a task left out a history it no longer holds (WorkflowTask.history_omitted).';

CREATE FUNCTION dex.poll_tasks(
    queue text,
    worker_id text,
    max_tasks integer DEFAULT 1,
    lease_duration interval DEFAULT '5 minutes',
    worker_cache boolean DEFAULT false)
RETURNS TABLE (kind text, run_id uuid, task_id integer, lock_version bigint,
               locked_until timestamptz, task jsonb)
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_poll_tasks';
COMMENT ON FUNCTION dex.poll_tasks(text, text, integer, interval, boolean) IS
    'Lease up to max_tasks tasks of a queue to a worker; each row''s task is a dex.v1.WorkflowTask or dex.v1.ActivityTask as JSON. With worker_cache (the worker keeps the state of runs whose workflow tasks it completed), a workflow task of a run this worker completed last leaves out the history it has seen (historyOmitted).';

CREATE FUNCTION dex.poll_tasks_pb(
    queue text,
    worker_id text,
    max_tasks integer DEFAULT 1,
    lease_duration interval DEFAULT '5 minutes',
    worker_cache boolean DEFAULT false)
RETURNS TABLE (kind text, run_id uuid, task_id integer, lock_version bigint,
               locked_until timestamptz, task bytea)
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_poll_tasks_pb';
COMMENT ON FUNCTION dex.poll_tasks_pb(text, text, integer, interval, boolean) IS
    'dex.poll_tasks with each task protobuf-encoded, for SDKs.';

CREATE PROCEDURE dex.poll_tasks_wait(queue text, worker_id text, max_tasks integer DEFAULT 1,
                                     lease interval DEFAULT '5 min', timeout interval DEFAULT '60 s',
                                     INOUT tasks jsonb DEFAULT NULL, worker_cache boolean DEFAULT false,
                                     run_ids uuid[] DEFAULT NULL, task_ids integer[] DEFAULT NULL,
                                     lock_versions bigint[] DEFAULT NULL, results jsonb[] DEFAULT NULL,
                                     INOUT completed boolean[] DEFAULT NULL)
LANGUAGE C
AS 'MODULE_PATHNAME', 'dex_poll_tasks_wait';
COMMENT ON PROCEDURE dex.poll_tasks_wait(text, text, integer, interval, interval, jsonb, boolean, uuid[], integer[], bigint[], jsonb[], boolean[]) IS
    'The poll and the long poll in one call: leases up to max_tasks tasks of the queue and returns them as a JSON array of task messages (as dex.poll_tasks''s task column, worker_cache as there), waiting for some, holding no snapshot, until the timeout (then an empty array). Completions given (run_ids, task_ids, lock_versions, results, as dex.complete_tasks) are made first, in the same transaction as the first look; completed says whether each was applied (false: its lease was lost). Call outside a transaction block.';

CREATE PROCEDURE dex.poll_tasks_wait_pb(queue text, worker_id text, max_tasks integer DEFAULT 1,
                                        lease interval DEFAULT '5 min', timeout interval DEFAULT '60 s',
                                        INOUT tasks bytea[] DEFAULT NULL, worker_cache boolean DEFAULT false,
                                        run_ids uuid[] DEFAULT NULL, task_ids integer[] DEFAULT NULL,
                                        lock_versions bigint[] DEFAULT NULL, results bytea[] DEFAULT NULL,
                                        INOUT completed boolean[] DEFAULT NULL)
LANGUAGE C
AS 'MODULE_PATHNAME', 'dex_poll_tasks_wait_pb';
COMMENT ON PROCEDURE dex.poll_tasks_wait_pb(text, text, integer, interval, interval, bytea[], boolean, uuid[], integer[], bigint[], bytea[], boolean[]) IS
    'dex.poll_tasks_wait with the tasks as encoded dex.v1.WorkflowTask or dex.v1.ActivityTask messages, and results as encoded dex.v1.WorkflowTaskCompletion or dex.v1.Payload (as dex.complete_tasks_pb).';

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

REVOKE ALL ON FUNCTION dex.run_history_pb(uuid), dex.heartbeat_tasks(uuid[], integer[], bigint[], interval, text),
    dex.poll_tasks(text, text, integer, interval, boolean),
    dex.poll_tasks_pb(text, text, integer, interval, boolean) FROM PUBLIC;
REVOKE ALL ON PROCEDURE dex.poll_tasks_wait(text, text, integer, interval, interval, jsonb, boolean, uuid[], integer[], bigint[], jsonb[], boolean[]),
    dex.poll_tasks_wait_pb(text, text, integer, interval, interval, bytea[], boolean, uuid[], integer[], bigint[], bytea[], boolean[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    dex.poll_tasks(text, text, integer, interval, boolean),
    dex.poll_tasks_pb(text, text, integer, interval, boolean) TO dex_worker;
GRANT EXECUTE ON PROCEDURE
    dex.poll_tasks_wait(text, text, integer, interval, interval, jsonb, boolean, uuid[], integer[], bigint[], jsonb[], boolean[]),
    dex.poll_tasks_wait_pb(text, text, integer, interval, interval, bytea[], boolean, uuid[], integer[], bigint[], bytea[], boolean[]) TO dex_worker;
GRANT EXECUTE ON FUNCTION dex.run_history(uuid), dex.run_history_pb(uuid) TO dex_client, dex_worker;
GRANT EXECUTE ON FUNCTION dex.heartbeat_tasks(uuid[], integer[], bigint[], interval, text) TO dex_worker;
