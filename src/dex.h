/*-------------------------------------------------------------------------
 *
 * dex.h
 *	  Declarations shared by the subsystems of dex, the durable execution
 *	  engine that runs inside PostgreSQL.
 *
 * Each subsystem has one C file:
 *	  dex.c			module load, settings (GUCs), SQLSTATEs
 *	  codec.c		protobuf <-> bytea / canonical proto3 JSON
 *	  spi_util.c	prepared SPI plans kept across calls
 *	  wakeup.c		shared memory: scheduler latch, commit-time wake-ups
 *	  stats.c		activity counters in shared memory (dex.stat_counters)
 *	  history.c		queue lookups, ids and times, events, inbox writes, retries
 *	  privileges.c	queue grants, the checks made with them, the API's rights
 *	  api_queues.c	dex.create_queue
 *	  api_codec.c	dex.to_json, dex.from_json, dex.payload_value
 *	  api_runs.c	dex.create_run(s), dex.run_history
 *	  api_tasks.c	dex.poll_tasks, complete/fail/heartbeat, dex.wait_for_tasks
 *	  workflow_task.c	runs, histories and inbox events of workflow tasks
 *	  commands.c	checks of a workflow task's commands that need no database
 *	  completion.c	applying completions, many tasks per statement
 *	  rebuild.c		rebuilding the UNLOGGED task tables after a crash
 *	  locks.c		dex's own heavyweight locks (rebuild, queue capacity)
 *	  instances.c	instance ids: one active run per id and queue
 *	  launcher.c	the static launcher background worker
 *	  scheduler.c	the per-database scheduler background worker
 *	  maintenance.c	the per-database maintenance background worker (retention)
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEX_H
#define DEX_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/uuid.h"

#include "codec.h"

/*
 * dex's own SQLSTATEs, class "WD" (dex workflow engine; classes starting
 * with I-Z are free for implementations).
 */
#define ERRCODE_DEX_LEASE_LOST			MAKE_SQLSTATE('W','D','0','0','1')
#define ERRCODE_DEX_RUN_CANCELLED		MAKE_SQLSTATE('W','D','0','0','2')

/* Settings (see dex.c for their meaning and defaults). */
extern char *dex_database;
extern int	dex_scheduler_naptime_ms;
extern int	dex_retry_max_attempts;
extern int	dex_retry_initial_delay_ms;
extern double dex_retry_multiplier;
extern double dex_retry_randomization;
extern int	dex_retry_max_delay_ms;
extern int	dex_max_payload_size;
extern int	dex_retention_period_s;
extern int	dex_retention_batch_size;
extern int	dex_maintenance_naptime_ms;

/* dex.c */
extern bool dex_preloaded;
extern void dex_check_payload_size(Size size, const char *what);

/* wakeup.c */
extern void dex_shmem_request(void);
extern void dex_shmem_startup(void);
extern void dex_wakeup_init(void);
#define DEX_MAX_DATABASES 64
extern bool dex_worker_register(bool scheduler);
extern void dex_worker_no_extension(void);
extern void dex_database_status(Oid dbid, bool *dropping, bool *no_extension);
extern void dex_database_drop_begin(Oid dbid);
extern void dex_database_drop_done(Oid dbid);
extern void dex_launcher_register(void);
extern void dex_wake_launcher_at_commit(void);
extern uint64 dex_launcher_events(void);
extern void dex_scheduler_set_next_wake(TimestampTz when);
extern void dex_wake_scheduler_at_commit(TimestampTz due);
extern void dex_warn_if_not_preloaded(const char *what);
extern void dex_queue_work_added(int32 queue_id);
extern void dex_queue_work_added_spi(int col);
extern uint64 dex_queue_generation(int32 queue_id);
extern bool dex_queue_wait(int32 queue_id, uint64 generation, long timeout_ms);

/* stats.c: the counters of dex.stat_counters(), per (database, queue) */
typedef enum DexStatCounter
{
	/* a queue's */
	DEX_STAT_TASKS_CREATED,
	DEX_STAT_POLLS,
	DEX_STAT_POLLS_EMPTY,
	DEX_STAT_TASKS_LEASED,
	DEX_STAT_TASKS_COMPLETED,
	DEX_STAT_TASKS_FAILED,
	DEX_STAT_COMPLETIONS_SUPERSEDED,
	DEX_STAT_RETRIES_DUE,
	DEX_STAT_LEASES_EXPIRED,
	/* the database's own (queue id 0) */
	DEX_STAT_LEASES_LOST,
	DEX_STAT_RUNS_WOKEN,
	DEX_STAT_SCHEDULER_PASSES,
	DEX_STAT_SCHEDULER_ERRORS,
	DEX_STAT_SCHEDULER_TIME,	/* microseconds */
	DEX_STAT_SCHEDULER_MAX_TIME,	/* microseconds */
	DEX_STAT_N
} DexStatCounter;

