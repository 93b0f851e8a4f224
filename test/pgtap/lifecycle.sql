-- lifecycle: what each call does to a run and its tasks.
--
--   * a run goes CREATED -> RUNNING (its first workflow task completes and schedules an
--     activity) -> COMPLETED, its history growing with each workflow task, and get_run shows
--     the result;
--   * every lease takes a new, larger lock version; a stale lock version is refused with
--     WD001 and changes nothing;
--   * a failed activity attempt follows the retry policy: the attempt is counted and the task
--     waits (CREATED, visible from a later time); after the last attempt, or at once for a
--     terminal failure or a non-retryable type, the workflow's next task shows
--     activityTaskFailed.
--
-- Runs in one transaction that is rolled back.  The scheduler cannot see this transaction's
-- rows, so where a retry falls due the test moves the task to QUEUED itself, with the
-- scheduler's own statement (see src/workers/scheduler.c, due_activities_plan).
\set ON_ERROR_STOP 1
\pset format unaligned
\pset tuples_only true
\pset pager off

BEGIN;
SET LOCAL client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;
-- retry delays exactly as the policy says, without random spread
SET LOCAL dex.retry_randomization = 0;

SELECT plan(93);

SELECT dex.create_queue('tap-life-wf', 'workflow') \gset
SELECT dex.create_queue('tap-life-act', 'activity') \gset

-- a run's externally visible state, to compare before and after a refused call
CREATE FUNCTION pg_temp.run_state(run uuid) RETURNS text LANGUAGE sql AS $$
    SELECT concat_ws('|',
        (SELECT concat_ws(',', status, history_length, last_event_id, md5(coalesce(result, '')),
                          updated_at) FROM dex.workflow_run WHERE id = run),
        (SELECT count(*) FROM dex.workflow_history WHERE run_id = run),
        (SELECT string_agg(concat_ws(',', id, visible_from), ';' ORDER BY id)
           FROM dex.workflow_inbox WHERE run_id = run),
        (SELECT string_agg(concat_ws(',', locked_by, locked_until, lock_version), ';')
           FROM dex.workflow_task WHERE run_id = run),
        (SELECT string_agg(concat_ws(',', event_id, status, attempt, visible_from, locked_by,
                                     locked_until, lock_version), ';' ORDER BY event_id)
           FROM dex.activity_task WHERE run_id = run))
$$;

