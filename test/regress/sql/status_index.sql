--
-- status_index: dex.run_status_index (1.11), what lets a status filter find a
-- run in a status few runs have, or one still active long after it was
-- created, whatever its age.  The trigger's part is here; the maintenance
-- worker's sweep (of runs dex.status_sweep_age old) and the REST API's use
-- of it are clients/python/tests/test_rest_status_index.py's.  The sweep may
-- add rows of active runs while this runs, with their true status, so only
-- rows that must, or must not, be there are looked at.
--
SELECT dex.create_queue('si-wf', 'workflow'), dex.create_queue('si-act', 'activity'),
       dex.create_queue('si-hidden', 'workflow');
CREATE FUNCTION pg_temp.indexed(run uuid) RETURNS text LANGUAGE sql AS $$
    SELECT coalesce((SELECT i.status || CASE WHEN i.queue_id = r.queue_id THEN '' ELSE ' (wrong queue)' END
                       FROM dex.run_status_index i JOIN dex.workflow_run r ON r.id = i.run_id
                      WHERE i.run_id = run), '-')
$$;

-- 1. a young run that ends in a status few runs have gets its row at once; one that
--    completes, none
SELECT dex.create_run('si', 'si-wf') AS term \gset
SELECT dex.terminate_run(:'term', 'stop');
SELECT pg_temp.indexed(:'term');
SELECT dex.create_run('si', 'si-wf') AS done \gset
SELECT lock_version AS v FROM dex.poll_tasks('si-wf', 'w', 1) \gset
SELECT dex.complete_task(:'done', 0, :v, '[{"id": 1, "completeRun": {}}]');
SELECT pg_temp.indexed(:'done');

-- 2. a running run: suspended it has its row; resumed while young, the row goes (the
--    sweep adds it again if it is still running dex.status_sweep_age after it was created)
SELECT dex.create_run('si', 'si-wf') AS run \gset
SELECT lock_version AS v FROM dex.poll_tasks('si-wf', 'w', 1) \gset
SELECT dex.complete_task(:'run', 0, :v, '[{"id": 1, "scheduleActivity": {"name": "a", "queue": "si-act"}}]');
SELECT dex.suspend_run(:'run');
SELECT pg_temp.indexed(:'run');
SELECT dex.resume_run(:'run');
SELECT pg_temp.indexed(:'run');

-- 3. an old run (its creation moved an hour back, as if it had run that long): every
--    status change keeps its row in step, and it goes when the run completes
UPDATE dex.workflow_run SET created_at = created_at - interval '1 hour' WHERE id = :'run';
SELECT dex.suspend_run(:'run');
SELECT pg_temp.indexed(:'run');
SELECT dex.resume_run(:'run');
SELECT pg_temp.indexed(:'run');
SELECT task_id, lock_version AS v FROM dex.poll_tasks('si-act', 'w', 1) \gset
SELECT dex.complete_task(:'run', :task_id, :v, '{"json": "1"}');
SELECT lock_version AS v FROM dex.poll_tasks('si-wf', 'w', 1) \gset
SELECT dex.complete_task(:'run', 0, :v, '[{"id": 2, "failRun": {"failure": {"message": "no"}}}]');
SELECT pg_temp.indexed(:'run');
-- an old run that was not swept gets no row when it starts running (the sweep adds
-- active runs, under a lock that keeps their status still), and none when it completes
SELECT dex.create_run('si', 'si-wf') AS old \gset
UPDATE dex.workflow_run SET created_at = created_at - interval '1 hour' WHERE id = :'old';
SELECT lock_version AS v FROM dex.poll_tasks('si-wf', 'w', 1) \gset
SELECT dex.complete_task(:'old', 0, :v, '[{"id": 1, "scheduleActivity": {"name": "a", "queue": "si-act"}}]');
SELECT pg_temp.indexed(:'old');
SELECT task_id, lock_version AS v FROM dex.poll_tasks('si-act', 'w', 1) \gset
SELECT dex.complete_task(:'old', :task_id, :v, '{"json": "1"}');
SELECT lock_version AS v FROM dex.poll_tasks('si-wf', 'w', 1) \gset
SELECT dex.complete_task(:'old', 0, :v, '[{"id": 2, "completeRun": {}}]');
SELECT pg_temp.indexed(:'old');

-- 4. a status change that is not one (the same status set again) does nothing
UPDATE dex.workflow_run SET status = status WHERE id = :'run';
SELECT pg_temp.indexed(:'run');

-- 5. the view shows a role only the runs of the queues it may use; purging a run takes
--    its row with it
SELECT dex.create_run('si', 'si-hidden') AS hidden \gset
SELECT dex.terminate_run(:'hidden');
SELECT dex.revoke_queue('si-hidden', 'dex_client');
CREATE ROLE si_client IN ROLE dex_client;
SET ROLE si_client;
SELECT status FROM dex.runs_in_status WHERE id IN (:'term', :'run', :'hidden') ORDER BY status;
SELECT horizon IS NOT NULL AS has_horizon FROM dex.run_status_horizon;
SELECT * FROM dex.run_status_index;
RESET ROLE;
SELECT dex.purge_run(:'term');
SELECT pg_temp.indexed(:'term');
DROP ROLE si_client;
