/*-------------------------------------------------------------------------
 *
 * interpret.c
 *	  The interpreter of workflows defined in JSON (1.7): from a definition
 *	  and a workflow task of one of its runs, the commands that take the run
 *	  on, as a coded workflow would return them.
 *
 * State.  The interpreter keeps its state in the run's history, as a marker
 * ("dex.state") that each of its workflow tasks records last: the variables
 * (one JSON object), the tokens (where the run is: a step, and the id of the
 * command it waits on, 0 when it does not wait), the arrivals at each join
 * and the signals that came before a step waited for them.  A task reads the
 * last marker of the history, applies the events recorded after it (results
 * of activities and children, timers, external events, a cancel request) to
 * the tokens waiting for them, then moves every token that does not wait
 * until each waits or the run ends:
 *	  sql		runs the statement now (below), merges its result, goes on;
 *				recorded as a side effect "sql:<step>"
 *	  service	scheduleActivity; its result is merged when it completes
 *	  gateway	the first condition (a SQL/JSON path over the variables)
 *				that holds (condition_holds), else the default; else the run fails
 *	  end		completeRun with the output (a path over the variables, or
 *				them all), or failRun
 *	  timer		startTimer, its delay from a duration or a date
 *	  parallel	one token per branch; join: the tokens wait there until one
 *				came by each way into it, then one goes on
 *	  signal	waitExternalEvent for the signal (a signal that came first is
 *				taken at once), with its timeout; an event "<signal>" or
 *				"<signal>:<anything>" is the signal (ids are delivered once
 *				per run: a loop signals its step again with another suffix)
 *	  user		waitExternalEvent "user:<step>:<wait id>", and a row of
 *				dex.user_task that dex.complete_user_task deletes as it sends
 *				that event: a second completion finds no row (a run reset to
 *				a wait gets its row back: restore_user_tasks)
 *	  call		startChildRun of the named definition
 * A result that is a JSON object is merged into the variables; with
 * resultVariable, or when it is not an object, it is set as one variable
 * (resultVariable, else the step's id).  Because the state is in the
 * history, a reset, a crash or a lost lease replays nothing twice: a task
 * that is not recorded leaves the previous marker in force.
 *
 * SQL steps run in the transaction that records the task's completion,
 * with the privileges of the definition's owner as a security-restricted
 * operation (as PostgreSQL runs the functions of an index it maintains: no
 * SET ROLE, no temporary objects; every setting the statement changed is
 * undone after it, and what else it could leave in the interpreter's
 * session is undone too, forget_session_state; the caller runs each
 * owner's definitions in transactions of their own), search_path
 * pinned to pg_catalog, the definition's searchPath (default public), pg_temp: so their
 * effects commit exactly when the step is recorded.  The variables are $1
 * (jsonb).  A statement is prepared the first time it runs and kept in its
 * DexStep for the caller's SPI connection (the caller keeps a definition no
 * longer than that); a prepared plan is not tied to the role that prepared
 * it (privileges are checked as it runs), and runs with the same path.  A statement's error fails the task, and the caller
 * (workers/interpreter.c) fails the run with it.
 *
 * Runs in the caller's transaction and SPI connection; it writes only
 * dex.user_task (and what SQL steps do).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "commands/prepare.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/syscache.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "engine/engine.h"

/*
 * The most steps one task takes, beyond the definition's number of steps,
 * before it decides the definition loops: a long linear definition (each
 * step once) never trips it, a loop without a wait does, at any size.
 */
#define MAX_STEPS_PER_TASK 10000

typedef struct Token
{
	int			step;
	int32		wait;			/* the command it waits on; 0: ready */
} Token;

typedef struct Interp
{
	const DexDefinition *def;
	const Dex__V1__WorkflowTask *task;
	Jsonb	   *vars;
	Token	   *tokens;
	int			n_tokens;
	int			max_tokens;
	int		   *arrived;		/* per step: tokens waiting at a join */
	Jsonb	   *signals;		/* signals not yet waited for, in the order they came:
								 * [{"id", "payload"}] */
	int32		last_id;		/* the last command id of the run */
	Dex__V1__Command **cmds;
	int			n_cmds;
	int			max_cmds;
	bool		ended;
} Interp;

/* the step being run, for the caller's error message */
static const char *current_step = NULL;

const char *
dex_interpret_current_step(void)
{
	return current_step;
}

/* the SQL step running now (see run_sql): for dex.step_context() */
static const Interp *sql_step_interp = NULL;
static const DexStep *sql_step = NULL;

/*
 * The run, definition, version and step of the SQL step that runs now;
 * false outside one.
 */
bool
dex_interpret_step_context(const char **run_id, const char **definition, int32 *version,
						   const char **step)
{
	if (sql_step == NULL)
		return false;
	*run_id = sql_step_interp->task->run_id;
	*definition = sql_step_interp->task->workflow_name;
	*version = sql_step_interp->task->workflow_version;
	*step = sql_step->id;
	return true;
}

/* ----------------------------------------------------------------
 * JSON values
 * ----------------------------------------------------------------
 */

static Jsonb *
jsonb_from_text(const char *s)
{
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(s)));
}

static char *
jsonb_text(Jsonb *j)
{
	return JsonbToCString(NULL, &j->root, VARSIZE(j));
}

static bool
jsonb_is_object(Jsonb *j)
{
	return JsonContainerIsObject(&j->root);
}

/* s as a JSON string */
static char *
quoted(const char *s)
{
	StringInfoData buf;

	initStringInfo(&buf);
	escape_json(&buf, s);
	return buf.data;
}

/* {key: value} */
static Jsonb *
single_key(const char *key, Jsonb *value)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	escape_json(&buf, key);
	appendStringInfoChar(&buf, ':');
	appendStringInfoString(&buf, value != NULL ? jsonb_text(value) : "null");
	appendStringInfoChar(&buf, '}');
	return jsonb_from_text(buf.data);
}

