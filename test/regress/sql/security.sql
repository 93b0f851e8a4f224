--
-- security: no API call resolves a name through the caller's search_path
--
-- dex's API runs with its owner's rights (SECURITY DEFINER, or the switch in
-- src/api/api_call.c).  A statement run with those rights that resolved a
-- function, operator, type or table through a search_path the caller chose
-- would run the caller's code as the owner: issue 13, item 1, where
-- dex.wait_for_tasks counted leases with the caller's count(), now() and
-- operators, and a worker owning a schema made itself superuser.
--

-- 1. Every function and procedure of dex pins search_path to exactly
-- pg_catalog, pg_temp, but for the exceptions listed here with their reason.
CREATE TEMP TABLE security_unpinned_ok (routine text, reason text);
INSERT INTO security_unpinned_ok VALUES
    ('dex.wait_for_tasks(text,interval,boolean)',
     'a procedure that commits cannot have a SET clause; dex_api_enter pins the path'),
    ('dex.wait_for_run(uuid,interval,text,jsonb,jsonb)',
     'a procedure that commits cannot have a SET clause; dex_api_enter pins the path'),
    ('dex.wait_for_runs(uuid[],interval,text,uuid[])',
     'a procedure that commits cannot have a SET clause; dex_api_enter pins the path'),
    ('dex.poll_tasks_wait(text,text,integer,interval,interval,jsonb,boolean,uuid[],integer[],bigint[],jsonb[],boolean[],text[],integer[])',
     'a procedure that commits cannot have a SET clause; dex_api_enter pins the path'),
    ('dex.poll_tasks_wait_pb(text,text,integer,interval,interval,bytea[],boolean,uuid[],integer[],bigint[],bytea[],boolean[],text[],integer[])',
     'a procedure that commits cannot have a SET clause; dex_api_enter pins the path');

-- routines of dex that do not pin the path and are not exceptions: none
SELECT p.oid::regprocedure AS unpinned, p.prokind
  FROM pg_proc p
 WHERE (p.pronamespace = 'dex'::regnamespace
        OR p.oid IN (SELECT objid FROM pg_depend
                      WHERE classid = 'pg_proc'::regclass AND deptype = 'e'
                        AND refclassid = 'pg_extension'::regclass
                        AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'dex')))
   AND p.prokind IN ('f', 'p')
   AND NOT coalesce(p.proconfig @> '{"search_path=pg_catalog, pg_temp"}', false)
   AND p.oid::regprocedure::text NOT IN (SELECT routine FROM security_unpinned_ok)
 ORDER BY 1::text;
-- the exceptions, and whether each still lacks the pin (remove it when not)
SELECT routine, prokind, proconfig IS NULL AS unpinned, reason
  FROM security_unpinned_ok LEFT JOIN pg_proc p ON p.oid = to_regprocedure(routine)
 ORDER BY 1;
-- dex has no routine of another kind (an aggregate or window function has no SET clause)
SELECT p.oid::regprocedure, p.prokind FROM pg_proc p
 WHERE p.pronamespace = 'dex'::regnamespace AND p.prokind NOT IN ('f', 'p');

-- 2. An attacker with dex_client and dex_worker owns a schema, and fills it
-- with functions, operators, aggregates and types named like those dex's SQL
-- uses; each records that it ran, and with whose rights, and tries to make
-- the attacker superuser if those are not the attacker's.  Relations of
-- pg_temp named like dex's report any unqualified use.
CREATE ROLE regress_sec_mallory IN ROLE dex_client, dex_worker;
CREATE ROLE regress_sec_admin IN ROLE dex_admin;
CREATE SCHEMA regress_sec_evil AUTHORIZATION regress_sec_mallory;

SET ROLE regress_sec_mallory;
SET search_path = pg_catalog;
GRANT USAGE ON SCHEMA regress_sec_evil TO PUBLIC;
-- every hit, even by a statement that then rolls back: the sequence counts those
CREATE TABLE regress_sec_evil.log (what text, who name);
GRANT INSERT ON regress_sec_evil.log TO PUBLIC;
CREATE SEQUENCE regress_sec_evil.hits;
GRANT USAGE ON SEQUENCE regress_sec_evil.hits TO PUBLIC;
CREATE FUNCTION regress_sec_evil.hit(what text) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM nextval('regress_sec_evil.hits');
    INSERT INTO regress_sec_evil.log VALUES (what, current_user);
    IF current_user <> 'regress_sec_mallory' THEN
        BEGIN
            EXECUTE 'ALTER ROLE regress_sec_mallory SUPERUSER';
        EXCEPTION WHEN OTHERS THEN
            NULL;
        END;
    END IF;
    RETURN true;
END
$$;

-- functions: a twin of each pg_catalog function of these names (same
-- arguments, defaults and result), which calls the original
DO $$
DECLARE
    f record;
    n integer := 0;
    args text;
    call text;
