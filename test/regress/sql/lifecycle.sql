--
-- lifecycle: delayed starts, execution timeouts, restart, reset, parent close policies,
-- the attempts of a run, waiting for several runs (dex 1.4)
--
SELECT dex.create_queue('life-wf', 'workflow'), dex.create_queue('life-act', 'activity');
-- a failed workflow task is handed out again at once
SET dex.retry_initial_delay = '1ms';
SET dex.retry_randomization = 0;

-- 'ok', or the SQLSTATE and message of the error a statement raised (run ids left out)
CREATE FUNCTION pg_temp.outcome(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, '[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}', '<id>', 'g');
END $$;
-- wait (up to 30 s) until the query is true: a statement per look, each with a new snapshot
CREATE FUNCTION pg_temp.wait_for(query text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    ok boolean;
BEGIN
    FOR i IN 1..600 LOOP
        EXECUTE query INTO ok;
        IF ok THEN
            RETURN true;
        END IF;
        PERFORM pg_sleep(0.05);
    END LOOP;
    RETURN false;
END $$;
-- the kinds of a run's history, in order
CREATE FUNCTION pg_temp.kinds(run uuid) RETURNS text LANGUAGE sql AS $$
    SELECT string_agg((SELECT k FROM jsonb_object_keys(h.event - 'id' - 'timestamp') k), ','
                      ORDER BY h.sequence)
      FROM dex.run_history(run) h
$$;

--
-- 1. Delayed start: DELAYED, nothing handed out, until start_at
--
SELECT dex.create_run('later', 'life-wf', '{"n": 1}', start_at => now() + interval '1 s',
                      instance_id => 'later-1') AS delayed \gset
SELECT status FROM dex.get_run(:'delayed');
SELECT count(*) AS tasks FROM dex.poll_tasks('life-wf', 'w', 10);
-- its instance id is taken, an event waits for its start, and it lists as DELAYED
SELECT pg_temp.outcome($$SELECT dex.create_run('later', 'life-wf', instance_id => 'later-1')$$);
SELECT dex.send_external_event(:'delayed', 'early', '"hi"') AS sent;
SELECT status, count(*) FROM dex.list_runs(status => 'DELAYED') GROUP BY status;
SELECT count(*) AS tasks FROM dex.poll_tasks('life-wf', 'w', 10);
-- cancel and terminate work before the start
SELECT dex.create_run('later', 'life-wf', start_at => now() + interval '1 hour') AS d2 \gset
SELECT dex.create_run('later', 'life-wf', start_at => now() + interval '1 hour') AS d3 \gset
SELECT dex.cancel_run(:'d2', 'not wanted');
SELECT dex.terminate_run(:'d3', 'not wanted either');
SELECT status, pg_temp.kinds(id) AS history FROM dex.workflow_run WHERE id IN (:'d2', :'d3') ORDER BY status;
SELECT count(*) AS timers_left FROM dex.run_timer WHERE run_id IN (:'d2', :'d3');
-- the scheduler starts it when due: the long poll wakes, and its first task shows the event
CALL dex.wait_for_tasks('life-wf', '30 s');
SELECT lock_version AS v,
       jsonb_path_query_array(task, '$.newEvents[*].keyvalue() ? (@.key != "timestamp").key') AS seen,
       now() >= (SELECT created_at FROM dex.workflow_run WHERE id = :'delayed') + interval '1 s' AS not_early
  FROM dex.poll_tasks('life-wf', 'w') \gset
\echo :seen :not_early
SELECT dex.complete_task(:'delayed', 0, :v, '[{"completeRun": {}}]');
SELECT status FROM dex.get_run(:'delayed');
-- a start_at in the past starts at once
SELECT dex.create_run('now', 'life-wf', start_at => now() - interval '1 day') AS past \gset
SELECT status FROM dex.get_run(:'past');
SELECT dex.terminate_run(:'past');

--
-- 2. Execution timeout: TIMED_OUT at its deadline, whatever the run was doing
--
SELECT dex.create_run('slow', 'life-wf', execution_timeout => '0.3 s') AS slow \gset
SELECT lock_version AS sv FROM dex.poll_tasks('life-wf', 'w') \gset
CALL dex.wait_for_run(:'slow', '30 s') \gset
SELECT :'status' AS status, (:'failure'::jsonb)->>'type' AS type;
SELECT pg_temp.kinds(:'slow') AS history;
-- the task it had leased is refused: the run timed out
SELECT pg_temp.outcome(format($$SELECT dex.complete_task(%L, 0, %s, '[]')$$, :'slow', :sv));
SELECT count(*) AS timers_left FROM dex.run_timer WHERE run_id = :'slow';
-- a delayed run's deadline counts from its start
SELECT dex.create_run('later', 'life-wf', start_at => '2100-01-01 00:00:00+00',
                      execution_timeout => '1 day') AS d4 \gset
SELECT kind, due_at FROM dex.run_timer WHERE run_id = :'d4' ORDER BY kind;
SELECT dex.cancel_run(:'d4');
-- the deadline spans a continue-as-new chain: the run id, and its timer, stay
SELECT dex.create_run('chain', 'life-wf', execution_timeout => '1 hour') AS chain \gset
SELECT due_at AS chain_due FROM dex.run_timer WHERE run_id = :'chain' \gset
SELECT lock_version AS v FROM dex.poll_tasks('life-wf', 'w', 10) WHERE run_id = :'chain' \gset
SELECT dex.complete_task(:'chain', 0, :v, '[{"continueAsNew": {"argument": {"json": "2"}}}]');
SELECT generation, (SELECT due_at FROM dex.run_timer WHERE run_id = :'chain' AND kind = 'DEADLINE') = :'chain_due'
       AS same_deadline
  FROM dex.workflow_run WHERE id = :'chain';
SELECT dex.terminate_run(:'chain');
-- bad input changes nothing
SELECT pg_temp.outcome($$SELECT dex.create_run('x', 'life-wf', start_at => 'infinity')$$);
SELECT pg_temp.outcome($$SELECT dex.create_run('x', 'life-wf', execution_timeout => '0 s')$$);
SELECT pg_temp.outcome($$SELECT dex.create_run('x', 'life-wf', execution_timeout => '-1 s')$$);
SELECT pg_temp.outcome($$SELECT dex.create_runs('x', 'life-wf', '{1}', execution_timeout => '0 s')$$);
SELECT count(*) AS none FROM dex.workflow_run WHERE workflow_name = 'x';
-- create_runs takes them too
SELECT count(*) AS created FROM dex.create_runs('batch', 'life-wf', '{1, 2}', start_at => now() + interval '1 hour');
SELECT status, count(*) FROM dex.workflow_run WHERE workflow_name = 'batch' GROUP BY status;
SELECT count(*) AS tasks FROM dex.poll_tasks('life-wf', 'w', 10);
SELECT dex.cancel_run(id) FROM dex.workflow_run WHERE workflow_name = 'batch';

--
-- 3. Restart: a new run of the same start, which records where it came from
--
SELECT dex.create_run('again', 'life-wf', '{"n": 7}', priority => 9, labels => '{"k": "v"}',
                      instance_id => 'again-1') AS first \gset
SELECT lock_version AS v FROM dex.poll_tasks('life-wf', 'w') \gset
SELECT dex.complete_task(:'first', 0, :v, '[{"failRun": {"failure": {"message": "bug"}}}]');
SELECT dex.restart_run(:'first') AS second \gset
SELECT workflow_name, status, argument, priority, labels, instance_id, origin,
       origin_run_id = :'first' AS from_first
  FROM dex.get_run(:'second');
SELECT task->'newEvents'->1->'runCreated'->'origin'->>'kind' AS kind,
       task->'newEvents'->1->'runCreated'->'origin'->>'runId' = :'first' AS from_first, lock_version AS v
  FROM dex.poll_tasks('life-wf', 'w') \gset
\echo :kind :from_first
-- an active run restarts without its instance id, which it still holds
SELECT dex.restart_run(:'second') AS third \gset
SELECT instance_id IS NULL AS no_instance, origin_run_id = :'second' AS from_second FROM dex.get_run(:'third');
SELECT dex.terminate_run(:'third');
SELECT dex.complete_task(:'second', 0, :v, '[{"completeRun": {}}]');
SELECT pg_temp.outcome($$SELECT dex.restart_run('00000000-0000-7000-8000-000000000000')$$);
SELECT pg_temp.outcome($$SELECT dex.restart_run(NULL)$$);

--
-- 4. Reset: back to a workflow task, whose decisions the code deployed since makes again
--
SELECT dex.create_run('steps', 'life-wf', instance_id => 'steps-1') AS old \gset
SELECT lock_version AS v FROM dex.poll_tasks('life-wf', 'w') \gset
SELECT dex.complete_task(:'old', 0, :v, '[
    {"id": 1, "scheduleActivity": {"name": "step1", "queue": "life-act"}},
    {"id": 2, "startTimer": {"name": "t", "delay": "3600s"}}]');
SELECT run_id, lock_version AS av FROM dex.poll_tasks('life-act', 'w') \gset
SELECT dex.complete_task(:'old', 1, :av, '"one"');
-- task 2 sees step1's result and schedules step2: the bug, fixed since
SELECT lock_version AS v FROM dex.poll_tasks('life-wf', 'w') \gset
SELECT dex.complete_task(:'old', 0, :v, '[{"id": 3, "scheduleActivity": {"name": "step2-buggy", "queue": "life-act"}}]');
SELECT max(sequence) FILTER (WHERE event ? 'workflowTaskCompleted') AS cut,
       min(sequence) FILTER (WHERE event ? 'activityTaskCompleted') AS step1_done
  FROM dex.run_history(:'old') \gset
SELECT dex.send_external_event(:'old', 'later-event', '"x"') AS sent;
-- reset to task 2: the history before it is kept (step1 is not run again, the timer keeps its
-- time), task 2's result of step1 and the later event are shown again, step2-buggy is gone;
-- the old run, still active, is terminated and gives the new one its instance id
SELECT dex.reset_run(:'old', :cut, 'step 2 fixed') AS new \gset
SELECT status, instance_id, origin, origin_run_id = :'old' AS from_old FROM dex.get_run(:'new');
SELECT status, (failure->>'message') LIKE '%reset to event ' || :cut || '%: step 2 fixed' AS says_why
  FROM dex.get_run(:'old');
SELECT pg_temp.kinds(:'new') AS history;
SELECT (SELECT h.event->'runCreated'->'origin'->>'kind' FROM dex.run_history(:'new') h WHERE h.sequence = 2)
       AS origin_in_history;
SELECT count(*) AS activities_queued FROM dex.poll_tasks('life-act', 'w', 10) WHERE run_id = :'new';
SELECT (SELECT visible_from FROM dex.workflow_inbox WHERE run_id = :'new' AND timer_id = 2) =
       (SELECT (h.event->'timerCreated'->>'elapseAt')::timestamptz FROM dex.run_history(:'old') h
         WHERE h.event ? 'timerCreated') AS same_fire_time;
SELECT lock_version AS v,
       jsonb_path_query_array(task, '$.newEvents[*].keyvalue() ? (@.key != "timestamp" && @.key != "id").key') AS seen,
       task->'newEvents'->1->'activityTaskCompleted'->'result' AS step1_result
  FROM dex.poll_tasks('life-wf', 'w') WHERE run_id = :'new' \gset
\echo :seen :step1_result
SELECT dex.complete_task(:'new', 0, :v, '[{"id": 3, "scheduleActivity": {"name": "step2-fixed", "queue": "life-act"}}]');
SELECT task->>'name' AS scheduled FROM dex.poll_tasks('life-act', 'w', 10) WHERE run_id = :'new';
-- a reset to a point between tasks 1 and 2 goes back to task 1: the run starts afresh
SELECT dex.reset_run(:'new', :step1_done) AS fresh \gset
SELECT status, history_length FROM dex.get_run(:'fresh');
SELECT jsonb_path_query_array(task, '$.newEvents[*].keyvalue() ? (@.key != "timestamp" && @.key != "id").key') AS seen
  FROM dex.poll_tasks('life-wf', 'w') WHERE run_id = :'fresh';
-- a reset of the old run again: its instance id is another run's now; bad points and
-- arguments change nothing
SELECT pg_temp.outcome(format('SELECT dex.reset_run(%L, %s)', :'old', :cut));
SELECT pg_temp.outcome(format('SELECT dex.reset_run(%L, 0)', :'old'));
-- an event id past the end of the history is refused (a typo must not end a run): the run
-- stays as it was
SELECT pg_temp.outcome(format('SELECT dex.reset_run(%L, 100000)', :'fresh'));
SELECT status FROM dex.get_run(:'fresh');
SELECT pg_temp.outcome(format('SELECT dex.reset_run(%L, 1)', :'old'));
SELECT pg_temp.outcome(format('SELECT dex.reset_run(%L, NULL)', :'old'));
SELECT pg_temp.outcome($$SELECT dex.reset_run('00000000-0000-7000-8000-000000000000', 5)$$);
-- a reset to the task that ended the run: the new code decides again (here the run's only
-- task, so the new run starts afresh)
SELECT dex.create_run('ends', 'life-wf') AS ends \gset
SELECT lock_version AS v FROM dex.poll_tasks('life-wf', 'w', 10) WHERE run_id = :'ends' \gset
SELECT dex.complete_task(:'ends', 0, :v, '[{"id": 1, "recordSideEffect": {"name": "x", "result": {"json": "1"}}},
                                            {"completeRun": {"result": {"json": "\"old\""}}}]');
SELECT max(sequence) FILTER (WHERE event ? 'workflowTaskCompleted') AS done FROM dex.run_history(:'ends') \gset
SELECT dex.reset_run(:'ends', :done) AS ends2 \gset
SELECT status, result FROM dex.get_run(:'ends2');
SELECT pg_temp.kinds(:'ends2') AS history;
SELECT lock_version AS v FROM dex.poll_tasks('life-wf', 'w', 10) WHERE run_id = :'ends2' \gset
SELECT dex.complete_task(:'ends2', 0, :v, '[{"completeRun": {"result": {"json": "\"new\""}}}]');
SELECT status, result FROM dex.get_run(:'ends2');
-- a point before its only workflow task completed: nothing to reset to
SELECT pg_temp.outcome(format('SELECT dex.reset_run(%L, %s)', :'ends', :done - 1));

-- a child running at the reset point cannot be taken over
SELECT dex.create_run('parent', 'life-wf') AS p \gset
SELECT lock_version AS v FROM dex.poll_tasks('life-wf', 'w', 10) WHERE run_id = :'p' \gset
SELECT dex.complete_task(:'p', 0, :v, '[{"id": 1, "startChildRun": {"workflowName": "kid"}}]');
SELECT dex.send_external_event(:'p', 'poke') AS sent;
SELECT lock_version AS v FROM dex.poll_tasks('life-wf', 'w', 10) WHERE run_id = :'p' \gset
SELECT dex.complete_task(:'p', 0, :v, '[]');
SELECT pg_temp.outcome(format('SELECT dex.reset_run(%L, %s)', :'p',
                              (SELECT history_length FROM dex.get_run(:'p'))));
SELECT status FROM dex.get_run(:'p');

--
-- 5. Parent close policies and a child's own execution timeout
--
SELECT dex.create_run('parent', 'life-wf') AS p2 \gset
SELECT lock_version AS v FROM dex.poll_tasks('life-wf', 'w', 10) WHERE run_id = :'p2' \gset
SELECT dex.complete_task(:'p2', 0, :v, '[
    {"id": 1, "startChildRun": {"workflowName": "stays", "parentClosePolicy": "PARENT_CLOSE_POLICY_ABANDON"}},
    {"id": 2, "startChildRun": {"workflowName": "goes"}},
    {"id": 3, "startChildRun": {"workflowName": "bounded", "executionTimeout": "0.3s",
                                "parentClosePolicy": "PARENT_CLOSE_POLICY_ABANDON"}}]');
SELECT id AS bounded FROM dex.workflow_run WHERE parent_id = :'p2' AND workflow_name = 'bounded' \gset
CALL dex.wait_for_run(:'bounded', '30 s') \gset
SELECT :'status' AS bounded_status;
-- the parent is told the child timed out (by the scheduler, right after the child's end)
SELECT pg_temp.wait_for(format('SELECT EXISTS (SELECT 1 FROM dex.workflow_task WHERE run_id = %L)', :'p2'))
       AS parent_has_a_task;
SELECT jsonb_path_query_array(task, '$.newEvents[*].childRunFailed.failure.type') AS told, lock_version AS v
  FROM dex.poll_tasks('life-wf', 'w', 10) WHERE run_id = :'p2' \gset
\echo :told
SELECT dex.complete_task(:'p2', 0, :v, '[{"completeRun": {}}]');
SELECT workflow_name, status FROM dex.workflow_run WHERE parent_id = :'p2' ORDER BY workflow_name;
SELECT pg_temp.outcome(format($$SELECT dex.complete_task(%L, 0, 1, '[{"id": 9, "startChildRun": {"workflowName": "k", "executionTimeout": "0s"}}]')$$, :'p2'));
SELECT pg_temp.outcome(format($$SELECT dex.complete_task(%L, 0, 1, '[{"id": 9, "startChildRun": {"workflowName": "k", "parentClosePolicy": 7}}]')$$, :'p2'));

--
-- 6. The attempts of a run: completed ones from its history, the others recorded
--
SELECT dex.create_run('tries', 'life-wf') AS tr \gset
SELECT lock_version AS v FROM dex.poll_tasks('life-wf', 'w-1', 10) WHERE run_id = :'tr' \gset
SELECT dex.fail_task(:'tr', 0, :v, '{"message": "crashed"}');
SELECT pg_sleep(0.1);
SELECT lock_version AS v FROM dex.poll_tasks('life-wf', 'w-2', 10) WHERE run_id = :'tr' \gset
SELECT dex.complete_task(:'tr', 0, :v, '[{"id": 1, "scheduleActivity": {"name": "flaky", "queue": "life-act",
    "retryPolicy": {"maxAttempts": 3, "initialDelay": "0.01s"}}}]');
