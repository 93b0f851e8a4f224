/*-------------------------------------------------------------------------
 *
 * codec.c
 *	  Protobuf <-> bytea and canonical proto3 JSON (jsonb) conversion for
 *	  every dex.v1 message.
 *
 * This file and codec_json.c own the wire forms of the protocol: here the
 * descriptor table, reflection, the protobuf form and the checks of
 * payloads; the JSON form is codec_json.c's.  Everything is driven by
 * protobuf-c's reflection data (message, field and enum descriptors); the
 * only per-type code is for the well-known types google.protobuf.Timestamp
 * and google.protobuf.Duration, whose JSON forms are strings.
 *
 * Decoding is strict: besides what protobuf-c checks, every string must be
 * UTF-8 without NUL bytes, every enum value must be known, Timestamp and
 * Duration values must be in their documented ranges, and messages may nest
 * at most DEX_PB_MAX_DEPTH levels (map entries do not count) counted from the
 * outermost messages dex writes, less what dex may wrap around the message
 * (dex_pb_depth_limit: 92 levels for most types).  JSON input is
 * just as strict: unknown keys, wrong JSON types, non-integral or
 * out-of-range numbers and the like are errors, never silently dropped.
 *
 * Memory rules: everything is palloc'd in CurrentMemoryContext, and the
 * messages returned here own no other resources, so resetting or deleting
 * that context frees them.  protobuf_c_message_free_unpacked() with
 * &dex_pb_allocator also works on them.  The JsonbValues pushed by
 * dex_pb_push_jsonb may point into the message's strings, so the message
 * must live until the jsonb has been built.
 *
 * Errors: bad protobuf bytes are ERRCODE_INVALID_BINARY_REPRESENTATION.  For
 * JSON, a malformed string-encoded value (base64, integer, number, timestamp
 * or duration text) is ERRCODE_INVALID_TEXT_REPRESENTATION, a value out of
 * range is ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE (numbers) or
 * ERRCODE_DATETIME_VALUE_OUT_OF_RANGE (Timestamp, Duration), and anything
 * else that does not fit the message is ERRCODE_INVALID_PARAMETER_VALUE.
 * Details name the offending field by its JSON path, e.g. "commands[0].id".
 *
 * JSON output follows the canonical proto3 mapping; fractional seconds of a
 * Timestamp or Duration get 0, 3, 6 or 9 digits ("1.500s", not "1.5s").
 *
 * Strings inside messages are UTF-8 (the protobuf rule); they are converted
 * from and to the server encoding at the jsonb boundary, which is a no-op
 * in a UTF-8 database.
 *
 * IDENTIFICATION
 *	  src/wire/codec.c
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

/*
 * Deepest message nesting accepted from either wire form, counted from the
 * outermost messages dex writes and hands out: the EventBatch of a run's
 * history, the WorkflowTask and the ActivityTask a worker polls.
 */
#define DEX_PB_MAX_DEPTH	100

/*
 * Levels kept free for what dex wraps around the messages it accepts (see
 * dex_pb_depth_limit); the deepest wrapping today is five levels.
 */
#define DEX_PB_EMBED_DEPTH	8



/* ------------------------------------------------------------------------
 * Allocator and descriptor table
 * ------------------------------------------------------------------------
 */

static void *
dex_pb_alloc(void *allocator_data, size_t size)
{
	/*
	 * palloc never returns NULL: running out of memory is an ERROR, not a
	 * decoding failure.  Huge requests are allowed because a repeated scalar
	 * field takes up to eight times more room decoded than encoded.
	 */
	return MemoryContextAllocExtended(CurrentMemoryContext, size,
									  MCXT_ALLOC_HUGE);
}

static void
dex_pb_free(void *allocator_data, void *pointer)
{
	if (pointer != NULL)
		pfree(pointer);
}

ProtobufCAllocator dex_pb_allocator = {
	.alloc = dex_pb_alloc,
	.free = dex_pb_free,
	.allocator_data = NULL
};

