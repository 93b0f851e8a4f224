/*-------------------------------------------------------------------------
 *
 * commands_apply.c
 *	  One fenced workflow task of a batch: the events it records, and each
 *	  kind of command applied.
 *
 * dex_apply_workflow_task records what the task was shown (dex_build_new_events)
 * and WorkflowTaskCompleted (the command ids were checked against the
 * history before the fence), applies the commands in order, then starts the run over
 * after continueAsNew.  A cancellation request does not end the run by
 * itself: the workflow ends it with cancelRun (apply_cancel_run).
 * Each command records its event, with the command's id, and adds the rows
 * it needs to the batch (engine/completion.h): new activity tasks, timers
 * and other inbox rows, cancelled timers; the batch writes them
 * (workflow_rows.c).  A child run is the exception: its row and first task
 * are inserted at once, once its instance id is claimed.
 *
 * What makes a command malformed whatever its run was checked as the
 * completion was parsed (dex_check_commands, commands.c); the checks here
 * need the database: that a queue exists and the caller may use it
 * (access.c), the run's history, its pending work.  A failed check is an
 * error, and the whole call writes nothing.  Runs in the caller's
 * transaction and SPI connection; the caller holds the run's lock and has
 * fenced its task (the locking protocol in src/README.md).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/uuid.h"

#include "engine/completion.h"

/* Record event "ev" with id "id" (a command's, or 0) in the task's events */
static Dex__V1__WorkflowEvent *
record_event(DexAppliedTask *c, int32 id, Dex__V1__WorkflowEvent *ev)
{
	ev->id = id;
	if (c->n_events == c->max_events)
	{
		c->max_events *= 2;
		c->events = repalloc(c->events, sizeof(*c->events) * c->max_events);
	}
	c->events[c->n_events++] = ev;
	return ev;
}

/* ----------------------------------------------------------------
 * Activities, timers, external events
 * ----------------------------------------------------------------
 */

static void
apply_schedule_activity(DexAppliedTask *c, const Dex__V1__Command *cmd)
{
	const Dex__V1__ScheduleActivity *sa = cmd->schedule_activity;
	DexQueue	queue;
	Dex__V1__RetryPolicy *policy;
	Dex__V1__WorkflowEvent *ev;

	queue = dex_require_queue(sa->queue, false);
	policy = dex_effective_retry_policy(sa->retry_policy);
	ev = record_event(c, cmd->id, dex_event_activity_task_created(c->now, sa));
	dex_activity_rows_add(&c->rows->activities, queue.id, c->run_id, cmd->id,
						  ev->activity_task_created, policy, c->now);
	c->started_work++;
	dex_queue_keyed_tasks_added(queue.id, dex_task_key(sa->name, 0), 1);
	dex_stat_add(queue.id, DEX_STAT_TASKS_CREATED, 1);
}

/* The TimerElapsed row of timer "id", visible at fire_at */
static void
add_timer_elapsed(DexAppliedTask *c, int32 id, TimestampTz fire_at)
{
	dex_inbox_batch_add(&c->rows->inbox, c->run_id, dex_event_timer_elapsed(fire_at, id), fire_at);
}

static void
apply_start_timer(DexAppliedTask *c, const Dex__V1__Command *cmd)
{
	const Dex__V1__StartTimer *st = cmd->start_timer;
	TimestampTz fire_at = c->now + dex_duration_ms(st->delay) * 1000;

	record_event(c, cmd->id, dex_event_timer_created(c->now, st->name, fire_at));
	add_timer_elapsed(c, cmd->id, fire_at);
	c->started_work++;
}

/*
 * Waiting for an external event: the wait is recorded; with a timeout, a
 * timer with the command's id resolves it as timed out if no event came
 * first (the workflow tells which from the order of its events).
 */
