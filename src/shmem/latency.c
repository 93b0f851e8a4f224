/*-------------------------------------------------------------------------
 *
 * latency.c
 *	  Latency histograms of dex in shared memory: dex.latency_histograms()
 *	  and the view dex.stat_latency, in the shape Prometheus wants (bucket
 *	  upper bounds, cumulative counts, sum, count).
 *
 * What is measured, and where:
 *   task_wait           per queue: from a task becoming ready (made, its
 *                       lease expired, its retry backoff ended) to a poll
 *                       handing it out (api/api_poll.c, the lease statement
 *                       returns when each task became ready);
 *   activity_execution  per activity queue: from an attempt's lease to its
 *                       completion (engine/complete_activity.c; attempts
 *                       that fail or whose lease expires are not counted);
 *   run_duration        per workflow name: from a run's creation to its end
 *                       in any terminal status (engine/lifecycle.c,
 *                       dex_end_runs).
 *   timer_lag           per workflow queue: how late the scheduler wakes a
 *                       run for a due timer or delayed event, from the
 *                       event's due time to the run's new workflow task
 *                       (workers/scheduler.c; events of a run that has a
 *                       task already, and run timers, are not counted).
 * A value is observed when the SQL call does the thing, not at commit: a
 * rolled-back call still counts, as in stats.c.
 *
 * The histograms live in a fixed table of DEX_LATENCY_SLOTS entries for the
 * whole server, found by open addressing on a 64-bit hash of what they
 * measure ((database, histogram, queue id) or (database, workflow name)).
 * An entry is claimed under a spinlock, which orders claimers only: its
 * identity (database, histogram, queue id, name) is written before its key
 * is published with a barrier, so lock-free readers that see the key see
 * the identity.  Entries are never freed until the server restarts; when
 * the table is full, what finds no entry is not kept.  Observing is lock-free:
 * one atomic add to the bucket and one to the sum (in microseconds); a
 * poll adds its leases up locally first (DexLatencyBatch) and then makes
 * one add per bucket it touched.  A reader may see a sum and the buckets
 * of slightly different moments; dex.reset_stats() zeroes the current
 * database's histograms (a reset racing with an observation may lose it).
 *
 * Without shared_preload_libraries there is no table: nothing is observed
 * and dex.latency_histograms() returns no rows.  Memory: the table, about
 * a megabyte, is allocated once at server start.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "dex.h"
#include "shmem/shmem.h"

#define DEX_LATENCY_SLOTS 2048

/* upper bounds of the buckets, in microseconds; the last bucket is +Inf */
static const int64 bucket_bounds[] = {
	1000, 5000, 10000, 50000, 100000, 500000,	/* 1 ms .. 0.5 s */
	1000000, 5000000, 10000000, 30000000, 60000000,	/* 1 s .. 1 min */
	300000000, 1800000000, INT64CONST(3600000000), /* 5 min .. 1 h */
	INT64CONST(21600000000), INT64CONST(86400000000)	/* 6 h, 1 day */
};

#define N_BOUNDS lengthof(bucket_bounds)
StaticAssertDecl(N_BOUNDS + 1 == DEX_LATENCY_BUCKETS, "DEX_LATENCY_BUCKETS is the bounds and +Inf");

static const char *const histogram_names[DEX_LATENCY_N] = {
	"task_wait", "activity_execution", "run_duration", "timer_lag"
};

typedef struct DexLatencyEntry
{
	pg_atomic_uint64 key;		/* hash of the identity; 0: free */
	Oid			database;
	int32		histogram;		/* DexLatency */
	int32		queue_id;		/* 0 for run_duration */
	char		name[DEX_NAME_MAX_LEN + 1];	/* workflow name of run_duration */
	pg_atomic_uint64 sum;		/* microseconds */
	pg_atomic_uint64 buckets[DEX_LATENCY_BUCKETS];	/* not cumulative */
} DexLatencyEntry;

typedef struct DexLatencyShared
{
	slock_t		claim;			/* held to claim an entry, by claimers only */
	DexLatencyEntry entries[DEX_LATENCY_SLOTS];
} DexLatencyShared;

static DexLatencyShared *dex_latency = NULL;

/* where this backend's queues' entries are: by (histogram, queue id), direct-mapped */
#define CACHE_SIZE 64
typedef struct CachedEntry
{
	int32		histogram;
	int32		queue_id;
	DexLatencyEntry *entry;		/* NULL: not cached */
} CachedEntry;

static CachedEntry entry_cache[CACHE_SIZE];

Size
dex_latency_shmem_size(void)
{
	return MAXALIGN(sizeof(DexLatencyShared));
}

