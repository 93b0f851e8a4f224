\set QUIET 1
SELECT 1 FROM (SELECT dex.create_queue('order2-wf', 'workflow')) x;
SELECT dex.create_run('order', 'order2-wf') AS run \gset
SELECT lock_version AS v FROM dex.poll_tasks('order2-wf', 'w') \gset
SELECT dex.complete_task(:'run', 0, :v, '[{"id": 1, "waitExternalEvent": {"eventId": "go", "timeout": "1s"}}]');
SELECT dex.send_external_event(:'run', 'go') AS sent_in_time;   -- 1 s before the deadline
SELECT pg_sleep(1.5);                                            -- no worker polled meanwhile
SELECT jsonb_path_query(task, '$.newEvents[*]') AS shown FROM dex.poll_tasks('order2-wf', 'w');