static void
apply_wait_external_event(DexAppliedTask *c, const Dex__V1__Command *cmd)
{
	const Dex__V1__WaitExternalEvent *w = cmd->wait_external_event;
	TimestampTz timeout_at = 0;

	if (w->timeout)
		timeout_at = c->now + dex_duration_ms(w->timeout) * 1000;
	record_event(c, cmd->id,
				 dex_event_external_event_wait_started(c->now, w->event_id,
													   w->timeout ? &timeout_at : NULL));
	if (w->timeout)
		add_timer_elapsed(c, cmd->id, timeout_at);
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
run_started_timer(DexAppliedTask *c, int32 id)
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
apply_cancel_timer(DexAppliedTask *c, const Dex__V1__Command *cmd)
{
	int32		timer = cmd->cancel_timer->timer_created_event_id;

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
	record_event(c, cmd->id, dex_event_timer_cancelled(c->now, timer));
	dex_array_add(c->rows->c_run_id, UUIDPGetDatum(c->run_id), false);
	dex_array_add(c->rows->c_timer_id, Int32GetDatum(timer), false);
	c->rows->n_cancelled++;
}

/*
 * Signalling another run: the event goes through dex.send_external_event's
 * path (signals.c) without locking the target, as this task holds its own
 * run's lock.  The target is the run with that id, or the active run of the
 * instance id on the command's queue (this run's when not given); a queue or
 * run the worker's role may not use, or that does not exist, is "not found".
 * externalRunSignalled records the outcome with the command; the run's next
 * task shows it (externalRunSignalResult), so that code awaiting it goes on.
 */
static void
apply_signal_external_run(DexAppliedTask *c, const Dex__V1__Command *cmd)
{
	const Dex__V1__SignalExternalRun *se = cmd->signal_external_run;
	pg_uuid_t  *target = NULL;
	char	   *target_text = NULL;
	Dex__V1__SignalOutcome outcome = DEX__V1__SIGNAL_OUTCOME__SIGNAL_OUTCOME_TARGET_NOT_FOUND;

	if (se->run_id && se->run_id[0] != '\0')
		target = DatumGetUUIDP(DirectFunctionCall1(uuid_in, CStringGetDatum(se->run_id)));
	else
	{
		DexQueue	queue;
		bool		known;

		if (se->queue && se->queue[0] != '\0')
			known = dex_lookup_queue(se->queue, &queue) && queue.is_workflow && dex_may_use_queue(&queue);
		else
			known = dex_queue_by_id(c->run->queue_id, &queue);
		if (known)
		{
			Datum		id = Int32GetDatum(queue.id);

			if (dex_find_instance(PointerGetDatum(construct_array(&id, 1, INT4OID, 4, true, TYPALIGN_INT)),
								  se->instance_id) > 0)
			{
				bool		isnull;

				target = palloc(sizeof(pg_uuid_t));
				memcpy(target, DatumGetUUIDP(dex_spi_getdatum(0, 1, &isnull)), sizeof(pg_uuid_t));
			}
		}
	}
	if (target != NULL)
	{
		char	   *event_id = se->event_id;
		Dex__V1__Payload *payload = se->payload;

		dex_deliver_external_events(1, &target, &event_id, &payload, false, &outcome);
		if (outcome != DEX__V1__SIGNAL_OUTCOME__SIGNAL_OUTCOME_TARGET_NOT_FOUND)
			target_text = dex_uuid_to_cstring(target);
	}
	record_event(c, cmd->id, dex_event_external_run_signalled(c->now, se, target_text, outcome));
	dex_inbox_batch_add(&c->rows->inbox, c->run_id,
						dex_event_external_run_signal_result(c->now, cmd->id, target_text, outcome),
						c->now);
}

/* ----------------------------------------------------------------
 * Continuing as new, child runs
 * ----------------------------------------------------------------
 */

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
apply_continue_as_new(DexAppliedTask *c, const Dex__V1__Command *cmd)
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

/*
 * [0] before 1.4: no parent close policy ($13); [2] 1.6: the task with the
 * child's workflow and version
 */
#define INSERT_CHILD_SQL(policy_col, policy, task_cols, task_vals) \
	"WITH r AS (INSERT INTO dex.workflow_run (id, workflow_name, workflow_version, queue_id, instance_id, " \
	"                   priority, labels, concurrency_key, argument, parent_id, parent_event_id, " \
	"                   created_at" policy_col ") " \
	"           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, now()" policy ") RETURNING id) " \
	"INSERT INTO dex.workflow_task (queue_id, run_id, priority" task_cols ") " \
	"SELECT $4, id, $6" task_vals " FROM r WHERE $12"
static DexPlan insert_child_plans[3] = {
	{INSERT_CHILD_SQL("", "", "", ""), 12,
		{UUIDOID, TEXTOID, INT4OID, INT4OID, TEXTOID, INT2OID, JSONBOID, TEXTOID, BYTEAOID, UUIDOID, INT4OID,
	BOOLOID}},
	{INSERT_CHILD_SQL(", parent_close_policy", ", $13", "", ""), 13,
		{UUIDOID, TEXTOID, INT4OID, INT4OID, TEXTOID, INT2OID, JSONBOID, TEXTOID, BYTEAOID, UUIDOID, INT4OID,
	BOOLOID, TEXTOID}},
	{INSERT_CHILD_SQL(", parent_close_policy", ", $13", DEX_TASK_RUN_COLS, ", $2, $3"), 13,
		{UUIDOID, TEXTOID, INT4OID, INT4OID, TEXTOID, INT2OID, JSONBOID, TEXTOID, BYTEAOID, UUIDOID, INT4OID,
	BOOLOID, TEXTOID}}
};

/* The parent close policy column's value: NULL is terminate, the default */
static const char *
close_policy_text(Dex__V1__ParentClosePolicy policy)
{
	switch (policy)
	{
		case DEX__V1__PARENT_CLOSE_POLICY__PARENT_CLOSE_POLICY_REQUEST_CANCEL:
			return "REQUEST_CANCEL";
		case DEX__V1__PARENT_CLOSE_POLICY__PARENT_CLOSE_POLICY_ABANDON:
			return "ABANDON";
		default:
			return NULL;
	}
}

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

/* A child run whose instance id is taken fails at once: its parent is told */
static void
child_instance_taken(DexAppliedTask *c, int32 id, const char *instance_id, const char *queue)
{
	Dex__V1__Failure *f;

	f = dex_new_failure(psprintf("workflow instance \"%s\" already has an active run on queue \"%s\"",
								 instance_id, queue),
						"dex.InstanceAlreadyActive", true);
	dex_inbox_batch_add(&c->rows->inbox, c->run_id, dex_event_child_run_failed(c->now, id, f), c->now);
}

/* The child's row, and its first workflow task unless it waits for its key */
static void
insert_child_run(DexAppliedTask *c, int32 id, pg_uuid_t *child_id, const Dex__V1__StartChildRun *sc,
				 const DexQueue *queue, int32 version, int32 priority, Jsonb *labels)
{
	bool		has_instance = sc->instance_id && sc->instance_id[0] != '\0';
	bool		has_key = sc->concurrency_key && sc->concurrency_key[0] != '\0';
	Datum		values[13];
	char		nulls[13] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	const char *policy = close_policy_text(sc->parent_close_policy);
	int			v = dex_schema_1_6() ? 2 : dex_schema_1_4();

	values[0] = UUIDPGetDatum(child_id);
	values[1] = CStringGetTextDatum(sc->workflow_name);
	values[2] = Int32GetDatum(version);
	values[3] = Int32GetDatum(queue->id);
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
	values[11] = BoolGetDatum(!has_key || dex_admit_run(child_id, queue->id, sc->concurrency_key, priority));
	values[12] = policy ? CStringGetTextDatum(policy) : (Datum) 0;
	nulls[12] = policy ? ' ' : 'n';
	if (v == 0 && (policy != NULL || sc->execution_timeout != NULL))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("child run %d: a parent close policy and an execution timeout need dex 1.4", id),
				 errhint("Run ALTER EXTENSION dex UPDATE.")));
	dex_spi_exec(&insert_child_plans[v], values, nulls, 0);
	dex_queue_keyed_tasks_added(queue->id, dex_task_key(sc->workflow_name, version), 1);
	dex_stat_add(queue->id, DEX_STAT_TASKS_CREATED, (int64) SPI_processed);
	if (sc->execution_timeout != NULL)
		dex_add_run_timers(dex_uuid_array(&child_id, 1), "DEADLINE",
						   TimestampTzPlusMilliseconds(c->now, dex_duration_ms(sc->execution_timeout)));
}

