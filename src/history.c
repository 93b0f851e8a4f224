/*-------------------------------------------------------------------------
 *
 * history.c
 *	  The pieces every transition is built from: queue lookups, run ids,
 *	  events and payloads, inbox rows, workflow-task upkeep and activity
 *	  retries.
 *
 * Everything here runs inside the caller's transaction and SPI connection;
 * nothing commits.  Events are protobuf-c structs allocated in
 * CurrentMemoryContext (the SPI procedure context during API calls).
 *
 * Locking protocol (every transition of dex follows it; it is what keeps
 * concurrent calls from deadlocking and from losing a wake-up):
 *  1. A call that changes a run locks the run's row before any task, inbox or
 *	   activity row of it: FOR NO KEY UPDATE to write the run (completing a
 *	   workflow task, cancel, suspend, resume, admission), FOR SHARE to add to
 *	   it (an activity result or failure, an external event).  Several runs are
 *	   locked in run id order in one statement; a parent before its children.
 *  2. Holding a run lock, a call never waits for a task row that another
 *	   transaction locked: a poll, possibly in a worker's open transaction,
 *	   may hold it and then want the run.  A workflow task is added only if
 *	   none is visible (dex_ensure_workflow_tasks), and pending work is
 *	   withdrawn with SKIP LOCKED (dex_end_runs): a task that a poll held then
 *	   is left to the ended run and refused when completed, and polls and the
 *	   scheduler clear such leftovers.
 *  3. No wake-up is lost: whoever deletes a run's workflow task holds the run
 *	   lock, and looks for unseen events after the events' writers (who held
 *	   the run lock too) have committed, so an event either finds the task
 *	   still there, to be shown when it is polled or re-created when it is
 *	   completed, or finds no task and adds one.
 *  4. Events for another run (a child's result for its parent) do not take
 *	   that run's lock: they are written as due at once and handed over by
 *	   the scheduler, which locks runs with SKIP LOCKED and so never waits.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "miscadmin.h"
#include "port.h"
#include "storage/proc.h"
#include "utils/memutils.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "dex.h"

/* ----------------------------------------------------------------
 * Queues
 * ----------------------------------------------------------------
 */

/*
 * Queues are looked up through a small cache that lives as long as the
 * current top-level transaction: a batch names the same few queues again and
 * again, and queue rows do not change identity within a transaction.
 */
#define QUEUE_CACHE_SIZE 32

static DexQueue queue_cache[QUEUE_CACHE_SIZE];
static int	queue_cache_n = 0;
static LocalTransactionId queue_cache_lxid = InvalidLocalTransactionId;

static void
queue_cache_check(void)
{
	if (queue_cache_lxid != MyProc->lxid)
	{
		queue_cache_n = 0;
		queue_cache_lxid = MyProc->lxid;
	}
}

static void
queue_cache_add(int row, const char *name)
{
	DexQueue   *q;
	bool		isnull;
	Datum		d;

	if (queue_cache_n == QUEUE_CACHE_SIZE)
		queue_cache_n = 0;		/* start over: it is only a cache */
	q = &queue_cache[queue_cache_n++];
	q->id = (int32) dex_spi_getint64(row, 1);
	q->name = MemoryContextStrdup(TopTransactionContext, name);
	q->is_workflow = dex_spi_getbool(row, 3);
	q->paused = dex_spi_getbool(row, 4);
	d = dex_spi_getdatum(row, 5, &isnull);
	q->capacity = isnull ? 0 : DatumGetInt32(d);
	d = dex_spi_getdatum(row, 6, &isnull);
	q->n_grantees = -1;
	q->grantees = NULL;
	if (!isnull)
	{
		ArrayType  *a = DatumGetArrayTypeP(d);
		int			n = ArrayGetNItems(ARR_NDIM(a), ARR_DIMS(a));

		q->n_grantees = n;
		q->grantees = MemoryContextAlloc(TopTransactionContext, sizeof(Oid) * Max(n, 1));
		if (n > 0)
			memcpy(q->grantees, ARR_DATA_PTR(a), sizeof(Oid) * n);
	}
}

/* dex.alter_queue changed a queue: forget what this transaction cached */
void
dex_queue_cache_reset(void)
{
	queue_cache_n = 0;
}

/*
 * A queue's row with the roles it is granted to (privileges.c); a schema
 * still on version 1.0 has no grants.  Qualified throughout: dex.wait_for_tasks
 * cannot pin its search_path.
 */
#define QUEUE_COLUMNS(grantees) \
	"SELECT q.id, q.name, q.kind OPERATOR(pg_catalog.=) 'workflow', " \
	"q.status OPERATOR(pg_catalog.=) 'PAUSED', q.capacity, " grantees " FROM dex.queue q "
