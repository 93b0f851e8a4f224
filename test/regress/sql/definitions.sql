--
-- definitions: workflows defined in JSON (1.7), run by the interpreter worker
--
\set VERBOSITY terse
SET dex.retry_randomization = 0;
SELECT dex.create_queue('defs-wf', 'workflow');
SELECT dex.create_queue('defs-act', 'activity');

-- wait until a query gives true (the interpreter works in its own transactions)
CREATE FUNCTION pg_temp.wait_until(q text, timeout_s float8 DEFAULT 20)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + make_interval(secs => timeout_s);
    ok boolean;
BEGIN
    LOOP
        EXECUTE q INTO ok;
        IF ok THEN RETURN true; END IF;
        IF clock_timestamp() > deadline THEN RETURN false; END IF;
        PERFORM pg_sleep(0.02);
    END LOOP;
END $$;

-- ---------------------------------------------------------------- validation
-- every error is 22023 and names the offending element by its JSON path
\set VERBOSITY default
SELECT dex.create_definition('bad', 1, '[]');
\set VERBOSITY terse
SELECT dex.create_definition('bad', 1, '{}');
SELECT dex.create_definition('bad', 1, '{"steps": [], "x": 1}');
SELECT dex.create_definition('bad', 1, '{"steps": []}');
SELECT dex.create_definition('bad', 1, '{"steps": {}}');
SELECT dex.create_definition('bad', 1, '{"steps": [1]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": 3, "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "a", "type": "end"}, {"id": "a", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "a", "type": "dance"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "a", "type": "end", "next": "a"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "a", "type": "sql", "next": "b"}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "a", "type": "sql", "sql": "SELEC 1", "next": "b"}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "a", "type": "sql", "sql": "SELECT 1; SELECT 2", "next": "b"}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "a", "type": "sql", "sql": "SELECT 1"}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "a", "type": "sql", "sql": "SELECT 1", "next": "c"}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "a", "type": "service", "queue": "q", "next": "b"}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "a", "type": "service", "activity": "x", "queue": "q", "retryCount": -1, "next": "b"}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "a", "type": "service", "activity": "x", "queue": "q", "retryCount": 1.5, "next": "b"}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "a", "type": "service", "activity": "x", "queue": "q", "retryCount": 1, "retryPolicy": {}, "next": "b"}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "a", "type": "service", "activity": "x", "queue": "q", "retryPolicy": {"maxAttempt": 2}, "next": "b"}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "a", "type": "service", "activity": "x", "queue": "q", "startToCloseTimeout": "soon", "next": "b"}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "a", "type": "service", "activity": "x", "queue": "q", "input": "$.a[", "next": "b"}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "a", "type": "service", "activity": "x", "queue": "q", "priority": 101, "next": "b"}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "g", "type": "gateway"}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "g", "type": "gateway", "conditions": []}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "g", "type": "gateway", "conditions": [{"next": "b"}]}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "g", "type": "gateway", "conditions": [{"when": "$.x >", "next": "b"}]}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "g", "type": "gateway", "conditions": [{"when": "$.x", "next": "b", "else": 1}]}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "g", "type": "gateway", "conditions": [{"when": "$.x", "next": "b"}], "default": "z"}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "e", "type": "end", "output": "$", "fail": {"message": "m"}}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "e", "type": "end", "fail": {}}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "e", "type": "end", "fail": "no"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "t", "type": "timer", "next": "e"}, {"id": "e", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "t", "type": "timer", "duration": "1 s", "date": "2030-01-01", "next": "e"}, {"id": "e", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "t", "type": "timer", "date": "someday", "next": "e"}, {"id": "e", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "p", "type": "parallel", "branches": ["e"]}, {"id": "e", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "p", "type": "parallel", "branches": ["e", 2]}, {"id": "e", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "p", "type": "parallel", "branches": ["e", "f"]}, {"id": "e", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "j", "type": "join", "next": "e"}, {"id": "e", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "s", "type": "signal", "next": "e"}, {"id": "e", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "s", "type": "signal", "signal": "user:x", "next": "e"}, {"id": "e", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "s", "type": "signal", "signal": "a:b", "next": "e"}, {"id": "e", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "s", "type": "signal", "signal": "go", "timeoutNext": "e", "next": "e"}, {"id": "e", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "u", "type": "user", "candidateGroups": "clerks", "next": "e"}, {"id": "e", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "u", "type": "user", "candidateGroups": ["clerks", 1], "next": "e"}, {"id": "e", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "c", "type": "call", "version": 0, "definition": "x", "next": "e"}, {"id": "e", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "e", "type": "end"}], "start": "nowhere"}');
SELECT dex.create_definition('bad', 0, '{"steps": [{"id": "e", "type": "end"}]}');
SELECT dex.create_definition(NULL, 1, '{"steps": [{"id": "e", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, NULL);
SELECT dex.create_definition('bad', 1, jsonb_build_object('steps', jsonb_build_array(
    jsonb_build_object('id', repeat('x', 256), 'type', 'end'))));
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "a", "type": "service", "activity": "x", "queue": "q", "retryCount": "2", "next": "b"}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "a", "type": "service", "activity": "x", "queue": "q", "retryPolicy": 3, "next": "b"}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "g", "type": "gateway", "conditions": ["$.x"]}, {"id": "b", "type": "end"}]}');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "e", "type": "end"}], "searchPath": ["public"]}');
-- a definition is no larger than a payload may be (54000)
SET dex.max_payload_size = 1024;
SELECT dex.create_definition('bad', 1, jsonb_build_object('steps', jsonb_build_array(
    jsonb_build_object('id', 'e', 'type', 'end', 'description', repeat('x', 2000)))));
