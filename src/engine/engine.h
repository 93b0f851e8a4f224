/*-------------------------------------------------------------------------
 *
 * engine/engine.h
 *	  The engine's rules: queues and who may use them, runs and their
 *	  histories, the inbox, instance ids, concurrency keys, retries,
 *	  applying completions, the lifecycle of runs, the rebuild after a crash
 *	  and dex's own locks.  Everything here runs in the caller's transaction
 *	  and SPI connection; src/README.md gives the locking protocol.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEX_ENGINE_ENGINE_H
#define DEX_ENGINE_ENGINE_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "utils/jsonb.h"

#include "util/util.h"
#include "wire/wire.h"
#include "shmem/shmem.h"

/* queues.c */
/* whether a queue's runs' events are published, and in which form (1.10, publish.c) */
typedef enum DexPublish
{
	DEX_PUBLISH_OFF,
	DEX_PUBLISH_JSON,
	DEX_PUBLISH_PROTOBUF
} DexPublish;

typedef struct DexQueue
{
	int32		id;
	char	   *name;
	bool		is_workflow;
	bool		paused;			/* polls hand out nothing */
	int32		capacity;		/* most tasks leased at once; 0: no limit */
	int32		rate_limit;		/* most tasks handed out per rate period; 0: no limit (1.7) */
	int64		rate_period_us;
	TimestampTz updated_at;		/* when dex.alter_queue last changed it; 0: never */
	DexPublish	publish;		/* its runs' events as logical messages (1.10) */
	int			n_grantees;		/* roles it is granted to; -1: no grants (1.0) */
	Oid		   *grantees;
} DexQueue;

extern bool dex_queue_grants_exist(void);
extern bool dex_lookup_queue(const char *name, DexQueue *queue);
extern void dex_queue_does_not_exist(const char *name, const char *kind) pg_attribute_noreturn();
extern DexQueue dex_existing_queue(const char *name, const char *kind);
extern bool dex_queue_by_id(int32 queue_id, DexQueue *queue);
extern const char *dex_queue_name(int32 queue_id);
extern void dex_queue_cache_reset(void);
extern void dex_queue_changed(Oid schema);
extern bool dex_queue_limits_exist(void);
extern bool dex_queue_publish_exists(void);
/* a statement's column: whether the queue of task t has a capacity */
#define DEX_QUEUE_LIMITED_SQL \
	"(SELECT q.capacity IS NOT NULL FROM dex.queue q WHERE q.id = t.queue_id)"
extern void dex_queue_room_freed_spi(int queue_col, int limited_col);

/* access.c: who may use which queue */
extern Oid	dex_access_set_caller(Oid role);
extern Oid	dex_access_caller(void);
extern DexQueue dex_require_queue(const char *name, bool want_workflow);
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
extern void dex_claim_instances(int32 queue_id, int n, Datum *instance_ids, bool *nulls,
								Datum *run_ids, bool *created);

/* runs.c: runs, histories and the events of workflow tasks */
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
	int32		task_failures;	/* workflow tasks failed in a row */
	bool		has_origin;		/* restarted or reset from origin_run_id */
	pg_uuid_t	origin_run_id;
	char	   *origin;			/* "RESTART" or "RESET" */
	int64		history_bytes;	/* encoded size of its history (1.4) */
	bytea	   *history;		/* dex_load_histories: one encoded EventBatch */
	int32		history_omitted;	/* events at its start a poll leaves out: the worker has them */
	int			n_inbox;		/* encoded WorkflowEvents shown (dex_consume_inbox, the poll) */
	bytea	  **inbox;
} DexRun;

extern int	dex_schema_1_4(void);
extern int	dex_schema_1_6(void);

/*
 * The columns of a workflow task row since 1.6 beyond the queue, run and
 * priority: its run's workflow name and version.  Statements that insert
 * tasks come in two forms, [dex_schema_1_6()], the second with these.
 */
#define DEX_TASK_RUN_COLS ", workflow_name, workflow_version"

/*
 * The columns of a run that dex_read_run reads, in its order, each with the
 * prefix p ("" or an alias and a dot); since_1_4 is one of the two macros
 * after it, [dex_schema_1_4()]: before 1.4 the origin and the history's size
 * are constants.
 */
#define DEX_RUN_COLS_SQL(p, since_1_4) \
	p "id, " p "workflow_name, " p "workflow_version, " p "status, " p "history_length, " \
	p "last_event_id, " p "argument, " p "created_at, " p "instance_id, " p "priority, " \
	p "labels, " p "concurrency_key, " p "custom_status, " p "parent_id, " p "queue_id, " \
	p "generation, " p "parent_event_id, " p "cancel_requested, " since_1_4
