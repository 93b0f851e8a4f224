/*-------------------------------------------------------------------------
 *
 * api_tasks.c
 *	  The task API: dex.poll_tasks, dex.complete_task(s), dex.fail_task(s),
 *	  dex.heartbeat_task(s) and the long poll dex.wait_for_tasks: leasing
 *	  tasks to workers and taking what they report.
 *
 * A task is named by (run id, task id): task id 0 is the run's workflow
 * task, any other the id of the activity's ActivityTaskCreated event.  A
 * lease carries a lock version drawn from the dex.lease_version sequence;
 * completing or failing a task requires the current lock version, and is
 * otherwise refused with ERRCODE_DEX_LEASE_LOST before anything is written.
 * A worker polls, waits on and reports on the tasks of the queues it may use
 * only (src/privileges.c); the entry points run with their owner's rights.
 *
 * Polls and completions work on many tasks per statement: the workflow-task
 * pieces are loaded by workflow_task.c and completions applied by
 * completion.c, for one task or for a batch alike.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "common/int.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "funcapi.h"
#include "nodes/parsenodes.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "api/api.h"

PG_FUNCTION_INFO_V1(dex_poll_tasks);
PG_FUNCTION_INFO_V1(dex_poll_tasks_pb);
PG_FUNCTION_INFO_V1(dex_complete_task);
PG_FUNCTION_INFO_V1(dex_complete_task_pb);
PG_FUNCTION_INFO_V1(dex_fail_task);
PG_FUNCTION_INFO_V1(dex_fail_task_pb);

#define MAX_TASKS_PER_POLL 1000
#define MAX_LEASE_USECS ((int64) 365 * USECS_PER_DAY)

/*
 * An interval's length in microseconds, a month counting 30 days; false if
 * it does not fit in an int64 (then it is far out of any range dex accepts).
 */
static bool
interval_usecs(const Interval *iv, int64 *usecs)
{
	int64		months;
	int64		days;

	if (pg_mul_s64_overflow((int64) iv->month, DAYS_PER_MONTH * USECS_PER_DAY, &months) ||
		pg_mul_s64_overflow((int64) iv->day, USECS_PER_DAY, &days) ||
		pg_add_s64_overflow(months, days, usecs) ||
		pg_add_s64_overflow(*usecs, iv->time, usecs))
		return false;
	return true;
}

