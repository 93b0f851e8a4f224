/*-------------------------------------------------------------------------
 *
 * workflow_rows.c
 *	  The rows a batch of workflow task completions writes: built in memory
 *	  as each task is applied, then written with one multi-row statement a
 *	  table (arrays, unnest), whatever the size of the batch.
 *
 * For each task: a batch of events appended to its run's history, the
 * update of the run's row, and whether the run ended, goes on, or starts
 * over; the commands add new activity tasks, inbox rows (timers, a child's
 * failure) and cancelled timers (commands_apply.c).  dex_batch_rows_write
 * writes them in a fixed order; what follows (ending runs, new workflow
 * tasks) is the pipeline's last phase (complete_workflow.c).  Runs in the
 * caller's transaction and SPI connection, with the runs locked and their
 * tasks fenced (the locking protocol in src/README.md).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "engine/completion.h"

void
dex_batch_rows_init(DexBatchRows *rows)
{
	MemoryContext cxt = CurrentMemoryContext;

	rows->h_run_id = initArrayResult(UUIDOID, cxt, false);
	rows->h_sequence = initArrayResult(INT4OID, cxt, false);
	rows->h_events = initArrayResult(BYTEAOID, cxt, false);
	rows->r_id = initArrayResult(UUIDOID, cxt, false);
	rows->r_status = initArrayResult(TEXTOID, cxt, false);
	rows->r_history_length = initArrayResult(INT4OID, cxt, false);
	rows->r_last_event_id = initArrayResult(INT4OID, cxt, false);
	rows->r_custom_status = initArrayResult(TEXTOID, cxt, false);
	rows->r_result = initArrayResult(BYTEAOID, cxt, false);
	rows->r_failure = initArrayResult(BYTEAOID, cxt, false);
	rows->r_started_at = initArrayResult(TIMESTAMPTZOID, cxt, false);
	rows->r_completed_at = initArrayResult(TIMESTAMPTZOID, cxt, false);
	rows->r_old_history_length = initArrayResult(INT4OID, cxt, false);
	rows->r_history_bytes = initArrayResult(INT8OID, cxt, false);
	rows->n_runs = 0;
	dex_activity_rows_init(&rows->activities);
	dex_inbox_batch_init(&rows->inbox);
	rows->n_run_id = initArrayResult(UUIDOID, cxt, false);
	rows->n_argument = initArrayResult(BYTEAOID, cxt, false);
	rows->n_continued = 0;
	rows->c_run_id = initArrayResult(UUIDOID, cxt, false);
	rows->c_timer_id = initArrayResult(INT4OID, cxt, false);
	rows->n_cancelled = 0;
	rows->ended = initArrayResult(UUIDOID, cxt, false);
	rows->open = initArrayResult(UUIDOID, cxt, false);
	rows->needs_task = initArrayResult(UUIDOID, cxt, false);
	rows->n_ended = 0;
	rows->n_open = 0;
	rows->ended_may_have = 0;
}

/* A message as a bytea datum, or null */
static void
add_message(ArrayBuildState *array, const ProtobufCMessage *message)
{
	dex_array_add(array,
				  message ? PointerGetDatum(dex_pb_pack_bytea(unconstify(ProtobufCMessage *, message))) : (Datum) 0,
				  message == NULL);
}

/*
 * The rows of one applied task (dex_apply_workflow_task): its history batch,
 * its run's update, and where the run goes next.
 */
