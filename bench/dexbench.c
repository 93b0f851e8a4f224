/*
 * dexbench: the load driver of the dex benchmark (see bench/README.md).
 *
 *   dexbench W1 [W2 ...]      run the named workloads, in order
 *
 * Connection: the usual libpq environment (PGHOST, PGPORT, PGDATABASE, PGUSER).
 * Settings (environment):
 *   BENCH_SCALE      multiplies every N and duration (default 1; 0.1 for a quick check)
 *   BENCH_K          workers per kind of queue (default 2, see run.sh for why)
 *   BENCH_BATCH      max tasks per poll (default 100)
 *   BENCH_W5_MAX     largest W5 backlog (default 1000000)
 *   BENCH_LOW_K      W3 and W4 again with these workers per queue (default "1,4")
 *   BENCH_POLL_WAIT  2 (default): workers CALL dex.poll_tasks_wait_pb and pass it their
 *                    completions (workflow workers always, activity workers when their
 *                    batch took all their slots: as the SDKs'); 1: idle workers call it
 *                    without completions; 0: poll, CALL dex.wait_for_tasks, poll again
 *                    (each as far as the installed dex has it)
 *
 * Workers are threads with a connection each.  They speak protobuf to dex
 * (dex.poll_tasks_pb / dex.poll_tasks_wait_pb / dex.complete_tasks_pb),
 * encoded and decoded with the protobuf-c code generated from proto/, with
 * binary parameters and results.  A worker pipelines the completion of one
 * batch with the poll of the next (libpq pipeline mode, a sync after each so
 * each is its own transaction).
 *
 * Output: progress and details on stdout, and per workload one line
 *   ROW|workload|items|seconds|items/s|xact/item|WAL bytes/item|CPU ms/item|ins/item|upd/item|
 *   del/item|notes
 * that bench/run.sh turns into the final table.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "dex/v1/command.pb-c.h"
#include "dex/v1/common.pb-c.h"
#include "dex/v1/event.pb-c.h"
#include "dex/v1/task.pb-c.h"

#define BOOLOID 16
#define BYTEAOID 17
#define INT8OID 20
#define INT4OID 23
#define UUIDOID 2950

#define MAX_BATCH 1000

/* settings (main reads them from the environment) */
static int	bench_k;
static int	bench_batch;
static double bench_scale;
static bool bench_poll_wait;	/* idle workers CALL dex.poll_tasks_wait_pb */
static bool bench_defer;		/* ... and pass it their completions */

/* what the installed dex has (main looks in pg_proc) */
static bool have_poll_wait;		/* dex.poll_tasks_wait_pb (dex 1.4) */
static bool have_worker_cache;	/* the polls' worker_cache argument */
static bool have_run_history_pb;	/* dex.run_history_pb */
static bool have_wait_completions;	/* completions in dex.poll_tasks_wait_pb (dex 1.5) */

/* ------------------------------------------------------------------ utilities */

