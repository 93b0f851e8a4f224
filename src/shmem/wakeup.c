/*-------------------------------------------------------------------------
 *
 * wakeup.c
 *	  The wake-ups that replace polling.  (dex's shared memory and its
 *	  registry of databases and workers are registry.c's, shared through
 *	  shmem_state.h; the activity counters are stats.c's.)
 *
 * Each served database has an entry (registry.c): its workers' pids,
 * whether DROP DATABASE is under way, and its scheduler's latch and the
 * time it next plans to wake.  A backend that creates work falling due
 * earlier than that (a timer, an activity retry, a lease that expires
 * sooner) asks for a wake-up of its database's scheduler; the latch is set
 * when its transaction commits, never before, so the scheduler never looks
 * for rows it cannot see yet.  While a pass runs (its wake time is "never")
 * the commit only records its due time, which the pass takes once it has
 * published its next wake, so a commit during a pass costs no pass unless
 * its work falls due before the next one.  Aborted transactions wake nobody.  The
 * launcher's latch is set likewise when CREATE EXTENSION dex commits, and the
 * interpreter's (1.7) when a commit made tasks pollable that may be of runs
 * of its definitions, on queues of their owners' choosing: tasks of the
 * workflow keys it said it serves, or tasks whose keys the commit does not
 * know.
 *
 * Workers waiting for tasks (dex.wait_for_tasks) are listed in the queue
 * waiters' table, an entry per backend: its database, queue and latch, and
 * whether a commit has woken it.  A transaction that makes k tasks pollable
 * on a queue notes the queue and k; when it commits, it wakes at most k of
 * the queue's waiters that no other commit woke yet (all of them when it
 * cannot count its tasks, as when a queue is unpaused), so one new task
 * costs one wake-up and one poll, not one per waiting worker.  A waiter
 * enters the table before it looks for work and returns "ready" only when
 * woken (or when its look found work), so a commit between its look and
 * its sleep is never missed: the commit's wake-up, after the commit, finds
 * the entry made before the look.  A woken worker that finds its task taken
 * by a worker that was not waiting leaves nothing behind: each task was
 * answered by one wake-up or one poll.
 *
 * A look that finds its queue drained is not repeated while nothing could
 * have changed that: each commit that makes tasks pollable (or cannot count
 * them: the rebuild, a definition) bumps its queues' generations, kept in
 * DEX_QUEUE_GENERATIONS slots by database and queue (a shared slot only
 * costs a look), and a transaction that leased tasks and aborts bumps
 * its queues' too (its leases are pollable again).  A backend whose look of
 * dex.poll_tasks_wait leased fewer tasks than it could notes the generation
 * it read before the look, and when that look's transaction commits, its
 * next look of the queue with the same declaration, within a second and in
 * a transaction that made no task of the queue, skips the lease statement
 * if the generation is the same: no commit made a task pollable for it
 * since.  It enters the waiters' table first, as any look, so a commit
 * after the check wakes it.  Expired leases become pollable without a
 * commit, until the scheduler's pass reclaims them and bumps.
 *
 * A waiter may have declared what it runs (1.6): the keys of the workflow
 * versions or activities it takes (pollers.c), kept in its entry (up to
 * DEX_WAIT_KEYS; with more it is "wide").  A commit that knows the keys of
 * the tasks it made wakes, per task, one waiter that declared nothing
 * (counted as above) and one that declared the task's key; a wide waiter, or
 * one on a queue where the commit added tasks it could not key, is woken
 * whenever its queue gets tasks.  So a task is never left to a sleeping
 * worker that could take it while one that cannot takes its wake-up; the
 * cost is an extra wake-up where both kinds of waiter wait on a queue.
 *
 * Sessions waiting for runs (dex.wait_for_run(s)) sleep on a condition
 * variable of their run's wait slot: a commit that ends runs bumps the
 * slot's generation and wakes its sleepers, and a waiter sleeps only while
 * the generation it read before looking is unchanged.  Runs share slots by
 * hash; a shared slot only costs a spurious wake-up.
 *
 * The scheduler watches run slots too (1.7): a schedule's buffered tick
 * waits for the runs the schedule started to end.  Each pass clears its
 * database entry's bitmap of slots, sets the bits of the runs it waits for
 * and then looks at them again in a new snapshot; a commit that ends runs
 * of a set slot sets the scheduler's latch.  A run that ends after that
 * look finds its bit; one that ended before it is seen by the look.  The
 * bitmap is atomics written by the scheduler only; a shared slot only costs
 * a spurious pass.
 *
 * Completions seen before they are flushed.  A transaction of its own
 * (autocommit, nothing written before it) that completes tasks
 * (dex.complete_task(s), the completions of dex.poll_tasks_wait) and neither
 * ended nor started runs commits without waiting for its WAL flush (decided
 * at pre-commit, when the whole transaction is known), so the wake-ups above
 * go out at once, then flushes its commit in the commit callback, after them
 * and before the session goes on: the worker woken gets the work a flush
 * sooner, and the completing worker is told only of a durable completion.
 * Not under synchronous replication, whose standbys a commit waits for
 * before it is seen.
 *
 * Locking: the database entries and latch pointers are written and read
 * under the spinlock; next_wake is a 64-bit atomic written by the scheduler
 * and read without a lock (a stale read only costs one spurious wake-up or,
 * for a time already passed, none is needed); the requests recorded during
 * a pass are a 64-bit atomic that commits lower (compare-and-exchange) and
 * the scheduler empties (exchange), each side writing before it reads the
 * other's value, with a barrier between.  The queue waiters' table is
 * read and written under its own spinlock (a scan of a few hundred entries,
 * latches set after it is released).  Slot generations are atomics;
 * condition variables have their own locking.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "libpq/libpq.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "common/hashfn.h"
#include "utils/array.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
#include "utils/wait_event.h"

#include "shmem/shmem.h"
#include "shmem/shmem_state.h"


/* earliest due time of the work this transaction created */
static TimestampTz pending_wake = DT_NOEND;

/* the queues this transaction made tasks pollable on, and how many */
#define MAX_PENDING_SLOTS 16
typedef struct PendingQueue
{
	int32		queue_id;
	int64		tasks;			/* -1: not counted, wake every waiter */
	bool		unkeyed;		/* some without a known key: wake every declaring waiter */
} PendingQueue;
static PendingQueue pending_queues[MAX_PENDING_SLOTS];
static int	n_pending_queues = 0;
static bool pending_all_queues = false;	/* too many: wake every waiter */