static void
check_lease_duration(Interval *lease)
{
	int64		usecs;

	if (!interval_usecs(lease, &usecs) || usecs <= 0 || usecs > MAX_LEASE_USECS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease duration must be positive and at most 365 days")));
}

/* ----------------------------------------------------------------
 * dex.poll_tasks
 * ----------------------------------------------------------------
 */

/*
 * A task shows the events visible by the clock, not by the transaction's
 * start: the event that made the task may have been committed by a
 * transaction that started after ours.
 *
 * An activity's lease never outlasts its timeouts: start-to-close (from the
 * attempt's start), heartbeat (from the last heartbeat) and schedule-to-close
 * (from its scheduling, across attempts).  A lease that expires counts as a
 * failed attempt (the scheduler reclaims it).
 *
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
	"                   WHERE i.run_id = t.run_id AND i.visible_from <= clock_timestamp() "
	"                   ORDER BY i.visible_from, i.id) "
	"FROM c WHERE t.queue_id = $1 AND t.run_id = c.run_id "
	"RETURNING t.run_id, t.lock_version, t.locked_until, t.started_at, t.inbox_ids",
	4, {INT4OID, INT4OID, TEXTOID, INTERVALOID}
};

static DexPlan lease_activity_plan = {
	"WITH c AS MATERIALIZED (SELECT run_id, event_id FROM dex.activity_task "
	"      WHERE queue_id = $1 AND status = 'QUEUED' AND locked_by IS NULL "
	"      ORDER BY priority DESC, created_at LIMIT $2 FOR UPDATE SKIP LOCKED) "
	"UPDATE dex.activity_task t SET locked_by = $3, lock_version = nextval('dex.lease_version'), "
	"attempt_started_at = now(), "
	"locked_until = LEAST(now() + $4, "
	"    now() + make_interval(secs => coalesce(t.start_to_close_ms, 1e12) / 1000.0), "
	"    now() + make_interval(secs => coalesce(t.heartbeat_timeout_ms, 1e12) / 1000.0), "
	"    coalesce(t.schedule_deadline, 'infinity')) "
	"FROM c WHERE t.queue_id = $1 AND t.run_id = c.run_id AND t.event_id = c.event_id "
	"RETURNING t.run_id, t.event_id, t.lock_version, t.locked_until, t.name, t.argument, "
	"t.attempt, t.retry_policy, t.last_failure, t.heartbeat_details",
	4, {INT4OID, INT4OID, TEXTOID, INTERVALOID}
};

/*
 * Capacity: a queue with one hands out at most that many tasks leased at
 * once.  Polls of such a queue take its capacity lock (locks.c) until their
 * transaction ends, so that two polls cannot both see the same room; polls
 * of other queues take none.
 */

static DexPlan leased_workflow_plan = {
	"SELECT count(*) FROM (SELECT 1 FROM dex.workflow_task WHERE queue_id = $1 "
	"  AND locked_by IS NOT NULL AND locked_until > now() LIMIT $2) s",
	2, {INT4OID, INT4OID}
};

static DexPlan leased_activity_plan = {
	"SELECT count(*) FROM (SELECT 1 FROM dex.activity_task WHERE queue_id = $1 "
	"  AND locked_by IS NOT NULL AND locked_until > now() LIMIT $2) s",
	2, {INT4OID, INT4OID}
};

/* How many more tasks the queue may lease now (INT_MAX: no limit, 0: paused). */
static int32
queue_room(const DexQueue *queue, bool lock)
{
	Datum		values[2];

	if (queue->paused)
		return 0;
	if (queue->capacity == 0)
		return PG_INT32_MAX;
	if (lock)
		dex_lock_queue_polls(queue->id);
	values[0] = Int32GetDatum(queue->id);
	values[1] = Int32GetDatum(queue->capacity);
	dex_spi_exec(queue->is_workflow ? &leased_workflow_plan : &leased_activity_plan,
				 values, NULL, 1);
	return queue->capacity - (int32) dex_spi_getint64(0, 1);
}

/* A leased task, read back from the lease statement */
typedef struct Leased
{
	pg_uuid_t  *run_id;
	int32		task_id;
	int64		lock_version;
	TimestampTz locked_until;
	TimestampTz started_at;		/* workflow tasks */
	char	   *name;			/* activity tasks */
	bytea	   *argument;
	int32		attempt;
	bytea	   *retry_policy;
	bytea	   *last_failure;
	bytea	   *heartbeat_details;
	bool		dropped;		/* left to a run that ended: deleted, not returned */
} Leased;

static DexPlan drop_tasks_plan = {
	"DELETE FROM dex.workflow_task WHERE run_id = ANY ($1)",
	1, {UUIDARRAYOID}
};

/*
 * A cancellation withdraws a run's task with SKIP LOCKED (see dex_end_runs):
 * if a poll held it then, the task is still there after the run ended (or,
 * later, was deleted).  The poll that leases it next deletes it instead of
 * handing it out.
 */
static void
drop_tasks_of_ended_runs(HTAB *runs, Leased *leased, uint64 n)
{
	ArrayBuildState *ended = initArrayResult(UUIDOID, CurrentMemoryContext, false);

	for (uint64 i = 0; i < n; i++)
	{
		DexRun	   *run = dex_find_run(runs, leased[i].run_id);

		if (run == NULL || dex_status_is_terminal(run->status))
		{
			leased[i].dropped = true;
			dex_array_add(ended, UUIDPGetDatum(leased[i].run_id), false);
		}
	}
	if (ended->nelems > 0)
	{
		Datum		values[1] = {dex_array_result(ended)};

		dex_spi_exec(&drop_tasks_plan, values, NULL, 0);
	}
}

/*
 * The task message of a leased workflow task, as JSON or protobuf.  For
 * protobuf the stored history is copied, not decoded: WorkflowTask.history
 * has the field number of EventBatch.events.
 */
static Datum
workflow_task_datum(Leased *t, DexRun *run, const char *queue_name, const char *worker_id,
					bool as_json)
{
	Dex__V1__WorkflowTask task;
	Size		hlen = run->history ? VARSIZE(run->history) - VARHDRSZ : 0;

	dex__v1__workflow_task__init(&task);
	task.new_events = dex_build_new_events(run, worker_id, t->started_at, 0, &task.n_new_events);
	task.run_id = dex_uuid_to_cstring(t->run_id);
	task.workflow_name = run->workflow_name;
	task.workflow_version = run->workflow_version;
	task.queue = (char *) queue_name;
	task.lock_version = t->lock_version;
	task.locked_until = dex_pb_timestamp(t->locked_until);
	task.status = dex_run_status_enum(run->status);
	task.history_length = run->history_length;

	if (as_json)
	{
		if (hlen > 0)
		{
			Dex__V1__EventBatch *batch = (Dex__V1__EventBatch *)
				dex_pb_unpack(&dex__v1__event_batch__descriptor,
							  (uint8 *) VARDATA(run->history), hlen, "history");

			task.history = batch->events;
			task.n_history = batch->n_events;
		}
		return JsonbPGetDatum(dex_pb_to_jsonb((ProtobufCMessage *) &task));
	}
	else
	{
		size_t		len;
		uint8	   *rest = dex_pb_pack((ProtobufCMessage *) &task, &len);
		bytea	   *out = palloc(VARHDRSZ + hlen + len);

		SET_VARSIZE(out, VARHDRSZ + hlen + len);
		if (hlen > 0)
			memcpy(VARDATA(out), VARDATA(run->history), hlen);
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
	task.argument = t->argument ? dex_payload_unpack(t->argument, "argument") : NULL;
	task.attempt = t->attempt;
	task.lock_version = t->lock_version;
	task.locked_until = dex_pb_timestamp(t->locked_until);
	task.retry_policy = (Dex__V1__RetryPolicy *)
		dex_pb_unpack(&dex__v1__retry_policy__descriptor,
					  (uint8 *) VARDATA_ANY(t->retry_policy),
					  VARSIZE_ANY_EXHDR(t->retry_policy), "retry policy");
	if (t->heartbeat_details)
		task.heartbeat_details = dex_payload_unpack(t->heartbeat_details, "heartbeat details");
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
	DexQueue	queue;
	Datum		values[4];
	Leased	   *leased;
	uint64		n;
	pg_uuid_t **run_ids;
	HTAB	   *runs = NULL;
	ArrayBuildState *inbox_runs = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	ArrayBuildState *inbox_ids = initArrayResult(INT8OID, CurrentMemoryContext, false);
	Datum		inbox;

	dex_args_not_null(fcinfo, 4, "queue, worker id, max tasks and lease duration");
	queue_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	worker_id = text_to_cstring(PG_GETARG_TEXT_PP(1));
	max_tasks = PG_GETARG_INT32(2);
	lease = PG_GETARG_INTERVAL_P(3);

	dex_check_name(worker_id, "worker id");
	if (max_tasks < 1 || max_tasks > MAX_TASKS_PER_POLL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max tasks must be between 1 and %d", MAX_TASKS_PER_POLL),
				 errdetail("It was %d.", max_tasks)));
	check_lease_duration(lease);

	InitMaterializedSRF(fcinfo, 0);

	SPI_connect();
	dex_wait_for_rebuild();
	queue = dex_existing_queue(queue_name, NULL);
	dex_check_queue_use(&queue);

	/* a paused queue hands out nothing, a full one nothing more */
	max_tasks = Min(max_tasks, queue_room(&queue, true));
	n = 0;
	if (max_tasks > 0)
	{
		values[0] = Int32GetDatum(queue.id);
		values[1] = Int32GetDatum(max_tasks);
		values[2] = CStringGetTextDatum(worker_id);
		values[3] = IntervalPGetDatum(lease);
		dex_spi_exec(queue.is_workflow ? &lease_workflow_plan : &lease_activity_plan,
					 values, NULL, 0);
		n = SPI_processed;
	}

	/* read the leases back before the next statement replaces SPI_tuptable */
	leased = palloc0(sizeof(Leased) * Max(n, 1));
	run_ids = palloc(sizeof(pg_uuid_t *) * Max(n, 1));
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
			inbox = dex_spi_getdatum(i, 5, &isnull);
			if (!isnull)
			{
				Datum	   *elems;
				int			count;

				deconstruct_array(DatumGetArrayTypeP(inbox), INT8OID, 8, FLOAT8PASSBYVAL,
								  TYPALIGN_DOUBLE, &elems, NULL, &count);
				for (int k = 0; k < count; k++)
				{
					dex_array_add(inbox_runs, UUIDPGetDatum(t->run_id), false);
					dex_array_add(inbox_ids, elems[k], false);
				}
			}
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
			t->heartbeat_details = dex_spi_getbytea_copy(i, 10);
		}
		run_ids[i] = t->run_id;
		/* the scheduler reclaims expired activity leases and announces expired workflow ones */
		dex_wake_scheduler_at_commit(t->locked_until);
	}

	/* everything the workflow tasks show, in three statements for the whole batch */
	if (queue.is_workflow && n > 0)
	{
		Datum		ids = dex_uuid_array(run_ids, (int) n);

		runs = dex_load_runs(ids, false);
		dex_load_histories(runs, ids);
		dex_load_inbox(runs, dex_array_result(inbox_runs), dex_array_result(inbox_ids), false);
		drop_tasks_of_ended_runs(runs, leased, n);
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
		if (t->dropped)
			continue;
		if (queue.is_workflow)
		{
			DexRun	   *run = dex_find_run(runs, t->run_id);

			if (run == NULL)
				elog(ERROR, "workflow run %s of a workflow task does not exist",
					 dex_uuid_to_cstring(t->run_id));
			out[5] = workflow_task_datum(t, run, queue.name, worker_id, as_json);
		}
		else
			out[5] = activity_task_datum(t, queue.name, as_json);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
	}

	dex_stat_poll(queue.id, tuplestore_tuple_count(rsinfo->setResult));
	SPI_finish();
	return (Datum) 0;
}

