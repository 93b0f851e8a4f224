/*-------------------------------------------------------------------------
 *
 * lifecycle.c
 *	  A run's life outside its workflow tasks: cancel, suspend and resume,
 *	  the version it runs under, and everything that follows the end of runs.
 *
 * An operator's request (the API) or the engine itself (a parent that ended
 * cancels its children) changes a run here.  Each function runs in the
 * caller's transaction and SPI connection and locks the run's row first,
 * FOR NO KEY UPDATE, as the locking protocol in src/README.md asks; pending
 * work another transaction holds is skipped (SKIP LOCKED), never waited for.
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
	"SELECT status, cancel_requested, queue_id FROM dex.workflow_run WHERE id = $1 FOR NO KEY UPDATE",
	1, {UUIDOID}
};

static DexPlan set_status_plan = {
	"UPDATE dex.workflow_run SET status = $2, updated_at = now() WHERE id = $1",
	2, {UUIDOID, TEXTOID}
};

static DexPlan note_cancel_plan = {
	"UPDATE dex.workflow_run SET cancel_requested = true, updated_at = now() WHERE id = $1",
	1, {UUIDOID}
};

/* $1 run, $2 the events that end it, $3 how many, $4 its status, $5 its failure */
static DexPlan end_run_now_plan = {
	"WITH h AS (INSERT INTO dex.workflow_history (run_id, sequence, events) "
	"           SELECT id, history_length + 1, $2 FROM dex.workflow_run WHERE id = $1) "
	"UPDATE dex.workflow_run SET status = $4, failure = $5, history_length = history_length + $3, "
	"       updated_at = now(), completed_at = now() WHERE id = $1",
	5, {UUIDOID, BYTEAOID, INT4OID, TEXTOID, BYTEAOID}
};

/*
 * A suspension withdraws the run's workflow task, leased or not: the lease
 * is void, and its completion is refused (complete_workflow.c).  A task a
 * poll holds in an open transaction at that moment (SKIP LOCKED: see the
 * locking protocol in src/README.md) is left, refused when completed and
 * dropped by the next poll that leases it.
 */
/*
 * 1.4 records the attempt of a leased task so withdrawn (dex.task_attempt):
 * VOIDED, or LEASE_EXPIRED if its lease had run out (a failed task waiting
 * out its backoff, with no start, was recorded as it failed).  $1 the runs.
 */
#define WITHDRAWN_OUTCOME \
	"CASE WHEN d.locked_until < now() THEN 'LEASE_EXPIRED' ELSE 'VOIDED' END"
#define RECORD_WITHDRAWN_WORKFLOW_TASKS \
	"INSERT INTO dex.task_attempt (run_id, event_id, attempt, worker_id, leased_at, ended_at, outcome) " \
	"SELECT d.run_id, 0, r.task_failures + 1, d.locked_by, d.started_at, now(), " WITHDRAWN_OUTCOME " " \
	"FROM wt d JOIN dex.workflow_run r ON r.id = d.run_id " \
	"WHERE d.locked_by IS NOT NULL AND d.started_at IS NOT NULL"
#define RECORD_WITHDRAWN_ACTIVITIES \
	"INSERT INTO dex.task_attempt (run_id, event_id, attempt, worker_id, leased_at, ended_at, outcome) " \
	"SELECT d.run_id, d.event_id, d.attempt, d.locked_by, d.attempt_started_at, now(), " WITHDRAWN_OUTCOME " " \
	"FROM at d WHERE d.locked_by IS NOT NULL"

#define WITHDRAW_TASK_SQL \
	"WITH wt AS (DELETE FROM dex.workflow_task t USING (SELECT run_id, queue_id FROM dex.workflow_task " \
	"  WHERE run_id = $1 FOR UPDATE SKIP LOCKED) s " \
	"WHERE t.run_id = s.run_id AND t.queue_id = s.queue_id RETURNING t.*) "