#define QUEUE_GRANTEES \
	"ARRAY(SELECT g.grantee FROM dex.queue_grant g WHERE g.queue_id OPERATOR(pg_catalog.=) q.id)"
#define QUEUE_NO_GRANTEES "NULL::pg_catalog.oid[]"

static DexPlan lookup_queue_plans[2] = {
	{QUEUE_COLUMNS(QUEUE_NO_GRANTEES) "WHERE q.name OPERATOR(pg_catalog.=) $1", 1, {TEXTOID}},
	{QUEUE_COLUMNS(QUEUE_GRANTEES) "WHERE q.name OPERATOR(pg_catalog.=) $1", 1, {TEXTOID}}
};

bool
dex_lookup_queue(const char *name, DexQueue *queue)
{
	Datum		values[1];

	queue_cache_check();
	for (int i = 0; i < queue_cache_n; i++)
		if (strcmp(queue_cache[i].name, name) == 0)
		{
			*queue = queue_cache[i];
			return true;
		}

	values[0] = CStringGetTextDatum(name);
	dex_spi_exec(&lookup_queue_plans[dex_queue_grants_exist()], values, NULL, 1);
	if (SPI_processed == 0)
		return false;
	queue_cache_add(0, name);
	*queue = queue_cache[queue_cache_n - 1];
	return true;
}

/*
 * The queue of that name, which must exist, be of the wanted kind and be one
 * the caller may use (privileges.c).
 */
DexQueue
dex_require_queue(const char *name, bool want_workflow)
{
	DexQueue	queue;

	if (name == NULL || name[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s queue name must not be empty",
						want_workflow ? "workflow" : "activity")));
	if (!dex_lookup_queue(name, &queue))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("queue \"%s\" does not exist", name),
				 errhint("Create it with dex.create_queue('%s', '%s').",
						 name, want_workflow ? "workflow" : "activity")));
	if (queue.is_workflow != want_workflow)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("queue \"%s\" is not a%s queue", name,
						want_workflow ? " workflow" : "n activity"),
				 errdetail("It is a%s queue.",
						   queue.is_workflow ? " workflow" : "n activity")));
	dex_check_queue_use(&queue);
	return queue;
}

static DexPlan queue_by_id_plans[2] = {
	{QUEUE_COLUMNS(QUEUE_NO_GRANTEES) "WHERE q.id OPERATOR(pg_catalog.=) $1", 1, {INT4OID}},
	{QUEUE_COLUMNS(QUEUE_GRANTEES) "WHERE q.id OPERATOR(pg_catalog.=) $1", 1, {INT4OID}}
};

/* The queue with that id; false if there is none. */
bool
dex_queue_by_id(int32 queue_id, DexQueue *queue)
{
	Datum		values[1] = {Int32GetDatum(queue_id)};

	queue_cache_check();
	for (int i = 0; i < queue_cache_n; i++)
		if (queue_cache[i].id == queue_id)
		{
			*queue = queue_cache[i];
			return true;
		}

	dex_spi_exec(&queue_by_id_plans[dex_queue_grants_exist()], values, NULL, 1);
	if (SPI_processed == 0)
		return false;
	queue_cache_add(0, dex_spi_gettext_copy(0, 2));
	*queue = queue_cache[queue_cache_n - 1];
	return true;
}

const char *
dex_queue_name(int32 queue_id)
{
	DexQueue	queue;

	return dex_queue_by_id(queue_id, &queue) ? queue.name : "";
}

/*
 * Tasks ended or left their leases: the rows of the current SPI result whose
 * queue has a capacity (column "limited_col", read by the statement itself
 * with DEX_QUEUE_LIMITED_SQL, so no lookup is added) may have room again, and
 * their waiting workers are told at commit.
 */
void
dex_queue_room_freed_spi(int queue_col, int limited_col)
{
	for (uint64 i = 0; i < SPI_processed; i++)
		if (dex_spi_getbool((int) i, limited_col))
			dex_queue_work_added((int32) dex_spi_getint64((int) i, queue_col));
}

/* ----------------------------------------------------------------
 * Ids and times
 * ----------------------------------------------------------------
 */

/*
 * A new UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, 12 bits of
 * sub-millisecond time, then 62 random bits.  The 60 bits of time never
 * repeat or go back within a backend (RFC 9562, 6.2 method 3): an id made in
 * the same 1/4096 ms as the previous one, or after the clock stepped back,
 * takes the previous time plus one step, so the ids of one create_runs call
 * sort in the order of its arguments.
 */