RESET dex.max_payload_size;
-- nothing was stored
SELECT count(*) FROM dex.list_definitions();

-- ---------------------------------------------------------------- SQL task, gateway, end
CREATE TABLE defs_scores (id serial PRIMARY KEY, amount integer);
SELECT dex.create_definition('score', 1, '{
  "description": "two SQL steps and a gateway",
  "steps": [
    {"id": "double", "type": "sql", "sql": "SELECT ($1->>''amount'')::int * 2 AS doubled", "next": "store"},
    {"id": "store", "type": "sql",
     "sql": "INSERT INTO defs_scores (amount) VALUES (($1->>''doubled'')::int) RETURNING jsonb_build_object(''stored'', true)",
     "next": "route"},
    {"id": "route", "type": "gateway",
     "conditions": [{"when": "$.doubled > 100", "next": "big"}], "default": "small"},
    {"id": "big", "type": "end", "output": "$.doubled"},
    {"id": "small", "type": "end"}
  ]}');
SELECT dex.create_definition('score', 1, '{"steps": [{"id": "e", "type": "end"}]}');
SELECT dex.create_run('score', 'defs-wf', '{"amount": 10}') AS small \gset
SELECT dex.create_run('score', 'defs-wf', '{"amount": 100}', 1) AS big \gset
CALL dex.wait_for_run(:'small', '30 s');
CALL dex.wait_for_run(:'big', '30 s');
SELECT amount FROM defs_scores ORDER BY amount;
-- the history: one workflow task, a side effect per SQL step, the end
SELECT h.sequence, h.event->>'id' AS id,
       (SELECT k FROM jsonb_object_keys(h.event - 'id' - 'timestamp') k) AS event,
       h.event->'sideEffectExecuted'->>'name' AS side_effect, h.event->'markerRecorded'->>'name' AS marker
  FROM dex.run_history(:'small') h;
-- variables that are not an object fail the run
SELECT dex.create_run('score', 'defs-wf', '[1]') AS notobj \gset
CALL dex.wait_for_run(:'notobj', '30 s');

-- SQL steps run with the privileges of the definition's owner, never more
CREATE ROLE defs_owner;
GRANT dex_admin TO defs_owner;
CREATE TABLE defs_secret (x integer);
SET ROLE defs_owner;
SELECT dex.create_definition('peek', 1, '{"steps": [
    {"id": "read", "type": "sql", "sql": "SELECT count(*) AS n FROM defs_secret", "next": "e"},
    {"id": "e", "type": "end"}]}');
RESET ROLE;
SELECT name, version, owner = 'defs_owner'::regrole AS by_defs_owner, steps
  FROM dex.list_definitions() ORDER BY name;
SELECT dex.create_run('peek', 'defs-wf') AS peek \gset
CALL dex.wait_for_run(:'peek', '30 s');
GRANT SELECT ON defs_secret TO defs_owner;
SELECT dex.create_run('peek', 'defs-wf') AS peek \gset
CALL dex.wait_for_run(:'peek', '30 s');

-- a SQL step runs as a security-restricted operation: no temporary objects, and a
-- setting it changes does not outlive it
SELECT dex.create_definition('restricted', 1, '{"steps": [
    {"id": "set", "type": "sql", "sql": "SELECT set_config(''application_name'', ''leaked'', false) AS s", "next": "get"},
    {"id": "get", "type": "sql", "sql": "SELECT current_setting(''application_name'') <> ''leaked'' AS clean", "next": "e"},
    {"id": "e", "type": "end", "output": "$.clean"}]}');
