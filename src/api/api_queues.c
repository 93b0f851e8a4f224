/*-------------------------------------------------------------------------
 *
 * api_queues.c
 *	  dex.create_queue and dex.alter_queue: task queues, their partitions,
 *	  capacity and pause; the trigger that makes the partitions of restored
 *	  queues.
 *
 * A queue is a row of dex.queue plus one partition of the task table of its
 * kind.  Both kinds are UNLOGGED: tasks are derived data, rebuilt after a
 * crash from runs, history, inbox and dex.activity_retry (rebuild.c).  The partition name is derived from the queue name, so names that
 * normalize to the same partition are refused.  Creation takes a lock on
 * dex.queue that serializes concurrent creators but not readers.
 *
 * Backups.  pg_dump dumps the rows of dex's logged tables (they are
 * registered with pg_extension_config_dump) but no member object of the
 * extension, and CREATE EXTENSION makes those again on restore.  The
 * partitions are made at run time, so each is made a member of the
 * extension when it is created: pg_dump leaves them out, with their (derived)
 * rows, and a restore cannot collide with them.  They come back with their
 * queues instead: dex.queue_partition(), an AFTER INSERT trigger on
 * dex.queue (a member of the extension too, so it exists before the
 * restored rows arrive; COPY fires triggers), makes the partition of every
 * queue row that arrives.  A row that dex.create_queue did not insert can
 * only be a restore (nobody else may write dex.queue): the trigger then
 * also notes the restoring session in dex.lease ('restore'), and the
 * scheduler rebuilds the task tables from the restored rows once that
 * session has ended, that is once every table is restored (scheduler.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

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

PG_FUNCTION_INFO_V1(dex_create_queue);
PG_FUNCTION_INFO_V1(dex_queue_partition_trigger);
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

static DexPlan find_conflict_plan = {
	"SELECT name FROM dex.queue WHERE name OPERATOR(pg_catalog.=) $1 OR partition OPERATOR(pg_catalog.=) $2::name",
	2, {TEXTOID, TEXTOID}
};

static DexPlan insert_queue_plan = {
	"INSERT INTO dex.queue (name, kind, capacity, partition) VALUES ($1, $2, $3, $4::name) RETURNING id",
	4, {TEXTOID, TEXTOID, INT4OID, TEXTOID}
};

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
	partition = partition_name(name, workflow);

	SPI_connect();
	dex_spi_exec(&lock_queues_plan, NULL, NULL, 0);

	values[0] = CStringGetTextDatum(name);
	values[1] = CStringGetTextDatum(partition);
	dex_spi_exec(&find_conflict_plan, values, NULL, 1);
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
				 errhint("Queue names that differ only in case, punctuation or after their first %d characters share a partition; choose another name.",
						 NAMEDATALEN - 1 - PARTITION_PREFIX_LEN)));
	}

	values[0] = CStringGetTextDatum(name);
	values[1] = CStringGetTextDatum(kind);
	values[2] = Int32GetDatum(capacity);
	values[3] = CStringGetTextDatum(partition);
	inserting_queue = true;
	PG_TRY();
	{
		dex_spi_exec(&insert_queue_plan, values, capacity > 0 ? NULL : "  n ", 1);
	}
	PG_FINALLY();
	{
		inserting_queue = false;
	}
	PG_END_TRY();
	queue_id = (int32) dex_spi_getint64(0, 1);
	dex_grant_queue_defaults(queue_id);

	/*
	 * On a 1.2 schema the trigger has made the partition by now; on an older
	 * one (the library updated before ALTER EXTENSION dex UPDATE) this does.
	 */
	ensure_partition(queue_id, workflow, partition);

	SPI_finish();
	PG_RETURN_VOID();
}

/* ----------------------------------------------------------------
 * dex.queue_partition(): AFTER INSERT FOR EACH ROW on dex.queue
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

/*
 * Every queue row that arrives gets its partition: those of dex.create_queue
 * and those a restore writes (COPY fires row triggers).  Rows that
 * dex.create_queue did not insert are a restore: the task tables must be
 * rebuilt once the restored runs, history and inbox are all in.
 */
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

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("dex.queue_partition() must be fired AFTER INSERT FOR EACH ROW")));

	desc = RelationGetDescr(trigdata->tg_relation);
	row = trigdata->tg_trigtuple;
	queue_id = DatumGetInt32(SPI_getbinval(row, desc, SPI_fnumber(desc, "id"), &isnull));
	kind = TextDatumGetCString(SPI_getbinval(row, desc, SPI_fnumber(desc, "kind"), &isnull));
	partition = pstrdup(NameStr(*DatumGetName(SPI_getbinval(row, desc, SPI_fnumber(desc, "partition"),
														   &isnull))));

	SPI_connect();
	ensure_partition(queue_id, strcmp(kind, "workflow") == 0, partition);
	if (!inserting_queue)
	{
		dex_spi_exec(&note_restore_plan, NULL, NULL, 0);
		dex_wake_scheduler_at_commit(DT_NOBEGIN);
	}
	SPI_finish();
	return PointerGetDatum(NULL);
}

/* ----------------------------------------------------------------
 * dex.alter_queue(name, capacity, paused)
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
 * dex.alter_queue: a paused queue hands out no task (its tasks wait, and
 * new ones are added as usual); a capacity caps the tasks leased at once.
 * Workers waiting on the queue are woken at commit, to look again.
 */
Datum
dex_alter_queue(PG_FUNCTION_ARGS)
{
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	char	   *name;

	dex_arg_not_null(fcinfo, 0, "queue name");
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	if (!PG_ARGISNULL(1) && PG_GETARG_INT32(1) != 0)
		check_capacity(PG_GETARG_INT32(1));
	values[0] = CStringGetTextDatum(name);
	values[1] = PG_ARGISNULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1);
	values[2] = PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2);
	nulls[1] = PG_ARGISNULL(1) ? 'n' : ' ';
	nulls[2] = PG_ARGISNULL(2) ? 'n' : ' ';

	SPI_connect();
	dex_spi_exec(&alter_queue_plan, values, nulls, 0);
	if (SPI_processed == 0)
		dex_queue_does_not_exist(name, NULL);
	/* unpaused, or with more room: every waiter may find work */
	dex_queue_tasks_added((int32) dex_spi_getint64(0, 1), -1);
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
