/*-------------------------------------------------------------------------
 *
 * rate.c
 *	  Rate limits of queues: a token bucket per rate-limited queue in shared
 *	  memory, shared by every backend and worker of the cluster;
 *	  dex.rate_limits().
 *
 * A queue with rate_limit n and rate_period p (dex.alter_queue, kept in
 * dex.queue) hands out at most n tasks at once and then n per p: its bucket
 * holds up to n tokens, refills continuously at n per p, and each task a
 * poll leases takes one.  A poll takes the tokens it may use before it
 * leases and gives back those it did not use (fewer tasks were ready); a
 * poll that finds no token leases nothing and learns when the next one
 * comes, so that a long poll sleeps until then and no longer (api_wait.c).
 * Throttled waiters are spread one token apart (reserved_until): eight
 * sleepers of an empty bucket do not all wake for one token.
 *
 * Tokens are counted exactly in integers: units = tokens * period in
 * microseconds, refilled by n units per elapsed microsecond, so that no
 * rounding ever hands out a task more.  Every change of a bucket is made
 * under its spinlock, a few arithmetic operations; no table is written.
 *
 * The bucket is not persistent: it is made full the first time a poll of
 * the queue needs it, so after a server restart (or once the limit is set)
 * a queue may hand out n tasks at once.  Its configuration comes with the
 * queue's row (the poll reads it anyway) and its updated_at: a poll that
 * read an older row than the bucket's uses the bucket's configuration, a
 * newer one changes it, keeping the tokens it had (at most the new n).
 *
 * Per-key limits (by concurrency key or label value) are designed in: an
 * entry is identified by (database, queue, subkey), subkey 0 being the
 * whole queue; only subkey 0 is used so far.
 *
 * A bucket is freed when a transaction that removed the queue's limit
 * commits.
 *
 * Locking: a table spinlock guards taking and freeing entries (once per
 * backend and queue: a backend remembers where its queues' buckets are and
 * checks the identity under the entry's own spinlock); each entry has its
 * spinlock for its tokens.  Neither is held across a call that may fail.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "shmem/shmem.h"

#define RATE_SLOTS 1024
#define PROBES 32

typedef struct DexRateBucket
{
	slock_t		mutex;
	Oid			dbid;			/* InvalidOid: a free entry */
	int32		queue_id;
	uint64		subkey;			/* 0: the whole queue (per-key limits: later) */
	int32		limit;			/* tokens per period, and the most held */
	int64		period_us;
	TimestampTz config_at;		/* the queue row's updated_at it was set from */
	int64		units;			/* tokens * period_us */
	TimestampTz refilled_at;
	TimestampTz reserved_until; /* the latest wake-up promised to a throttled waiter */
	uint64		granted;		/* tasks handed out */
	uint64		throttled;		/* polls that got fewer tasks than they could have */
} DexRateBucket;

typedef struct DexRateTable
{
	slock_t		mutex;			/* taking and freeing entries */
	DexRateBucket buckets[RATE_SLOTS];
} DexRateTable;

static DexRateTable *rate_table = NULL;

/* where this backend found its queues' buckets: queue id -> slot, direct-mapped */
#define LOCAL_CACHE 64
static struct
{
	int32		queue_id;
	int			slot;
}			local_cache[LOCAL_CACHE];

Size
dex_rate_shmem_size(void)
{
	return MAXALIGN(sizeof(DexRateTable));
}

/* Under AddinShmemInitLock, from dex_shmem_startup */
void
dex_rate_shmem_startup(void)
{
	bool		found;

	rate_table = ShmemInitStruct("dex rate limits", dex_rate_shmem_size(), &found);
	if (!found)
	{
		SpinLockInit(&rate_table->mutex);
		for (int i = 0; i < RATE_SLOTS; i++)
		{
			DexRateBucket *b = &rate_table->buckets[i];

			memset(b, 0, sizeof(DexRateBucket));
			SpinLockInit(&b->mutex);
			b->dbid = InvalidOid;
		}
	}
}

