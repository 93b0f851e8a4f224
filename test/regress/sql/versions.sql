--
-- versions: version-aware dispatch (dex 1.6).  A poll may declare what its
-- worker runs: the (workflow, version) pairs on a workflow queue, the activity
-- names on an activity queue; it then gets only those tasks, best priority
-- and oldest first across what it declared.  What no worker takes shows in
-- dex.unserved; dex.set_run_version moves a run to another version; a marker
-- command records what ctx.patched finds on replay.
--
SELECT dex.create_queue('vs-wf', 'workflow'), dex.create_queue('vs-act', 'activity'),
       dex.create_queue('vs-idle', 'workflow');

-- what a poll leased: workflow and version of each task's run, best first
CREATE FUNCTION pg_temp.leased(tasks jsonb) RETURNS text LANGUAGE sql AS $$
SELECT coalesce(string_agg(format('%s v%s', t->>'workflowName', t->>'workflowVersion'), ', '
                           ORDER BY o), 'none')
  FROM jsonb_array_elements(tasks) WITH ORDINALITY AS a(t, o)
$$;

-- 1. three runs of version 1, two of version 2, one of another workflow
SELECT count(*) FROM (SELECT dex.create_run('order', 'vs-wf', workflow_version => 1)
                        FROM generate_series(1, 3)) s;
SELECT count(*) FROM (SELECT dex.create_run('order', 'vs-wf', workflow_version => 2)
                        FROM generate_series(1, 2)) s;
SELECT dex.create_run('refund', 'vs-wf', workflow_version => 1, priority => 5) IS NOT NULL AS created;
-- each task carries its run's workflow and version
SELECT workflow_name, workflow_version, count(*) FROM dex.workflow_task t
  JOIN dex.queue q ON q.id = t.queue_id AND q.name = 'vs-wf' GROUP BY 1, 2 ORDER BY 1, 2;

-- 2. a version-2 worker gets version 2 only, however many it asks for
SELECT pg_temp.leased(jsonb_agg(task ORDER BY locked_until, run_id))
  FROM dex.poll_tasks('vs-wf', 'v2', 10, names => '{order}', versions => '{2}');
-- a worker of versions it has no task of gets none
SELECT count(*) FROM dex.poll_tasks('vs-wf', 'v9', 10, names => '{order,refund}', versions => '{9,2}');
-- one that runs order v1 and refund v1 gets the better priority first, then the oldest,
-- no more than it asked for
SELECT pg_temp.leased(jsonb_agg(task ORDER BY ord))
  FROM dex.poll_tasks('vs-wf', 'v1', 2, names => '{order,refund,order}', versions => '{1,1,1}')
  WITH ORDINALITY AS p(kind, run_id, task_id, lock_version, locked_until, task, ord);
-- a worker that declares nothing takes any task, as before 1.6
SELECT pg_temp.leased(jsonb_agg(task)) FROM dex.poll_tasks('vs-wf', 'any', 10);

-- 3. activities: a worker gets only the activities it declared
SELECT dex.create_run('acts', 'vs-wf') AS a \gset
SELECT dex.complete_task(:'a', 0, lock_version, '[
    {"id": 1, "scheduleActivity": {"name": "charge", "queue": "vs-act"}},
    {"id": 2, "scheduleActivity": {"name": "ship", "queue": "vs-act"}},
    {"id": 3, "scheduleActivity": {"name": "charge", "queue": "vs-act"}}]')
  FROM dex.poll_tasks('vs-wf', 'w', 1, names => '{acts}', versions => '{1}');
SELECT task->>'name' AS name, task_id FROM dex.poll_tasks('vs-act', 'shipper', 10, names => '{ship}');
SELECT task->>'name' AS name, task_id FROM dex.poll_tasks('vs-act', 'charger', 1, names => '{charge,refund}');
SELECT task->>'name' AS name, task_id FROM dex.poll_tasks('vs-act', 'shipper', 10, names => '{ship}');

