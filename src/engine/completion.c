/*-------------------------------------------------------------------------
 *
 * completion.c
 *	  Applying what workers report, for many tasks per statement: workflow
 *	  task completions (the fence, the recorded events, the commands, the run
 *	  projection, the follow-up work) and activity results.
 *
 * A batch is applied in the caller's transaction with a fixed number of
 * statements whatever its size: each step is one multi-row statement over
 * arrays (unnest), built in memory first.  Items are sorted by run id, and
 * rows are locked in that order, so that concurrent batches do not deadlock.
 *
 * The fence comes first: a task row is deleted only with its current lock
 * version.  A task whose lease is lost is skipped (done = false) before
 * anything is written for it, or, with raise_lost, reported as an error.
 * Invalid commands fail the whole call, which then writes nothing, and so
 * does a task of a queue the caller may not use, or a command that targets
 * such a queue (src/privileges.c).  What makes a command malformed whatever
 * its run (ids, names, priorities, delays, the order of the commands) was
 * checked as the completion was parsed (dex_check_commands, commands.c); the
 * checks left here need the database: queues, the run's history, its
 * pending work.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "engine/engine.h"

/* ----------------------------------------------------------------
 * Lost leases
 * ----------------------------------------------------------------
 */

static DexPlan run_status_plan = {
	"SELECT status FROM dex.workflow_run WHERE id = $1",
	1, {UUIDOID}
};

/*
 * The task is not leased with that lock version: say whether the run is
 * unknown, was cancelled (ERRCODE_DEX_RUN_CANCELLED, so that a heartbeating
 * activity learns it should stop) or the lease was lost.  Nothing has been
 * written.
 */
void
dex_report_lost_lease(pg_uuid_t *run_id, int32 task_id, int64 lock_version)
{
	Datum		values[1] = {UUIDPGetDatum(run_id)};
	char	   *run = dex_uuid_to_cstring(run_id);

	dex_spi_exec(&run_status_plan, values, NULL, 1);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("workflow run %s does not exist", run)));
	if (strcmp(dex_spi_gettext_copy(0, 1), "CANCELLED") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DEX_RUN_CANCELLED),
				 errmsg("workflow run %s was cancelled", run),
				 errdetail("Its tasks were withdrawn; the task's result is not needed."),
				 errhint("Stop working on the task.")));
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

static int
compare_workflow_items(const void *a, const void *b)
{
	const DexWorkflowCompletion *x = a;
	const DexWorkflowCompletion *y = b;

	return memcmp(x->run_id, y->run_id, UUID_LEN);
}

static int
compare_activity_items(const void *a, const void *b)
{
	const DexActivityCompletion *x = a;
	const DexActivityCompletion *y = b;
	int			c = memcmp(x->run_id, y->run_id, UUID_LEN);

	if (c != 0)
		return c;
	return (x->task_id > y->task_id) - (x->task_id < y->task_id);
}

/* ----------------------------------------------------------------
 * Commands
 * ----------------------------------------------------------------
 */

/* The rows a batch of workflow completions writes, one array per column */
typedef struct BatchRows
{
	/* dex.workflow_history */
	ArrayBuildState *h_run_id;
	ArrayBuildState *h_sequence;
	ArrayBuildState *h_events;
	/* dex.workflow_run updates */
	ArrayBuildState *r_id;
	ArrayBuildState *r_status;
	ArrayBuildState *r_history_length;
	ArrayBuildState *r_last_event_id;
	ArrayBuildState *r_custom_status;
	ArrayBuildState *r_result;
	ArrayBuildState *r_failure;
	ArrayBuildState *r_started_at;
	ArrayBuildState *r_completed_at;
	ArrayBuildState *r_old_history_length;
	int			n_runs;
	/* dex.activity_task inserts */
	ArrayBuildState *a_queue_id;
	ArrayBuildState *a_run_id;
	ArrayBuildState *a_event_id;
	ArrayBuildState *a_name;
	ArrayBuildState *a_priority;
	ArrayBuildState *a_argument;
	ArrayBuildState *a_retry_policy;
	ArrayBuildState *a_start_to_close;
	ArrayBuildState *a_heartbeat_timeout;
	ArrayBuildState *a_deadline;
	int			n_activities;
	/* timers and other inbox rows */
	DexInboxBatch inbox;
	/* timers cancelled: their TimerElapsed rows go */
	ArrayBuildState *c_run_id;
	ArrayBuildState *c_timer_id;
	int			n_cancelled;
	/* runs that continue as new: their old history goes, their argument changes */
	ArrayBuildState *n_run_id;
	ArrayBuildState *n_argument;
	int			n_continued;
	/* runs that ended, runs that go on */
	ArrayBuildState *ended;
	ArrayBuildState *open;
	ArrayBuildState *needs_task;
	int			n_ended;
	int			n_open;
} BatchRows;

static void
init_batch_rows(BatchRows *rows)
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
	rows->n_runs = 0;
	rows->a_queue_id = initArrayResult(INT4OID, cxt, false);
	rows->a_run_id = initArrayResult(UUIDOID, cxt, false);
	rows->a_event_id = initArrayResult(INT4OID, cxt, false);
	rows->a_name = initArrayResult(TEXTOID, cxt, false);
	rows->a_priority = initArrayResult(INT2OID, cxt, false);
	rows->a_argument = initArrayResult(BYTEAOID, cxt, false);
	rows->a_retry_policy = initArrayResult(BYTEAOID, cxt, false);
	rows->a_start_to_close = initArrayResult(INT8OID, cxt, false);
	rows->a_heartbeat_timeout = initArrayResult(INT8OID, cxt, false);
	rows->a_deadline = initArrayResult(TIMESTAMPTZOID, cxt, false);
	rows->n_activities = 0;
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
}

