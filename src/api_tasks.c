/*-------------------------------------------------------------------------
 *
 * api_tasks.c
 *	  dex.poll_tasks, dex.complete_task and dex.fail_task: leasing tasks to
 *	  workers and applying what they report.
 *
 * A task is named by (run id, task id): task id 0 is the run's workflow
 * task, any other the id of the activity's ActivityTaskCreated event.  A
 * lease carries a lock version drawn from the dex.lease_version sequence;
 * completing or failing a task requires the current lock version, and is
 * otherwise refused with ERRCODE_DEX_LEASE_LOST before anything is written.
 *
 * Completing a workflow task is one transaction: the task row is deleted
 * (the fence), the events the worker was shown are moved from the inbox to
 * a new history batch together with the events of its commands, the run
 * projection is updated, follow-up work is created, and the task is
 * re-created if unseen events remain.  The events a worker is shown and the
 * events recorded are built by the same function from the same rows
 * (build_new_events), so history records exactly what the workflow saw.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "nodes/parsenodes.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "dex.h"

PG_FUNCTION_INFO_V1(dex_poll_tasks);
PG_FUNCTION_INFO_V1(dex_poll_tasks_pb);
PG_FUNCTION_INFO_V1(dex_complete_task);
PG_FUNCTION_INFO_V1(dex_complete_task_pb);
PG_FUNCTION_INFO_V1(dex_fail_task);
PG_FUNCTION_INFO_V1(dex_fail_task_pb);

#define MAX_TASKS_PER_POLL 1000
#define MAX_LEASE_USECS ((int64) 365 * USECS_PER_DAY)

/* What a workflow task needs to know about its run */
typedef struct RunInfo
{
	char	   *workflow_name;
	int32		workflow_version;
	char	   *status;
	int32		history_length;
	int32		last_event_id;
	bytea	   *argument;
	TimestampTz created_at;
	char	   *instance_id;
	int32		priority;
	Jsonb	   *labels;
	char	   *concurrency_key;
	char	   *custom_status;
	pg_uuid_t  *parent_id;
	int32		queue_id;
} RunInfo;

static DexPlan load_run_plan = {
	"SELECT workflow_name, workflow_version, status, history_length, last_event_id, argument, "
	"created_at, instance_id, priority, labels, concurrency_key, custom_status, parent_id, queue_id "
	"FROM dex.workflow_run WHERE id = $1",
	1, {UUIDOID}
};

static DexPlan lock_run_plan = {
	"SELECT workflow_name, workflow_version, status, history_length, last_event_id, argument, "
	"created_at, instance_id, priority, labels, concurrency_key, custom_status, parent_id, queue_id "
	"FROM dex.workflow_run WHERE id = $1 FOR NO KEY UPDATE",
	1, {UUIDOID}
};

static bool
load_run(pg_uuid_t *run_id, bool for_update, RunInfo *run)
{
	Datum		values[1] = {UUIDPGetDatum(run_id)};
	bool		isnull;
	Datum		d;

	dex_spi_exec(for_update ? &lock_run_plan : &load_run_plan, values, NULL,
				 !for_update, 1);
	if (SPI_processed == 0)
		return false;
	run->workflow_name = dex_spi_gettext_copy(0, 1);
	run->workflow_version = (int32) dex_spi_getint64(0, 2);
	run->status = dex_spi_gettext_copy(0, 3);
	run->history_length = (int32) dex_spi_getint64(0, 4);
	run->last_event_id = (int32) dex_spi_getint64(0, 5);
	run->argument = dex_spi_getbytea_copy(0, 6);
	run->created_at = (TimestampTz) dex_spi_getint64(0, 7);
	run->instance_id = dex_spi_gettext_copy(0, 8);
	run->priority = (int32) dex_spi_getint64(0, 9);
	d = dex_spi_getdatum(0, 10, &isnull);
	run->labels = isnull ? NULL :
		DatumGetJsonbP(SPI_datumTransfer(d, false, -1));
	run->concurrency_key = dex_spi_gettext_copy(0, 11);
	run->custom_status = dex_spi_gettext_copy(0, 12);
	d = dex_spi_getdatum(0, 13, &isnull);
	run->parent_id = isnull ? NULL :
		DatumGetUUIDP(SPI_datumTransfer(d, false, sizeof(pg_uuid_t)));
	run->queue_id = (int32) dex_spi_getint64(0, 14);
	return true;
}

static Dex__V1__RunStatus
run_status_enum(const char *status)
{
	static const char *const names[] = {
		"", "CREATED", "RUNNING", "SUSPENDED", "CANCELLED", "COMPLETED", "FAILED"
	};

	for (int i = 1; i < lengthof(names); i++)
		if (strcmp(status, names[i]) == 0)
			return (Dex__V1__RunStatus) i;
	return DEX__V1__RUN_STATUS__RUN_STATUS_UNSPECIFIED;
}

/* ----------------------------------------------------------------
 * The events a workflow task shows and records
 * ----------------------------------------------------------------
 */

static Dex__V1__RunCreated *
run_created_subject(RunInfo *run, const char *queue_name)
{
	Dex__V1__RunCreated *rc = palloc(sizeof(*rc));

	dex__v1__run_created__init(rc);
	rc->workflow_name = run->workflow_name;
	rc->workflow_version = run->workflow_version;
	rc->queue = pstrdup(queue_name);
	rc->argument = run->argument ?
		dex_payload_from_bytea(run->argument, "run argument") : NULL;
	if (run->instance_id)
		rc->instance_id = run->instance_id;
	rc->priority = run->priority;
	if (run->concurrency_key)
		rc->concurrency_key = run->concurrency_key;
	if (run->labels)
	{
		JsonbIterator *it = JsonbIteratorInit(&run->labels->root);
		JsonbValue	v;
		JsonbIteratorToken tok;
		char	   *key = NULL;
		int			n = JB_ROOT_COUNT(run->labels);

		rc->labels = palloc(sizeof(Dex__V1__RunCreated__LabelsEntry *) * Max(n, 1));
		while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		{
			if (tok == WJB_KEY)
				key = pnstrdup(v.val.string.val, v.val.string.len);
			else if (tok == WJB_VALUE && v.type == jbvString)
			{
				Dex__V1__RunCreated__LabelsEntry *e = palloc(sizeof(*e));

				dex__v1__run_created__labels_entry__init(e);
				e->key = key;
				e->value = pnstrdup(v.val.string.val, v.val.string.len);
				rc->labels[rc->n_labels++] = e;
			}
		}
	}
	return rc;
}

/*
 * The events a workflow task adds to its run's history before the events of
 * its commands: WorkflowTaskStarted, then for a new run RunCreated and
 * RunStarted, then the inbox events in "inbox" (encoded WorkflowEvents, in
 * inbox order).
 */
static Dex__V1__WorkflowEvent **
build_new_events(RunInfo *run, const char *queue_name, const char *worker_id,
				 TimestampTz started_at, bytea **inbox, int n_inbox,
				 size_t *n_events)
{
	Dex__V1__WorkflowEvent **events = palloc(sizeof(*events) * (n_inbox + 3));
	Dex__V1__WorkflowEvent *ev;
	size_t		n = 0;

	ev = dex_new_event(0, started_at);
	ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_WORKFLOW_TASK_STARTED;
	ev->workflow_task_started = palloc(sizeof(Dex__V1__WorkflowTaskStarted));
	dex__v1__workflow_task_started__init(ev->workflow_task_started);
	ev->workflow_task_started->worker_id = pstrdup(worker_id);
	events[n++] = ev;

	if (strcmp(run->status, "CREATED") == 0)
	{
		ev = dex_new_event(0, run->created_at);
		ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_CREATED;
		ev->run_created = run_created_subject(run, queue_name);
		events[n++] = ev;

		ev = dex_new_event(0, started_at);
		ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_STARTED;
		ev->run_started = palloc(sizeof(Dex__V1__RunStarted));
		dex__v1__run_started__init(ev->run_started);
		events[n++] = ev;
	}

	for (int i = 0; i < n_inbox; i++)
		events[n++] = (Dex__V1__WorkflowEvent *)
			dex_pb_unpack(&dex__v1__workflow_event__descriptor,
						  (uint8 *) VARDATA_ANY(inbox[i]), VARSIZE_ANY_EXHDR(inbox[i]),
						  "inbox event");
	*n_events = n;
	return events;
}

