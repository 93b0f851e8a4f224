/*-------------------------------------------------------------------------
 *
 * scheduler.c
 *	  The dex scheduler: a background worker per database that hands work
 *	  to workers when it falls due.
 *
 * Work that is due at once (a new run, an activity result) is made
 * pollable by the backend that creates it, in its own transaction.  The
 * scheduler owns what falls due later:
 *	  - delayed inbox events (timers, children's results for their parents):
 *		when due, the run gets a workflow task;
 *	  - run timers (run_timers.c): a delayed run starts, a run past its
 *		deadline ends TIMED_OUT;
 *	  - the ticks of schedules (engine/schedules.c, 1.7): each due tick
 *		starts at most one run in the pass that advances its schedule;
 *	  - activity tasks waiting out a retry backoff: when due, CREATED -> QUEUED;
 *	  - activity leases that expired: the attempt counts as failed and
 *		follows the retry policy (a task left to a run that ended goes);
 *	  - workflow-task leases that expired: the task is pollable again as it
 *		is; the scheduler only wakes the workers waiting on its queue;
 *	  - after a crash, the UNLOGGED task tables are empty: they are
 *		rebuilt from runs, history and inbox (rebuild.c);
 *	  - after a logical restore (pg_restore, or psql with a plain dump), the
 *		task tables, which a dump leaves out (api_queues.c), are empty; the
 *		trigger on dex.queue notes the restoring session in dex.lease
 *		('restore').  The restored tables arrive one by
 *		one, in transactions of their own or in parallel sessions, and a
 *		rebuild from some of them would make wrong tasks (an activity whose
 *		result is still to come queued again), so the scheduler waits, doing
 *		nothing, until that session has ended: a pg_restore, serial or
 *		parallel (whose workers all end together), has then restored
 *		everything.  It then rebuilds the task tables as after a crash,
 *		and has the runs swept into dex.run_status_index again (1.11,
 *		status_index.c).
 *
 * Each pass is one short transaction over at most BATCH_SIZE rows per duty;
 * a full batch makes the next pass start at once.  A pass that only made due
 * work pollable (inbox events no longer delayed; activity tasks QUEUED, which
 * are unlogged) commits without waiting for its WAL to be flushed: nobody
 * waits for its acknowledgement, whatever depends on it (the completion of
 * the workflow task it made) is durable only once it is, as the WAL is
 * flushed in order, and a crash that undoes it leaves the work due for the
 * next pass.  A pass that ended or started runs (run timers, schedules),
 * reclaimed leases or rebuilt the task tables waits for its flush: a client
 * may have read its effects, which are not redone as they were.  Between passes the
 * scheduler sleeps until the earliest due time, at most dex.scheduler_naptime,
 * or until a backend sets its latch on commit (wakeup.c).  It holds no
 * snapshot while it sleeps.  An error aborts the pass, is logged and counted
 * (dex.stat_counters), and the next pass starts after a second.  The loop,
 * the sleep and the recovery from an error are bgworker.c's.
 *
 * Locks: the scheduler never waits for a row lock (see the statements
 * below); only the rebuild takes dex's rebuild lock (locks.c).  The expired
 * leases a pass reclaims one by one are read through a DexRows, which keeps
 * them while the statements of each run (util/spi.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/timestamp.h"

#include "workers/workers.h"

PGDLLEXPORT void dex_scheduler_main(Datum main_arg);

#define BATCH_SIZE 1000
/* how soon to look again at due rows another transaction has locked */
#define LOCKED_RETRY_MS 100
/* how often to look whether a restoring session has ended */
#define RESTORE_RETRY_MS 1000

/* batches are MATERIALIZED CTEs so that a rescan cannot exceed the batch size */
/*
 * The scheduler never waits for a lock (the locking protocol in src/README.md):
 * it locks the runs of due rows with SKIP LOCKED, and a run another
 * transaction holds is passed over until a later pass.  Whoever inserts a
 * workflow task holds its run's lock, so the insert meets no task of a
 * transaction in progress, and a visible task is left as it is: it shows the
 * event when polled, or its completion, which must lock the run after us,
 * re-creates it.
 */