static Datum
poll_tasks_json(PG_FUNCTION_ARGS)
{
	return poll_tasks(fcinfo, true);
}

static Datum
poll_tasks_pb(PG_FUNCTION_ARGS)
{
	return poll_tasks(fcinfo, false);
}

Datum
dex_poll_tasks(PG_FUNCTION_ARGS)
{
	return dex_api_call(fcinfo, poll_tasks_json);
}

Datum
dex_poll_tasks_pb(PG_FUNCTION_ARGS)
{
	return dex_api_call(fcinfo, poll_tasks_pb);
}

static void
check_task_args(FunctionCallInfo fcinfo, const char *what)
{
	dex_args_not_null(fcinfo, 3, "run id, task id and lock version");
	if (PG_GETARG_INT32(1) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("task id must not be negative"),
				 errhint("Task id 0 names a run's workflow task, a positive id an activity task.")));
	if (strcmp(what, "failure") == 0)
		dex_arg_not_null(fcinfo, 3, "failure");
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
 * Failing an activity task
 * ----------------------------------------------------------------
 */

static DexPlan lock_activity_plan = {
	"SELECT attempt, retry_policy, schedule_deadline, queue_id, " DEX_QUEUE_LIMITED_SQL " "
	"FROM dex.activity_task t WHERE run_id = $1 AND event_id = $2 "
	"AND lock_version = $3 AND locked_by IS NOT NULL FOR UPDATE OF t",
	3, {UUIDOID, INT4OID, INT8OID}
};