static void
die(const char *fmt, ...)
{
	va_list		ap;

	fflush(stdout);
	fprintf(stderr, "dexbench: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void *
xmalloc(size_t n)
{
	void	   *p = calloc(1, n ? n : 1);

	if (!p)
		die("out of memory");
	return p;
}

/* microseconds on the monotonic clock, for durations */
static int64_t
mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* microseconds since the Unix epoch, to compare with the server's timestamps */
static int64_t
real_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void
sleep_us(int64_t us)
{
	struct timespec ts;

	if (us <= 0)
		return;
	ts.tv_sec = us / 1000000;
	ts.tv_nsec = (us % 1000000) * 1000;
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static int64_t
pb_ts_us(const Google__Protobuf__Timestamp *t)
{
	return t ? (int64_t) t->seconds * 1000000 + t->nanos / 1000 : 0;
}

static double
env_double(const char *name, double dflt)
{
	const char *v = getenv(name);

	return (v && *v) ? atof(v) : dflt;
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return x < y ? -1 : x > y;
}

/* nearest-rank percentile of a sorted array */
static double
pct(const double *v, int n, double p)
{
	int			k;

	if (n <= 0)
		return NAN;
	k = (int) ceil(p * n) - 1;
	if (k < 0)
		k = 0;
	if (k >= n)
		k = n - 1;
	return v[k];
}

/* ------------------------------------------------------------------ buffers and binary arrays */

typedef struct Buf
{
	char	   *p;
	size_t		len;
	size_t		cap;
} Buf;

static void
buf_reserve(Buf *b, size_t n)
{
	if (b->len + n > b->cap)
	{
		size_t		c = b->cap ? b->cap * 2 : 4096;

		while (c < b->len + n)
			c *= 2;
		b->p = realloc(b->p, c);
		if (!b->p)
			die("out of memory");
		b->cap = c;
	}
}

static void
buf_put(Buf *b, const void *d, size_t n)
{
	buf_reserve(b, n);
	memcpy(b->p + b->len, d, n);
	b->len += n;
}

static void
buf_u32(Buf *b, uint32_t v)
{
	v = htonl(v);
	buf_put(b, &v, 4);
}

static void
buf_u64(Buf *b, uint64_t v)
{
	buf_u32(b, (uint32_t) (v >> 32));
	buf_u32(b, (uint32_t) v);
}

static uint32_t
get_u32(const char *p)
{
	uint32_t	v;

	memcpy(&v, p, 4);
	return ntohl(v);
}

static uint64_t
get_u64(const char *p)
{
	return ((uint64_t) get_u32(p) << 32) | get_u32(p + 4);
}

/* A one-dimensional array in PostgreSQL's binary format (array_recv) */
typedef struct ArrBuf
{
	Buf			b;
	uint32_t	n;
} ArrBuf;

static void
arr_begin(ArrBuf *a, uint32_t elemtype)
{
	a->b.len = 0;
	a->n = 0;
	buf_u32(&a->b, 1);			/* ndim */
	buf_u32(&a->b, 0);			/* no nulls */
	buf_u32(&a->b, elemtype);
	buf_u32(&a->b, 0);			/* dimension, patched by arr_end */
	buf_u32(&a->b, 1);			/* lower bound */
}

static void
arr_elem(ArrBuf *a, const void *d, uint32_t len)
{
	buf_u32(&a->b, len);
	buf_put(&a->b, d, len);
	a->n++;
}

static void
arr_end(ArrBuf *a)
{
	uint32_t	n = htonl(a->n);

	memcpy(a->b.p + 12, &n, 4);
}

/* ------------------------------------------------------------------ connections */

static PGconn *
connect_db(const char *appname)
{
	const char *keys[] = {"application_name", "dbname", NULL};
	const char *vals[] = {appname, NULL, NULL};
	PGconn	   *c;

	vals[1] = getenv("PGDATABASE");
	if (!vals[1])
		keys[1] = NULL;
	c = PQconnectdbParams(keys, vals, 0);
	if (PQstatus(c) != CONNECTION_OK)
		die("connection failed: %s", PQerrorMessage(c));
	return c;
}

static void
prepare(PGconn *c, const char *name, const char *sql)
{
	PGresult   *r = PQprepare(c, name, sql, 0, NULL);

	if (PQresultStatus(r) != PGRES_COMMAND_OK)
		die("prepare %s: %s", name, PQerrorMessage(c));
	PQclear(r);
}

/* run a statement that must succeed; returns its result */
static PGresult *
exec_ok(PGconn *c, const char *sql)
{
	PGresult   *r = PQexec(c, sql);
	ExecStatusType st = PQresultStatus(r);

	if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
		die("%s\n  in: %s", PQerrorMessage(c), sql);
	return r;
}

static void
exec_void(PGconn *c, const char *sql)
{
	PQclear(exec_ok(c, sql));
}

/*
 * The monitor connection's statements are counted, so that their own
 * transactions can be subtracted from the database's counters.
 */
static long mon_statements;

static PGresult *
mon(PGconn *m, const char *sql)
{
	mon_statements++;
	return exec_ok(m, sql);
}

static double
mon_double(PGconn *m, const char *sql)
{
	PGresult   *r = mon(m, sql);
	double		v = PQgetisnull(r, 0, 0) ? 0 : atof(PQgetvalue(r, 0, 0));

	PQclear(r);
	return v;
}

/* In pipeline mode: the result of the next query, then its NULL and its sync */
static PGresult *
pl_get(PGconn *c)
{
	PGresult   *r = PQgetResult(c);
	PGresult   *x;

	if (r == NULL)
		return NULL;
	if (PQresultStatus(r) == PGRES_PIPELINE_SYNC)
		return r;				/* an aborted pipeline: caller sees the status */
	x = PQgetResult(c);
	if (x != NULL)
		die("unexpected extra result: %s", PQresStatus(PQresultStatus(x)));
	x = PQgetResult(c);
	if (x == NULL || PQresultStatus(x) != PGRES_PIPELINE_SYNC)
		die("expected a pipeline sync, got %s: %s",
			x ? PQresStatus(PQresultStatus(x)) : "nothing", PQerrorMessage(c));
	PQclear(x);
	return r;
}

/* ------------------------------------------------------------------ database counters */

typedef struct Stats
{
	long long	commit;
	long long	rollback;
	long long	ins;
	long long	upd;
	long long	del;
	char		lsn[32];
	long long	cpu;			/* server CPU ticks so far (server_cpu_ticks) */
	long		mon_before;		/* monitor statements before this read */
	int64_t		t;
} Stats;

static long long server_cpu_ticks(int postmaster);
static int	bench_postmaster;	/* pid of the server's postmaster */

static void
stats_read(PGconn *m, Stats *s)
{
	PGresult   *r;

	s->mon_before = mon_statements;
	r = mon(m, "SELECT pg_stat_force_next_flush(), xact_commit, xact_rollback, tup_inserted, "
			"tup_updated, tup_deleted, pg_current_wal_lsn() FROM pg_stat_database "
			"WHERE datname = current_database()");
	s->commit = atoll(PQgetvalue(r, 0, 1));
	s->rollback = atoll(PQgetvalue(r, 0, 2));
	s->ins = atoll(PQgetvalue(r, 0, 3));
	s->upd = atoll(PQgetvalue(r, 0, 4));
	s->del = atoll(PQgetvalue(r, 0, 5));
	snprintf(s->lsn, sizeof(s->lsn), "%s", PQgetvalue(r, 0, 6));
	s->cpu = server_cpu_ticks(bench_postmaster);
	s->t = mono_us();
	PQclear(r);
}

/*
 * The counters once the workload's backends have flushed their statistics:
 * backends flush at most once a second (and at exit), the scheduler after a
 * pass, so wait, wake the scheduler for a pass, and read until two reads
 * agree (apart from the monitor's own transaction).
 */
static void
stats_settle(PGconn *m, Stats *s)
{
	Stats		prev;

	sleep_us(1100000);
	PQclear(mon(m, "SELECT dex.wake_scheduler()"));
	sleep_us(300000);
	stats_read(m, &prev);
	for (int i = 0; i < 20; i++)
	{
		sleep_us(300000);
		stats_read(m, s);
		if (s->commit == prev.commit + 1 && s->ins == prev.ins && s->upd == prev.upd &&
			s->del == prev.del)
			return;
		prev = *s;
	}
	printf("  (statistics did not settle: background activity)\n");
}

typedef struct Delta
{
	double		commit;
	double		rollback;
	double		ins;
	double		upd;
	double		del;
	double		wal;
	double		cpu_ms;			/* server CPU, milliseconds */
} Delta;

static Delta
stats_delta(PGconn *m, const Stats *a, const Stats *b)
{
	Delta		d;
	char		sql[256];

	/* the monitor's statements from read a (included) to read b (excluded) */
	d.commit = (double) (b->commit - a->commit) - (double) (b->mon_before - a->mon_before);
	d.rollback = (double) (b->rollback - a->rollback);
	d.cpu_ms = 1000.0 * (double) (b->cpu - a->cpu) / (double) sysconf(_SC_CLK_TCK);
	d.ins = (double) (b->ins - a->ins);
	d.upd = (double) (b->upd - a->upd);
	d.del = (double) (b->del - a->del);
	snprintf(sql, sizeof(sql), "SELECT pg_wal_lsn_diff('%s', '%s')", b->lsn, a->lsn);
	d.wal = mon_double(m, sql);
	return d;
}

/* the statements of pg_stat_statements that took most time since its last reset */
static void
print_top_statements(PGconn *m, int limit)
{
	char		sql[1024];
	PGresult   *r;

	snprintf(sql, sizeof(sql),
			 "SELECT calls, round(total_exec_time::numeric, 1), round(mean_exec_time::numeric, 3), "
			 "CASE WHEN toplevel THEN 'top' ELSE 'nested' END, "
			 "left(regexp_replace(query, '\\s+', ' ', 'g'), 150) "
			 "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database "
			 "WHERE datname = current_database()) AND query NOT LIKE '%%pg_stat%%' "
			 "ORDER BY total_exec_time DESC LIMIT %d", limit);
	r = mon(m, sql);
	printf("  top statements (pg_stat_statements, track = all):\n");
	printf("  %9s %10s %9s %-6s %s\n", "calls", "total ms", "mean ms", "level", "query");
	for (int i = 0; i < PQntuples(r); i++)
		printf("  %9s %10s %9s %-6s %s\n", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
			   PQgetvalue(r, i, 2), PQgetvalue(r, i, 3), PQgetvalue(r, i, 4));
	PQclear(r);
}

/*
 * The statements per item since pg_stat_statements' last reset: those clients
 * sent (top-level) and those dex's functions ran (nested: SPI), each of which
 * starts and ends an executor.
 */
static void
print_statement_counts(PGconn *m, int items)
{
	PGresult   *r = mon(m, "SELECT coalesce(sum(calls) FILTER (WHERE toplevel), 0), "
						"coalesce(sum(calls) FILTER (WHERE NOT toplevel), 0) "
						"FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database "
						"WHERE datname = current_database()) AND query NOT LIKE '%pg_stat%'");

	printf("  statements per item: %.2f top-level, %.2f nested\n",
		   atof(PQgetvalue(r, 0, 0)) / (items > 0 ? items : 1),
		   atof(PQgetvalue(r, 0, 1)) / (items > 0 ? items : 1));
	PQclear(r);
}

/* ------------------------------------------------------------------ workloads */

typedef enum WfKind
{
	WF_MINIMAL,					/* complete the run in its first task */
	WF_ACTIVITY,				/* one activity "inc", then complete with its result */
	WF_TIMER					/* a 1 s timer, then complete */
} WfKind;

typedef struct Workload
{
	const char *name;
	WfKind		kind;
	char		wf_queue[32];
	char		act_queue[32];
	int			n_runs;			/* runs that must complete */
	int			poll_max;
	const char *wait_timeout;

	atomic_int	go;
	atomic_int	stop;
	atomic_long completed;		/* runs completed (completeRun accepted) */
	atomic_long deferred;		/* completeRuns sent in a poll_tasks_wait_pb not returned yet */
	atomic_llong t_last_deferred;	/* when the last of them was sent */
	atomic_llong t_end;			/* mono_us of the last completion */

	/* per run index (the run's argument): */
	atomic_llong *created_us;	/* mono_us of the create_run call (W4) */
	double	   *latency_ms;		/* W4: create -> completion returned */
	double	   *late_server_ms; /* W3: WorkflowTaskStarted - elapseAt */
	double	   *late_client_ms; /* W3: task received - elapseAt */
} Workload;

typedef struct Entry
{
	bool		ends_run;
	long		idx;
} Entry;

typedef struct Worker
{
	pthread_t	thread;
	Workload   *wl;
	bool		is_wf;
	const char *queue;
	char		id[96];
	PGconn	   *conn;
	PGcancel   *cancel;
	int			backend_pid;

	/* the batch being completed */
	ArrBuf		a_run,
				a_task,
				a_lv,
				a_res;
	Buf			enc;
	Entry		ent[MAX_BATCH];
	unsigned char run_ids[MAX_BATCH][16];
	int32_t		task_ids[MAX_BATCH];
	int			n;

	/* counters */
	long		polls;			/* dex.poll_tasks_pb calls */
	long		empty_polls;
	long		waits;			/* CALL dex.wait_for_tasks */
	long		calls;			/* CALL dex.poll_tasks_wait_pb */
	long		empty_calls;	/* ... that returned no task (timed out) */
	long		completes;		/* complete_tasks_pb calls */
	long		completing_calls;	/* poll_tasks_wait_pb calls that carried completions */
	bool		deferred;		/* the batch's completions went with the pending poll_tasks_wait_pb */
	int64_t		deferred_at;	/* when it was sent */
	atomic_int	exited;			/* worker_main has returned */
	long		tasks;
	long		lost;
	long		poll_errors;	/* polls and completions that failed (the worker goes on) */
	long		complete_errors;
	char		last_error[256];
	long		blind_tasks;	/* tasks of started runs that showed no new event */
	long		wait_timeouts;	/* waits that returned ready = false */
	int64_t		wait_max_us;	/* longest wait (or poll_tasks_wait_pb call) */
	int64_t		wait_max_at;	/* when it ended (mono_us) */
} Worker;

static const char *POLL_SQL =
"SELECT run_id, task_id, lock_version, task FROM dex.poll_tasks_pb($1, $2, $3::int, $4::interval)";
static const char *COMPLETE_SQL =
"SELECT run_id, task_id, completed FROM dex.complete_tasks_pb($1::uuid[], $2::int[], $3::bigint[], $4::bytea[])";
static const char *WAIT_SQL = "CALL dex.wait_for_tasks($1, $2::interval)";
static const char *POLL_WAIT_SQL =
"CALL dex.poll_tasks_wait_pb($1, $2, $3::int, $4::interval, $5::interval, NULL)";
static const char *POLL_WAIT_COMPLETING_SQL =
"CALL dex.poll_tasks_wait_pb($1, $2, $3::int, $4::interval, $5::interval, NULL, false, "
"$6::uuid[], $7::int[], $8::bigint[], $9::bytea[], NULL)";

static void
worker_connect(Worker *w)
{
	PGresult   *r;

	w->conn = connect_db(w->id);
	prepare(w->conn, "poll", POLL_SQL);
	prepare(w->conn, "complete", COMPLETE_SQL);
	prepare(w->conn, "wait", WAIT_SQL);
	if (have_poll_wait)
		prepare(w->conn, "pollwait", POLL_WAIT_SQL);
	if (have_wait_completions)
		prepare(w->conn, "pollwaitc", POLL_WAIT_COMPLETING_SQL);
	w->cancel = PQgetCancel(w->conn);
	/* flush this setup's statistics now, before any measurement starts */
	r = exec_ok(w->conn, "SELECT pg_backend_pid(), pg_stat_force_next_flush()");
	w->backend_pid = atoi(PQgetvalue(r, 0, 0));
	PQclear(r);
}

static void
send_poll(Worker *w, int max)
{
	char		maxbuf[16];
	const char *p[4];

	snprintf(maxbuf, sizeof(maxbuf), "%d", max);
	p[0] = w->queue;
	p[1] = w->id;
	p[2] = maxbuf;
	p[3] = "5 minutes";
	if (!PQsendQueryPrepared(w->conn, "poll", 4, p, NULL, NULL, 1))
		die("send poll: %s", PQerrorMessage(w->conn));
}

static void
send_wait(Worker *w)
{
	const char *p[2] = {w->queue, w->wl->wait_timeout};

	if (!PQsendQueryPrepared(w->conn, "wait", 2, p, NULL, NULL, 0))
		die("send wait: %s", PQerrorMessage(w->conn));
}

/* the poll and the long poll in one call: its one row holds the task messages (bytea[]) */
static void
send_poll_wait(Worker *w, int max)
{
	char		maxbuf[16];
	const char *p[5];

	snprintf(maxbuf, sizeof(maxbuf), "%d", max);
	p[0] = w->queue;
	p[1] = w->id;
	p[2] = maxbuf;
	p[3] = "5 minutes";
	p[4] = w->wl->wait_timeout;
	if (!PQsendQueryPrepared(w->conn, "pollwait", 5, p, NULL, NULL, 1))
		die("send poll_tasks_wait_pb: %s", PQerrorMessage(w->conn));
}

/* poll_tasks_wait_pb with the batch's completions: they are made first, then it waits */
static void
send_poll_wait_completing(Worker *w, int max)
{
	char		maxbuf[16];
	const char *p[9];
	int			len[9] = {0};
	int			fmt[9] = {0, 0, 0, 0, 0, 1, 1, 1, 1};
	ArrBuf	   *a[4] = {&w->a_run, &w->a_task, &w->a_lv, &w->a_res};

	snprintf(maxbuf, sizeof(maxbuf), "%d", max);
	p[0] = w->queue;
	p[1] = w->id;
	p[2] = maxbuf;
	p[3] = "5 minutes";
	p[4] = w->wl->wait_timeout;
	for (int i = 0; i < 4; i++)
	{
		arr_end(a[i]);
		p[5 + i] = a[i]->b.p;
		len[5 + i] = (int) a[i]->b.len;
	}
	if (!PQsendQueryPrepared(w->conn, "pollwaitc", 9, p, len, fmt, 1))
		die("send poll_tasks_wait_pb: %s", PQerrorMessage(w->conn));
}

static void
send_complete(Worker *w)
{
	const char *p[4];
	int			len[4];
	int			fmt[4] = {1, 1, 1, 1};
	ArrBuf	   *a[4] = {&w->a_run, &w->a_task, &w->a_lv, &w->a_res};

	for (int i = 0; i < 4; i++)
	{
		arr_end(a[i]);
		p[i] = a[i]->b.p;
		len[i] = (int) a[i]->b.len;
	}
	if (!PQsendQueryPrepared(w->conn, "complete", 4, p, len, fmt, 1))
		die("send complete: %s", PQerrorMessage(w->conn));
}

static void
batch_reset(Worker *w)
{
	arr_begin(&w->a_run, UUIDOID);
	arr_begin(&w->a_task, INT4OID);
	arr_begin(&w->a_lv, INT8OID);
	arr_begin(&w->a_res, BYTEAOID);
	w->n = 0;
}

static long
payload_long(const Dex__V1__Payload *p)
{
	if (p && p->content_case == DEX__V1__PAYLOAD__CONTENT_JSON && p->json)
		return strtol(p->json, NULL, 10);
	return -1;
}

/*
 * The workflow code: decide the commands of a workflow task from its history
 * and new events, encode the WorkflowTaskCompletion into enc.  Returns
 * whether the commands end the run, and the run's index (its argument).
 */
static void
workflow_code(Worker *w, const Dex__V1__WorkflowTask *t, int64_t received_real, Buf *enc,
			  Entry *e)
{
	Workload   *wl = w->wl;
	Dex__V1__Payload *arg = NULL;
	Dex__V1__Payload *act_result = NULL;
	bool		act_created = false,
				act_done = false,
				timer_created = false,
				timer_elapsed = false;
	int64_t		elapse_at = 0,
				task_started = 0;
	Dex__V1__WorkflowTaskCompletion comp = DEX__V1__WORKFLOW_TASK_COMPLETION__INIT;
	Dex__V1__Command cmd = DEX__V1__COMMAND__INIT;
	Dex__V1__Command *cmds[1] = {&cmd};
	Dex__V1__ScheduleActivity sa = DEX__V1__SCHEDULE_ACTIVITY__INIT;
	Dex__V1__StartTimer st = DEX__V1__START_TIMER__INIT;
	Google__Protobuf__Duration delay = GOOGLE__PROTOBUF__DURATION__INIT;
	Dex__V1__CompleteRun cr = DEX__V1__COMPLETE_RUN__INIT;
	size_t		len;

	for (int pass = 0; pass < 2; pass++)
	{
		size_t		n = pass == 0 ? t->n_history : t->n_new_events;
		Dex__V1__WorkflowEvent **evs = pass == 0 ? t->history : t->new_events;

		for (size_t i = 0; i < n; i++)
		{
			Dex__V1__WorkflowEvent *ev = evs[i];

			switch (ev->subject_case)
			{
				case DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_CREATED:
					arg = ev->run_created->argument;
					break;
				case DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_CREATED:
					act_created = true;
					break;
				case DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_COMPLETED:
					act_done = true;
					act_result = ev->activity_task_completed->result;
					break;
				case DEX__V1__WORKFLOW_EVENT__SUBJECT_TIMER_CREATED:
					timer_created = true;
					elapse_at = pb_ts_us(ev->timer_created->elapse_at);
					break;
				case DEX__V1__WORKFLOW_EVENT__SUBJECT_TIMER_ELAPSED:
					timer_elapsed = true;
					break;
				case DEX__V1__WORKFLOW_EVENT__SUBJECT_WORKFLOW_TASK_STARTED:
					task_started = pb_ts_us(ev->timestamp);
					break;
				default:
					break;
			}
		}
	}

	e->idx = payload_long(arg);
	e->ends_run = false;
	comp.commands = cmds;
	comp.n_commands = 1;
	switch (wl->kind)
	{
		case WF_MINIMAL:
			e->ends_run = true;
			break;
		case WF_ACTIVITY:
			if (act_done)
			{
				e->ends_run = true;
				arg = act_result;
			}
			else if (!act_created)
			{
				cmd.id = 1;
				cmd.kind_case = DEX__V1__COMMAND__KIND_SCHEDULE_ACTIVITY;
				cmd.schedule_activity = &sa;
				sa.name = "inc";
				sa.queue = wl->act_queue;
				sa.argument = arg;
			}
			else
				comp.n_commands = 0;	/* a repeated task: nothing new to do */
			break;
		case WF_TIMER:
			if (timer_elapsed)
			{
				e->ends_run = true;
				if (e->idx >= 0 && e->idx < wl->n_runs)
				{
					wl->late_server_ms[e->idx] = (task_started - elapse_at) / 1000.0;
					wl->late_client_ms[e->idx] = (received_real - elapse_at) / 1000.0;
				}
			}
			else if (!timer_created)
			{
				cmd.id = 1;
				cmd.kind_case = DEX__V1__COMMAND__KIND_START_TIMER;
				cmd.start_timer = &st;
				st.name = "wait";
				delay.seconds = 1;
				st.delay = &delay;
			}
			else
				comp.n_commands = 0;
			break;
	}
	if (e->ends_run)
	{
		cmd.id = 0;
		cmd.kind_case = DEX__V1__COMMAND__KIND_COMPLETE_RUN;
		cmd.complete_run = &cr;
		cr.result = arg;
	}
	len = dex__v1__workflow_task_completion__get_packed_size(&comp);
	enc->len = 0;
	buf_reserve(enc, len);
	enc->len = dex__v1__workflow_task_completion__pack(&comp, (uint8_t *) enc->p);
}

/* The activity code: "inc" returns its argument + 1 */
static void
activity_code(const Dex__V1__ActivityTask *t, Buf *enc)
{
	Dex__V1__Payload out = DEX__V1__PAYLOAD__INIT;
	char		num[32];
	size_t		len;

	snprintf(num, sizeof(num), "%ld", payload_long(t->argument) + 1);
	out.content_case = DEX__V1__PAYLOAD__CONTENT_JSON;
	out.json = num;
	len = dex__v1__payload__get_packed_size(&out);
	enc->len = 0;
	buf_reserve(enc, len);
	enc->len = dex__v1__payload__pack(&out, (uint8_t *) enc->p);
}

/*
 * One leased task: its encoded message and, from a poll_tasks_pb row, its
 * run id (16 bytes), task id and lock version; poll_tasks_wait_pb returns
 * only the messages, which carry them too.
 */
typedef struct TaskIn
{
	const uint8_t *msg;
	size_t		len;
	bool		ids_known;
	const char *run_id;
	uint32_t	task_id;
	uint64_t	lv;
} TaskIn;

/* The tasks of a poll_tasks_pb result (binary rows): one TaskIn per row */
static int
tasks_of_poll(PGresult *poll, TaskIn *out)
{
	int			n = PQntuples(poll);

	if (n > MAX_BATCH)
		die("a poll returned %d tasks", n);
	for (int i = 0; i < n; i++)
	{
		out[i].run_id = PQgetvalue(poll, i, 0);
		out[i].task_id = get_u32(PQgetvalue(poll, i, 1));
		out[i].lv = get_u64(PQgetvalue(poll, i, 2));
		out[i].msg = (const uint8_t *) PQgetvalue(poll, i, 3);
		out[i].len = (size_t) PQgetlength(poll, i, 3);
		out[i].ids_known = true;
	}
	return n;
}

/*
 * The tasks of a CALL dex.poll_tasks_wait_pb result: one row, its bytea[] in
 * binary (array_send: ndim, has-nulls flag, element type, then per dimension
 * its size and lower bound, then per element its length and bytes).
 */
static int
tasks_of_call(PGresult *res, TaskIn *out)
{
	const char *p = PQgetvalue(res, 0, 0);
	int			len = PQgetlength(res, 0, 0);
	const char *end = p + len;
	uint32_t	ndim,
				n;

	if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0) || len < 12)
		die("poll_tasks_wait_pb returned no array");
	ndim = get_u32(p);
	if (ndim == 0)
		return 0;
	if (ndim != 1 || len < 20)
		die("poll_tasks_wait_pb returned an array of %u dimensions", ndim);
	n = get_u32(p + 12);
	if (n > MAX_BATCH)
		die("poll_tasks_wait_pb returned %u tasks", n);
	p += 20;
	for (uint32_t i = 0; i < n; i++)
	{
		int32_t		elen;

		if (p + 4 > end)
			die("poll_tasks_wait_pb: truncated array");
		elen = (int32_t) get_u32(p);
		p += 4;
		if (elen < 0 || p + elen > end)
			die("poll_tasks_wait_pb: a null or truncated task");
		out[i].msg = (const uint8_t *) p;
		out[i].len = (size_t) elen;
		out[i].ids_known = false;
		p += elen;
	}
	return (int) n;
}

static int
hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* a UUID's text form to its 16 bytes */
static void
parse_uuid(const char *s, unsigned char *out)
{
	int			n = 0;

	for (const char *c = s; *c; c++)
	{
		int			v;

		if (*c == '-')
			continue;
		v = hex_value(*c);
		if (v < 0 || n >= 32)
			die("bad run id \"%s\" in a task message", s);
		if (n % 2 == 0)
			out[n / 2] = (unsigned char) (v << 4);
		else
			out[n / 2] |= (unsigned char) v;
		n++;
	}
	if (n != 32)
		die("bad run id \"%s\" in a task message", s);
}

/* Run the code of one polled task and add its completion to the batch */
static void
batch_add(Worker *w, const TaskIn *in, int64_t received_real)
{
	unsigned char run_id[16];
	uint32_t	task_id = in->task_id;
	uint64_t	lv = in->lv;
	Entry	   *e = &w->ent[w->n];
	uint32_t	be;

	if (in->ids_known)
		memcpy(run_id, in->run_id, 16);
	if (w->is_wf)
	{
		Dex__V1__WorkflowTask *t = dex__v1__workflow_task__unpack(NULL, in->len, in->msg);

		if (!t)
			die("cannot decode a WorkflowTask");
		if (!in->ids_known)
		{
			parse_uuid(t->run_id, run_id);
			task_id = 0;
			lv = (uint64_t) t->lock_version;
		}
		/*
		 * A task of a run that has started shows the event that made it
		 * (activity completed, timer elapsed) after workflowTaskStarted.
		 */
		if (t->n_history > 0 && t->n_new_events < 2)
			w->blind_tasks++;
		workflow_code(w, t, received_real, &w->enc, e);
		dex__v1__workflow_task__free_unpacked(t, NULL);
	}
	else
	{
		Dex__V1__ActivityTask *t = dex__v1__activity_task__unpack(NULL, in->len, in->msg);

		if (!t)
			die("cannot decode an ActivityTask");
		if (!in->ids_known)
		{
			parse_uuid(t->run_id, run_id);
			task_id = (uint32_t) t->task_id;
			lv = (uint64_t) t->lock_version;
		}
		activity_code(t, &w->enc);
		e->ends_run = false;
		e->idx = -1;
		dex__v1__activity_task__free_unpacked(t, NULL);
	}
	memcpy(w->run_ids[w->n], run_id, 16);
	w->task_ids[w->n] = (int32_t) task_id;
	arr_elem(&w->a_run, run_id, 16);
	be = htonl(task_id);
	arr_elem(&w->a_task, &be, 4);
	buf_u32(&w->a_lv.b, 8);
	buf_u64(&w->a_lv.b, lv);
	w->a_lv.n++;
	arr_elem(&w->a_res, w->enc.p, (uint32_t) w->enc.len);
	w->n++;
	w->tasks++;
}

static void
run_completed(Workload *wl, const Entry *e, int64_t now)
{
	long		done = atomic_fetch_add(&wl->completed, 1) + 1;

	if (wl->latency_ms && e->idx >= 0 && e->idx < wl->n_runs)
	{
		int64_t		c = atomic_load(&wl->created_us[e->idx]);

		if (c > 0)
			wl->latency_ms[e->idx] = (now - c) / 1000.0;
	}
	if (done >= wl->n_runs)
	{
		int64_t		t = atomic_load(&wl->t_end);

		/* the latest completion (deferred ones are timed when they were sent) */
		while (now > t && !atomic_compare_exchange_weak(&wl->t_end, &t, now))
			;
		atomic_store(&wl->stop, 1);
	}
}

/*
 * The result of complete_tasks_pb: count what ended runs, and lost leases.
 * at: when the runs are taken to have completed (0: now).  redone: these
 * completions were sent before with a poll_tasks_wait_pb that a cancel cut
 * off, perhaps after it made them: a refusal then means they were made.
 */
static void
batch_done(Worker *w, PGresult *r, int64_t at, bool redone)
{
	int64_t		now = at ? at : mono_us();
	int			rows;

	if (PQresultStatus(r) != PGRES_TUPLES_OK)
	{
		if (atomic_load(&w->wl->stop))
			return;
		/* the batch is rolled back: its tasks stay leased until their leases expire */
		w->complete_errors++;
		snprintf(w->last_error, sizeof(w->last_error), "complete_tasks_pb: %s",
				 PQresultErrorMessage(r));
		fprintf(stderr, "%s: %s", w->id, w->last_error);
		return;
	}
	w->completes++;
	rows = PQntuples(r);
	if (rows != w->n)
		die("%s: complete_tasks_pb returned %d rows for %d tasks", w->id, rows, w->n);
	for (int i = 0; i < rows; i++)
	{
		const char *rid = PQgetvalue(r, i, 0);
		int32_t		tid = (int32_t) get_u32(PQgetvalue(r, i, 1));
		bool		ok = PQgetvalue(r, i, 2)[0] != 0;
		int			j = i;

		/* rows come in input order; look further if not */
		if (memcmp(w->run_ids[j], rid, 16) != 0 || w->task_ids[j] != tid)
			for (j = 0; j < w->n; j++)
				if (memcmp(w->run_ids[j], rid, 16) == 0 && w->task_ids[j] == tid)
					break;
		if (j == w->n)
			die("%s: complete_tasks_pb returned a task it was not given", w->id);
		if (!ok && !redone)
			w->lost++;
		else if (w->ent[j].ends_run)
			run_completed(w->wl, &w->ent[j], now);
	}
}

/*
 * The completions that went with a poll_tasks_wait_pb, from its result
 * (completed boolean[], column 1; binary, as tasks_of_call reads): a run that
 * ended is counted as completed when the call was sent.
 */
static void
batch_done_call(Worker *w, PGresult *res)
{
	const char *p = PQgetvalue(res, 0, 1);
	int			len = PQgetlength(res, 0, 1);
	uint32_t	n = 0;

	if (PQnfields(res) < 2 || PQgetisnull(res, 0, 1) || len < 12)
		die("%s: poll_tasks_wait_pb returned no completed array", w->id);
	if (get_u32(p) == 1 && len >= 20)
		n = get_u32(p + 12);
	if (n != (uint32_t) w->n || len != 20 + 5 * (int) n)
		die("%s: poll_tasks_wait_pb completed %u of %d tasks", w->id, n, w->n);
	w->completing_calls++;
	for (uint32_t i = 0; i < n; i++)
	{
		bool		ok = p[20 + 5 * i + 4] != 0;

		if (w->ent[i].ends_run)
			atomic_fetch_sub(&w->wl->deferred, 1);
		if (!ok)
			w->lost++;
		else if (w->ent[i].ends_run)
			run_completed(w->wl, &w->ent[i], w->deferred_at);
	}
	w->deferred = false;
}

/*
 * A poll_tasks_wait_pb with completions failed (refused, or cancelled when the
 * workload ends): make them with complete_tasks_pb, as the Python SDK does.
 */
static void
batch_redo(Worker *w)
{
	for (int tries = 0; tries < 10; tries++)
	{
		PGresult   *r;

		send_complete(w);
		PQpipelineSync(w->conn);
		r = pl_get(w->conn);
		if (r && PQresultStatus(r) == PGRES_TUPLES_OK)
		{
			for (int i = 0; i < w->n; i++)
				if (w->ent[i].ends_run)
					atomic_fetch_sub(&w->wl->deferred, 1);
			batch_done(w, r, w->deferred_at, true);
			PQclear(r);
			w->deferred = false;
			return;
		}
		/* a late cancel of the workload's end may cut this one off too */
		fprintf(stderr, "%s: completing apart: %s", w->id,
				r ? PQresultErrorMessage(r) : PQerrorMessage(w->conn));
		PQclear(r);
	}
	die("%s: could not complete %d tasks", w->id, w->n);
}

/*
 * A worker: poll up to poll_max tasks, run them and complete them all in one
 * call.  As the SDKs, it leases and waits in one call, CALL
 * dex.poll_tasks_wait_pb (bench_poll_wait), which also makes the completions
 * (bench_defer: see the comment in the loop), or completes apart, pipelined
 * with that call; without bench_defer, a full batch is followed by a plain
 * poll (there may be more).  BENCH_POLL_WAIT=0, or a dex without the
 * procedure: an empty poll is followed by CALL dex.wait_for_tasks and a poll
 * again.
 */
static void *
worker_main(void *arg)
{
	Worker	   *w = arg;
	Workload   *wl = w->wl;
	PGconn	   *c = w->conn;
	PGresult   *poll = NULL;
	bool		poll_is_call = false;	/* poll holds a poll_tasks_wait_pb result */
	bool		next_is_call = false;	/* idle: the next poll is a poll_tasks_wait_pb */
	int64_t		sent = 0;		/* when the pending poll_tasks_wait_pb was sent */
	TaskIn		in[MAX_BATCH];

	while (!atomic_load(&wl->go) && !atomic_load(&wl->stop))
		sleep_us(1000);
	if (!PQenterPipelineMode(c))
		die("pipeline mode: %s", PQerrorMessage(c));

	while (!atomic_load(&wl->stop))
	{
		int64_t		received;
		int			n;
		bool		full;

		if (poll == NULL)
		{
			sent = mono_us();
			if (next_is_call)
				send_poll_wait(w, wl->poll_max);
			else
				send_poll(w, wl->poll_max);
			PQpipelineSync(c);
			poll_is_call = next_is_call;
			poll = pl_get(c);
		}
		if (poll == NULL)
		{
			if (atomic_load(&wl->stop))
				break;
			die("%s: connection lost: %s", w->id, PQerrorMessage(c));
		}
		if (poll_is_call)
		{
			int64_t		t = mono_us();

			w->calls++;
			if (t - sent > w->wait_max_us)
			{
				w->wait_max_us = t - sent;
				w->wait_max_at = t;
			}
		}
		else
			w->polls++;
		if (PQresultStatus(poll) != PGRES_TUPLES_OK)
		{
			if (atomic_load(&wl->stop))
				break;
			/* as an SDK would: note it, and poll again */
			w->poll_errors++;
			snprintf(w->last_error, sizeof(w->last_error), "%s: %s",
					 poll_is_call ? "poll_tasks_wait_pb" : "poll_tasks_pb",
					 PQresultErrorMessage(poll));
			fprintf(stderr, "%s: %s", w->id, w->last_error);
			PQclear(poll);
			poll = NULL;
			next_is_call = false;
			continue;
		}
		received = real_us();
		n = poll_is_call ? tasks_of_call(poll, in) : tasks_of_poll(poll, in);
		if (n == 0)
		{
			PGresult   *r;

			if (poll_is_call)
				w->empty_calls++;
			else
				w->empty_polls++;
			PQclear(poll);
			poll = NULL;
			if (atomic_load(&wl->stop))
				break;
			if (bench_poll_wait)
			{
				next_is_call = true;
				continue;
			}
			{
				int64_t		t0 = mono_us(),
							t;

				send_wait(w);
				PQpipelineSync(c);
				r = pl_get(c);
				t = mono_us();
				w->waits++;
				if (r == NULL || PQresultStatus(r) != PGRES_TUPLES_OK)
				{
					if (!atomic_load(&wl->stop))
						die("%s: wait_for_tasks failed: %s", w->id,
							r ? PQresultErrorMessage(r) : PQerrorMessage(c));
				}
				else
				{
					if (strcmp(PQgetvalue(r, 0, 0), "f") == 0)
						w->wait_timeouts++;
					if (t - t0 > w->wait_max_us)
					{
						w->wait_max_us = t - t0;
						w->wait_max_at = t;
					}
				}
			}
			PQclear(r);
			continue;
		}

		full = n >= wl->poll_max;
		batch_reset(w);
		for (int i = 0; i < n; i++)
			batch_add(w, &in[i], received);
		PQclear(poll);				/* in[] points into it: after batch_add */

		/*
		 * Lease and wait in one call (it looks first: a full batch's next tasks
		 * come at once), which makes the completions first as the SDKs' workers
		 * do: a workflow poller's always, an activity poller's when the batch
		 * took all its slots (the SDKs hand an outcome to the poller when it
		 * waits for a slot, else to their reporter: complete_tasks, then the
		 * call, below).
		 */
		next_is_call = bench_poll_wait && (bench_defer || !full);
		if (next_is_call && bench_defer && (w->is_wf || full))
		{
			int			ends = 0;

			for (int i = 0; i < w->n; i++)
				ends += w->ent[i].ends_run;
			w->deferred = true;
			w->deferred_at = sent = mono_us();
			if (ends)
			{
				atomic_store(&wl->t_last_deferred, sent);
				atomic_fetch_add(&wl->deferred, ends);
			}
			send_poll_wait_completing(w, wl->poll_max);
			PQpipelineSync(c);
			poll_is_call = true;
			poll = pl_get(c);
			if (poll == NULL)
				die("%s: connection lost: %s", w->id, PQerrorMessage(c));
			if (PQresultStatus(poll) == PGRES_TUPLES_OK)
				batch_done_call(w, poll);
			else
			{
				/* refused (nothing was made), or cancelled at the workload's end */
				w->complete_errors += !atomic_load(&wl->stop);
				batch_redo(w);
			}
			continue;
		}
		send_complete(w);
		PQpipelineSync(c);
		sent = mono_us();
		if (next_is_call)
			send_poll_wait(w, wl->poll_max);
		else
			send_poll(w, wl->poll_max);
		PQpipelineSync(c);
		poll_is_call = next_is_call;
		{
			PGresult   *r = pl_get(c);

			if (r == NULL)
			{
				if (atomic_load(&wl->stop))
					break;
				die("%s: connection lost: %s", w->id, PQerrorMessage(c));
			}
			batch_done(w, r, 0, false);
			PQclear(r);
		}
		poll = pl_get(c);
	}
	PQclear(poll);
	atomic_store(&w->exited, 1);
	return NULL;
}

/* ------------------------------------------------------------------ workload plumbing */

typedef struct Run
{
	Workload	wl;
	Worker	   *workers;
	int			n_workers;
	PGconn	   *mon;
	PGconn	   *client;			/* creates runs */
	Stats		before;
	Stats		after;
	PGresult   *tables_before;
	int64_t		t_start;
	long		errors;			/* failed polls and completions */
	long		blind;			/* workflow tasks that showed no new event */
	double		tasks_per_call; /* tasks per poll or poll_tasks_wait_pb that had some */
	double		calls_per_run;	/* the workers' calls (polls, waits, completions) per run */
	char		last_error[256];
} Run;

/* per-table row counters, to show where a workload's writes go */
static PGresult *
tables_snapshot(PGconn *m)
{
	return mon(m, "SELECT relid, schemaname || '.' || relname, n_tup_ins, n_tup_upd, "
			   "n_tup_hot_upd, n_tup_del FROM pg_stat_all_tables");
}

typedef struct TabDelta
{
	const char *name;
	double		ins,
				upd,
				hot,
				del;
} TabDelta;

static int
cmp_tabdelta(const void *a, const void *b)
{
	const TabDelta *x = a,
			   *y = b;
	double		tx = x->ins + x->upd + x->del,
				ty = y->ins + y->upd + y->del;

	return tx < ty ? 1 : tx > ty ? -1 : strcmp(x->name, y->name);
}

static void
print_table_changes(PGresult *a, PGresult *b, double items)
{
	int			nb = PQntuples(b),
				n = 0;
	TabDelta   *t = xmalloc(sizeof(TabDelta) * (size_t) (nb + 1));

	for (int i = 0; i < nb; i++)
	{
		double		ins = atof(PQgetvalue(b, i, 2)),
					upd = atof(PQgetvalue(b, i, 3)),
					hot = atof(PQgetvalue(b, i, 4)),
					del = atof(PQgetvalue(b, i, 5));

		for (int j = 0; j < PQntuples(a); j++)
			if (strcmp(PQgetvalue(a, j, 0), PQgetvalue(b, i, 0)) == 0)
			{
				ins -= atof(PQgetvalue(a, j, 2));
				upd -= atof(PQgetvalue(a, j, 3));
				hot -= atof(PQgetvalue(a, j, 4));
				del -= atof(PQgetvalue(a, j, 5));
				break;
			}
		if (ins != 0 || upd != 0 || del != 0)
			t[n++] = (TabDelta) {PQgetvalue(b, i, 1), ins, upd, hot, del};
	}
	qsort(t, (size_t) n, sizeof(TabDelta), cmp_tabdelta);
	printf("  rows per item, by table (pg_stat_all_tables):\n");
	for (int i = 0; i < n; i++)
		printf("    %-40s ins %7.3f  upd %7.3f (hot %7.3f)  del %7.3f\n", t[i].name,
			   t[i].ins / items, t[i].upd / items, t[i].hot / items, t[i].del / items);
	free(t);
}

static void
measure_begin(PGconn *m, Run *run)
{
	stats_read(m, &run->before);
	run->tables_before = tables_snapshot(m);
}

/* settle, read the counters and print the per-table changes; the database's deltas */
static Delta
measure_end(PGconn *m, Run *run, double items)
{
	PGresult   *tables_after;
	Delta		d;

	stats_settle(m, &run->after);
	tables_after = tables_snapshot(m);
	d = stats_delta(m, &run->before, &run->after);
	print_table_changes(run->tables_before, tables_after, items > 0 ? items : 1);
	PQclear(run->tables_before);
	PQclear(tables_after);
	return d;
}

static int
scaled(int n, int min)
{
	int			v = (int) lround(n * bench_scale);

	return v < min ? min : v;
}

static void
setup_queues(PGconn *c, const char *wf, const char *act)
{
	char		sql[512];

	snprintf(sql, sizeof(sql),
			 "SELECT dex.create_queue('%s', 'workflow') WHERE NOT EXISTS "
			 "(SELECT FROM dex.queue WHERE name = '%s')", wf, wf);
	exec_void(c, sql);
	if (act)
	{
		snprintf(sql, sizeof(sql),
				 "SELECT dex.create_queue('%s', 'activity') WHERE NOT EXISTS "
				 "(SELECT FROM dex.queue WHERE name = '%s')", act, act);
		exec_void(c, sql);
	}
}

/*
 * Set up a workload: tag names its workflow and, in lower case, its queues
 * (tag-wf, tag-act); k_wf workflow and k_act activity workers, connected.
 */
static void
run_init(Run *run, PGconn *m, const char *tag, WfKind kind, int n_runs, int k_wf, int k_act,
		 int poll_max)
{
	Workload   *wl = &run->wl;
	char		lower[16];

	memset(run, 0, sizeof(*run));
	for (int i = 0; tag[i] && i < 15; i++)
		lower[i] = (char) tolower((unsigned char) tag[i]), lower[i + 1] = 0;
	wl->name = tag;
	wl->kind = kind;
	snprintf(wl->wf_queue, sizeof(wl->wf_queue), "%s-wf", lower);
	snprintf(wl->act_queue, sizeof(wl->act_queue), "%s-act", lower);
	wl->n_runs = n_runs;
	wl->poll_max = poll_max;
	wl->wait_timeout = "5min";	/* longer than W6: an idle worker sends nothing */
	wl->created_us = xmalloc(sizeof(atomic_llong) * (size_t) (n_runs + 1));
	run->mon = m;
	run->client = connect_db("dexbench client");
	setup_queues(run->client, wl->wf_queue, k_act > 0 ? wl->act_queue : NULL);
	exec_void(run->client, "SELECT pg_stat_force_next_flush()");

	run->n_workers = k_wf + k_act;
	run->workers = xmalloc(sizeof(Worker) * (size_t) run->n_workers);
	for (int i = 0; i < run->n_workers; i++)
	{
		Worker	   *w = &run->workers[i];

		w->wl = wl;
		w->is_wf = i < k_wf;
		w->queue = w->is_wf ? wl->wf_queue : wl->act_queue;
		snprintf(w->id, sizeof(w->id), "%s-%d", w->queue, w->is_wf ? i : i - k_wf);
		worker_connect(w);
	}
	PQclear(mon(m, "SELECT pg_stat_statements_reset()"));
	printf("%s: %d runs, %d workflow + %d activity workers, poll up to %d\n",
		   tag, n_runs, k_wf, k_act, wl->poll_max);
	fflush(stdout);
}

static void
run_start_workers(Run *run)
{
	for (int i = 0; i < run->n_workers; i++)
		if (pthread_create(&run->workers[i].thread, NULL, worker_main, &run->workers[i]) != 0)
			die("pthread_create failed");
}

/* What the server is doing when a workload is stuck */
static void
print_diagnostics(PGconn *m, const char *wf_queue)
{
	char		sql[1024];
	PGresult   *r;

	r = mon(m, "SELECT pid, coalesce(application_name, ''), coalesce(state, ''), "
			"coalesce(wait_event_type || '/' || wait_event, '-'), coalesce(backend_xmin::text, '-'), "
			"round(extract(epoch FROM clock_timestamp() - query_start)::numeric, 1), "
			"left(regexp_replace(query, '\\s+', ' ', 'g'), 100) "
			"FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
			"ORDER BY pid");
	printf("  sessions (pid, application, state, wait, xmin, seconds in query, query):\n");
	for (int i = 0; i < PQntuples(r); i++)
		printf("    %s | %s | %s | %s | %s | %s | %s\n", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
			   PQgetvalue(r, i, 2), PQgetvalue(r, i, 3), PQgetvalue(r, i, 4), PQgetvalue(r, i, 5),
			   PQgetvalue(r, i, 6));
	PQclear(r);
	r = mon(m, "SELECT pid, locktype, mode, coalesce(relation::regclass::text, ''), "
			"coalesce(transactionid::text, ''), pg_blocking_pids(pid)::text FROM pg_locks "
			"WHERE NOT granted");
	printf("  lock waits (pid, type, mode, relation, xid, blocked by):\n");
	for (int i = 0; i < PQntuples(r); i++)
		printf("    %s | %s | %s | %s | %s | %s\n", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
			   PQgetvalue(r, i, 2), PQgetvalue(r, i, 3), PQgetvalue(r, i, 4), PQgetvalue(r, i, 5));
	PQclear(r);
	snprintf(sql, sizeof(sql),
			 "SELECT r.id, r.status, r.history_length, "
			 "(SELECT count(*) FROM dex.workflow_task t WHERE t.run_id = r.id), "
			 "(SELECT string_agg(coalesce(t.locked_by, 'unleased') || ' until ' || "
			 "coalesce(t.locked_until::text, '-'), ', ') FROM dex.workflow_task t WHERE t.run_id = r.id), "
			 "(SELECT count(*) FROM dex.activity_task a WHERE a.run_id = r.id), "
			 "(SELECT count(*) FROM dex.workflow_inbox i WHERE i.run_id = r.id) "
			 "FROM dex.workflow_run r JOIN dex.queue q ON q.id = r.queue_id "
			 "WHERE q.name = '%s' AND r.status NOT IN ('COMPLETED', 'FAILED') LIMIT 5", wf_queue);
	r = mon(m, sql);
	printf("  unfinished runs (id, status, history length, workflow tasks, lease, activity tasks, inbox rows):\n");
	for (int i = 0; i < PQntuples(r); i++)
	{
		PGresult   *h;

		printf("    %s | %s | %s | %s | %s | %s | %s\n", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
			   PQgetvalue(r, i, 2), PQgetvalue(r, i, 3), PQgetvalue(r, i, 4), PQgetvalue(r, i, 5),
			   PQgetvalue(r, i, 6));
		snprintf(sql, sizeof(sql),
				 "SELECT string_agg(h.sequence || ' ' || k, ', ' ORDER BY h.sequence) "
				 "FROM dex.run_history('%s') h, "
				 "LATERAL jsonb_object_keys(h.event - 'id' - 'timestamp') k", PQgetvalue(r, i, 0));
		h = mon(m, sql);
		printf("      history: %s\n", PQgetvalue(h, 0, 0));
		PQclear(h);
	}
	PQclear(r);
}

/* Wait until every run completed or the deadline passed; stop and join the workers */
static bool
run_finish(Run *run, int64_t deadline)
{
	Workload   *wl = &run->wl;
	bool		ok = true;
	char		errbuf[256];

	while (!atomic_load(&wl->stop))
	{
		/*
		 * Completions that went with a poll_tasks_wait_pb are known only when
		 * it returns, which may be when it times out: once every run's last
		 * completion has been sent, the workload is over.
		 */
		if (atomic_load(&wl->completed) + atomic_load(&wl->deferred) >= wl->n_runs)
		{
			int64_t		t = atomic_load(&wl->t_last_deferred);

			if (t > atomic_load(&wl->t_end))
				atomic_store(&wl->t_end, t);
			atomic_store(&wl->stop, 1);
			break;
		}
		if (mono_us() > deadline)
		{
			printf("  TIMEOUT: %ld of %d runs completed\n", (long) atomic_load(&wl->completed),
				   wl->n_runs);
			print_diagnostics(run->mon, wl->wf_queue);
			atomic_store(&wl->t_end, mono_us());
			atomic_store(&wl->stop, 1);
			ok = false;
			break;
		}
		sleep_us(2000);
	}
	/*
	 * Waiters may sit in wait_for_tasks or poll_tasks_wait_pb: interrupt them,
	 * again until each has ended (a cancel may come before its call).
	 */
	for (;;)
	{
		int			running = 0;

		for (int i = 0; i < run->n_workers; i++)
			if (!atomic_load(&run->workers[i].exited))
			{
				PQcancel(run->workers[i].cancel, errbuf, sizeof(errbuf));
				running++;
			}
		if (running == 0)
			break;
		sleep_us(50000);
	}
	for (int i = 0; i < run->n_workers; i++)
	{
		Worker	   *w = &run->workers[i];

		pthread_join(w->thread, NULL);
		PQfreeCancel(w->cancel);
		PQfinish(w->conn);
	}
	return ok;
}

static void
print_worker_counters(Run *run)
{
	long		polls = 0,
				empty = 0,
				waits = 0,
				calls = 0,
				empty_calls = 0,
				completes = 0,
				completing = 0,
				tasks = 0,
				lost = 0,
				timeouts = 0,
				poll_errors = 0,
				complete_errors = 0,
				blind = 0;
	const char *last_error = NULL;
	int64_t		wait_max = 0,
				wait_max_at = 0;

	for (int i = 0; i < run->n_workers; i++)
	{
		Worker	   *w = &run->workers[i];

		polls += w->polls;
		empty += w->empty_polls;
		waits += w->waits;
		calls += w->calls;
		empty_calls += w->empty_calls;
		completes += w->completes;
		completing += w->completing_calls;
		tasks += w->tasks;
		lost += w->lost;
		timeouts += w->wait_timeouts;
		poll_errors += w->poll_errors;
		blind += w->blind_tasks;
		complete_errors += w->complete_errors;
		if (w->last_error[0])
			last_error = w->last_error;
		if (w->wait_max_us > wait_max)
		{
			wait_max = w->wait_max_us;
			wait_max_at = w->wait_max_at;
		}
	}
	run->tasks_per_call = polls + calls > empty + empty_calls ?
		(double) tasks / (double) (polls + calls - empty - empty_calls) : 0.0;
	run->calls_per_run = (double) (polls + calls + waits + completes) /
		(double) (run->wl.n_runs > 0 ? run->wl.n_runs : 1);
	printf("  workers: %ld polls (%ld empty), %ld poll_tasks_wait_pb calls (%ld timed out, %ld "
		   "with completions), %ld waits (%ld timed out), longest wait or poll_tasks_wait_pb %.1f "
		   "ms (ended %.2f s after the start), %ld complete_tasks_pb calls; %ld tasks (%.2f per "
		   "non-empty poll or call), %.2f calls per run, %ld lost leases\n",
		   polls, empty, calls, empty_calls, completing, waits, timeouts, wait_max / 1000.0,
		   wait_max_at ? (wait_max_at - run->t_start) / 1e6 : 0.0, completes, tasks,
		   run->tasks_per_call, run->calls_per_run, lost);
	if (blind)
		printf("  ANOMALY: %ld workflow tasks of started runs showed no new event but "
			   "workflowTaskStarted\n", blind);
	run->blind = blind;
	if (poll_errors || complete_errors)
		printf("  ERRORS: %ld polls and %ld completions failed; the last: %s", poll_errors,
			   complete_errors, last_error);
	run->errors = poll_errors + complete_errors;
	if (last_error)
		snprintf(run->last_error, sizeof(run->last_error), "%s", last_error);
}

static void
print_row(const char *name, double items, double secs, const Delta *d, const char *notes)
{
	double		it = items > 0 ? items : 1;

	printf("  %s: %.0f items in %.2f s = %.1f items/s; per item: %.2f xact, %.0f WAL bytes, "
		   "%.3f ms server CPU, %.2f ins, %.2f upd, %.2f del%s%.0f rollbacks\n",
		   name, items, secs, items / secs, d->commit / it, d->wal / it, d->cpu_ms / it,
		   d->ins / it, d->upd / it, d->del / it, "; ", d->rollback);
	printf("ROW|%s|%.0f|%.2f|%.1f|%.2f|%.0f|%.3f|%.2f|%.2f|%.2f|%s\n",
		   name, items, secs, items / secs, d->commit / it, d->wal / it, d->cpu_ms / it,
		   d->ins / it, d->upd / it, d->del / it, notes);
	fflush(stdout);
}

/* "; 3 failed calls (last: ...)" at the end of a row's notes */
static void
append_errors(const Run *run, char *notes, size_t len)
{
	size_t		l = strlen(notes);
	char		msg[256];
	char	   *nl;

	if (run->blind)
	{
		snprintf(notes + l, len - l, "; %ld TASKS SHOWED NO NEW EVENT", run->blind);
		l = strlen(notes);
	}
	if (run->errors == 0)
		return;
	snprintf(msg, sizeof(msg), "%s", run->last_error);
	while ((nl = strpbrk(msg, "\n|")) != NULL)
		*nl = ' ';
	snprintf(notes + l, len - l, "; %ld FAILED CALLS (last: %s)", run->errors, msg);
}

/* Check the runs of a queue: all COMPLETED, with the expected result */
static void
check_runs(PGconn *m, const char *queue, const char *expected_sql, int n, char *out, size_t outlen)
{
	char		sql[1024];
	PGresult   *r;
	long		total,
				completed,
				correct;

	snprintf(sql, sizeof(sql),
			 "SELECT count(*), count(*) FILTER (WHERE status = 'COMPLETED'), "
			 "count(*) FILTER (WHERE status = 'COMPLETED' AND result = %s) "
			 "FROM dex.runs WHERE queue = '%s'", expected_sql, queue);
	r = mon(m, sql);
	total = atol(PQgetvalue(r, 0, 0));
	completed = atol(PQgetvalue(r, 0, 1));
	correct = atol(PQgetvalue(r, 0, 2));
	PQclear(r);
	if (total == n && completed == n && correct == n)
		snprintf(out, outlen, "check ok: %ld/%d completed, results right", correct, n);
	else
		snprintf(out, outlen, "CHECK FAILED: %ld runs, %ld completed, %ld right, %d expected",
				 total, completed, correct, n);
	printf("  %s\n", out);
}

/* Create n runs of the workload's queue with create_runs, arguments first..first+n-1 */
static void
create_runs_batch(PGconn *c, const char *wf_name, const char *queue, long first, int n)
{
	char		sql[512];

	snprintf(sql, sizeof(sql),
			 "SELECT count(*) FROM dex.create_runs('%s', '%s', "
			 "(SELECT array_agg(to_jsonb(i) ORDER BY i) FROM generate_series(%ld, %ld) i))",
			 wf_name, queue, first, first + n - 1);
	exec_void(c, sql);
}

/* ------------------------------------------------------------------ W1, W2: throughput */

/*
 * Runs created up front (create_runs of 1,000), then k_wf workflow and k_act
 * activity workers polling up to poll_max tasks: W1, W2, W8.
 */
static void
workload_throughput(PGconn *m, const char *name, const char *tag, WfKind kind, int n_runs,
					int k_wf, int k_act, int poll_max, int deadline_s)
{
	Run			run;
	int64_t		t_created;
	const int	create_batch = 1000;
	char		check[256],
				notes[768];
	double		secs;
	Delta		d;

	run_init(&run, m, tag, kind, n_runs, k_wf, k_act, poll_max);
	measure_begin(m, &run);
	run.t_start = mono_us();
	for (long i = 0; i < n_runs; i += create_batch)
		create_runs_batch(run.client, tag, run.wl.wf_queue, i,
						  (int) (n_runs - i < create_batch ? n_runs - i : create_batch));
	t_created = mono_us();
	run_start_workers(&run);
	atomic_store(&run.wl.go, 1);
	run_finish(&run, t_created + deadline_s * 1000000LL);
	secs = (atomic_load(&run.wl.t_end) - run.t_start) / 1e6;
	PQfinish(run.client);		/* a backend flushes its statistics when it exits */
	d = measure_end(m, &run, n_runs);
	print_top_statements(m, 10);
	print_statement_counts(m, n_runs);
	print_worker_counters(&run);
	check_runs(m, run.wl.wf_queue,
			   kind == WF_ACTIVITY ? "to_jsonb((argument #>> '{}')::bigint + 1)" : "argument",
			   n_runs, check, sizeof(check));
	snprintf(notes, sizeof(notes), "%d workflow + %d activity workers polling up to %d; "
			 "create %.0f runs/s, then process %.0f runs/s; %.2f tasks per poll, %.2f worker "
			 "calls per run; %s", k_wf, k_act, poll_max,
			 n_runs / ((t_created - run.t_start) / 1e6),
			 n_runs / ((atomic_load(&run.wl.t_end) - t_created) / 1e6), run.tasks_per_call,
			 run.calls_per_run, check);
	append_errors(&run, notes, sizeof(notes));
	print_row(name, n_runs, secs, &d, notes);
}

/* ------------------------------------------------------------------ W3, W4: paced runs */

/*
 * Runs created one at a time at a steady rate, k workers per queue: W3 (timer
 * workflows), W4 (one-activity workflows).
 */
static void
workload_paced(PGconn *m, const char *name, const char *tag, WfKind kind, int n_runs,
			   double rate, int k)
{
	Run			run;
	Workload   *wl;
	PGresult   *r;
	char		check[256],
				notes[768];
	double		secs;
	Delta		d;
	int64_t		t0,
				interval = (int64_t) (1e6 / rate);

	run_init(&run, m, tag, kind, n_runs, k, kind == WF_ACTIVITY ? k : 0, bench_batch);
	wl = &run.wl;
	if (kind == WF_TIMER)
	{
		wl->late_server_ms = xmalloc(sizeof(double) * (size_t) n_runs);
		wl->late_client_ms = xmalloc(sizeof(double) * (size_t) n_runs);
	}
	wl->latency_ms = xmalloc(sizeof(double) * (size_t) n_runs);
	prepare(run.client, "create", "SELECT dex.create_run($1, $2, $3::jsonb)");
	measure_begin(m, &run);
	run_start_workers(&run);
	atomic_store(&wl->go, 1);
	sleep_us(200000);			/* let the workers reach their first wait */
	run.t_start = t0 = mono_us();
	for (long i = 0; i < n_runs; i++)
	{
		char		arg[32];
		const char *p[3] = {tag, wl->wf_queue, arg};

		sleep_us(t0 + i * interval - mono_us());
		snprintf(arg, sizeof(arg), "%ld", i);
		atomic_store(&wl->created_us[i], mono_us());
		r = PQexecPrepared(run.client, "create", 3, p, NULL, NULL, 0);
		if (PQresultStatus(r) != PGRES_TUPLES_OK)
			die("create_run: %s", PQerrorMessage(run.client));
		PQclear(r);
	}
	run_finish(&run, mono_us() + 30 * 1000000LL);
	secs = (atomic_load(&wl->t_end) - run.t_start) / 1e6;
	PQfinish(run.client);		/* a backend flushes its statistics when it exits */
	d = measure_end(m, &run, n_runs);
	print_top_statements(m, 10);
	print_statement_counts(m, n_runs);
	print_worker_counters(&run);
	check_runs(m, wl->wf_queue,
			   kind == WF_ACTIVITY ? "to_jsonb((argument #>> '{}')::bigint + 1)" : "argument",
			   n_runs, check, sizeof(check));
	qsort(wl->latency_ms, (size_t) n_runs, sizeof(double), cmp_double);
	if (kind == WF_TIMER)
	{
		/* a run's total lateness: its end to end time less the timer's 1 s */
		for (int i = 0; i < n_runs; i++)
			wl->latency_ms[i] -= 1000.0;
		qsort(wl->late_server_ms, (size_t) n_runs, sizeof(double), cmp_double);
		qsort(wl->late_client_ms, (size_t) n_runs, sizeof(double), cmp_double);
		snprintf(notes, sizeof(notes),
				 "%d worker%s per queue; timer lateness (task started - elapseAt) p50 %.1f / p99 "
				 "%.1f / max %.1f ms; (received - elapseAt) p50 %.1f / p99 %.1f / max %.1f ms; "
				 "run's total lateness (end to end - 1 s) p50 %.1f / p99 %.1f / max %.1f ms; "
				 "%.2f tasks per poll, %.2f worker calls per run; %s", k, k == 1 ? "" : "s",
				 pct(wl->late_server_ms, n_runs, 0.5), pct(wl->late_server_ms, n_runs, 0.99),
				 wl->late_server_ms[n_runs - 1],
				 pct(wl->late_client_ms, n_runs, 0.5), pct(wl->late_client_ms, n_runs, 0.99),
				 wl->late_client_ms[n_runs - 1],
				 pct(wl->latency_ms, n_runs, 0.5), pct(wl->latency_ms, n_runs, 0.99),
				 wl->latency_ms[n_runs - 1], run.tasks_per_call, run.calls_per_run, check);
	}
	else
		snprintf(notes, sizeof(notes),
				 "%d worker%s per queue; end-to-end latency p50 %.1f / p99 %.1f / max %.1f ms at "
				 "%.0f runs/s; %.2f tasks per poll, %.2f worker calls per run; %s", k,
				 k == 1 ? "" : "s",
				 pct(wl->latency_ms, n_runs, 0.5), pct(wl->latency_ms, n_runs, 0.99),
				 wl->latency_ms[n_runs - 1], rate, run.tasks_per_call, run.calls_per_run, check);
	append_errors(&run, notes, sizeof(notes));
	printf("  %s\n", notes);
	print_row(name, n_runs, secs, &d, notes);
}

/* ------------------------------------------------------------------ W5: backlog */

static const char *SCHED_FILTER =
"toplevel AND (query LIKE '%FROM dex.lease%' OR query LIKE '%dex.workflow_inbox%' "
"OR query LIKE '%dex.activity_task%' OR query LIKE '%dex.workflow_task%')";

static void
workload_backlog(PGconn *m)
{
	const int	base_levels[3] = {1000, 100000, 1000000};
	int			max_level = (int) env_double("BENCH_W5_MAX", 1000000);
	int			samples = scaled(2000, 100);
	Run			run;
	Worker	   *w;
	long		pending = 0;
	double	   *t_poll = xmalloc(sizeof(double) * (size_t) samples);
	double	   *t_comp = xmalloc(sizeof(double) * (size_t) samples);
	double	   *t_both = xmalloc(sizeof(double) * (size_t) samples);

	run_init(&run, m, "W5", WF_MINIMAL, samples, 1, 0, 1);
	w = &run.workers[0];
	for (int lv = 0; lv < 3; lv++)
	{
		int			level = scaled(base_levels[lv], 100);
		char		name[32],
					notes[768],
					nbuf[16];
		int64_t		t0,
					t1;
		double		create_rate = 0,
					secs,
					passes,
					sched_ms;
		Delta		d;
		PGresult   *r;

		if (base_levels[lv] > max_level)
		{
			printf("W5: backlog %d skipped (BENCH_W5_MAX=%d)\n", level, max_level);
			continue;
		}
		snprintf(name, sizeof(name), "W5 %s", lv == 0 ? "1k" : lv == 1 ? "100k" : "1M");
		if (level != base_levels[lv])
			snprintf(name, sizeof(name), "W5 %d", level);

		/* fresh connections each level: closed before the counters are read */
		if (w->conn == NULL)
		{
			run.client = connect_db("dexbench client");
			worker_connect(w);
		}
		prepare(run.client, "more", "SELECT count(*) FROM dex.create_runs('W5', 'w5-wf', "
				"array_fill('0'::jsonb, ARRAY[$1::int]))");

		/* fill the queue up to the level, 10,000 runs per call */
		t0 = mono_us();
		while (pending < level)
		{
			int			n = level - pending > 10000 ? 10000 : (int) (level - pending);
			const char *p[1] = {nbuf};

			snprintf(nbuf, sizeof(nbuf), "%d", n);
			r = PQexecPrepared(run.client, "more", 1, p, NULL, NULL, 0);
			if (PQresultStatus(r) != PGRES_TUPLES_OK)
				die("create_runs: %s", PQerrorMessage(run.client));
			PQclear(r);
			pending += n;
		}
		t1 = mono_us();
		/* flush the filling's statistics now: they are not the samples' */
		exec_void(run.client, "SELECT pg_stat_force_next_flush()");
		if (t1 - t0 > 1000)
			create_rate = (double) (level - (lv == 0 ? 0 : scaled(base_levels[lv - 1], 100))) /
				((t1 - t0) / 1e6);
		printf("%s: %ld runs pending (created at %.0f runs/s)\n", name, pending, create_rate);
		fflush(stdout);

		PQclear(mon(m, "SELECT pg_stat_statements_reset()"));
		measure_begin(m, &run);
		run.t_start = mono_us();
		for (int s = 0; s < samples; s++)
		{
			int64_t		a,
						b,
						c;
			PGresult   *poll;
			TaskIn		in;

			a = mono_us();
			send_poll(w, 1);
			poll = PQgetResult(w->conn);
			if (PQresultStatus(poll) != PGRES_TUPLES_OK || PQntuples(poll) != 1)
				die("W5 poll: %s (%d rows)", PQresultErrorMessage(poll), PQntuples(poll));
			while ((r = PQgetResult(w->conn)) != NULL)
				PQclear(r);
			b = mono_us();
			batch_reset(w);
			tasks_of_poll(poll, &in);
			batch_add(w, &in, real_us());
			PQclear(poll);
			send_complete(w);
			r = PQgetResult(w->conn);
			{
				PGresult   *x;

				while ((x = PQgetResult(w->conn)) != NULL)
					PQclear(x);
			}
			if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 ||
				PQgetvalue(r, 0, 2)[0] == 0)
				die("W5 complete: %s", PQresultErrorMessage(r));
			PQclear(r);
			c = mono_us();
			t_poll[s] = (b - a) / 1000.0;
			t_comp[s] = (c - b) / 1000.0;
			t_both[s] = (c - a) / 1000.0;
			/* keep the backlog at its level (not timed) */
			{
				const char *p[1] = {"1"};

				r = PQexecPrepared(run.client, "more", 1, p, NULL, NULL, 0);
				if (PQresultStatus(r) != PGRES_TUPLES_OK)
					die("create_runs: %s", PQerrorMessage(run.client));
				PQclear(r);
			}
		}
		secs = (mono_us() - run.t_start) / 1e6;
		PQfinish(run.client);
		PQfinish(w->conn);
		PQfreeCancel(w->cancel);
		w->conn = NULL;
		d = measure_end(m, &run, samples);
		print_top_statements(m, 8);

		/* the scheduler's passes: wake it 20 times, time its statements */
		PQclear(mon(m, "SELECT pg_stat_statements_reset()"));
		for (int i = 0; i < 20; i++)
		{
			PQclear(mon(m, "SELECT dex.wake_scheduler()"));
			sleep_us(50000);
		}
		sleep_us(200000);
		{
			char		sql[1024];

			snprintf(sql, sizeof(sql),
					 "SELECT coalesce(sum(calls) FILTER (WHERE query LIKE '%%FROM dex.lease%%'), 0), "
					 "coalesce(sum(total_exec_time), 0) FROM pg_stat_statements WHERE %s",
					 SCHED_FILTER);
			r = mon(m, sql);
			passes = atof(PQgetvalue(r, 0, 0));
			sched_ms = atof(PQgetvalue(r, 0, 1));
			PQclear(r);
		}

		qsort(t_poll, (size_t) samples, sizeof(double), cmp_double);
		qsort(t_comp, (size_t) samples, sizeof(double), cmp_double);
		qsort(t_both, (size_t) samples, sizeof(double), cmp_double);
		snprintf(notes, sizeof(notes),
				 "poll p50 %.2f / p99 %.2f ms, complete p50 %.2f / p99 %.2f ms, "
				 "both p50 %.2f / p99 %.2f ms; scheduler %.0f passes, %.2f ms/pass; "
				 "backlog filled at %.0f runs/s",
				 pct(t_poll, samples, 0.5), pct(t_poll, samples, 0.99),
				 pct(t_comp, samples, 0.5), pct(t_comp, samples, 0.99),
				 pct(t_both, samples, 0.5), pct(t_both, samples, 0.99),
				 passes, passes > 0 ? sched_ms / passes : 0.0, create_rate);
		printf("  %s\n", notes);
		print_row(name, samples, secs, &d, notes);
	}
}

