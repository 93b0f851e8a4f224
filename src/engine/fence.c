/*-------------------------------------------------------------------------
 *
 * fence.c
 *	  What a completion that did not pass the fence reports.
 *
 * Every completion passes a fence first: its task row is deleted only with
 * its current lock version (complete_workflow.c, complete_activity.c, and
 * the API's heartbeats and failures).  A task that is not leased with that
 * version is the caller's to skip or, here, to report: the error tells the
 * worker whether to stop.  Nothing has been written when it is raised.
 * Reads the run's row in the caller's transaction, taking no lock.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"

#include "engine/engine.h"

static DexPlan run_status_plan = {
	"SELECT status FROM dex.workflow_run WHERE id = $1",
	1, {UUIDOID}
};

/*
 * The task is not leased with that lock version: say whether the run is
 * unknown, was cancelled (ERRCODE_DEX_RUN_CANCELLED, so that a heartbeating
 * activity learns it should stop) or the lease was lost (a suspension voids
 * the lease of the run's workflow task).  Nothing has been written.
 */
void
dex_report_lost_lease(pg_uuid_t *run_id, int32 task_id, int64 lock_version)
{
	Datum		values[1] = {UUIDPGetDatum(run_id)};
	char	   *run = dex_uuid_to_cstring(run_id);
	char	   *status;

	dex_spi_exec(&run_status_plan, values, NULL, 1);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("workflow run %s does not exist", run)));
	status = dex_spi_gettext_copy(0, 1);
	if (strcmp(status, "CANCELLED") == 0 || strcmp(status, "TERMINATED") == 0 ||
		strcmp(status, "TIMED_OUT") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DEX_RUN_CANCELLED),
				 errmsg("workflow run %s was %s", run,
						status[0] == 'C' ? "cancelled" : status[1] == 'E' ? "terminated" : "timed out"),
				 errdetail("Its tasks were withdrawn; the task's result is not needed."),
				 errhint("Stop working on the task.")));
	if (task_id == 0 && strcmp(status, "SUSPENDED") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DEX_LEASE_LOST),
				 errmsg("workflow task of run %s is not leased with lock version " INT64_FORMAT,
						run, lock_version),
				 errdetail("The run was suspended: its workflow task was withdrawn, and nothing of it is recorded."),
				 errhint("Discard the result; the run gets a new task when it is resumed.")));
	if (task_id == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DEX_LEASE_LOST),
				 errmsg("workflow task of run %s is not leased with lock version " INT64_FORMAT,
						run, lock_version),
				 errdetail("The task was completed, or its lease expired and it was leased again."),
				 errhint("Discard the result; the task's current holder reports it.")));
	ereport(ERROR,
			(errcode(ERRCODE_DEX_LEASE_LOST),
			 errmsg("activity task %d of run %s is not leased with lock version " INT64_FORMAT,
					task_id, run, lock_version),
			 errdetail("The task was completed, failed, cancelled, or its lease expired and it was leased again."),
			 errhint("Discard the result; the task's current holder reports it.")));
}
