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
 * Locking: the latch pointer is written by the scheduler under the spinlock
 * and read under it; next_wake is a 64-bit atomic written by the scheduler
 * and read without a lock (a stale read only costs one spurious wake-up or,
 * for a time already passed, none is needed).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "dex.h"

typedef struct DexSharedState
{
	slock_t		mutex;
	Latch	   *scheduler_latch;	/* NULL while no scheduler runs */
	pid_t		scheduler_pid;
	pg_atomic_uint64 scheduler_next_wake;	/* TimestampTz */
} DexSharedState;

static DexSharedState *dex_shared = NULL;

/* earliest due time of the work this transaction created */
static TimestampTz pending_wake = DT_NOEND;
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
dex_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
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
