/*-------------------------------------------------------------------------
 *
 * access.c
 *	  Who may use which queue: the checks the engine makes with queue grants
 *	  for the role that called the API.
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
 * SECURITY DEFINER function that calls dex.  The API notes it here as each
 * call begins (api/api_call.c), before it takes the extension owner's rights.
 *
 * Grants are read with their queue, by the queue cache (queues.c): a check
 * costs no statement of its own.  Rows of dropped roles
 * are removed by the maintenance worker, so that a role that gets a dropped
 * role's oid again does not inherit its grants.
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

#include "engine/engine.h"

/* the caller of the API call in progress; InvalidOid outside API calls */
static Oid	api_caller = InvalidOid;

/*
 * An API call begins (api/api_call.c): the role that called it is the one
 * whose grants count until it returns.  Returns the enclosing call's caller,
 * to be given back.
 */
Oid
dex_access_set_caller(Oid role)
{
	Oid			previous = api_caller;

	api_caller = role;
	return previous;
}


/* The role whose queue grants count: the API's caller, else the current user */
static Oid
caller(void)
{
	return OidIsValid(api_caller) ? api_caller : GetUserId();
}

/* The same, for the other checks of what the caller may do (definition_access.c) */
Oid
dex_access_caller(void)
{
	return caller();
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

/*
 * The queue of that name, which must exist, be of the wanted kind and be one
 * the caller may use.
 */
DexQueue
dex_require_queue(const char *name, bool want_workflow)
{
	DexQueue	queue;

	if (name == NULL || name[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s queue name must not be empty",
						want_workflow ? "workflow" : "activity")));
	queue = dex_existing_queue(name, want_workflow ? "workflow" : "activity");
	if (queue.is_workflow != want_workflow)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("queue \"%s\" is not a%s queue", name,
						want_workflow ? " workflow" : "n activity"),
				 errdetail("It is a%s queue.",
						   queue.is_workflow ? " workflow" : "n activity")));
	dex_check_queue_use(&queue);
	return queue;
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
