/*-------------------------------------------------------------------------
 *
 * codec_json.c
 *	  The canonical proto3 JSON form (jsonb) of every dex.v1 message: the
 *	  well-known types as strings, messages to jsonb and jsonb to messages.
 *
 * The rules of the codec (strictness, memory, errors and their SQLSTATEs)
 * are codec.c's header's; the descriptor table and the reflection helpers
 * it uses are codec.c's (codec_internal.h).
 *
 * JSON output follows the canonical proto3 mapping; fractional seconds of a
 * Timestamp or Duration get 0, 3, 6 or 9 digits ("1.500s", not "1.5s").
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "common/jsonapi.h"
#include "common/shortest_dec.h"
#include "datatype/timestamp.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/datetime.h"
#include "utils/float.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/numeric.h"

#include "codec.h"
#include "codec_internal.h"
#include "google/protobuf/duration.pb-c.h"
#include "google/protobuf/timestamp.pb-c.h"


/* ------------------------------------------------------------------------
 * Well-known types as JSON strings
 * ------------------------------------------------------------------------
 */

/* Append ".ddd", ".dddddd" or ".ddddddddd" for nanos > 0, nothing for 0. */
static char *
format_nanos(char *out, int32 nanos)
{
	Assert(nanos >= 0 && nanos < NANOS_PER_SECOND);
	if (nanos == 0)
		*out = '\0';
	else if (nanos % 1000000 == 0)
		out += sprintf(out, ".%03d", nanos / 1000000);
	else if (nanos % 1000 == 0)
		out += sprintf(out, ".%06d", nanos / 1000);
	else
		out += sprintf(out, ".%09d", nanos);
	return out;
}

static char *
format_timestamp(int64 seconds, int32 nanos)
{
	char		buf[64];
	char	   *p;
	int64		days;
	int64		secs_of_day;
	int			year,
				month,
				day;

	if (!dex_pb_timestamp_is_valid(seconds, nanos))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("google.protobuf.Timestamp out of range"),
				 errdetail("Seconds %lld and nanos %d are not a time between 0001-01-01 and 9999-12-31 UTC.",
						   (long long) seconds, nanos)));

	/* floor division, so that times before 1970 land on the right day */
	days = seconds / SECS_PER_DAY;
	secs_of_day = seconds % SECS_PER_DAY;
	if (secs_of_day < 0)
	{
		secs_of_day += SECS_PER_DAY;
		days--;
	}
	j2date((int) (days + UNIX_EPOCH_JDATE), &year, &month, &day);

	p = buf + sprintf(buf, "%04d-%02d-%02dT%02d:%02d:%02d",
					  year, month, day,
					  (int) (secs_of_day / SECS_PER_HOUR),
					  (int) (secs_of_day % SECS_PER_HOUR / SECS_PER_MINUTE),
					  (int) (secs_of_day % SECS_PER_MINUTE));
	p = format_nanos(p, nanos);
	strcpy(p, "Z");
	return pstrdup(buf);
}

static char *
format_duration(int64 seconds, int32 nanos)
{
	char		buf[64];
	char	   *p = buf;

	if (!dex_pb_duration_is_valid(seconds, nanos))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("google.protobuf.Duration out of range"),
				 errdetail("Seconds %lld and nanos %d are not a valid duration of at most %lld seconds.",
						   (long long) seconds, nanos,
						   (long long) DURATION_MAX_SECONDS)));

	if (seconds < 0 || nanos < 0)
		*p++ = '-';
	p += sprintf(p, "%lld", (long long) (seconds < 0 ? -seconds : seconds));
	p = format_nanos(p, nanos < 0 ? -nanos : nanos);
	strcpy(p, "s");
	return pstrdup(buf);
}

/* Parse exactly ndigits decimal digits at *p. */
static bool
scan_digits(const char **p, const char *end, int ndigits, int *value)
{
	int			v = 0;
	int			i;

	if (end - *p < ndigits)
		return false;
	for (i = 0; i < ndigits; i++)
	{
		char		c = (*p)[i];

		if (c < '0' || c > '9')
			return false;
		v = v * 10 + (c - '0');
	}
	*p += ndigits;
	*value = v;
	return true;
}

/* Parse ".d{1,9}" at *p into nanos, if there is a '.' at all. */
static bool
scan_fraction(const char **p, const char *end, int32 *nanos)
{
	int			ndigits = 0;
	int32		v = 0;

	*nanos = 0;
	if (*p >= end || **p != '.')
		return true;
	(*p)++;
	while (*p < end && **p >= '0' && **p <= '9')
	{
		if (++ndigits > 9)
			return false;
		v = v * 10 + (**p - '0');
		(*p)++;
	}
	if (ndigits == 0)
		return false;
	while (ndigits++ < 9)
		v *= 10;
	*nanos = v;
	return true;
}

/*
 * RFC 3339: YYYY-MM-DDThh:mm:ss[.f{1,9}](Z|+hh:mm|-hh:mm).  Returns false on
 * bad syntax; the range of the result is checked by the caller.
 */
