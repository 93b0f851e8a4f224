--
-- debounce: dex.create_run's debounce_key, debounce and debounce_max
--
SELECT dex.create_queue('db-wf', 'workflow'), dex.create_queue('db-other', 'workflow');

CREATE FUNCTION pg_temp.error_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    state text; message text;
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT;
    RETURN state || ': ' || message;
END $$;
-- the run's START timer, as whole seconds after the key's first call (the calls below are
-- some milliseconds apart)
CREATE FUNCTION pg_temp.start_after_first(run uuid) RETURNS integer LANGUAGE sql AS $$
    SELECT floor(extract(epoch FROM t.due_at - d.first_at))::integer
      FROM dex.run_timer t JOIN dex.run_debounce d ON d.run_id = t.run_id
     WHERE t.run_id = run AND t.kind = 'START'
$$;

-- the first call makes a DELAYED run that starts one window later
SELECT dex.create_run('db', 'db-wf', '1', debounce_key => 'k1', debounce => '60 s',
                      debounce_max => '90 s') AS run \gset
SELECT status, dex.payload_value(argument) AS argument FROM dex.workflow_run WHERE id = :'run';
SELECT pg_temp.start_after_first(:'run') AS starts_after;
SELECT count(*) AS tasks FROM dex.workflow_task WHERE run_id = :'run';

-- calls with the same key (queue, workflow) while it has not started: the same run, the
-- latest argument, the start pushed to the window's end (the clock stands still in a
-- transaction, so a later call is simulated by moving the first call back)
UPDATE dex.run_debounce SET first_at = first_at - interval '20 s' WHERE run_id = :'run';
UPDATE dex.run_timer SET due_at = due_at - interval '20 s' WHERE run_id = :'run';
SELECT dex.create_run('db', 'db-wf', '2', debounce_key => 'k1', debounce => '60 s',
                      debounce_max => '90 s') = :'run' AS same_run;
SELECT status, dex.payload_value(argument) AS argument FROM dex.workflow_run WHERE id = :'run';
SELECT pg_temp.start_after_first(:'run') AS starts_after;
-- never past debounce_max after the first call
UPDATE dex.run_debounce SET first_at = first_at - interval '50 s' WHERE run_id = :'run';
UPDATE dex.run_timer SET due_at = due_at - interval '50 s' WHERE run_id = :'run';
SELECT dex.create_run('db', 'db-wf', '3', debounce_key => 'k1', debounce => '60 s',
                      debounce_max => '90 s') = :'run' AS same_run;
SELECT pg_temp.start_after_first(:'run') AS starts_after;
SELECT dex.payload_value(argument) AS argument FROM dex.workflow_run WHERE id = :'run';

-- other keys, workflows and queues are other windows
SELECT count(DISTINCT r) AS runs FROM (VALUES
    (dex.create_run('db', 'db-wf', debounce_key => 'k2', debounce => '60 s')),
    (dex.create_run('db-b', 'db-wf', debounce_key => 'k1', debounce => '60 s')),
    (dex.create_run('db', 'db-other', debounce_key => 'k1', debounce => '60 s')),
    (:'run'::uuid)) AS v (r);

-- an execution timeout counts from the start, and moves with it
SELECT dex.create_run('db-t', 'db-wf', debounce_key => 't', debounce => '10 s',
                      execution_timeout => '1 hour') AS timed \gset
UPDATE dex.run_debounce SET first_at = first_at - interval '5 s' WHERE run_id = :'timed';
UPDATE dex.run_timer SET due_at = due_at - interval '5 s' WHERE run_id = :'timed';
SELECT dex.create_run('db-t', 'db-wf', debounce_key => 't', debounce => '10 s',
                      execution_timeout => '1 hour') = :'timed' AS same_run;
SELECT kind, ceil(extract(epoch FROM due_at - now()))::integer AS due_in
  FROM dex.run_timer WHERE run_id = :'timed' ORDER BY kind;

