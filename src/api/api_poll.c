/*-------------------------------------------------------------------------
 *
 * api_poll.c
 *	  dex.poll_tasks and dex.poll_tasks_pb: leasing the tasks of a queue to
 *	  a worker, with the task messages they show; the room a queue with a
 *	  capacity has left.
 *
 * Locks and transactions.  A poll runs in the caller's transaction, which a
 * worker may keep open, and writes task rows only: it takes the rebuild lock
 * shared first (engine/locks.c), then leases with one statement FOR UPDATE
 * SKIP LOCKED, so that polls never wait for each other's rows nor for a task
 * row another transaction holds.  The runs of the leased workflow tasks are
 * read, not locked.  A queue with a capacity is the exception: its polls
 * take its capacity lock, and hold it until their transaction ends (below).
 * The scheduler is woken at commit for the leases' ends.
 *
 * A task shows the events visible by the clock, not by the transaction's
 * start: the event that made the task may have been committed by a
 * transaction that started after ours.
 *
 * An activity's lease never outlasts its timeouts: start-to-close (from the
 * attempt's start), heartbeat (from the last heartbeat) and schedule-to-close
 * (from its scheduling, across attempts).  A lease that expires counts as a
 * failed attempt (the scheduler reclaims it).
 *
 * A worker may declare what it runs (1.6): the (workflow, version) pairs on a
 * workflow queue, the activity names on an activity queue.  Its poll then
 * reads, per declared pair or name, the first ready tasks from an index of
 * that key (workflow_task_version_idx, activity_task_name_idx), locking up
 * to max_tasks of each with SKIP LOCKED, and leases the best max_tasks of
 * them by priority and age: its cost grows with what it declares, not with
 * the tasks of other versions in the queue.  The others it locked stay
 * locked, not leased, until its transaction ends (other polls skip them).
 *
 * They order by (- priority), which only those indexes give without a sort:
 * ordered by priority, where statistics say one workflow fills the queue
 * (every task looks like a match), the planner takes the smaller poll index
 * instead and filters every task of the queue, for each declared key.
 *
 * The LIMIT subqueries of the lease statements are MATERIALIZED CTEs: as a
 * plain subquery the planner may rescan it inside a nested loop (it does with
 * statistics taken on an empty table), and every rescan skips the rows
 * already leased and returns new ones, so max_tasks would not hold.  The
 * UPDATE finds the rows the CTE locked by their ctid (a TID scan per row,
 * whatever the statistics): joined by run (and event) and queue, a generic
 * plan made while the task table was empty scanned the whole queue for each
 * row (W1's activity poll of 100 tasks: 69 ms).  The CTE returns the version
 * it locked, which nobody else can change before the UPDATE; one that a
 * concurrent transaction changed after this statement's snapshot and that
 * still qualifies is not visible to the UPDATE, and is left for the next
 * poll (its row lock held until this transaction ends).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "api/api_tasks.h"

#define MAX_TASKS_PER_POLL 1000

/*
 * When a task to be leased became ready, for the task_wait histogram
 * (shmem/latency.c): a workflow task when it was made or its last lease
 * expired (GREATEST skips a NULL locked_until); an activity task when it was
 * made, its retry backoff ended or its run was resumed (visible_from).
 */
#define WORKFLOW_READY_AT "GREATEST(created_at, locked_until)"
#define ACTIVITY_READY_AT "GREATEST(created_at, visible_from)"

/*
 * What the lease statements of workflow tasks do to the tasks c chose, and
 * what they return: the lease; the inbox events the task shows (read by
 * primary key: the ids it just took); the run's row (LEFT JOIN: a task whose
 * run is gone is leased and then dropped); when the task became ready, last.
 * So a workflow poll reads its tasks, their inbox events and their runs in
 * one statement, and their histories in one more.  The run's row is not
 * locked (as dex_load_runs(ids, false) does not).  [dex_schema_1_4()]
 */
#define LEASE_WORKFLOW_SET(since_1_4) \
	"UPDATE dex.workflow_task t SET locked_by = $3, locked_until = $5 + $4, " \
	"lock_version = nextval('dex.lease_version'), started_at = $5, " \
	"inbox_ids = ARRAY(SELECT i.id FROM dex.workflow_inbox i " \
	"                   WHERE i.run_id = t.run_id AND i.visible_from <= clock_timestamp() " \
	"                   ORDER BY i.visible_from, i.id) " \
	"FROM c LEFT JOIN dex.workflow_run r ON r.id = c.run_id " \
	"WHERE t.ctid = c.ctid AND t.queue_id = $1 " \
	"RETURNING t.run_id, t.lock_version, t.locked_until, t.started_at, " \
	"ARRAY(SELECT i.event FROM unnest(t.inbox_ids) WITH ORDINALITY AS u(id, n), " \
	"      LATERAL (SELECT j.event FROM dex.workflow_inbox j " \
	"               WHERE j.run_id = t.run_id AND j.id = u.id OFFSET 0) i ORDER BY u.n), " \
	"c.prev_by, c.prev_started, c.prev_until, " \
	DEX_RUN_COLS_SQL("r.", since_1_4) ", c.ready_at"
