/*-------------------------------------------------------------------------
 *
 * complete_activity.c
 *	  Completing activity tasks, many per statement: the runs locked, the
 *	  task rows fenced, each result given to its run as an
 *	  ActivityTaskCompleted event in the inbox.
 *
 * dex_complete_activity_tasks runs in the caller's transaction and SPI
 * connection, with a fixed number of statements whatever the size of the
 * batch.  The items are sorted by run id and task id; the runs are locked
 * FOR SHARE in that order, as adding events asks (the locking protocol in
 * src/README.md).  The fence deletes a task row only with its current lock
 * version; a task whose lease is lost, or whose run ended meanwhile, is
 * skipped (done = false) before anything is written for it, or, with
 * raise_lost, reported as an error (fence.c).  A task of a queue the caller
 * may not use fails the whole call (access.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/timestamp.h"

#include "engine/engine.h"

static int
compare_activity_items(const void *a, const void *b)
{
	const DexActivityCompletion *x = a;
	const DexActivityCompletion *y = b;
	int			c = memcmp(x->run_id, y->run_id, UUID_LEN);

	if (c != 0)
		return c;
	return (x->task_id > y->task_id) - (x->task_id < y->task_id);
}

/*
 * The runs of the items (sorted), locked FOR SHARE: whether each item's run
 * ended.  A run that is gone counts as ended.
 */
static bool *
lock_runs_of(DexActivityCompletion *items, int n, Datum run_ids)
{
	bool	   *ended = palloc(sizeof(bool) * Max(n, 1));
	int			k = 0;

	dex_lock_runs(run_ids, true);
	for (int i = 0; i < n; i++)
		ended[i] = true;
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		pg_uuid_t  *id = DatumGetUUIDP(dex_spi_getdatum(r, 1, &isnull));
		char	   *status = dex_spi_gettext_copy(r, 2);

		for (; k < n && memcmp(items[k].run_id, id, UUID_LEN) < 0; k++)
			;
		for (; k < n && memcmp(items[k].run_id, id, UUID_LEN) == 0; k++)
			ended[k] = dex_status_is_terminal(status);
	}
	return ended;
}

static DexPlan fence_activities_plan = {
	"DELETE FROM dex.activity_task t "
	"USING unnest($1::uuid[], $2::integer[], $3::bigint[]) AS b(run_id, event_id, lock_version) "
	"WHERE t.run_id = b.run_id AND t.event_id = b.event_id AND t.lock_version = b.lock_version "
	"AND t.locked_by IS NOT NULL "
	"RETURNING t.run_id, t.event_id, t.lock_version, t.attempt, t.queue_id, " DEX_QUEUE_LIMITED_SQL ", "
	"          t.locked_by, t.attempt_started_at",
	3, {UUIDARRAYOID, INT4ARRAYOID, INT8ARRAYOID}
};

/* an activity that succeeded after retries no longer needs its retry record */
static DexPlan forget_retries_plan = {
	"DELETE FROM dex.activity_retry r USING unnest($1::uuid[], $2::integer[]) AS d(run_id, event_id) "
	"WHERE r.run_id = d.run_id AND r.event_id = d.event_id",
	2, {UUIDARRAYOID, INT4ARRAYOID}
};

/*
 * The fence: the task rows deleted with their lock versions, except those
 * of runs that ended (item->done, attempts[i]); then the retry records of
 * the activities that succeeded after a retry.  values: the run ids, task
 * ids and lock versions.
 */