-- what the scheduler does when a retry falls due (this transaction's rows are invisible to it)
CREATE FUNCTION pg_temp.retry_falls_due(run uuid) RETURNS void LANGUAGE sql AS $$
    UPDATE dex.activity_task SET status = 'QUEUED', visible_from = now()
     WHERE run_id = run AND status = 'CREATED'
$$;

--
-- 1. a new run
--
SELECT dex.create_run('tap-life', 'tap-life-wf', '{"n": 41}', labels => '{"suite": "pgtap"}') AS run \gset
SELECT is(r.status, 'CREATED', 'a new run is CREATED') FROM dex.get_run(:'run') r;
SELECT is(r.history_length, 0, 'with no history') FROM dex.get_run(:'run') r;
SELECT is(r.argument, '{"n": 41}'::jsonb, 'get_run shows its argument') FROM dex.get_run(:'run') r;
SELECT ok(r.result IS NULL AND r.started_at IS NULL AND r.completed_at IS NULL,
          'no result, not started, not completed') FROM dex.get_run(:'run') r;
SELECT is(substr(:'run', 15, 1), '7', 'the run id is a UUIDv7');
SELECT is((SELECT count(*)::int FROM dex.workflow_task WHERE run_id = :'run' AND locked_by IS NULL), 1,
          'the new run has one pending workflow task');

--
-- 2. its first workflow task
--
SELECT kind AS k, task_id AS tid, lock_version AS v1, locked_until > now() AS in_future,
       task AS t, run_id = :'run' AS ours
  FROM dex.poll_tasks('tap-life-wf', 'tap-w1', 10) \gset
SELECT is(:'k'::text, 'workflow', 'the poll returns a workflow task');
SELECT is(:tid, 0, 'whose task id is 0');
SELECT ok(:'ours'::boolean, 'of our run');
SELECT ok(:'in_future'::boolean, 'leased until a later time');
SELECT is((:'t'::jsonb->>'lockVersion')::bigint, :v1::bigint, 'the task carries the same lock version');
SELECT is(:'t'::jsonb->>'status', 'RUN_STATUS_CREATED', 'the task says the run is CREATED');
SELECT is(jsonb_path_query_array(:'t'::jsonb, '$.newEvents[*].keyvalue().key ? (@ != "id" && @ != "timestamp")'),
          '["workflowTaskStarted", "runCreated", "runStarted"]'::jsonb,
          'its new events: WorkflowTaskStarted, RunCreated, RunStarted');
SELECT is(:'t'::jsonb->'newEvents'->1->'runCreated'->'argument', '{"json": "{\"n\": 41}"}'::jsonb,
          'RunCreated carries the argument');
SELECT is((SELECT locked_by FROM dex.workflow_task WHERE run_id = :'run'), 'tap-w1',
          'the task row is leased to the worker');
SELECT is((SELECT count(*)::int FROM dex.poll_tasks('tap-life-wf', 'tap-w2', 10)), 0,
          'a leased task is not handed out again');

-- a stale lock version is refused and changes nothing
SELECT pg_temp.run_state(:'run') AS state_before \gset
SELECT throws_ok(format('SELECT dex.complete_task(%L, 0, %s, %L)', :'run', :v1 - 1,
                        '[{"completeRun": {"result": {"json": "0"}}}]'),
                 'WD001', NULL, 'completing with an older lock version: WD001');
SELECT throws_ok(format('SELECT dex.complete_task(%L, 0, %s, %L)', :'run', :v1 + 1,
                        '[{"completeRun": {"result": {"json": "0"}}}]'),
                 'WD001', NULL, 'completing with a newer lock version: WD001');
SELECT is(pg_temp.run_state(:'run'), :'state_before', 'the refused completions changed nothing');
SELECT is(r.status, 'CREATED', 'the run is still CREATED') FROM dex.get_run(:'run') r;

-- the workflow schedules two activities
SELECT lives_ok(format('SELECT dex.complete_task(%L, 0, %s, %L)', :'run', :v1,
    '[{"id": 1, "scheduleActivity": {"name": "add", "queue": "tap-life-act", "argument": {"json": "41"}}},
      {"id": 2, "setCustomStatus": {"customStatus": "adding"}}]'),
    'the workflow task completes with its lease');
SELECT is(r.status, 'RUNNING', 'the run is RUNNING') FROM dex.get_run(:'run') r;
SELECT is(r.history_length, 6, 'its history has 6 events: started, created, run started, completed, activity created, status set')
  FROM dex.get_run(:'run') r;
SELECT is(r.custom_status, 'adding', 'the custom status is set') FROM dex.get_run(:'run') r;
SELECT ok(r.started_at IS NOT NULL AND r.completed_at IS NULL, 'started, not completed')
  FROM dex.get_run(:'run') r;
SELECT is((SELECT count(*)::int FROM dex.workflow_task WHERE run_id = :'run'), 0,
          'the run has no workflow task while it waits for its activity');
SELECT is((SELECT row(name, status, attempt, locked_by)::text FROM dex.activity_task WHERE run_id = :'run'),
          '(add,QUEUED,1,)', 'the activity task is QUEUED, attempt 1, not leased');
SELECT is((SELECT count(*)::int FROM dex.run_history(:'run')), 6, 'run_history returns the 6 events');
SELECT is((SELECT array_agg(sequence ORDER BY sequence) FROM dex.run_history(:'run')), '{1,2,3,4,5,6}'::int[],
          'numbered 1 to 6');
SELECT is((SELECT event->'activityTaskCreated'->>'name' FROM dex.run_history(:'run') WHERE sequence = 5), 'add',
          'event 5 is the ActivityTaskCreated');
SELECT is((SELECT (event->>'id')::int FROM dex.run_history(:'run') WHERE sequence = 5), 1,
          'with the command''s id');
-- the same lock version cannot complete the task twice
SELECT pg_temp.run_state(:'run') AS state_before \gset
SELECT throws_ok(format('SELECT dex.complete_task(%L, 0, %s, ''[{"completeRun": {}}]'')', :'run', :v1),
                 'WD001', NULL, 'completing the completed workflow task again: WD001');
SELECT is(pg_temp.run_state(:'run'), :'state_before', 'which changes nothing');

--
-- 3. the activity
--
SELECT task_id AS tid, lock_version AS va, task AS t FROM dex.poll_tasks('tap-life-act', 'tap-a1') \gset
SELECT is(:tid, 1, 'the activity task id is its ActivityTaskCreated event id');
SELECT cmp_ok(:va::bigint, '>', :v1::bigint, 'the activity lease has a larger lock version than the workflow lease before it');
SELECT is(:'t'::jsonb->>'name', 'add', 'the activity task has its name');
SELECT is(:'t'::jsonb->'argument', '{"json": "41"}'::jsonb, 'and its argument');
SELECT is(:'t'::jsonb->>'attempt', '1', 'attempt 1');
SELECT is(:'t'::jsonb->'retryPolicy'->>'maxAttempts', '6', 'the default retry policy is filled in (6 attempts)');
SELECT throws_ok(format('SELECT dex.complete_task(%L, 1, %s, ''42'')', :'run', :va - 1),
                 'WD001', NULL, 'completing the activity with another lock version: WD001');
SELECT throws_ok(format('SELECT dex.complete_task(%L, 2, %s, ''42'')', :'run', :va),
                 'WD001', NULL, 'completing another task id with this lock version: WD001');
SELECT lives_ok(format('SELECT dex.complete_task(%L, 1, %s, ''42'')', :'run', :va),
                'the activity completes with its lease');
SELECT is((SELECT count(*)::int FROM dex.activity_task WHERE run_id = :'run'), 0, 'the activity task is gone');
SELECT is((SELECT count(*)::int FROM dex.workflow_task WHERE run_id = :'run' AND locked_by IS NULL), 1,
          'the run has a pending workflow task again');
SELECT is((SELECT count(*)::int FROM dex.workflow_inbox WHERE run_id = :'run'), 1,
          'holding one inbox event');

--
-- 4. the second workflow task sees the result and completes the run
--
SELECT lock_version AS v2, task AS t FROM dex.poll_tasks('tap-life-wf', 'tap-w1') \gset
SELECT cmp_ok(:v2::bigint, '>', :va::bigint, 'each lease takes a larger lock version');
SELECT is(:'t'::jsonb->>'status', 'RUN_STATUS_RUNNING', 'the task says the run is RUNNING');
SELECT is((:'t'::jsonb->>'historyLength')::int, 6, 'the task carries the history length');
SELECT is(jsonb_array_length(:'t'::jsonb->'history'), 6, 'and the whole history');
SELECT is((:'t'::jsonb->'newEvents'->1->'activityTaskCompleted') - 'startedAt',
          '{"result": {"json": "42"}, "attempt": 1, "workerId": "tap-a1", "activityTaskCreatedEventId": 1}'::jsonb,
          'the new events carry the activity''s result, attempt and worker');
SELECT throws_ok(format('SELECT dex.complete_task(%L, 0, %s, ''[{"completeRun": {}}]'')', :'run', :v1),
                 'WD001', NULL, 'the first lease''s lock version is refused for the new task');
SELECT lives_ok(format('SELECT dex.complete_task(%L, 0, %s, %L)', :'run', :v2,
                       '[{"completeRun": {"result": {"json": "{\"n\": 42}"}}}]'),
                'the run completes');
SELECT is(r.status, 'COMPLETED', 'the run is COMPLETED') FROM dex.get_run(:'run') r;
SELECT is(r.result, '{"n": 42}'::jsonb, 'get_run shows the result') FROM dex.get_run(:'run') r;
SELECT ok(r.failure IS NULL AND r.completed_at IS NOT NULL, 'no failure, with a completion time')
  FROM dex.get_run(:'run') r;
SELECT is(r.history_length, 10, 'the history grew to 10 events') FROM dex.get_run(:'run') r;
SELECT is((SELECT event->'runCompleted' FROM dex.run_history(:'run') WHERE sequence = 10),
          '{"result": {"json": "{\"n\": 42}"}}'::jsonb, 'the last event is RunCompleted with the result');
SELECT is((SELECT count(*)::int FROM dex.workflow_task WHERE run_id = :'run')
          + (SELECT count(*)::int FROM dex.activity_task WHERE run_id = :'run')
          + (SELECT count(*)::int FROM dex.workflow_inbox WHERE run_id = :'run'), 0,
          'a completed run leaves no tasks and no inbox');
SELECT pg_temp.run_state(:'run') AS state_before \gset
SELECT throws_ok(format('SELECT dex.complete_task(%L, 0, %s, ''[{"failRun": {"failure": {"message": "late"}}}]'')',
                        :'run', :v2),
                 'WD001', NULL, 'a completed run''s last lease is refused');
SELECT is(pg_temp.run_state(:'run'), :'state_before', 'and the completed run does not change');

--
-- 5. retries
--
SELECT dex.create_run('tap-retry', 'tap-life-wf') AS run2 \gset
SELECT lock_version AS v FROM dex.poll_tasks('tap-life-wf', 'tap-w1') \gset
SELECT dex.complete_task(:'run2', 0, :v,
    '[{"id": 1, "scheduleActivity": {"name": "flaky", "queue": "tap-life-act",
       "retryPolicy": {"maxAttempts": 2, "initialDelay": "60s"}}},
      {"id": 2, "scheduleActivity": {"name": "fatal", "queue": "tap-life-act"}},
      {"id": 3, "scheduleActivity": {"name": "once", "queue": "tap-life-act",
       "retryPolicy": {"maxAttempts": 1}}},
      {"id": 4, "scheduleActivity": {"name": "typed", "queue": "tap-life-act",
       "retryPolicy": {"nonRetryableTypes": ["BadInput"]}}}]') \gset
