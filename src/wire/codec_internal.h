/*-------------------------------------------------------------------------
 *
 * codec_internal.h
 *	  What the two halves of the wire codec share: codec.c (the descriptor
 *	  table, protobuf-c reflection, the protobuf form, payload checks) and
 *	  codec_json.c (the canonical proto3 JSON form).  Not for other files:
 *	  codec.h is the codec's interface.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEX_WIRE_CODEC_INTERNAL_H
#define DEX_WIRE_CODEC_INTERNAL_H

#include "postgres.h"

#include <protobuf-c/protobuf-c.h>

#include "google/protobuf/duration.pb-c.h"
#include "google/protobuf/timestamp.pb-c.h"

#define NANOS_PER_SECOND	1000000000

/* 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z, in seconds since 1970 */
#define TIMESTAMP_MIN_SECONDS	INT64CONST(-62135596800)
#define TIMESTAMP_MAX_SECONDS	INT64CONST(253402300799)
/* About 10000 years, the limit of google.protobuf.Duration */
#define DURATION_MAX_SECONDS	INT64CONST(315576000000)

#define IS_TIMESTAMP(d)	((d) == &google__protobuf__timestamp__descriptor)
#define IS_DURATION(d)	((d) == &google__protobuf__duration__descriptor)

/* Address of a field's storage (or of its count/case/has member). */
#define MEMBER_PTR(msg, offset)	((void *) (((char *) (msg)) + (offset)))

extern size_t dex_pb_elt_size(ProtobufCType type);
extern const char *dex_pb_type_name(ProtobufCType type);
extern bool dex_pb_field_is_map(const ProtobufCFieldDescriptor *field);
extern const ProtobufCFieldDescriptor *dex_pb_find_field(const ProtobufCMessageDescriptor *desc,
			  const char *key, int keylen);
extern bool dex_pb_field_is_set(const ProtobufCMessage *msg,
				const ProtobufCFieldDescriptor *field);
extern ProtobufCMessage *dex_pb_new_message(const ProtobufCMessageDescriptor *desc);
extern int dex_pb_depth_limit(const ProtobufCMessageDescriptor *desc);
extern bool dex_pb_timestamp_is_valid(int64 seconds, int32 nanos);
extern bool dex_pb_duration_is_valid(int64 seconds, int32 nanos);

#endif							/* DEX_WIRE_CODEC_INTERNAL_H */