static DexPlan withdraw_task_plans[2] = {
	{WITHDRAW_TASK_SQL "SELECT count(*) FROM wt", 1, {UUIDOID}},
	{WITHDRAW_TASK_SQL RECORD_WITHDRAWN_WORKFLOW_TASKS, 1, {UUIDOID}}
};

/*
 * A suspended run's activities that no worker holds are held back: CREATED
 * and due at 'infinity', so no poll sees them and the scheduler never queues
 * them.  Leased ones run on; their results wait in the inbox, and a failed
 * attempt's retry is held the same way (retry.c).  Skipped as above: a row
 * a poll holds in an open transaction is leased by it.
 */
static DexPlan hold_activities_plan = {
	"UPDATE dex.activity_task a SET status = 'CREATED', visible_from = 'infinity' "
	"FROM (SELECT run_id, event_id, queue_id FROM dex.activity_task "
	"      WHERE run_id = $1 AND locked_by IS NULL FOR UPDATE SKIP LOCKED) s "
	"WHERE a.run_id = s.run_id AND a.event_id = s.event_id AND a.queue_id = s.queue_id",
	1, {UUIDOID}
};

/*
 * Resuming gives them back: queued at once, or, for an attempt waiting out
 * its retry backoff, when the backoff ends (dex.activity_retry has when).
 * Returns the queues that have work and the earliest retry.
 */
static DexPlan release_activities_plan = {
	"UPDATE dex.activity_task a SET status = CASE WHEN s.due > now() THEN 'CREATED' ELSE 'QUEUED' END, "
	"       visible_from = s.due "
	"FROM (SELECT t.run_id, t.event_id, t.queue_id, "
	"             greatest(now(), coalesce(r.visible_from, now())) AS due "
	"        FROM dex.activity_task t LEFT JOIN dex.activity_retry r "
	"          ON r.run_id = t.run_id AND r.event_id = t.event_id "
	"       WHERE t.run_id = $1 AND t.locked_by IS NULL AND t.visible_from = 'infinity' "
	"       FOR UPDATE OF t SKIP LOCKED) s "
	"WHERE a.run_id = s.run_id AND a.event_id = s.event_id AND a.queue_id = s.queue_id "
	"RETURNING a.queue_id, a.status = 'QUEUED', a.visible_from",
	1, {UUIDOID}
};

/*
 * The run, locked; its status.  Errors if it does not exist, or, for the
 * caller's own request (for_caller), if its queue is not one the caller may
 * use: the engine's own steps (a parent's cancellation reaching its
 * children) are not the caller's.
 */
static char *
lock_run(pg_uuid_t *run_id, bool *cancel_requested, bool for_caller)
{
	Datum		values[1] = {UUIDPGetDatum(run_id)};
	char	   *status;
	int32		queue_id;

	dex_spi_exec(&lock_run_plan, values, NULL, 1);
	if (SPI_processed == 0)
		dex_no_such_run(run_id);
	if (cancel_requested)
		*cancel_requested = dex_spi_getbool(0, 2);
	status = dex_spi_gettext_copy(0, 1);
	queue_id = (int32) dex_spi_getint64(0, 3);
	if (for_caller && !dex_may_use_queue_id(queue_id))
		dex_no_such_run(run_id);
	return status;
}

/*
 * Who an operator's change is recorded as done by: dex.actor, which the REST
 * API's token sets for its transaction (a superuser setting, so no client
 * can claim it), else the session user.
 */
static char *
actor_name(void)
{
	if (dex_actor != NULL && dex_actor[0] != '\0')
		return pstrdup(dex_actor);
	return GetUserNameFromId(GetSessionUserId(), false);
}

static void
illegal_transition(pg_uuid_t *run_id, const char *action, const char *status)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("cannot %s workflow run %s", action, dex_uuid_to_cstring(run_id)),
			 errdetail("Its status is %s.", status)));
}

/*
 * The events that arrived for a run that ends at once and its workflow never
 * saw, taken out of its inbox in the order a task would show them: activity
 * results, external events, children's ends, timers that fired.  Its history
 * keeps them, so that what happened before the end (an activity that
 * completed, dex.run_attempts) is not lost with the inbox.
 */