/* of those tasks, how many of each key, for the waiters that declared keys */
typedef struct PendingKey
{
	int32		queue_id;
	uint64		key;
	int64		tasks;
} PendingKey;
static PendingKey pending_keys[MAX_PENDING_SLOTS];
static int	n_pending_keys = 0;

/* of those tasks, the ones whose run a known worker holds (run_cache.c) */
typedef struct PendingHolder
{
	int32		queue_id;
	uint32		worker;
	uint64		key;			/* the task's, 0 if unknown */
} PendingHolder;
static PendingHolder pending_holders[MAX_PENDING_SLOTS];
static int	n_pending_holders = 0;

/* this backend's entry in the queue waiters' table, while it waits */
static DexQueueWaiter *my_waiter = NULL;

/* the queues this transaction leased tasks of: pollable again if it aborts */
static int	leased_queues[MAX_PENDING_SLOTS];
static int	n_leased_queues = 0;
static bool leased_many_queues = false;

/* A look that leased fewer tasks than it could (see the header) */
typedef struct DrainedLook
{
	bool		valid;
	int32		queue_id;
	uint64		declared;		/* hash of the keys it declared */
	uint64		generation;		/* of the queue, read before the look */
	TimestampTz at;
} DrainedLook;

/* this transaction's last such look, and the last one that committed */
static DrainedLook drained_pending = {false};
static DrainedLook drained = {false};

/* how long a drained look is trusted */
#define DRAINED_TRUST_USECS USECS_PER_SEC

/* run slots of the runs this transaction ended (dex.wait_for_run) */
static int	pending_run_slots[MAX_PENDING_SLOTS];
static int	n_pending_run_slots = 0;
static bool pending_all_run_slots = false;
static bool started_runs = false;	/* this transaction started runs */

/* dex_completion_begins: 0 no completion yet, 1 may be seen before its flush, -1 may not */
static int	early_commit = 0;
static bool early_flush = false;	/* this commit flushes in its callback */

static bool commit_early(void);
static bool xact_callback_registered = false;
static bool warned_not_preloaded = false;

/*
 * Whether this transaction's tasks may be of runs of the interpreter's
 * definitions: some it could not count or key, or one of a key it serves.
 * Under the mutex.
 */
static bool
tasks_for_interpreter(const DexDatabaseState *db)
{
	if (db->interpreter_n_keys < 0 || pending_all_queues)
		return true;
	for (int i = 0; i < n_pending_queues; i++)
		if (pending_queues[i].unkeyed || pending_queues[i].tasks < 0)
			return true;
	for (int k = 0; k < n_pending_keys; k++)
		for (int i = 0; i < db->interpreter_n_keys; i++)
			if (db->interpreter_keys[i] == pending_keys[k].key)
				return true;
	return false;
}

/*
 * Wake this database's interpreter when this transaction's tasks may be of
 * runs of its definitions (with "always", whether or not they are: a
 * definition, the rebuild).  Not itself: its passes go on while they find
 * work.  The entry is found without the lock, and skipped while no
 * interpreter runs or it found no definition (a stale read costs a spurious
 * wake-up, or none where there is nothing to serve: see
 * dex_interpreter_serves).
 */
static void
wake_interpreter(bool always)
{
	for (int i = 0; i < DEX_MAX_DATABASES; i++)
	{
		DexDatabaseState *db = &dex_shared->databases[i];

		if (db->dbid != MyDatabaseId)
			continue;
		if (db->interpreter_latch == NULL || (!always && db->interpreter_n_keys == 0))
			return;
		SpinLockAcquire(&dex_shared->mutex);
		if (db->dbid == MyDatabaseId && db->interpreter_latch != NULL &&
			db->interpreter_pid != MyProcPid && (always || tasks_for_interpreter(db)))
			SetLatch(db->interpreter_latch);
		SpinLockRelease(&dex_shared->mutex);
		return;
	}
}

/* the scheduler's own entry, found once (NULL if it has none) */
static DexDatabaseState *my_scheduler_entry = NULL;

static DexDatabaseState *
scheduler_entry(void)
{
	if (my_scheduler_entry == NULL)
	{
		SpinLockAcquire(&dex_shared->mutex);
		my_scheduler_entry = dex_database_entry(MyDatabaseId, false);
		SpinLockRelease(&dex_shared->mutex);
	}
	return my_scheduler_entry;
}

void
dex_scheduler_set_next_wake(TimestampTz when)
{
	DexDatabaseState *db = scheduler_entry();

	if (db != NULL)
		pg_atomic_write_u64(&db->scheduler_next_wake, (uint64) when);
}

/*
 * The scheduler's pass has published when it wakes next: the earliest due
 * time asked for since the pass began (DT_NOEND: none), which its
 * statements may not have seen, and the record is emptied.  At a pass's
 * start, what was asked before is visible to it and is dropped.
 */
TimestampTz
dex_scheduler_take_requests(void)
{
	DexDatabaseState *db = scheduler_entry();

	if (db == NULL)
		return DT_NOEND;
	return (TimestampTz) pg_atomic_exchange_u64(&db->scheduler_requested, (uint64) DT_NOEND);
}

/*
 * Wake the scheduler of this database if it plans to sleep past "due".  The
 * request is recorded first: a pass under way (its next wake is "never"
 * while it runs) takes it when it has published its next wake, so that a
 * commit during a pass, such as a lease's that asks for a wake-up at its
 * end in minutes, does not cost a pass that finds nothing.  Either the pass
 * takes the record, or this reads the wake time it published (both sides
 * write, then read, with a barrier between).
 */
static void
wake_scheduler(TimestampTz due)
{
	DexDatabaseState *db = NULL;
	uint64		requested;
	TimestampTz next_wake;

	for (int i = 0; i < DEX_MAX_DATABASES; i++)
		if (dex_shared->databases[i].dbid == MyDatabaseId)
			db = &dex_shared->databases[i];
	if (db == NULL)
		return;
	requested = pg_atomic_read_u64(&db->scheduler_requested);
	while (due < (TimestampTz) requested &&
		   !pg_atomic_compare_exchange_u64(&db->scheduler_requested, &requested, (uint64) due))
		;
	pg_memory_barrier();
	next_wake = (TimestampTz) pg_atomic_read_u64(&db->scheduler_next_wake);
	if (next_wake == DT_NOEND || due >= next_wake)
		return;
	SpinLockAcquire(&dex_shared->mutex);
	if (db->dbid == MyDatabaseId && db->scheduler_latch)
		SetLatch(db->scheduler_latch);
	SpinLockRelease(&dex_shared->mutex);
}

