-- contracts: the shape of dex's SQL API and schema, as clients and SDKs rely on it.
--
-- Every API function exists with its exact argument types and return type and pins its
-- search_path; those that touch dex's tables run with the owner's rights (the roles
-- dex_client, dex_worker and dex_admin may call them, and nobody may touch the tables): the
-- administrators' as SECURITY DEFINER, the others by switching in C, so that queue grants are
-- checked against their caller (src/engine/access.c); the tables
-- exist, the task tables are one UNLOGGED table per kind whatever the number of queues (1.8);
-- PUBLIC cannot write any dex table.
--
-- Runs in one transaction that is rolled back: the queues created here leave nothing behind.
\set ON_ERROR_STOP 1
\pset format unaligned
\pset tuples_only true
\pset pager off

BEGIN;
SET LOCAL client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;

SELECT plan(432);

-- the API: name, exact argument types, return type (as pgTAP spells it)
CREATE TEMP TABLE api (fname name, args name[], returns text) ON COMMIT DROP;
INSERT INTO api VALUES
    ('to_json',          '{text,bytea}',                                            'jsonb'),
    ('from_json',        '{text,jsonb}',                                            'bytea'),
    ('payload_value',    '{bytea}',                                                 'jsonb'),
    ('create_queue',     '{text,text,integer}',                                     'void'),
    ('create_run',       '{text,text,jsonb,integer,text,integer,jsonb,text,text,"timestamp with time zone",interval,text,interval,interval}', 'uuid'),
    ('get_run',          '{uuid}',                                                  'dex.runs'),
    ('run_history',      '{uuid}',                                                  'setof record'),
    ('poll_tasks',       '{text,text,integer,interval,boolean,text[],integer[]}',   'setof record'),
    ('poll_tasks_pb',    '{text,text,integer,interval,boolean,text[],integer[]}',   'setof record'),
    ('run_history_pb',   '{uuid}',                                                  'bytea'),
    ('complete_task',    '{uuid,integer,bigint,jsonb}',                             'void'),
    ('complete_task_pb', '{uuid,integer,bigint,bytea}',                             'void'),
    ('fail_task',        '{uuid,integer,bigint,jsonb}',                             'void'),
    ('fail_task_pb',     '{uuid,integer,bigint,bytea}',                             'void'),
    ('wake_scheduler',   '{}',                                                      'void'),
    ('create_runs',      '{text,text,jsonb[],integer,integer,jsonb,"timestamp with time zone",interval,text[],text[],integer[],jsonb[],"timestamp with time zone[]"}', 'setof record'),
    ('send_external_events', '{uuid[],text[],jsonb[]}',                             'setof record'),
    ('complete_tasks',   '{uuid[],integer[],bigint[],jsonb[]}',                     'setof record'),
    ('complete_tasks_pb','{uuid[],integer[],bigint[],bytea[]}',                     'setof record'),
    ('fail_tasks',       '{uuid[],integer[],bigint[],jsonb[]}',                     'setof record'),
    ('fail_tasks_pb',    '{uuid[],integer[],bigint[],bytea[]}',                     'setof record'),
    ('heartbeat_task',   '{uuid,integer,bigint,interval,jsonb}',                    'timestamp with time zone'),
    ('heartbeat_tasks',  '{uuid[],integer[],bigint[],interval,text}',               'setof record'),
    ('send_external_event', '{uuid,text,jsonb}',                                    'boolean'),
    ('send_external_event_to_instance', '{text,text,jsonb,text}',                   'boolean'),
    ('cancel_run',       '{uuid,text}',                                             'void'),
    ('suspend_run',      '{uuid,text}',                                             'void'),
    ('resume_run',       '{uuid,text}',                                             'void'),
    ('restart_run',      '{uuid}',                                                  'uuid'),
    ('reset_run',        '{uuid,integer,text}',                                     'uuid'),
    ('run_attempts',     '{uuid}',                                                  'setof record'),
    ('set_run_version',  '{uuid,integer}',                                          'void'),
    ('last_polled',      '{integer,text,integer}',                                  'timestamp with time zone'),
    ('unserved',         '{interval}',                                              'setof record'),
    ('latency_histograms', '{}',                                                    'setof record'),
    ('stop_waiting',     '{text}',                                                  'integer'),
    ('list_runs',        '{text,text,jsonb,"timestamp with time zone","timestamp with time zone","timestamp with time zone","timestamp with time zone",uuid,uuid,integer}', 'setof dex.runs'),
    ('grant_queue',      '{text,regrole}',                                          'void'),
    ('revoke_queue',     '{text,regrole}',                                          'void'),
    ('usable_queue_ids', '{}',                                                      'integer[]'),
    ('create_api_token', '{text,regrole,"timestamp with time zone"}',               'text'),
    ('revoke_api_token', '{text}',                                                  'void'),
    ('authenticate_api_token', '{text}',                                            'name'),
    ('create_schedule',  '{text,text,text,text,interval,jsonb,integer,text,text,interval,interval,"timestamp with time zone","timestamp with time zone",boolean,jsonb}', 'timestamp with time zone'),
    ('alter_schedule',   '{text,text,interval,jsonb,integer,text,text,interval,interval,"timestamp with time zone","timestamp with time zone",jsonb,text,text}', 'timestamp with time zone'),
    ('pause_schedule',   '{text,text}',                                             'void'),
    ('unpause_schedule', '{text}',                                                  'timestamp with time zone'),
    ('delete_schedule',  '{text}',                                                  'void'),
    ('trigger_schedule', '{text,text}',                                             'uuid'),
    ('backfill_schedule', '{text,"timestamp with time zone","timestamp with time zone",text}', 'setof record'),
    ('schedule_next_times', '{text,integer}',                                       'setof timestamp with time zone'),
    ('create_definition', '{text,integer,jsonb}',                                   'void'),
    ('get_definition',   '{text,integer}',                                          'jsonb'),
    ('list_definitions', '{text}',                                                  'setof record'),
    ('delete_definition', '{text,integer}',                                         'void'),
    ('user_tasks',       '{uuid,text,text}',                                        'setof record'),
    ('complete_user_task', '{uuid,text,jsonb}',                                     'void'),
    ('grant_definition', '{text,regrole}',                                          'void'),
    ('revoke_definition', '{text,regrole}',                                         'void'),
    ('step_context',     '{}',                                                      'record');

