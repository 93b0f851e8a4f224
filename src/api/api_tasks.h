/*-------------------------------------------------------------------------
 *
 * api/api_tasks.h
 *	  What the files of the task API share, and nothing else includes but
 *	  api_queues.c (for dex_interval_usecs, to check rate periods):
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
extern void dex_check_task_args(FunctionCallInfo fcinfo);

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

extern Datum *dex_batch_array(FunctionCallInfo fcinfo, int arg, Oid elemtype, const char *what,
							  bool allow_null_elems, bool **nulls_out, int *n);
extern DexTaskBatch dex_read_task_batch(FunctionCallInfo fcinfo, Oid value_type,
										const char *value_name);
extern DexTaskBatch dex_read_task_batch_at(FunctionCallInfo fcinfo, int first, Oid value_type,
										   const char *value_name);

/* api_complete.c */
extern void dex_complete_task_batch(const DexTaskBatch *b, bool protobuf, bool *done);
extern void dex_lock_batch_runs(const DexTaskBatch *b, bool share);
extern void dex_put_batch_row(ReturnSetInfo *rsinfo, Datum run_id, Datum task_id,
							  Datum outcome);

/* api_poll.c */
extern int32 dex_queue_room(const DexQueue *queue, bool lock, TimestampTz at);
/* the arguments of a poll */
typedef struct DexPollArgs
{
	char	   *queue_name;
	char	   *worker_id;
	int32		max_tasks;
	Interval   *lease;
	bool		worker_cache;	/* the worker keeps run states: incremental histories */
	TimestampTz lease_start;	/* 0: now(); see dex_poll_lease_start */
	/*
	 * What the worker declared it runs (1.6): n_names workflow or activity
	 * names, with versions (workflow queues) or without (NULL); keys, their
	 * dex_task_key()s.  n_names 0: it declared nothing, it runs any task.
	 */
	int			n_names;
	char	  **names;
	int32	   *versions;
	uint64	   *keys;
} DexPollArgs;
extern TimestampTz dex_poll_lease_start(const DexPollArgs *args);
extern DexPollArgs dex_read_poll_args(FunctionCallInfo fcinfo, int worker_cache_arg, int names_arg);
extern TimestampTz dex_poll_throttled_until(void);
extern int	dex_poll_task_messages(const DexPollArgs *args, bool protobuf, Datum **tasks,
								   int32 *queue_id);

/*
 * The two SQL entry points of a call that takes or gives its messages as
 * JSON or as protobuf: json_fn and pb_fn run body(fcinfo, protobuf) with the
 * owner's rights (api_call.c).  Used at file level, after body, with a
 * semicolon.
 */
#define DEX_JSON_AND_PB_ENTRY_POINTS(json_fn, pb_fn, body) \
static Datum \
json_fn##_body(PG_FUNCTION_ARGS) \
{ \
	return body(fcinfo, false); \
} \
static Datum \
pb_fn##_body(PG_FUNCTION_ARGS) \
{ \
	return body(fcinfo, true); \
} \
DEX_API_ENTRY_POINT(json_fn, json_fn##_body); \
DEX_API_ENTRY_POINT(pb_fn, pb_fn##_body)

#endif							/* DEX_API_API_TASKS_H */