/* Every message type of the protocol, map entries included. */
static const ProtobufCMessageDescriptor *const dex_pb_descriptors[] = {
	/* common.proto */
	&dex__v1__payload__descriptor,
	&dex__v1__payload__metadata_entry__descriptor,
	&dex__v1__failure__descriptor,
	&dex__v1__retry_policy__descriptor,
	/* event.proto */
	&dex__v1__workflow_event__descriptor,
	&dex__v1__workflow_task_started__descriptor,
	&dex__v1__workflow_task_completed__descriptor,
	&dex__v1__parent_run__descriptor,
	&dex__v1__run_created__descriptor,
	&dex__v1__run_created__labels_entry__descriptor,
	&dex__v1__run_started__descriptor,
	&dex__v1__run_completed__descriptor,
	&dex__v1__run_failed__descriptor,
	&dex__v1__run_cancelled__descriptor,
	&dex__v1__run_terminated__descriptor,
	&dex__v1__run_timed_out__descriptor,
	&dex__v1__run_origin__descriptor,
	&dex__v1__run_cancel_requested__descriptor,
	&dex__v1__run_suspended__descriptor,
	&dex__v1__run_resumed__descriptor,
	&dex__v1__run_continued_as_new__descriptor,
	&dex__v1__custom_status_set__descriptor,
	&dex__v1__activity_task_created__descriptor,
	&dex__v1__activity_task_completed__descriptor,
	&dex__v1__activity_task_failed__descriptor,
	&dex__v1__timer_created__descriptor,
	&dex__v1__timer_elapsed__descriptor,
	&dex__v1__timer_cancelled__descriptor,
	&dex__v1__child_run_created__descriptor,
	&dex__v1__child_run_created__labels_entry__descriptor,
	&dex__v1__child_run_completed__descriptor,
	&dex__v1__child_run_failed__descriptor,
	&dex__v1__side_effect_executed__descriptor,
	&dex__v1__marker_recorded__descriptor,
	&dex__v1__event_published__descriptor,
	&dex__v1__external_event_received__descriptor,
	&dex__v1__external_event_wait_started__descriptor,
	&dex__v1__external_run_signalled__descriptor,
	&dex__v1__external_run_signal_result__descriptor,
	&dex__v1__event_batch__descriptor,
	&dex__v1__published_event__descriptor,
	/* command.proto */
	&dex__v1__command__descriptor,
	&dex__v1__schedule_activity__descriptor,
	&dex__v1__start_timer__descriptor,
	&dex__v1__cancel_timer__descriptor,
	&dex__v1__start_child_run__descriptor,
	&dex__v1__start_child_run__labels_entry__descriptor,
	&dex__v1__record_side_effect__descriptor,
	&dex__v1__record_marker__descriptor,
	&dex__v1__publish_event__descriptor,
	&dex__v1__wait_external_event__descriptor,
	&dex__v1__signal_external_run__descriptor,
	&dex__v1__set_custom_status__descriptor,
	&dex__v1__complete_run__descriptor,
	&dex__v1__fail_run__descriptor,
	&dex__v1__continue_as_new__descriptor,
	&dex__v1__cancel_run__descriptor,
	&dex__v1__workflow_task_completion__descriptor,
	/* task.proto */
	&dex__v1__workflow_task__descriptor,
	&dex__v1__activity_task__descriptor,
	/* well-known types */
	&google__protobuf__timestamp__descriptor,
	&google__protobuf__duration__descriptor,
};

const ProtobufCMessageDescriptor *
dex_pb_descriptor_by_name(const char *full_name)
{
	int			i;

	if (full_name == NULL)
		return NULL;
	for (i = 0; i < lengthof(dex_pb_descriptors); i++)
	{
		if (strcmp(dex_pb_descriptors[i]->name, full_name) == 0)
			return dex_pb_descriptors[i];
	}
	return NULL;
}


/* ------------------------------------------------------------------------
 * Reflection helpers
 * ------------------------------------------------------------------------
 */

