/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  Activity counters of dex in shared memory: dex.stat_counters(),
 *	  dex.reset_stats(), and what a worker waiting in dex.wait_for_tasks
 *	  shows in pg_stat_activity.
 *
 * The counters live in a fixed table of DEX_STAT_SLOTS entries, one per
 * (database, queue): the task-flow counters of a queue (created, polled,
 * leased, completed, failed, ...), plus one entry per database under queue
 * id 0 for what belongs to no queue (lost leases, whose task is often gone
 * with its queue id; the scheduler's passes).  When the table is full,
 * counts of a pair that has no entry go to one overflow entry for the whole
 * cluster.  Entries are never freed (until the server restarts): a dropped
 * queue or database keeps its entry, and dex.reset_stats() only zeroes
 * counters, so that an entry, once found, stays where it is.
 *
 * Counting is lock-free.  An entry is found by open addressing on its key
 * ((database oid << 32) | queue id; 0 marks a free entry), claimed with a
 * compare-and-swap of the key, and its counters are 64-bit atomics bumped
 * with pg_atomic_fetch_add_u64.  Since entries never move, each backend
 * remembers where its queues' entries are (a small direct-mapped cache), so
 * a count costs one atomic add.  A reset racing with a count may lose that
 * count; nothing else is approximate.
 *
 * A count is taken when the SQL call does the counted thing, not when its
 * transaction commits: a rolled-back call still counts (like the "calls" of
 * pg_stat_statements).  Without shared_preload_libraries there is no table:
 * nothing is counted, dex.stat_counters() returns no rows and
 * dex.reset_stats() does nothing.
 *
 * Memory: the table is allocated once at server start; everything else
 * allocates only in the caller's memory context.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/timestamp.h"

#include "shmem/shmem.h"

#define DEX_STAT_SLOTS 1024

/* The counters of one (database, queue) entry, one atomic each */
typedef struct DexStatEntry
{
	pg_atomic_uint64 key;		/* (database oid << 32) | queue id; 0: free */
	pg_atomic_uint64 stats_reset;	/* TimestampTz of the last reset; 0: never */
	pg_atomic_uint64 counters[DEX_STAT_N];
} DexStatEntry;

typedef struct DexStatShared
{
	DexStatEntry overflow;		/* the pairs that found no free entry */
	DexStatEntry entries[DEX_STAT_SLOTS];
} DexStatShared;

static DexStatShared *dex_stats = NULL;

/* where this backend's queues' entries are: by queue id, direct-mapped */
#define CACHE_SIZE 64
typedef struct CachedEntry
{
	int32		queue_id;
	DexStatEntry *entry;		/* NULL: not cached */
} CachedEntry;

static CachedEntry entry_cache[CACHE_SIZE];

void
dex_stats_shmem_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(DexStatShared)));
}

static void
init_entry(DexStatEntry *e)
{
	pg_atomic_init_u64(&e->key, 0);
	pg_atomic_init_u64(&e->stats_reset, 0);
	for (int c = 0; c < DEX_STAT_N; c++)
		pg_atomic_init_u64(&e->counters[c], 0);
}

/* Called with AddinShmemInitLock held (see wakeup.c) */
void
dex_stats_shmem_startup(void)
{
	bool		found;

	dex_stats = ShmemInitStruct("dex stats", sizeof(DexStatShared), &found);
	if (!found)
	{
		init_entry(&dex_stats->overflow);
		for (int i = 0; i < DEX_STAT_SLOTS; i++)
			init_entry(&dex_stats->entries[i]);
	}
}

static inline uint64
entry_key(Oid database, int32 queue_id)
{
	return ((uint64) database << 32) | (uint32) queue_id;
}

/*
 * The entry of (this database, queue): found, or claimed if it has none
 * yet.  A claimed entry's counters are zero: entries are never freed.
 */
