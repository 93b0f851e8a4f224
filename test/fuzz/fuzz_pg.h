/*-------------------------------------------------------------------------
 *
 * fuzz_pg.h
 *	  What the fuzzing harness needs from its stand-ins for the PostgreSQL
 *	  backend (pg_stubs.c, fuzz_jsonb.c): the per-input memory arena, catching
 *	  ereport(ERROR) as a normal outcome, and jsonb made from JSON text and
 *	  printed back as text.
 *
 * src/wire/codec.c runs outside the server in the harness.  The symbols it takes
 * from the backend (palloc, ereport, StringInfo, numeric, jsonb, ...) are
 * defined by pg_stubs.c and fuzz_jsonb.c, written for the harness: they
 * keep the documented behaviour the codec relies on and are stricter than
 * the server where a misuse would only corrupt data there (they abort).
 *
 * IDENTIFICATION
 *	  test/fuzz/fuzz_pg.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEX_FUZZ_PG_H
#define DEX_FUZZ_PG_H

#include "postgres.h"

#include "utils/jsonb.h"

/* The error that fuzz_try() caught. */
typedef struct FuzzError
{
	int			sqlerrcode;
	const char *message;
	const char *detail;
	const char *filename;
	int			lineno;
	const char *funcname;
} FuzzError;

/*
 * Start and end the processing of one input: everything palloc'd in
 * between is freed by fuzz_end_input().  fuzz_begin_input() also records
 * the stack base that check_stack_depth() measures from.
 */
extern void fuzz_begin_input(void);
extern void fuzz_end_input(void);

/*
 * Run fn(arg); return true if it returned, false if it raised an ERROR
 * (which *error, if not NULL, then describes).  Calls nest.
 */
extern bool fuzz_try(void (*fn) (void *arg), void *arg, FuzzError *error);

/* SQLSTATE of an error code, e.g. "22P03". */
extern const char *fuzz_sqlstate(int sqlerrcode);

/* Report a finding (a broken invariant) and abort: libFuzzer keeps the input. */
extern void fuzz_fail(const char *fmt,...) pg_attribute_printf(1, 2) pg_attribute_noreturn();

/* Print errors and progress to stderr (environment DEX_FUZZ_VERBOSE=1). */
extern bool fuzz_verbose;

/*
 * JSON text to jsonb, as jsonb_in would make it (keys sorted, duplicates
 * removed, the last one kept, numbers as numeric).  Returns NULL when the
 * text is not JSON that jsonb_in would accept; raises no error.
 */
extern Jsonb *fuzz_jsonb_from_text(const char *text, size_t len);

/* jsonb as JSON text, in jsonb_out's layout. */
extern char *fuzz_jsonb_to_text(Jsonb *jb);

/* Deepest array/object nesting fuzz_jsonb_from_text accepts. */
#define FUZZ_JSON_MAX_DEPTH 1000

#endif							/* DEX_FUZZ_PG_H */
