/*-------------------------------------------------------------------------
 *
 * keys.c
 *	  Concurrency keys: one active run per key and workflow queue.
 *
 *  *
 * A key is held by one run at a time per workflow queue: keys, like
 * instance ids, are per queue, so that runs of different tenants never wait
 * for each other and a run's wait says nothing of another tenant's runs
 * (instances.c says why).  A schema still on version 1.1 has no queue column
 * in dex.concurrency_slot and dex.concurrency_wait: until ALTER EXTENSION
 * dex UPDATE its keys stay global, with the statements of 1.1 (each pair of
 * plans below: [0] for 1.1, [1] per queue).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "engine/engine.h"

/* Whether concurrency keys are per queue (schema 1.2 and later). */
int
dex_keys_per_queue(void)
{
	return dex_column_exists("concurrency_slot", "queue_id");
}

/*
 * Claims the key, or locks its current holder's slot row: a run ending
 * meanwhile (dex_release_keys) then waits for us, and sees our wait row when
 * it admits the next run.  $1 key, $2 run, $3 queue.
 */
static DexPlan claim_key_plans[2] = {
	{"INSERT INTO dex.concurrency_slot (key, run_id) VALUES ($1, $2) "
		"ON CONFLICT (key) DO UPDATE SET run_id = dex.concurrency_slot.run_id WHERE false "
		"RETURNING run_id",
	3, {TEXTOID, UUIDOID, INT4OID}},
	{"INSERT INTO dex.concurrency_slot (queue_id, key, run_id) VALUES ($3, $1, $2) "
		"ON CONFLICT (queue_id, key) DO UPDATE SET run_id = dex.concurrency_slot.run_id WHERE false "
		"RETURNING run_id",
	3, {TEXTOID, UUIDOID, INT4OID}}
};

/* $1 key, $2 priority, $3 run, $4 queue */
static DexPlan wait_for_key_plans[2] = {
	{"INSERT INTO dex.concurrency_wait (key, priority, run_id) VALUES ($1, $2, $3)",
	4, {TEXTOID, INT2OID, UUIDOID, INT4OID}},
	{"INSERT INTO dex.concurrency_wait (queue_id, key, priority, run_id) VALUES ($4, $1, $2, $3)",
	4, {TEXTOID, INT2OID, UUIDOID, INT4OID}}
};

/*
 * Admit a new run with a concurrency key on its queue: it holds the key if
 * nobody does (returns true: give it a workflow task), else it waits for it.
 */
bool
dex_admit_run(pg_uuid_t *run_id, int32 queue_id, const char *key, int32 priority)
{
	int			v = dex_keys_per_queue();
	Datum		values[4];

	values[0] = CStringGetTextDatum(key);
	values[1] = UUIDPGetDatum(run_id);
	values[2] = Int32GetDatum(queue_id);
	dex_spi_exec(&claim_key_plans[v], values, NULL, 0);
	if (SPI_processed > 0)
		return true;
	values[1] = Int16GetDatum((int16) priority);
	values[2] = UUIDPGetDatum(run_id);
	values[3] = Int32GetDatum(queue_id);
	dex_spi_exec(&wait_for_key_plans[v], values, NULL, 0);
	return false;
}

/* $1 the runs that ended; returns the keys they held, with their queues */
static DexPlan release_keys_plans[2] = {
	{"WITH w AS (DELETE FROM dex.concurrency_wait w USING dex.workflow_run r "
		"           WHERE r.id = ANY ($1) AND w.key = r.concurrency_key AND w.run_id = r.id) "
		"DELETE FROM dex.concurrency_slot WHERE run_id = ANY ($1) RETURNING key, 0",
	1, {UUIDARRAYOID}},
	{"WITH w AS (DELETE FROM dex.concurrency_wait w USING dex.workflow_run r "
		"           WHERE r.id = ANY ($1) AND w.queue_id = r.queue_id AND w.key = r.concurrency_key "
		"             AND w.run_id = r.id) "
		"DELETE FROM dex.concurrency_slot WHERE run_id = ANY ($1) RETURNING key, queue_id",
	1, {UUIDARRAYOID}}
};

/* $1 key, $2 queue */
static DexPlan next_waiting_plans[2] = {
	{"SELECT run_id FROM dex.concurrency_wait WHERE key = $1 "
		"ORDER BY priority DESC, run_id LIMIT 1",
	2, {TEXTOID, INT4OID}},
	{"SELECT run_id FROM dex.concurrency_wait WHERE queue_id = $2 AND key = $1 "
		"ORDER BY priority DESC, run_id LIMIT 1",
	2, {TEXTOID, INT4OID}}
};