-- every function exists with exactly these argument types
SELECT has_function('dex', fname, args,
                    format('dex.%s(%s) exists', fname, array_to_string(args, ', ')))
  FROM api ORDER BY fname;

-- and whatever else the schema holds follows the same rules: no function in dex resolves
-- names through the caller's search_path, and only the administrators' functions are
-- SECURITY DEFINER.
-- Procedures are the exception to the first rule: a SET clause would forbid their
-- transaction control, so they qualify every name instead.
SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
                 WHERE p.pronamespace = 'dex'::regnamespace
                   AND p.prokind <> 'p' AND NOT EXISTS (
                            SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%')),
          '{}'::text[], 'no function in schema dex leaves search_path unpinned');
SELECT is(ARRAY(SELECT p.proname::text FROM pg_proc p
                 WHERE p.pronamespace = 'dex'::regnamespace AND p.prosecdef ORDER BY 1),
          '{alter_queue,authenticate_api_token,create_api_token,create_queue,delete_schedule,grant_queue,pause_schedule,reset_stats,revoke_api_token,revoke_queue,schedule_next_times,set_concurrency_limit,unpause_schedule}'::text[],
          'only the administrators'' functions are SECURITY DEFINER');
-- PUBLIC may call nothing; each role what the API gives it
SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
                 WHERE p.pronamespace = 'dex'::regnamespace
                   AND has_function_privilege('public', p.oid, 'EXECUTE')),
          '{}'::text[], 'PUBLIC may execute no function of dex');
SELECT ok(has_function_privilege('dex_client', 'dex.create_run(text,text,jsonb,integer,text,integer,jsonb,text,text,timestamptz,interval,text,interval,interval)', 'EXECUTE')
          AND NOT has_function_privilege('dex_client', 'dex.poll_tasks(text,text,integer,interval,boolean,text[],integer[])', 'EXECUTE')
          AND NOT has_function_privilege('dex_client', 'dex.create_queue(text,text,integer)', 'EXECUTE'),
          'dex_client starts runs, but leases no task and makes no queue');