static DexPlan count_task_failure_plan = {
	"UPDATE dex.workflow_run SET task_failures = task_failures + 1, last_task_failure = $2, "
	"       updated_at = now() WHERE id = $1 RETURNING task_failures",
	2, {UUIDOID, BYTEAOID}
};

/* the fence: the failing worker's lease is withdrawn (a new lock version) */
static DexPlan fence_failed_workflow_task_plan = {
	"UPDATE dex.workflow_task t SET lock_version = nextval('dex.lease_version'), locked_until = 'infinity' "
	"WHERE t.run_id = $1 AND t.lock_version = $2 AND t.locked_by IS NOT NULL "
	"RETURNING t.run_id, t.queue_id, " DEX_QUEUE_LIMITED_SQL,
	2, {UUIDOID, INT8OID}
};

/* ...and the task can be leased again when the backoff ends */
static DexPlan back_off_workflow_task_plan = {
	"UPDATE dex.workflow_task SET locked_until = $2 WHERE run_id = $1",
	2, {UUIDOID, TIMESTAMPTZOID}
};

/*
 * Lock the task's run first (the locking protocol of history.c): to write it,
 * or, with share, to add events to it.  Returns whether the run has ended, so
 * that a task left to it is refused like a lost lease.
 */
static bool
run_ended_after_lock(pg_uuid_t *run_id, bool share)
{
	dex_lock_runs(dex_uuid_array(&run_id, 1), share);
	return SPI_processed > 0 && dex_status_is_terminal(dex_spi_gettext_copy(0, 2));
}

/*
 * A workflow task that failed (the worker could not run the workflow code:
 * a crash loop, a missing workflow, a bug) is handed out again after a
 * backoff that grows with the run's consecutive task failures, per the
 * dex.retry_* settings; the count and the last failure are on the run, and
 * a completed task resets them.  The workflow's own errors fail the run
 * instead (the failRun command).
 */
static bool
fail_workflow_task(pg_uuid_t *run_id, int64 lock_version, Dex__V1__Failure *failure,
				   bool raise_lost)
{
	Datum		values[2] = {UUIDPGetDatum(run_id), Int64GetDatum(lock_version)};
	int32		failures;
	TimestampTz retry_at;
	bool		held = false;

	/* a task left to an ended run is refused */
	if (!run_ended_after_lock(run_id, false))
	{
		dex_spi_exec(&fence_failed_workflow_task_plan, values, NULL, 0);
		dex_check_queue_use_spi(2);
		held = SPI_processed > 0;
		if (held)
			dex_stat_add((int32) dex_spi_getint64(0, 2), DEX_STAT_TASKS_FAILED, 1);
		dex_queue_room_freed_spi(2, 3);
	}
	if (!held)
	{
		dex_stat_add(0, DEX_STAT_LEASES_LOST, 1);
		if (!raise_lost)
			return false;
		dex_report_lost_lease(run_id, 0, lock_version);
	}

	values[1] = PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) failure));
	dex_spi_exec(&count_task_failure_plan, values, NULL, 1);
	failures = (int32) dex_spi_getint64(0, 1);

	retry_at = dex_retry_time(dex_effective_retry_policy(NULL), failures);
	values[1] = TimestampTzGetDatum(retry_at);
	dex_spi_exec(&back_off_workflow_task_plan, values, NULL, 0);
	/* the scheduler tells waiting workers when the backoff ends */
	dex_wake_scheduler_at_commit(retry_at);
	return true;
}

