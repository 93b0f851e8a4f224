/*-------------------------------------------------------------------------
 *
 * instances.c
 *	  Instance ids: at most one active run per instance id and workflow queue.
 *
 * dex.run_instance holds a row per active run that has an instance id,
 * keyed by (queue id, instance id); the run's end deletes it (lifecycle.c).
 * Claiming an id is an INSERT ... ON CONFLICT DO NOTHING, so a concurrent
 * claim of the same id waits for the first to commit or abort.
 *
 * Why per queue: queue grants divide runs between tenants, and a run of a
 * queue the caller may not use must look as if it did not exist
 * (access.c).  With one namespace for all queues, a tenant that starts
 * a run with another tenant's instance id would learn that the id is taken
 * (and, through if_active => 'return' or the error's detail, the other run's
 * id and status); no answer can both keep the id unique and reveal nothing.
 * Keyed by queue, the ids a caller can collide with are those of the queues
 * it names, which it may use.
 *
 * A schema still on version 1.1 keys dex.run_instance by instance id alone:
 * until ALTER EXTENSION dex UPDATE, claims and lookups use that key and the
 * ids stay global, as they were.  No statement here takes the caller's
 * search_path: every API call pins it (api/api_call.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"

#include "engine/engine.h"

/* [0]: a 1.1 schema, ids global; [1]: ids per queue.  $1 queue id, $2 instance id, $3 run id */
static DexPlan claim_plans[2] = {
	{"INSERT INTO dex.run_instance (instance_id, run_id) VALUES ($2, $3) "
		"ON CONFLICT (instance_id) DO NOTHING",
	3, {INT4OID, TEXTOID, UUIDOID}},
	{"INSERT INTO dex.run_instance (queue_id, instance_id, run_id) VALUES ($1, $2, $3) "
		"ON CONFLICT (queue_id, instance_id) DO NOTHING",
	3, {INT4OID, TEXTOID, UUIDOID}}
};

/* $1 queue ids, $2 instance id: the active runs of the id on those queues */
static DexPlan find_plans[2] = {
	{"SELECT r.id, r.status, r.queue_id FROM dex.run_instance i JOIN dex.workflow_run r ON r.id = i.run_id "
		"WHERE i.instance_id = $2 AND r.queue_id = ANY ($1) LIMIT 2",
	2, {INT4ARRAYOID, TEXTOID}},
	{"SELECT r.id, r.status, r.queue_id FROM dex.run_instance i JOIN dex.workflow_run r ON r.id = i.run_id "
		"WHERE i.queue_id = ANY ($1) AND i.instance_id = $2 ORDER BY i.queue_id LIMIT 2",
	2, {INT4ARRAYOID, TEXTOID}}
};

/* Whether dex.run_instance is keyed by queue (schema 1.2 and later). */
static int
per_queue(void)
{
	return dex_column_exists("run_instance", "queue_id");
}

/*
 * Claim the instance id on the queue for the run; false if the id has an
 * active run there already.
 */
bool
dex_claim_instance(int32 queue_id, const char *instance_id, pg_uuid_t *run_id)
{
	Datum		values[3];

	values[0] = Int32GetDatum(queue_id);
	values[1] = CStringGetTextDatum(instance_id);
	values[2] = UUIDPGetDatum(run_id);
	dex_spi_exec(&claim_plans[per_queue()], values, NULL, 0);
	return SPI_processed > 0;
}

/*
 * The active run of the instance id among the given queues (an int4[]),
 * with its status and queue, in SPI_tuptable row 0.  Returns how many there
 * are: 0, 1, or 2 meaning more than one.
 */
int
dex_find_instance(Datum queue_ids, const char *instance_id)
{
	Datum		values[2];

	values[0] = queue_ids;
	values[1] = CStringGetTextDatum(instance_id);
	dex_spi_exec(&find_plans[per_queue()], values, NULL, 2);
	return (int) SPI_processed;
}

/* [0] 1.1, [1] per queue: $1 queue id, $2 instance ids, $3 run ids; returns the runs that claimed */
static DexPlan claim_many_plans[2] = {
	{"INSERT INTO dex.run_instance (instance_id, run_id) "
		"SELECT i, r FROM unnest($2::text[], $3::uuid[]) AS u(i, r) "
		"ON CONFLICT (instance_id) DO NOTHING RETURNING run_id",
	3, {INT4OID, TEXTARRAYOID, UUIDARRAYOID}},
	{"INSERT INTO dex.run_instance (queue_id, instance_id, run_id) "
		"SELECT $1, i, r FROM unnest($2::text[], $3::uuid[]) AS u(i, r) "
		"ON CONFLICT (queue_id, instance_id) DO NOTHING RETURNING run_id",
	3, {INT4OID, TEXTARRAYOID, UUIDARRAYOID}}
};

