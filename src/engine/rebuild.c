/*-------------------------------------------------------------------------
 *
 * rebuild.c
 *	  Rebuilding the task tables after a crash.
 *
 * Workflow and activity task partitions are UNLOGGED: they are derived
 * data, and keeping them out of the WAL is most of what makes a workflow
 * cheap to run.  Crash recovery empties them; the scheduler then rebuilds
 * them from the logged tables before anything else, in one transaction:
 *	  - a workflow task for every run that is new (and not waiting for its
 *		concurrency key) or has visible unseen events;
 *	  - an activity task for every activity a running run has created
 *		(ActivityTaskCreated in its history) whose outcome (completed or
 *		failed) is neither in the history nor in the inbox.  Its attempt and
 *		backoff come from dex.activity_retry, the logged record of retries;
 *		a lease the crash interrupted is void, so the attempt runs again
 *		(activities run at least once).
 * A row in the UNLOGGED dex.lease table marks the tasks valid: a crash
 * truncates it too, and so does a physical backup started as a new cluster;
 * after a logical restore the scheduler deletes it once the restoring
 * session has ended (scheduler.c), and the same rebuild makes the tasks of
 * the restored runs.  Every insert here is idempotent (ON CONFLICT DO
 * NOTHING), so a rebuild interrupted by another crash simply runs again.
 *
 * Clients may already be calling the API when the scheduler starts (right
 * after crash recovery, or when the extension was just created), so the
 * rebuild must not interleave with them: a rebuild that read the inbox
 * before a completion committed would queue the completed activity again,
 * and its bulk inserts, meeting theirs in another order, deadlock.  Every
 * API function that writes task tables first calls dex_wait_for_rebuild(),
 * a SHARE lock on dex's rebuild lock (locks.c: no SQL statement can take
 * it, so no role can stall a rebuild); a rebuild holds it EXCLUSIVE, so it
 * waits for the API transactions in flight and holds back new ones until it
 * commits.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "engine/engine.h"

#define REBUILD_BATCH 1000

static DexPlan tasks_valid_plan = {
	"SELECT 1 FROM dex.lease WHERE name = 'tasks_valid'", 0, {0}
};

static DexPlan mark_valid_plan = {
	"INSERT INTO dex.lease (name, holder, acquired_at, expires_at) "
	"VALUES ('tasks_valid', 'dex scheduler', now(), 'infinity') ON CONFLICT DO NOTHING",
	0, {0}
};

/* [0]: a 1.1 schema, concurrency keys global; [1]: keys per queue (history.c) */
#define REBUILD_WORKFLOW_TASKS(key_match) \
	"INSERT INTO dex.workflow_task (queue_id, run_id, priority) " \
	"SELECT r.queue_id, r.id, r.priority FROM dex.workflow_run r " \
	"WHERE (r.status = 'CREATED' AND NOT EXISTS (" \
	"         SELECT 1 FROM dex.concurrency_wait w WHERE " key_match " AND w.run_id = r.id)) " \
	"   OR (r.status = 'RUNNING' AND EXISTS (" \
	"         SELECT 1 FROM dex.workflow_inbox i WHERE i.run_id = r.id AND i.visible_from <= now())) " \
	"ON CONFLICT DO NOTHING"
static DexPlan rebuild_workflow_tasks_plans[2] = {
	{REBUILD_WORKFLOW_TASKS("w.key = r.concurrency_key"), 0, {0}},
	{REBUILD_WORKFLOW_TASKS("w.queue_id = r.queue_id AND w.key = r.concurrency_key"), 0, {0}}
};

static DexPlan running_runs_plan = {
	"SELECT id FROM dex.workflow_run WHERE status = 'RUNNING' AND id > $1 ORDER BY id LIMIT $2",
	2, {UUIDOID, INT4OID}
};

static DexPlan all_inbox_plan = {
	"SELECT run_id, event FROM dex.workflow_inbox WHERE run_id = ANY ($1)",
	1, {UUIDARRAYOID}
};

static DexPlan retries_plan = {
	"SELECT run_id, event_id, attempt, visible_from, last_failure, heartbeat_details FROM dex.activity_retry "
	"WHERE run_id = ANY ($1)",
	1, {UUIDARRAYOID}
};

