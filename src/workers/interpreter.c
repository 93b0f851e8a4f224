/*-------------------------------------------------------------------------
 *
 * interpreter.c
 *	  The dex interpreter: a background worker per database that runs the
 *	  workflows defined in JSON (1.7).  It is the workflow worker of every
 *	  run of a definition: it leases their workflow tasks, decides their
 *	  commands with the interpreter (engine/interpret.c) and completes them
 *	  through the engine's completion path, so that history, fencing,
 *	  lifecycle controls, retention, metrics and the dashboard apply as to any
 *	  run.
 *
 * A pass, one transaction per owner of definitions (so that nothing a SQL
 * step leaves in its transaction reaches another owner's steps): the
 * workflow queues that hold ready tasks of runs of the owner's definitions;
 * for each, a poll (dex.poll_tasks_pb) that declares every (definition,
 * version) pair of that owner, so that it takes nothing else, up to BATCH
 * tasks, whose definitions are loaded once per transaction.  Then the fast
 * path, in one subtransaction: each task's commands (SQL steps run there,
 * with the owner's privileges) in a subtransaction of its own, undone on an
 * error, which fails the run instead; then one completion of them all
 * (dex_complete_workflow_tasks, a fixed number of statements).  It is kept
 * only if every completion was applied, so that a SQL step's effects commit
 * exactly when the step is recorded.  Otherwise (a lost lease, an ended run,
 * a completion set aside because events came: superseded) it is undone and
 * each task goes the slow path: its commands and completion in a
 * subtransaction kept only if the completion was applied; a superseded one
 * is replaced by an empty completion, which frees the lease and gives the
 * run a new task; an error undoes it and fails the run in a second one.
 *
 * A worker of an SDK that polls the same queue without declaring what it
 * runs may take these tasks too: give definitions' runs queues of their own
 * (docs/json-workflows.md).  Leases last LEASE; a worker that dies leaves its tasks to
 * the lease's end.
 *
 * Wake-ups: a pass that found work is followed at once by another.  Each
 * pass tells shared memory the task keys (a workflow name and version) of the
 * definitions it found, and a commit that makes tasks pollable sets the
 * interpreter's latch only if some of them may be of those keys
 * (shmem/wakeup.c): workflow tasks of runs of definitions are made by
 * create_run, by activity results, signals and user tasks, by the scheduler
 * (timers, children's ends, expired leases), all of which say so, with
 * their keys where they know them; tasks without a known key (expired
 * leases, a queue unpaused) wake it too.  A definition's creation always
 * does.  Without a wake-up it looks again after dex.interpreter_naptime
 * (10 s), a safety net.  So an idle database costs it nothing, nor does a
 * busy one whose tasks are not of definitions (activities, workflows of
 * SDK workers); runs of definitions cost a pass (two index probes) per
 * commit that made their tasks, at most one pass at a time.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "workers/workers.h"

PGDLLEXPORT void dex_interpreter_main(Datum main_arg);

#define BATCH 100
#define WORKER_ID "dex interpreter"
#define LEASE "1 minute"

/* every (definition, version) pair, by owner */
static DexPlan keys_plan = {
	"SELECT name, version, owner::oid FROM dex.definition ORDER BY owner, name, version",
	0, {0}
};

/*
 * One probe of workflow_task_version_idx per queue and definition: the
 * ORDER BY is that index's.  Without it the planner, where statistics say one
 * workflow fills a queue, read whole queues' tasks and joined them with the
 * definitions by hash: 290 ms a pass with a million pending tasks of an SDK
 * workflow on another queue (the probes: 1.5 ms with 63 queues).
 */
static DexPlan queues_plan = {
	"SELECT q.name FROM dex.queue q WHERE q.kind = 'workflow' AND EXISTS "
	"(SELECT 1 FROM unnest($1::text[], $2::integer[]) AS k(n, v), "
	" LATERAL (SELECT 1 FROM dex.workflow_task t "
	"          WHERE t.queue_id = q.id AND t.workflow_name = k.n AND t.workflow_version = k.v "
	"          AND (t.locked_until IS NULL OR t.locked_until <= now()) "
	"          ORDER BY (- t.priority), t.created_at LIMIT 1) ready)",
	2, {TEXTARRAYOID, INT4ARRAYOID}
};

