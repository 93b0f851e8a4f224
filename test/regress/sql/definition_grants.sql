--
-- definition_grants: who may start runs of a workflow defined in JSON (1.9).  Its SQL
-- steps run with its owner's privileges, so starting one takes the owner's membership or
-- a grant (dex.grant_definition); refused calls (42501) create nothing.  Also: a version a
-- definition does not have is refused (42704), a step knows its run (dex.step_context).
--
SELECT dex.create_queue('dg-wf', 'workflow');
CREATE ROLE regress_dg_owner IN ROLE dex_admin;
CREATE ROLE regress_dg_other_admin IN ROLE dex_admin;
CREATE ROLE regress_dg_starter IN ROLE dex_client;
CREATE ROLE regress_dg_worker IN ROLE dex_worker;
CREATE TABLE dg_audit (run_id uuid, definition text, version integer, step text);
GRANT INSERT, SELECT ON dg_audit TO regress_dg_owner;

CREATE FUNCTION pg_temp.wait_for(run uuid) RETURNS text LANGUAGE plpgsql AS $$
DECLARE s text;
BEGIN
    FOR i IN 1..1000 LOOP
        SELECT status INTO s FROM dex.workflow_run WHERE id = run;
        EXIT WHEN s NOT IN ('CREATED', 'RUNNING');
        PERFORM pg_sleep(0.02);
    END LOOP;
    RETURN s;
END $$;
CREATE FUNCTION pg_temp.runs() RETURNS bigint LANGUAGE sql AS
    $$ SELECT count(*) FROM dex.workflow_run WHERE workflow_name LIKE 'dg-%' $$;

-- the owner's definition: its step records the run it belongs to
SET ROLE regress_dg_owner;
SELECT dex.create_definition('dg-audit', 1, '{"steps": [
  {"id": "note", "type": "sql",
   "sql": "INSERT INTO public.dg_audit SELECT * FROM dex.step_context() RETURNING step", "next": "done"},
  {"id": "done", "type": "end"}]}');
RESET ROLE;
SELECT pg_temp.runs() AS runs_before \gset

-- a client with no grant starts nothing, one run or many, nor may a worker start it as a child
\set VERBOSITY default
SET ROLE regress_dg_starter;
SELECT dex.create_run('dg-audit', 'dg-wf');
SELECT * FROM dex.create_runs('dg-audit', 'dg-wf', ARRAY['{}']::jsonb[]);
RESET ROLE;
-- ... nor another dex_admin, through a schedule
SET ROLE regress_dg_other_admin;
SELECT dex.create_schedule('dg-sched', 'dg-audit', 'dg-wf', every => '1 hour');
-- ... nor may it add a version of it, or grant it
SELECT dex.create_definition('dg-audit', 2, '{"steps": [{"id": "done", "type": "end"}]}');
SELECT dex.grant_definition('dg-audit', 'regress_dg_starter');
RESET ROLE;
SELECT pg_temp.runs() = :runs_before AS nothing_created,
       (SELECT count(*) FROM dex.schedule WHERE name = 'dg-sched') AS schedules,
       (SELECT count(*) FROM dex.definition WHERE name = 'dg-audit') AS versions;

-- a version the definition does not have would wait for ever: refused
SET ROLE regress_dg_owner;
SELECT dex.create_run('dg-audit', 'dg-wf', workflow_version => 7);
\set VERBOSITY terse

-- the owner grants it: the client starts it, and the step knows its run
SELECT dex.grant_definition('dg-audit', 'regress_dg_starter');
SELECT dex.grant_definition('dg-audit', 'regress_dg_starter');
SELECT name, role, granted_by FROM dex.definition_privileges WHERE name = 'dg-audit';
RESET ROLE;
SET ROLE regress_dg_starter;
SELECT dex.create_run('dg-audit', 'dg-wf') AS run \gset
RESET ROLE;
SELECT pg_temp.wait_for(:'run') AS status;
SELECT run_id = :'run' AS its_run, definition, version, step FROM dg_audit;

-- revoked: refused again
SET ROLE regress_dg_owner;
SELECT dex.revoke_definition('dg-audit', 'regress_dg_starter');
SELECT dex.revoke_definition('dg-audit', 'regress_dg_starter');
RESET ROLE;
SET ROLE regress_dg_starter;
SELECT dex.create_run('dg-audit', 'dg-wf');
-- ... nor does a restart or a reset of a run it started when it could (a new run's SQL)
SELECT dex.restart_run(:'run');
SELECT dex.reset_run(:'run', 1);
RESET ROLE;

-- a definition of another owner that calls it: the run fails with 42501 unless the
-- caller's owner may start it
SET ROLE regress_dg_other_admin;
SELECT dex.create_definition('dg-caller', 1, '{"steps": [
  {"id": "sub", "type": "call", "definition": "dg-audit", "next": "done"},
  {"id": "done", "type": "end"}]}');
SELECT dex.create_run('dg-caller', 'dg-wf') AS caller_run \gset
RESET ROLE;
SELECT pg_temp.wait_for(:'caller_run') AS status;
SELECT dex.to_json('dex.v1.Failure', failure) - 'terminal' AS failure FROM dex.workflow_run WHERE id = :'caller_run';
SET ROLE regress_dg_owner;
SELECT dex.grant_definition('dg-audit', 'regress_dg_other_admin');
RESET ROLE;
SET ROLE regress_dg_other_admin;
SELECT dex.create_run('dg-caller', 'dg-wf') AS caller_run \gset
RESET ROLE;
SELECT pg_temp.wait_for(:'caller_run') AS status;

-- a worker's startChildRun of it is the worker's start: refused without a grant, and
-- the completion writes nothing
SELECT dex.create_run('dg-sdk-parent', 'dg-wf') AS parent \gset
SET ROLE regress_dg_worker;
SELECT lock_version AS v FROM dex.poll_tasks('dg-wf', 'w', 10) WHERE run_id = :'parent' \gset
SELECT dex.complete_task(:'parent', 0, :v, '[{"id": 1, "startChildRun": {"workflowName": "dg-audit"}}]');
RESET ROLE;
SELECT count(*) AS children FROM dex.workflow_run WHERE parent_id = :'parent';

-- the events of user tasks are dex.complete_user_task's to send (22023 for anyone else)
SELECT dex.send_external_event(:'parent', 'user:approve:3');
SELECT * FROM dex.send_external_events(ARRAY[:'parent']::uuid[], ARRAY['user:approve:3']);

-- the owner of a definition cannot be dropped while it owns one (2BP01)
DROP ROLE regress_dg_owner;

-- the grants go with the definition's last version
SELECT dex.terminate_run(id, 'done') FROM dex.workflow_run
 WHERE workflow_name LIKE 'dg-%' AND status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED', 'TERMINATED', 'TIMED_OUT');
SET ROLE regress_dg_owner;
SELECT dex.delete_definition('dg-audit', 1);
RESET ROLE;
SELECT count(*) AS grants_left FROM dex.definition_grant WHERE name = 'dg-audit';

SELECT dex.terminate_run(id, 'done') FROM dex.workflow_run
 WHERE workflow_name LIKE 'dg-%' AND status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED', 'TERMINATED', 'TIMED_OUT');
SELECT dex.delete_definition('dg-caller', 1);
DROP TABLE dg_audit;
DROP ROLE regress_dg_owner, regress_dg_other_admin, regress_dg_starter, regress_dg_worker;