BEGIN
    FOR f IN
        SELECT p.oid, p.proname, p.proretset, p.provariadic, p.pronargs,
               pg_get_function_arguments(p.oid) AS arguments,
               oidvectortypes(p.proargtypes) AS types,
               pg_get_function_result(p.oid) AS result
          FROM pg_proc p
         WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.prokind = 'f'
           AND p.proname = ANY ('{now, clock_timestamp, statement_timestamp, transaction_timestamp,
                nextval, currval, setval, lastval, make_interval, unnest, array_length, array_lower,
                array_upper, array_position, array_append, array_prepend, array_cat, array_remove,
                array_fill, cardinality, generate_series, lower, upper, length, octet_length, substr,
                btrim, replace, split_part, strpos, quote_ident, quote_literal, format, to_regclass,
                current_setting, set_config, pg_relation_size, pg_backend_pid, pg_advisory_xact_lock,
                pg_notify, random, gen_random_uuid, encode, decode, jsonb_typeof, jsonb_array_length,
                jsonb_array_elements, jsonb_array_elements_text, jsonb_each, jsonb_object_keys,
                jsonb_set, jsonb_strip_nulls, jsonb_extract_path, jsonb_extract_path_text,
                jsonb_path_query_first, jsonb_path_exists, to_jsonb, round, floor, abs, date_trunc,
                date_part, extract, age, to_timestamp, pg_has_role, has_table_privilege,
                current_database, pg_sleep, string_to_array, array_to_string,
                int4, int8, text, numeric, float8}'::name[])
           -- what an SQL function cannot take or return
           AND NOT EXISTS (SELECT FROM unnest(p.proargtypes::oid[] || p.prorettype) t
                            WHERE t = ANY (ARRAY['internal', '"any"', 'cstring']::regtype[]::oid[]))
           AND (p.prorettype <> 'record'::regtype OR p.proallargtypes IS NOT NULL)
         ORDER BY p.oid
    LOOP
        SELECT string_agg(CASE WHEN f.provariadic <> 0 AND i = f.pronargs THEN 'VARIADIC ' ELSE '' END
                          || '$' || i, ', ' ORDER BY i)
          INTO args FROM generate_series(1, f.pronargs) i;
        call := format('pg_catalog.%I(%s)', f.proname, coalesce(args, ''));
        EXECUTE format('CREATE FUNCTION regress_sec_evil.%I(%s) RETURNS %s LANGUAGE sql '
                       'SET search_path = pg_catalog, pg_temp AS %L',
                       f.proname, f.arguments, f.result,
                       format('SELECT regress_sec_evil.hit(%L); SELECT %s%s',
                              format('%s(%s)', f.proname, f.types),
                              CASE WHEN f.proretset THEN '* FROM ' ELSE '' END, call));
        n := n + 1;
    END LOOP;
    RAISE NOTICE 'functions: %', n;
END
$$;

-- operators: a twin of each pg_catalog operator of these names on the types dex uses
DO $$
DECLARE
    op record;
    n integer := 0;
    types regtype[] := ARRAY['bool', 'int2', 'int4', 'int8', 'numeric', 'float4', 'float8', 'text',
                             'name', 'char', 'uuid', 'bytea', 'jsonb', 'json', 'jsonpath', 'timestamptz',
                             'timestamp', 'date', 'interval', 'oid', 'text[]', 'anyarray', 'anyelement',
                             'anynonarray', 'anycompatible', 'anycompatiblearray', 'anycompatiblenonarray'];