static DexPlan take_arrived_events_plan = {
	"WITH d AS (DELETE FROM dex.workflow_inbox WHERE run_id = $1 AND visible_from <= clock_timestamp() "
	"           RETURNING id, visible_from, event) "
	"SELECT event FROM d ORDER BY visible_from, id",
	1, {UUIDOID}
};

/*
 * End the run "run_id", locked and of status "status", at once as
 * "end_status": its history gets the events that arrived for it and
 * end_event (after runCreated for a run whose history is empty: one that
 * never started), its failure "failure", and everything it had pending is
 * withdrawn (dex_end_runs).
 */
static void
end_run_now(pg_uuid_t *run_id, const char *status, const char *end_status,
			Dex__V1__WorkflowEvent *end_event, Dex__V1__Failure *failure)
{
	Datum		ids = dex_uuid_array(&run_id, 1);
	Dex__V1__EventBatch batch;
	Dex__V1__WorkflowEvent **events;
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', failure ? ' ' : 'n'};
	Dex__V1__WorkflowEvent *created = NULL;
	DexRun	   *run = NULL;

	/* the run is loaded when its history may be empty, or to publish the events */
	if ((strcmp(status, "RUNNING") != 0 && strcmp(status, "SUSPENDED") != 0) || dex_publish_possible())
		run = dex_find_run(dex_load_runs(ids, false), run_id);
	/* CREATED, or BLOCKED before its first task completed: no history yet */
	if (run != NULL && run->history_length == 0)
		created = dex_run_created_event(run);
	values[0] = UUIDPGetDatum(run_id);
	dex_spi_exec(&take_arrived_events_plan, values, NULL, 0);
	events = palloc(sizeof(*events) * (SPI_processed + 2));
	dex__v1__event_batch__init(&batch);
	batch.events = events;
	if (created != NULL)
		events[batch.n_events++] = created;
	for (uint64 i = 0; i < SPI_processed; i++)
		events[batch.n_events++] = dex_inbox_event_unpack(dex_spi_getbytea_copy(i, 1));
	events[batch.n_events++] = end_event;

	values[1] = PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) &batch));
	values[2] = Int32GetDatum((int32) batch.n_events);
	values[3] = CStringGetTextDatum(end_status);
	values[4] = failure ? PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) failure)) : (Datum) 0;
	if (run != NULL)
		dex_publish_events(run_id, run, run->generation, run->history_length + 1,
						   batch.events, batch.n_events);
	dex_spi_exec(&end_run_now_plan, values, nulls, 0);
	dex_end_runs(ids, false, DEX_ENDED_ANY);
}

/*
 * Cancel a run (see dex.cancel_run).  With if_active, a run that has ended is
 * left alone instead of being an error: the cascade from a parent uses it.
 */
void
dex_cancel_run_internal(pg_uuid_t *run_id, const char *reason, bool if_active)
{
	char	   *status;
	bool		cancel_requested;
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	char	   *by = if_active ? pstrdup("dex") : actor_name();

	/* if_active: a parent's end cancels its children, the engine's doing */
	status = lock_run(run_id, &cancel_requested, !if_active);
	if (dex_status_is_terminal(status))
	{
		if (if_active)
			return;
		illegal_transition(run_id, "cancel", status);
	}

	if (strcmp(status, "RUNNING") == 0)
	{
		if (!cancel_requested)
		{
			Datum		values[1] = {UUIDPGetDatum(run_id)};

			dex_spi_exec(&note_cancel_plan, values, NULL, 0);
			dex_insert_inbox(run_id, dex_event_run_cancel_requested(now, pstrdup(reason), by), now);
		}
	}
	else
		end_run_now(run_id, status, "CANCELLED",
					dex_event_run_cancelled(now, pstrdup(reason), by), NULL);
}

/*
 * Terminate a run (see dex.terminate_run): it ends TERMINATED at once,
 * whatever it was doing, without its workflow code: its failure says so,
 * for a parent and for dex.get_run, and runTerminated records the reason and
 * who acted (actor_name).
 */
