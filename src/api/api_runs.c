/*-------------------------------------------------------------------------
 *
 * api_runs.c
 *	  dex.create_run and dex.run_history.
 *
 * dex.create_run writes the run row and its workflow task in the caller's
 * transaction; the RunCreated and RunStarted events are recorded in history
 * by the run's first workflow task (they are derived from the run row, so no
 * inbox row is written for them).  dex.run_history decodes the stored event
 * batches, which are appended only by dex.complete_task.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/jsonb.h"

#include "api/api.h"


/* The options every new run is checked for */
static void
validate_run_options(int32 version, int32 priority, Jsonb *labels)
{
	if (version < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("workflow version must be positive"),
				 errdetail("The version was %d.", version)));
	if (priority < 0 || priority > 100)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("priority must be between 0 and 100"),
				 errdetail("The priority was %d.", priority)));
	if (labels)
		dex_check_labels(labels);
}

/*
 * When new runs start and must end (1.4: start_at and execution_timeout,
 * arguments "arg" and "arg" + 1 when the function has them): a start_at in
 * the future makes them DELAYED until then, and the deadline counts from
 * their start.
 */
typedef struct RunSchedule
{
	bool		delayed;
	TimestampTz start_at;
	bool		has_deadline;
	TimestampTz deadline;
} RunSchedule;

static RunSchedule
run_schedule_args(FunctionCallInfo fcinfo, int arg)
{
	RunSchedule sched;
	TimestampTz now = GetCurrentTransactionStartTimestamp();

	memset(&sched, 0, sizeof(sched));
	sched.start_at = now;
	if (PG_NARGS() <= arg + 1)
		return sched;
	if (!PG_ARGISNULL(arg))
	{
		TimestampTz start_at = PG_GETARG_TIMESTAMPTZ(arg);

		if (TIMESTAMP_NOT_FINITE(start_at))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("start_at must be a finite time")));
		sched.delayed = start_at > now;
		if (sched.delayed)
			sched.start_at = start_at;
	}
	if (!PG_ARGISNULL(arg + 1))
	{
		Interval   *timeout = PG_GETARG_INTERVAL_P(arg + 1);
		Interval   *zero = palloc0(sizeof(Interval));

		if (!DatumGetBool(DirectFunctionCall2(interval_gt, IntervalPGetDatum(timeout),
											  IntervalPGetDatum(zero))))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("execution timeout must be positive")));
		sched.has_deadline = true;
		sched.deadline = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
																 TimestampTzGetDatum(sched.start_at),
																 IntervalPGetDatum(timeout)));
	}
	return sched;
}

/* The timers of new runs (a uuid[]) of that schedule */
static void
add_run_timers(Datum run_ids, const RunSchedule *sched)
{
	if (sched->delayed)
		dex_add_run_timers(run_ids, "START", sched->start_at);
	if (sched->has_deadline)
		dex_add_run_timers(run_ids, "DEADLINE", sched->deadline);
}

static DexPlan insert_run_plan = {
	"INSERT INTO dex.workflow_run (id, workflow_name, workflow_version, queue_id, instance_id, "
	"priority, labels, concurrency_key, argument, created_at, status) "
	"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, pg_catalog.now(), $10)",
	10, {UUIDOID, TEXTOID, INT4OID, INT4OID, TEXTOID, INT2OID, JSONBOID, TEXTOID, BYTEAOID, TEXTOID}
};

/*
 * Debounce (1.7: arguments 11, 12, 13 when the function has them): a key,
 * its window (positive) and the longest delay from the key's first call
 * (NULL: none).  Returns the key, NULL when not debounced.
 */
static char *
debounce_args(FunctionCallInfo fcinfo, Interval **debounce, Interval **max)
{
	char	   *key;
	Interval   *zero = palloc0(sizeof(Interval));

	*debounce = NULL;
	*max = NULL;
	if (PG_NARGS() <= 13)
		return NULL;
	key = dex_arg_optional_name(fcinfo, 11, "debounce key");
	if (key == NULL)
	{
		if (!PG_ARGISNULL(12) || !PG_ARGISNULL(13))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("debounce and debounce_max need a debounce_key")));
		return NULL;
	}
	if (PG_ARGISNULL(12))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("debounce must not be null when a debounce_key is given"),
				 errhint("Give the window, as debounce => interval '5 seconds'.")));
	*debounce = PG_GETARG_INTERVAL_P(12);
	if (!DatumGetBool(DirectFunctionCall2(interval_gt, IntervalPGetDatum(*debounce),
										  IntervalPGetDatum(zero))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("debounce must be positive")));
	if (!PG_ARGISNULL(13))
	{
		*max = PG_GETARG_INTERVAL_P(13);
		if (DatumGetBool(DirectFunctionCall2(interval_lt, IntervalPGetDatum(*max),
											 IntervalPGetDatum(*debounce))))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("debounce_max must not be shorter than debounce")));
	}
	if (!PG_ARGISNULL(4) || !PG_ARGISNULL(9))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a debounced run takes no instance_id and no start_at"),
				 errdetail("Its debounce key names it, and its calls decide when it starts.")));
	return key;
}

/*
 * dex.create_run(workflow_name, queue, argument, workflow_version,
 *				  instance_id, priority, labels, concurrency_key, if_active,
 *				  start_at, execution_timeout, debounce_key, debounce,
 *				  debounce_max)
 * returns uuid
 */
