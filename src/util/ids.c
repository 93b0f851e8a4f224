/*-------------------------------------------------------------------------
 *
 * ids.c
 *	  Run ids: UUIDv7, made in the backend.
 *
 * Run ids are made here rather than by the database so that a batch of runs
 * gets its ids before its one INSERT, and so that ids sort by creation time
 * (the retention sweep and list_runs' cursor rely on it).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "port.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "util/util.h"

/*
 * A new UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, 12 bits of
 * sub-millisecond time, then 62 random bits.  The 60 bits of time never
 * repeat or go back within a backend (RFC 9562, 6.2 method 3): an id made in
 * the same 1/4096 ms as the previous one, or after the clock stepped back,
 * takes the previous time plus one step, so the ids of one create_runs call
 * sort in the order of its arguments.
 */
pg_uuid_t *
dex_new_uuid(void)
{
	static uint64 last_time = 0;	/* unix_ms << 12 | sub_ms of the last id */
	pg_uuid_t  *uuid = palloc(sizeof(pg_uuid_t));
	TimestampTz now = GetCurrentTimestamp();
	int64		unix_us = now + (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;
	uint64		time = ((uint64) (unix_us / 1000) << 12) | (uint64) ((unix_us % 1000) * 4096 / 1000);
	uint64		unix_ms;
	uint32		sub_ms;

	if (time <= last_time)
		time = last_time + 1;
	last_time = time;
	unix_ms = time >> 12;
	sub_ms = (uint32) (time & 0xfff);

	if (!pg_strong_random(uuid->data + 8, 8))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate random values")));
	for (int i = 0; i < 6; i++)
		uuid->data[i] = (uint8) (unix_ms >> (40 - 8 * i));
	uuid->data[6] = 0x70 | (uint8) (sub_ms >> 8);
	uuid->data[7] = (uint8) sub_ms;
	uuid->data[8] = 0x80 | (uuid->data[8] & 0x3f);
	return uuid;
}

/*
 * The smallest UUIDv7 of the given time: 48 bits of Unix milliseconds, then
 * zeros (all zero before 1970): a bound below every id made from then on.
 */
void
dex_uuid_v7_floor(TimestampTz ts, pg_uuid_t *uuid)
{
	int64		unix_ms = (ts + (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY) / 1000;

	memset(uuid, 0, sizeof(*uuid));
	if (unix_ms < 0)
		return;
	for (int i = 0; i < 6; i++)
		uuid->data[i] = (uint8) (unix_ms >> (8 * (5 - i)));
}

char *
dex_uuid_to_cstring(const pg_uuid_t *uuid)
{
	return DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(uuid)));
}
