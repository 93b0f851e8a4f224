/*-------------------------------------------------------------------------
 *
 * util/util.h
 *	  Small shared helpers with no knowledge of dex's rules: prepared SPI
 *	  plans and typed results, arrays for multi-row statements, run ids,
 *	  and the checks of SQL arguments.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEX_UTIL_UTIL_H
#define DEX_UTIL_UTIL_H

#include "postgres.h"

#include "executor/spi.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/uuid.h"

#include "dex.h"

/* spi.c: prepared plans kept across calls, typed access to results */
typedef struct DexPlan
{
	const char *sql;
	int			nargs;
	Oid			argtypes[16];
	SPIPlanPtr	plan;
} DexPlan;

extern int	dex_spi_exec(DexPlan *plan, Datum *values, const char *nulls, long count);

/* a statement's rows, readable while later statements run (until SPI_finish) */
typedef struct DexRows
{
	SPITupleTable *tuptable;
	uint64		n;				/* rows processed */
} DexRows;

extern DexRows dex_spi_rows(DexPlan *plan, Datum *values, const char *nulls, long count);
extern Datum dex_rows_getdatum(DexRows rows, uint64 row, int col, bool *isnull);
extern bool dex_rows_getbool(DexRows rows, uint64 row, int col);
extern int64 dex_rows_getint64(DexRows rows, uint64 row, int col);
extern bytea *dex_rows_getbytea_copy(DexRows rows, uint64 row, int col);
extern char *dex_rows_gettext_copy(DexRows rows, uint64 row, int col);

/* the same, from the latest statement's result (SPI_tuptable) */
extern Datum dex_spi_getdatum(int row, int col, bool *isnull);
extern bool dex_spi_getbool(int row, int col);
extern bytea *dex_spi_concat_bytea(uint64 start, uint64 end, int col);
extern int64 dex_spi_getint64(int row, int col);
extern bool dex_column_exists(const char *table, const char *column);
extern bytea *dex_spi_getbytea_copy(int row, int col);
extern char *dex_spi_gettext_copy(int row, int col);
extern void dex_set_planner_settings(GucContext context, GucSource source, GucAction action);
extern int	dex_push_planner_settings(void);
extern void dex_pop_planner_settings(int level);


/* arrays.c */
extern void dex_array_add(ArrayBuildState *state, Datum value, bool isnull);
extern Datum dex_array_result(ArrayBuildState *state);
extern Datum dex_uuid_array(pg_uuid_t *const *ids, int n);
extern struct HTAB *dex_batch_table(const char *name, Size keysize, Size entrysize, long n,
									int flags);

/* args.c: checks of SQL arguments */
extern void dex_arg_not_null(FunctionCallInfo fcinfo, int arg, const char *what);
extern void dex_args_not_null(FunctionCallInfo fcinfo, int n, const char *what);
extern int32 dex_arg_int32(FunctionCallInfo fcinfo, int arg, const char *what);
extern void dex_check_name(const char *name, const char *what);
extern char *dex_arg_name(FunctionCallInfo fcinfo, int arg, const char *what);
extern char *dex_arg_optional_name(FunctionCallInfo fcinfo, int arg, const char *what);
extern void dex_check_result_columns(FunctionCallInfo fcinfo, int n, const char *function);
extern void dex_check_labels(Jsonb *labels);

/* cron.c: cron expressions and time zones of schedules */
typedef struct DexCron
{
	uint64		minutes;		/* bit n: minute n fires */
	uint32		hours;
	uint32		mdays;			/* bits 1..31 */
	uint16		months;			/* bits 1..12 */
	uint8		wdays;			/* bit 0: Sunday */
	bool		mday_star;		/* the field starts with "*" */
	bool		wday_star;
} DexCron;

extern void dex_cron_parse(const char *expr, DexCron *cron);
extern struct pg_tz *dex_time_zone(const char *name);
extern bool dex_cron_next(const DexCron *cron, struct pg_tz *tz, TimestampTz after, TimestampTz *next);

/* ids.c */
extern pg_uuid_t *dex_new_uuid(void);
extern void dex_uuid_v7_floor(TimestampTz ts, pg_uuid_t *uuid);
extern char *dex_uuid_to_cstring(const pg_uuid_t *uuid);

#endif							/* DEX_UTIL_UTIL_H */
