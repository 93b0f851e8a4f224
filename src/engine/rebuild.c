/*-------------------------------------------------------------------------
 *
 * rebuild.c
 *	  Rebuilding the task tables after a crash.
 *
 * The workflow and activity task tables are UNLOGGED: they are derived
 * data, and keeping them out of the WAL is most of what makes a workflow
 * cheap to run.  Crash recovery empties them; the scheduler then rebuilds
 * them from the logged tables before anything else, in one transaction:
 *	  - a workflow task for every run that is new (and not waiting for its
 *		concurrency key) or has visible unseen events;
 *	  - an activity task for every activity a running, blocked or suspended
 *		run has created (held back for a suspended run, as dex.suspend_run
 *		holds it)
 *		(ActivityTaskCreated in its history) whose outcome (completed or
 *		failed) is neither in the history nor in the inbox.  Its attempt and
 *		backoff come from dex.activity_retry, the logged record of retries;
 *		a lease the crash interrupted is void, so the attempt runs again
 *		(activities run at least once).  The row is made as the completion
 *		that created the activity made it (activity_rows.c).
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
 * commits (the locking protocol in src/README.md).  The rebuild runs in the
 * scheduler's transaction and SPI connection, and reads the runs it rebuilds
 * without locking their rows: the API's writers wait for the rebuild lock.
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

/*
 * [0]: a 1.1 schema, concurrency keys global; [1]: keys per queue (keys.c);
 * [2]: 1.6, tasks with their runs' workflow and version
 */
#define REBUILD_WORKFLOW_TASKS(key_match, cols, run_cols) \
	"INSERT INTO dex.workflow_task (queue_id, run_id, priority" cols ") " \
	"SELECT r.queue_id, r.id, r.priority" run_cols " FROM dex.workflow_run r " \
	"WHERE (r.status = 'CREATED' AND NOT EXISTS (" \
	"         SELECT 1 FROM dex.concurrency_wait w WHERE " key_match " AND w.run_id = r.id)) " \
	"   OR (r.status = 'RUNNING' AND EXISTS (" \
	"         SELECT 1 FROM dex.workflow_inbox i WHERE i.run_id = r.id AND i.visible_from <= now())) " \
	"ON CONFLICT DO NOTHING"
static DexPlan rebuild_workflow_tasks_plans[3] = {
	{REBUILD_WORKFLOW_TASKS("w.key = r.concurrency_key", "", ""), 0, {0}},
	{REBUILD_WORKFLOW_TASKS("w.queue_id = r.queue_id AND w.key = r.concurrency_key", "", ""), 0, {0}},
	{REBUILD_WORKFLOW_TASKS("w.queue_id = r.queue_id AND w.key = r.concurrency_key",
							DEX_TASK_RUN_COLS, ", r.workflow_name, r.workflow_version"), 0, {0}}
};

/*
 * The runs whose activities are rebuilt: running ones, blocked ones (their
 * activities run on while the run is parked) and suspended ones (held).
 */
