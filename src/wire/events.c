/*-------------------------------------------------------------------------
 *
 * events.c
 *	  Constructors of the workflow events dex records, one per event kind,
 *	  and of the failures dex itself reports.
 *
 * Every event has an id (its place in the run's history) and a timestamp.
 * The constructors make events with id 0: an event that records a command
 * takes the command's id from its caller, and every other one keeps 0 (the
 * workflow numbers what its history shows).  They fill the envelope and the
 * subject, allocated in CurrentMemoryContext; the subject points to the
 * strings and messages it is given, it does not copy them.  Nothing here
 * knows of tables, transactions or locks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "wire/wire.h"

/* A stored event (an inbox row's, dex.v1.WorkflowEvent), as the inbox keeps them */
Dex__V1__WorkflowEvent *
dex_inbox_event_unpack(bytea *data)
{
	return (Dex__V1__WorkflowEvent *)
		dex_pb_unpack(&dex__v1__workflow_event__descriptor,
					  (uint8 *) VARDATA_ANY(data), VARSIZE_ANY_EXHDR(data), "inbox event");
}

/* An event with no subject yet. */
Dex__V1__WorkflowEvent *
dex_new_event(int32 id, TimestampTz ts)
{
	Dex__V1__WorkflowEvent *event = palloc(sizeof(*event));

	dex__v1__workflow_event__init(event);
	event->id = id;
	event->timestamp = dex_pb_timestamp(ts);
	return event;
}

/*
 * ev = a new event at ts whose subject is its member "field" (the oneof case
 * CASE), an initialized empty message.
 */
#define NEW_EVENT(ev, ts, field, CASE) \
	do { \
		(ev) = dex_new_event(0, (ts)); \
		(ev)->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_##CASE; \
		(ev)->field = palloc(sizeof(*(ev)->field)); \
		dex__v1__##field##__init((ev)->field); \
	} while (0)

/* A failure dex reports itself ("type" is one of dex's, as "dex.Cancelled"). */
Dex__V1__Failure *
dex_new_failure(const char *message, const char *type, bool terminal)
{
	Dex__V1__Failure *failure = palloc(sizeof(*failure));

	dex__v1__failure__init(failure);
	failure->message = unconstify(char *, message);
	failure->type = unconstify(char *, type);
	failure->terminal = terminal;
	return failure;
}

/* ----------------------------------------------------------------
 * Workflow tasks
 * ----------------------------------------------------------------
 */

Dex__V1__WorkflowEvent *
dex_event_workflow_task_started(TimestampTz ts, char *worker_id)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, workflow_task_started, WORKFLOW_TASK_STARTED);
	ev->workflow_task_started->worker_id = worker_id;
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_workflow_task_completed(TimestampTz ts)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, workflow_task_completed, WORKFLOW_TASK_COMPLETED);
	return ev;
}

/* ----------------------------------------------------------------
 * The run
 * ----------------------------------------------------------------
 */