SELECT ok(has_function_privilege('dex_worker', 'dex.poll_tasks(text,text,integer,interval,boolean,text[],integer[])', 'EXECUTE')
          AND has_function_privilege('dex_worker', 'dex.wait_for_tasks(text,interval,boolean)', 'EXECUTE')
          AND NOT has_function_privilege('dex_worker', 'dex.create_run(text,text,jsonb,integer,text,integer,jsonb,text,text,timestamptz,interval,text,interval,interval)', 'EXECUTE')
          AND NOT has_function_privilege('dex_worker', 'dex.alter_queue(text,integer,boolean,integer,interval,integer,boolean,text)', 'EXECUTE'),
          'dex_worker leases and reports tasks, but starts no run and manages no queue');
SELECT ok(pg_has_role('dex_admin', 'dex_client', 'MEMBER') AND pg_has_role('dex_admin', 'dex_worker', 'MEMBER')
          AND has_function_privilege('dex_admin', 'dex.alter_queue(text,integer,boolean,integer,interval,integer,boolean,text)', 'EXECUTE')
          AND has_function_privilege('dex_admin', 'dex.grant_queue(text,regrole)', 'EXECUTE')
          AND NOT has_function_privilege('dex_client', 'dex.grant_queue(text,regrole)', 'EXECUTE')
          AND NOT has_function_privilege('dex_worker', 'dex.revoke_queue(text,regrole)', 'EXECUTE'),
          'dex_admin can do both, and manages queues and their grants');
SELECT ok(has_function_privilege('dex_admin', 'dex.set_run_version(uuid,integer)', 'EXECUTE')
          AND has_function_privilege('pg_monitor', 'dex.unserved(interval)', 'EXECUTE')
          AND NOT has_function_privilege('dex_client', 'dex.set_run_version(uuid,integer)', 'EXECUTE')
          AND NOT has_function_privilege('dex_worker', 'dex.set_run_version(uuid,integer)', 'EXECUTE'),
          'dex_admin moves runs between versions, pg_monitor sees what is unserved; clients and workers do neither');
SELECT ok(has_table_privilege('pg_monitor', 'dex.stat_latency', 'SELECT')
          AND has_function_privilege('pg_monitor', 'dex.latency_histograms()', 'EXECUTE')
          AND has_table_privilege('dex_admin', 'dex.stat_latency', 'SELECT')
          AND NOT has_table_privilege('dex_client', 'dex.stat_latency', 'SELECT')
          AND NOT has_function_privilege('dex_worker', 'dex.latency_histograms()', 'EXECUTE'),
          'pg_monitor and dex_admin read the latency histograms; clients and workers do not');
SELECT ok(has_function_privilege('dex_admin', 'dex.create_api_token(text,regrole,timestamptz)', 'EXECUTE')
          AND has_function_privilege('dex_admin', 'dex.revoke_api_token(text)', 'EXECUTE')
          AND NOT has_function_privilege('dex_client', 'dex.create_api_token(text,regrole,timestamptz)', 'EXECUTE')
          AND NOT has_function_privilege('dex_worker', 'dex.revoke_api_token(text)', 'EXECUTE')
          AND has_function_privilege('dex_client', 'dex.authenticate_api_token(text)', 'EXECUTE')
          AND has_function_privilege('dex_worker', 'dex.authenticate_api_token(text)', 'EXECUTE')
          AND NOT has_table_privilege('dex_admin', 'dex.api_token', 'SELECT')
          AND has_table_privilege('dex_admin', 'dex.api_tokens', 'SELECT')
          AND NOT has_table_privilege('dex_client', 'dex.api_tokens', 'SELECT'),
          'dex_admin makes and revokes API tokens and lists them without their hashes; every dex role may turn a token into its role');