static bool
parse_timestamp(const char *s, int len, int64 *seconds, int32 *nanos)
{
	const char *p = s;
	const char *end = s + len;
	int			year,
				month,
				day,
				hour,
				minute,
				second;
	int64		offset = 0;

	if (!scan_digits(&p, end, 4, &year) || p >= end || *p++ != '-' ||
		!scan_digits(&p, end, 2, &month) || p >= end || *p++ != '-' ||
		!scan_digits(&p, end, 2, &day) || p >= end ||
		(*p != 'T' && *p != 't'))
		return false;
	p++;
	if (!scan_digits(&p, end, 2, &hour) || p >= end || *p++ != ':' ||
		!scan_digits(&p, end, 2, &minute) || p >= end || *p++ != ':' ||
		!scan_digits(&p, end, 2, &second) ||
		!scan_fraction(&p, end, nanos) || p >= end)
		return false;

	if (*p == 'Z' || *p == 'z')
		p++;
	else if (*p == '+' || *p == '-')
	{
		int			sign = (*p++ == '-') ? -1 : 1;
		int			oh,
					om;

		if (!scan_digits(&p, end, 2, &oh) || p >= end || *p++ != ':' ||
			!scan_digits(&p, end, 2, &om) || oh > 23 || om > 59)
			return false;
		offset = sign * (oh * SECS_PER_HOUR + om * SECS_PER_MINUTE);
	}
	else
		return false;
	if (p != end)
		return false;

	if (year < 1 || month < 1 || month > MONTHS_PER_YEAR || day < 1 ||
		day > day_tab[isleap(year)][month - 1] ||
		hour > 23 || minute > 59 || second > 59)
		return false;

	/* local time minus its offset from UTC */
	*seconds = (int64) (date2j(year, month, day) - UNIX_EPOCH_JDATE) * SECS_PER_DAY +
		hour * SECS_PER_HOUR + minute * SECS_PER_MINUTE + second - offset;
	return true;
}

/* "[-]<seconds>[.f{1,9}]s".  Range is checked by the caller. */
static bool
parse_duration(const char *s, int len, int64 *seconds, int32 *nanos)
{
	const char *p = s;
	const char *end = s + len;
	bool		negative = false;
	int64		secs = 0;
	int			ndigits = 0;

	if (p < end && *p == '-')
	{
		negative = true;
		p++;
	}
	while (p < end && *p >= '0' && *p <= '9')
	{
		/* more digits than any valid duration has: reject before overflow */
		if (++ndigits > 15)
			return false;
		secs = secs * 10 + (*p++ - '0');
	}
	if (ndigits == 0 || !scan_fraction(&p, end, nanos))
		return false;
	if (p >= end || *p++ != 's' || p != end)
		return false;

	*seconds = negative ? -secs : secs;
	if (negative)
		*nanos = -*nanos;
	return true;
}


/* ------------------------------------------------------------------------
 * Messages to jsonb
 * ------------------------------------------------------------------------
 */

static JsonbValue *push_message(JsonbParseState **state,
								const ProtobufCMessage *msg);

/*
 * Push a scalar wherever the parse state is: as an element of an open
 * array, as the value of an open object's current key, or as a raw scalar
 * at the top level.
 */
static JsonbValue *
push_scalar(JsonbParseState **state, JsonbValue *value)
{
	if (*state == NULL)
	{
		JsonbValue	array;

		array.type = jbvArray;
		array.val.array.rawScalar = true;
		array.val.array.nElems = 1;
		array.val.array.elems = NULL;
		pushJsonbValue(state, WJB_BEGIN_ARRAY, &array);
		pushJsonbValue(state, WJB_ELEM, value);
		return pushJsonbValue(state, WJB_END_ARRAY, NULL);
	}
	if ((*state)->contVal.type == jbvArray)
		return pushJsonbValue(state, WJB_ELEM, value);
	return pushJsonbValue(state, WJB_VALUE, value);
}

static JsonbValue *
push_string(JsonbParseState **state, char *str, int len)
{
	JsonbValue	v;

	v.type = jbvString;
	v.val.string.val = str;
	v.val.string.len = len;
	return push_scalar(state, &v);
}

/* A UTF-8 string of a message, converted to the server encoding. */
static JsonbValue *
push_utf8_string(JsonbParseState **state, const char *str)
{
	char	   *converted;

	if (str == NULL)
		str = "";
	converted = pg_any_to_server(str, strlen(str), PG_UTF8);
	return push_string(state, converted, strlen(converted));
}

static JsonbValue *
push_numeric(JsonbParseState **state, Numeric num)
{
	JsonbValue	v;

	v.type = jbvNumeric;
	v.val.numeric = num;
	return push_scalar(state, &v);
}

static Numeric
numeric_from_cstring(const char *str)
{
	return DatumGetNumeric(DirectFunctionCall3(numeric_in,
											   CStringGetDatum(str),
											   ObjectIdGetDatum(InvalidOid),
											   Int32GetDatum(-1)));
}

/* float and double: the shortest decimal that reads back exactly */
static JsonbValue *
push_double(JsonbParseState **state, double value, bool single)
{
	char		buf[DOUBLE_SHORTEST_DECIMAL_LEN + FLOAT_SHORTEST_DECIMAL_LEN];

	if (isnan(value))
		return push_string(state, pstrdup("NaN"), 3);
	if (isinf(value))
		return value > 0 ? push_string(state, pstrdup("Infinity"), 8) :
			push_string(state, pstrdup("-Infinity"), 9);
	if (single)
		float_to_shortest_decimal_buf((float) value, buf);
	else
		double_to_shortest_decimal_buf(value, buf);
	return push_numeric(state, numeric_from_cstring(buf));
}

static void
push_key(JsonbParseState **state, char *key)
{
	JsonbValue	k;

	k.type = jbvString;
	k.val.string.val = key;
	k.val.string.len = strlen(key);
	pushJsonbValue(state, WJB_KEY, &k);
}