/* CREATE EXTENSION dex or CREATE DATABASE: the launcher may serve a new database. */
static bool pending_launcher_wake = false;

/* tasks made that no queue's count tells of (the rebuild), a definition made: wake the interpreter */
static bool pending_interpreter_wake = false;

void
dex_wake_interpreter_at_commit(void)
{
	pending_interpreter_wake = true;
}

void
dex_wake_launcher_at_commit(void)
{
	pending_launcher_wake = true;
}

/* this transaction changed queues or their grants (engine/queues.c) */
static bool pending_queue_change = false;

void
dex_queue_change_at_commit(void)
{
	pending_queue_change = true;
}

/*
 * How many commits changed queues or their grants, in any database: counted
 * when the change is visible, before the commit's invalidations are sent
 * and before it wakes anyone (the commit callback), so that a backend whose
 * cached queues were read before the count it last noted sees the change
 * (engine/queues.c: a look then reads the queue again, in a snapshot that
 * has the change).  0 without shared memory.
 */
uint64
dex_queue_changes(void)
{
	return dex_shared != NULL ? pg_atomic_read_u64(&dex_shared->queue_changes) : 0;
}

static void
wake_slot(DexWaitSlot *s)
{
	pg_atomic_fetch_add_u64(&s->generation, 1);
	ConditionVariableBroadcast(&s->cv);
}

/* The pending queue entry of a queue, or NULL */
static PendingQueue *
pending_queue(int32 queue_id)
{
	for (int i = 0; i < n_pending_queues; i++)
		if (pending_queues[i].queue_id == queue_id)
			return &pending_queues[i];
	return NULL;
}

/* Whether the waiter declared the key */
static bool
waiter_has_key(const DexQueueWaiter *w, uint64 key)
{
	for (int i = 0; i < w->n_keys; i++)
		if (w->keys[i] == key)
			return true;
	return false;
}

/* The pending count of a key of the queue that the waiter declared, with tasks left, or NULL */
static PendingKey *
pending_key_for(const DexQueueWaiter *w)
{
	for (int k = 0; k < n_pending_keys; k++)
	{
		PendingKey *pk = &pending_keys[k];

		if (pk->queue_id == w->queue_id && pk->tasks > 0 && waiter_has_key(w, pk->key))
			return pk;
	}
	return NULL;
}

/*
 * Whether a commit's tasks p of the waiter's queue wake it (NULL p: every
 * waiter is woken), taking the wake-up from their count.  A waiter that
 * declared nothing takes one of p's tasks; one that declared keys one of its
 * keys' (the tasks without a key, or a wide waiter, wake it uncounted).
 */
static bool
take_wakeup(const DexQueueWaiter *w, PendingQueue *p)
{
	PendingKey *pk;

	if (p == NULL)
		return true;
	if (w->n_keys == 0)
	{
		if (p->tasks == 0)
			return false;
		if (p->tasks > 0)
			p->tasks--;
		return true;
	}
	if (p->unkeyed || p->tasks < 0 || w->n_keys < 0)
		return true;
	pk = pending_key_for(w);
	if (pk == NULL)
		return false;
	pk->tasks--;
	return true;
}

/*
 * Set the latches of this database's waiting entries that pick(w, arg)
 * takes (it marks them, under the waiters' lock), at most "most" of them;
 * how many.  At most 64 latches per pass over the table, set outside the
 * lock.
 */
static int
wake_waiters(bool (*pick) (DexQueueWaiter *w, void *arg), void *arg, int most)
{
	Latch	   *latches[64];
	int			n = 0;
	bool		more = true;

	while (more && n < most)
	{
		int			n_latches = 0;

		more = false;
		SpinLockAcquire(&dex_shared->waiters_mutex);
		for (int i = 0; i < dex_shared->n_waiter_entries && !more && n + n_latches < most; i++)
		{
			DexQueueWaiter *w = &dex_shared->waiters[i];

			if (!w->waiting || w->dbid != MyDatabaseId || !pick(w, arg))
				continue;
			latches[n_latches++] = w->latch;
			more = n_latches == lengthof(latches);
		}
		SpinLockRelease(&dex_shared->waiters_mutex);
		for (int i = 0; i < n_latches; i++)
			SetLatch(latches[i]);
		n += n_latches;
	}
	return n;
}

/*
 * Sticky wake-ups: a task whose run a worker holds (it completed the run's
 * last workflow task, run_cache.c) wakes that worker if it waits on the
 * queue, so that the task finds the run's state in its cache and leaves the
 * history out.  It counts as one of the queue's wake-ups.  A worker that
 * does not wait is not waited for: the task goes to whoever is woken.
 */
static int
wake_holders(Latch **latches)
{
	int			n = 0;

	SpinLockAcquire(&dex_shared->waiters_mutex);
	for (int h = 0; h < n_pending_holders; h++)
	{
		PendingHolder *ph = &pending_holders[h];
		PendingQueue *p = pending_queue(ph->queue_id);

		if (!pending_all_queues && (p == NULL || p->tasks == 0))
			continue;
		for (int i = 0; i < dex_shared->n_waiter_entries; i++)
		{
			DexQueueWaiter *w = &dex_shared->waiters[i];

			if (!w->waiting || w->woken || w->dbid != MyDatabaseId ||
				w->queue_id != ph->queue_id || w->worker != ph->worker)
				continue;
			/* a holder that no longer declares the run's version cannot take the task */
			if (w->n_keys > 0 && (ph->key == 0 || !waiter_has_key(w, ph->key)))
				break;
			w->woken = true;
			latches[n++] = w->latch;
			if (p != NULL && p->tasks > 0)
				p->tasks--;
			for (int k = 0; k < n_pending_keys; k++)
				if (pending_keys[k].queue_id == ph->queue_id && pending_keys[k].key == ph->key &&
					pending_keys[k].tasks > 0)
				{
					pending_keys[k].tasks--;
					break;
				}
			break;
		}
	}
	SpinLockRelease(&dex_shared->waiters_mutex);
	n_pending_holders = 0;
	return n;
}

