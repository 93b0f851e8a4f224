/*-------------------------------------------------------------------------
 *
 * pg_stubs.c
 *	  Stand-ins for the PostgreSQL backend functions src/wire/codec.c calls, so
 *	  that the codec runs in a libFuzzer process instead of a server: memory,
 *	  ereport, StringInfo, stack depth, fmgr calls, numeric, dates and the
 *	  server encoding (UTF-8).  Jsonb is in fuzz_jsonb.c.
 *
 * Written for the harness, not taken from PostgreSQL; each keeps the
 * documented behaviour of its namesake that the codec depends on:
 *
 * - palloc and friends allocate every chunk with its own malloc(), linked
 *   into one arena that fuzz_end_input() frees; so AddressSanitizer sees
 *   every overrun and use after pfree, and nothing outlives an input.  The
 *   size limits (MaxAllocSize, or MaxAllocHugeSize with MCXT_ALLOC_HUGE)
 *   are the backend's.
 * - ereport(ERROR) records the error and longjmps to the innermost
 *   fuzz_try(); an ERROR outside of it, FATAL or PANIC, is a finding.
 * - numeric keeps a number as the text numeric_out would print for it:
 *   numeric_in without a typmod never rounds, so that text is exact.
 * - The server encoding is UTF-8: pg_any_to_server(..., PG_UTF8) verifies
 *   the string (an ERROR if it is not UTF-8), pg_server_to_any returns it.
 * - json_errdetail, missing from the frontend JSON parser, names the error
 *   by its number.
 *
 * libpgcommon and libpgport (frontend builds) provide the rest: base64,
 * shortest float output, UTF-8 verification, the JSON lexer and parser,
 * snprintf.
 *
 * IDENTIFICATION
 *	  test/fuzz/pg_stubs.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/jsonapi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/memnodes.h"
#include "utils/datetime.h"
#include "utils/memutils.h"
#include "utils/numeric.h"

#include "fuzz_pg.h"

bool		fuzz_verbose = false;


/* ------------------------------------------------------------------------
 * Memory: one arena per input
 * ------------------------------------------------------------------------
 */

#define CHUNK_MAGIC		UINT64CONST(0x64657846757a7a21)

/* Header in front of every palloc'd chunk; 32 bytes keeps MAXALIGN. */
typedef struct ArenaChunk
{
	struct ArenaChunk *prev;
	struct ArenaChunk *next;
	Size		size;
	uint64		magic;
} ArenaChunk;

static ArenaChunk arena = {&arena, &arena, 0, 0};

/* CurrentMemoryContext only needs to exist: every chunk goes to the arena. */
static MemoryContextData fuzz_context;
MemoryContext CurrentMemoryContext = &fuzz_context;

static ArenaChunk *
chunk_of(void *pointer, const char *caller)
{
	ArenaChunk *chunk = (ArenaChunk *) pointer - 1;

	if (pointer == NULL || chunk->magic != CHUNK_MAGIC)
		fuzz_fail("%s: %p was not allocated by palloc", caller, pointer);
	return chunk;
}

static void *
arena_alloc(Size size, int flags)
{
	ArenaChunk *chunk;

	if ((flags & MCXT_ALLOC_HUGE) ? !AllocHugeSizeIsValid(size) :
		!AllocSizeIsValid(size))
		elog(ERROR, "invalid memory alloc request size %zu", size);

	chunk = malloc(sizeof(ArenaChunk) + size);
	if (chunk == NULL)
	{
		if (flags & MCXT_ALLOC_NO_OOM)
			return NULL;
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory"),
				 errdetail("Failed on request of size %zu.", size)));
	}
	chunk->size = size;
	chunk->magic = CHUNK_MAGIC;
	chunk->next = arena.next;
	chunk->prev = &arena;
	arena.next->prev = chunk;
	arena.next = chunk;
	if (flags & MCXT_ALLOC_ZERO)
		memset(chunk + 1, 0, size);
	return chunk + 1;
}

void *
MemoryContextAllocExtended(MemoryContext context, Size size, int flags)
{
	return arena_alloc(size, flags);
}

void *
palloc(Size size)
{
	return arena_alloc(size, 0);
}

void *
palloc0(Size size)
{
	return arena_alloc(size, MCXT_ALLOC_ZERO);
}

void *
palloc_extended(Size size, int flags)
{
	return arena_alloc(size, flags);
}

void
pfree(void *pointer)
{
	ArenaChunk *chunk = chunk_of(pointer, "pfree");

	chunk->prev->next = chunk->next;
	chunk->next->prev = chunk->prev;
	chunk->magic = 0;
	free(chunk);
}