pg_uuid_t *
dex_new_uuid(void)
{
	static uint64 last_time = 0;	/* unix_ms << 12 | sub_ms of the last id */
	pg_uuid_t  *uuid = palloc(sizeof(pg_uuid_t));
	TimestampTz now = GetCurrentTimestamp();
	int64		unix_us = now + (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;
	uint64		time = ((uint64) (unix_us / 1000) << 12) | (uint64) ((unix_us % 1000) * 4096 / 1000);
	uint64		unix_ms;
	uint32		sub_ms;

	if (time <= last_time)
		time = last_time + 1;
	last_time = time;
	unix_ms = time >> 12;
	sub_ms = (uint32) (time & 0xfff);

	if (!pg_strong_random(uuid->data + 8, 8))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate random values")));
	for (int i = 0; i < 6; i++)
		uuid->data[i] = (uint8) (unix_ms >> (40 - 8 * i));
	uuid->data[6] = 0x70 | (uint8) (sub_ms >> 8);
	uuid->data[7] = (uint8) sub_ms;
	uuid->data[8] = 0x80 | (uuid->data[8] & 0x3f);
	return uuid;
}

char *
dex_uuid_to_cstring(const pg_uuid_t *uuid)
{
	return DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(uuid)));
}

#define UNIX_TO_PG_USECS ((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

Google__Protobuf__Timestamp *
dex_pb_timestamp(TimestampTz ts)
{
	Google__Protobuf__Timestamp *pb = palloc(sizeof(*pb));
	int64		unix_us = ts + UNIX_TO_PG_USECS;
	int64		secs = unix_us / USECS_PER_SEC;
	int64		us = unix_us % USECS_PER_SEC;

	if (us < 0)
	{
		secs -= 1;
		us += USECS_PER_SEC;
	}
	google__protobuf__timestamp__init(pb);
	pb->seconds = secs;
	pb->nanos = (int32) (us * 1000);
	return pb;
}

TimestampTz
dex_timestamp_from_pb(const Google__Protobuf__Timestamp *ts)
{
	return ts->seconds * USECS_PER_SEC + ts->nanos / 1000 - UNIX_TO_PG_USECS;
}

/* ----------------------------------------------------------------
 * Events and payloads
 * ----------------------------------------------------------------
 */

Dex__V1__WorkflowEvent *
dex_new_event(int32 id, TimestampTz ts)
{
	Dex__V1__WorkflowEvent *event = palloc(sizeof(*event));

	dex__v1__workflow_event__init(event);
	event->id = id;
	event->timestamp = dex_pb_timestamp(ts);
	return event;
}

Dex__V1__Payload *
dex_payload_from_jsonb(Jsonb *value)
{
	Dex__V1__Payload *payload;

	if (value == NULL)
		return NULL;
	payload = palloc(sizeof(*payload));
	dex__v1__payload__init(payload);
	payload->content_case = DEX__V1__PAYLOAD__CONTENT_JSON;
	payload->json = JsonbToCString(NULL, &value->root, VARSIZE(value));
	dex_check_payload_size(strlen(payload->json), "payload");
	return payload;
}

/*
 * A payload a client sends as protobuf: within dex.max_payload_size, its
 * JSON text valid.
 */
Dex__V1__Payload *
dex_payload_from_bytea(bytea *data, const char *what)
{
	Dex__V1__Payload *payload;

	if (data == NULL)
		return NULL;
	dex_check_payload_size(VARSIZE_ANY_EXHDR(data), what);
	payload = dex_payload_unpack(data, what);
	dex_pb_check_payloads((ProtobufCMessage *) payload, what);
	return payload;
}

/*
 * A stored payload: it was checked when it came in, and reads are never
 * limited (dex.max_payload_size may have been lowered since).
 */
Dex__V1__Payload *
dex_payload_unpack(bytea *data, const char *what)
{
	if (data == NULL)
		return NULL;
	return (Dex__V1__Payload *)
		dex_pb_unpack(&dex__v1__payload__descriptor,
					  (uint8 *) VARDATA_ANY(data), VARSIZE_ANY_EXHDR(data), what);
}

/*
 * A payload as a JSON value: JSON payloads are their value, anything else
 * its canonical Payload JSON.
 */
Jsonb *
dex_payload_to_jsonb(const Dex__V1__Payload *payload)
{
	if (payload == NULL)
		return NULL;
	if (payload->content_case == DEX__V1__PAYLOAD__CONTENT_JSON &&
		payload->n_metadata == 0)
		return DatumGetJsonbP(DirectFunctionCall1(jsonb_in,
												  CStringGetDatum(payload->json)));
	return dex_pb_to_jsonb((const ProtobufCMessage *) payload);
}

/* ----------------------------------------------------------------
 * Inbox and workflow tasks
 * ----------------------------------------------------------------
 */

/*
 * Inbox rows are written in batches: one multi-row INSERT for the events,
 * one for the workflow tasks of the runs that have a visible event.
 */
