/*-------------------------------------------------------------------------
 *
 * api_queues.c
 *	  dex.create_queue and dex.alter_queue: task queues, their capacity and
 *	  pause, rate and concurrency limits (1.7); dex.set_concurrency_limit
 *	  (1.7); the trigger that sees restored queues.
 *
 * A queue is a row of dex.queue.  Its tasks are rows of the task table of
 * its kind (dex.workflow_task, dex.activity_task: one table each, whatever
 * the number of queues, from 1.8), UNLOGGED: tasks are derived data, rebuilt
 * after a crash from runs, history, inbox and dex.activity_retry (rebuild.c).
 * Creation takes a lock on dex.queue that serializes concurrent creators but
 * not readers.
 *
 * Up to 1.7 each queue had a LIST partition of its task table, so that a
 * statement planned for all queues locked every partition each time it ran
 * (src/README.md, "Task tables"); this library still makes the partition of
 * a queue created on such a schema, named after the queue, so names that
 * normalize to the same partition are refused there.
 *
 * Backups.  pg_dump dumps the rows of dex's logged tables (they are
 * registered with pg_extension_config_dump) but no member object of the
 * extension, and CREATE EXTENSION makes those again on restore.  The task
 * tables are members (and the partitions of a 1.7 schema are made members
 * when they are created), so a dump holds no task, and a restore cannot
 * collide with them.  An AFTER INSERT trigger on dex.queue (a member of the
 * extension too, so it exists before the restored rows arrive; COPY fires
 * triggers) sees every queue row that arrives: dex.queue_restored() (1.8),
 * or dex.queue_partition(), which also made the partition, up to 1.7.  A
 * row that dex.create_queue did not insert can only be a restore (nobody
 * else may write dex.queue): the trigger then notes the restoring session
 * in dex.lease ('restore'), and the scheduler rebuilds the task tables from
 * the restored rows once that session has ended, that is once every table
 * is restored (scheduler.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "api/api.h"
#include "api/api_tasks.h"

PG_FUNCTION_INFO_V1(dex_create_queue);
PG_FUNCTION_INFO_V1(dex_queue_partition_trigger);
PG_FUNCTION_INFO_V1(dex_queue_restored_trigger);
PG_FUNCTION_INFO_V1(dex_queue_changed_trigger);

#define QUEUE_NAME_MAX 128
#define PARTITION_PREFIX_LEN 16	/* strlen("workflow_task_q_") */

/*
 * Queue names: a letter or digit, then letters, digits, '_', '-' or '.'.
 */
static void
validate_queue_name(const char *name)
{
	size_t		len = strlen(name);

	if (len == 0 || len > QUEUE_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid queue name \"%s\"", name),
				 errdetail("Queue names have 1 to %d characters.", QUEUE_NAME_MAX)));
	for (size_t i = 0; i < len; i++)
	{
		char		c = name[i];
		bool		alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			(c >= '0' && c <= '9');

		if (!alnum && (i == 0 || (c != '_' && c != '-' && c != '.')))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid queue name \"%s\"", name),
					 errdetail("Queue names start with a letter or digit and contain only letters, digits, \"_\", \"-\" and \".\".")));
	}
}

/* "workflow_task_q_<lower-cased name, punctuation as _>", at most 63 bytes */
static char *
partition_name(const char *name, bool workflow)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, workflow ? "workflow_task_q_" : "activity_task_q_");
	for (const char *p = name; *p && buf.len < NAMEDATALEN - 1; p++)
	{
		char		c = *p;

		if (c >= 'A' && c <= 'Z')
			c += 'a' - 'A';
		else if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
			c = '_';
		appendStringInfoChar(&buf, c);
	}
	return buf.data;
}

static void
check_capacity(int32 capacity)
{
	if (capacity <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("queue capacity must be positive"),
				 errdetail("The capacity was %d.", capacity),
				 errhint("Leave it out (create_queue) or give 0 (alter_queue) for no limit.")));
}

static DexPlan lock_queues_plan = {
	"LOCK TABLE dex.queue IN SHARE ROW EXCLUSIVE MODE", 0, {0}
};