/* One value of a field (an element, for repeated fields) at member. */
static JsonbValue *
push_field_value(JsonbParseState **state,
				 const ProtobufCFieldDescriptor *field, const void *member)
{
	char		buf[32];

	switch (field->type)
	{
		case PROTOBUF_C_TYPE_INT32:
		case PROTOBUF_C_TYPE_SINT32:
		case PROTOBUF_C_TYPE_SFIXED32:
			return push_numeric(state,
								int64_to_numeric(*(const int32_t *) member));
		case PROTOBUF_C_TYPE_UINT32:
		case PROTOBUF_C_TYPE_FIXED32:
			return push_numeric(state,
								int64_to_numeric(*(const uint32_t *) member));

		case PROTOBUF_C_TYPE_INT64:
		case PROTOBUF_C_TYPE_SINT64:
		case PROTOBUF_C_TYPE_SFIXED64:
			/* 64-bit integers are strings: JSON readers lose precision */
			snprintf(buf, sizeof(buf), "%lld",
					 (long long) *(const int64_t *) member);
			return push_string(state, pstrdup(buf), strlen(buf));
		case PROTOBUF_C_TYPE_UINT64:
		case PROTOBUF_C_TYPE_FIXED64:
			snprintf(buf, sizeof(buf), "%llu",
					 (unsigned long long) *(const uint64_t *) member);
			return push_string(state, pstrdup(buf), strlen(buf));

		case PROTOBUF_C_TYPE_FLOAT:
			return push_double(state, *(const float *) member, true);
		case PROTOBUF_C_TYPE_DOUBLE:
			return push_double(state, *(const double *) member, false);

		case PROTOBUF_C_TYPE_BOOL:
			{
				JsonbValue	v;

				v.type = jbvBool;
				v.val.boolean = *(const protobuf_c_boolean *) member != 0;
				return push_scalar(state, &v);
			}

		case PROTOBUF_C_TYPE_ENUM:
			{
				int			value = *(const int *) member;
				const ProtobufCEnumValue *ev;

				ev = protobuf_c_enum_descriptor_get_value(field->descriptor,
														  value);
				if (ev != NULL)
					return push_string(state, (char *) ev->name,
									   strlen(ev->name));
				/* an enum number this build does not know */
				return push_numeric(state, int64_to_numeric(value));
			}

		case PROTOBUF_C_TYPE_STRING:
			return push_utf8_string(state, *(const char *const *) member);

		case PROTOBUF_C_TYPE_BYTES:
			{
				const ProtobufCBinaryData *bd = member;
				char	   *encoded;
				int			enclen;

				if (bd->len > (size_t) (MaxAllocSize / 4 * 3 - 4))
					ereport(ERROR,
							(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
							 errmsg("bytes field \"%s\" is too large for JSON",
									field->name)));
				encoded = palloc(pg_b64_enc_len((int) bd->len) + 1);
				enclen = pg_b64_encode((const char *) bd->data, (int) bd->len,
									   encoded, pg_b64_enc_len((int) bd->len));
				if (enclen < 0)
					elog(ERROR, "could not encode bytes field \"%s\" as base64",
						 field->name);
				encoded[enclen] = '\0';
				return push_string(state, encoded, enclen);
			}

		case PROTOBUF_C_TYPE_MESSAGE:
			{
				const ProtobufCMessage *sub = *(const ProtobufCMessage *const *) member;

				/* only map values and repeated elements get here unset */
				if (sub == NULL)
					sub = dex_pb_new_message(field->descriptor);
				return push_message(state, sub);
			}
	}
	elog(ERROR, "unrecognized protobuf-c field type %d", (int) field->type);
	return NULL;				/* keep compiler quiet */
}

/* A map key as JSON object key: strings as they are, others in decimal. */
static char *
map_key_string(const ProtobufCFieldDescriptor *kf, const void *member)
{
	switch (kf->type)
	{
		case PROTOBUF_C_TYPE_STRING:
			{
				const char *str = *(const char *const *) member;

				if (str == NULL)
					str = "";
				return pg_any_to_server(str, strlen(str), PG_UTF8);
			}
		case PROTOBUF_C_TYPE_BOOL:
			return pstrdup(*(const protobuf_c_boolean *) member ? "true" : "false");
		case PROTOBUF_C_TYPE_INT32:
		case PROTOBUF_C_TYPE_SINT32:
		case PROTOBUF_C_TYPE_SFIXED32:
			return psprintf("%d", (int) *(const int32_t *) member);
		case PROTOBUF_C_TYPE_UINT32:
		case PROTOBUF_C_TYPE_FIXED32:
			return psprintf("%u", (unsigned) *(const uint32_t *) member);
		case PROTOBUF_C_TYPE_INT64:
		case PROTOBUF_C_TYPE_SINT64:
		case PROTOBUF_C_TYPE_SFIXED64:
			return psprintf("%lld", (long long) *(const int64_t *) member);
		case PROTOBUF_C_TYPE_UINT64:
		case PROTOBUF_C_TYPE_FIXED64:
			return psprintf("%llu",
							(unsigned long long) *(const uint64_t *) member);
		default:
			elog(ERROR, "invalid protobuf map key type %s",
				 dex_pb_type_name(kf->type));
	}
	return NULL;				/* keep compiler quiet */
}

