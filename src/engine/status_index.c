/*-------------------------------------------------------------------------
 *
 * status_index.c
 *	  Keeping dex.run_status_index (1.11): the runs a status filter cannot
 *	  find among the newest runs, so that a list of the FAILED runs finds one
 *	  behind a million newer completed runs at once.
 *
 * dex.workflow_run has no index on its status (its updates stay HOT: see
 * the install script).  The trigger on dex.workflow_run (sql/
 * dex--1.10--1.11.sql) puts a run there when it reaches a status most runs
 * never have, whatever its age.  What it cannot see is a run that simply
 * stays CREATED, RUNNING or DELAYED: the sweep here adds those.  It goes
 * through the runs in id order (UUIDv7: creation order), from the horizon
 * dex.run_status_sweep records up to a cutoff, and adds every run whose
 * status is not COMPLETED; the horizon then moves up to where it stopped.
 * Readers search the runs of ids at or above the horizon themselves, and
 * the table for older ones.
 *
 * The cutoff is dex.status_sweep_age ago (a minute), so that nearly every run
 * has completed before the sweep sees it and costs nothing here (a backlog
 * of runs waiting less than that too), and never later than the start of a transaction
 * in progress in this database that holds a transaction id: such a
 * transaction may have taken a run id any time after it started and commit
 * the run later, and a run the sweep passed over before it was visible
 * would never be added.  (A transaction without an id has written nothing,
 * so the ids it takes later are newer than the cutoff.)  A prepared
 * transaction holds the cutoff an hour before it was prepared.
 *
 * Transactions and locks: each batch is a transaction of its own (the
 * maintenance worker's) that locks the sweep's row FOR UPDATE first: a
 * restore's reset (dex_reset_run_status_index) and a sweep take turns.  The
 * runs it adds it locks FOR SHARE, skipping those another transaction holds
 * (the horizon stops at the first one skipped): the sweep never waits for a
 * transaction that changes runs, so it cannot deadlock with one (a batch
 * completion that ends several runs inserts their rows in its own order),
 * and a run cannot change status between the sweep's read and its commit.
 * Nothing else writes the table but the trigger, in the transaction that
 * changes the run, and dex_delete_runs: it is always right, unless the
 * trigger is bypassed (session_replication_role = replica) or runs are
 * deleted by hand.  Readers join every row with the run itself, so a wrong
 * row costs a lookup and shows nothing wrong.
 *
 * An idle pass writes nothing: it reads the horizon and finds no run past it
 * (the horizon stays where the last run is; nothing is newer).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/timestamp.h"

#include "engine/engine.h"

bool
dex_status_index_installed(void)
{
	return dex_column_exists("run_status_sweep", "horizon");
}

/* The time before which every run this database will ever see is visible now. */
static DexPlan cutoff_plan = {
	"SELECT LEAST(pg_catalog.clock_timestamp() - make_interval(secs => $2 / 1000.0), "
	"  (SELECT pg_catalog.min(a.xact_start) FROM pg_catalog.pg_stat_activity a "
	"    WHERE a.datid = $1 AND a.backend_xid IS NOT NULL AND a.pid <> pg_catalog.pg_backend_pid()), "
	"  (SELECT pg_catalog.min(p.prepared) - interval '1 hour' FROM pg_catalog.pg_prepared_xacts p "
	"    WHERE p.database = pg_catalog.current_database()))",
	2, {OIDOID, INT4OID}
};

/* $1 the cutoff's id: the horizon, if a run is past it */
static DexPlan anything_to_sweep_plan = {
	"SELECT s.horizon FROM dex.run_status_sweep s "
	"WHERE EXISTS (SELECT FROM dex.workflow_run r WHERE r.id >= s.horizon AND r.id < $1)",
	1, {UUIDOID}
};

static DexPlan lock_sweep_plan = {
	"SELECT horizon FROM dex.run_status_sweep FOR UPDATE", 0, {0}
};

/*
 * $1 the horizon, $2 the cutoff's id, $3 the batch size: the batch's runs
 * that are not COMPLETED are locked FOR SHARE and added (a row the trigger
 * wrote before stays).  A run another transaction holds is skipped, never
 * waited for, and the horizon stops at the first one (the next pass tries
 * again): so the sweep never waits for a transaction that may wait for it,
 * and a run it adds cannot change status until it has committed (the
 * change's trigger then finds the row).  Returns how many runs the batch
 * read, the last one's id, and the first one skipped.
 */