void
dex_inbox_batch_init(DexInboxBatch *b)
{
	b->run_ids = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	b->visible_from = initArrayResult(TIMESTAMPTZOID, CurrentMemoryContext, false);
	b->delayed = initArrayResult(BOOLOID, CurrentMemoryContext, false);
	b->events = initArrayResult(BYTEAOID, CurrentMemoryContext, false);
	b->timer_ids = initArrayResult(INT4OID, CurrentMemoryContext, false);
	b->visible_runs = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	b->n = 0;
}

static void
inbox_batch_add_row(DexInboxBatch *b, pg_uuid_t *run_id, Dex__V1__WorkflowEvent *event,
					TimestampTz visible_from, bool delayed)
{
	int32		timer_id = 0;

	if (event->subject_case == DEX__V1__WORKFLOW_EVENT__SUBJECT_TIMER_ELAPSED)
		timer_id = event->timer_elapsed->timer_created_event_id;

	dex_array_add(b->run_ids, UUIDPGetDatum(run_id), false);
	dex_array_add(b->visible_from, TimestampTzGetDatum(visible_from), false);
	dex_array_add(b->delayed, BoolGetDatum(delayed), false);
	dex_array_add(b->events, PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) event)), false);
	dex_array_add(b->timer_ids, Int32GetDatum(timer_id), timer_id == 0);
	if (delayed)
		dex_wake_scheduler_at_commit(visible_from);
	else
		dex_array_add(b->visible_runs, UUIDPGetDatum(run_id), false);
	b->n++;
}

/*
 * An event for a run whose row the caller has locked (see the file header):
 * visible at once, the run gets a workflow task with the batch; later, the
 * scheduler hands it over when due.
 */
void
dex_inbox_batch_add(DexInboxBatch *b, pg_uuid_t *run_id, Dex__V1__WorkflowEvent *event,
					TimestampTz visible_from)
{
	inbox_batch_add_row(b, run_id, event, visible_from,
						visible_from > GetCurrentTransactionStartTimestamp());
}

/*
 * An event for a run whose row the caller has not locked (a child's result
 * for its parent): due at once, but handed over by the scheduler.
 */
void
dex_inbox_batch_add_unlocked(DexInboxBatch *b, pg_uuid_t *run_id, Dex__V1__WorkflowEvent *event)
{
	inbox_batch_add_row(b, run_id, event, GetCurrentTransactionStartTimestamp(), true);
}

static DexPlan insert_inbox_plan = {
	"INSERT INTO dex.workflow_inbox (run_id, visible_from, delayed, event, timer_id) "
	"SELECT * FROM unnest($1::uuid[], $2::timestamptz[], $3::boolean[], $4::bytea[], $5::integer[])",
	5, {UUIDARRAYOID, TIMESTAMPTZARRAYOID, BOOLARRAYOID, BYTEAARRAYOID, INT4ARRAYOID}
};

/*
 * Write the batch: events visible now also make sure their runs have a
 * workflow task; delayed ones are the scheduler's to hand over when due.
 */
void
dex_inbox_batch_flush(DexInboxBatch *b)
{
	Datum		values[5];

	if (b->n == 0)
		return;
	values[0] = dex_array_result(b->run_ids);
	values[1] = dex_array_result(b->visible_from);
	values[2] = dex_array_result(b->delayed);
	values[3] = dex_array_result(b->events);
	values[4] = dex_array_result(b->timer_ids);
	dex_spi_exec(&insert_inbox_plan, values, NULL, 0);
	if (b->visible_runs->nelems > 0)
		dex_ensure_workflow_tasks(dex_array_result(b->visible_runs));
	dex_inbox_batch_init(b);
}

/* Add one event to a run's inbox (see dex_inbox_batch_flush). */
void
dex_insert_inbox(pg_uuid_t *run_id, Dex__V1__WorkflowEvent *event,
				 TimestampTz visible_from)
{
	DexInboxBatch b;

	dex_inbox_batch_init(&b);
	dex_inbox_batch_add(&b, run_id, event, visible_from);
	dex_inbox_batch_flush(&b);
}

/*
 * A task row that is visible is never locked or waited for (rule 2 of the
 * file header); ON CONFLICT only meets a task inserted by a transaction still
 * in progress, which holds the run lock too and does not wait for us.
 */
