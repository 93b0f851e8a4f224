-- errors: every class of error the API reports, with its SQLSTATE, on real calls; refused
-- calls change nothing, and the task still completes with its lease afterwards.
--
-- SQLSTATEs: WD001 stale or lost lease (dex's own), 42704 unknown queue or run, 42809 wrong
-- queue kind or task kind, 22023 invalid parameter values, 22004 nulls, 22P03 malformed
-- protobuf, 22P02 malformed text inside JSON, 23505 instance id already active, 42710
-- duplicate queue, 54000 payload too large.
--
-- Runs in one transaction that is rolled back.
\set ON_ERROR_STOP 1
\pset format unaligned
\pset tuples_only true
\pset pager off

BEGIN;
SET LOCAL client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;

SELECT plan(76);

SELECT dex.create_queue('tap-errors-wf', 'workflow') \gset
SELECT dex.create_queue('tap-errors-act', 'activity') \gset

-- everything dex stores about this file's queues and runs, as one fingerprint
CREATE FUNCTION pg_temp.state() RETURNS text LANGUAGE sql AS $$
    WITH q AS (SELECT id FROM dex.queue WHERE name LIKE 'tap-errors-%'),
         r AS (SELECT * FROM dex.workflow_run WHERE queue_id IN (SELECT id FROM q))
    SELECT md5(concat_ws('|',
        (SELECT string_agg(concat_ws(',', id, status, history_length, last_event_id, custom_status,
                                     md5(coalesce(result, '')), md5(coalesce(failure, ''))), ';' ORDER BY id)
           FROM r),
        (SELECT string_agg(concat_ws(',', run_id, sequence, md5(events)), ';' ORDER BY run_id, sequence)
           FROM dex.workflow_history WHERE run_id IN (SELECT id FROM r)),
        (SELECT string_agg(concat_ws(',', run_id, id, visible_from), ';' ORDER BY id)
           FROM dex.workflow_inbox WHERE run_id IN (SELECT id FROM r)),
        (SELECT string_agg(concat_ws(',', run_id, locked_by, locked_until, lock_version), ';' ORDER BY run_id)
           FROM dex.workflow_task WHERE run_id IN (SELECT id FROM r)),
        (SELECT string_agg(concat_ws(',', run_id, event_id, status, attempt, locked_by, lock_version), ';'
                           ORDER BY run_id, event_id)
           FROM dex.activity_task WHERE run_id IN (SELECT id FROM r)),
        (SELECT string_agg(name, ';' ORDER BY id) FROM dex.queue WHERE name LIKE 'tap-errors-%')))
$$;

SELECT dex.create_run('errors', 'tap-errors-wf', instance_id => 'tap-errors-1') AS run \gset
SELECT lock_version AS v FROM dex.poll_tasks('tap-errors-wf', 'tap-worker') \gset
SELECT pg_temp.state() AS before \gset

-- a call on the leased workflow task with the given commands
CREATE FUNCTION pg_temp.complete(commands text) RETURNS text LANGUAGE sql AS $$
    SELECT format('SELECT dex.complete_task(%L, 0, %s, %L)',
                  (SELECT run_id FROM dex.workflow_task t JOIN dex.queue q ON q.id = t.queue_id
                    WHERE q.name = 'tap-errors-wf'),
                  (SELECT lock_version FROM dex.workflow_task t JOIN dex.queue q ON q.id = t.queue_id
                    WHERE q.name = 'tap-errors-wf'),
                  commands)
$$;

--
-- 42704 undefined_object: unknown queues and runs
--
SELECT throws_ok($$SELECT dex.create_run('w', 'tap-errors-nope')$$, '42704', NULL,
                 'create_run on an unknown queue: 42704');
SELECT throws_ok($$SELECT * FROM dex.poll_tasks('tap-errors-nope', 'w')$$, '42704', NULL,
                 'poll_tasks on an unknown queue: 42704');
SELECT throws_ok($$SELECT * FROM dex.poll_tasks_pb('tap-errors-nope', 'w')$$, '42704', NULL,
                 'poll_tasks_pb on an unknown queue: 42704');
SELECT throws_ok(format('SELECT dex.complete_task(%L, 0, %s, ''[]'')',
                        '00000000-0000-7000-8000-000000000000', :v), '42704', NULL,
                 'complete_task of an unknown run: 42704');
SELECT throws_ok(format('SELECT dex.fail_task(%L, 1, %s, ''{"message": "x"}'')',
                        '00000000-0000-7000-8000-000000000000', :v), '42704', NULL,
                 'fail_task of an unknown run: 42704');
SELECT throws_ok($$SELECT * FROM dex.get_run('00000000-0000-7000-8000-000000000000')$$, '42704', NULL,
                 'get_run of an unknown run: 42704');
SELECT throws_ok($$SELECT * FROM dex.run_history('00000000-0000-7000-8000-000000000000')$$, '42704', NULL,
                 'run_history of an unknown run: 42704');
SELECT throws_ok(pg_temp.complete('[{"id": 1, "scheduleActivity": {"name": "a", "queue": "tap-errors-nope"}}]'),
                 '42704', NULL, 'scheduleActivity on an unknown queue: 42704');

--
-- 42809 wrong_object_type: a queue or task of the wrong kind
--
SELECT throws_ok($$SELECT dex.create_run('w', 'tap-errors-act')$$, '42809', NULL,
                 'create_run on an activity queue: 42809');
SELECT throws_ok(pg_temp.complete('[{"id": 1, "scheduleActivity": {"name": "a", "queue": "tap-errors-wf"}}]'),
                 '42809', NULL, 'scheduleActivity on a workflow queue: 42809');
-- (dex.fail_task of a workflow task backs it off: sql/control.sql covers it)

--
-- 22023 invalid_parameter_value
--
SELECT throws_ok($$SELECT dex.create_queue('tap-errors-q', 'timer')$$, '22023', NULL,
                 'create_queue with an unknown kind: 22023');
SELECT throws_ok($$SELECT dex.create_queue('has space', 'workflow')$$, '22023', NULL,
                 'create_queue with an invalid name: 22023');
SELECT throws_ok($$SELECT dex.create_queue('tap-errors-q', 'workflow', 0)$$, '22023', NULL,
                 'create_queue with capacity 0: 22023');
SELECT throws_ok($$SELECT dex.create_run('', 'tap-errors-wf')$$, '22023', NULL,
                 'create_run with an empty workflow name: 22023');
SELECT throws_ok($$SELECT dex.create_run(repeat('w', 256), 'tap-errors-wf')$$, '22023', NULL,
                 'create_run with a 256-byte workflow name: 22023');
SELECT throws_ok($$SELECT dex.create_run('w', 'tap-errors-wf', workflow_version => 0)$$, '22023', NULL,
                 'create_run with workflow version 0: 22023');
SELECT throws_ok($$SELECT dex.create_run('w', 'tap-errors-wf', priority => 101)$$, '22023', NULL,
                 'create_run with priority 101: 22023');
SELECT throws_ok($$SELECT dex.create_run('w', 'tap-errors-wf', labels => '["a"]')$$, '22023', NULL,
                 'create_run with labels that are not an object: 22023');
SELECT throws_ok($$SELECT dex.create_run('w', 'tap-errors-wf', labels => '{"a": 1}')$$, '22023', NULL,
                 'create_run with a non-string label: 22023');
SELECT throws_ok($$SELECT * FROM dex.poll_tasks('tap-errors-wf', '')$$, '22023', NULL,
                 'poll_tasks with an empty worker id: 22023');
SELECT throws_ok($$SELECT * FROM dex.poll_tasks('tap-errors-wf', 'w', 0)$$, '22023', NULL,
                 'poll_tasks with max_tasks 0: 22023');
SELECT throws_ok($$SELECT * FROM dex.poll_tasks('tap-errors-wf', 'w', 1001)$$, '22023', NULL,
                 'poll_tasks with max_tasks 1001: 22023');
SELECT throws_ok($$SELECT * FROM dex.poll_tasks('tap-errors-wf', 'w', 1, '0 s')$$, '22023', NULL,
                 'poll_tasks with a zero lease: 22023');
SELECT throws_ok($$SELECT * FROM dex.poll_tasks('tap-errors-wf', 'w', 1, '366 days')$$, '22023', NULL,
                 'poll_tasks with a lease over a year: 22023');
SELECT throws_ok(format('SELECT dex.complete_task(%L, -1, %s, ''1'')', :'run', :v), '22023', NULL,
                 'complete_task with a negative task id: 22023');
SELECT throws_ok(pg_temp.complete('[{"scheduleActivity": {"name": "a", "queue": "tap-errors-act"}}]'),
                 '22023', NULL, 'a scheduleActivity command without an id: 22023');
-- (a command id used twice is not refused: it fails the run as non-deterministic;
-- sql/errors.sql covers it)
SELECT throws_ok(pg_temp.complete('[{"completeRun": {}}, {"id": 1, "startTimer": {"delay": "1s"}}]'),
                 '22023', NULL, 'a command after completeRun: 22023');
SELECT throws_ok(pg_temp.complete('[{"id": 1, "startTimer": {"name": "t"}}]'),
                 '22023', NULL, 'a timer without a delay: 22023');
SELECT throws_ok(pg_temp.complete('[{"completeRun": {"result": {"jsn": "1"}}}]'),
                 '22023', NULL, 'an unknown key in a command: 22023');
SELECT throws_ok(pg_temp.complete('[{"id": 1, "scheduleActivity": {"name": "a", "queue": "tap-errors-act",
                                     "retryPolicy": {"multiplier": 0.5}}}]'),
                 '22023', NULL, 'a retry policy with a multiplier below 1: 22023');