static Datum
create_run(PG_FUNCTION_ARGS)
{
	char	   *workflow_name = dex_arg_name(fcinfo, 0, "workflow name");
	char	   *queue_name = dex_arg_name(fcinfo, 1, "queue");
	Jsonb	   *argument = PG_ARGISNULL(2) ? NULL : PG_GETARG_JSONB_P(2);
	int32		version = dex_arg_int32(fcinfo, 3, "workflow version");
	char	   *instance_id = dex_arg_optional_name(fcinfo, 4, "instance id");
	int32		priority = dex_arg_int32(fcinfo, 5, "priority");
	Jsonb	   *labels = PG_ARGISNULL(6) ? NULL : PG_GETARG_JSONB_P(6);
	char	   *concurrency_key = dex_arg_optional_name(fcinfo, 7, "concurrency key");
	char	   *if_active = dex_arg_name(fcinfo, 8, "if_active");
	MemoryContext outer = CurrentMemoryContext;
	pg_uuid_t  *run_id;
	Dex__V1__Payload *payload;
	DexQueue	queue;
	Datum		values[10];
	char		nulls[10];
	RunSchedule sched = run_schedule_args(fcinfo, 9);
	Interval   *debounce;
	Interval   *debounce_max;
	char	   *debounce_key = debounce_args(fcinfo, &debounce, &debounce_max);

	validate_run_options(version, priority, labels);
	if (strcmp(if_active, "error") != 0 && strcmp(if_active, "return") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid if_active \"%s\"", if_active),
				 errhint("When the instance already has an active run, \"error\" raises an error and \"return\" returns that run's id.")));

	run_id = dex_new_uuid();

	SPI_connect();
	dex_wait_for_rebuild();
	queue = dex_require_queue(queue_name, true);
	dex_check_definition_start(workflow_name, version, dex_access_caller());
	payload = dex_payload_from_jsonb(argument);

	memset(nulls, ' ', sizeof(nulls));
	values[0] = UUIDPGetDatum(run_id);
	values[1] = CStringGetTextDatum(workflow_name);
	values[2] = Int32GetDatum(version);
	values[3] = Int32GetDatum(queue.id);
	values[4] = instance_id ? CStringGetTextDatum(instance_id) : (Datum) 0;
	nulls[4] = instance_id ? ' ' : 'n';
	values[5] = Int16GetDatum((int16) priority);
	values[6] = labels ? JsonbPGetDatum(labels) : (Datum) 0;
	nulls[6] = labels ? ' ' : 'n';
	values[7] = concurrency_key ? CStringGetTextDatum(concurrency_key) : (Datum) 0;
	nulls[7] = concurrency_key ? ' ' : 'n';
	values[8] = payload ? PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) payload)) : (Datum) 0;
	nulls[8] = payload ? ' ' : 'n';
	if (debounce_key)
	{
		pg_uuid_t  *pending = dex_debounce_run(queue.id, workflow_name, debounce_key, run_id,
											   nulls[8] == 'n' ? NULL : DatumGetByteaPP(values[8]),
											   debounce, debounce_max, &sched.start_at);

		if (pending != NULL)
		{
			SPI_finish();
			MemoryContextSwitchTo(outer);
			PG_RETURN_UUID_P(pending);
		}
		/* a new run, delayed until the window ends; its deadline counts from then */
		if (sched.has_deadline)
			sched.deadline = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
																	 TimestampTzGetDatum(sched.start_at),
																	 PG_GETARG_DATUM(10)));
		sched.delayed = true;
	}
	values[9] = CStringGetTextDatum(sched.delayed ? "DELAYED" : "CREATED");
	if (instance_id && !dex_claim_instance(queue.id, instance_id, run_id))
	{
		/* the run that has it is on this queue, which the caller may use */
		char	   *other_id = "";
		char	   *other_status = "";
		Datum		queue_ids = PointerGetDatum(construct_array(&values[3], 1, INT4OID, 4, true,
																 TYPALIGN_INT));

		if (dex_find_instance(queue_ids, instance_id) > 0)
		{
			bool		isnull;

			if (strcmp(if_active, "return") == 0)
			{
				pg_uuid_t  *existing = DatumGetUUIDP(SPI_datumTransfer(dex_spi_getdatum(0, 1, &isnull),
																	   false, sizeof(pg_uuid_t)));

				SPI_finish();
				MemoryContextSwitchTo(outer);
				PG_RETURN_UUID_P(existing);
			}
			other_id = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
			other_status = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
		}
		ereport(ERROR,
				(errcode(ERRCODE_UNIQUE_VIOLATION),
				 errmsg("workflow instance \"%s\" already has an active run on queue \"%s\"",
						instance_id, queue.name),
				 other_id[0] ? errdetail("Run %s has status %s.", other_id, other_status) : 0,
				 errhint("Wait for that run to end, or cancel it.")));
	}
	dex_spi_exec(&insert_run_plan, values, nulls, 0);
	dex_runs_started();
	add_run_timers(dex_uuid_array(&run_id, 1), &sched);

	/*
	 * A delayed run gets its first task when it starts (run_timers.c); one
	 * with a concurrency key when it holds the key.
	 */
	if (!sched.delayed &&
		(concurrency_key == NULL || dex_admit_run(run_id, queue.id, concurrency_key, priority)))
		dex_insert_first_task(run_id, queue.id, priority);

	SPI_finish();
	MemoryContextSwitchTo(outer);
	PG_RETURN_UUID_P(run_id);
}

/* ----------------------------------------------------------------
 * dex.run_history(run_id) returns table (sequence integer, event jsonb)
 * ----------------------------------------------------------------
 */

static DexPlan run_exists_plan = {
	"SELECT queue_id FROM dex.workflow_run WHERE id OPERATOR(pg_catalog.=) $1",
	1, {UUIDOID}
};

static DexPlan history_plan = {
	"SELECT sequence, events FROM dex.workflow_history WHERE run_id OPERATOR(pg_catalog.=) $1 ORDER BY sequence",
	1, {UUIDOID}
};

/*
 * The run's history batches in SPI_tuptable (sequence, events), in order; an
 * error if the run does not exist or its queue is not one the caller may use.
 */
static void
read_history(pg_uuid_t *run_id)
{
	Datum		values[1] = {UUIDPGetDatum(run_id)};

	dex_spi_exec(&run_exists_plan, values, NULL, 1);
	if (SPI_processed == 0 || !dex_may_use_queue_id((int32) dex_spi_getint64(0, 1)))
		dex_no_such_run(run_id);
	dex_spi_exec(&history_plan, values, NULL, 0);
}

static Datum
run_history(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *run_id;
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext per_query;
	MemoryContext old;

	/* not STRICT: a null run id is an error, as everywhere else */
	dex_arg_not_null(fcinfo, 0, "run id");
	run_id = PG_GETARG_UUID_P(0);
	InitMaterializedSRF(fcinfo, 0);
	per_query = rsinfo->econtext->ecxt_per_query_memory;

	SPI_connect();
	read_history(run_id);
	for (uint64 row = 0; row < SPI_processed; row++)
	{
		int32		sequence = (int32) dex_spi_getint64(row, 1);
		bool		isnull;
		bytea	   *events = DatumGetByteaPP(dex_spi_getdatum(row, 2, &isnull));
		Dex__V1__EventBatch *batch;

		batch = (Dex__V1__EventBatch *)
			dex_pb_unpack(&dex__v1__event_batch__descriptor,
						  (uint8 *) VARDATA_ANY(events), VARSIZE_ANY_EXHDR(events),
						  "history");
		for (size_t i = 0; i < batch->n_events; i++)
		{
			Datum		out[2];
			bool		outnulls[2] = {false, false};

			out[0] = Int32GetDatum(sequence + (int32) i);
			old = MemoryContextSwitchTo(per_query);
			out[1] = JsonbPGetDatum(dex_pb_to_jsonb((ProtobufCMessage *) batch->events[i]));
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnulls);
			MemoryContextSwitchTo(old);
		}
	}
	SPI_finish();
	return (Datum) 0;
}