static uint32
first_slot(int32 queue_id, uint64 subkey)
{
	uint32		h = hash_combine(murmurhash32((uint32) MyDatabaseId), murmurhash32((uint32) queue_id));

	return hash_combine(h, (uint32) (subkey ^ (subkey >> 32))) % RATE_SLOTS;
}

static bool
is_mine(const DexRateBucket *b, int32 queue_id)
{
	return b->dbid == MyDatabaseId && b->queue_id == queue_id && b->subkey == 0;
}

/*
 * The bucket of the queue, returned locked; with "take", a free entry is
 * made its bucket (full, from the configuration given) if it has none.
 * NULL if it has none (or, with take, if every probe is taken).
 */
static DexRateBucket *
lock_bucket(int32 queue_id, bool take, int32 limit, int64 period_us, TimestampTz config_at,
			TimestampTz now)
{
	int			c = (uint32) queue_id % LOCAL_CACHE;
	uint32		first;
	DexRateBucket *found = NULL;

	if (rate_table == NULL)
		return NULL;
	if (local_cache[c].queue_id == queue_id && local_cache[c].slot >= 0)
	{
		DexRateBucket *b = &rate_table->buckets[local_cache[c].slot];

		SpinLockAcquire(&b->mutex);
		if (is_mine(b, queue_id))
			return b;
		SpinLockRelease(&b->mutex);
	}

	first = first_slot(queue_id, 0);
	SpinLockAcquire(&rate_table->mutex);
	for (int p = 0; p < PROBES && found == NULL; p++)
	{
		DexRateBucket *b = &rate_table->buckets[(first + p) % RATE_SLOTS];

		if (is_mine(b, queue_id))
			found = b;
	}
	for (int p = 0; p < PROBES && found == NULL && take; p++)
	{
		DexRateBucket *b = &rate_table->buckets[(first + p) % RATE_SLOTS];

		if (b->dbid != InvalidOid)
			continue;
		SpinLockAcquire(&b->mutex);
		b->dbid = MyDatabaseId;
		b->queue_id = queue_id;
		b->subkey = 0;
		b->limit = limit;
		b->period_us = period_us;
		b->config_at = config_at;
		b->units = (int64) limit * period_us;	/* full */
		b->refilled_at = now;
		b->reserved_until = 0;
		b->granted = 0;
		b->throttled = 0;
		SpinLockRelease(&b->mutex);
		found = b;
	}
	if (found != NULL)
	{
		local_cache[c].queue_id = queue_id;
		local_cache[c].slot = (int) (found - rate_table->buckets);
		SpinLockAcquire(&found->mutex);
	}
	SpinLockRelease(&rate_table->mutex);
	return found;
}

/*
 * Under the bucket's lock: take the configuration if it is newer, and add
 * the tokens of the time elapsed since the last refill.
 */
static void
add_tokens_until(DexRateBucket *b, TimestampTz until)
{
	if (until > b->refilled_at)
	{
		int64		elapsed = until - b->refilled_at;
		int64		full = (int64) b->limit * b->period_us;

		b->units = elapsed >= b->period_us ? full : Min(full, b->units + elapsed * b->limit);
		b->refilled_at = until;
	}
}

/*
 * Under the bucket's lock: add the tokens of the time elapsed since the last
 * refill, at the old rate until a newer configuration was set (config_at),
 * the whole tokens kept (at most the new limit), at the new rate since.
 */
static void
refill(DexRateBucket *b, int32 limit, int64 period_us, TimestampTz config_at, TimestampTz now)
{
	if (config_at > b->config_at)
	{
		if (limit != b->limit || period_us != b->period_us)
		{
			int64		tokens;

			add_tokens_until(b, Min(config_at, now));
			tokens = Min(b->units / b->period_us, (int64) limit);
			b->limit = limit;
			b->period_us = period_us;
			b->units = tokens * period_us;
		}
		b->config_at = config_at;
	}
	add_tokens_until(b, now);
}

