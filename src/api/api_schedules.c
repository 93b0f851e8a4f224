/*-------------------------------------------------------------------------
 *
 * api_schedules.c
 *	  The SQL functions of schedules (1.7): dex.create_schedule,
 *	  dex.alter_schedule, dex.pause_schedule, dex.unpause_schedule,
 *	  dex.delete_schedule, dex.trigger_schedule, dex.backfill_schedule and
 *	  dex.schedule_next_times.
 *
 * Each checks its arguments (NULLs 22004, bad values 22023, a schedule
 * that does not exist 42704, a name taken 42710) before it changes
 * anything, then works in the caller's transaction through
 * engine/schedules.c, which says how ticks fire.  A change that moves a
 * schedule's due time sooner wakes the scheduler at commit.  They are for
 * dex_admin; the four that start runs or choose what a schedule starts
 * (create, alter, trigger, backfill) take their owner's rights in C
 * (api_call.c, SECURITY INVOKER from 1.9), so that the caller's right to
 * start runs of a definition is checked (engine/definition_access.c); the
 * others, like the queue functions, are SECURITY DEFINER.  A schedule's
 * queue must be a workflow queue.  Each locks the schedule's row FOR UPDATE first, so
 * it waits for a scheduler pass that is firing it, and the pass skips it
 * while the call's transaction is open.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "api/api.h"

PG_FUNCTION_INFO_V1(dex_pause_schedule);
PG_FUNCTION_INFO_V1(dex_unpause_schedule);
PG_FUNCTION_INFO_V1(dex_delete_schedule);
PG_FUNCTION_INFO_V1(dex_schedule_next_times);

/* room in an instance id ("<name>@<tick>") for the tick */
#define SCHEDULE_NAME_MAX_LEN (DEX_NAME_MAX_LEN - 40)
/* the most ticks dex.backfill_schedule fires, and dex.schedule_next_times shows */
#define MAX_TICKS 1000

static char *
schedule_name_arg(FunctionCallInfo fcinfo)
{
	char	   *name = dex_arg_name(fcinfo, 0, "schedule name");

	if (strlen(name) > SCHEDULE_NAME_MAX_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("schedule name must have 1 to %d bytes", SCHEDULE_NAME_MAX_LEN)));
	return name;
}

static Interval *
interval_arg(FunctionCallInfo fcinfo, int arg, const char *what)
{
	dex_arg_not_null(fcinfo, arg, what);
	return PG_GETARG_INTERVAL_P(arg);
}

static TimestampTz
bound_arg(FunctionCallInfo fcinfo, int arg, TimestampTz if_null)
{
	TimestampTz t;

	if (PG_ARGISNULL(arg))
		return if_null;
	t = PG_GETARG_TIMESTAMPTZ(arg);
	/* alter_schedule: -infinity removes start_at, infinity end_at */
	if (t == DT_NOBEGIN && if_null == DT_NOBEGIN)
		return DT_NOBEGIN;
	if (t == DT_NOEND && if_null == DT_NOEND)
		return DT_NOEND;
	return t;
}

static void
set_cron_or_every(DexSchedule *s, FunctionCallInfo fcinfo, int cron_arg, bool required)
{
	if (PG_ARGISNULL(cron_arg) == PG_ARGISNULL(cron_arg + 1))
	{
		if (PG_ARGISNULL(cron_arg) && !required)
			return;
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a schedule has either a cron expression or an every interval"),
				 errhint("Give cron => '*/5 * * * *' or every => '5 minutes', not both.")));
	}
	if (!PG_ARGISNULL(cron_arg))
	{
		s->cron_text = text_to_cstring(PG_GETARG_TEXT_PP(cron_arg));
		s->every_us = 0;
	}
	else
	{
		s->cron_text = NULL;
		s->every_us = dex_fixed_interval_usecs(PG_GETARG_INTERVAL_P(cron_arg + 1), "every");
	}
}

static int32
workflow_queue(const char *queue_name)
{
	DexQueue	queue = dex_require_queue(queue_name, true);

	return queue.id;
}

static DexPlan insert_plan = {
	"INSERT INTO dex.schedule (name, workflow_name, workflow_version, queue_id, cron, every, "
	"argument, timezone, overlap, catchup_window, jitter, start_at, end_at, paused, labels) "
	"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) "
	"ON CONFLICT (name) DO NOTHING RETURNING id",
	15, {TEXTOID, TEXTOID, INT4OID, INT4OID, TEXTOID, INTERVALOID, BYTEAOID, TEXTOID, TEXTOID,
	INTERVALOID, INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID, BOOLOID, JSONBOID}
};

