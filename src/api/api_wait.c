/*-------------------------------------------------------------------------
 *
 * api_wait.c
 *	  CALL dex.wait_for_tasks(queue, timeout, INOUT ready): the long poll.
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

Datum
dex_wait_for_tasks(PG_FUNCTION_ARGS)
{
	char	   *queue_name;
	Interval   *timeout;
	int64		timeout_usecs;
	DexQueue	queue;
	uint64		generation;
	bool		ready;
	Datum		values[1];
	TupleDesc	tupdesc;
	bool		nulls[1] = {false};

	if (fcinfo->context == NULL || !IsA(fcinfo->context, CallContext) ||
		castNode(CallContext, fcinfo->context)->atomic)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("dex.wait_for_tasks cannot wait inside a transaction block"),
				 errdetail("It ends its transaction before it sleeps, so that a waiting worker holds no snapshot."),
				 errhint("Call it with autocommit on: CALL dex.wait_for_tasks(...) outside BEGIN ... COMMIT.")));
	dex_args_not_null(fcinfo, 2, "queue and timeout");
	queue_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	timeout = PG_GETARG_INTERVAL_P(1);
	if (!dex_interval_usecs(timeout, &timeout_usecs) ||
		timeout_usecs < 0 || timeout_usecs > MAX_WAIT_USECS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout must be between 0 and 1 day")));

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