/*
 * dex.run_history_pb(run_id) returns bytea: the whole history as one encoded
 * dex.v1.EventBatch (its stored batches, concatenated): what a worker that
 * no longer holds a run's state reads when a task left the history out.
 */
static Datum
run_history_pb(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *run_id;
	bytea	   *out;

	dex_arg_not_null(fcinfo, 0, "run id");
	run_id = PG_GETARG_UUID_P(0);
	SPI_connect();
	read_history(run_id);
	out = dex_spi_concat_bytea(0, SPI_processed, 2);
	SPI_finish();
	PG_RETURN_BYTEA_P(out);
}

/* ----------------------------------------------------------------
 * dex.create_runs(workflow_name, queue, arguments jsonb[], workflow_version,
 *				   priority, labels) returns setof uuid
 * ----------------------------------------------------------------
 */


#define MAX_CREATE_BATCH 10000

/* $8: whether the runs are delayed (no task until they start) */
/* [1] 1.6: the tasks with their runs' workflow and version */
#define INSERT_RUNS_SQL(cols, vals) \
	"WITH r AS (INSERT INTO dex.workflow_run (id, workflow_name, workflow_version, queue_id, " \
	"                   priority, labels, argument, created_at, status) " \
	"           SELECT id, $3, $4, $5, $6, $7, argument, now(), " \
	"                  CASE WHEN $8 THEN 'DELAYED' ELSE 'CREATED' END " \
	"             FROM unnest($1::uuid[], $2::bytea[]) AS a(id, argument) " \
	"           RETURNING id) " \
	"INSERT INTO dex.workflow_task (queue_id, run_id, priority" cols ") " \
	"SELECT $5, id, $6" vals " FROM r WHERE NOT $8"
static DexPlan insert_runs_plans[2] = {
	{INSERT_RUNS_SQL("", ""), 8,
	{UUIDARRAYOID, BYTEAARRAYOID, TEXTOID, INT4OID, INT4OID, INT2OID, JSONBOID, BOOLOID}},
	{INSERT_RUNS_SQL(DEX_TASK_RUN_COLS, ", $3, $4"), 8,
	{UUIDARRAYOID, BYTEAARRAYOID, TEXTOID, INT4OID, INT4OID, INT2OID, JSONBOID, BOOLOID}}
};

/*
 * The per-run arrays of dex.create_runs (1.7): each NULL, or one element per
 * run.
 */
typedef struct RunArrays
{
	int			n;
	Datum	   *instance_ids;
	bool	   *instance_nulls;
	Datum	   *keys;
	bool	   *key_nulls;
	Datum	   *priorities;
	bool	   *priority_nulls;
	Datum	   *labels;
	bool	   *label_nulls;
	Datum	   *start_times;
	bool	   *start_nulls;
} RunArrays;

/*
 * Argument "arg", NULL or a one-dimensional array of n elements, one per
 * element of the array "per"
 */
static void
per_element_array(FunctionCallInfo fcinfo, int arg, const char *what, const char *per, Oid type,
				  int n, Datum **elems, bool **nulls)
{
	ArrayType  *a;
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			count;

	*elems = NULL;
	*nulls = NULL;
	if (PG_NARGS() <= arg || PG_ARGISNULL(arg))
		return;
	a = PG_GETARG_ARRAYTYPE_P(arg);
	if (ARR_NDIM(a) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s must be a one-dimensional array", what)));
	get_typlenbyvalalign(type, &typlen, &typbyval, &typalign);
	deconstruct_array(a, type, typlen, typbyval, typalign, elems, nulls, &count);
	if (count != n)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must have one element per element of %s", what, per),
				 errdetail("It has %d elements, and %s %d.", count, per, n)));
}

/* The per-run arrays, checked; false if none is given (the fast path) */
static bool
run_arrays_args(FunctionCallInfo fcinfo, int n, RunArrays *ra)
{
	memset(ra, 0, sizeof(*ra));
	ra->n = n;
	per_element_array(fcinfo, 8, "instance_ids", "arguments", TEXTOID, n, &ra->instance_ids, &ra->instance_nulls);
	per_element_array(fcinfo, 9, "concurrency_keys", "arguments", TEXTOID, n, &ra->keys, &ra->key_nulls);
	per_element_array(fcinfo, 10, "priorities", "arguments", INT4OID, n, &ra->priorities, &ra->priority_nulls);
	per_element_array(fcinfo, 11, "run_labels", "arguments", JSONBOID, n, &ra->labels, &ra->label_nulls);
	per_element_array(fcinfo, 12, "start_times", "arguments", TIMESTAMPTZOID, n, &ra->start_times, &ra->start_nulls);
	for (int i = 0; i < n; i++)
	{
		if (ra->instance_ids && !ra->instance_nulls[i])
			dex_check_name(TextDatumGetCString(ra->instance_ids[i]), "an instance id");
		if (ra->keys && !ra->key_nulls[i])
			dex_check_name(TextDatumGetCString(ra->keys[i]), "a concurrency key");
		if (ra->priorities && !ra->priority_nulls[i])
			validate_run_options(1, DatumGetInt32(ra->priorities[i]), NULL);
		if (ra->labels && !ra->label_nulls[i])
			dex_check_labels(DatumGetJsonbP(ra->labels[i]));
		if (ra->start_times && !ra->start_nulls[i] &&
			TIMESTAMP_NOT_FINITE(DatumGetTimestampTz(ra->start_times[i])))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("start_times must be finite times")));
	}
	return ra->instance_ids || ra->keys || ra->priorities || ra->labels || ra->start_times;
}

/* $1..$7 per run: id, argument, instance id, priority, labels, key, status */
static DexPlan insert_each_run_plan = {
	"INSERT INTO dex.workflow_run (id, workflow_name, workflow_version, queue_id, instance_id, "
	"       priority, labels, concurrency_key, argument, created_at, status) "
	"SELECT id, $8, $9, $10, instance_id, priority, labels, concurrency_key, argument, now(), status "
	"FROM unnest($1::uuid[], $2::bytea[], $3::text[], $4::smallint[], $5::jsonb[], $6::text[], $7::text[]) "
	"AS a(id, argument, instance_id, priority, labels, concurrency_key, status)",
	10, {UUIDARRAYOID, BYTEAARRAYOID, TEXTARRAYOID, INT2ARRAYOID, JSONBARRAYOID, TEXTARRAYOID,
	TEXTARRAYOID, TEXTOID, INT4OID, INT4OID}
};