void
dex_terminate_run_internal(pg_uuid_t *run_id, const char *reason)
{
	char	   *status = lock_run(run_id, NULL, true);
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	char	   *by = actor_name();

	if (dex_status_is_terminal(status))
		illegal_transition(run_id, "terminate", status);
	end_run_now(run_id, status, "TERMINATED",
				dex_event_run_terminated(now, pstrdup(reason), by),
				dex_new_failure(psprintf("the run was terminated by %s%s%s", by,
										 reason[0] ? ": " : "", reason),
								"dex.Terminated", true));
}

/*
 * The engine's own termination of an active child whose parent ended (its
 * parent close policy, the default): runTerminated is by "dex".
 */
static void
terminate_child(pg_uuid_t *run_id)
{
	char	   *status = lock_run(run_id, NULL, false);
	TimestampTz now = GetCurrentTransactionStartTimestamp();

	if (dex_status_is_terminal(status))
		return;
	end_run_now(run_id, status, "TERMINATED",
				dex_event_run_terminated(now, pstrdup("the parent run ended"), pstrdup("dex")),
				dex_new_failure("the run was terminated: its parent run ended", "dex.Terminated", true));
}

/*
 * A run whose deadline (dex.run_timer) has come ends TIMED_OUT at once, as
 * a terminated run does, whatever it was doing (suspended and blocked runs
 * too): the scheduler's doing.  A run that has ended is left alone.
 */
void
dex_time_out_run_internal(pg_uuid_t *run_id, TimestampTz deadline)
{
	char	   *status = lock_run(run_id, NULL, false);
	TimestampTz now = GetCurrentTransactionStartTimestamp();

	if (dex_status_is_terminal(status))
		return;
	end_run_now(run_id, status, "TIMED_OUT", dex_event_run_timed_out(now, deadline),
				dex_new_failure(psprintf("the run did not end by its deadline, %s",
										 timestamptz_to_str(deadline)),
								"dex.TimedOut", true));
}

/* The locked run's status becomes "to" */
static void
set_status(pg_uuid_t *run_id, const char *to)
{
	Datum		values[2] = {UUIDPGetDatum(run_id), CStringGetTextDatum(to)};

	dex_spi_exec(&set_status_plan, values, NULL, 0);
}

/*
 * The run's status from "from" to "to", for the caller's request "action";
 * any other status is an illegal transition.
 */
static void
change_status(pg_uuid_t *run_id, const char *action, const char *from, const char *to)
{
	char	   *status = lock_run(run_id, NULL, true);

	if (strcmp(status, from) != 0)
		illegal_transition(run_id, action, status);
	set_status(run_id, to);
}

/*
 * Suspend a running run (see dex.suspend_run): nothing of it is handed out
 * until it is resumed, and no command of it takes effect: its workflow task
 * is withdrawn (a completion under its lease is refused) and its activities
 * that no worker holds are held back.  What arrives meanwhile (activity
 * results, events, timers that fall due) waits in its inbox.
 */
void
dex_suspend_run_internal(pg_uuid_t *run_id, const char *reason)
{
	Datum		values[1] = {UUIDPGetDatum(run_id)};
	TimestampTz now = GetCurrentTransactionStartTimestamp();

	change_status(run_id, "suspend", "RUNNING", "SUSPENDED");
	dex_spi_exec(&withdraw_task_plans[dex_schema_1_4()], values, NULL, 0);
	dex_spi_exec(&hold_activities_plan, values, NULL, 0);
	/* delivered with the next task, after the run is resumed */
	dex_insert_inbox(run_id, dex_event_run_suspended(now, pstrdup(reason), actor_name()), now);
}

/*
 * Unblock a run that was parked (BLOCKED) after its workflow task failed
 * dex.max_workflow_task_failures times in a row: it is CREATED again if it
 * never started, else RUNNING, its failure count starts over, and it gets a
 * workflow task at once.  Its last failure stays on the run until a task
 * completes.
 */
