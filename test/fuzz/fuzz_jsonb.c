/*-------------------------------------------------------------------------
 *
 * fuzz_jsonb.c
 *	  A stand-in for the backend's jsonb, for the fuzzing harness: the API
 *	  src/wire/codec.c uses (pushJsonbValue, JsonbValueToJsonb, the iterator,
 *	  getIthJsonbValueFromContainer, JsonbExtractScalar), jsonb made from
 *	  JSON text like jsonb_in makes it, and jsonb printed back as text.
 *
 * Not the on-disk format: a JsonbContainer here is a 16-byte block holding
 * the header word the JsonContainer* and JB_ROOT_* macros read (flags and
 * count, as in the real format), a magic number, and a pointer to a node
 * that lists the children as JsonbValues: an object's keys in jsonb order
 * (shorter keys first, then bytewise; of duplicate keys the last one
 * given), nested containers as jbvBinary.  Every string is a palloc'd chunk
 * of exactly its length, without a terminating NUL, so AddressSanitizer
 * catches a reader that runs past val.string.len.
 *
 * Misuse that the backend only catches with assertions enabled (a value
 * pushed without its key, an unbalanced end, a non-scalar where a scalar
 * belongs, a container that is not one) is a finding here: it aborts.
 *
 * Written for the harness, not taken from PostgreSQL.
 *
 * IDENTIFICATION
 *	  test/fuzz/fuzz_jsonb.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/jsonapi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/numeric.h"

#include "fuzz_pg.h"

#define FJ_MAGIC	0x4a534f4e

/* The children of a container */
typedef struct FjNode
{
	int			n;				/* elements, or key/value pairs */
	JsonbValue *vals;			/* arrays: n elements; objects: key, value, ... */
} FjNode;

/* What a JsonbContainer pointer points to here */
typedef struct FjContainer
{
	uint32		header;			/* JB_F* flags | count, as the macros expect */
	uint32		magic;
	char		node[sizeof(FjNode *)]; /* an FjNode *, maybe unaligned */
} FjContainer;

/* Most elements or pairs of a container: what the header's count field holds */
#define FJ_MAX_ELEMS	((int) JB_CMASK)

/* A key pushed whose value has not come yet */
#define FJ_NO_VALUE		((enum jbvType) 0x7f)

static FjNode *
fj_node(const JsonbContainer *jc)
{
	const FjContainer *c = (const FjContainer *) jc;
	FjNode	   *node;

	if (c == NULL || c->magic != FJ_MAGIC)
		fuzz_fail("%p is not a jsonb container made by the harness", (const void *) jc);
	memcpy(&node, c->node, sizeof(node));
	return node;
}

static JsonbContainer *
fj_container(FjNode *node, uint32 header)
{
	FjContainer *c = palloc(sizeof(FjContainer));

	c->header = header;
	c->magic = FJ_MAGIC;
	memcpy(c->node, &node, sizeof(node));
	return (JsonbContainer *) c;
}

static bool
fj_is_scalar(const JsonbValue *v)
{
	return v->type == jbvNull || v->type == jbvString ||
		v->type == jbvNumeric || v->type == jbvBool;
}

static char *
copy_bytes(const char *s, int len)
{
	char	   *copy;

	if (len < 0)
		fuzz_fail("jsonb string of length %d", len);
	copy = palloc(len);			/* exactly len: no NUL to hide overruns */
	memcpy(copy, s, len);
	return copy;
}

static JsonbContainer *fj_from_value(const JsonbValue *v);

/* A child as stored: scalars copied, containers as jbvBinary */
static void
fj_store(const JsonbValue *in, JsonbValue *out)
{
	if (in->type == jbvArray || in->type == jbvObject)
	{
		out->type = jbvBinary;
		out->val.binary.data = fj_from_value(in);
		out->val.binary.len = sizeof(FjContainer);
		return;
	}
	if (in->type == jbvBinary)
	{
		(void) fj_node(in->val.binary.data);
		*out = *in;
		return;
	}
	if (!fj_is_scalar(in))
		fuzz_fail("jsonb value of type %d", (int) in->type);
	*out = *in;
	if (in->type == jbvString)
		out->val.string.val = copy_bytes(in->val.string.val, in->val.string.len);
	if (in->type == jbvNumeric && in->val.numeric == NULL)
		fuzz_fail("jsonb numeric without a value");
}

