/*-------------------------------------------------------------------------
 *
 * privileges.c
 *	  Who may use which queue: queue grants (dex.grant_queue,
 *	  dex.revoke_queue, dex.usable_queue_ids), the checks the API makes with
 *	  them, and the switch to the extension's rights that API calls make.
 *
 * Two layers decide what a role may do.  Its membership in dex_client,
 * dex_worker or dex_admin gives it EXECUTE on a kind of call (start runs,
 * lease tasks, manage queues); queue grants say on which queues.  A role
 * may use a queue if it has the privileges of a role the queue is granted to
 * (dex.queue_grant), or of dex_admin, or is a superuser.  dex.create_queue
 * grants every new queue to dex_client and dex_worker, so that all of dex's
 * roles may use it until an administrator revokes that.
 *
 * Using a queue means: starting runs on it, reading and steering its runs,
 * leasing its tasks and reporting on them, and, from a workflow task,
 * scheduling activities or starting child runs on it.  A run of a queue the
 * caller may not use is treated as if it did not exist: it is not listed,
 * and naming it is the error of an unknown run.  Naming such a queue is
 * refused (ERRCODE_INSUFFICIENT_PRIVILEGE), as is reporting on a task of it.
 *
 * The checks need the caller: the role that holds EXECUTE on the API
 * function, be it a login role, a role set with SET ROLE or the owner of a
 * SECURITY DEFINER function that calls dex.  PostgreSQL does not tell a
 * SECURITY DEFINER function who called it, so the API functions that check
 * queues are SECURITY INVOKER in the catalog and take their owner's rights
 * here (dex_api_call), keeping the caller aside.  The switch is undone on
 * return and, on error, by the abort of the (sub)transaction too, as
 * PostgreSQL does for SECURITY DEFINER functions.
 *
 * The switch also pins search_path to pg_catalog, pg_temp, whatever the
 * caller set: a statement that runs with the owner's rights must never
 * resolve a function or operator in a schema the caller controls.  The API
 * functions pin it with SET clauses too; this is what protects the one
 * routine that cannot have one (dex.wait_for_tasks, a procedure that commits)
 * and any that would lose its clause by mistake.  The pin is undone on
 * return, and on error by the abort of the (sub)transaction, which unwinds
 * every GUC nest level above it.
 *
 * Grants are read with their queue, by history.c's per-transaction queue
 * cache: a check costs no statement of its own.  Rows of dropped roles are
 * removed by the maintenance worker (maintenance.c), so that a role that
 * gets a dropped role's oid again does not inherit its grants.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "dex.h"

/* the caller of the API call in progress; InvalidOid outside API calls */
static Oid	api_caller = InvalidOid;

/* The owner of a function: the rights an API call runs with. */
static Oid
function_owner(Oid proc_oid)
{
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(proc_oid));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for function %u", proc_oid);
	owner = ((Form_pg_proc) GETSTRUCT(tup))->proowner;
	ReleaseSysCache(tup);
	return owner;
}

/*
 * Take the rights of the function's owner, keeping the caller for the queue
 * checks, and pin search_path; dex_api_leave undoes both.  A function whose
 * SET clause already pinned the path (every one but dex.wait_for_tasks) pays
 * only a string comparison.
 */
void
dex_api_enter(Oid proc_oid, DexApiCall *call)
{
	GetUserIdAndSecContext(&call->userid, &call->sec_context);
	call->caller = api_caller;
	call->guc_level = 0;
	if (strcmp(namespace_search_path, DEX_SEARCH_PATH) != 0)
	{
		call->guc_level = NewGUCNestLevel();
		(void) set_config_option("search_path", DEX_SEARCH_PATH, PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	}
	api_caller = call->userid;
	SetUserIdAndSecContext(function_owner(proc_oid),
						   call->sec_context | SECURITY_LOCAL_USERID_CHANGE);
}

/*
 * Give the caller's rights back.  On the normal path the caller's search_path
 * comes back too; after an error (error = true) the abort that follows does
 * that, as it must unwind the GUC nest levels in order.
 */
void
dex_api_leave(const DexApiCall *call, bool error)
{
	SetUserIdAndSecContext(call->userid, call->sec_context);
	api_caller = call->caller;
	if (call->guc_level > 0 && !error)
		AtEOXact_GUC(true, call->guc_level);
}

/*
 * Run an API function's body with its owner's rights (see the header).
 */
Datum
dex_api_call(FunctionCallInfo fcinfo, PGFunction body)
{
	DexApiCall	call;
	volatile Datum result = (Datum) 0;

	dex_api_enter(fcinfo->flinfo->fn_oid, &call);
	PG_TRY();
	{
		result = body(fcinfo);
	}
	PG_CATCH();
	{
		dex_api_leave(&call, true);
		PG_RE_THROW();
	}
	PG_END_TRY();
	dex_api_leave(&call, false);
	return result;
}

/* The role whose queue grants count: the API's caller, else the current user */
static Oid
caller(void)
{
	return OidIsValid(api_caller) ? api_caller : GetUserId();
}

/* Whether the caller may use every queue: a superuser or a dex_admin */
static bool
caller_may_use_all(void)
{
	Oid			role = caller();
	Oid			admin;

	if (superuser_arg(role))
		return true;
	admin = get_role_oid("dex_admin", true);
	return OidIsValid(admin) && has_privs_of_role(role, admin);
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

bool
dex_may_use_queue(const DexQueue *queue)
{
	Oid			role;

	if (queue->n_grantees < 0 || caller_may_use_all())
		return true;
	role = caller();
	for (int i = 0; i < queue->n_grantees; i++)
		if (has_privs_of_role(role, queue->grantees[i]))
			return true;
	return false;
}

void
dex_check_queue_use(const DexQueue *queue)
{
	if (!dex_may_use_queue(queue))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for queue \"%s\"", queue->name),
				 errdetail("Role \"%s\" may not use the queue.",
						   GetUserNameFromId(caller(), false)),
				 errhint("An administrator grants it with dex.grant_queue('%s', role).",
						 queue->name)));
}