static DexPlan unblock_plan = {
	"UPDATE dex.workflow_run SET status = CASE WHEN history_length = 0 THEN 'CREATED' ELSE 'RUNNING' END, "
	"       task_failures = 0, updated_at = now() WHERE id = $1",
	1, {UUIDOID}
};

/*
 * Resume a suspended run, or retry a blocked one (see dex.resume_run).
 */
void
dex_resume_run_internal(pg_uuid_t *run_id, const char *reason)
{
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	Datum		values[1] = {UUIDPGetDatum(run_id)};
	char	   *status = lock_run(run_id, NULL, true);
	DexRows		released;

	if (strcmp(status, "BLOCKED") == 0)
	{
		dex_spi_exec(&unblock_plan, values, NULL, 0);
		/* its next workflow task shows who retried it and why, and what arrived meanwhile */
		dex_insert_inbox(run_id, dex_event_run_resumed(now, pstrdup(reason), actor_name()), now);
		dex_ensure_workflow_tasks(dex_uuid_array(&run_id, 1));
		return;
	}
	if (strcmp(status, "SUSPENDED") != 0)
		illegal_transition(run_id, "resume", status);
	set_status(run_id, "RUNNING");
	/* a task left from before the suspension (see withdraw_task_plan) goes: its lease is void */
	dex_spi_exec(&withdraw_task_plans[dex_schema_1_4()], values, NULL, 0);
	released = dex_spi_rows(&release_activities_plan, values, NULL, 0);
	for (uint64 i = 0; i < released.n; i++)
	{
		if (dex_rows_getbool(released, i, 2))
			dex_queue_work_added((int32) dex_rows_getint64(released, i, 1));
		else
		{
			bool		isnull;

			dex_wake_scheduler_at_commit(DatumGetTimestampTz(dex_rows_getdatum(released, i, 3, &isnull)));
		}
	}
	/* the new workflow task shows what arrived while the run was suspended */
	dex_insert_inbox(run_id, dex_event_run_resumed(now, pstrdup(reason), actor_name()), now);
}

/*
 * Pending work is withdrawn, except task rows another transaction holds (a
 * poll in a worker's open transaction): waiting for them while holding the
 * run lock could deadlock (the locking protocol in src/README.md).  Such a task
 * is refused when completed, and cleared by polls and the scheduler.
 */
#define END_RUNS_WORKFLOW_TASKS \
	"     wt AS (DELETE FROM dex.workflow_task t USING (SELECT run_id, queue_id FROM dex.workflow_task " \
	"             WHERE run_id = ANY ($1) FOR UPDATE SKIP LOCKED) s " \
	"           WHERE t.run_id = s.run_id AND t.queue_id = s.queue_id RETURNING t.*), "
#define END_RUNS_SQL(workflow_tasks, since_1_4) \
	"WITH at AS (DELETE FROM dex.activity_task a USING (SELECT run_id, event_id FROM dex.activity_task " \
	"             WHERE run_id = ANY ($1) FOR UPDATE SKIP LOCKED) s " \
	"           WHERE a.run_id = s.run_id AND a.event_id = s.event_id RETURNING a.*), " \
	"     e AS (DELETE FROM dex.external_event WHERE run_id = ANY ($1)), " \
	"     ar AS (DELETE FROM dex.activity_retry WHERE run_id = ANY ($1)), " \
	workflow_tasks \
	"     n AS (DELETE FROM dex.run_instance i USING dex.workflow_run r " \
	"           WHERE r.id = ANY ($1) AND i.instance_id = r.instance_id AND i.run_id = r.id), " \
	since_1_4 \
	"     i AS (DELETE FROM dex.workflow_inbox WHERE run_id = ANY ($1)) " \
	"SELECT r.workflow_name, r.created_at FROM dex.workflow_run r WHERE r.id = ANY ($1)"
#define END_RUNS_1_4 "     rt AS (DELETE FROM dex.run_timer WHERE run_id = ANY ($1)), " \
	"     va AS (" RECORD_WITHDRAWN_ACTIVITIES "), "
