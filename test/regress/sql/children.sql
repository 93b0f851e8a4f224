--
-- children: child runs, their outcomes, and cancellation from the parent
--
SELECT dex.create_queue('kids-wf', 'workflow'), dex.create_queue('kids-other', 'workflow');
SELECT dex.create_run('parent', 'kids-wf', '{"order": 9}', priority => 40,
                      labels => '{"team": "ops"}') AS parent \gset
SELECT lock_version AS v FROM dex.poll_tasks('kids-wf', 'w') \gset
SELECT dex.complete_task(:'parent', 0, :v,
    '[{"id": 1, "startChildRun": {"workflowName": "ship", "argument": {"json": "1"}}},
      {"id": 2, "startChildRun": {"workflowName": "bill", "queue": "kids-other", "priority": 90,
                                  "labels": {"team": "finance"}, "instanceId": "bill-9"}},
      {"id": 3, "startChildRun": {"workflowName": "dup", "queue": "kids-other", "instanceId": "bill-9"}}]');

-- the children exist at once, with inherited or given settings
SELECT workflow_name, queue, status, priority, labels, instance_id, parent_id = :'parent' AS child
  FROM dex.runs WHERE parent_id = :'parent' ORDER BY workflow_name;
-- the third child's instance id was taken on its queue: the parent learns it failed;
-- the first child's first task shows its parent
SELECT max(lock_version) FILTER (WHERE run_id = :'parent') AS v,
       max(lock_version) FILTER (WHERE run_id <> :'parent') AS sv,
       (array_agg(run_id) FILTER (WHERE run_id <> :'parent'))[1] AS ship,
       (array_agg(jsonb_path_query_array(task, '$.newEvents[*].childRunFailed'))
          FILTER (WHERE run_id = :'parent'))[1] AS failed,
       (array_agg(task->'newEvents'->1->'runCreated'->'parent'->>'childRunCreatedEventId')
          FILTER (WHERE run_id <> :'parent'))[1] AS created_by
  FROM dex.poll_tasks('kids-wf', 'w', 10) \gset
\echo :failed
\echo created by event :created_by
SELECT dex.complete_task(:'parent', 0, :v, '[]');
-- the child completes: the parent gets childRunCompleted with its result
SELECT dex.complete_task(:'ship', 0, :sv, '[{"completeRun": {"result": {"json": "\"shipped\""}}}]');
-- (a child's end reaches its parent through the scheduler)
CALL dex.wait_for_tasks('kids-wf', '10 s');
SELECT lock_version AS v, (task->'newEvents'->1) - 'timestamp' AS outcome
  FROM dex.poll_tasks('kids-wf', 'w') \gset
\echo :outcome
-- continuing as new is refused while a child runs
\set VERBOSITY sqlstate
SELECT dex.complete_task(:'parent', 0, :v, '[{"continueAsNew": {}}]');
SELECT dex.complete_task(:'parent', 0, :v, '[{"id": 4, "startChildRun": {}}]');
SELECT dex.complete_task(:'parent', 0, :v, '[{"id": 4, "startChildRun": {"workflowName": "x", "queue": "nope"}}]');
\set VERBOSITY default

-- the parent ends: its child is terminated (the default parent close policy)
SELECT dex.complete_task(:'parent', 0, :v, '[{"completeRun": {}}]');
SELECT workflow_name, status FROM dex.runs WHERE parent_id = :'parent' ORDER BY workflow_name;
SELECT count(*) AS tasks_left FROM dex.poll_tasks('kids-other', 'w');
-- and the instance id of the terminated child is free again
SELECT dex.create_run('bill', 'kids-other', instance_id => 'bill-9') IS NOT NULL AS recreated;

-- a child started with the parent close policy REQUEST_CANCEL is asked to cancel when its parent ends
SELECT dex.create_run('parent', 'kids-wf') AS p2 \gset
SELECT lock_version AS v FROM dex.poll_tasks('kids-wf', 'w') WHERE run_id = :'p2' \gset
SELECT dex.complete_task(:'p2', 0, :v, '[{"id": 1, "startChildRun": {"workflowName": "long", "parentClosePolicy": "PARENT_CLOSE_POLICY_REQUEST_CANCEL"}}]');
SELECT run_id AS kid, lock_version AS kv FROM dex.poll_tasks('kids-wf', 'w', 10) WHERE run_id <> :'p2' \gset
SELECT dex.complete_task(:'kid', 0, :kv, '[{"id": 1, "startTimer": {"delay": "3600s"}}]');
SELECT dex.cancel_run(:'p2', 'stop');
SELECT lock_version AS v FROM dex.poll_tasks('kids-wf', 'w', 10) WHERE run_id = :'p2' \gset
SELECT dex.complete_task(:'p2', 0, :v, '[{"cancelRun": {}}]');
SELECT status FROM dex.get_run(:'p2');
-- the child, which was executing, got the request in its inbox, and ends when it says so
SELECT lock_version AS kv, task->'newEvents'->1->'runCancelRequested' AS request
  FROM dex.poll_tasks('kids-wf', 'w', 10) WHERE run_id = :'kid' \gset
\echo :request
SELECT dex.complete_task(:'kid', 0, :kv, '[{"cancelRun": {}}]');
SELECT status FROM dex.get_run(:'kid');
