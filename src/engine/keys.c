/*-------------------------------------------------------------------------
 *
 * keys.c
 *	  Concurrency keys: up to n active runs per key and workflow queue.
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
 * Concurrency limits (1.7): a key admits up to n runs at once, n being the
 * key's own limit (dex.concurrency_limit, dex.set_concurrency_limit) or
 * else its queue's (dex.queue.concurrency_limit, 1 by default).  Each run
 * admitted holds a numbered slot of the key, 0 to n - 1, so that the
 * primary key (queue, key, slot) keeps two runs from taking the same room:
 * a new run claims the lowest free slot (INSERT ... ON CONFLICT DO NOTHING,
 * and looks again if a concurrent claim took it first); when it finds all
 * n slots held it locks their rows FOR UPDATE before it enters the wait
 * queue, so that a run ending meanwhile (which deletes its slot row) waits
 * for its commit and then sees its wait row, as with one slot above.  When
 * runs end, or a limit is raised, the key's free slots under its limit are
 * filled (refill_slots): first by the runs that hold slots above it (the
 * limit was lowered under them: they run on, and nobody is admitted until
 * the key is under its limit), then by the next waiting runs.  A schema
 * before 1.7 keeps one run per key, with the statements above.
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

/* ---- Concurrency limits (1.7): numbered slots ---- */

/* Whether keys have numbered slots, so limits above 1 (schema 1.7) */
static bool
keys_have_slots(void)
{
	return dex_column_exists("concurrency_slot", "slot");
}

/* $1 key, $2 queue: the key's limit, its own or else its queue's */
#define KEY_LIMIT_SQL \
	"coalesce((SELECT l.max_runs FROM dex.concurrency_limit l WHERE l.queue_id = $2 AND l.key = $1), " \
	"         (SELECT q.concurrency_limit FROM dex.queue q WHERE q.id = $2), 1)"

/*
 * $1 key, $2 queue: the key's limit and its lowest free slot under it (NULL:
 * none): a probe of the primary key per slot, in order (generate_series
 * returns them so; no sort), up to the first free one.
 */
#define LOWEST_FREE_SLOT_SQL \
	"(SELECT s FROM generate_series(0, lim.n - 1) s " \
	" WHERE NOT EXISTS (SELECT 1 FROM dex.concurrency_slot c " \
	"                   WHERE c.queue_id = $2 AND c.key = $1 AND c.slot = s) LIMIT 1)"

/*
 * ...for a new holder: none while the key has as many holders as its limit,
 * whatever slots they hold (a limit lowered under its holders leaves some
 * above it, and a slot under it may be free: it is not to be taken).
 */
static DexPlan free_slot_plan = {
	"SELECT lim.n, CASE WHEN (SELECT count(*) FROM dex.concurrency_slot c "
	"                         WHERE c.queue_id = $2 AND c.key = $1) < lim.n "
	"              THEN " LOWEST_FREE_SLOT_SQL " END "
	"FROM (SELECT " KEY_LIMIT_SQL " AS n) lim",
	2, {TEXTOID, INT4OID}
};

/* ...whoever holds the others */
static DexPlan lowest_free_slot_plan = {
	"SELECT lim.n, " LOWEST_FREE_SLOT_SQL " FROM (SELECT " KEY_LIMIT_SQL " AS n) lim",
	2, {TEXTOID, INT4OID}
};

/* $1 key, $2 run, $3 queue, $4 slot */
static DexPlan claim_slot_plan = {
	"INSERT INTO dex.concurrency_slot (queue_id, key, slot, run_id) VALUES ($3, $1, $4, $2) "
	"ON CONFLICT (queue_id, key, slot) DO NOTHING RETURNING run_id",
	4, {TEXTOID, UUIDOID, INT4OID, INT4OID}
};