/*
 * [withdrawn][dex_schema_1_4()]: [1] for runs whose workflow task the caller
 * has withdrawn already (a run has at most one, on its queue): without the
 * statement on the workflow tasks.
 */
static DexPlan end_runs_plans[2][2] = {
	{
		{END_RUNS_SQL(END_RUNS_WORKFLOW_TASKS, ""), 1, {UUIDARRAYOID}},
		{END_RUNS_SQL(END_RUNS_WORKFLOW_TASKS,
					  END_RUNS_1_4 "     vw AS (" RECORD_WITHDRAWN_WORKFLOW_TASKS "), "), 1, {UUIDARRAYOID}}
	},
	{
		{END_RUNS_SQL("", ""), 1, {UUIDARRAYOID}},
		{END_RUNS_SQL("", END_RUNS_1_4), 1, {UUIDARRAYOID}}
	}
};

/*
 * Whether each run has pending work to withdraw (the rows END_RUNS_SQL
 * deletes but the workflow task's and the instance id's), and what
 * observe_run_durations reads.  A run a completion ended has none, most of
 * the time: its activities were done, its events shown.  One statement of
 * index probes, where the end statement starts eight plans that modify
 * tables, activity tasks of every queue among them.  Its last column says
 * whether the run has active children (ACTIVE_CHILDREN_SQL), so that a run
 * that has none (most runs: they never started one) is spared the statement
 * that looks for them.  Only this transaction, which holds the runs' locks,
 * could start a child of them, and it has by then.  Each EXISTS has OFFSET 0,
 * which keeps it a probe of its index per run: without it a generic plan
 * made while a table was small hashed the whole table instead, and read it
 * all at every call once it had grown (W8 after W7: 7-8 ms a call).
 */
#define END_RUNS_PROBE_SQL(since_1_4, child_statuses) \
	"SELECT r.workflow_name, r.created_at, " \
	"       EXISTS (SELECT 1 FROM dex.activity_task a WHERE a.run_id = r.id OFFSET 0) " \
	"       OR EXISTS (SELECT 1 FROM dex.external_event e WHERE e.run_id = r.id OFFSET 0) " \
	"       OR EXISTS (SELECT 1 FROM dex.activity_retry x WHERE x.run_id = r.id OFFSET 0) " since_1_4 \
	"       OR EXISTS (SELECT 1 FROM dex.workflow_inbox i WHERE i.run_id = r.id OFFSET 0), " \
	"       EXISTS (SELECT 1 FROM dex.workflow_run c WHERE c.parent_id = r.id " \
	"               AND c.status = ANY (" child_statuses ") OFFSET 0) " \
	"FROM dex.workflow_run r WHERE r.id = ANY ($1)"

/* A run's children that its end concerns: [dex_schema_1_4()] */
#define ACTIVE_CHILDREN "'{CREATED,RUNNING,SUSPENDED}'::text[]"
#define ACTIVE_CHILDREN_1_4 "'{CREATED,RUNNING,SUSPENDED,BLOCKED,DELAYED}'::text[]"

static DexPlan end_runs_probe_plans[2] = {
	{END_RUNS_PROBE_SQL("", ACTIVE_CHILDREN), 1, {UUIDARRAYOID}},
	{END_RUNS_PROBE_SQL("OR EXISTS (SELECT 1 FROM dex.run_timer t WHERE t.run_id = r.id OFFSET 0) ",
						ACTIVE_CHILDREN_1_4), 1, {UUIDARRAYOID}}
};

/*
 * The children that ended, with a parent still there to tell: an active
 * parent, or a blocked one, whose inbox keeps the event for its next task
 * after dex.resume_run.
 */
static DexPlan ended_children_plan = {
	"SELECT r.parent_id, r.parent_event_id, r.status, r.result, r.failure "
	"FROM dex.workflow_run r JOIN dex.workflow_run p ON p.id = r.parent_id "
	"WHERE r.id = ANY ($1) AND r.parent_id IS NOT NULL "
	"AND p.status = ANY ('{CREATED,RUNNING,SUSPENDED,BLOCKED}'::text[]) ORDER BY r.parent_id",
	1, {UUIDARRAYOID}
};