/*
 * After the commit of a transaction that made tasks pollable: wake, for each
 * of its queues, as many of the queue's waiters not woken yet as it made
 * tasks (every one when not counted), the holders of their runs first.  A
 * waiter enters the table before it looks for work, so one that did not see
 * this commit is in it by now.
 */
/* wake_waiters' pick of wake_pending_queues: a waiter this commit's tasks wake */
static bool
pick_for_pending(DexQueueWaiter *w, void *arg)
{
	if (w->woken)
		return false;
	for (int q = 0; q < n_pending_queues || pending_all_queues; q++)
	{
		PendingQueue *p = pending_all_queues ? NULL : &pending_queues[q];

		if (p != NULL && p->queue_id != w->queue_id)
			continue;
		w->woken = take_wakeup(w, p);
		return w->woken;
	}
	return false;
}

static void
wake_pending_queues(void)
{
	Latch	   *latches[MAX_PENDING_SLOTS];

	pg_memory_barrier();
	if (dex_shared != NULL && pg_atomic_read_u32(&dex_shared->queue_waiters) > 0)
	{
		int			n_latches = n_pending_holders > 0 ? wake_holders(latches) : 0;

		for (int i = 0; i < n_latches; i++)
			SetLatch(latches[i]);
		(void) wake_waiters(pick_for_pending, NULL, PG_INT32_MAX);
	}
	n_pending_queues = 0;
	pending_all_queues = false;
	n_pending_keys = 0;
	n_pending_holders = 0;
}

/*
 * After the commit of a transaction that ended runs: wake their waiters, if
 * any session waits for a run.  A waiter counts itself before it looks at
 * its run, so one that did not see this commit is counted by now.
 */
static void
wake_pending_run_slots(void)
{
	pg_memory_barrier();
	if (dex_shared != NULL && pg_atomic_read_u32(&dex_shared->run_waiters) > 0)
	{
		if (pending_all_run_slots)
			for (int i = 0; i < DEX_WAIT_SLOTS; i++)
				wake_slot(&dex_shared->run_slots[i]);
		else
			for (int i = 0; i < n_pending_run_slots; i++)
				wake_slot(&dex_shared->run_slots[pending_run_slots[i]]);
	}
	n_pending_run_slots = 0;
	pending_all_run_slots = false;
}

/*
 * After the commit of a transaction that ended runs: if the scheduler of
 * this database watches the slot of one of them (a schedule's buffered tick
 * waits for it), set its latch.  The scheduler sets a slot's bit before it
 * looks, in a new snapshot, whether the run is still active, so a run that
 * ends after that look finds the bit here.
 */
static void
wake_run_watcher(void)
{
	DexDatabaseState *db = NULL;
	bool		hit = pending_all_run_slots;

	pg_memory_barrier();
	for (int i = 0; i < DEX_MAX_DATABASES; i++)
		if (dex_shared->databases[i].dbid == MyDatabaseId)
			db = &dex_shared->databases[i];
	if (db == NULL || pg_atomic_read_u32(&db->watching) == 0)
		return;
	for (int i = 0; i < n_pending_run_slots && !hit; i++)
		hit = (pg_atomic_read_u32(&db->run_watch[pending_run_slots[i] / 32]) &
			   ((uint32) 1 << (pending_run_slots[i] % 32))) != 0;
	if (!hit)
		return;
	SpinLockAcquire(&dex_shared->mutex);
	if (db->dbid == MyDatabaseId && db->scheduler_latch)
		SetLatch(db->scheduler_latch);
	SpinLockRelease(&dex_shared->mutex);
}

/* a database's queues take consecutive slots: two share one only past 1,024 queues */
static pg_atomic_uint64 *
queue_generation_slot(int32 queue_id)
{
	uint32		h = murmurhash32((uint32) MyDatabaseId) + (uint32) queue_id;

	return &dex_shared->queue_generations[h % DEX_QUEUE_GENERATIONS];
}

/*
 * After the commit of a transaction that made tasks pollable: its queues'
 * generations move on (every queue's when it could not count them), so that
 * no look that saw them drained is skipped.  Also after the abort of one
 * that leased tasks.  Before any wake-up: a waiter woken by this commit may
 * skip its next look only if it looked after it.
 */
static void
bump_queue_generations(const int *queues, int n, bool all)
{
	if (dex_shared == NULL)
		return;
	for (int i = 0; i < n; i++)
		pg_atomic_fetch_add_u64(queue_generation_slot(queues[i]), 1);
	if (all)
		pg_atomic_fetch_add_u64(&dex_shared->all_queues_generation, 1);
}

static void
bump_pending_generations(void)
{
	int			queues[MAX_PENDING_SLOTS];

	for (int i = 0; i < n_pending_queues; i++)
		queues[i] = pending_queues[i].queue_id;
	bump_queue_generations(queues, n_pending_queues,
						   pending_all_queues || pending_interpreter_wake);
}

/*
 * The generation of the queue to note before a look: it changes with every
 * commit that makes tasks of the queue pollable, or of every queue.
 */
uint64
dex_queue_generation(int32 queue_id)
{
	uint64		gen;

	if (dex_shared == NULL)
		return 0;
	gen = pg_atomic_read_u64(queue_generation_slot(queue_id)) +
		pg_atomic_read_u64(&dex_shared->all_queues_generation);
	pg_memory_barrier();
	return gen;
}

static void add_pending_slot(int slot, int *pending, int *n_pending, bool *pending_all);

/* This transaction leased tasks of the queue: if it aborts, they are pollable again */
void
dex_queue_leased(int32 queue_id)
{
	add_pending_slot(queue_id, leased_queues, &n_leased_queues, &leased_many_queues);
}

/*
 * A look of the queue, with the declaration whose hash is "declared",
 * leased fewer tasks than it could, with the queue's generation read before
 * it: trusted once its transaction commits.
 */
void
dex_queue_note_drained(int32 queue_id, uint64 declared, uint64 generation)
{
	drained_pending.valid = dex_shared != NULL;
	drained_pending.queue_id = queue_id;
	drained_pending.declared = declared;
	drained_pending.generation = generation;
	drained_pending.at = GetCurrentTimestamp();
}