SELECT lock_version AS av FROM dex.poll_tasks('life-act', 'a-1', 10) WHERE run_id = :'tr' \gset
SELECT dex.fail_task(:'tr', 1, :av, '{"message": "flaked"}');
CALL dex.wait_for_tasks('life-act', '30 s');
SELECT lock_version AS av FROM dex.poll_tasks('life-act', 'a-2', 10) WHERE run_id = :'tr' \gset
SELECT dex.complete_task(:'tr', 1, :av, '"ok"');
SELECT task, event_id, name, attempt, worker_id, leased_at <= ended_at AS ordered, outcome,
       failure->>'message' AS failure
  FROM dex.run_attempts(:'tr');
SELECT pg_temp.outcome($$SELECT * FROM dex.run_attempts('00000000-0000-7000-8000-000000000000')$$);
-- a workflow task whose lease expired and that another worker took over:
-- LEASE_EXPIRED, at the attempt the run's next task has; the late completion
-- of the first worker is refused
SELECT dex.create_run('expiring', 'life-wf') AS ex \gset
SELECT lock_version AS v1 FROM dex.poll_tasks('life-wf', 'w-slow', 10, '0.2 s') WHERE run_id = :'ex' \gset
SELECT pg_sleep(0.3);
SELECT lock_version AS v2 FROM dex.poll_tasks('life-wf', 'w-next', 10) WHERE run_id = :'ex' \gset
SELECT regexp_replace(pg_temp.outcome(format($$SELECT dex.complete_task(%L, 0, %s, '[{"completeRun": {}}]')$$,
                                             :'ex', :v1)), 'version [0-9]+', 'version <n>') AS late;
