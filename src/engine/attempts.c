/*-------------------------------------------------------------------------
 *
 * attempts.c
 *	  The record of task attempts that did not succeed (dex.task_attempt,
 *	  1.4), and reading every attempt of a run back (dex.run_attempts).
 *
 * A completed attempt costs nothing extra: the run's history has it
 * (workflowTaskStarted with its worker and attempt, then
 * workflowTaskCompleted; activityTaskCompleted with its worker, attempt and
 * start).  Only the failure paths write here: an activity attempt that
 * failed or whose lease expired (retry.c), a workflow task that failed
 * (retry.c) or whose expired lease another poll took over (api_poll.c), and
 * leased tasks withdrawn when a run is suspended or ends (lifecycle.c).  Rows go with their run (retention, dex.purge_run).  Each
 * function runs in the caller's transaction, which holds the run's lock and
 * the task row.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "engine/engine.h"

/* $1 run, $2 activity, $3 outcome, $4 failure: the attempt of the task row */
static DexPlan activity_attempt_plan = {
	"INSERT INTO dex.task_attempt (run_id, event_id, attempt, worker_id, leased_at, ended_at, outcome, failure) "
	"SELECT t.run_id, t.event_id, t.attempt, t.locked_by, t.attempt_started_at, pg_catalog.now(), $3, $4 "
	"FROM dex.activity_task t WHERE t.run_id OPERATOR(pg_catalog.=) $1 "
	"AND t.event_id OPERATOR(pg_catalog.=) $2",
	4, {UUIDOID, INT4OID, TEXTOID, BYTEAOID}
};

/* $1 run, $2 failure: the leased workflow task's attempt, before the run counts it */
static DexPlan workflow_attempt_plan = {
	"INSERT INTO dex.task_attempt (run_id, event_id, attempt, worker_id, leased_at, ended_at, outcome, failure) "
	"SELECT t.run_id, 0, r.task_failures + 1, t.locked_by, t.started_at, now(), 'FAILED', $2 "
	"FROM dex.workflow_task t JOIN dex.workflow_run r ON r.id = t.run_id WHERE t.run_id = $1",
	2, {UUIDOID, BYTEAOID}
};

/*
 * The current attempt of activity event_id of the run failed: FAILED, or
 * LEASE_EXPIRED when the scheduler reclaimed its lease.
 */
void
dex_record_activity_attempt(pg_uuid_t *run_id, int32 event_id, Dex__V1__Failure *failure)
{
	Datum		values[4];
	bool		expired = failure->type && strcmp(failure->type, "dex.LeaseExpired") == 0;

	if (!dex_schema_1_4())
		return;
	values[0] = UUIDPGetDatum(run_id);
	values[1] = Int32GetDatum(event_id);
	values[2] = CStringGetTextDatum(expired ? "LEASE_EXPIRED" : "FAILED");
	values[3] = PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) failure));
	dex_spi_exec(&activity_attempt_plan, values, NULL, 0);
}

/* The run's leased workflow task failed */
void
dex_record_workflow_attempt(pg_uuid_t *run_id, bytea *failure)
{
	Datum		values[2] = {UUIDPGetDatum(run_id), PointerGetDatum(failure)};

	if (dex_schema_1_4())
		dex_spi_exec(&workflow_attempt_plan, values, NULL, 0);
}

/* $1 runs, $2 workers, $3 lease starts, $4 lease ends, $5 failures */
static DexPlan expired_workflow_leases_plan = {
	"INSERT INTO dex.task_attempt (run_id, event_id, attempt, worker_id, leased_at, ended_at, outcome, failure) "
	"SELECT u.run_id, 0, r.task_failures + 1, u.worker_id, u.leased_at, u.ended_at, 'LEASE_EXPIRED', u.failure "
	"FROM unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::timestamptz[], $5::bytea[]) "
	"     AS u(run_id, worker_id, leased_at, ended_at, failure) "
	"JOIN dex.workflow_run r ON r.id = u.run_id",
	5, {UUIDARRAYOID, TEXTARRAYOID, TIMESTAMPTZARRAYOID, TIMESTAMPTZARRAYOID, BYTEAARRAYOID}
};

/*
 * Workflow tasks whose expired leases a poll took over: each worker's
 * attempt, LEASE_EXPIRED (at the attempt number the run's next task has:
 * an expired lease does not count as a failure of the task).
 */
void
dex_record_expired_workflow_leases(const DexExpiredLease *leases, int n)
{
	ArrayBuildState *arrays[5];
	Oid			types[5] = {UUIDOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, BYTEAOID};
	Datum		values[5];

	if (n == 0 || !dex_schema_1_4())
		return;
	for (int k = 0; k < 5; k++)
		arrays[k] = initArrayResult(types[k], CurrentMemoryContext, false);
	for (int i = 0; i < n; i++)
	{
		Dex__V1__Failure failure;

		dex__v1__failure__init(&failure);
		failure.message = psprintf("lease of worker \"%s\" expired (no completion or heartbeat in time)",
								   leases[i].worker_id);
		failure.type = "dex.LeaseExpired";
		dex_array_add(arrays[0], UUIDPGetDatum(leases[i].run_id), false);
		dex_array_add(arrays[1], CStringGetTextDatum(leases[i].worker_id), false);
		dex_array_add(arrays[2], TimestampTzGetDatum(leases[i].leased_at), false);
		dex_array_add(arrays[3], TimestampTzGetDatum(leases[i].ended_at), false);
		dex_array_add(arrays[4], PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) &failure)), false);
	}
	for (int k = 0; k < 5; k++)
		values[k] = dex_array_result(arrays[k]);
	dex_spi_exec(&expired_workflow_leases_plan, values, NULL, 0);
}