/*
 * [1] 1.6: the tasks with their runs' workflow and version.  The last column
 * is when the run's earliest event of the batch fell due (timer_lag).
 */
#define DUE_EVENTS_SQL(cols, run_cols) \
	"WITH batch AS MATERIALIZED (SELECT run_id, id, visible_from FROM dex.workflow_inbox " \
	"      WHERE delayed AND visible_from <= now() " \
	"      ORDER BY visible_from LIMIT $1 FOR UPDATE SKIP LOCKED), " \
	"runs AS MATERIALIZED (SELECT id, queue_id, priority, status, workflow_name, workflow_version " \
	"      FROM dex.workflow_run " \
	"      WHERE id IN (SELECT run_id FROM batch) ORDER BY id FOR NO KEY UPDATE SKIP LOCKED), " \
	"due AS (UPDATE dex.workflow_inbox i SET delayed = false FROM batch JOIN runs ON runs.id = batch.run_id " \
	"      WHERE i.run_id = batch.run_id AND i.id = batch.id RETURNING i.run_id) " \
	"INSERT INTO dex.workflow_task (queue_id, run_id, priority" cols ") " \
	"SELECT r.queue_id, r.id, r.priority" run_cols " FROM runs r " \
	"WHERE r.id IN (SELECT run_id FROM due) AND r.status IN ('CREATED', 'RUNNING') " \
	"AND NOT EXISTS (SELECT 1 FROM dex.workflow_task t WHERE t.run_id = r.id OFFSET 0) " \
	"ON CONFLICT DO NOTHING " \
	"RETURNING queue_id, (SELECT count(*) FROM batch), run_id" cols ", " \
	"(SELECT min(b.visible_from) FROM batch b WHERE b.run_id = workflow_task.run_id)"
static DexPlan due_events_plans[2] = {
	{DUE_EVENTS_SQL("", ""), 1, {INT4OID}},
	{DUE_EVENTS_SQL(DEX_TASK_RUN_COLS, ", r.workflow_name, r.workflow_version"), 1, {INT4OID}}
};

static DexPlan due_activities_plan = {
	"WITH batch AS MATERIALIZED (SELECT run_id, event_id FROM dex.activity_task "
	"      WHERE status = 'CREATED' AND visible_from <= now() "
	"      ORDER BY visible_from LIMIT $1 FOR UPDATE SKIP LOCKED) "
	"UPDATE dex.activity_task a SET status = 'QUEUED' FROM batch "
	"WHERE a.run_id = batch.run_id AND a.event_id = batch.event_id AND a.status = 'CREATED' "
	"RETURNING a.queue_id, a.name",
	1, {INT4OID}
};

/* expired activity leases, with their runs locked (SKIP LOCKED, as above) */
static DexPlan expired_leases_plan = {
	"SELECT t.run_id, t.event_id, t.attempt, t.retry_policy, t.locked_by, t.schedule_deadline, r.status, "
	"       t.queue_id, " DEX_QUEUE_LIMITED_SQL " "
	"FROM dex.activity_task t JOIN dex.workflow_run r ON r.id = t.run_id "
	"WHERE t.locked_by IS NOT NULL AND t.locked_until < now() "
	"ORDER BY t.locked_until LIMIT $1 "
	"FOR NO KEY UPDATE OF r SKIP LOCKED FOR UPDATE OF t SKIP LOCKED",
	1, {INT4OID}
};

/* a task left to a run that ended (see dex_end_runs) */
static DexPlan drop_activity_plan = {
	"WITH r AS (DELETE FROM dex.activity_retry WHERE run_id = $1 AND event_id = $2) "
	"DELETE FROM dex.activity_task WHERE run_id = $1 AND event_id = $2",
	2, {UUIDOID, INT4OID}
};

/*
 * Workflow tasks whose lease expired since the last pass are pollable again
 * without any write; their queues' waiting workers are told.
 */