/* An in-memory jbvArray or jbvObject (as pushJsonbValue builds) as a container */
static JsonbContainer *
fj_from_value(const JsonbValue *v)
{
	FjNode	   *node = palloc(sizeof(FjNode));
	int			i;

	check_stack_depth();
	if (v->type == jbvArray)
	{
		node->n = v->val.array.nElems;
		node->vals = palloc(sizeof(JsonbValue) * Max(node->n, 1));
		if (v->val.array.rawScalar &&
			(node->n != 1 || !fj_is_scalar(&v->val.array.elems[0])))
			fuzz_fail("raw scalar array with %d elements", node->n);
		for (i = 0; i < node->n; i++)
			fj_store(&v->val.array.elems[i], &node->vals[i]);
		return fj_container(node, JB_FARRAY | (uint32) node->n |
							(v->val.array.rawScalar ? JB_FSCALAR : 0));
	}
	if (v->type == jbvObject)
	{
		node->n = v->val.object.nPairs;
		node->vals = palloc(sizeof(JsonbValue) * 2 * Max(node->n, 1));
		for (i = 0; i < node->n; i++)
		{
			const JsonbPair *pair = &v->val.object.pairs[i];

			if (pair->key.type != jbvString)
				fuzz_fail("jsonb object key of type %d", (int) pair->key.type);
			fj_store(&pair->key, &node->vals[2 * i]);
			fj_store(&pair->value, &node->vals[2 * i + 1]);
		}
		return fj_container(node, JB_FOBJECT | (uint32) node->n);
	}
	if (v->type == jbvBinary)
	{
		(void) fj_node(v->val.binary.data);
		return v->val.binary.data;
	}
	fuzz_fail("jsonb container of type %d", (int) v->type);
}

/* A container back to an in-memory value, for pushing a jbvBinary */
static void
fj_to_value(const JsonbContainer *jc, JsonbValue *out)
{
	FjNode	   *node = fj_node(jc);
	int			i;

	check_stack_depth();
	if (JsonContainerIsArray(jc))
	{
		out->type = jbvArray;
		out->val.array.nElems = node->n;
		out->val.array.rawScalar = JsonContainerIsScalar(jc);
		out->val.array.elems = palloc(sizeof(JsonbValue) * Max(node->n, 1));
		for (i = 0; i < node->n; i++)
		{
			if (node->vals[i].type == jbvBinary)
				fj_to_value(node->vals[i].val.binary.data, &out->val.array.elems[i]);
			else
				out->val.array.elems[i] = node->vals[i];
		}
		return;
	}
	out->type = jbvObject;
	out->val.object.nPairs = node->n;
	out->val.object.pairs = palloc(sizeof(JsonbPair) * Max(node->n, 1));
	for (i = 0; i < node->n; i++)
	{
		JsonbPair  *pair = &out->val.object.pairs[i];

		pair->key = node->vals[2 * i];
		pair->order = i;
		if (node->vals[2 * i + 1].type == jbvBinary)
			fj_to_value(node->vals[2 * i + 1].val.binary.data, &pair->value);
		else
			pair->value = node->vals[2 * i + 1];
	}
}


/* ------------------------------------------------------------------------
 * Building: pushJsonbValue and JsonbValueToJsonb
 * ------------------------------------------------------------------------
 */

/* jsonb key order: shorter first, then bytewise; of equal keys, the later first */
static int
pair_cmp(const void *a, const void *b)
{
	const JsonbPair *x = a;
	const JsonbPair *y = b;
	int			c;

	if (x->key.val.string.len != y->key.val.string.len)
		return x->key.val.string.len < y->key.val.string.len ? -1 : 1;
	c = memcmp(x->key.val.string.val, y->key.val.string.val,
			   x->key.val.string.len);
	if (c != 0)
		return c;
	return x->order > y->order ? -1 : (x->order < y->order ? 1 : 0);
}