#define DEX_RUN_COLS_BEFORE_1_4(p) "0, NULL::uuid, NULL::text, 0::bigint"
#define DEX_RUN_COLS_SINCE_1_4(p) \
	p "task_failures, " p "origin_run_id, " p "origin, " p "history_bytes"
#define DEX_RUN_NCOLS 22

extern struct HTAB *dex_new_runs(void);
extern DexRun *dex_read_run(struct HTAB *runs, uint64 row, int col);
extern struct HTAB *dex_load_runs(Datum ids, bool lock);
extern DexRun *dex_find_run(struct HTAB *runs, pg_uuid_t *id);
extern void dex_load_histories(struct HTAB *runs, Datum ids, Datum seen);
extern void dex_consume_inbox(struct HTAB *runs, Datum run_ids, Datum inbox_ids);
extern Dex__V1__RunStatus dex_run_status_enum(const char *status);
extern Dex__V1__WorkflowEvent *dex_run_created_event(DexRun *run);
extern Dex__V1__WorkflowEvent **dex_build_new_events(DexRun *run, const char *worker_id,
													 TimestampTz started_at, int extra,
													 size_t *n_events);

/* publish.c: runs' events as logical decoding messages (1.10) */
extern bool dex_publish_possible(void);
extern void dex_publish_events(const pg_uuid_t *run_id, const DexRun *run, int32 generation,
							   int32 sequence, Dex__V1__WorkflowEvent **events, size_t n);
extern void dex_publish_batch(const pg_uuid_t *run_id, const DexRun *run, int32 generation,
							  int32 sequence, bytea *batch);

extern void dex_lock_runs(Datum run_ids, bool share);
extern bool dex_status_is_terminal(const char *status);
/* the statuses of runs that have ended, as an SQL text[] */
#define DEX_ENDED_STATUSES_SQL "'{COMPLETED,FAILED,CANCELLED,TERMINATED,TIMED_OUT}'::text[]"
extern bool dex_status_takes_tasks(const char *status);
extern void dex_no_such_run(pg_uuid_t *run_id) pg_attribute_noreturn();

/* inbox.c */
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
extern void dex_insert_first_task(pg_uuid_t *run_id, int32 queue_id, int32 priority);

/* signals.c: external events, one path for every sender */
extern void dex_deliver_external_events(int n, pg_uuid_t **run_ids, char **event_ids,
										Dex__V1__Payload **payloads, bool lock,
										Dex__V1__SignalOutcome *outcomes);
extern const char *dex_signal_outcome_name(Dex__V1__SignalOutcome outcome);

/* debounce.c: debounce keys (1.7) */
extern pg_uuid_t *dex_debounce_run(int32 queue_id, const char *workflow_name, const char *key,
								   pg_uuid_t *new_id, bytea *argument, Interval *debounce,
								   Interval *max, TimestampTz *start_at);

/* keys.c: concurrency keys */
extern int	dex_keys_per_queue(void);
extern bool dex_admit_run(pg_uuid_t *run_id, int32 queue_id, const char *key, int32 priority);
extern void dex_release_keys(Datum run_ids);
extern void dex_admit_waiting_runs(int32 queue_id, const char *key);

/* retry.c */
extern Dex__V1__RetryPolicy *dex_effective_retry_policy(const Dex__V1__RetryPolicy *given);
extern TimestampTz dex_retry_time(const Dex__V1__RetryPolicy *policy, int attempt);
extern bool dex_fail_workflow_task(pg_uuid_t *run_id, int64 lock_version, Dex__V1__Failure *failure);
extern void dex_activity_attempt_failed(pg_uuid_t *run_id, int32 event_id,
										int32 attempt, bytea *retry_policy,
										TimestampTz deadline,
										Dex__V1__Failure *failure);

/* commands.c */
extern int64 dex_duration_ms(const Google__Protobuf__Duration *d);
extern const char *dex_command_name(const Dex__V1__Command *cmd);
extern void dex_check_commands(const Dex__V1__WorkflowTaskCompletion *completion);
extern void dex_check_event_id_not_reserved(const char *event_id);
extern void dex_refuse_command_after_end(const Dex__V1__Command *cmd) pg_attribute_noreturn();

/*
 * Completions: complete_workflow.c, complete_activity.c and fence.c (the
 * files that complete workflow tasks share engine/completion.h)
 */
