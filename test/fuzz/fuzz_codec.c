/*-------------------------------------------------------------------------
 *
 * fuzz_codec.c
 *	  The fuzz targets of src/wire/codec.c and src/engine/commands.c, and what they
 *	  check.
 *
 * Three targets, each one libFuzzer binary (fuzz_main.c):
 *
 *	pb		  protobuf bytes.  The first byte selects the message type
 *			  (fuzz_type_of_byte), the rest is decoded as that type.
 *	json	  JSON text.  The first byte selects the message type, the rest
 *			  is JSON text, made into jsonb like jsonb_in makes it, and decoded.
 *	commands  What dex.complete_task and friends accept as a workflow task's
 *			  commands: the input is decoded both as JSON (a bare array of
 *			  commands, each decoded as dex.v1.Command, or a
 *			  WorkflowTaskCompletion object) and as protobuf bytes of a
 *			  WorkflowTaskCompletion.  What decodes is then checked by
 *			  dex_check_commands (commands.c), as dex.complete_task does.
 *
 * A decode may fail, but only with the SQLSTATEs the codec documents for
 * malformed input; so may dex_pb_check_payloads of what decodes (22P02 for
 * JSON text that jsonb would refuse).  A message that decodes must:
 *
 *	- satisfy what the rest of the engine takes for granted of a decoded
 *	  message (check_message): strings and repeated elements never NULL,
 *	  strings UTF-8, a oneof's case one of its fields and that field set,
 *	  enum values known, Timestamps and Durations in range, at most 100
 *	  levels of nesting, no unknown fields when it came from JSON;
 *	- encode, and decode again to an equal message whose encoding is the same;
 *	- print as JSON, through text and jsonb back to an equal message, and
 *	  print again as the same JSON; also when pushed into an open array or
 *	  object (dex_pb_push_jsonb);
 *	- still decode inside the bigger messages dex wraps around what it accepts
 *	  (check_embeddable): a Failure under a timeout Failure in an event of a
 *	  history and of a workflow task, a Command in a WorkflowTaskCompletion.
 *
 * dex_check_commands of a decoded completion may refuse it, but only with
 * ERRCODE_INVALID_PARAMETER_VALUE, a value out of range or a payload's
 * SQLSTATE; and it must refuse exactly the completions that break a rule
 * of what completion.c takes for granted, restated here independently
 * (commands_flaw): kinds set, ids, the ending command last, names, event
 * ids, priorities, versions, and delays whose microseconds cannot overflow.
 * The commands after a continueAsNew are left to the server (only their ids
 * are checked), as dex_check_commands leaves them.
 *
 * Equality ignores unknown fields (JSON has no room for them), compares maps
 * as maps (the last of duplicate keys wins, as in protobuf and in jsonb),
 * and NaNs as equal.  An unexpected error, a broken check, a sanitizer
 * report or a leak is a finding: the process aborts and libFuzzer keeps the
 * input.
 *
 * IDENTIFICATION
 *	  test/fuzz/fuzz_codec.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/jsonb.h"

#include "codec.h"
#include "engine/engine.h"
#include "google/protobuf/duration.pb-c.h"
#include "google/protobuf/timestamp.pb-c.h"

#include "fuzz_codec.h"
#include "fuzz_pg.h"

/* src/wire/codec.c's DEX_PB_MAX_DEPTH: no message nests deeper, whatever its type */
#define MAX_DEPTH	100

/*
 * Every message type dex.to_json and dex.from_json accept.  Append only:
 * the first byte of a pb or json input selects an entry by its position.
 */
const char *const fuzz_type_names[] = {
	"dex.v1.Payload",
	"dex.v1.Payload.MetadataEntry",
	"dex.v1.Failure",
	"dex.v1.RetryPolicy",
	"dex.v1.WorkflowEvent",
	"dex.v1.WorkflowTaskStarted",
	"dex.v1.WorkflowTaskCompleted",
	"dex.v1.ParentRun",
	"dex.v1.RunCreated",
	"dex.v1.RunCreated.LabelsEntry",
	"dex.v1.RunStarted",
	"dex.v1.RunCompleted",
	"dex.v1.RunFailed",
	"dex.v1.RunCancelled",
	"dex.v1.RunTerminated",
	"dex.v1.RunTimedOut",
	"dex.v1.RunOrigin",
	"dex.v1.RunCancelRequested",
	"dex.v1.RunSuspended",
	"dex.v1.RunResumed",
	"dex.v1.RunContinuedAsNew",
	"dex.v1.CustomStatusSet",
	"dex.v1.ActivityTaskCreated",
	"dex.v1.ActivityTaskCompleted",
	"dex.v1.ActivityTaskFailed",
	"dex.v1.TimerCreated",
	"dex.v1.TimerElapsed",
	"dex.v1.TimerCancelled",
	"dex.v1.ChildRunCreated",
	"dex.v1.ChildRunCreated.LabelsEntry",
	"dex.v1.ChildRunCompleted",
	"dex.v1.ChildRunFailed",
	"dex.v1.SideEffectExecuted",
	"dex.v1.ExternalEventReceived",
	"dex.v1.ExternalEventWaitStarted",
	"dex.v1.EventBatch",
	"dex.v1.Command",
	"dex.v1.ScheduleActivity",
	"dex.v1.StartTimer",
	"dex.v1.CancelTimer",
	"dex.v1.StartChildRun",
	"dex.v1.StartChildRun.LabelsEntry",
	"dex.v1.RecordSideEffect",
	"dex.v1.WaitExternalEvent",
	"dex.v1.SetCustomStatus",
	"dex.v1.CompleteRun",
	"dex.v1.FailRun",
	"dex.v1.ContinueAsNew",
	"dex.v1.CancelRun",
	"dex.v1.WorkflowTaskCompletion",
	"dex.v1.WorkflowTask",
	"dex.v1.ActivityTask",
	"google.protobuf.Timestamp",
	"google.protobuf.Duration",
	/* 1.6 */
	"dex.v1.MarkerRecorded",
	"dex.v1.RecordMarker",
	/* 1.7 */
	"dex.v1.SignalExternalRun",
	"dex.v1.ExternalRunSignalled",
	"dex.v1.ExternalRunSignalResult",
	/* 1.10 */
	"dex.v1.EventPublished",
	"dex.v1.PublishEvent",
	"dex.v1.PublishedEvent",
};

