/*-------------------------------------------------------------------------
 *
 * reset.c
 *	  Starting a run again (1.4): dex.restart_run, a new run from the
 *	  start; dex.reset_run, a new run from a point of the old one's history.
 *
 * Restart copies the run's start (workflow, version, argument, queue,
 * priority, labels, concurrency key; the instance id once the old run has
 * ended) into a new run.  Reset goes back to a workflow task X of the old
 * run (the last one completed at or before the given event, a sequence
 * number of dex.run_history) and lets the code deployed since decide again
 * what X decided: the new run's history is the old one's before X, and what
 * X was shown (activity results, timers that fired, events, for the first
 * task the run's start) is shown again to the new run's first workflow
 * task, which it gets at once; X's commands, and all that followed, are not
 * kept.  What was pending before X is made again: activities that had not
 * completed are queued again (first attempt), timers keep their fire time,
 * and external events received after X are delivered again.  A child run
 * running before X cannot be taken over: such a reset is refused.  An old
 * run still active is terminated first (its instance id goes to the new
 * run).  Both record where the new run came from (origin_run_id and origin
 * on the row; RunOrigin in its RunCreated event).
 *
 * Locks: the old run is locked FOR NO KEY UPDATE (the locking protocol in
 * src/README.md), before its history and inbox are read; the new run is
 * created in the same transaction, so nobody sees it half made.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "engine/engine.h"

static DexPlan lock_run_plan = {
	"SELECT status, queue_id FROM dex.workflow_run WHERE id = $1 FOR NO KEY UPDATE",
	1, {UUIDOID}
};

/* The run, locked; its status.  Unknown unless the caller may use its queue. */
static char *
lock_run(pg_uuid_t *run_id)
{
	Datum		values[1] = {UUIDPGetDatum(run_id)};
	DexRows		run = dex_spi_rows(&lock_run_plan, values, NULL, 1);

	if (run.n == 0 || !dex_may_use_queue_id((int32) dex_rows_getint64(run, 0, 2)))
		dex_no_such_run(run_id);
	return dex_rows_gettext_copy(run, 0, 1);
}

/* $1 new id, $2 old id, $3 instance id, $4 status, $5 origin */
static DexPlan copy_run_plan = {
	"INSERT INTO dex.workflow_run (id, workflow_name, workflow_version, queue_id, status, instance_id, "
	"       priority, labels, concurrency_key, argument, generation, created_at, origin_run_id, origin) "
	"SELECT $1, workflow_name, workflow_version, queue_id, $4, $3, priority, labels, concurrency_key, "
	"       argument, generation, now(), id, $5 FROM dex.workflow_run WHERE id = $2 "
	"RETURNING queue_id, priority, concurrency_key",
	5, {UUIDOID, UUIDOID, TEXTOID, TEXTOID, TEXTOID}
};

/*
 * A new run "new_id" with the start of run "old" (loaded), of status
 * "status", origin "origin"; with its instance id if "with_instance" (an
 * error if another run has it now).  Returns whether it holds its
 * concurrency key (or has none).
 */
static bool
copy_run(pg_uuid_t *new_id, DexRun *old, bool with_instance, const char *status, const char *origin)
{
	const char *instance_id = with_instance ? old->instance_id : NULL;
	Datum		values[5];
	char		nulls[5] = {' ', ' ', instance_id ? ' ' : 'n', ' ', ' '};

	if (instance_id && !dex_claim_instance(old->queue_id, instance_id, new_id))
		ereport(ERROR,
				(errcode(ERRCODE_UNIQUE_VIOLATION),
				 errmsg("workflow instance \"%s\" already has an active run on queue \"%s\"",
						instance_id, dex_queue_name(old->queue_id)),
				 errhint("Wait for that run to end, or cancel it.")));
	values[0] = UUIDPGetDatum(new_id);
	values[1] = UUIDPGetDatum(&old->id);
	values[2] = instance_id ? CStringGetTextDatum(instance_id) : (Datum) 0;
	values[3] = CStringGetTextDatum(status);
	values[4] = CStringGetTextDatum(origin);
	dex_spi_exec(&copy_run_plan, values, nulls, 0);
	if (old->concurrency_key == NULL)
		return true;
	return dex_admit_run(new_id, old->queue_id, old->concurrency_key, old->priority);
}