/* The state of one workflow task's completion while its commands apply */
typedef struct Completion
{
	pg_uuid_t  *run_id;
	DexRun	   *run;
	TimestampTz now;
	Dex__V1__WorkflowEvent **events;
	size_t		n_events;
	size_t		max_events;
	const char *new_status;		/* NULL: the run goes on */
	bool		continued;		/* continueAsNew: the run starts over */
	Dex__V1__Payload *continue_argument;
	int			started_work;	/* activities and timers this task started */
	Dex__V1__Payload *result;
	Dex__V1__Failure *failure;
	char	   *custom_status;
	int32		last_event_id;
	BatchRows  *rows;
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

static void
apply_schedule_activity(Completion *c, const Dex__V1__Command *cmd)
{
	const Dex__V1__ScheduleActivity *sa = cmd->schedule_activity;
	int32		id = cmd->id;
	DexQueue	queue;
	Dex__V1__RetryPolicy *policy;
	Dex__V1__ActivityTaskCreated *created;
	Dex__V1__WorkflowEvent *ev;
	BatchRows  *rows = c->rows;

	queue = dex_require_queue(sa->queue, false);
	policy = dex_effective_retry_policy(sa->retry_policy);

	created = palloc(sizeof(*created));
	dex__v1__activity_task_created__init(created);
	created->name = sa->name;
	created->queue = sa->queue;
	created->argument = sa->argument;
	created->retry_policy = sa->retry_policy;	/* as the workflow gave it: replay compares it */
	created->priority = sa->priority;
	created->start_to_close_timeout = sa->start_to_close_timeout;
	created->schedule_to_close_timeout = sa->schedule_to_close_timeout;
	created->heartbeat_timeout = sa->heartbeat_timeout;
	ev = add_event(c, id);
	ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_CREATED;
	ev->activity_task_created = created;

	dex_array_add(rows->a_queue_id, Int32GetDatum(queue.id), false);
	dex_array_add(rows->a_run_id, UUIDPGetDatum(c->run_id), false);
	dex_array_add(rows->a_event_id, Int32GetDatum(id), false);
	dex_array_add(rows->a_name, CStringGetTextDatum(sa->name), false);
	dex_array_add(rows->a_priority, Int16GetDatum((int16) sa->priority), false);
	dex_array_add(rows->a_argument,
				  sa->argument ? PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) sa->argument)) : (Datum) 0,
				  sa->argument == NULL);
	dex_array_add(rows->a_retry_policy,
				  PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) policy)), false);
	dex_array_add(rows->a_start_to_close, Int64GetDatum(dex_duration_ms(sa->start_to_close_timeout)),
				  sa->start_to_close_timeout == NULL);
	dex_array_add(rows->a_heartbeat_timeout, Int64GetDatum(dex_duration_ms(sa->heartbeat_timeout)),
				  sa->heartbeat_timeout == NULL);
	dex_array_add(rows->a_deadline,
				  TimestampTzGetDatum(c->now + dex_duration_ms(sa->schedule_to_close_timeout) * 1000),
				  sa->schedule_to_close_timeout == NULL);
	rows->n_activities++;
	c->started_work++;
	dex_queue_work_added(queue.id);
	dex_stat_add(queue.id, DEX_STAT_TASKS_CREATED, 1);
}

/* The TimerElapsed row of timer "id", visible at fire_at */
static void
add_timer_elapsed(Completion *c, int32 id, TimestampTz fire_at)
{
	Dex__V1__WorkflowEvent *elapsed = dex_new_event(0, fire_at);

	elapsed->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_TIMER_ELAPSED;
	elapsed->timer_elapsed = palloc(sizeof(Dex__V1__TimerElapsed));
	dex__v1__timer_elapsed__init(elapsed->timer_elapsed);
	elapsed->timer_elapsed->timer_created_event_id = id;
	dex_inbox_batch_add(&c->rows->inbox, c->run_id, elapsed, fire_at);
}

static void
apply_start_timer(Completion *c, const Dex__V1__Command *cmd)
{
	const Dex__V1__StartTimer *st = cmd->start_timer;
	int32		id = cmd->id;
	TimestampTz fire_at = c->now + dex_duration_ms(st->delay) * 1000;
	Dex__V1__WorkflowEvent *ev;

	ev = add_event(c, id);
	ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_TIMER_CREATED;
	ev->timer_created = palloc(sizeof(Dex__V1__TimerCreated));
	dex__v1__timer_created__init(ev->timer_created);
	ev->timer_created->name = st->name;
	ev->timer_created->elapse_at = dex_pb_timestamp(fire_at);
	add_timer_elapsed(c, id, fire_at);
	c->started_work++;
}

/*
 * Waiting for an external event: the wait is recorded; with a timeout, a
 * timer with the command's id resolves it as timed out if no event came
 * first (the workflow tells which from the order of its events).
 */
static void
apply_wait_external_event(Completion *c, const Dex__V1__Command *cmd)
{
	const Dex__V1__WaitExternalEvent *w = cmd->wait_external_event;
	int32		id = cmd->id;
	Dex__V1__WorkflowEvent *ev;

	ev = add_event(c, id);
	ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_EXTERNAL_EVENT_WAIT_STARTED;
	ev->external_event_wait_started = palloc(sizeof(Dex__V1__ExternalEventWaitStarted));
	dex__v1__external_event_wait_started__init(ev->external_event_wait_started);
	ev->external_event_wait_started->event_id = w->event_id;
	if (w->timeout)
	{
		TimestampTz timeout_at = c->now + dex_duration_ms(w->timeout) * 1000;

		ev->external_event_wait_started->timeout_at = dex_pb_timestamp(timeout_at);
		add_timer_elapsed(c, id, timeout_at);
	}
}

static DexPlan pending_work_plan = {
	"SELECT (SELECT count(*) FROM dex.activity_task WHERE run_id = $1), "
	"       (SELECT count(*) FROM dex.workflow_inbox WHERE run_id = $1 AND timer_id IS NOT NULL), "
	"       (SELECT count(*) FROM dex.workflow_run WHERE parent_id = $1 "
	"          AND status = ANY ('{CREATED,RUNNING,SUSPENDED}'::text[]))",
	1, {UUIDOID}
};

/*
 * Continuing as new: refused while activities, timers or child runs are
 * pending, as their results would reach a run that no longer waits for them.
 */
static void
apply_continue_as_new(Completion *c, const Dex__V1__Command *cmd)
{
	Datum		values[1] = {UUIDPGetDatum(c->run_id)};
	int64		activities;
	int64		timers;
	int64		children;

	dex_spi_exec(&pending_work_plan, values, NULL, 1);
	activities = dex_spi_getint64(0, 1);
	timers = dex_spi_getint64(0, 2);
	children = dex_spi_getint64(0, 3);
	if (activities > 0 || timers > 0 || children > 0 || c->started_work > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("workflow run %s cannot continue as new while work is pending",
						dex_uuid_to_cstring(c->run_id)),
				 errdetail("It has %lld pending activities, %lld pending timers and %lld running child runs, and this task started %d more.",
						   (long long) activities, (long long) timers, (long long) children,
						   c->started_work),
				 errhint("Wait for them, or cancel the timers, before continueAsNew.")));
	c->continued = true;
	c->continue_argument = cmd->continue_as_new->argument;
	c->new_status = "CREATED";
}