static DexPlan expired_workflow_leases_plan = {
	"SELECT queue_id, count(*) FROM dex.workflow_task "
	"WHERE locked_by IS NOT NULL AND locked_until > $1 AND locked_until <= now() "
	"GROUP BY queue_id",
	1, {TIMESTAMPTZOID}
};

/* [1]: 1.4's run timers too; [2]: 1.7's schedules too */
#define NEXT_DUE_SQL(since_1_4) \
	"SELECT least((SELECT min(visible_from) FROM dex.workflow_inbox WHERE delayed), " \
	"             (SELECT min(visible_from) FROM dex.activity_task WHERE status = 'CREATED'), " \
	"             (SELECT min(locked_until) FROM dex.activity_task WHERE locked_by IS NOT NULL), " \
	since_1_4 \
	"             (SELECT min(locked_until) FROM dex.workflow_task " \
	"               WHERE locked_by IS NOT NULL AND locked_until > now()))"
static DexPlan next_due_plans[3] = {
	{NEXT_DUE_SQL(""), 0, {0}},
	{NEXT_DUE_SQL("(SELECT min(due_at) FROM dex.run_timer), "), 0, {0}},
	{NEXT_DUE_SQL("(SELECT min(due_at) FROM dex.run_timer), "
				  "(SELECT min(due_at) FROM dex.schedule WHERE due_at IS NOT NULL), "), 0, {0}}
};

static void scheduler_wakes_at(TimestampTz when);

/* workflow-task lease expiries up to this time have been announced */
static TimestampTz lease_horizon = DT_NOBEGIN;

/*
 * An activity whose lease expired (row "row" of expired_leases_plan): its
 * attempt failed.
 */
static void
reclaim_expired_lease(DexRows leases, uint64 row)
{
	bool		isnull;
	pg_uuid_t  *run_id = DatumGetUUIDP(dex_rows_getdatum(leases, row, 1, &isnull));
	int32		event_id = (int32) dex_rows_getint64(leases, row, 2);
	int32		attempt = (int32) dex_rows_getint64(leases, row, 3);
	bytea	   *policy = dex_rows_getbytea_copy(leases, row, 4);
	char	   *worker = dex_rows_gettext_copy(leases, row, 5);
	Datum		deadline = dex_rows_getdatum(leases, row, 6, &isnull);
	Dex__V1__Failure *failure;

	if (dex_status_is_terminal(dex_rows_gettext_copy(leases, row, 7)))
	{
		Datum		values[2] = {UUIDPGetDatum(run_id), Int32GetDatum(event_id)};

		dex_spi_exec(&drop_activity_plan, values, NULL, 0);
		return;
	}
	failure = palloc(sizeof(*failure));
	dex__v1__failure__init(failure);
	failure->message = psprintf("lease of worker \"%s\" expired (no completion or heartbeat in time)", worker);
	failure->type = "dex.LeaseExpired";
	dex_activity_attempt_failed(run_id, event_id, attempt, policy,
								isnull ? DT_NOEND : DatumGetTimestampTz(deadline), failure);
}

/*
 * The expired activity leases, all reclaimed: count them, and tell the
 * waiting workers of a queue with a capacity that it has room again.
 */
static void
leases_reclaimed(DexRows leases)
{
	for (uint64 i = 0; i < leases.n; i++)
	{
		int32		queue_id = (int32) dex_rows_getint64(leases, i, 8);

		dex_stat_add(queue_id, DEX_STAT_LEASES_EXPIRED, 1);
		if (dex_rows_getbool(leases, i, 9))
			dex_queue_work_added(queue_id);
	}
}

/* The session that restores dex's tables (api_queues.c), if any */
static DexPlan restore_plan = {
	"SELECT holder FROM dex.lease WHERE name = 'restore'", 0, {0}
};

/*
 * It has ended: the task tables are emptied and rebuilt from what it
 * restored.  Emptied, because what they hold was made from some of the
 * restored tables only: by a rebuild or a pass that began before the
 * restore was noted (the note commits with the first queue rows, and a
 * statement that read none of them may be followed by one that reads more),
 * or by a client.  A lease taken meanwhile is void, as are those of the
 * dump.
 */