/* Size of one element of a repeated field's array. */
size_t
dex_pb_elt_size(ProtobufCType type)
{
	switch (type)
	{
		case PROTOBUF_C_TYPE_INT32:
		case PROTOBUF_C_TYPE_SINT32:
		case PROTOBUF_C_TYPE_SFIXED32:
		case PROTOBUF_C_TYPE_UINT32:
		case PROTOBUF_C_TYPE_FIXED32:
			return sizeof(int32_t);
		case PROTOBUF_C_TYPE_INT64:
		case PROTOBUF_C_TYPE_SINT64:
		case PROTOBUF_C_TYPE_SFIXED64:
		case PROTOBUF_C_TYPE_UINT64:
		case PROTOBUF_C_TYPE_FIXED64:
			return sizeof(int64_t);
		case PROTOBUF_C_TYPE_FLOAT:
			return sizeof(float);
		case PROTOBUF_C_TYPE_DOUBLE:
			return sizeof(double);
		case PROTOBUF_C_TYPE_BOOL:
			return sizeof(protobuf_c_boolean);
		case PROTOBUF_C_TYPE_ENUM:
			/* protobuf-c forces every enum to int size */
			return sizeof(int);
		case PROTOBUF_C_TYPE_STRING:
			return sizeof(char *);
		case PROTOBUF_C_TYPE_BYTES:
			return sizeof(ProtobufCBinaryData);
		case PROTOBUF_C_TYPE_MESSAGE:
			return sizeof(ProtobufCMessage *);
	}
	elog(ERROR, "unrecognized protobuf-c field type %d", (int) type);
	return 0;					/* keep compiler quiet */
}

/* The .proto spelling of a scalar type, for error messages. */
const char *
dex_pb_type_name(ProtobufCType type)
{
	switch (type)
	{
		case PROTOBUF_C_TYPE_INT32:
			return "int32";
		case PROTOBUF_C_TYPE_SINT32:
			return "sint32";
		case PROTOBUF_C_TYPE_SFIXED32:
			return "sfixed32";
		case PROTOBUF_C_TYPE_INT64:
			return "int64";
		case PROTOBUF_C_TYPE_SINT64:
			return "sint64";
		case PROTOBUF_C_TYPE_SFIXED64:
			return "sfixed64";
		case PROTOBUF_C_TYPE_UINT32:
			return "uint32";
		case PROTOBUF_C_TYPE_FIXED32:
			return "fixed32";
		case PROTOBUF_C_TYPE_UINT64:
			return "uint64";
		case PROTOBUF_C_TYPE_FIXED64:
			return "fixed64";
		case PROTOBUF_C_TYPE_FLOAT:
			return "float";
		case PROTOBUF_C_TYPE_DOUBLE:
			return "double";
		case PROTOBUF_C_TYPE_BOOL:
			return "bool";
		case PROTOBUF_C_TYPE_ENUM:
			return "enum";
		case PROTOBUF_C_TYPE_STRING:
			return "string";
		case PROTOBUF_C_TYPE_BYTES:
			return "bytes";
		case PROTOBUF_C_TYPE_MESSAGE:
			return "message";
	}
	return "unknown";
}

/*
 * protobuf-c 1.4 keeps no map_entry option, so recognize the shape protoc
 * gives every map<K,V>: a nested message "<Name>Entry" with exactly the
 * fields key = 1 and value = 2.
 */
static bool
pb_is_map_entry(const ProtobufCMessageDescriptor *desc)
{
	size_t		len;

	if (desc->n_fields != 2 ||
		desc->fields[0].id != 1 || strcmp(desc->fields[0].name, "key") != 0 ||
		desc->fields[1].id != 2 || strcmp(desc->fields[1].name, "value") != 0)
		return false;
	len = strlen(desc->short_name);
	return len > 5 && strcmp(desc->short_name + len - 5, "Entry") == 0;
}

bool
dex_pb_field_is_map(const ProtobufCFieldDescriptor *field)
{
	return field->label == PROTOBUF_C_LABEL_REPEATED &&
		field->type == PROTOBUF_C_TYPE_MESSAGE &&
		pb_is_map_entry(field->descriptor);
}

/*
 * The proto3 JSON name of a field (protobuf-c 1.4 does not record it):
 * underscores dropped, the letter after each one upper-cased.  palloc'd,
 * because jsonb keeps pointers to key strings.
 */