/*
 * dex.restart_run: a new run of the same start.  A continued-as-new run
 * restarts with the argument of its current generation.
 */
pg_uuid_t *
dex_restart_run_internal(pg_uuid_t *run_id)
{
	pg_uuid_t  *new_id = dex_new_uuid();
	DexRun	   *old;

	(void) lock_run(run_id);
	old = dex_find_run(dex_load_runs(dex_uuid_array(&run_id, 1), false), run_id);
	/* a new run of a definition is the caller's to start (definition_access.c) */
	dex_check_definition_start(old->workflow_name, old->workflow_version, dex_access_caller());
	if (copy_run(new_id, old, dex_status_is_terminal(old->status), "CREATED", "RESTART"))
		dex_insert_first_task(new_id, old->queue_id, old->priority);
	return new_id;
}

/* ----------------------------------------------------------------
 * Reset
 * ----------------------------------------------------------------
 */

static DexPlan batches_plan = {
	"SELECT sequence, events FROM dex.workflow_history WHERE run_id = $1 ORDER BY sequence",
	1, {UUIDOID}
};

static DexPlan old_inbox_plan = {
	"SELECT event FROM dex.workflow_inbox WHERE run_id = $1 ORDER BY visible_from, id",
	1, {UUIDOID}
};

static DexPlan copy_external_ids_plan = {
	"INSERT INTO dex.external_event (run_id, event_id, received_at) "
	"SELECT $1, event_id, received_at FROM dex.external_event WHERE run_id = $2",
	2, {UUIDOID, UUIDOID}
};

/* $1 run, $2 history batches, $3 their sequences, then its projection */
static DexPlan write_history_plan = {
	"WITH h AS (INSERT INTO dex.workflow_history (run_id, sequence, events) "
	"           SELECT $1, s, e FROM unnest($3::integer[], $2::bytea[]) AS u(s, e)) "
	"UPDATE dex.workflow_run SET history_length = $4, last_event_id = $5, custom_status = $6, "
	"       cancel_requested = $7, started_at = CASE WHEN $4 > 0 THEN now() END, updated_at = now(), "
	"       history_bytes = (SELECT coalesce(sum(octet_length(e)), 0) FROM unnest($2::bytea[]) e) "
	"WHERE id = $1",
	7, {UUIDOID, BYTEAARRAYOID, INT4ARRAYOID, INT4OID, INT4OID, TEXTOID, BOOLOID}
};

/* What was started by the copied history and is still pending at its end */
typedef struct Pending
{
	int32		id;				/* the command's event id */
	Dex__V1__WorkflowEvent *created;	/* activityTaskCreated, timerCreated,
										 * externalEventWaitStarted or
										 * childRunCreated */
	bool		done;
} Pending;

typedef struct ResetState
{
	Pending    *pending;
	int			n_pending;
	int32		last_event_id;
	char	   *custom_status;
	bool		cancel_requested;
} ResetState;

static void
note_done(ResetState *st, int32 id, bool timer)
{
	for (int i = 0; i < st->n_pending; i++)
	{
		Dex__V1__WorkflowEvent *c = st->pending[i].created;
		bool		is_timer = c->subject_case != DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_CREATED &&
			c->subject_case != DEX__V1__WORKFLOW_EVENT__SUBJECT_CHILD_RUN_CREATED;

		if (st->pending[i].id == id && is_timer == timer)
			st->pending[i].done = true;
	}
}

