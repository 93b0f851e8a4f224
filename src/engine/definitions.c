/*-------------------------------------------------------------------------
 *
 * definitions.c
 *	  Workflows defined in JSON (1.7): the schema of a definition, checked
 *	  when it is created, and its parsed form (DexDefinition) that the
 *	  interpreter (interpret.c) runs; loading a stored definition.
 *
 * The schema is docs/json-workflows.md's.  A definition is an
 * object {"steps": [...], "start"?, "searchPath"?, "description"?}; each step
 * an object with an "id" unique in the definition and a "type", and the keys
 * of its type, nothing else.  Steps name the steps that follow by id.  Every
 * error is 22023 (invalid_parameter_value) and names the offending element by
 * its JSON path ("$.steps[2].next"), so that a definition is either wholly
 * valid when stored or not stored at all: the interpreter meets no error of
 * shape, only errors of data (a variable of the wrong type, a failing SQL
 * statement), which fail the run.
 *
 * Values the parser checks by handing them to PostgreSQL (an interval, a
 * timestamp, a SQL/JSON path, a SQL statement) are parsed in a
 * subtransaction (dex_subtransaction, here for want of a better home in
 * engine/), whose error becomes the definition's 22023: parsing them has no
 * side effect, and nothing else happens in it.
 *
 * No locks: dex_load_definition reads dex.definition in the caller's
 * transaction and SPI connection.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "parser/parser.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "engine/engine.h"

static const char *const step_type_names[] = {
	"sql", "service", "gateway", "end", "timer", "parallel", "join", "signal", "user", "call"
};

/* the keys each step type allows beyond id, type and description */
static const char *const step_keys[][12] = {
	[DEX_STEP_SQL] = {"sql", "resultVariable", "retryCount", "next", NULL},
	[DEX_STEP_SERVICE] = {"activity", "queue", "input", "resultVariable", "retryCount", "retryPolicy",
	"startToCloseTimeout", "scheduleToCloseTimeout", "heartbeatTimeout", "priority", "next", NULL},
	[DEX_STEP_GATEWAY] = {"conditions", "default", NULL},
	[DEX_STEP_END] = {"output", "fail", NULL},
	[DEX_STEP_TIMER] = {"duration", "date", "next", NULL},
	[DEX_STEP_PARALLEL] = {"branches", NULL},
	[DEX_STEP_JOIN] = {"next", NULL},
	[DEX_STEP_SIGNAL] = {"signal", "timeout", "timeoutNext", "resultVariable", "next", NULL},
	[DEX_STEP_USER] = {"assignee", "candidateGroups", "form", "timeout", "timeoutNext",
	"resultVariable", "next", NULL},
	[DEX_STEP_CALL] = {"definition", "version", "input", "resultVariable", "next", NULL},
};

/* whether values are checked by parsing them (create), or trusted (stored) */
static bool check_values = true;

static void bad_definition(const char *path, const char *fmt,...) pg_attribute_printf(2, 3) pg_attribute_noreturn();

static void
bad_definition(const char *path, const char *fmt,...)
{
	char		buf[512];
	va_list		args;

	va_start(args, fmt);
	vsnprintf(buf, sizeof(buf), fmt, args);
	va_end(args);
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid definition at %s: %s", path, buf),
			 errhint("docs/json-workflows.md gives the schema.")));
}

/* ----------------------------------------------------------------
 * Reading the document
 * ----------------------------------------------------------------
 */

static const char *
jbv_type_name(const JsonbValue *v)
{
	switch (v->type)
	{
		case jbvNull:
			return "null";
		case jbvString:
			return "a string";
		case jbvNumeric:
			return "a number";
		case jbvBool:
			return "a boolean";
		case jbvBinary:
			return JsonContainerIsArray(v->val.binary.data) ? "an array" : "an object";
		default:
			return "a value";
	}
}

static JsonbValue *
get_key(JsonbContainer *obj, const char *key)
{
	return getKeyJsonValueFromContainer(obj, key, strlen(key), NULL);
}

static char *
key_path(const char *path, const char *key)
{
	return psprintf("%s.%s", path, key);
}

