/*-------------------------------------------------------------------------
 *
 * args.c
 *	  Checks of the arguments of SQL entry points: nulls and names; and that
 *	  a C set-returning function's SQL declaration has the library's columns.
 *
 * An argument with a default is not optional: NULL is refused
 * (ERRCODE_NULL_VALUE_NOT_ALLOWED), not taken as the default.  NULL means
 * "none" only where there can be none (a run's argument, an instance id,
 * labels, a key, a filter), and the entry point reads those itself.  Names
 * dex stores as keys have 1 to DEX_NAME_MAX_LEN bytes.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "util/util.h"

/* Refuse a NULL argument "arg", called "what" in the message. */
void
dex_arg_not_null(FunctionCallInfo fcinfo, int arg, const char *what)
{
	if (PG_ARGISNULL(arg))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
}

/* Refuse a NULL among the first n arguments, which "what" names together. */
void
dex_args_not_null(FunctionCallInfo fcinfo, int n, const char *what)
{
	for (int arg = 0; arg < n; arg++)
		dex_arg_not_null(fcinfo, arg, what);
}

/* An argument with a default: NULL is refused, with a hint. */
int32
dex_arg_int32(FunctionCallInfo fcinfo, int arg, const char *what)
{
	if (PG_ARGISNULL(arg))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what),
				 errhint("Leave the argument out to take its default.")));
	return PG_GETARG_INT32(arg);
}

/* Refuse a name of no bytes or of more than DEX_NAME_MAX_LEN. */
void
dex_check_name(const char *name, const char *what)
{
	if (name[0] == '\0' || strlen(name) > DEX_NAME_MAX_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must have 1 to %d bytes", what, DEX_NAME_MAX_LEN)));
}

/* A name argument, which must be given. */
char *
dex_arg_name(FunctionCallInfo fcinfo, int arg, const char *what)
{
	char	   *name;

	dex_arg_not_null(fcinfo, arg, what);
	name = text_to_cstring(PG_GETARG_TEXT_PP(arg));
	dex_check_name(name, what);
	return name;
}

/* A name argument that may be NULL (none). */
char *
dex_arg_optional_name(FunctionCallInfo fcinfo, int arg, const char *what)
{
	return PG_ARGISNULL(arg) ? NULL : dex_arg_name(fcinfo, arg, what);
}

/*
 * Refuse to fill the result of "function" (a materialized SRF, set up) when
 * its SQL declaration has not the n columns this library fills: the
 * extension script and the library are of different versions.
 */
void
dex_check_result_columns(FunctionCallInfo fcinfo, int n, const char *function)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	if (rsinfo->setDesc->natts != n)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("%s does not return the columns this library fills", function),
				 errdetail("It returns %d columns; the library has %d.", rsinfo->setDesc->natts, n),
				 errhint("Install the library and the extension script of one version of dex.")));
}

/*
 * Labels are a JSON object of string values (a proto map<string, string>).
 */
void
dex_check_labels(Jsonb *labels)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;

	if (!JB_ROOT_IS_OBJECT(labels))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("labels must be a JSON object"),
				 errdetail("Labels map names to string values, as in {\"team\": \"payments\"}.")));
	it = JsonbIteratorInit(&labels->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_VALUE && v.type != jbvString)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("labels must have string values"),
					 errdetail("Labels map names to string values, as in {\"team\": \"payments\"}.")));
	}
}