static void
fence_activity_tasks(DexActivityCompletion *items, int n, Datum *values, const bool *ended,
					 int32 *attempts, char **workers, TimestampTz *started, bool raise_lost)
{
	ArrayBuildState *retried_runs = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	ArrayBuildState *retried_ids = initArrayResult(INT4OID, CurrentMemoryContext, false);
	TimestampTz now = GetCurrentTimestamp();

	dex_spi_exec(&fence_activities_plan, values, NULL, 0);
	dex_check_queue_use_spi(5);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		pg_uuid_t  *id = DatumGetUUIDP(dex_spi_getdatum(r, 1, &isnull));
		int32		task_id = (int32) dex_spi_getint64(r, 2);
		int64		version = dex_spi_getint64(r, 3);

		for (int i = 0; i < n; i++)
		{
			if (items[i].done || items[i].task_id != task_id ||
				items[i].lock_version != version ||
				memcmp(items[i].run_id, id, UUID_LEN) != 0)
				continue;
			if (ended[i])
				break;
			items[i].done = true;
			attempts[i] = (int32) dex_spi_getint64(r, 4);
			workers[i] = dex_spi_gettext_copy(r, 7);
			started[i] = (TimestampTz) dex_spi_getint64(r, 8);
			dex_stat_add((int32) dex_spi_getint64(r, 5), DEX_STAT_TASKS_COMPLETED, 1);
			if (started[i] != 0)
				dex_latency_observe(DEX_LATENCY_ACTIVITY_EXECUTION, (int32) dex_spi_getint64(r, 5),
									started[i], now);
			if (attempts[i] > 1)
			{
				dex_array_add(retried_runs, UUIDPGetDatum(items[i].run_id), false);
				dex_array_add(retried_ids, Int32GetDatum(items[i].task_id), false);
			}
			break;
		}
	}
	dex_queue_room_freed_spi(5, 6);
	for (int i = 0; i < n; i++)
		dex_stat_add(0, DEX_STAT_LEASES_LOST, items[i].done ? 0 : 1);
	if (raise_lost)
		for (int i = 0; i < n; i++)
			if (!items[i].done)
				dex_report_lost_lease(items[i].run_id, items[i].task_id, items[i].lock_version);

	if (retried_runs->nelems > 0)
	{
		values[0] = dex_array_result(retried_runs);
		values[1] = dex_array_result(retried_ids);
		dex_spi_exec(&forget_retries_plan, values, NULL, 0);
	}
}

/*
 * Complete fenced activity tasks (see the file header): on return,
 * item->done says whether each result was accepted.
 */
void
dex_complete_activity_tasks(DexActivityCompletion *items, int n, bool raise_lost)
{
	ArrayBuildState *run_ids = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	ArrayBuildState *task_ids = initArrayResult(INT4OID, CurrentMemoryContext, false);
	ArrayBuildState *versions = initArrayResult(INT8OID, CurrentMemoryContext, false);
	Datum		values[3];
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	DexInboxBatch inbox;
	int32	   *attempts = palloc0(sizeof(int32) * Max(n, 1));
	char	  **workers = palloc0(sizeof(char *) * Max(n, 1));
	TimestampTz *started = palloc0(sizeof(TimestampTz) * Max(n, 1));
	bool	   *ended;

	if (n == 0)
		return;
	qsort(items, n, sizeof(DexActivityCompletion), compare_activity_items);
	for (int i = 0; i < n; i++)
	{
		items[i].done = false;
		dex_array_add(run_ids, UUIDPGetDatum(items[i].run_id), false);
		dex_array_add(task_ids, Int32GetDatum(items[i].task_id), false);
		dex_array_add(versions, Int64GetDatum(items[i].lock_version), false);
	}

	values[0] = dex_array_result(run_ids);
	ended = lock_runs_of(items, n, values[0]);
	values[1] = dex_array_result(task_ids);
	values[2] = dex_array_result(versions);
	fence_activity_tasks(items, n, values, ended, attempts, workers, started, raise_lost);

	/* the results, to their runs */
	dex_inbox_batch_init(&inbox);
	for (int i = 0; i < n; i++)
	{
		Dex__V1__WorkflowEvent *ev;

		if (!items[i].done)
			continue;
		/* the attempt's worker and start: dex.run_attempts reads them */
		ev = dex_event_activity_task_completed(now, items[i].task_id, items[i].result, attempts[i]);
		ev->activity_task_completed->worker_id = workers[i];
		if (started[i] != 0)
			ev->activity_task_completed->started_at = dex_pb_timestamp(started[i]);
		dex_inbox_batch_add(&inbox, items[i].run_id, ev, now);
	}
	dex_inbox_batch_flush(&inbox);
}