BEGIN
    FOR op IN
        SELECT o.oprname, o.oprleft, o.oprright::regtype, o.oprresult::regtype,
               coalesce(o.oprleft::regtype::text, 'none') AS lefttype
          FROM pg_operator o
         WHERE o.oprnamespace = 'pg_catalog'::regnamespace
           AND o.oprname = ANY ('{=, <>, <, <=, >, >=, +, -, *, /, %, ||, @>, <@, ->, ->>, #>, #>>,
                                  ?, ?|, ?&, &&, ~~, !~~, ~, !~, ~*, #-, @@}')
           AND (o.oprleft = 0 OR o.oprleft = ANY (types::oid[]))
           AND o.oprright = ANY (types::oid[])
         ORDER BY o.oid
    LOOP
        n := n + 1;
        EXECUTE format('CREATE FUNCTION regress_sec_evil.op%s(%s) RETURNS %s LANGUAGE sql '
                       'SET search_path = pg_catalog, pg_temp AS %L',
                       n, concat_ws(', ', nullif(op.oprleft, 0)::regtype, op.oprright), op.oprresult,
                       format('SELECT regress_sec_evil.hit(%L); SELECT %s OPERATOR(pg_catalog.%s) %s',
                              format('operator %s(%s, %s)', op.oprname, op.lefttype, op.oprright),
                              CASE WHEN op.oprleft = 0 THEN '' ELSE '$1' END, op.oprname,
                              CASE WHEN op.oprleft = 0 THEN '$1' ELSE '$2' END));
        EXECUTE format('CREATE OPERATOR regress_sec_evil.%s (%s RIGHTARG = %s, FUNCTION = regress_sec_evil.op%s)',
                       op.oprname,
                       CASE WHEN op.oprleft = 0 THEN '' ELSE format('LEFTARG = %s,', op.oprleft::regtype) END,
                       op.oprright, n);
    END LOOP;
    RAISE NOTICE 'operators: %', n;
END
$$;

-- aggregates: a twin of each of these whose state is not internal, whose
-- final function tells (it runs even over no rows)
DO $$
DECLARE
    ag record;
    n integer := 0;
BEGIN
    FOR ag IN
        SELECT p.proname, g.aggtransfn, g.aggfinalfn, g.aggtranstype::regtype AS stype, g.agginitval,
               pg_get_function_identity_arguments(p.oid) AS identity, p.prorettype::regtype AS result
          FROM pg_proc p JOIN pg_aggregate g ON g.aggfnoid = p.oid
         WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.prokind = 'a'
           AND p.proname = ANY ('{count, min, max, sum, bool_and, bool_or, every}')
           AND g.aggtranstype <> 'internal'::regtype AND g.aggkind = 'n'
           AND (p.pronargs = 0 OR p.proargtypes[0] = ANY (ARRAY['"any"', 'bool', 'int2', 'int4', 'int8',
                    'numeric', 'float8', 'text', 'oid', 'timestamptz', 'interval', 'anyarray']::regtype[]::oid[]))
         ORDER BY p.oid
    LOOP
        n := n + 1;
        EXECUTE format('CREATE FUNCTION regress_sec_evil.agg%s(%s) RETURNS %s LANGUAGE sql '
                       'SET search_path = pg_catalog, pg_temp AS %L',
                       n, ag.stype, ag.result,
                       format('SELECT regress_sec_evil.hit(%L); SELECT %s',
                              format('aggregate %s(%s)', ag.proname, coalesce(nullif(ag.identity, ''), '*')),
                              CASE WHEN ag.aggfinalfn = 0 THEN '$1'
                                   ELSE format('%s($1)', ag.aggfinalfn::regproc) END));
        EXECUTE format('CREATE AGGREGATE regress_sec_evil.%I(%s) (SFUNC = %s, STYPE = %s, '
                       'FINALFUNC = regress_sec_evil.agg%s%s)',
                       ag.proname, CASE WHEN ag.identity = '' THEN '*' ELSE ag.identity END,
                       ag.aggtransfn::regproc, ag.stype, n,
                       CASE WHEN ag.agginitval IS NULL THEN '' ELSE format(', INITCOND = %L', ag.agginitval) END);
    END LOOP;
    RAISE NOTICE 'aggregates: %', n;
END
$$;
-- and the usual ones whose state is internal
CREATE FUNCTION regress_sec_evil.array_agg_step(anyarray, anynonarray) RETURNS anyarray
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS 'SELECT array_append($1, $2)';
CREATE FUNCTION regress_sec_evil.array_agg_final(anyarray) RETURNS anyarray
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT regress_sec_evil.hit('aggregate array_agg(anynonarray)'); SELECT $1 $$;
CREATE AGGREGATE regress_sec_evil.array_agg(anynonarray) (SFUNC = regress_sec_evil.array_agg_step,
    STYPE = anyarray, FINALFUNC = regress_sec_evil.array_agg_final);
CREATE FUNCTION regress_sec_evil.string_agg_step(text, text, text) RETURNS text
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT CASE WHEN $1 IS NULL THEN $2 ELSE $1 OPERATOR(pg_catalog.||) $3 OPERATOR(pg_catalog.||) $2 END $$;
CREATE FUNCTION regress_sec_evil.string_agg_final(text) RETURNS text
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT regress_sec_evil.hit('aggregate string_agg(text, text)'); SELECT $1 $$;
CREATE AGGREGATE regress_sec_evil.string_agg(text, text) (SFUNC = regress_sec_evil.string_agg_step,
    STYPE = text, FINALFUNC = regress_sec_evil.string_agg_final);
CREATE FUNCTION regress_sec_evil.jsonb_agg_step(jsonb, anyelement) RETURNS jsonb
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT coalesce($1, '[]') OPERATOR(pg_catalog.||) jsonb_build_array($2) $$;
CREATE FUNCTION regress_sec_evil.jsonb_agg_final(jsonb) RETURNS jsonb
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT regress_sec_evil.hit('aggregate jsonb_agg(anyelement)'); SELECT $1 $$;
CREATE AGGREGATE regress_sec_evil.jsonb_agg(anyelement) (SFUNC = regress_sec_evil.jsonb_agg_step,
    STYPE = jsonb, FINALFUNC = regress_sec_evil.jsonb_agg_final);

-- types: a domain named like each type dex's statements cast to, whose check tells
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY '{bool, int2, int4, int8, float8, text, name, char, uuid, bytea, jsonb, json,
                         jsonpath, timestamptz, timestamp, date, oid, regclass, regrole, regtype}'::text[] LOOP
        EXECUTE format('CREATE DOMAIN regress_sec_evil.%I AS pg_catalog.%I CHECK (regress_sec_evil.hit(%L))',
                       t, t, 'type ' || t);
    END LOOP;