static Jsonb *
concat(Jsonb *a, Jsonb *b)
{
	return DatumGetJsonbP(DirectFunctionCall2(jsonb_concat, JsonbPGetDatum(a), JsonbPGetDatum(b)));
}

/* A step's result into the variables (see the header) */
static void
merge_result(Interp *in, const DexStep *step, Jsonb *result)
{
	if (result == NULL)
		return;
	if (step->result_variable != NULL)
		in->vars = concat(in->vars, single_key(step->result_variable, result));
	else if (jsonb_is_object(result))
		in->vars = concat(in->vars, result);
	else
		in->vars = concat(in->vars, single_key(step->id, result));
}

static DexPlan path_first_plan = {
	"SELECT jsonb_path_query_first($1, $2::jsonpath)",
	2, {JSONBOID, TEXTOID}
};

/*
 * A condition holds when the path's first item is true, or is an item that is
 * not a boolean: a predicate ("$.amount > 100") and a filter
 * ("$ ? (@.amount > 100)") alike.
 */
static DexPlan condition_plan = {
	"SELECT CASE jsonb_typeof(f) WHEN 'boolean' THEN f = 'true' ELSE f IS NOT NULL END "
	"FROM jsonb_path_query_first($1, $2::jsonpath) AS f",
	2, {JSONBOID, TEXTOID}
};

/* The first item a SQL/JSON path gives over the variables; NULL: none */
static Jsonb *
path_first(Interp *in, const char *path)
{
	Datum		values[2] = {JsonbPGetDatum(in->vars), CStringGetTextDatum(path)};
	bool		isnull;
	Datum		d;

	dex_spi_exec(&path_first_plan, values, NULL, 1);
	d = dex_spi_getdatum(0, 1, &isnull);
	return isnull ? NULL : DatumGetJsonbPCopy(d);
}

static bool
condition_holds(Interp *in, const char *path)
{
	Datum		values[2] = {JsonbPGetDatum(in->vars), CStringGetTextDatum(path)};

	dex_spi_exec(&condition_plan, values, NULL, 1);
	return dex_spi_getbool(0, 1);
}

/* ----------------------------------------------------------------
 * Commands
 * ----------------------------------------------------------------
 */

static Dex__V1__Command *
add_command(Interp *in)
{
	Dex__V1__Command *cmd = palloc(sizeof(*cmd));

	dex__v1__command__init(cmd);
	cmd->id = ++in->last_id;
	if (in->n_cmds == in->max_cmds)
	{
		in->max_cmds *= 2;
		in->cmds = repalloc(in->cmds, sizeof(Dex__V1__Command *) * in->max_cmds);
	}
	in->cmds[in->n_cmds++] = cmd;
	return cmd;
}

static Dex__V1__Payload *
payload(Jsonb *j)
{
	return j != NULL ? dex_payload_from_jsonb(j) : NULL;
}

static Google__Protobuf__Duration *
duration_ms(int64 ms)
{
	Google__Protobuf__Duration *d = palloc(sizeof(*d));

	google__protobuf__duration__init(d);
	d->seconds = ms / 1000;
	d->nanos = (int32) ((ms % 1000) * 1000000);
	return d;
}

/*
 * A time of a step as milliseconds from now: an interval (or a number of
 * seconds), or with is_date a timestamp; literal, or a path over the
 * variables ("$...").  Never negative.
 */
static int64
time_ms(Interp *in, const char *spec, bool is_date, const char *what)
{
	char	   *text = unconstify(char *, spec);
	int64		ms;

	if (spec[0] == '$')
	{
		Jsonb	   *v = path_first(in, spec);
		JsonbValue	scalar;

		if (v == NULL || !JsonbExtractScalar(&v->root, &scalar) ||
			(scalar.type != jbvString && (is_date || scalar.type != jbvNumeric)))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s %s gives %s, not %s", what, spec,
							v != NULL ? jsonb_text(v) : "nothing",
							is_date ? "a timestamp" : "an interval or a number of seconds")));
		if (scalar.type == jbvNumeric)
			return (int64) (DatumGetFloat8(DirectFunctionCall1(numeric_float8,
															   NumericGetDatum(scalar.val.numeric))) * 1000.0);
		text = pnstrdup(scalar.val.string.val, scalar.val.string.len);
	}
	if (is_date)
	{
		TimestampTz at = DatumGetTimestampTz(DirectFunctionCall3(timestamptz_in, CStringGetDatum(text),
																 ObjectIdGetDatum(InvalidOid),
																 Int32GetDatum(-1)));

		ms = (at - GetCurrentTimestamp()) / 1000;
	}
	else
	{
		Datum		iv = DirectFunctionCall3(interval_in, CStringGetDatum(text),
											 ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));

		ms = (int64) (DatumGetFloat8(DirectFunctionCall2(interval_part, CStringGetTextDatum("epoch"),
														 iv)) * 1000.0);
	}
	return ms < 0 ? 0 : ms;
}

static Google__Protobuf__Duration *
opt_duration(Interp *in, const char *spec, const char *what)
{
	return spec != NULL ? duration_ms(time_ms(in, spec, false, what)) : NULL;
}

/* ----------------------------------------------------------------
 * Tokens
 * ----------------------------------------------------------------
 */

static void
add_token(Interp *in, int step, int32 wait)
{
	if (in->n_tokens == in->max_tokens)
	{
		in->max_tokens *= 2;
		in->tokens = repalloc(in->tokens, sizeof(Token) * in->max_tokens);
	}
	in->tokens[in->n_tokens].step = step;
	in->tokens[in->n_tokens].wait = wait;
	in->n_tokens++;
}

static void
remove_token(Interp *in, int i)
{
	in->tokens[i] = in->tokens[--in->n_tokens];
}

static Token *
waiting_on(Interp *in, int32 id)
{
	for (int i = 0; i < in->n_tokens; i++)
		if (in->tokens[i].wait == id && id != 0)
			return &in->tokens[i];
	return NULL;
}

static void
go_on(Token *t, int step)
{
	t->step = step;
	t->wait = 0;
}

