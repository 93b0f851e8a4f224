/*-------------------------------------------------------------------------
 *
 * runs.c
 *	  What a workflow task is made of, loaded for many runs at once: each
 *	  run's projection, its stored history and the inbox events the task
 *	  shows; and the events a task shows and records.
 *
 * dex.poll_tasks and dex.complete_task use the same loaders and the same
 * dex_build_new_events, so the events a worker is shown are exactly those
 * its completion records.  One statement loads a piece for every run of a
 * batch; the results go to a hash table keyed by run id, allocated in
 * CurrentMemoryContext.  Runs in the caller's transaction and SPI
 * connection; dex_load_runs (with lock) and dex_lock_runs take the runs'
 * row locks in run id order, as the locking protocol in src/README.md asks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"

#include "engine/engine.h"

/* [0]: a schema before 1.4, without the origin of runs; [1]: 1.4 */
#define LOAD_RUNS_SQL(since_1_4) \
	"SELECT " DEX_RUN_COLS_SQL("", since_1_4) " FROM dex.workflow_run WHERE id = ANY ($1)"

static DexPlan load_runs_plans[2] = {
	{LOAD_RUNS_SQL(DEX_RUN_COLS_BEFORE_1_4("")), 1, {UUIDARRAYOID}},
	{LOAD_RUNS_SQL(DEX_RUN_COLS_SINCE_1_4("")), 1, {UUIDARRAYOID}}
};

static DexPlan lock_load_runs_plans[2] = {
	{LOAD_RUNS_SQL(DEX_RUN_COLS_BEFORE_1_4("")) " ORDER BY id FOR NO KEY UPDATE", 1, {UUIDARRAYOID}},
	{LOAD_RUNS_SQL(DEX_RUN_COLS_SINCE_1_4("")) " ORDER BY id FOR NO KEY UPDATE", 1, {UUIDARRAYOID}}
};

/*
 * Whether the schema is 1.4 or later (run timers, task attempts, the origin
 * and parent close policy of runs): the library works with the schema of an
 * earlier version until ALTER EXTENSION dex UPDATE.
 */
int
dex_schema_1_4(void)
{
	return dex_column_exists("workflow_run", "origin") ? 1 : 0;
}

/*
 * Whether the schema is 1.6 or later: a workflow task row carries its run's
 * workflow name and version (DEX_TASK_RUN_COLS), for polls that declare what
 * they run.
 */
int
dex_schema_1_6(void)
{
	return dex_column_exists("workflow_task", "workflow_name") ? 1 : 0;
}

