/*-------------------------------------------------------------------------
 *
 * api_definitions.c
 *	  The SQL functions of workflows defined in JSON (1.7):
 *	  dex.create_definition (the schema's checks are engine/definitions.c's),
 *	  dex.get_definition, dex.list_definitions, dex.delete_definition, and
 *	  the user tasks' dex.user_tasks and dex.complete_user_task.  Like every
 *	  API function they take their owner's rights in C (api_call.c);
 *	  dex.user_tasks shows only runs of queues the caller may use.
 *
 * dex.create_definition records its caller as the definition's owner: the
 * role whose privileges the SQL steps run with.  It notes the caller before
 * taking the owner's rights (api_call.c), as PostgreSQL does not tell a
 * function who called it once it runs with another role's rights.
 *
 * dex.complete_user_task deletes the user task's row, then sends the
 * external event the run waits for ("user:<step>:<wait id>"), in the
 * caller's transaction: two completions of one task serialize on the row,
 * and the second finds it gone (55000); one whose event the run received
 * already (a row written again for a reset run, interpret.c) is refused too.  Lock order: the user task row, then
 * the run (FOR SHARE, as dex.send_external_event), the order the
 * interpreter takes them in too (engine/interpret.c writes the row before
 * the completion locks the run).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "access/htup_details.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/uuid.h"

#include "api/api.h"

static void require_1_7(void);

/* the grants of a definition whose last version was deleted */
static DexPlan drop_grants_plan = {
	"DELETE FROM dex.definition_grant g WHERE g.name = $1 "
	"AND NOT EXISTS (SELECT 1 FROM dex.definition d WHERE d.name = $1)",
	1, {TEXTOID}
};

/* the role that called dex.create_definition (see the header) */
static Oid	definition_caller = InvalidOid;

static DexPlan insert_definition_plan = {
	"INSERT INTO dex.definition (name, version, definition, owner) VALUES ($1, $2, $3, $4) "
	"ON CONFLICT DO NOTHING",
	4, {TEXTOID, INT4OID, JSONBOID, OIDOID}
};

static Datum
create_definition(PG_FUNCTION_ARGS)
{
	char	   *name;
	int32		version;
	Jsonb	   *doc;
	Datum		values[4];

	require_1_7();
	name = dex_arg_name(fcinfo, 0, "definition name");
	version = dex_arg_int32(fcinfo, 1, "version");
	if (version <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a definition's version must be positive, not %d", version)));
	dex_arg_not_null(fcinfo, 2, "definition");
	doc = PG_GETARG_JSONB_P(2);
	/* a definition is read at every workflow task of its runs: as large as a payload may be */
	dex_check_payload_size(VARSIZE_ANY_EXHDR(doc), "a definition");
	(void) dex_parse_definition(doc, true);

	values[0] = CStringGetTextDatum(name);
	values[1] = Int32GetDatum(version);
	values[2] = JsonbPGetDatum(doc);
	values[3] = ObjectIdGetDatum(definition_caller);
	SPI_connect();
	/* a new version is its owners' to make: grants name every version */
	if (dex_is_definition(name))
		dex_check_owns_definition(name, definition_caller, "create a version of");
	dex_spi_exec(&insert_definition_plan, values, NULL, 0);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("definition \"%s\" version %d exists", name, version),
				 errhint("Definitions do not change: create the next version.")));
	dex_definitions_changed();
	SPI_finish();
	dex_wake_interpreter_at_commit();	/* it serves the new pair from its next pass */
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(dex_create_definition);
Datum
dex_create_definition(PG_FUNCTION_ARGS)
{
	definition_caller = GetUserId();
	return dex_api_call(fcinfo, create_definition);
}

static DexPlan take_user_task_plan = {
	"DELETE FROM dex.user_task WHERE run_id = $1 AND step = $2 RETURNING wait_id",
	2, {UUIDOID, TEXTOID}
};

static DexPlan run_exists_plan = {
	"SELECT queue_id FROM dex.workflow_run WHERE id = $1",
	1, {UUIDOID}
};

static Datum
complete_user_task(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *run_id;
	char	   *step;
	Jsonb	   *vars = NULL;
	Datum		values[2];
	int32		wait_id;

	require_1_7();
	dex_arg_not_null(fcinfo, 0, "run id");
	run_id = PG_GETARG_UUID_P(0);
	step = dex_arg_name(fcinfo, 1, "step id");
	if (!PG_ARGISNULL(2))
	{
		vars = PG_GETARG_JSONB_P(2);
		if (!JsonContainerIsObject(&vars->root))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the variables of a user task's completion must be a JSON object")));
	}

	SPI_connect();
	dex_wait_for_rebuild();
	values[0] = UUIDPGetDatum(run_id);
	values[1] = CStringGetTextDatum(step);
	dex_spi_exec(&run_exists_plan, values, NULL, 1);
	if (SPI_processed == 0 || !dex_may_use_queue_id((int32) dex_spi_getint64(0, 1)))
		dex_no_such_run(run_id);
	dex_spi_exec(&take_user_task_plan, values, NULL, 1);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("run %s has no user task waiting at step \"%s\"", dex_uuid_to_cstring(run_id), step),
				 errdetail("The step is not a user task the run waits at, or its task was completed already.")));
	wait_id = (int32) dex_spi_getint64(0, 1);
	if (!dex_send_event(run_id, psprintf("user:%s:%d", step, wait_id), vars))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the user task of run %s at step \"%s\" was completed already",
						dex_uuid_to_cstring(run_id), step)));
	SPI_finish();
	PG_RETURN_VOID();
}