static DexPlan find_queue_plan = {
	"SELECT name FROM dex.queue WHERE name OPERATOR(pg_catalog.=) $1", 1, {TEXTOID}
};

static DexPlan insert_queue_plan = {
	"INSERT INTO dex.queue (name, kind, capacity) VALUES ($1, $2, $3) RETURNING id",
	3, {TEXTOID, TEXTOID, INT4OID}
};

/* Up to 1.7: a queue's partition, named after it, in dex.queue.partition */
static DexPlan find_conflict_plan = {
	"SELECT name FROM dex.queue WHERE name OPERATOR(pg_catalog.=) $1 OR partition OPERATOR(pg_catalog.=) $2::name",
	2, {TEXTOID, TEXTOID}
};

static DexPlan insert_partitioned_queue_plan = {
	"INSERT INTO dex.queue (name, kind, capacity, partition) VALUES ($1, $2, $3, $4::name) RETURNING id",
	4, {TEXTOID, TEXTOID, INT4OID, TEXTOID}
};

/*
 * Whether the task tables are partitioned by queue: a schema up to 1.7, which
 * this library still serves until ALTER EXTENSION dex UPDATE.
 */
static bool
task_tables_partitioned(void)
{
	Oid			relid = get_relname_relid("workflow_task", get_namespace_oid("dex", false));

	return OidIsValid(relid) && get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE;
}

/* dex.create_queue is inserting its row: the trigger sees no restore */
static bool inserting_queue = false;

/*
 * Make the task partition of a queue unless it exists, and make it a member
 * of the extension unless it is one (see the header).  The dependency is
 * what ALTER EXTENSION dex ADD TABLE records; it is recorded here because
 * neither the caller of dex.create_queue nor a restoring role need own the
 * extension.  A partition made inside an extension script is a member
 * already.  Runs inside the caller's SPI connection.
 */
static void
ensure_partition(int32 queue_id, bool workflow, const char *partition)
{
	Oid			schema = get_namespace_oid("dex", false);
	Oid			relid = get_relname_relid(partition, schema);
	ObjectAddress rel;
	ObjectAddress extension;

	if (!OidIsValid(relid))
	{
		StringInfoData ddl;

		initStringInfo(&ddl);
		if (workflow)
			appendStringInfo(&ddl,
							 "CREATE UNLOGGED TABLE dex.%s PARTITION OF dex.workflow_task "
							 "FOR VALUES IN (%d) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.02)",
							 quote_identifier(partition), queue_id);
		else
			appendStringInfo(&ddl,
							 "CREATE UNLOGGED TABLE dex.%s PARTITION OF dex.activity_task "
							 "FOR VALUES IN (%d) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.02)",
							 quote_identifier(partition), queue_id);
		if (SPI_execute(ddl.data, false, 0) != SPI_OK_UTILITY)
			elog(ERROR, "could not create partition \"%s\"", partition);
		relid = get_relname_relid(partition, schema);
		if (!OidIsValid(relid))
			elog(ERROR, "partition \"%s\" was not created", partition);
	}
	if (OidIsValid(getExtensionOfObject(RelationRelationId, relid)))
		return;
	ObjectAddressSet(rel, RelationRelationId, relid);
	ObjectAddressSet(extension, ExtensionRelationId, get_extension_oid("dex", false));
	recordDependencyOn(&rel, &extension, DEPENDENCY_EXTENSION);
}