/* An optional string, not empty; NULL if absent */
static char *
opt_string(JsonbContainer *obj, const char *key, const char *path)
{
	JsonbValue *v = get_key(obj, key);

	if (v == NULL)
		return NULL;
	if (v->type != jbvString)
		bad_definition(key_path(path, key), "must be a string, not %s", jbv_type_name(v));
	if (v->val.string.len == 0)
		bad_definition(key_path(path, key), "must not be empty");
	return pnstrdup(v->val.string.val, v->val.string.len);
}

static char *
req_string(JsonbContainer *obj, const char *key, const char *path)
{
	char	   *s = opt_string(obj, key, path);

	if (s == NULL)
		bad_definition(path, "\"%s\" is required", key);
	return s;
}

/* An optional integer in [min, max]; dflt if absent */
static int32
opt_int(JsonbContainer *obj, const char *key, const char *path, int32 min, int32 max, int32 dflt)
{
	JsonbValue *v = get_key(obj, key);
	Numeric		n;
	int64		i;

	if (v == NULL)
		return dflt;
	if (v->type != jbvNumeric)
		bad_definition(key_path(path, key), "must be an integer, not %s", jbv_type_name(v));
	n = v->val.numeric;
	if (!DatumGetBool(DirectFunctionCall2(numeric_eq, NumericGetDatum(n),
										  DirectFunctionCall2(numeric_round, NumericGetDatum(n),
															  Int32GetDatum(0)))))
		bad_definition(key_path(path, key), "must be an integer");
	if (DatumGetBool(DirectFunctionCall2(numeric_gt, NumericGetDatum(n),
										 NumericGetDatum(int64_to_numeric(max)))) ||
		DatumGetBool(DirectFunctionCall2(numeric_lt, NumericGetDatum(n),
										 NumericGetDatum(int64_to_numeric(min)))))
		bad_definition(key_path(path, key), "must be between %d and %d", min, max);
	i = DatumGetInt64(DirectFunctionCall1(numeric_int8, NumericGetDatum(n)));
	return (int32) i;
}

/* An error for every key of obj that allowed (NULL-ended) does not list */
static void
check_keys(JsonbContainer *obj, const char *const *allowed, const char *const *also, const char *path)
{
	JsonbIterator *it = JsonbIteratorInit(obj);
	JsonbValue	v;
	JsonbIteratorToken tok;
	bool		skip = false;

	while ((tok = JsonbIteratorNext(&it, &v, skip)) != WJB_DONE)
	{
		char	   *key;
		bool		ok = false;

		skip = true;
		if (tok != WJB_KEY)
			continue;
		key = pnstrdup(v.val.string.val, v.val.string.len);
		for (int i = 0; allowed[i] != NULL && !ok; i++)
			ok = strcmp(allowed[i], key) == 0;
		for (int i = 0; also != NULL && also[i] != NULL && !ok; i++)
			ok = strcmp(also[i], key) == 0;
		if (!ok)
			bad_definition(key_path(path, key), "unknown key");
	}
}

/*
 * Run fn(arg) in a subtransaction, kept if it returns true and undone if it
 * returns false or raises an error; *error (if error is not NULL) gets the
 * error, copied into the caller's memory context, which is current again on
 * return, as is its resource owner.  Returns whether it was kept.  The
 * interpreter's worker uses it too.
 */
bool
dex_subtransaction(bool (*fn) (void *arg), void *arg, ErrorData **error)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool kept = false;

	if (error != NULL)
		*error = NULL;
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		if (fn(arg))
		{
			ReleaseCurrentSubTransaction();
			kept = true;
		}
		else
			RollbackAndReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *e;

		MemoryContextSwitchTo(cxt);
		e = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		if (error != NULL)
			*error = e;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return kept;
}

/*
 * Run parse(arg), which parses a value and has no other effect, in a
 * subtransaction (see the header); NULL if it succeeded, else its error.
 */
static char *
parse_error(bool (*parse) (void *arg), const void *arg)
{
	ErrorData  *error;

	if (!check_values)
		return NULL;
	if (dex_subtransaction(parse, unconstify(void *, arg), &error))
		return NULL;
	/* the detail names what is wrong (the codec's "Unknown field ..."): keep it */
	return error->detail != NULL ? psprintf("%s: %s", error->message, error->detail) : error->message;
}

