/*-------------------------------------------------------------------------
 *
 * api_attempts.c
 *	  dex.run_attempts(run_id): every attempt of a run's workflow tasks and
 *	  activities (1.4).
 *
 * Completed attempts come from the run's history and inbox (engine/attempts.c
 * says why): a workflow task from its workflowTaskStarted (worker, attempt, when
 * leased) to its workflowTaskCompleted, an activity from its
 * activityTaskCompleted (worker, attempt, when leased, when completed).
 * The others are the rows of dex.task_attempt.  All are returned in the
 * order they ended.  Reads only, in the caller's snapshot, with the
 * function owner's rights; a run of a queue the caller may not use is
 * unknown.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "api/api.h"

static DexPlan run_queue_plan = {
	"SELECT queue_id FROM dex.workflow_run WHERE id = $1", 1, {UUIDOID}
};

static DexPlan history_plan = {
	"SELECT events FROM dex.workflow_history WHERE run_id = $1 ORDER BY sequence", 1, {UUIDOID}
};

/* activity results the workflow has not seen yet */
static DexPlan inbox_plan = {
	"SELECT event FROM dex.workflow_inbox WHERE run_id = $1 ORDER BY id", 1, {UUIDOID}
};

static DexPlan failed_attempts_plan = {
	"SELECT event_id, attempt, worker_id, leased_at, ended_at, outcome, failure "
	"FROM dex.task_attempt WHERE run_id = $1 ORDER BY id",
	1, {UUIDOID}
};

#define N_COLUMNS 9

/* One attempt, as a row of the result */
typedef struct Attempt
{
	int32		event_id;		/* 0: the workflow task */
	const char *name;
	int32		attempt;
	const char *worker_id;
	TimestampTz leased_at;		/* 0: unknown */
	TimestampTz ended_at;
	const char *outcome;
	Jsonb	   *failure;
} Attempt;

typedef struct Attempts
{
	Attempt    *rows;
	int			n;
	int			size;
	/* activity names by event id, from activityTaskCreated */
	int32	   *name_ids;
	const char **names;
	int			n_names;
} Attempts;

static Attempt *
new_attempt(Attempts *a)
{
	if (a->n == a->size)
	{
		a->size *= 2;
		a->rows = repalloc(a->rows, sizeof(Attempt) * a->size);
	}
	memset(&a->rows[a->n], 0, sizeof(Attempt));
	return &a->rows[a->n++];
}

static const char *
activity_name(Attempts *a, int32 event_id)
{
	for (int i = 0; i < a->n_names; i++)
		if (a->name_ids[i] == event_id)
			return a->names[i];
	return NULL;
}

/*
 * The completed attempts of the run's history (rows: its batches), then of
 * its inbox (rows: single events, inbox)
 */
static void
history_attempts(Attempts *a, DexRows rows, bool inbox)
{
	Dex__V1__WorkflowTaskStarted *started = NULL;
	TimestampTz started_at = 0;

	for (uint64 b = 0; b < rows.n; b++)
	{
		bytea	   *data = dex_rows_getbytea_copy(rows, b, 1);
		Dex__V1__EventBatch one;
		Dex__V1__WorkflowEvent *event;
		Dex__V1__EventBatch *batch = &one;

		if (inbox)
		{
			event = dex_inbox_event_unpack(data);
			dex__v1__event_batch__init(&one);
			one.n_events = 1;
			one.events = &event;
		}
		else
			batch = (Dex__V1__EventBatch *)
				dex_pb_unpack(&dex__v1__event_batch__descriptor, (uint8 *) VARDATA_ANY(data),
							  VARSIZE_ANY_EXHDR(data), "history");

		for (size_t i = 0; i < batch->n_events; i++)
		{
			Dex__V1__WorkflowEvent *ev = batch->events[i];
			TimestampTz ts = ev->timestamp ? dex_timestamp_from_pb(ev->timestamp) : 0;
			Attempt    *t;

			switch (ev->subject_case)
			{
				case DEX__V1__WORKFLOW_EVENT__SUBJECT_WORKFLOW_TASK_STARTED:
					started = ev->workflow_task_started;
					started_at = ts;
					break;
				case DEX__V1__WORKFLOW_EVENT__SUBJECT_WORKFLOW_TASK_COMPLETED:
					t = new_attempt(a);
					t->attempt = started && started->attempt > 0 ? started->attempt : 1;
					t->worker_id = started ? started->worker_id : NULL;
					t->leased_at = started_at;
					t->ended_at = ts;
					t->outcome = "COMPLETED";
					started = NULL;
					break;
				case DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_CREATED:
					a->name_ids = repalloc(a->name_ids, sizeof(int32) * (a->n_names + 1));
					a->names = repalloc(a->names, sizeof(char *) * (a->n_names + 1));
					a->name_ids[a->n_names] = ev->id;
					a->names[a->n_names++] = ev->activity_task_created->name;
					break;
				case DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_COMPLETED:
					{
						Dex__V1__ActivityTaskCompleted *c = ev->activity_task_completed;

						t = new_attempt(a);
						t->event_id = c->activity_task_created_event_id;
						t->attempt = c->attempt > 0 ? c->attempt : 1;
						t->worker_id = c->worker_id && c->worker_id[0] ? c->worker_id : NULL;
						t->leased_at = c->started_at ? dex_timestamp_from_pb(c->started_at) : 0;
						t->ended_at = ts;
						t->outcome = "COMPLETED";
						break;
					}
				default:
					break;
			}
		}
	}
}