/* The run argument "arg" (jsonb) as the encoded payload a schedule keeps, size checked; or NULL */
static bytea *
encoded_argument(FunctionCallInfo fcinfo, int arg)
{
	Dex__V1__Payload *payload;

	if (PG_ARGISNULL(arg))
		return NULL;
	payload = dex_payload_from_jsonb(PG_GETARG_JSONB_P(arg));
	return dex_pb_pack_bytea((ProtobufCMessage *) payload);
}

/*
 * dex.create_schedule(name, workflow, queue, cron, every, argument, version,
 *	   timezone, overlap, catchup_window, jitter, start_at, end_at, paused,
 *	   labels) returns timestamptz: the next fire time
 */
static Datum
create_schedule(PG_FUNCTION_ARGS)
{
	DexSchedule *s = palloc0(sizeof(DexSchedule));
	char	   *queue_name;
	Datum		values[15];
	char		nulls[15];
	TimestampTz now = GetCurrentTransactionStartTimestamp();

	s->name = schedule_name_arg(fcinfo);
	s->workflow_name = dex_arg_name(fcinfo, 1, "workflow name");
	queue_name = dex_arg_name(fcinfo, 2, "queue");
	set_cron_or_every(s, fcinfo, 3, true);
	s->workflow_version = dex_arg_int32(fcinfo, 6, "workflow version");
	if (s->workflow_version < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("workflow version must be positive")));
	dex_arg_not_null(fcinfo, 7, "timezone");
	s->timezone = text_to_cstring(PG_GETARG_TEXT_PP(7));
	dex_arg_not_null(fcinfo, 8, "overlap");
	s->overlap = text_to_cstring(PG_GETARG_TEXT_PP(8));
	s->catchup_us = dex_fixed_interval_usecs(interval_arg(fcinfo, 9, "catchup_window"), "catchup_window");
	s->jitter_us = dex_fixed_interval_usecs(interval_arg(fcinfo, 10, "jitter"), "jitter");
	s->start_at = bound_arg(fcinfo, 11, DT_NOBEGIN);
	s->end_at = bound_arg(fcinfo, 12, DT_NOEND);
	dex_arg_not_null(fcinfo, 13, "paused");
	s->paused = PG_GETARG_BOOL(13);
	s->labels = PG_ARGISNULL(14) ? NULL : PG_GETARG_JSONB_P(14);
	if (s->labels)
		dex_check_labels(s->labels);
	dex_schedule_check(s);
	s->next_tick = s->buffered_tick = s->last_tick = DT_NOEND;

	SPI_connect();
	/* the runs it will start are the caller's to start (definition_access.c) */
	dex_check_definition_start(s->workflow_name, s->workflow_version, dex_access_caller());
	s->argument = encoded_argument(fcinfo, 5);
	s->queue_id = workflow_queue(queue_name);
	memset(nulls, ' ', sizeof(nulls));
	values[0] = CStringGetTextDatum(s->name);
	values[1] = CStringGetTextDatum(s->workflow_name);
	values[2] = Int32GetDatum(s->workflow_version);
	values[3] = Int32GetDatum(s->queue_id);
	/* $5 cron .. $7 argument are arguments 3 .. 5, $8 timezone .. $15 labels 7 .. 14 */
	for (int i = 4; i < 15; i++)
	{
		int			arg = i < 7 ? i - 1 : i;

		values[i] = PG_ARGISNULL(arg) ? (Datum) 0 : PG_GETARG_DATUM(arg);
		nulls[i] = PG_ARGISNULL(arg) ? 'n' : ' ';
	}
	values[11] = TimestampTzGetDatum(s->start_at);
	nulls[11] = s->start_at == DT_NOBEGIN ? 'n' : ' ';
	values[12] = TimestampTzGetDatum(s->end_at);
	nulls[12] = s->end_at == DT_NOEND ? 'n' : ' ';
	values[6] = s->argument ? PointerGetDatum(s->argument) : (Datum) 0;
	nulls[6] = s->argument ? ' ' : 'n';
	dex_spi_exec(&insert_plan, values, nulls, 0);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("schedule \"%s\" already exists", s->name)));
	s->id = (int32) dex_spi_getint64(0, 1);

	/*
	 * The first tick: from start_at if given (a start_at in the past makes
	 * the ticks since then missed ones: those within catchup_window fire),
	 * else the first after now.
	 */
	s->next_tick = dex_schedule_tick_after(s, s->start_at != DT_NOBEGIN ? s->start_at - 1 : now);
	dex_schedule_save(s, DT_NOEND, false);
	SPI_finish();
	if (s->paused || s->next_tick == DT_NOEND)
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(dex_schedule_fire_time(s, s->next_tick));
}