END
$$;

-- relations: a view of pg_temp named like each relation of dex, found by an
-- unqualified name on the pinned path too (pg_temp comes after pg_catalog)
DO $$
DECLARE
    r name;
BEGIN
    FOR r IN SELECT c.relname FROM pg_class c
              WHERE c.relnamespace = 'dex'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
              ORDER BY 1 LOOP
        EXECUTE format('CREATE TEMP VIEW %I AS SELECT FROM (VALUES (1)) v WHERE regress_sec_evil.hit(%L)',
                       r, 'relation pg_temp.' || r);
    END LOOP;
END
$$;

-- the twins work: on the attacker's path, they are what names resolve to
SET search_path = pg_temp, regress_sec_evil, pg_catalog;
SELECT now() IS NOT NULL, clock_timestamp() IS NOT NULL, nextval('regress_sec_evil.hits') > 0,
       make_interval(secs => 1.5) IS NOT NULL, '1'::int4 + 1 = 2, 2::int8 <= 3, 'a' || 'b' <> 'c',
       '{"a": 1}'::jsonb @> '{}', '00000000-0000-0000-0000-000000000000'::uuid IS NOT NULL, 1 = ANY ('{1}'::int4[]);
SELECT count(*), min(x), array_agg(x) FROM unnest('{1}'::int4[]) x;
SELECT FROM workflow_run;
SET search_path = pg_catalog;
SELECT DISTINCT what FROM regress_sec_evil.log ORDER BY 1;
TRUNCATE regress_sec_evil.log;
SELECT last_value AS hits FROM regress_sec_evil.hits \gset
RESET ROLE;
RESET search_path;

-- 3. From here on, count the calls of every routine of dex: the end of the
-- test shows those that were not called (superusers only may track C functions)
SET track_functions = 'all';
CREATE TEMP TABLE security_calls AS
SELECT p.oid AS routine, coalesce(pg_stat_get_function_calls(p.oid), 0) AS before
  FROM pg_proc p WHERE p.pronamespace = 'dex'::regnamespace;

-- Every call of dex's API, each on its main path, on the attacker's
-- search_path: by an administrator who has it (or was given it) ...
SET ROLE regress_sec_admin;
SET search_path = pg_temp, regress_sec_evil, pg_catalog;
SELECT dex.create_queue('sec-wf', 'workflow', capacity => 5);
SELECT dex.create_queue('sec-act', 'activity', capacity => 5);
SELECT dex.create_queue('sec-kids', 'workflow');
SELECT dex.alter_queue('sec-act', capacity => 20, paused => false);
SELECT dex.alter_queue('sec-act', rate_limit => 1000, rate_period => '1 s');
SELECT dex.set_concurrency_limit('sec-wf', 'sec-k', 2);
SELECT dex.revoke_queue('sec-wf', 'dex_client'), dex.revoke_queue('sec-wf', 'dex_worker'),
       dex.revoke_queue('sec-act', 'dex_client'), dex.revoke_queue('sec-act', 'dex_worker');
SELECT dex.grant_queue('sec-wf', 'regress_sec_mallory'), dex.grant_queue('sec-act', 'regress_sec_mallory');

-- ... and by the attacker, as client and worker
SET ROLE regress_sec_mallory;
SELECT dex.to_json('dex.v1.Payload', dex.from_json('dex.v1.Payload', '{"json": "1"}')) AS payload,
       dex.payload_value(dex.from_json('dex.v1.Payload', '{"json": "{\"a\": 1}"}')) AS value;
SELECT dex.wake_scheduler();
SELECT pg_catalog.cardinality(dex.usable_queue_ids()) OPERATOR(pg_catalog.>=) 3 AS usable;
SELECT dex.create_run('sec', 'sec-wf', '{"n": 1}', instance_id => 'sec-1', priority => 10,
                      labels => '{"tenant": "m"}', concurrency_key => 'sec-k') AS r1 \gset
SELECT (pg_catalog.array_agg(id ORDER BY n))[1] AS r2, (pg_catalog.array_agg(id ORDER BY n))[2] AS r3
  FROM dex.create_runs('sec', 'sec-wf', '{2, 3}', priority => 5, labels => '{"tenant": "m"}')
       WITH ORDINALITY AS c (id, created, n) \gset
SELECT dex.send_external_event(:'r1', 'ev-1', '{"ok": true}') AS sent;
SELECT dex.send_external_event(:'r1', 'ev-1') AS sent_again;
SELECT delivered, outcome FROM dex.send_external_events(ARRAY[:'r2', :'r1']::pg_catalog.uuid[], '{ev-1, ev-1}');
SELECT dex.send_external_event_to_instance('sec-1', 'ev-2', '"x"', queue => 'sec-wf') AS sent;
SELECT dex.send_external_event_to_instance('sec-1', 'ev-3') AS sent;
SELECT workflow_name, queue, status, instance_id, priority, labels, argument FROM dex.get_run(:'r1');
SELECT workflow_name, status, priority, argument
  FROM dex.list_runs(workflow_name => 'sec', status => 'CREATED', labels => '{"tenant": "m"}',
                     created_after => '-infinity', created_before => 'infinity', page_size => 10)
 ORDER BY priority, argument;