DEX_API_ENTRY_POINT(dex_complete_user_task, complete_user_task);

/* ----------------------------------------------------------------
 * Reading definitions and user tasks
 * ----------------------------------------------------------------
 */

/* every row of the statement into the set the function returns */
static void
return_rows(FunctionCallInfo fcinfo, DexPlan *plan, Datum *values, const char *nulls)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			natts;

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	natts = rsinfo->setDesc->natts;
	dex_spi_exec(plan, values, nulls, 0);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		Datum		out[16];
		bool		outnulls[16];

		for (int c = 0; c < natts; c++)
			out[c] = dex_spi_getdatum((int) r, c + 1, &outnulls[c]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnulls);
	}
}

static void
require_1_7(void)
{
	if (!dex_column_exists("user_task", "wait_id"))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("workflows defined in JSON need dex 1.7"),
				 errhint("ALTER EXTENSION dex UPDATE TO '1.7'.")));
}

static DexPlan get_definition_plan = {
	"SELECT definition FROM dex.definition WHERE name = $1 AND ($2::integer IS NULL OR version = $2) "
	"ORDER BY version DESC LIMIT 1",
	2, {TEXTOID, INT4OID}
};

static Datum
get_definition(PG_FUNCTION_ARGS)
{
	Datum		values[2];
	char		nulls[2] = "  ";
	bool		isnull = true;
	Datum		result = (Datum) 0;

	require_1_7();
	values[0] = CStringGetTextDatum(dex_arg_name(fcinfo, 0, "definition name"));
	values[1] = PG_ARGISNULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1);
	nulls[1] = PG_ARGISNULL(1) ? 'n' : ' ';
	SPI_connect();
	dex_spi_exec(&get_definition_plan, values, nulls, 1);
	if (SPI_processed > 0)
	{
		result = dex_spi_getdatum(0, 1, &isnull);
		if (!isnull)
			result = SPI_datumTransfer(result, false, -1);
	}
	SPI_finish();
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

static DexPlan list_definitions_plan = {
	"SELECT name, version, owner, created_at, jsonb_array_length(definition -> 'steps') "
	"FROM dex.definition WHERE $1::text IS NULL OR name = $1 ORDER BY name, version",
	1, {TEXTOID}
};

static Datum
list_definitions(PG_FUNCTION_ARGS)
{
	Datum		values[1] = {PG_ARGISNULL(0) ? (Datum) 0 : PG_GETARG_DATUM(0)};

	require_1_7();
	SPI_connect();
	return_rows(fcinfo, &list_definitions_plan, values, PG_ARGISNULL(0) ? "n" : " ");
	SPI_finish();
	return (Datum) 0;
}

static DexPlan lock_definition_plan = {
	"SELECT 1 FROM dex.definition WHERE name = $1 AND version = $2 FOR UPDATE",
	2, {TEXTOID, INT4OID}
};

/* dex.workflow_run has no index on the workflow: this reads every run (an administrator's rare call) */
static DexPlan definition_in_use_plan = {
	"SELECT 1 FROM dex.workflow_run WHERE workflow_name = $1 AND workflow_version = $2 "
	"AND status <> ALL (" DEX_ENDED_STATUSES_SQL ") LIMIT 1",
	2, {TEXTOID, INT4OID}
};

static DexPlan delete_definition_plan = {
	"DELETE FROM dex.definition WHERE name = $1 AND version = $2",
	2, {TEXTOID, INT4OID}
};

static Datum
delete_definition(PG_FUNCTION_ARGS)
{
	char	   *name;
	int32		version;
	Datum		values[2];

	require_1_7();
	name = dex_arg_name(fcinfo, 0, "definition name");
	version = dex_arg_int32(fcinfo, 1, "version");
	values[0] = CStringGetTextDatum(name);
	values[1] = Int32GetDatum(version);
	SPI_connect();
	dex_spi_exec(&lock_definition_plan, values, NULL, 1);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("definition \"%s\" version %d does not exist", name, version)));
	dex_spi_exec(&definition_in_use_plan, values, NULL, 1);
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("definition \"%s\" version %d is used by runs that have not ended", name, version),
				 errhint("Wait for them to end, or cancel or terminate them.")));
	dex_spi_exec(&delete_definition_plan, values, NULL, 0);
	/* the grants go with the last version: a definition made later under the name starts with none */
	if (dex_definition_grants_exist())
		dex_spi_exec(&drop_grants_plan, values, NULL, 0);
	dex_definitions_changed();
	SPI_finish();
	PG_RETURN_VOID();
}