SELECT throws_ok(format('SELECT dex.fail_task(%L, 1, %s, ''{"msg": "x"}'')', :'run', :v), '22023', NULL,
                 'fail_task with an unknown key in the failure: 22023');

--
-- 22004 null_value_not_allowed
--
SELECT throws_ok($$SELECT dex.create_queue(NULL, 'workflow')$$, '22004', NULL,
                 'create_queue with a null name: 22004');
SELECT throws_ok($$SELECT dex.create_run(NULL, 'tap-errors-wf')$$, '22004', NULL,
                 'create_run with a null workflow name: 22004');
SELECT throws_ok($$SELECT dex.create_run('w', NULL)$$, '22004', NULL,
                 'create_run with a null queue: 22004');
SELECT throws_ok($$SELECT * FROM dex.poll_tasks('tap-errors-wf', NULL)$$, '22004', NULL,
                 'poll_tasks with a null worker id: 22004');
SELECT throws_ok($$SELECT * FROM dex.poll_tasks('tap-errors-wf', 'w', NULL)$$, '22004', NULL,
                 'poll_tasks with a null max_tasks: 22004');
SELECT throws_ok(format('SELECT dex.complete_task(NULL, 0, %s, ''[]'')', :v), '22004', NULL,
                 'complete_task with a null run id: 22004');