SELECT dex.complete_task(:'ex', 0, :v2, '[{"id": 1, "scheduleActivity": {"name": "ship", "queue": "life-act"}}]');
SELECT task, attempt, worker_id, leased_at < ended_at AS ordered, outcome, failure->>'type' AS type
  FROM dex.run_attempts(:'ex');
-- an activity that completed before its run was terminated, its result not yet
-- seen by the workflow: the history keeps it, and so do the attempts
SELECT lock_version AS av FROM dex.poll_tasks('life-act', 'a-ship', 10) WHERE run_id = :'ex' \gset
SELECT dex.complete_task(:'ex', 1, :av, '"shipped"');
SELECT dex.terminate_run(:'ex', 'operator');
SELECT pg_temp.kinds(:'ex') AS history;
SELECT task, name, attempt, worker_id, outcome FROM dex.run_attempts(:'ex') WHERE task = 'activity';

--
-- 7. Waiting for several runs
--
SELECT dex.create_run('w', 'life-wf') AS open1 \gset
CALL dex.wait_for_runs(ARRAY[:'open1', :'old']::uuid[], '10 s') \gset
SELECT :'ended' = '{' || :'old' || '}' AS the_ended_one;
SELECT clock_timestamp() AS before \gset
CALL dex.wait_for_runs(ARRAY[:'open1', :'old']::uuid[], '0.2 s', 'all') \gset
SELECT :'ended' = '{' || :'old' || '}' AS still_one, clock_timestamp() - :'before'::timestamptz >= interval '0.2 s' AS waited;
SELECT dex.cancel_run(:'open1');
CALL dex.wait_for_runs(ARRAY[:'open1', :'old']::uuid[], '10 s', 'all') \gset
SELECT cardinality(:'ended'::uuid[]) AS both;
\set VERBOSITY sqlstate
CALL dex.wait_for_runs(ARRAY[:'open1']::uuid[], '1 s', 'most');
CALL dex.wait_for_runs('{}'::uuid[], '1 s');
CALL dex.wait_for_runs(ARRAY[NULL]::uuid[], '1 s');
CALL dex.wait_for_runs(ARRAY['00000000-0000-7000-8000-000000000000']::uuid[], '1 s');
CALL dex.wait_for_runs(NULL, '1 s');
BEGIN;
CALL dex.wait_for_runs(ARRAY[:'open1']::uuid[], '1 s');
ROLLBACK;
\set VERBOSITY default