void *
repalloc(void *pointer, Size size)
{
	ArenaChunk *chunk = chunk_of(pointer, "repalloc");
	void	   *result = arena_alloc(size, 0);

	memcpy(result, pointer, Min(size, chunk->size));
	pfree(pointer);
	return result;
}

char *
pstrdup(const char *in)
{
	return pnstrdup(in, strlen(in));
}

char *
pnstrdup(const char *in, Size len)
{
	char	   *out;

	len = strnlen(in, len);
	out = palloc(len + 1);
	memcpy(out, in, len);
	out[len] = '\0';
	return out;
}

/* vsnprintf into a palloc'd buffer of the right size */
static char *
format_va(const char *fmt, va_list args)
{
	size_t		size = 128;

	for (;;)
	{
		char	   *buf = palloc(size);
		va_list		copy;
		int			n;

		va_copy(copy, args);
		n = vsnprintf(buf, size, fmt, copy);
		va_end(copy);
		if (n < 0)
			fuzz_fail("vsnprintf failed on format \"%s\"", fmt);
		if ((size_t) n < size)
			return buf;
		pfree(buf);
		size = (size_t) n + 1;
	}
}

/* field = fmt formatted with and the variadic arguments that follow it */
#define FORMAT_INTO(field, fmt) \
	do { \
		va_list		args; \
		va_start(args, fmt); \
		(field) = format_va(fmt, args); \
		va_end(args); \
	} while (0)

char *
psprintf(const char *fmt,...)
{
	char	   *result;

	FORMAT_INTO(result, fmt);
	return result;
}

static void
arena_free_all(void)
{
	while (arena.next != &arena)
		pfree(arena.next + 1);
}


/* ------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------
 */

static sigjmp_buf *fuzz_jump = NULL;
static int	error_elevel;
static FuzzError error_data;
static char *stack_base = NULL;

void
fuzz_fail(const char *fmt,...)
{
	va_list		args;

	fprintf(stderr, "\n*** dex fuzz finding: ");
	va_start(args, fmt);
	vfprintf(stderr, fmt, args);
	va_end(args);
	fprintf(stderr, "\n");
	fflush(stderr);
	abort();
}

const char *
fuzz_sqlstate(int sqlerrcode)
{
	static char buf[6];
	int			i;

	for (i = 0; i < 5; i++)
	{
		buf[i] = PGUNSIXBIT(sqlerrcode);
		sqlerrcode >>= 6;
	}
	buf[5] = '\0';
	return buf;
}

bool
errstart(int elevel, const char *domain)
{
	if (elevel < ERROR && !fuzz_verbose)
		return false;
	/* an error raised while an error is being built simply replaces it */
	error_elevel = elevel;
	memset(&error_data, 0, sizeof(error_data));
	error_data.sqlerrcode = elevel >= ERROR ? ERRCODE_INTERNAL_ERROR :
		ERRCODE_SUCCESSFUL_COMPLETION;
	return true;
}

bool
errstart_cold(int elevel, const char *domain)
{
	return errstart(elevel, domain);
}

int
errcode(int sqlerrcode)
{
	error_data.sqlerrcode = sqlerrcode;
	return 0;
}

int
errmsg(const char *fmt,...)
{
	FORMAT_INTO(error_data.message, fmt);
	return 0;
}

int
errmsg_internal(const char *fmt,...)
{
	FORMAT_INTO(error_data.message, fmt);
	return 0;
}

int
errdetail(const char *fmt,...)
{
	FORMAT_INTO(error_data.detail, fmt);
	return 0;
}

int
errhint(const char *fmt,...)
{
	const char *hint;

	FORMAT_INTO(hint, fmt);
	(void) hint;
	return 0;
}

void
errfinish(const char *filename, int lineno, const char *funcname)
{
	error_data.filename = filename;
	error_data.lineno = lineno;
	error_data.funcname = funcname;

	if (fuzz_verbose)
		fprintf(stderr, "dex fuzz: %s %s: %s%s%s (%s:%d)\n",
				error_elevel >= ERROR ? "ERROR" : "message",
				fuzz_sqlstate(error_data.sqlerrcode),
				error_data.message ? error_data.message : "(no message)",
				error_data.detail ? " DETAIL: " : "",
				error_data.detail ? error_data.detail : "",
				filename, lineno);

	if (error_elevel < ERROR)
		return;
	if (error_elevel > ERROR)
		fuzz_fail("elevel %d (%s) at %s:%d", error_elevel,
				  error_data.message ? error_data.message : "", filename, lineno);
	if (fuzz_jump == NULL)
		fuzz_fail("ERROR outside fuzz_try: %s (%s:%d)",
				  error_data.message ? error_data.message : "", filename, lineno);
	siglongjmp(*fuzz_jump, 1);
}

