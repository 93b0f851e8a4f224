/*
 * dex 1.5 -> 1.6: ALTER EXTENSION dex UPDATE TO '1.6'.
 *
 * Version-aware dispatch (issue 17): a workflow task carries its run's
 * workflow name and version, and polls may declare the (workflow, version)
 * pairs or the activities a worker runs, each read from an index of its
 * own; dex.unserved shows the tasks no worker serves (dex.last_polled, from
 * shared memory, says when a worker that could take them last polled);
 * dex.set_run_version moves a run to another version; dex.stop_waiting ends
 * a worker's waits for its shutdown.
 * The library of 1.6 works with a 1.5 schema until the update (polls then
 * take no declarations).  test/t/009_upgrade.pl checks that an updated
 * database has exactly the objects of a fresh 1.6 install.
 */
\echo Use "ALTER EXTENSION dex UPDATE TO '1.6'" to load this file. \quit

-- The tasks in flight get their runs' workflow and version.
ALTER TABLE dex.workflow_task ADD COLUMN workflow_name text, ADD COLUMN workflow_version integer;
UPDATE dex.workflow_task t SET workflow_name = r.workflow_name, workflow_version = r.workflow_version
  FROM dex.workflow_run r WHERE r.id = t.run_id;
DELETE FROM dex.workflow_task WHERE workflow_name IS NULL;    -- a run purged under it
ALTER TABLE dex.workflow_task ALTER COLUMN workflow_name SET NOT NULL,
                              ALTER COLUMN workflow_version SET NOT NULL;
-- Polls that declare the (workflow, version) pairs they run read one range
-- of this index per pair.  Its order is on (- priority), an expression the
-- poll index does not have, so that the planner cannot take that index
-- instead for a declared poll (filtering the whole queue) however the
-- statistics make the two look.
CREATE INDEX workflow_task_version_idx
    ON dex.workflow_task (queue_id, workflow_name, workflow_version, (- priority), created_at);
-- Polls that declare the activities they run read one range of this index per
-- name (on (- priority), as workflow_task_version_idx).
CREATE INDEX activity_task_name_idx ON dex.activity_task (queue_id, name, (- priority), created_at)
    WHERE status = 'QUEUED' AND locked_by IS NULL;

-- The polls gain arguments: the old signatures go (a new one would be an
-- overload that makes calls without them ambiguous).
DROP FUNCTION dex.poll_tasks(text, text, integer, interval, boolean);
DROP FUNCTION dex.poll_tasks_pb(text, text, integer, interval, boolean);
DROP PROCEDURE dex.poll_tasks_wait(text, text, integer, interval, interval, jsonb, boolean, uuid[], integer[], bigint[], jsonb[], boolean[]);
DROP PROCEDURE dex.poll_tasks_wait_pb(text, text, integer, interval, interval, bytea[], boolean, uuid[], integer[], bigint[], bytea[], boolean[]);

CREATE FUNCTION dex.poll_tasks(
    queue text,
    worker_id text,
    max_tasks integer DEFAULT 1,
    lease_duration interval DEFAULT '5 minutes',
    worker_cache boolean DEFAULT false,
    names text[] DEFAULT NULL,
    versions integer[] DEFAULT NULL)
RETURNS TABLE (kind text, run_id uuid, task_id integer, lock_version bigint,
               locked_until timestamptz, task jsonb)
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_poll_tasks';
COMMENT ON FUNCTION dex.poll_tasks(text, text, integer, interval, boolean, text[], integer[]) IS
    'Lease up to max_tasks tasks of a queue to a worker; each row''s task is a dex.v1.WorkflowTask or dex.v1.ActivityTask as JSON. With worker_cache (the worker keeps the state of runs whose workflow tasks it completed), a workflow task of a run this worker completed last leaves out the history it has seen (historyOmitted). A worker that declares what it runs gets only those tasks: on a workflow queue names and versions are the (workflow, version) pairs it runs, on an activity queue names are its activities (versions NULL); NULL names: every task of the queue.';

CREATE FUNCTION dex.poll_tasks_pb(
    queue text,
    worker_id text,
    max_tasks integer DEFAULT 1,
    lease_duration interval DEFAULT '5 minutes',
    worker_cache boolean DEFAULT false,
    names text[] DEFAULT NULL,
    versions integer[] DEFAULT NULL)
RETURNS TABLE (kind text, run_id uuid, task_id integer, lock_version bigint,
               locked_until timestamptz, task bytea)
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_poll_tasks_pb';
COMMENT ON FUNCTION dex.poll_tasks_pb(text, text, integer, interval, boolean, text[], integer[]) IS
    'dex.poll_tasks with each task protobuf-encoded, for SDKs.';

