/*-------------------------------------------------------------------------
 *
 * queues.c
 *	  Queues as the engine sees them: looked up by name or id through a
 *	  per-transaction cache, with the roles they are granted to.
 *
 * Lookups only: whether the caller may use a queue is access.c's to say,
 * and creating or changing queues is the API's (api/api_queues.c), which
 * resets the cache.  Runs inside the caller's SPI connection.
 *
 * The cache outlives the transaction (1.7) when it can tell that nothing
 * changed: statement triggers on dex.queue and dex.queue_grant (queue_changed,
 * whatever writes them: the API, the maintenance worker, a restore, a
 * superuser's UPDATE) send a relcache invalidation of dex.queue at commit,
 * which every backend receives before its next transaction's first look
 * here, and which empties the cache (as does a DROP EXTENSION, through the
 * relation's own invalidations), and count the change in shared memory
 * (dex_queue_changes), which a look compares with the count it noted when it
 * filled the cache: a long poll that wakes from its sleep reads the queue
 * again only when some queue changed meanwhile, whether or not the change's
 * invalidations have arrived.  A transaction that aborts empties it too:
 * it may have cached its own uncommitted changes.  Without the triggers (a
 * schema before 1.7), or when filled under REPEATABLE READ or SERIALIZABLE
 * (whose snapshot may predate an invalidation already received), it lasts
 * one transaction, as before.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "engine/engine.h"

/*
 * Queues are looked up through a small cache: a batch names the same few
 * queues again and again, and so does every call of a worker.
 */
#define QUEUE_CACHE_SIZE 32

static DexQueue queue_cache[QUEUE_CACHE_SIZE];
static int	queue_cache_n = 0;
static LocalTransactionId queue_cache_lxid = InvalidLocalTransactionId;
/* whether the entries may serve later transactions (see the file's header) */
static bool queue_cache_kept = false;
/* dex.queue and dex.queue_grant, when the cache was filled: their invalidations empty it */
static Oid	queue_cache_relids[2] = {InvalidOid, InvalidOid};
/* whether the schema has the triggers: 1 yes, 0 no, -1 not known (until an invalidation) */
static int	queue_cache_triggers = -1;
/*
 * The entries' names and grantees.  An emptied cache's memory is kept until
 * the transaction that emptied it has ended: a caller's copy of an entry
 * points into it (an invalidation may arrive between two statements).
 */
/* the count of queue changes (dex_queue_changes) read before the first entry was looked up */
static uint64 queue_cache_changes = 0;
static MemoryContext queue_cache_cxt = NULL;
static MemoryContext queue_cache_retired = NULL;
static bool queue_cache_callbacks = false;

/* Empty the cache; its memory goes at the next transaction's first look */
static void
queue_cache_empty(void)
{
	queue_cache_n = 0;
	queue_cache_kept = false;
	if (queue_cache_cxt == NULL)
		return;
	if (queue_cache_retired == NULL)
		queue_cache_retired = queue_cache_cxt;
	else
		MemoryContextSetParent(queue_cache_cxt, queue_cache_retired);
	queue_cache_cxt = NULL;
}

static void
queue_cache_relcache_callback(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == queue_cache_relids[0] || relid == queue_cache_relids[1])
	{
		queue_cache_empty();
		queue_cache_triggers = -1;
	}
}

static void
queue_cache_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		queue_cache_empty();
}

static void
queue_cache_subxact_callback(SubXactEvent event, SubTransactionId sub, SubTransactionId parent, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		queue_cache_empty();
}

/*
 * Whether entries cached now may serve later transactions: the schema has
 * the triggers that announce changes, and this transaction's reads are as
 * fresh as the invalidations it has received.
 */
static bool
queue_cache_may_keep(void)
{
	if (IsolationUsesXactSnapshot())
		return false;
	if (queue_cache_triggers < 0)
	{
		Oid			schema = get_namespace_oid("dex", true);

		queue_cache_relids[0] = OidIsValid(schema) ? get_relname_relid("queue", schema) : InvalidOid;
		queue_cache_relids[1] = OidIsValid(schema) ? get_relname_relid("queue_grant", schema) : InvalidOid;
		queue_cache_triggers = OidIsValid(queue_cache_relids[0]) && OidIsValid(queue_cache_relids[1]) &&
			OidIsValid(get_trigger_oid(queue_cache_relids[0], "queue_changed", true)) &&
			OidIsValid(get_trigger_oid(queue_cache_relids[1], "queue_changed", true));
	}
	return queue_cache_triggers == 1;
}