/* One event of the copied history */
static void
note_event(ResetState *st, Dex__V1__WorkflowEvent *ev)
{
	if (ev->id > st->last_event_id)
		st->last_event_id = ev->id;
	switch (ev->subject_case)
	{
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_CREATED:
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_TIMER_CREATED:
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_CHILD_RUN_CREATED:
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_EXTERNAL_EVENT_WAIT_STARTED:
			if (ev->subject_case == DEX__V1__WORKFLOW_EVENT__SUBJECT_EXTERNAL_EVENT_WAIT_STARTED &&
				ev->external_event_wait_started->timeout_at == NULL)
				break;
			st->pending = repalloc(st->pending, sizeof(Pending) * (st->n_pending + 1));
			st->pending[st->n_pending].id = ev->id;
			st->pending[st->n_pending].created = ev;
			st->pending[st->n_pending++].done = false;
			break;
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_COMPLETED:
			note_done(st, ev->activity_task_completed->activity_task_created_event_id, false);
			break;
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_FAILED:
			note_done(st, ev->activity_task_failed->activity_task_created_event_id, false);
			break;
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_CHILD_RUN_COMPLETED:
			note_done(st, ev->child_run_completed->child_run_created_event_id, false);
			break;
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_CHILD_RUN_FAILED:
			note_done(st, ev->child_run_failed->child_run_created_event_id, false);
			break;
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_TIMER_ELAPSED:
			note_done(st, ev->timer_elapsed->timer_created_event_id, true);
			break;
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_TIMER_CANCELLED:
			note_done(st, ev->timer_cancelled->timer_created_event_id, true);
			break;
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_CUSTOM_STATUS_SET:
			st->custom_status = ev->custom_status_set->custom_status;
			break;
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_CANCEL_REQUESTED:
			st->cancel_requested = true;
			break;
		default:
			break;
	}
}

static Dex__V1__EventBatch *
unpack_batch(bytea *data)
{
	return (Dex__V1__EventBatch *)
		dex_pb_unpack(&dex__v1__event_batch__descriptor, (uint8 *) VARDATA_ANY(data),
					  VARSIZE_ANY_EXHDR(data), "history");
}

/*
 * The sequence of the batch's workflowTaskCompleted event, or 0 if the batch
 * is not a completed workflow task's (an operator's end of the run)
 */
static int32
task_completed_at(int32 seq, Dex__V1__EventBatch *batch)
{
	for (size_t e = 0; e < batch->n_events; e++)
		if (batch->events[e]->subject_case == DEX__V1__WORKFLOW_EVENT__SUBJECT_WORKFLOW_TASK_COMPLETED)
			return seq + (int32) e;
	return 0;
}

/*
 * The pending work of the copied history, made again for the new run:
 * activities queued (first attempt), timers and waits' timeouts due at
 * their original time.  A running child refuses the reset.
 */
static void
remake_pending(pg_uuid_t *new_id, pg_uuid_t *old_id, ResetState *st, DexInboxBatch *inbox,
			   int32 event_id)
{
	DexActivityRows activities;
	TimestampTz now = GetCurrentTransactionStartTimestamp();

	dex_activity_rows_init(&activities);
	for (int i = 0; i < st->n_pending; i++)
	{
		Dex__V1__WorkflowEvent *c = st->pending[i].created;
		TimestampTz fire_at;

		if (st->pending[i].done)
			continue;
		switch (c->subject_case)
		{
			case DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_CREATED:
				{
					Dex__V1__ActivityTaskCreated *a = c->activity_task_created;
					DexQueue	queue = dex_require_queue(a->queue, false);

					dex_activity_rows_add(&activities, queue.id, new_id, c->id, a,
										  dex_effective_retry_policy(a->retry_policy), now);
					dex_queue_work_added(queue.id);
					break;
				}
			case DEX__V1__WORKFLOW_EVENT__SUBJECT_CHILD_RUN_CREATED:
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("cannot reset workflow run %s to event %d",
								dex_uuid_to_cstring(old_id), event_id),
						 errdetail("Child run %s was running at that point; a new run cannot take it over.",
								   c->child_run_created->run_id),
						 errhint("Reset to a point before the child run started, or after it ended.")));
				break;
			default:
				fire_at = dex_timestamp_from_pb(c->subject_case == DEX__V1__WORKFLOW_EVENT__SUBJECT_TIMER_CREATED ?
												c->timer_created->elapse_at :
												c->external_event_wait_started->timeout_at);
				dex_inbox_batch_add(inbox, new_id, dex_event_timer_elapsed(fire_at, c->id), fire_at);
				break;
		}
	}
	dex_activity_rows_insert(&activities);
}

