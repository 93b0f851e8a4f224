/*-------------------------------------------------------------------------
 *
 * workers/launcher.c
 *	  The dex launcher: a static background worker, registered by _PG_init
 *	  when dex is preloaded, that keeps two workers running for every
 *	  database it serves: a scheduler (scheduler.c) and a maintenance worker
 *	  (maintenance.c), which start and loop in bgworker.c.
 *
 * dex.database names the databases served: one name, a comma-separated
 * list, or "*" for every database that has dex installed.  A listed
 * database is served whether dex is installed there or not (the workers
 * wait for CREATE EXTENSION); with "*" the launcher starts a scheduler in
 * every database that allows connections, which leaves at once where dex is
 * not installed, and the launcher tries that database again when a CREATE
 * EXTENSION dex commits anywhere, or after PROBE_INTERVAL_MS.  The list is
 * read again on SIGHUP.
 *
 * The launcher connects to no database (it reads pg_database, a shared
 * catalog).  It starts each worker as a dynamic background worker with
 * itself as bgw_notify_pid, so it is signalled when one starts or stops, and
 * restarts a worker that exited after a backoff that doubles from 1 s up to
 * 60 s (reset once the worker has run for a minute), spread by +/- 20 % so
 * that many servers restarting at once do not retry in lockstep.  A
 * persistent error therefore costs one attempt a minute, never a crash
 * loop.  While DROP DATABASE runs, the database's workers are stopped (by
 * dex.c's utility hook) and not started again; a database that is gone is
 * no longer served.
 *
 * Transactions and locks: the launcher reads pg_database in a short
 * transaction of its own (AccessShareLock on it) when the databases may
 * have changed, and holds none while it waits; what it shares with the
 * workers and the backends (which databases have dex, DROP DATABASE, CREATE
 * EXTENSION) is in wakeup.c, under its spinlock.  Its loop is not
 * bgworker.c's: it has no database and no passes, and waits for workers to
 * start and exit.  It catches no error: one ends it, and the postmaster
 * starts it again after 10 s (dex.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "common/pg_prng.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "workers/workers.h"

PGDLLEXPORT void dex_launcher_main(Datum main_arg);

#define MIN_BACKOFF_MS 1000
#define MAX_BACKOFF_MS 60000
#define HEALTHY_RUN_MS 60000

/* A per-database worker the launcher keeps running */
typedef struct WorkerSlot
{
	BackgroundWorkerHandle *handle; /* NULL while not running */
	TimestampTz started_at;
	TimestampTz next_start;		/* when to start it again */
	int			backoff_ms;
} WorkerSlot;

static const char *const worker_types[] = {"dex scheduler", "dex maintenance", "dex interpreter"};
static const char *const worker_functions[] = {"dex_scheduler_main", "dex_maintenance_main",
"dex_interpreter_main"};

#define SCHEDULER 0
#define MAINTENANCE 1
#define INTERPRETER 2
#define N_WORKERS 3

/* A database the launcher serves */
typedef struct ServedDatabase
{
	char		name[NAMEDATALEN];
	Oid			dbid;
	bool		probing;		/* found through "*": dex may not be installed */
	bool		without_dex;	/* "*": its scheduler found no dex; wait */
	TimestampTz probe_at;		/* "*": when to look again anyway */
	bool		wanted;			/* still to be served after the last refresh */
	WorkerSlot	workers[N_WORKERS];
} ServedDatabase;

#define PROBE_INTERVAL_MS (5 * 60 * 1000)

static ServedDatabase served[DEX_MAX_DATABASES];
static int	n_served = 0;
static uint64 events_seen = 0;

static BackgroundWorkerHandle *
start_worker(ServedDatabase *db, int which)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "dex");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "%s", worker_functions[which]);
	snprintf(worker.bgw_name, BGW_MAXLEN, "%s for database %s", worker_types[which], db->name);
	snprintf(worker.bgw_type, BGW_MAXLEN, "%s", worker_types[which]);
	strlcpy(worker.bgw_extra, db->name, BGW_EXTRALEN);
	worker.bgw_main_arg = Int32GetDatum(db->probing ? DEX_WORKER_LEAVE_IF_NO_EXTENSION : 0);
	worker.bgw_notify_pid = MyProcPid;

	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
	{
		ereport(WARNING,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("could not start the %s for database \"%s\"", worker_types[which], db->name),
				 errhint("Consider increasing the configuration parameter \"%s\".",
						 "max_worker_processes")));
		return NULL;
	}
	return handle;
}

