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
 * The fence names the tasks' queue where it can, so that its probe reads the
 * whole primary key (run, event, queue); the delete then names the runs only
 * (as the workflow fence, complete_workflow.c); up to schema 1.7, whose task
 * tables had a partition per queue, the queue kept the probe on that queue's
 * partition (initial pruning) instead of every queue's.  An activity task stays on its queue
 * for good, and the backend that leased it remembers
 * that queue (dex_note_leased_activities: workers usually complete on the
 * connection that polled); an item it does not know, or that the named
 * queue did not have, goes through the fence without the queue, so a wrong
 * or missing note only costs time, never a lease.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
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

/*
 * The form with the queue finds each task by its primary key, then deletes
 * the tasks found, again by primary key, each only with its own (run, task,
 * lock version), as the workflow fence does (complete_workflow.c says why);
 * a retry's backoff takes the lease away (locked_by NULL, the lock version
 * kept), so the lease is checked too.
 */
#define FENCE_ACTIVITIES_RETURNING \
	"RETURNING t.run_id, t.event_id, t.lock_version, t.attempt, t.queue_id, " DEX_QUEUE_LIMITED_SQL ", " \
	"          t.locked_by, t.attempt_started_at"
static DexPlan fence_activities_plan = {
	"DELETE FROM dex.activity_task t "
	"USING unnest($1::uuid[], $2::integer[], $3::bigint[]) AS b(run_id, event_id, lock_version) "
	"WHERE t.run_id = b.run_id AND t.event_id = b.event_id AND t.lock_version = b.lock_version "
	"AND t.locked_by IS NOT NULL "
	FENCE_ACTIVITIES_RETURNING,
	3, {UUIDARRAYOID, INT4ARRAYOID, INT8ARRAYOID}
};
static DexPlan fence_queue_activities_plan = {
	"WITH f AS MATERIALIZED (SELECT a.run_id, a.event_id, a.lock_version "
	"  FROM unnest($1::uuid[], $2::integer[], $3::bigint[]) AS b(run_id, event_id, lock_version), "
	"  LATERAL (SELECT a.run_id, a.event_id, a.lock_version FROM dex.activity_task a "
	"           WHERE a.run_id = b.run_id AND a.event_id = b.event_id AND a.queue_id = $4 "
	"           AND a.lock_version = b.lock_version AND num_nonnulls(a.locked_by) = 1 LIMIT 1) a) "
	"DELETE FROM dex.activity_task t WHERE t.run_id = ANY (ARRAY(SELECT run_id FROM f)) "
	"AND (t.run_id, t.event_id, t.lock_version) = ANY (ARRAY(SELECT (f.run_id, f.event_id, f.lock_version) FROM f)) "
	"AND num_nonnulls(t.locked_by) = 1 "
	FENCE_ACTIVITIES_RETURNING,
	4, {UUIDARRAYOID, INT4ARRAYOID, INT8ARRAYOID, INT4OID}
};

/* an activity that succeeded after retries no longer needs its retry record */
static DexPlan forget_retries_plan = {
	"DELETE FROM dex.activity_retry r USING unnest($1::uuid[], $2::integer[]) AS d(run_id, event_id) "
	"WHERE r.run_id = d.run_id AND r.event_id = d.event_id",
	2, {UUIDARRAYOID, INT4ARRAYOID}
};

/*
 * The queues of the activity tasks this backend leased, by (run, task):
 * kept for the session in TopMemoryContext, forgotten when the task is
 * completed, and all at once past LEASED_QUEUES_MAX entries (tasks leased
 * and never completed here).
 */
#define LEASED_QUEUES_MAX 65536

typedef struct LeasedTaskKey
{
	pg_uuid_t	run_id;
	int32		task_id;
} LeasedTaskKey;

typedef struct LeasedQueue
{
	LeasedTaskKey key;
	int32		queue_id;
} LeasedQueue;

static HTAB *leased_queues = NULL;

static LeasedTaskKey
leased_key(const pg_uuid_t *run_id, int32 task_id)
{
	LeasedTaskKey key;

	memset(&key, 0, sizeof(key));
	memcpy(&key.run_id, run_id, sizeof(pg_uuid_t));
	key.task_id = task_id;
	return key;
}