SELECT pg_catalog.count(*) AS visible FROM dex.runs WHERE workflow_name OPERATOR(pg_catalog.=) 'sec';
-- the runs a status filter finds whatever their age (1.11)
SELECT (SELECT horizon IS NOT NULL FROM dex.run_status_horizon) AS horizon,
       pg_catalog.count(*) OPERATOR(pg_catalog.>=) 0 AS readable FROM dex.runs_in_status;
-- a run that never started is cancelled at once
SELECT dex.cancel_run(:'r3', 'not needed');
SELECT argument FROM dex.list_runs(before_id => :'r2', status => 'CREATED', labels => '{"tenant": "m"}',
                                   page_size => 1);
-- a run terminated by its client; the client waits for the cancelled one
SELECT dex.create_run('sec-end', 'sec-wf') AS r4 \gset
SELECT dex.terminate_run(:'r4', 'not needed either');
CALL dex.wait_for_run(:'r3', '1 s');

-- the first workflow task: every kind of command
CALL dex.wait_for_tasks('sec-wf', '0 s');
CALL dex.wait_for_tasks('sec-wf', '0.1 s');
-- the poll and the long poll in one call, on the activity queue, empty for now: after the
-- timeout, no task
CALL dex.poll_tasks_wait('sec-act', 'sec-w', 5, '1 min', '0.1 s');
CALL dex.poll_tasks_wait_pb('sec-act', 'sec-w', 5, '1 min', '0 s');
-- and declaring what the worker runs: none of the queue's tasks is of these
CALL dex.poll_tasks_wait('sec-act', 'sec-w', 5, '1 min', '0 s', names => ARRAY['nothing']);
-- a worker shutting down ends its waits (none wait now)
SELECT dex.stop_waiting('sec-w') AS stopped;
SELECT pg_catalog.count(*) AS leased
  FROM dex.poll_tasks('sec-wf', 'sec-w', 5, names => ARRAY['sec'], versions => ARRAY[9]);
SELECT lock_version AS v FROM dex.poll_tasks('sec-wf', 'sec-w') \gset
SELECT dex.complete_task(:'r1', 0, :v, '[
    {"id": 1, "scheduleActivity": {"name": "a1", "queue": "sec-act", "argument": {"json": "1"},
                                   "startToCloseTimeout": "600s", "scheduleToCloseTimeout": "3600s",
                                   "heartbeatTimeout": "600s"}},
    {"id": 2, "scheduleActivity": {"name": "a2", "queue": "sec-act",
                                   "retryPolicy": {"maxAttempts": 3, "initialDelay": "3600s"}}},
    {"id": 3, "scheduleActivity": {"name": "a3", "queue": "sec-act"}},
    {"id": 4, "scheduleActivity": {"name": "a4", "queue": "sec-act"}},
    {"id": 5, "scheduleActivity": {"name": "a5", "queue": "sec-act"}},
    {"id": 6, "scheduleActivity": {"name": "a6", "queue": "sec-act"}},
    {"id": 7, "scheduleActivity": {"name": "a7", "queue": "sec-act"}},
    {"id": 8, "scheduleActivity": {"name": "a8", "queue": "sec-act", "retryPolicy": {"maxAttempts": 1}}},
    {"id": 9, "scheduleActivity": {"name": "a9", "queue": "sec-act", "retryPolicy": {"maxAttempts": 1}}},
    {"id": 10, "startTimer": {"name": "t", "delay": "3600s"}},
    {"id": 11, "startChildRun": {"workflowName": "sec-child", "queue": "sec-kids", "instanceId": "sec-child-1",
                                 "concurrencyKey": "sec-ck", "argument": {"json": "11"}}},
    {"id": 12, "recordSideEffect": {"name": "se", "result": {"json": "12"}}},
    {"id": 13, "setCustomStatus": {"customStatus": "busy"}},
    {"id": 14, "waitExternalEvent": {"eventId": "ev-14", "timeout": "3600s"}}]');