#define LEASE_PREV_COL 6		/* the lease the task had before, if any */
#define LEASE_RUN_COL 9			/* the first of the run's columns */

/*
 * The lease a task had before (c's prev_* columns): a lease that expired
 * unless its start is NULL (a failed task's backoff, engine/retry.c).
 */
#define PREV_LEASE_COLS(t) \
	t "locked_by AS prev_by, " t "started_at AS prev_started, " t "locked_until AS prev_until"

#define LEASE_WORKFLOW_SQL(since_1_4) \
	"WITH c AS MATERIALIZED (SELECT ctid, run_id, " WORKFLOW_READY_AT " AS ready_at, " PREV_LEASE_COLS("") " " \
	"      FROM dex.workflow_task " \
	"      WHERE queue_id = $1 AND (locked_until IS NULL OR locked_until <= $5) " \
	"      ORDER BY priority DESC, created_at LIMIT $2 FOR UPDATE SKIP LOCKED) " \
	LEASE_WORKFLOW_SET(since_1_4)

/* $5: the lease's start (see dex_poll_lease_start) */
static DexPlan lease_workflow_plans[2] = {
	{LEASE_WORKFLOW_SQL(DEX_RUN_COLS_BEFORE_1_4("r.")), 5,
	{INT4OID, INT4OID, TEXTOID, INTERVALOID, TIMESTAMPTZOID}},
	{LEASE_WORKFLOW_SQL(DEX_RUN_COLS_SINCE_1_4("r.")), 5,
	{INT4OID, INT4OID, TEXTOID, INTERVALOID, TIMESTAMPTZOID}}
};

#define LEASE_DECLARED_WORKFLOW_SQL(since_1_4) \
	"WITH c AS MATERIALIZED (SELECT s.ctid, s.run_id, s.ready_at, s.prev_by, s.prev_started, s.prev_until " \
	"      FROM unnest($6::text[], $7::integer[]) AS k(n, v), " \
	"      LATERAL (SELECT t.ctid, t.run_id, t.priority, t.created_at, " WORKFLOW_READY_AT " AS ready_at, " \
	"               " PREV_LEASE_COLS("t.") " " \
	"               FROM dex.workflow_task t " \
	"               WHERE t.queue_id = $1 AND t.workflow_name = k.n AND t.workflow_version = k.v " \
	"               AND (t.locked_until IS NULL OR t.locked_until <= $5) " \
	"               ORDER BY (- t.priority), t.created_at LIMIT $2 FOR UPDATE SKIP LOCKED) s " \
	"      ORDER BY s.priority DESC, s.created_at LIMIT $2) " \
	LEASE_WORKFLOW_SET(since_1_4)

/* $6, $7: the declared (workflow, version) pairs, each once (read_declared) */
static DexPlan lease_declared_workflow_plans[2] = {
	{LEASE_DECLARED_WORKFLOW_SQL(DEX_RUN_COLS_BEFORE_1_4("r.")), 7,
	{INT4OID, INT4OID, TEXTOID, INTERVALOID, TIMESTAMPTZOID, TEXTARRAYOID, INT4ARRAYOID}},
	{LEASE_DECLARED_WORKFLOW_SQL(DEX_RUN_COLS_SINCE_1_4("r.")), 7,
	{INT4OID, INT4OID, TEXTOID, INTERVALOID, TIMESTAMPTZOID, TEXTARRAYOID, INT4ARRAYOID}}
};

#define LEASE_ACTIVITY_SET \
	"UPDATE dex.activity_task t SET locked_by = $3, lock_version = nextval('dex.lease_version'), " \
	"attempt_started_at = $5, " \
	"locked_until = LEAST($5 + $4, " \
	"    $5 + make_interval(secs => coalesce(t.start_to_close_ms, 1e12) / 1000.0), " \
	"    $5 + make_interval(secs => coalesce(t.heartbeat_timeout_ms, 1e12) / 1000.0), " \
	"    coalesce(t.schedule_deadline, 'infinity')) " \
	"FROM c WHERE t.ctid = c.ctid AND t.queue_id = $1 " \
	"RETURNING t.run_id, t.event_id, t.lock_version, t.locked_until, t.name, t.argument, " \
	"t.attempt, t.retry_policy, t.last_failure, t.heartbeat_details, c.ready_at"

/* $6: the declared activity names, each once */
static DexPlan lease_declared_activity_plan = {
	"WITH c AS MATERIALIZED (SELECT s.ctid, s.ready_at FROM unnest($6::text[]) AS k(n), "
	"      LATERAL (SELECT t.ctid, t.priority, t.created_at, " ACTIVITY_READY_AT " AS ready_at "
	"               FROM dex.activity_task t "
	"               WHERE t.queue_id = $1 AND t.name = k.n AND t.status = 'QUEUED' "
	"               AND t.locked_by IS NULL "
	"               ORDER BY (- t.priority), t.created_at LIMIT $2 FOR UPDATE SKIP LOCKED) s "
	"      ORDER BY s.priority DESC, s.created_at LIMIT $2) "
	LEASE_ACTIVITY_SET,
	6, {INT4OID, INT4OID, TEXTOID, INTERVALOID, TIMESTAMPTZOID, TEXTARRAYOID}
};

