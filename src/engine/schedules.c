/*-------------------------------------------------------------------------
 *
 * schedules.c
 *	  Schedules (dex.schedule, 1.7): their ticks, and firing a tick: the
 *	  overlap policy, the run it starts, the schedule's advance.
 *
 * A schedule's ticks are the instants of its cron expression in its time
 * zone (util/cron.c), or start_at (else 1970-01-01 UTC) plus multiples of
 * its "every" interval, from start_at to end_at.  A tick fires at its fire
 * time, the tick plus a jitter derived from the schedule's id and the tick
 * (a hash, so a pass that is retried, or the next scheduler after a crash,
 * computes the same).  next_tick is the first tick not yet handled;
 * next_fire_at its fire time; due_at when the scheduler must look at the
 * schedule (the fire time, sooner to retry); the scheduler sleeps until the
 * earliest due_at of all schedules (workers/scheduler.c), or until a commit
 * ends a run a buffered tick waits for.
 *
 * Firing a tick, in the transaction that moves next_tick past it (so a
 * crash before the commit fires it again, and one after it does not):
 *	  - ticks whose fire time is older than catchup_window are not fired,
 *		only counted (skipped_missed);
 *	  - the runs the schedule started that are still active
 *		(dex.schedule_run, whose rows of ended runs go first) decide by the
 *		overlap policy: skip (count it, skipped_overlap), buffer_one (keep
 *		one tick, dex.schedule.buffered_tick, to start when they have ended:
 *		the scheduler watches their end in shared memory, so the commit that
 *		ends the last one wakes it; a second tick is skipped), allow_all (start anyway), cancel_other
 *		(ask them to cancel, start at once), terminate_other (terminate
 *		them, start);
 *	  - a run starts as dex.create_run would start it, with the instance id
 *		"<schedule>@<tick in UTC>" on the schedule's queue (an active run of
 *		that instance id means the tick has a run: nothing starts) and the
 *		labels "dex.schedule" and "dex.tick" added to the schedule's.
 *
 * Locks: the scheduler locks due schedule rows FOR UPDATE SKIP LOCKED; the
 * API functions lock a schedule's row FOR UPDATE, and then, like the
 * scheduler, the runs they cancel or terminate (lifecycle.c).  The
 * scheduler does not wait for a run another transaction holds: it tries
 * the active runs with SKIP LOCKED first, and looks at the schedule again
 * a little later if one is held.  Nobody who holds a run's lock locks a
 * schedule, so the order schedule -> run is the only one.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "pgtime.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "engine/engine.h"

/* how soon to look again at a schedule whose active run another transaction holds */
#define LOCKED_RETRY_MS 100
/* the most schedules with a buffered tick a pass looks at (the others wait for their next tick) */
#define MAX_BUFFERED 10000
/* the most ticks one schedule fires (or counts as missed, for cron) per pass */
#define MAX_TICKS_PER_PASS 10000

/* 1.7: whether the schema has schedules */
bool
dex_schema_schedules(void)
{
	return dex_column_exists("schedule", "next_fire_at");
}

#define SCHEDULE_COLS \
	"s.id, s.name, s.workflow_name, s.workflow_version, s.queue_id, s.cron, s.every, s.argument, " \
	"s.timezone, s.overlap, s.catchup_window, s.jitter, s.start_at, s.end_at, s.paused, s.labels, " \
	"s.next_tick, s.buffered_tick, s.last_tick, s.last_run_id, s.runs_started, s.skipped_overlap, " \
	"s.skipped_missed"

static DexPlan load_plans[2] = {
	{"SELECT " SCHEDULE_COLS " FROM dex.schedule s WHERE s.name = $1", 1, {TEXTOID}},
	{"SELECT " SCHEDULE_COLS " FROM dex.schedule s WHERE s.name = $1 FOR UPDATE", 1, {TEXTOID}},
};

/* An interval as microseconds; "what" must have no months (a fixed duration) */
int64
dex_fixed_interval_usecs(Interval *iv, const char *what)
{
	if (iv->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a fixed duration", what),
				 errdetail("Months and years have no fixed length; a day counts as 24 hours."),
				 errhint("For calendar ticks (every month, every year) use a cron expression.")));
	return iv->time + (int64) iv->day * USECS_PER_DAY;
}