CREATE TEMP TABLE leases ON COMMIT DROP AS
    SELECT task_id, lock_version FROM dex.poll_tasks('tap-life-act', 'tap-a1', 10);
SELECT is((SELECT array_agg(task_id ORDER BY task_id) FROM leases), '{1,2,3,4}'::int[],
          'one poll leases all four activities');
SELECT is((SELECT count(DISTINCT lock_version)::int FROM leases), 4, 'each with its own lock version');
SELECT (SELECT lock_version FROM leases WHERE task_id = 1) AS l1, (SELECT lock_version FROM leases WHERE task_id = 2) AS l2,
       (SELECT lock_version FROM leases WHERE task_id = 3) AS l3, (SELECT lock_version FROM leases WHERE task_id = 4) AS l4 \gset

-- a retryable failure: attempt counted, the task waits out the backoff
SELECT lives_ok(format('SELECT dex.fail_task(%L, 1, %s, ''{"message": "timeout"}'')', :'run2', :l1),
                'a retryable failure is accepted');
SELECT is((SELECT row(status, attempt, locked_by)::text FROM dex.activity_task WHERE run_id = :'run2' AND event_id = 1),
          '(CREATED,2,)', 'the task is CREATED again for attempt 2, not leased');
SELECT is((SELECT visible_from - now() FROM dex.activity_task WHERE run_id = :'run2' AND event_id = 1),
          interval '60 s', 'it becomes visible after the policy''s initial delay');