static DexPlan lease_activity_plan = {
	"WITH c AS MATERIALIZED (SELECT ctid, " ACTIVITY_READY_AT " AS ready_at FROM dex.activity_task "
	"      WHERE queue_id = $1 AND status = 'QUEUED' AND locked_by IS NULL "
	"      ORDER BY priority DESC, created_at LIMIT $2 FOR UPDATE SKIP LOCKED) "
	LEASE_ACTIVITY_SET,
	5, {INT4OID, INT4OID, TEXTOID, INTERVALOID, TIMESTAMPTZOID}
};

/*
 * Capacity: a queue with one hands out at most that many tasks leased at
 * once.  Polls of such a queue take its capacity lock (locks.c) until their
 * transaction ends, so that two polls cannot both see the same room; polls
 * of other queues take none.
 */

static DexPlan leased_workflow_plan = {
	"SELECT count(*) FROM (SELECT 1 FROM dex.workflow_task WHERE queue_id = $1 "
	"  AND locked_by IS NOT NULL AND locked_until > $3 LIMIT $2) s",
	3, {INT4OID, INT4OID, TIMESTAMPTZOID}
};

static DexPlan leased_activity_plan = {
	"SELECT count(*) FROM (SELECT 1 FROM dex.activity_task WHERE queue_id = $1 "
	"  AND locked_by IS NOT NULL AND locked_until > $3 LIMIT $2) s",
	3, {INT4OID, INT4OID, TIMESTAMPTZOID}
};

/*
 * When a poll's leases start: its transaction's start (now()), or, for a
 * look of dex.poll_tasks_wait after it slept, the time it woke (its
 * transaction began before the sleep).  0 in args: now().
 */
TimestampTz
dex_poll_lease_start(const DexPollArgs *args)
{
	return args->lease_start != 0 ? args->lease_start : GetCurrentTransactionStartTimestamp();
}

/*
 * How many more tasks the queue may lease at "at" (INT_MAX: no limit, 0:
 * paused); with lock, a poll's, under the queue's capacity lock.
 */
int32
dex_queue_room(const DexQueue *queue, bool lock, TimestampTz at)
{
	Datum		values[3];

	if (queue->paused)
		return 0;
	if (queue->capacity == 0)
		return PG_INT32_MAX;
	if (lock)
		dex_lock_queue_polls(queue->id);
	values[0] = Int32GetDatum(queue->id);
	values[1] = Int32GetDatum(queue->capacity);
	values[2] = TimestampTzGetDatum(at);
	dex_spi_exec(queue->is_workflow ? &leased_workflow_plan : &leased_activity_plan,
				 values, NULL, 1);
	return queue->capacity - (int32) dex_spi_getint64(0, 1);
}

typedef DexPollArgs PollArgs;

/*
 * A name (and version) declared twice is kept once: the lease statement reads
 * each key's tasks once, and waiters and pollers hold each key once.
 */
static void
drop_repeated_keys(PollArgs *args)
{
	int			n = 0;

	for (int i = 0; i < args->n_names; i++)
	{
		bool		seen = false;

		for (int j = 0; j < n && !seen; j++)
			seen = args->keys[j] == args->keys[i] &&
				(args->versions == NULL || args->versions[j] == args->versions[i]) &&
				strcmp(args->names[j], args->names[i]) == 0;
		if (seen)
			continue;
		args->names[n] = args->names[i];
		if (args->versions)
			args->versions[n] = args->versions[i];
		args->keys[n++] = args->keys[i];
	}
	args->n_names = n;
}

/*
 * What a poll declares it runs (1.6): names, argument names_arg, and
 * versions, the next one, if the function has them; checked here, and
 * against the queue's kind by check_declared.  Copied: a procedure uses
 * them after commits.
 */
static void
read_declared(FunctionCallInfo fcinfo, int names_arg, PollArgs *args)
{
	Datum	   *names;
	Datum	   *versions = NULL;
	int			n_versions = 0;

	args->n_names = 0;
	args->names = NULL;
	args->versions = NULL;
	args->keys = NULL;
	if (PG_NARGS() <= names_arg + 1)
		return;
	if (PG_ARGISNULL(names_arg))
	{
		if (!PG_ARGISNULL(names_arg + 1))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("versions are given without names"),
					 errhint("Declare the workflows with names and their versions with versions, one per name.")));
		return;
	}
	names = dex_batch_array(fcinfo, names_arg, TEXTOID, "names", false, NULL, &args->n_names);
	if (args->n_names == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("names is empty: the worker would run no task"),
				 errhint("A worker that runs every task of the queue passes NULL.")));
	if (args->n_names > DEX_MAX_DECLARED)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a poll declares at most %d names", DEX_MAX_DECLARED),
				 errdetail("This one declares %d.", args->n_names)));
	if (!PG_ARGISNULL(names_arg + 1))
	{
		versions = dex_batch_array(fcinfo, names_arg + 1, INT4OID, "versions", false, NULL, &n_versions);
		if (n_versions != args->n_names)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("names and versions must have one element per (workflow, version) pair"),
					 errdetail("There are %d names and %d versions.", args->n_names, n_versions)));
		args->versions = palloc(sizeof(int32) * args->n_names);
	}
	args->names = palloc(sizeof(char *) * args->n_names);
	args->keys = palloc(sizeof(uint64) * args->n_names);
	for (int i = 0; i < args->n_names; i++)
	{
		args->names[i] = TextDatumGetCString(names[i]);
		dex_check_name(args->names[i], versions ? "workflow name" : "name");
		if (versions)
		{
			args->versions[i] = DatumGetInt32(versions[i]);
			if (args->versions[i] < 1)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("workflow versions must be positive"),
						 errdetail("Workflow \"%s\" has version %d.", args->names[i], args->versions[i])));
		}
		args->keys[i] = dex_task_key(args->names[i], versions ? args->versions[i] : 0);
	}
	drop_repeated_keys(args);
}