static TimestampTz
getts(DexRows rows, uint64 row, int col, TimestampTz if_null)
{
	bool		isnull;
	Datum		d = dex_rows_getdatum(rows, row, col, &isnull);

	return isnull ? if_null : DatumGetTimestampTz(d);
}

static Jsonb *
getjsonb(DexRows rows, uint64 row, int col)
{
	bool		isnull;
	Datum		d = dex_rows_getdatum(rows, row, col, &isnull);

	return isnull ? NULL : DatumGetJsonbPCopy(d);
}

/* Check a schedule's settings: its cron or every, time zone, overlap, intervals, bounds */
void
dex_schedule_check(DexSchedule *s)
{
	if (s->cron_text)
		dex_cron_parse(s->cron_text, &s->cron);
	else if (s->every_us < USECS_PER_SEC)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("every must be at least 1 second")));
	s->tz = dex_time_zone(s->timezone);
	if (s->cron_text)
	{
		TimestampTz tick;

		if (!dex_cron_next(&s->cron, s->tz, GetCurrentTransactionStartTimestamp(), &tick))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("cron expression \"%s\" never fires", s->cron_text),
					 errdetail("No day matches both its day of month and its month.")));
	}
	if (strcmp(s->overlap, "skip") != 0 && strcmp(s->overlap, "buffer_one") != 0 &&
		strcmp(s->overlap, "allow_all") != 0 && strcmp(s->overlap, "cancel_other") != 0 &&
		strcmp(s->overlap, "terminate_other") != 0)
		dex_schedule_bad_overlap(s->overlap);
	if (s->catchup_us < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("catchup_window must not be negative")));
	if (s->jitter_us < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("jitter must not be negative")));
	if (s->start_at != DT_NOBEGIN && s->end_at != DT_NOEND && s->end_at <= s->start_at)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("end_at must be after start_at")));
	if (s->start_at == DT_NOEND || s->end_at == DT_NOBEGIN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("start_at cannot be infinity nor end_at -infinity")));
}

void
dex_schedule_bad_overlap(const char *overlap)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid overlap policy \"%s\"", overlap),
			 errhint("The policies are skip, buffer_one, allow_all, cancel_other and terminate_other.")));
}

/* The schedule in row "row" of a statement reading SCHEDULE_COLS */
static DexSchedule *
schedule_from_row(DexRows rows, uint64 row)
{
	DexSchedule *s = palloc0(sizeof(DexSchedule));
	bool		isnull;
	Datum		d;

	s->id = (int32) dex_rows_getint64(rows, row, 1);
	s->name = dex_rows_gettext_copy(rows, row, 2);
	s->workflow_name = dex_rows_gettext_copy(rows, row, 3);
	s->workflow_version = (int32) dex_rows_getint64(rows, row, 4);
	s->queue_id = (int32) dex_rows_getint64(rows, row, 5);
	s->cron_text = dex_rows_gettext_copy(rows, row, 6);
	d = dex_rows_getdatum(rows, row, 7, &isnull);
	s->every_us = isnull ? 0 : dex_fixed_interval_usecs(DatumGetIntervalP(d), "every");
	d = dex_rows_getdatum(rows, row, 8, &isnull);
	s->argument = isnull ? NULL : dex_rows_getbytea_copy(rows, row, 8);
	s->timezone = dex_rows_gettext_copy(rows, row, 9);
	s->overlap = dex_rows_gettext_copy(rows, row, 10);
	s->catchup_us = dex_fixed_interval_usecs(DatumGetIntervalP(dex_rows_getdatum(rows, row, 11, &isnull)),
									   "catchup_window");
	s->jitter_us = dex_fixed_interval_usecs(DatumGetIntervalP(dex_rows_getdatum(rows, row, 12, &isnull)),
									  "jitter");
	s->start_at = getts(rows, row, 13, DT_NOBEGIN);
	s->end_at = getts(rows, row, 14, DT_NOEND);
	s->paused = dex_rows_getbool(rows, row, 15);
	s->labels = getjsonb(rows, row, 16);
	s->next_tick = getts(rows, row, 17, DT_NOEND);
	s->buffered_tick = getts(rows, row, 18, DT_NOEND);
	s->last_tick = getts(rows, row, 19, DT_NOEND);
	d = dex_rows_getdatum(rows, row, 20, &isnull);
	s->has_last_run = !isnull;
	if (!isnull)
		memcpy(&s->last_run_id, DatumGetUUIDP(d), sizeof(pg_uuid_t));
	s->runs_started = dex_rows_getint64(rows, row, 21);
	s->skipped_overlap = dex_rows_getint64(rows, row, 22);
	s->skipped_missed = dex_rows_getint64(rows, row, 23);
	if (s->cron_text)
		dex_cron_parse(s->cron_text, &s->cron);
	s->tz = dex_time_zone(s->timezone);
	return s;
}

