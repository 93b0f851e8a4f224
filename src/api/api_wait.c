/*-------------------------------------------------------------------------
 *
 * api_wait.c
 *	  CALL dex.wait_for_tasks(queue, timeout, INOUT ready): the long poll;
 *	  CALL dex.poll_tasks_wait(_pb): the poll and the long poll in one call
 *	  (1.4), with incremental histories and completions (1.5), declaring
 *	  what the worker runs (1.6); dex.stop_waiting(worker_id): ending a
 *	  worker's waits (1.6);
 *	  CALL dex.wait_for_run(run_id, timeout, INOUT status, result, failure):
 *	  waiting for a run to end; CALL dex.wait_for_runs(run_ids, timeout,
 *	  mode, INOUT ended): for one or all of several (1.4).
 *
 * Long poll: return at once if the queue has pollable tasks, else sleep until
 * a commit adds some (or a lease expires) or the timeout passes.  A procedure,
 * so that it can end its transaction before it sleeps: a waiting worker holds
 * no snapshot and no xmin.  It must be called outside a transaction block.
 * On a rate-limited queue (shmem/rate.c) whose tokens are used up, a waiter
 * sleeps until a token comes back for it, then looks again: it is not
 * woken by a commit for tasks it could not take, nor sleeps past its token.
 *
 * Locks and transactions.  It looks at the queue in the transaction it was
 * called in, with the procedure owner's rights: it writes nothing, and takes
 * neither dex's locks (the rebuild lock, the queue's capacity lock) nor a row
 * lock.  Then, if it must wait, it commits, and sleeps in the queue waiters'
 * table (shmem/wakeup.c) holding no snapshot.
 *
 * dex.poll_tasks_wait makes the completions it was given and its first
 * look (a poll, with dex.poll_tasks's locks) in the transaction it was
 * called in; if it leased nothing, it commits (the completions with it),
 * sleeps holding no snapshot in the transaction that commit began, and
 * looks again in it when woken, its leases dated from the wake-up.  The
 * leases commit when the CALL ends.  The commit of the completions is seen,
 * and wakes the next worker, before its WAL flush, which it then waits for
 * (unless they ended or started runs, which a client may read: wakeup.c).
 * dex.stop_waiting ends the sleep of a
 * worker's calls: each returns what it had leased (nothing), so that a worker
 * shutting down need not cancel them.
 *
 * dex.wait_for_run does the same for one run: it looks at the run, and until
 * the run has ended it commits and sleeps on the run's wait slot, which
 * dex_end_runs wakes when the transaction that ended the run commits (only
 * while some session waits for a run: the waiters count themselves).
 * dex.wait_for_runs sleeps on the first run's slot and looks at the others'
 * every 100 ms (shmem/wakeup.c: dex_runs_wait), without a statement.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "nodes/parsenodes.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "api/api_tasks.h"

PG_FUNCTION_INFO_V1(dex_wait_for_tasks);

#define MAX_WAIT_USECS ((int64) USECS_PER_DAY)

/* qualified throughout, though dex_api_enter pins search_path: a procedure has no SET clause */
static DexPlan pollable_workflow_plan = {
	"SELECT EXISTS (SELECT 1 FROM dex.workflow_task WHERE queue_id OPERATOR(pg_catalog.=) $1 "
	"               AND (locked_until IS NULL OR locked_until OPERATOR(pg_catalog.<=) pg_catalog.now()))",
	1, {INT4OID}
};

static DexPlan pollable_activity_plan = {
	"SELECT EXISTS (SELECT 1 FROM dex.activity_task WHERE queue_id OPERATOR(pg_catalog.=) $1 "
	"               AND status OPERATOR(pg_catalog.=) 'QUEUED' AND locked_by IS NULL)",
	1, {INT4OID}
};

/*
 * The queue, and whether it may have pollable tasks now.  The backend enters
 * the queue's waiters first: work committed after this wakes it.  A queue
 * whose rate limit has no token now is not ready: *retry_at is then when
 * the next token comes, if it has pollable tasks (else 0).
 */
