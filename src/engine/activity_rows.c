/*-------------------------------------------------------------------------
 *
 * activity_rows.c
 *	  The rows of new activity tasks, as arrays for one multi-row insert.
 *
 * An activity task row is made from the ActivityTaskCreated event that
 * records the activity: by the completion whose scheduleActivity command
 * created it (commands_apply.c), and again by the rebuild after a crash
 * (rebuild.c), which must make the same row from the run's history.  Both
 * build their rows here, so they cannot drift apart.  Memory only: the
 * callers write the rows, in their transaction, under the locking protocol
 * in src/README.md.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "engine/engine.h"

void
dex_activity_rows_init(DexActivityRows *rows)
{
	MemoryContext cxt = CurrentMemoryContext;

	rows->queue_id = initArrayResult(INT4OID, cxt, false);
	rows->run_id = initArrayResult(UUIDOID, cxt, false);
	rows->event_id = initArrayResult(INT4OID, cxt, false);
	rows->name = initArrayResult(TEXTOID, cxt, false);
	rows->priority = initArrayResult(INT2OID, cxt, false);
	rows->argument = initArrayResult(BYTEAOID, cxt, false);
	rows->retry_policy = initArrayResult(BYTEAOID, cxt, false);
	rows->start_to_close = initArrayResult(INT8OID, cxt, false);
	rows->heartbeat_timeout = initArrayResult(INT8OID, cxt, false);
	rows->deadline = initArrayResult(TIMESTAMPTZOID, cxt, false);
	rows->n = 0;
}

/*
 * The task of activity "event_id" of a run, on queue "queue_id", created at
 * created_at, under the effective retry policy (dex_effective_retry_policy).
 */
void
dex_activity_rows_add(DexActivityRows *rows, int32 queue_id, pg_uuid_t *run_id, int32 event_id,
					  const Dex__V1__ActivityTaskCreated *created,
					  const Dex__V1__RetryPolicy *policy, TimestampTz created_at)
{
	dex_array_add(rows->queue_id, Int32GetDatum(queue_id), false);
	dex_array_add(rows->run_id, UUIDPGetDatum(run_id), false);
	dex_array_add(rows->event_id, Int32GetDatum(event_id), false);
	dex_array_add(rows->name, CStringGetTextDatum(created->name), false);
	dex_array_add(rows->priority, Int16GetDatum((int16) created->priority), false);
	dex_array_add(rows->argument,
				  created->argument ? PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) created->argument)) : (Datum) 0,
				  created->argument == NULL);
	dex_array_add(rows->retry_policy,
				  PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) policy)), false);
	dex_array_add(rows->start_to_close, Int64GetDatum(dex_duration_ms(created->start_to_close_timeout)),
				  created->start_to_close_timeout == NULL);
	dex_array_add(rows->heartbeat_timeout, Int64GetDatum(dex_duration_ms(created->heartbeat_timeout)),
				  created->heartbeat_timeout == NULL);
	dex_array_add(rows->deadline,
				  TimestampTzGetDatum(created_at + dex_duration_ms(created->schedule_to_close_timeout) * 1000),
				  created->schedule_to_close_timeout == NULL);
	rows->n++;
}

/*
 * The DEX_ACTIVITY_ROWS_COLUMNS arrays, in the order of the struct, as the
 * first parameters of an insert.
 */
void
dex_activity_rows_values(DexActivityRows *rows, Datum *values)
{
	values[0] = dex_array_result(rows->queue_id);
	values[1] = dex_array_result(rows->run_id);
	values[2] = dex_array_result(rows->event_id);
	values[3] = dex_array_result(rows->name);
	values[4] = dex_array_result(rows->priority);
	values[5] = dex_array_result(rows->argument);
	values[6] = dex_array_result(rows->retry_policy);
	values[7] = dex_array_result(rows->start_to_close);
	values[8] = dex_array_result(rows->heartbeat_timeout);
	values[9] = dex_array_result(rows->deadline);
}

/* the columns of DexActivityRows, in order */
static DexPlan insert_activities_plan = {
	"INSERT INTO dex.activity_task (queue_id, run_id, event_id, name, priority, status, attempt, "
	"                               visible_from, argument, retry_policy, start_to_close_ms, "
	"                               heartbeat_timeout_ms, schedule_deadline, created_at) "
	"SELECT queue_id, run_id, event_id, name, priority, 'QUEUED', 1, now(), argument, retry_policy, "
	"       start_to_close_ms, heartbeat_timeout_ms, schedule_deadline, now() "
	"FROM unnest($1::integer[], $2::uuid[], $3::integer[], $4::text[], $5::smallint[], $6::bytea[], "
	"            $7::bytea[], $8::bigint[], $9::bigint[], $10::timestamptz[]) "
	"     AS a(queue_id, run_id, event_id, name, priority, argument, retry_policy, start_to_close_ms, "
	"          heartbeat_timeout_ms, schedule_deadline)",
	10, {INT4ARRAYOID, UUIDARRAYOID, INT4ARRAYOID, TEXTARRAYOID, INT2ARRAYOID, BYTEAARRAYOID, BYTEAARRAYOID,
		 INT8ARRAYOID, INT8ARRAYOID, TIMESTAMPTZARRAYOID}
};

/* Insert the rows as new tasks, queued for their first attempt */
void
dex_activity_rows_insert(DexActivityRows *rows)
{
	Datum		values[DEX_ACTIVITY_ROWS_COLUMNS];

	if (rows->n == 0)
		return;
	dex_activity_rows_values(rows, values);
	dex_spi_exec(&insert_activities_plan, values, NULL, 0);
}