static void
fail_run(Interp *in, const char *message, const char *type)
{
	Dex__V1__Command *cmd = add_command(in);

	cmd->kind_case = DEX__V1__COMMAND__KIND_FAIL_RUN;
	cmd->fail_run = palloc(sizeof(Dex__V1__FailRun));
	dex__v1__fail_run__init(cmd->fail_run);
	cmd->fail_run->failure = dex_new_failure(message, type, true);
	in->ended = true;
}

/* ----------------------------------------------------------------
 * The state marker
 * ----------------------------------------------------------------
 */

#define STATE_MARKER "dex.state"

static Jsonb *
state_json(Interp *in)
{
	StringInfoData buf;
	bool		first = true;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"vars\":");
	appendStringInfoString(&buf, jsonb_text(in->vars));
	appendStringInfoString(&buf, ",\"tokens\":[");
	for (int i = 0; i < in->n_tokens; i++)
	{
		if (i > 0)
			appendStringInfoChar(&buf, ',');
		appendStringInfoChar(&buf, '[');
		escape_json(&buf, in->def->steps[in->tokens[i].step].id);
		appendStringInfo(&buf, ",%d]", in->tokens[i].wait);
	}
	appendStringInfoString(&buf, "],\"arrived\":{");
	for (int s = 0; s < in->def->n_steps; s++)
		if (in->arrived[s] > 0)
		{
			if (!first)
				appendStringInfoChar(&buf, ',');
			escape_json(&buf, in->def->steps[s].id);
			appendStringInfo(&buf, ":%d", in->arrived[s]);
			first = false;
		}
	appendStringInfoString(&buf, "},\"signals\":");
	appendStringInfoString(&buf, jsonb_text(in->signals));
	appendStringInfoChar(&buf, '}');
	return jsonb_from_text(buf.data);
}

static int
step_by_id(const DexDefinition *def, const char *id, int len)
{
	for (int i = 0; i < def->n_steps; i++)
		if (strlen(def->steps[i].id) == len && strncmp(def->steps[i].id, id, len) == 0)
			return i;
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("the state of the run names step \"%.*s\", which its definition does not have", len, id)));
}

static Jsonb *
key_jsonb(JsonbContainer *obj, const char *key)
{
	JsonbValue *v = getKeyJsonValueFromContainer(obj, key, strlen(key), NULL);

	return v != NULL ? JsonbValueToJsonb(v) : NULL;
}