/*
 * Whether an event task X showed is shown again to the new run's first task:
 * what came to the run (results, timers, events, a cancellation request), not
 * the task's own start nor an operator's suspension of the old run.
 */
static bool
shown_again(Dex__V1__WorkflowEvent *ev)
{
	switch (ev->subject_case)
	{
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_WORKFLOW_TASK_STARTED:
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_CREATED:
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_STARTED:
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_SUSPENDED:
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_RESUMED:
			return false;
		default:
			return true;
	}
}

/* The copy of the first batch: its RunCreated says where the run came from */
static bytea *
with_origin(Dex__V1__EventBatch *b, bytea *data, pg_uuid_t *run_id, int32 event_id)
{
	for (size_t e = 0; e < b->n_events; e++)
	{
		Dex__V1__RunOrigin *origin;

		if (b->events[e]->subject_case != DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_CREATED)
			continue;
		origin = palloc(sizeof(*origin));
		dex__v1__run_origin__init(origin);
		origin->run_id = dex_uuid_to_cstring(run_id);
		origin->kind = "RESET";
		origin->event_id = event_id;
		b->events[e]->run_created->origin = origin;
		return dex_pb_pack_bytea((ProtobufCMessage *) b);
	}
	return data;
}

/*
 * dex.reset_run: a new run from the old one's history up to the last
 * workflow task completed at or before event "event_id" (task X): the
 * history before X is copied; what X was shown is shown again to the new
 * run's first task, whose (new) code decides again what X decided; see the
 * header for what else is made again.
 */