/* [1] 1.6: with the runs' workflow and version ($4, $5) */
#define INSERT_EACH_TASK_SQL(cols, vals) \
	"INSERT INTO dex.workflow_task (queue_id, run_id, priority" cols ") " \
	"SELECT $3, id, priority" vals " FROM unnest($1::uuid[], $2::smallint[]) AS a(id, priority)"
static DexPlan insert_each_task_plans[2] = {
	{INSERT_EACH_TASK_SQL("", ""), 5, {UUIDARRAYOID, INT2ARRAYOID, INT4OID, TEXTOID, INT4OID}},
	{INSERT_EACH_TASK_SQL(DEX_TASK_RUN_COLS, ", $4, $5"), 5,
	{UUIDARRAYOID, INT2ARRAYOID, INT4OID, TEXTOID, INT4OID}}
};

/*
 * dex.create_runs with per-run arrays: instance ids are claimed for all runs
 * in one statement, and a run whose id has an active run (before, or earlier
 * in the batch) is not made: its row gets that run, created false.  The
 * others are inserted in one statement; the runs due now without a
 * concurrency key get their tasks in one more, those with a key are
 * admitted one by one (keys.c), and delayed runs get their start timers.
 */
static void
create_each_run(FunctionCallInfo fcinfo, const char *workflow_name, int32 version, DexQueue *queue,
				int32 priority, Jsonb *labels, RunSchedule *sched, Interval *timeout,
				int n, Datum *ids, Datum *payloads, bool *payload_nulls, RunArrays *ra,
				bool *created)
{
	ArrayBuildState *r_ids = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	ArrayBuildState *r_args = initArrayResult(BYTEAOID, CurrentMemoryContext, false);
	ArrayBuildState *r_instances = initArrayResult(TEXTOID, CurrentMemoryContext, false);
	ArrayBuildState *r_priorities = initArrayResult(INT2OID, CurrentMemoryContext, false);
	ArrayBuildState *r_labels = initArrayResult(JSONBOID, CurrentMemoryContext, false);
	ArrayBuildState *r_keys = initArrayResult(TEXTOID, CurrentMemoryContext, false);
	ArrayBuildState *r_status = initArrayResult(TEXTOID, CurrentMemoryContext, false);
	ArrayBuildState *t_ids = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	ArrayBuildState *t_priorities = initArrayResult(INT2OID, CurrentMemoryContext, false);
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	TimestampTz *starts = palloc(sizeof(TimestampTz) * n);
	int			n_created = 0;
	int			n_tasks = 0;
	int			v = dex_schema_1_6();

	for (int i = 0; i < n; i++)
		created[i] = true;
	if (ra->instance_ids)
		dex_claim_instances(queue->id, n, ra->instance_ids, ra->instance_nulls, ids, created);

	for (int i = 0; i < n; i++)
	{
		int32		p = ra->priorities && !ra->priority_nulls[i] ? DatumGetInt32(ra->priorities[i]) : priority;
		bool		has_label = ra->labels && !ra->label_nulls[i];
		bool		has_key = ra->keys && !ra->key_nulls[i];
		bool		delayed;

		starts[i] = sched->start_at;
		if (ra->start_times && !ra->start_nulls[i])
			starts[i] = Max(DatumGetTimestampTz(ra->start_times[i]), now);
		delayed = starts[i] > now;
		if (!created[i])
			continue;
		n_created++;
		dex_array_add(r_ids, ids[i], false);
		dex_array_add(r_args, payloads[i], payload_nulls[i]);
		dex_array_add(r_instances, ra->instance_ids ? ra->instance_ids[i] : (Datum) 0,
					  !ra->instance_ids || ra->instance_nulls[i]);
		dex_array_add(r_priorities, Int16GetDatum((int16) p), false);
		dex_array_add(r_labels, has_label ? ra->labels[i] : labels ? JsonbPGetDatum(labels) : (Datum) 0,
					  !has_label && !labels);
		dex_array_add(r_keys, has_key ? ra->keys[i] : (Datum) 0, !has_key);
		dex_array_add(r_status, CStringGetTextDatum(delayed ? "DELAYED" : "CREATED"), false);
		if (!delayed && !has_key)
		{
			dex_array_add(t_ids, ids[i], false);
			dex_array_add(t_priorities, Int16GetDatum((int16) p), false);
			n_tasks++;
		}
	}
	if (n_created == 0)
		return;
	{
		Datum		values[10] = {dex_array_result(r_ids), dex_array_result(r_args),
			dex_array_result(r_instances), dex_array_result(r_priorities), dex_array_result(r_labels),
			dex_array_result(r_keys), dex_array_result(r_status), CStringGetTextDatum(workflow_name),
		Int32GetDatum(version), Int32GetDatum(queue->id)};

		dex_spi_exec(&insert_each_run_plan, values, NULL, 0);
		dex_runs_started();
	}
	if (n_tasks > 0)
	{
		Datum		values[5] = {dex_array_result(t_ids), dex_array_result(t_priorities),
			Int32GetDatum(queue->id), CStringGetTextDatum(workflow_name), Int32GetDatum(version)};

		dex_spi_exec(&insert_each_task_plans[v], values, NULL, 0);
		dex_queue_keyed_tasks_added(queue->id, dex_task_key(workflow_name, version), (int64) SPI_processed);
		dex_stat_add(queue->id, DEX_STAT_TASKS_CREATED, (int64) SPI_processed);
	}
	for (int i = 0; i < n; i++)
	{
		pg_uuid_t  *id = DatumGetUUIDP(ids[i]);

		if (!created[i])
			continue;
		if (starts[i] > now)
			dex_add_run_timers(dex_uuid_array(&id, 1), "START", starts[i]);
		else if (ra->keys && !ra->key_nulls[i])
		{
			int32		p = ra->priorities && !ra->priority_nulls[i] ? DatumGetInt32(ra->priorities[i]) : priority;

			if (dex_admit_run(id, queue->id, TextDatumGetCString(ra->keys[i]), p))
				dex_insert_first_task(id, queue->id, p);
		}
		if (timeout)
			dex_add_run_timers(dex_uuid_array(&id, 1), "DEADLINE",
							   DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
																	   TimestampTzGetDatum(starts[i]),
																	   IntervalPGetDatum(timeout))));
	}
}