static void
look_at_queue(const char *queue_name, DexQueue *queue, bool *ready, TimestampTz *retry_at)
{
	int			guc_level = dex_push_planner_settings();
	Datum		values[1];

	*queue = dex_existing_queue(queue_name, NULL);
	dex_check_queue_use(queue);

	dex_queue_wait_begin(queue->id, 0, NULL, 0);
	values[0] = Int32GetDatum(queue->id);
	*ready = false;
	*retry_at = 0;
	if (dex_queue_room(queue, false, GetCurrentTimestamp()) > 0)
	{
		dex_spi_exec(queue->is_workflow ? &pollable_workflow_plan : &pollable_activity_plan,
					 values, NULL, 1);
		*ready = dex_spi_getbool(0, 1);
		if (*ready && queue->rate_limit > 0)
			*ready = dex_rate_peek(queue->id, queue->rate_limit, queue->rate_period_us,
								   queue->updated_at, retry_at);
	}
	dex_pop_planner_settings(guc_level);
}

/*
 * How long a waiter of the queue sleeps: until its timeout, "remaining_ms",
 * or, if its queue's rate limit held it back (retry_at), until a token
 * comes for it (shmem/rate.c spreads the waiters one token apart).
 */
static long
sleep_ms(int32 queue_id, TimestampTz retry_at, long remaining_ms)
{
	long		until_token;
	TimestampTz now;

	if (retry_at == 0)
		return remaining_ms;
	/* (one call: it reserves the wake-up) */
	now = GetCurrentTimestamp();
	until_token = TimestampDifferenceMilliseconds(now,
												  dex_rate_wake_at(queue_id, retry_at,
																   TimestampTzPlusMilliseconds(now, remaining_ms)));
	return Min(remaining_ms, Max(until_token, 1));
}

/*
 * Run look(arg) with the procedure owner's rights: a procedure that commits
 * cannot be SECURITY DEFINER, so it takes them by itself (api_call.c) and
 * gives them back before it commits.
 */
static void
as_owner(Oid proc_oid, void (*look) (void *arg), void *arg)
{
	DexApiCall	call;

	dex_api_enter(proc_oid, &call);
	PG_TRY();
	{
		look(arg);
	}
	PG_CATCH();
	{
		dex_api_leave(&call, true);
		PG_RE_THROW();
	}
	PG_END_TRY();
	dex_api_leave(&call, false);
}

typedef struct QueueLook
{
	const char *queue_name;
	DexQueue   *queue;
	bool	   *ready;
	TimestampTz *retry_at;
} QueueLook;

static void
look_at_queue_args(void *arg)
{
	QueueLook  *q = arg;

	look_at_queue(q->queue_name, q->queue, q->ready, q->retry_at);
}

/* look_at_queue with the procedure owner's rights */
static void
look_for_tasks(Oid proc_oid, const char *queue_name, DexQueue *queue, bool *ready,
			   TimestampTz *retry_at)
{
	QueueLook	q = {queue_name, queue, ready, retry_at};

	as_owner(proc_oid, look_at_queue_args, &q);
}

/* A procedure that waits must be able to end its transaction */
static void
require_nonatomic_call(FunctionCallInfo fcinfo, const char *name)
{
	if (fcinfo->context == NULL || !IsA(fcinfo->context, CallContext) ||
		castNode(CallContext, fcinfo->context)->atomic)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("dex.%s cannot wait inside a transaction block", name),
				 errdetail("It ends its transaction before it sleeps, so that a waiting session holds no snapshot."),
				 errhint("Call it with autocommit on: CALL dex.%s(...) outside BEGIN ... COMMIT.", name)));
}

