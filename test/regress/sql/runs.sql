--
-- runs: a workflow with one activity, end to end, through SQL alone
--
SELECT dex.create_run('add-one', 'orders', '{"n": 41}', instance_id => 'order-1',
                      priority => 5, labels => '{"team": "payments"}',
                      concurrency_key => 'customer-7') AS run \gset

SELECT workflow_name, workflow_version, queue, status, instance_id, priority, labels,
       concurrency_key, argument, result, history_length
  FROM dex.get_run(:'run');

-- the run id is a UUIDv7
SELECT substr(:'run', 15, 1) AS uuid_version;

-- 1. the workflow task: everything needed to replay, in one row
SELECT kind, run_id = :'run' AS is_our_run, task_id, lock_version AS wf_lease,
       task - 'lockVersion' - 'lockedUntil' - 'runId' #- '{newEvents,0,timestamp}'
            #- '{newEvents,1,timestamp}' #- '{newEvents,2,timestamp}' AS task
  FROM dex.poll_tasks('orders', 'worker-a') \gset
\echo :kind :is_our_run :task_id
\echo :task

-- a second poll finds nothing: the task is leased
SELECT count(*) FROM dex.poll_tasks('orders', 'worker-b');

-- 2. the workflow schedules the activity
SELECT dex.complete_task(:'run', 0, :wf_lease,
    '[{"id": 1, "scheduleActivity": {"name": "increment", "queue": "payments.activities",
       "argument": {"json": "41"}, "retryPolicy": {"maxAttempts": 3}}}]');
SELECT status, history_length FROM dex.get_run(:'run');

-- 3. the activity task: name, argument, attempt and lease
SELECT kind, task_id, lock_version AS act_lease,
       task->>'name' AS name, task->'argument' AS argument, task->>'attempt' AS attempt,
       task->'retryPolicy'->>'maxAttempts' AS max_attempts,
       locked_until > now() AS leased
  FROM dex.poll_tasks('payments.activities', 'worker-c') \gset
\echo :kind :task_id :name :argument :attempt :max_attempts :leased

-- 4. the activity completes; the workflow gets a new task with the result
SELECT dex.complete_task(:'run', 1, :act_lease, '42');
SELECT lock_version AS wf_lease2,
       jsonb_array_length(task->'history') AS history_events,
       (task->'newEvents'->1->'activityTaskCompleted') - 'startedAt' AS new_event
  FROM dex.poll_tasks('orders', 'worker-a') \gset
\echo :history_events :new_event

-- 5. a stale completion (the first lease) is refused and changes nothing
\set VERBOSITY sqlstate
SELECT dex.complete_task(:'run', 0, :wf_lease, '[{"completeRun": {"result": {"json": "0"}}}]');
\set VERBOSITY default
SELECT status, history_length, result FROM dex.get_run(:'run');
SELECT count(*) AS workflow_tasks FROM dex.workflow_task WHERE run_id = :'run';

-- 6. the run completes with the result
SELECT dex.complete_task(:'run', 0, :wf_lease2, '{"commands": [{"completeRun": {"result": {"json": "42"}}}]}');
SELECT status, result, failure, history_length, completed_at IS NOT NULL AS has_completed_at
  FROM dex.get_run(:'run');

-- every event, in order
SELECT sequence, event - 'timestamp' #- '{activityTaskCompleted,startedAt}' AS event FROM dex.run_history(:'run');

-- each workflow task starts after the previous one completed, and events
-- are recorded no later than the task that recorded them completed
SELECT bool_and(started >= prev_completed) AS tasks_in_order
  FROM (SELECT (event->>'timestamp')::timestamptz AS started,
               (SELECT max((c.event->>'timestamp')::timestamptz) FROM dex.run_history(:'run') c
                 WHERE c.sequence < h.sequence AND c.event ? 'workflowTaskCompleted') AS prev_completed
          FROM dex.run_history(:'run') h WHERE event ? 'workflowTaskStarted') t
 WHERE prev_completed IS NOT NULL;
SELECT bool_and((e.event->>'timestamp')::timestamptz <=
                (SELECT min((c.event->>'timestamp')::timestamptz) FROM dex.run_history(:'run') c
                  WHERE c.sequence >= e.sequence AND c.event ? 'workflowTaskCompleted')) AS events_before_completion
  FROM dex.run_history(:'run') e
 WHERE e.sequence < (SELECT max(sequence) FROM dex.run_history(:'run') WHERE event ? 'workflowTaskCompleted');

-- nothing is left to do for this run
SELECT (SELECT count(*) FROM dex.workflow_task WHERE run_id = :'run') AS workflow_tasks,
       (SELECT count(*) FROM dex.activity_task WHERE run_id = :'run') AS activity_tasks,
       (SELECT count(*) FROM dex.workflow_inbox WHERE run_id = :'run') AS inbox;

-- a completed run frees its instance id
SELECT dex.create_run('add-one', 'orders', instance_id => 'order-1') IS NOT NULL AS recreated;
-- but an active one does not
\set VERBOSITY terse
SELECT dex.create_run('add-one', 'orders', instance_id => 'order-1');
\set VERBOSITY default
-- or, if the caller asks, returns the active run's id
SELECT dex.create_run('add-one', 'orders', instance_id => 'order-1', if_active => 'return') =
       (SELECT id FROM dex.runs WHERE instance_id = 'order-1' AND status = 'CREATED') AS same_run;
\set VERBOSITY sqlstate
SELECT dex.create_run('add-one', 'orders', instance_id => 'order-1', if_active => 'ignore');
\set VERBOSITY default