Datum
dex_create_queue(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *kind;
	int32		capacity;
	bool		workflow;
	bool		partitioned;
	char	   *partition;
	Datum		values[4];
	int32		queue_id;

	dex_args_not_null(fcinfo, 2, "queue name and kind");
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	kind = text_to_cstring(PG_GETARG_TEXT_PP(1));
	capacity = PG_ARGISNULL(2) ? 0 : PG_GETARG_INT32(2);

	validate_queue_name(name);
	if (strcmp(kind, "workflow") == 0)
		workflow = true;
	else if (strcmp(kind, "activity") == 0)
		workflow = false;
	else
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid queue kind \"%s\"", kind),
				 errhint("The kind is \"workflow\" or \"activity\".")));
	if (!PG_ARGISNULL(2))
		check_capacity(capacity);

	SPI_connect();
	dex_spi_exec(&lock_queues_plan, NULL, NULL, 0);
	partitioned = task_tables_partitioned();
	partition = partitioned ? partition_name(name, workflow) : NULL;

	values[0] = CStringGetTextDatum(name);
	if (partitioned)
	{
		values[1] = CStringGetTextDatum(partition);
		dex_spi_exec(&find_conflict_plan, values, NULL, 1);
	}
	else
		dex_spi_exec(&find_queue_plan, values, NULL, 1);
	if (SPI_processed > 0)
	{
		char	   *other = dex_spi_gettext_copy(0, 1);

		if (strcmp(other, name) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_OBJECT),
					 errmsg("queue \"%s\" already exists", name)));
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("queue name \"%s\" conflicts with queue \"%s\"", name, other),
				 errdetail("Both names map to the task partition \"%s\".", partition),
				 errhint("Queue names that differ only in case, punctuation or after their first %d characters share a partition; choose another name, or ALTER EXTENSION dex UPDATE (queues have no partitions from 1.8).",
						 NAMEDATALEN - 1 - PARTITION_PREFIX_LEN)));
	}

	values[0] = CStringGetTextDatum(name);
	values[1] = CStringGetTextDatum(kind);
	values[2] = Int32GetDatum(capacity);
	if (partitioned)
		values[3] = CStringGetTextDatum(partition);
	inserting_queue = true;
	PG_TRY();
	{
		dex_spi_exec(partitioned ? &insert_partitioned_queue_plan : &insert_queue_plan, values,
					 capacity > 0 ? NULL : "  n ", 1);
	}
	PG_FINALLY();
	{
		inserting_queue = false;
	}
	PG_END_TRY();
	queue_id = (int32) dex_spi_getint64(0, 1);
	dex_grant_queue_defaults(queue_id);

	/*
	 * From 1.2 to 1.7 the trigger has made the partition by now; before 1.2
	 * (the library updated before ALTER EXTENSION dex UPDATE) this does.
	 */
	if (partitioned)
		ensure_partition(queue_id, workflow, partition);

	SPI_finish();
	PG_RETURN_VOID();
}

/* ----------------------------------------------------------------
 * dex.queue_restored() (1.8) and dex.queue_partition() (1.2 to 1.7):
 * AFTER INSERT FOR EACH ROW on dex.queue
 * ----------------------------------------------------------------
 */

/*
 * The restoring session's process id, noted for the scheduler: it rebuilds
 * the task tables once that session has ended (scheduler.c).  One row
 * whatever the number of queues; a later restore takes it over.
 */
static DexPlan note_restore_plan = {
	"INSERT INTO dex.lease (name, holder, acquired_at, expires_at) "
	"VALUES ('restore', pg_catalog.pg_backend_pid()::text, pg_catalog.now(), 'infinity') "
	"ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, acquired_at = EXCLUDED.acquired_at",
	0, {0}
};

static void
check_queue_trigger(FunctionCallInfo fcinfo, const char *function)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("%s must be fired AFTER INSERT FOR EACH ROW", function)));
}

/*
 * Rows that dex.create_queue did not insert are a restore (COPY fires row
 * triggers): the task tables must be rebuilt once the restored runs,
 * history and inbox are all in.  Runs inside the trigger's SPI connection.
 */
static void
note_restore(void)
{
	if (inserting_queue)
		return;
	dex_spi_exec(&note_restore_plan, NULL, NULL, 0);
	dex_wake_scheduler_at_commit(DT_NOBEGIN);
}

Datum
dex_queue_restored_trigger(PG_FUNCTION_ARGS)
{
	check_queue_trigger(fcinfo, "dex.queue_restored()");
	SPI_connect();
	note_restore();
	SPI_finish();
	return PointerGetDatum(NULL);
}