static DexPlan ensure_tasks_plan = {
	"INSERT INTO dex.workflow_task (queue_id, run_id, priority) "
	"SELECT r.queue_id, r.id, r.priority FROM dex.workflow_run r "
	"WHERE r.id = ANY ($1) AND r.status = ANY ('{CREATED,RUNNING}'::text[]) "
	"AND NOT EXISTS (SELECT 1 FROM dex.workflow_task t WHERE t.run_id = r.id) "
	"AND (r.concurrency_key IS NULL OR NOT EXISTS (SELECT 1 FROM dex.concurrency_wait w "
	"     WHERE w.key = r.concurrency_key AND w.run_id = r.id)) "
	"ORDER BY r.id ON CONFLICT DO NOTHING RETURNING queue_id",
	1, {UUIDARRAYOID}
};

/*
 * Make sure runs that can make progress have a workflow task (not runs that
 * wait for their concurrency key).  The caller holds the runs' locks.
 */
void
dex_ensure_workflow_tasks(Datum run_ids)
{
	Datum		values[1] = {run_ids};

	dex_spi_exec(&ensure_tasks_plan, values, NULL, 0);
	dex_queue_work_added_spi(1);
	dex_stat_count_spi(DEX_STAT_TASKS_CREATED, 1);
}

static DexPlan lock_runs_plan = {
	"SELECT id, status FROM dex.workflow_run WHERE id = ANY ($1) ORDER BY id FOR NO KEY UPDATE",
	1, {UUIDARRAYOID}
};

static DexPlan share_runs_plan = {
	"SELECT id, status FROM dex.workflow_run WHERE id = ANY ($1) ORDER BY id FOR SHARE",
	1, {UUIDARRAYOID}
};

/*
 * Lock the runs (a uuid[] datum), in id order: to write them, or to add
 * events to them (share).  SPI_tuptable holds (id, status) of those that
 * exist, in id order.
 */
void
dex_lock_runs(Datum run_ids, bool share)
{
	Datum		values[1] = {run_ids};

	dex_spi_exec(share ? &share_runs_plan : &lock_runs_plan, values, NULL, 0);
}

bool
dex_status_is_terminal(const char *status)
{
	return strcmp(status, "COMPLETED") == 0 || strcmp(status, "FAILED") == 0 ||
		strcmp(status, "CANCELLED") == 0;
}

void
dex_array_add(ArrayBuildState *state, Datum value, bool isnull)
{
	accumArrayResult(state, value, isnull, state->element_type, CurrentMemoryContext);
}

Datum
dex_array_result(ArrayBuildState *state)
{
	return makeArrayResult(state, CurrentMemoryContext);
}

/* ----------------------------------------------------------------
 * Activity retries
 * ----------------------------------------------------------------
 */

static Google__Protobuf__Duration *
duration_from_ms(int64 ms)
{
	Google__Protobuf__Duration *d = palloc(sizeof(*d));

	google__protobuf__duration__init(d);
	d->seconds = ms / 1000;
	d->nanos = (int32) ((ms % 1000) * 1000000);
	return d;
}

/*
 * The retry policy an activity runs under: the given one with unset
 * (zero) fields taken from the dex.retry_* settings.
 */
Dex__V1__RetryPolicy *
dex_effective_retry_policy(const Dex__V1__RetryPolicy *given)
{
	Dex__V1__RetryPolicy *p = palloc(sizeof(*p));

	dex__v1__retry_policy__init(p);
	if (given)
	{
		if (given->max_attempts < 0 || given->multiplier < 0 ||
			given->randomization_factor < 0 || given->randomization_factor > 1 ||
			(given->multiplier > 0 && given->multiplier < 1) ||
			(given->initial_delay && dex_duration_ms(given->initial_delay) < 0) ||
			(given->max_delay && dex_duration_ms(given->max_delay) < 0) ||
			isnan(given->multiplier) || isnan(given->randomization_factor))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid retry policy"),
					 errdetail("max_attempts and delays must not be negative, multiplier must be at least 1 and randomization_factor between 0 and 1.")));
		p->max_attempts = given->max_attempts;
		p->initial_delay = given->initial_delay;
		p->multiplier = given->multiplier;
		p->randomization_factor = given->randomization_factor;
		p->max_delay = given->max_delay;
		p->n_non_retryable_types = given->n_non_retryable_types;
		p->non_retryable_types = given->non_retryable_types;
	}
	if (p->max_attempts == 0)
		p->max_attempts = dex_retry_max_attempts;
	if (p->initial_delay == NULL)
		p->initial_delay = duration_from_ms(dex_retry_initial_delay_ms);
	if (p->multiplier == 0)
		p->multiplier = dex_retry_multiplier;
	if (p->randomization_factor == 0)
		p->randomization_factor = dex_retry_randomization;
	if (p->max_delay == NULL)
		p->max_delay = duration_from_ms(dex_retry_max_delay_ms);
	return p;
}

/*
 * When attempt "attempt" + 1 may start after attempt "attempt" failed:
 * initial_delay * multiplier^(attempt-1), spread by +/- randomization_factor,
 * capped at max_delay.
 */
