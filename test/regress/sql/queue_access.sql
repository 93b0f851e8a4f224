-- Queue grants: a role uses only the queues granted to it (or to a role whose
-- privileges it has); dex_admin and superusers use all.  Runs of other queues
-- do not exist for it; naming another queue, or reporting on its tasks, is
-- refused with 42501.  Every refusal changes nothing.
CREATE ROLE regress_a_client IN ROLE dex_client;
CREATE ROLE regress_a_worker IN ROLE dex_worker;
CREATE ROLE regress_b_client IN ROLE dex_client;
CREATE ROLE regress_b_worker IN ROLE dex_worker;
CREATE ROLE regress_a_member IN ROLE regress_a_worker;   -- has regress_a_worker's privileges
CREATE ROLE regress_qa_admin IN ROLE dex_admin;

SELECT dex.create_queue('qa-a-wf', 'workflow');
SELECT dex.create_queue('qa-a-act', 'activity');
SELECT dex.create_queue('qa-b-wf', 'workflow');
SELECT dex.create_queue('qa-b-act', 'activity');
SELECT dex.create_queue('qa-open', 'workflow');

-- a new queue is granted to dex_client and dex_worker
SELECT queue, kind, role FROM dex.queue_privileges WHERE queue LIKE 'qa-%' ORDER BY queue, role::text;

-- keep each tenant's queues to its roles
SET ROLE regress_qa_admin;
SELECT dex.revoke_queue(q, r)
  FROM unnest('{qa-a-wf,qa-a-act,qa-b-wf,qa-b-act}'::text[]) AS q,
       unnest('{dex_client,dex_worker}'::regrole[]) AS r;
SELECT dex.grant_queue('qa-a-wf', 'regress_a_client'), dex.grant_queue('qa-a-wf', 'regress_a_worker'),
       dex.grant_queue('qa-a-act', 'regress_a_worker');
SELECT dex.grant_queue('qa-b-wf', 'regress_b_client'), dex.grant_queue('qa-b-wf', 'regress_b_worker'),
       dex.grant_queue('qa-b-act', 'regress_b_worker');
SELECT dex.grant_queue('qa-a-wf', 'regress_a_client');   -- granted twice: still one grant
RESET ROLE;
SELECT queue, role FROM dex.queue_privileges WHERE queue LIKE 'qa-%' ORDER BY queue, role::text;

-- each client starts runs on its own queues only
SET ROLE regress_a_client;
SELECT dex.create_run('qa', 'qa-a-wf', '1', instance_id => 'qa-a-1') AS run_a \gset
SELECT dex.create_run('qa', 'qa-open', '3') IS NOT NULL AS open_queue;
\set VERBOSITY sqlstate
SELECT dex.create_run('qa', 'qa-b-wf', '2');
SELECT * FROM dex.create_runs('qa', 'qa-b-wf', '{1,2}');
\set VERBOSITY default
SELECT dex.create_run('qa', 'qa-b-wf', '2');
RESET ROLE;
SET ROLE regress_b_client;
SELECT dex.create_run('qa', 'qa-b-wf', '2', instance_id => 'qa-b-1') AS run_b \gset
RESET ROLE;