bool
fuzz_try(void (*fn) (void *arg), void *arg, FuzzError *error)
{
	sigjmp_buf	local;
	sigjmp_buf *volatile saved = fuzz_jump;

	if (sigsetjmp(local, 0) == 0)
	{
		fuzz_jump = &local;
		fn(arg);
		fuzz_jump = saved;
		return true;
	}
	fuzz_jump = saved;
	if (error != NULL)
		*error = error_data;
	return false;
}

/*
 * The server's default max_stack_depth is 2MB.  Sanitizers make frames
 * bigger, so allow twice that; the main thread has 8MB.
 */
#define FUZZ_MAX_STACK_DEPTH	(4 * 1024 * 1024)

void
check_stack_depth(void)
{
	char	   *here = __builtin_frame_address(0);
	ptrdiff_t	depth = stack_base - here;

	if (stack_base != NULL && (depth > FUZZ_MAX_STACK_DEPTH ||
							   depth < -FUZZ_MAX_STACK_DEPTH))
		ereport(ERROR,
				(errcode(ERRCODE_STATEMENT_TOO_COMPLEX),
				 errmsg("stack depth limit exceeded")));
}

void
fuzz_begin_input(void)
{
	stack_base = __builtin_frame_address(0);
	if (arena.next != &arena)
		fuzz_fail("memory left over from before the input");
}

void
fuzz_end_input(void)
{
	if (fuzz_jump != NULL)
		fuzz_fail("fuzz_end_input inside fuzz_try");
	arena_free_all();
	stack_base = NULL;
}


/* ------------------------------------------------------------------------
 * StringInfo
 * ------------------------------------------------------------------------
 */

void
initStringInfo(StringInfo str)
{
	str->maxlen = 256;
	str->data = palloc(str->maxlen);
	resetStringInfo(str);
}

StringInfo
makeStringInfo(void)
{
	StringInfo	str = palloc(sizeof(StringInfoData));

	initStringInfo(str);
	return str;
}

void
resetStringInfo(StringInfo str)
{
	str->data[0] = '\0';
	str->len = 0;
	str->cursor = 0;
}

void
enlargeStringInfo(StringInfo str, int needed)
{
	Size		want;
	Size		newlen;

	if (needed < 0)
		elog(ERROR, "invalid string enlargement request size: %d", needed);
	want = (Size) str->len + (Size) needed + 1;
	if (want > MaxAllocSize)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("out of memory"),
				 errdetail("Cannot enlarge string buffer containing %d bytes by %d more bytes.",
						   str->len, needed)));
	if (want <= (Size) str->maxlen)
		return;
	newlen = (Size) str->maxlen * 2;
	while (newlen < want)
		newlen *= 2;
	newlen = Min(newlen, MaxAllocSize);
	str->data = repalloc(str->data, newlen);
	str->maxlen = (int) newlen;
}

void
appendBinaryStringInfo(StringInfo str, const char *data, int datalen)
{
	enlargeStringInfo(str, datalen);
	memcpy(str->data + str->len, data, datalen);
	str->len += datalen;
	str->data[str->len] = '\0';
}

void
appendStringInfoString(StringInfo str, const char *s)
{
	appendBinaryStringInfo(str, s, strlen(s));
}

void
appendStringInfoChar(StringInfo str, char ch)
{
	appendBinaryStringInfo(str, &ch, 1);
}

void
appendStringInfo(StringInfo str, const char *fmt,...)
{
	char	   *text;

	FORMAT_INTO(text, fmt);
	appendStringInfoString(str, text);
	pfree(text);
}


/* ------------------------------------------------------------------------
 * fmgr
 * ------------------------------------------------------------------------
 */

static Datum
direct_call(PGFunction func, Oid collation, int nargs, Datum *args)
{
	LOCAL_FCINFO(fcinfo, 3);
	Datum		result;
	int			i;

	InitFunctionCallInfoData(*fcinfo, NULL, nargs, collation, NULL, NULL);
	for (i = 0; i < nargs; i++)
	{
		fcinfo->args[i].value = args[i];
		fcinfo->args[i].isnull = false;
	}
	result = func(fcinfo);
	if (fcinfo->isnull)
		elog(ERROR, "function %p returned NULL", (void *) func);
	return result;
}