/* ------------------------------------------------------------------ W6: idle */

/* utime + stime (clock ticks) of the postmaster and its children, live and reaped */
static long long
server_cpu_ticks(int postmaster)
{
	DIR		   *d = opendir("/proc");
	struct dirent *de;
	long long	total = 0;

	if (!d)
		die("cannot open /proc");
	while ((de = readdir(d)) != NULL)
	{
		char		path[64],
					buf[1024],
				   *p;
		FILE	   *f;
		size_t		n;
		int			pid = atoi(de->d_name),
					ppid;
		unsigned long long ut,
					st,
					cut,
					cst;

		if (pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/stat", pid);
		if (!(f = fopen(path, "r")))
			continue;
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = 0;
		if (!(p = strrchr(buf, ')')))
			continue;
		/*
		 * fields from 3 on: state ppid pgrp session tty tpgid flags minflt
		 * cminflt majflt cmajflt utime stime cutime cstime.  The postmaster's
		 * cutime and cstime hold the CPU of the children it has reaped, so
		 * backends that ended between two reads are counted too.
		 */
		if (sscanf(p + 2, "%*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu",
				   &ppid, &ut, &st, &cut, &cst) != 5)
			continue;
		if (pid == postmaster)
			total += (long long) (ut + st + cut + cst);
		else if (ppid == postmaster)
			total += (long long) (ut + st);
	}
	closedir(d);
	return total;
}

static int
postmaster_pid(PGconn *m)
{
	int			backend = (int) mon_double(m, "SELECT pg_backend_pid()");
	char		path[64],
				buf[1024],
			   *p;
	FILE	   *f;
	size_t		n;
	int			ppid = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", backend);
	if (!(f = fopen(path, "r")))
		die("cannot read %s (is the server on this machine?)", path);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	if (!(p = strrchr(buf, ')')) || sscanf(p + 2, "%*c %d", &ppid) != 1)
		die("cannot parse %s", path);
	return ppid;
}

static void
workload_idle(PGconn *m)
{
	int			n_workers = 8;
	int			secs_total = scaled(60, 5);
	Run			run;
	int			pm = postmaster_pid(m);
	long long	cpu0,
				cpu1;
	double		top0,
				top1,
				nested0,
				nested1,
				client0,
				client1,
				t0,
				t1,
				secs;
	char		pids[256] = "",
				sql[1024],
				notes[768];
	int			samples = 0,
				xmin_nonnull = 0,
				xmin_rows = 0;
	char		states[256] = "";
	long		calls_driver0 = 0,
				calls_driver1 = 0;
	Delta		d;
	const char *count_sql =
		"SELECT coalesce(sum(calls) FILTER (WHERE toplevel AND query NOT LIKE '%%pg_stat%%' "
		"AND query NOT LIKE '%%pg_backend_pid%%'), 0), "
		"coalesce(sum(calls) FILTER (WHERE NOT toplevel), 0), "
		"coalesce(sum(calls) FILTER (WHERE toplevel AND (query LIKE '%%poll_tasks_pb%%' OR "
		"query LIKE '%%wait_for_tasks%%' OR query LIKE '%%poll_tasks_wait_pb%%')), 0), extract(epoch FROM clock_timestamp()) "
		"FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())";

	run_init(&run, m, "W6", WF_MINIMAL, 1, n_workers / 2, n_workers / 2, bench_batch);
	for (int i = 0; i < run.n_workers; i++)
	{
		size_t		l = strlen(pids);

		snprintf(pids + l, sizeof(pids) - l, "%s%d", i ? "," : "", run.workers[i].backend_pid);
	}
	run_start_workers(&run);
	atomic_store(&run.wl.go, 1);
	sleep_us(2000000);			/* let them settle into their waits */

	measure_begin(m, &run);
	cpu0 = server_cpu_ticks(pm);
	{
		PGresult   *r = mon(m, count_sql);

		top0 = atof(PQgetvalue(r, 0, 0));
		nested0 = atof(PQgetvalue(r, 0, 1));
		client0 = atof(PQgetvalue(r, 0, 2));
		t0 = atof(PQgetvalue(r, 0, 3));
		PQclear(r);
	}
	for (int i = 0; i < run.n_workers; i++)
		calls_driver0 += run.workers[i].polls + run.workers[i].waits + run.workers[i].calls;
	run.t_start = mono_us();

	/* sample the waiting sessions' backend_xmin six times */
	for (int s = 0; s < 6; s++)
	{
		PGresult   *r;

		sleep_us((int64_t) secs_total * 1000000 / 6 - 20000);
		snprintf(sql, sizeof(sql),
				 "SELECT count(*), count(backend_xmin), count(backend_xid), "
				 "string_agg(DISTINCT state || '/' || coalesce(wait_event, '-'), ' ') "
				 "FROM pg_stat_activity WHERE pid IN (%s)", pids);
		r = mon(m, sql);
		xmin_rows += atoi(PQgetvalue(r, 0, 0));
		xmin_nonnull += atoi(PQgetvalue(r, 0, 1));
		if (s == 0)
			snprintf(states, sizeof(states), "%s", PQgetvalue(r, 0, 3));
		samples++;
		PQclear(r);
	}
	{
		PGresult   *r = mon(m, count_sql);

		top1 = atof(PQgetvalue(r, 0, 0));
		nested1 = atof(PQgetvalue(r, 0, 1));
		client1 = atof(PQgetvalue(r, 0, 2));
		t1 = atof(PQgetvalue(r, 0, 3));
		PQclear(r);
	}
	cpu1 = server_cpu_ticks(pm);
	for (int i = 0; i < run.n_workers; i++)
		calls_driver1 += run.workers[i].polls + run.workers[i].waits + run.workers[i].calls;
	secs = t1 - t0;
	atomic_store(&run.wl.stop, 1);
	run_finish(&run, mono_us());	/* cancels the waits: a rollback each */
	PQfinish(run.client);
	d = measure_end(m, &run, secs);

	{
		double		cpu_pct = 100.0 * (double) (cpu1 - cpu0) / (double) sysconf(_SC_CLK_TCK) / secs;

		snprintf(notes, sizeof(notes),
				 "%d workers waiting in %s: %.2f stmts/s from clients (polls and waits), %.2f "
				 "other top-level stmts/s, %.2f nested stmts/s, driver counted %.2f calls/s; server "
				 "CPU %.2f%% of one core; backend_xmin non-null in %d of %d samples (%s)",
				 n_workers, bench_poll_wait ? "poll_tasks_wait_pb" : "wait_for_tasks",
				 (client1 - client0) / secs,
				 (top1 - top0 - (client1 - client0)) / secs,
				 (nested1 - nested0) / secs,
				 (double) (calls_driver1 - calls_driver0) / secs, cpu_pct,
				 xmin_nonnull, xmin_rows, states);
	}
	printf("  %s\n", notes);
	print_top_statements(m, 8);
	/* per item = per second of idling */
	print_row("W6", secs, secs, &d, notes);
}

/* ------------------------------------------------------------------ W7: a long workflow */

/*
 * One run of n_steps sequential activities, driven by one connection that is
 * both its workflow worker and its activity worker, one task per call and no
 * pipelining, so that each workflow-task poll is timed alone.  Each workflow
 * task must know how many activities have completed: with the worker's cache
 * (worker_cache => true) the task leaves out the history this worker's
 * previous task was shown (history_omitted events) and its history is that
 * task's batch, checked against what the worker did; the worker keeps its
 * own counters per run (the "state").  With full histories it counts the
 * events.
 */

#define W7_LEVELS 4				/* sampled at 10, 1,000, 10,000 events and at the run's end */
#define W7_WINDOW 60			/* workflow tasks sampled at each */

static const int w7_levels[W7_LEVELS - 1] = {10, 1000, 10000};

/* The worker's cache of run states: W7 has one run, so it holds one */
typedef struct LongState
{
	bool		valid;
	char		run_id[40];
	long		n_steps;		/* the run's argument: activities to run */
	long		created;		/* activities scheduled */
	long		completed;		/* activities completed */
	int			shown;			/* history_length of the task it completed last */
	bool		scheduled_last; /* that task scheduled an activity */
} LongState;

/* one workflow task, as measured */
typedef struct LongTask
{
	int			history_length;
	int			bytes;
	double		poll_ms;
	bool		omitted;		/* the task left out the history (history_omitted > 0) */
} LongTask;

typedef struct LongRun
{
	PGconn	   *c;
	const char *tag;
	char		wf_queue[32];
	char		act_queue[32];
	bool		use_cache;
	LongState	state;
	/* counters */
	long		wf_tasks;
	long		repeated;		/* workflow tasks that had nothing to do */
	long		cache_hits;
	long		history_fetches;	/* dex.run_history_pb calls: cache misses */
	long		state_mismatches;	/* an activity's result disagreed with the state */
	long		poll_misses;	/* polls that found no task: it waited */
	long		lost;
	/* where the time goes, microseconds */
	int64_t		wf_poll_us;		/* workflow-task polls */
	int64_t		wf_code_us;		/* decoding them, counting, encoding the commands */
	int64_t		wf_complete_us; /* completing them */
	int64_t		act_us;			/* activity tasks: poll, run, complete */
} LongRun;

static int32_t
task_history_omitted(const Dex__V1__WorkflowTask *t)
{
#if DEX_HAVE_HISTORY_OMITTED
	return t->history_omitted;
#else
	(void) t;
	return 0;
#endif
}

/* Count what a list of events tells of the run into st */
static void
long_count(LongState *st, Dex__V1__WorkflowEvent **evs, size_t n, bool count_created, LongRun *lr)
{
	for (size_t i = 0; i < n; i++)
	{
		Dex__V1__WorkflowEvent *ev = evs[i];

		switch (ev->subject_case)
		{
			case DEX__V1__WORKFLOW_EVENT__SUBJECT_RUN_CREATED:
				st->n_steps = payload_long(ev->run_created->argument);
				break;
			case DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_CREATED:
				if (count_created)
					st->created++;
				break;
			case DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_COMPLETED:
				st->completed++;
				/* activity k (from 0) returns k + 1: the number completed */
				if (lr && payload_long(ev->activity_task_completed->result) != st->completed)
					lr->state_mismatches++;
				break;
			default:
				break;
		}
	}
}

/* The whole history of a run (dex.run_history_pb), counted into st from scratch */
static void
long_fetch_history(LongRun *lr, const char *run_id, LongState *st)
{
	const char *p[1] = {run_id};
	PGresult   *r = PQexecPrepared(lr->c, "history", 1, p, NULL, NULL, 1);
	Dex__V1__EventBatch *b;

	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
		die("run_history_pb: %s", PQerrorMessage(lr->c));
	b = dex__v1__event_batch__unpack(NULL, (size_t) PQgetlength(r, 0, 0),
									 (const uint8_t *) PQgetvalue(r, 0, 0));
	if (!b)
		die("cannot decode an EventBatch");
	memset(st, 0, sizeof(*st));
	long_count(st, b->events, b->n_events, true, NULL);
	dex__v1__event_batch__free_unpacked(b, NULL);
	PQclear(r);
	lr->history_fetches++;
}

/* Complete one task with complete_tasks_pb; whether it was completed (its lease held) */
static bool
long_complete(LongRun *lr, const unsigned char *run_id, uint32_t task_id, uint64_t lv,
			  const Buf *enc)
{
	ArrBuf		a[4];
	const char *p[4];
	int			len[4];
	int			fmt[4] = {1, 1, 1, 1};
	uint32_t	be = htonl(task_id);
	PGresult   *r;
	bool		ok;

	memset(a, 0, sizeof(a));
	arr_begin(&a[0], UUIDOID);
	arr_elem(&a[0], run_id, 16);
	arr_begin(&a[1], INT4OID);
	arr_elem(&a[1], &be, 4);
	arr_begin(&a[2], INT8OID);
	buf_u32(&a[2].b, 8);
	buf_u64(&a[2].b, lv);
	a[2].n++;
	arr_begin(&a[3], BYTEAOID);
	arr_elem(&a[3], enc->p, (uint32_t) enc->len);
	for (int i = 0; i < 4; i++)
	{
		arr_end(&a[i]);
		p[i] = a[i].b.p;
		len[i] = (int) a[i].b.len;
	}
	r = PQexecPrepared(lr->c, "complete", 4, p, len, fmt, 1);
	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
		die("W7 complete_tasks_pb: %s", PQerrorMessage(lr->c));
	ok = PQgetvalue(r, 0, 2)[0] != 0;
	PQclear(r);
	for (int i = 0; i < 4; i++)
		free(a[i].b.p);
	if (!ok)
		lr->lost++;
	return ok;
}

/*
 * Lease the queue's next task (one), timed.  The previous completion made it,
 * so the poll finds it; if not, that is counted, and the poll repeated.
 * Returns the result: one row, the task message in column 0 (binary).
 */
static PGresult *
long_poll(LongRun *lr, const char *queue, bool cache, double *ms)
{
	const char *p[3] = {queue, "w7-worker", cache ? "true" : "false"};
	int64_t		deadline = mono_us() + 30 * 1000000LL;

	for (;;)
	{
		int64_t		t0 = mono_us();
		PGresult   *r = PQexecPrepared(lr->c, cache ? "pollc" : "poll", cache ? 3 : 2, p, NULL,
									   NULL, 1);

		*ms = (mono_us() - t0) / 1000.0;
		if (PQresultStatus(r) != PGRES_TUPLES_OK)
			die("W7 poll_tasks_pb: %s", PQerrorMessage(lr->c));
		if (PQntuples(r) == 1)
			return r;
		PQclear(r);
		lr->poll_misses++;
		if (mono_us() > deadline)
			die("W7: no task on %s for 30 s", queue);
		sleep_us(1000);
	}
}

/*
 * One workflow task: lease it (asking for an incremental history if
 * ask_cache), find how many activities have completed (the cached state, or
 * the events), and schedule the next activity or, when all have completed
 * (or stop_now), complete the run.  Returns whether the run completed.
 */
static bool
long_workflow_task(LongRun *lr, bool ask_cache, bool stop_now, LongTask *mt)
{
	double		ms;
	PGresult   *r = long_poll(lr, lr->wf_queue, ask_cache, &ms);
	size_t		len = (size_t) PQgetlength(r, 0, 0);
	Dex__V1__WorkflowTask *t;
	LongState	st;
	unsigned char run_id[16];
	long		mismatches = lr->state_mismatches;
	bool		ends = false,
				schedules = false,
				ok;
	Dex__V1__WorkflowTaskCompletion comp = DEX__V1__WORKFLOW_TASK_COMPLETION__INIT;
	Dex__V1__Command cmd = DEX__V1__COMMAND__INIT;
	Dex__V1__Command *cmds[1] = {&cmd};
	Dex__V1__ScheduleActivity sa = DEX__V1__SCHEDULE_ACTIVITY__INIT;
	Dex__V1__CompleteRun cr = DEX__V1__COMPLETE_RUN__INIT;
	Dex__V1__Payload payload = DEX__V1__PAYLOAD__INIT;
	char		num[32];
	Buf			enc = {0};
	int64_t		t0 = mono_us(),
				t1;

	lr->wf_poll_us += (int64_t) (ms * 1000);
	t = dex__v1__workflow_task__unpack(NULL, len, (const uint8_t *) PQgetvalue(r, 0, 0));
	if (!t)
		die("cannot decode a WorkflowTask");
	lr->wf_tasks++;
	mt->history_length = t->history_length;
	mt->bytes = (int) len;
	mt->poll_ms = ms;
	mt->omitted = task_history_omitted(t) > 0;

	/*
	 * The run's state before the new events.  A task that leaves out the
	 * history shows, as its history, the batch of this worker's previous
	 * task: it must start where that task's history did and hold the
	 * activity it scheduled; else the state is not the run's.
	 */
	if (mt->omitted)
	{
		LongState	batch;

		memset(&batch, 0, sizeof(batch));
		long_count(&batch, t->history, t->n_history, true, NULL);
		if (lr->state.valid && strcmp(lr->state.run_id, t->run_id) == 0 &&
			lr->state.shown == task_history_omitted(t) &&
			batch.created == (lr->state.scheduled_last ? 1 : 0))
		{
			st = lr->state;
			lr->cache_hits++;
		}
		else if (have_run_history_pb)
		{
			if (lr->state.valid && strcmp(lr->state.run_id, t->run_id) == 0)
				lr->state_mismatches++;
			long_fetch_history(lr, t->run_id, &st);
		}
		else
			die("W7: a task left out the history, and dex has no run_history_pb");
	}
	else
	{
		memset(&st, 0, sizeof(st));
		long_count(&st, t->history, t->n_history, true, NULL);
	}
	/* the new events; the state counted the activities its worker scheduled */
	long_count(&st, t->new_events, t->n_new_events, !mt->omitted, lr);
	if (lr->state_mismatches != mismatches && mt->omitted && have_run_history_pb)
	{
		/* the state was wrong: count again from the whole history */
		long_fetch_history(lr, t->run_id, &st);
		long_count(&st, t->new_events, t->n_new_events, true, NULL);
	}

	comp.commands = cmds;
	comp.n_commands = 1;
	if (st.completed >= st.n_steps || stop_now)
	{
		ends = true;
		cmd.id = 0;
		cmd.kind_case = DEX__V1__COMMAND__KIND_COMPLETE_RUN;
		cmd.complete_run = &cr;
		snprintf(num, sizeof(num), "%ld", st.completed);
		payload.content_case = DEX__V1__PAYLOAD__CONTENT_JSON;
		payload.json = num;
		cr.result = &payload;
	}
	else if (st.created > st.completed)
	{
		comp.n_commands = 0;	/* an activity is running: nothing to do */
		lr->repeated++;
	}
	else
	{
		schedules = true;
		cmd.id = (int32_t) st.created + 1;
		cmd.kind_case = DEX__V1__COMMAND__KIND_SCHEDULE_ACTIVITY;
		cmd.schedule_activity = &sa;
		sa.name = "inc";
		sa.queue = lr->act_queue;
		snprintf(num, sizeof(num), "%ld", st.completed);
		payload.content_case = DEX__V1__PAYLOAD__CONTENT_JSON;
		payload.json = num;
		sa.argument = &payload;
	}
	buf_reserve(&enc, dex__v1__workflow_task_completion__get_packed_size(&comp));
	enc.len = dex__v1__workflow_task_completion__pack(&comp, (uint8_t *) enc.p);

	parse_uuid(t->run_id, run_id);
	t1 = mono_us();
	lr->wf_code_us += t1 - t0;
	ok = long_complete(lr, run_id, 0, (uint64_t) t->lock_version, &enc);
	lr->wf_complete_us += mono_us() - t1;
	if (ok)
	{
		/* the state after this task: what the next task of this worker leaves out */
		if (schedules)
			st.created++;
		st.shown = t->history_length;
		st.scheduled_last = schedules;
		st.valid = true;
		snprintf(st.run_id, sizeof(st.run_id), "%s", t->run_id);
		lr->state = st;
	}
	else
		lr->state.valid = false;
	free(enc.p);
	t1 = mono_us();
	dex__v1__workflow_task__free_unpacked(t, NULL);
	PQclear(r);
	lr->wf_code_us += mono_us() - t1;
	return ends && ok;
}

/* One activity task: lease it, run "inc" (its argument + 1), complete it */
static void
long_activity_task(LongRun *lr)
{
	double		ms;
	int64_t		t0 = mono_us();
	PGresult   *r = long_poll(lr, lr->act_queue, false, &ms);
	Dex__V1__ActivityTask *t;
	unsigned char run_id[16];
	Buf			enc = {0};

	t = dex__v1__activity_task__unpack(NULL, (size_t) PQgetlength(r, 0, 0),
									   (const uint8_t *) PQgetvalue(r, 0, 0));
	if (!t)
		die("cannot decode an ActivityTask");
	activity_code(t, &enc);
	parse_uuid(t->run_id, run_id);
	(void) long_complete(lr, run_id, (uint32_t) t->task_id, (uint64_t) t->lock_version, &enc);
	free(enc.p);
	dex__v1__activity_task__free_unpacked(t, NULL);
	PQclear(r);
	lr->act_us += mono_us() - t0;
}

/* the median time (ms) and size of dex.run_history_pb of the run, three calls */
static void
long_time_history(LongRun *lr, const char *run_id, double *ms, double *bytes)
{
	double		t[3];

	for (int i = 0; i < 3; i++)
	{
		const char *p[1] = {run_id};
		int64_t		t0 = mono_us();
		PGresult   *r = PQexecPrepared(lr->c, "history", 1, p, NULL, NULL, 1);

		t[i] = (mono_us() - t0) / 1000.0;
		if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
			die("run_history_pb: %s", PQerrorMessage(lr->c));
		*bytes = PQgetlength(r, 0, 0);
		PQclear(r);
	}
	qsort(t, 3, sizeof(double), cmp_double);
	*ms = t[1];
}

/* "312 B", "31.2 kB", "1.27 MB" */
static const char *
fmt_bytes(double b, char *out, size_t len)
{
	if (b < 1000)
		snprintf(out, len, "%.0f B", b);
	else if (b < 1e6)
		snprintf(out, len, "%.1f kB", b / 1e3);
	else
		snprintf(out, len, "%.2f MB", b / 1e6);
	return out;
}

/* p50 of the poll time and of the size of the tasks [from, to) with omitted == want */
static int
long_window_p50(const LongTask *tasks, int from, int to, bool want, double *ms, double *bytes)
{
	double	   *a = xmalloc(sizeof(double) * (size_t) (to - from + 1));
	double	   *b = xmalloc(sizeof(double) * (size_t) (to - from + 1));
	int			n = 0;

	for (int i = from; i < to; i++)
		if (tasks[i].omitted == want)
		{
			a[n] = tasks[i].poll_ms;
			b[n] = tasks[i].bytes;
			n++;
		}
	qsort(a, (size_t) n, sizeof(double), cmp_double);
	qsort(b, (size_t) n, sizeof(double), cmp_double);
	*ms = pct(a, n, 0.5);
	*bytes = pct(b, n, 0.5);
	free(a);
	free(b);
	return n;
}

/*
 * W7: one run of n_steps activities.  The workflow-task polls are sampled in
 * windows of W7_WINDOW tasks from history lengths of 10, 1,000 and 10,000
 * events, and over the run's last W7_WINDOW tasks; in a cached run the first
 * half of each window asks for full histories (worker_cache => false), so
 * that both are measured at the same lengths in the same run.
 */
static void
workload_long(PGconn *m, const char *name, const char *tag, int n_steps, bool use_cache,
			  const char *why)
{
	Run			run;
	LongRun		lr;
	int			max_tasks = n_steps + 1000;
	LongTask   *tasks = xmalloc(sizeof(LongTask) * (size_t) max_tasks);
	int			n_tasks = 0;
	int			block = n_steps >= 10 ? n_steps / 10 : 1;
	int64_t    *block_end = xmalloc(sizeof(int64_t) * (size_t) (n_steps / block + 2));
	int			n_blocks = 0;
	int			win_start[W7_LEVELS + 1],
				win_end[W7_LEVELS + 1];
	double		hist_ms[W7_LEVELS + 1],
				hist_bytes[W7_LEVELS + 1];
	int			level = 0,
				win_pos = -1;
	long		steps = 0;
	int			last_hl = 0;
	bool		done = false,
				capped = false;
	int64_t		cap_us = (int64_t) (fmax(30.0, 300.0 * bench_scale) * 1e6),
				t_end,
				sampling_us = 0;	/* a cached run's full-history samples, run_history_pb timings */
	char		run_id[40],
				arg[32],
				expected[64],
				check[256],
				notes[2048],
				sql[256];
	double		secs;
	Delta		d;
	PGresult   *r;

	for (int i = 0; i <= W7_LEVELS; i++)
		win_start[i] = win_end[i] = -1, hist_ms[i] = hist_bytes[i] = NAN;
	use_cache = use_cache && have_worker_cache && DEX_HAVE_HISTORY_OMITTED;
	run_init(&run, m, tag, WF_ACTIVITY, 1, 0, 0, 1);
	memset(&lr, 0, sizeof(lr));
	lr.c = run.client;
	lr.tag = tag;
	lr.use_cache = use_cache;
	snprintf(lr.wf_queue, sizeof(lr.wf_queue), "%s", run.wl.wf_queue);
	snprintf(lr.act_queue, sizeof(lr.act_queue), "%s", run.wl.act_queue);
	setup_queues(lr.c, lr.wf_queue, lr.act_queue);
	prepare(lr.c, "create", "SELECT dex.create_run($1, $2, $3::jsonb)");
	prepare(lr.c, "poll", "SELECT task FROM dex.poll_tasks_pb($1, $2, 1, '5 minutes')");
	if (have_worker_cache)
		prepare(lr.c, "pollc", "SELECT task FROM dex.poll_tasks_pb($1, $2, 1, '5 minutes', "
				"worker_cache => $3::boolean)");
	prepare(lr.c, "complete", COMPLETE_SQL);
	if (have_run_history_pb)
		prepare(lr.c, "history", "SELECT dex.run_history_pb($1::uuid)");
	exec_void(lr.c, "SELECT pg_stat_force_next_flush()");
	printf("%s: one run of %d activities, %s histories%s%s\n", name, n_steps,
		   use_cache ? "incremental (worker_cache => true)" : "full", why ? ": " : "", why ? why : "");

	measure_begin(m, &run);
	run.t_start = mono_us();
	{
		const char *p[3] = {tag, lr.wf_queue, arg};

		snprintf(arg, sizeof(arg), "%d", n_steps);
		r = PQexecPrepared(lr.c, "create", 3, p, NULL, NULL, 0);
		if (PQresultStatus(r) != PGRES_TUPLES_OK)
			die("create_run: %s", PQerrorMessage(lr.c));
		snprintf(run_id, sizeof(run_id), "%s", PQgetvalue(r, 0, 0));
		PQclear(r);
	}
	block_end[n_blocks++] = run.t_start;

	while (!done)
	{
		bool		ask;

		/*
		 * The sampling windows: from 10, 1,000, 10,000 events, then the
		 * run's last tasks (unless the previous window reaches into them).
		 */
		if (win_pos < 0 && level < W7_LEVELS &&
			((level < W7_LEVELS - 1 && last_hl >= w7_levels[level]) ||
			 steps == n_steps - W7_WINDOW))
		{
			if (steps == n_steps - W7_WINDOW)
				level = W7_LEVELS - 1;
			win_pos = 0;
			win_start[level] = n_tasks;
			if (have_run_history_pb)
			{
				int64_t		t0 = mono_us();

				long_time_history(&lr, run_id, &hist_ms[level], &hist_bytes[level]);
				sampling_us += mono_us() - t0;
			}
		}
		ask = use_cache && !(win_pos >= 0 && win_pos < W7_WINDOW / 2);
		if (!capped && mono_us() - run.t_start > cap_us)
			capped = true;
		if (n_tasks >= max_tasks)
			die("W7: more than %d workflow tasks", max_tasks);
		{
			int64_t		t0 = mono_us();

			done = long_workflow_task(&lr, ask, capped, &tasks[n_tasks]);
			if (use_cache && !ask)
				sampling_us += mono_us() - t0;
		}
		last_hl = tasks[n_tasks].history_length;
		n_tasks++;
		if (win_pos >= 0 && (++win_pos >= W7_WINDOW || done))
		{
			win_end[level] = n_tasks;
			win_pos = -1;
			level++;
		}
		if (done)
			break;
		if (lr.state.valid && lr.state.created > lr.state.completed)
		{
			long_activity_task(&lr);
			steps++;
			if (steps % block == 0)
				block_end[n_blocks++] = mono_us() - sampling_us;
		}
	}
	t_end = mono_us();
	secs = (t_end - run.t_start) / 1e6;
	PQfinish(run.client);
	d = measure_end(m, &run, (double) steps);
	print_top_statements(m, 10);
	printf("  worker: %ld workflow tasks (%ld with nothing to do), %ld activities, %ld cache hits, "
		   "%ld run_history_pb fetches, %ld state mismatches, %ld polls found no task, %ld lost leases\n",
		   lr.wf_tasks, lr.repeated, steps, lr.cache_hits, lr.history_fetches,
		   lr.state_mismatches, lr.poll_misses, lr.lost);
	printf("  worker's time: workflow-task polls %.1f s, their decoding and code %.1f s, their "
		   "completions %.1f s; activity tasks %.1f s\n", lr.wf_poll_us / 1e6, lr.wf_code_us / 1e6,
		   lr.wf_complete_us / 1e6, lr.act_us / 1e6);
	snprintf(expected, sizeof(expected), "to_jsonb(%ld)", steps);
	check_runs(m, lr.wf_queue, expected, 1, check, sizeof(check));
	snprintf(sql, sizeof(sql), "SELECT history_length FROM dex.workflow_run WHERE id = '%s'", run_id);
	printf("  the run's history: %.0f events\n", mon_double(m, sql));

	/* the notes: one run, its polls at each history length, its time by tenths */
	{
		size_t		l;
		char		b1[32],
					b2[32],
					b3[32];

		snprintf(notes, sizeof(notes), "one run of %ld activities, %s%s%s; workflow-task poll p50 "
				 "(task size) at", steps, use_cache ? "incremental histories" : "full histories",
				 why ? ", " : "", why ? why : "");
		printf("  %-22s %-28s %-28s %s\n", "history events", "incremental: n, poll p50, size",
			   "full: n, poll p50, size", "run_history_pb: ms, size");
		for (int i = 0; i < W7_LEVELS; i++)
		{
			double		c_ms,
						c_b,
						f_ms,
						f_b;
			int			nc,
						nf;
			char		range[32];

			if (win_start[i] < 0 || win_end[i] <= win_start[i])
				continue;
			nc = long_window_p50(tasks, win_start[i], win_end[i], true, &c_ms, &c_b);
			nf = long_window_p50(tasks, win_start[i], win_end[i], false, &f_ms, &f_b);
			snprintf(range, sizeof(range), "%d-%d", tasks[win_start[i]].history_length,
					 tasks[win_end[i] - 1].history_length);
			printf("  %-22s %3d %8.3f ms %12s   %3d %8.3f ms %12s   %8.3f ms %s\n", range,
				   nc, c_ms, nc ? fmt_bytes(c_b, b1, sizeof(b1)) : "-",
				   nf, f_ms, nf ? fmt_bytes(f_b, b2, sizeof(b2)) : "-",
				   hist_ms[i], isnan(hist_bytes[i]) ? "-" : fmt_bytes(hist_bytes[i], b3, sizeof(b3)));
			l = strlen(notes);
			snprintf(notes + l, sizeof(notes) - l, "%s %s events:", i ? ";" : "", range);
			l = strlen(notes);
			if (nc)
				snprintf(notes + l, sizeof(notes) - l, " incremental %.2f ms (%s)", c_ms,
						 fmt_bytes(c_b, b1, sizeof(b1)));
			l = strlen(notes);
			if (nf)
				snprintf(notes + l, sizeof(notes) - l, "%s full %.2f ms (%s)", nc ? "," : "",
						 f_ms, fmt_bytes(f_b, b2, sizeof(b2)));
			l = strlen(notes);
			if (!isnan(hist_ms[i]))
				snprintf(notes + l, sizeof(notes) - l, ", run_history_pb %.2f ms", hist_ms[i]);
		}
		l = strlen(notes);
		snprintf(notes + l, sizeof(notes) - l, "; total %.1f s (of it the worker decoding "
				 "workflow tasks and running their code %.1f s", secs, lr.wf_code_us / 1e6);
		l = strlen(notes);
		if (use_cache)
			snprintf(notes + l, sizeof(notes) - l, ", the samples of full histories and "
					 "run_history_pb %.1f s", sampling_us / 1e6);
		l = strlen(notes);
		snprintf(notes + l, sizeof(notes) - l, "), by tenths of the run%s (s per 1,000 steps):",
				 use_cache ? " less those samples" : "");
		for (int i = 1; i < n_blocks; i++)
		{
			l = strlen(notes);
			snprintf(notes + l, sizeof(notes) - l, " %.2f",
					 (block_end[i] - block_end[i - 1]) / 1e6 * 1000.0 / block);
		}
		l = strlen(notes);
		if (lr.history_fetches || lr.state_mismatches || lr.poll_misses || lr.lost || lr.repeated)
			snprintf(notes + l, sizeof(notes) - l, "; %ld run_history_pb fetches, %ld STATE "
					 "MISMATCHES, %ld empty polls, %ld LOST LEASES, %ld idle tasks",
					 lr.history_fetches, lr.state_mismatches, lr.poll_misses, lr.lost, lr.repeated);
		l = strlen(notes);
		if (capped)
			snprintf(notes + l, sizeof(notes) - l, "; CAPPED after %.0f s at %ld of %d activities",
					 cap_us / 1e6, steps, n_steps);
		l = strlen(notes);
		snprintf(notes + l, sizeof(notes) - l, "; %s", check);
	}
	printf("  %s\n", notes);
	print_row(name, (double) steps, secs, &d, notes);
	free(tasks);
	free(block_end);
}

/* ------------------------------------------------------------------ main */

/*
 * Whether the installed dex has a function or procedure of schema dex with at least nargs
 * arguments (any if < 0): later versions add arguments at the end, with defaults.
 */
static bool
dex_has(PGconn *m, const char *proname, int nargs)
{
	char		sql[512];

	snprintf(sql, sizeof(sql),
			 "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
			 "WHERE n.nspname = 'dex' AND p.proname = '%s' AND p.pronargs >= %d",
			 proname, nargs);
	return mon_double(m, sql) > 0;
}

/* ------------------------------------------------------------------ S1: schedules */

/* CPU time of a process in nanoseconds: /proc/PID/schedstat, else utime + stime of /proc/PID/stat */
static long long
process_cpu_ns(int pid)
{
	char		path[64],
				buf[1024],
			   *p;
	FILE	   *f;
	size_t		n;
	unsigned long long ns,
				ut,
				st;

	snprintf(path, sizeof(path), "/proc/%d/schedstat", pid);
	if ((f = fopen(path, "r")) != NULL)
	{
		int			ok = fscanf(f, "%llu", &ns) == 1;

		fclose(f);
		if (ok)
			return (long long) ns;
	}
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if (!(f = fopen(path, "r")))
		die("cannot read %s", path);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	if (!(p = strrchr(buf, ')')) ||
		sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		die("cannot parse %s", path);
	return (long long) ((ut + st) * (1000000000.0 / (double) sysconf(_SC_CLK_TCK)));
}

/* sleep until the wall clock is "sec" seconds into a minute (the next time it is) */
static void
sleep_until_second(int sec)
{
	int64_t		in_minute = real_us() % 60000000;
	int64_t		target = (int64_t) sec * 1000000;

	sleep_us((target - in_minute + 60000000) % 60000000);
}

/*
 * S1: 1,000 schedules with the cron expression "* * * * *" (allow_all: each tick starts a run)
 * fire every minute.  The scheduler's own CPU (its process, from /proc) is read at second 5
 * and second 55 of each minute: from 5 to 55 it should only sleep (nothing is due), from 55 to
 * 5 of the next minute it fires the 1,000 ticks.  Reported: CPU per minute between ticks, and
 * CPU per tick burst (per run started); the lateness of the ticks; runs per minute.
 */
static void
workload_schedules(PGconn *m)
{
	int			n = scaled(1000, 10);
	int			minutes = scaled(2, 1);
	char		sql[512],
				notes[768];
	int			pid;
	long long	between = 0,
				burst = 0;
	double		between_s = 0,
				t_first,
				t_last,
				runs,
				late_max,
				late_avg;
	Delta		d;

	if (!dex_has(m, "create_schedule", 1))
	{
		printf("S1: skipped (this dex has no schedules)\n");
		return;
	}
	PQclear(mon(m, "SELECT dex.create_queue('s1-wf', 'workflow')"));
	snprintf(sql, sizeof(sql),
			 "SELECT count(dex.create_schedule('s1-' || i, 's1', 's1-wf', cron => '* * * * *', "
			 "overlap => 'allow_all')) FROM generate_series(1, %d) i", n);
	PQclear(mon(m, sql));
	pid = (int) mon_double(m, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'dex scheduler' "
						   "AND datname = current_database()");
	if (pid <= 0)
		die("S1: no scheduler for this database");
	printf("S1: %d schedules \"* * * * *\"; the scheduler is pid %d; %d minute(s)\n", n, pid, minutes);

	sleep_until_second(5);
	t_first = real_us() / 1e6;
	for (int k = 0; k < minutes; k++)
	{
		long long	a = process_cpu_ns(pid),
					b,
					c;
		int64_t		ta = mono_us();

		sleep_until_second(55);
		b = process_cpu_ns(pid);
		between += b - a;
		between_s += (mono_us() - ta) / 1e6;
		sleep_until_second(5);
		c = process_cpu_ns(pid);
		burst += c - b;
		printf("  minute %d: scheduler CPU %.2f ms from :05 to :55, %.2f ms from :55 to :05 (the ticks)\n",
			   k + 1, (b - a) / 1e6, (c - b) / 1e6);
	}
	t_last = real_us() / 1e6;
	snprintf(sql, sizeof(sql),
			 "SELECT count(*), coalesce(max(extract(epoch FROM created_at - (labels->>'dex.tick')::timestamptz)), 0), "
			 "coalesce(avg(extract(epoch FROM created_at - (labels->>'dex.tick')::timestamptz)), 0) "
			 "FROM dex.workflow_run WHERE queue_id = (SELECT id FROM dex.queue WHERE name = 's1-wf') "
			 "AND (labels->>'dex.tick')::timestamptz BETWEEN to_timestamp(%.3f) AND to_timestamp(%.3f)",
			 t_first, t_last);
	{
		PGresult   *r = mon(m, sql);

		runs = atof(PQgetvalue(r, 0, 0));
		late_max = atof(PQgetvalue(r, 0, 1));
		late_avg = atof(PQgetvalue(r, 0, 2));
		PQclear(r);
	}
	PQclear(mon(m, "SELECT count(dex.delete_schedule(name)) FROM dex.schedules WHERE name LIKE 's1-%'"));
	PQclear(mon(m, "SELECT count(dex.terminate_run(id)) FROM dex.workflow_run "
				"WHERE queue_id = (SELECT id FROM dex.queue WHERE name = 's1-wf') AND status = 'CREATED'"));

	snprintf(notes, sizeof(notes),
			 "%d schedules every minute: scheduler CPU %.2f ms per minute between ticks, %.1f ms per "
			 "burst of ticks (%.1f us per run started); lateness avg %.1f ms, max %.1f ms; %.0f runs "
			 "in %d minute(s) (expected %d)",
			 n, between / 1e6 * 60.0 / (between_s > 0 ? between_s : 1), burst / 1e6 / minutes,
			 runs > 0 ? burst / 1e3 / runs : 0, late_avg * 1000, late_max * 1000, runs, minutes,
			 n * minutes);
	printf("  %s\n", notes);
	memset(&d, 0, sizeof(d));
	d.cpu_ms = burst / 1e6;
	print_row("S1", runs, t_last - t_first, &d, notes);
}

/* ------------------------------------------------------------------ W9: declared polls */

/*
 * One phase of W9 (and W10): "samples" times, create one run of (workflow "wf", version
 * "version") on queue "queue" (not timed), poll one task with "poll" (timed), complete it
 * (not timed).  The queue holds a backlog of ready tasks of another workflow throughout.
 */
static void
poll_phase(PGconn *m, Run *run, const char *row, const char *queue, const char *poll,
		   const char *wf, int version, int samples, const char *what, double *p50)
{
	PGconn	   *c = run->client;
	double	   *t = xmalloc(sizeof(double) * (size_t) samples);
	char		sql[1024],
				notes[512];
	double		secs;
	Delta		d;

	snprintf(sql, sizeof(sql), "SELECT dex.create_run('%s', '%s', workflow_version => %d)",
			 wf, queue, version);
	prepare(c, "w9create", sql);
	prepare(c, "w9poll", poll);
	prepare(c, "w9complete", "SELECT dex.complete_task($1::uuid, 0, $2::bigint, "
			"'[{\"id\": 1, \"completeRun\": {}}]')");
	PQclear(mon(m, "SELECT pg_stat_statements_reset()"));
	measure_begin(m, run);
	run->t_start = mono_us();
	for (int s = 0; s < samples; s++)
	{
		PGresult   *r = PQexecPrepared(c, "w9create", 0, NULL, NULL, NULL, 0);
		int64_t		a;
		const char *p[2];

		if (PQresultStatus(r) != PGRES_TUPLES_OK)
			die("W9 create: %s", PQerrorMessage(c));
		PQclear(r);
		a = mono_us();
		r = PQexecPrepared(c, "w9poll", 0, NULL, NULL, NULL, 0);
		t[s] = (mono_us() - a) / 1000.0;
		if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
			die("W9 poll (%s): %s (%d rows)", what, PQresultErrorMessage(r), PQntuples(r));
		p[0] = PQgetvalue(r, 0, 0);
		p[1] = PQgetvalue(r, 0, 1);
		{
			PGresult   *x = PQexecPrepared(c, "w9complete", 2, p, NULL, NULL, 0);

			if (PQresultStatus(x) != PGRES_TUPLES_OK)
				die("W9 complete: %s", PQerrorMessage(c));
			PQclear(x);
		}
		PQclear(r);
	}
	secs = (mono_us() - run->t_start) / 1e6;
	d = measure_end(m, run, samples);
	print_top_statements(m, 4);
	qsort(t, (size_t) samples, sizeof(double), cmp_double);
	if (p50)
		*p50 = pct(t, samples, 0.5);
	snprintf(notes, sizeof(notes), "%s: poll p50 %.3f / p99 %.3f ms (create and complete not timed)",
			 what, pct(t, samples, 0.5), pct(t, samples, 0.99));
	printf("  %s\n", notes);
	print_row(row, samples, secs, &d, notes);
	PQexec(c, "DEALLOCATE ALL");
	free(t);
}

/*
 * The backlog of W9 and W10: "backlog" ready tasks of workflow "<tag>-other" in queue
 * "<tag>-wf", vacuumed and analyzed (hint bits set and statistics taken: the first phase
 * does not pay for them).
 */
static void
fill_backlog(Run *run, const char *w, const char *tag, int backlog)
{
	char		sql[512];

	for (int done = 0; done < backlog; done += 10000)
	{
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM dex.create_runs('%s-other', '%s-wf', "
				 "array_fill('0'::jsonb, ARRAY[%d]))", tag, tag,
				 backlog - done < 10000 ? backlog - done : 10000);
		exec_void(run->client, sql);
	}
	exec_void(run->client, "VACUUM ANALYZE dex.workflow_run, dex.workflow_task");
	exec_void(run->client, "SELECT pg_stat_force_next_flush()");
	printf("%s: %d ready tasks of another workflow in %s-wf\n", w, backlog, tag);
}

/*
 * The start of W9 and W10, if the installed dex has function "proname" with "nargs"
 * arguments (else it says why not, "lacks", and returns false): the client, the queue
 * "<tag>-wf" and its backlog.
 */
static bool
poll_workload_begin(PGconn *m, Run *run, const char *w, const char *tag, const char *proname,
					int nargs, const char *lacks, int backlog, int samples)
{
	if (!dex_has(m, proname, nargs))
	{
		printf("%s: skipped (%s)\n", w, lacks);
		return false;
	}
	run_init(run, m, w, WF_MINIMAL, samples, 0, 0, 1);
	fill_backlog(run, w, tag, backlog);
	return true;
}

/*
 * W9: what declaring costs a poll.  A workflow queue holds 100,000 ready tasks of workflow
 * "w9-other"; one client polls one task at a time of a run it has just created, declaring
 * nothing (it takes the oldest backlog task) or 20 (workflow, version) pairs, one of which
 * is the new run's.
 */
static void
workload_declared(PGconn *m)
{
	int			backlog = scaled(100000, 1000);
	int			samples = scaled(2000, 100);
	Run			run;

	if (!poll_workload_begin(m, &run, "W9", "w9", "poll_tasks_pb", 7,
							 "this dex's polls declare nothing", backlog, samples))
		return;
	poll_phase(m, &run, "W9 none", "w9-wf",
			   "SELECT run_id, lock_version FROM dex.poll_tasks_pb('w9-wf', 'w9', 1, '1 min')",
			   "w9-other", 1, samples, "declaring nothing", NULL);
	/* the runs the undeclared phase created went to the end of the backlog: it is as deep */
	poll_phase(m, &run, "W9 20 pairs", "w9-wf",
			   "SELECT run_id, lock_version FROM dex.poll_tasks_pb('w9-wf', 'w9', 1, '1 min', "
			   "false, names => array_fill('w9'::text, ARRAY[20]), "
			   "versions => ARRAY(SELECT generate_series(1, 20)))",
			   "w9", 7, samples, "declaring 20 (workflow, version) pairs", NULL);
	PQfinish(run.client);
}

/* ------------------------------------------------------------------ W10: rate-limited polls */

/*
 * W10: what a rate limit costs a poll (dex 1.7).  A workflow queue holds 10,000 ready tasks
 * of workflow "w10-other"; one client polls one task at a time, as in W9, first with no rate
 * limit, then with one too high to hold anything back (1,000,000 per second: each poll takes
 * a token from the queue's bucket in shared memory and gives back none), then without again
 * (the machine has not drifted).  The log compares the rate-limited poll's p50 with the faster
 * of the unlimited phases' (the first one also warms the caches up).
 */
static void
workload_rate_limited(PGconn *m)
{
	int			backlog = scaled(10000, 1000);
	int			samples = scaled(3000, 100);
	const char *poll = "SELECT run_id, lock_version FROM dex.poll_tasks_pb('w10-wf', 'w10', 1, '1 min')";
	double		before,
				limited,
				after;
	Run			run;

	if (!poll_workload_begin(m, &run, "W10", "w10", "set_concurrency_limit", 3,
							 "this dex has no rate limits", backlog, samples))
		return;
	poll_phase(m, &run, "W10 unlimited", "w10-wf", poll, "w10", 1, samples,
			   "no rate limit", &before);
	exec_void(run.client, "SELECT dex.alter_queue('w10-wf', rate_limit => 1000000, rate_period => '1 s')");
	poll_phase(m, &run, "W10 rate-limited", "w10-wf", poll, "w10", 1, samples,
			   "rate limit 1,000,000/s (never reached)", &limited);
	exec_void(run.client, "SELECT dex.alter_queue('w10-wf', rate_limit => 0)");
	poll_phase(m, &run, "W10 unlimited again", "w10-wf", poll, "w10", 1, samples,
			   "no rate limit", &after);
	printf("W10: rate-limited poll p50 %.3f ms = %.3fx the faster unlimited phase's (%.3f, %.3f ms)\n",
		   limited, limited / (before < after ? before : after), before, after);
	PQfinish(run.client);
}

/* W3 or W4: with BENCH_K workers per queue, then with each count of BENCH_LOW_K */
static void
workload_low(PGconn *m, const char *w, WfKind kind, int n_runs, double rate)
{
	const char *list = getenv("BENCH_LOW_K");
	char		buf[64];
	char	   *save = NULL;

	workload_paced(m, w, w, kind, n_runs, rate, bench_k);
	snprintf(buf, sizeof(buf), "%s", list ? list : "1,4");
	for (char *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save))
	{
		int			k = atoi(tok);
		char		name[32],
					tag[16];

		if (k < 1 || k > 50)
			die("bad BENCH_LOW_K: %s", list);
		snprintf(name, sizeof(name), "%s k=%d", w, k);
		snprintf(tag, sizeof(tag), "%sk%d", w, k);
		workload_paced(m, name, tag, kind, n_runs, rate, k);
	}
}

/*
 * Q1: what the number of queues costs a workflow.  W4 with one worker per
 * queue and W8 (20 workers taking one task per call, 5,000 runs) on queues
 * of their own, first with the queues the database has (those of the
 * workloads before), then again on new queues after 1,000 idle queues (500
 * of each kind, q1-idle-N-wf / -act) are made.  A statement of a poll, a
 * completion or a background pass should touch its own queue only: the rows
 * after should cost what the rows before do.
 */
/* the queues the database will have once a workload has made its two */
static int
queues_with_two_more(PGconn *m)
{
	PGresult   *r = exec_ok(m, "SELECT count(*) FROM dex.queue");
	int			n = atoi(PQgetvalue(r, 0, 0)) + 2;

	PQclear(r);
	return n;
}

static void
workload_many_queues(PGconn *m)
{
	const int	idle_pairs = 500;
	const int	per_xact = 25;	/* queues made per transaction */
	char		name[64];

	for (int round = 0; round < 2; round++)
	{
		snprintf(name, sizeof(name), "Q1 W4 k=1, %d queues", queues_with_two_more(m));
		workload_paced(m, name, round ? "q1c" : "q1a", WF_ACTIVITY, scaled(1000, 50), 50.0, 1);
		snprintf(name, sizeof(name), "Q1 W8, %d queues", queues_with_two_more(m));
		workload_throughput(m, name, round ? "q1d" : "q1b", WF_ACTIVITY, scaled(5000, 100),
							10, 10, 1, 180);
		if (round)
			break;
		for (int i = 1; i <= idle_pairs; i += per_xact)
		{
			char		sql[512];

			snprintf(sql, sizeof(sql),
					 "SELECT dex.create_queue('q1-idle-' || i || '-wf', 'workflow'), "
					 "dex.create_queue('q1-idle-' || i || '-act', 'activity') "
					 "FROM generate_series(%d, %d) i "
					 "WHERE NOT EXISTS (SELECT FROM dex.queue WHERE name = 'q1-idle-' || i || '-wf')",
					 i, i + per_xact - 1);
			exec_void(m, sql);
		}
	}
}

/*
 * F1: the floor under the paced rows.  One client, 50 transactions a second,
 * each alone: SELECT 1; an INSERT into an unlogged table (a commit without a
 * WAL flush, as a workflow task's lease); an INSERT into a logged table (a
 * commit that waits for the WAL flush, fdatasync, as every recorded step).
 * What one of these costs the server is the least each transaction of a
 * low-load workflow costs, whatever it does.
 */
static void
workload_floor(PGconn *m)
{
	static const struct
	{
		const char *name;
		const char *sql;
	}			steps[] = {
		{"F1 SELECT 1", "SELECT 1 WHERE $1::int IS NOT NULL"},
		{"F1 unlogged INSERT", "INSERT INTO dexbench_floor_unlogged (v) VALUES ($1::int)"},
		{"F1 logged INSERT", "INSERT INTO dexbench_floor_logged (v) VALUES ($1::int)"},
	};
	int			n = scaled(500, 50);
	int64_t		interval = 20000;	/* 50/s */
	double	   *latency_ms = xmalloc(sizeof(double) * (size_t) n);

	exec_void(m, "CREATE UNLOGGED TABLE IF NOT EXISTS dexbench_floor_unlogged "
			  "(id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v integer)");
	exec_void(m, "CREATE TABLE IF NOT EXISTS dexbench_floor_logged "
			  "(id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v integer)");
	for (int s = 0; s < (int) (sizeof(steps) / sizeof(steps[0])); s++)
	{
		PGconn	   *c = connect_db("dexbench floor");
		Stats		before,
					after;
		Delta		d;
		char		notes[256];
		int64_t		t0;
		double		secs;

		prepare(c, "floor", steps[s].sql);
		stats_read(m, &before);
		t0 = mono_us();
		for (int i = 0; i < n; i++)
		{
			char		arg[16];
			const char *p[1] = {arg};
			int64_t		sent;
			PGresult   *r;

			sleep_us(t0 + i * interval - mono_us());
			snprintf(arg, sizeof(arg), "%d", i);
			sent = mono_us();
			r = PQexecPrepared(c, "floor", 1, p, NULL, NULL, 0);
			if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK)
				die("%s: %s", steps[s].name, PQerrorMessage(c));
			PQclear(r);
			latency_ms[i] = (mono_us() - sent) / 1000.0;
		}
		secs = (mono_us() - t0) / 1e6;
		PQfinish(c);			/* a backend flushes its statistics when it exits */
		stats_settle(m, &after);
		d = stats_delta(m, &before, &after);
		qsort(latency_ms, (size_t) n, sizeof(double), cmp_double);
		snprintf(notes, sizeof(notes), "1 client at 50 transactions/s; round trip p50 %.2f / p99 %.2f ms",
				 pct(latency_ms, n, 0.5), pct(latency_ms, n, 0.99));
		printf("  %s\n", notes);
		print_row(steps[s].name, n, secs, &d, notes);
	}
	free(latency_ms);
}

