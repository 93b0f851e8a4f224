/*-------------------------------------------------------------------------
 *
 * settings.c
 *	  The dex.* settings (GUCs): their variables, definitions and defaults.
 *
 * Defined by _PG_init in every process that loads dex; docs/settings.md's
 * table documents each.  Settings read by the background workers
 * are PGC_SIGHUP; those that shape one call are PGC_USERSET.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <float.h>
#include <limits.h>

#include "utils/guc.h"
#include "utils/memutils.h"

#include "dex.h"

char	   *dex_database = NULL;
char	   *dex_actor = NULL;
int			dex_scheduler_naptime_ms = 600000;
int			dex_retry_max_attempts = 6;
int			dex_retry_initial_delay_ms = 5000;
double		dex_retry_multiplier = 1.5;
double		dex_retry_randomization = 0.3;
int			dex_retry_max_delay_ms = 30 * 60 * 1000;
int			dex_max_workflow_task_failures = 10;
int			dex_max_history_events = 51200;
int			dex_max_history_size = 50 * 1024 * 1024;
int			dex_max_payload_size = 1024 * 1024;
int			dex_retention_period_s = 7 * 24 * 3600;
int			dex_retention_batch_size = 1000;
int			dex_maintenance_naptime_ms = 60000;
int			dex_status_sweep_age_s = 60;
int			dex_interpreter_naptime_ms = 10000;
int			dex_sql_step_timeout_ms = 60000;
int			dex_worker_cache_runs = 65536;

bool		dex_allow_drop_with_runs = false;

bool		dex_preloaded = false;

/* The dex.* settings, defined once per process by _PG_init. */
void
dex_define_settings(void)
{
	DefineCustomBoolVariable("dex.allow_drop_with_runs",
							 "Lets DROP EXTENSION dex delete the workflow runs of the database.",
							 "Without it, DROP EXTENSION dex is refused while runs exist.",
							 &dex_allow_drop_with_runs,
							 false,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("dex.scheduler_naptime",
							"Longest time the scheduler sleeps when nothing is due.",
							"The scheduler wakes earlier when work falls due or a backend sets its latch.",
							&dex_scheduler_naptime_ms,
							600000, 10, INT_MAX / 2,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("dex.retry_max_attempts",
							"Default maximum attempts of an activity, the first included.",
							NULL,
							&dex_retry_max_attempts,
							6, 1, 10000,
							PGC_USERSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("dex.retry_initial_delay",
							"Default delay before an activity's first retry.",
							NULL,
							&dex_retry_initial_delay_ms,
							5000, 0, INT_MAX,
							PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomRealVariable("dex.retry_multiplier",
							 "Default factor by which each retry delay grows.",
							 NULL,
							 &dex_retry_multiplier,
							 1.5, 1.0, 1000.0,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);
	DefineCustomRealVariable("dex.retry_randomization",
							 "Default random spread of retry delays, as a fraction of the delay.",
							 NULL,
							 &dex_retry_randomization,
							 0.3, 0.0, 1.0,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("dex.max_workflow_task_failures",
							"Failed workflow tasks in a row after which a run is parked as BLOCKED.",
							"0 retries a failing workflow task for ever; dex.resume_run retries a BLOCKED run.",
							&dex_max_workflow_task_failures,
							10, 0, 1000000,
							PGC_USERSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("dex.worker_cache_runs",
							"How many runs the server remembers the worker of, for incremental histories.",
							"Per run, the worker that completed its last workflow task (36 bytes of shared memory each); "
							"0 turns incremental histories off.",
							&dex_worker_cache_runs,
							65536, 0, 16 * 1024 * 1024,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("dex.max_history_events",
							"Most events a run's history may hold; a workflow task that would go past it fails the run.",
							"0 is no limit. A run warns at 80%; continue-as-new starts its history over.",
							&dex_max_history_events,
							51200, 0, INT_MAX,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("dex.max_history_size",
							"Most bytes a run's history may hold (encoded); a workflow task that would go past it fails the run.",
							"0 is no limit. A run warns at 80%; continue-as-new starts its history over.",
							&dex_max_history_size,
							50 * 1024 * 1024, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);
	DefineCustomIntVariable("dex.retry_max_delay",
							"Default longest delay between two attempts of an activity.",
							NULL,
							&dex_retry_max_delay_ms,
							30 * 60 * 1000, 0, INT_MAX,
							PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("dex.max_payload_size",
							"Largest payload (argument, result, failure, command list) dex accepts.",
							NULL,
							&dex_max_payload_size,
							1024 * 1024, 1024, MaxAllocSize / 2,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	DefineCustomIntVariable("dex.retention_period",
							"How long runs that ended are kept before the maintenance worker deletes them.",
							"A run goes with its history, inbox and tasks once it has been over this long. 0 keeps runs forever.",
							&dex_retention_period_s,
							7 * 24 * 3600, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("dex.retention_batch_size",
							"Runs the maintenance worker deletes per transaction.",
							NULL,
							&dex_retention_batch_size,
							1000, 1, 100000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("dex.maintenance_naptime",
							"Time between two retention passes of the maintenance worker.",
							NULL,
							&dex_maintenance_naptime_ms,
							60000, 100, INT_MAX / 2,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("dex.status_sweep_age",
							"How old a run that is still active must be before the status sweep indexes it (1.11).",
							"Runs above the sweep's horizon are searched without the index; a run that lives longer is written to dex.run_status_index once.",
							&dex_status_sweep_age_s,
							60, 10, 86400,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("dex.interpreter_naptime",
							"Longest sleep of the idle interpreter worker (commits that make tasks of its definitions wake it).",
							NULL,
							&dex_interpreter_naptime_ms,
							10000, 10, INT_MAX / 2,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("dex.sql_step_timeout",
							"Longest a SQL step of a workflow defined in JSON may run; 0: no limit.",
							"A step that runs longer is cancelled and fails as its statement's error would (its retryCount applies).",
							&dex_sql_step_timeout_ms,
							60000, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomStringVariable("dex.database",
							   "Databases the dex workers serve.",
							   "A name, a comma-separated list of names, or * for every database where dex is installed.",
							   &dex_database,
							   "postgres",
							   PGC_SIGHUP, GUC_LIST_INPUT,
							   NULL, NULL, NULL);

	DefineCustomStringVariable("dex.actor",
							   "Who an operator's actions in this transaction are recorded as done by.",
							   "Set by dex.authenticate_api_token (the REST API's token) for the rest of the "
							   "transaction; empty: the session user.",
							   &dex_actor,
							   "",
							   PGC_SUSET, GUC_NOT_IN_SAMPLE,
							   NULL, NULL, NULL);

	MarkGUCPrefixReserved("dex");
}

/*
 * Refuse a payload larger than dex.max_payload_size.
 */
void
dex_check_payload_size(Size size, const char *what)
{
	if (size > (Size) dex_max_payload_size)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s is too large", what),
				 errdetail("It has %zu bytes; the limit is %d bytes.",
						   size, dex_max_payload_size),
				 errhint("Raise \"%s\" or pass large data by reference.",
						 "dex.max_payload_size")));
}