static DexPlan alter_plan = {
	"UPDATE dex.schedule SET cron = $2, every = $3, argument = $4, workflow_version = $5, "
	"timezone = $6, overlap = $7, catchup_window = $8, jitter = $9, start_at = $10, end_at = $11, "
	"labels = $12, workflow_name = $13, queue_id = $14 WHERE id = $1",
	14, {INT4OID, TEXTOID, INTERVALOID, BYTEAOID, INT4OID, TEXTOID, TEXTOID, INTERVALOID,
	INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID, JSONBOID, TEXTOID, INT4OID}
};

static Datum
usecs_interval(int64 us)
{
	Interval   *iv = palloc0(sizeof(Interval));

	iv->time = us;
	return IntervalPGetDatum(iv);
}

/*
 * dex.alter_schedule(name, cron, every, argument, version, timezone, overlap,
 *	   catchup_window, jitter, start_at, end_at, labels, workflow, queue)
 * returns timestamptz: the next fire time
 */
static Datum
alter_schedule(PG_FUNCTION_ARGS)
{
	char	   *name = schedule_name_arg(fcinfo);
	DexSchedule *s;
	Datum		values[14];
	char		nulls[14];
	bool		timing;

	SPI_connect();
	s = dex_schedule_load(name, true);
	set_cron_or_every(s, fcinfo, 1, false);
	timing = !PG_ARGISNULL(1) || !PG_ARGISNULL(2) || !PG_ARGISNULL(5) || !PG_ARGISNULL(8) ||
		!PG_ARGISNULL(9) || !PG_ARGISNULL(10);
	if (!PG_ARGISNULL(3))
		s->argument = encoded_argument(fcinfo, 3);
	if (!PG_ARGISNULL(4))
	{
		s->workflow_version = PG_GETARG_INT32(4);
		if (s->workflow_version < 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("workflow version must be positive")));
	}
	if (!PG_ARGISNULL(5))
		s->timezone = text_to_cstring(PG_GETARG_TEXT_PP(5));
	if (!PG_ARGISNULL(6))
		s->overlap = text_to_cstring(PG_GETARG_TEXT_PP(6));
	if (!PG_ARGISNULL(7))
		s->catchup_us = dex_fixed_interval_usecs(PG_GETARG_INTERVAL_P(7), "catchup_window");
	if (!PG_ARGISNULL(8))
		s->jitter_us = dex_fixed_interval_usecs(PG_GETARG_INTERVAL_P(8), "jitter");
	if (!PG_ARGISNULL(9))
		s->start_at = bound_arg(fcinfo, 9, DT_NOBEGIN);
	if (!PG_ARGISNULL(10))
		s->end_at = bound_arg(fcinfo, 10, DT_NOEND);
	if (!PG_ARGISNULL(11))
	{
		s->labels = PG_GETARG_JSONB_P(11);
		dex_check_labels(s->labels);
	}
	if (!PG_ARGISNULL(12))
		s->workflow_name = dex_arg_name(fcinfo, 12, "workflow name");
	if (!PG_ARGISNULL(13))
		s->queue_id = workflow_queue(dex_arg_name(fcinfo, 13, "queue"));
	dex_schedule_check(s);
	/* whoever changes a schedule takes on the runs it will start */
	dex_check_definition_start(s->workflow_name, s->workflow_version, dex_access_caller());

	memset(nulls, ' ', sizeof(nulls));
	values[0] = Int32GetDatum(s->id);
	values[1] = s->cron_text ? CStringGetTextDatum(s->cron_text) : (Datum) 0;
	nulls[1] = s->cron_text ? ' ' : 'n';
	values[2] = s->cron_text ? (Datum) 0 : usecs_interval(s->every_us);
	nulls[2] = s->cron_text ? 'n' : ' ';
	values[3] = s->argument ? PointerGetDatum(s->argument) : (Datum) 0;
	nulls[3] = s->argument ? ' ' : 'n';
	values[4] = Int32GetDatum(s->workflow_version);
	values[5] = CStringGetTextDatum(s->timezone);
	values[6] = CStringGetTextDatum(s->overlap);
	values[7] = usecs_interval(s->catchup_us);
	values[8] = usecs_interval(s->jitter_us);
	values[9] = TimestampTzGetDatum(s->start_at);
	nulls[9] = s->start_at == DT_NOBEGIN ? 'n' : ' ';
	values[10] = TimestampTzGetDatum(s->end_at);
	nulls[10] = s->end_at == DT_NOEND ? 'n' : ' ';
	values[11] = s->labels ? JsonbPGetDatum(s->labels) : (Datum) 0;
	nulls[11] = s->labels ? ' ' : 'n';
	values[12] = CStringGetTextDatum(s->workflow_name);
	values[13] = Int32GetDatum(s->queue_id);
	dex_spi_exec(&alter_plan, values, nulls, 0);

	/* new timing: the ticks count afresh from now */
	if (timing)
		s->next_tick = dex_schedule_tick_after(s, GetCurrentTransactionStartTimestamp());
	dex_schedule_save(s, DT_NOEND, false);
	SPI_finish();
	if (s->paused || s->next_tick == DT_NOEND)
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(dex_schedule_fire_time(s, s->next_tick));
}