/*
 * Starting a child run: created at once, in the parent's transaction, on
 * its own queue (the parent's unless given), with the parent's priority and
 * labels unless given.  When the child ends, the parent receives
 * childRunCompleted or childRunFailed; when the parent ends, active
 * children follow their parent close policy (lifecycle.c).  A child whose
 * instance id is taken fails at once.
 */
static void
apply_start_child_run(DexAppliedTask *c, const Dex__V1__Command *cmd)
{
	const Dex__V1__StartChildRun *sc = cmd->start_child_run;
	DexQueue	queue;
	pg_uuid_t  *child_id = dex_new_uuid();
	int32		version = sc->workflow_version > 0 ? sc->workflow_version : 1;
	int32		priority = sc->priority > 0 ? sc->priority : c->run->priority;
	Jsonb	   *labels = sc->n_labels > 0 ? labels_jsonb(sc->labels, sc->n_labels) : c->run->labels;
	Dex__V1__WorkflowEvent *ev;

	if (sc->queue && sc->queue[0] != '\0')
		queue = dex_require_queue(sc->queue, true);
	else
		queue = dex_require_queue(dex_queue_name(c->run->queue_id), true);
	/* a worker may start a definition's run only as its role may (the interpreter's call steps are checked for the calling definition's owner, interpret.c) */
	dex_check_definition_start(sc->workflow_name, version, dex_access_caller());

	ev = record_event(c, cmd->id,
					  dex_event_child_run_created(c->now, sc, version, queue.name, priority));
	if (sc->instance_id && sc->instance_id[0] != '\0' &&
		!dex_claim_instance(queue.id, sc->instance_id, child_id))
	{
		child_instance_taken(c, cmd->id, sc->instance_id, queue.name);
		return;
	}
	ev->child_run_created->run_id = dex_uuid_to_cstring(child_id);
	insert_child_run(c, cmd->id, child_id, sc, &queue, version, priority, labels);
	dex_runs_started();			/* its commit is durable before it is seen (wakeup.c) */
	c->started_work++;
}