static void
stop_worker(WorkerSlot *slot)
{
	if (slot->handle != NULL)
	{
		TerminateBackgroundWorker(slot->handle);
		pfree(slot->handle);
		slot->handle = NULL;
	}
}

/*
 * Keep one worker running: notice that it stopped, and start it again when
 * its backoff has passed (unless start is false).  Returns how long the
 * launcher may sleep for this worker (-1: until signalled).
 */
static long
tend_worker(ServedDatabase *db, int which, bool start, TimestampTz now)
{
	WorkerSlot *slot = &db->workers[which];
	pid_t		pid;

	if (slot->handle != NULL &&
		GetBackgroundWorkerPid(slot->handle, &pid) == BGWH_STOPPED)
	{
		pfree(slot->handle);
		slot->handle = NULL;
		if (!start)
			return -1;
		/* a worker that ran long enough was healthy: restart soon */
		if (TimestampDifferenceExceeds(slot->started_at, now, HEALTHY_RUN_MS))
			slot->backoff_ms = MIN_BACKOFF_MS;
		slot->next_start = TimestampTzPlusMilliseconds(now,
													   (int) (slot->backoff_ms * (0.8 + 0.4 * pg_prng_double(&pg_global_prng_state))));
		ereport(LOG,
				(errmsg("%s for database \"%s\" exited; restarting in %d ms",
						worker_types[which], db->name,
						(int) TimestampDifferenceMilliseconds(now, slot->next_start))));
		slot->backoff_ms = Min(slot->backoff_ms * 2, MAX_BACKOFF_MS);
	}

	if (slot->handle != NULL || !start)
		return -1;
	if (now >= slot->next_start)
	{
		slot->handle = start_worker(db, which);
		slot->started_at = now;
		if (slot->handle != NULL)
			return -1;
		slot->next_start = TimestampTzPlusMilliseconds(now, slot->backoff_ms);
		slot->backoff_ms = Min(slot->backoff_ms * 2, MAX_BACKOFF_MS);
	}
	return Max(1, TimestampDifferenceMilliseconds(now, slot->next_start));
}

static ServedDatabase *
find_served(const char *name)
{
	for (int i = 0; i < n_served; i++)
		if (strcmp(served[i].name, name) == 0)
			return &served[i];
	return NULL;
}

static void
serve(const char *name, Oid dbid, bool probing)
{
	ServedDatabase *db = find_served(name);

	if (db == NULL)
	{
		if (n_served == DEX_MAX_DATABASES)
		{
			ereport(WARNING,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("dex serves at most %d databases; database \"%s\" is not served",
							DEX_MAX_DATABASES, name)));
			return;
		}
		db = &served[n_served++];
		memset(db, 0, sizeof(*db));
		strlcpy(db->name, name, NAMEDATALEN);
		for (int w = 0; w < N_WORKERS; w++)
			db->workers[w].backoff_ms = MIN_BACKOFF_MS;
	}
	db->dbid = dbid;
	db->probing = probing;
	db->wanted = true;
}

/*
 * Read dex.database and pg_database again: serve the databases wanted,
 * stop serving the others.
 */