static DexPlan insert_child_plan = {
	"WITH r AS (INSERT INTO dex.workflow_run (id, workflow_name, workflow_version, queue_id, instance_id, "
	"                   priority, labels, concurrency_key, argument, parent_id, parent_event_id, created_at) "
	"           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, now()) RETURNING id) "
	"INSERT INTO dex.workflow_task (queue_id, run_id, priority) SELECT $4, id, $6 FROM r WHERE $12",
	12, {UUIDOID, TEXTOID, INT4OID, INT4OID, TEXTOID, INT2OID, JSONBOID, TEXTOID, BYTEAOID, UUIDOID, INT4OID,
		BOOLOID}
};

/* labels given as a proto map, as the jsonb object dex stores */
static Jsonb *
labels_jsonb(Dex__V1__StartChildRun__LabelsEntry **entries, size_t n)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	for (size_t i = 0; i < n; i++)
	{
		if (i > 0)
			appendStringInfoChar(&buf, ',');
		escape_json(&buf, entries[i]->key);
		appendStringInfoChar(&buf, ':');
		escape_json(&buf, entries[i]->value);
	}
	appendStringInfoChar(&buf, '}');
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}

/*
 * Starting a child run: created at once, in the parent's transaction, on
 * its own queue (the parent's unless given), with the parent's priority and
 * labels unless given.  When the child ends, the parent receives
 * childRunCompleted or childRunFailed; when the parent ends, running
 * children are cancelled.  A child whose instance id is taken fails at once.
 */
static void
apply_start_child_run(Completion *c, const Dex__V1__Command *cmd)
{
	const Dex__V1__StartChildRun *sc = cmd->start_child_run;
	int32		id = cmd->id;
	DexQueue	queue;
	pg_uuid_t  *child_id = dex_new_uuid();
	int32		version = sc->workflow_version > 0 ? sc->workflow_version : 1;
	int32		priority = sc->priority > 0 ? sc->priority : c->run->priority;
	Jsonb	   *labels = sc->n_labels > 0 ? labels_jsonb(sc->labels, sc->n_labels) : c->run->labels;
	bool		has_instance = sc->instance_id && sc->instance_id[0] != '\0';
	bool		has_key = sc->concurrency_key && sc->concurrency_key[0] != '\0';
	Dex__V1__ChildRunCreated *created;
	Dex__V1__WorkflowEvent *ev;
	Datum		values[12];
	char		nulls[12] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};

	if (sc->queue && sc->queue[0] != '\0')
		queue = dex_require_queue(sc->queue, true);
	else
		queue = dex_require_queue(dex_queue_name(c->run->queue_id), true);

	created = palloc(sizeof(*created));
	dex__v1__child_run_created__init(created);
	created->workflow_name = sc->workflow_name;
	created->workflow_version = version;
	created->queue = queue.name;
	created->argument = sc->argument;
	created->priority = priority;
	created->instance_id = sc->instance_id;
	created->concurrency_key = sc->concurrency_key;
	created->n_labels = sc->n_labels;
	created->labels = palloc(sizeof(Dex__V1__ChildRunCreated__LabelsEntry *) * Max(sc->n_labels, 1));
	for (size_t i = 0; i < sc->n_labels; i++)
	{
		created->labels[i] = palloc(sizeof(Dex__V1__ChildRunCreated__LabelsEntry));
		dex__v1__child_run_created__labels_entry__init(created->labels[i]);
		created->labels[i]->key = sc->labels[i]->key;
		created->labels[i]->value = sc->labels[i]->value;
	}
	ev = add_event(c, id);
	ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_CHILD_RUN_CREATED;
	ev->child_run_created = created;

	if (has_instance)
	{
		if (!dex_claim_instance(queue.id, sc->instance_id, child_id))
		{
			Dex__V1__WorkflowEvent *failed = dex_new_event(0, c->now);
			Dex__V1__Failure *f = palloc(sizeof(*f));

			dex__v1__failure__init(f);
			f->message = psprintf("workflow instance \"%s\" already has an active run on queue \"%s\"",
								  sc->instance_id, queue.name);
			f->type = "dex.InstanceAlreadyActive";
			f->terminal = true;
			failed->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_CHILD_RUN_FAILED;
			failed->child_run_failed = palloc(sizeof(Dex__V1__ChildRunFailed));
			dex__v1__child_run_failed__init(failed->child_run_failed);
			failed->child_run_failed->child_run_created_event_id = id;
			failed->child_run_failed->failure = f;
			dex_inbox_batch_add(&c->rows->inbox, c->run_id, failed, c->now);
			return;
		}
	}
	created->run_id = dex_uuid_to_cstring(child_id);

	values[0] = UUIDPGetDatum(child_id);
	values[1] = CStringGetTextDatum(sc->workflow_name);
	values[2] = Int32GetDatum(version);
	values[3] = Int32GetDatum(queue.id);
	if (has_instance)
		values[4] = CStringGetTextDatum(sc->instance_id);
	else
		nulls[4] = 'n';
	values[5] = Int16GetDatum((int16) priority);
	if (labels)
		values[6] = JsonbPGetDatum(labels);
	else
		nulls[6] = 'n';
	if (has_key)
		values[7] = CStringGetTextDatum(sc->concurrency_key);
	else
		nulls[7] = 'n';
	if (sc->argument)
		values[8] = PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) sc->argument));
	else
		nulls[8] = 'n';
	values[9] = UUIDPGetDatum(c->run_id);
	values[10] = Int32GetDatum(id);
	/* a child with a concurrency key gets its first task when it holds the key */
	values[11] = BoolGetDatum(!has_key || dex_admit_run(child_id, queue.id, sc->concurrency_key, priority));
	dex_spi_exec(&insert_child_plan, values, nulls, 0);
	dex_queue_work_added(queue.id);
	dex_stat_add(queue.id, DEX_STAT_TASKS_CREATED, (int64) SPI_processed);
	c->started_work++;
}

static DexPlan history_batches_plan = {
	"SELECT events FROM dex.workflow_history WHERE run_id = $1 ORDER BY sequence DESC",
	1, {UUIDOID}
};

/* Whether one of the events is the start of timer "id": startTimer, or waitExternalEvent */
static bool
starts_timer(Dex__V1__WorkflowEvent **events, size_t n, int32 id)
{
	for (size_t i = 0; i < n; i++)
		if (events[i]->id == id &&
			(events[i]->subject_case == DEX__V1__WORKFLOW_EVENT__SUBJECT_TIMER_CREATED ||
			 events[i]->subject_case == DEX__V1__WORKFLOW_EVENT__SUBJECT_EXTERNAL_EVENT_WAIT_STARTED))
			return true;
	return false;
}

