/*-------------------------------------------------------------------------
 *
 * util/spi.c
 *	  Prepared SPI plans kept across calls, and typed access to SPI results.
 *
 * Every statement dex runs is a static DexPlan: prepared on first use in a
 * session and kept with SPI_keepplan, so the hot path never parses SQL, and
 * planned once, generically: custom plans would be planned again at every
 * call (half the CPU of a single-task poll and completion).  A generic plan
 * must be good at any table size, so the functions that run these
 * statements turn off sequential scans, hash and merge joins and JIT (SET
 * clauses in the install script; the code that cannot have one, and the
 * background workers, take the same list from dex_set_planner_settings):
 * every statement here
 * is an index lookup or an index-ordered scan, and planned that way it keeps
 * its plan when a table goes from empty to millions of rows.  The plan cache
 * revalidates kept plans after DDL (for instance DROP and CREATE EXTENSION),
 * so they survive the objects they use being recreated.
 *
 * Every statement runs with read_only = false, so it takes a fresh snapshot
 * (READ COMMITTED): a statement must see at least what the statement before
 * it saw.  With read_only = true SPI would reuse the caller's older snapshot,
 * and a run created just before a poll would be missing from the run lookup
 * that follows the poll's lease.
 *
 * Callers must be connected to SPI.  Values read with the *_copy functions
 * are copied into the caller's memory context (the upper executor context),
 * so they outlive SPI_finish.
 *
 * A statement's rows are read either from SPI's globals (dex_spi_exec and
 * the dex_spi_get* functions: until the next statement replaces them) or
 * through a handle (dex_spi_rows and the dex_rows_get* functions): a DexRows
 * keeps its result while later statements run, until SPI_finish, so code
 * that runs statements for each row of a result never saves and restores
 * SPI_tuptable.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"

#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/guc.h"

#include "util/util.h"

int
dex_spi_exec(DexPlan *plan, Datum *values, const char *nulls, long count)
{
	int			rc;

	if (plan->plan == NULL)
	{
		SPIPlanPtr	p = SPI_prepare_cursor(plan->sql, plan->nargs, plan->argtypes,
										   CURSOR_OPT_GENERIC_PLAN);

		if (p == NULL)
			elog(ERROR, "SPI_prepare failed for \"%s\": %s",
				 plan->sql, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(p) != 0)
			elog(ERROR, "SPI_keepplan failed");
		plan->plan = p;
	}

	rc = SPI_execute_plan(plan->plan, values, nulls, false, count);
	if (rc < 0)
		elog(ERROR, "SPI_execute_plan failed for \"%s\": %s",
			 plan->sql, SPI_result_code_string(rc));
	return rc;
}

/*
 * Run a statement and keep its rows: they stay readable through the handle
 * while later statements run, until SPI_finish.
 */
DexRows
dex_spi_rows(DexPlan *plan, Datum *values, const char *nulls, long count)
{
	DexRows		rows;

	dex_spi_exec(plan, values, nulls, count);
	rows.tuptable = SPI_tuptable;
	rows.n = SPI_processed;
	return rows;
}

Datum
dex_rows_getdatum(DexRows rows, uint64 row, int col, bool *isnull)
{
	return SPI_getbinval(rows.tuptable->vals[row], rows.tuptable->tupdesc,
						 col, isnull);
}

bool
dex_rows_getbool(DexRows rows, uint64 row, int col)
{
	bool		isnull;
	Datum		d = dex_rows_getdatum(rows, row, col, &isnull);

	return !isnull && DatumGetBool(d);
}

/* int2, int4 or int8 column as int64; NULL reads as 0 */
int64
dex_rows_getint64(DexRows rows, uint64 row, int col)
{
	bool		isnull;
	Datum		d = dex_rows_getdatum(rows, row, col, &isnull);
	Oid			type = SPI_gettypeid(rows.tuptable->tupdesc, col);

	if (isnull)
		return 0;
	switch (type)
	{
		case INT2OID:
			return DatumGetInt16(d);
		case INT4OID:
			return DatumGetInt32(d);
		case INT8OID:
		case TIMESTAMPTZOID:
			return DatumGetInt64(d);
		default:
			elog(ERROR, "unexpected type %u in column %d", type, col);
	}
	return 0;					/* keep compiler quiet */
}