static DexPlan insert_rebuilt_activities_plan = {
	"INSERT INTO dex.activity_task (queue_id, run_id, event_id, name, priority, status, attempt, "
	"                               visible_from, argument, retry_policy, last_failure, "
	"                               heartbeat_details, start_to_close_ms, heartbeat_timeout_ms, "
	"                               schedule_deadline, created_at) "
	"SELECT queue_id, run_id, event_id, name, priority, "
	"       CASE WHEN visible_from > now() THEN 'CREATED' ELSE 'QUEUED' END, "
	"       attempt, visible_from, argument, retry_policy, last_failure, heartbeat_details, "
	"       start_to_close_ms, heartbeat_timeout_ms, schedule_deadline, now() "
	"FROM unnest($1::integer[], $2::uuid[], $3::integer[], $4::text[], $5::smallint[], $6::bytea[], "
	"            $7::bytea[], $8::integer[], $9::timestamptz[], $10::bytea[], $11::bytea[], "
	"            $12::bigint[], $13::bigint[], $14::timestamptz[]) "
	"     AS a(queue_id, run_id, event_id, name, priority, argument, retry_policy, attempt, "
	"          visible_from, last_failure, heartbeat_details, start_to_close_ms, "
	"          heartbeat_timeout_ms, schedule_deadline) "
	"ON CONFLICT DO NOTHING",
	14, {INT4ARRAYOID, UUIDARRAYOID, INT4ARRAYOID, TEXTARRAYOID, INT2ARRAYOID, BYTEAARRAYOID,
		 BYTEAARRAYOID, INT4ARRAYOID, TIMESTAMPTZARRAYOID, BYTEAARRAYOID, BYTEAARRAYOID,
		 INT8ARRAYOID, INT8ARRAYOID, TIMESTAMPTZARRAYOID}
};

/* A row of dex.activity_retry */
typedef struct RetryState
{
	pg_uuid_t	run_id;
	int32		event_id;
	int32		attempt;
	TimestampTz visible_from;
	bytea	   *last_failure;
	bytea	   *heartbeat_details;
} RetryState;

/* An activity of a run, while its history and inbox are read */
typedef struct PendingActivity
{
	struct PendingActivity *next;
	Dex__V1__ActivityTaskCreated *created;
	int32		event_id;
	TimestampTz created_at;
	bool		done;
} PendingActivity;

static void
note_event(PendingActivity **list, Dex__V1__WorkflowEvent *ev)
{
	int32		done_id = 0;

	switch (ev->subject_case)
	{
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_CREATED:
			{
				PendingActivity *p = palloc0(sizeof(PendingActivity));

				p->created = ev->activity_task_created;
				p->event_id = ev->id;
				p->created_at = ev->timestamp ? dex_timestamp_from_pb(ev->timestamp) : 0;
				p->next = *list;
				*list = p;
				return;
			}
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_COMPLETED:
			done_id = ev->activity_task_completed->activity_task_created_event_id;
			break;
		case DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_FAILED:
			done_id = ev->activity_task_failed->activity_task_created_event_id;
			break;
		default:
			return;
	}
	for (PendingActivity *p = *list; p; p = p->next)
		if (p->event_id == done_id)
			p->done = true;
}