/* The schedule of that name, locked FOR UPDATE if "lock"; 42704 if there is none */
DexSchedule *
dex_schedule_load(const char *name, bool lock)
{
	Datum		values[1] = {CStringGetTextDatum(name)};
	DexRows		rows = dex_spi_rows(&load_plans[lock ? 1 : 0], values, NULL, 1);

	if (rows.n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("schedule \"%s\" does not exist", name)));
	return schedule_from_row(rows, 0);
}

/* 1970-01-01 00:00 UTC, where "every" ticks count from without a start_at */
#define UNIX_EPOCH_TS ((TimestampTz) (UNIX_EPOCH_JDATE - POSTGRES_EPOCH_JDATE) * USECS_PER_DAY)

/*
 * The schedule's first tick after "after", from start_at to end_at (or
 * at any time if s->unbounded, for a backfill); DT_NOEND if there is none.
 */
TimestampTz
dex_schedule_tick_after(const DexSchedule *s, TimestampTz after)
{
	TimestampTz tick;

	if (after == DT_NOEND)
		return DT_NOEND;
	if (!s->unbounded && s->start_at != DT_NOBEGIN && after < s->start_at)
		after = s->start_at - 1;
	if (s->cron_text)
	{
		if (!dex_cron_next(&s->cron, s->tz, after, &tick))
			return DT_NOEND;
	}
	else
	{
		TimestampTz anchor = s->start_at != DT_NOBEGIN ? s->start_at : UNIX_EPOCH_TS;
		int64		diff = after - anchor;
		int64		q = diff / s->every_us;

		if (diff < 0 && diff % s->every_us != 0)
			q--;				/* floor */
		tick = anchor + (q + 1) * s->every_us;
	}
	return !s->unbounded && s->end_at != DT_NOEND && tick > s->end_at ? DT_NOEND : tick;
}

/* When the tick fires: the tick plus the schedule's jitter for it */
TimestampTz
dex_schedule_fire_time(const DexSchedule *s, TimestampTz tick)
{
	uint64		h;

	if (tick == DT_NOEND || s->jitter_us <= 0)
		return tick;
	h = hash_bytes_extended((const unsigned char *) &tick, sizeof(tick), (uint64) s->id);
	return tick + (int64) (h % (uint64) s->jitter_us);
}

/* ---- the runs a schedule started ---- */

static DexPlan prune_plan = {
	"DELETE FROM dex.schedule_run sr WHERE sr.schedule_id = $1 AND NOT EXISTS "
	"(SELECT 1 FROM dex.workflow_run r WHERE r.id = sr.run_id "
	" AND r.status <> ALL (" DEX_ENDED_STATUSES_SQL "))",
	1, {INT4OID}
};

static DexPlan active_plans[2] = {
	{"SELECT run_id FROM dex.schedule_run WHERE schedule_id = $1 ORDER BY run_id", 1, {INT4OID}},
	/* the scheduler's: the active runs it can lock now */
	{"SELECT r.id FROM dex.workflow_run r WHERE r.id IN "
		"(SELECT run_id FROM dex.schedule_run WHERE schedule_id = $1) "
		"ORDER BY r.id FOR NO KEY UPDATE SKIP LOCKED", 1, {INT4OID}},
};

static DexPlan add_run_plan = {
	"INSERT INTO dex.schedule_run (schedule_id, run_id, tick) VALUES ($1, $2, $3)",
	3, {INT4OID, UUIDOID, TIMESTAMPTZOID}
};

/* The active runs the schedule started (a DexRows of run ids) */
static DexRows
active_runs(const DexSchedule *s)
{
	Datum		values[1] = {Int32GetDatum(s->id)};

	dex_spi_exec(&prune_plan, values, NULL, 0);
	return dex_spi_rows(&active_plans[0], values, NULL, 0);
}