TimestampTz
dex_retry_time(const Dex__V1__RetryPolicy *policy, int attempt)
{
	double		delay = (double) dex_duration_ms(policy->initial_delay);
	double		max_delay = (double) dex_duration_ms(policy->max_delay);

	delay *= pow(policy->multiplier, Max(attempt - 1, 0));
	if (policy->randomization_factor > 0)
		delay *= 1.0 + policy->randomization_factor *
			(2.0 * pg_prng_double(&pg_global_prng_state) - 1.0);
	if (delay > max_delay)
		delay = max_delay;
	if (delay < 0 || isnan(delay))
		delay = 0;
	return GetCurrentTransactionStartTimestamp() + (int64) (delay * 1000.0);
}

static bool
failure_is_non_retryable(const Dex__V1__RetryPolicy *policy,
						 const Dex__V1__Failure *failure)
{
	if (failure->terminal)
		return true;
	if (failure->type && failure->type[0] != '\0')
	{
		for (size_t i = 0; i < policy->n_non_retryable_types; i++)
			if (strcmp(policy->non_retryable_types[i], failure->type) == 0)
				return true;
	}
	return false;
}

static DexPlan retry_activity_plan = {
	"UPDATE dex.activity_task SET status = 'CREATED', attempt = attempt OPERATOR(pg_catalog.+) 1, "
	"visible_from = $3, locked_by = NULL, locked_until = NULL, last_failure = $4 "
	"WHERE run_id OPERATOR(pg_catalog.=) $1 AND event_id OPERATOR(pg_catalog.=) $2",
	4, {UUIDOID, INT4OID, TIMESTAMPTZOID, BYTEAOID}
};

/* the logged record of the retry, for the rebuild after a crash */
static DexPlan record_retry_plan = {
	"INSERT INTO dex.activity_retry (run_id, event_id, attempt, visible_from, last_failure, heartbeat_details) "
	"SELECT $1, $2, $3, $4, $5, t.heartbeat_details FROM dex.activity_task t "
	"WHERE t.run_id = $1 AND t.event_id = $2 "
	"ON CONFLICT (run_id, event_id) DO UPDATE "
	"SET attempt = EXCLUDED.attempt, visible_from = EXCLUDED.visible_from, "
	"last_failure = EXCLUDED.last_failure, heartbeat_details = EXCLUDED.heartbeat_details",
	5, {UUIDOID, INT4OID, INT4OID, TIMESTAMPTZOID, BYTEAOID}
};

static DexPlan delete_activity_plan = {
	"WITH r AS (DELETE FROM dex.activity_retry WHERE run_id OPERATOR(pg_catalog.=) $1 "
	"           AND event_id OPERATOR(pg_catalog.=) $2) "
	"DELETE FROM dex.activity_task WHERE run_id OPERATOR(pg_catalog.=) $1 AND event_id OPERATOR(pg_catalog.=) $2",
	2, {UUIDOID, INT4OID}
};

/*
 * An attempt of a leased activity failed (dex.fail_task or an expired
 * lease); the caller has fenced and locked the task row.  Retry it after the
 * policy's backoff, or fail the activity and tell the workflow.
 */
void
dex_activity_attempt_failed(pg_uuid_t *run_id, int32 event_id, int32 attempt,
							bytea *retry_policy, TimestampTz deadline,
							Dex__V1__Failure *failure)
{
	Dex__V1__RetryPolicy *policy;
	TimestampTz retry_at = 0;
	bool		retry;

	policy = (Dex__V1__RetryPolicy *)
		dex_pb_unpack(&dex__v1__retry_policy__descriptor,
					  (uint8 *) VARDATA_ANY(retry_policy),
					  VARSIZE_ANY_EXHDR(retry_policy), "retry policy");

	retry = !failure_is_non_retryable(policy, failure) && attempt < policy->max_attempts;
	if (retry)
	{
		retry_at = dex_retry_time(policy, attempt);
		if (retry_at >= deadline)
		{
			/* the schedule-to-close timeout ends the activity */
			Dex__V1__Failure *timeout = palloc(sizeof(*timeout));

			dex__v1__failure__init(timeout);
			timeout->message = "the activity's schedule-to-close timeout passed";
			timeout->type = "dex.ScheduleToCloseTimeout";
			timeout->terminal = true;
			timeout->cause = failure;
			failure = timeout;
			retry = false;
		}
	}
	if (retry)
	{
		Datum		values[4];

		values[0] = UUIDPGetDatum(run_id);
		values[1] = Int32GetDatum(event_id);
		values[2] = TimestampTzGetDatum(retry_at);
		values[3] = PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) failure));
		dex_spi_exec(&retry_activity_plan, values, NULL, 0);
		{
			Datum		retry[5] = {values[0], values[1], Int32GetDatum(attempt + 1),
			values[2], values[3]};

			dex_spi_exec(&record_retry_plan, retry, NULL, 0);
		}
		dex_wake_scheduler_at_commit(retry_at);
	}
	else
	{
		Datum		values[2] = {UUIDPGetDatum(run_id), Int32GetDatum(event_id)};
		TimestampTz now = GetCurrentTransactionStartTimestamp();
		Dex__V1__WorkflowEvent *event = dex_new_event(0, now);
		Dex__V1__ActivityTaskFailed *failed = palloc(sizeof(*failed));

		dex_spi_exec(&delete_activity_plan, values, NULL, 0);

		dex__v1__activity_task_failed__init(failed);
		failed->activity_task_created_event_id = event_id;
		failed->failure = failure;
		failed->attempts = attempt;
		event->subject_case = DEX__V1__WORKFLOW_EVENT__SUBJECT_ACTIVITY_TASK_FAILED;
		event->activity_task_failed = failed;
		dex_insert_inbox(run_id, event, now);
	}
}

