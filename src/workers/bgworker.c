/*-------------------------------------------------------------------------
 *
 * workers/bgworker.c
 *	  The life of a per-database worker, the scheduler's and the maintenance
 *	  worker's alike: its start, its main loop, its recovery from an error,
 *	  its leaving when dex is not installed, and the transactions of its
 *	  passes.
 *
 * A worker is a DexWorkerLoop (workers.h): a pass, and how long to sleep
 * between passes.  Each turn of the loop
 *	  - resets the latch, then handles interrupts (SIGTERM ends the worker)
 *		and a SIGHUP (the configuration is read again);
 *	  - runs one pass in a memory context of its own, emptied after every
 *		pass; pg_stat_activity shows the pass while it runs, and the worker
 *		as idle after it;
 *	  - leaves if the pass found dex not installed and the database is
 *		served through "*" (launcher.c); a listed database keeps its worker,
 *		which looks again after each sleep;
 *	  - sleeps on the latch until the pass's next due time, at most the
 *		worker's naptime, saying in pg_stat_activity what it waits for
 *		(PostgreSQL 15 has no custom wait events).  A latch set since the
 *		turn began (a commit for the scheduler, a signal) ends the sleep at
 *		once.
 *
 * Transactions: a pass starts and commits its own, one or several, with
 * dex_worker_begin and dex_worker_commit; the loop holds no transaction,
 * snapshot or lock while it sleeps, and takes no lock itself.
 *
 * An ERROR in a pass is logged and the worker goes on, recovering in the
 * order PostgreSQL's long-lived processes use (the autovacuum launcher, the
 * loop of a backend): interrupts are held; a cancel or timeout still pending,
 * meant for the pass that failed, is dropped; the error is logged; the
 * transaction is aborted, which ends the SPI connection and releases the
 * snapshot, heavyweight locks, buffer pins and LWLocks; what code outside a
 * transaction may hold is released too (LWLocks, a condition variable's wait
 * list, a wait event); then the worker returns to the top memory context,
 * forgets the error, empties the pass's context and allows interrupts
 * again.  The next pass comes no sooner than ERROR_PAUSE_MS later, whatever
 * sets the latch meanwhile, so that an error that repeats cannot fill the
 * log at the rate of commits.  An error outside a pass (at start, or while
 * sleeping) is FATAL: the worker exits, and the launcher starts it again
 * after a backoff.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "workers/workers.h"

/* the least time between a failed pass and the next */
#define ERROR_PAUSE_MS 1000

/* the name of the database this worker serves */
char		dex_worker_database[NAMEDATALEN];

/*
 * The start of a per-database worker: signals, the connection to its
 * database (named in bgw_extra), and the settings of the API functions (see
 * util/spi.c): every statement names its schema, and plans stay on indexes
 * at any table size.  Returns whether the worker should leave when dex is
 * not installed in its database.
 */
static bool
worker_start(Datum main_arg, const DexWorkerLoop *loop)
{
	bool		leave;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	strlcpy(dex_worker_database, MyBgworkerEntry->bgw_extra, NAMEDATALEN);
	BackgroundWorkerInitializeConnection(dex_worker_database, NULL, 0);
	pgstat_report_appname(loop->type);
	if (!(loop->interpreter ? dex_interpreter_register() : dex_worker_register(loop->scheduler)))
		proc_exit(0);			/* DROP DATABASE is under way */
	SetConfigOption("search_path", DEX_SEARCH_PATH, PGC_SUSET, PGC_S_OVERRIDE);
	dex_set_planner_settings(PGC_SUSET, PGC_S_OVERRIDE, GUC_ACTION_SET);
	leave = (DatumGetInt32(main_arg) & DEX_WORKER_LEAVE_IF_NO_EXTENSION) != 0;
	/* probes of databases that may not have dex would fill the log */
	ereport(leave ? DEBUG1 : LOG,
			(errmsg("%s started for database \"%s\"", loop->type, dex_worker_database)));
	return leave;
}

/*
 * A worker that found dex not installed: with "*" it leaves (and the
 * launcher waits for a CREATE EXTENSION); for a listed database it stays.
 */
static void
leave_without_extension(bool leave)
{
	if (!leave)
		return;
	dex_worker_no_extension();
	proc_exit(0);
}

/*
 * Start a pass's transaction, connected to SPI, with a snapshot.  Returns
 * whether dex is installed in the database; dex_worker_commit ends the
 * transaction either way.
 */
bool
dex_worker_begin(void)
{
	bool		installed;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	SPI_connect();
	installed = OidIsValid(get_extension_oid("dex", true));

	/*
	 * An ALTER EXTENSION dex UPDATE under way holds dex's rebuild lock
	 * exclusively (dex.c): the pass waits for it before it takes its
	 * snapshot or touches a table, so the two never deadlock on the tables
	 * the update alters.  A rebuild takes the lock exclusively later in the
	 * pass (rebuild.c).
	 */
	if (installed)
		dex_wait_for_rebuild();
	PushActiveSnapshot(GetTransactionSnapshot());
	return installed;
}