Datum
DirectFunctionCall1Coll(PGFunction func, Oid collation, Datum arg1)
{
	Datum		args[1] = {arg1};

	return direct_call(func, collation, 1, args);
}

Datum
DirectFunctionCall3Coll(PGFunction func, Oid collation, Datum arg1,
						Datum arg2, Datum arg3)
{
	Datum		args[3] = {arg1, arg2, arg3};

	return direct_call(func, collation, 3, args);
}

struct varlena *
pg_detoast_datum(struct varlena *datum)
{
	if (VARATT_IS_EXTENDED(datum))
		fuzz_fail("pg_detoast_datum: the harness makes no toasted or short varlenas");
	return datum;
}


/* ------------------------------------------------------------------------
 * numeric
 * ------------------------------------------------------------------------
 */

/* The backend's limits: base-10000 weight and display scale */
#define FUZZ_NUMERIC_WEIGHT_MAX		PG_INT16_MAX
#define FUZZ_NUMERIC_DSCALE_MAX		0x3FFF

/* Opaque outside numeric.c; here, the text numeric_out prints */
struct NumericData
{
	int32		vl_len_;
	char		text[FLEXIBLE_ARRAY_MEMBER];
};

static Numeric
make_numeric(const char *text, size_t len)
{
	Numeric		num = palloc(offsetof(struct NumericData, text) + len + 1);

	SET_VARSIZE(num, offsetof(struct NumericData, text) + len + 1);
	memcpy(num->text, text, len);
	num->text[len] = '\0';
	return num;
}

static void numeric_syntax_error(const char *str) pg_attribute_noreturn();

static void
numeric_syntax_error(const char *str)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
			 errmsg("invalid input syntax for type %s: \"%s\"", "numeric", str)));
}

static void numeric_overflow(void) pg_attribute_noreturn();

static void
numeric_overflow(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
			 errmsg("value overflows numeric format")));
}

/*
 * [sign] digits [. digits] [e [sign] digits], blanks around.  Without a
 * typmod nothing is rounded: the display scale is the number of digits
 * after the point less the exponent (at least 0), and the text is the exact
 * value at that scale.
 */
Datum
numeric_in(PG_FUNCTION_ARGS)
{
	const char *str = PG_GETARG_CSTRING(0);
	const char *p = str;
	bool		negative = false;
	const char *int_digits;
	int			n_int = 0;
	const char *frac_digits = NULL;
	int			n_frac = 0;
	long		exponent = 0;
	long		point;			/* decimal point position in the digit string */
	long		dscale;
	long		n_digits;
	long		first;			/* first nonzero digit */
	long		int_len;
	StringInfoData out;
	long		i;

	while (*p == ' ' || (*p >= '\t' && *p <= '\r'))
		p++;
	if (*p == '+' || *p == '-')
		negative = (*p++ == '-');
	if (pg_strncasecmp(p, "nan", 3) == 0 || pg_strncasecmp(p, "inf", 3) == 0)
		fuzz_fail("numeric_in(\"%s\"): NaN and infinity never belong in jsonb", str);
	int_digits = p;
	while (*p >= '0' && *p <= '9')
		p++, n_int++;
	if (*p == '.')
	{
		frac_digits = ++p;
		while (*p >= '0' && *p <= '9')
			p++, n_frac++;
	}
	if (n_int + n_frac == 0)
		numeric_syntax_error(str);
	if (*p == 'e' || *p == 'E')
	{
		bool		exp_negative = false;
		int			n_exp = 0;

		p++;
		if (*p == '+' || *p == '-')
			exp_negative = (*p++ == '-');
		for (; *p >= '0' && *p <= '9'; p++, n_exp++)
		{
			if (exponent < PG_INT32_MAX)
				exponent = exponent * 10 + (*p - '0');
		}
		if (n_exp == 0)
			numeric_syntax_error(str);
		if (exponent >= PG_INT32_MAX / 2)
			numeric_overflow();
		if (exp_negative)
			exponent = -exponent;
	}
	while (*p == ' ' || (*p >= '\t' && *p <= '\r'))
		p++;
	if (*p != '\0')
		numeric_syntax_error(str);

	/* digits d[0..n_digits) with the point after d[point - 1] */
	n_digits = n_int + n_frac;
	point = n_int + exponent;
	dscale = Max((long) n_frac - exponent, 0);

#define DIGIT(k) ((k) < n_int ? int_digits[(k)] : frac_digits[(k) - n_int])

	for (first = 0; first < n_digits && DIGIT(first) == '0'; first++)
		;
	if (first == n_digits)
		negative = false;		/* zero has no sign */
	int_len = first < n_digits && first < point ? point - first : 0;
	if (dscale > FUZZ_NUMERIC_DSCALE_MAX ||
		int_len > (long) (FUZZ_NUMERIC_WEIGHT_MAX + 1) * 4)
		numeric_overflow();

	initStringInfo(&out);
	if (negative)
		appendStringInfoChar(&out, '-');
	if (int_len == 0)
		appendStringInfoChar(&out, '0');
	for (i = first; i < point && int_len > 0; i++)
		appendStringInfoChar(&out, i < n_digits ? DIGIT(i) : '0');
	if (dscale > 0)
	{
		appendStringInfoChar(&out, '.');
		for (i = point; i < point + dscale; i++)
			appendStringInfoChar(&out, i >= 0 && i < n_digits ? DIGIT(i) : '0');
	}
#undef DIGIT

	PG_RETURN_NUMERIC(make_numeric(out.data, out.len));
}