SELECT is((SELECT dex.to_json('dex.v1.Failure', last_failure) FROM dex.activity_task WHERE run_id = :'run2' AND event_id = 1),
          '{"message": "timeout"}'::jsonb, 'the failure is kept for the next attempt');
SELECT is((SELECT count(*)::int FROM dex.poll_tasks('tap-life-act', 'tap-a1', 10)), 0,
          'a task waiting for its retry is not handed out');
SELECT is((SELECT count(*)::int FROM dex.workflow_task WHERE run_id = :'run2'), 0,
          'a retried failure does not wake the workflow');
SELECT throws_ok(format('SELECT dex.fail_task(%L, 1, %s, ''{"message": "again"}'')', :'run2', :l1),
                 'WD001', NULL, 'the failed attempt''s lock version cannot fail it again');
SELECT throws_ok(format('SELECT dex.complete_task(%L, 1, %s, ''1'')', :'run2', :l1),
                 'WD001', NULL, 'nor complete it');

-- a terminal failure fails the activity at once, whatever the policy
SELECT lives_ok(format('SELECT dex.fail_task(%L, 2, %s, ''{"message": "declined", "terminal": true}'')', :'run2', :l2),
                'a terminal failure is accepted');
SELECT is((SELECT count(*)::int FROM dex.activity_task WHERE run_id = :'run2' AND event_id = 2), 0,
          'the terminally failed activity is gone at once (attempt 1 of 6)');
-- a policy of one attempt: the first retryable failure is the last
SELECT lives_ok(format('SELECT dex.fail_task(%L, 3, %s, ''{"message": "nope"}'')', :'run2', :l3),
                'the only attempt fails');
SELECT is((SELECT count(*)::int FROM dex.activity_task WHERE run_id = :'run2' AND event_id = 3), 0,
          'an activity out of attempts is gone');
-- a non-retryable failure type
SELECT lives_ok(format('SELECT dex.fail_task(%L, 4, %s, ''{"message": "bad", "type": "BadInput"}'')', :'run2', :l4),
                'a failure of a non-retryable type is accepted');
