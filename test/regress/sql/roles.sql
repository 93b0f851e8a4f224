-- Roles: dex_client starts and steers runs, dex_worker leases and reports on tasks,
-- dex_admin does both and manages queues; nobody else calls dex, and nobody touches
-- the tables but through the API.
CREATE ROLE regress_dex_client IN ROLE dex_client;
CREATE ROLE regress_dex_worker IN ROLE dex_worker;
CREATE ROLE regress_dex_admin IN ROLE dex_admin;
CREATE ROLE regress_dex_nobody;

-- the admin makes queues
SET ROLE regress_dex_admin;
SELECT dex.create_queue('roles-wf', 'workflow');
SELECT dex.create_queue('roles-act', 'activity');
SELECT dex.alter_queue('roles-act', capacity => 5);
-- but, not being a superuser, touches no table but through the API
\set VERBOSITY sqlstate
SELECT count(*) FROM dex.workflow_run;
INSERT INTO dex.queue_grant (queue_id, grantee) SELECT id, 'regress_dex_nobody'::regrole FROM dex.queue LIMIT 1;
\set VERBOSITY default
RESET ROLE;

-- a client starts a run and reads it
SET ROLE regress_dex_client;
SELECT dex.create_run('greet', 'roles-wf', '"world"') AS run \gset
SELECT workflow_name, status FROM dex.get_run(:'run');
SELECT count(*) AS listed FROM dex.list_runs(workflow_name => 'greet');
SELECT count(*) AS in_view FROM dex.runs WHERE id = :'run';
SELECT dex.send_external_event(:'run', 'hello') AS sent;
-- but leases no task, makes no queue, and reads no table
\set VERBOSITY sqlstate
SELECT count(*) FROM dex.poll_tasks('roles-wf', 'w');
SELECT dex.create_queue('roles-x', 'workflow');
SELECT count(*) FROM dex.workflow_run;
SELECT count(*) FROM dex.workflow_history;
\set VERBOSITY default
RESET ROLE;

-- a worker waits, leases and completes
SET ROLE regress_dex_worker;
CALL dex.wait_for_tasks('roles-wf', '0 s');
SELECT dex.complete_task(run_id, 0, lock_version,
       '[{"id": 1, "scheduleActivity": {"name": "a", "queue": "roles-act"}}]')
  FROM dex.poll_tasks('roles-wf', 'w');
SELECT dex.heartbeat_task(run_id, task_id, lock_version, '1 minute') IS NOT NULL AS heartbeat,
       dex.complete_task(run_id, task_id, lock_version, '"done"') IS NOT NULL AS completed
  FROM dex.poll_tasks('roles-act', 'w');
SELECT dex.complete_task(run_id, 0, lock_version, '[{"completeRun": {}}]')
  FROM dex.poll_tasks('roles-wf', 'w');
-- but starts no run, cancels none, and cannot forge a lease
\set VERBOSITY sqlstate
SELECT dex.create_run('greet', 'roles-wf');
SELECT dex.cancel_run(:'run');
UPDATE dex.workflow_task SET lock_version = lock_version + 1;
SELECT dex.alter_queue('roles-act', paused => true);
\set VERBOSITY default
RESET ROLE;

SET ROLE regress_dex_client;
SELECT status FROM dex.get_run(:'run');
RESET ROLE;

-- a role without dex's roles can call nothing
SET ROLE regress_dex_nobody;
\set VERBOSITY sqlstate
SELECT dex.to_json('dex.v1.Payload', '\x');
SELECT status FROM dex.get_run(:'run');
CALL dex.wait_for_tasks('roles-wf', '0 s');
SELECT count(*) FROM dex.runs;
SELECT count(*) FROM dex.queue;
\set VERBOSITY default
RESET ROLE;

DROP ROLE regress_dex_client, regress_dex_worker, regress_dex_admin, regress_dex_nobody;