/*
 * Before a look: a new transaction drops what its predecessor could not
 * keep; an empty cache learns whether what it gets may be kept.  That is
 * decided before the lookup statement runs, so that an invalidation that
 * arrives while it runs (while its locks are taken) empties the cache and
 * the entry it adds lasts this transaction only.
 */
static void
queue_cache_check(void)
{
	uint64		changes;

	if (!queue_cache_callbacks)
	{
		CacheRegisterRelcacheCallback(queue_cache_relcache_callback, (Datum) 0);
		RegisterXactCallback(queue_cache_xact_callback, NULL);
		RegisterSubXactCallback(queue_cache_subxact_callback, NULL);
		queue_cache_callbacks = true;
	}
	if (queue_cache_lxid != MyProc->lxid)
	{
		if (!queue_cache_kept)
			queue_cache_empty();
		if (queue_cache_retired != NULL)
		{
			MemoryContextDelete(queue_cache_retired);
			queue_cache_retired = NULL;
		}
		queue_cache_lxid = MyProc->lxid;
	}
	if (queue_cache_n == QUEUE_CACHE_SIZE)
		queue_cache_empty();	/* start over: it is only a cache */
	/*
	 * A change committed since the entries were read (the count moves before
	 * the commit's invalidations are sent, which a long poll waking from its
	 * sleep may not have received yet): read them again.
	 */
	changes = dex_queue_changes();
	if (queue_cache_n > 0 && changes != queue_cache_changes)
		queue_cache_empty();
	if (queue_cache_n == 0)
	{
		queue_cache_changes = changes;
		queue_cache_kept = queue_cache_may_keep();
	}
	else if (IsolationUsesXactSnapshot())
		queue_cache_kept = false;
}

/* Cache row "row" of the lookup statement just run (queue_cache_check came first) */
static void
queue_cache_add(int row, const char *name)
{
	DexQueue   *q;
	bool		isnull;
	Datum		d;

	if (queue_cache_cxt == NULL)
		queue_cache_cxt = AllocSetContextCreate(TopMemoryContext, "dex queue cache",
												ALLOCSET_SMALL_SIZES);
	q = &queue_cache[queue_cache_n++];
	q->id = (int32) dex_spi_getint64(row, 1);
	q->name = MemoryContextStrdup(queue_cache_cxt, name);
	q->is_workflow = dex_spi_getbool(row, 3);
	q->paused = dex_spi_getbool(row, 4);
	d = dex_spi_getdatum(row, 5, &isnull);
	q->capacity = isnull ? 0 : DatumGetInt32(d);
	d = dex_spi_getdatum(row, 6, &isnull);
	q->n_grantees = -1;
	q->grantees = NULL;
	if (!isnull)
	{
		ArrayType  *a = DatumGetArrayTypeP(d);
		int			n = ArrayGetNItems(ARR_NDIM(a), ARR_DIMS(a));

		q->n_grantees = n;
		q->grantees = MemoryContextAlloc(queue_cache_cxt, sizeof(Oid) * Max(n, 1));
		if (n > 0)
			memcpy(q->grantees, ARR_DATA_PTR(a), sizeof(Oid) * n);
	}
	/* the rate limit (1.7): limit, period in microseconds, and the row's updated_at */
	d = dex_spi_getdatum(row, 7, &isnull);
	q->rate_limit = isnull ? 0 : DatumGetInt32(d);
	d = dex_spi_getdatum(row, 8, &isnull);
	q->rate_period_us = isnull ? 0 : DatumGetInt64(d);
	d = dex_spi_getdatum(row, 9, &isnull);
	q->updated_at = isnull ? 0 : DatumGetTimestampTz(d);
	/* publishing (1.10): NULL, 'json' or 'protobuf' */
	d = dex_spi_getdatum(row, 10, &isnull);
	q->publish = isnull ? DEX_PUBLISH_OFF :
		strcmp(TextDatumGetCString(d), "protobuf") == 0 ? DEX_PUBLISH_PROTOBUF : DEX_PUBLISH_JSON;
}

