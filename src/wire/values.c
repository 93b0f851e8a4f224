/*-------------------------------------------------------------------------
 *
 * values.c
 *	  Protobuf values dex converts to and from SQL: timestamps and payloads.
 *
 * Payloads arrive as jsonb or as protobuf bytes; both are checked against
 * dex.max_payload_size when they come in, never when stored data is read.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "wire/wire.h"

#define UNIX_TO_PG_USECS ((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

Google__Protobuf__Timestamp *
dex_pb_timestamp(TimestampTz ts)
{
	Google__Protobuf__Timestamp *pb = palloc(sizeof(*pb));
	int64		unix_us = ts + UNIX_TO_PG_USECS;
	int64		secs = unix_us / USECS_PER_SEC;
	int64		us = unix_us % USECS_PER_SEC;

	if (us < 0)
	{
		secs -= 1;
		us += USECS_PER_SEC;
	}
	google__protobuf__timestamp__init(pb);
	pb->seconds = secs;
	pb->nanos = (int32) (us * 1000);
	return pb;
}

TimestampTz
dex_timestamp_from_pb(const Google__Protobuf__Timestamp *ts)
{
	return ts->seconds * USECS_PER_SEC + ts->nanos / 1000 - UNIX_TO_PG_USECS;
}

Dex__V1__Payload *
dex_payload_from_jsonb(Jsonb *value)
{
	Dex__V1__Payload *payload;

	if (value == NULL)
		return NULL;
	payload = palloc(sizeof(*payload));
	dex__v1__payload__init(payload);
	payload->content_case = DEX__V1__PAYLOAD__CONTENT_JSON;
	payload->json = JsonbToCString(NULL, &value->root, VARSIZE(value));
	dex_check_payload_size(strlen(payload->json), "payload");
	return payload;
}

/*
 * A payload a client sends as protobuf: within dex.max_payload_size, its
 * JSON text valid.
 */
Dex__V1__Payload *
dex_payload_from_bytea(bytea *data, const char *what)
{
	Dex__V1__Payload *payload;

	if (data == NULL)
		return NULL;
	dex_check_payload_size(VARSIZE_ANY_EXHDR(data), what);
	payload = dex_payload_unpack(data, what);
	dex_pb_check_payloads((ProtobufCMessage *) payload, what);
	return payload;
}

/*
 * A stored payload: it was checked when it came in, and reads are never
 * limited (dex.max_payload_size may have been lowered since).
 */
Dex__V1__Payload *
dex_payload_unpack(bytea *data, const char *what)
{
	if (data == NULL)
		return NULL;
	return (Dex__V1__Payload *)
		dex_pb_unpack(&dex__v1__payload__descriptor,
					  (uint8 *) VARDATA_ANY(data), VARSIZE_ANY_EXHDR(data), what);
}

/*
 * A payload as a JSON value: JSON payloads are their value, anything else
 * its canonical Payload JSON.
 */
Jsonb *
dex_payload_to_jsonb(const Dex__V1__Payload *payload)
{
	if (payload == NULL)
		return NULL;
	if (payload->content_case == DEX__V1__PAYLOAD__CONTENT_JSON &&
		payload->n_metadata == 0)
		return DatumGetJsonbP(DirectFunctionCall1(jsonb_in,
												  CStringGetDatum(payload->json)));
	return dex_pb_to_jsonb((const ProtobufCMessage *) payload);
}