SELECT is((SELECT count(*)::int FROM dex.activity_task WHERE run_id = :'run2' AND event_id = 4), 0,
          'an activity failing with a non-retryable type is gone at once');

-- the workflow sees the three failures
SELECT lock_version AS v, task AS t FROM dex.poll_tasks('tap-life-wf', 'tap-w1') \gset
SELECT is(jsonb_path_query_array(:'t'::jsonb, '$.newEvents[*].activityTaskFailed'),
          '[{"failure": {"message": "declined", "terminal": true}, "attempts": 1, "activityTaskCreatedEventId": 2},
            {"failure": {"message": "nope"}, "attempts": 1, "activityTaskCreatedEventId": 3},
            {"failure": {"type": "BadInput", "message": "bad"}, "attempts": 1, "activityTaskCreatedEventId": 4}]'::jsonb,
          'the workflow''s next task shows activityTaskFailed for each, in order');
SELECT lives_ok(format('SELECT dex.complete_task(%L, 0, %s, ''[]'')', :'run2', :v),
                'the workflow goes on waiting');

-- the retry falls due: attempt 2 sees attempt 1's failure, with a new lock version
SELECT pg_temp.retry_falls_due(:'run2') \gset
SELECT lock_version AS l1b, task AS t FROM dex.poll_tasks('tap-life-act', 'tap-a2') \gset
SELECT is(:'t'::jsonb->>'attempt', '2', 'the retry is attempt 2');
SELECT is(:'t'::jsonb->'lastFailure', '{"message": "timeout"}'::jsonb, 'it carries the previous failure');
SELECT cmp_ok(:l1b::bigint, '>', :l1::bigint, 'and a larger lock version than attempt 1');
SELECT throws_ok(format('SELECT dex.complete_task(%L, 1, %s, ''1'')', :'run2', :l1),
                 'WD001', NULL, 'attempt 1''s lock version cannot complete attempt 2');
-- the last attempt fails: the activity fails, and the workflow is told
SELECT lives_ok(format('SELECT dex.fail_task(%L, 1, %s, ''{"message": "timeout again"}'')', :'run2', :l1b),
                'the last attempt fails');
SELECT is((SELECT count(*)::int FROM dex.activity_task WHERE run_id = :'run2'), 0,
          'after max attempts the activity task is gone');
SELECT lock_version AS v, task AS t FROM dex.poll_tasks('tap-life-wf', 'tap-w1') \gset
SELECT is(:'t'::jsonb->'newEvents'->1->'activityTaskFailed',
          '{"failure": {"message": "timeout again"}, "attempts": 2, "activityTaskCreatedEventId": 1}'::jsonb,
          'the workflow''s next task shows activityTaskFailed after 2 attempts, with the last failure');
SELECT lives_ok(format('SELECT dex.complete_task(%L, 0, %s, %L)', :'run2', :v,
                       '[{"failRun": {"failure": {"message": "gave up"}}}]'),
                'the workflow fails the run');
SELECT is(r.status, 'FAILED', 'the run is FAILED') FROM dex.get_run(:'run2') r;
SELECT is(r.failure, '{"message": "gave up"}'::jsonb, 'get_run shows the failure') FROM dex.get_run(:'run2') r;

--
-- 6. an ended run frees its instance id; lock versions never repeat
--
SELECT lives_ok($$SELECT dex.create_run('tap-life', 'tap-life-wf', instance_id => 'tap-life-i')$$,
                'a run with an instance id starts');
SELECT throws_ok($$SELECT dex.create_run('tap-life', 'tap-life-wf', instance_id => 'tap-life-i')$$,
                 '23505', NULL, 'a second one is refused while the first is active');
SELECT lock_version AS v, run_id AS run3 FROM dex.poll_tasks('tap-life-wf', 'tap-w1') \gset
SELECT lives_ok(format('SELECT dex.complete_task(%L, 0, %s, ''[{"completeRun": {}}]'')', :'run3', :v),
                'the first run completes');
SELECT lives_ok($$SELECT dex.create_run('tap-life', 'tap-life-wf', instance_id => 'tap-life-i')$$,
                'then the instance id can start a new run');
SELECT ok((SELECT max(lock_version) FROM leases) < :l1b AND :l1b < :v,
          'lock versions grow across queues and task kinds');

SELECT * FROM finish();
ROLLBACK;