SELECT dex.create_run('restricted', 'defs-wf') AS restricted \gset
CALL dex.wait_for_run(:'restricted', '30 s');
SELECT dex.create_definition('temp', 1, '{"steps": [
    {"id": "tmp", "type": "sql", "sql": "CREATE TEMP TABLE defs_tmp (x integer)", "next": "e"},
    {"id": "e", "type": "end"}]}');
SELECT dex.create_run('temp', 'defs-wf') AS temp \gset
CALL dex.wait_for_run(:'temp', '30 s');

-- retryCount: a SQL step that fails is tried again at once, in a subtransaction
CREATE SEQUENCE defs_tries;
SELECT dex.create_definition('retried', 1, '{"steps": [
    {"id": "flaky", "type": "sql", "retryCount": 2,
     "sql": "SELECT 10 / (nextval(''defs_tries'') - 1) AS x", "next": "e"},
    {"id": "e", "type": "end"}]}');
SELECT dex.create_run('retried', 'defs-wf') AS retried \gset
CALL dex.wait_for_run(:'retried', '30 s');
-- out of tries: the last error fails the run
SELECT setval('defs_tries', 1, false);
SELECT dex.create_definition('retried', 2, '{"steps": [
    {"id": "flaky", "type": "sql", "retryCount": 0,
     "sql": "SELECT 10 / (nextval(''defs_tries'') - 1) AS x", "next": "e"},
    {"id": "e", "type": "end"}]}');
SELECT dex.create_run('retried', 'defs-wf', NULL, 2) AS retried \gset
CALL dex.wait_for_run(:'retried', '30 s');
SELECT dex.create_definition('bad', 1, '{"steps": [{"id": "a", "type": "sql", "sql": "SELECT 1", "retryCount": 101, "next": "b"}, {"id": "b", "type": "end"}]}');

-- a gateway may lead back: a loop
SELECT dex.create_definition('loop', 1, '{"steps": [
    {"id": "inc", "type": "sql", "sql": "SELECT coalesce(($1->>''i'')::int, 0) + 1 AS i", "next": "again"},
    {"id": "again", "type": "gateway", "conditions": [{"when": "$.i < 5", "next": "inc"}], "default": "e"},
    {"id": "e", "type": "end", "output": "$.i"}]}');
SELECT dex.create_run('loop', 'defs-wf') AS loop \gset
CALL dex.wait_for_run(:'loop', '30 s');
-- one that never waits is stopped
SELECT dex.create_definition('forever', 1, '{"steps": [
    {"id": "again", "type": "gateway", "conditions": [{"when": "$.stop", "next": "e"}], "default": "again"},
    {"id": "e", "type": "end"}]}');
SELECT dex.create_run('forever', 'defs-wf') AS forever \gset
CALL dex.wait_for_run(:'forever', '30 s');

-- ---------------------------------------------------------------- service task
SELECT dex.create_definition('service', 1, '{"steps": [
    {"id": "check", "type": "service", "activity": "credit_check", "queue": "defs-act",
     "input": "$.applicant", "retryCount": 1, "startToCloseTimeout": "30 s", "resultVariable": "credit",
     "next": "e"},
    {"id": "e", "type": "end"}]}');
SELECT dex.create_run('service', 'defs-wf', '{"applicant": {"name": "Ada"}}') AS svc \gset
SELECT pg_temp.wait_until($$SELECT EXISTS (SELECT FROM dex.activity_task WHERE name = 'credit_check')$$);
SELECT name, argument, (retry_policy IS NOT NULL) AS has_policy, start_to_close_ms
  FROM dex.activity_task WHERE run_id = :'svc';
SELECT task_id, lock_version AS v, task->'argument' AS argument
  FROM dex.poll_tasks('defs-act', 'w') \gset
\echo :argument
SELECT dex.complete_task(:'svc', :task_id, :v, '{"score": 700}');
CALL dex.wait_for_run(:'svc', '30 s');
-- a failed activity (retryCount 1: two attempts) fails the run
SELECT dex.create_run('service', 'defs-wf', '{"applicant": {"name": "Bob"}}') AS svc2 \gset
SELECT pg_temp.wait_until($$SELECT EXISTS (SELECT FROM dex.activity_task WHERE name = 'credit_check' AND status = 'QUEUED')$$);
SELECT task_id, lock_version AS v FROM dex.poll_tasks('defs-act', 'w') \gset
SELECT dex.fail_task(:'svc2', :task_id, :v, '{"message": "bureau down", "terminal": true}');
CALL dex.wait_for_run(:'svc2', '30 s');