static JsonbValue *
push_message(JsonbParseState **state, const ProtobufCMessage *msg)
{
	const ProtobufCMessageDescriptor *desc = msg->descriptor;
	unsigned	i;

	check_stack_depth();

	if (IS_TIMESTAMP(desc))
	{
		const Google__Protobuf__Timestamp *ts = (const void *) msg;
		char	   *str = format_timestamp(ts->seconds, ts->nanos);

		return push_string(state, str, strlen(str));
	}
	if (IS_DURATION(desc))
	{
		const Google__Protobuf__Duration *d = (const void *) msg;
		char	   *str = format_duration(d->seconds, d->nanos);

		return push_string(state, str, strlen(str));
	}

	pushJsonbValue(state, WJB_BEGIN_OBJECT, NULL);
	for (i = 0; i < desc->n_fields; i++)
	{
		const ProtobufCFieldDescriptor *field = &desc->fields[i];
		const char *member = MEMBER_PTR(msg, field->offset);

		if (!dex_pb_field_is_set(msg, field))
			continue;
		push_key(state, dex_pb_json_name(field->name));

		if (field->label == PROTOBUF_C_LABEL_REPEATED)
		{
			size_t		n = *(const size_t *) MEMBER_PTR(msg, field->quantifier_offset);
			const char *array = *(const char *const *) member;
			size_t		j;

			if (dex_pb_field_is_map(field))
			{
				const ProtobufCMessageDescriptor *ed = field->descriptor;
				const ProtobufCFieldDescriptor *kf = &ed->fields[0];
				const ProtobufCFieldDescriptor *vf = &ed->fields[1];

				pushJsonbValue(state, WJB_BEGIN_OBJECT, NULL);
				for (j = 0; j < n; j++)
				{
					const ProtobufCMessage *entry = ((const ProtobufCMessage *const *) array)[j];

					if (entry == NULL)
						continue;
					/* jsonb keeps the last of duplicate keys, as protobuf does */
					push_key(state,
							 map_key_string(kf, MEMBER_PTR(entry, kf->offset)));
					push_field_value(state, vf, MEMBER_PTR(entry, vf->offset));
				}
				pushJsonbValue(state, WJB_END_OBJECT, NULL);
			}
			else
			{
				size_t		size = dex_pb_elt_size(field->type);

				pushJsonbValue(state, WJB_BEGIN_ARRAY, NULL);
				for (j = 0; j < n; j++)
					push_field_value(state, field, array + j * size);
				pushJsonbValue(state, WJB_END_ARRAY, NULL);
			}
		}
		else
			push_field_value(state, field, member);
	}
	return pushJsonbValue(state, WJB_END_OBJECT, NULL);
}

/*
 * Push msg as JSON into an open parse state: as an array element, as the
 * value of the key just pushed, or as the whole value when *state is NULL.
 * Returns what the last pushJsonbValue returned: at the top level, the
 * finished value to hand to JsonbValueToJsonb.
 */
JsonbValue *
dex_pb_push_jsonb(JsonbParseState **state, const ProtobufCMessage *msg)
{
	return push_message(state, msg);
}

Jsonb *
dex_pb_to_jsonb(const ProtobufCMessage *msg)
{
	JsonbParseState *state = NULL;
	JsonbValue *result;

	result = push_message(&state, msg);
	return JsonbValueToJsonb(result);
}


/* ------------------------------------------------------------------------
 * jsonb to messages
 * ------------------------------------------------------------------------
 */

typedef struct JsonDecodeState
{
	const char *what;			/* the input, for error messages */
	StringInfoData path;		/* JSON path of the value being parsed */
	int			max_depth;		/* dex_pb_depth_limit() of the top-level type */
} JsonDecodeState;

static ProtobufCMessage *parse_message(JsonDecodeState *js,
									   const ProtobufCMessageDescriptor *desc,
									   const JsonbValue *value, int depth);

/* Where the current value is, for error details. */
static const char *
json_where(const JsonDecodeState *js)
{
	if (js->path.len == 0)
		return "the top-level value";
	return psprintf("field \"%s\"", js->path.data);
}

/* User input quoted in an error detail, cut to a readable length. */
static const char *
shorten(const char *text)
{
	int			len = strlen(text);

	if (len <= 64)
		return text;
	return psprintf("%.*s...", pg_mbcliplen(text, len, 60), text);
}

static int
path_push_name(JsonDecodeState *js, const char *name)
{
	int			saved = js->path.len;

	if (saved > 0)
		appendStringInfoChar(&js->path, '.');
	appendStringInfoString(&js->path, name);
	return saved;
}

static int
path_push_index(JsonDecodeState *js, int index)
{
	int			saved = js->path.len;

	appendStringInfo(&js->path, "[%d]", index);
	return saved;
}

static int
path_push_key(JsonDecodeState *js, const char *key, int len)
{
	int			saved = js->path.len;

	appendStringInfoString(&js->path, "[\"");
	appendBinaryStringInfo(&js->path, key, len);
	appendStringInfoString(&js->path, "\"]");
	return saved;
}

static void
path_pop(JsonDecodeState *js, int saved)
{
	js->path.len = saved;
	js->path.data[saved] = '\0';
}

static const char *
jbv_type_name(const JsonbValue *v)
{
	switch (v->type)
	{
		case jbvNull:
			return "null";
		case jbvString:
			return "string";
		case jbvNumeric:
			return "number";
		case jbvBool:
			return "boolean";
		case jbvArray:
			return "array";
		case jbvObject:
			return "object";
		case jbvBinary:
			if (JsonContainerIsObject(v->val.binary.data))
				return "object";
			return "array";
		default:
			return "value";
	}
}

/* Whether v (a value got out of a container) is a JSON object, or an array */
bool
dex_jbv_is_object(const JsonbValue *v)
{
	return v->type == jbvBinary && JsonContainerIsObject(v->val.binary.data);
}

bool
dex_jbv_is_array(const JsonbValue *v)
{
	return v->type == jbvBinary && JsonContainerIsArray(v->val.binary.data) &&
		!JsonContainerIsScalar(v->val.binary.data);
}

static void json_type_error(JsonDecodeState *js, const char *expected,
							const JsonbValue *v) pg_attribute_noreturn();

static void
json_type_error(JsonDecodeState *js, const char *expected, const JsonbValue *v)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid %s", js->what),
			 errdetail("Expected %s for %s, found a JSON %s.",
					   expected, json_where(js), jbv_type_name(v))));
}