/* What a poll declared fits its queue: (workflow, version) pairs, or activity names */
static void
check_declared(const DexQueue *queue, const PollArgs *args)
{
	if (args->n_names == 0)
		return;
	if (queue->is_workflow && args->versions == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a poll of workflow queue \"%s\" declares (workflow, version) pairs: versions are missing",
						queue->name)));
	if (!queue->is_workflow && args->versions != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a poll of activity queue \"%s\" declares activity names, without versions",
						queue->name)));
}

/*
 * The arguments 0 to 3 of a poll (dex.poll_tasks, dex.poll_tasks_wait):
 * queue, worker id, max tasks, lease duration; checked; worker_cache (1.5),
 * argument worker_cache_arg if the function has it (NULL: false); names
 * and versions (1.6) from argument names_arg on.
 */
static PollArgs
read_poll_args(FunctionCallInfo fcinfo, int worker_cache_arg, int names_arg)
{
	PollArgs	args;

	args.lease_start = 0;
	args.worker_cache = PG_NARGS() > worker_cache_arg && !PG_ARGISNULL(worker_cache_arg) &&
		PG_GETARG_BOOL(worker_cache_arg);

	dex_args_not_null(fcinfo, 4, "queue, worker id, max tasks and lease duration");
	args.queue_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	args.worker_id = text_to_cstring(PG_GETARG_TEXT_PP(1));
	args.max_tasks = PG_GETARG_INT32(2);
	args.lease = PG_GETARG_INTERVAL_P(3);

	dex_check_name(args.worker_id, "worker id");
	if (args.max_tasks < 1 || args.max_tasks > MAX_TASKS_PER_POLL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max tasks must be between 1 and %d", MAX_TASKS_PER_POLL),
				 errdetail("It was %d.", args.max_tasks)));
	dex_check_lease_duration(args.lease);
	read_declared(fcinfo, names_arg, &args);
	return args;
}

DexPollArgs
dex_read_poll_args(FunctionCallInfo fcinfo, int worker_cache_arg, int names_arg)
{
	return read_poll_args(fcinfo, worker_cache_arg, names_arg);
}

/*
 * The task_wait histogram: how long each task the lease statement just
 * leased at "start" had been ready (its last column), added up here and
 * flushed to shared memory at once.
 */
static void
observe_waits(int32 queue_id, TimestampTz start)
{
	int			col = SPI_tuptable->tupdesc->natts;
	DexLatencyBatch waits;

	dex_latency_batch_init(&waits, DEX_LATENCY_TASK_WAIT, queue_id);
	for (uint64 i = 0; i < SPI_processed; i++)
		dex_latency_batch_add(&waits, (TimestampTz) dex_spi_getint64(i, col), start);
	dex_latency_batch_flush(&waits);
}

/* see dex_poll_throttled_until */
static TimestampTz throttled_until = 0;

/*
 * Lease the queue's tasks to the worker: how many, their rows in
 * SPI_tuptable.  A paused queue hands out nothing, a full one nothing more,
 * a rate-limited one no more than its tokens (shmem/rate.c): it takes them
 * first and gives back those of tasks that were not there.
 */