/*
 * Note the queue of the activity tasks the lease statement just returned
 * (columns run id and task id of SPI_tuptable).
 */
void
dex_note_leased_activities(int32 queue_id, int run_col, int task_col)
{
	if (leased_queues == NULL || hash_get_num_entries(leased_queues) + SPI_processed > LEASED_QUEUES_MAX)
	{
		HASHCTL		ctl;

		if (leased_queues != NULL)
			hash_destroy(leased_queues);
		ctl.keysize = sizeof(LeasedTaskKey);
		ctl.entrysize = sizeof(LeasedQueue);
		ctl.hcxt = TopMemoryContext;
		leased_queues = hash_create("dex leased activity queues", 1024, &ctl,
									HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		LeasedTaskKey key = leased_key(DatumGetUUIDP(dex_spi_getdatum(r, run_col, &isnull)),
									   (int32) dex_spi_getint64(r, task_col));
		LeasedQueue *e = hash_search(leased_queues, &key, HASH_ENTER, NULL);

		e->queue_id = queue_id;
	}
}

/* The queue of the item's task if this backend leased it (forgotten now), else -1 */
static int32
take_leased_queue(const DexActivityCompletion *item)
{
	LeasedTaskKey key;
	LeasedQueue *e;
	int32		queue_id;

	if (leased_queues == NULL)
		return -1;
	key = leased_key(item->run_id, item->task_id);
	e = hash_search(leased_queues, &key, HASH_FIND, NULL);
	if (e == NULL)
		return -1;
	queue_id = e->queue_id;
	hash_search(leased_queues, &key, HASH_REMOVE, NULL);
	return queue_id;
}

/* What the fence learns of each item */
typedef struct Fenced
{
	const bool *ended;			/* its run ended (lock_runs_of) */
	bool	   *found;			/* its task row was deleted */
	int32	   *attempts;
	char	  **workers;
	TimestampTz *started;
	ArrayBuildState *retried_runs;	/* the activities that succeeded after a retry */
	ArrayBuildState *retried_ids;
} Fenced;

/*
 * One fence statement, for the items that want it: on queue queue_id, or
 * (-1) on every queue.
 */
static void
fence_items(DexActivityCompletion *items, int n, const bool *want, int32 queue_id, Fenced *f)
{
	ArrayBuildState *run_ids = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	ArrayBuildState *task_ids = initArrayResult(INT4OID, CurrentMemoryContext, false);
	ArrayBuildState *versions = initArrayResult(INT8OID, CurrentMemoryContext, false);
	Datum		values[4];
	TimestampTz now = GetCurrentTimestamp();

	for (int i = 0; i < n; i++)
	{
		if (!want[i])
			continue;
		dex_array_add(run_ids, UUIDPGetDatum(items[i].run_id), false);
		dex_array_add(task_ids, Int32GetDatum(items[i].task_id), false);
		dex_array_add(versions, Int64GetDatum(items[i].lock_version), false);
	}
	values[0] = dex_array_result(run_ids);
	values[1] = dex_array_result(task_ids);
	values[2] = dex_array_result(versions);
	values[3] = Int32GetDatum(queue_id);
	dex_spi_exec(queue_id < 0 ? &fence_activities_plan : &fence_queue_activities_plan,
				 values, NULL, 0);
	dex_check_queue_use_spi(5);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		pg_uuid_t  *id = DatumGetUUIDP(dex_spi_getdatum(r, 1, &isnull));
		int32		task_id = (int32) dex_spi_getint64(r, 2);
		int64		version = dex_spi_getint64(r, 3);

		for (int i = 0; i < n; i++)
		{
			if (!want[i] || f->found[i] || items[i].task_id != task_id ||
				items[i].lock_version != version ||
				memcmp(items[i].run_id, id, UUID_LEN) != 0)
				continue;
			f->found[i] = true;
			if (f->ended[i])
				break;
			items[i].done = true;
			f->attempts[i] = (int32) dex_spi_getint64(r, 4);
			f->workers[i] = dex_spi_gettext_copy(r, 7);
			f->started[i] = (TimestampTz) dex_spi_getint64(r, 8);
			dex_stat_add((int32) dex_spi_getint64(r, 5), DEX_STAT_TASKS_COMPLETED, 1);
			if (f->started[i] != 0)
				dex_latency_observe(DEX_LATENCY_ACTIVITY_EXECUTION, (int32) dex_spi_getint64(r, 5),
									f->started[i], now);
			if (f->attempts[i] > 1)
			{
				dex_array_add(f->retried_runs, UUIDPGetDatum(items[i].run_id), false);
				dex_array_add(f->retried_ids, Int32GetDatum(items[i].task_id), false);
			}
			break;
		}
	}
	dex_queue_room_freed_spi(5, 6);
}