CREATE PROCEDURE dex.poll_tasks_wait(queue text, worker_id text, max_tasks integer DEFAULT 1,
                                     lease interval DEFAULT '5 min', timeout interval DEFAULT '60 s',
                                     INOUT tasks jsonb DEFAULT NULL, worker_cache boolean DEFAULT false,
                                     run_ids uuid[] DEFAULT NULL, task_ids integer[] DEFAULT NULL,
                                     lock_versions bigint[] DEFAULT NULL, results jsonb[] DEFAULT NULL,
                                     INOUT completed boolean[] DEFAULT NULL,
                                     names text[] DEFAULT NULL, versions integer[] DEFAULT NULL)
LANGUAGE C
AS 'MODULE_PATHNAME', 'dex_poll_tasks_wait';
COMMENT ON PROCEDURE dex.poll_tasks_wait(text, text, integer, interval, interval, jsonb, boolean, uuid[], integer[], bigint[], jsonb[], boolean[], text[], integer[]) IS
    'The poll and the long poll in one call: leases up to max_tasks tasks of the queue and returns them as a JSON array of task messages (as dex.poll_tasks''s task column, worker_cache as there), waiting for some, holding no snapshot, until the timeout (then an empty array). Completions given (run_ids, task_ids, lock_versions, results, as dex.complete_tasks) are made first, in the same transaction as the first look; completed says whether each was applied (false: its lease was lost). names and versions declare what the worker runs, as for dex.poll_tasks. Call outside a transaction block.';

CREATE PROCEDURE dex.poll_tasks_wait_pb(queue text, worker_id text, max_tasks integer DEFAULT 1,
                                        lease interval DEFAULT '5 min', timeout interval DEFAULT '60 s',
                                        INOUT tasks bytea[] DEFAULT NULL, worker_cache boolean DEFAULT false,
                                        run_ids uuid[] DEFAULT NULL, task_ids integer[] DEFAULT NULL,
                                        lock_versions bigint[] DEFAULT NULL, results bytea[] DEFAULT NULL,
                                        INOUT completed boolean[] DEFAULT NULL,
                                        names text[] DEFAULT NULL, versions integer[] DEFAULT NULL)
LANGUAGE C
AS 'MODULE_PATHNAME', 'dex_poll_tasks_wait_pb';
COMMENT ON PROCEDURE dex.poll_tasks_wait_pb(text, text, integer, interval, interval, bytea[], boolean, uuid[], integer[], bigint[], bytea[], boolean[], text[], integer[]) IS
    'dex.poll_tasks_wait with the tasks as encoded dex.v1.WorkflowTask or dex.v1.ActivityTask messages, and results as encoded dex.v1.WorkflowTaskCompletion or dex.v1.Payload (as dex.complete_tasks_pb).';

CREATE FUNCTION dex.set_run_version(run_id uuid, version integer)
RETURNS void
LANGUAGE C
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS 'MODULE_PATHNAME', 'dex_set_run_version';
COMMENT ON FUNCTION dex.set_run_version(uuid, integer) IS
    'Move a run that has not ended to another version of its workflow: its next workflow tasks go to workers that declared (workflow, version). For an operator who has checked that the new version''s code replays the run''s history. Refused for an ended run (55000).';

-- What waits for a worker that never comes: ready tasks of a (workflow,
-- version) or activity that no polling worker has declared lately, during a
-- rolling deploy or after the last worker of an old version stopped.

CREATE FUNCTION dex.last_polled(queue_id integer, name text DEFAULT NULL, version integer DEFAULT NULL)
RETURNS timestamptz
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'dex_last_polled';
COMMENT ON FUNCTION dex.last_polled(integer, text, integer) IS
    'When a worker that could take the queue''s tasks of this workflow (name and version) or activity (name, NULL version) last polled the queue: one that declared it, or one that declared nothing; NULL name: any poll of the queue. NULL if none did since the server started. From shared memory, to the second.';

CREATE FUNCTION dex.unserved(
    idle interval DEFAULT '1 minute',
    OUT queue text, OUT kind text, OUT name text, OUT version integer,
    OUT tasks bigint, OUT waiting_since timestamptz, OUT last_polled timestamptz)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS $$