static DexPlan sweep_batch_plan = {
	"WITH batch AS MATERIALIZED (SELECT id, status FROM dex.workflow_run "
	"                             WHERE id >= $1 AND id < $2 ORDER BY id LIMIT $3), "
	"     locked AS MATERIALIZED (SELECT r.id, r.status, r.queue_id FROM dex.workflow_run r "
	"                             WHERE r.id IN (SELECT id FROM batch WHERE status <> 'COMPLETED') "
	"                               AND r.status <> 'COMPLETED' FOR SHARE OF r SKIP LOCKED), "
	"     added AS (INSERT INTO dex.run_status_index (run_id, status, queue_id) "
	"               SELECT id, status, queue_id FROM locked ON CONFLICT (run_id) DO NOTHING) "
	"SELECT (SELECT count(*) FROM batch), (SELECT id FROM batch ORDER BY id DESC LIMIT 1), "
	"       (SELECT b.id FROM batch b WHERE b.status <> 'COMPLETED' "
	"          AND NOT EXISTS (SELECT FROM locked l WHERE l.id = b.id) ORDER BY b.id LIMIT 1)",
	3, {UUIDOID, UUIDOID, INT4OID}
};

static DexPlan set_horizon_plan = {
	"UPDATE dex.run_status_sweep SET horizon = $1, swept_at = now()", 1, {UUIDOID}
};

/*
 * One batch of the sweep, in the caller's transaction: at most batch_size
 * runs.  Returns whether runs are left below the cutoff (the next batch
 * should follow at once).
 */
bool
dex_sweep_run_statuses(int batch_size)
{
	DexRows		cutoff_row;
	DexRows		sweep;
	DexRows		batch;
	Datum		values[3];
	bool		isnull;
	pg_uuid_t	horizon;
	pg_uuid_t	cutoff_id;
	int64		n;
	Datum		skipped;
	bool		none_skipped;

	values[0] = ObjectIdGetDatum(MyDatabaseId);
	values[1] = Int32GetDatum(dex_status_sweep_age_s * 1000);
	cutoff_row = dex_spi_rows(&cutoff_plan, values, NULL, 1);
	dex_uuid_v7_floor(DatumGetTimestampTz(dex_rows_getdatum(cutoff_row, 0, 1, &isnull)), &cutoff_id);

	values[0] = UUIDPGetDatum(&cutoff_id);
	if (dex_spi_rows(&anything_to_sweep_plan, values, NULL, 1).n == 0)
		return false;			/* idle: nothing written */
	sweep = dex_spi_rows(&lock_sweep_plan, NULL, NULL, 1);
	if (sweep.n == 0)
		return false;			/* not installed as it should be: nothing to keep */
	memcpy(&horizon, DatumGetUUIDP(dex_rows_getdatum(sweep, 0, 1, &isnull)), sizeof(horizon));
	if (memcmp(&horizon, &cutoff_id, sizeof(horizon)) >= 0)
		return false;

	values[0] = UUIDPGetDatum(&horizon);
	values[1] = UUIDPGetDatum(&cutoff_id);
	values[2] = Int32GetDatum(batch_size);
	batch = dex_spi_rows(&sweep_batch_plan, values, NULL, 1);
	n = dex_rows_getint64(batch, 0, 1);
	skipped = dex_rows_getdatum(batch, 0, 3, &none_skipped);
	if (!none_skipped)
		values[0] = skipped;	/* from there again next time */
	else if (n >= batch_size)
		values[0] = dex_rows_getdatum(batch, 0, 2, &isnull);	/* read again: the bound is inclusive */
	else
		values[0] = UUIDPGetDatum(&cutoff_id);
	dex_spi_exec(&set_horizon_plan, values, NULL, 0);
	return none_skipped && n >= batch_size;
}

static DexPlan reset_sweep_plan = {
	"UPDATE dex.run_status_sweep SET horizon = '00000000-0000-0000-0000-000000000000', swept_at = now()",
	0, {0}
};

static DexPlan empty_index_plan = {
	"DELETE FROM dex.run_status_index", 0, {0}
};

/*
 * After a logical restore: the table is emptied and the sweep starts over
 * from the first run, in the caller's transaction.  The sweep's row is
 * reset first, so that a batch under way finishes before the table is
 * emptied, and the next one starts from the beginning.
 */
void
dex_reset_run_status_index(void)
{
	if (!dex_status_index_installed())
		return;
	dex_spi_exec(&reset_sweep_plan, NULL, NULL, 0);
	dex_spi_exec(&empty_index_plan, NULL, NULL, 0);
}
