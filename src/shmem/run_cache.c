/*-------------------------------------------------------------------------
 *
 * run_cache.c
 *	  Which worker holds each run's state: the table behind incremental
 *	  histories and sticky wake-ups.
 *
 * An SDK worker keeps the state of the runs whose workflow tasks it
 * completed (its workflow cache).  When such a worker polls saying so
 * (worker_cache => true), a task of a run it completed last, at the run's
 * present history length, need not carry the history the worker was shown:
 * only the batch its completion recorded (the events it was shown, then
 * those of its commands as recorded, with what the engine assigned), which
 * the worker checks against what it sent.  This table remembers, per run,
 * the worker that completed its last workflow task, the history length that
 * task was shown and the length its completion left; a poll leaves the
 * history out only on an exact match of run, database, worker and length.  Anything else sends the whole history, so the table may
 * forget at will: a collision, a restart of the server, or a full set only
 * cost one full history.
 *
 * Why a match is safe.  An entry is written by the completion itself, while
 * it holds the run's lock (complete_workflow.c), so entries are written in
 * the order completions hold that lock: the entry of the last completion
 * that got that far wins.  A completion that rolls back after writing
 * leaves an entry whose length the run has not reached; should the run
 * reach that length later by a completion, that completion overwrites it,
 * and by other events (an operator's), the worker named has no state at
 * that length (an SDK keeps a state only once its completion committed) and
 * reads the history (dex.run_history_pb).  A continue-as-new, or a run that
 * ends, forgets its entry: the new history is not what the worker saw.
 *
 * Layout: DEX_RUN_CACHE_WAYS entries per set, the set chosen by a hash of
 * the run id; a new run takes a free entry of its set or the one written
 * longest ago.  dex.worker_cache_runs entries (36 bytes each) in all; 0
 * turns the table off.  Each set has its own spinlock, held to compare or
 * copy four entries.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/uuid.h"

#include "dex.h"
#include "shmem/shmem.h"

#define DEX_RUN_CACHE_WAYS 4

typedef struct DexRunHolder
{
	pg_uuid_t	run_id;
	Oid			dbid;			/* InvalidOid: a free entry */
	uint32		worker;			/* dex_worker_hash of the worker id */
	int32		history_seen;	/* history length the worker's task was shown */
	int32		history_length; /* after the worker's completion */
	uint32		written;		/* the set's clock when written */
} DexRunHolder;

typedef struct DexRunHolderSet
{
	slock_t		mutex;
	uint32		clock;
	DexRunHolder ways[DEX_RUN_CACHE_WAYS];
} DexRunHolderSet;

static DexRunHolderSet *holder_sets = NULL;
static uint32 n_holder_sets = 0;

static uint32
sets_wanted(void)
{
	return (uint32) (dex_worker_cache_runs + DEX_RUN_CACHE_WAYS - 1) / DEX_RUN_CACHE_WAYS;
}

Size
dex_run_cache_shmem_size(void)
{
	return MAXALIGN(mul_size(sets_wanted(), sizeof(DexRunHolderSet)));
}

/* Under AddinShmemInitLock (dex_shmem_startup) */
void
dex_run_cache_shmem_startup(void)
{
	bool		found;
	uint32		n = sets_wanted();

	if (n == 0)
		return;
	holder_sets = ShmemInitStruct("dex run cache", dex_run_cache_shmem_size(), &found);
	if (!found)
	{
		memset(holder_sets, 0, dex_run_cache_shmem_size());
		for (uint32 i = 0; i < n; i++)
			SpinLockInit(&holder_sets[i].mutex);
	}
	n_holder_sets = n;
}

/* A worker id's hash; never 0 */
uint32
dex_worker_hash(const char *worker_id)
{
	uint32		h = hash_bytes((const unsigned char *) worker_id, (int) strlen(worker_id));

	return h == 0 ? 1 : h;
}

static DexRunHolderSet *
holder_set(const pg_uuid_t *run_id)
{
	uint32		h = hash_bytes(run_id->data, UUID_LEN);

	return &holder_sets[h % n_holder_sets];
}

/* The run's entry in its set (its mutex held), or NULL */
static DexRunHolder *
find_holder(DexRunHolderSet *set, const pg_uuid_t *run_id)
{
	for (int i = 0; i < DEX_RUN_CACHE_WAYS; i++)
	{
		DexRunHolder *e = &set->ways[i];

		if (e->dbid == MyDatabaseId && memcmp(e->run_id.data, run_id->data, UUID_LEN) == 0)
			return e;
	}
	return NULL;
}

/*
 * The worker completed the run's workflow task, shown a history of
 * history_seen events, which leaves it at history_length events (its own
 * batch after them); the run goes on.  Called with the run locked.
 */
void
dex_run_holder_set(const pg_uuid_t *run_id, const char *worker_id, int32 history_seen,
				   int32 history_length)
{
	DexRunHolderSet *set;
	DexRunHolder *e;
	uint32		worker = dex_worker_hash(worker_id);

	if (n_holder_sets == 0)
		return;
	set = holder_set(run_id);
	SpinLockAcquire(&set->mutex);
	e = find_holder(set, run_id);
	if (e == NULL)
	{
		/* a free entry, else the one written longest ago */
		for (int i = 0; i < DEX_RUN_CACHE_WAYS && e == NULL; i++)
			if (set->ways[i].dbid == InvalidOid)
				e = &set->ways[i];
		if (e == NULL)
		{
			e = &set->ways[0];
			for (int i = 1; i < DEX_RUN_CACHE_WAYS; i++)
				if (set->clock - set->ways[i].written > set->clock - e->written)
					e = &set->ways[i];
		}
		memcpy(e->run_id.data, run_id->data, UUID_LEN);
		e->dbid = MyDatabaseId;
	}
	e->worker = worker;
	e->history_seen = history_seen;
	e->history_length = history_length;
	e->written = ++set->clock;
	SpinLockRelease(&set->mutex);
}

/* The run's history starts over or ends: no worker holds it.  Run locked. */
void
dex_run_holder_forget(const pg_uuid_t *run_id)
{
	DexRunHolderSet *set;
	DexRunHolder *e;

	if (n_holder_sets == 0)
		return;
	set = holder_set(run_id);
	SpinLockAcquire(&set->mutex);
	e = find_holder(set, run_id);
	if (e != NULL)
		e->dbid = InvalidOid;
	SpinLockRelease(&set->mutex);
}

/*
 * The hash of the worker that holds the run's state at history_length
 * events (any length: -1), or 0 if none is known; and in *history_seen (if
 * not NULL) the history that worker had seen before its batch.
 */
uint32
dex_run_holder(const pg_uuid_t *run_id, int32 history_length, int32 *history_seen)
{
	DexRunHolderSet *set;
	DexRunHolder *e;
	uint32		worker = 0;

	if (n_holder_sets == 0)
		return 0;
	set = holder_set(run_id);
	SpinLockAcquire(&set->mutex);
	e = find_holder(set, run_id);
	if (e != NULL && (history_length < 0 || e->history_length == history_length))
	{
		worker = e->worker;
		if (history_seen != NULL)
			*history_seen = e->history_seen;
	}
	SpinLockRelease(&set->mutex);
	return worker;
}
