--
-- batch_forms: dex.create_runs with per-run options and an outcome per row,
-- dex.send_external_events, and a workflow signalling another run
-- (signalExternalRun); bad input changes nothing
--
SELECT dex.create_queue('bf-wf', 'workflow'), dex.create_queue('bf-other', 'workflow');

-- An error as SQLSTATE and message, run ids masked
CREATE FUNCTION pg_temp.error_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    state text; message text;
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT;
    RETURN regexp_replace(state || ': ' || message,
                          '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', '<run>', 'g');
END $$;
CREATE FUNCTION pg_temp.wait_for_task(run uuid) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..500 LOOP
        IF EXISTS (SELECT 1 FROM dex.workflow_task WHERE run_id = run AND locked_by IS NULL) THEN
            RETURN true;
        END IF;
        PERFORM pg_sleep(0.02);
    END LOOP;
    RETURN false;
END $$;

--
-- dex.create_runs, per run
--
-- an instance id that has an active run already
SELECT dex.create_run('bf', 'bf-wf', '0', instance_id => 'bf-i1') AS existing \gset
SELECT array_agg(id ORDER BY n) AS ids, array_agg(created ORDER BY n) AS created
  FROM dex.create_runs('bf', 'bf-wf', ARRAY['1', '2', '3', '4', '5']::jsonb[],
                       priority => 4, labels => '{"team": "all"}',
                       instance_ids => ARRAY['bf-i1', 'bf-i2', NULL, 'bf-i2', NULL],
                       concurrency_keys => ARRAY[NULL, NULL, 'bf-k', NULL, 'bf-k'],
                       priorities => ARRAY[NULL, 9, NULL, NULL, 50],
                       run_labels => ARRAY[NULL, '{"team": "b"}', NULL, NULL, NULL]::jsonb[],
                       start_times => ARRAY[NULL, NULL, NULL, NULL, now() + interval '1 hour'])
       WITH ORDINALITY AS c (id, created, n) \gset
\echo :created
-- a conflict gives the run that holds the id: the one before the call, or the batch's own
SELECT (:'ids'::uuid[])[1] = :'existing' AS first_is_existing,
       (:'ids'::uuid[])[4] = (:'ids'::uuid[])[2] AS fourth_is_second;
-- what was made: per-run options, defaults where NULL; the delayed run has no task and a
-- START timer; of the two runs sharing key bf-k, the one due now holds it
SELECT i.n, r.instance_id, r.priority, r.labels, r.concurrency_key, r.status,
       dex.payload_value(r.argument) AS argument,
       EXISTS (SELECT 1 FROM dex.workflow_task t WHERE t.run_id = r.id) AS has_task,
       (SELECT kind FROM dex.run_timer t WHERE t.run_id = r.id) AS timer
  FROM unnest(:'ids'::uuid[]) WITH ORDINALITY AS i (id, n)
  JOIN dex.workflow_run r ON r.id = i.id
 WHERE i.n IN (2, 3, 5)
 ORDER BY i.n;
-- the old forms still work: positional and named arguments, a set of ids
SELECT count(*) AS made, bool_and(created) AS all_created
  FROM dex.create_runs('bf', 'bf-wf', '{7, 8}', 1, 2, NULL, NULL, NULL);
SELECT count(*) AS made FROM dex.create_runs('bf', 'bf-wf', '{9}', priority => 3) AS id;

-- bad per-run arrays: a clear error, nothing made
SELECT count(*) AS runs_before FROM dex.workflow_run \gset
SELECT pg_temp.error_of($$SELECT dex.create_runs('bf', 'bf-wf', '{1, 2}', instance_ids => '{a}')$$);
SELECT pg_temp.error_of($$SELECT dex.create_runs('bf', 'bf-wf', '{1, 2}', priorities => '{1, 101}')$$);
SELECT pg_temp.error_of($$SELECT dex.create_runs('bf', 'bf-wf', '{1}', instance_ids => '{""}')$$);
SELECT pg_temp.error_of($$SELECT dex.create_runs('bf', 'bf-wf', '{1}', concurrency_keys => ARRAY[repeat('k', 256)])$$);
SELECT pg_temp.error_of($$SELECT dex.create_runs('bf', 'bf-wf', '{1}', run_labels => '{"[1]"}')$$);
SELECT pg_temp.error_of($$SELECT dex.create_runs('bf', 'bf-wf', '{1}', start_times => '{infinity}')$$);
SELECT pg_temp.error_of($$SELECT dex.create_runs('bf', 'bf-wf', '{1, 2}', priorities => '{{1}, {2}}')$$);
SELECT pg_temp.error_of($$SELECT dex.create_runs('bf', 'bf-nope', '{1}', instance_ids => '{a}')$$);
SELECT count(*) - :runs_before AS runs_made FROM dex.workflow_run;
SELECT count(*) AS claimed FROM dex.run_instance WHERE instance_id = 'a';

