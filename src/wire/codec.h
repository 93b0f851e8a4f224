/*-------------------------------------------------------------------------
 *
 * codec.h
 *	  Protobuf <-> bytea and canonical proto3 JSON (jsonb) conversion for
 *	  every dex.v1 message, driven by protobuf-c descriptors.
 *
 * All memory is allocated in CurrentMemoryContext.  Malformed input is an
 * ERROR: ERRCODE_INVALID_BINARY_REPRESENTATION for bad protobuf bytes,
 * ERRCODE_INVALID_TEXT_REPRESENTATION / ERRCODE_INVALID_PARAMETER_VALUE for
 * JSON that does not map onto the message.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEX_CODEC_H
#define DEX_CODEC_H

#include "postgres.h"

#include <protobuf-c/protobuf-c.h>

#include "utils/jsonb.h"

#include "dex/v1/common.pb-c.h"
#include "dex/v1/event.pb-c.h"
#include "dex/v1/command.pb-c.h"
#include "dex/v1/task.pb-c.h"

/* protobuf-c allocator backed by palloc in CurrentMemoryContext */
extern ProtobufCAllocator dex_pb_allocator;

/* Descriptor of a dex.v1 (or well-known) message by full name, or NULL. */
extern const ProtobufCMessageDescriptor *dex_pb_descriptor_by_name(const char *full_name);

/*
 * Decode protobuf bytes.  "what" names the input in error messages
 * (e.g. "commands").  Never returns NULL.
 */
extern ProtobufCMessage *dex_pb_unpack(const ProtobufCMessageDescriptor *desc,
									   const uint8 *data, size_t len,
									   const char *what);
/*
 * Client input: every dex.v1.Payload's json field must hold JSON text
 * (ERRCODE_INVALID_TEXT_REPRESENTATION otherwise).  "what" as above.
 */
extern void dex_pb_check_payloads(const ProtobufCMessage *msg, const char *what);
/* Encode to a palloc'd bytea. */
extern bytea *dex_pb_pack_bytea(const ProtobufCMessage *msg);
/* Encode to a palloc'd buffer; *len receives its length. */
extern uint8 *dex_pb_pack(const ProtobufCMessage *msg, size_t *len);

/* Canonical proto3 JSON of a message. */
extern Jsonb *dex_pb_to_jsonb(const ProtobufCMessage *msg);
/* Whether a value got out of a jsonb container is an object, or an array (not a scalar). */
extern bool dex_jbv_is_object(const JsonbValue *v);
extern bool dex_jbv_is_array(const JsonbValue *v);
/* Same, as a JsonbValue pushed into an open parse state (for embedding). */
extern JsonbValue *dex_pb_push_jsonb(JsonbParseState **state,
									 const ProtobufCMessage *msg);

/* A field's name in proto3 JSON (lowerCamelCase), palloc'd */
extern char *dex_pb_json_name(const char *name);
/* The JSON name of the field a oneof's case names, or NULL for none */
extern char *dex_pb_case_json_name(const ProtobufCMessageDescriptor *desc, uint32 field_id);

/* Parse canonical proto3 JSON into a message of the given type. */
extern ProtobufCMessage *dex_pb_from_jsonb(const ProtobufCMessageDescriptor *desc,
										   Jsonb *json, const char *what);

#endif							/* DEX_CODEC_H */