static DexPlan restore_done_plan = {
	"WITH note AS (DELETE FROM dex.lease WHERE name IN ('restore', 'tasks_valid')), "
	"     workflow_tasks AS (DELETE FROM dex.workflow_task) "
	"DELETE FROM dex.activity_task",
	0, {0}
};

/* the restoring process already logged, so that it is logged once */
static int	restore_logged_pid = 0;

/*
 * Whether a restore of this database is in progress: its session (the
 * process noted by the trigger on dex.queue) is still connected here.  When
 * it has ended, the note goes and the task tables are emptied and marked
 * invalid, in this pass's transaction, so that the rebuild that follows
 * makes them from every restored row; the rebuild lock keeps API calls out
 * from here (locks.c).  A process id reused by another database's backend
 * does not count; one reused here only delays the rebuild until it ends.
 */
static bool
restore_in_progress(void)
{
	int			pid;
	PGPROC	   *proc;
	DexRows		restore = dex_spi_rows(&restore_plan, NULL, NULL, 1);

	if (restore.n == 0)
		return false;
	pid = atoi(dex_rows_gettext_copy(restore, 0, 1));
	proc = pid > 0 ? BackendPidGetProc(pid) : NULL;
	if (proc != NULL && proc->databaseId == MyDatabaseId)
	{
		if (pid != restore_logged_pid)
			ereport(LOG,
					(errmsg("dex scheduler: process %d is restoring database \"%s\"; the task tables will be rebuilt when its session ends",
							pid, dex_worker_database)));
		restore_logged_pid = pid;
		return true;
	}
	dex_lock_for_rebuild();
	dex_spi_exec(&restore_done_plan, NULL, NULL, 0);
	dex_reset_run_status_index();
	restore_logged_pid = 0;
	return false;
}

/*
 * The timer_lag histogram (shmem/latency.c): for each run the due events
 * statement woke (its rows), how late the scheduler was, from when the
 * run's earliest due event fell due (the last column) to now.
 */
static void
observe_timer_lag(DexRows rows)
{
	TimestampTz now = GetCurrentTimestamp();
	int			col = rows.tuptable->tupdesc->natts;

	for (uint64 i = 0; i < rows.n; i++)
		dex_latency_observe(DEX_LATENCY_TIMER_LAG, (int32) dex_rows_getint64(rows, i, 1),
							(TimestampTz) dex_rows_getint64(rows, i, col), now);
}

/*
 * One pass over the scheduler's duties, in a transaction of its own.
 * Returns when it should run next: now if a batch was full, else the
 * earliest due time (DT_NOEND if none).
 */
