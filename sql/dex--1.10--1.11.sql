/*
 * dex 1.10 -> 1.11: ALTER EXTENSION dex UPDATE TO '1.11'.
 *
 * A fresh install of 1.11 is dex--1.7.sql followed by the updates to 1.8,
 * 1.9, 1.10 and 1.11 (CREATE EXTENSION runs the chain).
 * test/t/009_upgrade.pl checks that every released version updated to 1.11
 * has exactly the objects of a fresh install.
 */
\echo Use "ALTER EXTENSION dex UPDATE TO '1.11'" to load this file. \quit

/* ---- Finding runs by status, whatever their age (1.11) ---- */

/*
 * dex.workflow_run has no index on its status, on purpose: a status change
 * would then write an entry in every index of the table (about 750 bytes
 * of WAL a workflow more).  Most runs go CREATED -> RUNNING -> COMPLETED
 * within seconds; a status filter finds those among the newest runs.  What
 * it cannot find that way is a run in a status few runs have (one FAILED
 * run behind a million newer completed ones) or a run that stays active
 * long after newer runs completed.  This table holds exactly those, and
 * nothing a short, successful workflow passes through:
 *   - every run whose status is SUSPENDED, BLOCKED, FAILED, CANCELLED,
 *     TERMINATED or TIMED_OUT, written by the trigger below when it gets
 *     there, whatever its age;
 *   - every run that is not COMPLETED dex.status_sweep_age (a minute)
 *     after it was created: the maintenance worker sweeps the runs in id
 *     order (UUIDv7: creation order) about once a second, up to that age
 *     (and not past a transaction in progress that may still add older
 *     ids), and records the sweep's progress in dex.run_status_sweep; the
 *     trigger keeps such a run's row in step as its status changes, and
 *     deletes it when the run completes.  The first sweep after this update
 *     goes through every run there is.
 * So a run of id below dex.run_status_sweep's horizon whose status is not
 * COMPLETED is here with its status; a reader searches the newer runs
 * themselves and this table for the older ones (the REST API's run list and
 * counts, clients/python/dex/serve/runs.py).  The sweep locks the runs it
 * adds FOR SHARE and skips those a transaction holds (it stops there and
 * tries again a second later), so it never waits for, nor deadlocks with,
 * the transactions that run workflows (src/engine/status_index.c).  A
 * reader always joins the run itself: the run's own status is the truth.
 */
CREATE TABLE dex.run_status_index (
    run_id      uuid PRIMARY KEY,
    status      text NOT NULL,
    queue_id    integer NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0.02);
COMMENT ON TABLE dex.run_status_index IS
    'The runs a status filter cannot find among the newest runs: those in a status most runs never have (SUSPENDED, BLOCKED, FAILED, CANCELLED, TERMINATED, TIMED_OUT), and those still active dex.status_sweep_age after they were created (below dex.run_status_sweep''s horizon), with their status and queue.';
CREATE INDEX run_status_index_status_idx ON dex.run_status_index (status, run_id) INCLUDE (queue_id);

CREATE TABLE dex.run_status_sweep (
    one         boolean PRIMARY KEY DEFAULT true CHECK (one),
    horizon     uuid NOT NULL,
    swept_at    timestamptz NOT NULL
);
COMMENT ON TABLE dex.run_status_sweep IS
    'How far the maintenance worker has swept the runs into dex.run_status_index: every run of a smaller id that is not COMPLETED is there (one row).';
-- Nothing swept yet: the first sweep goes through every run there is.
INSERT INTO dex.run_status_sweep (horizon, swept_at)
VALUES ('00000000-0000-0000-0000-000000000000', now());

-- Both are derived from dex.workflow_run and left out of a logical dump:
-- when a restore ends, the scheduler empties dex.run_status_index and sets
-- the horizon back to zero, and the worker sweeps every restored run again.

CREATE FUNCTION dex.index_run_status() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NEW.status = 'COMPLETED'
       OR (NEW.status IN ('CREATED', 'RUNNING', 'DELAYED')
           AND NEW.created_at >= clock_timestamp() - interval '10 seconds') THEN
        -- completed, or back to an active status too young to have been swept: no row
        DELETE FROM dex.run_status_index WHERE run_id = NEW.id;
    ELSIF NEW.status IN ('CREATED', 'RUNNING', 'DELAYED') THEN
        -- active: its row (if it has one) follows; the sweep adds the run if it has none
        -- (the sweep locks the runs it adds, so it is not adding this one now)
        UPDATE dex.run_status_index SET status = NEW.status WHERE run_id = NEW.id;
    ELSE
        -- a status few runs have: the row whatever its age
        INSERT INTO dex.run_status_index AS i (run_id, status, queue_id)
        VALUES (NEW.id, NEW.status, NEW.queue_id)
        ON CONFLICT (run_id) DO UPDATE SET status = EXCLUDED.status;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION dex.index_run_status() IS
    'Trigger AFTER UPDATE OF status on dex.workflow_run: keeps dex.run_status_index in step with a run''s status when the run is (or goes) where that table holds it.';
REVOKE ALL ON FUNCTION dex.index_run_status() FROM PUBLIC;

/*
 * The condition is the trigger's, not the function's, so that the status
 * changes of a young run that completes (nearly every run) call nothing:
 * its row cannot exist, since the worker sweeps runs at least ten seconds
 * old (dex.status_sweep_age is never less).
 */
CREATE TRIGGER run_status_index AFTER UPDATE OF status ON dex.workflow_run
FOR EACH ROW
WHEN (OLD.status IS DISTINCT FROM NEW.status
      AND (NEW.status NOT IN ('CREATED', 'RUNNING', 'DELAYED', 'COMPLETED')
           OR OLD.status NOT IN ('CREATED', 'RUNNING', 'DELAYED')
           OR OLD.created_at < pg_catalog.clock_timestamp() - interval '10 seconds'))
EXECUTE FUNCTION dex.index_run_status();

-- A security barrier, as dex.runs: a reader's own functions in a WHERE
-- clause see only the rows of the queues the reader may use.
CREATE VIEW dex.runs_in_status WITH (security_barrier) AS
SELECT i.run_id AS id, i.status, q.name AS queue
  FROM dex.run_status_index i
  LEFT JOIN dex.queue q ON q.id OPERATOR(pg_catalog.=) i.queue_id
 WHERE i.queue_id OPERATOR(pg_catalog.=) ANY ((SELECT dex.usable_queue_ids())::integer[]);
COMMENT ON VIEW dex.runs_in_status IS
    'The runs of dex.run_status_index (a status few runs have, or active long after they were created) of the queues the reader may use, with their queue: with dex.run_status_horizon, what lets a status filter find an old run at once, and counts by status reach every run. Join it with dex.runs, whose status is the truth, to be sure of a run''s.';
GRANT SELECT ON dex.runs_in_status TO dex_client;

CREATE VIEW dex.run_status_horizon AS
SELECT horizon, swept_at FROM dex.run_status_sweep;
COMMENT ON VIEW dex.run_status_horizon IS
    'The id below which every run that is not COMPLETED is in dex.runs_in_status (all zero before the first sweep), and when the sweep last moved it: newer runs are searched in dex.runs itself.';
GRANT SELECT ON dex.run_status_horizon TO dex_client;
