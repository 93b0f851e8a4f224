/*-------------------------------------------------------------------------
 *
 * dex.c
 *	  Module load: settings (dex.* GUCs), shared-memory hooks and the
 *	  registration of the launcher background worker.
 *
 * dex works in two modes.  Preloaded (shared_preload_libraries = 'dex'),
 * _PG_init reserves shared memory, registers the static launcher, which
 * starts the workers of the databases named by dex.database, and installs
 * a utility hook that stops a database's workers before DROP DATABASE and
 * keeps DROP EXTENSION dex from deleting runs by surprise.  Loaded on
 * demand by a backend, the SQL API works but nothing schedules delayed work
 * (timers, activity retries, expired leases); functions that create such
 * work say so with a WARNING.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <float.h>

#include "access/genam.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_depend.h"
#include "catalog/pg_namespace.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "tcop/utility.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "dex.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/* Settings */
char	   *dex_database = NULL;
int			dex_scheduler_naptime_ms = 600000;
int			dex_retry_max_attempts = 6;
int			dex_retry_initial_delay_ms = 5000;
double		dex_retry_multiplier = 1.5;
double		dex_retry_randomization = 0.3;
int			dex_retry_max_delay_ms = 30 * 60 * 1000;
int			dex_max_payload_size = 1024 * 1024;
int			dex_retention_period_s = 7 * 24 * 3600;
int			dex_retention_batch_size = 1000;
int			dex_maintenance_naptime_ms = 60000;

bool		dex_allow_drop_with_runs = false;

bool		dex_preloaded = false;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void
dex_shmem_request_hook(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	dex_shmem_request();
}

static void
dex_shmem_startup_hook(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	dex_shmem_startup();
}

/*
 * DROP DATABASE (and ALTER DATABASE ... RENAME) refuse to work on a
 * database others are connected to: the dex workers of the database leave
 * first, and are kept from starting again until the command ends.  CREATE
 * DATABASE and CREATE EXTENSION dex wake the launcher when they commit: it
 * may have a new database to serve.
 */
static ProcessUtility_hook_type prev_process_utility_hook = NULL;

/* Whether a DROP statement would drop extension dex of this database. */
static bool
drops_dex(DropStmt *drop)
{
	ListCell   *lc;

	if (drop->removeType != OBJECT_EXTENSION &&
		!(drop->removeType == OBJECT_SCHEMA && drop->behavior == DROP_CASCADE))
		return false;
	if (!OidIsValid(get_extension_oid("dex", true)))
		return false;
	foreach(lc, drop->objects)
	{
		if (strcmp(strVal(lfirst(lc)), "dex") == 0)
			return true;
	}
	return false;
}

/*
 * DROP EXTENSION dex (or DROP SCHEMA dex CASCADE) deletes every run and its
 * history with the extension's tables.  While there are runs it is refused,
 * unless the operator says it is meant: SET dex.allow_drop_with_runs = on.
 */
static void
refuse_drop_with_runs(void)
{
	bool		has_runs;

	if (dex_allow_drop_with_runs)
		return;
	SPI_connect();
	if (SPI_execute("SELECT EXISTS (SELECT FROM dex.workflow_run)", true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not look for workflow runs");
	has_runs = dex_spi_getbool(0, 1);
	SPI_finish();
	if (has_runs)
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("cannot drop extension dex: this database has workflow runs"),
				 errdetail("Dropping the extension deletes every run and its history."),
				 errhint("To delete them, SET dex.allow_drop_with_runs = on first.")));
}

/*
 * After DROP EXTENSION dex: the schema dex, which CREATE EXTENSION made and
 * which is not a member of the extension, goes too if nothing is left in it.
 */
static void
drop_empty_schema(void)
{
	Oid			schema = get_namespace_oid("dex", true);
	Relation	depend;
	ScanKeyData key[2];
	SysScanDesc scan;
	bool		empty;
	ObjectAddress object;

	if (!OidIsValid(schema))
		return;
	/*
	 * An index scan of pg_depend, not a query: nothing here resolves a name
	 * through the search_path of whoever runs DROP EXTENSION.  The catalog
	 * snapshot sees the drop, which the command counter has made visible.
	 */
	depend = table_open(DependRelationId, AccessShareLock);
	ScanKeyInit(&key[0], Anum_pg_depend_refclassid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(NamespaceRelationId));
	ScanKeyInit(&key[1], Anum_pg_depend_refobjid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(schema));
	scan = systable_beginscan(depend, DependReferenceIndexId, true, NULL, 2, key);
	empty = !HeapTupleIsValid(systable_getnext(scan));
	systable_endscan(scan);
	table_close(depend, AccessShareLock);
	if (!empty)
		return;
	ObjectAddressSet(object, NamespaceRelationId, schema);
	performDeletion(&object, DROP_RESTRICT, 0);
	CommandCounterIncrement();
}

