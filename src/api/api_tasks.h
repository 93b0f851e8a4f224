/*-------------------------------------------------------------------------
 *
 * api/api_tasks.h
 *	  What the files of the task API share, and nothing else includes:
 *	    api_tasks.c		argument checks, the arrays of batch calls
 *	    api_poll.c		dex.poll_tasks: leasing; a queue's room
 *	    api_complete.c	dex.complete_task(s)
 *	    api_fail.c		dex.fail_task(s)
 *	    api_heartbeat.c	dex.heartbeat_task(s)
 *	    api_wait.c		dex.wait_for_tasks, the long poll
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEX_API_API_TASKS_H
#define DEX_API_API_TASKS_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "funcapi.h"

#include "api/api.h"

/* api_tasks.c: arguments */
extern bool dex_interval_usecs(const Interval *iv, int64 *usecs);
extern void dex_check_lease_duration(Interval *lease);
extern void dex_check_task_args(FunctionCallInfo fcinfo, const char *what);

/* api_tasks.c: batch calls, whose arguments are arrays with one element per task */
typedef struct DexTaskBatch
{
	int			n;
	Datum	   *run_ids;
	Datum	   *task_ids;
	Datum	   *lock_versions;
	Datum	   *values;			/* results or failures; NULL if the call has none */
	bool	   *value_nulls;
} DexTaskBatch;

extern DexTaskBatch dex_read_task_batch(FunctionCallInfo fcinfo, Oid value_type,
										const char *value_name);
extern void dex_put_batch_row(ReturnSetInfo *rsinfo, Datum run_id, Datum task_id,
							  Datum outcome, bool outcome_null);

/* api_poll.c */
extern int32 dex_queue_room(const DexQueue *queue, bool lock);

#endif							/* DEX_API_API_TASKS_H */