SELECT q.name, q.kind, w.name, w.version, w.tasks, w.since, p.at
  FROM (SELECT t.queue_id, t.workflow_name AS name, t.workflow_version AS version,
               count(*) AS tasks, min(t.created_at) AS since
          FROM dex.workflow_task t
         WHERE t.locked_until IS NULL OR t.locked_until <= now()
         GROUP BY t.queue_id, t.workflow_name, t.workflow_version
        UNION ALL
        SELECT a.queue_id, a.name, NULL::integer, count(*), min(a.created_at)
          FROM dex.activity_task a
         WHERE a.status = 'QUEUED' AND a.locked_by IS NULL
         GROUP BY a.queue_id, a.name) w
  JOIN dex.queue q ON q.id = w.queue_id AND q.status = 'ACTIVE'
 CROSS JOIN LATERAL (SELECT dex.last_polled(w.queue_id, w.name, w.version) AS at) p
 WHERE w.since <= now() - idle AND (p.at IS NULL OR p.at <= now() - idle)
 ORDER BY q.name, w.name, w.version
$$;
COMMENT ON FUNCTION dex.unserved(interval) IS
    'Ready tasks that no worker serves (the view dex.unserved, with idle one minute): per queue and workflow (name, version) or activity (name), how many wait, since when, and when a worker that could take them last polled (NULL: none since the server started); only those waiting longer than idle on which no such worker polled for idle. Paused queues are left out. Reads the ready tasks of every queue.';

CREATE VIEW dex.unserved AS SELECT * FROM dex.unserved();
COMMENT ON VIEW dex.unserved IS
    'Ready tasks that no worker serves: per queue and workflow (name, version) or activity (name), the tasks waiting over a minute on which no worker that declared them, nor one that declared nothing, polled for a minute; since when they wait, and when such a worker last polled (NULL: none since the server started).';

CREATE FUNCTION dex.stop_waiting(worker_id text)
RETURNS integer
LANGUAGE C
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'dex_stop_waiting';
COMMENT ON FUNCTION dex.stop_waiting(text) IS
    'End the waits of the worker''s dex.poll_tasks_wait(_pb) calls in this database now: each returns what it leased (nothing), as at its timeout, so that a worker shutting down needs no cancel request (which the server logs as an error); how many waits it ended. A call that enters its wait afterwards waits on: call it until the worker''s calls have returned.';

REVOKE ALL ON FUNCTION dex.poll_tasks(text, text, integer, interval, boolean, text[], integer[]),
    dex.poll_tasks_pb(text, text, integer, interval, boolean, text[], integer[]),
    dex.set_run_version(uuid, integer), dex.last_polled(integer, text, integer), dex.unserved(interval),
    dex.stop_waiting(text)
    FROM PUBLIC;
REVOKE ALL ON PROCEDURE
    dex.poll_tasks_wait(text, text, integer, interval, interval, jsonb, boolean, uuid[], integer[], bigint[], jsonb[], boolean[], text[], integer[]),
    dex.poll_tasks_wait_pb(text, text, integer, interval, interval, bytea[], boolean, uuid[], integer[], bigint[], bytea[], boolean[], text[], integer[])
    FROM PUBLIC;
REVOKE ALL ON dex.unserved FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.poll_tasks(text, text, integer, interval, boolean, text[], integer[]),
    dex.poll_tasks_pb(text, text, integer, interval, boolean, text[], integer[]),
    dex.stop_waiting(text) TO dex_worker;
GRANT EXECUTE ON PROCEDURE
    dex.poll_tasks_wait(text, text, integer, interval, interval, jsonb, boolean, uuid[], integer[], bigint[], jsonb[], boolean[], text[], integer[]),
    dex.poll_tasks_wait_pb(text, text, integer, interval, interval, bytea[], boolean, uuid[], integer[], bigint[], bytea[], boolean[], text[], integer[])
    TO dex_worker;
GRANT EXECUTE ON FUNCTION dex.set_run_version(uuid, integer), dex.last_polled(integer, text, integer),
    dex.unserved(interval) TO dex_admin;
GRANT EXECUTE ON FUNCTION dex.last_polled(integer, text, integer), dex.unserved(interval) TO pg_monitor;
GRANT SELECT ON dex.unserved TO pg_monitor, dex_admin;
GRANT SELECT (workflow_name, workflow_version) ON dex.workflow_task TO pg_monitor, dex_admin;
GRANT SELECT (name) ON dex.activity_task TO pg_monitor, dex_admin;
-- API tokens (REST API, issue 19)
/*
 * API tokens let clients that do not speak SQL use dex through the REST API
 * (python3 -m dex serve): each token maps to a database role, and the server,
 * whose login role is a member of the roles it may act as, runs every request
 * of the token with SET ROLE to that role, so that PostgreSQL's grants and
 * dex's queue grants decide what it may do, never more.  A token is 'dex_'
 * and 64 hex digits (244 random bits from gen_random_uuid), shown once by
 * dex.create_api_token; only its SHA-256 is stored (no salt is needed at
 * that entropy).  A token names its role by oid and by name: a dropped role,
 * or another created later with its oid, has no token, and renaming a role
 * voids its tokens.  A token never acts as a superuser.
 *
 * The caller of these functions is the role set with SET ROLE, else the
 * session user: a SECURITY DEFINER function cannot see the role that called
 * it (see Roles and privileges), and these write a table nobody else may.
 * Called from another role's SECURITY DEFINER function they still check the
 * session's role, which only ever refuses more.
 */