/* The timeout argument "arg", in microseconds: 0 to a day */
static int64
wait_timeout(FunctionCallInfo fcinfo, int arg)
{
	int64		usecs;

	if (!dex_interval_usecs(PG_GETARG_INTERVAL_P(arg), &usecs) || usecs < 0 || usecs > MAX_WAIT_USECS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout must be between 0 and 1 day")));
	return usecs;
}

Datum
dex_wait_for_tasks(PG_FUNCTION_ARGS)
{
	char	   *queue_name;
	int64		timeout_usecs;
	DexQueue	queue;
	bool		ready;
	TimestampTz retry_at;
	TimestampTz deadline;
	Datum		values[1];
	TupleDesc	tupdesc;
	bool		nulls[1] = {false};

	require_nonatomic_call(fcinfo, "wait_for_tasks");
	dex_args_not_null(fcinfo, 2, "queue and timeout");
	queue_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	timeout_usecs = wait_timeout(fcinfo, 1);

	deadline = GetCurrentTimestamp() + timeout_usecs;
	SPI_connect_ext(SPI_OPT_NONATOMIC);
	PG_TRY();
	{
		look_for_tasks(fcinfo->flinfo->fn_oid, queue_name, &queue, &ready, &retry_at);
		while (!ready && timeout_usecs > 0)
		{
			long		remaining = (long) ((deadline - GetCurrentTimestamp() + 999) / 1000);

			if (remaining <= 0)
				break;
			/* no snapshot, no xmin from here on */
			SPI_commit();
			dex_report_wait(psprintf("waiting for tasks on queue \"%s\"", queue_name));
			ready = dex_queue_wait(sleep_ms(queue.id, retry_at, remaining));
			dex_report_wait(NULL);
			if (ready || retry_at == 0)
				break;
			/* a token came back for this waiter: look again */
			look_for_tasks(fcinfo->flinfo->fn_oid, queue_name, &queue, &ready, &retry_at);
		}
	}
	PG_CATCH();
	{
		/* an entry left behind would take wake-ups meant for other waiters; one it got goes on */
		dex_queue_wait_abandon();
		PG_RE_THROW();
	}
	PG_END_TRY();
	/* a wake-up that came as the wait timed out counts */
	ready = dex_queue_wait_end() || ready;
	SPI_finish();

	tupdesc = CreateTemplateTupleDesc(1);
	TupleDescInitEntry(tupdesc, (AttrNumber) 1, "ready", BOOLOID, -1, 0);
	tupdesc = BlessTupleDesc(tupdesc);
	values[0] = BoolGetDatum(ready);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/* ----------------------------------------------------------------
 * CALL dex.wait_for_run(run_id, timeout, INOUT status, result, failure)
 * ----------------------------------------------------------------
 */

PG_FUNCTION_INFO_V1(dex_wait_for_run);

/* qualified throughout, as above */
static DexPlan run_outcome_plan = {
	"SELECT status, result, failure, queue_id FROM dex.workflow_run WHERE id OPERATOR(pg_catalog.=) $1",
	1, {UUIDOID}
};

/* What the procedure returns: the run's status, and its result or failure as JSON */
typedef struct RunOutcome
{
	bool		ended;
	Datum		values[3];
	bool		nulls[3];
} RunOutcome;

typedef struct RunLook
{
	pg_uuid_t  *run_id;
	uint64	   *generation;
	RunOutcome *out;
} RunLook;

static void
look_at_run_args(void *arg)
{
	RunLook    *look = arg;
	pg_uuid_t  *run_id = look->run_id;
	RunOutcome *out = look->out;
	Datum		values[1] = {UUIDPGetDatum(run_id)};
	DexRows		run;
	char	   *status;

	*look->generation = dex_run_generation(run_id);
	run = dex_spi_rows(&run_outcome_plan, values, NULL, 1);
	if (run.n == 0 || !dex_may_use_queue_id((int32) dex_rows_getint64(run, 0, 4)))
		dex_no_such_run(run_id);
	status = dex_rows_gettext_copy(run, 0, 1);
	out->ended = dex_status_is_terminal(status);
	out->values[0] = CStringGetTextDatum(status);
	out->nulls[0] = false;
	for (int col = 2; col <= 3; col++)
	{
		bytea	   *pb = dex_rows_getbytea_copy(run, 0, col);
		Jsonb	   *json = NULL;

		if (pb != NULL && col == 2)
			json = dex_payload_to_jsonb(dex_payload_unpack(pb, "result"));
		else if (pb != NULL)
			json = dex_pb_to_jsonb(dex_pb_unpack(&dex__v1__failure__descriptor,
												 (uint8 *) VARDATA_ANY(pb),
												 VARSIZE_ANY_EXHDR(pb), "failure"));
		out->nulls[col - 1] = json == NULL;
		out->values[col - 1] = json ? SPI_datumTransfer(JsonbPGetDatum(json), false, -1) : (Datum) 0;
	}
	out->values[0] = SPI_datumTransfer(out->values[0], false, -1);
}

/*
 * Look at the run, with the owner's rights: the wait slot's generation first,
 * then the run (unknown if it does not exist or its queue is not one the
 * caller may use).  Its outcome is copied out of SPI's memory.
 */
static void
look_at_run(Oid proc_oid, pg_uuid_t *run_id, uint64 *generation, RunOutcome *out)
{
	RunLook		look = {run_id, generation, out};

	as_owner(proc_oid, look_at_run_args, &look);
}

/*
 * CALL dex.wait_for_run(run_id, timeout): as soon as the run has ended (at
 * once if it has), its status, result and failure; after the timeout, its
 * status then, with no result.  Holds no snapshot while it waits.
 */
Datum
dex_wait_for_run(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *run_id;
	int64		timeout_usecs;
	TimestampTz deadline;
	uint64		generation;
	RunOutcome	outcome;
	TupleDesc	tupdesc;

	require_nonatomic_call(fcinfo, "wait_for_run");
	dex_args_not_null(fcinfo, 2, "run id and timeout");
	run_id = PG_GETARG_UUID_P(0);
	timeout_usecs = wait_timeout(fcinfo, 1);
	deadline = GetCurrentTimestamp() + timeout_usecs;

	SPI_connect_ext(SPI_OPT_NONATOMIC);
	/* counted before the first look: an end committed after it wakes us */
	dex_run_waiter(true);
	PG_TRY();
	{
		for (;;)
		{
			long		remaining;

			look_at_run(fcinfo->flinfo->fn_oid, run_id, &generation, &outcome);
			remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
			if (outcome.ended || remaining <= 0)
				break;
			/* no snapshot, no xmin from here on */
			SPI_commit();
			dex_report_wait("waiting for a run to end");
			(void) dex_runs_wait(run_id, &generation, 1, remaining);
			dex_report_wait(NULL);
		}
	}
	PG_FINALLY();
	{
		dex_run_waiter(false);
	}
	PG_END_TRY();
	SPI_finish();

	if (!outcome.ended)
		outcome.nulls[1] = outcome.nulls[2] = true;
	tupdesc = CreateTemplateTupleDesc(3);
	TupleDescInitEntry(tupdesc, (AttrNumber) 1, "status", TEXTOID, -1, 0);
	TupleDescInitEntry(tupdesc, (AttrNumber) 2, "result", JSONBOID, -1, 0);
	TupleDescInitEntry(tupdesc, (AttrNumber) 3, "failure", JSONBOID, -1, 0);
	tupdesc = BlessTupleDesc(tupdesc);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, outcome.values, outcome.nulls)));
}

