/*-------------------------------------------------------------------------
 *
 * pollers.c
 *	  When a worker that could take each kind of task last polled its queue:
 *	  what dex.unserved compares the waiting tasks with (dex.last_polled).
 *
 * A kind of task is a key, dex_task_key(): a workflow name and version, or
 * an activity name (version 0).  A poll that declares what it runs records
 * each declared key of its queue; one that declares nothing records key 0,
 * which serves every task of the queue.  Times are kept to the second: an
 * entry written less than a second ago is left alone.
 *
 * The table is open-addressed: an entry per (database, queue, key), found
 * within PROBES slots of its hash; when those are all taken, the one polled
 * longest ago gives way (a lost entry only makes its tasks look unserved
 * until the next poll of them).  Entries are never removed otherwise: a
 * dropped queue's stay until they give way.
 *
 * Locking: one spinlock over the table, held for the probes of one poll's
 * keys (at most DEX_MAX_DECLARED, each a few slots) and never across a call
 * that may fail.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "shmem/shmem.h"

#define POLLER_SLOTS 8192
#define PROBES 16

typedef struct DexPoller
{
	Oid			dbid;			/* InvalidOid: a free slot */
	int32		queue_id;
	uint64		key;			/* 0: a poll that declared nothing */
	TimestampTz last_polled;
} DexPoller;

typedef struct DexPollers
{
	slock_t		mutex;
	DexPoller	slots[POLLER_SLOTS];
} DexPollers;

static DexPollers *pollers = NULL;

Size
dex_pollers_shmem_size(void)
{
	return MAXALIGN(sizeof(DexPollers));
}

/* Under AddinShmemInitLock, from dex_shmem_startup */
void
dex_pollers_shmem_startup(void)
{
	bool		found;

	pollers = ShmemInitStruct("dex pollers", dex_pollers_shmem_size(), &found);
	if (!found)
	{
		SpinLockInit(&pollers->mutex);
		memset(pollers->slots, 0, sizeof(pollers->slots));
	}
}

/* The key of a kind of task: a workflow and version, or an activity (version 0); never 0 */
uint64
dex_task_key(const char *name, int32 version)
{
	uint64		h = hash_bytes_extended((const unsigned char *) name, (int) strlen(name),
										(uint64) (uint32) version);

	return h == 0 ? 1 : h;
}

static uint32
first_slot(Oid dbid, int32 queue_id, uint64 key)
{
	uint32		h = hash_combine(murmurhash32((uint32) dbid), murmurhash32((uint32) queue_id));

	return hash_combine(h, (uint32) (key ^ (key >> 32))) % POLLER_SLOTS;
}

/*
 * The slot of (database, queue, key), under the mutex; with "take", a free
 * one, or the stalest of its probes, is taken for it.  NULL if none.
 */
static DexPoller *
find_slot(Oid dbid, int32 queue_id, uint64 key, bool take)
{
	uint32		first = first_slot(dbid, queue_id, key);
	DexPoller  *stalest = NULL;

	for (int p = 0; p < PROBES; p++)
	{
		DexPoller  *e = &pollers->slots[(first + p) % POLLER_SLOTS];

		if (e->dbid == dbid && e->queue_id == queue_id && e->key == key)
			return e;
		if (e->dbid == InvalidOid)
		{
			if (!take)
				return NULL;
			stalest = e;
			break;
		}
		if (stalest == NULL || e->last_polled < stalest->last_polled)
			stalest = e;
	}
	if (!take)
		return NULL;
	stalest->dbid = dbid;
	stalest->queue_id = queue_id;
	stalest->key = key;
	stalest->last_polled = 0;
	return stalest;
}

/*
 * A worker of this database polls the queue, declaring the n keys (none:
 * it runs every task of the queue).
 */
void
dex_polled(int32 queue_id, const uint64 *keys, int n)
{
	TimestampTz now;
	uint64		any = 0;

	if (pollers == NULL)
		return;
	if (n == 0)
	{
		keys = &any;
		n = 1;
	}
	now = GetCurrentTimestamp();
	SpinLockAcquire(&pollers->mutex);
	for (int i = 0; i < n; i++)
	{
		DexPoller  *e = find_slot(MyDatabaseId, queue_id, keys[i], true);

		if (e->last_polled < now - USECS_PER_SEC)
			e->last_polled = now;
	}
	SpinLockRelease(&pollers->mutex);
}

/*
 * When a worker that could take the tasks of "key" on the queue last polled
 * it (0: key 0, any poll of the queue); 0 if none since the server started.
 */
static TimestampTz
last_polled(int32 queue_id, uint64 key)
{
	TimestampTz at = 0;

	SpinLockAcquire(&pollers->mutex);
	if (key != 0)
	{
		DexPoller  *e = find_slot(MyDatabaseId, queue_id, key, false);
		DexPoller  *any = find_slot(MyDatabaseId, queue_id, 0, false);

		at = Max(e ? e->last_polled : 0, any ? any->last_polled : 0);
	}
	else
		for (int i = 0; i < POLLER_SLOTS; i++)
		{
			DexPoller  *e = &pollers->slots[i];

			if (e->dbid == MyDatabaseId && e->queue_id == queue_id)
				at = Max(at, e->last_polled);
		}
	SpinLockRelease(&pollers->mutex);
	return at;
}

/* dex.last_polled(queue_id, name, version) */
PG_FUNCTION_INFO_V1(dex_last_polled);
Datum
dex_last_polled(PG_FUNCTION_ARGS)
{
	uint64		key = 0;
	TimestampTz at;

	if (PG_ARGISNULL(0) || pollers == NULL)
		PG_RETURN_NULL();
	if (!PG_ARGISNULL(1))
		key = dex_task_key(text_to_cstring(PG_GETARG_TEXT_PP(1)),
						   PG_ARGISNULL(2) ? 0 : PG_GETARG_INT32(2));
	at = last_polled(PG_GETARG_INT32(0), key);
	if (at == 0)
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(at);
}