void
dex_batch_rows_add_task(DexBatchRows *rows, DexWorkflowCompletion *item, const DexAppliedTask *c)
{
	DexRun	   *run = c->run;
	Dex__V1__EventBatch batch;
	bool		ended = c->new_status != NULL && !c->continued;

	if (c->continued)
	{
		/* the old history goes: the run starts over */
		dex_array_add(rows->n_run_id, UUIDPGetDatum(item->run_id), false);
		add_message(rows->n_argument, (const ProtobufCMessage *) c->continue_argument);
		rows->n_continued++;
	}

	dex__v1__event_batch__init(&batch);
	batch.events = c->events;
	batch.n_events = c->n_events;
	dex_array_add(rows->h_run_id, UUIDPGetDatum(item->run_id), false);
	dex_array_add(rows->h_sequence, Int32GetDatum(c->continued ? 1 : run->history_length + 1), false);
	dex_array_add(rows->h_events, PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) &batch)), false);
	/* a continued run's batch is the first of its next generation */
	dex_publish_events(item->run_id, run, run->generation + (c->continued ? 1 : 0),
					   c->continued ? 1 : run->history_length + 1, c->events, c->n_events);

	dex_array_add(rows->r_id, UUIDPGetDatum(item->run_id), false);
	dex_array_add(rows->r_status, CStringGetTextDatum(c->new_status ? c->new_status : "RUNNING"), false);
	dex_array_add(rows->r_history_length,
				  Int32GetDatum(c->continued ? 1 : run->history_length + (int32) c->n_events), false);
	dex_array_add(rows->r_last_event_id, Int32GetDatum(c->last_event_id), false);
	dex_array_add(rows->r_custom_status,
				  c->custom_status ? CStringGetTextDatum(c->custom_status) : (Datum) 0,
				  c->custom_status == NULL);
	add_message(rows->r_result, (const ProtobufCMessage *) c->result);
	add_message(rows->r_failure, (const ProtobufCMessage *) c->failure);
	dex_array_add(rows->r_started_at, TimestampTzGetDatum(item->started_at), false);
	dex_array_add(rows->r_completed_at, TimestampTzGetDatum(c->now), !ended);
	dex_array_add(rows->r_old_history_length, Int32GetDatum(run->history_length), false);
	dex_array_add(rows->r_history_bytes, Int64GetDatum(c->history_bytes), false);
	rows->n_runs++;

	if (c->continued)
		dex_array_add(rows->needs_task, UUIDPGetDatum(item->run_id), false);
	else if (ended)
	{
		dex_array_add(rows->ended, UUIDPGetDatum(item->run_id), false);
		rows->n_ended++;
		if (run->concurrency_key != NULL)
			rows->ended_may_have |= DEX_ENDED_KEYS;
		if (run->has_parent)
			rows->ended_may_have |= DEX_ENDED_PARENTS;
		if (run->instance_id != NULL)
			rows->ended_may_have |= DEX_ENDED_INSTANCES;
	}
	else
	{
		dex_array_add(rows->open, UUIDPGetDatum(item->run_id), false);
		rows->n_open++;
	}
}

static DexPlan continue_as_new_plan = {
	"WITH h AS (DELETE FROM dex.workflow_history WHERE run_id = ANY ($1)) "
	"UPDATE dex.workflow_run r SET argument = u.argument, generation = r.generation + 1, "
	"       started_at = NULL, result = NULL, failure = NULL "
	"FROM unnest($1::uuid[], $2::bytea[]) AS u(id, argument) WHERE r.id = u.id",
	2, {UUIDARRAYOID, BYTEAARRAYOID}
};

/*
 * The runs are locked, and the fence made us the holder of their workflow
 * tasks, the only writer of their histories; the update still checks that
 * the history did not grow, as a guard.  It keeps a suspension that
 * dex.suspend_run made while the task ran.  The history batches ($12 to
 * $14) are inserted by the same statement: one plan to start, not two.
 */
#define UPDATE_RUNS_SQL(since_1_4) \
	"WITH h AS (INSERT INTO dex.workflow_history (run_id, sequence, events) " \
	"           SELECT * FROM unnest($12::uuid[], $13::integer[], $14::bytea[])) " \
	"UPDATE dex.workflow_run r SET " \
	"status = CASE WHEN r.status = 'SUSPENDED' AND u.status = 'RUNNING' THEN r.status ELSE u.status END, " \
	"history_length = u.history_length, " since_1_4 \
	"last_event_id = u.last_event_id, custom_status = u.custom_status, result = u.result, " \
	"failure = u.failure, updated_at = now(), started_at = coalesce(r.started_at, u.started_at), " \
	"task_failures = 0, last_task_failure = NULL, " \
	"completed_at = u.completed_at " \
	"FROM unnest($1::uuid[], $2::text[], $3::integer[], $4::integer[], $5::text[], $6::bytea[], " \
	"            $7::bytea[], $8::timestamptz[], $9::timestamptz[], $10::integer[], $11::bigint[]) " \
	"     AS u(id, status, history_length, last_event_id, custom_status, result, failure, " \
	"          started_at, completed_at, old_history_length, history_bytes) " \
	"WHERE r.id = u.id AND r.history_length = u.old_history_length"