SELECT throws_ok(format('SELECT dex.complete_task(%L, 0, NULL, ''[]'')', :'run'), '22004', NULL,
                 'complete_task with a null lock version: 22004');
SELECT throws_ok(format('SELECT dex.complete_task(%L, 0, %s, NULL)', :'run', :v), '22004', NULL,
                 'complete_task of a workflow task without commands: 22004');
SELECT throws_ok(format('SELECT dex.fail_task(%L, 1, %s, NULL)', :'run', :v), '22004', NULL,
                 'fail_task with a null failure: 22004');

--
-- 22P03 invalid_binary_representation: malformed protobuf
--
SELECT throws_ok(format('SELECT dex.complete_task_pb(%L, 0, %s, ''\xdeadbeef'')', :'run', :v),
                 '22P03', NULL, 'complete_task_pb with malformed protobuf: 22P03');
SELECT throws_ok(format('SELECT dex.fail_task_pb(%L, 1, %s, ''\xff'')', :'run', :v),
                 '22P03', NULL, 'fail_task_pb with malformed protobuf: 22P03');
SELECT throws_ok($$SELECT dex.to_json('dex.v1.WorkflowEvent', '\xffffffff')$$,
                 '22P03', NULL, 'to_json of malformed protobuf: 22P03');

--
-- 22P02 invalid_text_representation: malformed text inside JSON
--
SELECT throws_ok(pg_temp.complete('[{"id": 1, "startTimer": {"name": "t", "delay": "soon"}}]'),
                 '22P02', NULL, 'a timer delay that is not a duration: 22P02');