/* ----------------------------------------------------------------
 * Concurrency keys
 *
 * A key is held by one run at a time per workflow queue: keys, like
 * instance ids, are per queue, so that runs of different tenants never wait
 * for each other and a run's wait says nothing of another tenant's runs
 * (instances.c says why).  A schema still on version 1.1 has no queue column
 * in dex.concurrency_slot and dex.concurrency_wait: until ALTER EXTENSION
 * dex UPDATE its keys stay global, with the statements of 1.1 (each pair of
 * plans below: [0] for 1.1, [1] per queue).
 * ----------------------------------------------------------------
 */

/* Whether concurrency keys are per queue (schema 1.2 and later). */
int
dex_keys_per_queue(void)
{
	return dex_column_exists("concurrency_slot", "queue_id");
}

/*
 * Claims the key, or locks its current holder's slot row: a run ending
 * meanwhile (dex_release_keys) then waits for us, and sees our wait row when
 * it admits the next run.  $1 key, $2 run, $3 queue.
 */
static DexPlan claim_key_plans[2] = {
	{"INSERT INTO dex.concurrency_slot (key, run_id) VALUES ($1, $2) "
		"ON CONFLICT (key) DO UPDATE SET run_id = dex.concurrency_slot.run_id WHERE false "
		"RETURNING run_id",
	3, {TEXTOID, UUIDOID, INT4OID}},
	{"INSERT INTO dex.concurrency_slot (queue_id, key, run_id) VALUES ($3, $1, $2) "
		"ON CONFLICT (queue_id, key) DO UPDATE SET run_id = dex.concurrency_slot.run_id WHERE false "
		"RETURNING run_id",
	3, {TEXTOID, UUIDOID, INT4OID}}
};

/* $1 key, $2 priority, $3 run, $4 queue */
static DexPlan wait_for_key_plans[2] = {
	{"INSERT INTO dex.concurrency_wait (key, priority, run_id) VALUES ($1, $2, $3)",
	4, {TEXTOID, INT2OID, UUIDOID, INT4OID}},
	{"INSERT INTO dex.concurrency_wait (queue_id, key, priority, run_id) VALUES ($4, $1, $2, $3)",
	4, {TEXTOID, INT2OID, UUIDOID, INT4OID}}
};

/*
 * Admit a new run with a concurrency key on its queue: it holds the key if
 * nobody does (returns true: give it a workflow task), else it waits for it.
 */
bool
dex_admit_run(pg_uuid_t *run_id, int32 queue_id, const char *key, int32 priority)
{
	int			v = dex_keys_per_queue();
	Datum		values[4];

	values[0] = CStringGetTextDatum(key);
	values[1] = UUIDPGetDatum(run_id);
	values[2] = Int32GetDatum(queue_id);
	dex_spi_exec(&claim_key_plans[v], values, NULL, 0);
	if (SPI_processed > 0)
		return true;
	values[1] = Int16GetDatum((int16) priority);
	values[2] = UUIDPGetDatum(run_id);
	values[3] = Int32GetDatum(queue_id);
	dex_spi_exec(&wait_for_key_plans[v], values, NULL, 0);
	return false;
}

/* $1 the runs that ended; returns the keys they held, with their queues */
static DexPlan release_keys_plans[2] = {
	{"WITH w AS (DELETE FROM dex.concurrency_wait w USING dex.workflow_run r "
		"           WHERE r.id = ANY ($1) AND w.key = r.concurrency_key AND w.run_id = r.id) "
		"DELETE FROM dex.concurrency_slot WHERE run_id = ANY ($1) RETURNING key, 0",
	1, {UUIDARRAYOID}},
	{"WITH w AS (DELETE FROM dex.concurrency_wait w USING dex.workflow_run r "
		"           WHERE r.id = ANY ($1) AND w.queue_id = r.queue_id AND w.key = r.concurrency_key "
		"             AND w.run_id = r.id) "
		"DELETE FROM dex.concurrency_slot WHERE run_id = ANY ($1) RETURNING key, queue_id",
	1, {UUIDARRAYOID}}
};