const int	fuzz_n_types = lengthof(fuzz_type_names);

static const ProtobufCMessageDescriptor *fuzz_types[lengthof(fuzz_type_names)];

/* SQLSTATEs a decode may fail with */
static const int pb_rejections[] = {
	ERRCODE_INVALID_BINARY_REPRESENTATION,
	ERRCODE_STATEMENT_TOO_COMPLEX,	/* stack depth */
	0
};

/* dex_pb_check_payloads: JSON text jsonb_in would refuse */
static const int payload_rejections[] = {
	ERRCODE_INVALID_TEXT_REPRESENTATION,
	ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
	ERRCODE_STATEMENT_TOO_COMPLEX,
	0
};

/* dex_check_commands: malformed commands (and what payload checks raise) */
static const int command_rejections[] = {
	ERRCODE_INVALID_PARAMETER_VALUE,
	ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
	ERRCODE_DATETIME_VALUE_OUT_OF_RANGE,
	ERRCODE_INVALID_TEXT_REPRESENTATION,
	ERRCODE_STATEMENT_TOO_COMPLEX,
	0
};

static const int json_rejections[] = {
	ERRCODE_INVALID_PARAMETER_VALUE,
	ERRCODE_INVALID_TEXT_REPRESENTATION,
	ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
	ERRCODE_DATETIME_VALUE_OUT_OF_RANGE,
	ERRCODE_UNTRANSLATABLE_CHARACTER,
	ERRCODE_STATEMENT_TOO_COMPLEX,
	0
};


/* ------------------------------------------------------------------------
 * The type table
 * ------------------------------------------------------------------------
 */

int
fuzz_type_of_byte(uint8 b)
{
	/* 'A' selects the first type, so seeds can start with a letter */
	return (int) (((unsigned) b + 256 * fuzz_n_types - 'A') % fuzz_n_types);
}

uint8
fuzz_byte_of_type(int index)
{
	return (uint8) ('A' + index);
}

int
fuzz_type_index(const ProtobufCMessageDescriptor *desc)
{
	int			i;

	for (i = 0; i < fuzz_n_types; i++)
		if (fuzz_types[i] == desc)
			return i;
	return -1;
}

const ProtobufCMessageDescriptor *
fuzz_type(int index)
{
	return fuzz_types[index];
}

/* Every type named must exist, and every type a field refers to must be listed. */
void
fuzz_init(void)
{
	int			i;
	unsigned	f;
	const char *verbose = getenv("DEX_FUZZ_VERBOSE");

	fuzz_verbose = verbose != NULL && strcmp(verbose, "1") == 0;
	if (fuzz_n_types > 256 - 'A')
		fuzz_fail("too many message types for a selector byte");
	for (i = 0; i < fuzz_n_types; i++)
	{
		fuzz_types[i] = dex_pb_descriptor_by_name(fuzz_type_names[i]);
		if (fuzz_types[i] == NULL)
			fuzz_fail("codec.c does not know message type %s", fuzz_type_names[i]);
	}
	for (i = 0; i < fuzz_n_types; i++)
	{
		for (f = 0; f < fuzz_types[i]->n_fields; f++)
		{
			const ProtobufCFieldDescriptor *field = &fuzz_types[i]->fields[f];

			if (field->type == PROTOBUF_C_TYPE_MESSAGE &&
				fuzz_type_index(field->descriptor) < 0)
				fuzz_fail("message type %s (field %s.%s) is missing from fuzz_type_names",
						  ((const ProtobufCMessageDescriptor *) field->descriptor)->name,
						  fuzz_types[i]->name, field->name);
		}
	}
}


/* ------------------------------------------------------------------------
 * Calling the codec
 * ------------------------------------------------------------------------
 */

typedef struct CodecCall
{
	const ProtobufCMessageDescriptor *desc;
	const uint8 *data;
	size_t		len;
	Jsonb	   *json;
	const ProtobufCMessage *msg;
	ProtobufCMessage *result_msg;
	Jsonb	   *result_json;
	uint8	   *result_data;
	size_t		result_len;
} CodecCall;

static void
call_unpack(void *arg)
{
	CodecCall  *c = arg;

	c->result_msg = dex_pb_unpack(c->desc, c->data, c->len, "fuzz input");
}

static void
call_from_jsonb(void *arg)
{
	CodecCall  *c = arg;

	c->result_msg = dex_pb_from_jsonb(c->desc, c->json, "fuzz input");
}

static void check_rejection(const char *what, const ProtobufCMessageDescriptor *desc,
							const FuzzError *e, const int *allowed);

static void
call_check_payloads(void *arg)
{
	CodecCall  *c = arg;

	dex_pb_check_payloads(c->msg, "fuzz input");
}

/* What the API does next with a decoded client message: it may refuse it, nothing else */
static void
check_payloads(ProtobufCMessage *msg)
{
	CodecCall	c = {0};
	FuzzError	e;

	c.msg = msg;
	if (!fuzz_try(call_check_payloads, &c, &e))
		check_rejection("checking the payloads", msg->descriptor, &e,
						payload_rejections);
}