--
-- 8. Operators' actions are recorded in the run's history: what, why, and who
--
SELECT dex.create_run('ops', 'life-wf') AS ops \gset
SELECT lock_version AS v FROM dex.poll_tasks('life-wf', 'w', 10) WHERE run_id = :'ops' \gset
SELECT dex.complete_task(:'ops', 0, :v, '[{"id": 1, "startTimer": {"name": "t", "delay": "3600s"}}]');
SELECT dex.suspend_run(:'ops', 'incident 42');
SELECT dex.resume_run(:'ops', 'incident 42 over');
SELECT dex.cancel_run(:'ops', 'order withdrawn');
SELECT lock_version AS v,
       replace(jsonb_path_query_array(task, '$.newEvents[*] ? (exists(@.runSuspended) || exists(@.runResumed) || exists(@.runCancelRequested))')::text,
               session_user, '<user>') AS recorded
  FROM dex.poll_tasks('life-wf', 'w', 10) WHERE run_id = :'ops' \gset
SELECT regexp_replace(:'recorded', '"timestamp": "[^"]*", ', '', 'g') AS recorded;
SELECT dex.complete_task(:'ops', 0, :v, '[{"cancelRun": {}}]');
-- a reason is held to the payload limit; NULL is none
SELECT pg_temp.outcome(format('SELECT dex.suspend_run(%L, repeat(''x'', 2000000))', :'ops'));

