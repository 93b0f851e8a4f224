--
-- errors: bad input is refused with a clear error and its SQLSTATE, and changes nothing
--
-- a fingerprint of everything dex stores, to show that refused calls write nothing
CREATE FUNCTION pg_temp.state() RETURNS text LANGUAGE sql AS $$
    SELECT md5(concat_ws('|',
        (SELECT string_agg(concat_ws(',', id, status, history_length, last_event_id, custom_status,
                                     md5(coalesce(result, '')), md5(coalesce(failure, ''))), ';' ORDER BY id)
           FROM dex.workflow_run),
        (SELECT string_agg(concat_ws(',', run_id, sequence, md5(events)), ';' ORDER BY run_id, sequence)
           FROM dex.workflow_history),
        (SELECT string_agg(concat_ws(',', run_id, id, visible_from), ';' ORDER BY id) FROM dex.workflow_inbox),
        (SELECT string_agg(concat_ws(',', run_id, locked_by, lock_version), ';' ORDER BY run_id) FROM dex.workflow_task),
        (SELECT string_agg(concat_ws(',', run_id, event_id, status, attempt, locked_by, lock_version), ';'
                           ORDER BY run_id, event_id) FROM dex.activity_task),
        (SELECT string_agg(name, ';' ORDER BY id) FROM dex.queue)))
$$;

SELECT dex.create_queue('errors-wf', 'workflow');
SELECT dex.create_run('errors', 'errors-wf') AS run \gset
SELECT lock_version AS v FROM dex.poll_tasks('errors-wf', 'w') \gset
SELECT pg_temp.state() AS before \gset

-- an error's SQLSTATE and message, with run ids masked, for messages that name them
CREATE FUNCTION pg_temp.error_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    state text; message text; detail text; hint text;
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                            detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    RETURN regexp_replace(regexp_replace(
               concat_ws(E'\n', state || ': ' || message, nullif(detail, ''), nullif(hint, '')),
               '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', '<run>', 'g'),
           'lock version [0-9]+', 'lock version <n>', 'g');
END $$;

\set VERBOSITY sqlstate
-- create_run
SELECT dex.create_run('w', 'no-such-queue');
SELECT dex.create_run('w', 'payments.activities');
SELECT dex.create_run(NULL, 'orders');
SELECT dex.create_run('', 'orders');
SELECT dex.create_run(repeat('w', 256), 'orders');
SELECT dex.create_run('w', 'orders', workflow_version => 0);
SELECT dex.create_run('w', 'orders', priority => 101);
SELECT dex.create_run('w', 'orders', priority => -1);
SELECT dex.create_run('w', 'orders', labels => '["a"]');
SELECT dex.create_run('w', 'orders', labels => '{"a": 1}');
SELECT dex.create_run('w', 'orders', instance_id => '');
-- poll_tasks
SELECT * FROM dex.poll_tasks('no-such-queue', 'w');
SELECT * FROM dex.poll_tasks('orders', '');
SELECT * FROM dex.poll_tasks('orders', 'w', 0);
SELECT * FROM dex.poll_tasks('orders', 'w', 1001);
SELECT * FROM dex.poll_tasks('orders', 'w', 1, '0 s');
SELECT * FROM dex.poll_tasks('orders', 'w', 1, '-1 s');
SELECT * FROM dex.poll_tasks('orders', 'w', 1, '400 days');
SELECT * FROM dex.poll_tasks('orders', NULL);
-- complete_task: malformed commands
SELECT dex.complete_task(:'run', 0, :v, '[{"scheduleActivity": {"name": "a", "queue": "payments.activities"}}]');
SELECT dex.complete_task(:'run', 0, :v, '[{"id": 1, "scheduleActivity": {"name": "", "queue": "payments.activities"}}]');
SELECT dex.complete_task(:'run', 0, :v, '[{"id": 1, "scheduleActivity": {"name": "a", "queue": "nope"}}]');
SELECT dex.complete_task(:'run', 0, :v, '[{"id": 1, "scheduleActivity": {"name": "a", "queue": "orders"}}]');
SELECT dex.complete_task(:'run', 0, :v, '[{"id": 1, "scheduleActivity": {"name": "a", "queue": "payments.activities", "retryPolicy": {"maxAttempts": -1}}}]');
SELECT dex.complete_task(:'run', 0, :v, '[{"id": 1, "scheduleActivity": {"name": "a", "queue": "payments.activities", "retryPolicy": {"multiplier": 0.5}}}]');
SELECT dex.complete_task(:'run', 0, :v, '[{"id": 1, "startTimer": {"name": "t"}}]');
SELECT dex.complete_task(:'run', 0, :v, '[{"id": 1, "startTimer": {"name": "t", "delay": "-1s"}}]');
SELECT dex.complete_task(:'run', 0, :v, '[{"completeRun": {}}, {"id": 1, "startTimer": {"delay": "1s"}}]');
SELECT dex.complete_task(:'run', 0, :v, '[{"failRun": {}}]');
SELECT dex.complete_task(:'run', 0, :v, '[{"id": 1}]');
SELECT dex.complete_task(:'run', 0, :v, '[{"completeRun": {"result": {"jsn": "1"}}}]');
SELECT dex.complete_task(:'run', 0, :v, '{"commands": {"completeRun": {}}}');
SELECT dex.complete_task(:'run', 0, :v, '"complete"');
SELECT dex.complete_task(:'run', 0, :v, NULL);
SELECT dex.complete_task_pb(:'run', 0, :v, '\xdeadbeef');
-- complete_task and fail_task: unknown runs, stale leases, wrong task kinds
SELECT dex.complete_task('00000000-0000-7000-8000-000000000000', 0, :v, '[]');
SELECT dex.complete_task(:'run', 0, :v + 1000, '[]');
SELECT dex.complete_task(:'run', 0, 0, '[]');
SELECT dex.complete_task(:'run', 7, :v, '1');
SELECT dex.complete_task(:'run', -1, :v, '1');
SELECT dex.complete_task(NULL, 0, :v, '[]');
SELECT dex.fail_task(:'run', 7, :v, '{"message": "x"}');
SELECT dex.fail_task(:'run', 7, :v, '{"msg": "x"}');
SELECT dex.fail_task(:'run', 7, :v, NULL);
SELECT dex.fail_task_pb(:'run', 7, :v, '\xff');
-- payload limit
SET dex.max_payload_size = 1024;
SELECT dex.create_run('w', 'orders', to_jsonb(repeat('x', 2000)));
RESET dex.max_payload_size;
-- reading
SELECT * FROM dex.get_run('00000000-0000-7000-8000-000000000000');
SELECT * FROM dex.run_history('00000000-0000-7000-8000-000000000000');
\set VERBOSITY default