static DexPlan running_runs_plan = {
	"SELECT id FROM dex.workflow_run WHERE status IN ('RUNNING', 'BLOCKED', 'SUSPENDED') AND id > $1 "
	"ORDER BY id LIMIT $2",
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

/* the columns of DexActivityRows, then those of RebuiltTasks */
static DexPlan insert_rebuilt_activities_plan = {
	"INSERT INTO dex.activity_task (queue_id, run_id, event_id, name, priority, status, attempt, "
	"                               visible_from, argument, retry_policy, last_failure, "
	"                               heartbeat_details, start_to_close_ms, heartbeat_timeout_ms, "
	"                               schedule_deadline, created_at) "
	"SELECT queue_id, run_id, event_id, name, priority, "
	"       CASE WHEN h.held OR visible_from > now() THEN 'CREATED' ELSE 'QUEUED' END, "
	"       attempt, CASE WHEN h.held THEN 'infinity' ELSE visible_from END, "
	"       argument, retry_policy, last_failure, heartbeat_details, "
	"       start_to_close_ms, heartbeat_timeout_ms, schedule_deadline, now() "
	"FROM unnest($1::integer[], $2::uuid[], $3::integer[], $4::text[], $5::smallint[], $6::bytea[], "
	"            $7::bytea[], $8::bigint[], $9::bigint[], $10::timestamptz[], "
	"            $11::integer[], $12::timestamptz[], $13::bytea[], $14::bytea[]) "
	"     AS a(queue_id, run_id, event_id, name, priority, argument, retry_policy, start_to_close_ms, "
	"          heartbeat_timeout_ms, schedule_deadline, "
	"          attempt, visible_from, last_failure, heartbeat_details), "
	"     LATERAL (SELECT r.status = 'SUSPENDED' AS held FROM dex.workflow_run r WHERE r.id = a.run_id) h "
	"ON CONFLICT DO NOTHING",
	14, {INT4ARRAYOID, UUIDARRAYOID, INT4ARRAYOID, TEXTARRAYOID, INT2ARRAYOID, BYTEAARRAYOID,
		 BYTEAARRAYOID, INT8ARRAYOID, INT8ARRAYOID, TIMESTAMPTZARRAYOID,
		 INT4ARRAYOID, TIMESTAMPTZARRAYOID, BYTEAARRAYOID, BYTEAARRAYOID}
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

/* The retry records of a batch of runs */
typedef struct Retries
{
	RetryState *rows;
	int			n;
} Retries;

/* An activity of a run, while its history and inbox are read */
typedef struct PendingActivity
{
	struct PendingActivity *next;
	Dex__V1__ActivityTaskCreated *created;
	int32		event_id;
	TimestampTz created_at;
	bool		done;
} PendingActivity;

/* The activities of a run, a hash table entry keyed by run id */
typedef struct RunActivities
{
	pg_uuid_t	id;
	PendingActivity *list;
} RunActivities;

/* The rebuilt activity tasks: the rows of new tasks, and their retry state */
typedef struct RebuiltTasks
{
	DexActivityRows tasks;
	ArrayBuildState *attempt;
	ArrayBuildState *visible_from;
	ArrayBuildState *last_failure;
	ArrayBuildState *heartbeat_details;
} RebuiltTasks;

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

/*
 * The ids of up to REBUILD_BATCH running runs after "after", as a uuid[]
 * datum; the last one in *last.  Returns how many.
 */
static int
next_running_runs(pg_uuid_t *after, pg_uuid_t *last, Datum *id_array)
{
	Datum		values[2];
	int			n_runs;
	pg_uuid_t **ids;

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
	*id_array = dex_uuid_array(ids, n_runs);
	return n_runs;
}

/*
 * The activities each run created, those settled marked done: from the
 * run's history, then from the outcomes in its inbox the workflow has not
 * seen yet.  A hash table of RunActivities, an entry for every run.
 */
static HTAB *
pending_activities(HTAB *runs, Datum id_array, int n_runs)
{
	HASHCTL		ctl;
	HTAB	   *pending;
	HASH_SEQ_STATUS seq;
	DexRun	   *run;
	Datum		values[1] = {id_array};

	ctl.keysize = sizeof(pg_uuid_t);
	ctl.entrysize = sizeof(RunActivities);
	ctl.hcxt = CurrentMemoryContext;
	pending = hash_create("dex rebuild", n_runs, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	/* what each run's history created and settled */
	hash_seq_init(&seq, runs);
	while ((run = hash_seq_search(&seq)) != NULL)
	{
		RunActivities *ra = hash_search(pending, &run->id, HASH_ENTER, NULL);
		Dex__V1__EventBatch *batch;

		ra->list = NULL;
		if (run->history == NULL)
			continue;
		batch = (Dex__V1__EventBatch *)
			dex_pb_unpack(&dex__v1__event_batch__descriptor,
						  (uint8 *) VARDATA(run->history),
						  VARSIZE(run->history) - VARHDRSZ, "history");
		for (size_t i = 0; i < batch->n_events; i++)
			note_event(&ra->list, batch->events[i]);
	}

	/* outcomes the workflow has not seen yet */
	dex_spi_exec(&all_inbox_plan, values, NULL, 0);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		RunActivities *ra = hash_search(pending, DatumGetUUIDP(dex_spi_getdatum(i, 1, &isnull)),
										HASH_FIND, NULL);
		bytea	   *event = DatumGetByteaPP(dex_spi_getdatum(i, 2, &isnull));

		if (ra)
			note_event(&ra->list, dex_inbox_event_unpack(event));
	}
	return pending;
}

/* The retry records of the runs */
static Retries
load_retries(Datum id_array)
{
	Datum		values[1] = {id_array};
	Retries		retries;

	dex_spi_exec(&retries_plan, values, NULL, 0);
	retries.n = (int) SPI_processed;
	retries.rows = palloc(sizeof(RetryState) * Max(retries.n, 1));
	for (int i = 0; i < retries.n; i++)
	{
		bool		isnull;
		RetryState *r = &retries.rows[i];

		memcpy(&r->run_id, DatumGetUUIDP(dex_spi_getdatum(i, 1, &isnull)), UUID_LEN);
		r->event_id = (int32) dex_spi_getint64(i, 2);
		r->attempt = (int32) dex_spi_getint64(i, 3);
		r->visible_from = (TimestampTz) dex_spi_getint64(i, 4);
		r->last_failure = dex_spi_getbytea_copy(i, 5);
		r->heartbeat_details = dex_spi_getbytea_copy(i, 6);
	}
	return retries;
}

static void
rebuilt_tasks_init(RebuiltTasks *rows)
{
	dex_activity_rows_init(&rows->tasks);
	rows->attempt = initArrayResult(INT4OID, CurrentMemoryContext, false);
	rows->visible_from = initArrayResult(TIMESTAMPTZOID, CurrentMemoryContext, false);
	rows->last_failure = initArrayResult(BYTEAOID, CurrentMemoryContext, false);
	rows->heartbeat_details = initArrayResult(BYTEAOID, CurrentMemoryContext, false);
}

/*
 * The task of a pending activity of a run: a first attempt due now, or the
 * attempt and backoff of its retry record.  An activity of a queue that no
 * longer exists is left out, with a warning.
 */
static void
rebuild_task(RebuiltTasks *rows, DexRun *run, PendingActivity *p, const Retries *retries)
{
	Dex__V1__ActivityTaskCreated *c = p->created;
	DexQueue	queue;
	int32		n_attempt = 1;
	TimestampTz due = GetCurrentTransactionStartTimestamp();
	bytea	   *failure = NULL;
	bytea	   *details = NULL;

	if (!dex_lookup_queue(c->queue, &queue))
	{
		ereport(WARNING,
				(errmsg("activity %d of run %s cannot be rebuilt: queue \"%s\" does not exist",
						p->event_id, dex_uuid_to_cstring(&run->id), c->queue)));
		return;
	}
	for (int i = 0; i < retries->n; i++)
	{
		const RetryState *r = &retries->rows[i];

		if (r->event_id != p->event_id || memcmp(&r->run_id, &run->id, UUID_LEN) != 0)
			continue;
		n_attempt = r->attempt;
		due = r->visible_from;
		failure = r->last_failure;
		details = r->heartbeat_details;
	}
	dex_activity_rows_add(&rows->tasks, queue.id, &run->id, p->event_id, c,
						  dex_effective_retry_policy(c->retry_policy), p->created_at);
	dex_array_add(rows->attempt, Int32GetDatum(n_attempt), false);
	dex_array_add(rows->visible_from, TimestampTzGetDatum(due), false);
	dex_array_add(rows->last_failure, PointerGetDatum(failure), failure == NULL);
	dex_array_add(rows->heartbeat_details, PointerGetDatum(details), details == NULL);
}

static void
insert_rebuilt_tasks(RebuiltTasks *rows)
{
	Datum		values[DEX_ACTIVITY_ROWS_COLUMNS + 4];

	if (rows->tasks.n == 0)
		return;
	dex_activity_rows_values(&rows->tasks, values);
	values[DEX_ACTIVITY_ROWS_COLUMNS] = dex_array_result(rows->attempt);
	values[DEX_ACTIVITY_ROWS_COLUMNS + 1] = dex_array_result(rows->visible_from);
	values[DEX_ACTIVITY_ROWS_COLUMNS + 2] = dex_array_result(rows->last_failure);
	values[DEX_ACTIVITY_ROWS_COLUMNS + 3] = dex_array_result(rows->heartbeat_details);
	dex_spi_exec(&insert_rebuilt_activities_plan, values, NULL, 0);
}

/*
 * Rebuild the activity tasks of up to REBUILD_BATCH running runs after
 * "after": the runs and their histories, the activities still pending, their
 * retry state, one insert.  Returns how many runs it read; the last in *last.
 */
static int
rebuild_activities(pg_uuid_t *after, pg_uuid_t *last)
{
	Datum		id_array;
	int			n_runs;
	HTAB	   *runs;
	HTAB	   *pending;
	Retries		retries;
	RebuiltTasks rows;
	HASH_SEQ_STATUS seq;
	DexRun	   *run;

	n_runs = next_running_runs(after, last, &id_array);
	if (n_runs == 0)
		return 0;
	runs = dex_load_runs(id_array, false);
	dex_load_histories(runs, id_array, (Datum) 0);
	pending = pending_activities(runs, id_array, n_runs);
	retries = load_retries(id_array);

	rebuilt_tasks_init(&rows);
	hash_seq_init(&seq, runs);
	while ((run = hash_seq_search(&seq)) != NULL)
	{
		RunActivities *ra = hash_search(pending, &run->id, HASH_FIND, NULL);

		for (PendingActivity *p = ra ? ra->list : NULL; p; p = p->next)
			if (!p->done)
				rebuild_task(&rows, run, p, &retries);
	}
	insert_rebuilt_tasks(&rows);
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
	dex_spi_exec(&rebuild_workflow_tasks_plans[dex_schema_1_6() ? 2 : dex_keys_per_queue()],
				 NULL, NULL, 0);
	memset(&after, 0, sizeof(after));
	while (rebuild_activities(&after, &last) == REBUILD_BATCH)
		after = last;
	dex_spi_exec(&mark_valid_plan, NULL, NULL, 0);
	dex_wake_interpreter_at_commit();	/* runs of definitions have tasks again (1.7) */
	return true;
}