static uint64
lease_tasks(const DexQueue *queue, const PollArgs *args)
{
	TimestampTz start = dex_poll_lease_start(args);
	int32		max_tasks;
	Datum		values[7];
	DexPlan    *plan;
	int64		tokens = 0;

	check_declared(queue, args);
	dex_polled(queue->id, args->keys, args->n_names);
	throttled_until = 0;
	max_tasks = Min(args->max_tasks, dex_queue_room(queue, true, start));
	if (max_tasks <= 0)
		return 0;
	if (queue->rate_limit > 0)
	{
		tokens = dex_rate_take(queue->id, queue->rate_limit, queue->rate_period_us,
							   queue->updated_at, max_tasks, &throttled_until);
		if (tokens == 0)
		{
			dex_rate_give_back(queue->id, 0, true);
			return 0;
		}
		max_tasks = (int32) tokens;
	}
	values[0] = Int32GetDatum(queue->id);
	values[1] = Int32GetDatum(max_tasks);
	values[2] = CStringGetTextDatum(args->worker_id);
	values[3] = IntervalPGetDatum(args->lease);
	values[4] = TimestampTzGetDatum(start);
	if (args->n_names == 0)
		plan = queue->is_workflow ? &lease_workflow_plans[dex_schema_1_4()] : &lease_activity_plan;
	else
	{
		Datum	   *names = palloc(sizeof(Datum) * args->n_names);

		for (int i = 0; i < args->n_names; i++)
			names[i] = CStringGetTextDatum(args->names[i]);
		values[5] = PointerGetDatum(construct_array(names, args->n_names, TEXTOID, -1, false,
													TYPALIGN_INT));
		if (queue->is_workflow)
		{
			Datum	   *versions = palloc(sizeof(Datum) * args->n_names);

			for (int i = 0; i < args->n_names; i++)
				versions[i] = Int32GetDatum(args->versions[i]);
			values[6] = PointerGetDatum(construct_array(versions, args->n_names, INT4OID, 4, true,
														TYPALIGN_INT));
		}
		plan = queue->is_workflow ? &lease_declared_workflow_plans[dex_schema_1_4()] :
			&lease_declared_activity_plan;
	}
	dex_spi_exec(plan, values, NULL, 0);
	if (SPI_processed > 0)
		dex_queue_leased(queue->id);	/* pollable again if the transaction aborts */
	if (!queue->is_workflow)
		dex_note_leased_activities(queue->id, 1, 2);	/* for their completion's fence */
	if (queue->rate_limit > 0)
	{
		/* the tokens of tasks that were not there go back; cut short if all were taken */
		dex_rate_give_back(queue->id, tokens - (int64) SPI_processed,
						   throttled_until != 0 && SPI_processed == (uint64) tokens);
		if (SPI_processed < (uint64) tokens)
			throttled_until = 0;
	}
	observe_waits(queue->id, start);
	return SPI_processed;
}

/*
 * When the rate limit of the queue the last poll looked at lets it lease
 * again, if the poll was cut short by it (or found no token); 0 if not.
 */
TimestampTz
dex_poll_throttled_until(void)
{
	return throttled_until;
}

/* A leased task, read back from the lease statement */
typedef struct Leased
{
	pg_uuid_t  *run_id;
	int32		task_id;
	int64		lock_version;
	TimestampTz locked_until;
	TimestampTz started_at;		/* workflow tasks */
	char	   *expired_by;		/* workflow tasks: the expired lease taken over */
	TimestampTz expired_started;
	TimestampTz expired_until;
	char	   *name;			/* activity tasks */
	bytea	   *argument;
	int32		attempt;
	bytea	   *retry_policy;
	bytea	   *last_failure;
	bytea	   *heartbeat_details;
	bool		dropped;		/* left to a run that ended: deleted, not returned */
} Leased;

/* What a poll leased */
typedef struct Leases
{
	uint64		n;
	Leased	   *tasks;
	HTAB	   *runs;			/* workflow tasks: their runs, with the inbox events shown */
} Leases;

/*
 * Row "row" of the workflow lease statement, after its run id: the lease,
 * and the task's run with the inbox events it shows (none if the run is
 * gone).  The events are copied out of SPI's memory with their array.
 */
static void
read_workflow_lease(uint64 row, Leased *t, Leases *leases)
{
	bool		isnull;
	Datum		events;
	DexRun	   *run;

	t->task_id = 0;
	t->lock_version = dex_spi_getint64(row, 2);
	t->locked_until = (TimestampTz) dex_spi_getint64(row, 3);
	t->started_at = (TimestampTz) dex_spi_getint64(row, 4);
	(void) dex_spi_getdatum(row, LEASE_PREV_COL + 1, &isnull);
	if (!isnull)
	{
		t->expired_by = dex_spi_gettext_copy(row, LEASE_PREV_COL);
		t->expired_started = (TimestampTz) dex_spi_getint64(row, LEASE_PREV_COL + 1);
		t->expired_until = (TimestampTz) dex_spi_getint64(row, LEASE_PREV_COL + 2);
	}
	run = dex_read_run(leases->runs, row, LEASE_RUN_COL);
	events = dex_spi_getdatum(row, 5, &isnull);
	if (run != NULL && !isnull)
	{
		Datum	   *elems;
		int			count;

		deconstruct_array(DatumGetArrayTypeP(SPI_datumTransfer(events, false, -1)), BYTEAOID,
						  -1, false, TYPALIGN_INT, &elems, NULL, &count);
		run->n_inbox = count;
		run->inbox = palloc(sizeof(bytea *) * Max(count, 1));
		for (int k = 0; k < count; k++)
			run->inbox[k] = DatumGetByteaPP(elems[k]);
	}
}

/* Row "row" of the activity lease statement, after its run id */
static void
read_activity_lease(uint64 row, Leased *t)
{
	t->task_id = (int32) dex_spi_getint64(row, 2);
	t->lock_version = dex_spi_getint64(row, 3);
	t->locked_until = (TimestampTz) dex_spi_getint64(row, 4);
	t->name = dex_spi_gettext_copy(row, 5);
	t->argument = dex_spi_getbytea_copy(row, 6);
	t->attempt = (int32) dex_spi_getint64(row, 7);
	t->retry_policy = dex_spi_getbytea_copy(row, 8);
	t->last_failure = dex_spi_getbytea_copy(row, 9);
	t->heartbeat_details = dex_spi_getbytea_copy(row, 10);
}

