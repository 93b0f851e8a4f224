-- Queue capacity (most tasks leased at once) and pause, changed at run time
SELECT dex.create_queue('cap-wf', 'workflow');
SELECT dex.create_queue('cap-act', 'activity', capacity => 2);
SELECT name, status, capacity FROM dex.queue WHERE name LIKE 'cap-%' ORDER BY name;

-- a run that schedules five activities
SELECT dex.create_run('fan', 'cap-wf') AS run \gset
SELECT dex.complete_task(run_id, 0, lock_version,
       (SELECT jsonb_agg(jsonb_build_object('id', i, 'scheduleActivity',
                                            jsonb_build_object('name', 'a', 'queue', 'cap-act')))
          FROM generate_series(1, 5) i))
  FROM dex.poll_tasks('cap-wf', 'w');

-- at most two leased at once, however many a poll asks for
SELECT count(*) AS leased FROM dex.poll_tasks('cap-act', 'w1', 10);
SELECT count(*) AS leased FROM dex.poll_tasks('cap-act', 'w2', 10);
CALL dex.wait_for_tasks('cap-act', '0 s');
-- a completion makes room for one more
SELECT dex.complete_task(run_id, event_id, lock_version, '"done"')
  FROM dex.activity_task a JOIN dex.queue q ON q.id = a.queue_id
 WHERE q.name = 'cap-act' AND a.locked_by = 'w1' ORDER BY event_id LIMIT 1;
CALL dex.wait_for_tasks('cap-act', '0 s');
SELECT count(*) AS leased FROM dex.poll_tasks('cap-act', 'w2', 10);

-- paused: nothing is handed out, and waiting workers see no work
SELECT dex.alter_queue('cap-act', capacity => 0, paused => true);
SELECT name, status, capacity FROM dex.queue WHERE name = 'cap-act';
SELECT count(*) AS leased FROM dex.poll_tasks('cap-act', 'w3', 10);
CALL dex.wait_for_tasks('cap-act', '0 s');
-- resumed without a limit: the rest is handed out
SELECT dex.alter_queue('cap-act', paused => false);
SELECT name, status, capacity FROM dex.queue WHERE name = 'cap-act';
SELECT count(*) AS leased FROM dex.poll_tasks('cap-act', 'w3', 10);

-- a workflow queue can be paused too; creating runs still works
SELECT dex.alter_queue('cap-wf', paused => true);
SELECT dex.create_run('later', 'cap-wf') IS NOT NULL AS created;
SELECT count(*) AS leased FROM dex.poll_tasks('cap-wf', 'w', 10);
SELECT dex.alter_queue('cap-wf', paused => false);
SELECT count(*) AS leased FROM dex.poll_tasks('cap-wf', 'w', 10);

-- bad input changes nothing
\set VERBOSITY sqlstate
SELECT dex.alter_queue('no-such-queue', paused => true);
SELECT dex.alter_queue('cap-act', capacity => -1);
SELECT dex.alter_queue(NULL, paused => true);
SELECT dex.create_queue('cap-bad', 'activity', capacity => 0);
\set VERBOSITY default
SELECT name, status, capacity FROM dex.queue WHERE name LIKE 'cap-%' ORDER BY name;