/* Up to 1.7: every queue row that arrives gets its partition too */
Datum
dex_queue_partition_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	HeapTuple	row;
	bool		isnull;
	int32		queue_id;
	char	   *kind;
	char	   *partition;

	check_queue_trigger(fcinfo, "dex.queue_partition()");
	desc = RelationGetDescr(trigdata->tg_relation);
	row = trigdata->tg_trigtuple;
	queue_id = DatumGetInt32(SPI_getbinval(row, desc, SPI_fnumber(desc, "id"), &isnull));
	kind = TextDatumGetCString(SPI_getbinval(row, desc, SPI_fnumber(desc, "kind"), &isnull));
	partition = pstrdup(NameStr(*DatumGetName(SPI_getbinval(row, desc, SPI_fnumber(desc, "partition"),
														   &isnull))));

	SPI_connect();
	ensure_partition(queue_id, strcmp(kind, "workflow") == 0, partition);
	note_restore();
	SPI_finish();
	return PointerGetDatum(NULL);
}

/* ----------------------------------------------------------------
 * dex.alter_queue(name, capacity, paused, rate_limit, rate_period,
 *                 concurrency_limit, publish, publish_format)
 * ----------------------------------------------------------------
 */

PG_FUNCTION_INFO_V1(dex_alter_queue);

/* capacity: NULL leaves it, 0 removes the limit; paused: NULL leaves it */
static DexPlan alter_queue_plan = {
	"UPDATE dex.queue SET "
	"capacity = CASE WHEN $2 IS NULL THEN capacity WHEN $2 OPERATOR(pg_catalog.=) 0 THEN NULL ELSE $2 END, "
	"status = CASE WHEN $3 IS NULL THEN status WHEN $3 THEN 'PAUSED' ELSE 'ACTIVE' END, "
	"updated_at = pg_catalog.now() "
	"WHERE name OPERATOR(pg_catalog.=) $1 RETURNING id",
	3, {TEXTOID, INT4OID, BOOLOID}
};

/*
 * 1.7: the same, and the limits of flow control: $4 rate_limit (NULL leaves
 * it, 0 removes it with its period), $5 rate_period (NULL leaves it; a new
 * limit without one takes 1 second), $6 concurrency_limit (NULL leaves
 * it).  Returns the queue, whether it is a workflow queue, whether it has a
 * rate limit now, and its concurrency limit before and after.
 */
static DexPlan alter_queue_limits_plan = {
	"WITH old AS (SELECT id, concurrency_limit FROM dex.queue WHERE name = $1 FOR NO KEY UPDATE) "
	"UPDATE dex.queue q SET "
	"capacity = CASE WHEN $2 IS NULL THEN q.capacity WHEN $2 = 0 THEN NULL ELSE $2 END, "
	"status = CASE WHEN $3 IS NULL THEN q.status WHEN $3 THEN 'PAUSED' ELSE 'ACTIVE' END, "
	"rate_limit = CASE WHEN $4 IS NULL THEN q.rate_limit WHEN $4 = 0 THEN NULL ELSE $4 END, "
	"rate_period = CASE WHEN $4 = 0 OR coalesce($4, q.rate_limit) IS NULL THEN NULL WHEN $5 IS NOT NULL THEN $5 "
	"                   WHEN $4 IS NOT NULL THEN coalesce(q.rate_period, interval '1 second') "
	"                   ELSE q.rate_period END, "
	"concurrency_limit = coalesce($6, q.concurrency_limit), "
	"updated_at = now() "
	"FROM old WHERE q.id = old.id "
	"RETURNING q.id, q.kind = 'workflow', q.rate_limit IS NOT NULL, old.concurrency_limit, q.concurrency_limit",
	6, {TEXTOID, INT4OID, BOOLOID, INT4OID, INTERVALOID, INT4OID}
};

#define MAX_RATE_LIMIT 1000000
#define MAX_CONCURRENCY_LIMIT 1000

/* A rate period: 1 ms to 1 day */
static void
check_rate_period(Interval *period)
{
	int64		usecs;

	if (!dex_interval_usecs(period, &usecs) || usecs < 1000 || usecs > USECS_PER_DAY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("rate period must be between 1 millisecond and 1 day")));
}