/*
 * Whether a look of the queue with that declaration would find nothing: the
 * last committed look of this backend found it drained less than a second
 * ago, no commit made a task of the queue pollable since, and this
 * transaction made none.
 */
bool
dex_queue_still_drained(int32 queue_id, uint64 declared)
{
	if (!drained.valid || drained.queue_id != queue_id || drained.declared != declared)
		return false;
	if (pending_all_queues || pending_interpreter_wake || pending_queue(queue_id) != NULL)
		return false;
	if (GetCurrentTimestamp() - drained.at > DRAINED_TRUST_USECS)
		return false;
	return dex_queue_generation(queue_id) == drained.generation;
}

static void
dex_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PREPARE:
			/* two-phase commits wait for their flush as always */
			early_commit = 0;
			started_runs = false;
			break;
		case XACT_EVENT_PRE_COMMIT:
			if (commit_early())
			{
				dex_commit_without_flush();
				early_flush = true;
			}
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (drained_pending.valid)
				drained = drained_pending;
			drained_pending.valid = false;
			n_leased_queues = 0;
			leased_many_queues = false;
			/* first: a waiter this commit wakes sees the change */
			if (pending_queue_change && dex_shared != NULL)
				pg_atomic_fetch_add_u64(&dex_shared->queue_changes, 1);
			pending_queue_change = false;
			if ((n_pending_queues > 0 || pending_all_queues || pending_interpreter_wake) &&
				dex_shared != NULL)
			{
				bump_pending_generations();
				wake_interpreter(pending_interpreter_wake);
			}
			pending_interpreter_wake = false;
			if (n_pending_queues > 0 || pending_all_queues)
				wake_pending_queues();
			if ((n_pending_run_slots > 0 || pending_all_run_slots) && dex_shared != NULL)
				wake_run_watcher();
			if (n_pending_run_slots > 0 || pending_all_run_slots)
				wake_pending_run_slots();
			started_runs = false;
			if (pending_wake != DT_NOEND && dex_shared != NULL)
				wake_scheduler(pending_wake);
			if (pending_launcher_wake && dex_shared != NULL)
			{
				SpinLockAcquire(&dex_shared->mutex);
				dex_shared->launcher_events++;
				if (dex_shared->launcher_latch)
					SetLatch(dex_shared->launcher_latch);
				SpinLockRelease(&dex_shared->mutex);
			}
			pending_wake = DT_NOEND;
			pending_launcher_wake = false;
			/* woken, the next worker goes on while this commit is flushed */
			if (early_flush)
				XLogFlush(XactLastCommitEnd);
			early_flush = false;
			early_commit = 0;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			bump_queue_generations(leased_queues, n_leased_queues, leased_many_queues);
			n_leased_queues = 0;
			leased_many_queues = false;
			drained_pending.valid = false;
			drained.valid = false;
			pending_wake = DT_NOEND;
			pending_launcher_wake = false;
			pending_interpreter_wake = false;
			pending_queue_change = false;
			n_pending_queues = 0;
			pending_all_queues = false;
			n_pending_holders = 0;
			n_pending_run_slots = 0;
			pending_all_run_slots = false;
			started_runs = false;
			early_flush = false;
			early_commit = 0;
			break;
		default:
			break;
	}
}

/*
 * A subtransaction that aborts may have leased tasks (a poll under a
 * savepoint): the queues this transaction leased of move on.
 */
static void
dex_subxact_callback(SubXactEvent event, SubTransactionId subid,
					 SubTransactionId parent_subid, void *arg)
{
	if (event != SUBXACT_EVENT_ABORT_SUB)
		return;
	bump_queue_generations(leased_queues, n_leased_queues, leased_many_queues);
	drained_pending.valid = false;
}

void
dex_wakeup_init(void)
{
	if (!xact_callback_registered)
	{
		RegisterXactCallback(dex_xact_callback, NULL);
		RegisterSubXactCallback(dex_subxact_callback, NULL);
		xact_callback_registered = true;
	}
}

/*
 * Ask for the scheduler to wake when this transaction commits, if "due" is
 * earlier than the time it plans to wake anyway.
 */
void
dex_wake_scheduler_at_commit(TimestampTz due)
{
	if (due < pending_wake)
		pending_wake = due;
	dex_warn_if_not_preloaded("delayed work");
}

/*
 * Note "slot" in a list of this transaction's, once (*pending_all when the
 * list is full): run slots whose waiters its commit wakes, queues whose
 * generations its abort moves on.
 */
static void
add_pending_slot(int slot, int *pending, int *n_pending, bool *pending_all)
{
	if (*pending_all)
		return;
	for (int i = 0; i < *n_pending; i++)
		if (pending[i] == slot)
			return;
	if (*n_pending == MAX_PENDING_SLOTS)
		*pending_all = true;
	else
		pending[(*n_pending)++] = slot;
}

/* Count "tasks" new tasks of the queue, of key "key" (0: unknown), for the commit's wake-ups */
static void
add_pending(int32 queue_id, uint64 key, int64 tasks)
{
	PendingQueue *p;

	if (pending_all_queues)
		return;
	p = pending_queue(queue_id);
	if (p != NULL)
		p->tasks = (p->tasks < 0 || tasks < 0) ? -1 : p->tasks + tasks;
	else if (n_pending_queues == MAX_PENDING_SLOTS)
	{
		pending_all_queues = true;
		return;
	}
	else
	{
		p = &pending_queues[n_pending_queues++];
		p->queue_id = queue_id;
		p->tasks = tasks;
		p->unkeyed = false;
	}
	if (key == 0 || tasks < 0)
	{
		p->unkeyed = true;
		return;
	}
	for (int k = 0; k < n_pending_keys; k++)
		if (pending_keys[k].queue_id == queue_id && pending_keys[k].key == key)
		{
			pending_keys[k].tasks += tasks;
			return;
		}
	if (n_pending_keys == MAX_PENDING_SLOTS)
		p->unkeyed = true;
	else
	{
		pending_keys[n_pending_keys].queue_id = queue_id;
		pending_keys[n_pending_keys].key = key;
		pending_keys[n_pending_keys++].tasks = tasks;
	}
}

