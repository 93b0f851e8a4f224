/*-------------------------------------------------------------------------
 *
 * launcher.c
 *	  The dex launcher: a static background worker, registered by _PG_init
 *	  when dex is preloaded, that keeps one scheduler running for the
 *	  database named by dex.database.
 *
 * The launcher connects to no database (only shared catalogs).  It starts the scheduler as a
 * dynamic background worker with itself as bgw_notify_pid, so it is
 * signalled when the scheduler starts or stops, and restarts a scheduler
 * that exited after a backoff that doubles from 1 s up to 60 s (reset once
 * a scheduler has run for a minute), spread by +/- 20 % so that many
 * servers restarting at once do not retry in lockstep.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/pg_prng.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/timestamp.h"

#include "dex.h"

PGDLLEXPORT void dex_launcher_main(Datum main_arg);

#define MIN_BACKOFF_MS 1000
#define MAX_BACKOFF_MS 60000
#define HEALTHY_RUN_MS 60000

static BackgroundWorkerHandle *
start_scheduler(void)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "dex");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "dex_scheduler_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "dex scheduler for database %s", dex_database);
	snprintf(worker.bgw_type, BGW_MAXLEN, "dex scheduler");
	worker.bgw_notify_pid = MyProcPid;

	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
	{
		ereport(WARNING,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("could not start the dex scheduler"),
				 errhint("Consider increasing the configuration parameter \"%s\".",
						 "max_worker_processes")));
		return NULL;
	}
	return handle;
}

void
dex_launcher_main(Datum main_arg)
{
	BackgroundWorkerHandle *scheduler = NULL;
	TimestampTz started_at = 0;
	TimestampTz next_start = 0;
	int			backoff_ms = MIN_BACKOFF_MS;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();
	/* shared catalogs only: the launcher serves no database itself */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("dex launcher");

	ereport(LOG,
			(errmsg("dex launcher started"),
			 errdetail("The scheduler serves database \"%s\".", dex_database)));

	while (!ShutdownRequestPending)
	{
		TimestampTz now = GetCurrentTimestamp();
		long		timeout_ms = -1;
		pid_t		pid;

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		if (scheduler != NULL &&
			GetBackgroundWorkerPid(scheduler, &pid) == BGWH_STOPPED)
		{
			/* a scheduler that ran long enough was healthy: restart soon */
			if (TimestampDifferenceExceeds(started_at, now, HEALTHY_RUN_MS))
				backoff_ms = MIN_BACKOFF_MS;
			next_start = TimestampTzPlusMilliseconds(now,
													 (int) (backoff_ms * (0.8 + 0.4 * pg_prng_double(&pg_global_prng_state))));
			ereport(LOG,
					(errmsg("dex scheduler for database \"%s\" exited; restarting in %d ms",
							dex_database,
							(int) TimestampDifferenceMilliseconds(now, next_start))));
			backoff_ms = Min(backoff_ms * 2, MAX_BACKOFF_MS);
			pfree(scheduler);
			scheduler = NULL;
		}

		if (scheduler == NULL)
		{
			if (now >= next_start)
			{
				scheduler = start_scheduler();
				started_at = now;
				if (scheduler == NULL)
				{
					next_start = TimestampTzPlusMilliseconds(now, backoff_ms);
					backoff_ms = Min(backoff_ms * 2, MAX_BACKOFF_MS);
				}
			}
			if (scheduler == NULL)
				timeout_ms = Max(1, TimestampDifferenceMilliseconds(now, next_start));
		}

		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_EXIT_ON_PM_DEATH | (timeout_ms >= 0 ? WL_TIMEOUT : 0),
						 timeout_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}

	if (scheduler != NULL)
		TerminateBackgroundWorker(scheduler);
	proc_exit(0);
}