-- a client sees the runs of its queues only: B's run does not exist for A
SET ROLE regress_a_client;
SELECT queue, argument FROM dex.get_run(:'run_a');
SELECT queue, argument FROM dex.list_runs(workflow_name => 'qa') ORDER BY queue;
SELECT queue, argument FROM dex.runs WHERE workflow_name = 'qa' ORDER BY queue;
SELECT count(*) AS history_events FROM dex.run_history(:'run_a');
\set VERBOSITY sqlstate
SELECT * FROM dex.get_run(:'run_b');
SELECT * FROM dex.run_history(:'run_b');
SELECT dex.send_external_event(:'run_b', 'poke');
SELECT dex.send_external_event_to_instance('qa-b-1', 'poke');
SELECT dex.cancel_run(:'run_b');
SELECT dex.suspend_run(:'run_b');
SELECT dex.resume_run(:'run_b');
SELECT dex.terminate_run(:'run_b');
SELECT dex.restart_run(:'run_b');
SELECT dex.reset_run(:'run_b', 1);
SELECT * FROM dex.run_attempts(:'run_b');
CALL dex.wait_for_run(:'run_b', '0 s');
CALL dex.wait_for_runs(ARRAY[:'run_b']::uuid[], '0 s');
\set VERBOSITY default
SELECT dex.send_external_event_to_instance('qa-b-1', 'poke');
RESET ROLE;
SELECT status, history_length FROM dex.get_run(:'run_b');
SELECT count(*) AS runs_of_b FROM dex.workflow_run r JOIN dex.queue q ON q.id = r.queue_id WHERE q.name = 'qa-b-wf';
SELECT count(*) AS events_of_b FROM dex.external_event WHERE run_id = :'run_b';

-- a reader's own function in a WHERE clause sees only the reader's rows
CREATE FUNCTION regress_peek(text) RETURNS boolean COST 0.0000001 LANGUAGE plpgsql AS
$$ BEGIN RAISE NOTICE 'peeked at %', $1; RETURN true; END $$;
GRANT EXECUTE ON FUNCTION regress_peek(text) TO PUBLIC;
SET ROLE regress_a_client;
SELECT count(*) FROM dex.runs WHERE regress_peek(queue) AND workflow_name = 'qa';
RESET ROLE;
DROP FUNCTION regress_peek(text);

-- a worker leases the tasks of its queues only
SET ROLE regress_a_worker;
\set VERBOSITY sqlstate
SELECT * FROM dex.poll_tasks('qa-b-wf', 'wa');
SELECT * FROM dex.poll_tasks_pb('qa-b-wf', 'wa');
CALL dex.wait_for_tasks('qa-b-wf', '0 s');
\set VERBOSITY default
CALL dex.wait_for_tasks('qa-b-wf', '0 s');
CALL dex.wait_for_tasks('qa-a-wf', '0 s');
SELECT run_id = :'run_a' AS own_run, lock_version AS lv_a FROM dex.poll_tasks('qa-a-wf', 'wa') \gset
SELECT :'own_run' AS own_run;
-- nor may its workflows schedule activities or start children on other queues
\set VERBOSITY sqlstate
SELECT dex.complete_task(:'run_a', 0, :lv_a,
       '[{"id": 1, "scheduleActivity": {"name": "pay", "queue": "qa-b-act"}}]');
SELECT dex.complete_task(:'run_a', 0, :lv_a,
       '[{"id": 1, "startChildRun": {"workflowName": "qa", "queue": "qa-b-wf"}}]');
\set VERBOSITY default
-- the refused completions changed nothing: the lease still holds
SELECT dex.complete_task(:'run_a', 0, :lv_a,
       '[{"id": 1, "scheduleActivity": {"name": "pay", "queue": "qa-a-act"}}]');
RESET ROLE;

-- a member of a worker role has its queues
SET ROLE regress_a_member;
SELECT kind, task_id, lock_version AS lv_act FROM dex.poll_tasks('qa-a-act', 'wm') \gset
SELECT :'kind' AS kind, :task_id AS task_id;
RESET ROLE;

-- a worker cannot report on a task of another queue, even with its lock version
SET ROLE regress_b_worker;
SELECT lock_version AS lv_b FROM dex.poll_tasks('qa-b-wf', 'wb') \gset
\set VERBOSITY sqlstate
SELECT dex.heartbeat_task(:'run_a', :task_id, :lv_act);
SELECT * FROM dex.heartbeat_tasks(ARRAY[:'run_a']::uuid[], ARRAY[:task_id], ARRAY[:lv_act]::bigint[]);
SELECT dex.complete_task(:'run_a', :task_id, :lv_act, '"stolen"');
SELECT * FROM dex.complete_tasks(ARRAY[:'run_b', :'run_a']::uuid[], ARRAY[0, :task_id],
                                 ARRAY[:lv_b, :lv_act]::bigint[],
                                 ARRAY['[{"completeRun": {}}]', '"stolen"']::jsonb[]);