/* A jsonb string (server encoding) as a palloc'd NUL-terminated UTF-8 string */
static char *
json_copy_string(JsonDecodeState *js, const char *str, int len)
{
	char	   *converted;

	/* jsonb itself rejects \u0000, but be sure: C strings cannot hold it */
	if (memchr(str, '\0', len) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNTRANSLATABLE_CHARACTER),
				 errmsg("invalid %s", js->what),
				 errdetail("The string in %s contains a null character.",
						   json_where(js))));
	converted = pg_server_to_any(str, len, PG_UTF8);
	if (converted == str)
		return pnstrdup(str, len);
	return converted;
}

/*
 * Split decimal integer text into sign and magnitude.  A fraction of zeros
 * (as numeric_out prints 1.0) is accepted.  *overflow is set when the
 * magnitude does not fit 64 bits.
 */
static bool
scan_integer(const char *s, int len, bool *negative, uint64 *magnitude,
			 bool *overflow)
{
	int			i = 0;
	int			start;
	uint64		mag = 0;

	*negative = false;
	*overflow = false;
	if (i < len && s[i] == '-')
	{
		*negative = true;
		i++;
	}
	start = i;
	for (; i < len && s[i] >= '0' && s[i] <= '9'; i++)
	{
		int			digit = s[i] - '0';

		if (mag > (PG_UINT64_MAX - digit) / 10)
			*overflow = true;
		else
			mag = mag * 10 + digit;
	}
	if (i == start)
		return false;
	if (i < len && s[i] == '.')
	{
		i++;
		start = i;
		while (i < len && s[i] == '0')
			i++;
		if (i == start)
			return false;
	}
	*magnitude = mag;
	return i == len;
}

/*
 * An integer field value: a JSON number that is integral, or a string of
 * decimal digits.  Returns the value in *sresult (signed types) or *uresult
 * (unsigned types), range-checked against [min, max] / [0, umax].
 */
static void
json_get_integer(JsonDecodeState *js, ProtobufCType type, const JsonbValue *v,
				 bool is_signed, int64 min, int64 max, uint64 umax,
				 int64 *sresult, uint64 *uresult)
{
	const char *text;
	int			len;
	bool		negative;
	bool		overflow;
	uint64		mag;
	bool		in_range;

	if (v->type == jbvNumeric)
	{
		text = DatumGetCString(DirectFunctionCall1(numeric_out,
												   NumericGetDatum(v->val.numeric)));
		len = strlen(text);
		if (!scan_integer(text, len, &negative, &mag, &overflow))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid %s", js->what),
					 errdetail("Expected an integer for %s, found %s.",
							   json_where(js), shorten(text))));
	}
	else if (v->type == jbvString)
	{
		text = pnstrdup(v->val.string.val, v->val.string.len);
		len = v->val.string.len;
		if (!scan_integer(text, len, &negative, &mag, &overflow))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
					 errmsg("invalid %s", js->what),
					 errdetail("String \"%s\" in %s is not a decimal integer.",
							   shorten(text), json_where(js))));
	}
	else
		json_type_error(js, "a JSON number or a string of decimal digits", v);

	if (is_signed)
	{
		/* magnitude of min, computed without overflowing int64 */
		uint64		neg_limit = (uint64) (-(min + 1)) + 1;

		in_range = !overflow &&
			(negative ? mag <= neg_limit : mag <= (uint64) max);
		if (in_range)
			*sresult = negative ? (int64) (~mag + 1) : (int64) mag;
	}
	else
	{
		in_range = !overflow && mag <= umax && !(negative && mag != 0);
		if (in_range)
			*uresult = mag;
	}

	if (!in_range)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("invalid %s", js->what),
				 errdetail("Value %s is out of range for %s of type %s.",
						   shorten(text), json_where(js), dex_pb_type_name(type))));
}

/* Strict JSON number syntax, for floating-point values given as strings. */
static bool
is_json_number(const char *s)
{
	if (*s == '-')
		s++;
	if (*s == '0')
		s++;
	else if (*s >= '1' && *s <= '9')
		while (*s >= '0' && *s <= '9')
			s++;
	else
		return false;
	if (*s == '.')
	{
		s++;
		if (!(*s >= '0' && *s <= '9'))
			return false;
		while (*s >= '0' && *s <= '9')
			s++;
	}
	if (*s == 'e' || *s == 'E')
	{
		s++;
		if (*s == '+' || *s == '-')
			s++;
		if (!(*s >= '0' && *s <= '9'))
			return false;
		while (*s >= '0' && *s <= '9')
			s++;
	}
	return *s == '\0';
}

/* A float or double field value: a JSON number, or "NaN" and friends. */
static double
json_get_double(JsonDecodeState *js, const JsonbValue *v, bool single)
{
	char	   *text;
	char	   *end;
	double		result;

	if (v->type == jbvNumeric)
		text = DatumGetCString(DirectFunctionCall1(numeric_out,
												   NumericGetDatum(v->val.numeric)));
	else if (v->type == jbvString)
	{
		text = pnstrdup(v->val.string.val, v->val.string.len);
		if (strcmp(text, "NaN") == 0)
			return get_float8_nan();
		if (strcmp(text, "Infinity") == 0)
			return get_float8_infinity();
		if (strcmp(text, "-Infinity") == 0)
			return -get_float8_infinity();
		if (!is_json_number(text))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
					 errmsg("invalid %s", js->what),
					 errdetail("String \"%s\" in %s is not a number, \"NaN\", \"Infinity\" or \"-Infinity\".",
							   shorten(text), json_where(js))));
	}
	else
		json_type_error(js, "a JSON number or string", v);

	/* strtof for float rounds the decimal once, not twice */
	result = single ? strtof(text, &end) : strtod(text, &end);
	if (*end != '\0')
		elog(ERROR, "could not parse number \"%s\"", text);
	/* underflow to zero is fine; overflow to infinity is not */
	if (isinf(result))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("invalid %s", js->what),
				 errdetail("Value %s is out of range for %s of type %s.",
						   shorten(text), json_where(js),
						   single ? "float" : "double")));
	return result;
}

