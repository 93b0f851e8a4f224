--
-- tasks: activity retries, terminal failures, timers, protobuf forms
--
SET dex.retry_randomization = 0;
SELECT dex.create_queue('tasks-wf', 'workflow');
SELECT dex.create_queue('tasks-act', 'activity');

-- a helper for this test: wait until a queue has a task (the scheduler moves
-- delayed work there when it falls due)
CREATE FUNCTION pg_temp.wait_for_task(queue_name text, timeout_s float8 DEFAULT 10)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + make_interval(secs => timeout_s);
    qid integer := (SELECT id FROM dex.queue WHERE name = queue_name);
BEGIN
    LOOP
        IF EXISTS (SELECT 1 FROM dex.workflow_task WHERE queue_id = qid AND locked_by IS NULL)
           OR EXISTS (SELECT 1 FROM dex.activity_task WHERE queue_id = qid
                      AND status = 'QUEUED' AND locked_by IS NULL) THEN
            RETURN true;
        END IF;
        IF clock_timestamp() > deadline THEN
            RETURN false;
        END IF;
        PERFORM pg_sleep(0.02);
    END LOOP;
END $$;

SELECT dex.create_run('retrying', 'tasks-wf', '"x"') AS run \gset
SELECT lock_version AS v FROM dex.poll_tasks('tasks-wf', 'w') \gset
SELECT dex.complete_task(:'run', 0, :v,
    '[{"id": 1, "scheduleActivity": {"name": "flaky", "queue": "tasks-act",
       "retryPolicy": {"maxAttempts": 3, "initialDelay": "0.2s", "multiplier": 2}}},
      {"id": 2, "scheduleActivity": {"name": "fatal", "queue": "tasks-act"}}]');

-- both activities are queued
SELECT event_id, name, status, attempt FROM dex.activity_task WHERE run_id = :'run' ORDER BY event_id;

-- one poll leases both
SELECT max(lock_version) FILTER (WHERE task_id = 1) AS v1,
       max(lock_version) FILTER (WHERE task_id = 2) AS v2, count(*) AS leased
  FROM dex.poll_tasks('tasks-act', 'w', 10) \gset
\echo leased :leased

-- a terminal failure fails the activity at once
SELECT dex.fail_task(:'run', 2, :v2, '{"message": "card declined", "terminal": true}');

-- a retryable failure counts the attempt and backs off (initial delay 0.2 s from the
-- failure's transaction, which the check shares so that now() is the same)
BEGIN;
SELECT dex.fail_task(:'run', 1, :v1, '{"message": "timeout"}');
SELECT event_id, status, attempt, locked_by,
       visible_from - now() BETWEEN interval '0.19 s' AND interval '0.21 s' AS backed_off,
       dex.to_json('dex.v1.Failure', last_failure) AS last_failure
  FROM dex.activity_task WHERE run_id = :'run';
COMMIT;
-- not pollable before its time
SELECT count(*) FROM dex.poll_tasks('tasks-act', 'w');

-- the scheduler queues it when due; the second attempt sees the first failure
SELECT pg_temp.wait_for_task('tasks-act');
SELECT lock_version AS v1, task->>'attempt' AS attempt, task->'lastFailure' AS last_failure
  FROM dex.poll_tasks('tasks-act', 'w') \gset
\echo attempt :attempt last failure :last_failure
BEGIN;
SELECT dex.fail_task(:'run', 1, :v1, '{"message": "timeout"}');
SELECT attempt, visible_from - now() BETWEEN interval '0.39 s' AND interval '0.41 s' AS backed_off_twice
  FROM dex.activity_task WHERE run_id = :'run';
COMMIT;

-- the last attempt fails for good; the workflow sees both failures as events
SELECT pg_temp.wait_for_task('tasks-act');
SELECT lock_version AS v1, task->>'attempt' AS attempt FROM dex.poll_tasks('tasks-act', 'w') \gset
\echo attempt :attempt
SELECT dex.fail_task(:'run', 1, :v1, '{"message": "timeout"}');
SELECT count(*) AS activity_tasks FROM dex.activity_task WHERE run_id = :'run';

SELECT lock_version AS v,
       jsonb_path_query_array(task, '$.newEvents[*].activityTaskFailed') AS failures
  FROM dex.poll_tasks('tasks-wf', 'w') \gset
\echo :failures

-- a non-retryable failure type is not retried either
SELECT dex.complete_task(:'run', 0, :v,
    '[{"id": 3, "scheduleActivity": {"name": "typed", "queue": "tasks-act",
       "retryPolicy": {"nonRetryableTypes": ["Invalid"]}}},
      {"id": 4, "startTimer": {"name": "pause", "delay": "1s"}}]');