typedef struct TypedText
{
	Oid			typid;			/* InvalidOid: a SQL statement */
	const char *text;
} TypedText;

static bool
parse_typed(void *arg)
{
	const TypedText *t = arg;

	if (t->typid == InvalidOid)
	{
		List	   *stmts = raw_parser(t->text, RAW_PARSE_DEFAULT);

		if (list_length(stmts) != 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("must be one SQL statement, not %d", list_length(stmts))));
	}
	else
	{
		Oid			input;
		Oid			ioparam;

		getTypeInputInfo(t->typid, &input, &ioparam);
		(void) OidInputFunctionCall(input, unconstify(char *, t->text), ioparam, -1);
	}
	return true;
}

/* Whether PostgreSQL accepts s as a value of type typid; NULL if so, else the error */
static char *
input_error(Oid typid, const char *s)
{
	TypedText	t = {typid, s};

	return parse_error(parse_typed, &t);
}

/* A name: 1 to DEX_NAME_MAX_LEN bytes */
static char *
req_name(JsonbContainer *obj, const char *key, const char *path)
{
	char	   *s = req_string(obj, key, path);

	if (strlen(s) > DEX_NAME_MAX_LEN)
		bad_definition(key_path(path, key), "must have 1 to %d bytes", DEX_NAME_MAX_LEN);
	return s;
}

/* A SQL/JSON path expression over the variables */
static char *
opt_path(JsonbContainer *obj, const char *key, const char *path)
{
	char	   *s = opt_string(obj, key, path);
	char	   *error;

	if (s != NULL && (error = input_error(JSONPATHOID, s)) != NULL)
		bad_definition(key_path(path, key), "not a SQL/JSON path expression: %s", error);
	return s;
}

/*
 * A time: an interval (duration) or a timestamp with time zone (date), or a
 * SQL/JSON path expression ("$...") that gives one from the variables when
 * the step runs.
 */
static char *
opt_time(JsonbContainer *obj, const char *key, const char *path, Oid typid)
{
	char	   *s = opt_string(obj, key, path);
	char	   *error;

	if (s == NULL)
		return NULL;
	if (s[0] == '$')
		error = input_error(JSONPATHOID, s);
	else
		error = input_error(typid, s);
	if (error != NULL)
		bad_definition(key_path(path, key), "not %s or a SQL/JSON path expression: %s",
					   typid == INTERVALOID ? "an interval" : "a timestamp", error);
	return s;
}

/* ----------------------------------------------------------------
 * Steps
 * ----------------------------------------------------------------
 */

static int
step_index(DexDefinition *def, const char *id)
{
	for (int i = 0; i < def->n_steps; i++)
		if (strcmp(def->steps[i].id, id) == 0)
			return i;
	return -1;
}

/* The step a key names, which must exist; -1 when the key is absent and optional */
static int
step_ref(DexDefinition *def, JsonbContainer *obj, const char *key, const char *path, bool required)
{
	char	   *id = required ? req_string(obj, key, path) : opt_string(obj, key, path);
	int			i;

	if (id == NULL)
		return -1;
	i = step_index(def, id);
	if (i < 0)
		bad_definition(key_path(path, key), "no step has id \"%s\"", id);
	return i;
}