/* "subject" is made from the run's row by its caller */
Dex__V1__WorkflowEvent *
dex_event_run_created(TimestampTz ts, Dex__V1__RunCreated *subject)
{
	Dex__V1__WorkflowEvent *ev = dex_new_event(0, ts);

	ev->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_CREATED;
	ev->run_created = subject;
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_run_started(TimestampTz ts)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, run_started, RUN_STARTED);
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_run_completed(TimestampTz ts, Dex__V1__Payload *result)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, run_completed, RUN_COMPLETED);
	ev->run_completed->result = result;
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_run_failed(TimestampTz ts, Dex__V1__Failure *failure)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, run_failed, RUN_FAILED);
	ev->run_failed->failure = failure;
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_run_cancel_requested(TimestampTz ts, char *reason, char *by)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, run_cancel_requested, RUN_CANCEL_REQUESTED);
	ev->run_cancel_requested->reason = reason;
	ev->run_cancel_requested->by = by;
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_run_cancelled(TimestampTz ts, char *reason, char *by)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, run_cancelled, RUN_CANCELLED);
	ev->run_cancelled->reason = reason;
	ev->run_cancelled->by = by;
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_run_terminated(TimestampTz ts, char *reason, char *by)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, run_terminated, RUN_TERMINATED);
	ev->run_terminated->reason = reason;
	ev->run_terminated->by = by;
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_run_timed_out(TimestampTz ts, TimestampTz deadline)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, run_timed_out, RUN_TIMED_OUT);
	ev->run_timed_out->deadline = dex_pb_timestamp(deadline);
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_run_suspended(TimestampTz ts, char *reason, char *by)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, run_suspended, RUN_SUSPENDED);
	ev->run_suspended->reason = reason;
	ev->run_suspended->by = by;
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_run_resumed(TimestampTz ts, char *reason, char *by)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, run_resumed, RUN_RESUMED);
	ev->run_resumed->reason = reason;
	ev->run_resumed->by = by;
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_run_continued_as_new(TimestampTz ts, Dex__V1__Payload *argument, int32 generation)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, run_continued_as_new, RUN_CONTINUED_AS_NEW);
	ev->run_continued_as_new->argument = argument;
	ev->run_continued_as_new->generation = generation;
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_custom_status_set(TimestampTz ts, char *custom_status)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, custom_status_set, CUSTOM_STATUS_SET);
	ev->custom_status_set->custom_status = custom_status;
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_side_effect_executed(TimestampTz ts, char *name, Dex__V1__Payload *result)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, side_effect_executed, SIDE_EFFECT_EXECUTED);
	ev->side_effect_executed->name = name;
	ev->side_effect_executed->result = result;
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_marker_recorded(TimestampTz ts, char *name, Dex__V1__Payload *details)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, marker_recorded, MARKER_RECORDED);
	ev->marker_recorded->name = name;
	ev->marker_recorded->details = details;
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_event_published(TimestampTz ts, char *name, Dex__V1__Payload *payload)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, event_published, EVENT_PUBLISHED);
	ev->event_published->name = name;
	ev->event_published->payload = payload;
	return ev;
}

/* ----------------------------------------------------------------
 * Activities
 * ----------------------------------------------------------------
 */

/*
 * The activity a scheduleActivity command creates, its retry policy as the
 * workflow gave it (replay compares it), not the effective one.
 */
Dex__V1__WorkflowEvent *
dex_event_activity_task_created(TimestampTz ts, const Dex__V1__ScheduleActivity *command)
{
	Dex__V1__WorkflowEvent *ev;
	Dex__V1__ActivityTaskCreated *created;

	NEW_EVENT(ev, ts, activity_task_created, ACTIVITY_TASK_CREATED);
	created = ev->activity_task_created;
	created->name = command->name;
	created->queue = command->queue;
	created->argument = command->argument;
	created->retry_policy = command->retry_policy;
	created->priority = command->priority;
	created->start_to_close_timeout = command->start_to_close_timeout;
	created->schedule_to_close_timeout = command->schedule_to_close_timeout;
	created->heartbeat_timeout = command->heartbeat_timeout;
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_activity_task_completed(TimestampTz ts, int32 created_event_id,
								  Dex__V1__Payload *result, int32 attempt)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, activity_task_completed, ACTIVITY_TASK_COMPLETED);
	ev->activity_task_completed->activity_task_created_event_id = created_event_id;
	ev->activity_task_completed->result = result;
	ev->activity_task_completed->attempt = attempt;
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_activity_task_failed(TimestampTz ts, int32 created_event_id,
							   Dex__V1__Failure *failure, int32 attempts)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, activity_task_failed, ACTIVITY_TASK_FAILED);
	ev->activity_task_failed->activity_task_created_event_id = created_event_id;
	ev->activity_task_failed->failure = failure;
	ev->activity_task_failed->attempts = attempts;
	return ev;
}

/* ----------------------------------------------------------------
 * Timers
 * ----------------------------------------------------------------
 */

Dex__V1__WorkflowEvent *
dex_event_timer_created(TimestampTz ts, char *name, TimestampTz elapse_at)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, timer_created, TIMER_CREATED);
	ev->timer_created->name = name;
	ev->timer_created->elapse_at = dex_pb_timestamp(elapse_at);
	return ev;
}

/* "ts" is when the timer elapses */
Dex__V1__WorkflowEvent *
dex_event_timer_elapsed(TimestampTz ts, int32 timer_created_event_id)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, timer_elapsed, TIMER_ELAPSED);
	ev->timer_elapsed->timer_created_event_id = timer_created_event_id;
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_timer_cancelled(TimestampTz ts, int32 timer_created_event_id)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, timer_cancelled, TIMER_CANCELLED);
	ev->timer_cancelled->timer_created_event_id = timer_created_event_id;
	return ev;
}