/* $1 key, $2 queue */
static DexPlan next_waiting_plans[2] = {
	{"SELECT run_id FROM dex.concurrency_wait WHERE key = $1 "
		"ORDER BY priority DESC, run_id LIMIT 1",
	2, {TEXTOID, INT4OID}},
	{"SELECT run_id FROM dex.concurrency_wait WHERE queue_id = $2 AND key = $1 "
		"ORDER BY priority DESC, run_id LIMIT 1",
	2, {TEXTOID, INT4OID}}
};

/*
 * The waiting run is locked first (rule 1 of the file header): a cancellation
 * of it either ended before (its wait row is gone, and the next one is taken)
 * or waits for the admission and then sees the slot and task it must free.
 * $1 key, $2 run, $3 queue.
 */
#define ADMIT_RUN \
	"WITH r AS MATERIALIZED (SELECT id, queue_id, priority, status FROM dex.workflow_run " \
	"                        WHERE id = $2 FOR NO KEY UPDATE), "
#define ADMIT_TASK \
	"INSERT INTO dex.workflow_task (queue_id, run_id, priority) " \
	"SELECT r.queue_id, r.id, r.priority FROM r JOIN slot ON slot.run_id = r.id " \
	"WHERE r.status = ANY ('{CREATED,RUNNING}'::text[]) " \
	"RETURNING queue_id, (SELECT count(*) FROM slot)"
static DexPlan admit_plans[2] = {
	{ADMIT_RUN
		"     w AS (DELETE FROM dex.concurrency_wait w USING r "
		"           WHERE w.key = $1 AND w.run_id = r.id RETURNING w.run_id), "
		"     slot AS (INSERT INTO dex.concurrency_slot (key, run_id) SELECT $1, run_id FROM w "
		"              RETURNING run_id) "
		ADMIT_TASK,
	3, {TEXTOID, UUIDOID, INT4OID}},
	{ADMIT_RUN
		"     w AS (DELETE FROM dex.concurrency_wait w USING r "
		"           WHERE w.queue_id = $3 AND w.key = $1 AND w.run_id = r.id RETURNING w.run_id), "
		"     slot AS (INSERT INTO dex.concurrency_slot (queue_id, key, run_id) SELECT $3, $1, run_id FROM w "
		"              RETURNING run_id) "
		ADMIT_TASK,
	3, {TEXTOID, UUIDOID, INT4OID}}
};

/*
 * Runs that ended give up their keys (or their place in a key's queue); each
 * freed key goes to the next run waiting for it, which gets its first
 * workflow task.  A waiting run that went away meanwhile (cancelled) is
 * passed over for the next one.
 */
void
dex_release_keys(Datum run_ids)
{
	int			v = dex_keys_per_queue();
	Datum		values[3] = {run_ids, (Datum) 0, (Datum) 0};
	int			n;
	char	  **keys;
	int32	   *queues;

	dex_spi_exec(&release_keys_plans[v], values, NULL, 0);
	n = (int) SPI_processed;
	keys = palloc(sizeof(char *) * Max(n, 1));
	queues = palloc(sizeof(int32) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		keys[i] = dex_spi_gettext_copy(i, 1);
		queues[i] = (int32) dex_spi_getint64(i, 2);
	}
	for (int i = 0; i < n; i++)
	{
		for (;;)
		{
			bool		isnull;
			pg_uuid_t	next;

			values[0] = CStringGetTextDatum(keys[i]);
			values[1] = Int32GetDatum(queues[i]);
			dex_spi_exec(&next_waiting_plans[v], values, NULL, 1);
			if (SPI_processed == 0)
				break;			/* nobody waits: the key is free */
			memcpy(&next, DatumGetUUIDP(dex_spi_getdatum(0, 1, &isnull)), sizeof(pg_uuid_t));
			values[1] = UUIDPGetDatum(&next);
			values[2] = Int32GetDatum(queues[i]);
			dex_spi_exec(&admit_plans[v], values, NULL, 0);
			if (SPI_processed > 0)
			{
				dex_queue_work_added_spi(1);
				dex_stat_count_spi(DEX_STAT_TASKS_CREATED, 1);
				break;
			}
			/* no task: the run's wait row went away before we locked it */
			CHECK_FOR_INTERRUPTS();
		}
	}
}
