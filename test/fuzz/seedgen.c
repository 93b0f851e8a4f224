/*-------------------------------------------------------------------------
 *
 * seedgen.c
 *	  Makes the seed corpus and the JSON dictionary of the fuzz targets from
 *	  test/fuzz/seeds.txt (run by test/fuzz/gen-corpus.sh).
 *
 *	  seedgen SEEDS_FILE CORPUS_DIR DICT_FILE
 *
 * Each line of SEEDS_FILE is "<message type> <JSON>" (blank lines and lines
 * starting with # are skipped); the type "commands" is a bare JSON array of
 * commands, as dex.complete_task takes it.  Every seed must decode and pass
 * every check of the targets, or seedgen fails.  For seed number N it
 * writes, in CORPUS_DIR:
 *
 *	json/seed-N-<Type>		the selector byte of the type, then the JSON
 *	pb/seed-N-<Type>		the selector byte, then the protobuf encoding
 *	commands/seed-N-json	the JSON, and commands/seed-N-pb, its encoding
 *							(WorkflowTaskCompletion and "commands" seeds)
 *
 * DICT_FILE gets the JSON names and .proto names of every field, every enum
 * value name, and the tokens and special strings of the JSON mapping.
 *
 * IDENTIFICATION
 *	  test/fuzz/seedgen.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdio.h>
#include <stdlib.h>

#include "lib/stringinfo.h"

#include "fuzz_codec.h"
#include "fuzz_pg.h"

static void
die(const char *fmt,...) pg_attribute_printf(1, 2);

static void
die(const char *fmt,...)
{
	va_list		args;

	fprintf(stderr, "seedgen: ");
	va_start(args, fmt);
	vfprintf(stderr, fmt, args);
	va_end(args);
	fprintf(stderr, "\n");
	exit(1);
}

static void
write_file(const char *dir, const char *name, uint8 selector, bool with_selector,
		   const void *data, size_t len)
{
	char	   *path = psprintf("%s/%s", dir, name);
	FILE	   *f = fopen(path, "wb");

	if (f == NULL)
		die("cannot write %s", path);
	if ((with_selector && fwrite(&selector, 1, 1, f) != 1) ||
		(len > 0 && fwrite(data, 1, len, f) != len) || fclose(f) != 0)
		die("cannot write %s", path);
}

static const char *
short_name(const ProtobufCMessageDescriptor *desc)
{
	const char *dot = strrchr(desc->name, '.');

	/* map entries are nested types: keep "Payload.MetadataEntry" readable */
	if (desc->name[0] == 'd' && strncmp(desc->name, "dex.v1.", 7) == 0)
		return desc->name + 7;
	return dot ? dot + 1 : desc->name;
}

static void
one_seed(int n, const char *type, const char *json, const char *dir)
{
	bool		bare = strcmp(type, "commands") == 0;
	const ProtobufCMessageDescriptor *desc;
	Jsonb	   *jb;
	ProtobufCMessage *msg;
	uint8	   *packed;
	size_t		len;
	int			index;
	char	   *name;

	desc = bare ? &dex__v1__workflow_task_completion__descriptor :
		dex_pb_descriptor_by_name(type);
	if (desc == NULL || (index = fuzz_type_index(desc)) < 0)
		die("seed %d: unknown message type %s", n, type);

	jb = fuzz_jsonb_from_text(json, strlen(json));
	if (jb == NULL)
		die("seed %d: not valid JSON: %s", n, json);
	msg = bare ? (ProtobufCMessage *) fuzz_commands_from_jsonb(jb) :
		fuzz_decode_jsonb(desc, jb);
	if (msg == NULL)
		die("seed %d: does not decode as %s (DEX_FUZZ_VERBOSE=1 says why): %s",
			n, type, json);
	fuzz_check_decoded(msg, true);
	packed = dex_pb_pack(msg, &len);

	name = psprintf("seed-%03d-%s", n, bare ? "commands" : short_name(desc));
	if (!bare)
	{
		write_file(psprintf("%s/json", dir), name, fuzz_byte_of_type(index), true,
				   json, strlen(json));
		write_file(psprintf("%s/pb", dir), name, fuzz_byte_of_type(index), true,
				   packed, len);
	}
	if (bare || desc == &dex__v1__workflow_task_completion__descriptor)
	{
		write_file(psprintf("%s/commands", dir), psprintf("seed-%03d-json", n), 0,
				   false, json, strlen(json));
		write_file(psprintf("%s/commands", dir), psprintf("seed-%03d-pb", n), 0,
				   false, packed, len);
	}
}