/* Sort the pairs into key order and keep the last of duplicate keys */
static void
finish_object(JsonbValue *object)
{
	JsonbPair  *pairs = object->val.object.pairs;
	int			n = object->val.object.nPairs;
	int			kept = 0;
	int			i;

	if (n > 1)
		qsort(pairs, n, sizeof(JsonbPair), pair_cmp);
	for (i = 0; i < n; i++)
	{
		if (kept > 0 &&
			pairs[kept - 1].key.val.string.len == pairs[i].key.val.string.len &&
			memcmp(pairs[kept - 1].key.val.string.val, pairs[i].key.val.string.val,
				   pairs[i].key.val.string.len) == 0)
			continue;
		pairs[kept++] = pairs[i];
	}
	object->val.object.nPairs = kept;
}

static void
append_to(JsonbParseState *state, JsonbIteratorToken seq, const JsonbValue *v)
{
	JsonbValue *cont = &state->contVal;

	if (!fj_is_scalar(v) && v->type != jbvArray && v->type != jbvObject)
		fuzz_fail("pushJsonbValue: a value of type %d cannot be pushed", (int) v->type);

	if (seq == WJB_ELEM)
	{
		if (cont->type != jbvArray)
			fuzz_fail("pushJsonbValue: WJB_ELEM outside an array");
		if (cont->val.array.rawScalar && cont->val.array.nElems > 0)
			fuzz_fail("pushJsonbValue: a raw scalar array takes one element");
		if (cont->val.array.nElems >= FJ_MAX_ELEMS)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("number of jsonb array elements exceeds the maximum allowed (%d)",
							FJ_MAX_ELEMS)));
		if ((Size) cont->val.array.nElems >= state->size)
		{
			state->size *= 2;
			cont->val.array.elems = repalloc(cont->val.array.elems,
											 sizeof(JsonbValue) * state->size);
		}
		cont->val.array.elems[cont->val.array.nElems++] = *v;
		return;
	}

	/* WJB_VALUE */
	if (cont->type != jbvObject)
		fuzz_fail("pushJsonbValue: WJB_VALUE outside an object");
	if (cont->val.object.nPairs == 0 ||
		cont->val.object.pairs[cont->val.object.nPairs - 1].value.type != FJ_NO_VALUE)
		fuzz_fail("pushJsonbValue: WJB_VALUE without a WJB_KEY");
	cont->val.object.pairs[cont->val.object.nPairs - 1].value = *v;
}

