/*-------------------------------------------------------------------------
 *
 * purge.c
 *	  Deleting runs that have ended, with everything they own: for the
 *	  maintenance worker's retention and for dex.purge_run(s).
 *
 * A run goes with its history, inbox, recorded external events, retry
 * records, timers and attempts (1.4) and any task left behind (a task a poll held when the run ended;
 * a poll that meets it later finds no run and drops it).  Every delete goes
 * through a primary key that starts with the run id.  Only runs that have
 * ended are deleted, whatever the caller passes: the delete itself checks
 * the status, in the caller's transaction.  dex.purge_run(s) lock the runs
 * first (FOR UPDATE: no completion or event can be under way),
 * and refuse an active run (55000) before anything is deleted.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "engine/engine.h"

/* $1 the runs; deletes those that ended, and returns their ids */
#define DELETE_RUNS_SQL(since_1_4) \
	"WITH h AS (DELETE FROM dex.workflow_history WHERE run_id = ANY ($1)), " \
	"     i AS (DELETE FROM dex.workflow_inbox WHERE run_id = ANY ($1)), " \
	"     e AS (DELETE FROM dex.external_event WHERE run_id = ANY ($1)), " \
	"     ar AS (DELETE FROM dex.activity_retry WHERE run_id = ANY ($1)), " \
	"     t AS (DELETE FROM dex.workflow_task WHERE run_id = ANY ($1)), " \
	since_1_4 \
	"     a AS (DELETE FROM dex.activity_task WHERE run_id = ANY ($1)) " \
	"DELETE FROM dex.workflow_run r WHERE r.id = ANY ($1) " \
	"AND r.status = ANY (" DEX_ENDED_STATUSES_SQL ") RETURNING r.id"
#define SINCE_1_4 \
	"     rt AS (DELETE FROM dex.run_timer WHERE run_id = ANY ($1)), " \
	"     ta AS (DELETE FROM dex.task_attempt WHERE run_id = ANY ($1)), "
#define SINCE_1_7 "     rd AS (DELETE FROM dex.run_debounce WHERE run_id = ANY ($1)), "
/*
 * [1]: 1.4's run timers and attempts too; [2]: 1.7's debounce keys that still
 * name them; [3]: 1.11's rows of dex.run_status_index
 */
static DexPlan delete_runs_plans[4] = {
	{DELETE_RUNS_SQL(""), 1, {UUIDARRAYOID}},
	{DELETE_RUNS_SQL(SINCE_1_4), 1, {UUIDARRAYOID}},
	{DELETE_RUNS_SQL(SINCE_1_4 SINCE_1_7), 1, {UUIDARRAYOID}},
	{DELETE_RUNS_SQL(SINCE_1_4 SINCE_1_7
					 "     si AS (DELETE FROM dex.run_status_index WHERE run_id = ANY ($1)), "),
	1, {UUIDARRAYOID}}
};

/*
 * Delete the runs of run_ids (a uuid[]) that have ended, with all their rows;
 * returns how many runs went.
 */
uint64
dex_delete_runs(Datum run_ids)
{
	Datum		values[1] = {run_ids};

	int			v = dex_status_index_installed() ? 3 :
		dex_column_exists("run_debounce", "run_id") ? 2 : dex_schema_1_4();

	return dex_spi_rows(&delete_runs_plans[v], values, NULL, 0).n;
}

static DexPlan lock_run_plan = {
	"SELECT status, queue_id FROM dex.workflow_run WHERE id = $1 FOR UPDATE",
	1, {UUIDOID}
};

/*
 * dex.purge_run: the run, which must have ended, goes now with all its rows.
 * A run of a queue the caller may not use is unknown to it.
 */
void
dex_purge_run_internal(pg_uuid_t *run_id)
{
	Datum		values[1] = {UUIDPGetDatum(run_id)};
	DexRows		run = dex_spi_rows(&lock_run_plan, values, NULL, 1);
	char	   *status;

	if (run.n == 0 || !dex_may_use_queue_id((int32) dex_rows_getint64(run, 0, 2)))
		dex_no_such_run(run_id);
	status = dex_rows_gettext_copy(run, 0, 1);
	if (!dex_status_is_terminal(status))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot purge workflow run %s", dex_uuid_to_cstring(run_id)),
				 errdetail("Its status is %s; only a run that has ended can be purged.", status),
				 errhint("Cancel or terminate it first.")));
	(void) dex_delete_runs(dex_uuid_array(&run_id, 1));
	/* the record of who deleted it: the run and all it owned are gone */
	ereport(LOG,
			(errmsg("dex: workflow run %s was purged by %s", dex_uuid_to_cstring(run_id),
					GetUserNameFromId(GetSessionUserId(), false))));
}

/*
 * The ended runs dex.purge_runs deletes: of that status (NULL: any that
 * ended) and queue (NULL: any), ended before $3, oldest first, at most $4,
 * locked.  A run another transaction holds (being purged, or read FOR UPDATE
 * elsewhere) is skipped, left to a later call; SKIP LOCKED never waits, so
 * the order the rows are locked in cannot deadlock.
 */
static DexPlan pick_runs_plan = {
	"SELECT id FROM dex.workflow_run "
	"WHERE ($1::text IS NULL OR status = $1) AND status = ANY (" DEX_ENDED_STATUSES_SQL ") "
	"  AND ($2::integer IS NULL OR queue_id = $2) AND completed_at < $3 "
	"ORDER BY completed_at LIMIT $4 FOR UPDATE SKIP LOCKED",
	4, {TEXTOID, INT4OID, TIMESTAMPTZOID, INT4OID}
};

/*
 * dex.purge_runs: delete up to "limit" ended runs of the filters now; returns
 * how many went.  queue_id 0: any queue.
 */
uint64
dex_purge_runs_internal(const char *status, int32 queue_id, TimestampTz ended_before, int32 limit)
{
	Datum		values[4];
	char		nulls[4] = {status ? ' ' : 'n', queue_id ? ' ' : 'n', ' ', ' '};
	DexRows		picked;
	uint64		n;
	ArrayBuildState *ids = initArrayResult(UUIDOID, CurrentMemoryContext, false);

	values[0] = status ? CStringGetTextDatum(status) : (Datum) 0;
	values[1] = Int32GetDatum(queue_id);
	values[2] = TimestampTzGetDatum(ended_before);
	values[3] = Int32GetDatum(limit);
	picked = dex_spi_rows(&pick_runs_plan, values, nulls, 0);
	for (uint64 i = 0; i < picked.n; i++)
	{
		bool		isnull;

		dex_array_add(ids, dex_rows_getdatum(picked, i, 1, &isnull), false);
	}
	if (ids->nelems == 0)
		return 0;
	n = dex_delete_runs(dex_array_result(ids));
	ereport(LOG,
			(errmsg("dex: %llu workflow runs were purged by %s", (unsigned long long) n,
					GetUserNameFromId(GetSessionUserId(), false))));
	return n;
}