static DexStatEntry *
find_entry(int32 queue_id)
{
	CachedEntry *cached = &entry_cache[(uint32) queue_id % CACHE_SIZE];
	uint64		key;
	uint32		start;

	if (cached->entry != NULL && cached->queue_id == queue_id)
		return cached->entry;

	key = entry_key(MyDatabaseId, queue_id);
	start = hash_combine(murmurhash32((uint32) MyDatabaseId),
						 murmurhash32((uint32) queue_id)) % DEX_STAT_SLOTS;
	for (int i = 0; i < DEX_STAT_SLOTS; i++)
	{
		DexStatEntry *e = &dex_stats->entries[(start + i) % DEX_STAT_SLOTS];
		uint64		found = pg_atomic_read_u64(&e->key);

		if (found == 0)
		{
			/* free: claim it, unless someone else just did */
			if (pg_atomic_compare_exchange_u64(&e->key, &found, key))
				found = key;
		}
		if (found == key)
		{
			cached->queue_id = queue_id;
			cached->entry = e;
			return e;
		}
	}
	/* full: this pair's counts go to the overflow entry from now on */
	cached->queue_id = queue_id;
	cached->entry = &dex_stats->overflow;
	return cached->entry;
}

/* Add n to a counter of the queue's entry (queue 0: the database's own). */
void
dex_stat_add(int32 queue_id, DexStatCounter counter, int64 n)
{
	if (dex_stats == NULL || n == 0 || !OidIsValid(MyDatabaseId))
		return;
	pg_atomic_fetch_add_u64(&find_entry(queue_id)->counters[counter], n);
}

/* A poll of the queue leased n tasks (none: an empty poll) */
void
dex_stat_poll(int32 queue_id, int64 n)
{
	DexStatEntry *e;

	if (dex_stats == NULL || !OidIsValid(MyDatabaseId))
		return;
	e = find_entry(queue_id);
	pg_atomic_fetch_add_u64(&e->counters[DEX_STAT_POLLS], 1);
	if (n == 0)
		pg_atomic_fetch_add_u64(&e->counters[DEX_STAT_POLLS_EMPTY], 1);
	else
		pg_atomic_fetch_add_u64(&e->counters[DEX_STAT_TASKS_LEASED], n);
}

/*
 * Count one for each row of the current SPI result, for the queue whose id
 * is in column "col" of the row.  Consecutive rows of a queue take one add.
 */
void
dex_stat_count_spi(DexStatCounter counter, int col)
{
	int32		queue_id = 0;
	int64		n = 0;

	if (dex_stats == NULL)
		return;
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		int32		q = (int32) dex_spi_getint64(i, col);

		if (n > 0 && q != queue_id)
		{
			dex_stat_add(queue_id, counter, n);
			n = 0;
		}
		queue_id = q;
		n++;
	}
	dex_stat_add(queue_id, counter, n);
}

/* A scheduler pass that started at "start" ended (failed: with an error) */
void
dex_stat_scheduler_pass(TimestampTz start, bool failed)
{
	DexStatEntry *e;
	TimestampTz now;
	uint64		usecs;
	uint64		max;

	if (dex_stats == NULL || !OidIsValid(MyDatabaseId))
		return;
	now = GetCurrentTimestamp();
	usecs = now > start ? (uint64) (now - start) : 0;
	e = find_entry(0);
	pg_atomic_fetch_add_u64(&e->counters[DEX_STAT_SCHEDULER_PASSES], 1);
	if (failed)
		pg_atomic_fetch_add_u64(&e->counters[DEX_STAT_SCHEDULER_ERRORS], 1);
	pg_atomic_fetch_add_u64(&e->counters[DEX_STAT_SCHEDULER_TIME], usecs);
	max = pg_atomic_read_u64(&e->counters[DEX_STAT_SCHEDULER_MAX_TIME]);
	while (usecs > max &&
		   !pg_atomic_compare_exchange_u64(&e->counters[DEX_STAT_SCHEDULER_MAX_TIME], &max, usecs))
		;
}

/*
 * pg_stat_activity of a backend that sleeps in dex.wait_for_tasks.
 * PostgreSQL 15 has no custom wait events (its wait event is "Extension"),
 * so while it sleeps the query text gets what it waits for appended, e.g.
 * "CALL dex.wait_for_tasks($1, $2) -- dex: waiting for tasks on queue
 * "orders"" (a worker's call often names its queue only as a parameter).
 * what == NULL puts the statement's own text back.
 */
