/*-------------------------------------------------------------------------
 *
 * api_heartbeat.c
 *	  dex.heartbeat_task and dex.heartbeat_tasks: a worker extends the
 *	  leases of the tasks it is still working on.
 *
 * Heartbeats extend leases: the lock version stays (it fences holders, not
 * time), locked_until moves to now + lease_duration, capped by an activity's
 * timeouts as at the lease.
 *
 * Locks and transactions.  A heartbeat runs in the caller's transaction,
 * takes the rebuild lock shared (engine/locks.c) and updates task rows
 * only, in one statement for all its tasks; it locks no run.  The scheduler
 * is woken at commit for the leases' new ends.  One task's call raises on a
 * lost lease; a batch gives no row for it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "api/api_tasks.h"


/*
 * $5: the queue of the tasks (1.5), or NULL.  Task rows are found by run
 * and task id, a prefix of the primary key.  Up to schema 1.7, whose task
 * tables had a partition per queue, they did not name the queue's partition:
 * without the queue the statement looked at every queue's partition
 * (hundreds of milliseconds with hundreds of queues).
 */
#define HEARTBEAT_SQL(queue_cond) \
	"WITH b AS (SELECT * FROM unnest($1::uuid[], $2::integer[], $3::bigint[]) " \
	"           AS b(run_id, task_id, lock_version)), " \
	"w AS (UPDATE dex.workflow_task t SET locked_until = now() + $4 FROM b " \
	"      WHERE b.task_id = 0 AND t.run_id = b.run_id AND t.lock_version = b.lock_version " \
	"        AND t.locked_by IS NOT NULL " queue_cond \
	"      RETURNING t.run_id, 0 AS task_id, t.locked_until, t.queue_id), " \
	"a AS (UPDATE dex.activity_task t SET locked_until = LEAST(now() + $4, " \
	"        t.attempt_started_at + make_interval(secs => coalesce(t.start_to_close_ms, 1e12) / 1000.0), " \
	"        now() + make_interval(secs => coalesce(t.heartbeat_timeout_ms, 1e12) / 1000.0), " \
	"        coalesce(t.schedule_deadline, 'infinity')) FROM b " \
	"      WHERE b.task_id > 0 AND t.run_id = b.run_id AND t.event_id = b.task_id " \
	"        AND t.lock_version = b.lock_version AND t.locked_by IS NOT NULL " queue_cond \
	"      RETURNING t.run_id, t.event_id AS task_id, t.locked_until, t.queue_id) " \
	"SELECT run_id, task_id, locked_until, queue_id FROM w " \
	"UNION ALL SELECT run_id, task_id, locked_until, queue_id FROM a"

/* [0]: any queue; [1]: the tasks of queue $5 */
static DexPlan heartbeat_plans[2] = {
	{HEARTBEAT_SQL(""), 4, {UUIDARRAYOID, INT4ARRAYOID, INT8ARRAYOID, INTERVALOID}},
	{HEARTBEAT_SQL("AND t.queue_id = $5 "), 5,
	{UUIDARRAYOID, INT4ARRAYOID, INT8ARRAYOID, INTERVALOID, INT4OID}}
};

/*
 * Run the heartbeat statement for arrays of tasks, of queue queue_id (0:
 * any); SPI_tuptable holds the held ones.
 */
static void
heartbeat(Datum run_ids, Datum task_ids, Datum lock_versions, Interval *lease, int32 queue_id)
{
	Datum		values[5] = {run_ids, task_ids, lock_versions, IntervalPGetDatum(lease),
	Int32GetDatum(queue_id)};

	dex_check_lease_duration(lease);
	dex_spi_exec(&heartbeat_plans[queue_id != 0], values, NULL, 0);
	dex_check_queue_use_spi(4);
	for (uint64 i = 0; i < SPI_processed; i++)
		dex_wake_scheduler_at_commit((TimestampTz) dex_spi_getint64(i, 3));
}

static DexPlan keep_details_plan = {
	"UPDATE dex.activity_task SET heartbeat_details = $3 WHERE run_id = $1 AND event_id = $2",
	3, {UUIDOID, INT4OID, BYTEAOID}
};

/*
 * dex.heartbeat_task(run_id, task_id, lock_version, lease_duration, details)
 * returns timestamptz
 */
static Datum
heartbeat_task(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *run_id;
	int32		task_id;
	int64		lock_version;
	TimestampTz until;

	dex_check_task_args(fcinfo);
	dex_arg_not_null(fcinfo, 3, "lease duration");
	run_id = PG_GETARG_UUID_P(0);
	task_id = PG_GETARG_INT32(1);
	lock_version = PG_GETARG_INT64(2);

	SPI_connect();
	dex_wait_for_rebuild();
	heartbeat(PointerGetDatum(construct_array(&PG_GETARG_DATUM(0), 1, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR)),
			  PointerGetDatum(construct_array(&PG_GETARG_DATUM(1), 1, INT4OID, 4, true, TYPALIGN_INT)),
			  PointerGetDatum(construct_array(&PG_GETARG_DATUM(2), 1, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)),
			  PG_GETARG_INTERVAL_P(3), 0);
	if (SPI_processed == 0)
		dex_report_lost_lease(run_id, task_id, lock_version);
	until = (TimestampTz) dex_spi_getint64(0, 3);
	if (!PG_ARGISNULL(4) && task_id > 0)
	{
		Datum		values[3] = {UUIDPGetDatum(run_id), Int32GetDatum(task_id),
			PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *)
											  dex_payload_from_jsonb(PG_GETARG_JSONB_P(4))))};

		dex_spi_exec(&keep_details_plan, values, NULL, 0);
	}
	SPI_finish();
	PG_RETURN_TIMESTAMPTZ(until);
}

/*
 * dex.heartbeat_tasks(run_ids, task_ids, lock_versions, lease_duration
 * [, queue (1.5)])
 * returns table (run_id, task_id, locked_until): one row per task whose
 * lease is still held; lost leases have no row.
 */
static Datum
heartbeat_tasks(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int32		queue_id = 0;

	/* checked only: the statement takes the arrays as they are */
	(void) dex_read_task_batch(fcinfo, InvalidOid, NULL);
	dex_arg_not_null(fcinfo, 3, "lease duration");
	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	dex_wait_for_rebuild();
	/* the tasks' queue (1.5), an unknown one an error, as for a poll */
	if (PG_NARGS() > 4 && !PG_ARGISNULL(4))
	{
		DexQueue	queue = dex_existing_queue(text_to_cstring(PG_GETARG_TEXT_PP(4)), NULL);

		dex_check_queue_use(&queue);
		queue_id = queue.id;
	}
	heartbeat(PG_GETARG_DATUM(0), PG_GETARG_DATUM(1), PG_GETARG_DATUM(2),
			  PG_GETARG_INTERVAL_P(3), queue_id);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		dex_put_batch_row(rsinfo, dex_spi_getdatum(i, 1, &isnull), dex_spi_getdatum(i, 2, &isnull),
						  dex_spi_getdatum(i, 3, &isnull));
	}
	SPI_finish();
	return (Datum) 0;
}

DEX_API_ENTRY_POINT(dex_heartbeat_task, heartbeat_task);
DEX_API_ENTRY_POINT(dex_heartbeat_tasks, heartbeat_tasks);