static DexPlan poll_plan = {
	"SELECT run_id, lock_version, task FROM dex.poll_tasks_pb($1, '" WORKER_ID "', " CppAsString2(BATCH)
	", '" LEASE "', false, $2, $3)",
	3, {TEXTOID, TEXTARRAYOID, INT4ARRAYOID}
};

/* the definitions loaded in this pass */
typedef struct LoadedDefinition
{
	char	   *name;
	int32		version;
	DexDefinition *def;
} LoadedDefinition;

static List *loaded = NIL;

static DexDefinition *
definition(const char *name, int32 version)
{
	ListCell   *lc;
	LoadedDefinition *d;

	foreach(lc, loaded)
	{
		d = lfirst(lc);
		if (d->version == version && strcmp(d->name, name) == 0)
			return d->def;
	}
	d = palloc(sizeof(*d));
	d->name = pstrdup(name);
	d->version = version;
	d->def = dex_load_definition(name, version);
	loaded = lappend(loaded, d);
	return d->def;
}

/* A completion with at most one command */
static Dex__V1__WorkflowTaskCompletion *
completion_of(Dex__V1__Command *cmd)
{
	Dex__V1__WorkflowTaskCompletion *c = palloc(sizeof(*c));

	dex__v1__workflow_task_completion__init(c);
	if (cmd != NULL)
	{
		c->commands = palloc(sizeof(Dex__V1__Command *));
		c->commands[0] = cmd;
		c->n_commands = 1;
	}
	return c;
}

static Dex__V1__WorkflowTaskCompletion *
failure_completion(const Dex__V1__WorkflowTask *task, const char *message, const char *type)
{
	Dex__V1__Command *cmd = palloc(sizeof(*cmd));
	int32		last = 0;

	for (size_t i = 0; i < task->n_history; i++)
		last = Max(last, task->history[i]->id);
	for (size_t i = 0; i < task->n_new_events; i++)
		last = Max(last, task->new_events[i]->id);
	dex__v1__command__init(cmd);
	cmd->id = last + 1;
	cmd->kind_case = DEX__V1__COMMAND__KIND_FAIL_RUN;
	cmd->fail_run = palloc(sizeof(Dex__V1__FailRun));
	dex__v1__fail_run__init(cmd->fail_run);
	cmd->fail_run->failure = dex_new_failure(message, type, true);
	return completion_of(cmd);
}

typedef enum Outcome
{
	APPLIED,
	NOT_APPLIED,				/* lease lost or run ended: nothing to do */
	SUPERSEDED,
	FAILED
} Outcome;

typedef struct Completing
{
	pg_uuid_t  *run_id;
	int64		lock_version;
	const Dex__V1__WorkflowTask *task;
	const DexDefinition *def;
	Dex__V1__WorkflowTaskCompletion *given;
	Outcome		outcome;
} Completing;

static bool
complete_one(void *arg)
{
	Completing *c = arg;
	DexWorkflowCompletion item;

	memset(&item, 0, sizeof(item));
	item.run_id = c->run_id;
	item.lock_version = c->lock_version;
	item.completion = c->given != NULL ? c->given : dex_interpret(c->def, c->task);
	dex_check_commands(item.completion);
	dex_complete_workflow_tasks(&item, 1, false);
	c->outcome = item.done ? APPLIED : item.superseded ? SUPERSEDED : NOT_APPLIED;
	return item.done;
}

/*
 * Complete the task with the given completion, or with what the interpreter
 * decides, in a subtransaction that is kept only if the completion was
 * applied.  On an error, *error gets it.
 */