/*
 * Whether the run started timer "id": in this task's events, or in its
 * history (read only for cancelTimer commands, newest batches first).
 */
static bool
run_started_timer(Completion *c, int32 id)
{
	Datum		values[1] = {UUIDPGetDatum(c->run_id)};

	if (starts_timer(c->events, c->n_events, id))
		return true;
	dex_spi_exec(&history_batches_plan, values, NULL, 0);
	for (uint64 row = 0; row < SPI_processed; row++)
	{
		bool		isnull;
		bytea	   *data = DatumGetByteaPP(dex_spi_getdatum((int) row, 1, &isnull));
		Dex__V1__EventBatch *batch = (Dex__V1__EventBatch *)
			dex_pb_unpack(&dex__v1__event_batch__descriptor, (uint8 *) VARDATA_ANY(data),
						  VARSIZE_ANY_EXHDR(data), "history");

		if (starts_timer(batch->events, batch->n_events, id))
			return true;
	}
	return false;
}

/* Cancelling a timer: its TimerElapsed is withdrawn if not delivered yet */
static void
apply_cancel_timer(Completion *c, const Dex__V1__Command *cmd)
{
	int32		timer = cmd->cancel_timer->timer_created_event_id;
	Dex__V1__WorkflowEvent *ev;

	/* dex_check_commands refused timer ids that are not positive */
	if (timer > c->last_event_id)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("command cancelTimer names timer %d, which the run did not start", timer)));
	if (!run_started_timer(c, timer))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("command cancelTimer names event %d, which is not a timer", timer),
				 errdetail("Timers are started by startTimer, and by waitExternalEvent with a timeout.")));
	ev = add_event(c, cmd->id);
	ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_TIMER_CANCELLED;
	ev->timer_cancelled = palloc(sizeof(Dex__V1__TimerCancelled));
	dex__v1__timer_cancelled__init(ev->timer_cancelled);
	ev->timer_cancelled->timer_created_event_id = timer;
	dex_array_add(c->rows->c_run_id, UUIDPGetDatum(c->run_id), false);
	dex_array_add(c->rows->c_timer_id, Int32GetDatum(timer), false);
	c->rows->n_cancelled++;
}

static void
apply_command(Completion *c, const Dex__V1__Command *cmd)
{
	Dex__V1__WorkflowEvent *ev;

	/* after continueAsNew (dex_check_commands refused the others' followers) */
	if (c->new_status != NULL)
		dex_refuse_command_after_end(cmd);
	if (cmd->id != 0)
		c->last_event_id = cmd->id;

	switch (cmd->kind_case)
	{
		case DEX__V1__COMMAND__KIND_SCHEDULE_ACTIVITY:
			apply_schedule_activity(c, cmd);
			break;
		case DEX__V1__COMMAND__KIND_START_TIMER:
			apply_start_timer(c, cmd);
			break;
		case DEX__V1__COMMAND__KIND_WAIT_EXTERNAL_EVENT:
			apply_wait_external_event(c, cmd);
			break;
		case DEX__V1__COMMAND__KIND_CANCEL_TIMER:
			apply_cancel_timer(c, cmd);
			break;
		case DEX__V1__COMMAND__KIND_CONTINUE_AS_NEW:
			apply_continue_as_new(c, cmd);
			break;
		case DEX__V1__COMMAND__KIND_START_CHILD_RUN:
			apply_start_child_run(c, cmd);
			break;
		case DEX__V1__COMMAND__KIND_RECORD_SIDE_EFFECT:
			ev = add_event(c, cmd->id);
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
			ev = add_event(c, cmd->id);
			ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_FAILED;
			ev->run_failed = palloc(sizeof(Dex__V1__RunFailed));
			dex__v1__run_failed__init(ev->run_failed);
			ev->run_failed->failure = cmd->fail_run->failure;
			c->failure = cmd->fail_run->failure;
			c->new_status = "FAILED";
			break;
		default:
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("command %s is not supported yet", dex_command_name(cmd))));
	}
}

/*
 * Command ids grow over the life of a run: a workflow that replays
 * deterministically gives every new command an id above those already in its
 * history.  A completion that reuses an id, or gives them out of order, did
 * not replay the recorded history: none of its commands is applied, and the
 * run fails with a non-determinism failure.  Returns whether all is well.
 */
static bool
check_determinism(Completion *c, Dex__V1__WorkflowTaskCompletion *completion)
{
	int32		last = c->last_event_id;
	Dex__V1__WorkflowEvent *ev;
	Dex__V1__Failure *failure;

	for (size_t i = 0; i < completion->n_commands; i++)
	{
		const Dex__V1__Command *cmd = completion->commands[i];

		if (cmd->id == 0)
			continue;
		if (cmd->id > last)
		{
			last = cmd->id;
			continue;
		}
		failure = palloc(sizeof(*failure));
		dex__v1__failure__init(failure);
		failure->type = "dex.NonDeterminism";
		failure->terminal = true;
		failure->message = psprintf("command %s has id %d, but ids up to %d are already used: "
									"the workflow did not replay its history deterministically",
									dex_command_name(cmd), cmd->id, last);
		ev = add_event(c, 0);
		ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_FAILED;
		ev->run_failed = palloc(sizeof(Dex__V1__RunFailed));
		dex__v1__run_failed__init(ev->run_failed);
		ev->run_failed->failure = failure;
		c->failure = failure;
		c->new_status = "FAILED";
		return false;
	}
	return true;
}

/*
 * One fenced workflow task: record what it was shown and what its commands
 * did, as rows of the batch.
 */