/*
 * Many runs of one workflow on one queue in two statements: one run per
 * element of "arguments" (a NULL element is a run without argument).  With
 * per-run arrays (1.7), create_each_run.  The 1.6 schema's function returns
 * the ids alone; 1.7's the ids and whether each run was created.
 */
static Datum
create_runs(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *workflow_name = dex_arg_name(fcinfo, 0, "workflow name");
	char	   *queue_name = dex_arg_name(fcinfo, 1, "queue");
	int32		version = dex_arg_int32(fcinfo, 3, "workflow version");
	int32		priority = dex_arg_int32(fcinfo, 4, "priority");
	Jsonb	   *labels = PG_ARGISNULL(5) ? NULL : PG_GETARG_JSONB_P(5);
	ArrayType  *arguments;
	Datum	   *elems;
	bool	   *elem_nulls;
	int			n;
	Datum	   *ids;
	Datum	   *payloads;
	bool	   *created;
	DexQueue	queue;
	Datum		values[8];
	char		nulls[8] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	RunSchedule sched = run_schedule_args(fcinfo, 6);
	RunArrays	ra;
	bool		each;

	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("arguments must not be null"),
				 errhint("Pass one array element per run; an element may be null.")));
	arguments = PG_GETARG_ARRAYTYPE_P(2);
	if (ARR_NDIM(arguments) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("arguments must be a one-dimensional array")));
	deconstruct_array(arguments, JSONBOID, -1, false, TYPALIGN_INT, &elems, &elem_nulls, &n);
	if (n > MAX_CREATE_BATCH)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("dex.create_runs creates at most %d runs per call", MAX_CREATE_BATCH),
				 errdetail("This call asked for %d.", n)));
	validate_run_options(version, priority, labels);
	each = run_arrays_args(fcinfo, n, &ra);

	/* the tuple descriptor is the expected one: (id) in 1.6, (id, created) in 1.7 */
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);

	ids = palloc(sizeof(Datum) * Max(n, 1));
	payloads = palloc(sizeof(Datum) * Max(n, 1));
	created = palloc(sizeof(bool) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		ids[i] = UUIDPGetDatum(dex_new_uuid());
		created[i] = true;
		payloads[i] = elem_nulls[i] ? (Datum) 0 :
			PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *)
											  dex_payload_from_jsonb(DatumGetJsonbP(elems[i]))));
	}

	SPI_connect();
	dex_wait_for_rebuild();
	queue = dex_require_queue(queue_name, true);
	dex_check_definition_start(workflow_name, version, dex_access_caller());
	if (n > 0 && each)
		create_each_run(fcinfo, workflow_name, version, &queue, priority, labels, &sched,
						sched.has_deadline ? PG_GETARG_INTERVAL_P(7) : NULL,
						n, ids, payloads, elem_nulls, &ra, created);
	else if (n > 0)
	{
		values[0] = PointerGetDatum(construct_array(ids, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
		values[1] = PointerGetDatum(construct_md_array(payloads, elem_nulls, 1, &n, (int[]) {1},
													   BYTEAOID, -1, false, TYPALIGN_INT));
		values[2] = CStringGetTextDatum(workflow_name);
		values[3] = Int32GetDatum(version);
		values[4] = Int32GetDatum(queue.id);
		values[5] = Int16GetDatum((int16) priority);
		if (labels)
			values[6] = JsonbPGetDatum(labels);
		else
			nulls[6] = 'n';
		values[7] = BoolGetDatum(sched.delayed);
		dex_spi_exec(&insert_runs_plans[dex_schema_1_6()], values, nulls, 0);
		dex_runs_started();
		if (SPI_processed > 0)
			dex_queue_keyed_tasks_added(queue.id, dex_task_key(workflow_name, version),
										(int64) SPI_processed);
		dex_stat_add(queue.id, DEX_STAT_TASKS_CREATED, (int64) SPI_processed);
		add_run_timers(values[0], &sched);
	}
	SPI_finish();

	for (int i = 0; i < n; i++)
	{
		Datum		out[2] = {ids[i], BoolGetDatum(created[i])};
		bool		outnulls[2] = {false, false};

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnulls);
	}
	return (Datum) 0;
}

/* ----------------------------------------------------------------
 * dex.send_external_events(run_ids, event_ids, payloads)
 *   returns table (run_id, event_id, delivered, outcome)
 * ----------------------------------------------------------------
 */

#define MAX_EVENT_BATCH 10000

/*
 * Many events in one call, each with its outcome instead of an error: one
 * statement locks the runs, one records the event ids, one writes the inbox
 * (signals.c).
 */