/*
 * F2: the floor under W8.  A one-activity workflow written by hand in plain
 * SQL, with none of dex: a run row, a task table that workers claim with
 * SKIP LOCKED, a history row per workflow step.  10 workflow and 10 activity
 * clients each take one task per transaction and complete it in the same
 * one (claim, record, hand over: three durable transactions per run).  It
 * has no leases, fences, retries, timeouts, inbox or protobuf, so it does
 * less than a durable execution engine must: what the server spends on it
 * per run is less than W8 can, and it tells how much of W8's CPU is dex's.
 */
typedef struct FloorWorker
{
	pthread_t	thread;
	bool		is_wf;
	int			n_runs;
	atomic_int *done;			/* runs ended, by all workers */
	long		calls;
	long		empty;			/* calls that found no task */
} FloorWorker;

static const char *F2_WF_SQL =
"WITH t AS (DELETE FROM dexbench_f2_task WHERE id = (SELECT id FROM dexbench_f2_task "
"           WHERE kind = 0 ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) "
"           RETURNING run_id, stage, value), "
"h AS (INSERT INTO dexbench_f2_history (run_id, seq, event) "
"      SELECT run_id, stage, convert_to(repeat('e', 100), 'UTF8') FROM t), "
"a AS (INSERT INTO dexbench_f2_task (kind, run_id, stage, value) "
"      SELECT 1, run_id, 0, value FROM t WHERE stage = 0), "
"r AS (UPDATE dexbench_f2_run u SET status = 1, result = t.value FROM t "
"      WHERE t.stage = 1 AND u.id = t.run_id) "
"SELECT count(*), count(*) FILTER (WHERE stage = 1) FROM t";