/* the types of $1 to $14 */
#define UPDATE_RUNS_TYPES \
	{UUIDARRAYOID, TEXTARRAYOID, INT4ARRAYOID, INT4ARRAYOID, TEXTARRAYOID, BYTEAARRAYOID, \
	 BYTEAARRAYOID, TIMESTAMPTZARRAYOID, TIMESTAMPTZARRAYOID, INT4ARRAYOID, INT8ARRAYOID, \
	 UUIDARRAYOID, INT4ARRAYOID, BYTEAARRAYOID}
/* [1]: 1.4 keeps the history's size too */
static DexPlan update_runs_plans[2] = {
	{UPDATE_RUNS_SQL(""), 14, UPDATE_RUNS_TYPES},
	{UPDATE_RUNS_SQL("history_bytes = u.history_bytes, "), 14, UPDATE_RUNS_TYPES}
};


/*
 * cancelled timers: their TimerElapsed rows go, if not delivered yet; found
 * from the arrays, whatever the inbox's statistics (see runs.c's inbox_plan)
 */
static DexPlan cancel_timers_plan = {
	"DELETE FROM dex.workflow_inbox WHERE ctid = ANY (ARRAY("
	"  SELECT i.ctid FROM unnest($1::uuid[], $2::integer[]) AS c(run_id, timer_id) "
	"  CROSS JOIN LATERAL (SELECT j.ctid FROM dex.workflow_inbox j "
	"                      WHERE j.run_id = c.run_id AND j.timer_id = c.timer_id OFFSET 0) i))",
	2, {UUIDARRAYOID, INT4ARRAYOID}
};

/*
 * The runs' new history batches and the update of their rows, all or none:
 * a run that changed is an error
 */
static void
update_runs(DexBatchRows *rows)
{
	Datum		values[14];

	values[0] = dex_array_result(rows->r_id);
	values[1] = dex_array_result(rows->r_status);
	values[2] = dex_array_result(rows->r_history_length);
	values[3] = dex_array_result(rows->r_last_event_id);
	values[4] = dex_array_result(rows->r_custom_status);
	values[5] = dex_array_result(rows->r_result);
	values[6] = dex_array_result(rows->r_failure);
	values[7] = dex_array_result(rows->r_started_at);
	values[8] = dex_array_result(rows->r_completed_at);
	values[9] = dex_array_result(rows->r_old_history_length);
	values[10] = dex_array_result(rows->r_history_bytes);
	values[11] = dex_array_result(rows->h_run_id);
	values[12] = dex_array_result(rows->h_sequence);
	values[13] = dex_array_result(rows->h_events);
	dex_spi_exec(&update_runs_plans[dex_schema_1_4()], values, NULL, 0);
	if (SPI_processed != (uint64) rows->n_runs)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("workflow runs changed while their workflow tasks were completed"),
				 errhint("Retry the completion.")));
}

/*
 * Write the batch: runs that start over lose their history first, then the
 * new history batches with the runs' rows, new activity tasks, inbox rows
 * (with the workflow tasks of the runs they wake), cancelled timers.
 */
void
dex_batch_rows_write(DexBatchRows *rows)
{
	Datum		values[DEX_ACTIVITY_ROWS_COLUMNS];

	if (rows->n_continued > 0)
	{
		values[0] = dex_array_result(rows->n_run_id);
		values[1] = dex_array_result(rows->n_argument);
		dex_spi_exec(&continue_as_new_plan, values, NULL, 0);
	}

	update_runs(rows);

	dex_activity_rows_insert(&rows->activities);

	dex_inbox_batch_flush(&rows->inbox);

	if (rows->n_cancelled > 0)
	{
		values[0] = dex_array_result(rows->c_run_id);
		values[1] = dex_array_result(rows->c_timer_id);
		dex_spi_exec(&cancel_timers_plan, values, NULL, 0);
	}
}