--
-- 9. A run's history is bounded: a warning past 80% of a limit, a failure past it;
-- continue-as-new starts the history over
--
SET dex.max_history_events = 20;
SELECT dex.create_run('long', 'life-wf') AS long \gset
-- each task: workflowTaskStarted, the timer that fired, workflowTaskCompleted, a new timer
CREATE PROCEDURE pg_temp.step(run uuid, commands jsonb) LANGUAGE plpgsql AS $$
DECLARE
    t record;
BEGIN
    FOR i IN 1..600 LOOP
        SELECT * INTO t FROM dex.poll_tasks('life-wf', 'w', 10) p WHERE p.run_id = run;
        IF FOUND THEN
            PERFORM dex.complete_task(t.run_id, 0, t.lock_version, commands);
            RETURN;
        END IF;
        COMMIT;
        PERFORM pg_sleep(0.05);
    END LOOP;
    RAISE EXCEPTION 'no task for run %', run;
END $$;
CALL pg_temp.step(:'long', '[{"id": 1, "startTimer": {"delay": "0s"}}]');
CALL pg_temp.step(:'long', '[{"id": 2, "startTimer": {"delay": "0s"}}]');
CALL pg_temp.step(:'long', '[{"id": 3, "startTimer": {"delay": "0s"}}]');
SELECT history_length FROM dex.get_run(:'long');
\set VERBOSITY sqlstate
-- 17 events: past 80% of 20, a warning (54000)
CALL pg_temp.step(:'long', '[{"id": 4, "startTimer": {"delay": "0s"}}]');
\set VERBOSITY default
SELECT history_length, status FROM dex.get_run(:'long');
-- past 20: the run fails, and what the task started goes with it
CALL pg_temp.step(:'long', '[{"id": 5, "startTimer": {"delay": "0s"}}]');
SELECT status, history_length, failure->>'type' AS type,
       (SELECT count(*) FROM dex.workflow_inbox WHERE run_id = :'long') AS timers_left
  FROM dex.get_run(:'long');