SELECT pg_temp.state() = :'before' AS nothing_changed;

-- the messages say what is wrong and what to do
SELECT dex.create_run('w', 'no-such-queue');
SELECT dex.create_run('w', 'payments.activities');
SELECT pg_temp.error_of(format('SELECT dex.complete_task(%L, 0, %s, ''[]'')', :'run', :v + 1000));
SELECT pg_temp.error_of(format('SELECT dex.complete_task(%L, 3, %s, ''1'')', :'run', :v));
SELECT dex.complete_task('00000000-0000-7000-8000-000000000000', 0, 1, '[]');
SET dex.max_payload_size = 1024;
SELECT dex.create_run('w', 'orders', to_jsonb(repeat('x', 2000)));
RESET dex.max_payload_size;

-- the task still completes with its lease after all that
SELECT dex.complete_task(:'run', 0, :v, '[{"completeRun": {}}]');
SELECT status FROM dex.get_run(:'run');

-- a completion that reuses a command id did not replay deterministically (a bad
-- deploy): none of its commands is applied, and its workflow task fails (not the
-- run), recorded as an attempt and retried after a backoff; the warning names the run
SET client_min_messages = error;
SELECT dex.create_run('errors', 'errors-wf') AS run \gset
SELECT lock_version AS v FROM dex.poll_tasks('errors-wf', 'w') \gset
SELECT dex.complete_task(:'run', 0, :v,
    '[{"id": 1, "scheduleActivity": {"name": "a", "queue": "payments.activities"}},
      {"id": 1, "startTimer": {"delay": "1s"}}]');
SELECT status, task_failures, last_task_failure FROM dex.runs WHERE id = :'run';
SELECT (SELECT count(*) FROM dex.activity_task WHERE run_id = :'run') AS activities,
       (SELECT count(*) FROM dex.workflow_inbox WHERE run_id = :'run') AS timers,
       (SELECT locked_until > now() FROM dex.workflow_task WHERE run_id = :'run') AS backing_off;
SELECT task, event_id, attempt, outcome, failure->>'type' AS type FROM dex.run_attempts(:'run');
-- the lease is gone: the same completion again is a lost lease
SELECT pg_temp.error_of(format('SELECT dex.complete_task(%L, 0, %s, ''[{"completeRun": {}}]'')', :'run', :v));
-- the same for an id recorded by an earlier task
SELECT dex.create_run('errors', 'errors-wf') AS run \gset
SELECT lock_version AS v FROM dex.poll_tasks('errors-wf', 'w') \gset
SELECT dex.complete_task(:'run', 0, :v, '[{"id": 1, "recordSideEffect": {"name": "x"}}]');
SELECT dex.send_external_event(:'run', 'go');
SELECT lock_version AS v FROM dex.poll_tasks('errors-wf', 'w') \gset
SELECT dex.complete_task(:'run', 0, :v, '[{"id": 1, "recordSideEffect": {"name": "x"}}]');
SELECT status, task_failures, last_task_failure->>'type' AS type FROM dex.runs WHERE id = :'run';
RESET client_min_messages;