static TimestampTz
scheduler_pass(bool *installed)
{
	TimestampTz next = DT_NOEND;
	Datum		limit[1] = {Int32GetDatum(BATCH_SIZE)};
	bool		more = false;
	bool		durable = false;
	TimestampTz asked;
	DexRows		rows;
	int			v;
	int			fired;

	/* what was asked for until now is visible to this pass's statements */
	(void) dex_scheduler_take_requests();
	*installed = dex_worker_begin();
	if (!*installed)
		goto done;

	/* nothing runs on half-restored tables */
	if (restore_in_progress())
	{
		next = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), RESTORE_RETRY_MS);
		goto done;
	}
	if (dex_rebuild_tasks_if_needed())
	{
		ereport(LOG, (errmsg("dex scheduler rebuilt the task tables of database \"%s\"",
							 dex_worker_database)));
		durable = true;
	}

	/* the dex_*_spi functions read the rows of the latest statement */
	v = dex_schema_1_6();
	rows = dex_spi_rows(&due_events_plans[v], limit, NULL, 0);
	dex_queue_run_tasks_added_spi(1, 3, v ? 4 : 0);
	dex_stat_count_spi(DEX_STAT_TASKS_CREATED, 1);
	dex_stat_add(0, DEX_STAT_RUNS_WOKEN, (int64) rows.n);
	observe_timer_lag(rows);
	if (rows.n > 0 && dex_rows_getint64(rows, 0, 2) >= BATCH_SIZE)
		more = true;

	/* delayed runs that start, runs that time out (1.4) */
	fired = dex_schema_1_4() ? dex_fire_run_timers(BATCH_SIZE) : 0;
	more |= fired >= BATCH_SIZE;
	durable |= fired > 0;

	/* the ticks of schedules (1.7) */
	fired = dex_schema_schedules() ? dex_fire_schedules(BATCH_SIZE) : 0;
	more |= fired >= BATCH_SIZE;
	durable |= fired > 0;

	rows = dex_spi_rows(&due_activities_plan, limit, NULL, 0);
	dex_queue_activities_added_spi(1, 2);
	dex_stat_count_spi(DEX_STAT_RETRIES_DUE, 1);
	if (rows.n >= BATCH_SIZE)
		more = true;

	{
		Datum		horizon[1] = {TimestampTzGetDatum(lease_horizon)};
		DexRows		expired = dex_spi_rows(&expired_workflow_leases_plan, horizon, NULL, 0);

		for (uint64 i = 0; i < expired.n; i++)
			dex_queue_tasks_added((int32) dex_rows_getint64(expired, i, 1),
								  dex_rows_getint64(expired, i, 2));
		lease_horizon = GetCurrentTransactionStartTimestamp();
	}

	rows = dex_spi_rows(&expired_leases_plan, limit, NULL, 0);
	if (rows.n >= BATCH_SIZE)
		more = true;
	for (uint64 i = 0; i < rows.n; i++)
		reclaim_expired_lease(rows, i);
	leases_reclaimed(rows);
	durable |= rows.n > 0;

	if (more)
		next = GetCurrentTimestamp();
	else
	{
		bool		isnull;
		Datum		d;

		rows = dex_spi_rows(&next_due_plans[dex_schema_schedules() ? 2 : dex_schema_1_4()],
							NULL, NULL, 1);
		d = dex_rows_getdatum(rows, 0, 1, &isnull);
		if (!isnull)
			next = DatumGetTimestampTz(d);

		/*
		 * Work already due when this pass's statements ran (now() is the
		 * transaction's start) is left only if another transaction holds its
		 * rows (SKIP LOCKED).  Passing again at once would spin until that
		 * transaction ends, so look again a little later.
		 */
		if (next <= GetCurrentTransactionStartTimestamp())
			next = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), LOCKED_RETRY_MS);
	}

	/* only made due work pollable: no need to wait for the flush (see the header) */
	if (!durable)
		dex_commit_without_flush();

done:

	/*
	 * Its statements have run: a commit from now on with work due before
	 * "next" sets the latch; what commits asked for while they ran, which
	 * they may not have seen, is taken (wakeup.c).  Published before the
	 * commit, which wakes workers: one that leases a task at once asks for a
	 * wake-up at its lease's end.
	 */
	scheduler_wakes_at(next);
	asked = dex_scheduler_take_requests();
	if (asked < next)
		next = asked;
	dex_worker_commit();
	return next;
}

/*
 * Publish when the scheduler wakes by itself: a backend sets its latch at
 * commit if it made work due before then (wakeup.c).  While a pass runs its
 * statements it is "never": such a commit records its due time, which the
 * pass takes when it ends (it might not have seen the work).
 */
static void
scheduler_wakes_at(TimestampTz when)
{
	dex_scheduler_set_next_wake(when);
	pg_memory_barrier();
}

/* the duration of each pass, and the failed ones (dex.stat_counters) */
static void
scheduler_pass_ended(bool failed)
{
	dex_stat_scheduler_pass(GetCurrentStatementStartTimestamp(), failed);
}

static const DexWorkerLoop scheduler_loop = {
	.type = "dex scheduler",
	.scheduler = true,
	.running = "dex scheduler pass",
	.sleeping = "dex scheduler: sleeping until work falls due or a commit wakes it",
	.naptime_ms = &dex_scheduler_naptime_ms,
	.pass = scheduler_pass,
	.wakes_at = scheduler_wakes_at,
	.pass_ended = scheduler_pass_ended,
};

void
dex_scheduler_main(Datum main_arg)
{
	dex_worker_main(main_arg, &scheduler_loop);
}
