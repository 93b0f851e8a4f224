/*-------------------------------------------------------------------------
 *
 * complete_workflow.c
 *	  Completing workflow tasks, many per statement: the pipeline
 *	  fence -> check -> load -> apply -> write -> wake.
 *
 * dex_complete_workflow_tasks runs in the caller's transaction and SPI
 * connection, with a fixed number of statements whatever the size of the
 * batch: each phase is one multi-row statement over arrays (unnest), built
 * in memory first.  Its phases, each a function below:
 *	  fence		the runs are locked, in run id order (the locking protocol in
 *				src/README.md), so that concurrent batches do not deadlock;
 *				then each task row is deleted only with its current lock
 *				version.  A task of a queue the caller may not use (access.c)
 *				fails the whole call.
 *				A completion whose command ids do not follow its run's
 *				history (the workflow did not replay it) is not fenced: the
 *				task fails instead (failed = true), as dex.fail_task would
 *				fail it, so that a bad deploy fails no run for good.
 *	  check		a task whose lease is lost, or whose run ended meanwhile, is
 *				skipped (done = false) before anything is written for it, or,
 *				with raise_lost, reported as an error (fence.c); a completion
 *				that would end its run while events it did not show have come
 *				is set aside (superseded)
 *	  load		the inbox events each task showed, moved out of the inbox
 *	  apply		each task's events and commands (commands_apply.c); an invalid
 *				command fails the whole call, which then writes nothing
 *	  write		the rows of the batch (workflow_rows.c)
 *	  wake		what follows: the end of runs that ended, new workflow tasks
 *				for runs that start over or have unseen events
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/hsearch.h"

#include "engine/completion.h"

static int
compare_workflow_items(const void *a, const void *b)
{
	const DexWorkflowCompletion *x = a;
	const DexWorkflowCompletion *y = b;

	return memcmp(x->run_id, y->run_id, UUID_LEN);
}

/* ----------------------------------------------------------------
 * Fence and check
 * ----------------------------------------------------------------
 */

/*
 * A run's workflow task is on the run's queue, so the fence names it ($3):
 * the probe reads the primary key (run_id, queue_id) on both columns.  The
 * delete then names the runs only: with the queue too, a generic plan made
 * while the task table's statistics said the queue was nearly empty read
 * the whole queue from a queue-led index for every fence (W8, 10,000 tasks
 * pending: 1.6 ms a fence).  (Up to schema 1.7, whose task tables had a
 * partition per queue, the queue kept the probe on one partition.)  Tasks
 * whose run was not found (none can be leased) take the form without the
 * queue.
 *
 * The form with the queue finds each task by its primary key in a LATERAL
 * subquery, then deletes the tasks of the runs found, again by primary key.
 * As a join of the tasks with the unnest, the generic plan's cost grew with
 * the number of partitions it could not prune in its estimate (1.7), and
 * past a few queues the planner read the queue's whole partition once and
 * joined it with the unnest instead: every fence read every pending task of
 * its queue (W8 after other workloads: 7-9 ms of server CPU per workflow, 2.5
 * alone).  The lease is checked with num_nonnulls(), which no partial
 * index's predicate (locked_by IS NOT NULL) can match, so both scans stay on
 * the primary key.  Only runs whose (run, lock version) pair was found are
 * deleted, and only with a lock version of the call (lock versions are
 * unique): the delete's recheck, after a concurrent update, passes a
 * heartbeat and fails a new lease.
 */
#define FENCE_WORKFLOW_RETURNING \
	"RETURNING t.run_id, t.lock_version, t.started_at, t.inbox_ids, t.locked_by, t.queue_id, " \
	DEX_QUEUE_LIMITED_SQL
static DexPlan fence_workflow_plan = {
	"DELETE FROM dex.workflow_task t USING unnest($1::uuid[], $2::bigint[]) AS b(run_id, lock_version) "
	"WHERE t.run_id = b.run_id AND t.lock_version = b.lock_version AND t.locked_by IS NOT NULL "
	FENCE_WORKFLOW_RETURNING,
	2, {UUIDARRAYOID, INT8ARRAYOID}
};
static DexPlan fence_queue_workflow_plan = {
	"DELETE FROM dex.workflow_task t WHERE t.run_id = ANY (ARRAY("
	"  SELECT w.run_id FROM unnest($1::uuid[], $2::bigint[]) AS b(run_id, lock_version), "
	"  LATERAL (SELECT w.run_id FROM dex.workflow_task w "
	"           WHERE w.run_id = b.run_id AND w.queue_id = $3 AND w.lock_version = b.lock_version "
	"           AND num_nonnulls(w.locked_by) = 1 LIMIT 1) w)) "
	"AND t.lock_version = ANY ($2) AND num_nonnulls(t.locked_by) = 1 "
	FENCE_WORKFLOW_RETURNING,
	3, {UUIDARRAYOID, INT8ARRAYOID, INT4OID}
};