/* ----------------------------------------------------------------
 * CALL dex.wait_for_runs(run_ids, timeout, mode, INOUT ended)
 * ----------------------------------------------------------------
 */

PG_FUNCTION_INFO_V1(dex_wait_for_runs);

#define MAX_WAIT_RUNS 1000

/* qualified throughout, as above */
static DexPlan runs_status_plan = {
	"SELECT id, status, queue_id FROM dex.workflow_run WHERE id OPERATOR(pg_catalog.=) ANY ($1)",
	1, {UUIDARRAYOID}
};

/*
 * Look at the runs, with the owner's rights: their wait slots' generations
 * first, then which have ended (ended[i]); each must exist in a queue the
 * caller may use.
 */
typedef struct RunsLook
{
	Datum		id_array;
	pg_uuid_t  *ids;
	int			n;
	uint64	   *generations;
	bool	   *ended;
} RunsLook;

static void
look_at_runs_args(void *arg)
{
	RunsLook   *look = arg;
	pg_uuid_t  *ids = look->ids;
	int			n = look->n;
	uint64	   *generations = look->generations;
	bool	   *ended = look->ended;
	Datum		values[1] = {look->id_array};
	DexRows		runs;

	for (int i = 0; i < n; i++)
	{
		generations[i] = dex_run_generation(&ids[i]);
		ended[i] = false;
	}
	runs = dex_spi_rows(&runs_status_plan, values, NULL, 0);
	for (int i = 0; i < n; i++)
	{
		bool		found = false;

		for (uint64 r = 0; r < runs.n && !found; r++)
		{
			bool		isnull;

			if (memcmp(DatumGetUUIDP(dex_rows_getdatum(runs, r, 1, &isnull)), &ids[i], UUID_LEN) != 0)
				continue;
			found = dex_may_use_queue_id((int32) dex_rows_getint64(runs, r, 3));
			ended[i] = dex_status_is_terminal(dex_rows_gettext_copy(runs, r, 2));
		}
		if (!found)
			dex_no_such_run(&ids[i]);
	}
}

static void
look_at_runs(Oid proc_oid, Datum id_array, pg_uuid_t *ids, int n, uint64 *generations, bool *ended)
{
	RunsLook	look = {id_array, ids, n, generations, ended};

	as_owner(proc_oid, look_at_runs_args, &look);
}