JsonbValue *
pushJsonbValue(JsonbParseState **pstate, JsonbIteratorToken seq,
			   JsonbValue *jbval)
{
	JsonbParseState *state = *pstate;
	JsonbValue	unpacked;

	if ((seq == WJB_ELEM || seq == WJB_VALUE) && jbval != NULL &&
		jbval->type == jbvBinary)
	{
		fj_to_value(jbval->val.binary.data, &unpacked);
		jbval = &unpacked;
	}

	switch (seq)
	{
		case WJB_BEGIN_ARRAY:
		case WJB_BEGIN_OBJECT:
			if (jbval != NULL && seq == WJB_BEGIN_OBJECT)
				fuzz_fail("pushJsonbValue: WJB_BEGIN_OBJECT takes no value");
			if (jbval != NULL && jbval->type != jbvArray)
				fuzz_fail("pushJsonbValue: WJB_BEGIN_ARRAY with a value of type %d",
						  (int) jbval->type);
			state = palloc0(sizeof(JsonbParseState));
			state->next = *pstate;
			state->size = 4;
			if (seq == WJB_BEGIN_ARRAY)
			{
				state->contVal.type = jbvArray;
				state->contVal.val.array.rawScalar = jbval != NULL &&
					jbval->val.array.rawScalar;
				if (state->contVal.val.array.rawScalar && *pstate != NULL)
					fuzz_fail("pushJsonbValue: a raw scalar inside a container");
				state->contVal.val.array.elems = palloc(sizeof(JsonbValue) * state->size);
			}
			else
			{
				state->contVal.type = jbvObject;
				state->contVal.val.object.pairs = palloc(sizeof(JsonbPair) * state->size);
			}
			*pstate = state;
			return &state->contVal;

		case WJB_KEY:
			if (state == NULL || state->contVal.type != jbvObject)
				fuzz_fail("pushJsonbValue: WJB_KEY outside an object");
			if (jbval == NULL || jbval->type != jbvString)
				fuzz_fail("pushJsonbValue: a key must be a string");
			if (state->contVal.val.object.nPairs > 0 &&
				state->contVal.val.object.pairs[state->contVal.val.object.nPairs - 1].value.type == FJ_NO_VALUE)
				fuzz_fail("pushJsonbValue: WJB_KEY after a key without its value");
			if (state->contVal.val.object.nPairs >= FJ_MAX_ELEMS)
				ereport(ERROR,
						(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						 errmsg("number of jsonb object pairs exceeds the maximum allowed (%d)",
								FJ_MAX_ELEMS)));
			if ((Size) state->contVal.val.object.nPairs >= state->size)
			{
				state->size *= 2;
				state->contVal.val.object.pairs =
					repalloc(state->contVal.val.object.pairs,
							 sizeof(JsonbPair) * state->size);
			}
			{
				JsonbPair  *pair = &state->contVal.val.object.pairs[state->contVal.val.object.nPairs];

				pair->key = *jbval;
				pair->value.type = FJ_NO_VALUE;
				pair->order = state->contVal.val.object.nPairs++;
			}
			return NULL;

		case WJB_VALUE:
		case WJB_ELEM:
			if (state == NULL)
				fuzz_fail("pushJsonbValue: a value outside any container");
			if (jbval == NULL)
				fuzz_fail("pushJsonbValue: no value");
			append_to(state, seq, jbval);
			return NULL;

		case WJB_END_ARRAY:
		case WJB_END_OBJECT:
			if (state == NULL)
				fuzz_fail("pushJsonbValue: an end without a beginning");
			if (state->contVal.type != (seq == WJB_END_ARRAY ? jbvArray : jbvObject))
				fuzz_fail("pushJsonbValue: the end does not match the beginning");
			if (seq == WJB_END_OBJECT)
			{
				if (state->contVal.val.object.nPairs > 0 &&
					state->contVal.val.object.pairs[state->contVal.val.object.nPairs - 1].value.type == FJ_NO_VALUE)
					fuzz_fail("pushJsonbValue: an object ends after a key without its value");
				finish_object(&state->contVal);
			}
			else if (state->contVal.val.array.rawScalar &&
					 state->contVal.val.array.nElems != 1)
				fuzz_fail("pushJsonbValue: a raw scalar array ends with %d elements",
						  state->contVal.val.array.nElems);
			*pstate = state->next;
			if (*pstate != NULL)
				append_to(*pstate,
						  (*pstate)->contVal.type == jbvArray ? WJB_ELEM : WJB_VALUE,
						  &state->contVal);
			return &state->contVal;

		case WJB_DONE:
			break;
	}
	fuzz_fail("pushJsonbValue: token %d", (int) seq);
}

Jsonb *
JsonbValueToJsonb(JsonbValue *val)
{
	JsonbContainer *c;
	Jsonb	   *jb;

	if (fj_is_scalar(val))
	{
		JsonbValue	array;

		array.type = jbvArray;
		array.val.array.nElems = 1;
		array.val.array.elems = val;
		array.val.array.rawScalar = true;
		c = fj_from_value(&array);
	}
	else
		c = fj_from_value(val);

	jb = palloc(VARHDRSZ + sizeof(FjContainer));
	SET_VARSIZE(jb, VARHDRSZ + sizeof(FjContainer));
	memcpy(&jb->root, c, sizeof(FjContainer));
	return jb;
}


