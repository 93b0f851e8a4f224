/*-------------------------------------------------------------------------
 *
 * registry.c
 *	  dex's shared memory: its setup, and the registry of the databases
 *	  served (an entry each, up to DEX_MAX_DATABASES): their workers' pids
 *	  and latches, whether DROP DATABASE is under way or dex was found
 *	  missing, the keys of the definitions the interpreter serves and the
 *	  step that stopped it, and the launcher's latch.  The wake-ups that use
 *	  them are wakeup.c's.
 *
 * Locking: the entries and the latch pointers are read and written under
 * dex_shared->mutex (a spinlock); the exit callbacks that clear a worker's
 * place take it too.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "shmem/shmem.h"
#include "shmem/shmem_state.h"

DexSharedState *dex_shared = NULL;

void
dex_shmem_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(DEX_SHARED_SIZE(MaxBackends)));
	RequestAddinShmemSpace(dex_run_cache_shmem_size());
	RequestAddinShmemSpace(dex_pollers_shmem_size());
	RequestAddinShmemSpace(dex_latency_shmem_size());
	RequestAddinShmemSpace(dex_rate_shmem_size());
	dex_stats_shmem_request();
}

void
dex_shmem_startup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	dex_shared = ShmemInitStruct("dex", DEX_SHARED_SIZE(MaxBackends), &found);
	if (!found)
	{
		SpinLockInit(&dex_shared->mutex);
		SpinLockInit(&dex_shared->waiters_mutex);
		pg_atomic_init_u32(&dex_shared->queue_waiters, 0);
		dex_shared->n_waiter_entries = MaxBackends;
		memset(dex_shared->waiters, 0, sizeof(DexQueueWaiter) * MaxBackends);
		dex_shared->launcher_latch = NULL;
		dex_shared->launcher_events = 0;
		for (int i = 0; i < DEX_MAX_DATABASES; i++)
		{
			DexDatabaseState *db = &dex_shared->databases[i];

			db->dbid = InvalidOid;
			db->scheduler_latch = NULL;
			db->scheduler_pid = 0;
			db->maintenance_pid = 0;
			db->interpreter_latch = NULL;
			db->interpreter_pid = 0;
			db->interpreter_n_keys = -1;
			db->has_runaway = false;
			db->no_extension = false;
			db->dropping = false;
			pg_atomic_init_u64(&db->scheduler_next_wake, (uint64) DT_NOEND);
			pg_atomic_init_u64(&db->scheduler_requested, (uint64) DT_NOEND);
			pg_atomic_init_u32(&db->watching, 0);
			for (int w = 0; w < DEX_WAIT_SLOTS / 32; w++)
				pg_atomic_init_u32(&db->run_watch[w], 0);
		}
		for (int i = 0; i < DEX_WAIT_SLOTS; i++)
		{
			pg_atomic_init_u64(&dex_shared->run_slots[i].generation, 0);
			ConditionVariableInit(&dex_shared->run_slots[i].cv);
		}
		for (int i = 0; i < DEX_QUEUE_GENERATIONS; i++)
			pg_atomic_init_u64(&dex_shared->queue_generations[i], 0);
		pg_atomic_init_u64(&dex_shared->all_queues_generation, 0);
		pg_atomic_init_u64(&dex_shared->queue_changes, 0);
	}
	dex_stats_shmem_startup();
	dex_run_cache_shmem_startup();
	dex_pollers_shmem_startup();
	dex_latency_shmem_startup();
	dex_rate_shmem_startup();
	LWLockRelease(AddinShmemInitLock);
}

/*
 * The entry of a database, under the mutex; with "create", a free one is
 * taken if it has none.  NULL if none (or all are taken).
 */
DexDatabaseState *
dex_database_entry(Oid dbid, bool create)
{
	DexDatabaseState *free_entry = NULL;

	for (int i = 0; i < DEX_MAX_DATABASES; i++)
	{
		DexDatabaseState *db = &dex_shared->databases[i];

		if (db->dbid == dbid)
			return db;
		if (free_entry == NULL && db->dbid == InvalidOid)
			free_entry = db;
	}
	if (!create || free_entry == NULL)
		return NULL;
	free_entry->dbid = dbid;
	free_entry->scheduler_latch = NULL;
	free_entry->scheduler_pid = 0;
	free_entry->maintenance_pid = 0;
	free_entry->interpreter_latch = NULL;
	free_entry->interpreter_pid = 0;
	free_entry->interpreter_n_keys = -1;
	free_entry->has_runaway = false;
	free_entry->no_extension = false;
	free_entry->dropping = false;
	pg_atomic_write_u64(&free_entry->scheduler_next_wake, (uint64) DT_NOEND);
	pg_atomic_write_u64(&free_entry->scheduler_requested, (uint64) DT_NOEND);
	pg_atomic_write_u32(&free_entry->watching, 0);
	for (int w = 0; w < DEX_WAIT_SLOTS / 32; w++)
		pg_atomic_write_u32(&free_entry->run_watch[w], 0);
	return free_entry;
}

