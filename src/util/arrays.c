/*-------------------------------------------------------------------------
 *
 * arrays.c
 *	  Arrays built in memory for multi-row statements.
 *
 * dex writes many rows with one statement over parallel arrays (unnest), so
 * a batch costs a fixed number of statements whatever its size.  These are
 * the builders, and the small hash table that matches a statement's rows
 * back to the batch's elements; everything is allocated in
 * CurrentMemoryContext.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/hsearch.h"
#include "utils/uuid.h"

#include "util/util.h"

/* Add a value (or a NULL) to an array being built. */
void
dex_array_add(ArrayBuildState *state, Datum value, bool isnull)
{
	accumArrayResult(state, value, isnull, state->element_type, CurrentMemoryContext);
}

/* The array built, as a datum. */
Datum
dex_array_result(ArrayBuildState *state)
{
	return makeArrayResult(state, CurrentMemoryContext);
}

/* uuid[] of the given ids */
Datum
dex_uuid_array(pg_uuid_t *const *ids, int n)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		elems[i] = UUIDPGetDatum(ids[i]);
	return PointerGetDatum(construct_array(elems, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
}

/*
 * A hash table for about n entries of entrysize bytes, keyed by their first
 * keysize bytes; "flags" says how keys compare (HASH_BLOBS, HASH_STRINGS).
 */
HTAB *
dex_batch_table(const char *name, Size keysize, Size entrysize, long n, int flags)
{
	HASHCTL		ctl;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = keysize;
	ctl.entrysize = entrysize;
	ctl.hcxt = CurrentMemoryContext;
	return hash_create(name, Max(n, 1), &ctl, HASH_ELEM | HASH_CONTEXT | flags);
}