/* ------------------------------------------------------------------------
 * Reading: iterator and accessors
 * ------------------------------------------------------------------------
 */

JsonbIterator *
JsonbIteratorInit(JsonbContainer *container)
{
	JsonbIterator *it = palloc0(sizeof(JsonbIterator));

	(void) fj_node(container);
	it->container = container;
	it->nElems = JsonContainerSize(container);
	it->isScalar = JsonContainerIsScalar(container);
	it->state = JsonContainerIsArray(container) ? JBI_ARRAY_START : JBI_OBJECT_START;
	return it;
}

/* End of the current container: back to the parent iterator */
static JsonbIteratorToken
iterator_end(JsonbIterator **it, JsonbIteratorToken token)
{
	JsonbIterator *parent = (*it)->parent;

	pfree(*it);
	*it = parent;
	return token;
}

JsonbIteratorToken
JsonbIteratorNext(JsonbIterator **it, JsonbValue *val, bool skipNested)
{
	FjNode	   *node;
	JsonbValue *child;

	if (*it == NULL)
		return WJB_DONE;
	node = fj_node((*it)->container);

	switch ((*it)->state)
	{
		case JBI_ARRAY_START:
			val->type = jbvArray;
			val->val.array.nElems = node->n;
			val->val.array.rawScalar = (*it)->isScalar;
			val->val.array.elems = NULL;
			(*it)->state = JBI_ARRAY_ELEM;
			return WJB_BEGIN_ARRAY;

		case JBI_ARRAY_ELEM:
			if ((*it)->curIndex >= node->n)
				return iterator_end(it, WJB_END_ARRAY);
			child = &node->vals[(*it)->curIndex++];
			if (child->type != jbvBinary || skipNested)
			{
				*val = *child;
				return WJB_ELEM;
			}
			break;

		case JBI_OBJECT_START:
			val->type = jbvObject;
			val->val.object.nPairs = node->n;
			val->val.object.pairs = NULL;
			(*it)->state = JBI_OBJECT_KEY;
			return WJB_BEGIN_OBJECT;

		case JBI_OBJECT_KEY:
			if ((*it)->curIndex >= node->n)
				return iterator_end(it, WJB_END_OBJECT);
			*val = node->vals[2 * (*it)->curIndex];
			(*it)->state = JBI_OBJECT_VALUE;
			return WJB_KEY;

		case JBI_OBJECT_VALUE:
			child = &node->vals[2 * (*it)->curIndex++ + 1];
			(*it)->state = JBI_OBJECT_KEY;
			if (child->type != jbvBinary || skipNested)
			{
				*val = *child;
				return WJB_VALUE;
			}
			break;

		default:
			fuzz_fail("jsonb iterator in state %d", (int) (*it)->state);
	}

	/* descend into a nested container */
	{
		JsonbIterator *sub = JsonbIteratorInit(child->val.binary.data);

		sub->parent = *it;
		*it = sub;
		return JsonbIteratorNext(it, val, skipNested);
	}
}

JsonbValue *
getIthJsonbValueFromContainer(JsonbContainer *container, uint32 i)
{
	FjNode	   *node = fj_node(container);
	JsonbValue *result;

	if (!JsonContainerIsArray(container))
		elog(ERROR, "not a jsonb array");
	if (i >= (uint32) node->n)
		return NULL;
	result = palloc(sizeof(JsonbValue));
	*result = node->vals[i];
	return result;
}

bool
JsonbExtractScalar(JsonbContainer *jbc, JsonbValue *res)
{
	FjNode	   *node = fj_node(jbc);

	if (!JsonContainerIsArray(jbc) || !JsonContainerIsScalar(jbc))
	{
		res->type = jbvNull;
		return false;
	}
	if (node->n != 1)
		fuzz_fail("raw scalar container with %d elements", node->n);
	*res = node->vals[0];
	return true;
}


/* ------------------------------------------------------------------------
 * JSON text in and out
 * ------------------------------------------------------------------------
 */