static Outcome
complete(pg_uuid_t *run_id, int64 lock_version, const Dex__V1__WorkflowTask *task,
		 const DexDefinition *def, Dex__V1__WorkflowTaskCompletion *given, ErrorData **error)
{
	Completing	c = {run_id, lock_version, task, def, given, FAILED};

	(void) dex_subtransaction(complete_one, &c, error);
	return *error != NULL ? FAILED : c.outcome;
}

/* A leased task of a poll */
typedef struct Leased
{
	pg_uuid_t	run_id;
	int64		lock_version;
	Dex__V1__WorkflowTask *task;
	const DexDefinition *def;
} Leased;

/* The run fails with the error that interpreting its task raised */
static Dex__V1__WorkflowTaskCompletion *
error_completion(const Leased *t, ErrorData *error)
{
	const char *step = dex_interpret_current_step();
	char	   *message = step != NULL ?
		psprintf("step \"%s\": %s", step, error->message) : pstrdup(error->message);

	ereport(DEBUG1, (errmsg("dex interpreter: run %s fails: %s", t->task->run_id, message)));
	return failure_completion(t->task, message,
							  psprintf("SQLSTATE %s", unpack_sql_state(error->sqlerrcode)));
}

/* whether this transaction failed the run of the note below */
static bool runaway_failed = false;

/*
 * The run whose SQL step stopped the last interpreter (it trapped the
 * cancel of dex.sql_step_timeout and ran on: engine/interpret.c) fails,
 * without running the step again; NULL for any other run.  The note goes
 * once that commits (commit_owner).
 */
static Dex__V1__WorkflowTaskCompletion *
runaway_failure(const Leased *t)
{
	pg_uuid_t	run;
	char		step[NAMEDATALEN];

	if (!dex_interpreter_runaway(&run, step, false) || memcmp(&run, &t->run_id, sizeof(run)) != 0)
		return NULL;
	runaway_failed = true;
	return failure_completion(t->task,
							  psprintf("step \"%s\": canceling statement due to statement timeout "
									   "(dex.sql_step_timeout); the step trapped the cancel and ran on, "
									   "so the interpreter stopped it", step),
							  "SQLSTATE 57014");
}

static Dex__V1__WorkflowTaskCompletion *
missing_definition(const Leased *t)
{
	return failure_completion(t->task, psprintf("definition \"%s\" version %d does not exist",
												t->task->workflow_name, t->task->workflow_version),
							  "dex.NoDefinition");
}

/*
 * One task on its own (the slow path): its commands and its completion in a
 * subtransaction kept only if the completion was applied; an error fails the
 * run in a second one.
 */
static void
run_task(const Leased *t)
{
	ErrorData  *error = NULL;
	Outcome		outcome;
	pg_uuid_t  *run_id = unconstify(pg_uuid_t *, &t->run_id);

	if (t->def == NULL)
		outcome = complete(run_id, t->lock_version, t->task, NULL, missing_definition(t), &error);
	else
		outcome = complete(run_id, t->lock_version, t->task, t->def, runaway_failure(t), &error);

	if (outcome == SUPERSEDED)
		outcome = complete(run_id, t->lock_version, t->task, t->def, completion_of(NULL), &error);
	else if (outcome == FAILED && error != NULL)
	{
		Dex__V1__WorkflowTaskCompletion *failure = error_completion(t, error);
		ErrorData  *second = NULL;

		outcome = complete(run_id, t->lock_version, t->task, t->def, failure, &second);
		if (outcome == FAILED)
			ereport(WARNING,
					(errmsg("dex interpreter could not fail run %s: %s", t->task->run_id,
							second != NULL ? second->message : "unknown error"),
					 errdetail("It failed with: %s", error->message)));
	}
}

typedef struct Deciding
{
	const Leased *task;
	Dex__V1__WorkflowTaskCompletion *completion;
} Deciding;

static bool
decide_one(void *arg)
{
	Deciding   *d = arg;

	d->completion = dex_interpret(d->task->def, d->task->task);
	dex_check_commands(d->completion);
	return true;
}

