/*-------------------------------------------------------------------------
 *
 * api_codec.c
 *	  SQL access to the codec: dex.to_json, dex.from_json, dex.payload_value.
 *
 * Pure functions of their input; no SPI, no catalog access.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"

#include "api/api.h"

PG_FUNCTION_INFO_V1(dex_to_json);
PG_FUNCTION_INFO_V1(dex_from_json);
PG_FUNCTION_INFO_V1(dex_payload_value);

static const ProtobufCMessageDescriptor *
message_type_arg(text *name)
{
	char	   *type = text_to_cstring(name);
	const ProtobufCMessageDescriptor *desc = dex_pb_descriptor_by_name(type);

	if (desc == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("unknown message type \"%s\"", type),
				 errhint("Message types are full protobuf names such as \"dex.v1.WorkflowEvent\".")));
	return desc;
}

Datum
dex_to_json(PG_FUNCTION_ARGS)
{
	const ProtobufCMessageDescriptor *desc = message_type_arg(PG_GETARG_TEXT_PP(0));
	bytea	   *data = PG_GETARG_BYTEA_PP(1);
	ProtobufCMessage *msg;

	msg = dex_pb_unpack(desc, (uint8 *) VARDATA_ANY(data), VARSIZE_ANY_EXHDR(data),
						"message");
	PG_RETURN_JSONB_P(dex_pb_to_jsonb(msg));
}

Datum
dex_from_json(PG_FUNCTION_ARGS)
{
	const ProtobufCMessageDescriptor *desc = message_type_arg(PG_GETARG_TEXT_PP(0));
	Jsonb	   *json = PG_GETARG_JSONB_P(1);

	PG_RETURN_BYTEA_P(dex_pb_pack_bytea(dex_pb_from_jsonb(desc, json, "message")));
}

Datum
dex_payload_value(PG_FUNCTION_ARGS)
{
	bytea	   *data = PG_GETARG_BYTEA_PP(0);

	PG_RETURN_JSONB_P(dex_payload_to_jsonb(dex_payload_unpack(data, "payload")));
}