static Datum
send_external_events(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum	   *run_elems;
	bool	   *run_nulls;
	Datum	   *event_elems;
	bool	   *event_nulls;
	Datum	   *payload_elems = NULL;
	bool	   *payload_nulls = NULL;
	int			n;
	int			n_events;
	pg_uuid_t **run_ids;
	char	  **event_ids;
	Dex__V1__Payload **payloads;
	Dex__V1__SignalOutcome *outcomes;

	dex_args_not_null(fcinfo, 2, "run_ids and event_ids");
	deconstruct_array(PG_GETARG_ARRAYTYPE_P(0), UUIDOID, UUID_LEN, false, TYPALIGN_CHAR,
					  &run_elems, &run_nulls, &n);
	if (ARR_NDIM(PG_GETARG_ARRAYTYPE_P(0)) > 1 || ARR_NDIM(PG_GETARG_ARRAYTYPE_P(1)) > 1 ||
		(!PG_ARGISNULL(2) && ARR_NDIM(PG_GETARG_ARRAYTYPE_P(2)) > 1))
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("run_ids, event_ids and payloads must be one-dimensional arrays")));
	deconstruct_array(PG_GETARG_ARRAYTYPE_P(1), TEXTOID, -1, false, TYPALIGN_INT,
					  &event_elems, &event_nulls, &n_events);
	if (n_events != n)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("run_ids and event_ids must have one element per event"),
				 errdetail("run_ids has %d elements, event_ids %d.", n, n_events)));
	per_element_array(fcinfo, 2, "payloads", "run_ids", JSONBOID, n, &payload_elems, &payload_nulls);
	if (n > MAX_EVENT_BATCH)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("dex.send_external_events sends at most %d events per call", MAX_EVENT_BATCH),
				 errdetail("This call asked for %d.", n)));
	run_ids = palloc(sizeof(pg_uuid_t *) * Max(n, 1));
	event_ids = palloc(sizeof(char *) * Max(n, 1));
	payloads = palloc(sizeof(Dex__V1__Payload *) * Max(n, 1));
	outcomes = palloc(sizeof(Dex__V1__SignalOutcome) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		if (run_nulls[i] || event_nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("run_ids and event_ids must not have null elements"),
					 errdetail("Element %d is null.", i + 1)));
		run_ids[i] = DatumGetUUIDP(run_elems[i]);
		event_ids[i] = TextDatumGetCString(event_elems[i]);
		dex_check_name(event_ids[i], "an event id");
		dex_check_event_id_not_reserved(event_ids[i]);
		payloads[i] = payload_elems && !payload_nulls[i] ?
			dex_payload_from_jsonb(DatumGetJsonbP(payload_elems[i])) : NULL;
	}

	InitMaterializedSRF(fcinfo, 0);
	dex_check_result_columns(fcinfo, 4, "dex.send_external_events");
	SPI_connect();
	dex_wait_for_rebuild();
	if (n > 0)
		dex_deliver_external_events(n, run_ids, event_ids, payloads, true, outcomes);
	SPI_finish();
	for (int i = 0; i < n; i++)
	{
		Datum		out[4] = {UUIDPGetDatum(run_ids[i]), CStringGetTextDatum(event_ids[i]),
			BoolGetDatum(outcomes[i] == DEX__V1__SIGNAL_OUTCOME__SIGNAL_OUTCOME_DELIVERED),
		CStringGetTextDatum(dex_signal_outcome_name(outcomes[i]))};
		bool		outnulls[4] = {false, false, false, false};

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnulls);
	}
	return (Datum) 0;
}

/* ----------------------------------------------------------------
 * dex.send_external_event(run_id, event_id, payload) returns boolean
 * dex.send_external_event_to_instance(instance_id, event_id, payload)
 * ----------------------------------------------------------------
 */


static DexPlan run_status_plan = {
	"SELECT status FROM dex.workflow_run WHERE id = $1",
	1, {UUIDOID}
};

/*
 * One event through the engine's path (signals.c): the run is locked FOR
 * SHARE; a run that does not exist or has ended is an error, a duplicate is
 * dropped (false).
 */
static bool
send_external_event(pg_uuid_t *run_id, const char *event_id, Jsonb *payload)
{
	char	   *eid = pstrdup(event_id);
	Dex__V1__Payload *pb = dex_payload_from_jsonb(payload);
	Dex__V1__SignalOutcome outcome;

	dex_deliver_external_events(1, &run_id, &eid, &pb, true, &outcome);
	switch (outcome)
	{
		case DEX__V1__SIGNAL_OUTCOME__SIGNAL_OUTCOME_DELIVERED:
			return true;
		case DEX__V1__SIGNAL_OUTCOME__SIGNAL_OUTCOME_DUPLICATE:
			return false;
		case DEX__V1__SIGNAL_OUTCOME__SIGNAL_OUTCOME_TARGET_ENDED:
			{
				Datum		values[1] = {UUIDPGetDatum(run_id)};

				dex_spi_exec(&run_status_plan, values, NULL, 1);
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("workflow run %s has ended", dex_uuid_to_cstring(run_id)),
						 errdetail("Its status is %s; it takes no more events.",
								   dex_spi_gettext_copy(0, 1))));
			}
			break;
		default:
			dex_no_such_run(run_id);
	}
	return false;
}

/* For other entry points (api_definitions.c): the same, in their SPI connection */
bool
dex_send_event(pg_uuid_t *run_id, const char *event_id, Jsonb *payload)
{
	return send_external_event(run_id, event_id, payload);
}

static Datum
send_external_event_to_run(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *run_id;
	char	   *event_id;
	bool		sent;

	dex_arg_not_null(fcinfo, 0, "run id");
	run_id = PG_GETARG_UUID_P(0);
	event_id = dex_arg_name(fcinfo, 1, "event id");
	dex_check_event_id_not_reserved(event_id);
	SPI_connect();
	dex_wait_for_rebuild();
	sent = send_external_event(run_id, event_id, PG_ARGISNULL(2) ? NULL : PG_GETARG_JSONB_P(2));
	SPI_finish();
	PG_RETURN_BOOL(sent);
}

/*
 * The active run of the instance id on the named queue, or, without a queue,
 * on any queue the caller may use: instance ids are unique per queue
 * (instances.c), so an id active on two of them must be told apart.  Runs of
 * queues the caller may not use are not looked at.
 */
static Datum
send_external_event_to_instance(PG_FUNCTION_ARGS)
{
	char	   *instance_id = dex_arg_name(fcinfo, 0, "instance id");
	char	   *event_id = dex_arg_name(fcinfo, 1, "event id");
	/* 1.1's SQL function has no queue argument */
	char	   *queue_name = PG_NARGS() > 3 ? dex_arg_optional_name(fcinfo, 3, "queue") : NULL;
	Datum		queue_ids;
	int			found;
	pg_uuid_t  *run_id;
	bool		sent;

	dex_check_event_id_not_reserved(event_id);
	SPI_connect();
	dex_wait_for_rebuild();
	if (queue_name)
	{
		DexQueue	queue = dex_require_queue(queue_name, true);
		Datum		id = Int32GetDatum(queue.id);

		queue_ids = PointerGetDatum(construct_array(&id, 1, INT4OID, 4, true, TYPALIGN_INT));
	}
	else
		queue_ids = dex_usable_queue_ids_list();
	found = dex_find_instance(queue_ids, instance_id);
	if (found == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("workflow instance \"%s\" has no active run", instance_id)));
	if (found > 1)
		ereport(ERROR,
				(errcode(ERRCODE_CARDINALITY_VIOLATION),
				 errmsg("workflow instance \"%s\" has active runs on several queues", instance_id),
				 errhint("Name the queue: dex.send_external_event_to_instance(..., queue => ...).")));
	{
		bool		isnull;

		run_id = palloc(sizeof(pg_uuid_t));
		memcpy(run_id, DatumGetUUIDP(dex_spi_getdatum(0, 1, &isnull)), sizeof(pg_uuid_t));
	}
	sent = send_external_event(run_id, event_id, PG_ARGISNULL(2) ? NULL : PG_GETARG_JSONB_P(2));
	SPI_finish();
	PG_RETURN_BOOL(sent);
}