static DexPlan insert_run_plan = {
	"INSERT INTO dex.workflow_run (id, workflow_name, workflow_version, queue_id, instance_id, "
	"priority, labels, argument, created_at, status) "
	"VALUES ($1, $2, $3, $4, $5, 0, $6, $7, pg_catalog.now(), 'CREATED')",
	7, {UUIDOID, TEXTOID, INT4OID, INT4OID, TEXTOID, JSONBOID, BYTEAOID}
};

/* the tick as in instance ids and labels: 2026-11-26T16:00:00Z (with .ffffff if any) */
static char *
tick_text(TimestampTz tick)
{
	struct pg_tm tm;
	fsec_t		fsec;
	char	   *out;

	if (timestamp2tm(tick, NULL, &tm, &fsec, NULL, NULL) != 0)
		return pstrdup("?");
	out = psprintf("%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year, tm.tm_mon, tm.tm_mday,
				   tm.tm_hour, tm.tm_min, tm.tm_sec);
	if (fsec != 0)
		out = psprintf("%s.%06d", out, (int) fsec);
	return psprintf("%sZ", out);
}

/* the schedule's labels and the two it adds */
static Jsonb *
run_labels(const DexSchedule *s, const char *tick)
{
	StringInfoData js;
	Datum		j;

	initStringInfo(&js);
	appendStringInfoString(&js, "{\"dex.schedule\": ");
	escape_json(&js, s->name);
	appendStringInfo(&js, ", \"dex.tick\": \"%s\"}", tick);
	j = DirectFunctionCall1(jsonb_in, CStringGetDatum(js.data));
	if (s->labels)
		j = DirectFunctionCall2(jsonb_concat, JsonbPGetDatum(s->labels), j);
	return DatumGetJsonbP(j);
}

/*
 * Start the tick's run (see the header); NULL if its instance id has an
 * active run already.
 */
static pg_uuid_t *
start_run(DexSchedule *s, TimestampTz tick)
{
	pg_uuid_t  *run_id = dex_new_uuid();
	char	   *tick_str = tick_text(tick);
	char	   *instance_id = psprintf("%s@%s", s->name, tick_str);
	Datum		values[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};
	Datum		sr[3];

	if (!dex_claim_instance(s->queue_id, instance_id, run_id))
		return NULL;
	values[0] = UUIDPGetDatum(run_id);
	values[1] = CStringGetTextDatum(s->workflow_name);
	values[2] = Int32GetDatum(s->workflow_version);
	values[3] = Int32GetDatum(s->queue_id);
	values[4] = CStringGetTextDatum(instance_id);
	values[5] = JsonbPGetDatum(run_labels(s, tick_str));
	/* stored: checked when it came in (dex.max_payload_size may have been lowered since) */
	values[6] = s->argument ? PointerGetDatum(s->argument) : (Datum) 0;
	nulls[6] = s->argument ? ' ' : 'n';
	dex_spi_exec(&insert_run_plan, values, nulls, 0);
	dex_insert_first_task(run_id, s->queue_id, 0);

	sr[0] = Int32GetDatum(s->id);
	sr[1] = UUIDPGetDatum(run_id);
	sr[2] = TimestampTzGetDatum(tick);
	dex_spi_exec(&add_run_plan, sr, NULL, 0);
	s->runs_started++;
	s->last_tick = tick;
	s->last_run_id = *run_id;
	s->has_last_run = true;
	return run_id;
}

/*
 * Fire a tick under overlap policy "overlap" (see the header).  Returns the
 * run started, or NULL: skipped, buffered (*buffered set), or, with
 * "nowait", postponed because another transaction holds an active run
 * that the policy would end (*postponed set: nothing changed).
 */
