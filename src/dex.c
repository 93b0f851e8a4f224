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
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "util/util.h"
#include "shmem/shmem.h"
#include "engine/engine.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

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
 * first, and are kept from starting again until the command ends.  DROP
 * ROLE of the owner of a workflow definition of this database is refused
 * (engine/definition_access.c).  CREATE
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

	else if (IsA(stmt, AlterExtensionStmt) &&
			 strcmp(((AlterExtensionStmt *) stmt)->extname, "dex") == 0 &&
			 OidIsValid(get_extension_oid("dex", true)))
	{
		/*
		 * The update alters dex's tables: it first waits for the API calls
		 * that write tasks and for the workers' passes in progress, and holds
		 * off new ones until it commits (engine/locks.c), so that none of
		 * them, holding one table, waits for another the update holds.
		 */
		dex_lock_for_rebuild();
	}
	else if (IsA(stmt, DropRoleStmt) && OidIsValid(get_extension_oid("dex", true)))
		dex_refuse_dropping_definition_owners(((DropRoleStmt *) stmt)->roles);
	else if (IsA(stmt, DropStmt) && drops_dex((DropStmt *) stmt))
	{
		Oid			schema;

		refuse_drop_with_runs();
		/*
		 * As the update: a worker's pass that holds one of dex's tables waits
		 * for none (the lock is named after dex.lease: a broken install
		 * without it is dropped without).
		 */
		schema = get_namespace_oid("dex", true);
		if (OidIsValid(schema) && OidIsValid(get_relname_relid("lease", schema)))
			dex_lock_for_rebuild();
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

	dex_define_settings();
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
