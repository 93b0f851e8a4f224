/*-------------------------------------------------------------------------
 *
 * maintenance.c
 *	  The dex maintenance worker: a background worker per database that
 *	  deletes runs once they have been over for dex.retention_period, and
 *	  about once a second sweeps the runs of the last seconds into
 *	  dex.run_status_index (1.11, engine/status_index.c).
 *
 * Retention is slow bulk work, kept apart from the scheduler so that it can
 * never delay a timer or a lease expiry.  (Lease expiries are due-time work
 * like timers, and stay with the scheduler, which sleeps exactly until the
 * next one.)
 *
 * A run goes with everything it owns: history, inbox, recorded external
 * events, retry records, and tasks left behind by a cancellation (see
 * dex_end_runs).  A run that still has such a task that someone holds is
 * kept for a later pass.  (Its instance id and concurrency key were freed
 * when it ended.)  Every delete goes through a primary key that starts
 * with the run id.
 *
 * dex.workflow_run has no index on completion time, on purpose (its updates
 * stay HOT; see the install script).  Run ids are UUIDv7, ordered by
 * creation time, and a run ends after it was created: the worker sweeps the
 * primary key from the oldest id up to the id of the retention cutoff, one
 * batch of dex.retention_batch_size runs per transaction, and deletes those
 * that ended before the cutoff.  A sweep resumes where the last batch
 * stopped; runs created long ago that are still active are only looked at
 * again by the next sweep.
 *
 * Nothing is deleted while a logical restore of the database is under way
 * (api_queues.c notes it, the scheduler ends it).
 *
 * Each pass also removes the queue grants of roles that were dropped
 * (engine/access.c): roles belong to the cluster, and a role created later may
 * get a dropped role's oid.
 *
 * Transactions and locks: each batch is a short transaction of its own.  A
 * named lease in dex.lease ("maintenance") makes sure one worker does this
 * per database, even if two were started (the lease table is UNLOGGED: a
 * crash drops the lease with its holder); the lease is a row, not a lock,
 * and outlives the transactions.  The worker takes none of dex's own locks
 * (locks.c), only the row locks of its deletes.  An error aborts the pass,
 * is logged, and the next pass comes after dex.maintenance_naptime.  The
 * loop, the sleep and the recovery from an error are bgworker.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "workers/workers.h"

PGDLLEXPORT void dex_maintenance_main(Datum main_arg);

/* batches per pass at most, so that a reload or shutdown is seen in time */
#define MAX_BATCHES_PER_PASS 100
/* the sleep before the next pass when this one left work to do */
#define MORE_WORK_SLEEP_MS 10
/* how often the status sweep runs, and the runs it reads per transaction */
#define STATUS_SWEEP_MS 1000
#define STATUS_SWEEP_BATCH 10000

/* ----------------------------------------------------------------
 * Leases
 * ----------------------------------------------------------------
 */

static DexPlan acquire_lease_plan = {
	"INSERT INTO dex.lease (name, holder, acquired_at, expires_at) "
	"VALUES ($1, $2, now(), now() + make_interval(secs => $3 / 1000.0)) "
	"ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, "
	"  acquired_at = CASE WHEN dex.lease.holder = EXCLUDED.holder THEN dex.lease.acquired_at "
	"                     ELSE EXCLUDED.acquired_at END, "
	"  expires_at = EXCLUDED.expires_at "
	"WHERE dex.lease.holder = EXCLUDED.holder OR dex.lease.expires_at < now() "
	"   OR NOT EXISTS (SELECT FROM pg_catalog.pg_stat_activity a "
	"                   WHERE a.backend_type || ' pid ' || a.pid = dex.lease.holder) "
	"RETURNING name",
	3, {TEXTOID, TEXTOID, INT4OID}
};

/*
 * Take or renew the named lease for this process for duration_ms, in the
 * current transaction.  Returns false if another holder's lease is live: not
 * expired, and its process still there (a restart does not leave the work
 * undone until the lease of a worker that is gone expires).
 */