/* ----------------------------------------------------------------
 * Each command, and the task
 * ----------------------------------------------------------------
 */

/*
 * Ending the run CANCELLED: only once its cancellation was requested.  A
 * cancellation is a request the workflow handles: the run stays active while
 * its cleanup (activities, timers, children) runs, and ends when the workflow
 * sends cancelRun (or completes or fails it instead).  The reason is the
 * request's, when this task shows it.
 */
static void
apply_cancel_run(DexAppliedTask *c, const Dex__V1__Command *cmd)
{
	char	   *reason = "";

	if (!c->run->cancel_requested)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("command cancelRun of run %s: its cancellation was not requested",
						dex_uuid_to_cstring(c->run_id)),
				 errhint("A workflow ends its run CANCELLED after dex.cancel_run; to stop on its own, use completeRun or failRun.")));
	for (size_t i = 0; i < c->n_events; i++)
		if (c->events[i]->subject_case == DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_CANCEL_REQUESTED)
			reason = c->events[i]->run_cancel_requested->reason;
	record_event(c, cmd->id, dex_event_run_cancelled(c->now, reason, NULL));
	c->new_status = "CANCELLED";
}

static void
apply_command(DexAppliedTask *c, const Dex__V1__Command *cmd)
{
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
			record_event(c, cmd->id,
						 dex_event_side_effect_executed(c->now, cmd->record_side_effect->name,
														cmd->record_side_effect->result));
			break;
		case DEX__V1__COMMAND__KIND_SIGNAL_EXTERNAL_RUN:
			apply_signal_external_run(c, cmd);
			break;
		case DEX__V1__COMMAND__KIND_RECORD_MARKER:
			record_event(c, cmd->id,
						 dex_event_marker_recorded(c->now, cmd->record_marker->name,
												   cmd->record_marker->details));
			break;
		case DEX__V1__COMMAND__KIND_PUBLISH_EVENT:
			/* published, as every event, when the history batch is written */
			record_event(c, cmd->id,
						 dex_event_event_published(c->now, cmd->publish_event->name,
												   cmd->publish_event->payload));
			break;
		case DEX__V1__COMMAND__KIND_SET_CUSTOM_STATUS:
			record_event(c, cmd->id,
						 dex_event_custom_status_set(c->now, cmd->set_custom_status->custom_status));
			c->custom_status = cmd->set_custom_status->custom_status[0] ?
				cmd->set_custom_status->custom_status : NULL;
			break;
		case DEX__V1__COMMAND__KIND_COMPLETE_RUN:
			record_event(c, cmd->id, dex_event_run_completed(c->now, cmd->complete_run->result));
			c->result = cmd->complete_run->result;
			c->new_status = "COMPLETED";
			break;
		case DEX__V1__COMMAND__KIND_FAIL_RUN:
			record_event(c, cmd->id, dex_event_run_failed(c->now, cmd->fail_run->failure));
			c->failure = cmd->fail_run->failure;
			c->new_status = "FAILED";
			break;
		case DEX__V1__COMMAND__KIND_CANCEL_RUN:
			apply_cancel_run(c, cmd);
			break;
		default:
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("command %s is not supported yet", dex_command_name(cmd))));
	}
}