static void
complete_one_workflow_task(DexWorkflowCompletion *item, DexRun *run, BatchRows *rows)
{
	Completion	c;
	Dex__V1__WorkflowEvent *ev;
	Dex__V1__EventBatch batch;
	bool		ended;
	int			n_commands = (int) item->completion->n_commands;

	memset(&c, 0, sizeof(c));
	c.run_id = item->run_id;
	c.run = run;
	c.rows = rows;
	c.now = GetCurrentTransactionStartTimestamp();
	c.custom_status = run->custom_status;
	c.last_event_id = run->last_event_id;
	c.events = dex_build_new_events(run, item->worker_id, item->started_at,
									n_commands + 1, &c.n_events);
	c.max_events = c.n_events + n_commands + 1;

	ev = add_event(&c, 0);
	ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_WORKFLOW_TASK_COMPLETED;
	ev->workflow_task_completed = palloc(sizeof(Dex__V1__WorkflowTaskCompleted));
	dex__v1__workflow_task_completed__init(ev->workflow_task_completed);

	if (!check_determinism(&c, item->completion))
		n_commands = 0;
	for (int i = 0; i < n_commands; i++)
		apply_command(&c, item->completion->commands[i]);

	/*
	 * A task that showed a cancellation request ends the run CANCELLED once
	 * its commands are applied, unless they ended the run themselves
	 * (continuing as new does not end it).
	 */
	if (c.new_status == NULL || c.continued)
	{
		for (size_t i = 0; i < c.n_events; i++)
		{
			if (c.events[i]->subject_case == DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_CANCEL_REQUESTED)
			{
				Dex__V1__WorkflowEvent *cancelled = add_event(&c, 0);

				cancelled->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_CANCELLED;
				cancelled->run_cancelled = palloc(sizeof(Dex__V1__RunCancelled));
				dex__v1__run_cancelled__init(cancelled->run_cancelled);
				cancelled->run_cancelled->reason = c.events[i]->run_cancel_requested->reason;
				c.new_status = "CANCELLED";
				c.continued = false;	/* a cancellation is not continued */
				break;
			}
		}
	}

	dex__v1__event_batch__init(&batch);
	if (c.continued)
	{
		/*
		 * The run starts over: its history is replaced by one event, and its
		 * next task shows RunCreated with the new argument.
		 */
		Dex__V1__WorkflowEvent *ev2 = dex_new_event(0, c.now);

		ev2->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_CONTINUED_AS_NEW;
		ev2->run_continued_as_new = palloc(sizeof(Dex__V1__RunContinuedAsNew));
		dex__v1__run_continued_as_new__init(ev2->run_continued_as_new);
		ev2->run_continued_as_new->argument = c.continue_argument;
		ev2->run_continued_as_new->generation = run->generation + 1;
		c.events[0] = ev2;
		c.n_events = 1;
		c.last_event_id = 0;
		dex_array_add(rows->n_run_id, UUIDPGetDatum(item->run_id), false);
		dex_array_add(rows->n_argument,
					  c.continue_argument ? PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) c.continue_argument)) : (Datum) 0,
					  c.continue_argument == NULL);
		rows->n_continued++;
	}
	batch.events = c.events;
	batch.n_events = c.n_events;
	dex_array_add(rows->h_run_id, UUIDPGetDatum(item->run_id), false);
	dex_array_add(rows->h_sequence, Int32GetDatum(c.continued ? 1 : run->history_length + 1), false);
	dex_array_add(rows->h_events, PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) &batch)), false);

	ended = c.new_status != NULL && !c.continued;
	dex_array_add(rows->r_id, UUIDPGetDatum(item->run_id), false);
	dex_array_add(rows->r_status, CStringGetTextDatum(c.new_status ? c.new_status : "RUNNING"), false);
	dex_array_add(rows->r_history_length,
				  Int32GetDatum(c.continued ? 1 : run->history_length + (int32) c.n_events), false);
	dex_array_add(rows->r_last_event_id, Int32GetDatum(c.last_event_id), false);
	dex_array_add(rows->r_custom_status,
				  c.custom_status ? CStringGetTextDatum(c.custom_status) : (Datum) 0,
				  c.custom_status == NULL);
	dex_array_add(rows->r_result,
				  c.result ? PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) c.result)) : (Datum) 0,
				  c.result == NULL);
	dex_array_add(rows->r_failure,
				  c.failure ? PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) c.failure)) : (Datum) 0,
				  c.failure == NULL);
	dex_array_add(rows->r_started_at, TimestampTzGetDatum(item->started_at), false);
	dex_array_add(rows->r_completed_at, TimestampTzGetDatum(c.now), !ended);
	dex_array_add(rows->r_old_history_length, Int32GetDatum(run->history_length), false);
	rows->n_runs++;

	if (c.continued)
		dex_array_add(rows->needs_task, UUIDPGetDatum(item->run_id), false);
	else if (ended)
	{
		dex_array_add(rows->ended, UUIDPGetDatum(item->run_id), false);
		rows->n_ended++;
	}
	else
	{
		dex_array_add(rows->open, UUIDPGetDatum(item->run_id), false);
		rows->n_open++;
	}
}

/* ----------------------------------------------------------------
 * Completing workflow tasks
 * ----------------------------------------------------------------
 */

static DexPlan fence_workflow_plan = {
	"DELETE FROM dex.workflow_task t USING unnest($1::uuid[], $2::bigint[]) AS b(run_id, lock_version) "
	"WHERE t.run_id = b.run_id AND t.lock_version = b.lock_version AND t.locked_by IS NOT NULL "
	"RETURNING t.run_id, t.lock_version, t.started_at, t.inbox_ids, t.locked_by, t.queue_id, "
	DEX_QUEUE_LIMITED_SQL,
	2, {UUIDARRAYOID, INT8ARRAYOID}
};

static DexPlan continue_as_new_plan = {
	"WITH h AS (DELETE FROM dex.workflow_history WHERE run_id = ANY ($1)) "
	"UPDATE dex.workflow_run r SET argument = u.argument, generation = r.generation + 1, "
	"       started_at = NULL, result = NULL, failure = NULL "
	"FROM unnest($1::uuid[], $2::bytea[]) AS u(id, argument) WHERE r.id = u.id",
	2, {UUIDARRAYOID, BYTEAARRAYOID}
};

static DexPlan insert_history_plan = {
	"INSERT INTO dex.workflow_history (run_id, sequence, events) "
	"SELECT * FROM unnest($1::uuid[], $2::integer[], $3::bytea[])",
	3, {UUIDARRAYOID, INT4ARRAYOID, BYTEAARRAYOID}
};

/*
 * The runs are locked, and the fence made us the holder of their workflow
 * tasks, the only writer of their histories; the update still checks that
 * the history did not grow, as a guard.  It keeps a suspension that
 * dex.suspend_run made while the task ran.
 */
static DexPlan update_runs_plan = {
	"UPDATE dex.workflow_run r SET "
	"status = CASE WHEN r.status = 'SUSPENDED' AND u.status = 'RUNNING' THEN r.status ELSE u.status END, "
	"history_length = u.history_length, "
	"last_event_id = u.last_event_id, custom_status = u.custom_status, result = u.result, "
	"failure = u.failure, updated_at = now(), started_at = coalesce(r.started_at, u.started_at), "
	"task_failures = 0, last_task_failure = NULL, "
	"completed_at = u.completed_at "
	"FROM unnest($1::uuid[], $2::text[], $3::integer[], $4::integer[], $5::text[], $6::bytea[], "
	"            $7::bytea[], $8::timestamptz[], $9::timestamptz[], $10::integer[]) "
	"     AS u(id, status, history_length, last_event_id, custom_status, result, failure, "
	"          started_at, completed_at, old_history_length) "
	"WHERE r.id = u.id AND r.history_length = u.old_history_length",
	10, {UUIDARRAYOID, TEXTARRAYOID, INT4ARRAYOID, INT4ARRAYOID, TEXTARRAYOID, BYTEAARRAYOID,
		 BYTEAARRAYOID, TIMESTAMPTZARRAYOID, TIMESTAMPTZARRAYOID, INT4ARRAYOID}
};