static int
json_get_enum(JsonDecodeState *js, const ProtobufCEnumDescriptor *ed,
			  const JsonbValue *v)
{
	const ProtobufCEnumValue *ev;

	if (v->type == jbvString)
	{
		char	   *name = pnstrdup(v->val.string.val, v->val.string.len);

		ev = protobuf_c_enum_descriptor_get_value_by_name(ed, name);
		if (ev == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid %s", js->what),
					 errdetail("\"%s\" in %s is not a value of enum %s.",
							   shorten(name), json_where(js), ed->name)));
		return ev->value;
	}
	if (v->type == jbvNumeric)
	{
		int64		number;

		json_get_integer(js, PROTOBUF_C_TYPE_ENUM, v, true,
						 PG_INT32_MIN, PG_INT32_MAX, 0, &number, NULL);
		/* unknown numbers would be rejected when decoded, so reject them now */
		ev = protobuf_c_enum_descriptor_get_value(ed, (int) number);
		if (ev == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid %s", js->what),
					 errdetail("%d in %s is not a value of enum %s.",
							   (int) number, json_where(js), ed->name)));
		return ev->value;
	}
	json_type_error(js, "a JSON string naming an enum value or a number", v);
	return 0;					/* keep compiler quiet */
}

static int
base64_digit(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+' || c == '-')
		return 62;
	if (c == '/' || c == '_')
		return 63;
	return -1;
}

/*
 * Standard or URL-safe base64, padding optional (but, if present, it must
 * complete the last group of four).
 */
static bool
decode_base64(const char *s, int len, ProtobufCBinaryData *out)
{
	int			body = len;
	int			padding = 0;
	uint8	   *data;
	size_t		n = 0;
	uint32		bits = 0;
	int			nbits = 0;
	int			i;

	while (body > 0 && s[body - 1] == '=' && padding < 2)
	{
		body--;
		padding++;
	}
	if (padding > 0 && len % 4 != 0)
		return false;
	if (body % 4 == 1)
		return false;

	data = palloc(body / 4 * 3 + 3);
	for (i = 0; i < body; i++)
	{
		int			d = base64_digit(s[i]);

		if (d < 0)
			return false;
		bits = (bits << 6) | d;
		nbits += 6;
		if (nbits >= 8)
		{
			nbits -= 8;
			data[n++] = (uint8) (bits >> nbits);
			bits &= (1 << nbits) - 1;
		}
	}
	out->len = n;
	out->data = data;
	return true;
}

/*
 * Parse one value of field (an element, for repeated fields; the value, for
 * map entries) into dst, the storage of that value.
 */
static void
parse_field_value(JsonDecodeState *js, const ProtobufCFieldDescriptor *field,
				  const JsonbValue *v, void *dst, int depth)
{
	int64		s;
	uint64		u;

	switch (field->type)
	{
		case PROTOBUF_C_TYPE_INT32:
		case PROTOBUF_C_TYPE_SINT32:
		case PROTOBUF_C_TYPE_SFIXED32:
			json_get_integer(js, field->type, v, true,
							 PG_INT32_MIN, PG_INT32_MAX, 0, &s, NULL);
			*(int32_t *) dst = (int32_t) s;
			break;
		case PROTOBUF_C_TYPE_UINT32:
		case PROTOBUF_C_TYPE_FIXED32:
			json_get_integer(js, field->type, v, false,
							 0, 0, PG_UINT32_MAX, NULL, &u);
			*(uint32_t *) dst = (uint32_t) u;
			break;
		case PROTOBUF_C_TYPE_INT64:
		case PROTOBUF_C_TYPE_SINT64:
		case PROTOBUF_C_TYPE_SFIXED64:
			json_get_integer(js, field->type, v, true,
							 PG_INT64_MIN, PG_INT64_MAX, 0, &s, NULL);
			*(int64_t *) dst = s;
			break;
		case PROTOBUF_C_TYPE_UINT64:
		case PROTOBUF_C_TYPE_FIXED64:
			json_get_integer(js, field->type, v, false,
							 0, 0, PG_UINT64_MAX, NULL, &u);
			*(uint64_t *) dst = u;
			break;

		case PROTOBUF_C_TYPE_FLOAT:
			*(float *) dst = (float) json_get_double(js, v, true);
			break;
		case PROTOBUF_C_TYPE_DOUBLE:
			*(double *) dst = json_get_double(js, v, false);
			break;

		case PROTOBUF_C_TYPE_BOOL:
			if (v->type != jbvBool)
				json_type_error(js, "a JSON boolean", v);
			*(protobuf_c_boolean *) dst = v->val.boolean ? 1 : 0;
			break;

		case PROTOBUF_C_TYPE_ENUM:
			*(int *) dst = json_get_enum(js, field->descriptor, v);
			break;

		case PROTOBUF_C_TYPE_STRING:
			if (v->type != jbvString)
				json_type_error(js, "a JSON string", v);
			/* always a fresh copy: protobuf-c drops oneof strings at default */
			*(char **) dst = json_copy_string(js, v->val.string.val,
											  v->val.string.len);
			break;

		case PROTOBUF_C_TYPE_BYTES:
			if (v->type != jbvString)
				json_type_error(js, "a JSON string of base64 data", v);
			if (!decode_base64(v->val.string.val, v->val.string.len,
							   (ProtobufCBinaryData *) dst))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
						 errmsg("invalid %s", js->what),
						 errdetail("The string in %s is not valid base64.",
								   json_where(js))));
			break;

		case PROTOBUF_C_TYPE_MESSAGE:
			*(ProtobufCMessage **) dst = parse_message(js, field->descriptor,
													   v, depth + 1);
			break;
	}
}