/* Under the bucket's lock: when the bucket next has a whole token */
static TimestampTz
next_token_at(const DexRateBucket *b, TimestampTz now)
{
	int64		missing = b->period_us - b->units;

	if (missing <= 0)
		return now;
	return now + (missing + b->limit - 1) / b->limit;
}

static void
require_table(void)
{
	if (rate_table == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dex must be loaded via shared_preload_libraries to poll a rate-limited queue"),
				 errhint("Add dex to \"%s\" and restart the server, or remove the queue's rate limit.",
						 "shared_preload_libraries")));
}

/*
 * A poll of a queue limited to "limit" tasks per period_us (its row's
 * configuration, updated at config_at) may lease up to "want" tasks: take
 * as many tokens as there are, up to want, and return how many.  When that
 * is fewer than want, *retry_at is when the next token comes (else 0).
 */
int64
dex_rate_take(int32 queue_id, int32 limit, int64 period_us, TimestampTz config_at, int64 want,
			  TimestampTz *retry_at)
{
	TimestampTz now = GetCurrentTimestamp();
	DexRateBucket *b;
	int64		k;

	require_table();
	b = lock_bucket(queue_id, true, limit, period_us, config_at, now);
	if (b == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("too many rate-limited queues"),
				 errdetail("dex keeps the token buckets of at most %d queues of the cluster in shared memory.",
						   RATE_SLOTS)));
	refill(b, limit, period_us, config_at, now);
	k = Min(want, b->units / b->period_us);
	b->units -= k * b->period_us;
	b->granted += k;
	*retry_at = k < want ? next_token_at(b, now) : 0;
	SpinLockRelease(&b->mutex);
	return k;
}

/*
 * The poll leased fewer tasks than it took tokens for: give the rest back.
 * "throttled": it got fewer than it wanted for want of tokens, and leased
 * all it got (so it might have leased more): counted.
 */
void
dex_rate_give_back(int32 queue_id, int64 unused, bool throttled)
{
	DexRateBucket *b = lock_bucket(queue_id, false, 0, 0, 0, 0);

	if (b == NULL)
		return;
	b->units = Min(b->units + unused * b->period_us, (int64) b->limit * b->period_us);
	b->granted -= Min((uint64) unused, b->granted);
	if (throttled)
		b->throttled++;
	SpinLockRelease(&b->mutex);
}

/*
 * Whether the queue's bucket has a token now, without taking it; if not,
 * *retry_at is when it will.  A queue whose bucket is not made yet has.
 */
bool
dex_rate_peek(int32 queue_id, int32 limit, int64 period_us, TimestampTz config_at,
			  TimestampTz *retry_at)
{
	TimestampTz now = GetCurrentTimestamp();
	DexRateBucket *b = lock_bucket(queue_id, false, 0, 0, 0, now);
	bool		has;

	*retry_at = 0;
	if (b == NULL)
		return true;
	refill(b, limit, period_us, config_at, now);
	has = b->units >= b->period_us;
	if (!has)
		*retry_at = next_token_at(b, now);
	SpinLockRelease(&b->mutex);
	return has;
}

/*
 * A waiter of the queue found no token and will sleep until "deadline" at
 * most: when it should wake, at least "retry_at" (the next token) and one
 * token's time after the waiter that was promised the latest wake-up, so
 * that sleepers wake one per token, in turn.  A wake-up after the deadline
 * is not promised (the waiter will have left): it does not hold back the
 * waiters that come after it.
 */
TimestampTz
dex_rate_wake_at(int32 queue_id, TimestampTz retry_at, TimestampTz deadline)
{
	DexRateBucket *b = lock_bucket(queue_id, false, 0, 0, 0, 0);
	TimestampTz at = retry_at;

	if (b == NULL)
		return at;
	if (b->reserved_until >= at)
		at = b->reserved_until + Max(b->period_us / b->limit, 1);
	if (at <= deadline)
		b->reserved_until = at;
	SpinLockRelease(&b->mutex);
	return at;
}