char *
dex_pb_json_name(const char *name)
{
	char	   *result = palloc(strlen(name) + 1);
	char	   *out = result;
	bool		upper = false;

	for (; *name; name++)
	{
		if (*name == '_')
		{
			upper = true;
			continue;
		}
		*out++ = upper ? pg_ascii_toupper((unsigned char) *name) : *name;
		upper = false;
	}
	*out = '\0';
	return result;
}

/*
 * The proto3 JSON name of the field that a oneof's case "field_id" of a
 * "desc" message names ("runCompleted" of a WorkflowEvent's subject), or
 * NULL when it names none (a case not set).  palloc'd.
 */
char *
dex_pb_case_json_name(const ProtobufCMessageDescriptor *desc, uint32 field_id)
{
	const ProtobufCFieldDescriptor *field = protobuf_c_message_descriptor_get_field(desc, field_id);

	return field ? dex_pb_json_name(field->name) : NULL;
}

/* Does key (not NUL-terminated) equal the JSON name of field "name"? */
static bool
pb_json_name_matches(const char *name, const char *key, int keylen)
{
	int			i = 0;
	bool		upper = false;

	for (; *name; name++)
	{
		char		c;

		if (*name == '_')
		{
			upper = true;
			continue;
		}
		c = upper ? pg_ascii_toupper((unsigned char) *name) : *name;
		upper = false;
		if (i >= keylen || key[i] != c)
			return false;
		i++;
	}
	return i == keylen;
}

/* Field named key, by JSON name or by .proto name, or NULL. */
const ProtobufCFieldDescriptor *
dex_pb_find_field(const ProtobufCMessageDescriptor *desc,
			  const char *key, int keylen)
{
	unsigned	i;

	for (i = 0; i < desc->n_fields; i++)
	{
		const ProtobufCFieldDescriptor *field = &desc->fields[i];

		if ((strlen(field->name) == keylen &&
			 memcmp(field->name, key, keylen) == 0) ||
			pb_json_name_matches(field->name, key, keylen))
			return field;
	}
	return NULL;
}

/*
 * Is the field present in the sense of the wire encoding?  This mirrors
 * what protobuf_c_message_pack() writes, so that JSON and protobuf agree.
 */