/* The encoded size of the task's batch of events */
static int64
batch_bytes(DexAppliedTask *c)
{
	Dex__V1__EventBatch batch;

	dex__v1__event_batch__init(&batch);
	batch.events = c->events;
	batch.n_events = c->n_events;
	return (int64) protobuf_c_message_get_packed_size((ProtobufCMessage *) &batch);
}

/*
 * A run's history is bounded (dex.max_history_events, dex.max_history_size):
 * a task that takes it past 80% of a limit warns (the worker and the server
 * log), and one that would take it past a limit fails the run instead of
 * letting it go on: runFailed, type dex.HistoryLimitExceeded (its commands'
 * work is withdrawn with the run's).  A task that ends the run, or continues
 * it as new (which starts its history over), is not held to them.
 */
static void
check_history_limits(DexAppliedTask *c)
{
	int64		events_before = c->continued ? 0 : c->run->history_length;
	int64		bytes_before = c->continued ? 0 : c->run->history_bytes;
	int64		events = events_before + (int64) c->n_events;
	int64		bytes;
	int64		max_events = dex_max_history_events;
	int64		max_bytes = dex_max_history_size;

	c->history_bytes = bytes_before + batch_bytes(c);
	bytes = c->history_bytes;
	if (c->new_status != NULL || c->continued)
		return;
	if ((max_events > 0 && events > max_events) || (max_bytes > 0 && bytes > max_bytes))
	{
		c->failure = dex_new_failure(psprintf("the run's history would hold %lld events and %lld bytes, past the limit of "
											  "%lld events and %lld bytes (dex.max_history_events, dex.max_history_size): "
											  "continue-as-new starts a history over",
											  (long long) events, (long long) bytes,
											  (long long) max_events, (long long) max_bytes),
									 "dex.HistoryLimitExceeded", true);
		record_event(c, 0, dex_event_run_failed(c->now, c->failure));
		c->new_status = "FAILED";
		c->history_bytes += 64;	/* about the runFailed event */
		return;
	}
	if ((max_events > 0 && events * 5 > max_events * 4 && events_before * 5 <= max_events * 4) ||
		(max_bytes > 0 && bytes * 5 > max_bytes * 4 && bytes_before * 5 <= max_bytes * 4))
		ereport(WARNING,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("the history of workflow run %s holds %lld events and %lld bytes, past 80%% of its limit",
						dex_uuid_to_cstring(c->run_id), (long long) events, (long long) bytes),
				 errdetail("At %lld events or %lld bytes (dex.max_history_events, dex.max_history_size) the run fails.",
						   (long long) max_events, (long long) max_bytes),
				 errhint("Have the workflow continue as new, which starts its history over.")));
}

/*
 * The run starts over after continueAsNew: its history is replaced by one
 * event, and its next task shows RunCreated with the new argument.
 */
static void
start_over(DexAppliedTask *c)
{
	c->events[0] = dex_event_run_continued_as_new(c->now, c->continue_argument,
												  c->run->generation + 1);
	c->n_events = 1;
	c->last_event_id = 0;
}

/*
 * One fenced workflow task of run "run": the events it records, in
 * task->events, and what its commands did, in task and in the batch's rows.
 */
void
dex_apply_workflow_task(DexAppliedTask *c, DexWorkflowCompletion *item, DexRun *run,
						DexBatchRows *rows)
{
	int			n_commands = (int) item->completion->n_commands;

	memset(c, 0, sizeof(*c));
	c->run_id = item->run_id;
	c->run = run;
	c->rows = rows;
	c->now = GetCurrentTransactionStartTimestamp();
	c->custom_status = run->custom_status;
	c->last_event_id = run->last_event_id;
	c->events = dex_build_new_events(run, item->worker_id, item->started_at,
									 n_commands + 2, &c->n_events);
	c->max_events = c->n_events + n_commands + 2;

	record_event(c, 0, dex_event_workflow_task_completed(c->now));
	/* command ids were checked before the fence (complete_workflow.c) */
	for (int i = 0; i < n_commands; i++)
		apply_command(c, item->completion->commands[i]);
	if (c->continued)
		start_over(c);
	check_history_limits(c);
}