/*
 * The active children of runs that ended, with their parent close policy
 * (NULL: terminate).  Before 1.4 a parent's end asked its children to cancel.
 */
static DexPlan active_children_plans[2] = {
	{"SELECT id, 'REQUEST_CANCEL'::text FROM dex.workflow_run WHERE parent_id = ANY ($1) "
		"AND status = ANY (" ACTIVE_CHILDREN ") ORDER BY id",
	1, {UUIDARRAYOID}},
	{"SELECT id, parent_close_policy FROM dex.workflow_run WHERE parent_id = ANY ($1) "
		"AND status = ANY (" ACTIVE_CHILDREN_1_4 ") ORDER BY id",
	1, {UUIDARRAYOID}}
};

/*
 * What a parent is told of its child that ended: childRunCompleted with the
 * result, or childRunFailed with the failure (a cancelled child has none).
 */
static Dex__V1__WorkflowEvent *
child_ended_event(TimestampTz now, int32 created_event_id, const char *status,
				  bytea *result, bytea *failure)
{
	Dex__V1__Failure *f;

	if (strcmp(status, "COMPLETED") == 0)
		return dex_event_child_run_completed(now, created_event_id,
											 result ? dex_payload_unpack(result, "result") : NULL);
	if (failure)
		f = (Dex__V1__Failure *)
			dex_pb_unpack(&dex__v1__failure__descriptor, (uint8 *) VARDATA_ANY(failure),
						  VARSIZE_ANY_EXHDR(failure), "failure");
	else
		f = dex_new_failure("the child run was cancelled", "dex.Cancelled", false);
	return dex_event_child_run_failed(now, created_event_id, f);
}

/*
 * The run_duration histogram (shmem/latency.c): each run that the end
 * statement just read back (workflow name, creation) lasted until now.
 */
static void
observe_run_durations(void)
{
	TimestampTz now = GetCurrentTimestamp();

	for (uint64 i = 0; i < SPI_processed; i++)
	{
		char	   *name = dex_spi_gettext_copy(i, 1);

		dex_latency_run_ended(name, (TimestampTz) dex_spi_getint64(i, 2), now);
		pfree(name);
	}
}

/*
 * END_RUNS_PROBE_SQL: whether one of the runs has pending work, and
 * (*children) whether one has active children; its rows in SPI_tuptable
 */
static bool
has_pending_work(Datum *values, bool *children)
{
	bool		pending = false;

	*children = false;
	dex_spi_exec(&end_runs_probe_plans[dex_schema_1_4()], values, NULL, 0);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		pending |= dex_spi_getbool(i, 3);
		*children |= dex_spi_getbool(i, 4);
	}
	return pending;
}

/*
 * Everything that follows the end of runs (locked by the caller): their
 * pending work is removed, their instance ids and concurrency keys freed (the
 * next run waiting for a key is admitted), their parents told
 * (childRunCompleted or childRunFailed, through the scheduler: a child does
 * not lock its parent), and their children that are still active follow
 * their parent close policy: terminated (the default), asked to cancel, or
 * left to run (abandoned).  task_withdrawn: the caller deleted the runs'
 * workflow tasks (the completion that ended them fenced them).  may_have:
 * DEX_ENDED_KEYS unless the caller knows that none of the runs has a
 * concurrency key, DEX_ENDED_PARENTS unless none has a parent,
 * DEX_ENDED_INSTANCES unless none has an instance id (it read their rows
 * under their locks); what none has is not looked for, a statement less
 * each, and runs whose tasks were withdrawn, with no instance id, are probed
 * for pending work and active children first (END_RUNS_PROBE_SQL): the
 * statements that withdraw the one and look for the other run only if one
 * of the runs has them.
 */
