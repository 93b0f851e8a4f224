/*-------------------------------------------------------------------------
 *
 * api_tasks.c
 *	  What the task API's entry points share: the checks of their arguments
 *	  (task ids, lease durations) and the arrays of the batch calls.  The
 *	  entry points are in files of their own (api_tasks.h lists them):
 *	  dex.poll_tasks, dex.complete_task(s), dex.fail_task(s),
 *	  dex.heartbeat_task(s) and the long poll dex.wait_for_tasks, leasing
 *	  tasks to workers and taking what they report.
 *
 * A task is named by (run id, task id): task id 0 is the run's workflow
 * task, any other the id of the activity's ActivityTaskCreated event.  A
 * lease carries a lock version drawn from the dex.lease_version sequence;
 * completing or failing a task requires the current lock version, and is
 * otherwise refused with ERRCODE_DEX_LEASE_LOST before anything is written.
 * A worker polls, waits on and reports on the tasks of the queues it may use
 * only (engine/access.c); the entry points run with their owner's rights
 * (api_call.c).
 *
 * Polls and completions work on many tasks per statement: the workflow-task
 * pieces are loaded by engine/runs.c and completions applied by
 * the engine, for one task or for a batch alike.
 *
 * Locks and transactions: the checks here read arguments only; a batch's
 * runs are locked by dex_lock_batch_runs, in the caller's transaction and
 * SPI connection, in run id order (the locking protocol, src/README.md).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/int.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "api/api_tasks.h"

#define MAX_LEASE_USECS ((int64) 365 * USECS_PER_DAY)
#define MAX_BATCH 1000

/*
 * An interval's length in microseconds, a month counting 30 days; false if
 * it does not fit in an int64 (then it is far out of any range dex accepts).
 */
bool
dex_interval_usecs(const Interval *iv, int64 *usecs)
{
	int64		months;
	int64		days;

	if (pg_mul_s64_overflow((int64) iv->month, DAYS_PER_MONTH * USECS_PER_DAY, &months) ||
		pg_mul_s64_overflow((int64) iv->day, USECS_PER_DAY, &days) ||
		pg_add_s64_overflow(months, days, usecs) ||
		pg_add_s64_overflow(*usecs, iv->time, usecs))
		return false;
	return true;
}

void
dex_check_lease_duration(Interval *lease)
{
	int64		usecs;

	if (!dex_interval_usecs(lease, &usecs) || usecs <= 0 || usecs > MAX_LEASE_USECS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease duration must be positive and at most 365 days")));
}

static void
check_task_id(int32 task_id)
{
	if (task_id < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("task id must not be negative"),
				 errhint("Task id 0 names a run's workflow task, a positive id an activity task.")));
}

/* The task a call on one task names: (run_id, task_id, lock_version), its first arguments */
void
dex_check_task_args(FunctionCallInfo fcinfo)
{
	dex_args_not_null(fcinfo, 3, "run id, task id and lock version");
	check_task_id(PG_GETARG_INT32(1));
}

/* ----------------------------------------------------------------
 * Batches: dex.complete_tasks, dex.fail_tasks, dex.heartbeat_tasks
 * ----------------------------------------------------------------
 */

Datum *
dex_batch_array(FunctionCallInfo fcinfo, int arg, Oid elemtype, const char *what,
				bool allow_null_elems, bool **nulls_out, int *n)
{
	ArrayType  *array;
	int16		typlen;
	bool		typbyval;
	char		typalign;
	Datum	   *elems;
	bool	   *nulls;
	int			count;

	dex_arg_not_null(fcinfo, arg, what);
	array = PG_GETARG_ARRAYTYPE_P(arg);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s must be a one-dimensional array", what)));
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(array, elemtype, typlen, typbyval, typalign, &elems, &nulls, &count);
	if (!allow_null_elems)
		for (int i = 0; i < count; i++)
			if (nulls[i])
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("%s must not contain nulls", what)));
	if (nulls_out)
		*nulls_out = nulls;
	*n = count;
	return elems;
}

/*
 * Read (run_ids, task_ids, lock_versions[, values]) and check that the
 * arrays have one element per task.
 */
DexTaskBatch
dex_read_task_batch(FunctionCallInfo fcinfo, Oid value_type, const char *value_name)
{
	return dex_read_task_batch_at(fcinfo, 0, value_type, value_name);
}

/* dex_read_task_batch of the arguments first .. first + 3 */
DexTaskBatch
dex_read_task_batch_at(FunctionCallInfo fcinfo, int first, Oid value_type, const char *value_name)
{
	DexTaskBatch b;
	int			n1,
				n2,
				n3,
				n4;

	memset(&b, 0, sizeof(b));
	b.run_ids = dex_batch_array(fcinfo, first, UUIDOID, "run ids", false, NULL, &n1);
	b.task_ids = dex_batch_array(fcinfo, first + 1, INT4OID, "task ids", false, NULL, &n2);
	b.lock_versions = dex_batch_array(fcinfo, first + 2, INT8OID, "lock versions", false, NULL, &n3);
	n4 = n1;
	if (value_type != InvalidOid)
		b.values = dex_batch_array(fcinfo, first + 3, value_type, value_name, true, &b.value_nulls, &n4);
	if (n1 != n2 || n1 != n3 || n1 != n4)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("the arrays of a batch must have one element per task"),
				 value_type != InvalidOid ?
				 errdetail("There are %d run ids, %d task ids, %d lock versions and %d %s.",
						   n1, n2, n3, n4, value_name) :
				 errdetail("There are %d run ids, %d task ids and %d lock versions.",
						   n1, n2, n3)));
	if (n1 > MAX_BATCH)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a batch holds at most %d tasks", MAX_BATCH),
				 errdetail("This one has %d.", n1)));
	for (int i = 0; i < n1; i++)
		check_task_id(DatumGetInt32(b.task_ids[i]));
	b.n = n1;
	return b;
}

/* Lock all the runs of a batch at once, in id order, before any task row of them. */
void
dex_lock_batch_runs(const DexTaskBatch *b, bool share)
{
	dex_lock_runs(PointerGetDatum(construct_array(b->run_ids, b->n, UUIDOID, UUID_LEN, false,
												  TYPALIGN_CHAR)), share);
}

/* A row of a batch call's result: (run_id, task_id, outcome) */
void
dex_put_batch_row(ReturnSetInfo *rsinfo, Datum run_id, Datum task_id, Datum outcome)
{
	Datum		out[3] = {run_id, task_id, outcome};
	bool		nulls[3] = {false, false, false};

	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
}