/* The fenced task row "r" of the fence's result, noted in its item */
static void
note_fenced_task(DexWorkflowCompletion *items, int n, uint64 r)
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

/*
 * Delete the task rows of the items that are on queue queue_id (-1: of the
 * items whose run was not found; see FENCE_WORKFLOW_SQL; -2 is the mark of
 * the items failed instead, which are not fenced again) with their lock
 * versions, and note which were (item->done).
 */
static void
fence_queue(DexWorkflowCompletion *items, int n, const int32 *queues, int32 queue_id)
{
	ArrayBuildState *run_ids = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	ArrayBuildState *versions = initArrayResult(INT8OID, CurrentMemoryContext, false);
	Datum		values[3];

	for (int i = 0; i < n; i++)
	{
		if (queues[i] != queue_id)
			continue;
		dex_array_add(run_ids, UUIDPGetDatum(items[i].run_id), false);
		dex_array_add(versions, Int64GetDatum(items[i].lock_version), false);
	}
	values[0] = dex_array_result(run_ids);
	values[1] = dex_array_result(versions);
	values[2] = Int32GetDatum(queue_id);
	dex_spi_exec(queue_id < 0 ? &fence_workflow_plan : &fence_queue_workflow_plan, values, NULL, 0);
	dex_check_queue_use_spi(6);
	for (uint64 r = 0; r < SPI_processed; r++)
		note_fenced_task(items, n, r);
	dex_queue_room_freed_spi(6, 7);
}

/*
 * Command ids grow over the life of a run: a workflow that replays
 * deterministically gives every new command an id above those already in its
 * history.  A completion that reuses an id, or gives them out of order, did
 * not replay the recorded history (a bad deploy, or a worker's bug): none of
 * its commands is applied, and its workflow task fails (dex.NonDeterminism,
 * naming the command), to be retried after a backoff and the run parked
 * BLOCKED after dex.max_workflow_task_failures (engine/retry.c), so that
 * deploying a fix, or rolling back, lets the run go on.  A run that takes no
 * tasks is left to the check that refuses its task as a lost lease.
 */
static void
fail_nondeterministic(DexWorkflowCompletion *item, DexRun *run)
{
	const Dex__V1__WorkflowTaskCompletion *completion = item->completion;
	int32		last = run->last_event_id;

	if (!dex_status_takes_tasks(run->status))
		return;
	for (size_t i = 0; i < completion->n_commands; i++)
	{
		const Dex__V1__Command *cmd = completion->commands[i];
		Dex__V1__Failure *failure;

		if (cmd->id == 0 || cmd->id > last)
		{
			last = Max(last, cmd->id);
			continue;
		}
		failure = dex_new_failure(psprintf("command %s has id %d, but ids up to %d are already used: "
										   "the workflow did not replay its history deterministically",
										   dex_command_name(cmd), cmd->id, last),
								  "dex.NonDeterminism", false);
		item->failed = dex_fail_workflow_task(item->run_id, item->lock_version, failure);
		if (item->failed)
			ereport(WARNING,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("workflow task of run %s failed: %s",
							dex_uuid_to_cstring(item->run_id), failure->message),
					 errhint("Deploy workflow code that replays the run's history; the task is retried after a backoff.")));
		return;
	}
}

/*
 * Fence: the items sorted by run id, their runs loaded and locked in that
 * order, those that did not replay their histories failed, the others' task
 * rows deleted with their lock versions (item->done), a statement per queue
 * of their runs (a worker's batch is of one queue).  Returns the runs.
 */