-- ---------------------------------------------------------------- timer, parallel, join
SELECT dex.create_definition('branches', 1, '{"steps": [
    {"id": "split", "type": "parallel", "branches": ["left", "right"]},
    {"id": "left", "type": "sql", "sql": "SELECT 1 AS l", "next": "join"},
    {"id": "right", "type": "timer", "duration": "$.delay", "next": "right2"},
    {"id": "right2", "type": "sql", "sql": "SELECT 2 AS r", "next": "join"},
    {"id": "join", "type": "join", "next": "e"},
    {"id": "e", "type": "end"}]}');
SELECT dex.create_run('branches', 'defs-wf', '{"delay": "0.2 s"}') AS par \gset
CALL dex.wait_for_run(:'par', '30 s');
SELECT count(*) FILTER (WHERE h.event ? 'timerCreated') AS timers,
       count(*) FILTER (WHERE h.event ? 'timerElapsed') AS elapsed
  FROM dex.run_history(:'par') h;
-- a timer's date from the variables, and a delay that is not an interval fails the run
SELECT dex.create_definition('at', 1, '{"steps": [
    {"id": "t", "type": "timer", "date": "$.at", "next": "e"}, {"id": "e", "type": "end", "output": "$.at"}]}');
SELECT dex.create_run('at', 'defs-wf', jsonb_build_object('at', now() - interval '1 hour')) AS at \gset
CALL dex.wait_for_run(:'at', '30 s') \gset
\echo :status
SELECT dex.create_run('branches', 'defs-wf', '{"delay": [1]}') AS badpar \gset
CALL dex.wait_for_run(:'badpar', '30 s');

-- ---------------------------------------------------------------- signals
SELECT dex.create_definition('signals', 1, '{"steps": [
    {"id": "paid", "type": "signal", "signal": "paid", "resultVariable": "payment", "next": "late"},
    {"id": "late", "type": "signal", "signal": "never", "timeout": "0.2 s", "timeoutNext": "e", "next": "e"},
    {"id": "e", "type": "end"}]}');
SELECT dex.create_run('signals', 'defs-wf') AS sig \gset
SELECT pg_temp.wait_until(format($$SELECT EXISTS (SELECT FROM dex.run_history(%L) h
                                                    WHERE h.event ? 'externalEventWaitStarted')$$, :'sig'));
SELECT dex.send_external_event(:'sig', 'paid', '{"eur": 5}');
CALL dex.wait_for_run(:'sig', '30 s');
-- a signal that comes before its step waits is kept for it
SELECT dex.create_run('signals', 'defs-wf') AS early \gset
SELECT dex.send_external_event(:'early', 'paid', '12');
CALL dex.wait_for_run(:'early', '30 s');

-- a step a loop visits again is signalled again as "<signal>:<anything>"; signals that come
-- before the step waits are kept in the order they came
SELECT dex.create_definition('ticks', 1, '{"steps": [
    {"id": "tick", "type": "signal", "signal": "tick", "next": "count"},
    {"id": "count", "type": "sql",
     "sql": "SELECT coalesce(($1->>''n'')::int, 0) + 1 AS n, coalesce($1->''seen'', ''[]'') || jsonb_build_array($1->''from'') AS seen",
     "next": "more"},
    {"id": "more", "type": "gateway", "conditions": [{"when": "$.n < 3", "next": "tick"}], "default": "e"},
    {"id": "e", "type": "end"}]}');
SELECT dex.create_run('ticks', 'defs-wf') AS ticks \gset
SELECT dex.send_external_event(:'ticks', 'tick', '{"from": 1}'),
       dex.send_external_event(:'ticks', 'tick:two', '{"from": 2}'),
       dex.send_external_event(:'ticks', 'tick:3', '{"from": 3}'),
       dex.send_external_event(:'ticks', 'tick:3', '{"from": 4}');
CALL dex.wait_for_run(:'ticks', '30 s');

-- ---------------------------------------------------------------- user tasks
SELECT dex.create_definition('approve', 1, '{"steps": [
    {"id": "review", "type": "user", "assignee": "ann", "candidateGroups": ["clerks"],
     "form": {"fields": ["approved"]}, "next": "decide"},
    {"id": "decide", "type": "gateway", "conditions": [{"when": "$.approved", "next": "yes"}], "default": "no"},
    {"id": "yes", "type": "end"},
    {"id": "no", "type": "end", "fail": {"message": "rejected", "type": "Rejected"}}]}');