SELECT throws_ok(pg_temp.complete('[{"completeRun": {"result": {"binary": "not base64!"}}}]'),
                 '22P02', NULL, 'a binary payload that is not base64: 22P02');
SELECT throws_ok(pg_temp.complete('[{"id": "one", "startTimer": {"delay": "1s"}}]'),
                 '22P02', NULL, 'a command id that is not an integer: 22P02');
SELECT throws_ok($$SELECT dex.from_json('dex.v1.RetryPolicy', '{"initialDelay": "5 minutes"}')$$,
                 '22P02', NULL, 'from_json of a malformed duration: 22P02');

--
-- 23505 unique_violation: an instance id with an active run
--
SELECT throws_ok($$SELECT dex.create_run('errors', 'tap-errors-wf', instance_id => 'tap-errors-1')$$,
                 '23505', NULL, 'a second run for an active instance id: 23505');

--
-- 42710 duplicate_object: a queue that exists
--
SELECT throws_ok($$SELECT dex.create_queue('tap-errors-wf', 'workflow')$$, '42710', NULL,
                 'create_queue of an existing queue: 42710');
SELECT lives_ok($$SELECT dex.create_queue('TAP_errors.wf', 'workflow')$$,
                'a name that differs from a queue''s only in case and punctuation is a queue of its own (1.8)');

--
-- 54000 program_limit_exceeded: payloads over dex.max_payload_size
--
SET LOCAL dex.max_payload_size = 1024;
SELECT throws_ok($$SELECT dex.create_run('w', 'tap-errors-wf', to_jsonb(repeat('x', 2000)))$$,
                 '54000', NULL, 'a run argument over the limit: 54000');
SELECT throws_ok(pg_temp.complete(format('[{"completeRun": {"result": {"json": %s}}}]',
                                         to_jsonb(repeat('x', 2000)))),
                 '54000', NULL, 'commands over the limit: 54000');
SELECT throws_ok(format('SELECT dex.fail_task(%L, 1, %s, %L)', :'run', :v,
                        jsonb_build_object('message', repeat('x', 2000))),
                 '54000', NULL, 'a failure over the limit: 54000');
SET LOCAL dex.max_payload_size = 1048576;

--
-- WD001: the lease is not held with that lock version
--
SELECT throws_ok(format('SELECT dex.complete_task(%L, 0, %s, ''[]'')', :'run', :v + 1000),
                 'WD001', NULL, 'complete_task with a lock version never issued: WD001');
SELECT throws_ok(format('SELECT dex.complete_task(%L, 0, 0, ''[]'')', :'run'),
                 'WD001', NULL, 'complete_task with lock version 0: WD001');
SELECT throws_ok(format('SELECT dex.complete_task(%L, 0, %s, ''[]'')', :'run', :v - 1),
                 'WD001', NULL, 'complete_task with an older lock version: WD001');
SELECT throws_ok(format('SELECT dex.complete_task(%L, 7, %s, ''1'')', :'run', :v),
                 'WD001', NULL, 'complete_task of an activity task that does not exist: WD001');
