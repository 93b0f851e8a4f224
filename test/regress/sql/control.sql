--
-- control: cancel, suspend and resume runs
--
SELECT dex.create_queue('ctl-wf', 'workflow'), dex.create_queue('ctl-act', 'activity');

-- 1. a run that is executing: the workflow sees the request, cleans up while the run stays
-- RUNNING (its compensation runs as usual), then ends it CANCELLED with cancelRun
SELECT dex.create_run('c', 'ctl-wf') AS run \gset
SELECT lock_version AS v FROM dex.poll_tasks('ctl-wf', 'w') \gset
SELECT dex.complete_task(:'run', 0, :v,
    '[{"id": 1, "scheduleActivity": {"name": "slow", "queue": "ctl-act", "priority": 90}},
      {"id": 2, "scheduleActivity": {"name": "queued", "queue": "ctl-act"}}]');
SELECT lock_version AS av FROM dex.poll_tasks('ctl-act', 'w') \gset
SELECT dex.cancel_run(:'run', 'customer asked');
SELECT dex.cancel_run(:'run', 'asked twice');   -- a second request changes nothing
SELECT status FROM dex.get_run(:'run');
SELECT lock_version AS v,
       replace(jsonb_path_query_array(task, '$.newEvents[*].runCancelRequested')::text, session_user, '<user>') AS requests
  FROM dex.poll_tasks('ctl-wf', 'w') \gset
\echo :requests
-- the workflow cleans up: it records what it did and schedules a compensation; the run goes on
SELECT dex.complete_task(:'run', 0, :v, '[{"id": 3, "recordSideEffect": {"name": "refund", "result": {"json": "true"}}},
    {"id": 4, "scheduleActivity": {"name": "compensate", "queue": "ctl-act", "priority": 80}}]');
SELECT status, completed_at IS NULL AS active FROM dex.get_run(:'run');
SELECT task->>'name' AS name, dex.complete_task(run_id, task_id, lock_version, '"undone"')
  FROM dex.poll_tasks('ctl-act', 'w');
SELECT lock_version AS v, jsonb_path_query_array(task, '$.newEvents[*].activityTaskCompleted.result') AS results
  FROM dex.poll_tasks('ctl-wf', 'w') \gset