static void
read_state(Interp *in, const char *text)
{
	Jsonb	   *st = jsonb_from_text(text);
	Jsonb	   *tokens = key_jsonb(&st->root, "tokens");
	Jsonb	   *arrived = key_jsonb(&st->root, "arrived");
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;

	in->vars = key_jsonb(&st->root, "vars");
	in->signals = key_jsonb(&st->root, "signals");
	for (int i = 0; i < JsonContainerSize(&tokens->root); i++)
	{
		JsonbValue *t = getIthJsonbValueFromContainer(&tokens->root, i);
		JsonbValue *id = getIthJsonbValueFromContainer(t->val.binary.data, 0);
		JsonbValue *wait = getIthJsonbValueFromContainer(t->val.binary.data, 1);

		add_token(in, step_by_id(in->def, id->val.string.val, id->val.string.len),
				  DatumGetInt32(DirectFunctionCall1(numeric_int4, NumericGetDatum(wait->val.numeric))));
	}
	it = JsonbIteratorInit(&arrived->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		if (tok == WJB_KEY)
		{
			int			s = step_by_id(in->def, v.val.string.val, v.val.string.len);

			tok = JsonbIteratorNext(&it, &v, true);
			in->arrived[s] = DatumGetInt32(DirectFunctionCall1(numeric_int4, NumericGetDatum(v.val.numeric)));
		}
}

/* ----------------------------------------------------------------
 * SQL steps
 * ----------------------------------------------------------------
 */

/* A statement's first row as JSON: a json or jsonb column alone, else the row as an object */
static Jsonb *
row_result(void)
{
	TupleDesc	desc = SPI_tuptable->tupdesc;
	HeapTuple	row = SPI_tuptable->vals[0];
	bool		isnull;

	if (desc->natts == 1 && (TupleDescAttr(desc, 0)->atttypid == JSONBOID ||
							 TupleDescAttr(desc, 0)->atttypid == JSONOID))
	{
		Datum		d = SPI_getbinval(row, desc, 1, &isnull);

		if (isnull)
			return NULL;
		if (TupleDescAttr(desc, 0)->atttypid == JSONBOID)
			return DatumGetJsonbPCopy(d);
		return jsonb_from_text(TextDatumGetCString(d));
	}
	desc = BlessTupleDesc(CreateTupleDescCopy(desc));
	return jsonb_from_text(TextDatumGetCString(DirectFunctionCall1(row_to_json,
																   heap_copy_tuple_as_datum(row, desc))));
}

/*
 * A step that traps the statement timeout's cancel (a plpgsql block with
 * EXCEPTION WHEN query_canceled) could run on for ever, holding up every run
 * of the database.  RUNAWAY_GRACE_MS past the timeout the interpreter stops
 * itself (FATAL, which no step can trap; its transaction, the work of the
 * owner's runs in the pass, is undone), noting the run and the step in
 * shared memory as it exits; the interpreter the launcher starts next fails
 * that run with 57014 instead of running the step again
 * (workers/interpreter.c).
 */
#define RUNAWAY_GRACE_MS 1000

static TimeoutId runaway_timeout = MAX_TIMEOUTS;
static volatile sig_atomic_t runaway = false;
static pg_uuid_t running_run;
static char running_step[NAMEDATALEN];

/* The timeout handler: a signal handler, so it only asks for the exit */
static void
runaway_step_timeout(void)
{
	runaway = true;
	ProcDiePending = true;
	InterruptPending = true;
	SetLatch(MyLatch);
}

/* On the way out (before_shmem_exit): the note for the next interpreter */
static void
note_runaway_at_exit(int code, Datum arg)
{
	if (!runaway)
		return;
	dex_interpreter_note_runaway(&running_run, running_step);
	ereport(LOG,
			(errmsg("dex interpreter stops: SQL step \"%s\" of run %s ran past dex.sql_step_timeout and trapped its cancel",
					running_step, dex_uuid_to_cstring(&running_run)),
			 errdetail("The run fails with SQLSTATE 57014 when the interpreter starts again.")));
}

/*
 * A step holds up every run of the database while it runs (one
 * interpreter per database): dex.sql_step_timeout bounds its statement,
 * with PostgreSQL's own statement timeout, which ends it with an ERROR, and
 * for a step that traps that, with the interpreter's exit (above).
 */
static int
execute_step_statement(Interp *in, const DexStep *step, SPIPlanPtr plan, Datum *values)
{
	volatile int rc = 0;

	if (dex_sql_step_timeout_ms > 0)
	{
		if (runaway_timeout == MAX_TIMEOUTS)
		{
			runaway_timeout = RegisterTimeout(USER_TIMEOUT, runaway_step_timeout);
			before_shmem_exit(note_runaway_at_exit, (Datum) 0);
		}
		running_run = *DatumGetUUIDP(DirectFunctionCall1(uuid_in, CStringGetDatum(in->task->run_id)));
		strlcpy(running_step, step->id, NAMEDATALEN);
		enable_timeout_after(STATEMENT_TIMEOUT, dex_sql_step_timeout_ms);
		enable_timeout_after(runaway_timeout, dex_sql_step_timeout_ms + RUNAWAY_GRACE_MS);
	}
	PG_TRY();
	{
		rc = SPI_execute_plan(plan, values, NULL, false, 1);
	}
	PG_FINALLY();
	{
		if (dex_sql_step_timeout_ms > 0)
		{
			disable_timeout(runaway_timeout, false);
			disable_timeout(STATEMENT_TIMEOUT, false);
			/* it fired as the statement finished: the step is done, nothing to cancel */
			if (get_timeout_indicator(STATEMENT_TIMEOUT, true))
				QueryCancelPending = false;
		}
	}
	PG_END_TRY();
	return rc;
}

static Jsonb *
run_sql_as_owner(Interp *in, const DexStep *step)
{
	Oid			user;
	int			sec;
	int			level;
	Datum		values[1] = {JsonbPGetDatum(in->vars)};
	Jsonb	   *result = NULL;
	DexStep    *prepared = unconstify(DexStep *, step);
	int			rc;

	/* a role dropped in another database than its definition's (dex.c refuses it here) */
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(in->def->owner)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("the owner of definition \"%s\" (role %u) no longer exists", in->task->workflow_name,
						in->def->owner),
				 errhint("Create the definition again as a role that exists, as its next version.")));
	GetUserIdAndSecContext(&user, &sec);
	level = NewGUCNestLevel();
	(void) set_config_option("search_path",
							 psprintf("pg_catalog, %s, pg_temp",
									  in->def->search_path != NULL ? in->def->search_path : "public"),
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	/* the planner settings of dex's own statements are not the owner's */
	(void) set_config_option("enable_seqscan", "on", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("enable_hashjoin", "on", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("enable_mergejoin", "on", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	SetUserIdAndSecContext(in->def->owner,
						   sec | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
	/* on error the abort of the caller's subtransaction gives both back */
	if (prepared->sql_plan == NULL)
	{
		Oid			types[1] = {JSONBOID};

		/* under the owner and the pinned search_path, as it runs */
		prepared->sql_plan = SPI_prepare(step->sql, 1, types);
		if (prepared->sql_plan == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the statement of SQL step \"%s\" failed: %s", step->id,
							SPI_result_code_string(SPI_result))));
	}
	rc = execute_step_statement(in, step, prepared->sql_plan, values);
	if (rc < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the statement of SQL step \"%s\" failed: %s", step->id, SPI_result_code_string(rc))));
	if (SPI_tuptable != NULL && SPI_processed > 0)
		result = row_result();
	SetUserIdAndSecContext(user, sec);
	/* every setting the statement changed goes back, as after a restricted operation */
	AtEOXact_GUC(false, level);
	return result;
}

/*
 * Constraints are checked at the end of each statement of a step: PostgreSQL
 * refuses to leave a deferred check past the end of a security-restricted
 * operation (42501 "cannot fire deferred trigger within security-restricted
 * operation"), which a step is.  So, before each step, every constraint is
 * made IMMEDIATE for the transaction: INITIALLY DEFERRED foreign keys (as
 * Django makes them) are checked when the statement ends instead of failing,
 * and a SET CONSTRAINTS ... DEFERRED of an earlier step no longer applies.
 * (Nothing is pending then: no step can leave a deferred check, and dex's
 * own tables have no deferrable constraint.)
 */
static void
check_constraints_at_once(void)
{
	ConstraintsSetStmt all_immediate;

	memset(&all_immediate, 0, sizeof(all_immediate));
	all_immediate.type = T_ConstraintsSetStmt;
	all_immediate.constraints = NIL;
	all_immediate.deferred = false;
	AfterTriggerSetState(&all_immediate);
}

/*
 * What a step may leave in the interpreter's session beyond its transaction
 * (its settings go back with the statement, run_sql_as_owner; temporary
 * objects, LISTEN and SET ROLE are refused to a security-restricted
 * operation): session advisory locks are released, prepared statements
 * dropped, and the random seed that setseed() may have set replaced by a
 * random one, so that no other step, of this owner or another, meets them.
 */
static void
forget_session_state(void)
{
	uint64		seed;

	LockReleaseSession(USER_LOCKMETHOD);
	DropAllPreparedStatements();
	if (!pg_strong_random(&seed, sizeof(seed)))
		seed = (uint64) GetCurrentTimestamp() ^ (uint64) MyProcPid;
	/* setseed takes a seed in [-1, 1]: 53 random bits of it */
	(void) DirectFunctionCall1(setseed, Float8GetDatum((double) (seed >> 11) / (double) (UINT64CONST(1) << 52) - 1.0));
}

