/*-------------------------------------------------------------------------
 *
 * inbox.c
 *	  Events waiting for a run (dex.workflow_inbox) and the workflow tasks
 *	  that show them.
 *
 * Runs in the caller's transaction and SPI connection, under the locking
 * protocol in src/README.md: an event for a run whose row the caller locked
 * is visible at once and makes sure the run has a workflow task; one for a
 * run it did not lock, or due later, is the scheduler's to hand over.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/timestamp.h"

#include "engine/engine.h"

/*
 * Inbox rows are written in batches: one multi-row INSERT for the events,
 * one for the workflow tasks of the runs that have a visible event.
 */
void
dex_inbox_batch_init(DexInboxBatch *b)
{
	b->run_ids = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	b->visible_from = initArrayResult(TIMESTAMPTZOID, CurrentMemoryContext, false);
	b->delayed = initArrayResult(BOOLOID, CurrentMemoryContext, false);
	b->events = initArrayResult(BYTEAOID, CurrentMemoryContext, false);
	b->timer_ids = initArrayResult(INT4OID, CurrentMemoryContext, false);
	b->visible_runs = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	b->n = 0;
}

static void
inbox_batch_add_row(DexInboxBatch *b, pg_uuid_t *run_id, Dex__V1__WorkflowEvent *event,
					TimestampTz visible_from, bool delayed)
{
	int32		timer_id = 0;

	if (event->subject_case == DEX__V1__WORKFLOW_EVENT__SUBJECT_TIMER_ELAPSED)
		timer_id = event->timer_elapsed->timer_created_event_id;

	dex_array_add(b->run_ids, UUIDPGetDatum(run_id), false);
	dex_array_add(b->visible_from, TimestampTzGetDatum(visible_from), false);
	dex_array_add(b->delayed, BoolGetDatum(delayed), false);
	dex_array_add(b->events, PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) event)), false);
	dex_array_add(b->timer_ids, Int32GetDatum(timer_id), timer_id == 0);
	if (delayed)
		dex_wake_scheduler_at_commit(visible_from);
	else
		dex_array_add(b->visible_runs, UUIDPGetDatum(run_id), false);
	b->n++;
}

/*
 * An event for a run whose row the caller has locked (see the file header):
 * visible at once, the run gets a workflow task with the batch; later, the
 * scheduler hands it over when due.
 */
void
dex_inbox_batch_add(DexInboxBatch *b, pg_uuid_t *run_id, Dex__V1__WorkflowEvent *event,
					TimestampTz visible_from)
{
	inbox_batch_add_row(b, run_id, event, visible_from,
						visible_from > GetCurrentTransactionStartTimestamp());
}

/*
 * An event for a run whose row the caller has not locked (a child's result
 * for its parent): due at once, but handed over by the scheduler.
 */
void
dex_inbox_batch_add_unlocked(DexInboxBatch *b, pg_uuid_t *run_id, Dex__V1__WorkflowEvent *event)
{
	inbox_batch_add_row(b, run_id, event, GetCurrentTransactionStartTimestamp(), true);
}

static DexPlan insert_inbox_plan = {
	"INSERT INTO dex.workflow_inbox (run_id, visible_from, delayed, event, timer_id) "
	"SELECT * FROM unnest($1::uuid[], $2::timestamptz[], $3::boolean[], $4::bytea[], $5::integer[])",
	5, {UUIDARRAYOID, TIMESTAMPTZARRAYOID, BOOLARRAYOID, BYTEAARRAYOID, INT4ARRAYOID}
};

/*
 * Write the batch: events visible now also make sure their runs have a
 * workflow task; delayed ones are the scheduler's to hand over when due.
 */
void
dex_inbox_batch_flush(DexInboxBatch *b)
{
	Datum		values[5];

	if (b->n == 0)
		return;
	values[0] = dex_array_result(b->run_ids);
	values[1] = dex_array_result(b->visible_from);
	values[2] = dex_array_result(b->delayed);
	values[3] = dex_array_result(b->events);
	values[4] = dex_array_result(b->timer_ids);
	dex_spi_exec(&insert_inbox_plan, values, NULL, 0);
	if (b->visible_runs->nelems > 0)
		dex_ensure_workflow_tasks(dex_array_result(b->visible_runs));
	dex_inbox_batch_init(b);
}

