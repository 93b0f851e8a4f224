/*-------------------------------------------------------------------------
 *
 * debounce.c
 *	  Debounce keys (dex.run_debounce, 1.7): many calls of dex.create_run,
 *	  one run.
 *
 * A key is per queue and workflow name.  The first call of a key makes a
 * DELAYED run that starts "debounce" later (a START run timer, run_timers.c:
 * no scheduler code of its own); each later call while that run has not
 * started replaces its argument and pushes its start (and its deadline, if
 * it has one) to "debounce" after that call, but never past "debounce_max"
 * after the first call.  Once the run has started (or ended, or been
 * purged), the next call opens a new window with a new run.  The row of a
 * key stays, pointing to its last run, until that run is purged.
 *
 * Locks: a call inserts the key's row (ON CONFLICT DO NOTHING: a concurrent
 * first call of the key waits for the other to commit or abort), or locks
 * it FOR UPDATE, so calls of one key take turns and each sees what the one
 * before it did: two concurrent calls make one run, with the argument of
 * the later.  Holding the key's row, a call reads the status of its run
 * without a lock and locks the run FOR NO KEY UPDATE only if it is DELAYED;
 * nobody who holds a run lock waits for a key's row except purge, which
 * deletes only runs that ended, and a call never waits for those.  The
 * scheduler starting the run locks it with SKIP LOCKED; a call that waited
 * for it sees the run started and opens a new window.
 *
 * Runs in the caller's transaction and SPI connection.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "engine/engine.h"

/* $1 queue, $2 workflow, $3 key, $4 the new run */
static DexPlan claim_key_plan = {
	"INSERT INTO dex.run_debounce (queue_id, workflow_name, debounce_key, run_id, first_at) "
	"VALUES ($1, $2, $3, $4, now()) ON CONFLICT DO NOTHING",
	4, {INT4OID, TEXTOID, TEXTOID, UUIDOID}
};

/* the key's row, locked, and its run's status (not locked: see above) */
static DexPlan lock_key_plan = {
	"SELECT d.run_id, d.first_at, r.status FROM dex.run_debounce d "
	"LEFT JOIN dex.workflow_run r ON r.id = d.run_id "
	"WHERE d.queue_id = $1 AND d.workflow_name = $2 AND d.debounce_key = $3 FOR UPDATE OF d",
	3, {INT4OID, TEXTOID, TEXTOID}
};

static DexPlan renew_key_plan = {
	"UPDATE dex.run_debounce SET run_id = $4, first_at = now() "
	"WHERE queue_id = $1 AND workflow_name = $2 AND debounce_key = $3",
	4, {INT4OID, TEXTOID, TEXTOID, UUIDOID}
};

static DexPlan lock_run_plan = {
	"SELECT status FROM dex.workflow_run WHERE id = $1 FOR NO KEY UPDATE",
	1, {UUIDOID}
};

static DexPlan update_argument_plan = {
	"UPDATE dex.workflow_run SET argument = $2, updated_at = now() WHERE id = $1",
	2, {UUIDOID, BYTEAOID}
};

/* the run's START timer moves to $2, its DEADLINE as far */
static DexPlan move_timers_plan = {
	"UPDATE dex.run_timer t SET due_at = t.due_at + ($2 - s.due_at) "
	"FROM (SELECT due_at FROM dex.run_timer WHERE run_id = $1 AND kind = 'START') s "
	"WHERE t.run_id = $1",
	2, {UUIDOID, TIMESTAMPTZOID}
};

static TimestampTz
plus(TimestampTz t, Interval *i)
{
	return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(t),
												   IntervalPGetDatum(i)));
}

/*
 * A call of dex.create_run with debounce key "key" on the queue: returns the
 * pending run it updated (its new argument "argument", an encoded Payload
 * or NULL), or NULL when the caller must make run "new_id" (the key's row
 * points to it already), DELAYED until *start_at.  "max" may be NULL (no
 * limit).
 */
pg_uuid_t *
dex_debounce_run(int32 queue_id, const char *workflow_name, const char *key, pg_uuid_t *new_id,
				 bytea *argument, Interval *debounce, Interval *max, TimestampTz *start_at)
{
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	Datum		values[4];
	char		nulls[2] = {' ', ' '};
	pg_uuid_t  *run_id;
	TimestampTz first_at;
	TimestampTz due;
	bool		isnull;
	char	   *status;

	values[0] = Int32GetDatum(queue_id);
	values[1] = CStringGetTextDatum(workflow_name);
	values[2] = CStringGetTextDatum(key);
	values[3] = UUIDPGetDatum(new_id);
	*start_at = plus(now, debounce);
	dex_spi_exec(&claim_key_plan, values, NULL, 0);
	if (SPI_processed > 0)
		return NULL;			/* the key's first call */

	dex_spi_exec(&lock_key_plan, values, NULL, 1);
	if (SPI_processed == 0)
		elog(ERROR, "debounce key \"%s\" has no row after a conflict", key);
	run_id = palloc(sizeof(pg_uuid_t));
	memcpy(run_id, DatumGetUUIDP(dex_spi_getdatum(0, 1, &isnull)), sizeof(pg_uuid_t));
	first_at = DatumGetTimestampTz(dex_spi_getdatum(0, 2, &isnull));
	dex_spi_getdatum(0, 3, &isnull);
	status = isnull ? NULL : dex_spi_gettext_copy(0, 3);
	if (status != NULL && strcmp(status, "DELAYED") == 0)
	{
		Datum		run[2] = {UUIDPGetDatum(run_id), (Datum) 0};

		/* still pending once we hold it? (the scheduler may have started it) */
		dex_spi_exec(&lock_run_plan, run, NULL, 1);
		if (SPI_processed == 1 && strcmp(dex_spi_gettext_copy(0, 1), "DELAYED") == 0)
		{
			run[1] = argument ? PointerGetDatum(argument) : (Datum) 0;
			nulls[1] = argument ? ' ' : 'n';
			dex_spi_exec(&update_argument_plan, run, nulls, 0);
			due = *start_at;
			if (max != NULL && plus(first_at, max) < due)
				due = plus(first_at, max);
			run[1] = TimestampTzGetDatum(due);
			dex_spi_exec(&move_timers_plan, run, NULL, 0);
			dex_wake_scheduler_at_commit(due);
			*start_at = due;
			return run_id;
		}
	}
	/* its run has started, ended or gone: a new window */
	dex_spi_exec(&renew_key_plan, values, NULL, 0);
	return NULL;
}