/*
 * This transaction made "tasks" tasks pollable on the queue (-1: it cannot
 * tell how many): wake as many of its waiting workers when it commits.
 */
void
dex_queue_tasks_added(int32 queue_id, int64 tasks)
{
	add_pending(queue_id, 0, tasks);
}

/*
 * As dex_queue_tasks_added, for tasks of one key (dex_task_key: a workflow
 * version, an activity): a waiter that declared keys is woken only for its
 * own.
 */
void
dex_queue_keyed_tasks_added(int32 queue_id, uint64 key, int64 tasks)
{
	add_pending(queue_id, key, tasks);
}

/* One task made pollable on the queue */
void
dex_queue_work_added(int32 queue_id)
{
	dex_queue_tasks_added(queue_id, 1);
}

/* A task made pollable on the queue of each row, in column "col" of the current SPI result */
void
dex_queue_work_added_spi(int col)
{
	for (uint64 i = 0; i < SPI_processed; i++)
		dex_queue_work_added((int32) dex_spi_getint64(i, col));
}

/*
 * Activity tasks made pollable, one per row of the current SPI result: its
 * queue and activity name in columns queue_col and name_col.
 */
void
dex_queue_activities_added_spi(int queue_col, int name_col)
{
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		char	   *name = dex_spi_gettext_copy(i, name_col);

		add_pending((int32) dex_spi_getint64(i, queue_col), dex_task_key(name, 0), 1);
		pfree(name);
	}
}

/*
 * A workflow task of the run made pollable on the queue: as
 * dex_queue_work_added, and the worker that holds the run, if one does and
 * is waiting then, is the one woken.
 */
void
dex_queue_run_task_added(int32 queue_id, const pg_uuid_t *run_id, uint64 key)
{
	uint32		worker;

	add_pending(queue_id, key, 1);
	if (n_pending_holders == MAX_PENDING_SLOTS || dex_shared == NULL ||
		pg_atomic_read_u32(&dex_shared->queue_waiters) == 0)
		return;
	worker = dex_run_holder(run_id, -1, NULL);
	if (worker == 0)
		return;
	pending_holders[n_pending_holders].queue_id = queue_id;
	pending_holders[n_pending_holders].key = key;
	pending_holders[n_pending_holders++].worker = worker;
}

/*
 * dex_queue_run_task_added for each row of the current SPI result: queue and
 * run in columns; the workflow name and version in name_col and the next
 * column (0: not known, a schema before 1.6).
 */
void
dex_queue_run_tasks_added_spi(int queue_col, int run_col, int name_col)
{
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		uint64		key = 0;

		if (name_col > 0)
		{
			char	   *name = dex_spi_gettext_copy(i, name_col);

			key = dex_task_key(name, (int32) dex_spi_getint64(i, name_col + 1));
			pfree(name);
		}
		dex_queue_run_task_added((int32) dex_spi_getint64(i, queue_col),
								 DatumGetUUIDP(dex_spi_getdatum(i, run_col, &isnull)), key);
	}
}

static void
require_shared_memory(const char *what)
{
	if (dex_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dex must be loaded via shared_preload_libraries to wait for %s", what),
				 errhint("Add dex to \"%s\" and restart the server, or poll without waiting.",
						 "shared_preload_libraries")));
}

/* The generation of a wait slot, to be read before looking */
static uint64
slot_generation(DexWaitSlot *slot)
{
	uint64		gen = pg_atomic_read_u64(&slot->generation);

	pg_memory_barrier();
	return gen;
}


/*
 * A run's wait slot (in run_slots): its end wakes the waiters of the slot,
 * who look again (a waiter of another run of the slot finds it still active
 * and sleeps again).
 */
static int
run_slot(const pg_uuid_t *run_id)
{
	uint32		h = hash_combine(murmurhash32((uint32) MyDatabaseId),
								 hash_bytes(run_id->data, UUID_LEN));

	return (int) (h % DEX_WAIT_SLOTS);
}

/* This transaction ended the runs of run_ids (a uuid[]): wake their waiters at commit */
void
dex_runs_ended(Datum run_ids)
{
	ArrayType  *a = DatumGetArrayTypeP(run_ids);
	int			n = ArrayGetNItems(ARR_NDIM(a), ARR_DIMS(a));
	pg_uuid_t  *ids = (pg_uuid_t *) ARR_DATA_PTR(a);

	for (int i = 0; i < n && !pending_all_run_slots; i++)
		add_pending_slot(run_slot(&ids[i]), pending_run_slots, &n_pending_run_slots,
						 &pending_all_run_slots);
}

/*
 * A session starts or stops waiting for runs (dex.wait_for_run): it counts
 * itself before it first looks at its run, and stops when it returns.
 */
void
dex_run_waiter(bool begin)
{
	require_shared_memory("runs");
	if (begin)
		pg_atomic_fetch_add_u32(&dex_shared->run_waiters, 1);
	else
		pg_atomic_fetch_sub_u32(&dex_shared->run_waiters, 1);
}

/* This transaction started runs (created, or children): see xact_started_or_ended_runs */
void
dex_runs_started(void)
{
	started_runs = true;
}

/*
 * Whether this transaction started or ended runs.  A client may read those
 * (the end of a run wakes its waiters at commit, who tell clients the
 * outcome), and a completion redone after a crash need not start them again
 * alike, so such a commit must not be seen before it is durable (see the
 * header: completions seen before they are flushed).
 */
static bool
xact_started_or_ended_runs(void)
{
	return started_runs || n_pending_run_slots > 0 || pending_all_run_slots;
}

/*
 * Completions begin: their transaction may be seen before its flush if it
 * is a transaction of its own (see the header).
 */
void
dex_completion_begins(void)
{
	if (early_commit == 0)
		early_commit = !IsTransactionBlock() &&
			!TransactionIdIsValid(GetTopTransactionIdIfAny()) ? 1 : -1;
}

/*
 * At pre-commit: whether this commit may be seen before its flush.  Only a
 * transaction with an xid writes a commit record, to flush in the callback.
 */
static bool
commit_early(void)
{
	return early_commit == 1 && TransactionIdIsValid(GetTopTransactionIdIfAny()) &&
		!xact_started_or_ended_runs() &&
		synchronous_commit > SYNCHRONOUS_COMMIT_OFF &&
		!(SyncRepRequested() && SyncRepStandbyNames != NULL && SyncRepStandbyNames[0] != '\0');
}