void
dex_worker_commit(void)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
}

/*
 * After an ERROR in a pass: release everything the pass held and forget the
 * error, so that the worker can go on (the order is the header comment's).
 */
static void
recover_from_error(MemoryContext pass_context)
{
	/* no cancel or shutdown may break into the cleanup */
	HOLD_INTERRUPTS();
	/* a cancel or a timeout not yet acted on was meant for the failed pass */
	disable_all_timeouts(false);
	QueryCancelPending = false;

	EmitErrorReport();

	/*
	 * The pass's transaction, if one is open: its SPI connection
	 * (AtEOXact_SPI), snapshot, locks, buffer pins and LWLocks go with it.
	 */
	AbortOutOfAnyTransaction();
	/* what a pass may hold outside a transaction */
	LWLockReleaseAll();
	ConditionVariableCancelSleep();
	pgstat_report_wait_end();

	/* the error's data lives in ErrorContext: leave it before emptying it */
	MemoryContextSwitchTo(TopMemoryContext);
	FlushErrorState();
	MemoryContextReset(pass_context);
	RESUME_INTERRUPTS();
}

/*
 * One pass, in pass_context: sets when the next pass is due and whether dex
 * is installed.  Returns false if it failed (the worker has recovered).
 */
static bool
run_pass(const DexWorkerLoop *loop, MemoryContext pass_context,
		 TimestampTz *next, bool *installed)
{
	volatile bool ok = true;

	SetCurrentStatementStartTimestamp();
	pgstat_report_activity(STATE_RUNNING, loop->running);
	MemoryContextSwitchTo(pass_context);
	PG_TRY();
	{
		*next = loop->pass(installed);
	}
	PG_CATCH();
	{
		recover_from_error(pass_context);
		ok = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(TopMemoryContext);
	MemoryContextReset(pass_context);
	pgstat_report_activity(STATE_IDLE, NULL);
	if (loop->pass_ended != NULL)
		loop->pass_ended(!ok);
	return ok;
}

/*
 * Sleep until "next" (DT_NOEND: none), at most the naptime, or until the
 * latch is set; but not before pause_until.
 */
static void
worker_sleep(const DexWorkerLoop *loop, TimestampTz next, TimestampTz pause_until)
{
	for (;;)
	{
		TimestampTz now = GetCurrentTimestamp();
		TimestampTz wake = Max(next, pause_until);
		long		timeout_ms = *loop->naptime_ms;
		bool		early = false;
		int			rc;

		if (wake <= now)
			return;
		if (wake != DT_NOEND)
		{
			int64		until_wake_us = wake - now;
			long		until_wake = (long) Min(until_wake_us / 1000, (int64) INT_MAX);

			/* less than WaitLatch's millisecond left: sleep exactly that */
			if (until_wake == 0)
			{
				pg_usleep((long) until_wake_us);
				return;
			}

			/*
			 * Wake at "wake", not after: sleep the whole milliseconds it is
			 * away, less the timer slack Linux allows a long timeout (0.1%,
			 * at most 100 ms: 60 ms for a minute, which would make a
			 * schedule's tick late), then the rest.  (A timeout rounded up to
			 * the millisecond would make every timer's pass up to 2 ms late.)
			 */
			if (until_wake <= timeout_ms)
			{
				timeout_ms = until_wake > 1000 ? until_wake - until_wake / 500 : until_wake;
				early = true;
			}
		}
		if (loop->wakes_at != NULL)
			loop->wakes_at(early ? wake : TimestampTzPlusMilliseconds(now, timeout_ms));
		pgstat_report_activity(STATE_IDLE, loop->sleeping);
		rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					   timeout_ms, PG_WAIT_EXTENSION);
		if (early && !(rc & WL_LATCH_SET))
		{
			CHECK_FOR_INTERRUPTS();
			continue;			/* woke before "wake" on purpose: sleep the rest */
		}
		if (GetCurrentTimestamp() >= pause_until)
			return;
		/* the pass wanted now waits for the end of the pause */
		next = pause_until;
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

void
dex_worker_main(Datum main_arg, const DexWorkerLoop *loop)
{
	bool		leave_without_dex = worker_start(main_arg, loop);
	MemoryContext pass_context;

	pass_context = AllocSetContextCreate(TopMemoryContext, "dex worker pass",
										 ALLOCSET_DEFAULT_SIZES);
	MemoryContextSetIdentifier(pass_context, loop->type);

	for (;;)
	{
		TimestampTz next = DT_NOEND;
		TimestampTz pause_until = DT_NOBEGIN;
		bool		installed = true;

		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		/* while a pass runs, any commit with due work may wake the worker */
		if (loop->wakes_at != NULL)
			loop->wakes_at(DT_NOEND);
		if (!run_pass(loop, pass_context, &next, &installed))
		{
			pause_until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ERROR_PAUSE_MS);
			next = loop->naptime_after_error ? DT_NOEND : pause_until;
			installed = true;	/* a failed pass tells nothing */
		}
		if (!installed)
			leave_without_extension(leave_without_dex);
		worker_sleep(loop, next, pause_until);
	}
}