bytea *
dex_rows_getbytea_copy(DexRows rows, uint64 row, int col)
{
	bool		isnull;
	Datum		d = dex_rows_getdatum(rows, row, col, &isnull);

	if (isnull)
		return NULL;
	return (bytea *) SPI_datumTransfer(PointerGetDatum(PG_DETOAST_DATUM(d)),
									   false, -1);
}

char *
dex_rows_gettext_copy(DexRows rows, uint64 row, int col)
{
	bool		isnull;
	Datum		d = dex_rows_getdatum(rows, row, col, &isnull);

	if (isnull)
		return NULL;
	return DatumGetPointer(SPI_datumTransfer(CStringGetDatum(TextDatumGetCString(d)),
											 false, -2));
}

/* The result of the latest statement, as SPI's globals hold it */
static inline DexRows
latest_rows(void)
{
	DexRows		rows;

	rows.tuptable = SPI_tuptable;
	rows.n = SPI_processed;
	return rows;
}

Datum
dex_spi_getdatum(int row, int col, bool *isnull)
{
	return dex_rows_getdatum(latest_rows(), row, col, isnull);
}

bool
dex_spi_getbool(int row, int col)
{
	return dex_rows_getbool(latest_rows(), row, col);
}

/* int2, int4 or int8 column as int64; NULL reads as 0 */
int64
dex_spi_getint64(int row, int col)
{
	return dex_rows_getint64(latest_rows(), row, col);
}

bytea *
dex_spi_getbytea_copy(int row, int col)
{
	return dex_rows_getbytea_copy(latest_rows(), row, col);
}

char *
dex_spi_gettext_copy(int row, int col)
{
	return dex_rows_gettext_copy(latest_rows(), row, col);
}

/*
 * The bytea values of column col in rows start to end - 1 of the current SPI
 * result, concatenated, in memory that outlives SPI_finish (SPI_palloc).
 */
bytea *
dex_spi_concat_bytea(uint64 start, uint64 end, int col)
{
	Size		total = 0;
	bytea	   *out;
	char	   *p;
	bool		isnull;

	for (uint64 i = start; i < end; i++)
		total += VARSIZE_ANY_EXHDR(DatumGetByteaPP(dex_spi_getdatum(i, col, &isnull)));
	out = SPI_palloc(VARHDRSZ + total);
	SET_VARSIZE(out, VARHDRSZ + total);
	p = VARDATA(out);
	for (uint64 i = start; i < end; i++)
	{
		bytea	   *b = DatumGetByteaPP(dex_spi_getdatum(i, col, &isnull));

		memcpy(p, VARDATA_ANY(b), VARSIZE_ANY_EXHDR(b));
		p += VARSIZE_ANY_EXHDR(b);
	}
	return out;
}

/*
 * The planner settings every statement of dex is planned with (the file
 * header says why).  The API functions have them as SET clauses in the
 * install script, which must name the same ones; code that cannot have a
 * SET clause takes them from here.
 */
static const char *const planner_settings[] = {
	"enable_seqscan", "enable_hashjoin", "enable_mergejoin", "jit"
};

/* Turn every planner setting off, with the given context, source and action. */
void
dex_set_planner_settings(GucContext context, GucSource source, GucAction action)
{
	for (int i = 0; i < lengthof(planner_settings); i++)
		(void) set_config_option(planner_settings[i], "off", context, source,
								 action, true, 0, false);
}

/*
 * For the length of a call that cannot have SET clauses (a procedure that
 * controls transactions): set them until dex_pop_planner_settings(level),
 * which must come before a commit.
 */
int
dex_push_planner_settings(void)
{
	int			level = NewGUCNestLevel();

	dex_set_planner_settings(PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE);
	return level;
}

void
dex_pop_planner_settings(int level)
{
	AtEOXact_GUC(true, level);
}

/*
 * Whether table dex.<table> has the column: what tells the library which
 * version of the schema it works with until ALTER EXTENSION dex UPDATE.
 * Two syscache lookups, no statement.
 */
bool
dex_column_exists(const char *table, const char *column)
{
	Oid			schema = get_namespace_oid("dex", true);
	Oid			relid = OidIsValid(schema) ? get_relname_relid(table, schema) : InvalidOid;

	return OidIsValid(relid) && get_attnum(relid, column) != InvalidAttrNumber;
}