static bool
lease_acquire(const char *name, int duration_ms)
{
	Datum		values[3];

	values[0] = CStringGetTextDatum(name);
	values[1] = CStringGetTextDatum(psprintf("%s pid %d", MyBgworkerEntry ?
											 MyBgworkerEntry->bgw_type : "backend",
											 MyProcPid));
	values[2] = Int32GetDatum(duration_ms);
	return dex_spi_rows(&acquire_lease_plan, values, NULL, 0).n > 0;
}

/* ----------------------------------------------------------------
 * Retention
 * ----------------------------------------------------------------
 */

/*
 * The next batch of the sweep, and whether each run is due for deletion:
 * ended before the cutoff, and no task left that someone holds.
 */
static DexPlan retention_scan_plan = {
	"SELECT r.id, r.status = ANY (" DEX_ENDED_STATUSES_SQL ") AND r.completed_at < $3 "
	"       AND NOT EXISTS (SELECT 1 FROM dex.workflow_task t WHERE t.run_id = r.id AND t.locked_by IS NOT NULL "
	"                         AND t.locked_until > now()) "
	"       AND NOT EXISTS (SELECT 1 FROM dex.activity_task a WHERE a.run_id = r.id AND a.locked_by IS NOT NULL "
	"                         AND a.locked_until > now()) "
	"FROM dex.workflow_run r WHERE r.id > $1 AND r.id < $2 ORDER BY r.id LIMIT $4",
	4, {UUIDOID, UUIDOID, TIMESTAMPTZOID, INT4OID}
};


/*
 * A logical restore is under way (the trigger on dex.queue noted it; the
 * scheduler removes the note when the restoring session has ended).  Runs
 * restored before their history must not be deleted then: the history that
 * follows them would be left without a run.
 */
static DexPlan restoring_plan = {
	"SELECT FROM dex.lease WHERE name = 'restore'", 0, {0}
};

/* where the sweep goes on: the last run id looked at (all zero: the start) */
static pg_uuid_t sweep_position;

/*
 * One batch of the sweep, in the caller's transaction: look at the next
 * runs, delete those due.  Returns the number deleted; *more is false when
 * the sweep reached the cutoff (and starts over next time).
 */
static int
retention_batch(TimestampTz cutoff, bool *more)
{
	pg_uuid_t	cutoff_id;
	Datum		values[4];
	ArrayBuildState *due = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	DexRows		runs;

	if (dex_spi_rows(&restoring_plan, NULL, NULL, 1).n > 0)
	{
		*more = false;
		return 0;
	}
	dex_uuid_v7_floor(cutoff, &cutoff_id);
	values[0] = UUIDPGetDatum(&sweep_position);
	values[1] = UUIDPGetDatum(&cutoff_id);
	values[2] = TimestampTzGetDatum(cutoff);
	values[3] = Int32GetDatum(dex_retention_batch_size);
	runs = dex_spi_rows(&retention_scan_plan, values, NULL, 0);
	for (uint64 i = 0; i < runs.n; i++)
	{
		bool		isnull;
		Datum		id = dex_rows_getdatum(runs, i, 1, &isnull);

		if (dex_rows_getbool(runs, i, 2))
			dex_array_add(due, id, false);
		if (i == runs.n - 1)
			memcpy(&sweep_position, DatumGetUUIDP(id), sizeof(pg_uuid_t));
	}
	*more = runs.n >= (uint64) dex_retention_batch_size;
	if (!*more)
		memset(&sweep_position, 0, sizeof(sweep_position));
	if (due->nelems == 0)
		return 0;

	return (int) dex_delete_runs(dex_array_result(due));
}

/* ----------------------------------------------------------------
 * The worker
 * ----------------------------------------------------------------
 */

static DexPlan forget_dropped_roles_plan = {
	"DELETE FROM dex.queue_grant g "
	"WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid = g.grantee)",
	0, {0}
};

/* when the next retention pass is due (0: at the first pass) */
static TimestampTz next_retention = 0;
/* until when the lease this worker took is surely its own, without renewing it */
static TimestampTz lease_sure_until = 0;

/*
 * Run "batch" in transactions of its own, one after the other, while it says
 * that work is left, MAX_BATCHES_PER_PASS at most, so that a reload or a
 * shutdown is seen in time.  Returns whether work is left.
 */
