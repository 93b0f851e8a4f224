/*-------------------------------------------------------------------------
 *
 * fuzz_codec.h
 *	  The fuzz targets of src/wire/codec.c (fuzz_codec.c), for the libFuzzer
 *	  entry points (fuzz_main.c) and the seed generator (seedgen.c).
 *
 * IDENTIFICATION
 *	  test/fuzz/fuzz_codec.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEX_FUZZ_CODEC_H
#define DEX_FUZZ_CODEC_H

#include "postgres.h"

#include "utils/jsonb.h"

#include "codec.h"

/* The message types a selector byte chooses from, by full name */
extern const char *const fuzz_type_names[];
extern const int fuzz_n_types;

/* Check the type table against the codec; read DEX_FUZZ_VERBOSE. */
extern void fuzz_init(void);

extern int	fuzz_type_of_byte(uint8 b);
extern uint8 fuzz_byte_of_type(int index);
extern int	fuzz_type_index(const ProtobufCMessageDescriptor *desc);
extern const ProtobufCMessageDescriptor *fuzz_type(int index);

/*
 * Decode; NULL when the codec rejects the input with one of the SQLSTATEs
 * it documents for malformed input (any other error is a finding).
 */
extern ProtobufCMessage *fuzz_decode_pb(const ProtobufCMessageDescriptor *desc,
										const uint8 *data, size_t len);
extern ProtobufCMessage *fuzz_decode_jsonb(const ProtobufCMessageDescriptor *desc,
										   Jsonb *json);
extern Dex__V1__WorkflowTaskCompletion *fuzz_commands_from_jsonb(Jsonb *json);

/* Every check on a decoded message: invariants and round trips. */
extern void fuzz_check_decoded(ProtobufCMessage *msg, bool from_json);

/* The targets, one input each */
extern void fuzz_pb_input(const uint8 *data, size_t size);
extern void fuzz_json_input(const uint8 *data, size_t size);
extern void fuzz_commands_input(const uint8 *data, size_t size);

#endif							/* DEX_FUZZ_CODEC_H */