bool
dex_pb_field_is_set(const ProtobufCMessage *msg,
				const ProtobufCFieldDescriptor *field)
{
	const void *member = MEMBER_PTR(msg, field->offset);

	if (field->label == PROTOBUF_C_LABEL_REPEATED)
		return *(const size_t *) MEMBER_PTR(msg, field->quantifier_offset) > 0;

	if (field->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
	{
		uint32		oneof_case;

		oneof_case = *(const uint32_t *) MEMBER_PTR(msg, field->quantifier_offset);
		if (oneof_case != field->id)
			return false;
		/* protobuf-c skips a oneof string or message left at its default */
		if (field->type == PROTOBUF_C_TYPE_STRING ||
			field->type == PROTOBUF_C_TYPE_MESSAGE)
		{
			const void *ptr = *(const void *const *) member;

			return ptr != NULL && ptr != field->default_value;
		}
		return true;
	}

	switch (field->label)
	{
		case PROTOBUF_C_LABEL_REQUIRED:
			return true;

		case PROTOBUF_C_LABEL_OPTIONAL:
			if (field->type == PROTOBUF_C_TYPE_STRING ||
				field->type == PROTOBUF_C_TYPE_MESSAGE)
			{
				const void *ptr = *(const void *const *) member;

				return ptr != NULL && ptr != field->default_value;
			}
			return *(const protobuf_c_boolean *)
				MEMBER_PTR(msg, field->quantifier_offset);

		case PROTOBUF_C_LABEL_NONE:
		default:
			break;
	}

	/* proto3 field without presence: set when not the zero value */
	switch (field->type)
	{
		case PROTOBUF_C_TYPE_INT32:
		case PROTOBUF_C_TYPE_SINT32:
		case PROTOBUF_C_TYPE_SFIXED32:
		case PROTOBUF_C_TYPE_UINT32:
		case PROTOBUF_C_TYPE_FIXED32:
			return *(const uint32_t *) member != 0;
		case PROTOBUF_C_TYPE_ENUM:
			return *(const int *) member != 0;
		case PROTOBUF_C_TYPE_INT64:
		case PROTOBUF_C_TYPE_SINT64:
		case PROTOBUF_C_TYPE_SFIXED64:
		case PROTOBUF_C_TYPE_UINT64:
		case PROTOBUF_C_TYPE_FIXED64:
			return *(const uint64_t *) member != 0;
		case PROTOBUF_C_TYPE_FLOAT:
			return *(const float *) member != 0;
		case PROTOBUF_C_TYPE_DOUBLE:
			return *(const double *) member != 0;
		case PROTOBUF_C_TYPE_BOOL:
			return *(const protobuf_c_boolean *) member != 0;
		case PROTOBUF_C_TYPE_STRING:
			{
				const char *str = *(const char *const *) member;

				return str != NULL && str[0] != '\0';
			}
		case PROTOBUF_C_TYPE_BYTES:
			return ((const ProtobufCBinaryData *) member)->len > 0;
		case PROTOBUF_C_TYPE_MESSAGE:
			return *(const void *const *) member != NULL;
	}
	return false;
}

/* A new message at its defaults, allocated like protobuf-c would. */
ProtobufCMessage *
dex_pb_new_message(const ProtobufCMessageDescriptor *desc)
{
	ProtobufCMessage *msg = palloc0(desc->sizeof_message);

	protobuf_c_message_init(desc, msg);
	return msg;
}

/*
 * How deep a message of type desc may nest.  dex puts what it accepts inside
 * bigger messages: a worker's Failure can become the cause of a timeout
 * Failure in an ActivityTaskFailed in a WorkflowEvent, which lands in the
 * EventBatch of the history and in the WorkflowTask of the next poll.  Had
 * the Failure used all DEX_PB_MAX_DEPTH levels, that history could never be
 * decoded again, and every poll of its queue would fail on it.  So only the
 * outermost messages get all the levels; a WorkflowEvent, which only they
 * hold, one less; any other message DEX_PB_EMBED_DEPTH less.  The commands
 * of a WorkflowTaskCompletion get as many as a bare Command, as
 * dex.complete_task takes either form.
 */
int
dex_pb_depth_limit(const ProtobufCMessageDescriptor *desc)
{
	if (desc == &dex__v1__event_batch__descriptor ||
		desc == &dex__v1__workflow_task__descriptor ||
		desc == &dex__v1__activity_task__descriptor)
		return DEX_PB_MAX_DEPTH;
	if (desc == &dex__v1__workflow_event__descriptor)
		return DEX_PB_MAX_DEPTH - 1;
	if (desc == &dex__v1__workflow_task_completion__descriptor)
		return DEX_PB_MAX_DEPTH - DEX_PB_EMBED_DEPTH + 1;
	return DEX_PB_MAX_DEPTH - DEX_PB_EMBED_DEPTH;
}

bool
dex_pb_timestamp_is_valid(int64 seconds, int32 nanos)
{
	return seconds >= TIMESTAMP_MIN_SECONDS &&
		seconds <= TIMESTAMP_MAX_SECONDS &&
		nanos >= 0 && nanos < NANOS_PER_SECOND;
}

bool
dex_pb_duration_is_valid(int64 seconds, int32 nanos)
{
	if (seconds < -DURATION_MAX_SECONDS || seconds > DURATION_MAX_SECONDS)
		return false;
	if (nanos <= -NANOS_PER_SECOND || nanos >= NANOS_PER_SECOND)
		return false;
	/* seconds and nanos must not have opposite signs */
	if ((seconds > 0 && nanos < 0) || (seconds < 0 && nanos > 0))
		return false;
	return true;
}


/* ------------------------------------------------------------------------
 * Protobuf bytes
 * ------------------------------------------------------------------------
 */

typedef struct PbDecodeState
{
	const char *what;			/* the input, for error messages */
	const ProtobufCMessageDescriptor *top;	/* type of the whole input */
	int			max_depth;		/* dex_pb_depth_limit(top) */
} PbDecodeState;

static void pb_decode_error(const PbDecodeState *ds) pg_attribute_noreturn();

static void
pb_decode_error(const PbDecodeState *ds)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
			 errmsg("invalid protobuf encoding of %s", ds->what),
			 errdetail("The bytes do not decode as a %s message.",
					   ds->top->name)));
}

