/*
 * dex 1.3 -> 1.4: ALTER EXTENSION dex UPDATE TO '1.4'.
 *
 * What 1.4 adds to an operator's controls over a run's life (issue 15):
 * delayed starts (DELAYED) and execution timeouts (TIMED_OUT) fired by the
 * scheduler from dex.run_timer; restart and reset; the parent close policy
 * of child runs; the record of task attempts (dex.task_attempt,
 * dex.run_attempts); waiting for several runs.  The library of 1.4 works
 * with a 1.3 schema until the update (without these).
 * test/t/009_upgrade.pl checks that an updated database has exactly the
 * objects of a fresh 1.4 install.
 */
\echo Use "ALTER EXTENSION dex UPDATE TO '1.4'" to load this file. \quit

ALTER TABLE dex.workflow_run DROP CONSTRAINT workflow_run_status_check;
ALTER TABLE dex.workflow_run ADD CONSTRAINT workflow_run_status_check
    CHECK (status IN ('CREATED', 'RUNNING', 'SUSPENDED', 'CANCELLED', 'COMPLETED', 'FAILED',
                      'TERMINATED', 'BLOCKED', 'TIMED_OUT', 'DELAYED'));
ALTER TABLE dex.workflow_run
    ADD COLUMN parent_close_policy text CHECK (parent_close_policy IN ('REQUEST_CANCEL', 'ABANDON')),
    ADD COLUMN origin_run_id uuid,
    ADD COLUMN origin text CHECK (origin IN ('RESTART', 'RESET')),
    ADD COLUMN history_bytes bigint NOT NULL DEFAULT 0;
-- the runs that go on count their history's size from here (dex.max_history_size)
UPDATE dex.workflow_run r
   SET history_bytes = (SELECT coalesce(sum(octet_length(h.events)), 0)
                          FROM dex.workflow_history h WHERE h.run_id = r.id)
 WHERE r.status IN ('CREATED', 'RUNNING', 'SUSPENDED', 'BLOCKED') AND r.history_length > 0;
-- children started before 1.4 keep what their parent's end did to them then
UPDATE dex.workflow_run SET parent_close_policy = 'REQUEST_CANCEL'
 WHERE parent_id IS NOT NULL AND status IN ('CREATED', 'RUNNING', 'SUSPENDED', 'BLOCKED');

-- A run's own timers, logged: when a DELAYED run starts (START) and when a
-- run with an execution timeout ends TIMED_OUT (DEADLINE).  A row lives until
-- the scheduler fires it or the run ends, so the scheduler's probe reads only
-- pending ones; a continue-as-new keeps the run id, and with it the deadline.
CREATE TABLE dex.run_timer (
    run_id      uuid NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('START', 'DEADLINE')),
    due_at      timestamptz NOT NULL,
    PRIMARY KEY (run_id, kind)
);
CREATE INDEX run_timer_due_idx ON dex.run_timer (due_at);
COMMENT ON TABLE dex.run_timer IS
    'When each delayed run starts and each run with an execution timeout times out; fired by the scheduler.';

-- The attempts that did not succeed: a completed attempt is in the run's
-- history (workflowTaskStarted/Completed, activityTaskCompleted), so the
-- success path writes nothing here.  event_id 0 is the workflow task.
CREATE TABLE dex.task_attempt (
    run_id      uuid NOT NULL,
    id          bigint GENERATED ALWAYS AS IDENTITY,
    event_id    integer NOT NULL,   -- the activity's ActivityTaskCreated event; 0: the workflow task
    attempt     integer NOT NULL,
    worker_id   text,
    leased_at   timestamptz,
    ended_at    timestamptz NOT NULL,
    outcome     text NOT NULL CHECK (outcome IN ('FAILED', 'LEASE_EXPIRED', 'VOIDED')),
    failure     bytea,              -- dex.v1.Failure
    PRIMARY KEY (run_id, id)
);
COMMENT ON TABLE dex.task_attempt IS
    'Task attempts that failed, lost their lease or were voided (completed ones are in the history); read with dex.run_attempts.';
REVOKE ALL ON dex.run_timer, dex.task_attempt FROM PUBLIC;

-- suspend_run and resume_run take a reason
DROP FUNCTION dex.suspend_run(uuid);
DROP FUNCTION dex.resume_run(uuid);
CREATE FUNCTION dex.suspend_run(run_id uuid, reason text DEFAULT NULL)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_suspend_run';
COMMENT ON FUNCTION dex.suspend_run(uuid, text) IS
    'Suspend a running run: nothing of it is handed out and no command of it takes effect until dex.resume_run; runSuspended records the reason and the session user.';