/* Add one event to a run's inbox (see dex_inbox_batch_flush). */
void
dex_insert_inbox(pg_uuid_t *run_id, Dex__V1__WorkflowEvent *event,
				 TimestampTz visible_from)
{
	DexInboxBatch b;

	dex_inbox_batch_init(&b);
	dex_inbox_batch_add(&b, run_id, event, visible_from);
	dex_inbox_batch_flush(&b);
}

/* 1.6: the run's workflow and version too, read from its row (the caller's, just written) */
static DexPlan first_task_plans[2] = {
	{"INSERT INTO dex.workflow_task (queue_id, run_id, priority) VALUES ($1, $2, $3)",
	3, {INT4OID, UUIDOID, INT2OID}},
	{"INSERT INTO dex.workflow_task (queue_id, run_id, priority" DEX_TASK_RUN_COLS ") "
		"SELECT $1, r.id, $3, r.workflow_name, r.workflow_version FROM dex.workflow_run r WHERE r.id = $2 "
		"RETURNING workflow_name, workflow_version",
	3, {INT4OID, UUIDOID, INT2OID}}
};

/*
 * A new run's first workflow task (the caller made the run, or admitted it):
 * pollable at once, and its queue's waiting workers told at commit.
 */
void
dex_insert_first_task(pg_uuid_t *run_id, int32 queue_id, int32 priority)
{
	Datum		values[3] = {Int32GetDatum(queue_id), UUIDPGetDatum(run_id),
	Int16GetDatum((int16) priority)};

	int			v = dex_schema_1_6();

	dex_spi_exec(&first_task_plans[v], values, NULL, 0);
	if (v && SPI_processed == 1)
	{
		char	   *name = dex_spi_gettext_copy(0, 1);

		dex_queue_keyed_tasks_added(queue_id, dex_task_key(name, (int32) dex_spi_getint64(0, 2)), 1);
	}
	else
		dex_queue_work_added(queue_id);
	dex_stat_add(queue_id, DEX_STAT_TASKS_CREATED, 1);
}

/*
 * A task row that is visible is never locked or waited for (the locking
 * protocol in src/README.md); ON CONFLICT only meets a task inserted by a transaction still
 * in progress, which holds the run lock too and does not wait for us.  The
 * probes name the run only (a run's workflow task is on the run's queue):
 * with the queue too, a plan made on statistics that said the queue was
 * nearly empty read the queue from a queue-led index per run; and OFFSET 0
 * keeps each a probe per run, which a plan made while the table was small
 * would otherwise hash whole (see END_RUNS_PROBE_SQL in lifecycle.c).
 */
#define ENSURE_TASKS_SQL(cols, run_cols) \
	"INSERT INTO dex.workflow_task (queue_id, run_id, priority" cols ") " \
	"SELECT r.queue_id, r.id, r.priority" run_cols " FROM dex.workflow_run r " \
	"WHERE r.id = ANY ($1) AND r.status = ANY ('{CREATED,RUNNING}'::text[]) " \
	"AND NOT EXISTS (SELECT 1 FROM dex.workflow_task t WHERE t.run_id = r.id OFFSET 0) " \
	"AND (r.concurrency_key IS NULL OR NOT EXISTS (SELECT 1 FROM dex.concurrency_wait w " \
	"     WHERE w.key = r.concurrency_key AND w.run_id = r.id OFFSET 0)) " \
	"ORDER BY r.id ON CONFLICT DO NOTHING RETURNING queue_id, run_id" cols
/* [1] 1.6: the tasks with their runs' workflow and version, returned for the wake-ups */
static DexPlan ensure_tasks_plans[2] = {
	{ENSURE_TASKS_SQL("", ""), 1, {UUIDARRAYOID}},
	{ENSURE_TASKS_SQL(DEX_TASK_RUN_COLS, ", r.workflow_name, r.workflow_version"), 1, {UUIDARRAYOID}}
};

/*
 * Make sure runs that can make progress have a workflow task (not runs that
 * wait for their concurrency key).  The caller holds the runs' locks.
 */
void
dex_ensure_workflow_tasks(Datum run_ids)
{
	Datum		values[1] = {run_ids};
	int			v = dex_schema_1_6();

	dex_spi_exec(&ensure_tasks_plans[v], values, NULL, 0);
	dex_queue_run_tasks_added_spi(1, 2, v ? 3 : 0);
	dex_stat_count_spi(DEX_STAT_TASKS_CREATED, 1);
}
