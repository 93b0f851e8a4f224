/*-------------------------------------------------------------------------
 *
 * wakeup.c
 *	  Shared memory of dex and the wake-ups that replace polling.
 *
 * The scheduler publishes its latch and the time it next plans to wake.  A
 * backend that creates work falling due earlier than that (a timer, an
 * activity retry, a lease that expires sooner) asks for a wake-up; the latch
 * is set when its transaction commits, never before, so the scheduler never
 * looks for rows it cannot see yet.  Aborted transactions wake nobody.
 *
 * Workers waiting for tasks (dex.wait_for_tasks) sleep on a condition
 * variable of their queue's wait slot.  A transaction that makes tasks
 * pollable on a queue notes the queue; when it commits, the slot's generation
 * is bumped and its sleepers are woken.  A waiter reads the generation before
 * it looks for work and sleeps only while the generation is unchanged, so a
 * commit between its look and its sleep is never missed.  Queues share slots
 * by hash; a shared slot only costs a spurious wake-up.
 *
 * Locking: the latch pointer is written by the scheduler under the spinlock
 * and read under it; next_wake is a 64-bit atomic written by the scheduler
 * and read without a lock (a stale read only costs one spurious wake-up or,
 * for a time already passed, none is needed).  Slot generations are atomics;
 * condition variables have their own locking.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "common/hashfn.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "dex.h"

#define DEX_WAIT_SLOTS 256

typedef struct DexWaitSlot
{
	pg_atomic_uint64 generation;	/* bumped by every commit adding work */
	ConditionVariable cv;
} DexWaitSlot;

typedef struct DexSharedState
{
	slock_t		mutex;
	Latch	   *scheduler_latch;	/* NULL while no scheduler runs */
	pid_t		scheduler_pid;
	pg_atomic_uint64 scheduler_next_wake;	/* TimestampTz */
	DexWaitSlot wait_slots[DEX_WAIT_SLOTS];
} DexSharedState;

static DexSharedState *dex_shared = NULL;

/* earliest due time of the work this transaction created */
static TimestampTz pending_wake = DT_NOEND;

/* wait slots of the queues this transaction made work pollable on */
#define MAX_PENDING_SLOTS 16
static int	pending_slots[MAX_PENDING_SLOTS];
static int	n_pending_slots = 0;
static bool pending_all_slots = false;
static bool xact_callback_registered = false;
static bool warned_not_preloaded = false;

void
dex_shmem_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(DexSharedState)));
}

void
dex_shmem_startup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	dex_shared = ShmemInitStruct("dex", sizeof(DexSharedState), &found);
	if (!found)
	{
		SpinLockInit(&dex_shared->mutex);
		dex_shared->scheduler_latch = NULL;
		dex_shared->scheduler_pid = 0;
		pg_atomic_init_u64(&dex_shared->scheduler_next_wake, (uint64) DT_NOEND);
		for (int i = 0; i < DEX_WAIT_SLOTS; i++)
		{
			pg_atomic_init_u64(&dex_shared->wait_slots[i].generation, 0);
			ConditionVariableInit(&dex_shared->wait_slots[i].cv);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

static void
clear_scheduler(int code, Datum arg)
{
	SpinLockAcquire(&dex_shared->mutex);
	if (dex_shared->scheduler_pid == MyProcPid)
	{
		dex_shared->scheduler_latch = NULL;
		dex_shared->scheduler_pid = 0;
	}
	SpinLockRelease(&dex_shared->mutex);
}

/*
 * Called by the scheduler at start: publish its latch.
 */
void
dex_scheduler_register(void)
{
	Assert(dex_shared != NULL);
	before_shmem_exit(clear_scheduler, (Datum) 0);
	SpinLockAcquire(&dex_shared->mutex);
	dex_shared->scheduler_latch = MyLatch;
	dex_shared->scheduler_pid = MyProcPid;
	SpinLockRelease(&dex_shared->mutex);
}

void
dex_scheduler_set_next_wake(TimestampTz when)
{
	pg_atomic_write_u64(&dex_shared->scheduler_next_wake, (uint64) when);
}

static void
wake_slot(int slot)
{
	DexWaitSlot *s = &dex_shared->wait_slots[slot];

	pg_atomic_fetch_add_u64(&s->generation, 1);
	ConditionVariableBroadcast(&s->cv);
}

static void
wake_pending_slots(void)
{
	if (dex_shared != NULL)
	{
		if (pending_all_slots)
			for (int i = 0; i < DEX_WAIT_SLOTS; i++)
				wake_slot(i);
		else
			for (int i = 0; i < n_pending_slots; i++)
				wake_slot(pending_slots[i]);
	}
	n_pending_slots = 0;
	pending_all_slots = false;
}

static void
dex_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (n_pending_slots > 0 || pending_all_slots)
				wake_pending_slots();
			if (pending_wake != DT_NOEND && dex_shared != NULL)
			{
				TimestampTz next = (TimestampTz)
				pg_atomic_read_u64(&dex_shared->scheduler_next_wake);

				if (pending_wake < next)
				{
					SpinLockAcquire(&dex_shared->mutex);
					if (dex_shared->scheduler_latch)
						SetLatch(dex_shared->scheduler_latch);
					SpinLockRelease(&dex_shared->mutex);
				}
			}
			pending_wake = DT_NOEND;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			pending_wake = DT_NOEND;
			n_pending_slots = 0;
			pending_all_slots = false;
			break;
		default:
			break;
	}
}