static void
call_pack(void *arg)
{
	CodecCall  *c = arg;
	bytea	   *b;

	c->result_data = dex_pb_pack(c->msg, &c->result_len);
	b = dex_pb_pack_bytea(c->msg);
	if (VARSIZE(b) - VARHDRSZ != c->result_len ||
		memcmp(VARDATA(b), c->result_data, c->result_len) != 0)
		fuzz_fail("dex_pb_pack and dex_pb_pack_bytea disagree on a %s",
				  c->msg->descriptor->name);
}

static void
call_to_jsonb(void *arg)
{
	CodecCall  *c = arg;

	c->result_json = dex_pb_to_jsonb(c->msg);
}

/* The message pushed as an element of an array and as the value of a key */
static void
call_push_embedded(void *arg)
{
	CodecCall  *c = arg;
	JsonbParseState *state = NULL;
	JsonbValue	key;
	JsonbValue *res;

	pushJsonbValue(&state, WJB_BEGIN_ARRAY, NULL);
	dex_pb_push_jsonb(&state, c->msg);
	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	key.type = jbvString;
	key.val.string.val = "k";
	key.val.string.len = 1;
	pushJsonbValue(&state, WJB_KEY, &key);
	dex_pb_push_jsonb(&state, c->msg);
	pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	res = pushJsonbValue(&state, WJB_END_ARRAY, NULL);
	if (state != NULL)
		fuzz_fail("dex_pb_push_jsonb left the parse state unbalanced");
	c->result_json = JsonbValueToJsonb(res);
}

/* Long texts cut for a finding's message */
static const char *
clip(const char *text)
{
	if (strlen(text) <= 2000)
		return text;
	return psprintf("%.2000s... (%zu bytes)", text, strlen(text));
}

static void
fail_error(const char *what, const ProtobufCMessageDescriptor *desc,
		   const FuzzError *e)
{
	fuzz_fail("%s of a %s raised %s: %s%s%s (%s:%d, %s)", what, desc->name,
			  fuzz_sqlstate(e->sqlerrcode), e->message ? e->message : "",
			  e->detail ? " DETAIL: " : "", e->detail ? e->detail : "",
			  e->filename ? e->filename : "?", e->lineno,
			  e->funcname ? e->funcname : "?");
}

static void
check_rejection(const char *what, const ProtobufCMessageDescriptor *desc,
				const FuzzError *e, const int *allowed)
{
	for (; *allowed != 0; allowed++)
		if (e->sqlerrcode == *allowed)
			return;
	fail_error(what, desc, e);
}

ProtobufCMessage *
fuzz_decode_pb(const ProtobufCMessageDescriptor *desc, const uint8 *data,
			   size_t len)
{
	CodecCall	c = {0};
	FuzzError	e;

	c.desc = desc;
	c.data = data;
	c.len = len;
	if (!fuzz_try(call_unpack, &c, &e))
	{
		check_rejection("protobuf decoding", desc, &e, pb_rejections);
		return NULL;
	}
	if (c.result_msg == NULL || c.result_msg->descriptor != desc)
		fuzz_fail("dex_pb_unpack returned no %s", desc->name);
	check_payloads(c.result_msg);
	return c.result_msg;
}

ProtobufCMessage *
fuzz_decode_jsonb(const ProtobufCMessageDescriptor *desc, Jsonb *json)
{
	CodecCall	c = {0};
	FuzzError	e;

	c.desc = desc;
	c.json = json;
	if (!fuzz_try(call_from_jsonb, &c, &e))
	{
		check_rejection("JSON decoding", desc, &e, json_rejections);
		return NULL;
	}
	if (c.result_msg == NULL || c.result_msg->descriptor != desc)
		fuzz_fail("dex_pb_from_jsonb returned no %s", desc->name);
	check_payloads(c.result_msg);
	return c.result_msg;
}

/* Run a codec call that must not fail */
static void
must(void (*fn) (void *), CodecCall *c, const char *what,
	 const ProtobufCMessageDescriptor *desc)
{
	FuzzError	e;

	if (!fuzz_try(fn, c, &e))
		fail_error(what, desc, &e);
}


/* ------------------------------------------------------------------------
 * What a decoded message must be
 * ------------------------------------------------------------------------
 */

#define MEMBER(msg, offset)	((const void *) ((const char *) (msg) + (offset)))

/* Size of one element of a repeated field */
static size_t
value_size(ProtobufCType type)
{
	switch (type)
	{
		case PROTOBUF_C_TYPE_STRING:
		case PROTOBUF_C_TYPE_MESSAGE:
			return sizeof(void *);
		case PROTOBUF_C_TYPE_BYTES:
			return sizeof(ProtobufCBinaryData);
		case PROTOBUF_C_TYPE_INT64:
		case PROTOBUF_C_TYPE_SINT64:
		case PROTOBUF_C_TYPE_SFIXED64:
		case PROTOBUF_C_TYPE_UINT64:
		case PROTOBUF_C_TYPE_FIXED64:
		case PROTOBUF_C_TYPE_DOUBLE:
			return 8;
		default:
			return 4;
	}
}

static void check_message(const ProtobufCMessage *msg,
						  const ProtobufCMessageDescriptor *desc,
						  bool from_json, int depth, const char *path);

static void
check_string(const char *s, const char *path)
{
	if (s == NULL)
		fuzz_fail("%s: NULL string", path);
	if (pg_encoding_verifymbstr(PG_UTF8, s, strlen(s)) != (int) strlen(s))
		fuzz_fail("%s: string is not UTF-8", path);
}