pg_uuid_t *
dex_reset_run_internal(pg_uuid_t *run_id, int32 event_id, const char *reason)
{
	pg_uuid_t  *new_id = dex_new_uuid();
	char	   *status = lock_run(run_id);
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	DexRun	   *old;
	Datum		values[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};
	DexRows		batches;
	int			cut = -1;		/* the batch of task X */
	int32		copied_events = 0;
	ArrayBuildState *events = initArrayResult(BYTEAOID, CurrentMemoryContext, false);
	ArrayBuildState *sequences = initArrayResult(INT4OID, CurrentMemoryContext, false);
	ResetState	st;
	DexInboxBatch inbox;
	List	   *copied_batches = NIL;	/* the new run's history, to publish */
	List	   *copied_sequences = NIL;

	if (event_id < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("event id must be positive"),
				 errhint("Name an event by its sequence number in dex.run_history.")));
	old = dex_find_run(dex_load_runs(dex_uuid_array(&run_id, 1), false), run_id);
	dex_check_definition_start(old->workflow_name, old->workflow_version, dex_access_caller());
	if (event_id > old->history_length)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("workflow run %s has no event %d", dex_uuid_to_cstring(run_id), event_id),
				 errdetail("Its history has %d events.", old->history_length),
				 errhint("Name an event by its sequence number in dex.run_history.")));

	/* task X: the last batch whose workflowTaskCompleted is at or before event_id */
	values[0] = UUIDPGetDatum(run_id);
	batches = dex_spi_rows(&batches_plan, values, NULL, 0);
	for (uint64 i = 0; i < batches.n; i++)
	{
		int32		seq = (int32) dex_rows_getint64(batches, i, 1);
		int32		completed_at;

		if (seq > event_id)
			break;
		completed_at = task_completed_at(seq, unpack_batch(dex_rows_getbytea_copy(batches, i, 2)));
		if (completed_at > 0 && completed_at <= event_id)
			cut = (int) i;
	}
	if (cut < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("workflow run %s has no workflow task completed at or before event %d",
						dex_uuid_to_cstring(run_id), event_id),
				 errhint("dex.run_history lists its events; to start over, use dex.restart_run.")));

	memset(&st, 0, sizeof(st));
	st.pending = palloc(sizeof(Pending));
	dex_inbox_batch_init(&inbox);
	for (uint64 i = 0; i < batches.n; i++)
	{
		bytea	   *data = dex_rows_getbytea_copy(batches, i, 2);
		Dex__V1__EventBatch *b = unpack_batch(data);
		bytea	   *copied;
		int32		sequence;

		if ((int) i < cut)
		{
			/* before X: the new run's history */
			for (size_t e = 0; e < b->n_events; e++)
				note_event(&st, b->events[e]);
			copied = i == 0 ? with_origin(b, data, run_id, event_id) : data;
			sequence = (int32) dex_rows_getint64(batches, i, 1);
			dex_array_add(events, PointerGetDatum(copied), false);
			dex_array_add(sequences, Int32GetDatum(sequence), false);
			copied_batches = lappend(copied_batches, copied);
			copied_sequences = lappend_int(copied_sequences, sequence);
			copied_events += (int32) b->n_events;
			continue;
		}
		for (size_t e = 0; e < b->n_events; e++)
		{
			Dex__V1__WorkflowEvent *ev = b->events[e];

			if ((int) i == cut)
			{
				/* X: what it was shown, up to its completion, is shown again */
				if (ev->subject_case == DEX__V1__WORKFLOW_EVENT__SUBJECT_WORKFLOW_TASK_COMPLETED)
					break;
				if (!shown_again(ev))
					continue;
				note_event(&st, ev);
			}
			else if (ev->subject_case != DEX__V1__WORKFLOW_EVENT__SUBJECT_EXTERNAL_EVENT_RECEIVED)
				continue;		/* after X: external events only */
			dex_inbox_batch_add(&inbox, new_id, ev, now);
		}
	}

	/* external events the old run had not seen yet */
	batches = dex_spi_rows(&old_inbox_plan, values, NULL, 0);
	for (uint64 i = 0; i < batches.n; i++)
	{
		bytea	   *data = dex_rows_getbytea_copy(batches, i, 1);
		Dex__V1__WorkflowEvent *ev = dex_inbox_event_unpack(data);

		if (ev->subject_case == DEX__V1__WORKFLOW_EVENT__SUBJECT_EXTERNAL_EVENT_RECEIVED)
			dex_inbox_batch_add(&inbox, new_id, ev, now);
	}

	/* the ids of the events it received, before its end deletes them */
	values[0] = UUIDPGetDatum(new_id);
	values[1] = UUIDPGetDatum(run_id);
	dex_spi_exec(&copy_external_ids_plan, values, NULL, 0);

	/* the old run ends first: the new one takes its instance id */
	if (!dex_status_is_terminal(status))
		dex_terminate_run_internal(run_id,
								   psprintf("reset to event %d as run %s%s%s", event_id,
											dex_uuid_to_cstring(new_id), reason[0] ? ": " : "", reason));

	/* the new run (new if X was its first task), its history, then what was pending */
	(void) copy_run(new_id, old, true, copied_events > 0 ? "RUNNING" : "CREATED", "RESET");
	values[0] = UUIDPGetDatum(new_id);
	values[1] = dex_array_result(events);
	values[2] = dex_array_result(sequences);
	values[3] = Int32GetDatum(copied_events);
	values[4] = Int32GetDatum(st.last_event_id);
	values[5] = st.custom_status ? CStringGetTextDatum(st.custom_status) : (Datum) 0;
	nulls[5] = st.custom_status ? ' ' : 'n';
	values[6] = BoolGetDatum(st.cancel_requested);
	dex_spi_exec(&write_history_plan, values, nulls, 0);
	if (dex_publish_possible())
	{
		ListCell   *b,
				   *q;

		forboth(b, copied_batches, q, copied_sequences)
			dex_publish_batch(new_id, old, old->generation, lfirst_int(q), lfirst(b));
	}
	remake_pending(new_id, run_id, &st, &inbox, event_id);
	dex_inbox_batch_flush(&inbox);

	/* the new code runs at once: a workflow task, unless it waits for its key */
	dex_ensure_workflow_tasks(dex_uuid_array(&new_id, 1));
	return new_id;
}