static DexPlan insert_activities_plan = {
	"INSERT INTO dex.activity_task (queue_id, run_id, event_id, name, priority, status, attempt, "
	"                               visible_from, argument, retry_policy, start_to_close_ms, "
	"                               heartbeat_timeout_ms, schedule_deadline, created_at) "
	"SELECT queue_id, run_id, event_id, name, priority, 'QUEUED', 1, now(), argument, retry_policy, "
	"       start_to_close_ms, heartbeat_timeout_ms, schedule_deadline, now() "
	"FROM unnest($1::integer[], $2::uuid[], $3::integer[], $4::text[], $5::smallint[], $6::bytea[], "
	"            $7::bytea[], $8::bigint[], $9::bigint[], $10::timestamptz[]) "
	"     AS a(queue_id, run_id, event_id, name, priority, argument, retry_policy, start_to_close_ms, "
	"          heartbeat_timeout_ms, schedule_deadline)",
	10, {INT4ARRAYOID, UUIDARRAYOID, INT4ARRAYOID, TEXTARRAYOID, INT2ARRAYOID, BYTEAARRAYOID, BYTEAARRAYOID,
		 INT8ARRAYOID, INT8ARRAYOID, TIMESTAMPTZARRAYOID}
};

/* a run that ended leaves no work behind, and frees its instance id */
static DexPlan cancel_timers_plan = {
	"DELETE FROM dex.workflow_inbox i USING unnest($1::uuid[], $2::integer[]) AS c(run_id, timer_id) "
	"WHERE i.run_id = c.run_id AND i.timer_id = c.timer_id",
	2, {UUIDARRAYOID, INT4ARRAYOID}
};

/*
 * A run that goes on gets a new task if unseen events remain.  "Visible" is
 * judged by the clock, not by the transaction's start: the scheduler may have
 * handed over a timer that fell due since (its task insert waited for our
 * delete of the task row), and that timer must not be left without a task.
 */
static DexPlan requeue_plan = {
	"INSERT INTO dex.workflow_task (queue_id, run_id, priority) "
	"SELECT r.queue_id, r.id, r.priority FROM dex.workflow_run r WHERE r.id = ANY ($1) "
	"AND r.status = ANY ('{CREATED,RUNNING}'::text[]) "
	"AND EXISTS (SELECT 1 FROM dex.workflow_inbox i WHERE i.run_id = r.id "
	"            AND i.visible_from <= clock_timestamp()) "
	"ORDER BY r.id ON CONFLICT DO NOTHING RETURNING queue_id",
	1, {UUIDARRAYOID}
};

/*
 * The runs, among those whose completions would end them, that have events
 * their tasks did not show: activity results, external events, children's
 * ends, cancellation requests that arrived while the tasks ran (timers do not
 * count: ending a run cancels them).
 */
static DexPlan unseen_events_plan = {
	"SELECT DISTINCT i.run_id FROM dex.workflow_inbox i WHERE i.run_id = ANY ($1) "
	"AND i.timer_id IS NULL AND i.visible_from <= clock_timestamp() "
	"AND NOT EXISTS (SELECT 1 FROM unnest($2::uuid[], $3::bigint[]) AS s(run_id, id) "
	"                WHERE s.run_id = i.run_id AND s.id = i.id)",
	3, {UUIDARRAYOID, UUIDARRAYOID, INT8ARRAYOID}
};

/* Whether the completion's commands end the run (continuing as new does not). */
static bool
ends_run(const Dex__V1__WorkflowTaskCompletion *completion)
{
	for (size_t i = 0; i < completion->n_commands; i++)
	{
		Dex__V1__Command__KindCase kind = completion->commands[i]->kind_case;

		if (kind == DEX__V1__COMMAND__KIND_COMPLETE_RUN ||
			kind == DEX__V1__COMMAND__KIND_FAIL_RUN)
			return true;
	}
	return false;
}

static void
add_inbox_ids(ArrayBuildState *runs, ArrayBuildState *ids, DexWorkflowCompletion *item)
{
	Datum	   *elems;
	int			count;

	if (!item->has_inbox)
		return;
	deconstruct_array(DatumGetArrayTypeP(item->inbox_ids), INT8OID, 8, FLOAT8PASSBYVAL,
					  TYPALIGN_DOUBLE, &elems, NULL, &count);
	for (int k = 0; k < count; k++)
	{
		dex_array_add(runs, UUIDPGetDatum(item->run_id), false);
		dex_array_add(ids, elems[k], false);
	}
}

/*
 * Complete fenced workflow tasks.  The runs are locked first (the locking
 * protocol of history.c), then the task rows are deleted with their lock
 * versions.  A task whose run ended meanwhile (a task a cancellation could
 * not withdraw, see dex_end_runs) is refused like a lost lease.
 *
 * A completion that would end its run while events the task did not show
 * have arrived is set aside (superseded): nothing of it is recorded, and the
 * run gets a new task showing them all, so that no accepted activity result
 * or event is dropped by the end of the run.  The workflow replays and
 * decides again.  With raise_lost this is not an error.
 */