static void
parse_step_refs(DexDefinition *def, DexStep *step, JsonbContainer *obj, const char *path)
{
	switch (step->type)
	{
		case DEX_STEP_GATEWAY:
			{
				JsonbValue *conds = get_key(obj, "conditions");
				char	   *cpath = key_path(path, "conditions");

				if (conds == NULL)
					bad_definition(path, "\"conditions\" is required");
				if (!dex_jbv_is_array(conds) || JsonContainerSize(conds->val.binary.data) == 0)
					bad_definition(cpath, "must be an array of one or more conditions");
				step->n_conditions = JsonContainerSize(conds->val.binary.data);
				step->when = palloc(sizeof(char *) * step->n_conditions);
				step->when_next = palloc(sizeof(int) * step->n_conditions);
				for (int i = 0; i < step->n_conditions; i++)
				{
					JsonbValue *c = getIthJsonbValueFromContainer(conds->val.binary.data, i);
					char	   *p = psprintf("%s[%d]", cpath, i);
					static const char *const keys[] = {"when", "next", NULL};

					if (!dex_jbv_is_object(c))
						bad_definition(p, "must be an object, not %s", jbv_type_name(c));
					check_keys(c->val.binary.data, keys, NULL, p);
					step->when[i] = opt_path(c->val.binary.data, "when", p);
					if (step->when[i] == NULL)
						bad_definition(p, "\"when\" is required");
					step->when_next[i] = step_ref(def, c->val.binary.data, "next", p, true);
				}
				step->default_next = step_ref(def, obj, "default", path, false);
				break;
			}
		case DEX_STEP_PARALLEL:
			{
				JsonbValue *br = get_key(obj, "branches");
				char	   *bpath = key_path(path, "branches");

				if (br == NULL)
					bad_definition(path, "\"branches\" is required");
				if (!dex_jbv_is_array(br) || JsonContainerSize(br->val.binary.data) < 2)
					bad_definition(bpath, "must be an array of two or more step ids");
				step->n_branches = JsonContainerSize(br->val.binary.data);
				step->branches = palloc(sizeof(int) * step->n_branches);
				for (int i = 0; i < step->n_branches; i++)
				{
					JsonbValue *b = getIthJsonbValueFromContainer(br->val.binary.data, i);
					char	   *p = psprintf("%s[%d]", bpath, i);
					char	   *id;

					if (b->type != jbvString)
						bad_definition(p, "must be a step id, not %s", jbv_type_name(b));
					id = pnstrdup(b->val.string.val, b->val.string.len);
					step->branches[i] = step_index(def, id);
					if (step->branches[i] < 0)
						bad_definition(p, "no step has id \"%s\"", id);
				}
				break;
			}
		case DEX_STEP_END:
			break;
		default:
			step->next = step_ref(def, obj, "next", path, true);
			if (step->type == DEX_STEP_SIGNAL || step->type == DEX_STEP_USER)
			{
				step->timeout_next = step_ref(def, obj, "timeoutNext", path, false);
				if (step->timeout_next >= 0 && step->timeout == NULL)
					bad_definition(key_path(path, "timeoutNext"), "needs a \"timeout\"");
			}
			break;
	}
}

static bool
parse_retry_policy_json(void *arg)
{
	(void) dex_pb_from_jsonb(&dex__v1__retry_policy__descriptor, (Jsonb *) arg, "retryPolicy");
	return true;
}

static void
parse_retry_policy(DexStep *step, JsonbContainer *obj, const char *path)
{
	JsonbValue *v = get_key(obj, "retryPolicy");
	char	   *error;

	if (v == NULL)
		return;
	if (!dex_jbv_is_object(v))
		bad_definition(key_path(path, "retryPolicy"), "must be an object, not %s", jbv_type_name(v));
	step->retry_policy = JsonbValueToJsonb(v);
	if ((error = parse_error(parse_retry_policy_json, step->retry_policy)) != NULL)
		bad_definition(key_path(path, "retryPolicy"), "not a dex.v1.RetryPolicy: %s", error);
}