SELECT ok(has_function_privilege('dex_admin', 'dex.create_schedule(text,text,text,text,interval,jsonb,integer,text,text,interval,interval,timestamptz,timestamptz,boolean,jsonb)', 'EXECUTE')
          AND has_function_privilege('dex_admin', 'dex.trigger_schedule(text,text)', 'EXECUTE')
          AND has_table_privilege('dex_admin', 'dex.schedules', 'SELECT')
          AND NOT has_table_privilege('dex_admin', 'dex.schedule', 'SELECT')
          AND NOT has_function_privilege('dex_client', 'dex.create_schedule(text,text,text,text,interval,jsonb,integer,text,text,interval,interval,timestamptz,timestamptz,boolean,jsonb)', 'EXECUTE')
          AND NOT has_function_privilege('dex_worker', 'dex.delete_schedule(text)', 'EXECUTE')
          AND NOT has_table_privilege('dex_client', 'dex.schedules', 'SELECT'),
          'dex_admin manages schedules and lists them; clients and workers do neither');

-- the long poll is a procedure (it ends its transaction before it sleeps), documented,
-- with caller's rights and no SET clause
SELECT has_function('dex', 'wait_for_tasks', '{text,interval,boolean}', 'dex.wait_for_tasks(text, interval, boolean) exists');
SELECT ok((SELECT prokind = 'p' AND NOT prosecdef AND proconfig IS NULL
                  AND obj_description(oid, 'pg_proc') IS NOT NULL
             FROM pg_proc WHERE oid = 'dex.wait_for_tasks(text,interval,boolean)'::regprocedure),
          'dex.wait_for_tasks is a documented procedure without SET clause');

-- return types
SELECT function_returns('dex', fname, args, returns,
                        format('dex.%s returns %s', fname, returns))
  FROM api ORDER BY fname;

-- the set-returning functions return the documented columns
SELECT is(pg_get_function_result('dex.poll_tasks(text,text,integer,interval,boolean,text[],integer[])'::regprocedure),
          'TABLE(kind text, run_id uuid, task_id integer, lock_version bigint, '
          'locked_until timestamp with time zone, task jsonb)',
          'dex.poll_tasks returns (kind, run_id, task_id, lock_version, locked_until, task jsonb)');
SELECT is(pg_get_function_result('dex.poll_tasks_pb(text,text,integer,interval,boolean,text[],integer[])'::regprocedure),
          'TABLE(kind text, run_id uuid, task_id integer, lock_version bigint, '
          'locked_until timestamp with time zone, task bytea)',
          'dex.poll_tasks_pb returns the same columns with task as bytea');
SELECT is(pg_get_function_result('dex.run_history(uuid)'::regprocedure),
          'TABLE(sequence integer, event jsonb)',
          'dex.run_history returns (sequence, event jsonb)');
SELECT is(pg_get_function_result('dex.run_attempts(uuid)'::regprocedure),
          'TABLE(task text, event_id integer, name text, attempt integer, worker_id text, '
          'leased_at timestamp with time zone, ended_at timestamp with time zone, outcome text, failure jsonb)',
          'dex.run_attempts returns (task, event_id, name, attempt, worker_id, leased_at, ended_at, outcome, failure)');
SELECT is(pg_get_function_result('dex.create_runs(text,text,jsonb[],integer,integer,jsonb,timestamptz,interval,text[],text[],integer[],jsonb[],timestamptz[])'::regprocedure),
          'TABLE(id uuid, created boolean)',
          'dex.create_runs returns (id, created)');
SELECT is(pg_get_function_result('dex.send_external_events(uuid[],text[],jsonb[])'::regprocedure),
          'TABLE(run_id uuid, event_id text, delivered boolean, outcome text)',
          'dex.send_external_events returns (run_id, event_id, delivered, outcome)');

-- the administrators' functions are SECURITY DEFINER (but the schedule functions that start
-- runs or choose them, which check the caller's right to start a definition, 1.9); the others
-- take their owner's rights in C, keeping the caller for the queue checks (sql/roles.sql and sql/queue_access.sql
-- show that roles without any table privilege use them)
SELECT CASE WHEN fname IN ('create_queue', 'grant_queue', 'revoke_queue', 'create_api_token', 'revoke_api_token',
                           'authenticate_api_token') OR fname ~ '^(pause|unpause|delete)_schedule$|^schedule_next_times$'
            THEN is_definer('dex', fname, args, format('dex.%s is SECURITY DEFINER', fname))
            ELSE isnt_definer('dex', fname, args, format('dex.%s is not SECURITY DEFINER', fname)) END
  FROM api ORDER BY fname;