/* The attempts of dex.task_attempt */
static void
recorded_attempts(Attempts *a, DexRows rows)
{
	for (uint64 r = 0; r < rows.n; r++)
	{
		Attempt    *t = new_attempt(a);
		bytea	   *failure = dex_rows_getbytea_copy(rows, r, 7);

		t->event_id = (int32) dex_rows_getint64(rows, r, 1);
		t->attempt = (int32) dex_rows_getint64(rows, r, 2);
		t->worker_id = dex_rows_gettext_copy(rows, r, 3);
		t->leased_at = (TimestampTz) dex_rows_getint64(rows, r, 4);
		t->ended_at = (TimestampTz) dex_rows_getint64(rows, r, 5);
		t->outcome = dex_rows_gettext_copy(rows, r, 6);
		if (failure)
			t->failure = dex_pb_to_jsonb(dex_pb_unpack(&dex__v1__failure__descriptor,
													   (uint8 *) VARDATA_ANY(failure),
													   VARSIZE_ANY_EXHDR(failure), "failure"));
	}
}

static int
compare_attempts(const void *x, const void *y)
{
	const Attempt *a = x;
	const Attempt *b = y;

	if (a->ended_at != b->ended_at)
		return a->ended_at < b->ended_at ? -1 : 1;
	return 0;
}

/*
 * dex.run_attempts(run_id) returns table (task, event_id, name, attempt,
 * worker_id, leased_at, ended_at, outcome, failure)
 */
static Datum
run_attempts(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	pg_uuid_t  *run_id;
	Datum		values[1];
	Attempts	a;

	dex_arg_not_null(fcinfo, 0, "run id");
	run_id = PG_GETARG_UUID_P(0);
	values[0] = UUIDPGetDatum(run_id);
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);

	memset(&a, 0, sizeof(a));
	a.size = 16;
	a.rows = palloc(sizeof(Attempt) * a.size);
	a.name_ids = palloc(sizeof(int32));
	a.names = palloc(sizeof(char *));

	SPI_connect();
	dex_spi_exec(&run_queue_plan, values, NULL, 1);
	if (SPI_processed == 0 || !dex_may_use_queue_id((int32) dex_spi_getint64(0, 1)))
		dex_no_such_run(run_id);
	history_attempts(&a, dex_spi_rows(&history_plan, values, NULL, 0), false);
	history_attempts(&a, dex_spi_rows(&inbox_plan, values, NULL, 0), true);
	recorded_attempts(&a, dex_spi_rows(&failed_attempts_plan, values, NULL, 0));
	qsort(a.rows, a.n, sizeof(Attempt), compare_attempts);

	for (int i = 0; i < a.n; i++)
	{
		Attempt    *t = &a.rows[i];
		const char *name = t->event_id ? activity_name(&a, t->event_id) : NULL;
		Datum		out[N_COLUMNS];
		bool		nulls[N_COLUMNS] = {false};

		out[0] = CStringGetTextDatum(t->event_id ? "activity" : "workflow");
		out[1] = Int32GetDatum(t->event_id);
		out[2] = name ? CStringGetTextDatum(name) : (Datum) 0;
		nulls[2] = name == NULL;
		out[3] = Int32GetDatum(t->attempt);
		out[4] = t->worker_id ? CStringGetTextDatum(t->worker_id) : (Datum) 0;
		nulls[4] = t->worker_id == NULL;
		out[5] = TimestampTzGetDatum(t->leased_at);
		nulls[5] = t->leased_at == 0;
		out[6] = TimestampTzGetDatum(t->ended_at);
		out[7] = CStringGetTextDatum(t->outcome);
		out[8] = t->failure ? JsonbPGetDatum(t->failure) : (Datum) 0;
		nulls[8] = t->failure == NULL;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
	}
	SPI_finish();
	return (Datum) 0;
}

DEX_API_ENTRY_POINT(dex_run_attempts, run_attempts);