/*
 * The fence: the task rows deleted with their lock versions, except those
 * of runs that ended (item->done, f->attempts[i]), a statement per queue
 * this backend knows the items' tasks on, then one on every queue for the
 * others and for those their queue did not have; then the retry records of
 * the activities that succeeded after a retry.
 */
static void
fence_activity_tasks(DexActivityCompletion *items, int n, Fenced *f, bool raise_lost)
{
	int32	   *queues = palloc(sizeof(int32) * n);
	bool	   *want = palloc(sizeof(bool) * n);
	bool		left = false;

	for (int i = 0; i < n; i++)
		queues[i] = take_leased_queue(&items[i]);
	for (int i = 0; i < n; i++)
	{
		bool		seen = queues[i] < 0;

		for (int j = 0; j < i && !seen; j++)
			seen = queues[j] == queues[i];
		if (seen)
			continue;
		for (int j = 0; j < n; j++)
			want[j] = queues[j] == queues[i];
		fence_items(items, n, want, queues[i], f);
	}
	for (int i = 0; i < n; i++)
	{
		want[i] = !f->found[i];
		left |= want[i];
	}
	if (left)
		fence_items(items, n, want, -1, f);

	for (int i = 0; i < n; i++)
		dex_stat_add(0, DEX_STAT_LEASES_LOST, items[i].done ? 0 : 1);
	if (raise_lost)
		for (int i = 0; i < n; i++)
			if (!items[i].done)
				dex_report_lost_lease(items[i].run_id, items[i].task_id, items[i].lock_version);

	if (f->retried_runs->nelems > 0)
	{
		Datum		values[2];

		values[0] = dex_array_result(f->retried_runs);
		values[1] = dex_array_result(f->retried_ids);
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
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	DexInboxBatch inbox;
	Fenced		f;

	if (n == 0)
		return;
	qsort(items, n, sizeof(DexActivityCompletion), compare_activity_items);
	for (int i = 0; i < n; i++)
	{
		items[i].done = false;
		dex_array_add(run_ids, UUIDPGetDatum(items[i].run_id), false);
	}

	f.ended = lock_runs_of(items, n, dex_array_result(run_ids));
	f.found = palloc0(sizeof(bool) * n);
	f.attempts = palloc0(sizeof(int32) * n);
	f.workers = palloc0(sizeof(char *) * n);
	f.started = palloc0(sizeof(TimestampTz) * n);
	f.retried_runs = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	f.retried_ids = initArrayResult(INT4OID, CurrentMemoryContext, false);
	fence_activity_tasks(items, n, &f, raise_lost);

	/* the results, to their runs */
	dex_inbox_batch_init(&inbox);
	for (int i = 0; i < n; i++)
	{
		Dex__V1__WorkflowEvent *ev;

		if (!items[i].done)
			continue;
		/* the attempt's worker and start: dex.run_attempts reads them */
		ev = dex_event_activity_task_completed(now, items[i].task_id, items[i].result, f.attempts[i]);
		ev->activity_task_completed->worker_id = f.workers[i];
		if (f.started[i] != 0)
			ev->activity_task_completed->started_at = dex_pb_timestamp(f.started[i]);
		dex_inbox_batch_add(&inbox, items[i].run_id, ev, now);
	}
	dex_inbox_batch_flush(&inbox);
}