-- every function pins its search_path, so nothing resolves through the caller's
SELECT ok(EXISTS (SELECT 1 FROM unnest(p.proconfig) c
                   WHERE c = 'search_path=pg_catalog, pg_temp'),
          format('dex.%s pins search_path to pg_catalog, pg_temp', a.fname))
  FROM api a
  JOIN pg_proc p ON p.pronamespace = 'dex'::regnamespace AND p.proname = a.fname
 ORDER BY a.fname;

-- and every function is documented
SELECT ok(obj_description(p.oid, 'pg_proc') IS NOT NULL, format('dex.%s has a comment', a.fname))
  FROM api a
  JOIN pg_proc p ON p.pronamespace = 'dex'::regnamespace AND p.proname = a.fname
 ORDER BY a.fname;

-- volatility that callers and the planner rely on: readers are not volatile,
-- pure codec functions are immutable, writers are volatile
SELECT volatility_is('dex', 'get_run', '{uuid}', 'stable', 'dex.get_run is STABLE');
SELECT volatility_is('dex', 'to_json', '{text,bytea}', 'immutable', 'dex.to_json is IMMUTABLE');
SELECT volatility_is('dex', 'poll_tasks', '{text,text,integer,interval,boolean,text[],integer[]}', 'volatile',
                     'dex.poll_tasks is VOLATILE');

--
-- tables
--
SELECT has_table('dex', t, format('table dex.%s exists', t))
  FROM unnest('{queue,workflow_run,workflow_inbox,workflow_history,workflow_task,activity_task,lease,activity_retry,run_instance,external_event,concurrency_slot,concurrency_wait,run_debounce,definition,user_task}'::name[]) t;
SELECT has_view('dex', 'runs', 'view dex.runs exists');
SELECT has_sequence('dex', 'lease_version', 'sequence dex.lease_version (the fencing tokens) exists');
SELECT isnt_partitioned('dex', 'workflow_task', 'dex.workflow_task is one table, not a partition per queue');
SELECT isnt_partitioned('dex', 'activity_task', 'dex.activity_task is one table, not a partition per queue');
SELECT is((SELECT relpersistence FROM pg_class WHERE oid = 'dex.lease'::regclass), 'u'::"char",
          'dex.lease is UNLOGGED');
-- the run table and the history are durable: with the retry records and the
-- instance ids, everything the task tables are rebuilt from after a crash
SELECT is(ARRAY(SELECT relpersistence::text FROM pg_class
                 WHERE oid IN ('dex.workflow_run'::regclass, 'dex.workflow_history'::regclass,
                               'dex.workflow_inbox'::regclass, 'dex.queue'::regclass,
                               'dex.activity_retry'::regclass, 'dex.run_instance'::regclass)),
          '{p,p,p,p,p,p}', 'runs, history, inbox, queues, retry records and instance ids are logged tables');
-- the view's columns, in order
SELECT columns_are('dex', 'runs',
    '{id,workflow_name,workflow_version,queue,status,instance_id,priority,labels,concurrency_key,custom_status,parent_id,argument,result,failure,history_length,created_at,updated_at,started_at,completed_at,task_failures,last_task_failure,origin_run_id,origin}'::name[],
    'dex.runs has the documented columns');

-- both task tables are UNLOGGED (rebuilt from history after a crash); a queue makes no
-- relation of its own, so a statement on one queue locks the same relations at any number
-- of queues
SELECT is((SELECT relpersistence FROM pg_class WHERE oid = 'dex.workflow_task'::regclass),
          'u'::"char", 'dex.workflow_task is UNLOGGED');
SELECT is((SELECT relpersistence FROM pg_class WHERE oid = 'dex.activity_task'::regclass),
          'u'::"char", 'dex.activity_task is UNLOGGED (rebuilt from history after a crash)');
SELECT count(*) AS relations_before FROM pg_class WHERE relnamespace = 'dex'::regnamespace \gset
SELECT dex.create_queue('tap-contracts-wf', 'workflow') \gset
SELECT dex.create_queue('tap-contracts-act', 'activity', 10) \gset
SELECT is((SELECT count(*) FROM pg_class WHERE relnamespace = 'dex'::regnamespace), :relations_before::bigint,
          'creating two queues makes no relation');