static void
check_concurrency_limit(int32 n, const char *what)
{
	if (n < 1 || n > MAX_CONCURRENCY_LIMIT)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be between 1 and %d", what, MAX_CONCURRENCY_LIMIT),
				 errdetail("It was %d.", n)));
}

/* The arguments of flow control (1.7), checked before anything is written */
static void
check_limit_args(FunctionCallInfo fcinfo)
{
	if (!PG_ARGISNULL(3))
	{
		int32		n = PG_GETARG_INT32(3);

		if (n < 0 || n > MAX_RATE_LIMIT)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("rate limit must be between 1 and %d tasks per period", MAX_RATE_LIMIT),
					 errdetail("It was %d.", n),
					 errhint("Give 0 to remove the limit.")));
		if (n == 0 && !PG_ARGISNULL(4))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("a rate period is given with rate limit 0, which removes the limit")));
	}
	if (!PG_ARGISNULL(4))
		check_rate_period(PG_GETARG_INTERVAL_P(4));
	if (!PG_ARGISNULL(5))
		check_concurrency_limit(PG_GETARG_INT32(5), "concurrency limit");
}

/*
 * 1.10: publishing.  $2 publish (true: on, in the form $3 or the one it had,
 * else JSON; false: off), $3 publish_format alone changes the form of a
 * queue that publishes.  Returns whether it publishes now.
 */
static DexPlan alter_queue_publish_plan = {
	"UPDATE dex.queue SET publish = CASE WHEN $2 THEN coalesce($3, publish, 'json') "
	"                                    WHEN NOT $2 THEN NULL "
	"                                    WHEN publish IS NOT NULL THEN coalesce($3, publish) END "
	"WHERE id = $1 RETURNING publish IS NOT NULL",
	3, {INT4OID, BOOLOID, TEXTOID}
};

/* The arguments of publishing (1.10), checked before anything is written */
static void
check_publish_args(FunctionCallInfo fcinfo)
{
	if (!PG_ARGISNULL(7))
	{
		char	   *format = text_to_cstring(PG_GETARG_TEXT_PP(7));

		if (strcmp(format, "json") != 0 && strcmp(format, "protobuf") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("publish format must be \"json\" or \"protobuf\""),
					 errdetail("It was \"%s\".", format)));
		if (!PG_ARGISNULL(6) && !PG_GETARG_BOOL(6))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("a publish format is given with publish => false, which stops publishing")));
	}
}

/* Turn publishing on or off, or change its form; the queue's row was updated already */
static void
alter_publishing(FunctionCallInfo fcinfo, int32 queue_id, const char *name)
{
	Datum		values[3];
	char		nulls[3] = {' ', PG_ARGISNULL(6) ? 'n' : ' ', PG_ARGISNULL(7) ? 'n' : ' '};

	values[0] = Int32GetDatum(queue_id);
	values[1] = PG_ARGISNULL(6) ? (Datum) 0 : PG_GETARG_DATUM(6);
	values[2] = PG_ARGISNULL(7) ? (Datum) 0 : PG_GETARG_DATUM(7);
	dex_spi_exec(&alter_queue_publish_plan, values, nulls, 0);
	if (!dex_spi_getbool(0, 1))
	{
		if (PG_ARGISNULL(6))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("queue \"%s\" does not publish its events: it has no publish format to change", name),
					 errhint("Give publish => true with publish_format.")));
		return;
	}
	if (wal_level < WAL_LEVEL_LOGICAL)
		ereport(WARNING,
				(errmsg("queue \"%s\" publishes its events, but wal_level is not logical: nothing is published", name),
				 errhint("Set wal_level = logical and restart the server: events recorded before then are not published.")));
}

/*
 * dex.alter_queue: a paused queue hands out no task (its tasks wait, and
 * new ones are added as usual); a capacity caps the tasks leased at once;
 * (1.7) a rate limit the tasks handed out per period (shmem/rate.c), a
 * concurrency limit the runs of a concurrency key at once (engine/keys.c;
 * raised, it admits waiting runs now).  Workers waiting on the queue are
 * woken at commit, to look again.
 */