static DexPlan inbox_events_plan = {
	"SELECT event FROM dex.workflow_inbox WHERE run_id = $1 AND id = ANY ($2) ORDER BY id",
	2, {UUIDOID, INT8ARRAYOID}
};

static DexPlan consume_inbox_plan = {
	"WITH consumed AS (DELETE FROM dex.workflow_inbox WHERE run_id = $1 AND id = ANY ($2) "
	"RETURNING id, event) SELECT event FROM consumed ORDER BY id",
	2, {UUIDOID, INT8ARRAYOID}
};

/* The inbox events with the given ids, in order; deleted if "consume". */
static bytea **
fetch_inbox(pg_uuid_t *run_id, Datum inbox_ids, bool inbox_ids_null,
			bool consume, int *n)
{
	Datum		values[2] = {UUIDPGetDatum(run_id), inbox_ids};
	char		nulls[2] = {' ', inbox_ids_null ? 'n' : ' '};
	bytea	  **events;

	*n = 0;
	if (inbox_ids_null)
		return NULL;
	dex_spi_exec(consume ? &consume_inbox_plan : &inbox_events_plan, values, nulls,
				 !consume, 0);
	events = palloc(sizeof(bytea *) * Max(SPI_processed, 1));
	for (uint64 i = 0; i < SPI_processed; i++)
		events[i] = dex_spi_getbytea_copy(i, 1);
	*n = (int) SPI_processed;
	return events;
}

/* ----------------------------------------------------------------
 * dex.poll_tasks
 * ----------------------------------------------------------------
 */

/*
 * The LIMIT subqueries of the lease statements are MATERIALIZED CTEs: as a
 * plain subquery the planner may rescan it inside a nested loop (it does with
 * statistics taken on an empty partition), and every rescan skips the rows
 * already leased and returns new ones, so max_tasks would not hold.
 */
static DexPlan lease_workflow_plan = {
	"WITH c AS MATERIALIZED (SELECT run_id FROM dex.workflow_task "
	"      WHERE queue_id = $1 AND (locked_until IS NULL OR locked_until <= now()) "
	"      ORDER BY priority DESC, created_at LIMIT $2 FOR UPDATE SKIP LOCKED) "
	"UPDATE dex.workflow_task t SET locked_by = $3, locked_until = now() + $4, "
	"lock_version = nextval('dex.lease_version'), started_at = now(), "
	"inbox_ids = ARRAY(SELECT i.id FROM dex.workflow_inbox i "
	"                   WHERE i.run_id = t.run_id AND i.visible_from <= now() ORDER BY i.id) "
	"FROM c WHERE t.queue_id = $1 AND t.run_id = c.run_id "
	"RETURNING t.run_id, t.lock_version, t.locked_until, t.started_at, t.inbox_ids",
	4, {INT4OID, INT4OID, TEXTOID, INTERVALOID}
};

static DexPlan lease_activity_plan = {
	"WITH c AS MATERIALIZED (SELECT run_id, event_id FROM dex.activity_task "
	"      WHERE queue_id = $1 AND status = 'QUEUED' AND locked_by IS NULL "
	"      ORDER BY priority DESC, created_at LIMIT $2 FOR UPDATE SKIP LOCKED) "
	"UPDATE dex.activity_task t SET locked_by = $3, locked_until = now() + $4, "
	"lock_version = nextval('dex.lease_version') "
	"FROM c WHERE t.queue_id = $1 AND t.run_id = c.run_id AND t.event_id = c.event_id "
	"RETURNING t.run_id, t.event_id, t.lock_version, t.locked_until, t.name, t.argument, "
	"t.attempt, t.retry_policy, t.last_failure",
	4, {INT4OID, INT4OID, TEXTOID, INTERVALOID}
};

static DexPlan history_batches_plan = {
	"SELECT events FROM dex.workflow_history WHERE run_id = $1 ORDER BY sequence",
	1, {UUIDOID}
};

/* A leased task, read back from the lease statement */
typedef struct Leased
{
	pg_uuid_t  *run_id;
	int32		task_id;
	int64		lock_version;
	TimestampTz locked_until;
	TimestampTz started_at;		/* workflow tasks */
	Datum		inbox_ids;		/* workflow tasks */
	bool		inbox_ids_null;
	char	   *name;			/* activity tasks */
	bytea	   *argument;
	int32		attempt;
	bytea	   *retry_policy;
	bytea	   *last_failure;
} Leased;

/* Concatenation of a run's stored history batches: an encoded EventBatch */
static bytea *
history_bytes(pg_uuid_t *run_id)
{
	Datum		values[1] = {UUIDPGetDatum(run_id)};
	Size		total = 0;
	bytea	   *result;
	char	   *p;

	dex_spi_exec(&history_batches_plan, values, NULL, true, 0);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		total += VARSIZE_ANY_EXHDR(DatumGetByteaPP(dex_spi_getdatum(i, 1, &isnull)));
	}
	result = SPI_palloc(VARHDRSZ + total);
	SET_VARSIZE(result, VARHDRSZ + total);
	p = VARDATA(result);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		bytea	   *b = DatumGetByteaPP(dex_spi_getdatum(i, 1, &isnull));

		memcpy(p, VARDATA_ANY(b), VARSIZE_ANY_EXHDR(b));
		p += VARSIZE_ANY_EXHDR(b);
	}
	return result;
}

/*
 * The task message of a leased workflow task, as JSON or protobuf.  For
 * protobuf the stored history is copied, not decoded: WorkflowTask.history
 * has the field number of EventBatch.events.
 */
static Datum
workflow_task_datum(Leased *t, const char *queue_name, const char *worker_id,
					bool as_json)
{
	RunInfo		run;
	Dex__V1__WorkflowTask task;
	bytea	  **inbox;
	int			n_inbox;
	bytea	   *history;

	if (!load_run(t->run_id, false, &run))
		elog(ERROR, "workflow run %s of a workflow task does not exist",
			 dex_uuid_to_cstring(t->run_id));
	history = history_bytes(t->run_id);
	inbox = fetch_inbox(t->run_id, t->inbox_ids, t->inbox_ids_null, false, &n_inbox);

	dex__v1__workflow_task__init(&task);
	task.new_events = build_new_events(&run, queue_name, worker_id, t->started_at,
									   inbox, n_inbox, &task.n_new_events);
	task.run_id = dex_uuid_to_cstring(t->run_id);
	task.workflow_name = run.workflow_name;
	task.workflow_version = run.workflow_version;
	task.queue = (char *) queue_name;
	task.lock_version = t->lock_version;
	task.locked_until = dex_pb_timestamp(t->locked_until);
	task.status = run_status_enum(run.status);
	task.history_length = run.history_length;

	if (as_json)
	{
		Dex__V1__EventBatch *batch = (Dex__V1__EventBatch *)
			dex_pb_unpack(&dex__v1__event_batch__descriptor,
						  (uint8 *) VARDATA(history), VARSIZE(history) - VARHDRSZ,
						  "history");

		task.history = batch->events;
		task.n_history = batch->n_events;
		return JsonbPGetDatum(dex_pb_to_jsonb((ProtobufCMessage *) &task));
	}
	else
	{
		size_t		len;
		uint8	   *rest = dex_pb_pack((ProtobufCMessage *) &task, &len);
		Size		hlen = VARSIZE(history) - VARHDRSZ;
		bytea	   *out = palloc(VARHDRSZ + hlen + len);

		SET_VARSIZE(out, VARHDRSZ + hlen + len);
		memcpy(VARDATA(out), VARDATA(history), hlen);
		memcpy(VARDATA(out) + hlen, rest, len);
		return PointerGetDatum(out);
	}
}