CREATE TABLE dex.api_token (
    name        text PRIMARY KEY,
    role        regrole NOT NULL,
    role_name   name NOT NULL,          -- the role's name when the token was made
    token_hash  bytea NOT NULL UNIQUE,  -- sha256 of the token
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    created_by  name NOT NULL,
    expires_at  timestamptz
);
COMMENT ON TABLE dex.api_token IS
    'API tokens of the REST API: the SHA-256 of each token and the role its requests run as (dex.create_api_token, dex.revoke_api_token).';
REVOKE ALL ON dex.api_token FROM PUBLIC;

CREATE FUNCTION dex.create_api_token(name text, role regrole, expires_at timestamptz DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller name := CASE pg_catalog.current_setting('role')
                       WHEN 'none' THEN SESSION_USER
                       ELSE pg_catalog.current_setting('role') END;
    token text;
BEGIN
    IF create_api_token.name IS NULL OR create_api_token.role IS NULL THEN
        RAISE EXCEPTION 'token name and role must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF create_api_token.name OPERATOR(pg_catalog.!~) '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$' THEN
        RAISE EXCEPTION 'invalid token name "%"', create_api_token.name
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A name has 1 to 128 letters, digits, "_", "-" or ".", and starts with a letter or digit.';
    END IF;
    IF create_api_token.expires_at IS NOT NULL
       AND NOT (pg_catalog.isfinite(create_api_token.expires_at)
                AND create_api_token.expires_at OPERATOR(pg_catalog.>) pg_catalog.now()) THEN
        RAISE EXCEPTION 'a token must expire at a finite time in the future'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r
         WHERE r.oid OPERATOR(pg_catalog.=) create_api_token.role) THEN
        RAISE EXCEPTION 'a token may not act as superuser %', create_api_token.role
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NOT pg_catalog.pg_has_role(caller, create_api_token.role, 'MEMBER') THEN
        RAISE EXCEPTION 'permission denied to make a token for role %', create_api_token.role
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = pg_catalog.format('Only members of role %s may make its tokens; %I is not one.',
                                             create_api_token.role, caller);
    END IF;
    token := 'dex_' OPERATOR(pg_catalog.||)
             pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', '') OPERATOR(pg_catalog.||)
             pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', '');
    INSERT INTO dex.api_token (name, role, role_name, token_hash, created_by, expires_at)
    SELECT create_api_token.name, r.oid, r.rolname,
           pg_catalog.sha256(pg_catalog.convert_to(token, 'UTF8')), caller, create_api_token.expires_at
      FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) create_api_token.role
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'API token "%" already exists', create_api_token.name
            USING ERRCODE = 'duplicate_object';
    END IF;
    RETURN token;
END
$$;
COMMENT ON FUNCTION dex.create_api_token(text, regrole, timestamptz) IS
    'Make an API token of the REST API whose requests run as role (never a superuser; the caller must be a member of it), valid until expires_at (NULL: until revoked); returns the token, which is not stored and cannot be shown again.';

CREATE FUNCTION dex.revoke_api_token(name text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF revoke_api_token.name IS NULL THEN
        RAISE EXCEPTION 'token name must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    DELETE FROM dex.api_token t WHERE t.name OPERATOR(pg_catalog.=) revoke_api_token.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'API token "%" does not exist', revoke_api_token.name
            USING ERRCODE = 'undefined_object';
    END IF;
END
$$;
COMMENT ON FUNCTION dex.revoke_api_token(text) IS
    'Delete an API token: the REST API refuses it from its next request on.';

CREATE FUNCTION dex.authenticate_api_token(token text)
RETURNS name
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT r.rolname
  FROM dex.api_token t
  JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) t.role
                            AND r.rolname OPERATOR(pg_catalog.=) t.role_name
 WHERE t.token_hash OPERATOR(pg_catalog.=) pg_catalog.sha256(pg_catalog.convert_to(authenticate_api_token.token, 'UTF8'))
   AND (t.expires_at IS NULL OR t.expires_at OPERATOR(pg_catalog.>) pg_catalog.now())
   AND NOT r.rolsuper
   AND pg_catalog.pg_has_role(CASE pg_catalog.current_setting('role')
                                  WHEN 'none' THEN SESSION_USER
                                  ELSE pg_catalog.current_setting('role')::name END,
                              r.oid, 'MEMBER')