/* dex.alter_queue changed a queue: forget what this backend cached */
void
dex_queue_cache_reset(void)
{
	queue_cache_empty();
}

/*
 * The trigger queue_changed saw a statement write dex.queue or
 * dex.queue_grant (of schema "schema"): every backend's cache is emptied
 * when this transaction commits (and this backend's at its next command).
 */
void
dex_queue_changed(Oid schema)
{
	Oid			queue_relid = get_relname_relid("queue", schema);

	if (OidIsValid(queue_relid))
		CacheInvalidateRelcacheByRelid(queue_relid);
	dex_queue_change_at_commit();
	queue_cache_empty();
}

/*
 * Whether the schema has queue grants: a database still on version 1.0 of
 * the extension (before ALTER EXTENSION dex UPDATE) has none, and there
 * every role of dex may use every queue, as 1.0 had it.
 */
bool
dex_queue_grants_exist(void)
{
	Oid			schema = get_namespace_oid("dex", true);

	return OidIsValid(schema) && OidIsValid(get_relname_relid("queue_grant", schema));
}

/*
 * Whether the schema has rate and concurrency limits (1.7): dex.queue's
 * rate_limit, rate_period and concurrency_limit.
 */
bool
dex_queue_limits_exist(void)
{
	return dex_column_exists("queue", "rate_limit");
}

/* Whether queues may publish their runs' events (1.10): dex.queue.publish */
bool
dex_queue_publish_exists(void)
{
	return dex_column_exists("queue", "publish");
}

/*
 * Which lookup statement the schema takes: [0] 1.0, [1] grants, [2] grants
 * and limits (1.7), [3] and publishing (1.10)
 */
static int
lookup_version(void)
{
	if (!dex_queue_grants_exist())
		return 0;
	if (!dex_queue_limits_exist())
		return 1;
	return dex_queue_publish_exists() ? 3 : 2;
}

/*
 * A queue's row with the roles it is granted to (access.c) and its rate
 * limit (the period in microseconds); a schema still on version 1.0 has no
 * grants, one before 1.7 no limits.  Qualified throughout:
 * dex.wait_for_tasks cannot pin its search_path.
 */
#define QUEUE_COLUMNS(grantees, limits, publish) \
	"SELECT q.id, q.name, q.kind OPERATOR(pg_catalog.=) 'workflow', " \
	"q.status OPERATOR(pg_catalog.=) 'PAUSED', q.capacity, " grantees ", " limits ", " publish " FROM dex.queue q "
#define QUEUE_GRANTEES \
	"ARRAY(SELECT g.grantee FROM dex.queue_grant g WHERE g.queue_id OPERATOR(pg_catalog.=) q.id)"
#define QUEUE_NO_GRANTEES "NULL::pg_catalog.oid[]"
#define QUEUE_LIMITS \
	"q.rate_limit, (pg_catalog.date_part('epoch', q.rate_period) OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8, " \
	"q.updated_at"
#define QUEUE_NO_LIMITS "NULL::pg_catalog.int4, NULL::pg_catalog.int8, q.updated_at"
#define QUEUE_PUBLISH "q.publish"
#define QUEUE_NO_PUBLISH "NULL::pg_catalog.text"

static DexPlan lookup_queue_plans[4] = {
	{QUEUE_COLUMNS(QUEUE_NO_GRANTEES, QUEUE_NO_LIMITS, QUEUE_NO_PUBLISH) "WHERE q.name OPERATOR(pg_catalog.=) $1", 1, {TEXTOID}},
	{QUEUE_COLUMNS(QUEUE_GRANTEES, QUEUE_NO_LIMITS, QUEUE_NO_PUBLISH) "WHERE q.name OPERATOR(pg_catalog.=) $1", 1, {TEXTOID}},
	{QUEUE_COLUMNS(QUEUE_GRANTEES, QUEUE_LIMITS, QUEUE_NO_PUBLISH) "WHERE q.name OPERATOR(pg_catalog.=) $1", 1, {TEXTOID}},
	{QUEUE_COLUMNS(QUEUE_GRANTEES, QUEUE_LIMITS, QUEUE_PUBLISH) "WHERE q.name OPERATOR(pg_catalog.=) $1", 1, {TEXTOID}}
};

