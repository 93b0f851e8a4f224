--
-- batch: many runs and tasks per call; heartbeats; the long poll
--
SELECT dex.create_queue('batch-wf', 'workflow'), dex.create_queue('batch-act', 'activity');

-- many runs in one call, ids in order, one task each
SELECT array_agg(id) AS runs FROM dex.create_runs('b', 'batch-wf', ARRAY['1', '2', '3', NULL]::jsonb[],
                                                  priority => 7, labels => '{"k": "v"}') AS id \gset
SELECT array_length(:'runs'::uuid[], 1) AS created,
       (SELECT array_agg(argument ORDER BY id) FROM dex.runs WHERE id = ANY (:'runs')) AS arguments,
       (SELECT bool_and(priority = 7 AND labels = '{"k": "v"}' AND status = 'CREATED')
          FROM dex.runs WHERE id = ANY (:'runs')) AS same_settings,
       (SELECT array_agg(r ORDER BY r) = array_agg(r) FROM unnest(:'runs'::uuid[]) r) AS ids_in_order;

-- ids are strictly ascending in argument order even when thousands share a millisecond
BEGIN;
SELECT bool_and(id > prev) AS thousands_in_order
  FROM (SELECT id, lag(id) OVER (ORDER BY n) AS prev
          FROM dex.create_runs('b', 'batch-wf', array_fill('1'::jsonb, ARRAY[5000]))
               WITH ORDINALITY AS r (id, n)) AS ids
 WHERE prev IS NOT NULL;
ROLLBACK;

-- one poll leases them all; one call completes them all: two schedule an
-- activity, two complete their run
SELECT array_agg(run_id ORDER BY run_id) AS r, array_agg(task_id ORDER BY run_id) AS t,
       array_agg(lock_version ORDER BY run_id) AS v
  FROM dex.poll_tasks('batch-wf', 'w', 10) \gset
SELECT completed, count(*) FROM dex.complete_tasks(:'r', :'t', :'v', ARRAY[
    '[{"id": 1, "scheduleActivity": {"name": "a", "queue": "batch-act", "retryPolicy": {"maxAttempts": 1}}}]',
    '[{"id": 1, "scheduleActivity": {"name": "a", "queue": "batch-act"}}]',
    '[{"completeRun": {"result": {"json": "3"}}}]',
    '[{"completeRun": {}}]']::jsonb[]) GROUP BY 1;
SELECT status, count(*) FROM dex.runs WHERE id = ANY (:'runs') GROUP BY 1 ORDER BY 1;

-- the same leases again: every one is lost now, reported per task, nothing changes
SELECT completed, count(*) FROM dex.complete_tasks(:'r', :'t', :'v',
    ARRAY['[]', '[]', '[]', '[]']::jsonb[]) GROUP BY 1;

-- activities: heartbeats extend held leases, lost ones get no row
SELECT array_agg(run_id ORDER BY run_id) AS ar, array_agg(task_id ORDER BY run_id) AS at,
       array_agg(lock_version ORDER BY run_id) AS av
  FROM dex.poll_tasks('batch-act', 'w', 10, '1 minute') \gset
SELECT count(*) AS held, bool_and(locked_until > now() + interval '59 minutes') AS extended
  FROM dex.heartbeat_tasks(:'ar', :'at', :'av', '1 hour');
SELECT count(*) AS held FROM dex.heartbeat_tasks(:'ar', :'at', ARRAY[0, 0]::bigint[], '1 hour');
-- with the tasks' queue (1.5): the same leases held; another queue holds none of them, and a
-- queue that does not exist is an error, as for a poll
SELECT count(*) AS held, bool_and(locked_until > now() + interval '89 minutes') AS extended
  FROM dex.heartbeat_tasks(:'ar', :'at', :'av', '90 minutes', 'batch-act');
SELECT count(*) AS held FROM dex.heartbeat_tasks(:'ar', :'at', :'av', '1 hour', 'batch-wf');
SELECT count(*) AS held FROM dex.heartbeat_tasks(:'ar', :'at', :'av', '1 hour', 'batch-nope');
SELECT dex.heartbeat_task((:'ar'::uuid[])[1], (:'at'::int[])[1], (:'av'::bigint[])[1], '2 hours')
       > now() + interval '119 minutes' AS extended;