/* ----------------------------------------------------------------
 * dex.cancel_run, dex.suspend_run, dex.resume_run
 * ----------------------------------------------------------------
 */


/*
 * The reason argument "arg" of a cancellation or a termination ("what"):
 * stored in the history like a payload, so within the same limit; NULL is
 * none.
 */
static char *
reason_arg(FunctionCallInfo fcinfo, int arg, const char *what)
{
	if (PG_ARGISNULL(arg))
		return "";
	dex_check_payload_size(VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(arg)), what);
	return text_to_cstring(PG_GETARG_TEXT_PP(arg));
}

/*
 * dex.cancel_run(run_id, reason): a run that is executing receives
 * runCancelRequested and ends CANCELLED when its workflow sends cancelRun
 * (or completes or fails it); a run that is not executing (never started,
 * suspended, blocked) ends CANCELLED at once.  Either way its pending tasks
 * are withdrawn, and its children are cancelled, when it ends.
 */
static Datum
cancel_run(PG_FUNCTION_ARGS)
{
	char	   *reason;

	dex_arg_not_null(fcinfo, 0, "run id");
	reason = reason_arg(fcinfo, 1, "cancellation reason");
	SPI_connect();
	dex_wait_for_rebuild();
	dex_cancel_run_internal(PG_GETARG_UUID_P(0), reason, false);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * dex.restart_run(run_id) returns uuid: a new run of the same start
 * (engine/reset.c).
 */
static Datum
restart_run(PG_FUNCTION_ARGS)
{
	MemoryContext outer = CurrentMemoryContext;
	pg_uuid_t  *new_id;

	dex_arg_not_null(fcinfo, 0, "run id");
	SPI_connect();
	dex_wait_for_rebuild();
	new_id = MemoryContextAlloc(outer, sizeof(pg_uuid_t));
	*new_id = *dex_restart_run_internal(PG_GETARG_UUID_P(0));
	SPI_finish();
	MemoryContextSwitchTo(outer);
	PG_RETURN_UUID_P(new_id);
}

/*
 * dex.reset_run(run_id, event_id, reason) returns uuid: a new run from a
 * point of the run's history (engine/reset.c).
 */
static Datum
reset_run(PG_FUNCTION_ARGS)
{
	MemoryContext outer = CurrentMemoryContext;
	char	   *reason;
	pg_uuid_t  *new_id;

	dex_args_not_null(fcinfo, 2, "run id and event id");
	reason = reason_arg(fcinfo, 2, "reset reason");
	SPI_connect();
	dex_wait_for_rebuild();
	new_id = MemoryContextAlloc(outer, sizeof(pg_uuid_t));
	*new_id = *dex_reset_run_internal(PG_GETARG_UUID_P(0), PG_GETARG_INT32(1), reason);
	SPI_finish();
	MemoryContextSwitchTo(outer);
	PG_RETURN_UUID_P(new_id);
}

/*
 * dex.terminate_run(run_id, reason): the run ends TERMINATED at once,
 * without its workflow code (see lifecycle.c).
 */
static Datum
terminate_run(PG_FUNCTION_ARGS)
{
	char	   *reason;

	dex_arg_not_null(fcinfo, 0, "run id");
	reason = reason_arg(fcinfo, 1, "termination reason");
	SPI_connect();
	dex_wait_for_rebuild();
	dex_terminate_run_internal(PG_GETARG_UUID_P(0), reason);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * dex.set_run_version(run_id, version): the run goes on under another
 * version of its workflow (see lifecycle.c).
 */
static Datum
set_run_version(PG_FUNCTION_ARGS)
{
	int32		version;

	dex_args_not_null(fcinfo, 2, "run id and version");
	version = PG_GETARG_INT32(1);
	if (version < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("workflow version must be positive"),
				 errdetail("It was %d.", version)));
	SPI_connect();
	dex_wait_for_rebuild();
	dex_set_run_version_internal(PG_GETARG_UUID_P(0), version);
	SPI_finish();
	PG_RETURN_VOID();
}

/* dex.purge_run(run_id): a run that ended goes now, with all its rows */
static Datum
purge_run(PG_FUNCTION_ARGS)
{
	dex_arg_not_null(fcinfo, 0, "run id");
	SPI_connect();
	dex_wait_for_rebuild();
	dex_purge_run_internal(PG_GETARG_UUID_P(0));
	SPI_finish();
	PG_RETURN_VOID();
}

#define MAX_PURGE_BATCH 10000

/*
 * dex.purge_runs(status, queue, ended_before, limit) returns bigint: up to
 * "limit" runs that ended before ended_before, of that status and queue
 * (NULL: any), go now; returns how many.  Call it again until it returns 0.
 */
static Datum
purge_runs(PG_FUNCTION_ARGS)
{
	char	   *status = PG_ARGISNULL(0) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(0));
	int32		queue_id = 0;
	int32		limit = dex_arg_int32(fcinfo, 3, "limit");
	uint64		n;

	dex_arg_not_null(fcinfo, 2, "ended_before");
	if (status && !dex_status_is_terminal(status))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid status \"%s\" of runs to purge", status),
				 errhint("A run that ended is COMPLETED, FAILED, CANCELLED, TERMINATED or TIMED_OUT.")));
	if (limit < 1 || limit > MAX_PURGE_BATCH)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("limit must be between 1 and %d", MAX_PURGE_BATCH)));
	SPI_connect();
	dex_wait_for_rebuild();
	if (!PG_ARGISNULL(1))
		queue_id = dex_require_queue(text_to_cstring(PG_GETARG_TEXT_PP(1)), true).id;
	n = dex_purge_runs_internal(status, queue_id, PG_GETARG_TIMESTAMPTZ(2), limit);
	SPI_finish();
	PG_RETURN_INT64((int64) n);
}

/*
 * A change of a run's status that takes the run id and (1.4) a reason,
 * recorded with the session user in the event the change adds
 */