/*
 * A SQL step's statement, run as the definition's owner (run_sql_as_owner);
 * whether it succeeds or fails, nothing of it stays in the session.
 */
static Jsonb *
run_sql(Interp *in, const DexStep *step)
{
	Jsonb	   *volatile result = NULL;

	check_constraints_at_once();
	sql_step_interp = in;
	sql_step = step;
	PG_TRY();
	{
		result = run_sql_as_owner(in, step);
	}
	PG_FINALLY();
	{
		sql_step = NULL;
		sql_step_interp = NULL;
		forget_session_state();
	}
	PG_END_TRY();
	return result;
}

typedef struct SqlAttempt
{
	Interp	   *in;
	const DexStep *step;
	Jsonb	   *result;
} SqlAttempt;

static bool
sql_attempt(void *arg)
{
	SqlAttempt *a = arg;

	a->result = run_sql(a->in, a->step);
	return true;
}

/*
 * A SQL step with retryCount: each attempt in a subtransaction, the next
 * one at once after a failed one (for serialization failures, deadlocks,
 * lock timeouts), the last one's error raised.
 */
static Jsonb *
run_sql_retrying(Interp *in, const DexStep *step)
{
	SqlAttempt	a = {in, step, NULL};
	ErrorData  *error = NULL;

	for (int attempt = 0; attempt <= step->retry_count; attempt++)
	{
		if (dex_subtransaction(sql_attempt, &a, &error))
			return a.result;
		CHECK_FOR_INTERRUPTS();
	}
	ReThrowError(error);
}

/* ----------------------------------------------------------------
 * Steps
 * ----------------------------------------------------------------
 */

static Jsonb *
step_input(Interp *in, const DexStep *step)
{
	return step->input != NULL ? path_first(in, step->input) : in->vars;
}

static int32
schedule_activity(Interp *in, const DexStep *step)
{
	Dex__V1__Command *cmd = add_command(in);
	Dex__V1__ScheduleActivity *sa = palloc(sizeof(*sa));

	dex__v1__schedule_activity__init(sa);
	sa->name = step->activity;
	sa->queue = step->queue;
	sa->argument = payload(step_input(in, step));
	if (step->retry_policy != NULL)
		sa->retry_policy = (Dex__V1__RetryPolicy *)
			dex_pb_from_jsonb(&dex__v1__retry_policy__descriptor, step->retry_policy, "retryPolicy");
	else if (step->retry_count >= 0)
	{
		sa->retry_policy = palloc(sizeof(Dex__V1__RetryPolicy));
		dex__v1__retry_policy__init(sa->retry_policy);
		sa->retry_policy->max_attempts = step->retry_count + 1;
	}
	sa->priority = step->priority;
	sa->start_to_close_timeout = opt_duration(in, step->start_to_close, "startToCloseTimeout");
	sa->schedule_to_close_timeout = opt_duration(in, step->schedule_to_close, "scheduleToCloseTimeout");
	sa->heartbeat_timeout = opt_duration(in, step->heartbeat, "heartbeatTimeout");
	cmd->kind_case = DEX__V1__COMMAND__KIND_SCHEDULE_ACTIVITY;
	cmd->schedule_activity = sa;
	return cmd->id;
}

static int32
start_timer(Interp *in, const DexStep *step)
{
	Dex__V1__Command *cmd = add_command(in);

	cmd->kind_case = DEX__V1__COMMAND__KIND_START_TIMER;
	cmd->start_timer = palloc(sizeof(Dex__V1__StartTimer));
	dex__v1__start_timer__init(cmd->start_timer);
	cmd->start_timer->name = step->id;
	cmd->start_timer->delay = duration_ms(step->duration != NULL ?
										  time_ms(in, step->duration, false, "duration") :
										  time_ms(in, step->date, true, "date"));
	return cmd->id;
}

static int32
wait_event(Interp *in, const DexStep *step, char *event_id)
{
	Dex__V1__Command *cmd = add_command(in);

	cmd->kind_case = DEX__V1__COMMAND__KIND_WAIT_EXTERNAL_EVENT;
	cmd->wait_external_event = palloc(sizeof(Dex__V1__WaitExternalEvent));
	dex__v1__wait_external_event__init(cmd->wait_external_event);
	cmd->wait_external_event->event_id = event_id != NULL ? event_id :
		psprintf("user:%s:%d", step->id, cmd->id);
	cmd->wait_external_event->timeout = opt_duration(in, step->timeout, "timeout");
	return cmd->id;
}

#define USER_TASK_INSERT \
	"INSERT INTO dex.user_task (run_id, step, wait_id, assignee, candidate_groups, form) " \
	"SELECT $1, $2, $3, $4, ARRAY(SELECT jsonb_array_elements_text($5)), $6 "

static DexPlan add_user_task_plan = {
	USER_TASK_INSERT
	"ON CONFLICT (run_id, step) DO UPDATE SET wait_id = EXCLUDED.wait_id, assignee = EXCLUDED.assignee, "
	"candidate_groups = EXCLUDED.candidate_groups, form = EXCLUDED.form, created_at = now()",
	6, {UUIDOID, TEXTOID, INT4OID, TEXTOID, JSONBOID, JSONBOID}
};

/*
 * The row of a user task the run waits at, if it has none and its completion
 * was not received: a run reset to a point where it waited there (its
 * history says it waits, the new run has no row)
 */
static DexPlan restore_user_task_plan = {
	USER_TASK_INSERT
	"WHERE NOT EXISTS (SELECT 1 FROM dex.external_event e WHERE e.run_id = $1 "
	"                  AND e.event_id = 'user:' || $2 || ':' || $3) "
	"ON CONFLICT (run_id, step) DO NOTHING",
	6, {UUIDOID, TEXTOID, INT4OID, TEXTOID, JSONBOID, JSONBOID}
};

static DexPlan drop_user_task_plan = {
	"DELETE FROM dex.user_task WHERE run_id = $1 AND step = $2 AND wait_id = $3",
	3, {UUIDOID, TEXTOID, INT4OID}
};

