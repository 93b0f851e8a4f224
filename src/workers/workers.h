/*-------------------------------------------------------------------------
 *
 * workers/workers.h
 *	  The background workers: the launcher, and per database the scheduler
 *	  and the maintenance worker.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEX_WORKERS_WORKERS_H
#define DEX_WORKERS_WORKERS_H

#include "postgres.h"

#include "engine/engine.h"

/* launcher.c */
extern char dex_worker_database[];
extern bool dex_worker_start(Datum main_arg, const char *type);
extern void dex_worker_leave_without_extension(bool leave);

#endif							/* DEX_WORKERS_WORKERS_H */
