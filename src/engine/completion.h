/*-------------------------------------------------------------------------
 *
 * engine/completion.h
 *	  What the files that complete workflow tasks share, and nothing else
 *	  includes: the rows a batch of completions writes, and the state of one
 *	  task while its commands apply.
 *
 * A batch of workflow task completions goes through named phases:
 *	  complete_workflow.c	the pipeline: fence and checks, the shown events
 *							loaded, each task applied, the rows written, the
 *							runs woken (dex_complete_workflow_tasks)
 *	  commands_apply.c		one task: the events it records, each command
 *							kind applied (dex_apply_workflow_task)
 *	  workflow_rows.c		the rows of the batch, built in memory as each
 *							task is applied and written one statement a table
 * Activity results are complete_activity.c's, and what a lost lease reports
 * is fence.c's.  Everything runs in the caller's transaction and SPI
 * connection, under the locking protocol in src/README.md.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEX_ENGINE_COMPLETION_H
#define DEX_ENGINE_COMPLETION_H

#include "engine/engine.h"

/* The rows a batch of workflow completions writes, one array per column */
typedef struct DexBatchRows
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
	ArrayBuildState *r_history_bytes;
	int			n_runs;
	/* dex.activity_task inserts */
	DexActivityRows activities;
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
	int			ended_may_have; /* dex_end_runs' DEX_ENDED_* of the runs that ended */
} DexBatchRows;

/* The state of one workflow task's completion while its commands apply */
typedef struct DexAppliedTask
{
	pg_uuid_t  *run_id;
	DexRun	   *run;
	TimestampTz now;
	Dex__V1__WorkflowEvent **events;	/* what the task records, in order */
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
	int64		history_bytes;	/* the run's history's encoded size, this task's batch included */
	DexBatchRows *rows;
} DexAppliedTask;

/* commands_apply.c */
extern void dex_apply_workflow_task(DexAppliedTask *task, DexWorkflowCompletion *item,
									DexRun *run, DexBatchRows *rows);

/* workflow_rows.c */
extern void dex_batch_rows_init(DexBatchRows *rows);
extern void dex_batch_rows_add_task(DexBatchRows *rows, DexWorkflowCompletion *item,
									const DexAppliedTask *task);
extern void dex_batch_rows_write(DexBatchRows *rows);

#endif							/* DEX_ENGINE_COMPLETION_H */