extern void dex_stats_shmem_request(void);
extern void dex_stats_shmem_startup(void);
extern void dex_stat_add(int32 queue_id, DexStatCounter counter, int64 n);
extern void dex_stat_poll(int32 queue_id, int64 n);
extern void dex_stat_count_spi(DexStatCounter counter, int col);
extern void dex_stat_scheduler_pass(TimestampTz start, bool failed);
extern void dex_report_wait(const char *what);

/* spi_util.c */
typedef struct DexPlan
{
	const char *sql;
	int			nargs;
	Oid			argtypes[16];
	SPIPlanPtr	plan;
} DexPlan;

extern int	dex_spi_exec(DexPlan *plan, Datum *values, const char *nulls, long count);
extern Datum dex_spi_getdatum(int row, int col, bool *isnull);
extern bool dex_spi_getbool(int row, int col);
extern int64 dex_spi_getint64(int row, int col);
extern bool dex_column_exists(const char *table, const char *column);
extern bytea *dex_spi_getbytea_copy(int row, int col);
extern char *dex_spi_gettext_copy(int row, int col);
extern int	dex_push_planner_settings(void);
extern void dex_pop_planner_settings(int level);

/* history.c */
typedef struct DexQueue
{
	int32		id;
	char	   *name;
	bool		is_workflow;
	bool		paused;			/* polls hand out nothing */
	int32		capacity;		/* most tasks leased at once; 0: no limit */
	int			n_grantees;		/* roles it is granted to; -1: no grants (1.0) */
	Oid		   *grantees;
} DexQueue;

extern bool dex_lookup_queue(const char *name, DexQueue *queue);
extern DexQueue dex_require_queue(const char *name, bool want_workflow);
extern bool dex_queue_by_id(int32 queue_id, DexQueue *queue);
extern const char *dex_queue_name(int32 queue_id);
extern void dex_queue_cache_reset(void);
/* a statement's column: whether the queue of task t has a capacity */
#define DEX_QUEUE_LIMITED_SQL \
	"(SELECT q.capacity IS NOT NULL FROM dex.queue q WHERE q.id = t.queue_id)"
extern void dex_queue_room_freed_spi(int queue_col, int limited_col);
extern pg_uuid_t *dex_new_uuid(void);
extern char *dex_uuid_to_cstring(const pg_uuid_t *uuid);
extern Google__Protobuf__Timestamp *dex_pb_timestamp(TimestampTz ts);
extern TimestampTz dex_timestamp_from_pb(const Google__Protobuf__Timestamp *ts);
extern Dex__V1__WorkflowEvent *dex_new_event(int32 id, TimestampTz ts);
extern Dex__V1__Payload *dex_payload_from_jsonb(Jsonb *value);
extern Dex__V1__Payload *dex_payload_from_bytea(bytea *data, const char *what);
extern Dex__V1__Payload *dex_payload_unpack(bytea *data, const char *what);
extern Jsonb *dex_payload_to_jsonb(const Dex__V1__Payload *payload);
extern void dex_array_add(ArrayBuildState *state, Datum value, bool isnull);
extern Datum dex_array_result(ArrayBuildState *state);

typedef struct DexInboxBatch
{
	ArrayBuildState *run_ids;
	ArrayBuildState *visible_from;
	ArrayBuildState *delayed;
	ArrayBuildState *events;
	ArrayBuildState *timer_ids;
	ArrayBuildState *visible_runs;
	int			n;
} DexInboxBatch;

extern void dex_inbox_batch_init(DexInboxBatch *b);
extern void dex_inbox_batch_add(DexInboxBatch *b, pg_uuid_t *run_id,
								Dex__V1__WorkflowEvent *event, TimestampTz visible_from);
extern void dex_inbox_batch_flush(DexInboxBatch *b);
extern void dex_insert_inbox(pg_uuid_t *run_id, Dex__V1__WorkflowEvent *event,
							 TimestampTz visible_from);
extern void dex_inbox_batch_add_unlocked(DexInboxBatch *b, pg_uuid_t *run_id,
										 Dex__V1__WorkflowEvent *event);
extern void dex_ensure_workflow_tasks(Datum run_ids);
extern void dex_lock_runs(Datum run_ids, bool share);
extern bool dex_status_is_terminal(const char *status);
extern int	dex_keys_per_queue(void);
extern bool dex_admit_run(pg_uuid_t *run_id, int32 queue_id, const char *key, int32 priority);
extern void dex_release_keys(Datum run_ids);
extern Dex__V1__RetryPolicy *dex_effective_retry_policy(const Dex__V1__RetryPolicy *given);
extern TimestampTz dex_retry_time(const Dex__V1__RetryPolicy *policy, int attempt);
extern void dex_activity_attempt_failed(pg_uuid_t *run_id, int32 event_id,
										int32 attempt, bytea *retry_policy,
										TimestampTz deadline,
										Dex__V1__Failure *failure);

/* privileges.c */

/* the search_path of every statement dex runs: nothing a user can create */
#define DEX_SEARCH_PATH "pg_catalog, pg_temp"

