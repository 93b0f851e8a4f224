--
-- history_cache: incremental histories (dex 1.5).  A worker that polls with
-- worker_cache => true, and completed the run's previous workflow task, gets
-- a workflow task whose history leaves out what that task was shown: it
-- holds only the batch that completion recorded, if nothing was recorded
-- since; any other case gets the whole history.
--
SELECT dex.create_queue('hc-wf', 'workflow'), dex.create_queue('hc-act', 'activity');

-- What a workflow task shows: its history length, how much of it it left out,
-- how many history and new events it carries, and its new events' kinds.
CREATE FUNCTION pg_temp.shown(task jsonb) RETURNS text LANGUAGE sql AS $$
SELECT format('length %s, omitted %s, history %s, new %s: %s',
              coalesce(task->>'historyLength', '0'), coalesce(task->>'historyOmitted', '0'),
              jsonb_array_length(coalesce(task->'history', '[]')),
              jsonb_array_length(task->'newEvents'),
              (SELECT string_agg((SELECT k FROM jsonb_object_keys(e) k
                                   WHERE k NOT IN ('eventId', 'timestamp') LIMIT 1), ' ')
                 FROM jsonb_array_elements(task->'newEvents') e))
$$;
-- complete the run's pending activity (one at a time), as an activity worker would
CREATE FUNCTION pg_temp.run_activity() RETURNS void LANGUAGE sql AS $$
SELECT dex.complete_task(run_id, task_id, lock_version, '{"json": "1"}')
  FROM dex.poll_tasks('hc-act', 'hc-a');
$$;

SELECT dex.create_run('long', 'hc-wf', '0') AS r \gset

-- 1. the first task has no history to leave out
SELECT lock_version AS v, pg_temp.shown(task) FROM dex.poll_tasks('hc-wf', 'w1', 1, '1 min', true) \gset
\echo :shown
SELECT dex.complete_task(:'r', 0, :v, '[{"id": 1, "scheduleActivity": {"name": "step", "queue": "hc-act"}}]');
SELECT pg_temp.run_activity();

-- 2. w1 completed the first task, which was shown no history: nothing to leave out
SELECT lock_version AS v, pg_temp.shown(task) FROM dex.poll_tasks('hc-wf', 'w1', 1, '1 min', true) \gset
\echo :shown
SELECT dex.complete_task(:'r', 0, :v, '[{"id": 2, "scheduleActivity": {"name": "step", "queue": "hc-act"}}]');
SELECT pg_temp.run_activity();

-- 3. w1 completed the last task, shown 5 events: the next task leaves them out
-- and has the 4 of w1's batch (2 shown, workflowTaskCompleted, activityTaskCreated)
BEGIN;
SELECT pg_temp.shown(task) FROM dex.poll_tasks('hc-wf', 'w1', 1, '1 min', true);
ROLLBACK;
-- without worker_cache, the same worker gets the whole history
BEGIN;
SELECT pg_temp.shown(task) FROM dex.poll_tasks('hc-wf', 'w1', 1, '1 min');
ROLLBACK;
-- and so does another worker with worker_cache
BEGIN;
SELECT pg_temp.shown(task) FROM dex.poll_tasks('hc-wf', 'w2', 1, '1 min', true);
ROLLBACK;

-- 4. the protobuf form: history_omitted and the batch
BEGIN;
SELECT pg_temp.shown(dex.to_json('dex.v1.WorkflowTask', task))
  FROM dex.poll_tasks_pb('hc-wf', 'w1', 1, '1 min', true);
ROLLBACK;

-- 5. a worker that lost the run's state reads the history the task left out:
-- dex.run_history_pb is the whole history, as one dex.v1.EventBatch
SELECT jsonb_array_length(dex.to_json('dex.v1.EventBatch', dex.run_history_pb(:'r'))->'events') AS events,
       (SELECT count(*) FROM dex.run_history(:'r')) AS run_history;
SELECT dex.to_json('dex.v1.EventBatch', dex.run_history_pb(:'r'))->'events'
       = (SELECT jsonb_agg(event ORDER BY sequence) FROM dex.run_history(:'r')) AS same_events;

-- 6. a completion that rolls back leaves nothing w1 could use: the next task
-- is the whole history (w1 polls again once its short lease has expired)
SELECT lock_version AS v, pg_temp.shown(task) FROM dex.poll_tasks('hc-wf', 'w1', 1, '100 ms', true) \gset
\echo :shown
BEGIN;
SELECT dex.complete_task(:'r', 0, :v, '[{"id": 3, "scheduleActivity": {"name": "step", "queue": "hc-act"}}]');
ROLLBACK;
SELECT pg_sleep(0.2);
SELECT lock_version AS v, pg_temp.shown(task) FROM dex.poll_tasks('hc-wf', 'w1', 1, '1 min', true) \gset
\echo :shown
SELECT dex.complete_task(:'r', 0, :v, '[{"id": 3, "scheduleActivity": {"name": "step", "queue": "hc-act"}}]');
SELECT pg_temp.run_activity();