-- continue-as-new starts the history over, and is not held to the limit
SELECT dex.create_run('long', 'life-wf') AS long2 \gset
CALL pg_temp.step(:'long2', '[{"id": 1, "startTimer": {"delay": "0s"}}]');
CALL pg_temp.step(:'long2', '[{"id": 2, "startTimer": {"delay": "0s"}}]');
CALL pg_temp.step(:'long2', '[{"id": 3, "startTimer": {"delay": "0s"}}]');
\set VERBOSITY sqlstate
CALL pg_temp.step(:'long2', '[{"continueAsNew": {}}]');
\set VERBOSITY default
SELECT status, history_length FROM dex.get_run(:'long2');
CALL pg_temp.step(:'long2', '[{"completeRun": {}}]');
SELECT status FROM dex.get_run(:'long2');
RESET dex.max_history_events;
-- the size in bytes is bounded the same way; workers cannot lift the limits
SET dex.max_history_size = 300;
SELECT dex.create_run('wide', 'life-wf', jsonb_build_object('pad', repeat('x', 400))) AS big \gset
CALL pg_temp.step(:'big', '[]');
SELECT status, failure->>'type' AS type FROM dex.get_run(:'big');
RESET dex.max_history_size;
SELECT context FROM pg_settings WHERE name IN ('dex.max_history_events', 'dex.max_history_size');

