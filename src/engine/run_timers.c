/*-------------------------------------------------------------------------
 *
 * run_timers.c
 *	  A run's own timers (dex.run_timer, 1.4): when a DELAYED run starts,
 *	  and when a run with an execution timeout ends TIMED_OUT.
 *
 * dex.create_run(s) and a startChildRun command write a run's timers with
 * the run; the scheduler fires the due ones (dex_fire_run_timers), and
 * dex_end_runs deletes those of runs that ended.  The rows are logged, so a
 * crash or a failover loses none, and the scheduler's probe reads only
 * pending ones.  A delayed run has no workflow task and holds no concurrency
 * key until it starts; an external event that reaches it waits in its inbox
 * (dex_ensure_workflow_tasks makes tasks for CREATED and RUNNING runs only).
 *
 * Locks: the scheduler locks the runs of due timers FOR NO KEY UPDATE and
 * the timer rows FOR UPDATE, with SKIP LOCKED (a run another transaction
 * holds is passed over until a later pass), and then changes each run as
 * lifecycle.c does, which locks it again (a no-op).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "engine/engine.h"

/* $1 the runs (uuid[]), $2 the kind, $3 when due */
static DexPlan add_timers_plan = {
	"INSERT INTO dex.run_timer (run_id, kind, due_at) SELECT unnest($1::uuid[]), $2, $3",
	3, {UUIDARRAYOID, TEXTOID, TIMESTAMPTZOID}
};

/* Give the runs (a uuid[]) a timer of kind START or DEADLINE, due at due_at */
void
dex_add_run_timers(Datum run_ids, const char *kind, TimestampTz due_at)
{
	Datum		values[3] = {run_ids, CStringGetTextDatum(kind), TimestampTzGetDatum(due_at)};

	dex_spi_exec(&add_timers_plan, values, NULL, 0);
	dex_wake_scheduler_at_commit(due_at);
}

/* due timers with their runs, both locked (SKIP LOCKED: see above) */
static DexPlan due_timers_plan = {
	"SELECT t.run_id, t.kind, t.due_at, r.status, r.queue_id, r.priority, r.concurrency_key "
	"FROM dex.run_timer t JOIN dex.workflow_run r ON r.id = t.run_id "
	"WHERE t.due_at <= now() ORDER BY t.due_at LIMIT $1 "
	"FOR NO KEY UPDATE OF r SKIP LOCKED FOR UPDATE OF t SKIP LOCKED",
	1, {INT4OID}
};

static DexPlan delete_timer_plan = {
	"DELETE FROM dex.run_timer WHERE run_id = $1 AND kind = $2",
	2, {UUIDOID, TEXTOID}
};

static DexPlan start_run_plan = {
	"UPDATE dex.workflow_run SET status = 'CREATED', updated_at = now() WHERE id = $1",
	1, {UUIDOID}
};

/*
 * A delayed run's start has come: it is CREATED, and gets its first workflow
 * task, or, with a concurrency key another run holds, waits for the key.
 */
static void
start_delayed_run(pg_uuid_t *run_id, int32 queue_id, int32 priority, const char *key)
{
	Datum		values[1] = {UUIDPGetDatum(run_id)};

	dex_spi_exec(&start_run_plan, values, NULL, 0);
	if (key == NULL || dex_admit_run(run_id, queue_id, key, priority))
		dex_insert_first_task(run_id, queue_id, priority);
}

/*
 * The scheduler's pass over due run timers: up to "limit" of them fire.
 * Returns how many were read (a full batch means more may be due).
 */
int
dex_fire_run_timers(int limit)
{
	Datum		values[1] = {Int32GetDatum(limit)};
	DexRows		due = dex_spi_rows(&due_timers_plan, values, NULL, 0);

	for (uint64 i = 0; i < due.n; i++)
	{
		bool		isnull;
		pg_uuid_t  *run_id = palloc(sizeof(pg_uuid_t));
		char	   *kind = dex_rows_gettext_copy(due, i, 2);
		TimestampTz due_at = DatumGetTimestampTz(dex_rows_getdatum(due, i, 3, &isnull));
		char	   *status = dex_rows_gettext_copy(due, i, 4);
		Datum		del[2];

		memcpy(run_id, DatumGetUUIDP(dex_rows_getdatum(due, i, 1, &isnull)), sizeof(pg_uuid_t));
		del[0] = UUIDPGetDatum(run_id);
		del[1] = CStringGetTextDatum(kind);
		dex_spi_exec(&delete_timer_plan, del, NULL, 0);
		if (strcmp(kind, "DEADLINE") == 0)
			dex_time_out_run_internal(run_id, due_at);
		else if (strcmp(status, "DELAYED") == 0)
			start_delayed_run(run_id, (int32) dex_rows_getint64(due, i, 5),
							  (int32) dex_rows_getint64(due, i, 6),
							  dex_rows_gettext_copy(due, i, 7));
	}
	return (int) due.n;
}