\echo :results
-- cancelRun ends it CANCELLED: what was still pending is withdrawn
SELECT dex.complete_task(:'run', 0, :v, '[{"cancelRun": {}}]');
SELECT status, completed_at IS NOT NULL AS ended FROM dex.get_run(:'run');
SELECT count(*) AS activity_tasks FROM dex.activity_task WHERE run_id = :'run';
SELECT sequence, replace((event - 'timestamp' #- '{activityTaskCompleted,startedAt}')::text, session_user, '<user>') AS event
  FROM dex.run_history(:'run') WHERE sequence > 6;
-- the running activity is told: its heartbeat and completion are refused with WD002
\set VERBOSITY sqlstate
SELECT dex.heartbeat_task(:'run', 1, :av);
SELECT dex.complete_task(:'run', 1, :av, '"too late"');
SELECT dex.cancel_run(:'run');
\set VERBOSITY default
-- cancelRun is refused for a run whose cancellation was not requested, and must come last
SELECT dex.create_run('c', 'ctl-wf') AS run1b \gset
SELECT lock_version AS v FROM dex.poll_tasks('ctl-wf', 'w') \gset
\set VERBOSITY sqlstate
SELECT dex.complete_task(:'run1b', 0, :v, '[{"cancelRun": {}}]');
SELECT dex.complete_task(:'run1b', 0, :v, '[{"cancelRun": {}}, {"setCustomStatus": {"customStatus": "x"}}]');
\set VERBOSITY default
SELECT dex.complete_task(:'run1b', 0, :v, '[{"completeRun": {}}]');

-- 2. a run that never started ends CANCELLED at once
SELECT dex.create_run('c', 'ctl-wf', instance_id => 'ctl-2') AS run2 \gset
SELECT dex.cancel_run(:'run2');
SELECT status FROM dex.get_run(:'run2');
SELECT sequence, replace((event->'runCancelled')::text, session_user, '<user>') AS cancelled, event ? 'runCreated' AS created
  FROM dex.run_history(:'run2');
SELECT count(*) AS tasks FROM dex.poll_tasks('ctl-wf', 'w');
-- its instance id is free again
SELECT dex.create_run('c', 'ctl-wf', instance_id => 'ctl-2') IS NOT NULL AS recreated;
SELECT lock_version AS v FROM dex.poll_tasks('ctl-wf', 'w') \gset
SELECT dex.complete_task(id, 0, :v, '[{"completeRun": {}}]') FROM dex.runs
 WHERE instance_id = 'ctl-2' AND status = 'CREATED';

-- 3. suspend and resume
SELECT dex.create_run('s', 'ctl-wf') AS run3 \gset
SELECT lock_version AS v FROM dex.poll_tasks('ctl-wf', 'w') \gset
SELECT dex.complete_task(:'run3', 0, :v, '[]');
SELECT dex.suspend_run(:'run3');
SELECT status FROM dex.get_run(:'run3');
-- a suspended run gets no task, even for an event
SELECT dex.send_external_event(:'run3', 'ping');
SELECT count(*) AS tasks FROM dex.poll_tasks('ctl-wf', 'w');
SELECT dex.resume_run(:'run3');
SELECT lock_version AS v,
       jsonb_path_query_array(task, '$.newEvents[*].keyvalue() ? (@.key != "timestamp").key') AS seen
  FROM dex.poll_tasks('ctl-wf', 'w') \gset
\echo :seen
SELECT dex.complete_task(:'run3', 0, :v, '[{"completeRun": {}}]');
SELECT status FROM dex.get_run(:'run3');

-- illegal transitions and bad input
\set VERBOSITY sqlstate
SELECT dex.create_run('s', 'ctl-wf') AS run4 \gset
SELECT dex.suspend_run(:'run4');
SELECT dex.resume_run(:'run4');
SELECT dex.suspend_run(:'run3');
SELECT dex.resume_run(:'run3');
SELECT dex.cancel_run('00000000-0000-7000-8000-000000000000');
SELECT dex.suspend_run(NULL);
\set VERBOSITY default
SELECT dex.cancel_run(:'run4');

-- 4. continue as new: refused while work is pending; then the run starts over
SELECT dex.create_run('loop', 'ctl-wf', '{"n": 1}') AS run5 \gset
SELECT lock_version AS v FROM dex.poll_tasks('ctl-wf', 'w') \gset
SELECT dex.complete_task(:'run5', 0, :v, '[{"id": 1, "scheduleActivity": {"name": "step", "queue": "ctl-act"}}]');
SELECT lock_version AS av FROM dex.poll_tasks('ctl-act', 'w') \gset
SELECT dex.send_external_event(:'run5', 'tick');
SELECT lock_version AS v FROM dex.poll_tasks('ctl-wf', 'w') \gset
\set VERBOSITY sqlstate
SELECT dex.complete_task(:'run5', 0, :v, '[{"continueAsNew": {"argument": {"json": "{\"n\": 2}"}}}]');
SELECT dex.complete_task(:'run5', 0, :v, '[{"id": 2, "startTimer": {"delay": "60s"}}, {"continueAsNew": {}}]');
SELECT dex.complete_task(:'run5', 0, :v, '[{"continueAsNew": {}}, {"id": 2, "startTimer": {"delay": "60s"}}]');
\set VERBOSITY default
SELECT dex.complete_task(:'run5', 1, :av, '"done"');
SELECT dex.complete_task(:'run5', 0, :v, '[]');
SELECT dex.send_external_event(:'run5', 'seen');
SELECT lock_version AS v FROM dex.poll_tasks('ctl-wf', 'w') \gset
-- an event that comes while the task runs is carried over to the new generation
SELECT dex.send_external_event(:'run5', 'carried over');
SELECT dex.complete_task(:'run5', 0, :v, '[{"continueAsNew": {"argument": {"json": "{\"n\": 2}"}}}]');
SELECT status, argument, history_length FROM dex.get_run(:'run5');
SELECT sequence, event - 'timestamp' AS event FROM dex.run_history(:'run5');
-- the next task starts the new generation: runCreated with the new argument; ids start over
SELECT lock_version AS v,
       jsonb_path_query_array(task, '$.newEvents[*].keyvalue() ? (@.key != "timestamp").key') AS seen,
       task->'newEvents'->1->'runCreated'->'argument' AS argument
  FROM dex.poll_tasks('ctl-wf', 'w') \gset
\echo :seen :argument
SELECT dex.complete_task(:'run5', 0, :v, '[{"id": 1, "recordSideEffect": {"name": "again"}}, {"completeRun": {}}]');
SELECT status, history_length FROM dex.get_run(:'run5');

-- 5. a workflow task that fails is handed out again after a backoff, counted on the run
SET dex.retry_initial_delay = '200ms';
SET dex.retry_randomization = 0;
SELECT dex.create_run('crashy', 'ctl-wf') AS run6 \gset
SELECT lock_version AS v FROM dex.poll_tasks('ctl-wf', 'w') \gset
-- the backoff counts from the failing transaction's start: checking it in that
-- transaction keeps a stall of the machine out of the figures
BEGIN;
SELECT dex.fail_task(:'run6', 0, :v, '{"message": "worker crashed", "type": "Crash"}');
SELECT task_failures, last_task_failure FROM dex.get_run(:'run6');
SELECT locked_until - now() AS backoff FROM dex.workflow_task WHERE run_id = :'run6';
-- nobody gets the task before the backoff ends
SELECT count(*) AS tasks FROM dex.poll_tasks('ctl-wf', 'w');
COMMIT;
-- the failing lease is gone
\set VERBOSITY sqlstate
SELECT dex.complete_task(:'run6', 0, :v, '[]');
\set VERBOSITY default
SELECT pg_sleep(0.25);
SELECT lock_version AS v, task->'newEvents'->1 ? 'runCreated' AS starts_over FROM dex.poll_tasks('ctl-wf', 'w') \gset
\echo starts over: :starts_over
BEGIN;
SELECT dex.fail_task(:'run6', 0, :v, '{"message": "worker crashed again"}');
SELECT task_failures, last_task_failure->>'message' AS last FROM dex.get_run(:'run6');
-- the second backoff is longer (initial delay x multiplier)
SELECT locked_until - now() AS backoff FROM dex.workflow_task WHERE run_id = :'run6';
COMMIT;
SELECT pg_sleep(0.35);
SELECT lock_version AS v FROM dex.poll_tasks('ctl-wf', 'w') \gset
SELECT dex.complete_task(:'run6', 0, :v, '[{"completeRun": {}}]');
SELECT status, task_failures, last_task_failure FROM dex.get_run(:'run6');
RESET dex.retry_initial_delay;
RESET dex.retry_randomization;
