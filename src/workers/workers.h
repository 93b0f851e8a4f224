/*-------------------------------------------------------------------------
 *
 * workers/workers.h
 *	  The background workers: the launcher, and per database the scheduler
 *	  and the maintenance worker, which share one main loop (bgworker.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEX_WORKERS_WORKERS_H
#define DEX_WORKERS_WORKERS_H

#include "postgres.h"

#include "datatype/timestamp.h"

#include "engine/engine.h"

/* bgw_main_arg of a per-database worker: it serves a database through "*" */
#define DEX_WORKER_LEAVE_IF_NO_EXTENSION 1

/*
 * bgworker.c: a per-database worker's start, main loop and transactions.
 * A worker says what it is and what it does in a DexWorkerLoop.
 */
typedef struct DexWorkerLoop
{
	const char *type;			/* "dex scheduler": its bgw_type, for the log */
	bool		scheduler;		/* registers as its database's scheduler */
	bool		interpreter;	/* ... as its interpreter (1.7) */
	const char *running;		/* pg_stat_activity's query while a pass runs */
	const char *sleeping;		/* ... while it sleeps between passes */
	const int  *naptime_ms;		/* the longest sleep (a setting) */
	bool		naptime_after_error;	/* the next pass after a failed one
										 * waits the naptime, not a second */

	/*
	 * One pass: it starts and commits its own transactions.  Returns when
	 * the next pass is due (DT_NOEND: after the naptime); *installed is false
	 * if it found dex not installed.
	 */
	TimestampTz (*pass) (bool *installed);
	/* when the worker will wake by itself: DT_NOEND while a pass runs (or NULL) */
	void		(*wakes_at) (TimestampTz when);
	/* after each pass, failed or not (or NULL) */
	void		(*pass_ended) (bool failed);
} DexWorkerLoop;

extern char dex_worker_database[];
extern void dex_worker_main(Datum main_arg, const DexWorkerLoop *loop) pg_attribute_noreturn();
extern bool dex_worker_begin(void);
extern void dex_worker_commit(void);

#endif							/* DEX_WORKERS_WORKERS_H */