static bool
fail_activity_task(pg_uuid_t *run_id, int32 task_id, int64 lock_version,
				   Dex__V1__Failure *failure, bool raise_lost)
{
	Datum		values[3] = {UUIDPGetDatum(run_id), Int32GetDatum(task_id), Int64GetDatum(lock_version)};
	bool		held = false;

	if (task_id == 0)
		return fail_workflow_task(run_id, lock_version, failure, raise_lost);
	if (!run_ended_after_lock(run_id, true))
	{
		dex_spi_exec(&lock_activity_plan, values, NULL, 1);
		dex_check_queue_use_spi(4);
		held = SPI_processed > 0;
		if (held)
			dex_stat_add((int32) dex_spi_getint64(0, 4), DEX_STAT_TASKS_FAILED, 1);
	}
	if (!held)
	{
		dex_stat_add(0, DEX_STAT_LEASES_LOST, 1);
		if (!raise_lost)
			return false;
		dex_report_lost_lease(run_id, task_id, lock_version);
	}
	{
		bool		isnull;
		Datum		deadline = dex_spi_getdatum(0, 3, &isnull);

		int32		queue_id = (int32) dex_spi_getint64(0, 4);
		bool		limited = dex_spi_getbool(0, 5);

		dex_activity_attempt_failed(run_id, task_id, (int32) dex_spi_getint64(0, 1),
									dex_spi_getbytea_copy(0, 2),
									isnull ? DT_NOEND : DatumGetTimestampTz(deadline), failure);
		/* the lease ended: a queue with a capacity has room again */
		if (limited)
			dex_queue_work_added(queue_id);
	}
	return true;
}

/* ----------------------------------------------------------------
 * SQL entry points
 * ----------------------------------------------------------------
 */

/* The commands of a workflow task, from either form, checked as far as they can be alone */
static Dex__V1__WorkflowTaskCompletion *
completion_from(Datum result, bool isnull, bool protobuf)
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
	dex_pb_check_payloads((ProtobufCMessage *) completion, "workflow task completion");
	dex_check_commands(completion);
	return completion;
}

/* The result of an activity, from either form; NULL for none */
static Dex__V1__Payload *
activity_result_from(Datum result, bool isnull, bool protobuf)
{
	if (isnull)
		return NULL;
	return protobuf ?
		dex_payload_from_bytea(DatumGetByteaPP(result), "result") :
		dex_payload_from_jsonb(DatumGetJsonbP(result));
}

static void
check_task_id(int32 task_id)
{
	if (task_id < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("task id must not be negative"),
				 errhint("Task id 0 names a run's workflow task, a positive id an activity task.")));
}

/*
 * dex.complete_task(run_id, task_id, lock_version, result jsonb) and
 * dex.complete_task_pb(..., result bytea): a batch of one that raises on a
 * lost lease.
 */
static void
complete_task(FunctionCallInfo fcinfo, bool protobuf)
{
	int32		task_id;
	Datum		result = PG_ARGISNULL(3) ? (Datum) 0 : PG_GETARG_DATUM(3);

	check_task_args(fcinfo, "result");
	task_id = PG_GETARG_INT32(1);
	SPI_connect();
	dex_wait_for_rebuild();
	if (task_id == 0)
	{
		DexWorkflowCompletion item;

		memset(&item, 0, sizeof(item));
		item.run_id = PG_GETARG_UUID_P(0);
		item.lock_version = PG_GETARG_INT64(2);
		item.completion = completion_from(result, PG_ARGISNULL(3), protobuf);
		dex_complete_workflow_tasks(&item, 1, true);
	}
	else
	{
		DexActivityCompletion item;

		memset(&item, 0, sizeof(item));
		item.run_id = PG_GETARG_UUID_P(0);
		item.task_id = task_id;
		item.lock_version = PG_GETARG_INT64(2);
		item.result = activity_result_from(result, PG_ARGISNULL(3), protobuf);
		dex_complete_activity_tasks(&item, 1, true);
	}
	SPI_finish();
}

static Datum
complete_task_json(PG_FUNCTION_ARGS)
{
	complete_task(fcinfo, false);
	PG_RETURN_VOID();
}

static Datum
complete_task_pb(PG_FUNCTION_ARGS)
{
	complete_task(fcinfo, true);
	PG_RETURN_VOID();
}

Datum
dex_complete_task(PG_FUNCTION_ARGS)
{
	return dex_api_call(fcinfo, complete_task_json);
}

Datum
dex_complete_task_pb(PG_FUNCTION_ARGS)
{
	return dex_api_call(fcinfo, complete_task_pb);
}

