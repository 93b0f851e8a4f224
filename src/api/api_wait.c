/*-------------------------------------------------------------------------
 *
 * api_wait.c
 *	  CALL dex.wait_for_tasks(queue, timeout, INOUT ready): the long poll;
 *	  CALL dex.wait_for_run(run_id, timeout, INOUT status, result, failure):
 *	  waiting for a run to end.
 *
 * Long poll: return at once if the queue has pollable tasks, else sleep until
 * a commit adds some (or a lease expires) or the timeout passes.  A procedure,
 * so that it can end its transaction before it sleeps: a waiting worker holds
 * no snapshot and no xmin.  It must be called outside a transaction block.
 *
 * Locks and transactions.  It looks at the queue in the transaction it was
 * called in, with the procedure owner's rights: it writes nothing, and takes
 * neither dex's locks (the rebuild lock, the queue's capacity lock) nor a row
 * lock.  Then, if it must wait, it commits, and sleeps on the queue's
 * condition variable (shmem/wakeup.c) outside any transaction.
 *
 * dex.wait_for_run does the same for one run: it looks at the run, and until
 * the run has ended it commits and sleeps on the run's wait slot, which
 * dex_end_runs wakes when the transaction that ended the run commits (only
 * while some session waits for a run: the waiters count themselves).
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
 * The queue, the wake-up generation to wait from, and whether the queue may
 * have pollable tasks now.
 */
static void
look_at_queue(const char *queue_name, DexQueue *queue, uint64 *generation, bool *ready)
{
	int			guc_level = dex_push_planner_settings();
	Datum		values[1];

	*queue = dex_existing_queue(queue_name, NULL);
	dex_check_queue_use(queue);

	/* read the generation first: work committed after this wakes us */
	*generation = dex_queue_generation(queue->id);
	values[0] = Int32GetDatum(queue->id);
	*ready = false;
	if (dex_queue_room(queue, false) > 0)
	{
		dex_spi_exec(queue->is_workflow ? &pollable_workflow_plan : &pollable_activity_plan,
					 values, NULL, 1);
		*ready = dex_spi_getbool(0, 1);
	}
	dex_pop_planner_settings(guc_level);
}

/*
 * look_at_queue with the procedure owner's rights: a procedure that commits
 * cannot be SECURITY DEFINER, so it takes them by itself (api_call.c) and
 * gives them back before it commits.
 */
static void
look_for_tasks(Oid proc_oid, const char *queue_name, DexQueue *queue, uint64 *generation,
			   bool *ready)
{
	DexApiCall	call;

	dex_api_enter(proc_oid, &call);
	PG_TRY();
	{
		look_at_queue(queue_name, queue, generation, ready);
	}
	PG_CATCH();
	{
		dex_api_leave(&call, true);
		PG_RE_THROW();
	}
	PG_END_TRY();
	dex_api_leave(&call, false);
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
	uint64		generation;
	bool		ready;
	Datum		values[1];
	TupleDesc	tupdesc;
	bool		nulls[1] = {false};

	require_nonatomic_call(fcinfo, "wait_for_tasks");
	dex_args_not_null(fcinfo, 2, "queue and timeout");
	queue_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	timeout_usecs = wait_timeout(fcinfo, 1);

	SPI_connect_ext(SPI_OPT_NONATOMIC);
	look_for_tasks(fcinfo->flinfo->fn_oid, queue_name, &queue, &generation, &ready);

	if (!ready && timeout_usecs > 0)
	{
		/* no snapshot, no xmin from here on */
		SPI_commit();
		dex_report_wait(psprintf("waiting for tasks on queue \"%s\"", queue_name));
		ready = dex_queue_wait(queue.id, generation, (long) ((timeout_usecs + 999) / 1000));
		dex_report_wait(NULL);
	}
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

/*
 * Look at the run, with the owner's rights: the wait slot's generation first,
 * then the run (unknown if it does not exist or its queue is not one the
 * caller may use).  Its outcome is copied out of SPI's memory.
 */
static void
look_at_run(Oid proc_oid, pg_uuid_t *run_id, uint64 *generation, RunOutcome *out)
{
	DexApiCall	call;

	dex_api_enter(proc_oid, &call);
	PG_TRY();
	{
		Datum		values[1] = {UUIDPGetDatum(run_id)};
		DexRows		run;
		char	   *status;

		*generation = dex_run_generation(run_id);
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
	PG_CATCH();
	{
		dex_api_leave(&call, true);
		PG_RE_THROW();
	}
	PG_END_TRY();
	dex_api_leave(&call, false);
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
			(void) dex_run_wait(run_id, generation, remaining);
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
