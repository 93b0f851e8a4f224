--
-- events: external events, waiting for them with a timeout, cancelling timers
--
SELECT dex.create_queue('events-wf', 'workflow');
SELECT dex.create_run('approve', 'events-wf', instance_id => 'order-77') AS run \gset

-- events that come before anybody waits are kept, in order
SELECT dex.send_external_event(:'run', 'approval', '{"by": "ana"}') AS delivered;
SELECT dex.send_external_event_to_instance('order-77', 'note', '"rush"') AS delivered;
-- the same event id again is dropped
SELECT dex.send_external_event(:'run', 'approval', '{"by": "bob"}') AS delivered;

SELECT lock_version AS v,
       jsonb_path_query_array(task, '$.newEvents[*].externalEventReceived') AS received
  FROM dex.poll_tasks('events-wf', 'w') \gset
\echo :received

-- wait for an event with a timeout; start a timer and cancel it at once
SELECT dex.complete_task(:'run', 0, :v,
    '[{"id": 1, "waitExternalEvent": {"eventId": "shipment", "timeout": "0.3s"}},
      {"id": 2, "startTimer": {"name": "reminder", "delay": "3600s"}},
      {"id": 3, "cancelTimer": {"timerCreatedEventId": 2}}]');
-- the wait's timeout is pending; the cancelled timer is gone
SELECT timer_id, delayed FROM dex.workflow_inbox WHERE run_id = :'run' ORDER BY id;

-- no event came: the timeout fires through the scheduler
SELECT pg_sleep(0.3);
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
SELECT pg_temp.wait_for_task(:'run');
SELECT lock_version AS v, (task->'newEvents'->1) - 'timestamp' AS timed_out
  FROM dex.poll_tasks('events-wf', 'w') \gset
\echo :timed_out

-- an event sent now is delivered to the next task
SELECT dex.send_external_event(:'run', 'shipment', '{"tracking": "Z9"}') AS delivered;
SELECT dex.complete_task(:'run', 0, :v, '[]');
SELECT lock_version AS v, (task->'newEvents'->1) - 'timestamp' AS arrived
  FROM dex.poll_tasks('events-wf', 'w') \gset
\echo :arrived
SELECT dex.complete_task(:'run', 0, :v, '[{"completeRun": {}}]');

SELECT sequence, event - 'timestamp' #- '{externalEventWaitStarted,timeoutAt}' #- '{timerCreated,elapseAt}' AS event
  FROM dex.run_history(:'run');

-- a run that ended takes no events; bad input
\set VERBOSITY sqlstate
SELECT dex.send_external_event(:'run', 'late', NULL);
SELECT dex.send_external_event('00000000-0000-7000-8000-000000000000', 'x');
SELECT dex.send_external_event_to_instance('order-77', 'x');
SELECT dex.send_external_event(:'run', '');
SELECT dex.send_external_event(NULL, 'x');
SELECT dex.create_run('approve', 'events-wf') AS run2 \gset
SELECT lock_version AS v2 FROM dex.poll_tasks('events-wf', 'w') \gset
SELECT dex.complete_task(:'run2', 0, :v2, '[{"id": 1, "waitExternalEvent": {}}]');
SELECT dex.complete_task(:'run2', 0, :v2, '[{"id": 1, "waitExternalEvent": {"eventId": "e", "timeout": "-1s"}}]');
SELECT dex.complete_task(:'run2', 0, :v2, '[{"id": 1, "cancelTimer": {"timerCreatedEventId": 5}}]');
SELECT dex.complete_task(:'run2', 0, :v2, '[{"waitExternalEvent": {"eventId": "e"}}]');
\set VERBOSITY default
SELECT dex.complete_task(:'run2', 0, :v2, '[{"completeRun": {}}]');