/*
 * CALL dex.wait_for_runs(run_ids, timeout, mode): as soon as one of the runs
 * (mode 'any') or all of them ('all') have ended, the ids of those that have,
 * in the order given; after the timeout, those that had then.  Holds no
 * snapshot while it waits.
 */
Datum
dex_wait_for_runs(PG_FUNCTION_ARGS)
{
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *elem_nulls;
	int			n;
	pg_uuid_t  *ids;
	char	   *mode;
	bool		all;
	int64		timeout_usecs;
	TimestampTz deadline;
	uint64	   *generations;
	bool	   *ended;
	pg_uuid_t  *waiting;		/* the runs not ended at the last look */
	uint64	   *waiting_gen;
	ArrayBuildState *out;
	TupleDesc	tupdesc;
	Datum		result[1];
	bool		result_null[1] = {false};

	require_nonatomic_call(fcinfo, "wait_for_runs");
	dex_args_not_null(fcinfo, 3, "run ids, timeout and mode");
	timeout_usecs = wait_timeout(fcinfo, 1);
	mode = text_to_cstring(PG_GETARG_TEXT_PP(2));
	if (strcmp(mode, "any") != 0 && strcmp(mode, "all") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid mode \"%s\"", mode),
				 errhint("The mode is \"any\" (until one of the runs has ended) or \"all\".")));
	all = strcmp(mode, "all") == 0;
	arr = PG_GETARG_ARRAYTYPE_P(0);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("run ids must be a one-dimensional array")));
	deconstruct_array(arr, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR, &elems, &elem_nulls, &n);
	if (n < 1 || n > MAX_WAIT_RUNS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("dex.wait_for_runs waits for 1 to %d runs", MAX_WAIT_RUNS),
				 errdetail("It was given %d.", n)));
	ids = palloc(sizeof(pg_uuid_t) * n);
	for (int i = 0; i < n; i++)
	{
		if (elem_nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("run ids must not contain null")));
		memcpy(&ids[i], DatumGetUUIDP(elems[i]), UUID_LEN);
	}
	generations = palloc(sizeof(uint64) * n);
	ended = palloc(sizeof(bool) * n);
	waiting = palloc(sizeof(pg_uuid_t) * n);
	waiting_gen = palloc(sizeof(uint64) * n);
	deadline = GetCurrentTimestamp() + timeout_usecs;

	SPI_connect_ext(SPI_OPT_NONATOMIC);
	dex_run_waiter(true);
	PG_TRY();
	{
		for (;;)
		{
			long		remaining;
			int			n_ended = 0;
			int			n_waiting = 0;

			look_at_runs(fcinfo->flinfo->fn_oid, PointerGetDatum(arr), ids, n, generations, ended);
			for (int i = 0; i < n; i++)
			{
				if (ended[i])
				{
					n_ended++;
					continue;
				}
				waiting[n_waiting] = ids[i];
				waiting_gen[n_waiting++] = generations[i];
			}
			remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
			if ((all ? n_ended == n : n_ended > 0) || remaining <= 0)
				break;
			/* no snapshot, no xmin from here on */
			SPI_commit();
			dex_report_wait("waiting for runs to end");
			(void) dex_runs_wait(waiting, waiting_gen, n_waiting, remaining);
			dex_report_wait(NULL);
		}
	}
	PG_FINALLY();
	{
		dex_run_waiter(false);
	}
	PG_END_TRY();
	SPI_finish();

	out = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	for (int i = 0; i < n; i++)
		if (ended[i])
			dex_array_add(out, UUIDPGetDatum(&ids[i]), false);
	result[0] = makeArrayResult(out, CurrentMemoryContext);
	tupdesc = CreateTemplateTupleDesc(1);
	TupleDescInitEntry(tupdesc, (AttrNumber) 1, "ended", UUIDARRAYOID, -1, 0);
	tupdesc = BlessTupleDesc(tupdesc);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, result, result_null)));
}

/* ----------------------------------------------------------------
 * CALL dex.poll_tasks_wait(queue, worker_id, max_tasks, lease, timeout,
 *							INOUT tasks jsonb)
 * CALL dex.poll_tasks_wait_pb(..., INOUT tasks bytea[])
 * ----------------------------------------------------------------
 */

