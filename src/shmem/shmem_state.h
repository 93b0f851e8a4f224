/*-------------------------------------------------------------------------
 *
 * shmem_state.h
 *	  dex's own shared memory, as registry.c sets it up and wakeup.c uses
 *	  it: the database entries, the queue waiters' table, the run wait
 *	  slots and the queues' generations.  Not for other files: shmem.h is
 *	  the interface.  The locking rules are wakeup.c's header's.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEX_SHMEM_STATE_H
#define DEX_SHMEM_STATE_H

#include "postgres.h"

#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/spin.h"
#include "utils/uuid.h"

#include "shmem/shmem.h"

#define DEX_WAIT_SLOTS 256
#define DEX_WAIT_KEYS 32
#define DEX_QUEUE_GENERATIONS 1024

typedef struct DexWaitSlot
{
	pg_atomic_uint64 generation;	/* bumped by every commit adding work */
	ConditionVariable cv;
} DexWaitSlot;

/* The workers of one database (see launcher.c); a free entry has no dbid. */
typedef struct DexDatabaseState
{
	Oid			dbid;
	Latch	   *scheduler_latch;	/* NULL while no scheduler runs */
	pid_t		scheduler_pid;
	pid_t		maintenance_pid;
	Latch	   *interpreter_latch;	/* NULL while no interpreter runs (1.7) */
	pid_t		interpreter_pid;
	/*
	 * The task keys (dex_task_key) of the definitions it found when it last
	 * looked: 0 none, -1 more than fit or not looked yet (every commit that
	 * makes tasks wakes it)
	 */
	int			interpreter_n_keys;
	uint64		interpreter_keys[DEX_WAIT_KEYS];
	/*
	 * A SQL step that trapped the cancel of dex.sql_step_timeout and ran on:
	 * the interpreter stopped itself, and its successor fails the run
	 * (engine/interpret.c).  Its run and step, while has_runaway.
	 */
	bool		has_runaway;
	pg_uuid_t	runaway_run;
	char		runaway_step[NAMEDATALEN];
	bool		no_extension;	/* a worker found dex not installed, and left */
	bool		dropping;		/* DROP DATABASE is under way: do not start workers */
	pg_atomic_uint64 scheduler_next_wake;	/* TimestampTz */
	pg_atomic_uint64 scheduler_requested;	/* TimestampTz: the earliest due asked for during a pass */
	/*
	 * The run wait slots of the runs the scheduler waits to end (a
	 * schedule's buffered tick starts when they have): a commit that ends a
	 * run of a set slot sets the scheduler's latch.  Written by the
	 * scheduler only; "watching" says whether any bit is set.
	 */
	pg_atomic_uint32 watching;
	pg_atomic_uint32 run_watch[DEX_WAIT_SLOTS / 32];
} DexDatabaseState;

/* A backend waiting for tasks (dex.wait_for_tasks), under waiters_mutex */
typedef struct DexQueueWaiter
{
	bool		waiting;
	bool		woken;			/* a commit made a task pollable for it */
	Oid			dbid;
	int32		queue_id;
	uint32		worker;			/* dex_worker_hash of its worker id; 0: unknown */
	bool		stop;			/* dex.stop_waiting: its worker shuts down */
	int			n_keys;			/* declared: 0 none (any task), -1 wide (more than fit) */
	uint64		keys[DEX_WAIT_KEYS];
	Latch	   *latch;
} DexQueueWaiter;

typedef struct DexSharedState
{
	slock_t		mutex;			/* protects the database entries but next_wake */
	Latch	   *launcher_latch;
	uint64		launcher_events;	/* CREATE EXTENSION dex, CREATE DATABASE commits */
	DexDatabaseState databases[DEX_MAX_DATABASES];
	/* the queue waiters' table: an entry per backend (MyBackendId - 1) */
	slock_t		waiters_mutex;
	pg_atomic_uint32 queue_waiters; /* entries waiting: none, no scan */
	int			n_waiter_entries;
	/*
	 * dex.wait_for_run: slots of their own, so that ending runs never wakes a
	 * worker's long poll, and how many sessions wait, so that a commit that
	 * ends runs wakes nobody when nobody waits.
	 */
	pg_atomic_uint32 run_waiters;
	DexWaitSlot run_slots[DEX_WAIT_SLOTS];
	/* a look's generations of its queue (see the header) */
	pg_atomic_uint64 queue_generations[DEX_QUEUE_GENERATIONS];
	pg_atomic_uint64 all_queues_generation;
	/* commits that changed queues or their grants, in any database (see dex_queue_changes) */
	pg_atomic_uint64 queue_changes;
	DexQueueWaiter waiters[FLEXIBLE_ARRAY_MEMBER];
} DexSharedState;

#define DEX_SHARED_SIZE(entries) \
	(offsetof(DexSharedState, waiters) + sizeof(DexQueueWaiter) * (entries))

extern DexSharedState *dex_shared;

extern DexDatabaseState *dex_database_entry(Oid dbid, bool create);

#endif							/* DEX_SHMEM_STATE_H */