static Datum
change_run(FunctionCallInfo fcinfo, void (*change) (pg_uuid_t *run_id, const char *reason))
{
	char	   *reason = "";

	dex_arg_not_null(fcinfo, 0, "run id");
	if (PG_NARGS() > 1)
		reason = reason_arg(fcinfo, 1, "reason");
	SPI_connect();
	dex_wait_for_rebuild();
	change(PG_GETARG_UUID_P(0), reason);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * dex.suspend_run(run_id, reason): nothing of a running run is handed out,
 * and no command of it takes effect, until it is resumed (lifecycle.c).
 */
static Datum
suspend_run(PG_FUNCTION_ARGS)
{
	return change_run(fcinfo, dex_suspend_run_internal);
}

/* dex.resume_run(run_id, reason): a suspended run runs again, a blocked one is retried */
static Datum
resume_run(PG_FUNCTION_ARGS)
{
	return change_run(fcinfo, dex_resume_run_internal);
}

/* ----------------------------------------------------------------
 * dex.list_runs(workflow_name, status, labels, created_after, created_before,
 *				 completed_after, completed_before, parent_id, before_id,
 *				 page_size) returns setof dex.runs
 * ----------------------------------------------------------------
 */


#define MAX_PAGE_SIZE 1000

/*
 * dex.all_runs is dex.runs without the caller's filter, with the queue id as
 * its last column: the filter is the queues the caller may use, given as $10
 * (NULL: all).  A filter left NULL matches every run; the planner keeps the
 * indexes usable (the labels' GIN index, the primary key for paging).
 */
static DexPlan list_runs_plan = {
	"SELECT v.* FROM dex.all_runs v "
	"WHERE ($1::text IS NULL OR v.workflow_name = $1) "
	"  AND ($2::text IS NULL OR v.status = $2) "
	"  AND ($3::jsonb IS NULL OR v.labels @> $3) "
	"  AND ($4::timestamptz IS NULL OR v.created_at >= $4) "
	"  AND ($5::timestamptz IS NULL OR v.created_at < $5) "
	"  AND ($6::timestamptz IS NULL OR v.completed_at >= $6) "
	"  AND ($7::timestamptz IS NULL OR v.completed_at < $7) "
	"  AND ($8::uuid IS NULL OR v.parent_id = $8) "
	"  AND ($9::uuid IS NULL OR v.id < $9) "
	"  AND ($10::integer[] IS NULL OR v.queue_id = ANY ($10)) "
	"ORDER BY v.id DESC LIMIT $11",
	11, {TEXTOID, TEXTOID, JSONBOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, UUIDOID, UUIDOID, INT4ARRAYOID, INT4OID}
};

static const char *const run_statuses[] = {
	"DELAYED", "CREATED", "RUNNING", "SUSPENDED", "BLOCKED", "CANCELLED", "COMPLETED", "FAILED",
	"TERMINATED", "TIMED_OUT"
};

static Datum
list_runs(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		values[11];
	char		nulls[11];
	int32		page_size = dex_arg_int32(fcinfo, 9, "page size");
	int			natts;
	int			queue_col;

	if (page_size < 1 || page_size > MAX_PAGE_SIZE)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("page size must be between 1 and %d", MAX_PAGE_SIZE)));
	if (!PG_ARGISNULL(1))
	{
		char	   *status = text_to_cstring(PG_GETARG_TEXT_PP(1));
		bool		known = false;

		for (int i = 0; i < lengthof(run_statuses); i++)
			known |= strcmp(status, run_statuses[i]) == 0;
		if (!known)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid run status \"%s\"", status),
					 errhint("A status is DELAYED, CREATED, RUNNING, SUSPENDED, BLOCKED, CANCELLED, COMPLETED, FAILED, TERMINATED or TIMED_OUT.")));
	}
	if (!PG_ARGISNULL(2) && !JB_ROOT_IS_OBJECT(PG_GETARG_JSONB_P(2)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("labels must be a JSON object")));

	for (int i = 0; i < 9; i++)
	{
		values[i] = PG_ARGISNULL(i) ? (Datum) 0 : PG_GETARG_DATUM(i);
		nulls[i] = PG_ARGISNULL(i) ? 'n' : ' ';
	}
	values[10] = Int32GetDatum(page_size);
	nulls[10] = ' ';

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	natts = rsinfo->setDesc->natts;
	SPI_connect();
	values[9] = dex_usable_queue_ids_datum();
	nulls[9] = values[9] == (Datum) 0 ? 'n' : ' ';
	dex_spi_exec(&list_runs_plan, values, nulls, 0);
	queue_col = SPI_fnumber(SPI_tuptable->tupdesc, "queue_id");
	if (SPI_tuptable->tupdesc->natts != natts + 1 || queue_col <= 0)
		elog(ERROR, "dex.all_runs does not have the columns of dex.runs and the queue id");
	for (uint64 row = 0; row < SPI_processed; row++)
	{
		Datum	   *all = palloc(sizeof(Datum) * (natts + 1));
		bool	   *allnulls = palloc(sizeof(bool) * (natts + 1));
		Datum	   *out = palloc(sizeof(Datum) * natts);
		bool	   *outnulls = palloc(sizeof(bool) * natts);
		int			n = 0;

		/* dex.runs is dex.all_runs without queue_id */
		heap_deform_tuple(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, all, allnulls);
		for (int col = 0; col <= natts; col++)
		{
			if (col == queue_col - 1)
				continue;
			out[n] = all[col];
			outnulls[n++] = allnulls[col];
		}
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnulls);
	}
	SPI_finish();
	return (Datum) 0;
}

/* ----------------------------------------------------------------
 * Entry points: each runs with its owner's rights (api_call.c)
 * ----------------------------------------------------------------
 */

DEX_API_ENTRY_POINT(dex_create_run, create_run);
DEX_API_ENTRY_POINT(dex_create_runs, create_runs);
DEX_API_ENTRY_POINT(dex_run_history, run_history);
DEX_API_ENTRY_POINT(dex_run_history_pb, run_history_pb);
DEX_API_ENTRY_POINT(dex_send_external_event, send_external_event_to_run);
DEX_API_ENTRY_POINT(dex_send_external_event_to_instance, send_external_event_to_instance);
DEX_API_ENTRY_POINT(dex_send_external_events, send_external_events);
DEX_API_ENTRY_POINT(dex_cancel_run, cancel_run);
DEX_API_ENTRY_POINT(dex_terminate_run, terminate_run);
DEX_API_ENTRY_POINT(dex_set_run_version, set_run_version);
DEX_API_ENTRY_POINT(dex_restart_run, restart_run);
DEX_API_ENTRY_POINT(dex_reset_run, reset_run);
DEX_API_ENTRY_POINT(dex_purge_run, purge_run);
DEX_API_ENTRY_POINT(dex_purge_runs, purge_runs);
DEX_API_ENTRY_POINT(dex_suspend_run, suspend_run);
DEX_API_ENTRY_POINT(dex_resume_run, resume_run);
DEX_API_ENTRY_POINT(dex_list_runs, list_runs);