void
dex_complete_workflow_tasks(DexWorkflowCompletion *items, int n, bool raise_lost)
{
	ArrayBuildState *run_ids = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	ArrayBuildState *versions = initArrayResult(INT8OID, CurrentMemoryContext, false);
	ArrayBuildState *inbox_runs = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	ArrayBuildState *inbox_ids = initArrayResult(INT8OID, CurrentMemoryContext, false);
	ArrayBuildState *ending = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	Datum		values[10];
	HTAB	   *runs;
	BatchRows	rows;
	int			n_done = 0;
	int			n_ending = 0;

	if (n == 0)
		return;
	qsort(items, n, sizeof(DexWorkflowCompletion), compare_workflow_items);
	for (int i = 0; i < n; i++)
	{
		items[i].done = false;
		items[i].superseded = false;
		items[i].has_inbox = false;
		dex_array_add(run_ids, UUIDPGetDatum(items[i].run_id), false);
		dex_array_add(versions, Int64GetDatum(items[i].lock_version), false);
	}

	/* the runs, locked */
	values[0] = dex_array_result(run_ids);
	runs = dex_load_runs(values[0], true);

	/* the fence: each task row is deleted only with its current lock version */
	values[1] = dex_array_result(versions);
	dex_spi_exec(&fence_workflow_plan, values, NULL, 0);
	dex_check_queue_use_spi(6);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		pg_uuid_t  *id = DatumGetUUIDP(dex_spi_getdatum(r, 1, &isnull));
		int64		version = dex_spi_getint64(r, 2);

		for (int i = 0; i < n; i++)
		{
			DexWorkflowCompletion *item = &items[i];
			Datum		ids;

			if (item->done || item->lock_version != version ||
				memcmp(item->run_id, id, UUID_LEN) != 0)
				continue;
			item->done = true;
			item->started_at = (TimestampTz) dex_spi_getint64(r, 3);
			item->worker_id = dex_spi_gettext_copy(r, 5);
			ids = dex_spi_getdatum(r, 4, &isnull);
			if (!isnull)
			{
				item->inbox_ids = SPI_datumTransfer(ids, false, -1);
				item->has_inbox = true;
			}
			break;
		}
	}
	dex_queue_room_freed_spi(6, 7);

	/* tasks left to runs that ended are refused; completions that end runs are checked */
	for (int i = 0; i < n; i++)
	{
		DexRun	   *run;

		if (!items[i].done)
			continue;
		run = dex_find_run(runs, items[i].run_id);
		if (run == NULL || dex_status_is_terminal(run->status))
			items[i].done = false;	/* left to a run that ended (or was deleted) */
		else if (run->cancel_requested || ends_run(items[i].completion))
		{
			dex_array_add(ending, UUIDPGetDatum(items[i].run_id), false);
			add_inbox_ids(inbox_runs, inbox_ids, &items[i]);
			n_ending++;
		}
	}
	for (int i = 0; i < n; i++)
		dex_stat_add(0, DEX_STAT_LEASES_LOST, items[i].done ? 0 : 1);
	if (raise_lost)
		for (int i = 0; i < n; i++)
			if (!items[i].done)
				dex_report_lost_lease(items[i].run_id, 0, items[i].lock_version);

	if (n_ending > 0)
	{
		ArrayBuildState *again = initArrayResult(UUIDOID, CurrentMemoryContext, false);

		values[0] = dex_array_result(ending);
		values[1] = dex_array_result(inbox_runs);
		values[2] = dex_array_result(inbox_ids);
		dex_spi_exec(&unseen_events_plan, values, NULL, 0);
		for (uint64 r = 0; r < SPI_processed; r++)
		{
			bool		isnull;
			pg_uuid_t  *id = DatumGetUUIDP(dex_spi_getdatum(r, 1, &isnull));

			for (int i = 0; i < n; i++)
				if (items[i].done && memcmp(items[i].run_id, id, UUID_LEN) == 0)
				{
					items[i].done = false;
					items[i].superseded = true;
					dex_stat_add(dex_find_run(runs, id)->queue_id, DEX_STAT_COMPLETIONS_SUPERSEDED, 1);
					dex_array_add(again, UUIDPGetDatum(items[i].run_id), false);
				}
		}
		if (again->nelems > 0)
			dex_ensure_workflow_tasks(dex_array_result(again));
		inbox_runs = initArrayResult(UUIDOID, CurrentMemoryContext, false);
		inbox_ids = initArrayResult(INT8OID, CurrentMemoryContext, false);
	}

	for (int i = 0; i < n; i++)
	{
		if (!items[i].done)
			continue;
		add_inbox_ids(inbox_runs, inbox_ids, &items[i]);
		n_done++;
	}
	if (n_done == 0)
		return;

	/* the events the workers were shown, moved out of the inbox */
	dex_load_inbox(runs, dex_array_result(inbox_runs), dex_array_result(inbox_ids), true);

	init_batch_rows(&rows);
	for (int i = 0; i < n; i++)
	{
		DexRun	   *run;

		if (!items[i].done)
			continue;
		run = dex_find_run(runs, items[i].run_id);
		if (run == NULL)
			elog(ERROR, "workflow run %s of a workflow task does not exist",
				 dex_uuid_to_cstring(items[i].run_id));
		complete_one_workflow_task(&items[i], run, &rows);
		dex_stat_add(run->queue_id, DEX_STAT_TASKS_COMPLETED, 1);
	}

	if (rows.n_continued > 0)
	{
		values[0] = dex_array_result(rows.n_run_id);
		values[1] = dex_array_result(rows.n_argument);
		dex_spi_exec(&continue_as_new_plan, values, NULL, 0);
	}

	values[0] = dex_array_result(rows.h_run_id);
	values[1] = dex_array_result(rows.h_sequence);
	values[2] = dex_array_result(rows.h_events);
	dex_spi_exec(&insert_history_plan, values, NULL, 0);

	values[0] = dex_array_result(rows.r_id);
	values[1] = dex_array_result(rows.r_status);
	values[2] = dex_array_result(rows.r_history_length);
	values[3] = dex_array_result(rows.r_last_event_id);
	values[4] = dex_array_result(rows.r_custom_status);
	values[5] = dex_array_result(rows.r_result);
	values[6] = dex_array_result(rows.r_failure);
	values[7] = dex_array_result(rows.r_started_at);
	values[8] = dex_array_result(rows.r_completed_at);
	values[9] = dex_array_result(rows.r_old_history_length);
	dex_spi_exec(&update_runs_plan, values, NULL, 0);
	if (SPI_processed != (uint64) rows.n_runs)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("workflow runs changed while their workflow tasks were completed"),
				 errhint("Retry the completion.")));

	if (rows.n_activities > 0)
	{
		values[0] = dex_array_result(rows.a_queue_id);
		values[1] = dex_array_result(rows.a_run_id);
		values[2] = dex_array_result(rows.a_event_id);
		values[3] = dex_array_result(rows.a_name);
		values[4] = dex_array_result(rows.a_priority);
		values[5] = dex_array_result(rows.a_argument);
		values[6] = dex_array_result(rows.a_retry_policy);
		values[7] = dex_array_result(rows.a_start_to_close);
		values[8] = dex_array_result(rows.a_heartbeat_timeout);
		values[9] = dex_array_result(rows.a_deadline);
		dex_spi_exec(&insert_activities_plan, values, NULL, 0);
	}

	dex_inbox_batch_flush(&rows.inbox);

	if (rows.n_cancelled > 0)
	{
		values[0] = dex_array_result(rows.c_run_id);
		values[1] = dex_array_result(rows.c_timer_id);
		dex_spi_exec(&cancel_timers_plan, values, NULL, 0);
	}

	if (rows.n_ended > 0)
		dex_end_runs(dex_array_result(rows.ended));
	if (rows.n_continued > 0)
		dex_ensure_workflow_tasks(dex_array_result(rows.needs_task));
	if (rows.n_open > 0)
	{
		values[0] = dex_array_result(rows.open);
		dex_spi_exec(&requeue_plan, values, NULL, 0);
		dex_queue_work_added_spi(1);
		dex_stat_count_spi(DEX_STAT_TASKS_CREATED, 1);
	}
}