static Dex__V1__Failure *
failure_from(Datum failure, bool protobuf)
{
	Dex__V1__Failure *f;

	if (protobuf)
	{
		bytea	   *data = DatumGetByteaPP(failure);

		dex_check_payload_size(VARSIZE_ANY_EXHDR(data), "failure");
		f = (Dex__V1__Failure *)
			dex_pb_unpack(&dex__v1__failure__descriptor, (uint8 *) VARDATA_ANY(data),
						  VARSIZE_ANY_EXHDR(data), "failure");
	}
	else
	{
		Jsonb	   *json = DatumGetJsonbP(failure);

		dex_check_payload_size(VARSIZE(json), "failure");
		f = (Dex__V1__Failure *)
			dex_pb_from_jsonb(&dex__v1__failure__descriptor, json, "failure");
	}
	dex_pb_check_payloads((ProtobufCMessage *) f, "failure");
	return f;
}

static void
fail_task(FunctionCallInfo fcinfo, bool protobuf)
{
	check_task_args(fcinfo, "failure");
	SPI_connect();
	dex_wait_for_rebuild();
	fail_activity_task(PG_GETARG_UUID_P(0), PG_GETARG_INT32(1), PG_GETARG_INT64(2),
					   failure_from(PG_GETARG_DATUM(3), protobuf), true);
	SPI_finish();
}

static Datum
fail_task_json(PG_FUNCTION_ARGS)
{
	fail_task(fcinfo, false);
	PG_RETURN_VOID();
}

static Datum
fail_task_pb(PG_FUNCTION_ARGS)
{
	fail_task(fcinfo, true);
	PG_RETURN_VOID();
}

/* dex.fail_task(run_id, task_id, lock_version, failure jsonb) */
Datum
dex_fail_task(PG_FUNCTION_ARGS)
{
	return dex_api_call(fcinfo, fail_task_json);
}

/* dex.fail_task_pb(run_id, task_id, lock_version, failure bytea) */
Datum
dex_fail_task_pb(PG_FUNCTION_ARGS)
{
	return dex_api_call(fcinfo, fail_task_pb);
}

/* ----------------------------------------------------------------
 * CALL dex.wait_for_tasks(queue, timeout, INOUT ready)
 * ----------------------------------------------------------------
 */

PG_FUNCTION_INFO_V1(dex_wait_for_tasks);

#define MAX_WAIT_USECS ((int64) USECS_PER_DAY)

/* qualified throughout, though dex_api_enter pins search_path: a procedure has no SET clause */
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
/*
 * The queue, the wake-up generation to wait from, and whether the queue may
 * have pollable tasks now.
 */
static void
look_at_queue(const char *queue_name, DexQueue *queue, uint64 *generation, bool *ready)
{
	int			guc_level = dex_push_planner_settings();
	Datum		values[1];

	*queue = dex_existing_queue(queue_name, NULL);
	dex_check_queue_use(queue);

	/* read the generation first: work committed after this wakes us */
	*generation = dex_queue_generation(queue->id);
	values[0] = Int32GetDatum(queue->id);
	*ready = false;
	if (queue_room(queue, false) > 0)
	{
		dex_spi_exec(queue->is_workflow ? &pollable_workflow_plan : &pollable_activity_plan,
					 values, NULL, 1);
		*ready = dex_spi_getbool(0, 1);
	}
	dex_pop_planner_settings(guc_level);
}

/*
 * look_at_queue with the procedure owner's rights: a procedure that commits
 * cannot be SECURITY DEFINER, so it takes them by itself (privileges.c) and
 * gives them back before it commits.
 */