static char *
json_name(const char *name)
{
	StringInfoData out;
	bool		upper = false;

	initStringInfo(&out);
	for (; *name; name++)
	{
		if (*name == '_')
			upper = true;
		else
		{
			appendStringInfoChar(&out, upper ? pg_ascii_toupper((unsigned char) *name) : *name);
			upper = false;
		}
	}
	return out.data;
}

static void
write_dict(const char *path)
{
	FILE	   *f = fopen(path, "w");
	int			i;
	unsigned	j;
	unsigned	k;
	static const char *const tokens[] = {
		"{", "}", "[", "]", ":", ",", "null", "true", "false", "\\\"", "\\\\u",
		"\\\\u0000", "\\\\ud800", "-0", "1e400", "1.5", "-9223372036854775808",
		"18446744073709551616", "4294967295", "\\\"NaN\\\"", "\\\"Infinity\\\"",
		"\\\"-Infinity\\\"", "\\\"0001-01-01T00:00:00Z\\\"",
		"\\\"9999-12-31T23:59:59.999999999Z\\\"", "\\\"1970-01-01T00:00:00+01:00\\\"",
		"\\\"-315576000000.999999999s\\\"", "\\\"0.000000001s\\\"", "\\\"AAEC/w==\\\"",
		"T00:00:00", ".999999999", "s\\\"",
	};

	if (f == NULL)
		die("cannot write %s", path);
	fprintf(f, "# JSON dictionary of the dex fuzz targets, made by seedgen from the descriptors\n");
	for (i = 0; i < (int) lengthof(tokens); i++)
		fprintf(f, "\"%s\"\n", tokens[i]);
	for (i = 0; i < fuzz_n_types; i++)
	{
		const ProtobufCMessageDescriptor *desc = fuzz_type(i);

		for (j = 0; j < desc->n_fields; j++)
		{
			const ProtobufCFieldDescriptor *field = &desc->fields[j];
			char	   *jname = json_name(field->name);

			fprintf(f, "\"\\\"%s\\\"\"\n", jname);
			if (strcmp(jname, field->name) != 0)
				fprintf(f, "\"\\\"%s\\\"\"\n", field->name);
			if (field->type == PROTOBUF_C_TYPE_ENUM)
			{
				const ProtobufCEnumDescriptor *ed = field->descriptor;

				for (k = 0; k < ed->n_values; k++)
					fprintf(f, "\"\\\"%s\\\"\"\n", ed->values[k].name);
			}
		}
	}
	if (fclose(f) != 0)
		die("cannot write %s", path);
}

int
main(int argc, char **argv)
{
	FILE	   *f;
	char		line[65536];
	int			n = 0;

	if (argc != 4)
		die("usage: seedgen SEEDS_FILE CORPUS_DIR DICT_FILE");
	fuzz_init();
	f = fopen(argv[1], "r");
	if (f == NULL)
		die("cannot read %s", argv[1]);

	while (fgets(line, sizeof(line), f) != NULL)
	{
		char	   *json;
		size_t		len = strlen(line);

		if (len > 0 && line[len - 1] == '\n')
			line[--len] = '\0';
		if (len == sizeof(line) - 1)
			die("line too long in %s", argv[1]);
		if (len == 0 || line[0] == '#')
			continue;
		json = strchr(line, ' ');
		if (json == NULL)
			die("line without JSON in %s: %s", argv[1], line);
		*json++ = '\0';
		n++;
		fuzz_begin_input();
		one_seed(n, line, json, argv[2]);
		fuzz_end_input();
	}
	fclose(f);
	fuzz_begin_input();
	write_dict(argv[3]);
	fuzz_end_input();
	printf("seedgen: %d seeds\n", n);
	return 0;
}