/*
 * Workflow tasks leased over an expired lease: the attempts of the workers
 * that lost them, for dex.run_attempts (LEASE_EXPIRED).  Recorded when the
 * task is taken over, not when the lease ends: until then, the worker's late
 * completion is still accepted.
 */
static void
record_expired_leases(Leases *leases)
{
	DexExpiredLease *expired = palloc(sizeof(DexExpiredLease) * Max(leases->n, 1));
	int			n = 0;

	for (uint64 i = 0; i < leases->n; i++)
	{
		Leased	   *t = &leases->tasks[i];

		if (t->expired_by == NULL)
			continue;
		expired[n].run_id = t->run_id;
		expired[n].worker_id = t->expired_by;
		expired[n].leased_at = t->expired_started;
		expired[n].ended_at = t->expired_until;
		n++;
	}
	if (n > 0)
		dex_record_expired_workflow_leases(expired, n);
}

/* Read the n leases back before the next statement replaces SPI_tuptable. */
static Leases
read_leases(bool is_workflow, uint64 n)
{
	Leases		leases;

	leases.n = n;
	leases.tasks = palloc0(sizeof(Leased) * Max(n, 1));
	leases.runs = is_workflow ? dex_new_runs() : NULL;
	for (uint64 i = 0; i < n; i++)
	{
		Leased	   *t = &leases.tasks[i];
		bool		isnull;

		t->run_id = DatumGetUUIDP(SPI_datumTransfer(dex_spi_getdatum(i, 1, &isnull),
													false, sizeof(pg_uuid_t)));
		if (is_workflow)
			read_workflow_lease(i, t, &leases);
		else
			read_activity_lease(i, t);
		/* the scheduler reclaims expired activity leases and announces expired workflow ones */
		dex_wake_scheduler_at_commit(t->locked_until);
	}
	if (is_workflow)
		record_expired_leases(&leases);
	return leases;
}

static DexPlan drop_tasks_plan = {
	"DELETE FROM dex.workflow_task WHERE run_id = ANY ($1)",
	1, {UUIDARRAYOID}
};

/*
 * A cancellation or a suspension withdraws a run's task with SKIP LOCKED
 * (see dex_end_runs): if a poll held it then, the task is still there after
 * the run ended (or, later, was deleted) or while it is suspended.  The poll
 * that leases it next deletes it instead of handing it out; dex.resume_run
 * gives the run a new one.
 */
static void
drop_tasks_of_ended_runs(HTAB *runs, Leased *leased, uint64 n)
{
	ArrayBuildState *ended = initArrayResult(UUIDOID, CurrentMemoryContext, false);

	for (uint64 i = 0; i < n; i++)
	{
		DexRun	   *run = dex_find_run(runs, leased[i].run_id);

		if (run == NULL || !dex_status_takes_tasks(run->status))
		{
			leased[i].dropped = true;
			dex_array_add(ended, UUIDPGetDatum(leased[i].run_id), false);
		}
	}
	if (ended->nelems > 0)
	{
		Datum		values[1] = {dex_array_result(ended)};

		dex_spi_exec(&drop_tasks_plan, values, NULL, 0);
	}
}

/*
 * The histories of the leased workflow tasks' runs.  Incremental histories:
 * with worker_cache, a run whose last workflow task this worker completed,
 * at the history length the run still has, needs only the batch that
 * completion recorded (shmem/run_cache.c); the history before it is left
 * out.  At most two statements: whole histories, and tails.
 */
static void
load_task_histories(HTAB *runs, pg_uuid_t **run_ids, int n, const PollArgs *args)
{
	uint32		worker = args->worker_cache ? dex_worker_hash(args->worker_id) : 0;
	pg_uuid_t **tail_ids = palloc(sizeof(pg_uuid_t *) * Max(n, 1));
	ArrayBuildState *seen = initArrayResult(INT4OID, CurrentMemoryContext, false);
	int			n_whole = 0;

	for (int i = 0; i < n; i++)
	{
		DexRun	   *run = dex_find_run(runs, run_ids[i]);
		int32		history_seen = 0;

		if (run != NULL && worker != 0 &&
			dex_run_holder(run_ids[i], run->history_length, &history_seen) == worker &&
			history_seen > 0)
		{
			run->history_omitted = history_seen;
			tail_ids[seen->nelems] = run_ids[i];
			dex_array_add(seen, Int32GetDatum(history_seen), false);
		}
		else
			run_ids[n_whole++] = run_ids[i];
	}
	if (n_whole > 0)
		dex_load_histories(runs, dex_uuid_array(run_ids, n_whole), (Datum) 0);
	if (seen->nelems > 0)
		dex_load_histories(runs, dex_uuid_array(tail_ids, seen->nelems), dex_array_result(seen));
}

/*
 * The histories the leased workflow tasks show, in one statement for the
 * whole batch (two with both whole and incremental histories): the lease
 * statement read their runs and inbox events.
 */