SELECT throws_ok(format('SELECT dex.fail_task(%L, 7, %s, ''{"message": "x"}'')', :'run', :v),
                 'WD001', NULL, 'fail_task of an activity task that does not exist: WD001');
SELECT throws_ok(format('SELECT dex.complete_task_pb(%L, 0, %s, %L::bytea)', :'run', :v + 1000,
                        dex.from_json('dex.v1.WorkflowTaskCompletion', '{}')),
                 'WD001', NULL, 'complete_task_pb with a stale lock version: WD001');

-- the messages say what went wrong and what to do
SELECT throws_ok(format('SELECT dex.complete_task(%L, 0, %s, ''[]'')', :'run', :v + 1000),
                 'WD001', format('workflow task of run %s is not leased with lock version %s', :'run', :v + 1000),
                 'the WD001 message names the run and the lock version');
SELECT throws_ok($$SELECT dex.create_run('w', 'tap-errors-nope')$$,
                 '42704', 'queue "tap-errors-nope" does not exist', 'the 42704 message names the queue');

--
-- nothing the refused calls tried was written, and the lease still works
--
SELECT is(pg_temp.state(), :'before', 'the refused calls changed nothing');
SELECT is((SELECT lock_version FROM dex.workflow_task WHERE run_id = :'run'), :v::bigint,
          'the workflow task keeps its lock version');
SELECT is((SELECT status FROM dex.get_run(:'run')), 'CREATED', 'the run is still CREATED');

-- valid calls of each function
SELECT lives_ok(format('SELECT dex.complete_task(%L, 0, %s, %L)', :'run', :v,
                       '[{"id": 1, "scheduleActivity": {"name": "a", "queue": "tap-errors-act"}}]'),
                'the task completes with its lease after all that');
SELECT is((SELECT status FROM dex.get_run(:'run')), 'RUNNING', 'and the run is RUNNING');
SELECT lives_ok($$SELECT * FROM dex.poll_tasks('tap-errors-wf', 'w', 1000, '365 days')$$,
                'poll_tasks takes max_tasks 1000 and a lease of 365 days');
SELECT lives_ok($$SELECT * FROM dex.poll_tasks_pb('tap-errors-act', repeat('w', 255), 1, '1 ms')$$,
                'poll_tasks_pb takes a 255-byte worker id and a 1 ms lease');
SELECT lives_ok($$SELECT dex.create_run(repeat('w', 255), 'tap-errors-wf', 'null', 2147483647, NULL, 100, '{}', NULL)$$,
                'create_run takes a 255-byte name, a JSON null argument, the largest version, priority 100 and empty labels');
SELECT lives_ok($$SELECT dex.create_queue('tap-errors-cap', 'activity', 2147483647)$$,
                'create_queue takes the largest capacity');
SELECT lives_ok($$SELECT dex.wake_scheduler()$$, 'wake_scheduler can be called in a transaction');
SELECT lives_ok($$SELECT dex.payload_value(dex.from_json('dex.v1.Payload', '{"json": "[1]"}'))$$,
                'payload_value decodes a payload');
SELECT is(dex.payload_value(dex.from_json('dex.v1.Payload', '{"json": "{\"a\": [1, 2]}"}')),
          '{"a": [1, 2]}'::jsonb, 'a JSON payload decodes to its value');
SELECT is(dex.payload_value(dex.from_json('dex.v1.Payload', '{"binary": "AQI="}')),
          '{"binary": "AQI="}'::jsonb, 'a binary payload decodes to its canonical JSON');
SELECT is(dex.to_json('dex.v1.Failure', dex.from_json('dex.v1.Failure', '{"message": "m", "terminal": true}')),
          '{"message": "m", "terminal": true}'::jsonb, 'from_json and to_json round-trip');

-- with the same lock version, completing twice is refused the second time
SELECT throws_ok(format('SELECT dex.complete_task(%L, 0, %s, ''[]'')', :'run', :v),
                 'WD001', NULL, 'completing the same workflow task again: WD001');

SELECT * FROM finish();
ROLLBACK;