/*
 * $1 key, $2 queue: lock the rows of the key's slots, to be waited for by
 * the runs ending that hold them; how many are still there (a row deleted by
 * a commit since the snapshot is not).  FOR UPDATE, as the claim of one slot
 * locked its holder's row before 1.7: creates of a key with no room wait for
 * one another, and enter its wait queue in the order they got there.  Every
 * holder counts, those above a lowered limit too.
 */
static DexPlan lock_slots_plan = {
	"SELECT count(*) FROM (SELECT 1 FROM dex.concurrency_slot "
	"                      WHERE queue_id = $2 AND key = $1 FOR UPDATE) s",
	2, {TEXTOID, INT4OID}
};

/* The key's limit and its lowest free slot (-1: none) */
static int32
free_slot(const char *key, int32 queue_id, int32 *limit)
{
	Datum		values[2] = {CStringGetTextDatum(key), Int32GetDatum(queue_id)};
	bool		isnull;
	Datum		d;

	dex_spi_exec(&free_slot_plan, values, NULL, 1);
	*limit = (int32) dex_spi_getint64(0, 1);
	d = dex_spi_getdatum(0, 2, &isnull);
	return isnull ? -1 : DatumGetInt32(d);
}

/*
 * A new run takes a slot of its key if one is free (true), else enters the
 * key's wait queue (false), after locking every slot below the limit.
 */