/* the active runs of instance ids $2 on queue $1 */
static DexPlan find_many_plans[2] = {
	{"SELECT instance_id, run_id FROM dex.run_instance WHERE instance_id = ANY ($2)",
	2, {INT4OID, TEXTARRAYOID}},
	{"SELECT instance_id, run_id FROM dex.run_instance WHERE queue_id = $1 AND instance_id = ANY ($2)",
	2, {INT4OID, TEXTARRAYOID}}
};

typedef struct InstanceEntry
{
	char		instance_id[DEX_NAME_MAX_LEN + 1];
	pg_uuid_t	run_id;
} InstanceEntry;

/*
 * Claim the instance ids of many new runs on a queue at once (dex.create_runs):
 * instance_ids[i] (unless nulls[i]) for run run_ids[i].  A run whose id has
 * an active run already, or is claimed by an earlier run of the batch, gets
 * created[i] false and run_ids[i] replaced by that run's id.
 */
void
dex_claim_instances(int32 queue_id, int n, Datum *instance_ids, bool *nulls, Datum *run_ids,
					bool *created)
{
	int			v = per_queue();
	ArrayBuildState *names = initArrayResult(TEXTOID, CurrentMemoryContext, false);
	ArrayBuildState *runs = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	HTAB	   *claimed;
	HTAB	   *active;
	Datum		values[3];
	DexRows		rows;
	int			lost = 0;

	for (int i = 0; i < n; i++)
		if (!nulls[i])
		{
			dex_array_add(names, instance_ids[i], false);
			dex_array_add(runs, run_ids[i], false);
		}
	if (names->nelems == 0)
		return;
	values[0] = Int32GetDatum(queue_id);
	values[1] = dex_array_result(names);
	values[2] = dex_array_result(runs);
	rows = dex_spi_rows(&claim_many_plans[v], values, NULL, 0);

	claimed = dex_batch_table("dex claimed instances", sizeof(pg_uuid_t), sizeof(pg_uuid_t), (long) rows.n,
						HASH_BLOBS);
	for (uint64 r = 0; r < rows.n; r++)
	{
		bool		isnull;

		hash_search(claimed, DatumGetUUIDP(dex_rows_getdatum(rows, r, 1, &isnull)), HASH_ENTER, NULL);
	}
	for (int i = 0; i < n; i++)
		if (!nulls[i] && hash_search(claimed, DatumGetUUIDP(run_ids[i]), HASH_FIND, NULL) == NULL)
			lost++;
	if (lost == 0)
		return;

	/* the runs that hold the ids the others did not get */
	rows = dex_spi_rows(&find_many_plans[v], values, NULL, 0);
	active = dex_batch_table("dex active instances", DEX_NAME_MAX_LEN + 1, sizeof(InstanceEntry), (long) rows.n,
					   HASH_STRINGS);
	for (uint64 r = 0; r < rows.n; r++)
	{
		bool		isnull;
		InstanceEntry *e = hash_search(active, dex_rows_gettext_copy(rows, r, 1), HASH_ENTER, NULL);

		memcpy(&e->run_id, DatumGetUUIDP(dex_rows_getdatum(rows, r, 2, &isnull)), sizeof(pg_uuid_t));
	}
	for (int i = 0; i < n; i++)
	{
		char	   *name;
		InstanceEntry *e;
		pg_uuid_t  *existing;

		if (nulls[i] || hash_search(claimed, DatumGetUUIDP(run_ids[i]), HASH_FIND, NULL) != NULL)
			continue;
		name = TextDatumGetCString(instance_ids[i]);
		e = hash_search(active, name, HASH_FIND, NULL);
		if (e == NULL)
		{
			/* its run ended meanwhile: one more try, alone */
			if (dex_claim_instance(queue_id, name, DatumGetUUIDP(run_ids[i])))
				continue;
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("workflow instance \"%s\" changed hands while runs were created", name),
					 errhint("Try again.")));
		}
		existing = palloc(sizeof(pg_uuid_t));
		*existing = e->run_id;
		run_ids[i] = UUIDPGetDatum(existing);
		created[i] = false;
	}
}