--
-- dex.send_external_events: an outcome per event, in order
--
SELECT dex.create_run('bf-ended', 'bf-wf') AS ended \gset
SELECT dex.terminate_run(:'ended');
SELECT dex.create_run('bf-hidden', 'bf-other') AS hidden \gset
SELECT dex.send_external_event((:'ids'::uuid[])[2], 'before', '1') AS sent_before;
SELECT n, delivered, outcome, event_id, run_id = (:'ids'::uuid[])[2] AS to_second
  FROM dex.send_external_events(
         ARRAY[(:'ids'::uuid[])[2], (:'ids'::uuid[])[2], (:'ids'::uuid[])[2], (:'ids'::uuid[])[3],
               :'ended', '01234567-89ab-7def-8123-456789abcdef', (:'ids'::uuid[])[5]]::uuid[],
         '{before, e1, e1, e1, e1, e1, e1}',
         ARRAY['"dup"', '{"n": 1}', '"dup in batch"', NULL, NULL, NULL, '"to a delayed run"']::jsonb[])
       WITH ORDINALITY AS s (run_id, event_id, delivered, outcome, n)
 ORDER BY n;
-- what reached the inboxes: the first of each (run, event id) only
SELECT i.n, dex.to_json('dex.v1.WorkflowEvent', w.event)->'externalEventReceived' AS event, w.delayed
  FROM unnest(:'ids'::uuid[]) WITH ORDINALITY AS i (id, n)
  JOIN dex.workflow_inbox w ON w.run_id = i.id
 ORDER BY i.n, w.id;
-- payloads may be left out; an empty batch is no error
SELECT outcome FROM dex.send_external_events(ARRAY[(:'ids'::uuid[])[3]]::uuid[], '{e2}');
SELECT count(*) FROM dex.send_external_events('{}', '{}');

-- a role that may not use a queue sees its runs as missing
CREATE ROLE regress_bf_client LOGIN;
GRANT dex_client TO regress_bf_client;
SELECT dex.revoke_queue('bf-other', 'dex_client');
SET ROLE regress_bf_client;
SELECT outcome FROM dex.send_external_events(ARRAY[:'hidden']::uuid[], '{e1}');
RESET ROLE;
DROP ROLE regress_bf_client;

-- bad input: a clear error, nothing sent
SELECT count(*) AS events_before FROM dex.external_event \gset
SELECT pg_temp.error_of($$SELECT * FROM dex.send_external_events(NULL, '{e}')$$);
SELECT pg_temp.error_of($$SELECT * FROM dex.send_external_events(ARRAY[gen_random_uuid()], '{e, f}')$$);
SELECT pg_temp.error_of($$SELECT * FROM dex.send_external_events(ARRAY[gen_random_uuid()], ARRAY[NULL]::text[])$$);
SELECT pg_temp.error_of($$SELECT * FROM dex.send_external_events(ARRAY[gen_random_uuid()], '{e}', '{1, 2}')$$);
SELECT pg_temp.error_of($$SELECT * FROM dex.send_external_events(ARRAY[gen_random_uuid()], ARRAY[''])$$);
SELECT pg_temp.error_of($$SELECT * FROM dex.send_external_events(ARRAY[gen_random_uuid()], ARRAY[repeat('e', 256)])$$);
SELECT pg_temp.error_of($$SELECT * FROM dex.send_external_events(array_fill(gen_random_uuid(), ARRAY[10001]), array_fill('e'::text, ARRAY[10001]))$$);
SELECT count(*) - :events_before AS events_recorded FROM dex.external_event;

--
-- signalExternalRun: a workflow sends an event to another run
--
SELECT dex.create_run('bf-target', 'bf-other', instance_id => 'bf-target-1') AS target \gset
SELECT dex.create_run('bf-sender', 'bf-wf') AS sender \gset
SELECT run_id AS r, lock_version AS v FROM dex.poll_tasks('bf-other', 'w', 10) WHERE run_id = :'target' \gset
SELECT dex.complete_task(:'target', 0, :v, '[{"id": 1, "waitExternalEvent": {"eventId": "go"}}]');
SELECT lock_version AS v FROM dex.poll_tasks('bf-wf', 'w', 100) WHERE run_id = :'sender' \gset
-- by run id, by instance id on a queue, to a run that ended, to none, a duplicate, and an
-- instance id on the sender's own queue (where it has no run)
SELECT dex.complete_task(:'sender', 0, :v, format(
    '[{"id": 1, "signalExternalRun": {"runId": "%s", "eventId": "go", "payload": {"json": "{\"n\": 1}"}}},
      {"id": 2, "signalExternalRun": {"instanceId": "bf-target-1", "queue": "bf-other", "eventId": "more"}},
      {"id": 3, "signalExternalRun": {"runId": "%s", "eventId": "go"}},
      {"id": 4, "signalExternalRun": {"runId": "01234567-89ab-7def-8123-456789abcdef", "eventId": "go"}},
      {"id": 5, "signalExternalRun": {"runId": "%s", "eventId": "go"}},
      {"id": 6, "signalExternalRun": {"instanceId": "bf-target-1", "eventId": "here"}}]',
    :'target', :'ended', :'target')::jsonb);