-- 4. the one-call wait declares too: it takes the version it runs, not the other
SELECT dex.create_run('order', 'vs-wf', workflow_version => 3) IS NOT NULL AS created;
SELECT dex.create_run('order', 'vs-wf', workflow_version => 4) IS NOT NULL AS created;
CALL dex.poll_tasks_wait('vs-wf', 'v4', 10, '1 min', '0 s', names => '{order}', versions => '{4}') \gset
SELECT pg_temp.leased(:'tasks');
CALL dex.poll_tasks_wait_pb('vs-wf', 'v4', 10, '1 min', '0 s', names => '{order}', versions => '{4}');
CALL dex.poll_tasks_wait_pb('vs-wf', 'v3', 10, '1 min', '0 s', names => '{order}', versions => '{3}') \gset
SELECT cardinality(:'tasks'::bytea[]) AS leased,
       dex.to_json('dex.v1.WorkflowTask', (:'tasks'::bytea[])[1])->>'workflowVersion' AS version;

-- 5. what no worker serves: two runs of version 7 on a queue no worker polled
SELECT count(*) FROM (SELECT dex.create_run('order', 'vs-idle', workflow_version => 7)
                        FROM generate_series(1, 2)) s;
SELECT dex.create_run('order', 'vs-idle', workflow_version => 8) IS NOT NULL AS created;
SELECT pg_sleep(0.6);
SELECT queue, kind, name, version, tasks, waiting_since <= now() - interval '0.5 s' AS waiting,
       last_polled FROM dex.unserved('0.5 s') WHERE queue = 'vs-idle' ORDER BY version;
-- a worker of version 7 polls: those are served (one is leased, the other waits for it)
SELECT count(*) FROM dex.poll_tasks('vs-idle', 'v7', 1, names => '{order}', versions => '{7}');
SELECT name, version, tasks, last_polled FROM dex.unserved('0.5 s') WHERE queue = 'vs-idle';
SELECT dex.last_polled(id, 'order', 7) > now() - interval '1 min' AS v7_polled,
       dex.last_polled(id, 'order', 8) IS NULL AS v8_never,
       dex.last_polled(id) = dex.last_polled(id, 'order', 7) AS any_is_latest
  FROM dex.queue WHERE name = 'vs-idle';
-- the view: one minute idle
SELECT count(*) FROM dex.unserved WHERE queue = 'vs-idle';

-- 6. an operator moves the version-8 run to version 7: the version-7 worker takes it
SELECT id AS r8 FROM dex.workflow_run WHERE workflow_version = 8 \gset
SELECT dex.set_run_version(:'r8', 7);
SELECT workflow_version FROM dex.workflow_run WHERE id = :'r8';
SELECT workflow_version FROM dex.workflow_task WHERE run_id = :'r8';
SELECT run_id = :'r8' AS moved, task->>'workflowVersion' AS version
  FROM dex.poll_tasks('vs-idle', 'v7', 10, names => '{order}', versions => '{7}')
 ORDER BY 1;
-- a run that ended keeps its version
SELECT dex.terminate_run(:'r8');
\set VERBOSITY sqlstate
SELECT dex.set_run_version(:'r8', 9);
\set VERBOSITY default
SELECT workflow_version FROM dex.workflow_run WHERE id = :'r8';

-- 7. bad input: a clear error, nothing leased
SELECT count(*) AS ready_before FROM dex.workflow_task t JOIN dex.queue q ON q.id = t.queue_id
 WHERE q.name = 'vs-wf' AND t.locked_by IS NULL \gset
SELECT * FROM dex.poll_tasks('vs-wf', 'x', 1, names => '{}', versions => '{}');
SELECT * FROM dex.poll_tasks('vs-wf', 'x', 1, names => '{order}');
SELECT * FROM dex.poll_tasks('vs-wf', 'x', 1, names => '{order}', versions => '{1,2}');
SELECT * FROM dex.poll_tasks('vs-wf', 'x', 1, names => '{order}', versions => '{0}');
SELECT * FROM dex.poll_tasks('vs-wf', 'x', 1, names => '{order}', versions => '{NULL}');
SELECT * FROM dex.poll_tasks('vs-wf', 'x', 1, names => '{NULL}', versions => '{1}');
SELECT * FROM dex.poll_tasks('vs-wf', 'x', 1, names => '{""}', versions => '{1}');
SELECT * FROM dex.poll_tasks('vs-wf', 'x', 1, names => '{{a},{b}}', versions => '{1,1}');
SELECT * FROM dex.poll_tasks('vs-wf', 'x', 1, versions => '{1}');
SELECT * FROM dex.poll_tasks('vs-act', 'x', 1, names => '{ship}', versions => '{1}');
SELECT * FROM dex.poll_tasks('vs-wf', 'x', 1, names => array_fill('order'::text, '{1001}'),
                             versions => array_fill(1, '{1001}'));
