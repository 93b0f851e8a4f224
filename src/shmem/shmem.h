/*-------------------------------------------------------------------------
 *
 * shmem/shmem.h
 *	  dex's shared memory: the registry of databases and their workers, the
 *	  scheduler's and the queues' wake-ups (wakeup.c), the activity
 *	  counters of dex.stat_counters() (stats.c), and the latency histograms
 *	  of dex.latency_histograms() (latency.c), the token buckets of rate
 *	  limits (rate.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEX_SHMEM_SHMEM_H
#define DEX_SHMEM_SHMEM_H

#include "postgres.h"

#include "datatype/timestamp.h"

#include "util/util.h"

/* wakeup.c */
extern void dex_shmem_request(void);
extern void dex_shmem_startup(void);
extern void dex_wakeup_init(void);
#define DEX_MAX_DATABASES 64
extern bool dex_worker_register(bool scheduler);
extern bool dex_interpreter_register(void);
extern void dex_wake_interpreter_at_commit(void);
extern void dex_interpreter_serves(const uint64 *keys, int n);
extern void dex_queue_change_at_commit(void);
extern uint64 dex_queue_changes(void);
extern void dex_interpreter_note_runaway(const pg_uuid_t *run, const char *step);
extern bool dex_interpreter_runaway(pg_uuid_t *run, char *step, bool forget);
extern void dex_worker_no_extension(void);
extern void dex_database_status(Oid dbid, bool *dropping, bool *no_extension);
extern void dex_database_drop_begin(Oid dbid);
extern void dex_database_drop_done(Oid dbid);
extern void dex_launcher_register(void);
extern void dex_wake_launcher_at_commit(void);
extern uint64 dex_launcher_events(void);
extern void dex_scheduler_set_next_wake(TimestampTz when);
extern TimestampTz dex_scheduler_take_requests(void);
extern void dex_wake_scheduler_at_commit(TimestampTz due);
extern void dex_warn_if_not_preloaded(const char *what);
extern void dex_queue_tasks_added(int32 queue_id, int64 tasks);
extern void dex_queue_work_added(int32 queue_id);
extern void dex_queue_work_added_spi(int col);
extern void dex_queue_activities_added_spi(int queue_col, int name_col);
extern void dex_queue_run_task_added(int32 queue_id, const pg_uuid_t *run_id, uint64 key);
extern void dex_queue_run_tasks_added_spi(int queue_col, int run_col, int name_col);
extern void dex_queue_keyed_tasks_added(int32 queue_id, uint64 key, int64 tasks);
extern uint64 dex_queue_generation(int32 queue_id);
extern void dex_queue_leased(int32 queue_id);
extern void dex_queue_note_drained(int32 queue_id, uint64 declared, uint64 generation);
extern bool dex_queue_still_drained(int32 queue_id, uint64 declared);
extern void dex_queue_wait_begin(int32 queue_id, uint32 worker, const uint64 *keys, int n_keys);
extern bool dex_queue_wait(long timeout_ms);
extern bool dex_queue_wait_end(void);
extern void dex_queue_wait_abandon(void);
extern bool dex_queue_wait_stopped(void);
extern int	dex_queue_stop_waiters(uint32 worker);
extern void dex_queue_pass_wakeup_on(int32 queue_id, const uint64 *keys, int n);
extern void dex_runs_ended(Datum run_ids);
extern void dex_runs_started(void);
extern void dex_completion_begins(void);
extern void dex_commit_without_flush(void);
extern void dex_run_waiter(bool begin);
extern void dex_scheduler_watch_runs(const pg_uuid_t *run_ids, int n);
extern uint64 dex_run_generation(const pg_uuid_t *run_id);
extern bool dex_runs_wait(const pg_uuid_t *run_ids, const uint64 *generations, int n, long timeout_ms);

/* run_cache.c: which worker holds each run's state */
extern Size dex_run_cache_shmem_size(void);
extern void dex_run_cache_shmem_startup(void);
extern uint32 dex_worker_hash(const char *worker_id);
extern void dex_run_holder_set(const pg_uuid_t *run_id, const char *worker_id, int32 history_seen,
							   int32 history_length);
extern void dex_run_holder_forget(const pg_uuid_t *run_id);
extern uint32 dex_run_holder(const pg_uuid_t *run_id, int32 history_length, int32 *history_seen);

/* pollers.c: when a worker that could take each kind of task last polled */
extern Size dex_pollers_shmem_size(void);
extern void dex_pollers_shmem_startup(void);
extern uint64 dex_task_key(const char *name, int32 version);
extern void dex_polled(int32 queue_id, const uint64 *keys, int n);

/* rate.c: the token buckets of rate-limited queues */
extern Size dex_rate_shmem_size(void);
extern void dex_rate_shmem_startup(void);
extern int64 dex_rate_take(int32 queue_id, int32 limit, int64 period_us, TimestampTz config_at,
						   int64 want, TimestampTz *retry_at);
extern void dex_rate_give_back(int32 queue_id, int64 unused, bool throttled);
extern bool dex_rate_peek(int32 queue_id, int32 limit, int64 period_us, TimestampTz config_at,
						  TimestampTz *retry_at);
extern TimestampTz dex_rate_wake_at(int32 queue_id, TimestampTz retry_at, TimestampTz deadline);
extern void dex_rate_forget(int32 queue_id);

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

/* latency.c: the latency histograms of dex.latency_histograms() */
typedef enum DexLatency
{
	DEX_LATENCY_TASK_WAIT,		/* per queue: ready to handed out */
	DEX_LATENCY_ACTIVITY_EXECUTION, /* per activity queue: lease to completion */
	DEX_LATENCY_RUN_DURATION,	/* per workflow name: creation to end */
	DEX_LATENCY_TIMER_LAG,		/* per workflow queue: a due event to its run woken */
	DEX_LATENCY_N
} DexLatency;

#define DEX_LATENCY_BUCKETS 17

/* observations of one queue's histogram added up locally, then flushed at once */
typedef struct DexLatencyBatch
{
	DexLatency	histogram;
	int32		queue_id;
	uint64		n;
	uint64		sum;			/* microseconds */
	uint64		counts[DEX_LATENCY_BUCKETS];
} DexLatencyBatch;

extern Size dex_latency_shmem_size(void);
extern void dex_latency_shmem_startup(void);
extern void dex_latency_batch_init(DexLatencyBatch *batch, DexLatency histogram, int32 queue_id);
extern void dex_latency_batch_add(DexLatencyBatch *batch, TimestampTz from, TimestampTz to);
extern void dex_latency_batch_flush(DexLatencyBatch *batch);
extern void dex_latency_observe(DexLatency histogram, int32 queue_id, TimestampTz from,
								TimestampTz to);
extern void dex_latency_run_ended(const char *name, TimestampTz from, TimestampTz to);
extern void dex_latency_reset(void);

#endif							/* DEX_SHMEM_SHMEM_H */
