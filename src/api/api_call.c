/*-------------------------------------------------------------------------
 *
 * api_call.c
 *	  The rights an API call runs with: its owner's, with the caller kept
 *	  for the queue checks and search_path pinned.
 *
 * PostgreSQL does not tell a SECURITY DEFINER function who called it, and
 * the queue checks (engine/access.c) need the caller.  So the API functions
 * that check queues are SECURITY INVOKER in the catalog and take their
 * owner's rights here (dex_api_call), noting the caller first.  The switch
 * is undone on return and, on error, by the abort of the (sub)transaction
 * too, as PostgreSQL does for SECURITY DEFINER functions.
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
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/syscache.h"

#include "api/api.h"

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
	call->guc_level = 0;
	if (strcmp(namespace_search_path, DEX_SEARCH_PATH) != 0)
	{
		call->guc_level = NewGUCNestLevel();
		(void) set_config_option("search_path", DEX_SEARCH_PATH, PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	}
	call->caller = dex_access_set_caller(call->userid);
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
	(void) dex_access_set_caller(call->caller);
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