CALL dex.poll_tasks_wait('vs-wf', 'x', 1, '1 min', '0 s', names => '{order}');
\set VERBOSITY sqlstate
SELECT * FROM dex.poll_tasks('vs-wf', 'x', 1, names => '{}', versions => '{}');
SELECT * FROM dex.poll_tasks('vs-wf', 'x', 1, names => '{order}', versions => '{NULL}');
SELECT * FROM dex.poll_tasks('vs-wf', 'x', 1, names => array_fill('order'::text, '{1001}'),
                             versions => array_fill(1, '{1001}'));
SELECT dex.set_run_version(NULL, 1);
SELECT dex.set_run_version(:'a', 0);
SELECT dex.set_run_version('00000000-0000-7000-8000-000000000000', 2);
\set VERBOSITY default
SELECT count(*) = :ready_before AS nothing_leased FROM dex.workflow_task t
  JOIN dex.queue q ON q.id = t.queue_id WHERE q.name = 'vs-wf' AND t.locked_by IS NULL;
-- the most a poll may declare is fine
SELECT count(*) FROM dex.poll_tasks('vs-wf', 'x', 1, names => array_fill('nothing'::text, '{1000}'),
                                    versions => array_fill(1, '{1000}'));

-- 8. markers: a workflow task records one (what ctx.patched records), the history has it;
-- one without a name is refused, and changes nothing
SELECT dex.create_run('marked', 'vs-wf') AS m \gset
SELECT lock_version AS v FROM dex.poll_tasks('vs-wf', 'w', 1, names => '{marked}', versions => '{1}') \gset
SELECT dex.complete_task(:'m', 0, :v, '[{"id": 1, "recordMarker": {"name": ""}}]');
SELECT dex.complete_task(:'m', 0, :v, '[{"id": 1, "recordMarker": {"details": {"json": "1"}}}]');
SELECT dex.complete_task(:'m', 0, :v,
    '[{"id": 1, "recordMarker": {"name": "dex.patch:use-new-step", "details": {"json": "{\"deprecated\": false}"}}}]');
SELECT event->'id' AS id, event->'markerRecorded' AS marker
  FROM dex.run_history(:'m') WHERE event ? 'markerRecorded';

-- 9. a declared poll reads its keys' index, not the queue's backlog, even where the
-- statistics say one other workflow fills the queue (and its long name makes the keys'
-- index the larger one)
SELECT dex.create_queue('vs-skew', 'workflow');
SELECT count(*) FROM dex.create_runs(repeat('b', 200), 'vs-skew', array_fill('0'::jsonb, ARRAY[5000]));
ANALYZE dex.workflow_task;
SELECT dex.create_run('rare', 'vs-skew', workflow_version => 2) IS NOT NULL AS created;
SELECT pg_stat_force_next_flush();
CREATE TEMP TABLE index_reads AS
SELECT regexp_replace(indexrelname, '^workflow_task_', '') AS index, idx_tup_read
  FROM pg_stat_user_indexes WHERE schemaname = 'dex' AND relname = 'workflow_task';
-- a generic plan, as a worker's session gets after five polls
SET plan_cache_mode = force_generic_plan;
SELECT task->>'workflowName' AS workflow
  FROM dex.poll_tasks('vs-skew', 'w', 1, names => '{rare,other}', versions => '{2,1}');
RESET plan_cache_mode;
SELECT pg_stat_force_next_flush();
SELECT i.index, s.idx_tup_read - i.idx_tup_read AS entries_read
  FROM index_reads i
  JOIN pg_stat_user_indexes s ON s.schemaname = 'dex' AND s.relname = 'workflow_task'
   AND regexp_replace(s.indexrelname, '^workflow_task_', '') = i.index
 ORDER BY 1;