/* The keys of a step beyond its references to other steps */
static void
parse_step_body(DexStep *step, JsonbContainer *obj, const char *path)
{
	step->result_variable = opt_string(obj, "resultVariable", path);
	switch (step->type)
	{
		case DEX_STEP_SQL:
			{
				char	   *error;

				step->sql = req_string(obj, "sql", path);
				step->retry_count = opt_int(obj, "retryCount", path, 0, 100, -1);
				if ((error = input_error(InvalidOid, step->sql)) != NULL)
					bad_definition(key_path(path, "sql"), "%s", error);
				break;
			}
		case DEX_STEP_SERVICE:
			step->activity = req_name(obj, "activity", path);
			step->queue = req_name(obj, "queue", path);
			step->input = opt_path(obj, "input", path);
			step->retry_count = opt_int(obj, "retryCount", path, 0, 1000, -1);
			parse_retry_policy(step, obj, path);
			if (step->retry_count >= 0 && step->retry_policy != NULL)
				bad_definition(path, "\"retryCount\" and \"retryPolicy\" exclude each other");
			step->start_to_close = opt_time(obj, "startToCloseTimeout", path, INTERVALOID);
			step->schedule_to_close = opt_time(obj, "scheduleToCloseTimeout", path, INTERVALOID);
			step->heartbeat = opt_time(obj, "heartbeatTimeout", path, INTERVALOID);
			step->priority = opt_int(obj, "priority", path, 0, 100, 0);
			break;
		case DEX_STEP_END:
			{
				JsonbValue *fail = get_key(obj, "fail");

				step->output = opt_path(obj, "output", path);
				if (fail != NULL)
				{
					char	   *fpath = key_path(path, "fail");
					static const char *const keys[] = {"message", "type", NULL};

					if (step->output != NULL)
						bad_definition(path, "\"output\" and \"fail\" exclude each other");
					if (!dex_jbv_is_object(fail))
						bad_definition(fpath, "must be an object, not %s", jbv_type_name(fail));
					check_keys(fail->val.binary.data, keys, NULL, fpath);
					step->fails = true;
					step->fail_message = req_string(fail->val.binary.data, "message", fpath);
					step->fail_type = opt_string(fail->val.binary.data, "type", fpath);
				}
				break;
			}
		case DEX_STEP_TIMER:
			step->duration = opt_time(obj, "duration", path, INTERVALOID);
			step->date = opt_time(obj, "date", path, TIMESTAMPTZOID);
			if (step->duration != NULL && step->date != NULL)
				bad_definition(path, "a timer takes \"duration\" or \"date\", not both");
			if (step->duration == NULL && step->date == NULL)
				bad_definition(path, "a timer needs one of \"duration\" and \"date\"");
			break;
		case DEX_STEP_SIGNAL:
			step->signal = req_name(obj, "signal", path);
			if (strchr(step->signal, ':') != NULL)
				bad_definition(key_path(path, "signal"),
							   "a signal's name has no colon (\"<signal>:<anything>\" is the signal too)");
			step->timeout = opt_time(obj, "timeout", path, INTERVALOID);
			break;
		case DEX_STEP_USER:
			{
				JsonbValue *groups = get_key(obj, "candidateGroups");
				JsonbValue *form = get_key(obj, "form");

				step->assignee = opt_string(obj, "assignee", path);
				if (groups != NULL)
				{
					char	   *gpath = key_path(path, "candidateGroups");

					if (!dex_jbv_is_array(groups))
						bad_definition(gpath, "must be an array of strings, not %s", jbv_type_name(groups));
					for (int i = 0; i < JsonContainerSize(groups->val.binary.data); i++)
					{
						JsonbValue *g = getIthJsonbValueFromContainer(groups->val.binary.data, i);

						if (g->type != jbvString)
							bad_definition(psprintf("%s[%d]", gpath, i), "must be a string, not %s",
										   jbv_type_name(g));
					}
					step->candidate_groups = JsonbValueToJsonb(groups);
				}
				if (form != NULL)
					step->form = JsonbValueToJsonb(form);
				step->timeout = opt_time(obj, "timeout", path, INTERVALOID);
				break;
			}
		case DEX_STEP_CALL:
			step->definition = req_name(obj, "definition", path);
			step->version = opt_int(obj, "version", path, 1, PG_INT32_MAX, 1);
			step->input = opt_path(obj, "input", path);
			break;
		default:
			break;
	}
}

/*
 * Parse a definition document.  Errors are 22023 with the path of the
 * offending element; with check, the values PostgreSQL parses are checked
 * too (a stored definition was checked when it was created).
 */