/* Free the queue's bucket, if this backend's database has one */
static void
free_bucket(int32 queue_id)
{
	DexRateBucket *b = lock_bucket(queue_id, false, 0, 0, 0, 0);

	if (b == NULL)
		return;
	SpinLockRelease(&b->mutex);
	SpinLockAcquire(&rate_table->mutex);
	SpinLockAcquire(&b->mutex);
	if (is_mine(b, queue_id))
		b->dbid = InvalidOid;
	SpinLockRelease(&b->mutex);
	SpinLockRelease(&rate_table->mutex);
}

/* the queues whose rate limit this transaction removed: their buckets go at commit */
#define MAX_PENDING_FORGETS 16
static int32 pending_forgets[MAX_PENDING_FORGETS];
static int	n_pending_forgets = 0;
static bool xact_callback_registered = false;

static void
rate_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
		for (int i = 0; i < n_pending_forgets; i++)
			free_bucket(pending_forgets[i]);
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		n_pending_forgets = 0;
}

/*
 * The queue has no rate limit (dex.alter_queue): its bucket is freed when
 * this transaction commits (a rolled-back removal keeps the bucket with its
 * tokens).  Beyond MAX_PENDING_FORGETS queues in one transaction, the others
 * keep their entries until the server restarts (an entry costs nothing but
 * its place in the table).
 */
void
dex_rate_forget(int32 queue_id)
{
	if (rate_table == NULL)
		return;
	if (!xact_callback_registered)
	{
		RegisterXactCallback(rate_xact_callback, NULL);
		xact_callback_registered = true;
	}
	for (int i = 0; i < n_pending_forgets; i++)
		if (pending_forgets[i] == queue_id)
			return;
	if (n_pending_forgets < MAX_PENDING_FORGETS)
		pending_forgets[n_pending_forgets++] = queue_id;
}

/* ----------------------------------------------------------------
 * dex.rate_limits(): the buckets in use
 * ----------------------------------------------------------------
 */
PG_FUNCTION_INFO_V1(dex_rate_limits);

#define RATE_COLUMNS 8

/*
 * One row per bucket of every database: datid, queue_id, rate_limit,
 * rate_period, tokens (now, with fractions), tasks_granted, polls_throttled,
 * next_token_at (NULL while it holds a whole token).
 */
Datum
dex_rate_limits(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz now = GetCurrentTimestamp();

	InitMaterializedSRF(fcinfo, 0);
	if (rate_table == NULL)
		return (Datum) 0;
	for (int i = 0; i < RATE_SLOTS; i++)
	{
		DexRateBucket *b = &rate_table->buckets[i];
		DexRateBucket copy;
		Datum		values[RATE_COLUMNS];
		bool		nulls[RATE_COLUMNS] = {false};
		Interval   *period;

		SpinLockAcquire(&b->mutex);
		if (b->dbid != InvalidOid)
			refill(b, b->limit, b->period_us, b->config_at, now);
		copy = *b;
		SpinLockRelease(&b->mutex);
		if (copy.dbid == InvalidOid)
			continue;
		period = palloc0(sizeof(Interval));
		period->time = copy.period_us;
		values[0] = ObjectIdGetDatum(copy.dbid);
		values[1] = Int32GetDatum(copy.queue_id);
		values[2] = Int32GetDatum(copy.limit);
		values[3] = IntervalPGetDatum(period);
		values[4] = Float8GetDatum((double) copy.units / (double) copy.period_us);
		values[5] = Int64GetDatum((int64) copy.granted);
		values[6] = Int64GetDatum((int64) copy.throttled);
		if (copy.units >= copy.period_us)
			nulls[7] = true;
		else
			values[7] = TimestampTzGetDatum(next_token_at(&copy, now));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
