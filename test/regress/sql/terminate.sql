--
-- terminate and purge: an operator ends a run at once, and deletes runs that ended
--
SELECT dex.create_queue('term-wf', 'workflow'), dex.create_queue('term-act', 'activity');

-- 'ok', or the SQLSTATE and message of the error a statement raised (run ids left out)
CREATE FUNCTION pg_temp.outcome(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, '[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}', '<id>', 'g');
END $$;
-- the kinds of a run's history, in order
CREATE FUNCTION pg_temp.kinds(run uuid) RETURNS text LANGUAGE sql AS $$
    SELECT string_agg((SELECT k FROM jsonb_object_keys(h.event - 'id' - 'timestamp') k), ','
                      ORDER BY h.sequence)
      FROM dex.run_history(run) h
$$;

-- a running run with an activity leased, a timer and a child: terminated at once
SELECT dex.create_run('parent', 'term-wf') AS run \gset
SELECT lock_version AS v FROM dex.poll_tasks('term-wf', 'w') \gset
SELECT dex.complete_task(:'run', 0, :v, '[
  {"id": 1, "scheduleActivity": {"name": "charge", "queue": "term-act"}},
  {"id": 2, "startTimer": {"name": "t", "delay": "3600s"}},
  {"id": 3, "startChildRun": {"workflowName": "child", "queue": "term-wf"}}]');
SELECT run_id AS act_run, task_id, lock_version AS av FROM dex.poll_tasks('term-act', 'w') \gset
SELECT dex.send_external_event(:'run', 'ping');
SELECT lock_version AS wv FROM dex.poll_tasks('term-wf', 'w', 10) WHERE run_id = :'run' \gset
SELECT dex.terminate_run(:'run', 'stuck on a bug');
SELECT status, completed_at IS NOT NULL AS ended,
       dex.to_json('dex.v1.Failure', failure) - 'message' AS failure,
       dex.to_json('dex.v1.Failure', failure)->>'message'
         = format('the run was terminated by %s: stuck on a bug', session_user) AS message_says_who
  FROM dex.workflow_run WHERE id = :'run';
SELECT pg_temp.kinds(:'run') AS history;
SELECT h.event->'runTerminated'->>'reason' AS reason, h.event->'runTerminated'->>'by' = session_user AS by_us
  FROM dex.run_history(:'run') h WHERE h.event ? 'runTerminated';
-- nothing of it is left to do; late completions are refused (WD002) and change nothing
SELECT (SELECT count(*) FROM dex.activity_task WHERE run_id = :'run') AS activities,
       (SELECT count(*) FROM dex.workflow_task WHERE run_id = :'run') AS workflow_tasks,
       (SELECT count(*) FROM dex.workflow_inbox WHERE run_id = :'run') AS inbox;
SELECT pg_temp.outcome(format('SELECT dex.complete_task(%L, %s, %s, %L)', :'run', :task_id, :av, '"late"'));
SELECT pg_temp.outcome(format('SELECT dex.complete_task(%L, 0, %s, %L)', :'run', :wv, '[{"completeRun": {}}]'));
SELECT status FROM dex.workflow_run WHERE id = :'run';
-- its child, still active, is terminated with it (the default parent close policy)
SELECT workflow_name, status FROM dex.workflow_run WHERE parent_id = :'run';

-- a run that never started, and a suspended one, end at once too
SELECT dex.create_run('new', 'term-wf') AS new_run \gset
SELECT dex.terminate_run(:'new_run');
SELECT status, pg_temp.kinds(:'new_run') AS history FROM dex.workflow_run WHERE id = :'new_run';

-- a child terminated tells its parent: childRunFailed with the termination
SELECT dex.create_run('parent2', 'term-wf') AS p2 \gset
SELECT count(dex.complete_task(run_id, 0, lock_version,
         '[{"id": 1, "startChildRun": {"workflowName": "kid", "queue": "term-wf"}}]'))
  FROM dex.poll_tasks('term-wf', 'w', 10) WHERE run_id = :'p2';