void
dex_wakeup_init(void)
{
	if (!xact_callback_registered)
	{
		RegisterXactCallback(dex_xact_callback, NULL);
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

static int
queue_slot(int32 queue_id)
{
	uint32		h = hash_combine(murmurhash32((uint32) MyDatabaseId),
								 murmurhash32((uint32) queue_id));

	return (int) (h % DEX_WAIT_SLOTS);
}

/*
 * This transaction made tasks pollable on the queue: wake its waiting
 * workers when it commits.
 */
void
dex_queue_work_added(int32 queue_id)
{
	int			slot = queue_slot(queue_id);

	if (pending_all_slots)
		return;
	for (int i = 0; i < n_pending_slots; i++)
		if (pending_slots[i] == slot)
			return;
	if (n_pending_slots == MAX_PENDING_SLOTS)
		pending_all_slots = true;
	else
		pending_slots[n_pending_slots++] = slot;
}

/* Note every queue id in column "col" of the current SPI result. */
void
dex_queue_work_added_spi(int col)
{
	for (uint64 i = 0; i < SPI_processed; i++)
		dex_queue_work_added((int32) dex_spi_getint64(i, col));
}

/*
 * For dex.wait_for_tasks: the generation of the queue's wait slot, to be read
 * before looking for work.
 */
uint64
dex_queue_generation(int32 queue_id)
{
	uint64		gen;

	if (dex_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dex must be loaded via shared_preload_libraries to wait for tasks"),
				 errhint("Add dex to \"%s\" and restart the server, or poll without waiting.",
						 "shared_preload_libraries")));
	gen = pg_atomic_read_u64(&dex_shared->wait_slots[queue_slot(queue_id)].generation);
	pg_memory_barrier();
	return gen;
}

/*
 * Sleep until work is added to the queue after "generation" was read, or
 * until timeout_ms passes.  Returns whether work was added.  Interrupts
 * (cancel, terminate) are served while sleeping.
 */
bool
dex_queue_wait(int32 queue_id, uint64 generation, long timeout_ms)
{
	DexWaitSlot *slot = &dex_shared->wait_slots[queue_slot(queue_id)];
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	bool		woken = false;

	ConditionVariablePrepareToSleep(&slot->cv);
	for (;;)
	{
		long		remaining;

		if (pg_atomic_read_u64(&slot->generation) != generation)
		{
			woken = true;
			break;
		}
		remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		if (remaining <= 0)
			break;
		(void) ConditionVariableTimedSleep(&slot->cv, remaining, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
	return woken;
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