static HTAB *
fence_workflow_tasks(DexWorkflowCompletion *items, int n)
{
	ArrayBuildState *run_ids = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	int32	   *queues = palloc(sizeof(int32) * n);
	HTAB	   *runs;

	qsort(items, n, sizeof(DexWorkflowCompletion), compare_workflow_items);
	for (int i = 0; i < n; i++)
	{
		items[i].done = false;
		items[i].superseded = false;
		items[i].failed = false;
		items[i].has_inbox = false;
		dex_array_add(run_ids, UUIDPGetDatum(items[i].run_id), false);
	}

	/* the runs, locked */
	runs = dex_load_runs(dex_array_result(run_ids), true);

	/* the fence: each task row is deleted only with its current lock version */
	for (int i = 0; i < n; i++)
	{
		DexRun	   *run = dex_find_run(runs, items[i].run_id);

		if (run != NULL)
			fail_nondeterministic(&items[i], run);
		/* a failed task is not fenced again */
		queues[i] = items[i].failed ? -2 : run ? run->queue_id : -1;
	}
	for (int i = 0; i < n; i++)
	{
		bool		seen = false;

		for (int j = 0; j < i && !seen; j++)
			seen = queues[j] == queues[i];
		if (!seen && queues[i] != -2)
			fence_queue(items, n, queues, queues[i]);
	}
	pfree(queues);
	return runs;
}

/*
 * Check: a task left to a run that ended or was suspended meanwhile (a task
 * a cancellation or a suspension could not withdraw, see dex_end_runs) is
 * refused like a lost lease: a suspended run's commands never take effect.  Lost
 * leases are counted, and with raise_lost reported.
 */
static void
refuse_lost_tasks(DexWorkflowCompletion *items, int n, HTAB *runs, bool raise_lost)
{
	for (int i = 0; i < n; i++)
	{
		DexRun	   *run;

		if (!items[i].done)
			continue;
		run = dex_find_run(runs, items[i].run_id);
		if (run == NULL || !dex_status_takes_tasks(run->status))
			items[i].done = false;	/* left to a run that ended, was deleted or suspended */
	}
	for (int i = 0; i < n; i++)
		dex_stat_add(0, DEX_STAT_LEASES_LOST, items[i].done || items[i].failed ? 0 : 1);
	if (raise_lost)
		for (int i = 0; i < n; i++)
			if (!items[i].done && !items[i].failed)
				dex_report_lost_lease(items[i].run_id, 0, items[i].lock_version);
}

/* Whether the completion's commands end the run (continuing as new does not). */
static bool
ends_run(const Dex__V1__WorkflowTaskCompletion *completion)
{
	for (size_t i = 0; i < completion->n_commands; i++)
	{
		Dex__V1__Command__KindCase kind = completion->commands[i]->kind_case;

		if (kind == DEX__V1__COMMAND__KIND_COMPLETE_RUN ||
			kind == DEX__V1__COMMAND__KIND_FAIL_RUN ||
			kind == DEX__V1__COMMAND__KIND_CANCEL_RUN)
			return true;
	}
	return false;
}

/* The inbox rows the item's task showed, as (run id, inbox id) pairs */
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

/*
 * Check: a completion that would end its run (or a task of a run asked to
 * cancel) while events the task did not show have arrived is set aside
 * (superseded): nothing of it is recorded, and the run gets a new task
 * showing them all, so that no accepted activity result or event is dropped
 * by the end of the run.  The workflow replays and decides again.  With
 * raise_lost this is not an error.
 */
static void
set_aside_superseded(DexWorkflowCompletion *items, int n, HTAB *runs)
{
	ArrayBuildState *ending = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	ArrayBuildState *inbox_runs = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	ArrayBuildState *inbox_ids = initArrayResult(INT8OID, CurrentMemoryContext, false);
	ArrayBuildState *again = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	Datum		values[3];

	for (int i = 0; i < n; i++)
	{
		if (!items[i].done)
			continue;
		if (ends_run(items[i].completion))
		{
			dex_array_add(ending, UUIDPGetDatum(items[i].run_id), false);
			add_inbox_ids(inbox_runs, inbox_ids, &items[i]);
		}
	}
	if (ending->nelems == 0)
		return;

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
}

/* ----------------------------------------------------------------
 * Load, apply, wake
 * ----------------------------------------------------------------
 */

/*
 * Load: the events the tasks that are still done were shown, moved out of
 * the inbox into their runs.  Returns how many tasks are done.
 */
static int
load_shown_events(DexWorkflowCompletion *items, int n, HTAB *runs)
{
	ArrayBuildState *inbox_runs = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	ArrayBuildState *inbox_ids = initArrayResult(INT8OID, CurrentMemoryContext, false);
	int			n_done = 0;

	for (int i = 0; i < n; i++)
	{
		if (!items[i].done)
			continue;
		add_inbox_ids(inbox_runs, inbox_ids, &items[i]);
		n_done++;
	}
	if (n_done > 0)
		dex_consume_inbox(runs, dex_array_result(inbox_runs), dex_array_result(inbox_ids));
	return n_done;
}