static bool
read_varint(const uint8 **pp, const uint8 *end, uint64 *value)
{
	const uint8 *p = *pp;
	uint64		v = 0;
	int			shift;

	for (shift = 0; shift < 64 && p < end; shift += 7)
	{
		uint8		b = *p++;

		v |= (uint64) (b & 0x7f) << shift;
		if ((b & 0x80) == 0)
		{
			*pp = p;
			*value = v;
			return true;
		}
	}
	return false;
}

/*
 * Walk the encoded message before protobuf-c decodes it.  protobuf-c recurses
 * into nested messages without any depth limit and copies strings with
 * memcpy, silently truncating them at an embedded NUL; doing this walk first
 * bounds the recursion and lets us see every string's real bytes.
 */
static void
pb_scan_wire(const PbDecodeState *ds, const ProtobufCMessageDescriptor *desc,
			 const uint8 *p, size_t len, int depth)
{
	const uint8 *end = p + len;

	check_stack_depth();

	if (depth > ds->max_depth)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("invalid protobuf encoding of %s", ds->what),
				 errdetail("Messages are nested more than %d levels deep.",
						   ds->max_depth)));

	while (p < end)
	{
		uint64		tag;
		uint64		n;
		uint64		field_number;
		const ProtobufCFieldDescriptor *field;

		if (!read_varint(&p, end, &tag))
			pb_decode_error(ds);
		field_number = tag >> 3;
		if (field_number == 0 || field_number > PG_INT32_MAX / 4)
			pb_decode_error(ds);

		switch (tag & 7)
		{
			case PROTOBUF_C_WIRE_TYPE_VARINT:
				if (!read_varint(&p, end, &n))
					pb_decode_error(ds);
				break;
			case PROTOBUF_C_WIRE_TYPE_64BIT:
				if (end - p < 8)
					pb_decode_error(ds);
				p += 8;
				break;
			case PROTOBUF_C_WIRE_TYPE_32BIT:
				if (end - p < 4)
					pb_decode_error(ds);
				p += 4;
				break;
			case PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED:
				if (!read_varint(&p, end, &n) || n > (uint64) (end - p))
					pb_decode_error(ds);
				field = protobuf_c_message_descriptor_get_field(desc,
																(unsigned) field_number);
				if (field != NULL && field->type == PROTOBUF_C_TYPE_STRING)
				{
					if (pg_encoding_verifymbstr(PG_UTF8, (const char *) p,
												(int) n) != (int) n)
						ereport(ERROR,
								(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
								 errmsg("invalid protobuf encoding of %s",
										ds->what),
								 memchr(p, '\0', n) != NULL ?
								 errdetail("Field \"%s\" of message %s contains a null byte.",
										   field->name, desc->name) :
								 errdetail("Field \"%s\" of message %s is not valid UTF-8.",
										   field->name, desc->name)));
				}
				else if (field != NULL && field->type == PROTOBUF_C_TYPE_MESSAGE)
				{
					const ProtobufCMessageDescriptor *sub = field->descriptor;

					/* a map entry is not a level of nesting in JSON */
					pb_scan_wire(ds, sub, p, n,
								 pb_is_map_entry(sub) ? depth : depth + 1);
				}
				p += n;
				break;
			default:
				/* groups (deprecated) and invalid wire types */
				pb_decode_error(ds);
		}
	}
}

/*
 * Checks protobuf-c does not make on a decoded message: enum values must be
 * known, well-known types must be in range.  field/parent name where the
 * value sits, or are NULL for the top level.
 */