-- 7. an operator's suspension and resumption reach the run as new events, as
-- everything else does: nothing was recorded since w1's batch
SELECT dex.suspend_run(:'r', 'a look'), dex.resume_run(:'r', 'looked');
SELECT lock_version AS v, pg_temp.shown(task) FROM dex.poll_tasks('hc-wf', 'w1', 1, '1 min', true) \gset
\echo :shown

-- 8. continue-as-new starts the history over: the next task has the whole
-- (new) history, even for the worker that continued it
SELECT dex.complete_task(:'r', 0, :v, '[{"continueAsNew": {"argument": {"json": "1"}}}]');
SELECT lock_version AS v, pg_temp.shown(task) FROM dex.poll_tasks('hc-wf', 'w1', 1, '1 min', true) \gset
\echo :shown
SELECT dex.complete_task(:'r', 0, :v, '[{"id": 1, "startTimer": {"delay": "0.001s"}}]');

-- 9. dex.poll_tasks_wait takes worker_cache too (after the INOUT tasks)
-- (the timer fires in the scheduler, which wakes this worker)
CALL dex.poll_tasks_wait('hc-wf', 'w1', 1, '1 min', '30 s', NULL, true) \gset
SELECT pg_temp.shown((:'tasks'::jsonb)->0);

-- 10. completions in the same call (1.5): w1 reports its task and takes the queue's next
-- one in one CALL; the completion commits before the wait (the timer it starts fires, and
-- its task is what the CALL returns)
SELECT dex.create_run('one-call', 'hc-wf', '0') AS r3 \gset
SELECT lock_version AS v FROM dex.poll_tasks('hc-wf', 'w1', 1, '1 min', true) \gset
CALL dex.poll_tasks_wait('hc-wf', 'w1', 1, '1 min', '30 s', NULL, true,
                         ARRAY[:'r3']::uuid[], '{0}', ARRAY[:v]::bigint[],
                         ARRAY['[{"id": 1, "startTimer": {"delay": "0.001s"}}]']::jsonb[]) \gset
SELECT :'completed' AS completed, (:'tasks'::jsonb)->0->>'runId' = :'r3' AS same_run,
       pg_temp.shown((:'tasks'::jsonb)->0);
-- a completion whose lease is lost is reported, not raised, and the poll goes on
CALL dex.poll_tasks_wait('hc-wf', 'w1', 1, '1 min', '0 s', NULL, true,
                         ARRAY[:'r3']::uuid[], '{0}', ARRAY[:v]::bigint[],
                         ARRAY['[{"completeRun": {}}]']::jsonb[]) \gset
SELECT :'completed' AS completed, :'tasks' AS tasks, status FROM dex.get_run(:'r3');
-- bad input fails the whole call: nothing is completed, nothing leased
SELECT lock_version AS v3 FROM dex.workflow_task WHERE run_id = :'r3' \gset
\set VERBOSITY sqlstate
CALL dex.poll_tasks_wait('hc-wf', 'w1', 1, '1 min', '0 s', NULL, true,
                         ARRAY[:'r3']::uuid[], '{0, 0}', ARRAY[:v3]::bigint[],
                         ARRAY['[{"completeRun": {}}]']::jsonb[]);
CALL dex.poll_tasks_wait('hc-wf', 'w1', 1, '1 min', '0 s', NULL, true,
                         ARRAY[:'r3']::uuid[], '{0}', ARRAY[:v3]::bigint[],
                         ARRAY['[{"noSuchCommand": {}}]']::jsonb[]);
\set VERBOSITY default
SELECT status, history_length FROM dex.get_run(:'r3');
SELECT dex.complete_task(:'r3', 0, :v3, '[{"completeRun": {}}]');

-- bad input: a null worker_cache is false
SELECT dex.create_run('other', 'hc-wf', '0') AS r2 \gset
SELECT lock_version AS v FROM dex.poll_tasks('hc-wf', 'w1', 1, '1 min', true) \gset
SELECT dex.complete_task(:'r2', 0, :v, '[{"id": 1, "scheduleActivity": {"name": "step", "queue": "hc-act"}}]');
SELECT pg_temp.run_activity();
SELECT pg_temp.shown(task) FROM dex.poll_tasks('hc-wf', 'w1', 1, '1 min', NULL);
SELECT dex.run_history_pb(NULL);
SELECT dex.run_history_pb('00000000-0000-0000-0000-000000000000');