/* Called with AddinShmemInitLock held (see wakeup.c) */
void
dex_latency_shmem_startup(void)
{
	bool		found;

	dex_latency = ShmemInitStruct("dex latency", sizeof(DexLatencyShared), &found);
	if (found)
		return;
	SpinLockInit(&dex_latency->claim);
	for (int i = 0; i < DEX_LATENCY_SLOTS; i++)
	{
		DexLatencyEntry *e = &dex_latency->entries[i];

		pg_atomic_init_u64(&e->key, 0);
		pg_atomic_init_u64(&e->sum, 0);
		for (int b = 0; b < DEX_LATENCY_BUCKETS; b++)
			pg_atomic_init_u64(&e->buckets[b], 0);
	}
}

static uint64
identity_key(DexLatency histogram, int32 queue_id, const char *name)
{
	uint64		h = hash_bytes_uint32_extended((uint32) MyDatabaseId, (uint64) histogram);

	h = hash_combine64(h, hash_bytes_uint32_extended((uint32) queue_id, 0));
	if (name != NULL)
		h = hash_combine64(h, hash_bytes_extended((const unsigned char *) name,
												  (int) strlen(name), 0));
	return h != 0 ? h : 1;
}

static bool
is_identity(const DexLatencyEntry *e, DexLatency histogram, int32 queue_id, const char *name)
{
	return e->database == MyDatabaseId && e->histogram == (int32) histogram &&
		e->queue_id == queue_id && strcmp(e->name, name != NULL ? name : "") == 0;
}

/*
 * Probe for the entry of the identity from its home slot: the entry, or,
 * with "claim" (the claim lock held), a free slot made its own; NULL if
 * neither.  Without "claim" a free slot ends the search: entries are never
 * freed, so the identity has none.
 */
static DexLatencyEntry *
probe(uint64 key, DexLatency histogram, int32 queue_id, const char *name, bool claim)
{
	for (int i = 0; i < DEX_LATENCY_SLOTS; i++)
	{
		DexLatencyEntry *e = &dex_latency->entries[(key + i) % DEX_LATENCY_SLOTS];
		uint64		found = pg_atomic_read_u64(&e->key);

		if (found == 0)
		{
			if (!claim)
				return NULL;
			e->database = MyDatabaseId;
			e->histogram = (int32) histogram;
			e->queue_id = queue_id;
			strlcpy(e->name, name != NULL ? name : "", sizeof(e->name));
			pg_write_barrier();
			pg_atomic_write_u64(&e->key, key);
			return e;
		}
		pg_read_barrier();
		if (found == key && is_identity(e, histogram, queue_id, name))
			return e;
	}
	return NULL;
}

/* The entry of the identity: found, or claimed; NULL when the table is full */
static DexLatencyEntry *
find_entry(DexLatency histogram, int32 queue_id, const char *name)
{
	uint64		key = identity_key(histogram, queue_id, name);
	DexLatencyEntry *e = probe(key, histogram, queue_id, name, false);

	if (e != NULL)
		return e;
	SpinLockAcquire(&dex_latency->claim);
	e = probe(key, histogram, queue_id, name, true);
	SpinLockRelease(&dex_latency->claim);
	return e;
}

/* The entry of a queue's histogram, through this backend's cache */
static DexLatencyEntry *
find_queue_entry(DexLatency histogram, int32 queue_id)
{
	CachedEntry *cached = &entry_cache[((uint32) queue_id * DEX_LATENCY_N + histogram) % CACHE_SIZE];

	if (cached->entry == NULL || cached->histogram != (int32) histogram ||
		cached->queue_id != queue_id)
	{
		cached->entry = find_entry(histogram, queue_id, NULL);
		cached->histogram = (int32) histogram;
		cached->queue_id = queue_id;
	}
	return cached->entry;
}

static int
bucket_of(int64 usecs)
{
	int			b = 0;

	while (b < (int) N_BOUNDS && usecs > bucket_bounds[b])
		b++;
	return b;
}

static bool
observing(void)
{
	return dex_latency != NULL && OidIsValid(MyDatabaseId);
}

/* Add counts and sum to the entry (NULL: the table is full, they are lost) */
static void
add_to_entry(DexLatencyEntry *e, const uint64 *counts, uint64 sum)
{
	if (e == NULL)
		return;
	for (int b = 0; b < DEX_LATENCY_BUCKETS; b++)
		if (counts[b] != 0)
			pg_atomic_fetch_add_u64(&e->buckets[b], counts[b]);
	pg_atomic_fetch_add_u64(&e->sum, sum);
}

void
dex_latency_batch_init(DexLatencyBatch *batch, DexLatency histogram, int32 queue_id)
{
	memset(batch, 0, sizeof(*batch));
	batch->histogram = histogram;
	batch->queue_id = queue_id;
}

/* Add the time from "from" to "to" to the batch (negative: 0); no shared memory */
void
dex_latency_batch_add(DexLatencyBatch *batch, TimestampTz from, TimestampTz to)
{
	int64		usecs = to > from ? (int64) (to - from) : 0;

	batch->counts[bucket_of(usecs)]++;
	batch->sum += (uint64) usecs;
	batch->n++;
}