typedef struct TextParse
{
	JsonbParseState *state;
	JsonbValue *result;
} TextParse;

/* A container's beginning or end; the end of the outermost one is the result */
static void
tp_push(void *arg, JsonbIteratorToken tok)
{
	TextParse  *tp = arg;
	JsonbValue *v = pushJsonbValue(&tp->state, tok, NULL);

	if (tok == WJB_END_OBJECT || tok == WJB_END_ARRAY)
		tp->result = v;
}

static void
tp_object_start(void *arg)
{
	tp_push(arg, WJB_BEGIN_OBJECT);
}

static void
tp_object_end(void *arg)
{
	tp_push(arg, WJB_END_OBJECT);
}

static void
tp_array_start(void *arg)
{
	tp_push(arg, WJB_BEGIN_ARRAY);
}

static void
tp_array_end(void *arg)
{
	tp_push(arg, WJB_END_ARRAY);
}

static void
tp_field_start(void *arg, char *fname, bool isnull)
{
	TextParse  *tp = arg;
	JsonbValue	key;

	key.type = jbvString;
	key.val.string.val = fname;
	key.val.string.len = strlen(fname);
	pushJsonbValue(&tp->state, WJB_KEY, &key);
}

static void
tp_scalar(void *arg, char *token, JsonTokenType tokentype)
{
	TextParse  *tp = arg;
	JsonbValue	v;

	switch (tokentype)
	{
		case JSON_TOKEN_STRING:
			v.type = jbvString;
			v.val.string.val = token;
			v.val.string.len = strlen(token);
			break;
		case JSON_TOKEN_NUMBER:
			v.type = jbvNumeric;
			v.val.numeric = DatumGetNumeric(DirectFunctionCall3(numeric_in,
																CStringGetDatum(token),
																ObjectIdGetDatum(InvalidOid),
																Int32GetDatum(-1)));
			break;
		case JSON_TOKEN_TRUE:
		case JSON_TOKEN_FALSE:
			v.type = jbvBool;
			v.val.boolean = tokentype == JSON_TOKEN_TRUE;
			break;
		case JSON_TOKEN_NULL:
			v.type = jbvNull;
			break;
		default:
			fuzz_fail("JSON scalar token of type %d", (int) tokentype);
	}

	if (tp->state == NULL)
	{
		JsonbValue	array;

		array.type = jbvArray;
		array.val.array.rawScalar = true;
		pushJsonbValue(&tp->state, WJB_BEGIN_ARRAY, &array);
		pushJsonbValue(&tp->state, WJB_ELEM, &v);
		tp->result = pushJsonbValue(&tp->state, WJB_END_ARRAY, NULL);
	}
	else
		pushJsonbValue(&tp->state, tp->state->contVal.type == jbvArray ?
					   WJB_ELEM : WJB_VALUE, &v);
}

typedef struct TextParseCall
{
	char	   *text;
	int			len;
	Jsonb	   *result;
} TextParseCall;

static void
parse_text(void *arg)
{
	TextParseCall *call = arg;
	TextParse	tp = {NULL, NULL};
	JsonSemAction sem;
	JsonLexContext *lex;
	JsonParseErrorType result;

	memset(&sem, 0, sizeof(sem));
	sem.semstate = &tp;
	sem.object_start = tp_object_start;
	sem.object_end = tp_object_end;
	sem.array_start = tp_array_start;
	sem.array_end = tp_array_end;
	sem.object_field_start = tp_field_start;
	sem.scalar = tp_scalar;

	lex = makeJsonLexContextCstringLen(call->text, call->len, PG_UTF8, true);
	result = pg_parse_json(lex, &sem);
	if (result != JSON_SUCCESS)
	{
		if (fuzz_verbose)
			fprintf(stderr, "dex fuzz: not JSON (JsonParseErrorType %d)\n", (int) result);
		return;
	}
	if (tp.result == NULL || tp.state != NULL)
		fuzz_fail("JSON parsed, but the jsonb is incomplete");
	call->result = JsonbValueToJsonb(tp.result);
}