static const char *F2_ACT_SQL =
"WITH t AS (DELETE FROM dexbench_f2_task WHERE id = (SELECT id FROM dexbench_f2_task "
"           WHERE kind = 1 ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) "
"           RETURNING run_id, value), "
"w AS (INSERT INTO dexbench_f2_task (kind, run_id, stage, value) "
"      SELECT 0, run_id, 1, value + 1 FROM t) "
"SELECT count(*), 0 FROM t";

static void *
floor_worker_main(void *arg)
{
	FloorWorker *w = arg;
	PGconn	   *c = connect_db(w->is_wf ? "dexbench F2 workflow" : "dexbench F2 activity");

	prepare(c, "step", w->is_wf ? F2_WF_SQL : F2_ACT_SQL);
	while (atomic_load(w->done) < w->n_runs)
	{
		PGresult   *r = PQexecPrepared(c, "step", 0, NULL, NULL, NULL, 0);

		if (PQresultStatus(r) != PGRES_TUPLES_OK)
			die("F2 step: %s", PQerrorMessage(c));
		w->calls++;
		if (atoi(PQgetvalue(r, 0, 0)) == 0)
		{
			w->empty++;
			sleep_us(200);		/* a hand-written worker's poll interval */
		}
		atomic_fetch_add(w->done, atoi(PQgetvalue(r, 0, 1)));
		PQclear(r);
	}
	PQfinish(c);
	return NULL;
}