static Datum
activity_task_datum(Leased *t, const char *queue_name, bool as_json)
{
	Dex__V1__ActivityTask task;

	dex__v1__activity_task__init(&task);
	task.run_id = dex_uuid_to_cstring(t->run_id);
	task.task_id = t->task_id;
	task.name = t->name;
	task.queue = (char *) queue_name;
	task.argument = t->argument ? dex_payload_from_bytea(t->argument, "argument") : NULL;
	task.attempt = t->attempt;
	task.lock_version = t->lock_version;
	task.locked_until = dex_pb_timestamp(t->locked_until);
	task.retry_policy = (Dex__V1__RetryPolicy *)
		dex_pb_unpack(&dex__v1__retry_policy__descriptor,
					  (uint8 *) VARDATA_ANY(t->retry_policy),
					  VARSIZE_ANY_EXHDR(t->retry_policy), "retry policy");
	if (t->last_failure)
		task.last_failure = (Dex__V1__Failure *)
			dex_pb_unpack(&dex__v1__failure__descriptor,
						  (uint8 *) VARDATA_ANY(t->last_failure),
						  VARSIZE_ANY_EXHDR(t->last_failure), "failure");
	if (as_json)
		return JsonbPGetDatum(dex_pb_to_jsonb((ProtobufCMessage *) &task));
	return PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) &task));
}

static Datum
poll_tasks(FunctionCallInfo fcinfo, bool as_json)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *queue_name;
	char	   *worker_id;
	int32		max_tasks;
	Interval   *lease;
	int64		lease_usecs;
	DexQueue	queue;
	Datum		values[4];
	Leased	   *leased;
	uint64		n;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2) || PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("queue, worker id, max tasks and lease duration must not be null")));
	queue_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	worker_id = text_to_cstring(PG_GETARG_TEXT_PP(1));
	max_tasks = PG_GETARG_INT32(2);
	lease = PG_GETARG_INTERVAL_P(3);

	if (worker_id[0] == '\0' || strlen(worker_id) > 255)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("worker id must have 1 to 255 bytes")));
	if (max_tasks < 1 || max_tasks > MAX_TASKS_PER_POLL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max tasks must be between 1 and %d", MAX_TASKS_PER_POLL),
				 errdetail("It was %d.", max_tasks)));
	lease_usecs = lease->time + (int64) lease->day * USECS_PER_DAY +
		(int64) lease->month * DAYS_PER_MONTH * USECS_PER_DAY;
	if (lease_usecs <= 0 || lease_usecs > MAX_LEASE_USECS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease duration must be positive and at most 365 days")));

	InitMaterializedSRF(fcinfo, 0);

	SPI_connect();
	if (!dex_lookup_queue(queue_name, &queue))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("queue \"%s\" does not exist", queue_name)));

	values[0] = Int32GetDatum(queue.id);
	values[1] = Int32GetDatum(max_tasks);
	values[2] = CStringGetTextDatum(worker_id);
	values[3] = IntervalPGetDatum(lease);
	dex_spi_exec(queue.is_workflow ? &lease_workflow_plan : &lease_activity_plan,
				 values, NULL, false, 0);

	/* read the leases back before the next statement replaces SPI_tuptable */
	n = SPI_processed;
	leased = palloc0(sizeof(Leased) * Max(n, 1));
	for (uint64 i = 0; i < n; i++)
	{
		Leased	   *t = &leased[i];
		bool		isnull;

		t->run_id = DatumGetUUIDP(SPI_datumTransfer(dex_spi_getdatum(i, 1, &isnull),
													false, sizeof(pg_uuid_t)));
		if (queue.is_workflow)
		{
			t->task_id = 0;
			t->lock_version = dex_spi_getint64(i, 2);
			t->locked_until = (TimestampTz) dex_spi_getint64(i, 3);
			t->started_at = (TimestampTz) dex_spi_getint64(i, 4);
			t->inbox_ids = dex_spi_getdatum(i, 5, &t->inbox_ids_null);
			if (!t->inbox_ids_null)
				t->inbox_ids = SPI_datumTransfer(t->inbox_ids, false, -1);
		}
		else
		{
			t->task_id = (int32) dex_spi_getint64(i, 2);
			t->lock_version = dex_spi_getint64(i, 3);
			t->locked_until = (TimestampTz) dex_spi_getint64(i, 4);
			t->name = dex_spi_gettext_copy(i, 5);
			t->argument = dex_spi_getbytea_copy(i, 6);
			t->attempt = (int32) dex_spi_getint64(i, 7);
			t->retry_policy = dex_spi_getbytea_copy(i, 8);
			t->last_failure = dex_spi_getbytea_copy(i, 9);
		}
		/* the scheduler reclaims expired activity leases and announces expired workflow ones */
		dex_wake_scheduler_at_commit(t->locked_until);
	}

	for (uint64 i = 0; i < n; i++)
	{
		Leased	   *t = &leased[i];
		Datum		out[6];
		bool		nulls[6] = {false, false, false, false, false, false};

		out[0] = CStringGetTextDatum(queue.is_workflow ? "workflow" : "activity");
		out[1] = UUIDPGetDatum(t->run_id);
		out[2] = Int32GetDatum(t->task_id);
		out[3] = Int64GetDatum(t->lock_version);
		out[4] = TimestampTzGetDatum(t->locked_until);
		out[5] = queue.is_workflow ?
			workflow_task_datum(t, queue.name, worker_id, as_json) :
			activity_task_datum(t, queue.name, as_json);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
	}

	SPI_finish();
	return (Datum) 0;
}

Datum
dex_poll_tasks(PG_FUNCTION_ARGS)
{
	return poll_tasks(fcinfo, true);
}

Datum
dex_poll_tasks_pb(PG_FUNCTION_ARGS)
{
	return poll_tasks(fcinfo, false);
}

/* ----------------------------------------------------------------
 * Fencing
 * ----------------------------------------------------------------
 */

static DexPlan run_exists_plan = {
	"SELECT 1 FROM dex.workflow_run WHERE id = $1",
	1, {UUIDOID}
};

/*
 * The task is not leased with that lock version: say whether the run is
 * unknown or the lease was lost.  Nothing has been written.
 */
static void
report_lost_lease(pg_uuid_t *run_id, int32 task_id, int64 lock_version)
{
	Datum		values[1] = {UUIDPGetDatum(run_id)};
	char	   *run = dex_uuid_to_cstring(run_id);

	dex_spi_exec(&run_exists_plan, values, NULL, true, 1);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("workflow run %s does not exist", run)));
	if (task_id == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DEX_LEASE_LOST),
				 errmsg("workflow task of run %s is not leased with lock version " INT64_FORMAT,
						run, lock_version),
				 errdetail("The task was completed, or its lease expired and it was leased again."),
				 errhint("Discard the result; the task's current holder reports it.")));
	ereport(ERROR,
			(errcode(ERRCODE_DEX_LEASE_LOST),
			 errmsg("activity task %d of run %s is not leased with lock version " INT64_FORMAT,
					task_id, run, lock_version),
			 errdetail("The task was completed, failed, cancelled, or its lease expired and it was leased again."),
			 errhint("Discard the result; the task's current holder reports it.")));
}

