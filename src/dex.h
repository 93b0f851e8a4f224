/*-------------------------------------------------------------------------
 *
 * dex.h
 *	  What every part of dex shares: its SQLSTATEs, its settings and its
 *	  limits.  The parts and the way their dependencies run are described in
 *	  src/README.md; each folder has a header of its own:
 *	    util/util.h		SPI plans and results, arrays, ids, argument checks
 *	    wire/wire.h		the protocol: protobuf/JSON codec, values, events
 *	    shmem/shmem.h	shared memory: wake-ups and activity counters
 *	    engine/engine.h	the engine's rules: queues, runs, inbox, completions
 *	    api/api.h		the rights an SQL entry point runs with
 *	    workers/workers.h	the background workers
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEX_DEX_H
#define DEX_DEX_H

#include "postgres.h"

/*
 * dex's own SQLSTATEs, class "WD" (dex workflow engine; classes starting
 * with I-Z are free for implementations).
 */
#define ERRCODE_DEX_LEASE_LOST			MAKE_SQLSTATE('W','D','0','0','1')
#define ERRCODE_DEX_RUN_CANCELLED		MAKE_SQLSTATE('W','D','0','0','2')

/*
 * The longest name dex stores as a key, in bytes: workflow and activity
 * names, instance ids, concurrency keys, event ids, worker ids.
 */
#define DEX_NAME_MAX_LEN 255
/* most names (workflows with versions, or activities) one poll may declare */
#define DEX_MAX_DECLARED 1000

/* the search_path of every statement dex runs: nothing a user can create */
#define DEX_SEARCH_PATH "pg_catalog, pg_temp"

/* Settings (util/settings.c says what they mean, and their defaults). */
extern char *dex_database;
extern char *dex_actor;
extern int	dex_scheduler_naptime_ms;
extern int	dex_retry_max_attempts;
extern int	dex_retry_initial_delay_ms;
extern double dex_retry_multiplier;
extern double dex_retry_randomization;
extern int	dex_retry_max_delay_ms;
extern int	dex_max_workflow_task_failures;
extern int	dex_max_history_events;
extern int	dex_max_history_size;
extern int	dex_max_payload_size;
extern int	dex_retention_period_s;
extern int	dex_retention_batch_size;
extern int	dex_maintenance_naptime_ms;
extern int	dex_status_sweep_age_s;
extern int	dex_interpreter_naptime_ms;
extern int	dex_sql_step_timeout_ms;
extern int	dex_worker_cache_runs;
extern bool dex_allow_drop_with_runs;

/* whether dex was loaded by shared_preload_libraries (set by _PG_init) */
extern bool dex_preloaded;

extern void dex_define_settings(void);
extern void dex_check_payload_size(Size size, const char *what);

#endif							/* DEX_DEX_H */