static void
workload_floor_throughput(PGconn *m)
{
	int			n_runs = scaled(10000, 100);
	FloorWorker workers[20];
	atomic_int	done = 0;
	Stats		before,
				after;
	Delta		d;
	char		sql[512],
				notes[256];
	int64_t		t0;
	double		secs;
	long		calls = 0,
				empty = 0;

	exec_void(m, "DROP TABLE IF EXISTS dexbench_f2_run, dexbench_f2_history, dexbench_f2_task");
	exec_void(m, "CREATE TABLE dexbench_f2_run (id bigint PRIMARY KEY, status smallint NOT NULL, "
			  "argument integer NOT NULL, result integer)");
	exec_void(m, "CREATE TABLE dexbench_f2_history (run_id bigint, seq integer, event bytea NOT NULL, "
			  "PRIMARY KEY (run_id, seq))");
	exec_void(m, "CREATE TABLE dexbench_f2_task (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
			  "kind smallint NOT NULL, run_id bigint NOT NULL, stage smallint NOT NULL, "
			  "value integer NOT NULL)");
	exec_void(m, "CREATE INDEX ON dexbench_f2_task (kind, id)");
	stats_read(m, &before);
	t0 = mono_us();
	/* created as W8's runs are, a thousand per statement */
	for (int i = 0; i < n_runs; i += 1000)
	{
		snprintf(sql, sizeof(sql),
				 "WITH r AS (INSERT INTO dexbench_f2_run (id, status, argument) "
				 "SELECT g, 0, g FROM generate_series(%d, %d) g RETURNING id, argument) "
				 "INSERT INTO dexbench_f2_task (kind, run_id, stage, value) "
				 "SELECT 0, id, 0, argument FROM r",
				 i, (i + 1000 < n_runs ? i + 1000 : n_runs) - 1);
		exec_void(m, sql);
	}
	for (int i = 0; i < 20; i++)
	{
		workers[i] = (FloorWorker) {.is_wf = i < 10, .n_runs = n_runs, .done = &done};
		if (pthread_create(&workers[i].thread, NULL, floor_worker_main, &workers[i]) != 0)
			die("pthread_create failed");
	}
	for (int i = 0; i < 20; i++)
	{
		pthread_join(workers[i].thread, NULL);
		calls += workers[i].calls;
		empty += workers[i].empty;
	}
	secs = (mono_us() - t0) / 1e6;
	stats_settle(m, &after);
	d = stats_delta(m, &before, &after);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM dexbench_f2_run WHERE status = 1 AND result = argument + 1");
	snprintf(notes, sizeof(notes), "10 workflow + 10 activity clients, one task per transaction; "
			 "%.2f calls per run, %ld found no task; %.0f of %d runs ended right",
			 (double) calls / n_runs, empty, mon_double(m, sql), n_runs);
	print_row("F2 hand-written W8", n_runs, secs, &d, notes);
}