static bool
admit_into_slot(pg_uuid_t *run_id, int32 queue_id, const char *key, int32 priority)
{
	for (;;)
	{
		int32		limit;
		int32		slot = free_slot(key, queue_id, &limit);
		Datum		values[4];

		values[0] = CStringGetTextDatum(key);
		if (slot >= 0)
		{
			values[1] = UUIDPGetDatum(run_id);
			values[2] = Int32GetDatum(queue_id);
			values[3] = Int32GetDatum(slot);
			dex_spi_exec(&claim_slot_plan, values, NULL, 0);
			if (SPI_processed > 0)
				return true;
		}
		else
		{
			values[1] = Int32GetDatum(queue_id);
			dex_spi_exec(&lock_slots_plan, values, NULL, 1);
			if (dex_spi_getint64(0, 1) >= limit)
			{
				values[1] = Int16GetDatum((int16) priority);
				values[2] = UUIDPGetDatum(run_id);
				values[3] = Int32GetDatum(queue_id);
				dex_spi_exec(&wait_for_key_plans[1], values, NULL, 0);
				return false;
			}
		}
		/* a concurrent claim took the slot, or a run ending freed one: look again */
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Admit a new run with a concurrency key on its queue: it holds the key (a
 * slot of it) if there is room (returns true: give it a workflow task),
 * else it waits for it.
 */
bool
dex_admit_run(pg_uuid_t *run_id, int32 queue_id, const char *key, int32 priority)
{
	int			v = dex_keys_per_queue();
	Datum		values[4];

	if (v == 1 && keys_have_slots())
		return admit_into_slot(run_id, queue_id, key, priority);

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

/* 1.7: the keys whose slots the runs that ended held, each once */
static DexPlan release_slots_plan = {
	"WITH w AS (DELETE FROM dex.concurrency_wait w USING dex.workflow_run r "
	"           WHERE r.id = ANY ($1) AND w.queue_id = r.queue_id AND w.key = r.concurrency_key "
	"             AND w.run_id = r.id), "
	"     s AS (DELETE FROM dex.concurrency_slot WHERE run_id = ANY ($1) RETURNING key, queue_id) "
	"SELECT DISTINCT s.key, s.queue_id FROM s ORDER BY s.queue_id, s.key",
	1, {UUIDARRAYOID}
};

/*
 * 1.7: admit the waiting run into slot $4 of its key.  The run is locked
 * first, as in admit_plans, then its wait row (FOR UPDATE: a cancellation
 * that deleted it while we waited for the run is seen, not the snapshot's
 * row); the wait row goes only if the run got the slot (a concurrent claim
 * may have taken it: then nothing changes).  Returns
 * whether it was still waiting, whether it got the slot, and its queue if
 * it got a workflow task.  $1 key, $2 run, $3 queue, $4 slot.
 */
static DexPlan admit_into_slot_plan = {
	ADMIT_RUN
	"     w AS (SELECT w.run_id FROM dex.concurrency_wait w JOIN r ON w.run_id = r.id "
	"           WHERE w.queue_id = $3 AND w.key = $1 FOR UPDATE OF w), "
	"     slot AS (INSERT INTO dex.concurrency_slot (queue_id, key, slot, run_id) "
	"              SELECT $3, $1, $4, run_id FROM w ON CONFLICT (queue_id, key, slot) DO NOTHING "
	"              RETURNING run_id), "
	"     gone AS (DELETE FROM dex.concurrency_wait w USING slot "
	"              WHERE w.queue_id = $3 AND w.key = $1 AND w.run_id = slot.run_id), "
	"     t AS (INSERT INTO dex.workflow_task (queue_id, run_id, priority" DEX_TASK_RUN_COLS ") "
	"           SELECT r.queue_id, r.id, r.priority, r.workflow_name, r.workflow_version "
	"           FROM r JOIN slot ON slot.run_id = r.id "
	"           WHERE r.status = ANY ('{CREATED,RUNNING}'::text[]) RETURNING queue_id) "
	"SELECT EXISTS (SELECT 1 FROM w), EXISTS (SELECT 1 FROM slot), EXISTS (SELECT 1 FROM t)",
	4, {TEXTOID, UUIDOID, INT4OID, INT4OID}
};

typedef enum SlotAdmission
{
	SLOT_GIVEN,					/* the next waiting run holds the slot */
	SLOT_TAKEN,					/* a concurrent claim holds it */
	SLOT_NOBODY_WAITS
} SlotAdmission;

/* The next run waiting for the key gets the slot (runs gone meanwhile are passed over) */
static SlotAdmission
pass_slot(const char *key, int32 queue_id, int32 slot)
{
	for (;;)
	{
		Datum		values[4];
		bool		isnull;
		pg_uuid_t	next;

		values[0] = CStringGetTextDatum(key);
		values[1] = Int32GetDatum(queue_id);
		dex_spi_exec(&next_waiting_plans[1], values, NULL, 1);
		if (SPI_processed == 0)
			return SLOT_NOBODY_WAITS;
		memcpy(&next, DatumGetUUIDP(dex_spi_getdatum(0, 1, &isnull)), sizeof(pg_uuid_t));
		values[1] = UUIDPGetDatum(&next);
		values[2] = Int32GetDatum(queue_id);
		values[3] = Int32GetDatum(slot);
		dex_spi_exec(&admit_into_slot_plan, values, NULL, 1);
		if (dex_spi_getbool(0, 2))
		{
			if (dex_spi_getbool(0, 3))
			{
				dex_queue_work_added(queue_id);
				dex_stat_add(queue_id, DEX_STAT_TASKS_CREATED, 1);
			}
			return SLOT_GIVEN;
		}
		if (dex_spi_getbool(0, 1))
			return SLOT_TAKEN;
		/* the run's wait row went away before we locked it: the next one */
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * $1 key, $2 queue, $3 a free slot under the limit, $4 a slot above it: its
 * holder moves down into $3.  An UPDATE, so that the row stays the holder's:
 * the end of that holder in another transaction, which deletes its row by
 * run, waits for this and then deletes the moved row.
 */
static DexPlan move_down_plan = {
	"UPDATE dex.concurrency_slot SET slot = $3 WHERE queue_id = $2 AND key = $1 AND slot = $4",
	4, {TEXTOID, INT4OID, INT4OID, INT4OID}
};

/* $1 key, $2 queue, $3 limit: the highest slot held above the limit (none: no row) */
static DexPlan above_limit_plan = {
	"SELECT slot FROM dex.concurrency_slot WHERE queue_id = $2 AND key = $1 AND slot >= $3 "
	"ORDER BY slot DESC LIMIT 1",
	3, {TEXTOID, INT4OID, INT4OID}
};

/*
 * A key's holders ended: its free slots under its limit are filled, first by
 * the holders above it (a limit lowered under its holders: they run on, and
 * take the place of those that end, so that nobody is admitted until the key
 * is under its limit), then by the runs waiting for it, in their order.
 *
 * Two transactions that end holders of one key at once meet on the row of a
 * holder above the limit: if the mover came first, the end of that holder
 * waits for it and deletes the moved row; if the end came first, the mover
 * waits, finds the row gone, and looks again with a new snapshot.  Without
 * such a holder the slots each frees are under the limit and each fills its
 * own (test/isolation/specs/key_limit_lowered.spec).  A raise of the limit
 * committed between this look and the move, admitting a run into the very
 * slot, makes the move fail (23505); the call can be retried.
 */
static void
refill_slots(const char *key, int32 queue_id)
{
	for (;;)
	{
		Datum		values[4];
		bool		isnull;
		Datum		d;
		int32		limit;
		int32		slot;

		values[0] = CStringGetTextDatum(key);
		values[1] = Int32GetDatum(queue_id);
		dex_spi_exec(&lowest_free_slot_plan, values, NULL, 1);
		limit = (int32) dex_spi_getint64(0, 1);
		d = dex_spi_getdatum(0, 2, &isnull);
		if (isnull)
			return;				/* every slot under the limit is held */
		slot = DatumGetInt32(d);

		values[2] = Int32GetDatum(limit);
		dex_spi_exec(&above_limit_plan, values, NULL, 1);
		if (SPI_processed > 0)
		{
			values[3] = Int32GetDatum((int32) dex_spi_getint64(0, 1));
			values[2] = Int32GetDatum(slot);
			dex_spi_exec(&move_down_plan, values, NULL, 1);
			/* moved, taken by a claim, or gone meanwhile: look again */
		}
		else if (pass_slot(key, queue_id, slot) == SLOT_NOBODY_WAITS)
			return;
		CHECK_FOR_INTERRUPTS();
	}
}

/* 1.7: the slots freed are filled again (refill_slots), once per key */
static void
release_slots(Datum run_ids)
{
	Datum		values[1] = {run_ids};
	DexRows		freed = dex_spi_rows(&release_slots_plan, values, NULL, 0);

	for (uint64 i = 0; i < freed.n; i++)
		refill_slots(dex_rows_gettext_copy(freed, i, 1), (int32) dex_rows_getint64(freed, i, 2));
}

/* $1 queue, $2 key (NULL: all): the keys of the queue that runs wait for */
static DexPlan waited_keys_plan = {
	"SELECT DISTINCT key FROM dex.concurrency_wait WHERE queue_id = $1 AND ($2::text IS NULL OR key = $2)",
	2, {INT4OID, TEXTOID}
};

/*
 * A limit was raised (dex.alter_queue's concurrency_limit, or
 * dex.set_concurrency_limit for "key"; NULL: every key of the queue): the
 * free slots of those keys are filled as when runs end (refill_slots).
 */
void
dex_admit_waiting_runs(int32 queue_id, const char *key)
{
	Datum		values[2] = {Int32GetDatum(queue_id), key ? CStringGetTextDatum(key) : (Datum) 0};
	DexRows		keys;

	if (!keys_have_slots())
		return;
	keys = dex_spi_rows(&waited_keys_plan, values, key ? NULL : " n", 0);
	for (uint64 i = 0; i < keys.n; i++)
		refill_slots(dex_rows_gettext_copy(keys, i, 1), queue_id);
}

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

	if (v == 1 && keys_have_slots())
	{
		release_slots(run_ids);
		return;
	}
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