static DexPlan pause_plan = {
	"UPDATE dex.schedule SET paused = $2, note = $3, updated_at = pg_catalog.now() WHERE id = $1",
	3, {INT4OID, BOOLOID, TEXTOID}
};

static TimestampTz
set_paused(FunctionCallInfo fcinfo, bool paused)
{
	char	   *name = schedule_name_arg(fcinfo);
	DexSchedule *s;
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	bool		has_note = paused && !PG_ARGISNULL(1);

	SPI_connect();
	s = dex_schedule_load(name, true);
	values[0] = Int32GetDatum(s->id);
	values[1] = BoolGetDatum(paused);
	values[2] = has_note ? PG_GETARG_DATUM(1) : (Datum) 0;
	nulls[2] = has_note ? ' ' : 'n';
	dex_spi_exec(&pause_plan, values, nulls, 0);
	/* unpaused: the ticks while paused are not caught up */
	if (s->paused && !paused)
		s->next_tick = dex_schedule_tick_after(s, GetCurrentTransactionStartTimestamp());
	s->paused = paused;
	dex_schedule_save(s, DT_NOEND, false);
	SPI_finish();
	return paused || s->next_tick == DT_NOEND ? DT_NOEND : dex_schedule_fire_time(s, s->next_tick);
}

/* dex.pause_schedule(name, note) */
Datum
dex_pause_schedule(PG_FUNCTION_ARGS)
{
	set_paused(fcinfo, true);
	PG_RETURN_VOID();
}

/* dex.unpause_schedule(name) returns timestamptz: the next fire time */
Datum
dex_unpause_schedule(PG_FUNCTION_ARGS)
{
	TimestampTz next = set_paused(fcinfo, false);

	if (next == DT_NOEND)
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(next);
}

static DexPlan delete_plan = {
	"WITH runs AS (DELETE FROM dex.schedule_run WHERE schedule_id = $1) "
	"DELETE FROM dex.schedule WHERE id = $1",
	1, {INT4OID}
};

/* dex.delete_schedule(name) */
Datum
dex_delete_schedule(PG_FUNCTION_ARGS)
{
	char	   *name = schedule_name_arg(fcinfo);
	DexSchedule *s;
	Datum		values[1];

	SPI_connect();
	s = dex_schedule_load(name, true);
	values[0] = Int32GetDatum(s->id);
	dex_spi_exec(&delete_plan, values, NULL, 0);
	SPI_finish();
	PG_RETURN_VOID();
}

/* the overlap policy argument "arg": the schedule's if NULL */
static char *
overlap_arg(FunctionCallInfo fcinfo, int arg)
{
	char	   *overlap;

	if (PG_ARGISNULL(arg))
		return NULL;
	overlap = text_to_cstring(PG_GETARG_TEXT_PP(arg));
	if (strcmp(overlap, "skip") != 0 && strcmp(overlap, "buffer_one") != 0 &&
		strcmp(overlap, "allow_all") != 0 && strcmp(overlap, "cancel_other") != 0 &&
		strcmp(overlap, "terminate_other") != 0)
		dex_schedule_bad_overlap(overlap);
	return overlap;
}

/* dex.trigger_schedule(name, overlap) returns uuid: the run started, or NULL */
static Datum
trigger_schedule(PG_FUNCTION_ARGS)
{
	char	   *name = schedule_name_arg(fcinfo);
	char	   *overlap = overlap_arg(fcinfo, 1);
	MemoryContext outer = CurrentMemoryContext;
	DexSchedule *s;
	pg_uuid_t  *run_id;
	pg_uuid_t  *result = NULL;
	bool		buffered,
				postponed;

	SPI_connect();
	dex_wait_for_rebuild();
	s = dex_schedule_load(name, true);
	dex_check_definition_start(s->workflow_name, s->workflow_version, dex_access_caller());
	run_id = dex_schedule_fire(s, GetCurrentTransactionStartTimestamp(),
							   overlap ? overlap : s->overlap, false, &buffered, &postponed);
	dex_schedule_save(s, DT_NOEND, false);
	if (run_id)
	{
		result = MemoryContextAlloc(outer, sizeof(pg_uuid_t));
		memcpy(result, run_id, sizeof(pg_uuid_t));
	}
	SPI_finish();
	if (result == NULL)
		PG_RETURN_NULL();
	PG_RETURN_UUID_P(result);
}

