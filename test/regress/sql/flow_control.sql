--
-- Flow control (1.7): rate limits of queues, concurrency limits of keys
--
SELECT dex.create_queue('fc-act', 'activity');
SELECT dex.create_queue('fc-wf', 'workflow');
\set VERBOSITY sqlstate

-- bad input: a clear SQLSTATE, and nothing changed
SELECT dex.alter_queue('fc-act', rate_limit => -1);
SELECT dex.alter_queue('fc-act', rate_limit => 1000001);
SELECT dex.alter_queue('fc-act', rate_limit => 5, rate_period => '0 s');
SELECT dex.alter_queue('fc-act', rate_limit => 5, rate_period => '-1 s');
SELECT dex.alter_queue('fc-act', rate_limit => 5, rate_period => '2 days');
SELECT dex.alter_queue('fc-act', rate_limit => 5, rate_period => '1 month');
SELECT dex.alter_queue('fc-act', rate_limit => 0, rate_period => '1 s');
SELECT dex.alter_queue('fc-act', rate_period => '1 s');          -- no limit to give a period to
SELECT dex.alter_queue('fc-act', concurrency_limit => 2);        -- activity queues have no keys
SELECT dex.alter_queue('fc-wf', concurrency_limit => 0);
SELECT dex.alter_queue('fc-wf', concurrency_limit => 1001);
SELECT dex.alter_queue('fc-nope', rate_limit => 5);
SELECT dex.alter_queue(NULL, rate_limit => 5);
SELECT dex.set_concurrency_limit('fc-wf', 'k', 0);
SELECT dex.set_concurrency_limit('fc-wf', 'k', 1001);
SELECT dex.set_concurrency_limit('fc-wf', '', 2);
SELECT dex.set_concurrency_limit('fc-wf', NULL, 2);
SELECT dex.set_concurrency_limit(NULL, 'k', 2);
SELECT dex.set_concurrency_limit('fc-nope', 'k', 2);
SELECT dex.set_concurrency_limit('fc-act', 'k', 2);
\set VERBOSITY terse
SELECT queue, capacity, rate_limit, rate_period, tokens, tasks_granted, polls_throttled,
       concurrency_limit, keys_with_limits
  FROM dex.queue_limits WHERE queue LIKE 'fc-%' ORDER BY queue;
SELECT count(*) AS key_limits FROM dex.concurrency_limits WHERE queue = 'fc-wf';

-- old calls keep working, by position and by name
SELECT dex.alter_queue('fc-act', 10, false);
SELECT dex.alter_queue('fc-act', capacity => 0);

-- a rate limit: at most 3 tasks per hour (the bucket starts full)
SELECT dex.alter_queue('fc-act', rate_limit => 3, rate_period => '1 hour');
SELECT queue, rate_limit, rate_period FROM dex.queue_limits WHERE queue = 'fc-act';
-- a workflow that schedules eight activities
SELECT dex.create_run('fan', 'fc-wf') AS run \gset
SELECT dex.complete_task(run_id, 0, lock_version,
       (SELECT jsonb_agg(jsonb_build_object('id', i, 'scheduleActivity',
                                            jsonb_build_object('name', 'a', 'queue', 'fc-act')))
          FROM generate_series(1, 8) i))
  FROM dex.poll_tasks('fc-wf', 'w');
-- polls get at most 3 in all, however many they ask for and however many there are
SELECT count(*) AS leased FROM dex.poll_tasks('fc-act', 'w1', 2);
SELECT count(*) AS leased FROM dex.poll_tasks('fc-act', 'w2', 10);
SELECT count(*) AS leased FROM dex.poll_tasks('fc-act', 'w3', 10);
SELECT count(*) AS leased FROM dex.poll_tasks_pb('fc-act', 'w3', 10);
-- a waiting worker sees no work while the bucket is empty
CALL dex.wait_for_tasks('fc-act', '0 s');
CALL dex.poll_tasks_wait('fc-act', 'w4', 10, '1 min', '0 s');
SELECT queue, rate_limit, tokens < 1 AS empty, next_token_at > now() AS refills_later,
       tasks_granted, polls_throttled >= 4 AS throttled
  FROM dex.queue_limits WHERE queue = 'fc-act';
-- an unused token is given back: a poll of an empty queue takes nothing
SELECT dex.alter_queue('fc-wf', rate_limit => 2, rate_period => '1 hour');
SELECT count(*) AS leased FROM dex.poll_tasks('fc-wf', 'w', 10);
SELECT queue, tokens, tasks_granted FROM dex.queue_limits WHERE queue = 'fc-wf';
-- a faster rate refills within the test: 1 token per 100 ms
SELECT dex.alter_queue('fc-act', rate_limit => 10, rate_period => '1 s');
SELECT rate_limit, rate_period FROM dex.queue_limits WHERE queue = 'fc-act';
SELECT pg_sleep(0.25);
SELECT count(*) BETWEEN 1 AND 5 AS refilled FROM dex.poll_tasks('fc-act', 'w5', 10);
-- a removal rolled back changes nothing: the limit and its bucket stay
BEGIN;
SELECT dex.alter_queue('fc-act', rate_limit => 0);
ROLLBACK;
SELECT rate_limit, tokens IS NOT NULL AS has_bucket FROM dex.queue_limits WHERE queue = 'fc-act';
-- the limit goes: the rest is handed out at once
SELECT dex.alter_queue('fc-act', rate_limit => 0);
SELECT queue, rate_limit, rate_period, tokens FROM dex.queue_limits WHERE queue = 'fc-act';
SELECT count(*) > 0 AS leased FROM dex.poll_tasks('fc-act', 'w6', 10);
SELECT count(*) AS buckets FROM dex.rate_limits() b JOIN dex.queue q ON q.id = b.queue_id
 WHERE q.name = 'fc-act' AND b.datid = (SELECT oid FROM pg_database WHERE datname = current_database());