Datum
numeric_out(PG_FUNCTION_ARGS)
{
	Numeric		num = PG_GETARG_NUMERIC(0);

	PG_RETURN_CSTRING(pstrdup(num->text));
}

Numeric
int64_to_numeric(int64 val)
{
	char		buf[32];

	snprintf(buf, sizeof(buf), INT64_FORMAT, val);
	return make_numeric(buf, strlen(buf));
}


/* ------------------------------------------------------------------------
 * Dates: Julian day numbers of the proleptic Gregorian calendar
 * ------------------------------------------------------------------------
 */

const int	day_tab[2][13] = {
	{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31, 0},
	{31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31, 0}
};

/*
 * Days are counted in 400-year eras of 146097 days, with years starting on
 * March 1st so that the leap day is the last day of a year.  2000-01-01 is
 * day 2451545.
 */
int
date2j(int year, int month, int day)
{
	int64		y = (int64) year - (month <= 2);
	int64		era = (y >= 0 ? y : y - 399) / 400;
	int64		year_of_era = y - era * 400;
	int64		day_of_year = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1;
	int64		day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 +
		day_of_year;

	/* 0000-03-01 is day 1721120 */
	return (int) (era * 146097 + day_of_era + 1721120);
}

void
j2date(int jd, int *year, int *month, int *day)
{
	int64		days = (int64) jd - 1721120;
	int64		era = (days >= 0 ? days : days - 146096) / 146097;
	int64		day_of_era = days - era * 146097;
	int64		year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36524 -
							   day_of_era / 146096) / 365;
	int64		day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 -
										   year_of_era / 100);
	int64		mp = (5 * day_of_year + 2) / 153;
	int			m = (int) (mp < 10 ? mp + 3 : mp - 9);

	*day = (int) (day_of_year - (153 * mp + 2) / 5 + 1);
	*month = m;
	*year = (int) (year_of_era + era * 400 + (m <= 2));
}


/* ------------------------------------------------------------------------
 * Encoding: the server's is UTF-8
 * ------------------------------------------------------------------------
 */

char *
pg_any_to_server(const char *s, int len, int encoding)
{
	if (encoding != PG_UTF8)
		fuzz_fail("pg_any_to_server from encoding %d: the codec only converts UTF-8",
				  encoding);
	if (len > 0 && pg_encoding_verifymbstr(PG_UTF8, s, len) != len)
		ereport(ERROR,
				(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
				 errmsg("invalid byte sequence for encoding \"UTF8\"")));
	return unconstify(char *, s);
}

char *
pg_server_to_any(const char *s, int len, int encoding)
{
	if (encoding != PG_UTF8)
		fuzz_fail("pg_server_to_any to encoding %d: the codec only converts to UTF-8",
				  encoding);
	return unconstify(char *, s);
}

/* Bytes of the longest prefix of at most limit bytes that ends on a character boundary */
int
pg_mbcliplen(const char *mbstr, int len, int limit)
{
	int			clen = 0;

	while (len > 0 && *mbstr)
	{
		int			l = pg_utf_mblen((const unsigned char *) mbstr);

		if (clen + l > limit)
			break;
		clen += l;
		if (clen == limit)
			break;
		len -= l;
		mbstr += l;
	}
	return clen;
}

/*
 * The frontend build of the JSON parser has no json_errdetail (it reports
 * through elog); the codec only puts its text in an error detail.
 */
char *
json_errdetail(JsonParseErrorType error, JsonLexContext *lex)
{
	return psprintf("JSON parse error %d.", (int) error);
}
