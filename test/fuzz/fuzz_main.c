/*-------------------------------------------------------------------------
 *
 * fuzz_main.c
 *	  libFuzzer entry points of one fuzz target: the Makefile compiles this
 *	  file once per target, with DEX_FUZZ_TARGET naming the target function
 *	  of fuzz_codec.c (fuzz_pb_input, fuzz_json_input, fuzz_commands_input).
 *
 * Each input gets a fresh memory arena, freed when it is done.
 *
 * IDENTIFICATION
 *	  test/fuzz/fuzz_main.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fuzz_codec.h"
#include "fuzz_pg.h"

#ifndef DEX_FUZZ_TARGET
#error "define DEX_FUZZ_TARGET as the target function"
#endif

extern int	LLVMFuzzerInitialize(int *argc, char ***argv);
extern int	LLVMFuzzerTestOneInput(const uint8 *data, size_t size);

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_init();
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8 *data, size_t size)
{
	fuzz_begin_input();
	DEX_FUZZ_TARGET(data, size);
	fuzz_end_input();
	return 0;
}