pg_uuid_t *
dex_schedule_fire(DexSchedule *s, TimestampTz tick, const char *overlap, bool nowait,
				  bool *buffered, bool *postponed)
{
	DexRows		active = active_runs(s);
	bool		cancel = strcmp(overlap, "cancel_other") == 0;
	bool		terminate = strcmp(overlap, "terminate_other") == 0;

	*buffered = false;
	*postponed = false;
	if (active.n > 0)
	{
		if (strcmp(overlap, "skip") == 0)
		{
			s->skipped_overlap++;
			return NULL;
		}
		if (strcmp(overlap, "buffer_one") == 0)
		{
			if (s->buffered_tick == DT_NOEND)
			{
				s->buffered_tick = tick;
				*buffered = true;
			}
			else
				s->skipped_overlap++;
			return NULL;
		}
		if ((cancel || terminate) && nowait)
		{
			Datum		values[1] = {Int32GetDatum(s->id)};
			DexRows		locked = dex_spi_rows(&active_plans[1], values, NULL, 0);

			if (locked.n < active.n)
			{
				*postponed = true;
				return NULL;
			}
		}
		for (uint64 i = 0; i < active.n && (cancel || terminate); i++)
		{
			bool		isnull;
			pg_uuid_t  *id = palloc(sizeof(pg_uuid_t));
			char	   *reason = psprintf("schedule \"%s\" fired its tick of %s", s->name,
										  tick_text(tick));

			memcpy(id, DatumGetUUIDP(dex_rows_getdatum(active, i, 1, &isnull)), sizeof(pg_uuid_t));
			if (cancel)
				dex_cancel_run_internal(id, reason, true);
			else
				dex_terminate_run_internal(id, reason);
		}
	}
	return start_run(s, tick);
}

static DexPlan save_plan = {
	"UPDATE dex.schedule SET next_tick = $2, next_fire_at = $3, due_at = $4, buffered_tick = $5, "
	"last_tick = $6, last_run_id = $7, runs_started = $8, skipped_overlap = $9, "
	"skipped_missed = $10, updated_at = pg_catalog.now() WHERE id = $1",
	10, {INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, UUIDOID, INT8OID, INT8OID, INT8OID}
};

#define TS_OR_NULL(v, i, ts) \
	((v)[i] = TimestampTzGetDatum(ts), nulls[i] = ((ts) == DT_NOEND ? 'n' : ' '))

/*
 * Write the schedule's state: next_tick and what follows from it
 * (next_fire_at; due_at, NULL while paused), the buffered tick, the last
 * run and the counters.  "retry_at", if not DT_NOEND, is when to look again
 * at once.  The scheduler is woken at commit if due_at is before it would
 * wake, and, when an API call leaves a buffered tick, at once: it watches
 * the end of the runs the tick waits for (see start_buffered).
 */
void
dex_schedule_save(DexSchedule *s, TimestampTz retry_at, bool by_scheduler)
{
	Datum		values[10];
	char		nulls[10];
	TimestampTz fire = dex_schedule_fire_time(s, s->next_tick);
	TimestampTz due = fire;

	memset(nulls, ' ', sizeof(nulls));
	if (!by_scheduler && s->buffered_tick != DT_NOEND && !s->paused)
		dex_wake_scheduler_at_commit(DT_NOBEGIN);
	if (retry_at < due)
		due = retry_at;
	if (s->paused)
		due = DT_NOEND;
	values[0] = Int32GetDatum(s->id);
	TS_OR_NULL(values, 1, s->next_tick);
	TS_OR_NULL(values, 2, fire);
	TS_OR_NULL(values, 3, due);
	TS_OR_NULL(values, 4, s->buffered_tick);
	TS_OR_NULL(values, 5, s->last_tick);
	values[6] = UUIDPGetDatum(&s->last_run_id);
	nulls[6] = s->has_last_run ? ' ' : 'n';
	values[7] = Int64GetDatum(s->runs_started);
	values[8] = Int64GetDatum(s->skipped_overlap);
	values[9] = Int64GetDatum(s->skipped_missed);
	dex_spi_exec(&save_plan, values, nulls, 0);
	if (due != DT_NOEND)
		dex_wake_scheduler_at_commit(due);
}

/*
 * The scheduler's look at a schedule with a buffered tick: the tick starts
 * if the runs it waits for have ended (true: the schedule changed).  If
 * they are active, the scheduler watches their end (wakeup.c: the commit
 * that ends one sets its latch) and then looks again, in a new snapshot, so
 * that an end that committed in between is not missed: no polling.
 */