/*
 * This transaction's commit does not wait for its WAL flush (reverted when
 * it ends): for commits whose effects anything that depends on them makes
 * durable, as the WAL is flushed in order (the scheduler's passes that only
 * make work pollable), or that flush after their wake-ups (see the header).
 */
void
dex_commit_without_flush(void)
{
	(void) set_config_option("synchronous_commit", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
}

/*
 * The scheduler watches the end of these runs (see wake_run_watcher), or,
 * with n < 0, of none any more.  It looks whether they are still active
 * after this.
 */
void
dex_scheduler_watch_runs(const pg_uuid_t *run_ids, int n)
{
	DexDatabaseState *db = dex_shared != NULL ? scheduler_entry() : NULL;

	if (db == NULL)
		return;
	if (n < 0)
	{
		pg_atomic_write_u32(&db->watching, 0);
		for (int w = 0; w < DEX_WAIT_SLOTS / 32; w++)
			pg_atomic_write_u32(&db->run_watch[w], 0);
		return;
	}
	for (int i = 0; i < n; i++)
	{
		int			slot = run_slot(&run_ids[i]);

		pg_atomic_fetch_or_u32(&db->run_watch[slot / 32], (uint32) 1 << (slot % 32));
	}
	if (n > 0)
		pg_atomic_write_u32(&db->watching, 1);
	pg_memory_barrier();
}

/* For dex.wait_for_run: the generation of the run's wait slot */
uint64
dex_run_generation(const pg_uuid_t *run_id)
{
	return slot_generation(&dex_shared->run_slots[run_slot(run_id)]);
}

/*
 * How often a waiting backend checks that its client is still there.  A
 * client that dies (SIGKILL, a lost network) sends nothing, and a backend
 * that only sleeps would hold its connection slot until the wait times out
 * (up to a day): crash-looping workers could use up max_connections.  The
 * check is one non-blocking poll of the socket, so checking costs a wake-up
 * every few seconds per waiting worker and no query.
 */
#define CLIENT_CHECK_MS 2000

/* End the session, as PostgreSQL does, if the client is gone. */
static void
check_client_connection(void)
{
	if (MyProcPort == NULL || whereToSendOutput != DestRemote)
		return;					/* not a client backend */
	if (!pq_check_connection())
	{
		ClientConnectionLost = true;
		InterruptPending = true;
		CHECK_FOR_INTERRUPTS();	/* FATAL: connection to client lost */
	}
}

/* while waiting for several runs, how often the others' slots are looked at */
#define RUNS_CHECK_MS 100

/*
 * dex.wait_for_run(s): sleep until the wait slot of one of the n runs moves
 * on from its generation (read before the caller looked at the run, so an
 * end committed since is never missed), or timeout_ms passes; whether one
 * moved.  It sleeps on the first run's condition variable (a backend sleeps
 * on one at a time) and reads the others' generations every RUNS_CHECK_MS:
 * an atomic read each, no statement.  Interrupts are served while it
 * sleeps, and a client that went away ends the session within
 * CLIENT_CHECK_MS.
 */
bool
dex_runs_wait(const pg_uuid_t *run_ids, const uint64 *generations, int n, long timeout_ms)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	DexWaitSlot *first;
	bool		woken = false;

	require_shared_memory("runs");
	first = &dex_shared->run_slots[run_slot(&run_ids[0])];
	ConditionVariablePrepareToSleep(&first->cv);
	while (!woken)
	{
		long		remaining;

		for (int i = 0; i < n && !woken; i++)
			woken = pg_atomic_read_u64(&dex_shared->run_slots[run_slot(&run_ids[i])].generation) !=
				generations[i];
		remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		if (woken || remaining <= 0)
			break;
		(void) ConditionVariableTimedSleep(&first->cv,
										   Min(remaining, n > 1 ? RUNS_CHECK_MS : CLIENT_CHECK_MS),
										   PG_WAIT_EXTENSION);
		check_client_connection();
	}
	ConditionVariableCancelSleep();
	return woken;
}

/*
 * Leave the queue waiters' table (also at exit: a FATAL ends a wait).
 * Returns whether a commit woke the entry, up to the moment it was left: a
 * wake-up that came just as the wait timed out still counts.
 */
bool
dex_queue_wait_end(void)
{
	bool		woken;

	if (my_waiter == NULL)
		return false;
	SpinLockAcquire(&dex_shared->waiters_mutex);
	woken = my_waiter->woken;
	my_waiter->waiting = false;
	my_waiter->woken = false;
	SpinLockRelease(&dex_shared->waiters_mutex);
	pg_atomic_fetch_sub_u32(&dex_shared->queue_waiters, 1);
	my_waiter = NULL;
	return woken;
}

/* Whether waiter w can take every task a waiter that declared keys[n] (0: none) can */
static bool
waiter_covers(const DexQueueWaiter *w, const uint64 *keys, int n)
{
	if (w->n_keys == 0)
		return true;
	if (w->n_keys < 0 || n == 0)
		return false;
	for (int i = 0; i < n; i++)
		if (!waiter_has_key(w, keys[i]))
			return false;
	return true;
}

/* What a waiter passing its wake-up on could take: its queue and declared keys */
typedef struct PassedOn
{
	int32		queue_id;
	const uint64 *keys;
	int			n;
} PassedOn;

/* wake_waiters' picks of dex_queue_pass_wakeup_on */
static bool
pick_covering(DexQueueWaiter *w, void *arg)
{
	PassedOn   *from = arg;

	if (w->woken || w->queue_id != from->queue_id || !waiter_covers(w, from->keys, from->n))
		return false;
	w->woken = true;
	return true;
}

static bool
pick_declaring(DexQueueWaiter *w, void *arg)
{
	PassedOn   *from = arg;

	if (w->woken || w->queue_id != from->queue_id || w->n_keys == 0)
		return false;
	w->woken = true;
	return true;
}

/*
 * dex.poll_tasks_wait leased tasks and returns, but a commit woke its entry
 * meanwhile: that wake-up was for a task it may not have taken, so another
 * waiter of the queue (not woken yet) gets it now: one that can take all it
 * could (it declared keys[n]); if none, every waiter that declared keys,
 * one of which may take it.  The task is committed.
 */