/*
 * dex.backfill_schedule(name, from, to, overlap)
 * returns table (tick timestamptz, run_id uuid)
 */
static Datum
backfill_schedule(PG_FUNCTION_ARGS)
{
	char	   *name = schedule_name_arg(fcinfo);
	char	   *overlap;
	TimestampTz from,
				to;
	TimestampTz ticks[MAX_TICKS];
	int			n = 0;
	DexSchedule *s;
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext per_query;

	dex_arg_not_null(fcinfo, 1, "from");
	dex_arg_not_null(fcinfo, 2, "to");
	from = PG_GETARG_TIMESTAMPTZ(1);
	to = PG_GETARG_TIMESTAMPTZ(2);
	overlap = overlap_arg(fcinfo, 3);
	if (TIMESTAMP_NOT_FINITE(from) || TIMESTAMP_NOT_FINITE(to) || to <= from)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a backfill needs finite times with \"from\" before \"to\"")));
	InitMaterializedSRF(fcinfo, 0);
	per_query = rsinfo->econtext->ecxt_per_query_memory;

	SPI_connect();
	dex_wait_for_rebuild();
	s = dex_schedule_load(name, true);
	dex_check_definition_start(s->workflow_name, s->workflow_version, dex_access_caller());
	/* the ticks the expression has in the range, whatever start_at and end_at */
	s->unbounded = true;
	for (TimestampTz t = dex_schedule_tick_after(s, from - 1); t != DT_NOEND && t < to;
		 t = dex_schedule_tick_after(s, t))
	{
		if (n == MAX_TICKS)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("schedule \"%s\" has more than %d ticks in that range", name, MAX_TICKS),
					 errhint("Backfill a shorter range at a time.")));
		ticks[n++] = t;
	}
	for (int i = 0; i < n; i++)
	{
		bool		buffered,
					postponed;
		pg_uuid_t  *run_id = dex_schedule_fire(s, ticks[i], overlap ? overlap : s->overlap, false,
											   &buffered, &postponed);
		Datum		out[2];
		bool		outnulls[2] = {false, run_id == NULL};
		MemoryContext old = MemoryContextSwitchTo(per_query);

		out[0] = TimestampTzGetDatum(ticks[i]);
		out[1] = run_id ? UUIDPGetDatum(run_id) : (Datum) 0;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnulls);
		MemoryContextSwitchTo(old);
	}
	s->unbounded = false;
	dex_schedule_save(s, DT_NOEND, false);
	SPI_finish();
	return (Datum) 0;
}

/* dex.schedule_next_times(name, n) returns setof timestamptz */
Datum
dex_schedule_next_times(PG_FUNCTION_ARGS)
{
	char	   *name = schedule_name_arg(fcinfo);
	int32		n = dex_arg_int32(fcinfo, 1, "n");
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext per_query;
	DexSchedule *s;
	TimestampTz t = GetCurrentTransactionStartTimestamp();

	if (n < 1 || n > MAX_TICKS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("n must be between 1 and %d", MAX_TICKS)));
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	per_query = rsinfo->econtext->ecxt_per_query_memory;
	SPI_connect();
	s = dex_schedule_load(name, false);
	for (int i = 0; i < n; i++)
	{
		Datum		out[1];
		bool		outnulls[1] = {false};
		MemoryContext old;

		t = dex_schedule_tick_after(s, t);
		if (t == DT_NOEND)
			break;
		out[0] = TimestampTzGetDatum(t);
		old = MemoryContextSwitchTo(per_query);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnulls);
		MemoryContextSwitchTo(old);
	}
	SPI_finish();
	return (Datum) 0;
}

DEX_API_ENTRY_POINT(dex_create_schedule, create_schedule);
DEX_API_ENTRY_POINT(dex_alter_schedule, alter_schedule);
DEX_API_ENTRY_POINT(dex_trigger_schedule, trigger_schedule);
DEX_API_ENTRY_POINT(dex_backfill_schedule, backfill_schedule);