SELECT id AS kid FROM dex.workflow_run WHERE parent_id = :'p2' \gset
SELECT dex.terminate_run(:'kid', 'not needed');
SELECT pg_sleep(0.2);
CALL dex.wait_for_tasks('term-wf', '5 s');
SELECT e->'childRunFailed'->'failure'->>'type' AS told,
       e->'childRunFailed'->'failure'->>'message' LIKE '%: not needed' AS with_reason
  FROM dex.poll_tasks('term-wf', 'w', 10) p, jsonb_array_elements(p.task->'newEvents') e
 WHERE p.run_id = :'p2' AND e ? 'childRunFailed';

-- wrong states and bad input change nothing
SELECT pg_temp.outcome(format('SELECT dex.terminate_run(%L)', :'run'));
SELECT pg_temp.outcome('SELECT dex.terminate_run(NULL)');
SELECT pg_temp.outcome('SELECT dex.terminate_run(''00000000-0000-7000-8000-000000000000'')');
SELECT pg_temp.outcome(format('SELECT dex.terminate_run(%L, repeat(''x'', 2000000))', :'p2'));
SELECT status FROM dex.workflow_run WHERE id = :'p2';

-- purge: a run that ended goes now with everything it owns; an active one is refused
SELECT pg_temp.outcome(format('SELECT dex.purge_run(%L)', :'p2'));
SELECT dex.purge_run(:'run');
SELECT (SELECT count(*) FROM dex.workflow_run WHERE id = :'run') AS runs,
       (SELECT count(*) FROM dex.workflow_history WHERE run_id = :'run') AS history;
SELECT pg_temp.outcome(format('SELECT dex.purge_run(%L)', :'run'));
SELECT pg_temp.outcome('SELECT dex.purge_run(NULL)');
-- purge_runs: by status, queue and end time, at most "limit" per call
SELECT dex.purge_runs(status => 'TERMINATED', queue => 'term-wf', ended_before => now() - interval '1 hour');
SELECT dex.purge_runs(status => 'TERMINATED', queue => 'term-wf', "limit" => 1);
SELECT dex.purge_runs(status => 'TERMINATED', queue => 'term-wf');
SELECT r.status, count(*) FROM dex.workflow_run r JOIN dex.queue q ON q.id = r.queue_id
 WHERE q.name = 'term-wf' GROUP BY r.status ORDER BY r.status;
SELECT pg_temp.outcome('SELECT dex.purge_runs(status => ''RUNNING'')');
SELECT pg_temp.outcome('SELECT dex.purge_runs("limit" => 0)');
SELECT pg_temp.outcome('SELECT dex.purge_runs("limit" => 10001)');
SELECT pg_temp.outcome('SELECT dex.purge_runs("limit" => NULL)');
SELECT pg_temp.outcome('SELECT dex.purge_runs(ended_before => NULL)');
SELECT pg_temp.outcome('SELECT dex.purge_runs(queue => ''no-such-queue'')');
SELECT pg_temp.outcome('SELECT dex.purge_runs(queue => ''term-act'')');

-- wait_for_run: at once for a run that ended; after the timeout, the status of one that has not
SELECT dex.create_run('waited', 'term-wf') AS w \gset
SELECT dex.cancel_run(:'w', 'done waiting');
CALL dex.wait_for_run(:'w', '10 s', NULL, NULL, NULL);
SELECT dex.create_run('waiting', 'term-wf') AS w2 \gset
SELECT clock_timestamp() AS before \gset
CALL dex.wait_for_run(:'w2', '0.2 s');
SELECT clock_timestamp() - :'before'::timestamptz >= interval '0.2 s' AS waited_the_timeout;
\set VERBOSITY sqlstate
CALL dex.wait_for_run(NULL, '1 s');
CALL dex.wait_for_run('00000000-0000-7000-8000-000000000000', '1 s');
CALL dex.wait_for_run(:'w2', '2 days');
BEGIN;
CALL dex.wait_for_run(:'w2', '1 s');
ROLLBACK;
\set VERBOSITY terse