static void
refresh_databases(void)
{
	static MemoryContext refresh_context = NULL;
	MemoryContext old_context;
	char	   *list;
	List	   *names = NIL;
	bool		all = false;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;

	/* the list and its names live until the next refresh */
	if (refresh_context == NULL)
		refresh_context = AllocSetContextCreate(TopMemoryContext, "dex launcher refresh",
												ALLOCSET_SMALL_SIZES);
	MemoryContextReset(refresh_context);
	old_context = MemoryContextSwitchTo(refresh_context);
	list = pstrdup(dex_database ? dex_database : "");

	if (!SplitGUCList(list, ',', &names))
	{
		ereport(WARNING,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid list syntax in parameter \"%s\"", "dex.database")));
		names = NIL;
	}
	if (list_length(names) == 1 && strcmp((char *) linitial(names), "*") == 0)
		all = true;

	for (int i = 0; i < n_served; i++)
		served[i].wanted = false;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database d = (Form_pg_database) GETSTRUCT(tup);
		const char *name = NameStr(d->datname);
		bool		listed = false;
		ListCell   *lc;

		foreach(lc, names)
			if (strcmp((char *) lfirst(lc), name) == 0)
				listed = true;
		if (listed || (all && d->datallowconn && !d->datistemplate))
			serve(name, d->oid, !listed);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(old_context);

	/* databases no longer wanted (dropped, or not listed any more) */
	for (int i = 0; i < n_served;)
	{
		if (served[i].wanted)
		{
			i++;
			continue;
		}
		for (int w = 0; w < N_WORKERS; w++)
			stop_worker(&served[i].workers[w]);
		served[i] = served[--n_served];
	}
}

void
dex_launcher_main(Datum main_arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();
	/* shared catalogs only: the launcher serves no database itself */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("dex launcher");
	dex_launcher_register();

	ereport(LOG,
			(errmsg("dex launcher started"),
			 errdetail("The workers serve database \"%s\".", dex_database)));
	events_seen = dex_launcher_events();
	refresh_databases();

	while (!ShutdownRequestPending)
	{
		TimestampTz now = GetCurrentTimestamp();
		long		timeout_ms = -1;
		bool		refresh = false;
		uint64		created;
		int			rc;

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			refresh = true;
		}
		/* CREATE EXTENSION dex or CREATE DATABASE: look at the databases again */
		created = dex_launcher_events();
		if (created != events_seen)
		{
			events_seen = created;
			refresh = true;
			for (int i = 0; i < n_served; i++)
				served[i].without_dex = false;
		}

		for (int i = 0; i < n_served; i++)
		{
			ServedDatabase *db = &served[i];
			bool		dropping;
			bool		no_extension;
			bool		start;

			dex_database_status(db->dbid, &dropping, &no_extension);
			if (no_extension && db->probing)
			{
				db->without_dex = true;
				db->probe_at = TimestampTzPlusMilliseconds(now, PROBE_INTERVAL_MS);
			}
			if (db->without_dex && now >= db->probe_at)
				db->without_dex = false;

			start = !dropping && !db->without_dex;
			for (int w = 0; w < N_WORKERS; w++)
			{
				/* while probing, the scheduler goes first: it finds out whether dex is there */
				bool		start_this = start &&
					(w == SCHEDULER || !db->probing || db->workers[SCHEDULER].handle != NULL);
				long		t = tend_worker(db, w, start_this, now);

				if (t >= 0 && (timeout_ms < 0 || t < timeout_ms))
					timeout_ms = t;
			}
			if (db->without_dex)
			{
				long		t = Max(1, TimestampDifferenceMilliseconds(now, db->probe_at));

				if (timeout_ms < 0 || t < timeout_ms)
					timeout_ms = t;
			}
		}
		if (refresh)
		{
			refresh_databases();
			continue;
		}

		/* PostgreSQL 15 has no custom wait events: say what the wait is for */
		pgstat_report_activity(STATE_IDLE, "dex launcher: waiting for a worker to start or exit, or a database to serve");
		rc = WaitLatch(MyLatch,
					   WL_LATCH_SET | WL_EXIT_ON_PM_DEATH | (timeout_ms >= 0 ? WL_TIMEOUT : 0),
					   timeout_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();

		/*
		 * Woken (a worker started or stopped, a DROP DATABASE ended): the
		 * databases may have changed.  Reading pg_database is cheap, and
		 * this is rare.
		 */
		if (rc & WL_LATCH_SET)
			refresh_databases();
	}

	for (int i = 0; i < n_served; i++)
		for (int w = 0; w < N_WORKERS; w++)
			stop_worker(&served[i].workers[w]);
	proc_exit(0);
}