-- the window ends: the run starts, exactly once, with the last argument; the next call
-- opens a new window with a new run
SELECT dex.create_run('db-s', 'db-wf', '"a"', debounce_key => 's', debounce => '0.2 s') AS s1 \gset
SELECT dex.create_run('db-s', 'db-wf', '"b"', debounce_key => 's', debounce => '0.2 s') = :'s1' AS same_run;
CREATE FUNCTION pg_temp.wait_for_start(run uuid) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    s text;
BEGIN
    FOR i IN 1..500 LOOP
        SELECT status INTO s FROM dex.workflow_run WHERE id = run;
        IF s <> 'DELAYED' THEN
            RETURN s;
        END IF;
        PERFORM pg_sleep(0.02);
    END LOOP;
    RETURN s;
END $$;
SELECT pg_temp.wait_for_start(:'s1');
SELECT dex.payload_value(argument) AS argument, (SELECT count(*) FROM dex.workflow_task WHERE run_id = :'s1') AS tasks
  FROM dex.workflow_run WHERE id = :'s1';
SELECT dex.create_run('db-s', 'db-wf', '"c"', debounce_key => 's', debounce => '0.2 s') <> :'s1' AS new_run;
SELECT count(*) AS runs FROM dex.workflow_run WHERE workflow_name = 'db-s';

-- a pending run that was cancelled is not updated either
SELECT dex.create_run('db-c', 'db-wf', debounce_key => 'c', debounce => '60 s') AS c1 \gset
SELECT dex.cancel_run(:'c1');
SELECT dex.create_run('db-c', 'db-wf', debounce_key => 'c', debounce => '60 s') <> :'c1' AS new_run;

-- purging the runs takes the keys that name them along
SELECT dex.terminate_run(id) FROM dex.workflow_run WHERE workflow_name = 'db-c' AND status = 'DELAYED';
SELECT dex.purge_run(id) FROM dex.workflow_run WHERE workflow_name = 'db-c';
SELECT count(*) AS keys_left FROM dex.run_debounce WHERE debounce_key = 'c';

-- bad input: a clear error, nothing made
SELECT count(*) AS runs_before FROM dex.workflow_run \gset
SELECT pg_temp.error_of($$SELECT dex.create_run('db', 'db-wf', debounce_key => 'x')$$);
SELECT pg_temp.error_of($$SELECT dex.create_run('db', 'db-wf', debounce => '1 s')$$);
SELECT pg_temp.error_of($$SELECT dex.create_run('db', 'db-wf', debounce_max => '1 s')$$);
SELECT pg_temp.error_of($$SELECT dex.create_run('db', 'db-wf', debounce_key => 'x', debounce => '0 s')$$);
SELECT pg_temp.error_of($$SELECT dex.create_run('db', 'db-wf', debounce_key => 'x', debounce => '-1 s')$$);
SELECT pg_temp.error_of($$SELECT dex.create_run('db', 'db-wf', debounce_key => 'x', debounce => '10 s', debounce_max => '5 s')$$);
SELECT pg_temp.error_of($$SELECT dex.create_run('db', 'db-wf', debounce_key => '', debounce => '10 s')$$);
SELECT pg_temp.error_of($$SELECT dex.create_run('db', 'db-wf', debounce_key => repeat('x', 256), debounce => '10 s')$$);
SELECT pg_temp.error_of($$SELECT dex.create_run('db', 'db-wf', debounce_key => 'x', debounce => '10 s', instance_id => 'i')$$);
SELECT pg_temp.error_of($$SELECT dex.create_run('db', 'db-wf', debounce_key => 'x', debounce => '10 s', start_at => now())$$);
SELECT pg_temp.error_of($$SELECT dex.create_run('db', 'db-nope', debounce_key => 'x', debounce => '10 s')$$);
SELECT count(*) - :runs_before AS runs_made FROM dex.workflow_run;
SELECT count(*) AS keys FROM dex.run_debounce WHERE debounce_key = 'x';