typedef struct DexApiCall
{
	Oid			userid;			/* the caller's user and security context */
	int			sec_context;
	Oid			caller;			/* the enclosing API call's caller */
	int			guc_level;		/* nest level of the pinned search_path; 0: none */
} DexApiCall;

extern void dex_api_enter(Oid proc_oid, DexApiCall *call);
extern void dex_api_leave(const DexApiCall *call, bool error);
extern Datum dex_api_call(FunctionCallInfo fcinfo, PGFunction body);
extern bool dex_queue_grants_exist(void);
extern bool dex_may_use_queue(const DexQueue *queue);
extern void dex_check_queue_use(const DexQueue *queue);
extern bool dex_may_use_queue_id(int32 queue_id);
extern void dex_check_queue_use_spi(int queue_col);
extern void dex_grant_queue_defaults(int32 queue_id);
extern Datum dex_usable_queue_ids_datum(void);
extern Datum dex_usable_queue_ids_list(void);

/* instances.c */
extern bool dex_claim_instance(int32 queue_id, const char *instance_id, pg_uuid_t *run_id);
extern int	dex_find_instance(Datum queue_ids, const char *instance_id);

/* workflow_task.c */
typedef struct DexRun
{
	pg_uuid_t	id;				/* hash key */
	char	   *workflow_name;
	int32		workflow_version;
	char	   *status;
	int32		history_length;
	int32		last_event_id;
	bytea	   *argument;
	TimestampTz created_at;
	char	   *instance_id;
	int32		priority;
	Jsonb	   *labels;
	char	   *concurrency_key;
	char	   *custom_status;
	bool		has_parent;
	pg_uuid_t	parent_id;
	int32		queue_id;
	int32		generation;		/* continue-as-new count */
	int32		parent_event_id;	/* the parent's ChildRunCreated event */
	bool		cancel_requested;
	bytea	   *history;		/* dex_load_histories: one encoded EventBatch */
	int			n_inbox;		/* dex_load_inbox: encoded WorkflowEvents */
	bytea	  **inbox;
} DexRun;

extern Datum dex_uuid_array(pg_uuid_t *const *ids, int n);
extern struct HTAB *dex_load_runs(Datum ids, bool lock);
extern DexRun *dex_find_run(struct HTAB *runs, pg_uuid_t *id);
extern void dex_load_histories(struct HTAB *runs, Datum ids);
extern void dex_load_inbox(struct HTAB *runs, Datum run_ids, Datum inbox_ids, bool consume);
extern Dex__V1__RunStatus dex_run_status_enum(const char *status);
extern Dex__V1__WorkflowEvent *dex_run_created_event(DexRun *run);
extern Dex__V1__WorkflowEvent **dex_build_new_events(DexRun *run, const char *worker_id,
													 TimestampTz started_at, int extra,
													 size_t *n_events);

/* commands.c */
extern int64 dex_duration_ms(const Google__Protobuf__Duration *d);
extern const char *dex_command_name(const Dex__V1__Command *cmd);
extern void dex_check_commands(const Dex__V1__WorkflowTaskCompletion *completion);
extern void dex_refuse_command_after_end(const Dex__V1__Command *cmd) pg_attribute_noreturn();

/* completion.c */
typedef struct DexWorkflowCompletion
{
	pg_uuid_t  *run_id;
	int64		lock_version;
	Dex__V1__WorkflowTaskCompletion *completion;
	bool		done;			/* out: false if not applied (lease lost, run
								 * ended, or superseded) */
	bool		superseded;		/* out: set aside, as new events came (see
								 * completion.c) */
	TimestampTz started_at;		/* internal: from the fenced task row */
	char	   *worker_id;
	Datum		inbox_ids;		/* internal: the inbox rows the task showed */
	bool		has_inbox;
} DexWorkflowCompletion;

typedef struct DexActivityCompletion
{
	pg_uuid_t  *run_id;
	int32		task_id;
	int64		lock_version;
	Dex__V1__Payload *result;
	bool		done;			/* out: false if the lease was lost */
} DexActivityCompletion;

extern void dex_report_lost_lease(pg_uuid_t *run_id, int32 task_id, int64 lock_version);
extern void dex_complete_workflow_tasks(DexWorkflowCompletion *items, int n, bool raise_lost);
extern void dex_complete_activity_tasks(DexActivityCompletion *items, int n, bool raise_lost);
extern void dex_end_runs(Datum run_ids);

/* api_runs.c */
extern void dex_cancel_run_internal(pg_uuid_t *run_id, const char *reason, bool if_active);

/* launcher.c */
extern char dex_worker_database[];
extern bool dex_worker_start(Datum main_arg, const char *type);
extern void dex_worker_leave_without_extension(bool leave);

/* maintenance.c */
extern bool dex_lease_acquire(const char *name, int duration_ms);

/* rebuild.c */
extern bool dex_rebuild_tasks_if_needed(void);

/* locks.c */
extern void dex_wait_for_rebuild(void);
extern void dex_lock_for_rebuild(void);
extern void dex_lock_queue_polls(int32 queue_id);

#endif							/* DEX_H */