/* the entry is free again when no worker of its database is left */
static void
release_if_unused(DexDatabaseState *db)
{
	if (db->scheduler_pid == 0 && db->maintenance_pid == 0 && db->interpreter_pid == 0 &&
		!db->dropping &&
		!db->no_extension)
		db->dbid = InvalidOid;
}

static void
clear_worker(int code, Datum arg)
{
	bool		scheduler = DatumGetBool(arg);
	DexDatabaseState *db;

	SpinLockAcquire(&dex_shared->mutex);
	db = dex_database_entry(MyDatabaseId, false);
	if (db != NULL)
	{
		if (scheduler && db->scheduler_pid == MyProcPid)
		{
			db->scheduler_latch = NULL;
			db->scheduler_pid = 0;
		}
		else if (!scheduler && db->maintenance_pid == MyProcPid)
			db->maintenance_pid = 0;
		release_if_unused(db);
	}
	SpinLockRelease(&dex_shared->mutex);
}

/*
 * Called by a per-database worker at start: publish it (the scheduler with
 * its latch).  Returns false if DROP DATABASE is under way: the worker must
 * leave at once.
 */
bool
dex_worker_register(bool scheduler)
{
	DexDatabaseState *db;
	bool		ok = true;

	Assert(dex_shared != NULL);
	before_shmem_exit(clear_worker, BoolGetDatum(scheduler));
	SpinLockAcquire(&dex_shared->mutex);
	db = dex_database_entry(MyDatabaseId, true);
	if (db == NULL || db->dropping)
		ok = false;
	else if (scheduler)
	{
		db->scheduler_latch = MyLatch;
		db->scheduler_pid = MyProcPid;
		db->no_extension = false;
	}
	else
		db->maintenance_pid = MyProcPid;
	SpinLockRelease(&dex_shared->mutex);
	return ok;
}

static void
clear_interpreter(int code, Datum arg)
{
	DexDatabaseState *db;

	SpinLockAcquire(&dex_shared->mutex);
	db = dex_database_entry(MyDatabaseId, false);
	if (db != NULL && db->interpreter_pid == MyProcPid)
	{
		db->interpreter_latch = NULL;
		db->interpreter_pid = 0;
		release_if_unused(db);
	}
	SpinLockRelease(&dex_shared->mutex);
}

/*
 * dex_worker_register for the interpreter (1.7), with its latch: commits
 * that make tasks pollable set it (see dex_xact_callback).
 */
bool
dex_interpreter_register(void)
{
	DexDatabaseState *db;
	bool		ok = true;

	Assert(dex_shared != NULL);
	before_shmem_exit(clear_interpreter, (Datum) 0);
	SpinLockAcquire(&dex_shared->mutex);
	db = dex_database_entry(MyDatabaseId, true);
	if (db == NULL || db->dropping)
		ok = false;
	else
	{
		db->interpreter_latch = MyLatch;
		db->interpreter_pid = MyProcPid;
	}
	SpinLockRelease(&dex_shared->mutex);
	return ok;
}

/*
 * The interpreter says which definitions it found, as task keys (n of them):
 * the commits that make tasks of other keys do not wake it (a definition's
 * creation does).  It says so before it polls, so a commit that reads the
 * old keys committed before the poll's snapshot.
 */
void
dex_interpreter_serves(const uint64 *keys, int n)
{
	DexDatabaseState *db;

	SpinLockAcquire(&dex_shared->mutex);
	db = dex_database_entry(MyDatabaseId, false);
	if (db != NULL)
	{
		db->interpreter_n_keys = n > DEX_WAIT_KEYS ? -1 : n;
		if (n > 0 && n <= DEX_WAIT_KEYS)
			memcpy(db->interpreter_keys, keys, sizeof(uint64) * n);
	}
	SpinLockRelease(&dex_shared->mutex);
}

/*
 * The interpreter stops because the SQL step "step" of run "run" trapped its
 * cancel and ran past dex.sql_step_timeout: noted for the interpreter that
 * the launcher starts next (not from a signal handler: from the exit).
 */