typedef struct DexWorkflowCompletion
{
	pg_uuid_t  *run_id;
	int64		lock_version;
	Dex__V1__WorkflowTaskCompletion *completion;
	bool		done;			/* out: false if not applied (lease lost, run
								 * ended, or superseded) */
	bool		superseded;		/* out: set aside, as new events came (see
								 * complete_workflow.c) */
	bool		failed;			/* out: failed as a task, as its commands did
								 * not replay the history (see
								 * complete_workflow.c) */
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
extern void dex_note_leased_activities(int32 queue_id, int run_col, int task_col);

/*
 * activity_rows.c: rows of new activity tasks, one array per column, from
 * the ActivityTaskCreated events that record them (a completion's, or the
 * rebuild's after a crash)
 */
typedef struct DexActivityRows
{
	ArrayBuildState *queue_id;
	ArrayBuildState *run_id;
	ArrayBuildState *event_id;
	ArrayBuildState *name;
	ArrayBuildState *priority;
	ArrayBuildState *argument;
	ArrayBuildState *retry_policy;
	ArrayBuildState *start_to_close;
	ArrayBuildState *heartbeat_timeout;
	ArrayBuildState *deadline;
	int			n;
} DexActivityRows;

#define DEX_ACTIVITY_ROWS_COLUMNS 10
extern void dex_activity_rows_init(DexActivityRows *rows);
extern void dex_activity_rows_add(DexActivityRows *rows, int32 queue_id, pg_uuid_t *run_id,
								  int32 event_id, const Dex__V1__ActivityTaskCreated *created,
								  const Dex__V1__RetryPolicy *policy, TimestampTz created_at);
extern void dex_activity_rows_values(DexActivityRows *rows, Datum *values);
extern void dex_activity_rows_insert(DexActivityRows *rows);

/* lifecycle.c: cancel, suspend, resume; the end of runs */
extern void dex_cancel_run_internal(pg_uuid_t *run_id, const char *reason, bool if_active);
extern void dex_terminate_run_internal(pg_uuid_t *run_id, const char *reason);
extern void dex_set_run_version_internal(pg_uuid_t *run_id, int32 version);
extern void dex_time_out_run_internal(pg_uuid_t *run_id, TimestampTz deadline);
extern void dex_suspend_run_internal(pg_uuid_t *run_id, const char *reason);
extern void dex_resume_run_internal(pg_uuid_t *run_id, const char *reason);
/*
 * What dex_end_runs must look for: some of the runs may have (1) a
 * concurrency key, (2) a parent, (4) an instance id.
 */
#define DEX_ENDED_KEYS 0x01
#define DEX_ENDED_PARENTS 0x02
#define DEX_ENDED_INSTANCES 0x04
#define DEX_ENDED_ANY (DEX_ENDED_KEYS | DEX_ENDED_PARENTS | DEX_ENDED_INSTANCES)
extern void dex_end_runs(Datum run_ids, bool task_withdrawn, int may_have);

/* run_timers.c: delayed starts and deadlines (1.4) */
extern void dex_add_run_timers(Datum run_ids, const char *kind, TimestampTz due_at);
extern int	dex_fire_run_timers(int limit);

/* schedules.c: schedules and their ticks (1.7) */
typedef struct DexSchedule
{
	int32		id;
	char	   *name;
	char	   *workflow_name;
	int32		workflow_version;
	int32		queue_id;
	char	   *cron_text;		/* NULL: every */
	DexCron		cron;
	int64		every_us;
	bytea	   *argument;		/* an encoded dex.v1.Payload, or NULL */
	char	   *timezone;
	struct pg_tz *tz;
	char	   *overlap;
	int64		catchup_us;
	int64		jitter_us;
	TimestampTz start_at;		/* DT_NOBEGIN: none */
	TimestampTz end_at;			/* DT_NOEND: none */
	bool		unbounded;		/* ticks before start_at and after end_at too */
	bool		paused;
	Jsonb	   *labels;
	TimestampTz next_tick;		/* DT_NOEND: none */
	TimestampTz buffered_tick;	/* DT_NOEND: none */
	TimestampTz last_tick;		/* DT_NOEND: none */
	bool		has_last_run;
	pg_uuid_t	last_run_id;
	int64		runs_started;
	int64		skipped_overlap;
	int64		skipped_missed;
} DexSchedule;

extern bool dex_schema_schedules(void);
extern int64 dex_fixed_interval_usecs(Interval *iv, const char *what);
extern void dex_schedule_check(DexSchedule *s);
extern void dex_schedule_bad_overlap(const char *overlap) pg_attribute_noreturn();
extern DexSchedule *dex_schedule_load(const char *name, bool lock);
extern TimestampTz dex_schedule_tick_after(const DexSchedule *s, TimestampTz after);
extern TimestampTz dex_schedule_fire_time(const DexSchedule *s, TimestampTz tick);
extern pg_uuid_t *dex_schedule_fire(DexSchedule *s, TimestampTz tick, const char *overlap,
									bool nowait, bool *buffered, bool *postponed);
extern void dex_schedule_save(DexSchedule *s, TimestampTz retry_at, bool by_scheduler);
extern int	dex_fire_schedules(int limit);

/* attempts.c: attempts that did not succeed (1.4) */
extern void dex_record_activity_attempt(pg_uuid_t *run_id, int32 event_id, Dex__V1__Failure *failure);
extern void dex_record_workflow_attempt(pg_uuid_t *run_id, bytea *failure);
/* a workflow task's lease that expired and was taken over */
typedef struct DexExpiredLease
{
	pg_uuid_t  *run_id;
	char	   *worker_id;
	TimestampTz leased_at;
	TimestampTz ended_at;
} DexExpiredLease;
extern void dex_record_expired_workflow_leases(const DexExpiredLease *leases, int n);

/* reset.c: restart and reset (1.4) */
extern pg_uuid_t *dex_restart_run_internal(pg_uuid_t *run_id);
extern pg_uuid_t *dex_reset_run_internal(pg_uuid_t *run_id, int32 event_id, const char *reason);

/* purge.c: deleting runs that ended */
extern uint64 dex_delete_runs(Datum run_ids);
extern void dex_purge_run_internal(pg_uuid_t *run_id);
extern uint64 dex_purge_runs_internal(const char *status, int32 queue_id, TimestampTz ended_before, int32 limit);

/* status_index.c: dex.run_status_index (1.11) */
extern bool dex_status_index_installed(void);
extern bool dex_sweep_run_statuses(int batch_size);
extern void dex_reset_run_status_index(void);

/* rebuild.c */
extern bool dex_rebuild_tasks_if_needed(void);

/* locks.c */
extern void dex_wait_for_rebuild(void);
extern void dex_lock_for_rebuild(void);
extern void dex_lock_queue_polls(int32 queue_id);


/* definitions.c: workflows defined in JSON (1.7) */
typedef enum DexStepType
{
	DEX_STEP_SQL,
	DEX_STEP_SERVICE,
	DEX_STEP_GATEWAY,
	DEX_STEP_END,
	DEX_STEP_TIMER,
	DEX_STEP_PARALLEL,
	DEX_STEP_JOIN,
	DEX_STEP_SIGNAL,
	DEX_STEP_USER,
	DEX_STEP_CALL
} DexStepType;

/* One step; the steps it leads to are indexes into its definition's steps, -1 none */
typedef struct DexStep
{
	char	   *id;
	DexStepType type;
	int			next;
	char	   *result_variable;	/* where a result goes; NULL: merged */
	char	   *input;			/* SQL/JSON path: an activity's or child's argument */
	char	   *sql;			/* sql */
	void	   *sql_plan;		/* its SPIPlanPtr, prepared by its first run, while the SPI
								 * connection lasts */
	char	   *activity;		/* service */
	char	   *queue;
	int32		retry_count;	/* -1: not given */
	Jsonb	   *retry_policy;
	char	   *start_to_close;
	char	   *schedule_to_close;
	char	   *heartbeat;
	int32		priority;
	int			n_conditions;	/* gateway */
	char	  **when;
	int		   *when_next;
	int			default_next;
	char	   *output;			/* end */
	bool		fails;
	char	   *fail_message;
	char	   *fail_type;
	char	   *duration;		/* timer */
	char	   *date;
	char	   *signal;			/* signal */
	char	   *timeout;		/* signal, user */
	int			timeout_next;
	char	   *assignee;		/* user */
	Jsonb	   *candidate_groups;
	Jsonb	   *form;
	int			n_branches;		/* parallel */
	int		   *branches;
	char	   *definition;		/* call */
	int32		version;
	int			incoming;		/* the ways into it (a join waits for them all) */
} DexStep;

typedef struct DexDefinition
{
	char	   *name;
	int32		version;
	Oid			owner;			/* whose privileges SQL steps have */
	char	   *search_path;	/* of SQL steps; NULL: public */
	int			start;
	int			n_steps;
	DexStep    *steps;
} DexDefinition;

extern bool dex_subtransaction(bool (*fn) (void *arg), void *arg, ErrorData **error);
extern DexDefinition *dex_parse_definition(Jsonb *doc, bool check);
extern DexDefinition *dex_load_definition(const char *name, int32 version);
extern const char *dex_step_type_name(DexStepType type);

/* interpret.c: the next commands of a run of a definition */
extern Dex__V1__WorkflowTaskCompletion *dex_interpret(const DexDefinition *def,
													  const Dex__V1__WorkflowTask *task);
extern const char *dex_interpret_current_step(void);
extern bool dex_interpret_step_context(const char **run_id, const char **definition,
									   int32 *version, const char **step);

/* definition_access.c: who may start runs of a definition (1.9) */
extern void dex_check_definition_start(const char *name, int32 version, Oid role);
extern bool dex_is_definition(const char *name);
extern void dex_check_owns_definition(const char *name, Oid role, const char *action);
extern bool dex_definition_grants_exist(void);
extern void dex_definitions_changed(void);
extern void dex_refuse_dropping_definition_owners(List *roles);

#endif							/* DEX_ENGINE_ENGINE_H */