static bool
start_buffered(DexSchedule *s)
{
	DexRows		active = active_runs(s);
	TimestampTz tick = s->buffered_tick;

	if (active.n > 0)
	{
		pg_uuid_t  *ids = palloc(sizeof(pg_uuid_t) * active.n);

		for (uint64 i = 0; i < active.n; i++)
		{
			bool		isnull;

			memcpy(&ids[i], DatumGetUUIDP(dex_rows_getdatum(active, i, 1, &isnull)), sizeof(pg_uuid_t));
		}
		dex_scheduler_watch_runs(ids, (int) active.n);
		if (active_runs(s).n > 0)
			return false;
	}
	s->buffered_tick = DT_NOEND;
	start_run(s, tick);
	return true;
}

/*
 * A due schedule, as the scheduler handles it at "now": the buffered tick
 * starts if the runs before it have ended; the ticks whose fire time has
 * come fire, or are counted as missed if older than catchup_window.
 */
static void
run_due_schedule(DexSchedule *s, TimestampTz now)
{
	TimestampTz retry_at = DT_NOEND;
	int			n = 0;

	if (s->buffered_tick != DT_NOEND)
		(void) start_buffered(s);

	/* missed ticks, counted (for "every", at once) */
	if (s->next_tick != DT_NOEND && dex_schedule_fire_time(s, s->next_tick) < now - s->catchup_us &&
		!s->cron_text)
	{
		TimestampTz oldest = now - s->catchup_us;
		int64		k = (oldest - s->next_tick) / s->every_us;

		if (k > 1)
		{
			k--;				/* the last ones may still be in the window with jitter */
			s->skipped_missed += k;
			s->next_tick += k * s->every_us;
			if (s->end_at != DT_NOEND && s->next_tick > s->end_at)
				s->next_tick = DT_NOEND;
		}
	}
	while (s->next_tick != DT_NOEND && n++ < MAX_TICKS_PER_PASS)
	{
		TimestampTz tick = s->next_tick;
		TimestampTz fire = dex_schedule_fire_time(s, tick);
		bool		buffered,
					postponed;

		if (fire > now)
			break;
		if (fire < now - s->catchup_us)
			s->skipped_missed++;
		else
		{
			dex_schedule_fire(s, tick, s->overlap, true, &buffered, &postponed);
			if (postponed)
			{
				retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), LOCKED_RETRY_MS);
				break;
			}
		}
		s->next_tick = dex_schedule_tick_after(s, tick);
	}
	if (n > MAX_TICKS_PER_PASS)
		retry_at = now;
	dex_schedule_save(s, retry_at, true);
}

/* due schedules, locked (SKIP LOCKED: one another transaction holds waits for a later pass) */
static DexPlan due_plan = {
	"SELECT " SCHEDULE_COLS " FROM dex.schedule s "
	"WHERE s.due_at <= now() AND NOT s.paused ORDER BY s.due_at LIMIT $1 FOR UPDATE SKIP LOCKED",
	1, {INT4OID}
};

/* schedules with a buffered tick (SKIP LOCKED: an API call that holds one wakes us when it commits) */
static DexPlan buffered_plan = {
	"SELECT " SCHEDULE_COLS " FROM dex.schedule s "
	"WHERE s.buffered_tick IS NOT NULL AND NOT s.paused ORDER BY s.id LIMIT $1 FOR UPDATE SKIP LOCKED",
	1, {INT4OID}
};

/*
 * The scheduler's pass over schedules: the buffered ticks whose runs have
 * ended start (the others' runs are watched anew), and up to "limit" due
 * schedules fire.  Returns how many were read (a full batch means more may
 * be due).
 */
int
dex_fire_schedules(int limit)
{
	Datum		values[1] = {Int32GetDatum(limit)};
	Datum		buffered_limit[1] = {Int32GetDatum(MAX_BUFFERED)};
	DexRows		rows;
	TimestampTz now = GetCurrentTransactionStartTimestamp();

	dex_scheduler_watch_runs(NULL, -1);
	rows = dex_spi_rows(&buffered_plan, buffered_limit, NULL, 0);
	for (uint64 i = 0; i < rows.n; i++)
	{
		DexSchedule *s = schedule_from_row(rows, i);

		if (start_buffered(s))
			dex_schedule_save(s, DT_NOEND, true);
	}
	rows = dex_spi_rows(&due_plan, values, NULL, 0);
	for (uint64 i = 0; i < rows.n; i++)
		run_due_schedule(schedule_from_row(rows, i), now);
	return (int) rows.n;
}