static void
look_for_tasks(Oid proc_oid, const char *queue_name, DexQueue *queue, uint64 *generation,
			   bool *ready)
{
	DexApiCall	call;

	dex_api_enter(proc_oid, &call);
	PG_TRY();
	{
		look_at_queue(queue_name, queue, generation, ready);
	}
	PG_CATCH();
	{
		dex_api_leave(&call, true);
		PG_RE_THROW();
	}
	PG_END_TRY();
	dex_api_leave(&call, false);
}

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
	dex_args_not_null(fcinfo, 2, "queue and timeout");
	queue_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	timeout = PG_GETARG_INTERVAL_P(1);
	if (!interval_usecs(timeout, &timeout_usecs) ||
		timeout_usecs < 0 || timeout_usecs > MAX_WAIT_USECS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout must be between 0 and 1 day")));

	SPI_connect_ext(SPI_OPT_NONATOMIC);
	look_for_tasks(fcinfo->flinfo->fn_oid, queue_name, &queue, &generation, &ready);

	if (!ready && timeout_usecs > 0)
	{
		/* no snapshot, no xmin from here on */
		SPI_commit();
		dex_report_wait(psprintf("waiting for tasks on queue \"%s\"", queue_name));
		ready = dex_queue_wait(queue.id, generation, (long) ((timeout_usecs + 999) / 1000));
		dex_report_wait(NULL);
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

	dex_arg_not_null(fcinfo, arg, what);
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
				 value_type != InvalidOid ?
				 errdetail("There are %d run ids, %d task ids, %d lock versions and %d %s.",
						   n1, n2, n3, n4, value_name) :
				 errdetail("There are %d run ids, %d task ids and %d lock versions.",
						   n1, n2, n3)));
	if (n1 > MAX_BATCH)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a batch holds at most %d tasks", MAX_BATCH),
				 errdetail("This one has %d.", n1)));
	for (int i = 0; i < n1; i++)
		check_task_id(DatumGetInt32(b.task_ids[i]));
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
	DexWorkflowCompletion *wf = palloc0(sizeof(DexWorkflowCompletion) * Max(b.n, 1));
	DexActivityCompletion *act = palloc0(sizeof(DexActivityCompletion) * Max(b.n, 1));
	int			n_wf = 0;
	int			n_act = 0;

	/* parse everything first: invalid input fails the call before any write */
	for (int i = 0; i < b.n; i++)
	{
		int32		task_id = DatumGetInt32(b.task_ids[i]);

		if (task_id == 0)
		{
			wf[n_wf].run_id = DatumGetUUIDP(b.run_ids[i]);
			wf[n_wf].lock_version = DatumGetInt64(b.lock_versions[i]);
			wf[n_wf].completion = completion_from(b.values[i], b.value_nulls[i], protobuf);
			n_wf++;
		}
		else
		{
			act[n_act].run_id = DatumGetUUIDP(b.run_ids[i]);
			act[n_act].task_id = task_id;
			act[n_act].lock_version = DatumGetInt64(b.lock_versions[i]);
			act[n_act].result = activity_result_from(b.values[i], b.value_nulls[i], protobuf);
			n_act++;
		}
	}

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	dex_wait_for_rebuild();
	/* a batch of both kinds locks all its runs at once, in id order */
	if (n_wf > 0 && n_act > 0)
		dex_lock_runs(PointerGetDatum(construct_array(b.run_ids, b.n, UUIDOID, UUID_LEN, false,
													  TYPALIGN_CHAR)), false);
	/* activity results first: a workflow task completed in the same batch
	 * then sees them as unseen events and is requeued for them */
	dex_complete_activity_tasks(act, n_act, false);
	dex_complete_workflow_tasks(wf, n_wf, false);
	SPI_finish();

	for (int i = 0; i < n_act; i++)
		put_batch_row(rsinfo, UUIDPGetDatum(act[i].run_id), Int32GetDatum(act[i].task_id),
					  BoolGetDatum(act[i].done), false);
	for (int i = 0; i < n_wf; i++)
		put_batch_row(rsinfo, UUIDPGetDatum(wf[i].run_id), Int32GetDatum(0),
					  BoolGetDatum(wf[i].done), false);
	return (Datum) 0;
}

static Datum
complete_tasks_json(PG_FUNCTION_ARGS)
{
	return complete_tasks(fcinfo, false);
}

static Datum
complete_tasks_pb(PG_FUNCTION_ARGS)
{
	return complete_tasks(fcinfo, true);
}

Datum
dex_complete_tasks(PG_FUNCTION_ARGS)
{
	return dex_api_call(fcinfo, complete_tasks_json);
}