/* ----------------------------------------------------------------
 * Grants (1.9) and the run of a step
 * ----------------------------------------------------------------
 */

static DexPlan grant_definition_plan = {
	"INSERT INTO dex.definition_grant (name, role, granted_by) VALUES ($1, $2, $3) "
	"ON CONFLICT (name, role) DO NOTHING",
	3, {TEXTOID, OIDOID, OIDOID}
};

static DexPlan revoke_definition_plan = {
	"DELETE FROM dex.definition_grant WHERE name = $1 AND role = $2",
	2, {TEXTOID, OIDOID}
};

/* dex.grant_definition(name, role) and dex.revoke_definition(name, role) */
static Datum
grant_or_revoke(FunctionCallInfo fcinfo, bool grant)
{
	char	   *name = dex_arg_name(fcinfo, 0, "definition name");
	Oid			role;
	Datum		values[3];

	dex_arg_not_null(fcinfo, 1, "role");
	role = PG_GETARG_OID(1);
	if (!dex_definition_grants_exist())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("grants of definitions need dex 1.9"),
				 errhint("ALTER EXTENSION dex UPDATE TO '1.9'.")));
	SPI_connect();
	dex_check_owns_definition(name, dex_access_caller(), grant ? "grant" : "revoke");
	values[0] = CStringGetTextDatum(name);
	values[1] = ObjectIdGetDatum(role);
	values[2] = ObjectIdGetDatum(dex_access_caller());
	dex_spi_exec(grant ? &grant_definition_plan : &revoke_definition_plan, values, NULL, 0);
	if (!grant && SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("role %s has no grant of definition \"%s\"", GetUserNameFromId(role, false), name)));
	dex_definitions_changed();
	SPI_finish();
	PG_RETURN_VOID();
}

static Datum
grant_definition(PG_FUNCTION_ARGS)
{
	return grant_or_revoke(fcinfo, true);
}

static Datum
revoke_definition(PG_FUNCTION_ARGS)
{
	return grant_or_revoke(fcinfo, false);
}

/*
 * dex.step_context(): the run, definition, version and step of the SQL step
 * that calls it (engine/interpret.c), NULLs outside one.  It runs with the
 * caller's rights: it reads no table.
 */
PG_FUNCTION_INFO_V1(dex_step_context);
Datum
dex_step_context(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[4];
	bool		nulls[4] = {true, true, true, true};
	const char *run_id;
	const char *definition;
	int32		version;
	const char *step;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "dex.step_context must return a record");
	if (dex_interpret_step_context(&run_id, &definition, &version, &step))
	{
		values[0] = DirectFunctionCall1(uuid_in, CStringGetDatum(run_id));
		values[1] = CStringGetTextDatum(definition);
		values[2] = Int32GetDatum(version);
		values[3] = CStringGetTextDatum(step);
		memset(nulls, false, sizeof(nulls));
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}

static DexPlan user_tasks_plan = {
	"SELECT u.run_id, u.step, u.assignee, u.candidate_groups, u.form, r.workflow_name, "
	"r.workflow_version, u.created_at "
	"FROM dex.user_task u JOIN dex.workflow_run r ON r.id = u.run_id "
	"WHERE ($1::uuid IS NULL OR u.run_id = $1) AND ($2::text IS NULL OR u.assignee = $2) "
	"AND ($3::text IS NULL OR $3 = ANY (u.candidate_groups)) "
	"AND r.status <> ALL (" DEX_ENDED_STATUSES_SQL ") "
	"AND ($4::integer[] IS NULL OR r.queue_id = ANY ($4)) "
	"ORDER BY u.created_at, u.run_id, u.step",
	4, {UUIDOID, TEXTOID, TEXTOID, INT4ARRAYOID}
};

static Datum
user_tasks(PG_FUNCTION_ARGS)
{
	Datum		values[4];
	char		nulls[4];

	require_1_7();
	for (int i = 0; i < 3; i++)
	{
		values[i] = PG_ARGISNULL(i) ? (Datum) 0 : PG_GETARG_DATUM(i);
		nulls[i] = PG_ARGISNULL(i) ? 'n' : ' ';
	}
	SPI_connect();
	/* NULL: the caller may use every queue */
	values[3] = dex_usable_queue_ids_datum();
	nulls[3] = values[3] == (Datum) 0 ? 'n' : ' ';
	return_rows(fcinfo, &user_tasks_plan, values, nulls);
	SPI_finish();
	return (Datum) 0;
}

DEX_API_ENTRY_POINT(dex_get_definition, get_definition);
DEX_API_ENTRY_POINT(dex_list_definitions, list_definitions);
DEX_API_ENTRY_POINT(dex_delete_definition, delete_definition);
DEX_API_ENTRY_POINT(dex_user_tasks, user_tasks);
DEX_API_ENTRY_POINT(dex_grant_definition, grant_definition);
DEX_API_ENTRY_POINT(dex_revoke_definition, revoke_definition);