void
dex_end_runs(Datum run_ids, bool task_withdrawn, int may_have)
{
	Datum		values[1] = {run_ids};
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	DexInboxBatch inbox;
	int			n;
	pg_uuid_t  *children;
	char	  **policies;
	bool		may_have_children = true;

	if (task_withdrawn && !(may_have & DEX_ENDED_INSTANCES) &&
		!has_pending_work(values, &may_have_children))
		observe_run_durations();	/* the probe's rows */
	else
	{
		dex_spi_exec(&end_runs_plans[task_withdrawn][dex_schema_1_4()], values, NULL, 0);
		observe_run_durations();
	}
	dex_runs_ended(run_ids);	/* dex.wait_for_run's waiters, at commit */
	if (may_have & DEX_ENDED_KEYS)
		dex_release_keys(run_ids);

	dex_inbox_batch_init(&inbox);
	if (may_have & DEX_ENDED_PARENTS)
	{
		dex_spi_exec(&ended_children_plan, values, NULL, 0);
		for (uint64 i = 0; i < SPI_processed; i++)
		{
			bool		isnull;
			pg_uuid_t  *parent = palloc(sizeof(pg_uuid_t));
			int32		event_id = (int32) dex_spi_getint64(i, 2);
			char	   *status = dex_spi_gettext_copy(i, 3);
			bytea	   *result = dex_spi_getbytea_copy(i, 4);
			bytea	   *failure = dex_spi_getbytea_copy(i, 5);

			memcpy(parent, DatumGetUUIDP(dex_spi_getdatum(i, 1, &isnull)), sizeof(pg_uuid_t));
			dex_inbox_batch_add_unlocked(&inbox, parent,
										 child_ended_event(now, event_id, status, result, failure));
		}
	}
	dex_inbox_batch_flush(&inbox);

	if (!may_have_children)
		return;
	dex_spi_exec(&active_children_plans[dex_schema_1_4()], values, NULL, 0);
	n = (int) SPI_processed;
	children = palloc(sizeof(pg_uuid_t) * Max(n, 1));
	policies = palloc(sizeof(char *) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		bool		isnull;

		memcpy(&children[i], DatumGetUUIDP(dex_spi_getdatum(i, 1, &isnull)), sizeof(pg_uuid_t));
		policies[i] = dex_spi_gettext_copy(i, 2);
	}
	for (int i = 0; i < n; i++)
	{
		if (policies[i] == NULL)
			terminate_child(&children[i]);
		else if (strcmp(policies[i], "REQUEST_CANCEL") == 0)
			dex_cancel_run_internal(&children[i], "the parent run ended", true);
		/* ABANDON: the child runs on */
	}
}

/* ----------------------------------------------------------------
 * Moving a run to another version of its workflow (1.6)
 * ----------------------------------------------------------------
 */

/* the run and its workflow task, if it has one, take the version; the task's key for wake-ups */
static DexPlan set_version_plan = {
	"WITH r AS (UPDATE dex.workflow_run SET workflow_version = $2, updated_at = now() "
	"           WHERE id = $1 RETURNING id, workflow_name) "
	"UPDATE dex.workflow_task t SET workflow_version = $2 FROM r "
	"WHERE t.run_id = r.id RETURNING t.queue_id, r.workflow_name",
	2, {UUIDOID, INT4OID}
};

/*
 * dex.set_run_version: a run that has not ended goes on under "version" of
 * its workflow; its workflow task, if it has one, is for workers that
 * declared that version from now on, and they are woken for it.  Nothing is
 * recorded in the history: the workflow's code must replay it as it is.
 */
void
dex_set_run_version_internal(pg_uuid_t *run_id, int32 version)
{
	Datum		values[2] = {UUIDPGetDatum(run_id), Int32GetDatum(version)};
	char	   *status = lock_run(run_id, NULL, true);

	if (dex_status_is_terminal(status))
		illegal_transition(run_id, "change the version of", status);
	dex_spi_exec(&set_version_plan, values, NULL, 0);
	if (SPI_processed == 1)
	{
		char	   *name = dex_spi_gettext_copy(0, 2);

		dex_queue_keyed_tasks_added((int32) dex_spi_getint64(0, 1), dex_task_key(name, version), 1);
	}
}