Datum
dex_alter_queue(PG_FUNCTION_ARGS)
{
	Datum		values[6];
	char		nulls[7] = "      ";
	char	   *name;
	bool		limits = PG_NARGS() > 3;
	int32		queue_id;

	dex_arg_not_null(fcinfo, 0, "queue name");
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	if (!PG_ARGISNULL(1) && PG_GETARG_INT32(1) != 0)
		check_capacity(PG_GETARG_INT32(1));
	if (limits)
		check_limit_args(fcinfo);
	if (PG_NARGS() > 6)
		check_publish_args(fcinfo);
	values[0] = CStringGetTextDatum(name);
	for (int i = 1; i < (limits ? 6 : 3); i++)
	{
		values[i] = PG_ARGISNULL(i) ? (Datum) 0 : PG_GETARG_DATUM(i);
		nulls[i] = PG_ARGISNULL(i) ? 'n' : ' ';
	}

	SPI_connect();
	dex_spi_exec(limits ? &alter_queue_limits_plan : &alter_queue_plan, values, nulls, 0);
	if (SPI_processed == 0)
		dex_queue_does_not_exist(name, NULL);
	queue_id = (int32) dex_spi_getint64(0, 1);
	if (limits)
	{
		bool		workflow = dex_spi_getbool(0, 2);
		bool		rate_limited = dex_spi_getbool(0, 3);
		int32		old_limit = (int32) dex_spi_getint64(0, 4);
		int32		new_limit = (int32) dex_spi_getint64(0, 5);

		if (!rate_limited && !PG_ARGISNULL(4))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("queue \"%s\" has no rate limit to give a period to", name),
					 errhint("Give rate_limit with rate_period.")));
		if (!workflow && !PG_ARGISNULL(5))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("queue \"%s\" is an activity queue: it has no concurrency keys", name),
					 errhint("Concurrency keys are given to runs, on workflow queues.")));
		if (!rate_limited)
			dex_rate_forget(queue_id);
		if (new_limit > old_limit)
			dex_admit_waiting_runs(queue_id, NULL);
	}
	if (PG_NARGS() > 6 && !(PG_ARGISNULL(6) && PG_ARGISNULL(7)))
		alter_publishing(fcinfo, queue_id, name);
	/* unpaused, or with more room: every waiter may find work */
	dex_queue_tasks_added(queue_id, -1);
	dex_queue_cache_reset();
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * dex.queue_changed(): the statement trigger on dex.queue and
 * dex.queue_grant (1.7).  Whatever wrote them, the queue lookups cached
 * in every backend go when the transaction commits (engine/queues.c).
 */
Datum
dex_queue_changed_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("dex.queue_changed() must be fired AFTER ... FOR EACH STATEMENT")));
	dex_queue_changed(RelationGetNamespace(trigdata->tg_relation));
	return PointerGetDatum(NULL);
}

/* ----------------------------------------------------------------
 * dex.set_concurrency_limit(queue, key, max_runs) (1.7)
 * ----------------------------------------------------------------
 */

PG_FUNCTION_INFO_V1(dex_set_concurrency_limit);

/* $1 queue, $2 key, $3 max runs (NULL: back to the queue's limit); returns the limits before and after */
static DexPlan set_key_limit_plan = {
	"WITH before AS (SELECT coalesce((SELECT l.max_runs FROM dex.concurrency_limit l "
	"                                 WHERE l.queue_id = $1 AND l.key = $2), "
	"                                (SELECT q.concurrency_limit FROM dex.queue q WHERE q.id = $1), 1) AS n), "
	"     del AS (DELETE FROM dex.concurrency_limit WHERE queue_id = $1 AND key = $2 AND $3 IS NULL), "
	"     ins AS (INSERT INTO dex.concurrency_limit (queue_id, key, max_runs) SELECT $1, $2, $3 "
	"             WHERE $3 IS NOT NULL "
	"             ON CONFLICT (queue_id, key) DO UPDATE SET max_runs = EXCLUDED.max_runs) "
	"SELECT before.n, coalesce($3, (SELECT q.concurrency_limit FROM dex.queue q WHERE q.id = $1)) "
	"FROM before",
	3, {INT4OID, TEXTOID, INT4OID}
};

