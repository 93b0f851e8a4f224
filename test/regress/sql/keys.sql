--
-- keys: runs sharing a concurrency key execute one at a time
--
SELECT dex.create_queue('keys-wf', 'workflow');
SELECT dex.create_run('k', 'keys-wf', '"first"', concurrency_key => 'customer-1') AS r1 \gset
SELECT dex.create_run('k', 'keys-wf', '"second"', concurrency_key => 'customer-1') AS r2 \gset
SELECT dex.create_run('k', 'keys-wf', '"urgent"', concurrency_key => 'customer-1', priority => 50) AS r3 \gset
SELECT dex.create_run('k', 'keys-wf', '"doomed"', concurrency_key => 'customer-1') AS r4 \gset
SELECT dex.create_run('k', 'keys-wf', '"other key"', concurrency_key => 'customer-2') AS r5 \gset

-- only the first run of each key gets a task; an event for a waiting run does not start it
SELECT dex.send_external_event(:'r2', 'ping');
SELECT string_agg(argument::text, ' ' ORDER BY argument::text) AS admitted
  FROM dex.runs r JOIN dex.workflow_task t ON t.run_id = r.id WHERE r.workflow_name = 'k';

-- a waiting run that is cancelled leaves the queue
SELECT dex.cancel_run(:'r4');

-- the holder ends: the key goes to the waiting run with the highest priority
SELECT lock_version AS v FROM dex.poll_tasks('keys-wf', 'w', 10) WHERE run_id = :'r1' \gset
SELECT dex.complete_task(:'r1', 0, :v, '[{"completeRun": {}}]');
SELECT argument AS admitted FROM dex.runs r JOIN dex.workflow_task t ON t.run_id = r.id
 WHERE r.concurrency_key = 'customer-1';
-- a suspended holder keeps the key
SELECT lock_version AS v FROM dex.poll_tasks('keys-wf', 'w', 10) WHERE run_id = :'r3' \gset
SELECT dex.complete_task(:'r3', 0, :v, '[]');
SELECT dex.suspend_run(:'r3');
SELECT count(*) AS admitted FROM dex.workflow_task t JOIN dex.runs r ON r.id = t.run_id
 WHERE r.id = :'r2';
SELECT dex.resume_run(:'r3');
SELECT lock_version AS v FROM dex.poll_tasks('keys-wf', 'w', 10) WHERE run_id = :'r3' \gset
SELECT dex.complete_task(:'r3', 0, :v, '[{"completeRun": {}}]');
-- then the next in creation order; it sees the event that came while it waited
SELECT lock_version AS v, jsonb_path_query_array(task, '$.newEvents[*].externalEventReceived.eventId') AS events
  FROM dex.poll_tasks('keys-wf', 'w', 10) WHERE run_id = :'r2' \gset
\echo :events
SELECT dex.complete_task(:'r2', 0, :v, '[{"completeRun": {}}]');
SELECT argument, status FROM dex.runs WHERE workflow_name = 'k' ORDER BY id;
SELECT count(*) AS keys_held FROM dex.concurrency_slot WHERE key = 'customer-1';
SELECT count(*) AS waiting FROM dex.concurrency_wait WHERE key = 'customer-1';

-- keys are per workflow queue: a run of another queue with the same key is
-- admitted at once, and its runs queue behind each other only
SELECT dex.create_queue('keys-other', 'workflow');
SELECT dex.create_run('k2', 'keys-wf', '"holder"', concurrency_key => 'customer-9') AS k2a \gset
SELECT dex.create_run('k2', 'keys-other', '"other queue"', concurrency_key => 'customer-9') AS k2b \gset
SELECT dex.create_run('k2', 'keys-other', '"other queue, second"', concurrency_key => 'customer-9') AS k2c \gset
SELECT string_agg(r.argument::text, ' ' ORDER BY r.argument::text) AS admitted
  FROM dex.runs r JOIN dex.workflow_task t ON t.run_id = r.id WHERE r.workflow_name = 'k2';
SELECT dex.cancel_run(:'k2b');
SELECT string_agg(r.argument::text, ' ' ORDER BY r.argument::text) AS admitted
  FROM dex.runs r JOIN dex.workflow_task t ON t.run_id = r.id WHERE r.workflow_name = 'k2';
SELECT dex.cancel_run(:'k2a'), dex.cancel_run(:'k2c');
SELECT count(*) AS keys_held FROM dex.concurrency_slot WHERE key = 'customer-9';