-- the activities: leased at once, reported every way there is
CALL dex.wait_for_tasks('sec-act', '0 s');
CREATE TEMP TABLE sec_leases AS
SELECT task_id, run_id, lock_version FROM dex.poll_tasks('sec-act', 'sec-w', 20, '10 minutes');
SELECT pg_catalog.count(*) AS leased FROM pg_temp.sec_leases;
-- (leases held: the long poll compares them with the queue's capacity)
CALL dex.wait_for_tasks('sec-act', '0 s');
SELECT dex.heartbeat_task(run_id, task_id, lock_version, '20 minutes', '{"step": 1}') IS NOT NULL AS extended
  FROM pg_temp.sec_leases WHERE task_id OPERATOR(pg_catalog.=) 1;
SELECT dex.complete_task(run_id, task_id, lock_version, '{"done": 1}')
  FROM pg_temp.sec_leases WHERE task_id OPERATOR(pg_catalog.=) 1;
SELECT dex.fail_task(run_id, task_id, lock_version, '{"message": "again", "type": "Transient"}')
  FROM pg_temp.sec_leases WHERE task_id OPERATOR(pg_catalog.=) 2;
SELECT dex.fail_task_pb(run_id, task_id, lock_version,
                        dex.from_json('dex.v1.Failure', '{"message": "no", "terminal": true}'))
  FROM pg_temp.sec_leases WHERE task_id OPERATOR(pg_catalog.=) 3;
SELECT dex.complete_task_pb(run_id, task_id, lock_version, dex.from_json('dex.v1.Payload', '{"json": "4"}'))
  FROM pg_temp.sec_leases WHERE task_id OPERATOR(pg_catalog.=) 4;
SELECT pg_catalog.array_agg(run_id ORDER BY task_id) AS br, pg_catalog.array_agg(task_id ORDER BY task_id) AS bt,
       pg_catalog.array_agg(lock_version ORDER BY task_id) AS bv
  FROM pg_temp.sec_leases WHERE task_id OPERATOR(pg_catalog.>=) 5 \gset
SELECT task_id, locked_until IS NOT NULL AS extended FROM dex.heartbeat_tasks(:'br', :'bt', :'bv', '30 minutes');
SELECT pg_catalog.array_agg(run_id ORDER BY task_id) AS br, pg_catalog.array_agg(task_id ORDER BY task_id) AS bt,
       pg_catalog.array_agg(lock_version ORDER BY task_id) AS bv
  FROM pg_temp.sec_leases WHERE task_id OPERATOR(pg_catalog.=) ANY ('{5, 6}') \gset
SELECT task_id, completed FROM dex.complete_tasks(:'br', :'bt', :'bv', '{"5", "6"}');
SELECT run_id AS br, task_id AS bt, lock_version AS bv
  FROM pg_temp.sec_leases WHERE task_id OPERATOR(pg_catalog.=) 7 \gset
SELECT task_id, completed
  FROM dex.complete_tasks_pb(ARRAY[:'br'::pg_catalog.uuid], ARRAY[:bt], ARRAY[:bv::pg_catalog.int8],
                             ARRAY[dex.from_json('dex.v1.Payload', '{"json": "7"}')]);
SELECT run_id AS br, task_id AS bt, lock_version AS bv
  FROM pg_temp.sec_leases WHERE task_id OPERATOR(pg_catalog.=) 8 \gset
SELECT task_id, failed
  FROM dex.fail_tasks(ARRAY[:'br'::pg_catalog.uuid], ARRAY[:bt], ARRAY[:bv::pg_catalog.int8],
                      ARRAY['{"message": "batch"}'::pg_catalog.jsonb]);
SELECT run_id AS br, task_id AS bt, lock_version AS bv
  FROM pg_temp.sec_leases WHERE task_id OPERATOR(pg_catalog.=) 9 \gset
SELECT task_id, failed
  FROM dex.fail_tasks_pb(ARRAY[:'br'::pg_catalog.uuid], ARRAY[:bt], ARRAY[:bv::pg_catalog.int8],
                         ARRAY[dex.from_json('dex.v1.Failure', '{"message": "batch pb"}')]);
-- nothing is left to lease: the long poll sleeps until its timeout
CALL dex.wait_for_tasks('sec-act', '0.1 s');

-- the second workflow task, in protobuf: cancel the timer
SELECT lock_version AS v FROM dex.poll_tasks_pb('sec-wf', 'sec-w') \gset
SELECT dex.complete_task_pb(:'r1', 0, :v,
    dex.from_json('dex.v1.WorkflowTaskCompletion',
                  '{"commands": [{"id": 15, "cancelTimer": {"timerCreatedEventId": 10}}]}'));

-- the child starts, is suspended and resumed; its next workflow task fails,
-- and it is suspended again
SELECT run_id AS child, lock_version AS v FROM dex.poll_tasks('sec-kids', 'sec-w') \gset
SELECT dex.complete_task(:'child', 0, :v, '[]');
SELECT dex.suspend_run(:'child');
SELECT dex.resume_run(:'child');
SELECT lock_version AS v FROM dex.poll_tasks('sec-kids', 'sec-w') \gset
SELECT dex.fail_task(:'child', 0, :v, '{"message": "crash"}');
SELECT dex.suspend_run(:'child');

-- the event the first run waits for; its task and r2's are completed in one call
SELECT dex.send_external_event(:'r1', 'ev-14', '"go"') AS sent;
CREATE TEMP TABLE sec_wf AS SELECT run_id, task_id, lock_version FROM dex.poll_tasks('sec-wf', 'sec-w', 10);
SELECT pg_catalog.count(*) AS leased FROM pg_temp.sec_wf;
SELECT ARRAY(SELECT run_id FROM pg_temp.sec_wf ORDER BY run_id) AS br,
       ARRAY(SELECT task_id FROM pg_temp.sec_wf ORDER BY run_id) AS bt,
       ARRAY(SELECT lock_version FROM pg_temp.sec_wf ORDER BY run_id) AS bv,
       ARRAY(SELECT CASE WHEN run_id OPERATOR(pg_catalog.=) :'r1'
                         THEN '[{"completeRun": {"result": {"json": "\"done\""}}}]'
                         ELSE '[{"continueAsNew": {"argument": {"json": "22"}}}]' END
               FROM pg_temp.sec_wf ORDER BY run_id) AS bc \gset
SELECT completed, pg_catalog.count(*) FROM dex.complete_tasks(:'br', :'bt', :'bv', :'bc') GROUP BY 1;
-- r2 starts over, and fails
SELECT lock_version AS v FROM dex.poll_tasks('sec-wf', 'sec-w') \gset
SELECT dex.complete_task(:'r2', 0, :v, '[{"failRun": {"failure": {"message": "gave up"}}}]');

-- where the runs ended
SELECT workflow_name, status, custom_status, result, failure OPERATOR(pg_catalog.->>) 'message' AS failure
  FROM dex.list_runs(completed_after => '-infinity', completed_before => 'infinity', labels => '{"tenant": "m"}')
 ORDER BY workflow_name, status;
SELECT workflow_name, status FROM dex.list_runs(parent_id => :'r1');
SELECT pg_catalog.count(*) OPERATOR(pg_catalog.>) 10 AS history FROM dex.run_history(:'r1');
SELECT pg_catalog.octet_length(dex.run_history_pb(:'r1')) OPERATOR(pg_catalog.>) 100 AS history_pb;
-- r1 restarted and r2 reset to its last task, each new run then terminated; r1's attempts
SELECT dex.terminate_run(dex.restart_run(:'r1'), 'only a test');
SELECT dex.terminate_run(dex.reset_run(:'r2', (SELECT history_length FROM dex.get_run(:'r2')), 'a test'),
                         'only a test');
SELECT pg_catalog.count(*) OPERATOR(pg_catalog.>) 0 AS attempts FROM dex.run_attempts(:'r1');
CALL dex.wait_for_runs(ARRAY[:'r1', :'r2']::pg_catalog.uuid[], '1 s', 'all') \gset
SELECT pg_catalog.cardinality(:'ended'::pg_catalog.uuid[]) AS ended;

-- the administrator's views and statistics
SET ROLE regress_sec_admin;
SELECT queue, kind, status, capacity, ready, leased, delayed, estimated
  FROM dex.queue_depth WHERE queue OPERATOR(pg_catalog.~~) 'sec-%' ORDER BY queue;
SELECT pg_catalog.count(*) AS queues FROM dex.queue_depth() WHERE queue OPERATOR(pg_catalog.~~) 'sec-%';
SELECT queue, tasks_created, tasks_leased, tasks_completed, tasks_failed
  FROM dex.stat_queues WHERE queue OPERATOR(pg_catalog.~~) 'sec-%' ORDER BY queue;
SELECT database OPERATOR(pg_catalog.=) pg_catalog.current_database() AS this_database FROM dex.stat_database;
SELECT workflow_name, status, runs, estimated
  FROM dex.runs_by_status WHERE workflow_name OPERATOR(pg_catalog.~~) 'sec%' ORDER BY workflow_name, status;
SELECT queue, role FROM dex.queue_privileges WHERE queue OPERATOR(pg_catalog.~~) 'sec-%'
 ORDER BY queue, role::pg_catalog.text;
SELECT pg_catalog.count(*) OPERATOR(pg_catalog.>) 0 AS counters FROM dex.stat_counters();
SELECT histogram, queue, workflow, pg_catalog.cardinality(le) AS bounds,
       count OPERATOR(pg_catalog.>) 0 AS observed
  FROM dex.stat_latency WHERE coalesce(queue, workflow) OPERATOR(pg_catalog.~~) 'sec%'
 ORDER BY histogram, queue, workflow;
SELECT pg_catalog.count(*) OPERATOR(pg_catalog.>) 0 AS histograms FROM dex.latency_histograms();
SELECT queue, rate_limit, rate_period, concurrency_limit, keys_with_limits
  FROM dex.queue_limits WHERE queue OPERATOR(pg_catalog.~~) 'sec-%' ORDER BY queue;
SELECT queue, key, max_runs, active, waiting FROM dex.concurrency_limits
 WHERE queue OPERATOR(pg_catalog.~~) 'sec-%';
SELECT pg_catalog.count(*) OPERATOR(pg_catalog.>=) 0 AS buckets FROM dex.rate_limits();
-- a run moves to version 2, where no worker waits for it, and ends
SELECT dex.create_run('sec-v', 'sec-wf') AS r5 \gset
SELECT dex.set_run_version(:'r5', 2);
SELECT queue, kind, name, version, tasks FROM dex.unserved('0 s')
 WHERE name OPERATOR(pg_catalog.=) 'sec-v';
SELECT dex.terminate_run(:'r5');
SELECT dex.last_polled(q.id) IS NOT NULL AS polled FROM dex.queue q WHERE q.name OPERATOR(pg_catalog.=) 'sec-wf';
SELECT dex.reset_stats();
-- the terminated run is purged, and the cancelled one with the others of its status
SELECT dex.purge_run(:'r4');
SELECT dex.purge_runs(status => 'CANCELLED', queue => 'sec-wf', ended_before => 'infinity', "limit" => 10)
       OPERATOR(pg_catalog.>=) 1 AS purged;
-- an API token of the REST API: made, turned into its role, listed, revoked
SELECT dex.create_api_token('sec-token', 'dex_client') AS sec_token \gset
SELECT dex.authenticate_api_token(:'sec_token') AS token_role;
SELECT name, role FROM dex.api_tokens WHERE name OPERATOR(pg_catalog.=) 'sec-token';
SELECT dex.revoke_api_token('sec-token');
-- a schedule: made, changed, its next ticks, paused and unpaused, fired now and backfilled
-- (its runs terminated at once), listed, deleted
SELECT dex.create_schedule('sec-sched', 'sec-s', 'sec-wf', cron => '0 0 1 1 *', start_at => '2030-01-01',
                           overlap => 'terminate_other') IS NOT NULL AS scheduled;
SELECT dex.alter_schedule('sec-sched', timezone => 'Europe/Berlin') IS NOT NULL AS altered;
SELECT pg_catalog.count(*) AS ticks FROM dex.schedule_next_times('sec-sched', 2);
SELECT dex.pause_schedule('sec-sched', 'x'), dex.unpause_schedule('sec-sched') IS NOT NULL AS unpaused;
SELECT dex.trigger_schedule('sec-sched') IS NOT NULL AS triggered;
SELECT pg_catalog.count(run_id) AS backfilled FROM dex.backfill_schedule('sec-sched', '2019-12-31', '2020-01-02');
SELECT name, runs_started, last_run_status FROM dex.schedules WHERE name OPERATOR(pg_catalog.=) 'sec-sched';
SELECT dex.terminate_run(last_run_id) FROM dex.schedules WHERE name OPERATOR(pg_catalog.=) 'sec-sched';
SELECT dex.delete_schedule('sec-sched');
-- workflows defined in JSON (1.7): made, read, listed, deleted; a user task nobody waits at
SELECT dex.create_definition('sec-def', 1, '{"steps": [
    {"id": "calc", "type": "sql", "sql": "SELECT 1 + 1 AS two", "next": "ask"},
    {"id": "ask", "type": "user", "next": "e"}, {"id": "e", "type": "end"}]}');