CREATE FUNCTION dex.resume_run(run_id uuid, reason text DEFAULT NULL)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_resume_run';
COMMENT ON FUNCTION dex.resume_run(uuid, text) IS
    'Resume a suspended run (the workflow sees runSuspended and runResumed, with their reasons and session users, in its next task), or retry a run BLOCKED by failing workflow tasks.';

-- create_run and create_runs take start_at and execution_timeout
DROP FUNCTION dex.create_run(text, text, jsonb, integer, text, integer, jsonb, text, text);
DROP FUNCTION dex.create_runs(text, text, jsonb[], integer, integer, jsonb);
CREATE FUNCTION dex.create_run(
    workflow_name text,
    queue text,
    argument jsonb DEFAULT NULL,
    workflow_version integer DEFAULT 1,
    instance_id text DEFAULT NULL,
    priority integer DEFAULT 0,
    labels jsonb DEFAULT NULL,
    concurrency_key text DEFAULT NULL,
    if_active text DEFAULT 'error',
    start_at timestamptz DEFAULT NULL,
    execution_timeout interval DEFAULT NULL)
RETURNS uuid
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_create_run';
COMMENT ON FUNCTION dex.create_run(text, text, jsonb, integer, text, integer, jsonb, text, text, timestamptz, interval) IS
    'Start a workflow run on a workflow queue; returns its id (a UUIDv7). If the instance id has an active run: an error (if_active => ''error'') or that run''s id (''return''). With start_at in the future the run is DELAYED until then; with execution_timeout it ends TIMED_OUT when it has not ended that long after its start.';

CREATE FUNCTION dex.create_runs(
    workflow_name text,
    queue text,
    arguments jsonb[],
    workflow_version integer DEFAULT 1,
    priority integer DEFAULT 0,
    labels jsonb DEFAULT NULL,
    start_at timestamptz DEFAULT NULL,
    execution_timeout interval DEFAULT NULL)
RETURNS SETOF uuid
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_create_runs';
COMMENT ON FUNCTION dex.create_runs(text, text, jsonb[], integer, integer, jsonb, timestamptz, interval) IS
    'Start many runs of one workflow on one queue in one call: one run per element of arguments; returns their ids in order. start_at and execution_timeout as for dex.create_run.';

CREATE FUNCTION dex.restart_run(run_id uuid)
RETURNS uuid
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_restart_run';
COMMENT ON FUNCTION dex.restart_run(uuid) IS
    'Start a new run with the workflow, version, argument, queue, priority, labels and concurrency key of a run (and its instance id once that run has ended; no start_at or execution timeout); returns the new run''s id. The new run records where it came from (origin_run_id, origin RESTART).';

CREATE FUNCTION dex.reset_run(run_id uuid, event_id integer, reason text DEFAULT NULL)
RETURNS uuid
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_reset_run';
COMMENT ON FUNCTION dex.reset_run(uuid, integer, text) IS
    'Start a new run that goes back to the run''s last workflow task completed at or before event_id (a sequence of dex.run_history) and decides it again with the code deployed now: the history before that task is kept, what the task was shown is shown again, activities completed before it are not run again, those pending are queued again, timers keep their fire time, and external events received after it are delivered again. An active run is terminated first. Returns the new run''s id (origin RESET).';

CREATE FUNCTION dex.run_attempts(run_id uuid)
RETURNS TABLE (task text, event_id integer, name text, attempt integer, worker_id text,
               leased_at timestamptz, ended_at timestamptz, outcome text, failure jsonb)
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_run_attempts';
COMMENT ON FUNCTION dex.run_attempts(uuid) IS
    'Every attempt of the run''s workflow tasks (task ''workflow'', event_id 0) and activities (task ''activity'', event_id of its activityTaskCreated, name): worker, when leased and ended, outcome (COMPLETED, FAILED, LEASE_EXPIRED, VOIDED) and failure, in the order they ended. Completed attempts are those of the history of the current generation.';

-- the poll and the long poll in one call; no SET clause, as dex.wait_for_tasks (dex_api_enter
-- pins the search_path)
CREATE PROCEDURE dex.poll_tasks_wait(queue text, worker_id text, max_tasks integer DEFAULT 1,
                                     lease interval DEFAULT '5 min', timeout interval DEFAULT '60 s',
                                     INOUT tasks jsonb DEFAULT NULL)
LANGUAGE C
AS 'MODULE_PATHNAME', 'dex_poll_tasks_wait';
COMMENT ON PROCEDURE dex.poll_tasks_wait(text, text, integer, interval, interval, jsonb) IS
    'The poll and the long poll in one call: leases up to max_tasks tasks of the queue and returns them as a JSON array of task messages (as dex.poll_tasks''s task column), waiting for some, holding no snapshot, until the timeout (then an empty array). Call outside a transaction block.';