PG_FUNCTION_INFO_V1(dex_poll_tasks_wait);
PG_FUNCTION_INFO_V1(dex_poll_tasks_wait_pb);

typedef struct PollLook
{
	DexPollArgs args;
	bool		protobuf;
	DexTaskBatch *completions;	/* to complete before the first look; NULL: none (left) */
	bool	   *completed;		/* out: whether each completion was applied */
	Datum	   *tasks;			/* out */
	int			n;				/* out */
	int32		queue_id;		/* out */
	TimestampTz throttled_until;	/* out: the rate limit held it back until then; 0: no */
} PollLook;

static void
poll_look(void *arg)
{
	PollLook   *look = arg;
	int			guc_level = dex_push_planner_settings();

	if (look->completions != NULL)
	{
		dex_complete_task_batch(look->completions, look->protobuf, look->completed);
		look->completions = NULL;
	}
	look->n = dex_poll_task_messages(&look->args, look->protobuf, &look->tasks, &look->queue_id);
	look->throttled_until = dex_poll_throttled_until();
	dex_pop_planner_settings(guc_level);
}

/*
 * The completions dex.poll_tasks_wait(_pb) takes (1.5; arguments 7 to 10),
 * or NULL: run ids, task ids, lock versions, results, as dex.complete_tasks.
 */
static DexTaskBatch *
read_completions(FunctionCallInfo fcinfo, bool protobuf)
{
	DexTaskBatch *b;

	if (PG_NARGS() < 11 || PG_ARGISNULL(7))
		return NULL;
	b = palloc(sizeof(DexTaskBatch));
	*b = dex_read_task_batch_at(fcinfo, 7, protobuf ? BYTEAOID : JSONBOID, "results");
	return b;
}

/*
 * The long poll and the poll in one call: lease up to max_tasks tasks of the
 * queue as dex.poll_tasks does and return them at once; if there are none,
 * end the transaction, sleep until a commit makes tasks pollable (or the
 * timeout passes), and lease again, until some are leased or the timeout
 * passes (an empty array).  Holds no snapshot while it sleeps; the leases
 * commit when the CALL ends.  Completions given (1.5) are made first, in the
 * transaction of the first look, as dex.complete_tasks makes them: a worker
 * reports its last tasks and takes its next ones in one call, and, when it
 * must wait, in one transaction before the wait.
 */