SELECT dex.alter_queue('fc-wf', rate_limit => 0);

-- concurrency limits: key 'tenant' admits 2 runs at once
SELECT dex.set_concurrency_limit('fc-wf', 'tenant', 2);
SELECT queue, key, max_runs, active, waiting FROM dex.concurrency_limits WHERE queue = 'fc-wf';
SELECT dex.create_run('fc-k', 'fc-wf', '1', concurrency_key => 'tenant') AS k1 \gset
SELECT dex.create_run('fc-k', 'fc-wf', '2', concurrency_key => 'tenant') AS k2 \gset
SELECT dex.create_run('fc-k', 'fc-wf', '3', concurrency_key => 'tenant') AS k3 \gset
SELECT dex.create_run('fc-k', 'fc-wf', '4', concurrency_key => 'tenant', priority => 50) AS k4 \gset
SELECT dex.create_run('fc-k', 'fc-wf', '5', concurrency_key => 'tenant') AS k5 \gset
SELECT string_agg(r.argument::text, ' ' ORDER BY r.argument::text) AS admitted
  FROM dex.runs r JOIN dex.workflow_task t ON t.run_id = r.id WHERE r.workflow_name = 'fc-k';
SELECT queue, key, max_runs, active, waiting FROM dex.concurrency_limits WHERE queue = 'fc-wf';
-- one ends: exactly one more is admitted, the one with the highest priority
SELECT dex.cancel_run(:'k1');
SELECT string_agg(r.argument::text, ' ' ORDER BY r.argument::text) AS admitted
  FROM dex.runs r JOIN dex.workflow_task t ON t.run_id = r.id WHERE r.workflow_name = 'fc-k';
-- a raised limit admits at once
SELECT dex.set_concurrency_limit('fc-wf', 'tenant', 3);
SELECT string_agg(r.argument::text, ' ' ORDER BY r.argument::text) AS admitted
  FROM dex.runs r JOIN dex.workflow_task t ON t.run_id = r.id WHERE r.workflow_name = 'fc-k';
SELECT queue, key, max_runs, active, waiting FROM dex.concurrency_limits WHERE queue = 'fc-wf';
-- a lowered one lets the runs above it finish, and admits none until the key is under it
SELECT dex.set_concurrency_limit('fc-wf', 'tenant', 1);
SELECT dex.cancel_run(:'k2');
SELECT queue, key, max_runs, active, waiting FROM dex.concurrency_limits WHERE queue = 'fc-wf';
SELECT dex.cancel_run(:'k4');
SELECT queue, key, max_runs, active, waiting FROM dex.concurrency_limits WHERE queue = 'fc-wf';
SELECT dex.cancel_run(:'k3');
SELECT queue, key, max_runs, active, waiting FROM dex.concurrency_limits WHERE queue = 'fc-wf';
SELECT string_agg(r.argument::text, ' ' ORDER BY r.argument::text) AS admitted
  FROM dex.runs r JOIN dex.workflow_task t ON t.run_id = r.id WHERE r.workflow_name = 'fc-k';
-- NULL gives the key its queue's limit back; the queue's limit counts for every key
SELECT dex.set_concurrency_limit('fc-wf', 'tenant', NULL);
SELECT count(*) AS key_limits FROM dex.concurrency_limits WHERE queue = 'fc-wf';
SELECT dex.alter_queue('fc-wf', concurrency_limit => 2);
SELECT dex.create_run('fc-q', 'fc-wf', '1', concurrency_key => 'other') IS NOT NULL AS q1,
       dex.create_run('fc-q', 'fc-wf', '2', concurrency_key => 'other') IS NOT NULL AS q2,
       dex.create_run('fc-q', 'fc-wf', '3', concurrency_key => 'other') IS NOT NULL AS q3;
SELECT count(*) AS admitted FROM dex.runs r JOIN dex.workflow_task t ON t.run_id = r.id
 WHERE r.workflow_name = 'fc-q';
SELECT w.key, count(*) AS waiting FROM dex.concurrency_wait w JOIN dex.queue q ON q.id = w.queue_id
 WHERE q.name = 'fc-wf' GROUP BY w.key ORDER BY w.key;
SELECT queue, concurrency_limit, keys_with_limits FROM dex.queue_limits WHERE queue = 'fc-wf';
-- raised on the queue: the third is admitted at once
SELECT dex.alter_queue('fc-wf', concurrency_limit => 3);
SELECT count(*) AS admitted FROM dex.runs r JOIN dex.workflow_task t ON t.run_id = r.id
 WHERE r.workflow_name = 'fc-q';
SELECT count(*) AS waiting FROM dex.concurrency_wait w JOIN dex.queue q ON q.id = w.queue_id
 WHERE q.name = 'fc-wf';
SELECT dex.alter_queue('fc-wf', concurrency_limit => 1);
