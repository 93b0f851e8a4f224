/*-------------------------------------------------------------------------
 *
 * retry.c
 *	  Retries: the effective retry policy, the backoff, and what happens
 *	  when an activity's attempt or a workflow task fails.
 *
 * A retry is two rows: the activity task, made visible again at the retry
 * time, and its logged record in dex.activity_retry, from which the rebuild
 * after a crash restores the attempt count and the backoff.  An activity
 * that fails for good is deleted, and its run told (ActivityTaskFailed).
 * Runs in the caller's transaction and SPI connection; the caller has
 * fenced and locked the task row and locked its run (the locking protocol
 * in src/README.md: dex.fail_task, or the scheduler for an expired lease).
 *
 * A failed workflow task (dex_fail_workflow_task) is its row leased again
 * after a backoff, or its run parked BLOCKED; the caller has locked the run,
 * and the fence is here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "common/pg_prng.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/timestamp.h"

#include "engine/engine.h"

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
 * The retry policy an activity runs under: the given one with unset fields
 * (zero, or for randomization_factor absent) taken from the dex.retry_*
 * settings.
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
		p->randomization_case = given->randomization_case;
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
	/* explicit presence: a given 0 turns jitter off */
	if (p->randomization_case != DEX__V1__RETRY_POLICY__RANDOMIZATION_RANDOMIZATION_FACTOR)
	{
		p->randomization_case = DEX__V1__RETRY_POLICY__RANDOMIZATION_RANDOMIZATION_FACTOR;
		p->randomization_factor = dex_retry_randomization;
	}
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

/*
 * The next attempt waits out its backoff; that of a suspended run waits for
 * dex.resume_run too (lifecycle.c), which takes the backoff's end from the
 * logged record below.
 */
static DexPlan retry_activity_plan = {
	"UPDATE dex.activity_task SET status = 'CREATED', attempt = attempt OPERATOR(pg_catalog.+) 1, "
	"visible_from = CASE WHEN (SELECT r.status FROM dex.workflow_run r WHERE r.id OPERATOR(pg_catalog.=) $1) "
	"                         OPERATOR(pg_catalog.=) 'SUSPENDED' THEN 'infinity' ELSE $3 END, "
	"locked_by = NULL, locked_until = NULL, last_failure = $4 "
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
	dex_record_activity_attempt(run_id, event_id, failure);

	retry = !failure_is_non_retryable(policy, failure) && attempt < policy->max_attempts;
	if (retry)
	{
		retry_at = dex_retry_time(policy, attempt);
		if (retry_at >= deadline)
		{
			/* the schedule-to-close timeout ends the activity */
			Dex__V1__Failure *timeout = dex_new_failure("the activity's schedule-to-close timeout passed",
														"dex.ScheduleToCloseTimeout", true);

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

		dex_spi_exec(&delete_activity_plan, values, NULL, 0);
		dex_insert_inbox(run_id, dex_event_activity_task_failed(now, event_id, failure, attempt), now);
	}
}

/* ----------------------------------------------------------------
 * Workflow tasks
 * ----------------------------------------------------------------
 */

/* the fence: the failing worker's lease is withdrawn (a new lock version) */
static DexPlan fence_failed_workflow_task_plan = {
	"UPDATE dex.workflow_task t SET lock_version = nextval('dex.lease_version'), locked_until = 'infinity' "
	"WHERE t.run_id = $1 AND t.lock_version = $2 AND t.locked_by IS NOT NULL "
	"RETURNING t.run_id, t.queue_id, " DEX_QUEUE_LIMITED_SQL,
	2, {UUIDOID, INT8OID}
};

static DexPlan count_task_failure_plan = {
	"UPDATE dex.workflow_run SET task_failures = task_failures + 1, last_task_failure = $2, "
	"       updated_at = now() WHERE id = $1 RETURNING task_failures",
	2, {UUIDOID, BYTEAOID}
};

/*
 * A run whose workflow task failed dex.max_workflow_task_failures times in a
 * row is parked: BLOCKED, with no workflow task, until dex.resume_run (after a
 * fix is deployed).  Its activities run on; what arrives waits in its inbox.
 */
static DexPlan park_run_plan = {
	"WITH t AS (DELETE FROM dex.workflow_task WHERE run_id = $1) "
	"UPDATE dex.workflow_run SET status = 'BLOCKED', updated_at = now() WHERE id = $1",
	1, {UUIDOID}
};

/* whether the schema can park runs: BLOCKED came with 1.3 */
static DexPlan schema_parks_plan = {
	"SELECT extversion <> ALL ('{1.0,1.1,1.2}'::text[]) FROM pg_catalog.pg_extension "
	"WHERE extname = 'dex'",
	0, {0}
};

static bool
schema_parks_runs(void)
{
	dex_spi_exec(&schema_parks_plan, NULL, NULL, 1);
	return SPI_processed > 0 && dex_spi_getbool(0, 1);
}

/*
 * ...and the task can be leased again when the backoff ends.  The row keeps
 * the failed worker's name, as an expired lease does (the scheduler then
 * tells waiting workers when it ends), but no start: it is no lease that
 * expires, and a poll that takes it records no LEASE_EXPIRED attempt.
 */
static DexPlan back_off_workflow_task_plan = {
	"UPDATE dex.workflow_task SET locked_until = $2, started_at = NULL WHERE run_id = $1",
	2, {UUIDOID, TIMESTAMPTZOID}
};

/*
 * A workflow task failed: the worker could not run the workflow code (a
 * crash loop, a missing workflow, a bug), or its replay did not match the
 * history (non-determinism, a bad deploy).  It is handed out again after a
 * backoff that grows with the run's consecutive task failures, per the
 * dex.retry_* settings; the count and the last failure are on the run, a
 * completed task resets them, and after dex.max_workflow_task_failures of
 * them in a row the run is parked (BLOCKED).  The workflow's own errors fail
 * the run instead (the failRun command).
 *
 * The caller has locked the run and checked that it takes tasks.  Returns
 * whether the lease (lock_version) was held; if not, nothing is written.
 */
bool
dex_fail_workflow_task(pg_uuid_t *run_id, int64 lock_version, Dex__V1__Failure *failure)
{
	Datum		values[2] = {UUIDPGetDatum(run_id), Int64GetDatum(lock_version)};
	int32		failures;
	TimestampTz retry_at;

	dex_spi_exec(&fence_failed_workflow_task_plan, values, NULL, 0);
	dex_check_queue_use_spi(2);
	if (SPI_processed == 0)
		return false;
	dex_stat_add((int32) dex_spi_getint64(0, 2), DEX_STAT_TASKS_FAILED, 1);
	dex_queue_room_freed_spi(2, 3);

	values[1] = PointerGetDatum(dex_pb_pack_bytea((ProtobufCMessage *) failure));
	dex_record_workflow_attempt(run_id, DatumGetByteaPP(values[1]));
	dex_spi_exec(&count_task_failure_plan, values, NULL, 1);
	failures = (int32) dex_spi_getint64(0, 1);
	if (dex_max_workflow_task_failures > 0 && failures >= dex_max_workflow_task_failures &&
		schema_parks_runs())
	{
		dex_spi_exec(&park_run_plan, values, NULL, 0);
		return true;
	}

	retry_at = dex_retry_time(dex_effective_retry_policy(NULL), failures);
	values[1] = TimestampTzGetDatum(retry_at);
	dex_spi_exec(&back_off_workflow_task_plan, values, NULL, 0);
	/* the scheduler tells waiting workers when the backoff ends */
	dex_wake_scheduler_at_commit(retry_at);
	return true;
}
