\set QUIET 1
SELECT 1 FROM (SELECT dex.create_queue('spin3-wf', 'workflow') WHERE NOT EXISTS (SELECT 1 FROM dex.queue WHERE name='spin3-wf')) x;
SELECT dex.create_run('spin', 'spin3-wf') AS run \gset
SELECT lock_version AS v FROM dex.poll_tasks('spin3-wf', 'w') \gset
SELECT dex.complete_task(:'run', 0, :v, '[{"id": 1, "startTimer": {"name": "t", "delay": "0.5s"}}]');
BEGIN;
SELECT count(*) AS locked FROM (SELECT 1 FROM dex.workflow_inbox WHERE run_id = :'run' FOR UPDATE) x;
SELECT xact_commit AS c0 FROM pg_stat_database WHERE datname = current_database() \gset
SELECT pg_stat_clear_snapshot();
SELECT pg_sleep(2.5);
SELECT pg_stat_clear_snapshot();
SELECT xact_commit - :c0 AS commits_in_2_5s FROM pg_stat_database WHERE datname = current_database();
SELECT pid, state, wait_event_type, wait_event FROM pg_stat_activity WHERE backend_type = 'dex scheduler';
COMMIT;