void
dex_interpreter_note_runaway(const pg_uuid_t *run, const char *step)
{
	DexDatabaseState *db;

	SpinLockAcquire(&dex_shared->mutex);
	db = dex_database_entry(MyDatabaseId, false);
	if (db != NULL)
	{
		db->has_runaway = true;
		db->runaway_run = *run;
		strlcpy(db->runaway_step, step, NAMEDATALEN);
	}
	SpinLockRelease(&dex_shared->mutex);
}

/*
 * The run whose SQL step stopped the last interpreter of this database, and
 * the step (a buffer of NAMEDATALEN): false if none.  With forget, the note
 * goes.
 */
bool
dex_interpreter_runaway(pg_uuid_t *run, char *step, bool forget)
{
	DexDatabaseState *db;
	bool		found = false;

	SpinLockAcquire(&dex_shared->mutex);
	db = dex_database_entry(MyDatabaseId, false);
	if (db != NULL && db->has_runaway)
	{
		found = true;
		*run = db->runaway_run;
		strlcpy(step, db->runaway_step, NAMEDATALEN);
		if (forget)
			db->has_runaway = false;
	}
	SpinLockRelease(&dex_shared->mutex);
	return found;
}

/* A worker found dex not installed in its database and leaves: say so. */
void
dex_worker_no_extension(void)
{
	DexDatabaseState *db;

	SpinLockAcquire(&dex_shared->mutex);
	db = dex_database_entry(MyDatabaseId, false);
	if (db != NULL)
		db->no_extension = true;
	SpinLockRelease(&dex_shared->mutex);
}

/*
 * For the launcher: whether workers of the database may start now, and
 * whether one found dex missing (reset: the launcher then waits to be told
 * of a CREATE EXTENSION).
 */
void
dex_database_status(Oid dbid, bool *dropping, bool *no_extension)
{
	DexDatabaseState *db;

	*dropping = false;
	*no_extension = false;
	SpinLockAcquire(&dex_shared->mutex);
	db = dex_database_entry(dbid, false);
	if (db != NULL)
	{
		*dropping = db->dropping;
		*no_extension = db->no_extension;
		db->no_extension = false;
		release_if_unused(db);
	}
	SpinLockRelease(&dex_shared->mutex);
}

/*
 * DROP DATABASE (dex.c's utility hook): stop the database's workers and keep
 * the launcher from starting them again, so that they do not block the
 * drop.  Waits up to 10 s for them to leave.  dex_database_drop_done ends
 * the state, whether the drop went through or failed.
 */
void
dex_database_drop_begin(Oid dbid)
{
	DexDatabaseState *db;

	if (dex_shared == NULL)
		return;
	for (int waited_ms = 0; waited_ms <= 10000; waited_ms += 10)
	{
		pid_t		pids[3] = {0, 0, 0};

		SpinLockAcquire(&dex_shared->mutex);
		db = dex_database_entry(dbid, true);
		if (db != NULL)
		{
			db->dropping = true;
			pids[0] = db->scheduler_pid;
			pids[1] = db->maintenance_pid;
			pids[2] = db->interpreter_pid;
		}
		SpinLockRelease(&dex_shared->mutex);
		if (pids[0] == 0 && pids[1] == 0 && pids[2] == 0)
			return;
		for (int i = 0; i < 3; i++)
			if (pids[i] != 0)
				(void) kill(pids[i], SIGTERM);
		CHECK_FOR_INTERRUPTS();
		pg_usleep(10000L);
	}
}

void
dex_database_drop_done(Oid dbid)
{
	DexDatabaseState *db;

	if (dex_shared == NULL)
		return;
	SpinLockAcquire(&dex_shared->mutex);
	db = dex_database_entry(dbid, false);
	if (db != NULL)
	{
		db->dropping = false;
		release_if_unused(db);
	}
	if (dex_shared->launcher_latch)
		SetLatch(dex_shared->launcher_latch);
	SpinLockRelease(&dex_shared->mutex);
}

/* The launcher publishes its latch, to be told of CREATE EXTENSION and drops. */
void
dex_launcher_register(void)
{
	SpinLockAcquire(&dex_shared->mutex);
	dex_shared->launcher_latch = MyLatch;
	SpinLockRelease(&dex_shared->mutex);
}

/* How many CREATE EXTENSION dex and CREATE DATABASE committed since the start. */
uint64
dex_launcher_events(void)
{
	uint64		n;

	SpinLockAcquire(&dex_shared->mutex);
	n = dex_shared->launcher_events;
	SpinLockRelease(&dex_shared->mutex);
	return n;
}