/* ----------------------------------------------------------------
 * Completing activity tasks
 * ----------------------------------------------------------------
 */

static DexPlan fence_activities_plan = {
	"DELETE FROM dex.activity_task t "
	"USING unnest($1::uuid[], $2::integer[], $3::bigint[]) AS b(run_id, event_id, lock_version) "
	"WHERE t.run_id = b.run_id AND t.event_id = b.event_id AND t.lock_version = b.lock_version "
	"AND t.locked_by IS NOT NULL "
	"RETURNING t.run_id, t.event_id, t.lock_version, t.attempt, t.queue_id, " DEX_QUEUE_LIMITED_SQL,
	3, {UUIDARRAYOID, INT4ARRAYOID, INT8ARRAYOID}
};

/* an activity that succeeded after retries no longer needs its retry record */
static DexPlan forget_retries_plan = {
	"DELETE FROM dex.activity_retry r USING unnest($1::uuid[], $2::integer[]) AS d(run_id, event_id) "
	"WHERE r.run_id = d.run_id AND r.event_id = d.event_id",
	2, {UUIDARRAYOID, INT4ARRAYOID}
};

void
dex_complete_activity_tasks(DexActivityCompletion *items, int n, bool raise_lost)
{
	ArrayBuildState *retried_runs = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	ArrayBuildState *retried_ids = initArrayResult(INT4OID, CurrentMemoryContext, false);
	int			n_retried = 0;
	ArrayBuildState *run_ids = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	ArrayBuildState *task_ids = initArrayResult(INT4OID, CurrentMemoryContext, false);
	ArrayBuildState *versions = initArrayResult(INT8OID, CurrentMemoryContext, false);
	Datum		values[3];
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	DexInboxBatch inbox;
	int32	   *attempts = palloc0(sizeof(int32) * Max(n, 1));
	bool	   *ended = palloc(sizeof(bool) * Max(n, 1));

	if (n == 0)
		return;
	qsort(items, n, sizeof(DexActivityCompletion), compare_activity_items);
	for (int i = 0; i < n; i++)
	{
		items[i].done = false;
		dex_array_add(run_ids, UUIDPGetDatum(items[i].run_id), false);
		dex_array_add(task_ids, Int32GetDatum(items[i].task_id), false);
		dex_array_add(versions, Int64GetDatum(items[i].lock_version), false);
	}

	/*
	 * The runs are locked to add events (the locking protocol of history.c);
	 * a task left to a run that ended is refused, like a lost lease.
	 */
	values[0] = dex_array_result(run_ids);
	dex_lock_runs(values[0], true);
	for (int i = 0; i < n; i++)
		ended[i] = true;		/* a run that is gone counts as ended */
	{
		int			k = 0;

		for (uint64 r = 0; r < SPI_processed; r++)
		{
			bool		isnull;
			pg_uuid_t  *id = DatumGetUUIDP(dex_spi_getdatum(r, 1, &isnull));
			char	   *status = dex_spi_gettext_copy(r, 2);

			for (; k < n && memcmp(items[k].run_id, id, UUID_LEN) < 0; k++)
				;
			for (; k < n && memcmp(items[k].run_id, id, UUID_LEN) == 0; k++)
				ended[k] = dex_status_is_terminal(status);
		}
	}

	values[1] = dex_array_result(task_ids);
	values[2] = dex_array_result(versions);
	dex_spi_exec(&fence_activities_plan, values, NULL, 0);
	dex_check_queue_use_spi(5);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		pg_uuid_t  *id = DatumGetUUIDP(dex_spi_getdatum(r, 1, &isnull));
		int32		task_id = (int32) dex_spi_getint64(r, 2);
		int64		version = dex_spi_getint64(r, 3);

		for (int i = 0; i < n; i++)
		{
			if (items[i].done || items[i].task_id != task_id ||
				items[i].lock_version != version ||
				memcmp(items[i].run_id, id, UUID_LEN) != 0)
				continue;
			if (ended[i])
				break;
			items[i].done = true;
			attempts[i] = (int32) dex_spi_getint64(r, 4);
			dex_stat_add((int32) dex_spi_getint64(r, 5), DEX_STAT_TASKS_COMPLETED, 1);
			if (attempts[i] > 1)
			{
				dex_array_add(retried_runs, UUIDPGetDatum(items[i].run_id), false);
				dex_array_add(retried_ids, Int32GetDatum(items[i].task_id), false);
				n_retried++;
			}
			break;
		}
	}
	dex_queue_room_freed_spi(5, 6);
	for (int i = 0; i < n; i++)
		dex_stat_add(0, DEX_STAT_LEASES_LOST, items[i].done ? 0 : 1);
	if (raise_lost)
		for (int i = 0; i < n; i++)
			if (!items[i].done)
				dex_report_lost_lease(items[i].run_id, items[i].task_id, items[i].lock_version);

	if (n_retried > 0)
	{
		values[0] = dex_array_result(retried_runs);
		values[1] = dex_array_result(retried_ids);
		dex_spi_exec(&forget_retries_plan, values, NULL, 0);
	}

	dex_inbox_batch_init(&inbox);
	for (int i = 0; i < n; i++)
	{
		Dex__V1__WorkflowEvent *ev;

		if (!items[i].done)
			continue;
		ev = dex_new_event(0, now);
		ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_COMPLETED;
		ev->activity_task_completed = palloc(sizeof(Dex__V1__ActivityTaskCompleted));
		dex__v1__activity_task_completed__init(ev->activity_task_completed);
		ev->activity_task_completed->activity_task_created_event_id = items[i].task_id;
		ev->activity_task_completed->result = items[i].result;
		ev->activity_task_completed->attempt = attempts[i];
		dex_inbox_batch_add(&inbox, items[i].run_id, ev, now);
	}
	dex_inbox_batch_flush(&inbox);
}