-- every index a poll of one queue reads leads with its queue
SELECT is(ARRAY(SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                 WHERE i.indrelid IN ('dex.workflow_task'::regclass, 'dex.activity_task'::regclass)
                   AND c.relname ~ '_(poll|version|name)_idx$'
                   AND i.indkey[0] <> (SELECT attnum FROM pg_attribute
                                        WHERE attrelid = i.indrelid AND attname = 'queue_id')
                 ORDER BY 1),
          '{}'::text[], 'the poll indexes of both task tables lead with queue_id');
SELECT is(ARRAY(SELECT a.attname::text FROM pg_attribute a
                 WHERE a.attrelid = 'dex.queue'::regclass AND a.attname = 'partition' AND NOT a.attisdropped),
          '{}'::text[], 'dex.queue has no partition column');
SELECT is((SELECT row(kind, status, capacity)::text FROM dex.queue WHERE name = 'tap-contracts-act'),
          '(activity,ACTIVE,10)', 'the queue row records kind, status and capacity');

--
-- privileges: clients never write the tables
--
-- PUBLIC may not INSERT, UPDATE, DELETE nor TRUNCATE any dex table
SELECT ok(NOT has_table_privilege('public', format('dex.%I', t), p),
          format('PUBLIC cannot %s dex.%s', p, t))
  FROM unnest('{queue,workflow_run,workflow_inbox,workflow_history,workflow_task,activity_task,lease,activity_retry,run_instance,external_event,concurrency_slot,concurrency_wait,run_debounce,definition,user_task}'::text[]) t,
       unnest('{INSERT,UPDATE,DELETE,TRUNCATE}'::text[]) p
 ORDER BY t, p;
-- nor anything else on them
SELECT table_privs_are('dex', t, 'public', '{}'::name[], format('PUBLIC has no privileges on dex.%s', t))
  FROM unnest('{queue,workflow_run,workflow_inbox,workflow_history,workflow_task,activity_task,lease,activity_retry,run_instance,external_event,concurrency_slot,concurrency_wait,run_debounce,definition,user_task}'::name[]) t;
-- nor the fencing-token sequence
SELECT ok(NOT has_sequence_privilege('public', 'dex.lease_version', 'UPDATE')
          AND NOT has_sequence_privilege('public', 'dex.lease_version', 'USAGE'),
          'PUBLIC cannot draw lock versions from dex.lease_version');

-- an ordinary role that can see the schema is refused (insufficient_privilege) when it
-- writes directly; the statement runs as that role inside a subtransaction
CREATE ROLE tap_dex_client NOLOGIN;
GRANT USAGE ON SCHEMA dex TO tap_dex_client;
CREATE FUNCTION pg_temp.sqlstate_as(role_name text, statement text) RETURNS text
LANGUAGE plpgsql AS $fn$
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', role_name);
    EXECUTE statement;
    RESET ROLE;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;   -- the subtransaction's rollback has undone SET ROLE
END
$fn$;
SELECT is(pg_temp.sqlstate_as('tap_dex_client', s), '42501', d)
  FROM (VALUES
    ($$INSERT INTO dex.queue (name, kind) VALUES ('x', 'workflow')$$,
     'a client cannot INSERT into dex.queue'),
    ($$UPDATE dex.workflow_run SET status = 'COMPLETED'$$,
     'a client cannot UPDATE dex.workflow_run'),
    ($$DELETE FROM dex.workflow_history$$,
     'a client cannot DELETE from dex.workflow_history'),
    ($$UPDATE dex.workflow_task SET lock_version = lock_version + 1$$,
     'a client cannot forge a workflow task''s lock version'),
    ($$UPDATE dex.activity_task SET locked_by = NULL$$,
     'a client cannot release an activity task''s lease'),
    ($$SELECT nextval('dex.lease_version')$$,
     'a client cannot draw a lock version')) t(s, d);
SELECT is(current_user, session_user, 'the role switch did not leak');

SELECT * FROM finish();
ROLLBACK;