bool
dex_lookup_queue(const char *name, DexQueue *queue)
{
	Datum		values[1];

	queue_cache_check();
	for (int i = 0; i < queue_cache_n; i++)
		if (strcmp(queue_cache[i].name, name) == 0)
		{
			*queue = queue_cache[i];
			return true;
		}

	values[0] = CStringGetTextDatum(name);
	dex_spi_exec(&lookup_queue_plans[lookup_version()], values, NULL, 1);
	if (SPI_processed == 0)
		return false;
	queue_cache_add(0, name);
	*queue = queue_cache[queue_cache_n - 1];
	return true;
}

/*
 * The one error of a queue that does not exist.  "kind" ("workflow",
 * "activity", or NULL if any would do) goes into the hint.
 */
void
dex_queue_does_not_exist(const char *name, const char *kind)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("queue \"%s\" does not exist", name),
			 kind ? errhint("Create it with dex.create_queue('%s', '%s').", name, kind) : 0));
}

/* The queue of that name, which must exist. */
DexQueue
dex_existing_queue(const char *name, const char *kind)
{
	DexQueue	queue;

	if (!dex_lookup_queue(name, &queue))
		dex_queue_does_not_exist(name, kind);
	return queue;
}

static DexPlan queue_by_id_plans[4] = {
	{QUEUE_COLUMNS(QUEUE_NO_GRANTEES, QUEUE_NO_LIMITS, QUEUE_NO_PUBLISH) "WHERE q.id OPERATOR(pg_catalog.=) $1", 1, {INT4OID}},
	{QUEUE_COLUMNS(QUEUE_GRANTEES, QUEUE_NO_LIMITS, QUEUE_NO_PUBLISH) "WHERE q.id OPERATOR(pg_catalog.=) $1", 1, {INT4OID}},
	{QUEUE_COLUMNS(QUEUE_GRANTEES, QUEUE_LIMITS, QUEUE_NO_PUBLISH) "WHERE q.id OPERATOR(pg_catalog.=) $1", 1, {INT4OID}},
	{QUEUE_COLUMNS(QUEUE_GRANTEES, QUEUE_LIMITS, QUEUE_PUBLISH) "WHERE q.id OPERATOR(pg_catalog.=) $1", 1, {INT4OID}}
};

/* The queue with that id; false if there is none. */
bool
dex_queue_by_id(int32 queue_id, DexQueue *queue)
{
	Datum		values[1] = {Int32GetDatum(queue_id)};

	queue_cache_check();
	for (int i = 0; i < queue_cache_n; i++)
		if (queue_cache[i].id == queue_id)
		{
			*queue = queue_cache[i];
			return true;
		}

	dex_spi_exec(&queue_by_id_plans[lookup_version()], values, NULL, 1);
	if (SPI_processed == 0)
		return false;
	queue_cache_add(0, dex_spi_gettext_copy(0, 2));
	*queue = queue_cache[queue_cache_n - 1];
	return true;
}

const char *
dex_queue_name(int32 queue_id)
{
	DexQueue	queue;

	return dex_queue_by_id(queue_id, &queue) ? queue.name : "";
}

/*
 * Tasks ended or left their leases: the rows of the current SPI result whose
 * queue has a capacity (column "limited_col", read by the statement itself
 * with DEX_QUEUE_LIMITED_SQL, so no lookup is added) may have room again, and
 * their waiting workers are told at commit.
 */
void
dex_queue_room_freed_spi(int queue_col, int limited_col)
{
	for (uint64 i = 0; i < SPI_processed; i++)
		if (dex_spi_getbool((int) i, limited_col))
			dex_queue_work_added((int32) dex_spi_getint64((int) i, queue_col));
}