CREATE PROCEDURE dex.poll_tasks_wait_pb(queue text, worker_id text, max_tasks integer DEFAULT 1,
                                        lease interval DEFAULT '5 min', timeout interval DEFAULT '60 s',
                                        INOUT tasks bytea[] DEFAULT NULL)
LANGUAGE C
AS 'MODULE_PATHNAME', 'dex_poll_tasks_wait_pb';
COMMENT ON PROCEDURE dex.poll_tasks_wait_pb(text, text, integer, interval, interval, bytea[]) IS
    'dex.poll_tasks_wait with the tasks as encoded dex.v1.WorkflowTask or dex.v1.ActivityTask messages.';
REVOKE ALL ON PROCEDURE dex.poll_tasks_wait(text, text, integer, interval, interval, jsonb),
    dex.poll_tasks_wait_pb(text, text, integer, interval, interval, bytea[]) FROM PUBLIC;
GRANT EXECUTE ON PROCEDURE dex.poll_tasks_wait(text, text, integer, interval, interval, jsonb),
    dex.poll_tasks_wait_pb(text, text, integer, interval, interval, bytea[]) TO dex_worker;

-- No SET clause, as dex.wait_for_tasks: its statements qualify every object and operator.
CREATE PROCEDURE dex.wait_for_runs(run_ids uuid[], timeout interval DEFAULT '60 s', mode text DEFAULT 'any',
                                   INOUT ended uuid[] DEFAULT NULL)
LANGUAGE C
AS 'MODULE_PATHNAME', 'dex_wait_for_runs';
COMMENT ON PROCEDURE dex.wait_for_runs(uuid[], interval, text, uuid[]) IS
    'Wait until one of the runs (mode ''any'') or all of them (''all'') have ended: ended lists those that have, in the order given; after the timeout those that had then. Holds no snapshot while it waits. Call outside a transaction block.';

-- the runs views show where a restarted or reset run came from
CREATE OR REPLACE VIEW dex.all_runs AS
SELECT r.id,
       r.workflow_name,
       r.workflow_version,
       q.name AS queue,
       r.status,
       r.instance_id,
       r.priority,
       r.labels,
       r.concurrency_key,
       r.custom_status,
       r.parent_id,
       dex.payload_value(r.argument) AS argument,
       dex.payload_value(r.result) AS result,
       dex.to_json('dex.v1.Failure', r.failure) AS failure,
       r.history_length,
       r.created_at,
       r.updated_at,
       r.started_at,
       r.completed_at,
       r.task_failures,
       dex.to_json('dex.v1.Failure', r.last_task_failure) AS last_task_failure,
       r.queue_id,
       r.origin_run_id,
       r.origin
  FROM dex.workflow_run r
  LEFT JOIN dex.queue q ON q.id OPERATOR(pg_catalog.=) r.queue_id;

CREATE OR REPLACE VIEW dex.runs WITH (security_barrier) AS
SELECT id, workflow_name, workflow_version, queue, status, instance_id, priority, labels,
       concurrency_key, custom_status, parent_id, argument, result, failure, history_length,
       created_at, updated_at, started_at, completed_at, task_failures, last_task_failure,
       origin_run_id, origin
  FROM dex.all_runs
 WHERE queue_id OPERATOR(pg_catalog.=) ANY ((SELECT dex.usable_queue_ids())::integer[]);

REVOKE ALL ON FUNCTION
    dex.create_run(text, text, jsonb, integer, text, integer, jsonb, text, text, timestamptz, interval),
    dex.create_runs(text, text, jsonb[], integer, integer, jsonb, timestamptz, interval),
    dex.restart_run(uuid), dex.reset_run(uuid, integer, text), dex.run_attempts(uuid),
    dex.suspend_run(uuid, text), dex.resume_run(uuid, text) FROM PUBLIC;
REVOKE ALL ON PROCEDURE dex.wait_for_runs(uuid[], interval, text, uuid[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    dex.create_run(text, text, jsonb, integer, text, integer, jsonb, text, text, timestamptz, interval),
    dex.create_runs(text, text, jsonb[], integer, integer, jsonb, timestamptz, interval),
    dex.restart_run(uuid), dex.reset_run(uuid, integer, text), dex.run_attempts(uuid),
    dex.suspend_run(uuid, text), dex.resume_run(uuid, text)
    TO dex_client;
GRANT EXECUTE ON FUNCTION dex.restart_run(uuid), dex.reset_run(uuid, integer, text), dex.run_attempts(uuid)
    TO dex_admin;
GRANT EXECUTE ON PROCEDURE dex.wait_for_runs(uuid[], interval, text, uuid[]) TO dex_client;

SELECT pg_catalog.pg_extension_config_dump('dex.run_timer', '');
SELECT pg_catalog.pg_extension_config_dump('dex.task_attempt', '');
SELECT pg_catalog.pg_extension_config_dump('dex.task_attempt_id_seq', '');