/* ----------------------------------------------------------------
 * External events
 * ----------------------------------------------------------------
 */

/* timeout_at: NULL for a wait without a timeout */
Dex__V1__WorkflowEvent *
dex_event_external_event_wait_started(TimestampTz ts, char *event_id,
									  const TimestampTz *timeout_at)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, external_event_wait_started, EXTERNAL_EVENT_WAIT_STARTED);
	ev->external_event_wait_started->event_id = event_id;
	if (timeout_at)
		ev->external_event_wait_started->timeout_at = dex_pb_timestamp(*timeout_at);
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_external_event_received(TimestampTz ts, char *event_id, Dex__V1__Payload *payload)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, external_event_received, EXTERNAL_EVENT_RECEIVED);
	ev->external_event_received->event_id = event_id;
	ev->external_event_received->payload = payload;
	return ev;
}

/*
 * A signalExternalRun command and its outcome: the target as found (run_id
 * NULL when there was none).
 */
Dex__V1__WorkflowEvent *
dex_event_external_run_signalled(TimestampTz ts, const Dex__V1__SignalExternalRun *command,
								 char *run_id, Dex__V1__SignalOutcome outcome)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, external_run_signalled, EXTERNAL_RUN_SIGNALLED);
	ev->external_run_signalled->run_id = run_id ? run_id : "";
	ev->external_run_signalled->instance_id = command->instance_id;
	ev->external_run_signalled->queue = command->queue;
	ev->external_run_signalled->event_id = command->event_id;
	ev->external_run_signalled->outcome = outcome;
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_external_run_signal_result(TimestampTz ts, int32 signalled_event_id, char *run_id,
									 Dex__V1__SignalOutcome outcome)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, external_run_signal_result, EXTERNAL_RUN_SIGNAL_RESULT);
	ev->external_run_signal_result->external_run_signalled_event_id = signalled_event_id;
	ev->external_run_signal_result->run_id = run_id ? run_id : "";
	ev->external_run_signal_result->outcome = outcome;
	return ev;
}

/* ----------------------------------------------------------------
 * Child runs
 * ----------------------------------------------------------------
 */

/*
 * The child run a startChildRun command creates, with the version, queue and
 * priority it was given or takes by default.  Its run_id is left empty for
 * the caller, which knows whether the child could be created.
 */
Dex__V1__WorkflowEvent *
dex_event_child_run_created(TimestampTz ts, const Dex__V1__StartChildRun *command,
							int32 workflow_version, char *queue, int32 priority)
{
	Dex__V1__WorkflowEvent *ev;
	Dex__V1__ChildRunCreated *created;

	NEW_EVENT(ev, ts, child_run_created, CHILD_RUN_CREATED);
	created = ev->child_run_created;
	created->workflow_name = command->workflow_name;
	created->workflow_version = workflow_version;
	created->queue = queue;
	created->argument = command->argument;
	created->priority = priority;
	created->instance_id = command->instance_id;
	created->concurrency_key = command->concurrency_key;
	created->execution_timeout = command->execution_timeout;
	created->parent_close_policy = command->parent_close_policy;
	created->n_labels = command->n_labels;
	created->labels = palloc(sizeof(Dex__V1__ChildRunCreated__LabelsEntry *) * Max(command->n_labels, 1));
	for (size_t i = 0; i < command->n_labels; i++)
	{
		created->labels[i] = palloc(sizeof(Dex__V1__ChildRunCreated__LabelsEntry));
		dex__v1__child_run_created__labels_entry__init(created->labels[i]);
		created->labels[i]->key = command->labels[i]->key;
		created->labels[i]->value = command->labels[i]->value;
	}
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_child_run_completed(TimestampTz ts, int32 created_event_id, Dex__V1__Payload *result)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, child_run_completed, CHILD_RUN_COMPLETED);
	ev->child_run_completed->child_run_created_event_id = created_event_id;
	ev->child_run_completed->result = result;
	return ev;
}

Dex__V1__WorkflowEvent *
dex_event_child_run_failed(TimestampTz ts, int32 created_event_id, Dex__V1__Failure *failure)
{
	Dex__V1__WorkflowEvent *ev;

	NEW_EVENT(ev, ts, child_run_failed, CHILD_RUN_FAILED);
	ev->child_run_failed->child_run_created_event_id = created_event_id;
	ev->child_run_failed->failure = failure;
	return ev;
}