--
-- 10. The poll and the long poll in one call (issue 16): tasks at once when there are some,
-- an empty array after the timeout, the checks of dex.poll_tasks
--
SELECT dex.create_queue('life-one', 'workflow');
SELECT count(*) AS created FROM dex.create_runs('one-call', 'life-one', '{1, 2, 3}');
CALL dex.poll_tasks_wait('life-one', 'w', 2, '1 min', '10 s') \gset
SELECT jsonb_array_length(:'tasks') AS leased, (:'tasks'::jsonb)->0->>'workflowName' AS workflow,
       (:'tasks'::jsonb)->0 ? 'lockVersion' AS has_lock_version;
SELECT count(*) AS leased_now FROM dex.workflow_task t JOIN dex.queue q ON q.id = t.queue_id
 WHERE q.name = 'life-one' AND t.locked_by = 'w';
CALL dex.poll_tasks_wait_pb('life-one', 'w', 5, '1 min', '10 s') \gset
SELECT cardinality(:'tasks'::bytea[]) AS the_last_one,
       dex.to_json('dex.v1.WorkflowTask', (:'tasks'::bytea[])[1])->>'workflowName' AS workflow;
CALL dex.poll_tasks_wait_pb('life-one', 'w', 5, '1 min', '0 s');
SELECT clock_timestamp() AS before \gset
CALL dex.poll_tasks_wait('life-one', 'w', 5, '1 min', '0.2 s');
SELECT clock_timestamp() - :'before'::timestamptz >= interval '0.2 s' AS waited_the_timeout;
\set VERBOSITY sqlstate
CALL dex.poll_tasks_wait('life-one', 'w', 0, '1 min', '1 s');
CALL dex.poll_tasks_wait('life-one', 'w', 1, '1 min', NULL);
CALL dex.poll_tasks_wait('life-one', 'w', 1, '1 min', '2 days');
CALL dex.poll_tasks_wait('no-such-queue', 'w', 1, '1 min', '1 s');
BEGIN;
CALL dex.poll_tasks_wait('life-one', 'w', 1, '1 min', '1 s');
ROLLBACK;
\set VERBOSITY default