/*
 * The commands of one task of a batch, in a subtransaction of their own (SQL
 * steps run there): on an error it is undone and the run fails with it.
 */
static Dex__V1__WorkflowTaskCompletion *
decide(const Leased *t)
{
	Deciding	d = {t, NULL};
	ErrorData  *error;

	if (t->def == NULL)
		return missing_definition(t);
	if ((d.completion = runaway_failure(t)) != NULL)
		return d.completion;
	if (!dex_subtransaction(decide_one, &d, &error))
		return error_completion(t, error);
	return d.completion;
}

typedef struct Batch
{
	Leased	   *tasks;
	int			n;
} Batch;

static bool
complete_batch(void *arg)
{
	Batch	   *b = arg;
	DexWorkflowCompletion *items = palloc0(sizeof(DexWorkflowCompletion) * b->n);

	for (int i = 0; i < b->n; i++)
	{
		items[i].run_id = &b->tasks[i].run_id;
		items[i].lock_version = b->tasks[i].lock_version;
		items[i].completion = decide(&b->tasks[i]);
	}
	dex_complete_workflow_tasks(items, b->n, false);
	for (int i = 0; i < b->n; i++)
		if (!items[i].done)
			return false;
	return true;
}

/*
 * The fast path: every task's commands, then one completion of them all, in a
 * subtransaction kept only if every completion was applied.  Returns false
 * when it was undone (for that or an error): then each task goes the slow
 * path, so that no SQL step's effect stays for a completion that was not
 * recorded.
 */
static bool
run_batch(Leased *tasks, int n)
{
	Batch		b = {tasks, n};

	return dex_subtransaction(complete_batch, &b, NULL);
}

/* The (definition, version) pairs of the definitions of one owner */
typedef struct OwnerKeys
{
	Oid			owner;
	Datum		names;			/* text[] */
	Datum		versions;		/* integer[] */
} OwnerKeys;

/*
 * Every (definition, version) pair, grouped by owner, in memory context cxt
 * (they outlive the transaction and its SPI connection): their number in
 * *n_owners; and the keys of them all said to shared memory, so that commits
 * that make other tasks do not wake the interpreter (before it polls: a
 * commit after this wakes it, wakeup.c).
 */
static OwnerKeys *
load_keys(MemoryContext cxt, int *n_owners)
{
	DexRows		rows = dex_spi_rows(&keys_plan, NULL, NULL, 0);
	MemoryContext spi_context = MemoryContextSwitchTo(cxt);
	OwnerKeys  *owners = palloc(sizeof(OwnerKeys) * Max(rows.n, 1));
	uint64	   *task_keys = palloc(sizeof(uint64) * Max(rows.n, 1));
	ArrayBuildState *names = NULL;
	ArrayBuildState *versions = NULL;
	int			n = 0;

	for (uint64 r = 0; r < rows.n; r++)
	{
		bool		isnull;
		char	   *name = dex_rows_gettext_copy(rows, r, 1);
		int32		version = (int32) dex_rows_getint64(rows, r, 2);
		Oid			owner = DatumGetObjectId(dex_rows_getdatum(rows, r, 3, &isnull));

		task_keys[r] = dex_task_key(name, version);
		if (n == 0 || owners[n - 1].owner != owner)
		{
			if (n > 0)
			{
				owners[n - 1].names = dex_array_result(names);
				owners[n - 1].versions = dex_array_result(versions);
			}
			owners[n++].owner = owner;
			names = initArrayResult(TEXTOID, CurrentMemoryContext, false);
			versions = initArrayResult(INT4OID, CurrentMemoryContext, false);
		}
		dex_array_add(names, CStringGetTextDatum(name), false);
		dex_array_add(versions, Int32GetDatum(version), false);
	}
	if (n > 0)
	{
		owners[n - 1].names = dex_array_result(names);
		owners[n - 1].versions = dex_array_result(versions);
	}
	dex_interpreter_serves(task_keys, (int) rows.n);
	MemoryContextSwitchTo(spi_context);
	*n_owners = n;
	return owners;
}