/* The caller may use the queue with that id (a queue that is gone: no). */
bool
dex_may_use_queue_id(int32 queue_id)
{
	DexQueue	queue;

	if (caller_may_use_all())
		return true;
	return dex_queue_by_id(queue_id, &queue) && dex_may_use_queue(&queue);
}

/*
 * Check the queue of every row of the statement just run (column
 * queue_col): a task a worker reports on must be of a queue it may use.
 * Leaves SPI_tuptable and SPI_processed as they were.
 */
void
dex_check_queue_use_spi(int queue_col)
{
	SPITupleTable *tuptable = SPI_tuptable;
	uint64		processed = SPI_processed;
	int32	   *ids;
	int			n = 0;

	if (processed == 0 || caller_may_use_all())
		return;
	ids = palloc(sizeof(int32) * processed);
	for (uint64 i = 0; i < processed; i++)
	{
		int32		id = (int32) dex_spi_getint64((int) i, queue_col);
		bool		seen = false;

		for (int k = 0; k < n && !seen; k++)
			seen = ids[k] == id;
		if (!seen)
			ids[n++] = id;
	}
	for (int k = 0; k < n; k++)
	{
		DexQueue	queue;

		if (dex_queue_by_id(ids[k], &queue))
			dex_check_queue_use(&queue);
	}
	SPI_tuptable = tuptable;
	SPI_processed = processed;
	pfree(ids);
}

/* ----------------------------------------------------------------
 * dex.grant_queue(queue, role), dex.revoke_queue(queue, role)
 * ----------------------------------------------------------------
 */

PG_FUNCTION_INFO_V1(dex_grant_queue);
PG_FUNCTION_INFO_V1(dex_revoke_queue);
PG_FUNCTION_INFO_V1(dex_usable_queue_ids);

static DexPlan grant_plan = {
	"INSERT INTO dex.queue_grant (queue_id, grantee) VALUES ($1, $2) ON CONFLICT DO NOTHING",
	2, {INT4OID, OIDOID}
};

static DexPlan revoke_plan = {
	"DELETE FROM dex.queue_grant WHERE queue_id = $1 AND grantee = $2",
	2, {INT4OID, OIDOID}
};

static DexPlan grant_defaults_plan = {
	"INSERT INTO dex.queue_grant (queue_id, grantee) "
	"SELECT $1, oid FROM pg_catalog.pg_roles WHERE rolname IN ('dex_client', 'dex_worker') "
	"ON CONFLICT DO NOTHING",
	1, {INT4OID}
};

/* dex.create_queue: a new queue is granted to dex_client and dex_worker */
void
dex_grant_queue_defaults(int32 queue_id)
{
	Datum		values[1] = {Int32GetDatum(queue_id)};

	if (dex_queue_grants_exist())
		dex_spi_exec(&grant_defaults_plan, values, NULL, 0);
}

static Datum
grant_or_revoke(FunctionCallInfo fcinfo, bool grant)
{
	char	   *name;
	DexQueue	queue;
	Datum		values[2];

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("queue and role must not be null")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	SPI_connect();
	if (!dex_lookup_queue(name, &queue))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("queue \"%s\" does not exist", name)));
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

static DexPlan all_queues_plan = {
	"SELECT id, NULL::oid FROM dex.queue ORDER BY id", 0, {0}
};

static DexPlan queue_grants_plan = {
	"SELECT queue_id, grantee FROM dex.queue_grant ORDER BY queue_id", 0, {0}
};

/*
 * The ids of the queues the caller may use, as an integer[] in the current
 * memory context; with list_all false, (Datum) 0 stands for every queue.
 * Runs inside the caller's SPI connection.
 */
static Datum
usable_ids(bool list_all)
{
	bool		all = caller_may_use_all() || !dex_queue_grants_exist();
	Oid			role = caller();
	ArrayBuildState *ids;
	int32		last = -1;

	if (all && !list_all)
		return (Datum) 0;
	dex_spi_exec(all ? &all_queues_plan : &queue_grants_plan, NULL, NULL, 0);
	ids = initArrayResult(INT4OID, CurrentMemoryContext, false);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		int32		id = (int32) dex_spi_getint64((int) i, 1);
		bool		isnull;
		Datum		grantee = dex_spi_getdatum((int) i, 2, &isnull);

		if (id == last)
			continue;
		if (all || has_privs_of_role(role, DatumGetObjectId(grantee)))
		{
			dex_array_add(ids, Int32GetDatum(id), false);
			last = id;
		}
	}
	return dex_array_result(ids);
}

Datum
dex_usable_queue_ids_datum(void)
{
	return usable_ids(false);
}

/* The same, every id listed even when the caller may use every queue */
Datum
dex_usable_queue_ids_list(void)
{
	return usable_ids(true);
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
	result = SPI_datumTransfer(usable_ids(true), false, -1);
	SPI_finish();
	PG_RETURN_DATUM(result);
}

Datum
dex_usable_queue_ids(PG_FUNCTION_ARGS)
{
	return dex_api_call(fcinfo, usable_queue_ids);
}