static void
write_user_task(Interp *in, const DexStep *step, int32 id, DexPlan *plan)
{
	Datum		values[6];
	char		nulls[6] = "      ";

	values[0] = DirectFunctionCall1(uuid_in, CStringGetDatum(in->task->run_id));
	values[1] = CStringGetTextDatum(step->id);
	values[2] = Int32GetDatum(id);
	values[3] = step->assignee != NULL ? CStringGetTextDatum(step->assignee) : (Datum) 0;
	nulls[3] = step->assignee != NULL ? ' ' : 'n';
	values[4] = step->candidate_groups != NULL ? JsonbPGetDatum(step->candidate_groups) : (Datum) 0;
	nulls[4] = step->candidate_groups != NULL ? ' ' : 'n';
	values[5] = step->form != NULL ? JsonbPGetDatum(step->form) : (Datum) 0;
	nulls[5] = step->form != NULL ? ' ' : 'n';
	dex_spi_exec(plan, values, nulls, 0);
}

static int32
start_user_task(Interp *in, const DexStep *step)
{
	int32		id = wait_event(in, step, NULL);

	write_user_task(in, step, id, &add_user_task_plan);
	return id;
}

/* Event i of the task: its history, then its new events */
static Dex__V1__WorkflowEvent *
event_at(const Dex__V1__WorkflowTask *task, size_t i)
{
	return i < task->n_history ? task->history[i] : task->new_events[i - task->n_history];
}

/* Whether the run was reset (or restarted) from another: its history starts with the other's */
static bool
was_reset(const Dex__V1__WorkflowTask *task)
{
	size_t		n = task->n_history + task->n_new_events;

	for (size_t i = 0; i < n; i++)
	{
		Dex__V1__WorkflowEvent *ev = event_at(task, i);

		if (ev->subject_case == DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_CREATED)
			return ev->run_created->origin != NULL;
	}
	return false;
}

/*
 * Every user task the run still waits at has its row (restore_user_task_plan).
 * Only for a reset run: elsewhere the row was written when the wait began.
 */
static void
restore_user_tasks(Interp *in)
{
	for (int i = 0; i < in->n_tokens; i++)
	{
		const DexStep *step = &in->def->steps[in->tokens[i].step];

		if (in->tokens[i].wait != 0 && step->type == DEX_STEP_USER)
			write_user_task(in, step, in->tokens[i].wait, &restore_user_task_plan);
	}
}

static DexPlan definition_exists_plan = {
	"SELECT 1 FROM dex.definition WHERE name = $1 AND version = $2",
	2, {TEXTOID, INT4OID}
};

/* Start a run of the definition the step calls; 0 (and the run fails) if there is none */
static int32
start_child(Interp *in, const DexStep *step)
{
	Dex__V1__Command *cmd;
	Datum		values[2] = {CStringGetTextDatum(step->definition), Int32GetDatum(step->version)};

	dex_spi_exec(&definition_exists_plan, values, NULL, 1);
	if (SPI_processed == 0)
	{
		fail_run(in, psprintf("step \"%s\" calls definition \"%s\" version %d, which does not exist",
							  step->id, step->definition, step->version), "dex.NoDefinition");
		return 0;
	}
	/* the calling definition's owner must be allowed to start it (42501 fails the run) */
	dex_check_definition_start(step->definition, step->version, in->def->owner);
	cmd = add_command(in);

	cmd->kind_case = DEX__V1__COMMAND__KIND_START_CHILD_RUN;
	cmd->start_child_run = palloc(sizeof(Dex__V1__StartChildRun));
	dex__v1__start_child_run__init(cmd->start_child_run);
	cmd->start_child_run->workflow_name = step->definition;
	cmd->start_child_run->workflow_version = step->version;
	cmd->start_child_run->argument = payload(step_input(in, step));
	return cmd->id;
}

static void
end_run(Interp *in, const DexStep *step)
{
	Dex__V1__Command *cmd;

	if (step->fails)
	{
		fail_run(in, step->fail_message, step->fail_type != NULL ? step->fail_type : "dex.DefinitionFailed");
		return;
	}
	cmd = add_command(in);
	cmd->kind_case = DEX__V1__COMMAND__KIND_COMPLETE_RUN;
	cmd->complete_run = palloc(sizeof(Dex__V1__CompleteRun));
	dex__v1__complete_run__init(cmd->complete_run);
	cmd->complete_run->result = payload(step->output != NULL ? path_first(in, step->output) : in->vars);
	in->ended = true;
}

static void
record_sql_result(Interp *in, const DexStep *step, Jsonb *result)
{
	Dex__V1__Command *cmd = add_command(in);

	cmd->kind_case = DEX__V1__COMMAND__KIND_RECORD_SIDE_EFFECT;
	cmd->record_side_effect = palloc(sizeof(Dex__V1__RecordSideEffect));
	dex__v1__record_side_effect__init(cmd->record_side_effect);
	cmd->record_side_effect->name = psprintf("sql:%s", step->id);
	cmd->record_side_effect->result = payload(result);
}

/*
 * Whether event id is the signal a step waits for: its name, or its name, a
 * colon and anything (so that a step a loop visits again can be signalled
 * again: external event ids are delivered once per run)
 */
static bool
is_signal(const char *id, const char *signal)
{
	size_t		len = strlen(signal);

	return strncmp(id, signal, len) == 0 && (id[len] == '\0' || id[len] == ':');
}

/* The first kept signal for the step, merged and no longer kept; false if none */
static bool
take_kept_signal(Interp *in, const DexStep *step)
{
	int			n = JsonContainerSize(&in->signals->root);

	for (int i = 0; i < n; i++)
	{
		JsonbValue *kept = getIthJsonbValueFromContainer(&in->signals->root, i);
		JsonbValue *id = getKeyJsonValueFromContainer(kept->val.binary.data, "id", 2, NULL);
		JsonbValue *p = getKeyJsonValueFromContainer(kept->val.binary.data, "payload", 7, NULL);

		if (!is_signal(pnstrdup(id->val.string.val, id->val.string.len), step->signal))
			continue;
		merge_result(in, step, p == NULL || p->type == jbvNull ? NULL : JsonbValueToJsonb(p));
		in->signals = DatumGetJsonbP(DirectFunctionCall2(jsonb_delete_idx, JsonbPGetDatum(in->signals),
														 Int32GetDatum(i)));
		return true;
	}
	return false;
}