static void
check_task_args(FunctionCallInfo fcinfo, const char *what)
{
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("run id, task id and lock version must not be null")));
	if (PG_GETARG_INT32(1) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("task id must not be negative"),
				 errhint("Task id 0 names a run's workflow task, a positive id an activity task.")));
	if (PG_ARGISNULL(3) && strcmp(what, "failure") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("failure must not be null")));
}

/* ----------------------------------------------------------------
 * Completing a workflow task
 * ----------------------------------------------------------------
 */

static DexPlan fence_workflow_plan = {
	"DELETE FROM dex.workflow_task WHERE run_id = $1 AND lock_version = $2 AND locked_by IS NOT NULL "
	"RETURNING started_at, inbox_ids, locked_by",
	2, {UUIDOID, INT8OID}
};

static DexPlan insert_activity_plan = {
	"INSERT INTO dex.activity_task (queue_id, run_id, event_id, name, priority, status, attempt, "
	"visible_from, argument, retry_policy, created_at) "
	"VALUES ($1, $2, $3, $4, $5, 'QUEUED', 1, now(), $6, $7, now())",
	7, {INT4OID, UUIDOID, INT4OID, TEXTOID, INT2OID, BYTEAOID, BYTEAOID}
};

static DexPlan insert_history_plan = {
	"INSERT INTO dex.workflow_history (run_id, sequence, events) VALUES ($1, $2, $3)",
	3, {UUIDOID, INT4OID, BYTEAOID}
};

static DexPlan update_run_plan = {
	"UPDATE dex.workflow_run SET status = $2, history_length = $3, last_event_id = $4, "
	"custom_status = $5, result = $6, failure = $7, updated_at = now(), "
	"started_at = coalesce(started_at, $8), completed_at = $9 WHERE id = $1",
	9, {UUIDOID, TEXTOID, INT4OID, INT4OID, TEXTOID, BYTEAOID, BYTEAOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

static DexPlan end_run_cleanup_plan = {
	"WITH a AS (DELETE FROM dex.activity_task WHERE run_id = $1), "
	"     t AS (DELETE FROM dex.workflow_task WHERE run_id = $1) "
	"DELETE FROM dex.workflow_inbox WHERE run_id = $1",
	1, {UUIDOID}
};

/*
 * The run gets a new task if unseen events remain.  "Visible" is judged by
 * the clock, not by the transaction's start: the scheduler may have handed
 * over a timer that fell due since (its task insert waited for our delete of
 * the task row), and that timer must not be left without a task.
 */
static DexPlan requeue_plan = {
	"INSERT INTO dex.workflow_task (queue_id, run_id, priority) "
	"SELECT r.queue_id, r.id, r.priority FROM dex.workflow_run r WHERE r.id = $1 "
	"AND EXISTS (SELECT 1 FROM dex.workflow_inbox i WHERE i.run_id = $1 "
	"            AND i.visible_from <= clock_timestamp()) "
	"ON CONFLICT DO NOTHING RETURNING queue_id",
	1, {UUIDOID}
};

/* The state a completion builds up while applying commands */
typedef struct Completion
{
	pg_uuid_t  *run_id;
	RunInfo    *run;
	TimestampTz now;
	Dex__V1__WorkflowEvent **events;
	size_t		n_events;
	size_t		max_events;
	const char *new_status;		/* NULL: unchanged (or RUNNING) */
	Dex__V1__Payload *result;
	Dex__V1__Failure *failure;
	char	   *custom_status;
	int32		last_event_id;
} Completion;

static Dex__V1__WorkflowEvent *
add_event(Completion *c, int32 id)
{
	Dex__V1__WorkflowEvent *ev = dex_new_event(id, c->now);

	if (c->n_events == c->max_events)
	{
		c->max_events *= 2;
		c->events = repalloc(c->events, sizeof(*c->events) * c->max_events);
	}
	c->events[c->n_events++] = ev;
	return ev;
}

/* The JSON name of a command's kind ("scheduleActivity"), for messages */
static const char *
command_name(const Dex__V1__Command *cmd)
{
	const ProtobufCFieldDescriptor *f =
		protobuf_c_message_descriptor_get_field(&dex__v1__command__descriptor,
												cmd->kind_case);
	char	   *name;
	char	   *out;

	if (f == NULL)
		return "empty";
	name = pstrdup(f->name);
	out = name;
	for (const char *p = f->name; *p; p++)
	{
		if (*p == '_' && p[1])
			*out++ = pg_toupper((unsigned char) *++p);
		else
			*out++ = *p;
	}
	*out = '\0';
	return name;
}

static int32
required_command_id(Completion *c, const Dex__V1__Command *cmd)
{
	if (cmd->id <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("command %s needs a positive id", command_name(cmd)),
				 errdetail("Commands that create something carry the event id the workflow assigned to it.")));
	return cmd->id;
}

static void
apply_schedule_activity(Completion *c, const Dex__V1__Command *cmd)
{
	const Dex__V1__ScheduleActivity *sa = cmd->schedule_activity;
	int32		id = required_command_id(c, cmd);
	DexQueue	queue;
	Dex__V1__RetryPolicy *policy;
	Dex__V1__ActivityTaskCreated *created;
	Dex__V1__WorkflowEvent *ev;
	Datum		values[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};

	if (sa->name == NULL || sa->name[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("command scheduleActivity %d has no activity name", id)));
	if (sa->priority < 0 || sa->priority > 100)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("priority of activity %d must be between 0 and 100", id)));
	queue = dex_require_queue(sa->queue, false);
	policy = dex_effective_retry_policy(sa->retry_policy);

	created = palloc(sizeof(*created));
	dex__v1__activity_task_created__init(created);
	created->name = sa->name;
	created->queue = sa->queue;
	created->argument = sa->argument;
	created->retry_policy = policy;
	created->priority = sa->priority;
	created->start_to_close_timeout = sa->start_to_close_timeout;
	created->schedule_to_close_timeout = sa->schedule_to_close_timeout;
	created->heartbeat_timeout = sa->heartbeat_timeout;
	ev = add_event(c, id);
	ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_CREATED;
	ev->activity_task_created = created;

	values[0] = Int32GetDatum(queue.id);
	values[1] = UUIDPGetDatum(c->run_id);
	values[2] = Int32GetDatum(id);
	values[3] = CStringGetTextDatum(sa->name);
	values[4] = Int16GetDatum((int16) sa->priority);
	if (sa->argument)
		values[5] = PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) sa->argument));
	else
		nulls[5] = 'n';
	values[6] = PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) policy));
	dex_spi_exec(&insert_activity_plan, values, nulls, false, 0);
	dex_queue_work_added(queue.id);
}