DexDefinition *
dex_parse_definition(Jsonb *doc, bool check)
{
	static const char *const top_keys[] = {"steps", "start", "searchPath", "description", NULL};
	static const char *const common_keys[] = {"id", "type", "description", NULL};
	DexDefinition *def = palloc0(sizeof(DexDefinition));
	JsonbContainer *root = &doc->root;
	JsonbValue *steps;

	check_values = check;
	if (!JsonContainerIsObject(root))
		bad_definition("$", "a definition is a JSON object");
	check_keys(root, top_keys, NULL, "$");
	steps = get_key(root, "steps");
	if (steps == NULL)
		bad_definition("$", "\"steps\" is required");
	if (!dex_jbv_is_array(steps) || JsonContainerSize(steps->val.binary.data) == 0)
		bad_definition("$.steps", "must be an array of one or more steps");
	def->search_path = opt_string(root, "searchPath", "$");
	def->n_steps = JsonContainerSize(steps->val.binary.data);
	def->steps = palloc0(sizeof(DexStep) * def->n_steps);

	/* ids and types first: steps may name steps that come after them */
	for (int i = 0; i < def->n_steps; i++)
	{
		DexStep    *step = &def->steps[i];
		JsonbValue *s = getIthJsonbValueFromContainer(steps->val.binary.data, i);
		char	   *path = psprintf("$.steps[%d]", i);
		char	   *type;
		bool		known = false;

		if (!dex_jbv_is_object(s))
			bad_definition(path, "a step is a JSON object, not %s", jbv_type_name(s));
		step->id = req_name(s->val.binary.data, "id", path);
		if (step_index(def, step->id) < i)
			bad_definition(key_path(path, "id"), "another step has id \"%s\"", step->id);
		type = req_string(s->val.binary.data, "type", path);
		for (int t = 0; t < lengthof(step_type_names) && !known; t++)
			if (strcmp(step_type_names[t], type) == 0)
			{
				step->type = (DexStepType) t;
				known = true;
			}
		if (!known)
			bad_definition(key_path(path, "type"),
						   "unknown step type \"%s\" (sql, service, gateway, end, timer, parallel, join, signal, user, call)",
						   type);
		step->next = step->default_next = step->timeout_next = -1;
		step->retry_count = -1;
	}
	for (int i = 0; i < def->n_steps; i++)
	{
		DexStep    *step = &def->steps[i];
		JsonbContainer *obj = getIthJsonbValueFromContainer(steps->val.binary.data, i)->val.binary.data;
		char	   *path = psprintf("$.steps[%d]", i);

		check_keys(obj, step_keys[step->type], common_keys, path);
		parse_step_body(step, obj, path);
		parse_step_refs(def, step, obj, path);
	}

	def->start = step_ref(def, root, "start", "$", false);
	if (def->start < 0)
		def->start = 0;

	/* how many ways lead into each join: its arrivals to wait for */
	for (int i = 0; i < def->n_steps; i++)
	{
		DexStep    *step = &def->steps[i];

		if (step->next >= 0)
			def->steps[step->next].incoming++;
		if (step->timeout_next >= 0)
			def->steps[step->timeout_next].incoming++;
		for (int b = 0; b < step->n_branches; b++)
			def->steps[step->branches[b]].incoming++;
		for (int c = 0; c < step->n_conditions; c++)
			def->steps[step->when_next[c]].incoming++;
		if (step->default_next >= 0)
			def->steps[step->default_next].incoming++;
	}
	for (int i = 0; i < def->n_steps; i++)
		if (def->steps[i].type == DEX_STEP_JOIN && def->steps[i].incoming < 2)
			bad_definition(psprintf("$.steps[%d]", i),
						   "a join needs two or more steps leading into it, not %d",
						   def->steps[i].incoming);
	return def;
}

/* ----------------------------------------------------------------
 * Stored definitions
 * ----------------------------------------------------------------
 */

static DexPlan load_definition_plan = {
	"SELECT definition, owner::oid FROM dex.definition WHERE name = $1 AND version = $2",
	2, {TEXTOID, INT4OID}
};

/* A stored definition, parsed; NULL if there is none */
DexDefinition *
dex_load_definition(const char *name, int32 version)
{
	Datum		values[2] = {CStringGetTextDatum(name), Int32GetDatum(version)};
	bool		isnull;
	Jsonb	   *doc;
	Oid			owner;
	DexDefinition *def;

	dex_spi_exec(&load_definition_plan, values, NULL, 1);
	if (SPI_processed == 0)
		return NULL;
	doc = DatumGetJsonbPCopy(dex_spi_getdatum(0, 1, &isnull));
	owner = DatumGetObjectId(dex_spi_getdatum(0, 2, &isnull));
	def = dex_parse_definition(doc, false);
	def->name = pstrdup(name);
	def->version = version;
	def->owner = owner;
	return def;
}

const char *
dex_step_type_name(DexStepType type)
{
	return step_type_names[type];
}