SELECT lock_version AS v3 FROM dex.poll_tasks('tasks-act', 'w') \gset
SELECT dex.fail_task(:'run', 3, :v3, '{"message": "bad input", "type": "Invalid"}');

-- the activity failure wakes the workflow; the timer has not fired yet
SELECT lock_version AS v, task->'newEvents' @> '[{"timerElapsed": {}}]' AS timer_fired
  FROM dex.poll_tasks('tasks-wf', 'w') \gset
\echo timer fired: :timer_fired
SELECT dex.complete_task(:'run', 0, :v, '[]');
-- it fires through the scheduler, after its delay
SELECT pg_temp.wait_for_task('tasks-wf');
SELECT lock_version AS v, task->'newEvents'->1->'timerElapsed' AS elapsed,
       (task->'newEvents'->0->>'timestamp')::timestamptz >=
       (SELECT (event->'timerCreated'->>'elapseAt')::timestamptz
          FROM dex.run_history(:'run') WHERE event ? 'timerCreated') AS not_early
  FROM dex.poll_tasks('tasks-wf', 'w') \gset
\echo :elapsed :not_early

-- protobuf forms: the task of dex.poll_tasks_pb decodes to what dex.poll_tasks shows
SELECT dex.complete_task(:'run', 0, :v,
    '[{"id": 5, "scheduleActivity": {"name": "pb", "queue": "tasks-act", "argument": {"binary": "AQI="}}}]');
SELECT lock_version AS v5, task AS pb_task FROM dex.poll_tasks_pb('tasks-act', 'w') \gset
SELECT dex.to_json('dex.v1.ActivityTask', :'pb_task') - 'lockVersion' - 'lockedUntil' - 'runId' AS activity_task;
SELECT dex.complete_task_pb(:'run', 5, :v5, dex.from_json('dex.v1.Payload', '{"binary": "AwQ="}'));
SELECT lock_version AS v, task AS pb_task FROM dex.poll_tasks_pb('tasks-wf', 'w') \gset
SELECT (t->'newEvents'->1) - 'timestamp' #- '{activityTaskCompleted,startedAt}' AS new_event,
       jsonb_array_length(t->'history') = (t->>'historyLength')::int AS full_history
  FROM dex.to_json('dex.v1.WorkflowTask', :'pb_task') t;
SELECT dex.complete_task_pb(:'run', 0, :v,
    dex.from_json('dex.v1.WorkflowTaskCompletion',
                  '{"commands": [{"id": 6, "recordSideEffect": {"name": "coin", "result": {"json": "true"}}},
                                 {"setCustomStatus": {"customStatus": "almost"}},
                                 {"failRun": {"failure": {"message": "gave up", "cause": {"message": "card declined"}}}}]}'));
SELECT status, custom_status, failure, result FROM dex.get_run(:'run');
SELECT sequence, event - 'timestamp' #- '{activityTaskCompleted,startedAt}' AS event FROM dex.run_history(:'run') WHERE sequence > 20;

-- randomizationFactor 0 turns jitter off, whatever dex.retry_randomization says; an
-- absent one takes the setting
RESET dex.retry_randomization;
SELECT dex.create_queue('tasks-jitter', 'activity');
SELECT dex.create_run('jitter', 'tasks-wf') AS run \gset
SELECT lock_version AS v FROM dex.poll_tasks('tasks-wf', 'w') WHERE run_id = :'run' \gset
SELECT dex.complete_task(:'run', 0, :v, '[
  {"id": 1, "scheduleActivity": {"name": "exact", "queue": "tasks-jitter",
     "retryPolicy": {"initialDelay": "10s", "randomizationFactor": 0}}},
  {"id": 2, "scheduleActivity": {"name": "default", "queue": "tasks-jitter",
     "retryPolicy": {"initialDelay": "10s"}}}]');
BEGIN;
SELECT count(dex.fail_task(run_id, task_id, lock_version, '{"message": "again"}'))
  FROM dex.poll_tasks('tasks-jitter', 'w', 2);
SELECT name, visible_from - now() = interval '10 s' AS exact,
       dex.to_json('dex.v1.RetryPolicy', retry_policy)->'randomizationFactor' AS factor
  FROM dex.activity_task WHERE run_id = :'run' ORDER BY event_id;
COMMIT;