/*
 * Take token i one step: it goes on to the next step, waits (wait set), or
 * is gone (a join, a parallel split).  Returns false when the run ended.
 */
static void
take_step(Interp *in, int i)
{
	Token	   *t = &in->tokens[i];
	const DexStep *step = &in->def->steps[t->step];

	current_step = step->id;
	switch (step->type)
	{
		case DEX_STEP_SQL:
			{
				Jsonb	   *result = step->retry_count > 0 ? run_sql_retrying(in, step) :
					run_sql(in, step);

				merge_result(in, step, result);
				record_sql_result(in, step, result);
				go_on(t, step->next);
				break;
			}
		case DEX_STEP_SERVICE:
			t->wait = schedule_activity(in, step);
			break;
		case DEX_STEP_GATEWAY:
			{
				int			to = step->default_next;

				for (int c = 0; c < step->n_conditions; c++)
					if (condition_holds(in, step->when[c]))
					{
						to = step->when_next[c];
						break;
					}
				if (to < 0)
				{
					fail_run(in, psprintf("no condition of gateway \"%s\" holds, and it has no default",
										  step->id), "dex.NoPath");
					return;
				}
				go_on(t, to);
				break;
			}
		case DEX_STEP_END:
			end_run(in, step);
			break;
		case DEX_STEP_TIMER:
			t->wait = start_timer(in, step);
			break;
		case DEX_STEP_PARALLEL:
			{
				int			n = step->n_branches;
				const int  *branches = step->branches;

				remove_token(in, i);
				for (int b = 0; b < n; b++)
					add_token(in, branches[b], 0);
				break;
			}
		case DEX_STEP_JOIN:
			{
				int			j = t->step;

				remove_token(in, i);
				if (++in->arrived[j] >= step->incoming)
				{
					in->arrived[j] = 0;
					add_token(in, step->next, 0);
				}
				break;
			}
		case DEX_STEP_SIGNAL:
			if (take_kept_signal(in, step))
				go_on(t, step->next);
			else
				t->wait = wait_event(in, step, step->signal);
			break;
		case DEX_STEP_USER:
			t->wait = start_user_task(in, step);
			break;
		case DEX_STEP_CALL:
			t->wait = start_child(in, step);
			break;
	}
}

/* ----------------------------------------------------------------
 * Events
 * ----------------------------------------------------------------
 */

static Jsonb *
payload_jsonb(Dex__V1__Payload *p)
{
	return p != NULL ? dex_payload_to_jsonb(p) : NULL;
}

static void
failed(Interp *in, Token *t, const char *what, Dex__V1__Failure *failure)
{
	fail_run(in, psprintf("step \"%s\" failed: %s: %s", in->def->steps[t->step].id, what,
						  failure != NULL && failure->message != NULL ? failure->message : "no message"),
			 failure != NULL && failure->type != NULL && failure->type[0] ? failure->type :
			 "dex.StepFailed");
}

/*
 * A user task that no longer waits has no row: dex.user_tasks lists what
 * waits.  dex.complete_user_task deleted it already; a timeout or the plain
 * event "user:<step>:<wait id>" (dex.send_external_event) did not.
 */
static void
drop_user_task(Interp *in, const DexStep *step, int32 wait)
{
	Datum		values[3] = {DirectFunctionCall1(uuid_in, CStringGetDatum(in->task->run_id)),
	CStringGetTextDatum(step->id), Int32GetDatum(wait)};

	dex_spi_exec(&drop_user_task_plan, values, NULL, 0);
}

/* A waiting token's step timed out (its timer, or its wait's) */
static void
timed_out(Interp *in, Token *t)
{
	const DexStep *step = &in->def->steps[t->step];

	if (step->type == DEX_STEP_TIMER)
	{
		go_on(t, step->next);
		return;
	}
	if (step->type == DEX_STEP_USER)
		drop_user_task(in, step, t->wait);
	if (step->timeout_next >= 0)
		go_on(t, step->timeout_next);
	else
		fail_run(in, psprintf("step \"%s\" timed out", step->id), "dex.TimedOut");
}

static void
external_event(Interp *in, Dex__V1__ExternalEventReceived *e)
{
	const char *id = e->event_id;
	Jsonb	   *p = payload_jsonb(e->payload);

	if (strncmp(id, "user:", 5) == 0)
	{
		const char *colon = strrchr(id, ':');
		Token	   *t = waiting_on(in, atoi(colon + 1));

		if (t != NULL && in->def->steps[t->step].type == DEX_STEP_USER)
		{
			drop_user_task(in, &in->def->steps[t->step], t->wait);
			merge_result(in, &in->def->steps[t->step], p);
			go_on(t, in->def->steps[t->step].next);
		}
		return;
	}
	for (int i = 0; i < in->n_tokens; i++)
	{
		Token	   *t = &in->tokens[i];
		const DexStep *step = &in->def->steps[t->step];

		if (t->wait != 0 && step->type == DEX_STEP_SIGNAL && is_signal(id, step->signal))
		{
			merge_result(in, step, p);
			go_on(t, step->next);
			return;
		}
	}
	/* kept, in order, for a step that waits for it later */
	{
		Jsonb	   *kept = concat(single_key("id", jsonb_from_text(quoted(id))), single_key("payload", p));
		StringInfoData buf;

		initStringInfo(&buf);
		appendStringInfo(&buf, "[%s]", jsonb_text(kept));
		in->signals = concat(in->signals, jsonb_from_text(buf.data));
	}
}