SELECT dex.create_run('approve', 'defs-wf', '{"amount": 5}') AS ut \gset
SELECT pg_temp.wait_until(format($$SELECT EXISTS (SELECT FROM dex.user_tasks(%L))$$, :'ut'));
SELECT step, assignee, candidate_groups, form, workflow_name FROM dex.user_tasks(:'ut');
SELECT count(*) FROM dex.user_tasks(candidate_group => 'clerks');
SELECT count(*) FROM dex.user_tasks(assignee => 'bob');
SELECT dex.complete_user_task(:'ut', 'review', '[1]');
\set VERBOSITY sqlstate
SELECT dex.complete_user_task(:'ut', 'nostep', '{}');
\set VERBOSITY terse
SELECT dex.complete_user_task('00000000-0000-0000-0000-000000000000', 'review', '{}');
SELECT dex.complete_user_task(:'ut', 'review', '{"approved": true}');
-- once only (55000)
\set VERBOSITY sqlstate
SELECT dex.complete_user_task(:'ut', 'review', '{"approved": false}');
\set VERBOSITY terse
CALL dex.wait_for_run(:'ut', '30 s');
-- a run reset to where it waited at the user task waits there again, with its row
SELECT min(sequence) AS waited FROM dex.run_history(:'ut') WHERE event ? 'markerRecorded' \gset
SELECT dex.reset_run(:'ut', :waited, 'again') AS ut_reset \gset
SELECT pg_temp.wait_until(format($$SELECT EXISTS (SELECT FROM dex.user_tasks(%L))$$, :'ut_reset'));
SELECT step, assignee FROM dex.user_tasks(:'ut_reset');
SELECT dex.complete_user_task(:'ut_reset', 'review', '{"approved": true, "again": true}');
CALL dex.wait_for_run(:'ut_reset', '30 s');
SELECT dex.create_run('approve', 'defs-wf') AS ut2 \gset
SELECT pg_temp.wait_until(format($$SELECT EXISTS (SELECT FROM dex.user_tasks(%L))$$, :'ut2'));
SELECT dex.complete_user_task(:'ut2', 'review', '{"approved": false}');
CALL dex.wait_for_run(:'ut2', '30 s');

-- ---------------------------------------------------------------- call a definition
SELECT dex.create_definition('defs-parent', 1, '{"steps": [
    {"id": "child", "type": "call", "definition": "score", "version": 1, "input": "$.order",
     "resultVariable": "doubled", "next": "e"},
    {"id": "e", "type": "end"}]}');
SELECT dex.create_run('defs-parent', 'defs-wf', '{"order": {"amount": 60}}') AS parent \gset
CALL dex.wait_for_run(:'parent', '30 s');
SELECT workflow_name, status FROM dex.workflow_run WHERE parent_id = :'parent';
-- calling a definition that does not exist fails the run
SELECT dex.create_definition('orphan', 1, '{"steps": [
    {"id": "child", "type": "call", "definition": "nothing", "next": "e"}, {"id": "e", "type": "end"}]}');
SELECT dex.create_run('orphan', 'defs-wf') AS orphan \gset
CALL dex.wait_for_run(:'orphan', '30 s');

-- ---------------------------------------------------------------- get, list, delete
SELECT dex.get_definition('score') -> 'steps' -> 0 ->> 'id' AS first_step;
SELECT dex.get_definition('score', 2) IS NULL AS no_such_version;
SELECT dex.create_run('signals', 'defs-wf') AS waiting \gset
SELECT dex.delete_definition('signals', 1);
SELECT dex.delete_definition('nothing', 1);
SELECT dex.cancel_run(:'waiting');
CALL dex.wait_for_run(:'waiting', '30 s') \gset
\echo :status
SELECT dex.delete_definition('signals', 1);
SELECT name, version FROM dex.list_definitions() ORDER BY name, version;
SELECT count(*) FROM dex.list_definitions('score');
\set VERBOSITY sqlstate
SELECT dex.delete_definition(NULL, 1);
SELECT dex.get_definition(NULL);
\set VERBOSITY terse

-- nothing is left behind: a definition's name and version are the database's, so a run of a
-- workflow written in code under that name (another suite's, later) would be one of them
SELECT count(*) AS terminated FROM (
  SELECT dex.terminate_run(r.id) FROM dex.workflow_run r JOIN dex.queue q ON q.id = r.queue_id
   WHERE q.name IN ('defs-wf', 'defs-act')
     AND r.status IN ('CREATED', 'RUNNING', 'DELAYED', 'SUSPENDED', 'BLOCKED')) t;
SELECT count(*) AS deleted FROM (
  SELECT dex.delete_definition(name, version) FROM dex.list_definitions()) t;
SELECT count(*) AS left_over FROM dex.list_definitions();

DROP TABLE defs_secret;
REVOKE dex_admin FROM defs_owner;
DROP ROLE defs_owner;