/* Rebuild the activity tasks of up to REBUILD_BATCH running runs after "after" */
static int
rebuild_activities(pg_uuid_t *after, pg_uuid_t *last)
{
	Datum		values[14];
	int			n_runs;
	pg_uuid_t **ids;
	Datum		id_array;
	HTAB	   *runs;
	HASH_SEQ_STATUS seq;
	DexRun	   *run;
	ArrayBuildState *queue_id = initArrayResult(INT4OID, CurrentMemoryContext, false);
	ArrayBuildState *run_id = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	ArrayBuildState *event_id = initArrayResult(INT4OID, CurrentMemoryContext, false);
	ArrayBuildState *name = initArrayResult(TEXTOID, CurrentMemoryContext, false);
	ArrayBuildState *priority = initArrayResult(INT2OID, CurrentMemoryContext, false);
	ArrayBuildState *argument = initArrayResult(BYTEAOID, CurrentMemoryContext, false);
	ArrayBuildState *policy = initArrayResult(BYTEAOID, CurrentMemoryContext, false);
	ArrayBuildState *attempt = initArrayResult(INT4OID, CurrentMemoryContext, false);
	ArrayBuildState *visible_from = initArrayResult(TIMESTAMPTZOID, CurrentMemoryContext, false);
	ArrayBuildState *last_failure = initArrayResult(BYTEAOID, CurrentMemoryContext, false);
	ArrayBuildState *hb_details = initArrayResult(BYTEAOID, CurrentMemoryContext, false);
	ArrayBuildState *start_to_close = initArrayResult(INT8OID, CurrentMemoryContext, false);
	ArrayBuildState *hb_timeout = initArrayResult(INT8OID, CurrentMemoryContext, false);
	ArrayBuildState *deadline = initArrayResult(TIMESTAMPTZOID, CurrentMemoryContext, false);
	int			n_tasks = 0;
	typedef struct RunActivities
	{
		pg_uuid_t	id;
		PendingActivity *list;
	} RunActivities;
	HASHCTL		ctl;
	HTAB	   *pending;
	RetryState *retries;
	int			n_retries;

	values[0] = UUIDPGetDatum(after);
	values[1] = Int32GetDatum(REBUILD_BATCH);
	dex_spi_exec(&running_runs_plan, values, NULL, 0);
	n_runs = (int) SPI_processed;
	if (n_runs == 0)
		return 0;
	ids = palloc(sizeof(pg_uuid_t *) * n_runs);
	for (int i = 0; i < n_runs; i++)
	{
		bool		isnull;

		ids[i] = palloc(sizeof(pg_uuid_t));
		memcpy(ids[i], DatumGetUUIDP(dex_spi_getdatum(i, 1, &isnull)), sizeof(pg_uuid_t));
	}
	memcpy(last, ids[n_runs - 1], sizeof(pg_uuid_t));
	id_array = dex_uuid_array(ids, n_runs);

	runs = dex_load_runs(id_array, false);
	dex_load_histories(runs, id_array);

	ctl.keysize = sizeof(pg_uuid_t);
	ctl.entrysize = sizeof(RunActivities);
	ctl.hcxt = CurrentMemoryContext;
	pending = hash_create("dex rebuild", n_runs, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	/* what each run's history created and settled */
	hash_seq_init(&seq, runs);
	while ((run = hash_seq_search(&seq)) != NULL)
	{
		RunActivities *ra = hash_search(pending, &run->id, HASH_ENTER, NULL);

		ra->list = NULL;
		if (run->history == NULL)
			continue;
		{
			Dex__V1__EventBatch *batch = (Dex__V1__EventBatch *)
				dex_pb_unpack(&dex__v1__event_batch__descriptor,
							  (uint8 *) VARDATA(run->history),
							  VARSIZE(run->history) - VARHDRSZ, "history");

			for (size_t i = 0; i < batch->n_events; i++)
				note_event(&ra->list, batch->events[i]);
		}
	}

	/* outcomes the workflow has not seen yet */
	values[0] = id_array;
	dex_spi_exec(&all_inbox_plan, values, NULL, 0);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		RunActivities *ra = hash_search(pending, DatumGetUUIDP(dex_spi_getdatum(i, 1, &isnull)),
										HASH_FIND, NULL);
		bytea	   *event = DatumGetByteaPP(dex_spi_getdatum(i, 2, &isnull));

		if (ra)
			note_event(&ra->list, (Dex__V1__WorkflowEvent *)
					   dex_pb_unpack(&dex__v1__workflow_event__descriptor,
									 (uint8 *) VARDATA_ANY(event), VARSIZE_ANY_EXHDR(event),
									 "inbox event"));
	}

	/* the activities still pending, with their retry state */
	dex_spi_exec(&retries_plan, values, NULL, 0);
	n_retries = (int) SPI_processed;
	retries = palloc(sizeof(RetryState) * Max(n_retries, 1));
	for (int i = 0; i < n_retries; i++)
	{
		bool		isnull;

		memcpy(&retries[i].run_id, DatumGetUUIDP(dex_spi_getdatum(i, 1, &isnull)), UUID_LEN);
		retries[i].event_id = (int32) dex_spi_getint64(i, 2);
		retries[i].attempt = (int32) dex_spi_getint64(i, 3);
		retries[i].visible_from = (TimestampTz) dex_spi_getint64(i, 4);
		retries[i].last_failure = dex_spi_getbytea_copy(i, 5);
		retries[i].heartbeat_details = dex_spi_getbytea_copy(i, 6);
	}
	hash_seq_init(&seq, runs);
	while ((run = hash_seq_search(&seq)) != NULL)
	{
		RunActivities *ra = hash_search(pending, &run->id, HASH_FIND, NULL);

		for (PendingActivity *p = ra ? ra->list : NULL; p; p = p->next)
		{
			Dex__V1__ActivityTaskCreated *c = p->created;
			DexQueue	queue;
			int32		n_attempt = 1;
			TimestampTz due = GetCurrentTransactionStartTimestamp();
			bytea	   *failure = NULL;
			bytea	   *details = NULL;

			if (p->done)
				continue;
			if (!dex_lookup_queue(c->queue, &queue))
			{
				ereport(WARNING,
						(errmsg("activity %d of run %s cannot be rebuilt: queue \"%s\" does not exist",
								p->event_id, dex_uuid_to_cstring(&run->id), c->queue)));
				continue;
			}
			for (int i = 0; i < n_retries; i++)
			{
				if (retries[i].event_id != p->event_id ||
					memcmp(&retries[i].run_id, &run->id, UUID_LEN) != 0)
					continue;
				n_attempt = retries[i].attempt;
				due = retries[i].visible_from;
				failure = retries[i].last_failure;
				details = retries[i].heartbeat_details;
			}
			dex_array_add(queue_id, Int32GetDatum(queue.id), false);
			dex_array_add(run_id, UUIDPGetDatum(&run->id), false);
			dex_array_add(event_id, Int32GetDatum(p->event_id), false);
			dex_array_add(name, CStringGetTextDatum(c->name), false);
			dex_array_add(priority, Int16GetDatum((int16) c->priority), false);
			dex_array_add(argument,
						  c->argument ? PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) c->argument)) : (Datum) 0,
						  c->argument == NULL);
			dex_array_add(policy,
						  PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *)
															dex_effective_retry_policy(c->retry_policy))),
						  false);
			dex_array_add(attempt, Int32GetDatum(n_attempt), false);
			dex_array_add(visible_from, TimestampTzGetDatum(due), false);
			dex_array_add(last_failure, PointerGetDatum(failure), failure == NULL);
			dex_array_add(hb_details, PointerGetDatum(details), details == NULL);
			dex_array_add(start_to_close, Int64GetDatum(dex_duration_ms(c->start_to_close_timeout)),
						  c->start_to_close_timeout == NULL);
			dex_array_add(hb_timeout, Int64GetDatum(dex_duration_ms(c->heartbeat_timeout)),
						  c->heartbeat_timeout == NULL);
			dex_array_add(deadline,
						  TimestampTzGetDatum(p->created_at + dex_duration_ms(c->schedule_to_close_timeout) * 1000),
						  c->schedule_to_close_timeout == NULL);
			n_tasks++;
		}
	}

	if (n_tasks > 0)
	{
		values[0] = dex_array_result(queue_id);
		values[1] = dex_array_result(run_id);
		values[2] = dex_array_result(event_id);
		values[3] = dex_array_result(name);
		values[4] = dex_array_result(priority);
		values[5] = dex_array_result(argument);
		values[6] = dex_array_result(policy);
		values[7] = dex_array_result(attempt);
		values[8] = dex_array_result(visible_from);
		values[9] = dex_array_result(last_failure);
		values[10] = dex_array_result(hb_details);
		values[11] = dex_array_result(start_to_close);
		values[12] = dex_array_result(hb_timeout);
		values[13] = dex_array_result(deadline);
		dex_spi_exec(&insert_rebuilt_activities_plan, values, NULL, 0);
	}
	return n_runs;
}

/*
 * If the task tables are not known to be valid (after a crash, or when the
 * extension was just created), rebuild them.  Returns whether it did.
 */
bool
dex_rebuild_tasks_if_needed(void)
{
	pg_uuid_t	after;
	pg_uuid_t	last;

	dex_spi_exec(&tasks_valid_plan, NULL, NULL, 1);
	if (SPI_processed > 0)
		return false;

	/* Only the scheduler takes this lock strongly, so the upgrade is safe. */
	dex_lock_for_rebuild();
	dex_spi_exec(&rebuild_workflow_tasks_plans[dex_keys_per_queue()], NULL, NULL, 0);
	memset(&after, 0, sizeof(after));
	while (rebuild_activities(&after, &last) == REBUILD_BATCH)
		after = last;
	dex_spi_exec(&mark_valid_plan, NULL, NULL, 0);
	return true;
}