static void
apply_start_timer(Completion *c, const Dex__V1__Command *cmd)
{
	const Dex__V1__StartTimer *st = cmd->start_timer;
	int32		id = required_command_id(c, cmd);
	int64		delay_ms = dex_duration_ms(st->delay);
	TimestampTz fire_at;
	Dex__V1__WorkflowEvent *ev;
	Dex__V1__WorkflowEvent *elapsed;

	if (st->delay == NULL || delay_ms < 0 || delay_ms > (int64) 100 * 365 * 24 * 3600 * 1000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timer %d needs a delay between 0 and 100 years", id)));
	fire_at = c->now + delay_ms * 1000;

	ev = add_event(c, id);
	ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_TIMER_CREATED;
	ev->timer_created = palloc(sizeof(Dex__V1__TimerCreated));
	dex__v1__timer_created__init(ev->timer_created);
	ev->timer_created->name = st->name;
	ev->timer_created->elapse_at = dex_pb_timestamp(fire_at);

	elapsed = dex_new_event(0, fire_at);
	elapsed->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_TIMER_ELAPSED;
	elapsed->timer_elapsed = palloc(sizeof(Dex__V1__TimerElapsed));
	dex__v1__timer_elapsed__init(elapsed->timer_elapsed);
	elapsed->timer_elapsed->timer_created_event_id = id;
	dex_insert_inbox(c->run_id, elapsed, fire_at);
}

static void
apply_command(Completion *c, const Dex__V1__Command *cmd)
{
	Dex__V1__WorkflowEvent *ev;

	if (c->new_status != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("command %s follows the command that ended the run",
						command_name(cmd)),
				 errdetail("completeRun and failRun must be the last command.")));
	if (cmd->id != 0)
	{
		if (cmd->id <= c->last_event_id)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("command %s has id %d, but ids up to %d are already used",
							command_name(cmd), cmd->id, c->last_event_id),
					 errdetail("Command ids must grow over the life of a run; reusing one means the workflow did not replay deterministically.")));
		c->last_event_id = cmd->id;
	}

	switch (cmd->kind_case)
	{
		case DEX__V1__COMMAND__KIND_SCHEDULE_ACTIVITY:
			apply_schedule_activity(c, cmd);
			break;
		case DEX__V1__COMMAND__KIND_START_TIMER:
			apply_start_timer(c, cmd);
			break;
		case DEX__V1__COMMAND__KIND_RECORD_SIDE_EFFECT:
			ev = add_event(c, required_command_id(c, cmd));
			ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_SIDE_EFFECT_EXECUTED;
			ev->side_effect_executed = palloc(sizeof(Dex__V1__SideEffectExecuted));
			dex__v1__side_effect_executed__init(ev->side_effect_executed);
			ev->side_effect_executed->name = cmd->record_side_effect->name;
			ev->side_effect_executed->result = cmd->record_side_effect->result;
			break;
		case DEX__V1__COMMAND__KIND_SET_CUSTOM_STATUS:
			ev = add_event(c, cmd->id);
			ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_CUSTOM_STATUS_SET;
			ev->custom_status_set = palloc(sizeof(Dex__V1__CustomStatusSet));
			dex__v1__custom_status_set__init(ev->custom_status_set);
			ev->custom_status_set->custom_status = cmd->set_custom_status->custom_status;
			c->custom_status = cmd->set_custom_status->custom_status[0] ?
				cmd->set_custom_status->custom_status : NULL;
			break;
		case DEX__V1__COMMAND__KIND_COMPLETE_RUN:
			ev = add_event(c, cmd->id);
			ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_COMPLETED;
			ev->run_completed = palloc(sizeof(Dex__V1__RunCompleted));
			dex__v1__run_completed__init(ev->run_completed);
			ev->run_completed->result = cmd->complete_run->result;
			c->result = cmd->complete_run->result;
			c->new_status = "COMPLETED";
			break;
		case DEX__V1__COMMAND__KIND_FAIL_RUN:
			if (cmd->fail_run->failure == NULL)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("command failRun needs a failure")));
			ev = add_event(c, cmd->id);
			ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_FAILED;
			ev->run_failed = palloc(sizeof(Dex__V1__RunFailed));
			dex__v1__run_failed__init(ev->run_failed);
			ev->run_failed->failure = cmd->fail_run->failure;
			c->failure = cmd->fail_run->failure;
			c->new_status = "FAILED";
			break;
		case DEX__V1__COMMAND__KIND__NOT_SET:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("command %d has no kind", cmd->id),
					 errhint("Set exactly one of scheduleActivity, startTimer, recordSideEffect, setCustomStatus, completeRun, failRun.")));
			break;
		default:
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("command %s is not supported yet", command_name(cmd))));
	}
}

/*
 * Returns false, having written nothing, if the lease is lost and !raise_lost.
 */
static bool
complete_workflow_task(pg_uuid_t *run_id, int64 lock_version,
					   Dex__V1__WorkflowTaskCompletion *completion, bool raise_lost)
{
	TimestampTz started_at;
	Datum		inbox_ids;
	bool		inbox_ids_null;
	char	   *worker_id;
	RunInfo		run;
	bytea	  **inbox;
	int			n_inbox;
	Completion	c;
	Dex__V1__WorkflowEvent *ev;
	Dex__V1__EventBatch batch;
	Datum		values[9];
	char		nulls[9];
	bool		terminal;
	const char *status;

	/* the fence: delete the task row only if we hold its lease */
	values[0] = UUIDPGetDatum(run_id);
	values[1] = Int64GetDatum(lock_version);
	dex_spi_exec(&fence_workflow_plan, values, NULL, false, 0);
	if (SPI_processed == 0)
	{
		if (!raise_lost)
			return false;
		report_lost_lease(run_id, 0, lock_version);
	}
	started_at = (TimestampTz) dex_spi_getint64(0, 1);
	inbox_ids = dex_spi_getdatum(0, 2, &inbox_ids_null);
	if (!inbox_ids_null)
		inbox_ids = SPI_datumTransfer(inbox_ids, false, -1);
	worker_id = dex_spi_gettext_copy(0, 3);

	if (!load_run(run_id, true, &run))
		report_lost_lease(run_id, 0, lock_version);

	/* what the worker was shown, now recorded */
	inbox = fetch_inbox(run_id, inbox_ids, inbox_ids_null, true, &n_inbox);
	memset(&c, 0, sizeof(c));
	c.run_id = run_id;
	c.run = &run;
	c.now = GetCurrentTransactionStartTimestamp();
	c.custom_status = run.custom_status;
	c.last_event_id = run.last_event_id;
	c.events = build_new_events(&run, dex_queue_name(run.queue_id), worker_id,
								started_at, inbox, n_inbox, &c.n_events);
	c.max_events = c.n_events + completion->n_commands + 1;
	c.events = repalloc(c.events, sizeof(*c.events) * c.max_events);

	ev = add_event(&c, 0);
	ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_WORKFLOW_TASK_COMPLETED;
	ev->workflow_task_completed = palloc(sizeof(Dex__V1__WorkflowTaskCompleted));
	dex__v1__workflow_task_completed__init(ev->workflow_task_completed);

	for (size_t i = 0; i < completion->n_commands; i++)
		apply_command(&c, completion->commands[i]);

	/* append the history batch */
	dex__v1__event_batch__init(&batch);
	batch.events = c.events;
	batch.n_events = c.n_events;
	values[0] = UUIDPGetDatum(run_id);
	values[1] = Int32GetDatum(run.history_length + 1);
	values[2] = PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) &batch));
	dex_spi_exec(&insert_history_plan, values, NULL, false, 0);

	/* update the projection */
	terminal = c.new_status != NULL;
	status = terminal ? c.new_status : "RUNNING";
	memset(nulls, ' ', sizeof(nulls));
	values[0] = UUIDPGetDatum(run_id);
	values[1] = CStringGetTextDatum(status);
	values[2] = Int32GetDatum(run.history_length + (int32) c.n_events);
	values[3] = Int32GetDatum(c.last_event_id);
	if (c.custom_status)
		values[4] = CStringGetTextDatum(c.custom_status);
	else
		nulls[4] = 'n';
	if (c.result)
		values[5] = PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) c.result));
	else
		nulls[5] = 'n';
	if (c.failure)
		values[6] = PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) c.failure));
	else
		nulls[6] = 'n';
	values[7] = TimestampTzGetDatum(started_at);
	if (terminal)
		values[8] = TimestampTzGetDatum(c.now);
	else
		nulls[8] = 'n';
	dex_spi_exec(&update_run_plan, values, nulls, false, 0);

	values[0] = UUIDPGetDatum(run_id);
	if (terminal)
		dex_spi_exec(&end_run_cleanup_plan, values, NULL, false, 0);
	else
	{
		dex_spi_exec(&requeue_plan, values, NULL, false, 0);
		dex_queue_work_added_spi(1);
	}
	return true;
}