SELECT dex.fail_task(:'run_a', :task_id, :lv_act, '{"message": "stolen"}');
SELECT * FROM dex.fail_tasks(ARRAY[:'run_a']::uuid[], ARRAY[:task_id], ARRAY[:lv_act]::bigint[],
                             ARRAY['{"message": "stolen"}']::jsonb[]);
\set VERBOSITY default
SELECT dex.complete_task(:'run_a', :task_id, :lv_act, '"stolen"');
-- its own task completes (the refused batch above left it leased)
SELECT dex.complete_task(:'run_b', 0, :lv_b, '[{"completeRun": {}}]');
RESET ROLE;

-- A's activity is still A's to complete
SET ROLE regress_a_member;
SELECT dex.heartbeat_task(:'run_a', :task_id, :lv_act) IS NOT NULL AS heartbeat;
SELECT dex.complete_task(:'run_a', :task_id, :lv_act, '"paid"');
RESET ROLE;
SELECT status FROM dex.get_run(:'run_b');

-- an admin uses every queue
SET ROLE regress_qa_admin;
SELECT queue, status FROM dex.list_runs(workflow_name => 'qa') ORDER BY queue;
SELECT count(*) AS visible FROM dex.runs WHERE workflow_name = 'qa';
RESET ROLE;

-- revoking takes the queue away at once
SET ROLE regress_qa_admin;
SELECT dex.revoke_queue('qa-a-wf', 'regress_a_client');
RESET ROLE;
SET ROLE regress_a_client;
SELECT count(*) AS visible FROM dex.list_runs(workflow_name => 'qa');
\set VERBOSITY sqlstate
SELECT * FROM dex.get_run(:'run_a');
\set VERBOSITY default
RESET ROLE;

-- grants: bad input, and only administrators grant
\set VERBOSITY sqlstate
SELECT dex.grant_queue(NULL, 'regress_a_client');
SELECT dex.grant_queue('qa-a-wf', NULL);
SELECT dex.grant_queue('qa-nope', 'regress_a_client');
SELECT dex.grant_queue('qa-a-wf', 'regress_nobody');
SELECT dex.revoke_queue('qa-nope', 'regress_a_client');
SET ROLE regress_a_client;
SELECT dex.grant_queue('qa-b-wf', 'regress_a_client');
SELECT * FROM dex.queue_privileges;
SELECT * FROM dex.queue_grant;
RESET ROLE;
\set VERBOSITY default
SELECT dex.grant_queue('qa-nope', 'regress_a_client');
SELECT count(*) AS a_client_grants FROM dex.queue_privileges WHERE role = 'regress_a_client'::regrole;

-- the ids of the queues a role may use
SET ROLE regress_b_worker;
SELECT dex.usable_queue_ids() AS usable \gset
RESET ROLE;
SELECT array_agg(q.name ORDER BY q.name) AS usable
  FROM dex.queue q WHERE q.id = ANY (:'usable') AND q.name LIKE 'qa-%';

-- a dropped role's grants are left behind, inert; the maintenance worker
-- removes them (test/t/006_retention.pl), here they go by hand
DROP OWNED BY regress_a_client, regress_a_worker, regress_b_client, regress_b_worker,
    regress_a_member, regress_qa_admin;
DROP ROLE regress_a_client, regress_a_worker, regress_b_client, regress_b_worker,
    regress_a_member, regress_qa_admin;
SELECT count(*) AS dangling FROM dex.queue_grant g
 WHERE NOT EXISTS (SELECT FROM pg_roles r WHERE r.oid = g.grantee);
DELETE FROM dex.queue_grant g WHERE NOT EXISTS (SELECT FROM pg_roles r WHERE r.oid = g.grantee);