/* Add what the batch holds to the queue's histogram */
void
dex_latency_batch_flush(DexLatencyBatch *batch)
{
	if (batch->n > 0 && observing())
		add_to_entry(find_queue_entry(batch->histogram, batch->queue_id),
					 batch->counts, batch->sum);
	dex_latency_batch_init(batch, batch->histogram, batch->queue_id);
}

/* One observation of a queue's histogram: from "from" to "to" */
void
dex_latency_observe(DexLatency histogram, int32 queue_id, TimestampTz from, TimestampTz to)
{
	DexLatencyBatch one;

	dex_latency_batch_init(&one, histogram, queue_id);
	dex_latency_batch_add(&one, from, to);
	dex_latency_batch_flush(&one);
}

/* One run of workflow "name" lasted from "from" to "to" */
void
dex_latency_run_ended(const char *name, TimestampTz from, TimestampTz to)
{
	DexLatencyBatch one;

	if (!observing())
		return;
	dex_latency_batch_init(&one, DEX_LATENCY_RUN_DURATION, 0);
	dex_latency_batch_add(&one, from, to);
	add_to_entry(find_entry(DEX_LATENCY_RUN_DURATION, 0, name), one.counts, one.sum);
}

/* dex.reset_stats(): zero the histograms of the current database */
void
dex_latency_reset(void)
{
	if (dex_latency == NULL)
		return;
	for (int i = 0; i < DEX_LATENCY_SLOTS; i++)
	{
		DexLatencyEntry *e = &dex_latency->entries[i];

		if (pg_atomic_read_u64(&e->key) == 0)
			continue;
		pg_read_barrier();
		if (e->database != MyDatabaseId)
			continue;
		for (int b = 0; b < DEX_LATENCY_BUCKETS; b++)
			pg_atomic_write_u64(&e->buckets[b], 0);
		pg_atomic_write_u64(&e->sum, 0);
	}
}

/* ----------------------------------------------------------------
 * SQL function
 * ----------------------------------------------------------------
 */

PG_FUNCTION_INFO_V1(dex_latency_histograms);

#define LATENCY_COLUMNS 8

static Datum
bounds_array(void)
{
	Datum		le[N_BOUNDS];

	for (int b = 0; b < (int) N_BOUNDS; b++)
		le[b] = Float8GetDatum((double) bucket_bounds[b] / 1e6);
	return PointerGetDatum(construct_array(le, N_BOUNDS, FLOAT8OID, sizeof(float8),
										   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

static void
put_entry(ReturnSetInfo *rsinfo, DexLatencyEntry *e, Datum le)
{
	Datum		values[LATENCY_COLUMNS];
	bool		nulls[LATENCY_COLUMNS];
	Datum		cumulative[N_BOUNDS];
	uint64		count = 0;

	memset(nulls, false, sizeof(nulls));
	for (int b = 0; b < DEX_LATENCY_BUCKETS; b++)
	{
		count += pg_atomic_read_u64(&e->buckets[b]);
		if (b < (int) N_BOUNDS)
			cumulative[b] = Int64GetDatum((int64) count);
	}
	values[0] = ObjectIdGetDatum(e->database);
	values[1] = CStringGetTextDatum(histogram_names[e->histogram]);
	values[2] = Int32GetDatum(e->queue_id);
	nulls[2] = e->histogram == DEX_LATENCY_RUN_DURATION;
	values[3] = CStringGetTextDatum(e->name);
	nulls[3] = e->histogram != DEX_LATENCY_RUN_DURATION;
	values[4] = le;
	values[5] = PointerGetDatum(construct_array(cumulative, N_BOUNDS, INT8OID, sizeof(int64),
												FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[6] = Float8GetDatum((double) pg_atomic_read_u64(&e->sum) / 1e6);
	values[7] = Int64GetDatum((int64) count);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * dex.latency_histograms() returns one row per histogram in use, of every
 * database: datid, histogram, queue_id (NULL for run_duration), workflow
 * (run_duration's), le (the finite upper bounds, in seconds), bucket (the
 * cumulative count of each; the +Inf bucket is count), sum (seconds) and
 * count.
 */
Datum
dex_latency_histograms(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		le;

	InitMaterializedSRF(fcinfo, 0);
	dex_check_result_columns(fcinfo, LATENCY_COLUMNS, "dex.latency_histograms()");
	if (dex_latency == NULL)
		return (Datum) 0;
	le = bounds_array();
	for (int i = 0; i < DEX_LATENCY_SLOTS; i++)
	{
		DexLatencyEntry *e = &dex_latency->entries[i];

		if (pg_atomic_read_u64(&e->key) == 0)
			continue;
		pg_read_barrier();
		put_entry(rsinfo, e, le);
	}
	return (Datum) 0;
}