void
dex_queue_pass_wakeup_on(int32 queue_id, const uint64 *keys, int n)
{
	PassedOn	from = {queue_id, keys, n};

	if (wake_waiters(pick_covering, &from, 1) == 0)
		(void) wake_waiters(pick_declaring, &from, PG_INT32_MAX);
}

/*
 * Leave the table on the way out of a wait that ends in an error or with the
 * session (a cancel, a client gone, a termination).  A commit may have woken
 * this entry for a task it will never take: if it had, and none other was
 * woken for it, the task would wait for the next poll of some worker, up to
 * a poll timeout later (a worker killed mid-activity left its waiting
 * connection behind; the retry of that activity woke it, and it ended on
 * finding its client gone).  So the wake-up goes on, as dex.poll_tasks_wait
 * passes on one it got after its last look.
 */
void
dex_queue_wait_abandon(void)
{
	int32		queue_id;
	int			n_keys;
	uint64		keys[DEX_WAIT_KEYS];

	if (my_waiter == NULL)
		return;
	SpinLockAcquire(&dex_shared->waiters_mutex);
	queue_id = my_waiter->queue_id;
	n_keys = my_waiter->n_keys;
	if (n_keys > 0)
		memcpy(keys, my_waiter->keys, sizeof(uint64) * n_keys);
	SpinLockRelease(&dex_shared->waiters_mutex);
	/* a wide declaration is passed on as none: to a waiter that takes anything, else to all */
	if (dex_queue_wait_end())
		dex_queue_pass_wakeup_on(queue_id, keys, Max(n_keys, 0));
}

static void
queue_wait_at_exit(int code, Datum arg)
{
	dex_queue_wait_abandon();
}

/*
 * Enter the queue waiters' table for the queue, before looking for work:
 * a commit that makes a task pollable from here on may wake this backend.
 */
void
dex_queue_wait_begin(int32 queue_id, uint32 worker, const uint64 *keys, int n_keys)
{
	static bool exit_callback = false;

	require_shared_memory("tasks");
	if (MyBackendId == InvalidBackendId || MyBackendId > dex_shared->n_waiter_entries)
		elog(ERROR, "dex: backend id %d has no entry in the queue waiters' table", MyBackendId);
	if (!exit_callback)
	{
		before_shmem_exit(queue_wait_at_exit, (Datum) 0);
		exit_callback = true;
	}
	(void) dex_queue_wait_end();
	my_waiter = &dex_shared->waiters[MyBackendId - 1];
	pg_atomic_fetch_add_u32(&dex_shared->queue_waiters, 1);
	SpinLockAcquire(&dex_shared->waiters_mutex);
	my_waiter->dbid = MyDatabaseId;
	my_waiter->queue_id = queue_id;
	my_waiter->worker = worker;
	my_waiter->n_keys = n_keys <= DEX_WAIT_KEYS ? n_keys : -1;
	if (n_keys > 0 && n_keys <= DEX_WAIT_KEYS)
		memcpy(my_waiter->keys, keys, sizeof(uint64) * n_keys);
	my_waiter->latch = MyLatch;
	my_waiter->stop = false;
	my_waiter->woken = false;
	my_waiter->waiting = true;
	SpinLockRelease(&dex_shared->waiters_mutex);
}

/* Whether a commit woke this backend's entry, or its worker asked it to stop waiting */
static bool
queue_waiter_woken(void)
{
	bool		woken;

	SpinLockAcquire(&dex_shared->waiters_mutex);
	woken = my_waiter->woken || my_waiter->stop;
	SpinLockRelease(&dex_shared->waiters_mutex);
	return woken;
}

/* Whether this backend's worker asked it to stop waiting (dex.stop_waiting) */
bool
dex_queue_wait_stopped(void)
{
	bool		stop;

	if (my_waiter == NULL)
		return false;
	SpinLockAcquire(&dex_shared->waiters_mutex);
	stop = my_waiter->stop;
	SpinLockRelease(&dex_shared->waiters_mutex);
	return stop;
}

/* wake_waiters' pick of dex_queue_stop_waiters: the worker's waits, told to stop */
static bool
pick_worker_to_stop(DexQueueWaiter *w, void *arg)
{
	if (w->stop || w->worker != *(uint32 *) arg)
		return false;
	w->stop = true;
	return true;
}

/*
 * dex.stop_waiting: the waits of this database's backends for the worker
 * (dex_worker_hash of its id) end now, as at their timeout: its shutdown
 * needs no cancel request.  How many were waiting.
 */
int
dex_queue_stop_waiters(uint32 worker)
{
	require_shared_memory("tasks");
	return wake_waiters(pick_worker_to_stop, &worker, PG_INT32_MAX);
}

/*
 * Sleep, in the table since dex_queue_wait_begin, until a commit wakes this
 * backend or timeout_ms passes; whether it was woken.  Interrupts are
 * served while sleeping, and a client that went away ends the session
 * within CLIENT_CHECK_MS.  The caller leaves the table (dex_queue_wait_end).
 */
bool
dex_queue_wait(long timeout_ms)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);

	Assert(my_waiter != NULL);
	for (;;)
	{
		long		remaining;

		if (queue_waiter_woken())
			return true;
		remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		if (remaining <= 0)
			return false;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(remaining, CLIENT_CHECK_MS), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		check_client_connection();
	}
}


/*
 * Without shared_preload_libraries there is no scheduler: say so once per
 * session when something needs it.
 */
void
dex_warn_if_not_preloaded(const char *what)
{
	if (dex_shared != NULL || warned_not_preloaded)
		return;
	warned_not_preloaded = true;
	ereport(WARNING,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("dex is not loaded via shared_preload_libraries"),
			 errdetail("Without its background workers, %s (timers, activity retries, expired leases) is not scheduled.",
					   what),
			 errhint("Add dex to \"%s\" and restart the server.",
					 "shared_preload_libraries")));
}

PG_FUNCTION_INFO_V1(dex_wake_scheduler);

/* dex.wake_scheduler(): wake the scheduler when this transaction commits */
Datum
dex_wake_scheduler(PG_FUNCTION_ARGS)
{
	dex_wake_scheduler_at_commit(DT_NOBEGIN);
	PG_RETURN_VOID();
}