/* A JSON object key as the key field of a map entry. */
static void
parse_map_key(JsonDecodeState *js, const ProtobufCFieldDescriptor *kf,
			  const JsonbValue *key, void *dst)
{
	JsonbValue	num;

	switch (kf->type)
	{
		case PROTOBUF_C_TYPE_STRING:
			*(char **) dst = json_copy_string(js, key->val.string.val,
											  key->val.string.len);
			return;
		case PROTOBUF_C_TYPE_BOOL:
			if (key->val.string.len == 4 &&
				memcmp(key->val.string.val, "true", 4) == 0)
				*(protobuf_c_boolean *) dst = 1;
			else if (key->val.string.len == 5 &&
					 memcmp(key->val.string.val, "false", 5) == 0)
				*(protobuf_c_boolean *) dst = 0;
			else
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("invalid %s", js->what),
						 errdetail("The key of %s must be \"true\" or \"false\".",
								   json_where(js))));
			return;
		default:
			/* integer keys: the key string parses like a quoted integer */
			num = *key;
			parse_field_value(js, kf, &num, dst, 0);
			return;
	}
}

static void
parse_map(JsonDecodeState *js, ProtobufCMessage *msg,
		  const ProtobufCFieldDescriptor *field, const JsonbValue *v,
		  int depth)
{
	const ProtobufCMessageDescriptor *ed = field->descriptor;
	const ProtobufCFieldDescriptor *kf = &ed->fields[0];
	const ProtobufCFieldDescriptor *vf = &ed->fields[1];
	JsonbContainer *container;
	ProtobufCMessage **entries;
	size_t		n = 0;
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	key;
	JsonbValue	value;

	if (!dex_jbv_is_object(v))
		json_type_error(js, "a JSON object", v);
	container = v->val.binary.data;

	entries = MemoryContextAllocExtended(CurrentMemoryContext,
										 Max(JsonContainerSize(container), 1) *
										 sizeof(ProtobufCMessage *),
										 MCXT_ALLOC_HUGE);
	it = JsonbIteratorInit(container);
	while ((tok = JsonbIteratorNext(&it, &key, true)) != WJB_DONE)
	{
		ProtobufCMessage *entry;
		int			saved;

		if (tok != WJB_KEY)
			continue;
		tok = JsonbIteratorNext(&it, &value, true);
		Assert(tok == WJB_VALUE);

		saved = path_push_key(js, key.val.string.val, key.val.string.len);
		entry = dex_pb_new_message(ed);
		parse_map_key(js, kf, &key, MEMBER_PTR(entry, kf->offset));
		if (value.type == jbvNull)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid %s", js->what),
					 errdetail("Map values cannot be null, but %s is.",
							   json_where(js))));
		parse_field_value(js, vf, &value, MEMBER_PTR(entry, vf->offset),
						  depth);
		path_pop(js, saved);
		entries[n++] = entry;
	}

	*(size_t *) MEMBER_PTR(msg, field->quantifier_offset) = n;
	*(ProtobufCMessage ***) MEMBER_PTR(msg, field->offset) = n > 0 ? entries : NULL;
}

static void
parse_repeated(JsonDecodeState *js, ProtobufCMessage *msg,
			   const ProtobufCFieldDescriptor *field, const JsonbValue *v,
			   int depth)
{
	JsonbContainer *container;
	uint32		n;
	uint32		i;
	size_t		size = dex_pb_elt_size(field->type);
	char	   *array = NULL;

	if (!dex_jbv_is_array(v))
		json_type_error(js, "a JSON array", v);
	container = v->val.binary.data;
	n = JsonContainerSize(container);

	if (n > 0)
		array = MemoryContextAllocExtended(CurrentMemoryContext, n * size,
										   MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	for (i = 0; i < n; i++)
	{
		JsonbValue *elt = getIthJsonbValueFromContainer(container, i);
		int			saved = path_push_index(js, (int) i);

		if (elt->type == jbvNull)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid %s", js->what),
					 errdetail("Elements of repeated fields cannot be null, but %s is.",
							   json_where(js))));
		parse_field_value(js, field, elt, array + i * size, depth);
		path_pop(js, saved);
		pfree(elt);
	}

	*(size_t *) MEMBER_PTR(msg, field->quantifier_offset) = n;
	*(char **) MEMBER_PTR(msg, field->offset) = array;
}