static void
dex_process_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
					ProcessUtilityContext context, ParamListInfo params,
					QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *stmt = pstmt->utilityStmt;
	volatile Oid dropping = InvalidOid;
	bool		dropping_dex = false;

	if (IsA(stmt, DropdbStmt))
		dropping = get_database_oid(((DropdbStmt *) stmt)->dbname, true);
	else if (IsA(stmt, RenameStmt) && ((RenameStmt *) stmt)->renameType == OBJECT_DATABASE)
		dropping = get_database_oid(((RenameStmt *) stmt)->subname, true);
	else if ((IsA(stmt, CreateExtensionStmt) &&
			  strcmp(((CreateExtensionStmt *) stmt)->extname, "dex") == 0) ||
			 IsA(stmt, CreatedbStmt))
		dex_wake_launcher_at_commit();

	else if (IsA(stmt, DropStmt) && drops_dex((DropStmt *) stmt))
	{
		refuse_drop_with_runs();
		dropping_dex = true;
	}

	if (!OidIsValid(dropping))
	{
		(prev_process_utility_hook ? prev_process_utility_hook : standard_ProcessUtility)
			(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
		if (dropping_dex && !OidIsValid(get_extension_oid("dex", true)))
			drop_empty_schema();
		return;
	}

	dex_database_drop_begin(dropping);
	PG_TRY();
	{
		(prev_process_utility_hook ? prev_process_utility_hook : standard_ProcessUtility)
			(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
	}
	PG_FINALLY();
	{
		dex_database_drop_done(dropping);
	}
	PG_END_TRY();
}

static void
define_settings(void)
{
	DefineCustomBoolVariable("dex.allow_drop_with_runs",
							 "Lets DROP EXTENSION dex delete the workflow runs of the database.",
							 "Without it, DROP EXTENSION dex is refused while runs exist.",
							 &dex_allow_drop_with_runs,
							 false,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("dex.scheduler_naptime",
							"Longest time the scheduler sleeps when nothing is due.",
							"The scheduler wakes earlier when work falls due or a backend sets its latch.",
							&dex_scheduler_naptime_ms,
							600000, 10, INT_MAX / 2,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("dex.retry_max_attempts",
							"Default maximum attempts of an activity, the first included.",
							NULL,
							&dex_retry_max_attempts,
							6, 1, 10000,
							PGC_USERSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("dex.retry_initial_delay",
							"Default delay before an activity's first retry.",
							NULL,
							&dex_retry_initial_delay_ms,
							5000, 0, INT_MAX,
							PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomRealVariable("dex.retry_multiplier",
							 "Default factor by which each retry delay grows.",
							 NULL,
							 &dex_retry_multiplier,
							 1.5, 1.0, 1000.0,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);
	DefineCustomRealVariable("dex.retry_randomization",
							 "Default random spread of retry delays, as a fraction of the delay.",
							 NULL,
							 &dex_retry_randomization,
							 0.3, 0.0, 1.0,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("dex.retry_max_delay",
							"Default longest delay between two attempts of an activity.",
							NULL,
							&dex_retry_max_delay_ms,
							30 * 60 * 1000, 0, INT_MAX,
							PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("dex.max_payload_size",
							"Largest payload (argument, result, failure, command list) dex accepts.",
							NULL,
							&dex_max_payload_size,
							1024 * 1024, 1024, MaxAllocSize / 2,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	DefineCustomIntVariable("dex.retention_period",
							"How long runs that ended are kept before the maintenance worker deletes them.",
							"A run goes with its history, inbox and tasks once it has been over this long. 0 keeps runs forever.",
							&dex_retention_period_s,
							7 * 24 * 3600, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("dex.retention_batch_size",
							"Runs the maintenance worker deletes per transaction.",
							NULL,
							&dex_retention_batch_size,
							1000, 1, 100000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("dex.maintenance_naptime",
							"Time between two passes of the maintenance worker.",
							NULL,
							&dex_maintenance_naptime_ms,
							60000, 100, INT_MAX / 2,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomStringVariable("dex.database",
							   "Databases the dex workers serve.",
							   "A name, a comma-separated list of names, or * for every database where dex is installed.",
							   &dex_database,
							   "postgres",
							   PGC_SIGHUP, GUC_LIST_INPUT,
							   NULL, NULL, NULL);

	MarkGUCPrefixReserved("dex");
}

static void
register_launcher(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	/* a backend-list entry is what makes the postmaster signal us about our workers */
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 10;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "dex");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "dex_launcher_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "dex launcher");
	snprintf(worker.bgw_type, BGW_MAXLEN, "dex launcher");
	RegisterBackgroundWorker(&worker);
}

void
_PG_init(void)
{
	/* pg_upgrade loads libraries; there is nothing to run then */
	if (IsBinaryUpgrade)
		return;

	define_settings();
	dex_wakeup_init();

	if (!process_shared_preload_libraries_in_progress)
		return;

	dex_preloaded = true;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = dex_shmem_request_hook;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = dex_shmem_startup_hook;

	register_launcher();
	prev_process_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = dex_process_utility;
}

/*
 * Refuse a payload larger than dex.max_payload_size.
 */
void
dex_check_payload_size(Size size, const char *what)
{
	if (size > (Size) dex_max_payload_size)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s is too large", what),
				 errdetail("It has %zu bytes; the limit is %d bytes.",
						   size, dex_max_payload_size),
				 errhint("Raise \"%s\" or pass large data by reference.",
						 "dex.max_payload_size")));
}