/* The commands of a workflow task from JSON: a WorkflowTaskCompletion or a bare array of commands */
static Dex__V1__WorkflowTaskCompletion *
completion_from_jsonb(Jsonb *json)
{
	Dex__V1__WorkflowTaskCompletion *completion;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	int			n;

	if (!JB_ROOT_IS_ARRAY(json) || JB_ROOT_IS_SCALAR(json))
		return (Dex__V1__WorkflowTaskCompletion *)
			dex_pb_from_jsonb(&dex__v1__workflow_task_completion__descriptor, json,
							  "workflow task completion");

	completion = palloc(sizeof(*completion));
	dex__v1__workflow_task_completion__init(completion);
	n = JB_ROOT_COUNT(json);
	completion->commands = palloc(sizeof(Dex__V1__Command *) * Max(n, 1));
	it = JsonbIteratorInit(&json->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok != WJB_ELEM)
			continue;
		completion->commands[completion->n_commands++] = (Dex__V1__Command *)
			dex_pb_from_jsonb(&dex__v1__command__descriptor, JsonbValueToJsonb(&v),
							  "command");
	}
	return completion;
}

/* ----------------------------------------------------------------
 * Completing and failing an activity task
 * ----------------------------------------------------------------
 */

static DexPlan fence_activity_plan = {
	"DELETE FROM dex.activity_task WHERE run_id = $1 AND event_id = $2 AND lock_version = $3 "
	"AND locked_by IS NOT NULL RETURNING attempt",
	3, {UUIDOID, INT4OID, INT8OID}
};

static bool
complete_activity_task(pg_uuid_t *run_id, int32 task_id, int64 lock_version,
					   Dex__V1__Payload *result, bool raise_lost)
{
	Datum		values[3] = {UUIDPGetDatum(run_id), Int32GetDatum(task_id), Int64GetDatum(lock_version)};
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	Dex__V1__WorkflowEvent *ev;
	int32		attempt;

	dex_spi_exec(&fence_activity_plan, values, NULL, false, 0);
	if (SPI_processed == 0)
	{
		if (!raise_lost)
			return false;
		report_lost_lease(run_id, task_id, lock_version);
	}
	attempt = (int32) dex_spi_getint64(0, 1);

	ev = dex_new_event(0, now);
	ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_COMPLETED;
	ev->activity_task_completed = palloc(sizeof(Dex__V1__ActivityTaskCompleted));
	dex__v1__activity_task_completed__init(ev->activity_task_completed);
	ev->activity_task_completed->activity_task_created_event_id = task_id;
	ev->activity_task_completed->result = result;
	ev->activity_task_completed->attempt = attempt;
	dex_insert_inbox(run_id, ev, now);
	return true;
}

static DexPlan lock_activity_plan = {
	"SELECT attempt, retry_policy FROM dex.activity_task WHERE run_id = $1 AND event_id = $2 "
	"AND lock_version = $3 AND locked_by IS NOT NULL FOR UPDATE",
	3, {UUIDOID, INT4OID, INT8OID}
};

static bool
fail_activity_task(pg_uuid_t *run_id, int32 task_id, int64 lock_version,
				   Dex__V1__Failure *failure, bool raise_lost)
{
	Datum		values[3] = {UUIDPGetDatum(run_id), Int32GetDatum(task_id), Int64GetDatum(lock_version)};

	if (task_id == 0)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("dex.fail_task applies to activity tasks"),
				 errhint("A workflow fails its run with the failRun command of dex.complete_task.")));
	dex_spi_exec(&lock_activity_plan, values, NULL, false, 1);
	if (SPI_processed == 0)
	{
		if (!raise_lost)
			return false;
		report_lost_lease(run_id, task_id, lock_version);
	}
	dex_activity_attempt_failed(run_id, task_id, (int32) dex_spi_getint64(0, 1),
								dex_spi_getbytea_copy(0, 2), failure);
	return true;
}

/* ----------------------------------------------------------------
 * SQL entry points
 * ----------------------------------------------------------------
 */

/*
 * Complete one task with its result in either form: the commands of a
 * workflow task or the result payload of an activity task.  "result" is
 * NULL for no result.  Returns false if the lease is lost and !raise_lost.
 */
static bool
complete_one(pg_uuid_t *run_id, int32 task_id, int64 lock_version,
			 Datum result, bool isnull, bool protobuf, bool raise_lost)
{
	if (task_id < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("task id must not be negative"),
				 errhint("Task id 0 names a run's workflow task, a positive id an activity task.")));
	if (task_id == 0)
	{
		Dex__V1__WorkflowTaskCompletion *completion;

		if (isnull)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("a workflow task needs its commands"),
					 errhint("Pass a JSON array of commands, or {\"commands\": [...]}.")));
		if (protobuf)
		{
			bytea	   *data = DatumGetByteaPP(result);

			dex_check_payload_size(VARSIZE_ANY_EXHDR(data), "command list");
			completion = (Dex__V1__WorkflowTaskCompletion *)
				dex_pb_unpack(&dex__v1__workflow_task_completion__descriptor,
							  (uint8 *) VARDATA_ANY(data), VARSIZE_ANY_EXHDR(data),
							  "workflow task completion");
		}
		else
		{
			Jsonb	   *json = DatumGetJsonbP(result);

			dex_check_payload_size(VARSIZE(json), "command list");
			completion = completion_from_jsonb(json);
		}
		return complete_workflow_task(run_id, lock_version, completion, raise_lost);
	}
	else
	{
		Dex__V1__Payload *payload = NULL;

		if (!isnull)
			payload = protobuf ?
				dex_payload_from_bytea(DatumGetByteaPP(result), "result") :
				dex_payload_from_jsonb(DatumGetJsonbP(result));
		return complete_activity_task(run_id, task_id, lock_version, payload, raise_lost);
	}
}

/*
 * dex.complete_task(run_id, task_id, lock_version, result jsonb) and
 * dex.complete_task_pb(..., result bytea).
 */
static void
complete_task(FunctionCallInfo fcinfo, bool protobuf)
{
	check_task_args(fcinfo, "result");
	SPI_connect();
	complete_one(PG_GETARG_UUID_P(0), PG_GETARG_INT32(1), PG_GETARG_INT64(2),
				 PG_ARGISNULL(3) ? (Datum) 0 : PG_GETARG_DATUM(3), PG_ARGISNULL(3),
				 protobuf, true);
	SPI_finish();
}

Datum
dex_complete_task(PG_FUNCTION_ARGS)
{
	complete_task(fcinfo, false);
	PG_RETURN_VOID();
}

Datum
dex_complete_task_pb(PG_FUNCTION_ARGS)
{
	complete_task(fcinfo, true);
	PG_RETURN_VOID();
}