/* An empty table of runs, keyed by id, in the current memory context */
HTAB *
dex_new_runs(void)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(pg_uuid_t);
	ctl.entrysize = sizeof(DexRun);
	ctl.hcxt = CurrentMemoryContext;
	return hash_create("dex runs", 64, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

/*
 * The run whose DEX_RUN_COLS_SQL start at column "col" of row "row" of the
 * current SPI result, added to "runs" (copied out of SPI's memory); NULL if
 * its id is NULL (a LEFT JOIN that found no run).  Its history and inbox are
 * left empty.
 */
DexRun *
dex_read_run(HTAB *runs, uint64 row, int col)
{
	bool		isnull;
	Datum		d = dex_spi_getdatum(row, col, &isnull);
	DexRun	   *run;

	if (isnull)
		return NULL;
	run = hash_search(runs, DatumGetUUIDP(d), HASH_ENTER, NULL);
	run->workflow_name = dex_spi_gettext_copy(row, col + 1);
	run->workflow_version = (int32) dex_spi_getint64(row, col + 2);
	run->status = dex_spi_gettext_copy(row, col + 3);
	run->history_length = (int32) dex_spi_getint64(row, col + 4);
	run->last_event_id = (int32) dex_spi_getint64(row, col + 5);
	run->argument = dex_spi_getbytea_copy(row, col + 6);
	run->created_at = (TimestampTz) dex_spi_getint64(row, col + 7);
	run->instance_id = dex_spi_gettext_copy(row, col + 8);
	run->priority = (int32) dex_spi_getint64(row, col + 9);
	d = dex_spi_getdatum(row, col + 10, &isnull);
	run->labels = isnull ? NULL : DatumGetJsonbP(SPI_datumTransfer(d, false, -1));
	run->concurrency_key = dex_spi_gettext_copy(row, col + 11);
	run->custom_status = dex_spi_gettext_copy(row, col + 12);
	d = dex_spi_getdatum(row, col + 13, &isnull);
	run->has_parent = !isnull;
	if (!isnull)
		run->parent_id = *DatumGetUUIDP(d);
	run->queue_id = (int32) dex_spi_getint64(row, col + 14);
	run->generation = (int32) dex_spi_getint64(row, col + 15);
	run->parent_event_id = (int32) dex_spi_getint64(row, col + 16);
	run->cancel_requested = dex_spi_getbool(row, col + 17);
	run->task_failures = (int32) dex_spi_getint64(row, col + 18);
	d = dex_spi_getdatum(row, col + 19, &isnull);
	run->has_origin = !isnull;
	if (!isnull)
		run->origin_run_id = *DatumGetUUIDP(d);
	run->origin = dex_spi_gettext_copy(row, col + 20);
	run->history_bytes = dex_spi_getint64(row, col + 21);
	run->history = NULL;
	run->history_omitted = 0;
	run->n_inbox = 0;
	run->inbox = NULL;
	return run;
}

/*
 * The runs with the given ids (a uuid[] datum); with "lock", locked to be
 * written, in id order (the locking protocol in src/README.md).  Runs that do
 * not exist are absent from the table.
 */
HTAB *
dex_load_runs(Datum ids, bool lock)
{
	HTAB	   *runs = dex_new_runs();
	Datum		values[1] = {ids};
	int			v = dex_schema_1_4();

	dex_spi_exec(lock ? &lock_load_runs_plans[v] : &load_runs_plans[v], values, NULL, 0);
	for (uint64 i = 0; i < SPI_processed; i++)
		(void) dex_read_run(runs, i, 1);
	return runs;
}

DexRun *
dex_find_run(HTAB *runs, pg_uuid_t *id)
{
	return hash_search(runs, id, HASH_FIND, NULL);
}

static DexPlan histories_plan = {
	"SELECT run_id, events FROM dex.workflow_history WHERE run_id = ANY ($1) "
	"ORDER BY run_id, sequence",
	1, {UUIDARRAYOID}
};

/* the batches after the first "seen" events of each run */
static DexPlan history_tails_plan = {
	"SELECT h.run_id, h.events FROM unnest($1::uuid[], $2::integer[]) AS u(run_id, seen) "
	"JOIN dex.workflow_history h ON h.run_id = u.run_id AND h.sequence > u.seen "
	"ORDER BY h.run_id, h.sequence",
	2, {UUIDARRAYOID, INT4ARRAYOID}
};

/*
 * Each run's stored history, as one encoded EventBatch (the concatenation of
 * its batches), in run->history; with "seen" (an integer array beside ids;
 * (Datum) 0 for none), only the batches after that many events of each run.
 */
void
dex_load_histories(HTAB *runs, Datum ids, Datum seen)
{
	Datum		values[2] = {ids, seen};
	uint64		start = 0;

	dex_spi_exec(seen == (Datum) 0 ? &histories_plan : &history_tails_plan, values, NULL, 0);
	while (start < SPI_processed)
	{
		bool		isnull;
		pg_uuid_t  *id = DatumGetUUIDP(dex_spi_getdatum(start, 1, &isnull));
		uint64		end = start;
		DexRun	   *run = dex_find_run(runs, id);

		while (end < SPI_processed &&
			   memcmp(DatumGetUUIDP(dex_spi_getdatum(end, 1, &isnull)), id, UUID_LEN) == 0)
			end++;
		if (run != NULL)
			run->history = dex_spi_concat_bytea(start, end, 2);
		start = end;
	}
}

/*
 * The inbox is empty at rest: planned after an ANALYZE saw it so, a join of
 * it with the arrays would scan the whole inbox as the outer side, once per
 * call, however full it is under load.  So each element probes the primary
 * key from a LATERAL subquery, a plan that does not depend on the inbox's
 * statistics, and the delete takes the rows found by their ctids (stable:
 * the caller holds the runs' locks, and nothing else changes a visible
 * inbox row).
 */
#define INBOX_ROWS_SQL(cols) \
	"SELECT " cols " FROM unnest($1::uuid[], $2::bigint[]) AS u(run_id, id) " \
	"CROSS JOIN LATERAL (SELECT j.ctid, j.event, j.visible_from FROM dex.workflow_inbox j " \
	"                    WHERE j.run_id = u.run_id AND j.id = u.id OFFSET 0) i"

static DexPlan consume_inbox_plan = {
	"WITH consumed AS (DELETE FROM dex.workflow_inbox "
	"                  WHERE ctid = ANY (ARRAY(" INBOX_ROWS_SQL("i.ctid") ")) "
	"                  RETURNING run_id, id, visible_from, event) "
	"SELECT run_id, event FROM consumed ORDER BY run_id, visible_from, id",
	2, {UUIDARRAYOID, INT8ARRAYOID}
};

/*
 * The inbox events named by the (run id, inbox id) pairs, into run->inbox,
 * deleted from the inbox (a completion consumes what its task showed; a
 * poll reads them in its lease statement, api/api_poll.c).  A run's events
 * are in the order they became visible, not of their rows: a wait's timeout
 * is written when the wait starts, and an event that came before the
 * deadline goes first.
 */
void
dex_consume_inbox(HTAB *runs, Datum run_ids, Datum inbox_ids)
{
	Datum		values[2] = {run_ids, inbox_ids};

	dex_spi_exec(&consume_inbox_plan, values, NULL, 0);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		DexRun	   *run = dex_find_run(runs, DatumGetUUIDP(dex_spi_getdatum(i, 1, &isnull)));

		if (run == NULL)
			continue;
		if (run->inbox == NULL)
			run->inbox = palloc(sizeof(bytea *) * (SPI_processed - i));
		run->inbox[run->n_inbox++] = dex_spi_getbytea_copy(i, 2);
	}
}