/*
 * The waiting run is locked first (rule 1 of the file header): a cancellation
 * of it either ended before (its wait row is gone, and the next one is taken)
 * or waits for the admission and then sees the slot and task it must free.
 * $1 key, $2 run, $3 queue.
 */
#define ADMIT_RUN \
	"WITH r AS MATERIALIZED (SELECT id, queue_id, priority, status, workflow_name, workflow_version " \
	"                        FROM dex.workflow_run WHERE id = $2 FOR NO KEY UPDATE), "
#define ADMIT_TASK_SQL(cols, run_cols) \
	"INSERT INTO dex.workflow_task (queue_id, run_id, priority" cols ") " \
	"SELECT r.queue_id, r.id, r.priority" run_cols " FROM r JOIN slot ON slot.run_id = r.id " \
	"WHERE r.status = ANY ('{CREATED,RUNNING}'::text[]) " \
	"RETURNING queue_id, (SELECT count(*) FROM slot)"
#define ADMIT_TASK ADMIT_TASK_SQL("", "")
/* keys per queue (1.2): the wait row goes, the slot is taken */
#define ADMIT_SLOT_PER_QUEUE \
	"     w AS (DELETE FROM dex.concurrency_wait w USING r " \
	"           WHERE w.queue_id = $3 AND w.key = $1 AND w.run_id = r.id RETURNING w.run_id), " \
	"     slot AS (INSERT INTO dex.concurrency_slot (queue_id, key, run_id) SELECT $3, $1, run_id FROM w " \
	"              RETURNING run_id) "
/* [0] keys global (1.1), [1] per queue, [2] 1.6: tasks with their runs' workflow and version */
static DexPlan admit_plans[3] = {
	{ADMIT_RUN
		"     w AS (DELETE FROM dex.concurrency_wait w USING r "
		"           WHERE w.key = $1 AND w.run_id = r.id RETURNING w.run_id), "
		"     slot AS (INSERT INTO dex.concurrency_slot (key, run_id) SELECT $1, run_id FROM w "
		"              RETURNING run_id) "
		ADMIT_TASK,
	3, {TEXTOID, UUIDOID, INT4OID}},
	{ADMIT_RUN
		ADMIT_SLOT_PER_QUEUE
		ADMIT_TASK,
	3, {TEXTOID, UUIDOID, INT4OID}},
	{ADMIT_RUN
		ADMIT_SLOT_PER_QUEUE
		ADMIT_TASK_SQL(DEX_TASK_RUN_COLS, ", r.workflow_name, r.workflow_version"),
	3, {TEXTOID, UUIDOID, INT4OID}}
};

/*
 * Runs that ended give up their keys (or their place in a key's queue); each
 * freed key goes to the next run waiting for it, which gets its first
 * workflow task.  A waiting run that went away meanwhile (cancelled) is
 * passed over for the next one.
 */
void
dex_release_keys(Datum run_ids)
{
	int			v = dex_keys_per_queue();
	Datum		values[3] = {run_ids, (Datum) 0, (Datum) 0};
	int			n;
	char	  **keys;
	int32	   *queues;

	dex_spi_exec(&release_keys_plans[v], values, NULL, 0);
	n = (int) SPI_processed;
	keys = palloc(sizeof(char *) * Max(n, 1));
	queues = palloc(sizeof(int32) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		keys[i] = dex_spi_gettext_copy(i, 1);
		queues[i] = (int32) dex_spi_getint64(i, 2);
	}
	for (int i = 0; i < n; i++)
	{
		for (;;)
		{
			bool		isnull;
			pg_uuid_t	next;

			values[0] = CStringGetTextDatum(keys[i]);
			values[1] = Int32GetDatum(queues[i]);
			dex_spi_exec(&next_waiting_plans[v], values, NULL, 1);
			if (SPI_processed == 0)
				break;			/* nobody waits: the key is free */
			memcpy(&next, DatumGetUUIDP(dex_spi_getdatum(0, 1, &isnull)), sizeof(pg_uuid_t));
			values[1] = UUIDPGetDatum(&next);
			values[2] = Int32GetDatum(queues[i]);
			dex_spi_exec(&admit_plans[dex_schema_1_6() ? 2 : v], values, NULL, 0);
			if (SPI_processed > 0)
			{
				dex_queue_work_added_spi(1);
				dex_stat_count_spi(DEX_STAT_TASKS_CREATED, 1);
				break;
			}
			/* no task: the run's wait row went away before we locked it */
			CHECK_FOR_INTERRUPTS();
		}
	}
}