int
main(int argc, char **argv)
{
	PGconn	   *m;

	setvbuf(stdout, NULL, _IOLBF, 0);
	bench_scale = env_double("BENCH_SCALE", 1.0);
	bench_k = (int) env_double("BENCH_K", 2);
	bench_batch = (int) env_double("BENCH_BATCH", 100);
	if (bench_k < 1 || bench_batch < 1 || bench_batch > MAX_BATCH || bench_scale <= 0)
		die("bad BENCH_K, BENCH_BATCH or BENCH_SCALE");
	if (argc < 2)
		die("usage: dexbench W1|W2|W3|W4|W5|W6|W7|W8|W9|W10|S1|Q1|F1|F2 ...");

	m = connect_db("dexbench monitor");
	bench_postmaster = postmaster_pid(m);
	have_poll_wait = dex_has(m, "poll_tasks_wait_pb", -1);
	have_worker_cache = dex_has(m, "poll_tasks_pb", 5);
	have_run_history_pb = dex_has(m, "run_history_pb", 1);
	have_wait_completions = dex_has(m, "poll_tasks_wait_pb", 12);
	{
		int			mode = (int) env_double("BENCH_POLL_WAIT", 2);

		bench_poll_wait = have_poll_wait && mode >= 1;
		bench_defer = bench_poll_wait && have_wait_completions && mode >= 2;
	}
	printf("dexbench: idle workers %s%s; dex.poll_tasks_pb %s worker_cache; dex.run_history_pb %s\n",
		   bench_poll_wait ? "CALL dex.poll_tasks_wait_pb" :
		   "poll, CALL dex.wait_for_tasks and poll again",
		   bench_defer ? " with their completions" : "",
		   have_worker_cache ? "has" : "has no", have_run_history_pb ? "exists" : "does not exist");
	for (int i = 1; i < argc; i++)
	{
		const char *w = argv[i];

		if (strcmp(w, "W1") == 0)
			workload_throughput(m, "W1", "W1", WF_ACTIVITY, scaled(10000, 100), bench_k, bench_k,
								bench_batch, 60);
		else if (strcmp(w, "W2") == 0)
			workload_throughput(m, "W2", "W2", WF_MINIMAL, scaled(50000, 100), bench_k, 0,
								bench_batch, 60);
		else if (strcmp(w, "W3") == 0)
			workload_low(m, "W3", WF_TIMER, scaled(2000, 50), 100.0);
		else if (strcmp(w, "W4") == 0)
			workload_low(m, "W4", WF_ACTIVITY, scaled(1000, 50), 50.0);
		else if (strcmp(w, "W5") == 0)
			workload_backlog(m);
		else if (strcmp(w, "W6") == 0)
			workload_idle(m);
		else if (strcmp(w, "W7") == 0)
		{
			int			steps = scaled((int) env_double("BENCH_W7_STEPS", 10000), 100);

			/*
			 * Full histories cost a run the square of its length (~90 s for
			 * 10,000 activities): 2,600 activities reach 10,000 events.
			 */
			if (have_worker_cache && DEX_HAVE_HISTORY_OMITTED)
				workload_long(m, "W7", "W7", steps, true, NULL);
			workload_long(m, "W7 full", "W7F", scaled(2600, 100), false,
						  have_worker_cache && DEX_HAVE_HISTORY_OMITTED ? NULL :
						  "the only W7 run: this dex has no worker_cache");
		}
		else if (strcmp(w, "W9") == 0)
			workload_declared(m);
		else if (strcmp(w, "W10") == 0)
			workload_rate_limited(m);
		else if (strcmp(w, "S1") == 0)
			workload_schedules(m);
		else if (strcmp(w, "Q1") == 0)
			workload_many_queues(m);
		else if (strcmp(w, "F1") == 0)
			workload_floor(m);
		else if (strcmp(w, "F2") == 0)
			workload_floor_throughput(m);
		else if (strcmp(w, "W8") == 0)
		{
			/* 20 workers in all, each taking one task per call */
			workload_throughput(m, "W8", "W8", WF_ACTIVITY, scaled(10000, 100), 10, 10, 1, 180);
		}
		else
			die("unknown workload %s", w);
	}
	PQfinish(m);
	return 0;
}