/*
 * dex.set_concurrency_limit(queue, key, max_runs): up to max_runs runs of
 * the key at once on the workflow queue; NULL gives the key its queue's
 * limit back.  Raised, it admits waiting runs now; lowered, the runs above
 * it finish and none is admitted until the key is under it.
 */
Datum
dex_set_concurrency_limit(PG_FUNCTION_ARGS)
{
	char	   *name = dex_arg_name(fcinfo, 0, "queue");
	char	   *key = dex_arg_name(fcinfo, 1, "concurrency key");
	DexQueue	queue;
	Datum		values[3];

	if (!PG_ARGISNULL(2))
		check_concurrency_limit(PG_GETARG_INT32(2), "max_runs");
	SPI_connect();
	if (!dex_queue_limits_exist())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("concurrency limits need dex 1.7"),
				 errhint("Run ALTER EXTENSION dex UPDATE.")));
	queue = dex_existing_queue(name, "workflow");
	if (!queue.is_workflow)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("queue \"%s\" is an activity queue: it has no concurrency keys", name),
				 errhint("Concurrency keys are given to runs, on workflow queues.")));
	values[0] = Int32GetDatum(queue.id);
	values[1] = CStringGetTextDatum(key);
	values[2] = PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2);
	dex_spi_exec(&set_key_limit_plan, values, PG_ARGISNULL(2) ? "  n" : NULL, 1);
	if (dex_spi_getint64(0, 2) > dex_spi_getint64(0, 1))
		dex_admit_waiting_runs(queue.id, key);
	SPI_finish();
	PG_RETURN_VOID();
}

/* ----------------------------------------------------------------
 * dex.grant_queue(queue, role), dex.revoke_queue(queue, role)
 * ----------------------------------------------------------------
 */

PG_FUNCTION_INFO_V1(dex_grant_queue);
PG_FUNCTION_INFO_V1(dex_revoke_queue);

static DexPlan grant_plan = {
	"INSERT INTO dex.queue_grant (queue_id, grantee) VALUES ($1, $2) ON CONFLICT DO NOTHING",
	2, {INT4OID, OIDOID}
};

static DexPlan revoke_plan = {
	"DELETE FROM dex.queue_grant WHERE queue_id = $1 AND grantee = $2",
	2, {INT4OID, OIDOID}
};


static Datum
grant_or_revoke(FunctionCallInfo fcinfo, bool grant)
{
	char	   *name;
	DexQueue	queue;
	Datum		values[2];

	dex_args_not_null(fcinfo, 2, "queue and role");
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	SPI_connect();
	queue = dex_existing_queue(name, NULL);
	values[0] = Int32GetDatum(queue.id);
	values[1] = PG_GETARG_DATUM(1);
	dex_spi_exec(grant ? &grant_plan : &revoke_plan, values, NULL, 0);
	dex_queue_cache_reset();
	/*
	 * Calls waiting for the queue's tasks look again when a revoke commits:
	 * those of the role it concerns are refused at that look (42501) and
	 * leave, so that no later task wakes a call that may no longer take it.
	 */
	if (!grant)
		dex_queue_tasks_added(queue.id, -1);
	SPI_finish();
	PG_RETURN_VOID();
}

/* dex.grant_queue(queue text, role regrole): the role may use the queue */
Datum
dex_grant_queue(PG_FUNCTION_ARGS)
{
	return grant_or_revoke(fcinfo, true);
}

/* dex.revoke_queue(queue text, role regrole): takes back dex.grant_queue */
Datum
dex_revoke_queue(PG_FUNCTION_ARGS)
{
	return grant_or_revoke(fcinfo, false);
}


/*
 * dex.usable_queue_ids() returns integer[]: the ids of the queues the caller
 * may use; the dex.runs view shows the runs of these.
 */
static Datum
usable_queue_ids(PG_FUNCTION_ARGS)
{
	Datum		result;

	SPI_connect();
	result = SPI_datumTransfer(dex_usable_queue_ids_list(), false, -1);
	SPI_finish();
	PG_RETURN_DATUM(result);
}

DEX_API_ENTRY_POINT(dex_usable_queue_ids, usable_queue_ids);