static bool
run_batches(bool (*batch) (void *arg), void *arg)
{
	bool		more = false;

	for (int i = 0; i < MAX_BATCHES_PER_PASS; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
			break;
		more = dex_worker_begin() && batch(arg);
		dex_worker_commit();
		if (!more)
			break;
	}
	return more;
}

/* A batch of the status sweep (engine/status_index.c); none while a logical restore is under way. */
static bool
status_sweep_batch(void *arg)
{
	return dex_spi_rows(&restoring_plan, NULL, NULL, 1).n == 0 &&
		dex_sweep_run_statuses(STATUS_SWEEP_BATCH);
}

typedef struct RetentionPass
{
	TimestampTz cutoff;			/* runs that ended before go */
	int64		deleted;
} RetentionPass;

static bool
retention_pass_batch(void *arg)
{
	RetentionPass *pass = (RetentionPass *) arg;
	bool		more;

	pass->deleted += retention_batch(pass->cutoff, &more);
	return more;
}

/*
 * One pass: the status sweep (every STATUS_SWEEP_MS), and retention (every
 * dex.maintenance_naptime): batches until the sweep reaches the cutoff or
 * MAX_BATCHES_PER_PASS.  Returns when the next is due: soon if work is left.
 */
static TimestampTz
maintenance_pass(bool *installed)
{
	RetentionPass retention;
	bool		more;
	bool		held = false;
	bool		status_index = false;
	bool		sweep_more = false;
	TimestampTz now;
	TimestampTz next;

	/*
	 * The lease outlives the pass; a worker that dies leaves it to another
	 * at once (or to expire).  It lasts three naptimes and a minute, and is
	 * renewed when half of that is left: the passes of the status sweep
	 * between write nothing when there is nothing to sweep.
	 */
	*installed = dex_worker_begin();
	if (*installed)
	{
		int			duration_ms = dex_maintenance_naptime_ms * 3 + 60000;

		held = GetCurrentTimestamp() < lease_sure_until;
		if (!held)
		{
			held = lease_acquire("maintenance", duration_ms);
			lease_sure_until = held ? TimestampTzPlusMilliseconds(GetCurrentTimestamp(), duration_ms / 2) : 0;
		}
		status_index = held && dex_status_index_installed();
	}
	dex_worker_commit();
	if (!held)
		return DT_NOEND;

	if (status_index)
		sweep_more = run_batches(status_sweep_batch, NULL);
	now = GetCurrentTimestamp();
	next = !status_index ? DT_NOEND :
		TimestampTzPlusMilliseconds(now, sweep_more ? MORE_WORK_SLEEP_MS : STATUS_SWEEP_MS);
	if (now < next_retention)
		return Min(next, next_retention);

	if (dex_worker_begin() && dex_queue_grants_exist())
		dex_spi_exec(&forget_dropped_roles_plan, NULL, NULL, 0);
	dex_worker_commit();
	if (dex_retention_period_s == 0)
	{
		next_retention = TimestampTzPlusMilliseconds(now, dex_maintenance_naptime_ms);
		return Min(next, next_retention);
	}

	retention.cutoff = TimestampTzPlusMilliseconds(now, -(int64) dex_retention_period_s * 1000);
	retention.deleted = 0;
	more = run_batches(retention_pass_batch, &retention);
	if (retention.deleted > 0)
		ereport(DEBUG1,
				(errmsg("dex maintenance deleted " INT64_FORMAT " runs that ended before %s",
						retention.deleted, timestamptz_to_str(retention.cutoff))));
	now = GetCurrentTimestamp();
	next_retention = TimestampTzPlusMilliseconds(now, more ? MORE_WORK_SLEEP_MS : dex_maintenance_naptime_ms);
	return Min(next, next_retention);
}

static const DexWorkerLoop maintenance_loop = {
	.type = "dex maintenance",
	.running = "dex maintenance: status sweep and retention",
	.sleeping = "dex maintenance: sleeping until the next pass",
	.naptime_ms = &dex_maintenance_naptime_ms,
	.naptime_after_error = true,
	.pass = maintenance_pass,
};

void
dex_maintenance_main(Datum main_arg)
{
	dex_worker_main(main_arg, &maintenance_loop);
}
