-- Instance ids are unique per workflow queue, so that tenants of different
-- queues learn nothing of each other's runs through them: every call that
-- takes an instance id (create_run with if_active 'error' and 'return',
-- send_external_event_to_instance with and without a queue, a workflow's
-- startChildRun) sees only the runs of the queue it names or, without one,
-- of the queues the caller may use.
CREATE ROLE regress_ia_client IN ROLE dex_client;
CREATE ROLE regress_ia_worker IN ROLE dex_worker;
CREATE ROLE regress_ib_client IN ROLE dex_client;
SELECT dex.create_queue('ia-wf', 'workflow'), dex.create_queue('ib-wf', 'workflow');
SELECT dex.revoke_queue(q, r) FROM unnest('{ia-wf,ib-wf}'::text[]) q,
       unnest('{dex_client,dex_worker}'::regrole[]) r;
SELECT dex.grant_queue('ia-wf', 'regress_ia_client'), dex.grant_queue('ia-wf', 'regress_ia_worker'),
       dex.grant_queue('ib-wf', 'regress_ib_client');

-- tenant B has an active run with instance id "inst-1"
SET ROLE regress_ib_client;
SELECT dex.create_run('inst', 'ib-wf', instance_id => 'inst-1') AS run_b \gset
RESET ROLE;

-- tenant A asks for "inst-1" with if_active => 'return': a new run of its
-- own, not B's id; asked again, its own run
SET ROLE regress_ia_client;
SELECT dex.create_run('inst', 'ia-wf', instance_id => 'inst-1', if_active => 'return') AS run_a \gset
SELECT :'run_a' <> :'run_b' AS not_b_run;
SELECT dex.create_run('inst', 'ia-wf', instance_id => 'inst-1', if_active => 'return') = :'run_a' AS same_run;
-- without if_active: the error names the queue, and its detail A's own run
SET regress.run_a = :'run_a';
SET regress.run_b = :'run_b';
DO $$
DECLARE
    detail text;
BEGIN
    PERFORM dex.create_run('inst', 'ia-wf', instance_id => 'inst-1');
EXCEPTION WHEN unique_violation THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
    RAISE NOTICE 'detail names A''s run: %, B''s run: %',
        detail = format('Run %s has status CREATED.', current_setting('regress.run_a')),
        strpos(detail, current_setting('regress.run_b')) > 0;
END
$$;
\set VERBOSITY sqlstate
SELECT dex.create_run('inst', 'ia-wf', instance_id => 'inst-1');
\set VERBOSITY default
-- an event by instance id reaches A's run, never B's; naming B's queue is refused
SELECT dex.send_external_event_to_instance('inst-1', 'poke') AS delivered;
\set VERBOSITY sqlstate
SELECT dex.send_external_event_to_instance('inst-1', 'poke', queue => 'ib-wf');
\set VERBOSITY default
SELECT dex.send_external_event_to_instance('inst-1', 'poke', queue => 'ia-wf') AS delivered;
SELECT dex.send_external_event_to_instance('inst-2', 'poke');
RESET ROLE;

-- A's workflow starts children with B's instance id: A's own runs, on A's queue
SET ROLE regress_ia_worker;
SELECT dex.complete_task(run_id, task_id, lock_version,
       '[{"id": 1, "startChildRun": {"workflowName": "inst-child", "instanceId": "inst-1"}},
         {"id": 2, "startChildRun": {"workflowName": "inst-child", "instanceId": "inst-9"}}]')
  FROM dex.poll_tasks('ia-wf', 'wa', 10) WHERE run_id = :'run_a';
-- inst-1 is the parent's own id on ia-wf: that child fails; inst-9 starts
SELECT e.event -> 'childRunFailed' -> 'failure' ->> 'message' AS child_failure
  FROM dex.poll_tasks('ia-wf', 'wa', 10) t, jsonb_array_elements(t.task -> 'newEvents') e(event)
 WHERE t.run_id = :'run_a' AND e.event ? 'childRunFailed';
RESET ROLE;
SELECT queue, instance_id FROM dex.runs WHERE parent_id = :'run_a';

-- B's run is untouched: no event from A, its id still its own
SELECT count(*) AS events_of_b FROM dex.external_event WHERE run_id = :'run_b';
SET ROLE regress_ib_client;
SELECT dex.create_run('inst', 'ib-wf', instance_id => 'inst-1', if_active => 'return') = :'run_b' AS b_keeps_its_run;
RESET ROLE;

-- a caller that may use both queues must say which one it means
\set VERBOSITY sqlstate
SELECT dex.send_external_event_to_instance('inst-1', 'poke3');
\set VERBOSITY default
SELECT dex.send_external_event_to_instance('inst-1', 'poke3');
SELECT dex.send_external_event_to_instance('inst-1', 'poke3', queue => 'ib-wf') AS delivered_to_b;

-- when a run ends its id is free again on its queue
SELECT dex.cancel_run(:'run_b');
SET ROLE regress_ib_client;
SELECT dex.create_run('inst', 'ib-wf', instance_id => 'inst-1') <> :'run_b' AS new_run;
RESET ROLE;

SELECT dex.cancel_run(id) FROM dex.runs WHERE workflow_name LIKE 'inst%' AND status NOT IN ('CANCELLED', 'COMPLETED', 'FAILED')
 ORDER BY id;
RESET regress.run_a;
RESET regress.run_b;
DELETE FROM dex.queue_grant WHERE grantee IN ('regress_ia_client'::regrole, 'regress_ia_worker'::regrole,
                                             'regress_ib_client'::regrole);
DROP ROLE regress_ia_client, regress_ia_worker, regress_ib_client;