static void
pb_check_decoded(const PbDecodeState *ds, const ProtobufCMessage *msg,
				 const ProtobufCMessageDescriptor *parent,
				 const ProtobufCFieldDescriptor *where)
{
	const ProtobufCMessageDescriptor *desc = msg->descriptor;
	unsigned	i;

	check_stack_depth();

	if (IS_TIMESTAMP(desc) || IS_DURATION(desc))
	{
		bool		valid;
		int64		seconds;
		int32		nanos;

		if (IS_TIMESTAMP(desc))
		{
			const Google__Protobuf__Timestamp *ts = (const void *) msg;

			seconds = ts->seconds;
			nanos = ts->nanos;
			valid = dex_pb_timestamp_is_valid(seconds, nanos);
		}
		else
		{
			const Google__Protobuf__Duration *d = (const void *) msg;

			seconds = d->seconds;
			nanos = d->nanos;
			valid = dex_pb_duration_is_valid(seconds, nanos);
		}
		if (!valid)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
					 errmsg("invalid protobuf encoding of %s", ds->what),
					 where ?
					 errdetail("Field \"%s\" of message %s holds an out-of-range %s (seconds %lld, nanos %d).",
							   where->name, parent->name, desc->name,
							   (long long) seconds, nanos) :
					 errdetail("The %s is out of range (seconds %lld, nanos %d).",
							   desc->name, (long long) seconds, nanos)));
		return;
	}

	for (i = 0; i < desc->n_fields; i++)
	{
		const ProtobufCFieldDescriptor *field = &desc->fields[i];
		const char *member = MEMBER_PTR(msg, field->offset);
		size_t		n = 1;
		size_t		j;

		if (field->type != PROTOBUF_C_TYPE_ENUM &&
			field->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		if (!dex_pb_field_is_set(msg, field))
			continue;
		if (field->label == PROTOBUF_C_LABEL_REPEATED)
		{
			n = *(const size_t *) MEMBER_PTR(msg, field->quantifier_offset);
			member = *(const char *const *) member;
		}

		for (j = 0; j < n; j++)
		{
			const char *elt = member + j * dex_pb_elt_size(field->type);

			if (field->type == PROTOBUF_C_TYPE_ENUM)
			{
				int			value = *(const int *) elt;
				const ProtobufCEnumDescriptor *ed = field->descriptor;

				if (protobuf_c_enum_descriptor_get_value(ed, value) == NULL)
					ereport(ERROR,
							(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
							 errmsg("invalid protobuf encoding of %s", ds->what),
							 errdetail("Field \"%s\" of message %s has value %d, which is not a member of enum %s.",
									   field->name, desc->name, value,
									   ed->name)));
			}
			else
			{
				const ProtobufCMessage *sub = *(const ProtobufCMessage *const *) elt;

				if (sub != NULL)
					pb_check_decoded(ds, sub, desc, field);
			}
		}
	}
}

ProtobufCMessage *
dex_pb_unpack(const ProtobufCMessageDescriptor *desc,
			  const uint8 *data, size_t len, const char *what)
{
	PbDecodeState ds;
	ProtobufCMessage *msg;
	static const uint8 empty[1] = {0};

	ds.what = what ? what : "value";
	ds.top = desc;
	ds.max_depth = dex_pb_depth_limit(desc);

	if (data == NULL)
	{
		Assert(len == 0);
		data = empty;
	}

	pb_scan_wire(&ds, desc, data, len, 1);

	msg = protobuf_c_message_unpack(desc, &dex_pb_allocator, len, data);
	if (msg == NULL)
		pb_decode_error(&ds);

	pb_check_decoded(&ds, msg, NULL, NULL);
	return msg;
}

/* ------------------------------------------------------------------------
 * Payloads of client input
 * ------------------------------------------------------------------------
 */

/* Numbers as jsonb_in takes them: numeric_in refuses exponents it cannot hold */
static void
payload_json_scalar(void *state, char *token, JsonTokenType tokentype)
{
	if (tokentype == JSON_TOKEN_NUMBER)
		(void) DirectFunctionCall3(numeric_in, CStringGetDatum(token),
								   ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
}

static void
check_payload_json(const Dex__V1__Payload *payload, const char *what,
				   StringInfo path)
{
	JsonLexContext *lex;
	JsonSemAction sem;
	JsonParseErrorType result;
	const char *text = payload->json ? payload->json : "";

	memset(&sem, 0, sizeof(sem));
	sem.scalar = payload_json_scalar;
	/* escapes are decoded, so that \u0000 is refused as jsonb_in refuses it */
	lex = makeJsonLexContextCstringLen((char *) text, strlen(text), PG_UTF8, true);
	result = pg_parse_json(lex, &sem);
	if (result != JSON_SUCCESS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("invalid %s", what),
				 errdetail("Field \"%s%sjson\" is not valid JSON text. %s",
						   path->data, path->len > 0 ? "." : "",
						   json_errdetail(result, lex)),
				 errhint("The \"json\" field of a payload holds the text of one JSON value, such as \"[1, 2]\".")));
}