-- the sender's history records each with its outcome (the target's id masked)
SELECT e.event->>'id' AS id,
       jsonb_set(e.event->'externalRunSignalled', '{runId}',
                 to_jsonb(CASE WHEN e.event->'externalRunSignalled'->>'runId' = :'target' THEN 'target'
                               WHEN e.event->'externalRunSignalled'->>'runId' = :'ended' THEN 'ended'
                               ELSE coalesce(e.event->'externalRunSignalled'->>'runId', '') END)) AS signalled
  FROM dex.run_history(:'sender') e
 WHERE e.event ? 'externalRunSignalled'
 ORDER BY e.sequence;
-- the target gets them through the scheduler (the sender locked no other run)
SELECT pg_temp.wait_for_task(:'target');
SELECT jsonb_path_query_array(task, '$.newEvents[*].externalEventReceived') AS received
  FROM dex.poll_tasks('bf-other', 'w', 10) WHERE run_id = :'target';
-- the sender's next task shows the outcomes
SELECT pg_temp.wait_for_task(:'sender');
SELECT jsonb_path_query_array(task, '$.newEvents[*].externalRunSignalResult.outcome') AS results
  FROM dex.poll_tasks('bf-wf', 'w', 100) WHERE run_id = :'sender';

-- malformed signals are refused with the completion, which changes nothing
SELECT dex.create_run('bf-bad', 'bf-wf') AS bad \gset
SELECT lock_version AS v FROM dex.poll_tasks('bf-wf', 'w', 100) WHERE run_id = :'bad' \gset
SELECT pg_temp.error_of(format($$SELECT dex.complete_task('%s', 0, %s, '[{"id": 1, "signalExternalRun": {"eventId": "go"}}]')$$, :'bad', :v));
SELECT pg_temp.error_of(format($$SELECT dex.complete_task('%s', 0, %s, '[{"id": 1, "signalExternalRun": {"runId": "%s", "instanceId": "i", "eventId": "go"}}]')$$, :'bad', :v, :'target'));
SELECT pg_temp.error_of(format($$SELECT dex.complete_task('%s', 0, %s, '[{"id": 1, "signalExternalRun": {"runId": "not-a-uuid", "eventId": "go"}}]')$$, :'bad', :v));
SELECT pg_temp.error_of(format($$SELECT dex.complete_task('%s', 0, %s, '[{"id": 1, "signalExternalRun": {"runId": "%s", "queue": "bf-other", "eventId": "go"}}]')$$, :'bad', :v, :'target'));
SELECT pg_temp.error_of(format($$SELECT dex.complete_task('%s', 0, %s, '[{"id": 1, "signalExternalRun": {"runId": "%s", "eventId": ""}}]')$$, :'bad', :v, :'target'));
SELECT pg_temp.error_of(format($$SELECT dex.complete_task('%s', 0, %s, '[{"signalExternalRun": {"runId": "%s", "eventId": "go"}}]')$$, :'bad', :v, :'target'));
SELECT status, history_length FROM dex.workflow_run WHERE id = :'bad';
SELECT count(*) AS target_events FROM dex.external_event WHERE run_id = :'target';

-- the JSON and protobuf forms of the new messages
SELECT dex.to_json('dex.v1.Command', dex.from_json('dex.v1.Command',
    '{"id": 3, "signalExternalRun": {"instanceId": "i", "queue": "q", "eventId": "e", "payload": {"json": "1"}}}'));
SELECT dex.to_json('dex.v1.WorkflowEvent', dex.from_json('dex.v1.WorkflowEvent',
    '{"id": 3, "externalRunSignalled": {"runId": "r", "eventId": "e", "outcome": "SIGNAL_OUTCOME_TARGET_ENDED"}}'));
SELECT dex.to_json('dex.v1.WorkflowEvent', dex.from_json('dex.v1.WorkflowEvent',
    '{"externalRunSignalResult": {"externalRunSignalledEventId": 3, "outcome": 4}}'));
SELECT pg_temp.error_of($$SELECT dex.from_json('dex.v1.ExternalRunSignalled', '{"outcome": "SIGNAL_OUTCOME_MAYBE"}')$$);
