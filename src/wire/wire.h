/*-------------------------------------------------------------------------
 *
 * wire/wire.h
 *	  The protocol (proto/dex/v1): the codec of every message (codec.h), the
 *	  values dex converts to and from SQL, and event constructors.  Knows
 *	  nothing of tables.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEX_WIRE_WIRE_H
#define DEX_WIRE_WIRE_H

#include "postgres.h"

#include "datatype/timestamp.h"

#include "util/util.h"
#include "wire/codec.h"

/* values.c */
extern Google__Protobuf__Timestamp *dex_pb_timestamp(TimestampTz ts);
extern TimestampTz dex_timestamp_from_pb(const Google__Protobuf__Timestamp *ts);
extern Dex__V1__Payload *dex_payload_from_jsonb(Jsonb *value);
extern Dex__V1__Payload *dex_payload_from_bytea(bytea *data, const char *what);
extern Dex__V1__Payload *dex_payload_unpack(bytea *data, const char *what);
extern Jsonb *dex_payload_to_jsonb(const Dex__V1__Payload *payload);

/* events.c */
extern Dex__V1__WorkflowEvent *dex_new_event(int32 id, TimestampTz ts);

#endif							/* DEX_WIRE_WIRE_H */
