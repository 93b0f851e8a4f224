/*-------------------------------------------------------------------------
 *
 * api_fail.c
 *	  dex.fail_task and dex.fail_tasks, each with a protobuf form (_pb):
 *	  a worker reports that it could not run a task.  A failed activity
 *	  attempt is retried or fails its activity (engine/retry.c); a failed
 *	  workflow task is handed out again after a backoff.
 *
 * Locks and transactions.  A failure runs in the caller's transaction and
 * takes the rebuild lock shared (engine/locks.c).  It locks the task's run
 * before the task's row (the locking protocol, src/README.md): FOR NO KEY
 * UPDATE for a workflow task, whose run it writes, FOR SHARE for an
 * activity, whose run it adds events to; a batch locks all its runs first,
 * at once, in id order.  A task left to a run that ended is refused like a
 * lost lease: one task's call raises, a batch reports failed = false for
 * that task and goes on with the others.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "api/api_tasks.h"

static DexPlan lock_activity_plan = {
	"SELECT attempt, retry_policy, schedule_deadline, queue_id, " DEX_QUEUE_LIMITED_SQL " "
	"FROM dex.activity_task t WHERE run_id = $1 AND event_id = $2 "
	"AND lock_version = $3 AND locked_by IS NOT NULL FOR UPDATE OF t",
	3, {UUIDOID, INT4OID, INT8OID}
};

/*
 * Lock the task's run first (the locking protocol, src/README.md): to write
 * it (a workflow task's failure), or to add events to it (an activity's).
 * Returns whether the task still counts: a workflow task of a run that ended
 * or is suspended, or an activity of a run that ended, is refused like a
 * lost lease.  (A suspended run's activities fail and retry as usual; their
 * retries wait for dex.resume_run, see retry.c.)
 */
static bool
run_takes_failure(pg_uuid_t *run_id, bool workflow_task)
{
	char	   *status;

	dex_lock_runs(dex_uuid_array(&run_id, 1), !workflow_task);
	if (SPI_processed == 0)
		return true;			/* the fence then finds no task */
	status = dex_spi_gettext_copy(0, 2);
	return workflow_task ? dex_status_takes_tasks(status) : !dex_status_is_terminal(status);
}

/*
 * Take the failing task's lease with plan (values: the task, with its lock
 * version), whose row has the task's queue id in column queue_col: whether
 * the lease was held.
 */
static bool
take_failing_lease(DexPlan *plan, Datum *values, long count, int queue_col)
{
	dex_spi_exec(plan, values, NULL, count);
	dex_check_queue_use_spi(queue_col);
	if (SPI_processed == 0)
		return false;
	dex_stat_add((int32) dex_spi_getint64(0, queue_col), DEX_STAT_TASKS_FAILED, 1);
	return true;
}

/* A failure of a lease not held: counted, then raised, or with !raise_lost reported (false) */
static bool
lease_not_held(pg_uuid_t *run_id, int32 task_id, int64 lock_version, bool raise_lost)
{
	dex_stat_add(0, DEX_STAT_LEASES_LOST, 1);
	if (raise_lost)
		dex_report_lost_lease(run_id, task_id, lock_version);
	return false;
}

/* A workflow task's failure (engine/retry.c), once its run is locked */
static bool
fail_workflow_task(pg_uuid_t *run_id, int64 lock_version, Dex__V1__Failure *failure,
				   bool raise_lost)
{
	/* a task left to an ended or suspended run is refused */
	if (!run_takes_failure(run_id, true) || !dex_fail_workflow_task(run_id, lock_version, failure))
		return lease_not_held(run_id, 0, lock_version, raise_lost);
	return true;
}

/*
 * Fail a task, a workflow task (task id 0) or an activity's attempt: whether
 * its lease was held (a lost one raises with raise_lost).
 */