static ProtobufCMessage *
parse_well_known(JsonDecodeState *js, const ProtobufCMessageDescriptor *desc,
				 const JsonbValue *v)
{
	ProtobufCMessage *msg;
	char	   *text;
	int64		seconds;
	int32		nanos;

	if (v->type != jbvString)
		json_type_error(js, IS_TIMESTAMP(desc) ?
						"a JSON string holding an RFC 3339 timestamp" :
						"a JSON string holding a duration such as \"1.5s\"",
						v);
	text = pnstrdup(v->val.string.val, v->val.string.len);
	msg = dex_pb_new_message(desc);

	if (IS_TIMESTAMP(desc))
	{
		Google__Protobuf__Timestamp *ts = (void *) msg;

		if (!parse_timestamp(text, v->val.string.len, &seconds, &nanos))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
					 errmsg("invalid %s", js->what),
					 errdetail("\"%s\" in %s is not an RFC 3339 timestamp such as \"2024-01-31T12:00:00Z\".",
							   shorten(text), json_where(js))));
		if (!dex_pb_timestamp_is_valid(seconds, nanos))
			ereport(ERROR,
					(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
					 errmsg("invalid %s", js->what),
					 errdetail("Timestamp \"%s\" in %s is outside the years 0001 to 9999.",
							   shorten(text), json_where(js))));
		ts->seconds = seconds;
		ts->nanos = nanos;
	}
	else
	{
		Google__Protobuf__Duration *d = (void *) msg;

		if (!parse_duration(text, v->val.string.len, &seconds, &nanos))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
					 errmsg("invalid %s", js->what),
					 errdetail("\"%s\" in %s is not a duration such as \"1.5s\".",
							   shorten(text), json_where(js))));
		if (!dex_pb_duration_is_valid(seconds, nanos))
			ereport(ERROR,
					(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
					 errmsg("invalid %s", js->what),
					 errdetail("Duration \"%s\" in %s is longer than %lld seconds.",
							   shorten(text), json_where(js),
							   (long long) DURATION_MAX_SECONDS)));
		d->seconds = seconds;
		d->nanos = nanos;
	}
	return msg;
}

static ProtobufCMessage *
parse_message(JsonDecodeState *js, const ProtobufCMessageDescriptor *desc,
			  const JsonbValue *v, int depth)
{
	ProtobufCMessage *msg;
	bool	   *seen;
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	key;
	JsonbValue	value;

	check_stack_depth();

	if (depth > js->max_depth)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid %s", js->what),
				 errdetail("Messages are nested more than %d levels deep.",
						   js->max_depth)));

	if (IS_TIMESTAMP(desc) || IS_DURATION(desc))
		return parse_well_known(js, desc, v);

	if (!dex_jbv_is_object(v))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid %s: expected a JSON object for message %s",
						js->what, desc->name),
				 errdetail("Found a JSON %s for %s.",
						   jbv_type_name(v), json_where(js))));

	msg = dex_pb_new_message(desc);
	seen = palloc0(Max(desc->n_fields, 1) * sizeof(bool));

	it = JsonbIteratorInit(v->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &key, true)) != WJB_DONE)
	{
		const ProtobufCFieldDescriptor *field;
		int			saved;

		if (tok != WJB_KEY)
			continue;
		tok = JsonbIteratorNext(&it, &value, true);
		Assert(tok == WJB_VALUE);

		field = dex_pb_find_field(desc, key.val.string.val, key.val.string.len);
		if (field == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid %s", js->what),
					 errdetail("Unknown field \"%s\" in message %s.",
							   pnstrdup(key.val.string.val, key.val.string.len),
							   desc->name)));

		saved = path_push_name(js, dex_pb_json_name(field->name));

		/* jsonb merges duplicate keys, but "fooBar" and "foo_bar" both land here */
		if (seen[field - desc->fields])
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid %s", js->what),
					 errdetail("Field \"%s\" is given more than once.",
							   js->path.data)));
		seen[field - desc->fields] = true;

		/* null means the default: nothing to do */
		if (value.type == jbvNull)
		{
			path_pop(js, saved);
			continue;
		}

		if (field->label == PROTOBUF_C_LABEL_REPEATED)
		{
			if (dex_pb_field_is_map(field))
				parse_map(js, msg, field, &value, depth);
			else
				parse_repeated(js, msg, field, &value, depth);
		}
		else
		{
			void	   *member = MEMBER_PTR(msg, field->offset);

			if (field->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
			{
				uint32_t   *oneof_case = MEMBER_PTR(msg, field->quantifier_offset);

				if (*oneof_case != 0 && *oneof_case != field->id)
				{
					const ProtobufCFieldDescriptor *other;
					char	   *other_path;

					other = protobuf_c_message_descriptor_get_field(desc,
																	*oneof_case);
					other_path = saved > 0 ?
						psprintf("%.*s.%s", saved, js->path.data,
								 dex_pb_json_name(other->name)) :
						dex_pb_json_name(other->name);
					ereport(ERROR,
							(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							 errmsg("invalid %s", js->what),
							 errdetail("Fields \"%s\" and \"%s\" belong to the same oneof of message %s; at most one of them can be set.",
									   other_path, js->path.data, desc->name)));
				}
				parse_field_value(js, field, &value, member, depth);
				*oneof_case = field->id;
			}
			else
			{
				parse_field_value(js, field, &value, member, depth);
				/* scalars with explicit presence have a has_ flag to set */
				if (field->label == PROTOBUF_C_LABEL_OPTIONAL &&
					field->type != PROTOBUF_C_TYPE_STRING &&
					field->type != PROTOBUF_C_TYPE_MESSAGE &&
					field->quantifier_offset != 0)
					*(protobuf_c_boolean *) MEMBER_PTR(msg, field->quantifier_offset) = 1;
			}
		}
		path_pop(js, saved);
	}

	return msg;
}

ProtobufCMessage *
dex_pb_from_jsonb(const ProtobufCMessageDescriptor *desc, Jsonb *json,
				  const char *what)
{
	JsonDecodeState js;
	JsonbValue	root;

	js.what = what ? what : "value";
	initStringInfo(&js.path);
	js.max_depth = dex_pb_depth_limit(desc);

	if (JB_ROOT_IS_SCALAR(json))
	{
		if (!JsonbExtractScalar(&json->root, &root))
			elog(ERROR, "could not extract scalar from jsonb");
	}
	else
	{
		root.type = jbvBinary;
		root.val.binary.data = &json->root;
		root.val.binary.len = VARSIZE(json) - VARHDRSZ;
	}

	return parse_message(&js, desc, &root, 1);
}