static Dex__V1__Failure *
failure_from(Datum failure, bool protobuf)
{
	if (protobuf)
	{
		bytea	   *data = DatumGetByteaPP(failure);

		dex_check_payload_size(VARSIZE_ANY_EXHDR(data), "failure");
		return (Dex__V1__Failure *)
			dex_pb_unpack(&dex__v1__failure__descriptor, (uint8 *) VARDATA_ANY(data),
						  VARSIZE_ANY_EXHDR(data), "failure");
	}
	else
	{
		Jsonb	   *json = DatumGetJsonbP(failure);

		dex_check_payload_size(VARSIZE(json), "failure");
		return (Dex__V1__Failure *)
			dex_pb_from_jsonb(&dex__v1__failure__descriptor, json, "failure");
	}
}

static void
fail_task(FunctionCallInfo fcinfo, bool protobuf)
{
	check_task_args(fcinfo, "failure");
	SPI_connect();
	fail_activity_task(PG_GETARG_UUID_P(0), PG_GETARG_INT32(1), PG_GETARG_INT64(2),
					   failure_from(PG_GETARG_DATUM(3), protobuf), true);
	SPI_finish();
}

/* dex.fail_task(run_id, task_id, lock_version, failure jsonb) */
Datum
dex_fail_task(PG_FUNCTION_ARGS)
{
	fail_task(fcinfo, false);
	PG_RETURN_VOID();
}

/* dex.fail_task_pb(run_id, task_id, lock_version, failure bytea) */
Datum
dex_fail_task_pb(PG_FUNCTION_ARGS)
{
	fail_task(fcinfo, true);
	PG_RETURN_VOID();
}

/* ----------------------------------------------------------------
 * CALL dex.wait_for_tasks(queue, timeout, INOUT ready)
 * ----------------------------------------------------------------
 */

PG_FUNCTION_INFO_V1(dex_wait_for_tasks);

#define MAX_WAIT_USECS ((int64) USECS_PER_DAY)

/* qualified throughout: a procedure cannot pin its search_path */
static DexPlan pollable_workflow_plan = {
	"SELECT EXISTS (SELECT 1 FROM dex.workflow_task WHERE queue_id OPERATOR(pg_catalog.=) $1 "
	"               AND (locked_until IS NULL OR locked_until OPERATOR(pg_catalog.<=) pg_catalog.now()))",
	1, {INT4OID}
};

static DexPlan pollable_activity_plan = {
	"SELECT EXISTS (SELECT 1 FROM dex.activity_task WHERE queue_id OPERATOR(pg_catalog.=) $1 "
	"               AND status OPERATOR(pg_catalog.=) 'QUEUED' AND locked_by IS NULL)",
	1, {INT4OID}
};

/*
 * Long poll: return at once if the queue has pollable tasks, else sleep until
 * a commit adds some (or a lease expires) or the timeout passes.  A procedure,
 * so that it can end its transaction before it sleeps: a waiting worker holds
 * no snapshot and no xmin.  It must be called outside a transaction block.
 */
Datum
dex_wait_for_tasks(PG_FUNCTION_ARGS)
{
	char	   *queue_name;
	Interval   *timeout;
	int64		timeout_usecs;
	DexQueue	queue;
	uint64		generation;
	bool		ready;
	Datum		values[1];
	TupleDesc	tupdesc;
	bool		nulls[1] = {false};

	if (fcinfo->context == NULL || !IsA(fcinfo->context, CallContext) ||
		castNode(CallContext, fcinfo->context)->atomic)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("dex.wait_for_tasks cannot wait inside a transaction block"),
				 errdetail("It ends its transaction before it sleeps, so that a waiting worker holds no snapshot."),
				 errhint("Call it with autocommit on: CALL dex.wait_for_tasks(...) outside BEGIN ... COMMIT.")));
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("queue and timeout must not be null")));
	queue_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	timeout = PG_GETARG_INTERVAL_P(1);
	timeout_usecs = timeout->time + (int64) timeout->day * USECS_PER_DAY +
		(int64) timeout->month * DAYS_PER_MONTH * USECS_PER_DAY;
	if (timeout_usecs < 0 || timeout_usecs > MAX_WAIT_USECS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout must be between 0 and 1 day")));

	SPI_connect_ext(SPI_OPT_NONATOMIC);
	if (!dex_lookup_queue(queue_name, &queue))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("queue \"%s\" does not exist", queue_name)));

	/* read the generation first: work committed after this wakes us */
	generation = dex_queue_generation(queue.id);
	values[0] = Int32GetDatum(queue.id);
	dex_spi_exec(queue.is_workflow ? &pollable_workflow_plan : &pollable_activity_plan,
				 values, NULL, true, 1);
	ready = dex_spi_getbool(0, 1);

	if (!ready && timeout_usecs > 0)
	{
		/* no snapshot, no xmin from here on */
		SPI_commit();
		ready = dex_queue_wait(queue.id, generation, (long) ((timeout_usecs + 999) / 1000));
	}
	SPI_finish();

	tupdesc = CreateTemplateTupleDesc(1);
	TupleDescInitEntry(tupdesc, (AttrNumber) 1, "ready", BOOLOID, -1, 0);
	tupdesc = BlessTupleDesc(tupdesc);
	values[0] = BoolGetDatum(ready);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/* ----------------------------------------------------------------
 * Batches: dex.complete_tasks, dex.fail_tasks, dex.heartbeat_tasks
 * ----------------------------------------------------------------
 */

PG_FUNCTION_INFO_V1(dex_complete_tasks);
PG_FUNCTION_INFO_V1(dex_complete_tasks_pb);
PG_FUNCTION_INFO_V1(dex_fail_tasks);
PG_FUNCTION_INFO_V1(dex_fail_tasks_pb);
PG_FUNCTION_INFO_V1(dex_heartbeat_task);
PG_FUNCTION_INFO_V1(dex_heartbeat_tasks);

#define MAX_BATCH 1000

/* The task arrays of a batch call, deconstructed */
typedef struct TaskBatch
{
	int			n;
	Datum	   *run_ids;
	Datum	   *task_ids;
	Datum	   *lock_versions;
	Datum	   *values;			/* results or failures; NULL if the call has none */
	bool	   *value_nulls;
} TaskBatch;

static Datum *
batch_array(FunctionCallInfo fcinfo, int arg, Oid elemtype, const char *what,
			bool allow_null_elems, bool **nulls_out, int *n)
{
	ArrayType  *array;
	int16		typlen;
	bool		typbyval;
	char		typalign;
	Datum	   *elems;
	bool	   *nulls;
	int			count;

	if (PG_ARGISNULL(arg))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	array = PG_GETARG_ARRAYTYPE_P(arg);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s must be a one-dimensional array", what)));
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(array, elemtype, typlen, typbyval, typalign, &elems, &nulls, &count);
	if (!allow_null_elems)
		for (int i = 0; i < count; i++)
			if (nulls[i])
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("%s must not contain nulls", what)));
	if (nulls_out)
		*nulls_out = nulls;
	*n = count;
	return elems;
}

/*
 * Read (run_ids, task_ids, lock_versions[, values]) and check that the
 * arrays have one element per task.
 */