/* The token waiting on command id (if any) goes on with result, or fails */
static void
resolve(Interp *in, int32 id, Dex__V1__Payload *result, const char *what, Dex__V1__Failure *failure)
{
	Token	   *t = waiting_on(in, id);

	if (t == NULL)
		return;
	if (what != NULL)
	{
		failed(in, t, what, failure);
		return;
	}
	merge_result(in, &in->def->steps[t->step], payload_jsonb(result));
	go_on(t, in->def->steps[t->step].next);
}

static void
apply_event(Interp *in, Dex__V1__WorkflowEvent *ev)
{
	Token	   *t;

	switch (ev->subject_case)
	{
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_COMPLETED:
			resolve(in, ev->activity_task_completed->activity_task_created_event_id,
					ev->activity_task_completed->result, NULL, NULL);
			break;
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_FAILED:
			resolve(in, ev->activity_task_failed->activity_task_created_event_id, NULL,
					"its activity failed", ev->activity_task_failed->failure);
			break;
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_CHILD_RUN_COMPLETED:
			resolve(in, ev->child_run_completed->child_run_created_event_id,
					ev->child_run_completed->result, NULL, NULL);
			break;
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_CHILD_RUN_FAILED:
			resolve(in, ev->child_run_failed->child_run_created_event_id, NULL,
					"its child run failed", ev->child_run_failed->failure);
			break;
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_TIMER_ELAPSED:
			if ((t = waiting_on(in, ev->timer_elapsed->timer_created_event_id)) != NULL)
				timed_out(in, t);
			break;
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_EXTERNAL_EVENT_RECEIVED:
			external_event(in, ev->external_event_received);
			break;
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_CANCEL_REQUESTED:
			{
				Dex__V1__Command *cmd = add_command(in);

				cmd->kind_case = DEX__V1__COMMAND__KIND_CANCEL_RUN;
				cmd->cancel_run = palloc(sizeof(Dex__V1__CancelRun));
				dex__v1__cancel_run__init(cmd->cancel_run);
				in->ended = true;
				break;
			}
		default:
			break;
	}
}

/* ----------------------------------------------------------------
 * A task
 * ----------------------------------------------------------------
 */

/*
 * The commands of a workflow task of a run of def (see the header).  The
 * task must show the whole history (a poll without worker_cache).
 */
Dex__V1__WorkflowTaskCompletion *
dex_interpret(const DexDefinition *def, const Dex__V1__WorkflowTask *task)
{
	Interp		in;
	size_t		n = task->n_history + task->n_new_events;
	size_t		from = 0;
	bool		found = false;
	Dex__V1__WorkflowTaskCompletion *completion;
	int			steps = 0;

	memset(&in, 0, sizeof(in));
	in.def = def;
	in.task = task;
	in.max_tokens = 8;
	in.tokens = palloc(sizeof(Token) * in.max_tokens);
	in.max_cmds = 8;
	in.cmds = palloc(sizeof(Dex__V1__Command *) * in.max_cmds);
	in.arrived = palloc0(sizeof(int) * def->n_steps);
	current_step = NULL;

	/* the last state recorded, and the run's last command id */
	for (size_t i = 0; i < n; i++)
	{
		Dex__V1__WorkflowEvent *ev = event_at(task, i);

		if (ev->id > in.last_id)
			in.last_id = ev->id;
	}
	for (size_t i = n; i-- > 0 && !found;)
	{
		Dex__V1__WorkflowEvent *ev = event_at(task, i);

		if (ev->subject_case == DEX__V1__WORKFLOW_EVENT__SUBJECT_MARKER_RECORDED &&
			strcmp(ev->marker_recorded->name, STATE_MARKER) == 0)
		{
			read_state(&in, ev->marker_recorded->details->json);
			from = i + 1;
			found = true;
		}
	}
	if (!found)
	{
		/* the first task: the run's argument is its variables */
		for (size_t i = 0; i < n && in.vars == NULL; i++)
		{
			Dex__V1__WorkflowEvent *ev = event_at(task, i);

			if (ev->subject_case == DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_CREATED)
				in.vars = payload_jsonb(ev->run_created->argument);
		}
		in.signals = jsonb_from_text("[]");
		if (in.vars == NULL || (JsonContainerIsScalar(&in.vars->root) &&
								strcmp(jsonb_text(in.vars), "null") == 0))
			in.vars = jsonb_from_text("{}");
		if (!jsonb_is_object(in.vars))
			fail_run(&in, "the argument of a run of a definition (its variables) must be a JSON object",
					 "dex.BadVariables");
		else
			add_token(&in, def->start, 0);
	}

	for (size_t i = from; i < n && !in.ended; i++)
		apply_event(&in, event_at(task, i));
	if (!in.ended && found && was_reset(task))
		restore_user_tasks(&in);

	/* every token that does not wait takes steps until it waits */
	while (!in.ended)
	{
		int			ready = -1;

		for (int i = 0; i < in.n_tokens && ready < 0; i++)
			if (in.tokens[i].wait == 0)
				ready = i;
		if (ready < 0)
			break;
		if (++steps > MAX_STEPS_PER_TASK + def->n_steps)
		{
			fail_run(&in, psprintf("the definition took %d steps without waiting, %d more than it has: it loops",
								   MAX_STEPS_PER_TASK + def->n_steps, MAX_STEPS_PER_TASK), "dex.Loop");
			break;
		}
		take_step(&in, ready);
	}
	current_step = NULL;

	if (!in.ended)
	{
		Dex__V1__Command *cmd = add_command(&in);

		cmd->kind_case = DEX__V1__COMMAND__KIND_RECORD_MARKER;
		cmd->record_marker = palloc(sizeof(Dex__V1__RecordMarker));
		dex__v1__record_marker__init(cmd->record_marker);
		cmd->record_marker->name = STATE_MARKER;
		cmd->record_marker->details = payload(state_json(&in));
	}

	completion = palloc(sizeof(*completion));
	dex__v1__workflow_task_completion__init(completion);
	completion->commands = in.cmds;
	completion->n_commands = in.n_cmds;
	return completion;
}