Dex__V1__RunStatus
dex_run_status_enum(const char *status)
{
	static const char *const names[] = {
		"", "CREATED", "RUNNING", "SUSPENDED", "CANCELLED", "COMPLETED", "FAILED", "TERMINATED", "BLOCKED",
		"TIMED_OUT", "DELAYED"
	};

	for (int i = 1; i < lengthof(names); i++)
		if (strcmp(status, names[i]) == 0)
			return (Dex__V1__RunStatus) i;
	return DEX__V1__RUN_STATUS__RUN_STATUS_UNSPECIFIED;
}

/* The subject of a run's RunCreated event, from its row */
static Dex__V1__RunCreated *
run_created_subject(DexRun *run)
{
	Dex__V1__RunCreated *rc = palloc(sizeof(*rc));

	dex__v1__run_created__init(rc);
	rc->workflow_name = run->workflow_name;
	rc->workflow_version = run->workflow_version;
	rc->queue = pstrdup(dex_queue_name(run->queue_id));
	rc->argument = run->argument ?
		dex_payload_unpack(run->argument, "run argument") : NULL;
	if (run->instance_id)
		rc->instance_id = run->instance_id;
	rc->priority = run->priority;
	if (run->concurrency_key)
		rc->concurrency_key = run->concurrency_key;
	if (run->has_parent)
	{
		rc->parent = palloc(sizeof(Dex__V1__ParentRun));
		dex__v1__parent_run__init(rc->parent);
		rc->parent->run_id = dex_uuid_to_cstring(&run->parent_id);
		rc->parent->child_run_created_event_id = run->parent_event_id;
	}
	if (run->has_origin)
	{
		rc->origin = palloc(sizeof(Dex__V1__RunOrigin));
		dex__v1__run_origin__init(rc->origin);
		rc->origin->run_id = dex_uuid_to_cstring(&run->origin_run_id);
		rc->origin->kind = run->origin;
	}
	if (run->labels)
	{
		JsonbIterator *it = JsonbIteratorInit(&run->labels->root);
		JsonbValue	v;
		JsonbIteratorToken tok;
		char	   *key = NULL;
		int			n = JB_ROOT_COUNT(run->labels);

		rc->labels = palloc(sizeof(Dex__V1__RunCreated__LabelsEntry *) * Max(n, 1));
		while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		{
			if (tok == WJB_KEY)
				key = pnstrdup(v.val.string.val, v.val.string.len);
			else if (tok == WJB_VALUE && v.type == jbvString)
			{
				Dex__V1__RunCreated__LabelsEntry *e = palloc(sizeof(*e));

				dex__v1__run_created__labels_entry__init(e);
				e->key = key;
				e->value = pnstrdup(v.val.string.val, v.val.string.len);
				rc->labels[rc->n_labels++] = e;
			}
		}
	}
	return rc;
}