-- one activity fails for good (one attempt allowed), the other completes
SELECT failed FROM dex.fail_tasks(ARRAY[(:'ar'::uuid[])[1]], ARRAY[(:'at'::int[])[1]],
                                  ARRAY[(:'av'::bigint[])[1]], ARRAY['{"message": "no"}']::jsonb[]);
SELECT completed FROM dex.complete_tasks_pb(ARRAY[(:'ar'::uuid[])[2]], ARRAY[(:'at'::int[])[2]],
                                            ARRAY[(:'av'::bigint[])[2]],
                                            ARRAY[dex.from_json('dex.v1.Payload', '{"json": "42"}')]);
SELECT jsonb_agg(jsonb_path_query_first(task, '$.newEvents[*] ? (exists(@.activityTaskFailed) || exists(@.activityTaskCompleted))') - 'timestamp' #- '{activityTaskCompleted,startedAt}'
                 ORDER BY run_id) AS outcomes
  FROM dex.poll_tasks('batch-wf', 'w', 10);

-- the long poll: with a zero timeout it only looks; an empty queue times out;
-- a queue with work returns at once
CALL dex.wait_for_tasks('batch-act', '0 s');
SELECT clock_timestamp() AS t0 \gset
CALL dex.wait_for_tasks('batch-act', '0.2 s');
SELECT clock_timestamp() - :'t0' >= interval '0.2 s' AS waited_for_the_timeout;
SELECT dex.create_runs('b', 'batch-wf', ARRAY['1']::jsonb[]) IS NOT NULL AS created;
CALL dex.wait_for_tasks('batch-wf', '10 s');

-- bad input
\set VERBOSITY sqlstate
SELECT * FROM dex.create_runs('b', 'no-such-queue', ARRAY['1']::jsonb[]);
SELECT * FROM dex.create_runs('b', 'batch-act', ARRAY['1']::jsonb[]);
SELECT * FROM dex.create_runs('b', 'batch-wf', NULL);
SELECT * FROM dex.create_runs('b', 'batch-wf', ARRAY[['1'], ['2']]::jsonb[]);
SELECT * FROM dex.create_runs('b', 'batch-wf', array_fill('1'::jsonb, ARRAY[10001]));
SELECT * FROM dex.create_runs('b', 'batch-wf', ARRAY['1']::jsonb[], priority => 101);
SELECT * FROM dex.complete_tasks(:'r', :'t', :'v', ARRAY['[]']::jsonb[]);
SELECT * FROM dex.complete_tasks(:'r', ARRAY[0, 0, 0, NULL]::int[], :'v', ARRAY['[]', '[]', '[]', '[]']::jsonb[]);
SELECT * FROM dex.complete_tasks(NULL, :'t', :'v', ARRAY['[]', '[]', '[]', '[]']::jsonb[]);
SELECT * FROM dex.complete_tasks_pb(ARRAY[(:'r'::uuid[])[1]], ARRAY[0], ARRAY[1::bigint], ARRAY['\xff'::bytea]);
-- a workflow task's failure with a lost lease is reported, not raised
SELECT task_id, failed FROM dex.fail_tasks(ARRAY[(:'r'::uuid[])[1]], ARRAY[0], ARRAY[1::bigint], ARRAY['{"message": "x"}']::jsonb[]);
SELECT * FROM dex.fail_tasks(ARRAY[(:'r'::uuid[])[1]], ARRAY[1], ARRAY[1::bigint], ARRAY[NULL]::jsonb[]);
SELECT * FROM dex.heartbeat_tasks(:'ar', :'at', :'av', '0 s');
SELECT dex.heartbeat_task((:'ar'::uuid[])[1], (:'at'::int[])[1], 0);
CALL dex.wait_for_tasks('no-such-queue', '1 s');
CALL dex.wait_for_tasks('batch-wf', '-1 s');
CALL dex.wait_for_tasks('batch-wf', '2 days');
BEGIN;
CALL dex.wait_for_tasks('batch-wf', '1 s');
ROLLBACK;
\set VERBOSITY default
