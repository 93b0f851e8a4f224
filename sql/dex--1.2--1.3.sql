/*
 * dex 1.2 -> 1.3: ALTER EXTENSION dex UPDATE TO '1.3'.
 *
 * What 1.3 adds: an operator's controls over a run's life (issue 15).  The
 * library of 1.3 works with a 1.2 schema until the update (it has neither
 * the statuses TERMINATED and BLOCKED nor the functions below: runs are not
 * parked until then).  test/t/009_upgrade.pl
 * checks that an updated database has exactly the objects of a fresh 1.3
 * install.
 */
\echo Use "ALTER EXTENSION dex UPDATE TO '1.3'" to load this file. \quit

-- a running run that is asked to cancel ends when its workflow sends cancelRun
COMMENT ON FUNCTION dex.cancel_run(uuid, text) IS
    'Cancel a run: an executing run gets runCancelRequested and ends CANCELLED when its workflow sends cancelRun (after cleaning up); a run not executing ends CANCELLED at once.';

-- a run whose workflow task keeps failing is parked BLOCKED (dex.max_workflow_task_failures)
-- until dex.resume_run retries it
COMMENT ON FUNCTION dex.resume_run(uuid) IS
    'Resume a suspended run (the workflow sees runSuspended and runResumed in its next task), or retry a run BLOCKED by failing workflow tasks.';

-- a run can end TERMINATED (dex.terminate_run), or be parked BLOCKED
ALTER TABLE dex.workflow_run DROP CONSTRAINT workflow_run_status_check;
ALTER TABLE dex.workflow_run ADD CONSTRAINT workflow_run_status_check
    CHECK (status IN ('CREATED', 'RUNNING', 'SUSPENDED', 'CANCELLED', 'COMPLETED', 'FAILED', 'TERMINATED', 'BLOCKED'));

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

REVOKE ALL ON FUNCTION dex.terminate_run(uuid, text), dex.purge_run(uuid),
    dex.purge_runs(text, text, timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.terminate_run(uuid, text) TO dex_client, dex_admin;
GRANT EXECUTE ON FUNCTION dex.purge_run(uuid), dex.purge_runs(text, text, timestamptz, integer) TO dex_admin;

-- No SET clause, as dex.wait_for_tasks: its statements qualify every object and operator.
CREATE PROCEDURE dex.wait_for_run(run_id uuid, timeout interval DEFAULT '60 s',
                                  INOUT status text DEFAULT NULL, INOUT result jsonb DEFAULT NULL,
                                  INOUT failure jsonb DEFAULT NULL)
LANGUAGE C
AS 'MODULE_PATHNAME', 'dex_wait_for_run';
COMMENT ON PROCEDURE dex.wait_for_run(uuid, interval, text, jsonb, jsonb) IS
    'Wait until the run has ended (at once if it has): its status, result and failure; after the timeout its status then. Holds no snapshot while it waits. Call outside a transaction block.';
REVOKE ALL ON PROCEDURE dex.wait_for_run(uuid, interval, text, jsonb, jsonb) FROM PUBLIC;
GRANT EXECUTE ON PROCEDURE dex.wait_for_run(uuid, interval, text, jsonb, jsonb) TO dex_client;