static TaskBatch
read_task_batch(FunctionCallInfo fcinfo, Oid value_type, const char *value_name)
{
	TaskBatch	b;
	int			n1,
				n2,
				n3,
				n4;

	memset(&b, 0, sizeof(b));
	b.run_ids = batch_array(fcinfo, 0, UUIDOID, "run ids", false, NULL, &n1);
	b.task_ids = batch_array(fcinfo, 1, INT4OID, "task ids", false, NULL, &n2);
	b.lock_versions = batch_array(fcinfo, 2, INT8OID, "lock versions", false, NULL, &n3);
	n4 = n1;
	if (value_type != InvalidOid)
		b.values = batch_array(fcinfo, 3, value_type, value_name, true, &b.value_nulls, &n4);
	if (n1 != n2 || n1 != n3 || n1 != n4)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("the arrays of a batch must have one element per task"),
				 errdetail("There are %d run ids, %d task ids, %d lock versions and %d %s.",
						   n1, n2, n3, n4, value_name)));
	if (n1 > MAX_BATCH)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a batch holds at most %d tasks", MAX_BATCH),
				 errdetail("This one has %d.", n1)));
	b.n = n1;
	return b;
}

static void
put_batch_row(ReturnSetInfo *rsinfo, Datum run_id, Datum task_id, Datum outcome,
			  bool outcome_null)
{
	Datum		out[3] = {run_id, task_id, outcome};
	bool		nulls[3] = {false, false, outcome_null};

	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
}

/*
 * dex.complete_tasks(run_ids, task_ids, lock_versions, results jsonb[]) and
 * dex.complete_tasks_pb(..., results bytea[]): complete many tasks in one
 * transaction.  A lost lease is reported as completed = false for its task
 * and does not affect the others; invalid input fails the whole call.
 */
static Datum
complete_tasks(FunctionCallInfo fcinfo, bool protobuf)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TaskBatch	b = read_task_batch(fcinfo, protobuf ? BYTEAOID : JSONBOID, "results");

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	for (int i = 0; i < b.n; i++)
	{
		bool		done = complete_one(DatumGetUUIDP(b.run_ids[i]),
										DatumGetInt32(b.task_ids[i]),
										DatumGetInt64(b.lock_versions[i]),
										b.values[i], b.value_nulls[i], protobuf, false);

		put_batch_row(rsinfo, b.run_ids[i], b.task_ids[i], BoolGetDatum(done), false);
	}
	SPI_finish();
	return (Datum) 0;
}

Datum
dex_complete_tasks(PG_FUNCTION_ARGS)
{
	return complete_tasks(fcinfo, false);
}

Datum
dex_complete_tasks_pb(PG_FUNCTION_ARGS)
{
	return complete_tasks(fcinfo, true);
}

/* dex.fail_tasks / dex.fail_tasks_pb: fail many activity attempts at once */
static Datum
fail_tasks(FunctionCallInfo fcinfo, bool protobuf)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TaskBatch	b = read_task_batch(fcinfo, protobuf ? BYTEAOID : JSONBOID, "failures");

	for (int i = 0; i < b.n; i++)
		if (b.value_nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("failures must not contain nulls")));

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	for (int i = 0; i < b.n; i++)
	{
		bool		done = fail_activity_task(DatumGetUUIDP(b.run_ids[i]),
											  DatumGetInt32(b.task_ids[i]),
											  DatumGetInt64(b.lock_versions[i]),
											  failure_from(b.values[i], protobuf), false);

		put_batch_row(rsinfo, b.run_ids[i], b.task_ids[i], BoolGetDatum(done), false);
	}
	SPI_finish();
	return (Datum) 0;
}

Datum
dex_fail_tasks(PG_FUNCTION_ARGS)
{
	return fail_tasks(fcinfo, false);
}

Datum
dex_fail_tasks_pb(PG_FUNCTION_ARGS)
{
	return fail_tasks(fcinfo, true);
}

/*
 * Heartbeats extend leases: the lock version stays (it fences holders, not
 * time), locked_until moves to now + lease_duration.
 */
static DexPlan heartbeat_plan = {
	"WITH b AS (SELECT * FROM unnest($1::uuid[], $2::integer[], $3::bigint[]) "
	"           AS b(run_id, task_id, lock_version)), "
	"w AS (UPDATE dex.workflow_task t SET locked_until = now() + $4 FROM b "
	"      WHERE b.task_id = 0 AND t.run_id = b.run_id AND t.lock_version = b.lock_version "
	"        AND t.locked_by IS NOT NULL "
	"      RETURNING t.run_id, 0 AS task_id, t.locked_until), "
	"a AS (UPDATE dex.activity_task t SET locked_until = now() + $4 FROM b "
	"      WHERE b.task_id > 0 AND t.run_id = b.run_id AND t.event_id = b.task_id "
	"        AND t.lock_version = b.lock_version AND t.locked_by IS NOT NULL "
	"      RETURNING t.run_id, t.event_id AS task_id, t.locked_until) "
	"SELECT run_id, task_id, locked_until FROM w UNION ALL SELECT run_id, task_id, locked_until FROM a",
	4, {UUIDARRAYOID, INT4ARRAYOID, INT8ARRAYOID, INTERVALOID}
};

static void
check_lease_duration(Interval *lease)
{
	int64		usecs = lease->time + (int64) lease->day * USECS_PER_DAY +
		(int64) lease->month * DAYS_PER_MONTH * USECS_PER_DAY;

	if (usecs <= 0 || usecs > MAX_LEASE_USECS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease duration must be positive and at most 365 days")));
}

/* Run the heartbeat statement for arrays of tasks; SPI_tuptable holds the held ones. */
static void
heartbeat(Datum run_ids, Datum task_ids, Datum lock_versions, Interval *lease)
{
	Datum		values[4] = {run_ids, task_ids, lock_versions, IntervalPGetDatum(lease)};

	check_lease_duration(lease);
	dex_spi_exec(&heartbeat_plan, values, NULL, false, 0);
	for (uint64 i = 0; i < SPI_processed; i++)
		dex_wake_scheduler_at_commit((TimestampTz) dex_spi_getint64(i, 3));
}

/* dex.heartbeat_task(run_id, task_id, lock_version, lease_duration) returns timestamptz */
Datum
dex_heartbeat_task(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *run_id;
	int32		task_id;
	int64		lock_version;
	TimestampTz until;

	check_task_args(fcinfo, "result");
	if (PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lease duration must not be null")));
	run_id = PG_GETARG_UUID_P(0);
	task_id = PG_GETARG_INT32(1);
	lock_version = PG_GETARG_INT64(2);

	SPI_connect();
	heartbeat(PointerGetDatum(construct_array(&PG_GETARG_DATUM(0), 1, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR)),
			  PointerGetDatum(construct_array(&PG_GETARG_DATUM(1), 1, INT4OID, 4, true, TYPALIGN_INT)),
			  PointerGetDatum(construct_array(&PG_GETARG_DATUM(2), 1, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)),
			  PG_GETARG_INTERVAL_P(3));
	if (SPI_processed == 0)
		report_lost_lease(run_id, task_id, lock_version);
	until = (TimestampTz) dex_spi_getint64(0, 3);
	SPI_finish();
	PG_RETURN_TIMESTAMPTZ(until);
}

/*
 * dex.heartbeat_tasks(run_ids, task_ids, lock_versions, lease_duration)
 * returns table (run_id, task_id, locked_until): one row per task whose
 * lease is still held; lost leases have no row.
 */
Datum
dex_heartbeat_tasks(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TaskBatch	b = read_task_batch(fcinfo, InvalidOid, "");

	if (PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lease duration must not be null")));
	(void) b;
	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	heartbeat(PG_GETARG_DATUM(0), PG_GETARG_DATUM(1), PG_GETARG_DATUM(2),
			  PG_GETARG_INTERVAL_P(3));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		put_batch_row(rsinfo, dex_spi_getdatum(i, 1, &isnull), dex_spi_getdatum(i, 2, &isnull),
					  dex_spi_getdatum(i, 3, &isnull), false);
	}
	SPI_finish();
	return (Datum) 0;
}