static void
check_payloads(const ProtobufCMessage *msg, const char *what, StringInfo path)
{
	const ProtobufCMessageDescriptor *desc = msg->descriptor;
	unsigned	i;

	check_stack_depth();

	if (desc == &dex__v1__payload__descriptor)
	{
		const Dex__V1__Payload *payload = (const Dex__V1__Payload *) msg;

		if (payload->content_case == DEX__V1__PAYLOAD__CONTENT_JSON)
			check_payload_json(payload, what, path);
		return;
	}

	for (i = 0; i < desc->n_fields; i++)
	{
		const ProtobufCFieldDescriptor *field = &desc->fields[i];
		const char *member = MEMBER_PTR(msg, field->offset);
		size_t		n = 1;
		size_t		j;
		int			saved = path->len;

		if (field->type != PROTOBUF_C_TYPE_MESSAGE || !dex_pb_field_is_set(msg, field))
			continue;
		if (field->label == PROTOBUF_C_LABEL_REPEATED)
		{
			n = *(const size_t *) MEMBER_PTR(msg, field->quantifier_offset);
			member = *(const char *const *) member;
		}

		for (j = 0; j < n; j++)
		{
			const ProtobufCMessage *sub =
				*(const ProtobufCMessage *const *) (member + j * sizeof(ProtobufCMessage *));

			if (sub == NULL)
				continue;
			if (saved > 0)
				appendStringInfoChar(path, '.');
			appendStringInfoString(path, dex_pb_json_name(field->name));
			if (field->label == PROTOBUF_C_LABEL_REPEATED)
				appendStringInfo(path, "[%zu]", j);
			check_payloads(sub, what, path);
			path->len = saved;
			path->data[saved] = '\0';
		}
	}
}

/*
 * Client input: the json field of every dex.v1.Payload in the message must
 * hold JSON text that jsonb_in accepts, or the payload could not be read
 * back.  ERRCODE_INVALID_TEXT_REPRESENTATION otherwise.  Done once where
 * client input becomes a message, never when stored messages are read.
 */
void
dex_pb_check_payloads(const ProtobufCMessage *msg, const char *what)
{
	StringInfoData path;

	initStringInfo(&path);
	check_payloads(msg, what ? what : "value", &path);
	pfree(path.data);
}

uint8 *
dex_pb_pack(const ProtobufCMessage *msg, size_t *len)
{
	size_t		size = protobuf_c_message_get_packed_size(msg);
	uint8	   *buf;
	size_t		written;

	buf = MemoryContextAllocExtended(CurrentMemoryContext, size,
									 MCXT_ALLOC_HUGE);
	written = protobuf_c_message_pack(msg, buf);
	if (written != size)
		elog(ERROR, "protobuf-c packed %zu bytes of %s, expected %zu",
			 written, msg->descriptor->name, size);
	*len = size;
	return buf;
}

bytea *
dex_pb_pack_bytea(const ProtobufCMessage *msg)
{
	size_t		size = protobuf_c_message_get_packed_size(msg);
	bytea	   *result;
	size_t		written;

	if (size > MaxAllocSize - VARHDRSZ)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("encoded %s message is too large", msg->descriptor->name),
				 errdetail("It would take %zu bytes; a bytea holds at most %zu.",
						   size, (size_t) (MaxAllocSize - VARHDRSZ))));

	result = palloc(VARHDRSZ + size);
	SET_VARSIZE(result, VARHDRSZ + size);
	written = protobuf_c_message_pack(msg, (uint8_t *) VARDATA(result));
	if (written != size)
		elog(ERROR, "protobuf-c packed %zu bytes of %s, expected %zu",
			 written, msg->descriptor->name, size);
	return result;
}