/* One value of a field at member */
static void
check_value(const ProtobufCFieldDescriptor *field, const void *member,
			bool from_json, int depth, const char *path)
{
	switch (field->type)
	{
		case PROTOBUF_C_TYPE_ENUM:
			if (protobuf_c_enum_descriptor_get_value(field->descriptor,
													 *(const int *) member) == NULL)
				fuzz_fail("%s: enum value %d is unknown", path, *(const int *) member);
			break;
		case PROTOBUF_C_TYPE_BOOL:
			if (*(const protobuf_c_boolean *) member > 1)
				fuzz_fail("%s: bool holds %d", path, *(const protobuf_c_boolean *) member);
			break;
		case PROTOBUF_C_TYPE_STRING:
			check_string(*(const char *const *) member, path);
			break;
		case PROTOBUF_C_TYPE_BYTES:
			{
				const ProtobufCBinaryData *bd = member;

				if (bd->len > 0 && bd->data == NULL)
					fuzz_fail("%s: %zu bytes at NULL", path, bd->len);
				break;
			}
		case PROTOBUF_C_TYPE_MESSAGE:
			{
				const ProtobufCMessage *sub = *(const ProtobufCMessage *const *) member;
				const ProtobufCMessageDescriptor *sd = field->descriptor;

				if (sub != NULL)
				{
					bool		entry = field->label == PROTOBUF_C_LABEL_REPEATED &&
						sd->n_fields == 2 && strcmp(sd->fields[0].name, "key") == 0 &&
						strcmp(sd->fields[1].name, "value") == 0;

					check_message(sub, sd, from_json, entry ? depth : depth + 1, path);
				}
				break;
			}
		default:
			break;
	}
}