/* The RunCreated event of a run, from its row */
Dex__V1__WorkflowEvent *
dex_run_created_event(DexRun *run)
{
	return dex_event_run_created(run->created_at, run_created_subject(run));
}

/*
 * The events a workflow task adds to its run's history before the events of
 * its commands: WorkflowTaskStarted, then for a new run RunCreated and
 * RunStarted, then the run's loaded inbox events.  "extra" slots are left
 * free at the end of the array for the caller.
 */
Dex__V1__WorkflowEvent **
dex_build_new_events(DexRun *run, const char *worker_id, TimestampTz started_at,
					 int extra, size_t *n_events)
{
	Dex__V1__WorkflowEvent **events = palloc(sizeof(*events) * (run->n_inbox + 3 + extra));
	size_t		n = 0;

	events[n++] = dex_event_workflow_task_started(started_at, pstrdup(worker_id));
	events[0]->workflow_task_started->attempt = run->task_failures + 1;
	if (strcmp(run->status, "CREATED") == 0)
	{
		events[n++] = dex_run_created_event(run);
		events[n++] = dex_event_run_started(started_at);
	}

	for (int i = 0; i < run->n_inbox; i++)
		events[n++] = dex_inbox_event_unpack(run->inbox[i]);
	*n_events = n;
	return events;
}

static DexPlan lock_runs_plan = {
	"SELECT id, status FROM dex.workflow_run WHERE id = ANY ($1) ORDER BY id FOR NO KEY UPDATE",
	1, {UUIDARRAYOID}
};

static DexPlan share_runs_plan = {
	"SELECT id, status FROM dex.workflow_run WHERE id = ANY ($1) ORDER BY id FOR SHARE",
	1, {UUIDARRAYOID}
};

/*
 * Lock the runs (a uuid[] datum), in id order: to write them, or to add
 * events to them (share).  SPI_tuptable holds (id, status) of those that
 * exist, in id order.
 */
void
dex_lock_runs(Datum run_ids, bool share)
{
	Datum		values[1] = {run_ids};

	dex_spi_exec(share ? &share_runs_plan : &lock_runs_plan, values, NULL, 0);
}

/*
 * Whether a run of that status is handed workflow tasks and has their
 * completions applied: CREATED and RUNNING.  A SUSPENDED run is not, nor is
 * one that ended.
 */
bool
dex_status_takes_tasks(const char *status)
{
	return strcmp(status, "CREATED") == 0 || strcmp(status, "RUNNING") == 0;
}

bool
dex_status_is_terminal(const char *status)
{
	return strcmp(status, "COMPLETED") == 0 || strcmp(status, "FAILED") == 0 ||
		strcmp(status, "CANCELLED") == 0 || strcmp(status, "TERMINATED") == 0 ||
		strcmp(status, "TIMED_OUT") == 0;
}

/*
 * Raise the error of an unknown run: for a run that does not exist, and for
 * one of a queue the caller may not use (access.c), alike.
 */
void
dex_no_such_run(pg_uuid_t *run_id)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("workflow run %s does not exist", dex_uuid_to_cstring(run_id))));
}