/*
 * The ready tasks of one owner's definitions, on every queue that has some:
 * leased, decided and completed in the current transaction.  Returns how
 * many.
 */
static int
run_owner_tasks(const OwnerKeys *keys)
{
	Datum		key_values[2] = {keys->names, keys->versions};
	DexRows		queues = dex_spi_rows(&queues_plan, key_values, NULL, 0);
	int			n_tasks = 0;

	for (uint64 q = 0; q < queues.n; q++)
	{
		bool		isnull;
		Datum		values[3] = {dex_rows_getdatum(queues, q, 1, &isnull), keys->names, keys->versions};
		DexRows		rows = dex_spi_rows(&poll_plan, values, NULL, 0);
		Leased	   *tasks;

		if (rows.n == 0)
			continue;
		tasks = palloc(sizeof(Leased) * rows.n);
		for (uint64 r = 0; r < rows.n; r++)
		{
			bytea	   *data = dex_rows_getbytea_copy(rows, r, 3);

			tasks[r].run_id = *DatumGetUUIDP(dex_rows_getdatum(rows, r, 1, &isnull));
			tasks[r].lock_version = dex_rows_getint64(rows, r, 2);
			tasks[r].task = (Dex__V1__WorkflowTask *)
				dex_pb_unpack(&dex__v1__workflow_task__descriptor, (uint8 *) VARDATA_ANY(data),
							  VARSIZE_ANY_EXHDR(data), "workflow task");
			tasks[r].def = definition(tasks[r].task->workflow_name,
									  tasks[r].task->workflow_version);
		}
		if (!run_batch(tasks, (int) rows.n))
			for (uint64 r = 0; r < rows.n; r++)
				run_task(&tasks[r]);
		n_tasks += rows.n;
	}
	return n_tasks;
}

/* Commit an owner's transaction; a runaway step's run failed in it needs its note no more */
static void
commit_owner(void)
{
	pg_uuid_t	run;
	char		step[NAMEDATALEN];

	dex_worker_commit();
	if (runaway_failed)
		(void) dex_interpreter_runaway(&run, step, true);
	runaway_failed = false;
}

/*
 * One pass (see the header): returns now if it found work, else DT_NOEND.
 *
 * Each owner's definitions run in a transaction of their own, so that
 * nothing a step leaves in its transaction (deferred constraints, advisory
 * locks held to the end of the transaction, SET LOCAL, the locks it took)
 * reaches another owner's steps; what outlives a transaction is undone after
 * each step (engine/interpret.c).
 */
static TimestampTz
interpreter_pass(bool *installed)
{
	MemoryContext pass_context = CurrentMemoryContext;
	int			n_tasks = 0;

	*installed = dex_worker_begin();
	loaded = NIL;
	runaway_failed = false;
	if (*installed && dex_column_exists("definition", "owner"))
	{
		int			n_owners;
		OwnerKeys  *owners = load_keys(pass_context, &n_owners);

		for (int i = 0; i < n_owners; i++)
		{
			if (i > 0)
			{
				commit_owner();
				(void) dex_worker_begin();
				loaded = NIL;
			}
			n_tasks += run_owner_tasks(&owners[i]);
		}
	}
	commit_owner();
	MemoryContextSwitchTo(pass_context);
	loaded = NIL;
	return n_tasks > 0 ? GetCurrentTimestamp() : DT_NOEND;
}

static const DexWorkerLoop interpreter_loop = {
	.type = "dex interpreter",
	.running = "dex interpreter: running workflows defined in JSON",
	.sleeping = "dex interpreter: sleeping",
	.naptime_ms = &dex_interpreter_naptime_ms,
	.interpreter = true,
	.naptime_after_error = false,
	.pass = interpreter_pass,
};

void
dex_interpreter_main(Datum main_arg)
{
	dex_worker_main(main_arg, &interpreter_loop);
}