static HTAB *
load_workflow_runs(Leases *leases, const PollArgs *args)
{
	pg_uuid_t **run_ids = palloc(sizeof(pg_uuid_t *) * Max(leases->n, 1));

	for (uint64 i = 0; i < leases->n; i++)
		run_ids[i] = leases->tasks[i].run_id;
	load_task_histories(leases->runs, run_ids, (int) leases->n, args);
	drop_tasks_of_ended_runs(leases->runs, leases->tasks, leases->n);
	return leases->runs;
}

/*
 * The task message of a leased workflow task, as JSON or protobuf.  For
 * protobuf the stored history is copied, not decoded: WorkflowTask.history
 * has the field number of EventBatch.events.
 */
static Datum
workflow_task_datum(Leased *t, DexRun *run, const char *queue_name, const char *worker_id,
					bool protobuf)
{
	Dex__V1__WorkflowTask task;
	Size		hlen = run->history ? VARSIZE(run->history) - VARHDRSZ : 0;

	dex__v1__workflow_task__init(&task);
	task.new_events = dex_build_new_events(run, worker_id, t->started_at, 0, &task.n_new_events);
	task.run_id = dex_uuid_to_cstring(t->run_id);
	task.workflow_name = run->workflow_name;
	task.workflow_version = run->workflow_version;
	task.queue = (char *) queue_name;
	task.lock_version = t->lock_version;
	task.locked_until = dex_pb_timestamp(t->locked_until);
	task.status = dex_run_status_enum(run->status);
	task.history_length = run->history_length;
	task.history_omitted = run->history_omitted;

	if (!protobuf)
	{
		if (hlen > 0)
		{
			Dex__V1__EventBatch *batch = (Dex__V1__EventBatch *)
				dex_pb_unpack(&dex__v1__event_batch__descriptor,
							  (uint8 *) VARDATA(run->history), hlen, "history");

			task.history = batch->events;
			task.n_history = batch->n_events;
		}
		return JsonbPGetDatum(dex_pb_to_jsonb((ProtobufCMessage *) &task));
	}
	else
	{
		size_t		len;
		uint8	   *rest = dex_pb_pack((ProtobufCMessage *) &task, &len);
		bytea	   *out = palloc(VARHDRSZ + hlen + len);

		SET_VARSIZE(out, VARHDRSZ + hlen + len);
		if (hlen > 0)
			memcpy(VARDATA(out), VARDATA(run->history), hlen);
		memcpy(VARDATA(out) + hlen, rest, len);
		return PointerGetDatum(out);
	}
}

static Datum
activity_task_datum(Leased *t, const char *queue_name, bool protobuf)
{
	Dex__V1__ActivityTask task;

	dex__v1__activity_task__init(&task);
	task.run_id = dex_uuid_to_cstring(t->run_id);
	task.task_id = t->task_id;
	task.name = t->name;
	task.queue = (char *) queue_name;
	task.argument = t->argument ? dex_payload_unpack(t->argument, "argument") : NULL;
	task.attempt = t->attempt;
	task.lock_version = t->lock_version;
	task.locked_until = dex_pb_timestamp(t->locked_until);
	task.retry_policy = (Dex__V1__RetryPolicy *)
		dex_pb_unpack(&dex__v1__retry_policy__descriptor,
					  (uint8 *) VARDATA_ANY(t->retry_policy),
					  VARSIZE_ANY_EXHDR(t->retry_policy), "retry policy");
	if (t->heartbeat_details)
		task.heartbeat_details = dex_payload_unpack(t->heartbeat_details, "heartbeat details");
	if (t->last_failure)
		task.last_failure = (Dex__V1__Failure *)
			dex_pb_unpack(&dex__v1__failure__descriptor,
						  (uint8 *) VARDATA_ANY(t->last_failure),
						  VARSIZE_ANY_EXHDR(t->last_failure), "failure");
	if (!protobuf)
		return JsonbPGetDatum(dex_pb_to_jsonb((ProtobufCMessage *) &task));
	return PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) &task));
}

/*
 * The result rows, one per lease not dropped: (kind, run_id, task_id,
 * lock_version, locked_until, task).  runs: the workflow tasks' runs.
 */
static void
put_tasks(ReturnSetInfo *rsinfo, const DexQueue *queue, const Leases *leases, HTAB *runs,
		  const char *worker_id, bool protobuf)
{
	for (uint64 i = 0; i < leases->n; i++)
	{
		Leased	   *t = &leases->tasks[i];
		Datum		out[6];
		bool		nulls[6] = {false, false, false, false, false, false};

		if (t->dropped)
			continue;
		out[0] = CStringGetTextDatum(queue->is_workflow ? "workflow" : "activity");
		out[1] = UUIDPGetDatum(t->run_id);
		out[2] = Int32GetDatum(t->task_id);
		out[3] = Int64GetDatum(t->lock_version);
		out[4] = TimestampTzGetDatum(t->locked_until);
		if (queue->is_workflow)
		{
			DexRun	   *run = dex_find_run(runs, t->run_id);

			if (run == NULL)
				elog(ERROR, "workflow run %s of a workflow task does not exist",
					 dex_uuid_to_cstring(t->run_id));
			out[5] = workflow_task_datum(t, run, queue->name, worker_id, protobuf);
		}
		else
			out[5] = activity_task_datum(t, queue->name, protobuf);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
	}
}