Datum
dex_complete_tasks_pb(PG_FUNCTION_ARGS)
{
	return dex_api_call(fcinfo, complete_tasks_pb);
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
	dex_wait_for_rebuild();
	/* all the runs at once, in id order, before any task row */
	{
		bool		share = true;

		for (int i = 0; i < b.n; i++)
			if (DatumGetInt32(b.task_ids[i]) == 0)
				share = false;
		dex_lock_runs(PointerGetDatum(construct_array(b.run_ids, b.n, UUIDOID, UUID_LEN, false,
													  TYPALIGN_CHAR)), share);
	}
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

static Datum
fail_tasks_json(PG_FUNCTION_ARGS)
{
	return fail_tasks(fcinfo, false);
}

static Datum
fail_tasks_pb(PG_FUNCTION_ARGS)
{
	return fail_tasks(fcinfo, true);
}

Datum
dex_fail_tasks(PG_FUNCTION_ARGS)
{
	return dex_api_call(fcinfo, fail_tasks_json);
}

Datum
dex_fail_tasks_pb(PG_FUNCTION_ARGS)
{
	return dex_api_call(fcinfo, fail_tasks_pb);
}

/*
 * Heartbeats extend leases: the lock version stays (it fences holders, not
 * time), locked_until moves to now + lease_duration, capped by an activity's
 * timeouts as at the lease.
 */
static DexPlan heartbeat_plan = {
	"WITH b AS (SELECT * FROM unnest($1::uuid[], $2::integer[], $3::bigint[]) "
	"           AS b(run_id, task_id, lock_version)), "
	"w AS (UPDATE dex.workflow_task t SET locked_until = now() + $4 FROM b "
	"      WHERE b.task_id = 0 AND t.run_id = b.run_id AND t.lock_version = b.lock_version "
	"        AND t.locked_by IS NOT NULL "
	"      RETURNING t.run_id, 0 AS task_id, t.locked_until, t.queue_id), "
	"a AS (UPDATE dex.activity_task t SET locked_until = LEAST(now() + $4, "
	"        t.attempt_started_at + make_interval(secs => coalesce(t.start_to_close_ms, 1e12) / 1000.0), "
	"        now() + make_interval(secs => coalesce(t.heartbeat_timeout_ms, 1e12) / 1000.0), "
	"        coalesce(t.schedule_deadline, 'infinity')) FROM b "
	"      WHERE b.task_id > 0 AND t.run_id = b.run_id AND t.event_id = b.task_id "
	"        AND t.lock_version = b.lock_version AND t.locked_by IS NOT NULL "
	"      RETURNING t.run_id, t.event_id AS task_id, t.locked_until, t.queue_id) "
	"SELECT run_id, task_id, locked_until, queue_id FROM w "
	"UNION ALL SELECT run_id, task_id, locked_until, queue_id FROM a",
	4, {UUIDARRAYOID, INT4ARRAYOID, INT8ARRAYOID, INTERVALOID}
};

/* Run the heartbeat statement for arrays of tasks; SPI_tuptable holds the held ones. */
static void
heartbeat(Datum run_ids, Datum task_ids, Datum lock_versions, Interval *lease)
{
	Datum		values[4] = {run_ids, task_ids, lock_versions, IntervalPGetDatum(lease)};

	check_lease_duration(lease);
	dex_spi_exec(&heartbeat_plan, values, NULL, 0);
	dex_check_queue_use_spi(4);
	for (uint64 i = 0; i < SPI_processed; i++)
		dex_wake_scheduler_at_commit((TimestampTz) dex_spi_getint64(i, 3));
}

static DexPlan keep_details_plan = {
	"UPDATE dex.activity_task SET heartbeat_details = $3 WHERE run_id = $1 AND event_id = $2",
	3, {UUIDOID, INT4OID, BYTEAOID}
};

/*
 * dex.heartbeat_task(run_id, task_id, lock_version, lease_duration, details)
 * returns timestamptz
 */
static Datum
heartbeat_task(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *run_id;
	int32		task_id;
	int64		lock_version;
	TimestampTz until;

	check_task_args(fcinfo, "result");
	dex_arg_not_null(fcinfo, 3, "lease duration");
	run_id = PG_GETARG_UUID_P(0);
	task_id = PG_GETARG_INT32(1);
	lock_version = PG_GETARG_INT64(2);

	SPI_connect();
	dex_wait_for_rebuild();
	heartbeat(PointerGetDatum(construct_array(&PG_GETARG_DATUM(0), 1, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR)),
			  PointerGetDatum(construct_array(&PG_GETARG_DATUM(1), 1, INT4OID, 4, true, TYPALIGN_INT)),
			  PointerGetDatum(construct_array(&PG_GETARG_DATUM(2), 1, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)),
			  PG_GETARG_INTERVAL_P(3));
	if (SPI_processed == 0)
		dex_report_lost_lease(run_id, task_id, lock_version);
	until = (TimestampTz) dex_spi_getint64(0, 3);
	if (!PG_ARGISNULL(4) && task_id > 0)
	{
		Datum		values[3] = {UUIDPGetDatum(run_id), Int32GetDatum(task_id),
			PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *)
											  dex_payload_from_jsonb(PG_GETARG_JSONB_P(4))))};

		dex_spi_exec(&keep_details_plan, values, NULL, 0);
	}
	SPI_finish();
	PG_RETURN_TIMESTAMPTZ(until);
}

/*
 * dex.heartbeat_tasks(run_ids, task_ids, lock_versions, lease_duration)
 * returns table (run_id, task_id, locked_until): one row per task whose
 * lease is still held; lost leases have no row.
 */
static Datum
heartbeat_tasks(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TaskBatch	b = read_task_batch(fcinfo, InvalidOid, NULL);

	dex_arg_not_null(fcinfo, 3, "lease duration");
	(void) b;
	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	dex_wait_for_rebuild();
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

Datum
dex_heartbeat_task(PG_FUNCTION_ARGS)
{
	return dex_api_call(fcinfo, heartbeat_task);
}

Datum
dex_heartbeat_tasks(PG_FUNCTION_ARGS)
{
	return dex_api_call(fcinfo, heartbeat_tasks);
}