$$;
COMMENT ON FUNCTION dex.authenticate_api_token(text) IS
    'The role an API token''s requests run as, for the REST API server: NULL when the token is unknown, expired or revoked, its role was dropped, renamed or made superuser, or the caller (the server''s login role) is not a member of it.';

CREATE VIEW dex.api_tokens AS
SELECT t.name, t.role, t.created_at, t.created_by, t.expires_at
  FROM dex.api_token t;
COMMENT ON VIEW dex.api_tokens IS
    'The API tokens of the REST API, without their hashes: name, the role their requests run as, who made them and when, when they expire.';

ALTER FUNCTION dex.create_api_token(text, regrole, timestamptz) SECURITY DEFINER;
ALTER FUNCTION dex.revoke_api_token(text) SECURITY DEFINER;
ALTER FUNCTION dex.authenticate_api_token(text) SECURITY DEFINER;
REVOKE ALL ON FUNCTION dex.create_api_token(text, regrole, timestamptz), dex.revoke_api_token(text),
    dex.authenticate_api_token(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.create_api_token(text, regrole, timestamptz), dex.revoke_api_token(text)
    TO dex_admin;
GRANT EXECUTE ON FUNCTION dex.authenticate_api_token(text) TO dex_client, dex_worker, dex_admin;
GRANT SELECT ON dex.api_tokens TO dex_admin;
SELECT pg_catalog.pg_extension_config_dump('dex.api_token',
    'WHERE EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) role)');

-- Latency histograms (metrics, issue 19)
/*
 * Kept by dex in shared memory (src/shmem/latency.c), like the counters of
 * dex.stat_counters(): no table is written, a rolled-back call still
 * counts, and dex.reset_stats() zeroes the current database's.  Each row is
 * one histogram in the shape Prometheus wants: le holds the finite upper
 * bounds of the buckets in seconds, bucket the cumulative count of
 * observations at most each bound (the +Inf bucket is count), sum the total
 * in seconds.  prometheus-postgres-exporter reads them with the usage
 * HISTOGRAM (contrib/prometheus/dex-queries.yaml).
 */
CREATE FUNCTION dex.latency_histograms(
    OUT datid oid, OUT histogram text, OUT queue_id integer, OUT workflow text,
    OUT le double precision[], OUT bucket bigint[], OUT sum double precision, OUT count bigint)
RETURNS SETOF record
LANGUAGE C
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'dex_latency_histograms';
COMMENT ON FUNCTION dex.latency_histograms() IS
    'The latency histograms in shared memory, one row per histogram in use of every database since the server started or dex.reset_stats: task_wait, activity_execution and timer_lag per queue (queue_id), run_duration per workflow name (workflow); le, the buckets'' upper bounds in seconds; bucket, the cumulative counts (the +Inf bucket is count); sum in seconds; count. Calls count even if their transaction rolls back. Empty if dex is not preloaded.';

CREATE VIEW dex.stat_latency AS
SELECT h.histogram, q.name AS queue, h.workflow, h.le, h.bucket, h.sum, h.count
  FROM dex.latency_histograms() h
  LEFT JOIN dex.queue q ON q.id OPERATOR(pg_catalog.=) h.queue_id
 WHERE h.datid OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                        WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
   AND (h.workflow IS NOT NULL OR q.name IS NOT NULL);
COMMENT ON VIEW dex.stat_latency IS
    'Latency histograms of this database since the server started or dex.reset_stats, in Prometheus'' shape: task_wait (per queue: from a task becoming ready, made, its lease expired or its retry backoff over, to a poll handing it out), activity_execution (per activity queue: from an attempt''s lease to its completion), run_duration (per workflow: from a run''s creation to its end) and timer_lag (per workflow queue: from a timer or delayed event falling due to the scheduler waking its run); le, the buckets'' upper bounds in seconds, bucket the cumulative counts (+Inf: count), sum in seconds, count. From shared memory: free to read.';

COMMENT ON FUNCTION dex.reset_stats() IS
    'Zero the activity counters (dex.stat_queues, dex.stat_database) and the latency histograms (dex.stat_latency) of the current database, and the counters'' overflow entry. Superusers only, unless granted.';

REVOKE ALL ON FUNCTION dex.latency_histograms() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dex.latency_histograms() TO pg_monitor, dex_admin;
GRANT SELECT ON dex.stat_latency TO pg_monitor, dex_admin;