/*
 * Looks that find nothing (shmem/wakeup.c).  A worker completing its last
 * tasks in the call that waits for its next ones looks first, and at low
 * load finds nothing: the next task comes from the commit of another worker
 * or client, after the wait began.  Its look is skipped when its last one
 * found the queue drained and no commit made a task of it pollable since.
 * Only on queues whose looks lease all they find: a capacity or a rate limit
 * holds tasks back that no commit makes pollable again, and a paused queue's
 * look does not look.
 */
static bool
drained_look_counts(const DexQueue *queue)
{
	return queue->capacity == 0 && queue->rate_limit == 0 && !queue->paused;
}

/* What the poll declares (no keys: 0), as a number */
static uint64
declaration_hash(const PollArgs *args)
{
	uint64		h = (uint64) args->n_names;

	for (int i = 0; i < args->n_names; i++)
		h = hash_combine64(h, args->keys[i]);
	return h;
}

static bool
look_is_needless(const DexQueue *queue, const PollArgs *args, uint64 declared)
{
	if (!drained_look_counts(queue) || !dex_queue_still_drained(queue->id, declared))
		return false;
	/* as the lease would: its declaration checked, the poll seen */
	check_declared(queue, args);
	dex_polled(queue->id, args->keys, args->n_names);
	throttled_until = 0;
	elog(DEBUG2, "dex: queue \"%s\" is drained since this backend's last look: no lease statement",
		 queue->name);
	return true;
}

/*
 * The poll of dex.poll_tasks_wait(_pb), in the caller's SPI connection:
 * lease up to args' max tasks of the queue (looked up, its use checked),
 * entering the queue's waiters first (before the lease looks: a commit
 * after it wakes this backend); their task messages, JSON or protobuf, in
 * *tasks, copied out of SPI's memory, and the queue's id.  Returns how many.
 */
int
dex_poll_task_messages(const DexPollArgs *args, bool protobuf, Datum **tasks, int32 *queue_id)
{
	DexQueue	queue;
	Leases		leases;
	HTAB	   *runs = NULL;
	int			n = 0;
	uint64		generation;
	uint64		declared = declaration_hash(args);

	dex_wait_for_rebuild();
	queue = dex_existing_queue(args->queue_name, NULL);
	dex_check_queue_use(&queue);
	*queue_id = queue.id;
	dex_queue_wait_begin(queue.id, dex_worker_hash(args->worker_id), args->keys, args->n_names);

	if (look_is_needless(&queue, args, declared))
	{
		dex_stat_poll(queue.id, 0);
		*tasks = palloc(sizeof(Datum));
		return 0;
	}
	generation = dex_queue_generation(queue.id);
	leases = read_leases(queue.is_workflow, lease_tasks(&queue, args));
	if (drained_look_counts(&queue) && leases.n < (uint64) args->max_tasks)
		dex_queue_note_drained(queue.id, declared, generation);
	if (queue.is_workflow && leases.n > 0)
		runs = load_workflow_runs(&leases, args);
	*tasks = palloc(sizeof(Datum) * Max(leases.n, 1));
	for (uint64 i = 0; i < leases.n; i++)
	{
		Leased	   *t = &leases.tasks[i];
		Datum		d;

		if (t->dropped)
			continue;
		if (queue.is_workflow)
		{
			DexRun	   *run = dex_find_run(runs, t->run_id);

			if (run == NULL)
				elog(ERROR, "workflow run %s of a workflow task does not exist",
					 dex_uuid_to_cstring(t->run_id));
			d = workflow_task_datum(t, run, queue.name, args->worker_id, protobuf);
		}
		else
			d = activity_task_datum(t, queue.name, protobuf);
		(*tasks)[n++] = SPI_datumTransfer(d, false, -1);
	}
	dex_stat_poll(queue.id, n);
	return n;
}

/*
 * dex.poll_tasks(queue, worker_id, max_tasks, lease_duration) and
 * dex.poll_tasks_pb: lease up to max_tasks tasks of the queue, one row each.
 */
static Datum
poll_tasks(FunctionCallInfo fcinfo, bool protobuf)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	PollArgs	args = read_poll_args(fcinfo, 4, 5);
	DexQueue	queue;
	Leases		leases;
	HTAB	   *runs = NULL;

	InitMaterializedSRF(fcinfo, 0);

	SPI_connect();
	dex_wait_for_rebuild();
	queue = dex_existing_queue(args.queue_name, NULL);
	dex_check_queue_use(&queue);

	leases = read_leases(queue.is_workflow, lease_tasks(&queue, &args));
	if (queue.is_workflow && leases.n > 0)
		runs = load_workflow_runs(&leases, &args);
	put_tasks(rsinfo, &queue, &leases, runs, args.worker_id, protobuf);

	dex_stat_poll(queue.id, tuplestore_tuple_count(rsinfo->setResult));
	SPI_finish();
	return (Datum) 0;
}

DEX_JSON_AND_PB_ENTRY_POINTS(dex_poll_tasks, dex_poll_tasks_pb, poll_tasks);
