/*-------------------------------------------------------------------------
 *
 * api/api.h
 *	  What the SQL entry points share: the rights a call runs with
 *	  (api_call.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEX_API_API_H
#define DEX_API_API_H

#include "postgres.h"

#include "fmgr.h"

#include "engine/engine.h"

/* api_call.c */
typedef struct DexApiCall
{
	Oid			userid;			/* the caller's user and security context */
	int			sec_context;
	Oid			caller;			/* the enclosing API call's caller */
	int			guc_level;		/* nest level of the pinned search_path; 0: none */
} DexApiCall;

extern void dex_api_enter(Oid proc_oid, DexApiCall *call);
extern void dex_api_leave(const DexApiCall *call, bool error);
extern Datum dex_api_call(FunctionCallInfo fcinfo, PGFunction body);

/* api_runs.c: an external event to a run, as dex.send_external_event */
extern bool dex_send_event(pg_uuid_t *run_id, const char *event_id, Jsonb *payload);

/*
 * The SQL entry point "sql_fn" runs body(fcinfo) with the owner's rights
 * (api_call.c).  Used at file level, after body, with a semicolon.
 */
#define DEX_API_ENTRY_POINT(sql_fn, body) \
PG_FUNCTION_INFO_V1(sql_fn); \
Datum \
sql_fn(PG_FUNCTION_ARGS) \
{ \
	return dex_api_call(fcinfo, body); \
} \
extern int no_such_variable

#endif							/* DEX_API_API_H */