/*
 * Incremental histories (shmem/run_cache.c): the worker that completed the
 * task holds the run's state: it saw the history the task showed, and its
 * batch follows; while the run goes on.  A run that starts over or ends is
 * held by nobody.  The run is locked.
 */
static void
note_run_holder(const DexWorkflowCompletion *item, const DexAppliedTask *task, const DexRun *run)
{
	if (task->new_status == NULL && !task->continued && item->worker_id != NULL)
		dex_run_holder_set(item->run_id, item->worker_id, run->history_length,
						   run->history_length + (int32) task->n_events);
	else
		dex_run_holder_forget(item->run_id);
}

/* Apply: each task that is done, into the rows of the batch */
static void
apply_tasks(DexWorkflowCompletion *items, int n, HTAB *runs, DexBatchRows *rows)
{
	for (int i = 0; i < n; i++)
	{
		DexRun	   *run;
		DexAppliedTask task;

		if (!items[i].done)
			continue;
		run = dex_find_run(runs, items[i].run_id);
		if (run == NULL)
			elog(ERROR, "workflow run %s of a workflow task does not exist",
				 dex_uuid_to_cstring(items[i].run_id));
		dex_apply_workflow_task(&task, &items[i], run, rows);
		dex_batch_rows_add_task(rows, &items[i], &task);
		note_run_holder(&items[i], &task, run);
		dex_stat_add(run->queue_id, DEX_STAT_TASKS_COMPLETED, 1);
	}
}

/*
 * A run that goes on gets a new task if unseen events remain.  "Visible" is
 * judged by the clock, not by the transaction's start: the scheduler may have
 * handed over a timer that fell due since (its task insert waited for our
 * delete of the task row), and that timer must not be left without a task.
 */
#define REQUEUE_SQL(cols, run_cols) \
	"INSERT INTO dex.workflow_task (queue_id, run_id, priority" cols ") " \
	"SELECT r.queue_id, r.id, r.priority" run_cols " FROM dex.workflow_run r WHERE r.id = ANY ($1) " \
	"AND r.status = ANY ('{CREATED,RUNNING}'::text[]) " \
	"AND EXISTS (SELECT 1 FROM dex.workflow_inbox i WHERE i.run_id = r.id " \
	"            AND i.visible_from <= clock_timestamp() OFFSET 0) " \
	"ORDER BY r.id ON CONFLICT DO NOTHING RETURNING queue_id"
static DexPlan requeue_plans[2] = {
	{REQUEUE_SQL("", ""), 1, {UUIDARRAYOID}},
	{REQUEUE_SQL(DEX_TASK_RUN_COLS, ", r.workflow_name, r.workflow_version"), 1, {UUIDARRAYOID}}
};

/*
 * Wake: runs that ended end (dex_end_runs), runs that start over get their
 * first task, runs that go on a new one if events wait for them.
 */
static void
wake_runs(DexBatchRows *rows)
{
	Datum		values[1];

	if (rows->n_ended > 0)
		dex_end_runs(dex_array_result(rows->ended), true,	/* their tasks were fenced */
					 rows->ended_may_have);
	if (rows->n_continued > 0)
		dex_ensure_workflow_tasks(dex_array_result(rows->needs_task));
	if (rows->n_open > 0)
	{
		values[0] = dex_array_result(rows->open);
		dex_spi_exec(&requeue_plans[dex_schema_1_6()], values, NULL, 0);
		dex_queue_work_added_spi(1);
		dex_stat_count_spi(DEX_STAT_TASKS_CREATED, 1);
	}
}

/*
 * Complete fenced workflow tasks (the file header gives the phases).  On
 * return, item->done says whether each was applied, item->superseded whether
 * it was set aside for new events.
 */
void
dex_complete_workflow_tasks(DexWorkflowCompletion *items, int n, bool raise_lost)
{
	HTAB	   *runs;
	DexBatchRows rows;

	if (n == 0)
		return;
	runs = fence_workflow_tasks(items, n);
	refuse_lost_tasks(items, n, runs, raise_lost);
	set_aside_superseded(items, n, runs);
	if (load_shown_events(items, n, runs) == 0)
		return;
	dex_batch_rows_init(&rows);
	apply_tasks(items, n, runs, &rows);
	dex_batch_rows_write(&rows);
	wake_runs(&rows);
}