SELECT dex.get_definition('sec-def') OPERATOR(pg_catalog.->) 'steps' OPERATOR(pg_catalog.->) 0
       OPERATOR(pg_catalog.->>) 'id' AS first_step;
SELECT name, version, steps FROM dex.list_definitions('sec-def');
SELECT dex.grant_definition('sec-def', 'dex_client'), dex.revoke_definition('sec-def', 'dex_client');
SELECT pg_catalog.count(*) AS grants FROM dex.definition_privileges WHERE name OPERATOR(pg_catalog.=) 'sec-def';
SELECT * FROM dex.step_context();
SELECT pg_catalog.count(*) FROM dex.user_tasks(:'r5');
\set VERBOSITY sqlstate
SELECT dex.complete_user_task(:'r5', 'ask', '{}');
\set VERBOSITY default
-- a run of it: the interpreter runs the SQL step with the owner's rights and its own path,
-- then the user task waits, and is completed
SELECT dex.create_run('sec-def', 'sec-wf') AS r6 \gset
DO $$
BEGIN
  FOR i IN 1..1500 LOOP
    EXIT WHEN EXISTS (SELECT FROM dex.user_tasks());
    PERFORM pg_catalog.pg_sleep(0.02);
  END LOOP;
END $$;
SELECT step, dex.complete_user_task(run_id, step, '{"ok": true}') FROM dex.user_tasks();
CALL dex.wait_for_run(:'r6', '30 s');
SELECT dex.delete_definition('sec-def', 1);
RESET search_path;
RESET ROLE;

-- nothing of the attacker's ran, with anybody's rights; nobody became superuser
SELECT what, who, count(*) FROM regress_sec_evil.log GROUP BY 1, 2 ORDER BY 1, 2;
SELECT last_value - :hits AS hits FROM regress_sec_evil.hits;
SELECT rolname, rolsuper FROM pg_roles WHERE rolname LIKE 'regress_sec_%' ORDER BY 1;

-- every routine of dex was called above
SELECT pg_stat_force_next_flush();
SELECT p.oid::regprocedure AS not_called
  FROM pg_proc p LEFT JOIN security_calls c ON c.routine = p.oid
 WHERE p.pronamespace = 'dex'::regnamespace
   AND coalesce(pg_stat_get_function_calls(p.oid), 0) <= coalesce(c.before, 0)
 ORDER BY 1::text;
RESET track_functions;

DROP OWNED BY regress_sec_mallory;
DROP ROLE regress_sec_mallory, regress_sec_admin;