/* Nesting depth of JSON text, not counting brackets inside strings */
static int
json_depth(const char *s, size_t len)
{
	int			depth = 0;
	int			max = 0;
	bool		in_string = false;
	size_t		i;

	for (i = 0; i < len; i++)
	{
		char		c = s[i];

		if (in_string)
		{
			if (c == '\\')
				i++;
			else if (c == '"')
				in_string = false;
		}
		else if (c == '"')
			in_string = true;
		else if (c == '[' || c == '{')
		{
			depth++;
			max = Max(max, depth);
		}
		else if (c == ']' || c == '}')
			depth--;
	}
	return max;
}

Jsonb *
fuzz_jsonb_from_text(const char *text, size_t len)
{
	TextParseCall call;

	/* what a text value of a UTF-8 database can hold */
	if (len > MaxAllocSize / 2 ||
		pg_encoding_verifymbstr(PG_UTF8, text, (int) len) != (int) len)
		return NULL;
	/* the server stops deep nesting with its stack depth check */
	if (json_depth(text, len) > FUZZ_JSON_MAX_DEPTH)
		return NULL;

	call.text = pnstrdup(text, len);
	call.len = (int) len;
	call.result = NULL;
	if (!fuzz_try(parse_text, &call, NULL))
		return NULL;
	return call.result;
}

static void
print_string(StringInfo out, const char *s, int len)
{
	int			i;

	appendStringInfoChar(out, '"');
	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		switch (c)
		{
			case '"':
				appendStringInfoString(out, "\\\"");
				break;
			case '\\':
				appendStringInfoString(out, "\\\\");
				break;
			case '\b':
				appendStringInfoString(out, "\\b");
				break;
			case '\f':
				appendStringInfoString(out, "\\f");
				break;
			case '\n':
				appendStringInfoString(out, "\\n");
				break;
			case '\r':
				appendStringInfoString(out, "\\r");
				break;
			case '\t':
				appendStringInfoString(out, "\\t");
				break;
			default:
				if (c < ' ')
					appendStringInfo(out, "\\u%04x", c);
				else
					appendStringInfoChar(out, (char) c);
		}
	}
	appendStringInfoChar(out, '"');
}

static void print_container(StringInfo out, const JsonbContainer *jc);

static void
print_value(StringInfo out, const JsonbValue *v)
{
	switch (v->type)
	{
		case jbvNull:
			appendStringInfoString(out, "null");
			break;
		case jbvBool:
			appendStringInfoString(out, v->val.boolean ? "true" : "false");
			break;
		case jbvString:
			print_string(out, v->val.string.val, v->val.string.len);
			break;
		case jbvNumeric:
			appendStringInfoString(out,
								   DatumGetCString(DirectFunctionCall1(numeric_out,
																	   NumericGetDatum(v->val.numeric))));
			break;
		case jbvBinary:
			print_container(out, v->val.binary.data);
			break;
		default:
			fuzz_fail("printing a jsonb value of type %d", (int) v->type);
	}
}

static void
print_container(StringInfo out, const JsonbContainer *jc)
{
	FjNode	   *node = fj_node(jc);
	int			i;

	check_stack_depth();
	if (JsonContainerIsScalar(jc))
	{
		print_value(out, &node->vals[0]);
		return;
	}
	appendStringInfoChar(out, JsonContainerIsObject(jc) ? '{' : '[');
	for (i = 0; i < node->n; i++)
	{
		if (i > 0)
			appendStringInfoString(out, ", ");
		if (JsonContainerIsObject(jc))
		{
			print_value(out, &node->vals[2 * i]);
			appendStringInfoString(out, ": ");
			print_value(out, &node->vals[2 * i + 1]);
		}
		else
			print_value(out, &node->vals[i]);
	}
	appendStringInfoChar(out, JsonContainerIsObject(jc) ? '}' : ']');
}

char *
fuzz_jsonb_to_text(Jsonb *jb)
{
	StringInfoData out;

	initStringInfo(&out);
	print_container(&out, &jb->root);
	return out.data;
}