static Datum
poll_tasks_wait(FunctionCallInfo fcinfo, bool protobuf)
{
	PollLook	look;
	Datum	   *kept;
	int64		timeout_usecs;
	TimestampTz deadline;
	TupleDesc	tupdesc;
	int			n_completions;
	Datum		result[2];
	bool		result_null[2] = {false, true};

	require_nonatomic_call(fcinfo, protobuf ? "poll_tasks_wait_pb" : "poll_tasks_wait");
	look.args = dex_read_poll_args(fcinfo, 6, 12);
	/*
	 * The arguments are used after the commits below: the lease is copied
	 * here (a cast of a bound parameter is evaluated in memory that a commit
	 * frees; the strings are copies already).
	 */
	look.args.lease = palloc(sizeof(Interval));
	memcpy(look.args.lease, PG_GETARG_INTERVAL_P(3), sizeof(Interval));
	look.protobuf = protobuf;
	look.completions = read_completions(fcinfo, protobuf);
	look.completed = look.completions ? palloc0(sizeof(bool) * Max(look.completions->n, 1)) : NULL;
	n_completions = look.completions ? look.completions->n : -1;
	dex_arg_not_null(fcinfo, 4, "timeout");
	timeout_usecs = wait_timeout(fcinfo, 4);
	deadline = GetCurrentTimestamp() + timeout_usecs;
	/* their commit is seen before its flush, which it waits for after its wake-ups (wakeup.c) */
	if (n_completions > 0)
		dex_completion_begins();

	SPI_connect_ext(SPI_OPT_NONATOMIC);
	PG_TRY();
	{
		for (;;)
		{
			long		remaining;

			as_owner(fcinfo->flinfo->fn_oid, poll_look, &look);
			remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
			if (look.n > 0 || remaining <= 0)
				break;
			/* no snapshot, no xmin from here on */
			SPI_commit();
			dex_report_wait(psprintf("waiting for tasks on queue \"%s\"", look.args.queue_name));
			(void) dex_queue_wait(sleep_ms(look.queue_id, look.throttled_until, remaining));
			dex_report_wait(NULL);
			if (dex_queue_wait_stopped())
				break;			/* its worker shuts down: nothing leased, as at the timeout */

			/*
			 * The next look runs in the transaction SPI_commit began before
			 * the sleep (its snapshot is taken by its first statement, after
			 * it); its leases start now, not at that transaction's start,
			 * which would shorten them by the sleep.  A grant revoked while
			 * it slept holds at once: the commit that woke us counted its
			 * change of queues before it set our latch (and before it sent
			 * its invalidations, which may not have arrived), and the look
			 * reads the queue again when that count moved (engine/queues.c).
			 */
			look.args.lease_start = GetCurrentTimestamp();
		}
	}
	PG_CATCH();
	{
		dex_queue_wait_abandon();
		PG_RE_THROW();
	}
	PG_END_TRY();
	/* a commit that woke us after the last look made a task that another waiter is to take */
	if (dex_queue_wait_end())
		dex_queue_pass_wakeup_on(look.queue_id, look.args.keys, look.args.n_names);

	/*
	 * The task messages live out of SPI's memory (SPI_datumTransfer), but
	 * not the array of them: keep it, and build the result after SPI_finish.
	 */
	kept = SPI_palloc(sizeof(Datum) * Max(look.n, 1));
	memcpy(kept, look.tasks, sizeof(Datum) * look.n);
	SPI_finish();
	look.tasks = kept;

	if (protobuf)
		result[0] = PointerGetDatum(construct_array(look.tasks, look.n, BYTEAOID, -1, false, TYPALIGN_INT));
	else
	{
		JsonbParseState *state = NULL;
		JsonbValue *array;

		pushJsonbValue(&state, WJB_BEGIN_ARRAY, NULL);
		for (int i = 0; i < look.n; i++)
		{
			JsonbValue	v;
			Jsonb	   *task = DatumGetJsonbP(look.tasks[i]);

			v.type = jbvBinary;
			v.val.binary.data = &task->root;
			v.val.binary.len = VARSIZE(task) - VARHDRSZ;
			pushJsonbValue(&state, WJB_ELEM, &v);
		}
		array = pushJsonbValue(&state, WJB_END_ARRAY, NULL);
		result[0] = JsonbPGetDatum(JsonbValueToJsonb(array));
	}

	/* 1.5's procedures have a second INOUT argument: whether each completion was applied */
	tupdesc = CreateTemplateTupleDesc(PG_NARGS() > 11 ? 2 : 1);
	TupleDescInitEntry(tupdesc, (AttrNumber) 1, "tasks", protobuf ? BYTEAARRAYOID : JSONBOID, -1, 0);
	if (PG_NARGS() > 11)
	{
		TupleDescInitEntry(tupdesc, (AttrNumber) 2, "completed", BOOLARRAYOID, -1, 0);
		if (n_completions >= 0)
		{
			Datum	   *flags = palloc(sizeof(Datum) * Max(n_completions, 1));

			for (int i = 0; i < n_completions; i++)
				flags[i] = BoolGetDatum(look.completed[i]);
			result[1] = PointerGetDatum(construct_array(flags, n_completions, BOOLOID, 1, true,
														TYPALIGN_CHAR));
			result_null[1] = false;
		}
	}
	tupdesc = BlessTupleDesc(tupdesc);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, result, result_null)));
}

Datum
dex_poll_tasks_wait(PG_FUNCTION_ARGS)
{
	return poll_tasks_wait(fcinfo, false);
}

Datum
dex_poll_tasks_wait_pb(PG_FUNCTION_ARGS)
{
	return poll_tasks_wait(fcinfo, true);
}

/*
 * dex.stop_waiting(worker_id) returns integer: the worker's calls of
 * dex.poll_tasks_wait(_pb) that wait in this database return now, empty, as
 * at their timeout; how many did.  A worker shutting down calls it instead of
 * cancelling them (a cancel is an error in the server log).  A call that
 * enters its wait after it waits on: call it until none does.
 */
PG_FUNCTION_INFO_V1(dex_stop_waiting);
Datum
dex_stop_waiting(PG_FUNCTION_ARGS)
{
	char	   *worker_id = dex_arg_name(fcinfo, 0, "worker id");

	PG_RETURN_INT32(dex_queue_stop_waiters(dex_worker_hash(worker_id)));
}
