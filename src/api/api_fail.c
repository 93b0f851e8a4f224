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

static DexPlan count_task_failure_plan = {
	"UPDATE dex.workflow_run SET task_failures = task_failures + 1, last_task_failure = $2, "
	"       updated_at = now() WHERE id = $1 RETURNING task_failures",
	2, {UUIDOID, BYTEAOID}
};

/* the fence: the failing worker's lease is withdrawn (a new lock version) */
static DexPlan fence_failed_workflow_task_plan = {
	"UPDATE dex.workflow_task t SET lock_version = nextval('dex.lease_version'), locked_until = 'infinity' "
	"WHERE t.run_id = $1 AND t.lock_version = $2 AND t.locked_by IS NOT NULL "
	"RETURNING t.run_id, t.queue_id, " DEX_QUEUE_LIMITED_SQL,
	2, {UUIDOID, INT8OID}
};

/*
 * A run whose workflow task failed dex.max_workflow_task_failures times in a
 * row is parked: BLOCKED, with no workflow task, until dex.resume_run (after a
 * fix is deployed).  Its activities run on; what arrives waits in its inbox.
 */
static DexPlan park_run_plan = {
	"WITH t AS (DELETE FROM dex.workflow_task WHERE run_id = $1) "
	"UPDATE dex.workflow_run SET status = 'BLOCKED', updated_at = now() WHERE id = $1",
	1, {UUIDOID}
};

/* whether the schema can park runs: BLOCKED came with 1.3 */
static DexPlan schema_parks_plan = {
	"SELECT extversion <> ALL ('{1.0,1.1,1.2}'::text[]) FROM pg_catalog.pg_extension "
	"WHERE extname = 'dex'",
	0, {0}
};

static bool
schema_parks_runs(void)
{
	dex_spi_exec(&schema_parks_plan, NULL, NULL, 1);
	return SPI_processed > 0 && dex_spi_getbool(0, 1);
}

/* ...and the task can be leased again when the backoff ends */
static DexPlan back_off_workflow_task_plan = {
	"UPDATE dex.workflow_task SET locked_until = $2 WHERE run_id = $1",
	2, {UUIDOID, TIMESTAMPTZOID}
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

/*
 * A workflow task that failed (the worker could not run the workflow code:
 * a crash loop, a missing workflow, a bug) is handed out again after a
 * backoff that grows with the run's consecutive task failures, per the
 * dex.retry_* settings; the count and the last failure are on the run, and
 * a completed task resets them, and after dex.max_workflow_task_failures
 * of them in a row the run is parked (BLOCKED).  The workflow's own errors
 * fail the run instead (the failRun command).
 */
static bool
fail_workflow_task(pg_uuid_t *run_id, int64 lock_version, Dex__V1__Failure *failure,
				   bool raise_lost)
{
	Datum		values[2] = {UUIDPGetDatum(run_id), Int64GetDatum(lock_version)};
	int32		failures;
	TimestampTz retry_at;
	bool		held = false;

	/* a task left to an ended or suspended run is refused */
	if (run_takes_failure(run_id, true))
	{
		held = take_failing_lease(&fence_failed_workflow_task_plan, values, 0, 2);
		dex_queue_room_freed_spi(2, 3);
	}
	if (!held)
		return lease_not_held(run_id, 0, lock_version, raise_lost);

	values[1] = PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) failure));
	dex_record_workflow_attempt(run_id, DatumGetByteaPP(values[1]));
	dex_spi_exec(&count_task_failure_plan, values, NULL, 1);
	failures = (int32) dex_spi_getint64(0, 1);
	if (dex_max_workflow_task_failures > 0 && failures >= dex_max_workflow_task_failures &&
		schema_parks_runs())
	{
		dex_spi_exec(&park_run_plan, values, NULL, 0);
		return true;
	}

	retry_at = dex_retry_time(dex_effective_retry_policy(NULL), failures);
	values[1] = TimestampTzGetDatum(retry_at);
	dex_spi_exec(&back_off_workflow_task_plan, values, NULL, 0);
	/* the scheduler tells waiting workers when the backoff ends */
	dex_wake_scheduler_at_commit(retry_at);
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