static void
check_message(const ProtobufCMessage *msg,
			  const ProtobufCMessageDescriptor *desc, bool from_json,
			  int depth, const char *path)
{
	unsigned	i;

	if (msg == NULL)
		fuzz_fail("%s: NULL message", path);
	if (msg->descriptor != desc)
		fuzz_fail("%s: a %s where a %s belongs", path,
				  msg->descriptor ? msg->descriptor->name : "(no descriptor)",
				  desc->name);
	if (depth > MAX_DEPTH)
		fuzz_fail("%s: nested %d levels deep, more than %d", path, depth, MAX_DEPTH);
	if (from_json && msg->n_unknown_fields > 0)
		fuzz_fail("%s: unknown fields in a message made from JSON", path);

	if (desc == &google__protobuf__timestamp__descriptor)
	{
		const Google__Protobuf__Timestamp *ts = (const void *) msg;

		if (ts->seconds < INT64CONST(-62135596800) ||
			ts->seconds > INT64CONST(253402300799) ||
			ts->nanos < 0 || ts->nanos > 999999999)
			fuzz_fail("%s: Timestamp out of range (%lld, %d)", path,
					  (long long) ts->seconds, ts->nanos);
	}
	if (desc == &google__protobuf__duration__descriptor)
	{
		const Google__Protobuf__Duration *d = (const void *) msg;

		if (d->seconds < -INT64CONST(315576000000) ||
			d->seconds > INT64CONST(315576000000) ||
			d->nanos < -999999999 || d->nanos > 999999999 ||
			(d->seconds > 0 && d->nanos < 0) || (d->seconds < 0 && d->nanos > 0))
			fuzz_fail("%s: Duration out of range (%lld, %d)", path,
					  (long long) d->seconds, d->nanos);
	}

	for (i = 0; i < desc->n_fields; i++)
	{
		const ProtobufCFieldDescriptor *field = &desc->fields[i];
		const void *member = MEMBER(msg, field->offset);
		char	   *fpath = psprintf("%s.%s", path, field->name);

		if (field->label == PROTOBUF_C_LABEL_REPEATED)
		{
			size_t		n = *(const size_t *) MEMBER(msg, field->quantifier_offset);
			const char *array = *(const char *const *) member;
			size_t		size;
			size_t		j;

			if (n == 0)
				continue;
			if (array == NULL)
				fuzz_fail("%s: %zu elements at NULL", fpath, n);
			size = value_size(field->type);
			for (j = 0; j < n; j++)
			{
				if (field->type == PROTOBUF_C_TYPE_MESSAGE &&
					((const ProtobufCMessage *const *) array)[j] == NULL)
					fuzz_fail("%s[%zu]: NULL element", fpath, j);
				check_value(field, array + j * size, from_json, depth,
							psprintf("%s[%zu]", fpath, j));
			}
		}
		else if (field->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
		{
			uint32		oneof_case = *(const uint32 *) MEMBER(msg, field->quantifier_offset);
			const ProtobufCFieldDescriptor *chosen;

			if (oneof_case == 0)
				continue;
			chosen = protobuf_c_message_descriptor_get_field(desc, oneof_case);
			if (chosen == NULL || !(chosen->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) ||
				chosen->quantifier_offset != field->quantifier_offset)
				fuzz_fail("%s: oneof case %u is not a field of that oneof", fpath,
						  oneof_case);
			if (oneof_case != field->id)
				continue;
			if ((field->type == PROTOBUF_C_TYPE_MESSAGE ||
				 field->type == PROTOBUF_C_TYPE_STRING) &&
				*(const void *const *) member == NULL)
				fuzz_fail("%s: the oneof case is set, the field is NULL", fpath);
			check_value(field, member, from_json, depth, fpath);
		}
		else
			check_value(field, member, from_json, depth, fpath);
		pfree(fpath);
	}
}


/* ------------------------------------------------------------------------
 * Equality
 * ------------------------------------------------------------------------
 */

static bool messages_equal(const ProtobufCMessage *a, const ProtobufCMessage *b,
						   StringInfo why);

static bool
values_equal(const ProtobufCFieldDescriptor *field, const void *a,
			 const void *b, StringInfo why)
{
	switch (field->type)
	{
		case PROTOBUF_C_TYPE_FLOAT:
			{
				float		x = *(const float *) a;
				float		y = *(const float *) b;

				return (isnan(x) && isnan(y)) || x == y;
			}
		case PROTOBUF_C_TYPE_DOUBLE:
			{
				double		x = *(const double *) a;
				double		y = *(const double *) b;

				return (isnan(x) && isnan(y)) || x == y;
			}
		case PROTOBUF_C_TYPE_BOOL:
			return (*(const protobuf_c_boolean *) a != 0) ==
				(*(const protobuf_c_boolean *) b != 0);
		case PROTOBUF_C_TYPE_STRING:
			{
				const char *x = *(const char *const *) a;
				const char *y = *(const char *const *) b;

				return strcmp(x ? x : "", y ? y : "") == 0;
			}
		case PROTOBUF_C_TYPE_BYTES:
			{
				const ProtobufCBinaryData *x = a;
				const ProtobufCBinaryData *y = b;

				return x->len == y->len &&
					(x->len == 0 || memcmp(x->data, y->data, x->len) == 0);
			}
		case PROTOBUF_C_TYPE_MESSAGE:
			{
				const ProtobufCMessage *x = *(const ProtobufCMessage *const *) a;
				const ProtobufCMessage *y = *(const ProtobufCMessage *const *) b;

				if (x == NULL || y == NULL)
					return x == y;
				return messages_equal(x, y, why);
			}
		default:
			return memcmp(a, b, value_size(field->type)) == 0;
	}
}

/* Index of the entry that wins for key of entries[i]: the last one with it */
static size_t
map_winner(const ProtobufCFieldDescriptor *kf, ProtobufCMessage *const *entries,
		   size_t n, const void *key)
{
	size_t		j = n;

	while (j-- > 0)
		if (values_equal(kf, MEMBER(entries[j], kf->offset), key, NULL))
			return j;
	return n;
}

static bool
maps_equal(const ProtobufCFieldDescriptor *field,
		   ProtobufCMessage *const *a, size_t na,
		   ProtobufCMessage *const *b, size_t nb, StringInfo why)
{
	const ProtobufCMessageDescriptor *ed = field->descriptor;
	const ProtobufCFieldDescriptor *kf = &ed->fields[0];
	const ProtobufCFieldDescriptor *vf = &ed->fields[1];
	size_t		keys_a = 0;
	size_t		keys_b = 0;
	size_t		i;

	for (i = 0; i < na; i++)
	{
		const void *key = MEMBER(a[i], kf->offset);
		size_t		j;

		if (map_winner(kf, a, na, key) != i)
			continue;			/* a later entry has the key */
		keys_a++;
		j = map_winner(kf, b, nb, key);
		if (j == nb)
			return false;
		if (!values_equal(vf, MEMBER(a[i], vf->offset), MEMBER(b[j], vf->offset), why))
			return false;
	}
	for (i = 0; i < nb; i++)
		if (map_winner(kf, b, nb, MEMBER(b[i], kf->offset)) == i)
			keys_b++;
	return keys_a == keys_b;
}

static bool
is_map(const ProtobufCFieldDescriptor *field)
{
	const ProtobufCMessageDescriptor *ed = field->descriptor;

	return field->label == PROTOBUF_C_LABEL_REPEATED &&
		field->type == PROTOBUF_C_TYPE_MESSAGE &&
		ed->n_fields == 2 && strcmp(ed->fields[0].name, "key") == 0 &&
		strcmp(ed->fields[1].name, "value") == 0;
}

static bool
messages_equal(const ProtobufCMessage *a, const ProtobufCMessage *b,
			   StringInfo why)
{
	const ProtobufCMessageDescriptor *desc = a->descriptor;
	unsigned	i;

	if (b->descriptor != desc)
		return false;
	for (i = 0; i < desc->n_fields; i++)
	{
		const ProtobufCFieldDescriptor *field = &desc->fields[i];
		const void *ma = MEMBER(a, field->offset);
		const void *mb = MEMBER(b, field->offset);
		bool		equal = true;

		if (field->label == PROTOBUF_C_LABEL_REPEATED)
		{
			size_t		na = *(const size_t *) MEMBER(a, field->quantifier_offset);
			size_t		nb = *(const size_t *) MEMBER(b, field->quantifier_offset);
			const char *xa = *(const char *const *) ma;
			const char *xb = *(const char *const *) mb;
			size_t		size = value_size(field->type);
			size_t		j;

			if (is_map(field))
				equal = maps_equal(field, (ProtobufCMessage *const *) xa, na,
								   (ProtobufCMessage *const *) xb, nb, why);
			else if (na != nb)
				equal = false;
			else
				for (j = 0; j < na && equal; j++)
					equal = values_equal(field, xa + j * size, xb + j * size, why);
		}
		else if (field->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
		{
			uint32		ca = *(const uint32 *) MEMBER(a, field->quantifier_offset);
			uint32		cb = *(const uint32 *) MEMBER(b, field->quantifier_offset);

			if (ca != cb)
				equal = false;
			else if (ca == field->id)
				equal = values_equal(field, ma, mb, why);
		}
		else
			equal = values_equal(field, ma, mb, why);

		if (!equal)
		{
			if (why != NULL)
				appendStringInfo(why, "%s%s.%s", why->len > 0 ? " in " : "",
								 desc->name, field->name);
			return false;
		}
	}
	return true;
}


/* ------------------------------------------------------------------------
 * Round trips
 * ------------------------------------------------------------------------
 */

static void
require_equal(const ProtobufCMessage *a, const ProtobufCMessage *b,
			  const char *what)
{
	StringInfoData why;

	initStringInfo(&why);
	if (!messages_equal(a, b, &why))
		fuzz_fail("%s changed a %s: field %s differs", what,
				  a->descriptor->name, why.data);
}

/* Encode, decode, encode again: the same message, the same bytes */
static void
pb_round_trip(const ProtobufCMessage *msg, bool from_json)
{
	const ProtobufCMessageDescriptor *desc = msg->descriptor;
	CodecCall	c1 = {0};
	CodecCall	c2 = {0};
	CodecCall	c3 = {0};

	c1.msg = msg;
	must(call_pack, &c1, "encoding", desc);

	c2.desc = desc;
	c2.data = c1.result_data;
	c2.len = c1.result_len;
	must(call_unpack, &c2, "decoding the encoding", desc);
	check_message(c2.result_msg, desc, from_json, 1, desc->name);
	require_equal(msg, c2.result_msg, "encoding and decoding");

	c3.msg = c2.result_msg;
	must(call_pack, &c3, "encoding again", desc);
	if (c3.result_len != c1.result_len ||
		memcmp(c3.result_data, c1.result_data, c1.result_len) != 0)
		fuzz_fail("a %s encodes differently after a round trip (%zu and %zu bytes)",
				  desc->name, c1.result_len, c3.result_len);
}

/* To JSON, through text, back: the same message, the same JSON */
static void
json_round_trip(const ProtobufCMessage *msg)
{
	const ProtobufCMessageDescriptor *desc = msg->descriptor;
	CodecCall	c1 = {0};
	CodecCall	c2 = {0};
	CodecCall	c3 = {0};
	CodecCall	c4 = {0};
	char	   *text1;
	char	   *text2;
	char	   *embedded;
	char	   *expected;

	c1.msg = msg;
	must(call_to_jsonb, &c1, "printing as JSON", desc);
	text1 = fuzz_jsonb_to_text(c1.result_json);

	c2.desc = desc;
	c2.json = fuzz_jsonb_from_text(text1, strlen(text1));
	if (c2.json == NULL)
		fuzz_fail("the JSON of a %s is not JSON that jsonb accepts: %s",
				  desc->name, clip(text1));
	must(call_from_jsonb, &c2, "decoding its own JSON", desc);
	check_message(c2.result_msg, desc, true, 1, desc->name);
	require_equal(msg, c2.result_msg, "printing as JSON and decoding");

	c3.msg = c2.result_msg;
	must(call_to_jsonb, &c3, "printing as JSON again", desc);
	text2 = fuzz_jsonb_to_text(c3.result_json);
	if (strcmp(text1, text2) != 0)
		fuzz_fail("a %s prints differently after a JSON round trip:\n%s\n%s",
				  desc->name, clip(text1), clip(text2));

	c4.msg = msg;
	must(call_push_embedded, &c4, "pushing as JSON into an open container", desc);
	embedded = fuzz_jsonb_to_text(c4.result_json);
	expected = psprintf("[%s, {\"k\": %s}]", text1, text1);
	if (strcmp(embedded, expected) != 0)
		fuzz_fail("a %s pushed into a container prints differently:\n%s\n%s",
				  desc->name, clip(expected), clip(embedded));
}

/* Encode a message dex built around accepted input: it must decode again */
static void
require_decodable(const ProtobufCMessage *outer, const ProtobufCMessage *inner,
				  const char *how)
{
	CodecCall	c1 = {0};
	CodecCall	c2 = {0};
	FuzzError	e;

	c1.msg = outer;
	must(call_pack, &c1, "encoding a wrapper", outer->descriptor);
	c2.desc = outer->descriptor;
	c2.data = c1.result_data;
	c2.len = c1.result_len;
	if (!fuzz_try(call_unpack, &c2, &e))
		fuzz_fail("a %s that decodes does not once dex puts it %s: %s: %s",
				  inner->descriptor->name, how, e.message ? e.message : "",
				  e.detail ? e.detail : "");
}

/* An event as dex hands it out: in a run's history and in a workflow task */
static void
embed_event(Dex__V1__WorkflowEvent *ev, const ProtobufCMessage *inner,
			const char *how)
{
	Dex__V1__EventBatch batch;
	Dex__V1__WorkflowTask task;

	dex__v1__event_batch__init(&batch);
	batch.n_events = 1;
	batch.events = &ev;
	require_decodable(&batch.base, inner, psprintf("%s in an EventBatch", how));

	dex__v1__workflow_task__init(&task);
	task.n_history = 1;
	task.history = &ev;
	require_decodable(&task.base, inner, psprintf("%s in a WorkflowTask", how));
}

/*
 * The deepest place dex puts a worker's Failure (history.c): as the cause of
 * a schedule-to-close timeout Failure in an ActivityTaskFailed event.
 */
static void
embed_failure(Dex__V1__Failure *failure)
{
	Dex__V1__Failure timeout;
	Dex__V1__ActivityTaskFailed failed;
	Dex__V1__WorkflowEvent ev;

	dex__v1__failure__init(&timeout);
	timeout.message = "timeout";
	timeout.cause = failure;
	dex__v1__activity_task_failed__init(&failed);
	failed.failure = &timeout;
	dex__v1__workflow_event__init(&ev);
	ev.subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_FAILED;
	ev.activity_task_failed = &failed;
	embed_event(&ev, &failure->base,
				"under a timeout Failure in an ActivityTaskFailed event");
}

static void
embed_command(Dex__V1__Command *cmd)
{
	if (cmd->kind_case == DEX__V1__COMMAND__KIND_FAIL_RUN &&
		cmd->fail_run->failure != NULL)
		embed_failure(cmd->fail_run->failure);
}

/*
 * What dex accepts, it may wrap in bigger messages (events, histories,
 * tasks), which must decode too.  The wrappings modelled here are the
 * deepest ones the engine makes of each kind of input.
 */
static void
check_embeddable(ProtobufCMessage *msg)
{
	const ProtobufCMessageDescriptor *desc = msg->descriptor;

	if (desc == &dex__v1__failure__descriptor)
		embed_failure((Dex__V1__Failure *) msg);
	else if (desc == &dex__v1__workflow_event__descriptor)
		embed_event((Dex__V1__WorkflowEvent *) msg, msg, "as it is");
	else if (desc == &dex__v1__command__descriptor)
	{
		Dex__V1__WorkflowTaskCompletion completion;
		Dex__V1__Command *cmd = (Dex__V1__Command *) msg;

		/* the bare array form of dex.complete_task and the completion form agree */
		dex__v1__workflow_task_completion__init(&completion);
		completion.n_commands = 1;
		completion.commands = &cmd;
		require_decodable(&completion.base, msg, "in a WorkflowTaskCompletion");
		embed_command(cmd);
	}
	else if (desc == &dex__v1__workflow_task_completion__descriptor)
	{
		Dex__V1__WorkflowTaskCompletion *completion = (Dex__V1__WorkflowTaskCompletion *) msg;
		size_t		i;

		for (i = 0; i < completion->n_commands; i++)
			embed_command(completion->commands[i]);
	}
}

void
fuzz_check_decoded(ProtobufCMessage *msg, bool from_json)
{
	const ProtobufCMessageDescriptor *desc = msg->descriptor;

	check_message(msg, desc, from_json, 1, desc->name);
	pb_round_trip(msg, from_json);
	json_round_trip(msg);
	check_embeddable(msg);
}


/* ------------------------------------------------------------------------
 * The targets
 * ------------------------------------------------------------------------
 */

void
fuzz_pb_input(const uint8 *data, size_t size)
{
	const ProtobufCMessageDescriptor *desc;
	ProtobufCMessage *msg;

	if (size < 1)
		return;
	desc = fuzz_types[fuzz_type_of_byte(data[0])];
	msg = fuzz_decode_pb(desc, data + 1, size - 1);
	if (msg != NULL)
		fuzz_check_decoded(msg, false);
}

void
fuzz_json_input(const uint8 *data, size_t size)
{
	const ProtobufCMessageDescriptor *desc;
	ProtobufCMessage *msg;
	Jsonb	   *json;

	if (size < 1)
		return;
	desc = fuzz_types[fuzz_type_of_byte(data[0])];
	json = fuzz_jsonb_from_text((const char *) data + 1, size - 1);
	if (json == NULL)
		return;					/* jsonb_in would have refused it */
	msg = fuzz_decode_jsonb(desc, json);
	if (msg != NULL)
		fuzz_check_decoded(msg, true);
}

/*
 * A workflow task's commands from JSON, the way dex.complete_task takes
 * them (api_tasks.c): a bare array is a list of commands, each decoded as a
 * dex.v1.Command; anything else is a WorkflowTaskCompletion.
 */
Dex__V1__WorkflowTaskCompletion *
fuzz_commands_from_jsonb(Jsonb *json)
{
	Dex__V1__WorkflowTaskCompletion *completion;
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	v;

	if (!JB_ROOT_IS_ARRAY(json) || JB_ROOT_IS_SCALAR(json))
		return (Dex__V1__WorkflowTaskCompletion *)
			fuzz_decode_jsonb(&dex__v1__workflow_task_completion__descriptor, json);

	completion = palloc(sizeof(*completion));
	dex__v1__workflow_task_completion__init(completion);
	completion->commands = palloc(sizeof(Dex__V1__Command *) * Max(JB_ROOT_COUNT(json), 1));
	it = JsonbIteratorInit(&json->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		ProtobufCMessage *cmd;

		if (tok != WJB_ELEM)
			continue;
		cmd = fuzz_decode_jsonb(&dex__v1__command__descriptor, JsonbValueToJsonb(&v));
		if (cmd == NULL)
			return NULL;
		completion->commands[completion->n_commands++] = (Dex__V1__Command *) cmd;
	}
	return completion;
}

/* ------------------------------------------------------------------------
 * Command validation
 * ------------------------------------------------------------------------
 */

/* 100 years in whole seconds: the longest delay or timeout of a command */
#define MAX_DELAY_SECONDS	INT64CONST(3153600000)

/*
 * Whether d, rounded up to whole milliseconds as the engine rounds it, is
 * unset or between min_ms (0 or 1) and 100 years, worked out on seconds and
 * nanos (a Duration's nanos have its seconds' sign) rather than on
 * milliseconds.
 */
static bool
delay_ok(const Google__Protobuf__Duration *d, int min_ms)
{
	bool		above;

	if (d == NULL)
		return true;
	if (min_ms > 0)
		above = d->seconds > 0 || (d->seconds == 0 && d->nanos > 0);
	else
		above = d->seconds > 0 || (d->seconds == 0 && d->nanos > -1000000);
	return above && (d->seconds < MAX_DELAY_SECONDS ||
					 (d->seconds == MAX_DELAY_SECONDS && d->nanos <= 0));
}

static bool
name_ok(const char *s, bool required)
{
	if (s == NULL || s[0] == '\0')
		return !required;
	return strlen(s) <= 255;
}

/* A uuid in its canonical text form, 8-4-4-4-12 hex digits */
static bool
uuid_ok(const char *s)
{
	if (strlen(s) != 36)
		return false;
	for (int i = 0; i < 36; i++)
	{
		bool		dash = (i == 8 || i == 13 || i == 18 || i == 23);

		if (dash ? s[i] != '-' : !isxdigit((unsigned char) s[i]))
			return false;
	}
	return true;
}

/*
 * What makes a completion malformed, for completion.c to apply it; NULL if
 * nothing does.
 */
static const char *
commands_flaw(const Dex__V1__WorkflowTaskCompletion *completion)
{
	for (size_t i = 0; i < completion->n_commands; i++)
	{
		const Dex__V1__Command *cmd = completion->commands[i];
		bool		creates = false;

		if (cmd->id < 0)
			return "a negative id";
		if (i + 1 < completion->n_commands &&
			(cmd->kind_case == DEX__V1__COMMAND__KIND_COMPLETE_RUN ||
			 cmd->kind_case == DEX__V1__COMMAND__KIND_FAIL_RUN ||
			 cmd->kind_case == DEX__V1__COMMAND__KIND_CANCEL_RUN))
			return "a command after the one that ends the run";
		switch (cmd->kind_case)
		{
			case DEX__V1__COMMAND__KIND__NOT_SET:
				return "a command without a kind";
			case DEX__V1__COMMAND__KIND_SCHEDULE_ACTIVITY:
				{
					const Dex__V1__ScheduleActivity *sa = cmd->schedule_activity;

					creates = true;
					if (sa->name == NULL || sa->name[0] == '\0')
						return "an activity without a name";
					if (sa->priority < 0 || sa->priority > 100)
						return "an activity priority out of range";
					if (!delay_ok(sa->start_to_close_timeout, 1) ||
						!delay_ok(sa->heartbeat_timeout, 1) ||
						!delay_ok(sa->schedule_to_close_timeout, 1))
						return "an activity timeout out of range";
					break;
				}
			case DEX__V1__COMMAND__KIND_START_TIMER:
				creates = true;
				if (cmd->start_timer->delay == NULL ||
					!delay_ok(cmd->start_timer->delay, 0))
					return "a timer delay missing or out of range";
				break;
			case DEX__V1__COMMAND__KIND_CANCEL_TIMER:
				if (cmd->cancel_timer->timer_created_event_id <= 0)
					return "a cancelled timer id that is not positive";
				break;
			case DEX__V1__COMMAND__KIND_WAIT_EXTERNAL_EVENT:
				creates = true;
				if (!name_ok(cmd->wait_external_event->event_id, true))
					return "an external event id missing or too long";
				if (!delay_ok(cmd->wait_external_event->timeout, 0))
					return "an external event timeout out of range";
				break;
			case DEX__V1__COMMAND__KIND_START_CHILD_RUN:
				{
					const Dex__V1__StartChildRun *sc = cmd->start_child_run;

					creates = true;
					if (!name_ok(sc->workflow_name, true) ||
						!name_ok(sc->instance_id, false) ||
						!name_ok(sc->concurrency_key, false))
						return "a child run name, instance id or key missing or too long";
					if (sc->workflow_version < 0)
						return "a negative child run version";
					if (sc->priority < 0 || sc->priority > 100)
						return "a child run priority out of range";
					break;
				}
			case DEX__V1__COMMAND__KIND_RECORD_SIDE_EFFECT:
				creates = true;
				break;
			case DEX__V1__COMMAND__KIND_RECORD_MARKER:
				creates = true;
				if (!name_ok(cmd->record_marker->name, true))
					return "a marker name missing or too long";
				break;
			case DEX__V1__COMMAND__KIND_PUBLISH_EVENT:
				creates = true;
				if (!name_ok(cmd->publish_event->name, true))
					return "a published event's name missing or too long";
				break;
			case DEX__V1__COMMAND__KIND_SIGNAL_EXTERNAL_RUN:
				{
					const Dex__V1__SignalExternalRun *se = cmd->signal_external_run;
					bool		by_run = se->run_id != NULL && se->run_id[0] != '\0';
					bool		by_instance = se->instance_id != NULL && se->instance_id[0] != '\0';

					creates = true;
					if (by_run == by_instance)
						return "a signal without exactly one of run id and instance id";
					if (!name_ok(se->event_id, true) || !name_ok(se->instance_id, false) ||
						!name_ok(se->queue, false))
						return "a signal event id, instance id or queue missing or too long";
					if (by_run && !uuid_ok(se->run_id))
						return "a signal run id that is not a uuid";
					if (by_run && se->queue != NULL && se->queue[0] != '\0')
						return "a signal to a run id with a queue";
					break;
				}
			case DEX__V1__COMMAND__KIND_FAIL_RUN:
				if (cmd->fail_run->failure == NULL)
					return "failRun without a failure";
				break;
			default:
				break;
		}
		if (creates && cmd->id == 0)
			return "a command that creates something without an id";
		if (cmd->kind_case == DEX__V1__COMMAND__KIND_CONTINUE_AS_NEW)
		{
			/* completion.c refuses what follows, but only after its check of pending work */
			for (size_t j = i + 1; j < completion->n_commands; j++)
				if (completion->commands[j]->id < 0)
					return "a negative id";
			return NULL;
		}
	}
	return NULL;
}

static void
call_check_commands(void *arg)
{
	dex_check_commands(arg);
}

/* What dex.complete_task does with a completion the codec accepted */
static void
check_commands(const Dex__V1__WorkflowTaskCompletion *completion)
{
	FuzzError	e;
	const char *flaw = commands_flaw(completion);

	if (fuzz_try(call_check_commands, (void *) completion, &e))
	{
		if (flaw != NULL)
			fuzz_fail("dex_check_commands accepted a completion with %s", flaw);
		return;
	}
	check_rejection("checking the commands", completion->base.descriptor, &e,
					command_rejections);
	if (flaw == NULL)
		fuzz_fail("dex_check_commands refused a well-formed completion: %s: %s",
				  fuzz_sqlstate(e.sqlerrcode), e.message ? e.message : "");
	if (fuzz_verbose)
		fprintf(stderr, "commands refused (%s): %s\n", flaw, e.message ? e.message : "");
}

void
fuzz_commands_input(const uint8 *data, size_t size)
{
	Jsonb	   *json;
	ProtobufCMessage *msg;

	json = fuzz_jsonb_from_text((const char *) data, size);
	if (json != NULL)
	{
		msg = (ProtobufCMessage *) fuzz_commands_from_jsonb(json);
		if (msg != NULL)
		{
			fuzz_check_decoded(msg, true);
			check_commands((Dex__V1__WorkflowTaskCompletion *) msg);
		}
	}

	msg = fuzz_decode_pb(&dex__v1__workflow_task_completion__descriptor, data, size);
	if (msg != NULL)
	{
		fuzz_check_decoded(msg, false);
		check_commands((Dex__V1__WorkflowTaskCompletion *) msg);
	}
}