static bool
fail_one_task(pg_uuid_t *run_id, int32 task_id, int64 lock_version,
			  Dex__V1__Failure *failure, bool raise_lost)
{
	Datum		values[3] = {UUIDPGetDatum(run_id), Int32GetDatum(task_id), Int64GetDatum(lock_version)};
	bool		held = false;
	bool		isnull;
	Datum		deadline;
	int32		queue_id;
	bool		limited;

	if (task_id == 0)
		return fail_workflow_task(run_id, lock_version, failure, raise_lost);
	if (run_takes_failure(run_id, false))
		held = take_failing_lease(&lock_activity_plan, values, 1, 4);
	if (!held)
		return lease_not_held(run_id, task_id, lock_version, raise_lost);

	deadline = dex_spi_getdatum(0, 3, &isnull);
	queue_id = (int32) dex_spi_getint64(0, 4);
	limited = dex_spi_getbool(0, 5);
	dex_activity_attempt_failed(run_id, task_id, (int32) dex_spi_getint64(0, 1),
								dex_spi_getbytea_copy(0, 2),
								isnull ? DT_NOEND : DatumGetTimestampTz(deadline), failure);
	/* the lease ended: a queue with a capacity has room again */
	if (limited)
		dex_queue_work_added(queue_id);
	return true;
}

static Dex__V1__Failure *
failure_from(Datum failure, bool protobuf)
{
	Dex__V1__Failure *f;

	if (protobuf)
	{
		bytea	   *data = DatumGetByteaPP(failure);

		dex_check_payload_size(VARSIZE_ANY_EXHDR(data), "failure");
		f = (Dex__V1__Failure *)
			dex_pb_unpack(&dex__v1__failure__descriptor, (uint8 *) VARDATA_ANY(data),
						  VARSIZE_ANY_EXHDR(data), "failure");
	}
	else
	{
		Jsonb	   *json = DatumGetJsonbP(failure);

		dex_check_payload_size(VARSIZE(json), "failure");
		f = (Dex__V1__Failure *)
			dex_pb_from_jsonb(&dex__v1__failure__descriptor, json, "failure");
	}
	dex_pb_check_payloads((ProtobufCMessage *) f, "failure");
	return f;
}

/*
 * dex.fail_task(run_id, task_id, lock_version, failure jsonb) and
 * dex.fail_task_pb(run_id, task_id, lock_version, failure bytea)
 */
static Datum
fail_task(FunctionCallInfo fcinfo, bool protobuf)
{
	dex_check_task_args(fcinfo);
	dex_arg_not_null(fcinfo, 3, "failure");
	SPI_connect();
	dex_wait_for_rebuild();
	fail_one_task(PG_GETARG_UUID_P(0), PG_GETARG_INT32(1), PG_GETARG_INT64(2),
				  failure_from(PG_GETARG_DATUM(3), protobuf), true);
	SPI_finish();
	PG_RETURN_VOID();
}

DEX_JSON_AND_PB_ENTRY_POINTS(dex_fail_task, dex_fail_task_pb, fail_task);

/* dex.fail_tasks / dex.fail_tasks_pb: fail many activity attempts at once */
static Datum
fail_tasks(FunctionCallInfo fcinfo, bool protobuf)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	DexTaskBatch b = dex_read_task_batch(fcinfo, protobuf ? BYTEAOID : JSONBOID, "failures");
	bool		share = true;

	for (int i = 0; i < b.n; i++)
		if (b.value_nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("failures must not contain nulls")));

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	dex_wait_for_rebuild();
	/* all the runs at once, in id order, before any task row */
	for (int i = 0; i < b.n; i++)
		if (DatumGetInt32(b.task_ids[i]) == 0)
			share = false;
	dex_lock_batch_runs(&b, share);
	for (int i = 0; i < b.n; i++)
	{
		bool		done = fail_one_task(DatumGetUUIDP(b.run_ids[i]),
										 DatumGetInt32(b.task_ids[i]),
										 DatumGetInt64(b.lock_versions[i]),
										 failure_from(b.values[i], protobuf), false);

		dex_put_batch_row(rsinfo, b.run_ids[i], b.task_ids[i], BoolGetDatum(done));
	}
	SPI_finish();
	return (Datum) 0;
}

DEX_JSON_AND_PB_ENTRY_POINTS(dex_fail_tasks, dex_fail_tasks_pb, fail_tasks);