void
dex_report_wait(const char *what)
{
	const char *query = debug_query_string != NULL ? debug_query_string : "";

	if (what == NULL)
		pgstat_report_activity(STATE_RUNNING, query);
	else
	{
		char	   *text = psprintf("%s -- dex: %s", query, what);

		pgstat_report_activity(STATE_RUNNING, text);
		pfree(text);
	}
}

/* ----------------------------------------------------------------
 * SQL functions
 * ----------------------------------------------------------------
 */

PG_FUNCTION_INFO_V1(dex_stat_counters);
PG_FUNCTION_INFO_V1(dex_reset_stats);

#define STAT_COLUMNS (2 + DEX_STAT_N + 1)

static void
put_entry(ReturnSetInfo *rsinfo, DexStatEntry *e, bool is_overflow)
{
	Datum		values[STAT_COLUMNS];
	bool		nulls[STAT_COLUMNS];
	uint64		key = pg_atomic_read_u64(&e->key);
	TimestampTz reset = (TimestampTz) pg_atomic_read_u64(&e->stats_reset);
	int			col = 0;

	memset(nulls, false, sizeof(nulls));
	values[col] = ObjectIdGetDatum((Oid) (key >> 32));
	nulls[col++] = is_overflow;
	values[col] = Int32GetDatum((int32) (uint32) key);
	nulls[col++] = is_overflow;
	for (int c = 0; c < DEX_STAT_N; c++)
	{
		uint64		v = pg_atomic_read_u64(&e->counters[c]);

		/* times are kept in microseconds and shown in milliseconds */
		if (c == DEX_STAT_SCHEDULER_TIME || c == DEX_STAT_SCHEDULER_MAX_TIME)
			values[col++] = Float8GetDatum((double) v / 1000.0);
		else
			values[col++] = Int64GetDatum((int64) v);
	}
	values[col] = TimestampTzGetDatum(reset);
	nulls[col++] = (reset == 0);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * dex.stat_counters() returns one row per (database, queue) entry in use:
 * datid, queue_id (0: the database's own counters), every counter, and
 * stats_reset; the overflow entry, if used, has null datid and queue_id.
 */
Datum
dex_stat_counters(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	dex_check_result_columns(fcinfo, STAT_COLUMNS, "dex.stat_counters()");
	if (dex_stats == NULL)
		return (Datum) 0;

	for (int i = 0; i < DEX_STAT_SLOTS; i++)
		if (pg_atomic_read_u64(&dex_stats->entries[i].key) != 0)
			put_entry(rsinfo, &dex_stats->entries[i], false);
	for (int c = 0; c < DEX_STAT_N; c++)
		if (pg_atomic_read_u64(&dex_stats->overflow.counters[c]) != 0)
		{
			put_entry(rsinfo, &dex_stats->overflow, true);
			break;
		}
	return (Datum) 0;
}

static void
reset_entry(DexStatEntry *e, TimestampTz now)
{
	for (int c = 0; c < DEX_STAT_N; c++)
		pg_atomic_write_u64(&e->counters[c], 0);
	pg_atomic_write_u64(&e->stats_reset, (uint64) now);
}

/*
 * dex.reset_stats(): zero the counters of the current database (its queues
 * and its own), and the overflow entry's, and its latency histograms
 * (latency.c).  Other databases keep theirs.
 */
Datum
dex_reset_stats(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();

	if (dex_stats == NULL)
		PG_RETURN_VOID();
	for (int i = 0; i < DEX_STAT_SLOTS; i++)
	{
		DexStatEntry *e = &dex_stats->entries[i];
		uint64		key = pg_atomic_read_u64(&e->key);

		if (key != 0 && (Oid) (key >> 32) == MyDatabaseId)
			reset_entry(e, now);
	}
	reset_entry(&dex_stats->overflow, now);
	dex_latency_reset();
	PG_RETURN_VOID();
}
