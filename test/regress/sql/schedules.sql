--
-- schedules: cron expressions and their next times (DST edges in two time zones), every
-- function's bad input (its SQLSTATE, nothing changed), the overlap policies, catch-up and
-- skip counts, pause, alter, backfill and delete
--
SET timezone = 'UTC';
SELECT dex.create_queue('sch-wf', 'workflow');
CREATE FUNCTION pg_temp.wait_until(query text, timeout_s float8 DEFAULT 20) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE ok boolean;
BEGIN
    FOR i IN 1..(timeout_s * 50)::int LOOP
        EXECUTE query INTO ok;
        IF ok THEN RETURN true; END IF;
        PERFORM pg_sleep(0.02);
    END LOOP;
    RETURN false;
END $$;
-- the ticks of a cron expression in a zone from a start (the schedule never fires here:
-- it starts in 2030), shown as UTC and as the zone's wall clock
CREATE FUNCTION pg_temp.ticks(expr text, tz text, start timestamptz, n int DEFAULT 4)
RETURNS TABLE (utc text, wall text) LANGUAGE plpgsql AS $$
BEGIN
    PERFORM dex.create_schedule('sch-cron', 'w', 'sch-wf', cron => expr, timezone => tz,
                                start_at => start);
    RETURN QUERY SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI"Z"'),
                        to_char(t AT TIME ZONE tz, 'Dy YYYY-MM-DD HH24:MI')
                   FROM dex.schedule_next_times('sch-cron', n) t;
    PERFORM dex.delete_schedule('sch-cron');
END $$;
-- a fingerprint of the schedules and the runs: a refused call changes neither
CREATE FUNCTION pg_temp.fingerprint() RETURNS text LANGUAGE sql AS $$
SELECT md5(coalesce((SELECT string_agg(s::text, ';' ORDER BY s.id) FROM dex.schedule s), '') ||
           coalesce((SELECT string_agg(r::text, ';' ORDER BY r.run_id) FROM dex.schedule_run r), '') ||
           (SELECT count(*) FROM dex.workflow_run)::text)
$$;

-- 1. Cron expressions: fields, ranges, steps, lists, names, shorthands
SELECT * FROM pg_temp.ticks('*/20 * * * *', 'UTC', '2030-01-01');
SELECT * FROM pg_temp.ticks('5,10-12 3 * * *', 'UTC', '2030-01-01', 5);
SELECT * FROM pg_temp.ticks('0 9 * jan,JUL Mon-fri', 'UTC', '2030-06-28');
SELECT * FROM pg_temp.ticks('0 0 1,15 * 5', 'UTC', '2030-01-01', 5);   -- day 1 or 15, or a Friday
SELECT * FROM pg_temp.ticks('0 0 * * 7', 'UTC', '2030-01-01', 2);      -- 7 is Sunday
SELECT * FROM pg_temp.ticks('0 0 29 2 *', 'UTC', '2030-01-01', 2);     -- leap days
SELECT * FROM pg_temp.ticks('30 4/6 * * *', 'UTC', '2030-01-01', 5);   -- from 4, every 6 hours
SELECT * FROM pg_temp.ticks('@yearly', 'UTC', '2030-06-01', 2);
SELECT * FROM pg_temp.ticks('@annually', 'UTC', '2030-06-01', 1);
SELECT * FROM pg_temp.ticks('@monthly', 'UTC', '2030-06-15', 2);
SELECT * FROM pg_temp.ticks('@weekly', 'UTC', '2030-06-01', 2);
SELECT * FROM pg_temp.ticks('@daily', 'UTC', '2030-06-01', 2);
SELECT * FROM pg_temp.ticks('@midnight', 'UTC', '2030-06-01', 1);
SELECT * FROM pg_temp.ticks('@HOURLY', 'UTC', '2030-06-01', 2);
-- an expression that never fires (no February 30th) is refused, naming it
SELECT dex.create_schedule('sch-never', 'w', 'sch-wf', cron => '0 0 30 2 *');
-- a time zone's wall clock
SELECT * FROM pg_temp.ticks('0 9 * * *', 'Asia/Kolkata', '2030-01-01', 2);

-- 2. Daylight saving.  America/New_York: on 2030-03-10 the clocks skip 02:00-03:00 (02:30
-- does not exist: no tick that day), on 2030-11-03 they repeat 01:00-02:00 (01:30 fires once,
-- at its first occurrence, EDT)
SELECT * FROM pg_temp.ticks('30 2 * * *', 'America/New_York', '2030-03-09 00:00-05');
SELECT * FROM pg_temp.ticks('30 1 * * *', 'America/New_York', '2030-11-02 00:00-04');
SELECT * FROM pg_temp.ticks('*/30 1-2 * * *', 'America/New_York', '2030-11-03 00:00-04', 5);
SELECT * FROM pg_temp.ticks('0 * * * *', 'America/New_York', '2030-03-10 00:30-05', 4);
-- Europe/Berlin: on 2030-03-31 02:00-03:00 does not exist, on 2030-10-27 it happens twice
SELECT * FROM pg_temp.ticks('30 2 * * *', 'Europe/Berlin', '2030-03-30 00:00+01');
SELECT * FROM pg_temp.ticks('30 2 * * *', 'Europe/Berlin', '2030-10-26 00:00+02');
SELECT * FROM pg_temp.ticks('0 * * * *', 'Europe/Berlin', '2030-10-27 00:30+02', 4);
-- every: start_at plus multiples, or multiples since 1970-01-01 UTC; a day is 24 hours
SELECT dex.create_schedule('sch-every', 'w', 'sch-wf', every => '90 minutes', start_at => '2030-03-30 23:00+01',
                           timezone => 'Europe/Berlin');
SELECT t FROM dex.schedule_next_times('sch-every', 3) t;
SELECT dex.alter_schedule('sch-every', every => '1 day', start_at => '-infinity', end_at => '2100-01-01') IS NOT NULL AS altered;
SELECT t::time = '00:00' AS at_midnight_utc FROM dex.schedule_next_times('sch-every', 2) t;
SELECT dex.delete_schedule('sch-every');

-- 3. Malformed expressions: 22023, saying where
\set VERBOSITY default
SELECT dex.create_schedule('sch-bad', 'w', 'sch-wf', cron => '*/5 * 32 * *');
SELECT dex.create_schedule('sch-bad', 'w', 'sch-wf', cron => '60 * * * *');
SELECT dex.create_schedule('sch-bad', 'w', 'sch-wf', cron => '0 0 * foo *');
SELECT dex.create_schedule('sch-bad', 'w', 'sch-wf', cron => '0 0 * * Mo');
SELECT dex.create_schedule('sch-bad', 'w', 'sch-wf', cron => '0 5-2 * * *');
SELECT dex.create_schedule('sch-bad', 'w', 'sch-wf', cron => '*/0 * * * *');
SELECT dex.create_schedule('sch-bad', 'w', 'sch-wf', cron => '1,,2 * * * *');
SELECT dex.create_schedule('sch-bad', 'w', 'sch-wf', cron => '1, * * * *');
SELECT dex.create_schedule('sch-bad', 'w', 'sch-wf', cron => '1-x * * * *');
SELECT dex.create_schedule('sch-bad', 'w', 'sch-wf', cron => '* * * *');
SELECT dex.create_schedule('sch-bad', 'w', 'sch-wf', cron => '* * * * * *');
SELECT dex.create_schedule('sch-bad', 'w', 'sch-wf', cron => '');
SELECT dex.create_schedule('sch-bad', 'w', 'sch-wf', cron => '@fortnightly');
SELECT dex.create_schedule('sch-bad', 'w', 'sch-wf', cron => '@daily 5');
\set VERBOSITY sqlstate

-- 4. Bad input of every function: its SQLSTATE, and nothing changed
SELECT dex.create_schedule('sch-ok', 'w', 'sch-wf', every => '1 hour', start_at => '2030-01-01') IS NOT NULL AS created;
SELECT pg_temp.fingerprint() AS fp \gset
SELECT dex.create_schedule(NULL, 'w', 'sch-wf', every => '1 hour');
SELECT dex.create_schedule('', 'w', 'sch-wf', every => '1 hour');
SELECT dex.create_schedule(repeat('n', 250), 'w', 'sch-wf', every => '1 hour');
SELECT dex.create_schedule('sch-ok', 'w', 'sch-wf', every => '1 hour');           -- taken
SELECT dex.create_schedule('sch-x', NULL, 'sch-wf', every => '1 hour');
SELECT dex.create_schedule('sch-x', 'w', NULL, every => '1 hour');
SELECT dex.create_schedule('sch-x', 'w', 'no-such-queue', every => '1 hour');
SELECT dex.create_queue('sch-act', 'activity');
SELECT pg_temp.fingerprint() AS fp \gset
SELECT dex.create_schedule('sch-x', 'w', 'sch-act', every => '1 hour');          -- not a workflow queue
SELECT dex.create_schedule('sch-x', 'w', 'sch-wf');                                -- neither
SELECT dex.create_schedule('sch-x', 'w', 'sch-wf', cron => '@daily', every => '1 hour');  -- both
SELECT dex.create_schedule('sch-x', 'w', 'sch-wf', every => '0.5 seconds');
SELECT dex.create_schedule('sch-x', 'w', 'sch-wf', every => '-1 hour');
SELECT dex.create_schedule('sch-x', 'w', 'sch-wf', every => '1 month');
SELECT dex.create_schedule('sch-x', 'w', 'sch-wf', every => '1 hour', version => 0);
SELECT dex.create_schedule('sch-x', 'w', 'sch-wf', every => '1 hour', version => NULL);
SELECT dex.create_schedule('sch-x', 'w', 'sch-wf', every => '1 hour', timezone => 'Mars/Olympus');
SELECT dex.create_schedule('sch-x', 'w', 'sch-wf', every => '1 hour', timezone => NULL);
SELECT dex.create_schedule('sch-x', 'w', 'sch-wf', every => '1 hour', overlap => 'sometimes');
SELECT dex.create_schedule('sch-x', 'w', 'sch-wf', every => '1 hour', overlap => NULL);
SELECT dex.create_schedule('sch-x', 'w', 'sch-wf', every => '1 hour', catchup_window => '-1 s');
SELECT dex.create_schedule('sch-x', 'w', 'sch-wf', every => '1 hour', catchup_window => NULL);
SELECT dex.create_schedule('sch-x', 'w', 'sch-wf', every => '1 hour', jitter => '-1 s');
SELECT dex.create_schedule('sch-x', 'w', 'sch-wf', every => '1 hour', jitter => '1 year');
SELECT dex.create_schedule('sch-x', 'w', 'sch-wf', every => '1 hour', start_at => '2030-01-02', end_at => '2030-01-01');
SELECT dex.create_schedule('sch-x', 'w', 'sch-wf', every => '1 hour', start_at => 'infinity');
SELECT dex.create_schedule('sch-x', 'w', 'sch-wf', every => '1 hour', paused => NULL);
SELECT dex.create_schedule('sch-x', 'w', 'sch-wf', every => '1 hour', labels => '[1]');
SELECT dex.create_schedule('sch-x', 'w', 'sch-wf', every => '1 hour', labels => '{"a": 1}');
SELECT pg_temp.fingerprint() = :'fp' AS unchanged;
SELECT dex.alter_schedule(NULL, every => '1 hour');
SELECT dex.alter_schedule('no-such', every => '1 hour');
SELECT dex.alter_schedule('sch-ok', cron => '@daily', every => '1 hour');
SELECT dex.alter_schedule('sch-ok', cron => 'bad');
SELECT dex.alter_schedule('sch-ok', every => '1 month');
SELECT dex.alter_schedule('sch-ok', version => -1);
SELECT dex.alter_schedule('sch-ok', timezone => 'Nowhere');
SELECT dex.alter_schedule('sch-ok', overlap => 'never');
SELECT dex.alter_schedule('sch-ok', catchup_window => '-1 day');
SELECT dex.alter_schedule('sch-ok', jitter => '-1 day');
SELECT dex.alter_schedule('sch-ok', end_at => '2029-01-01');
SELECT dex.alter_schedule('sch-ok', labels => '"x"');
SELECT dex.alter_schedule('sch-ok', workflow => '');
SELECT dex.alter_schedule('sch-ok', queue => 'no-such-queue');
SELECT dex.alter_schedule('sch-ok', queue => 'sch-act');
SELECT dex.pause_schedule(NULL);
SELECT dex.pause_schedule('no-such');
SELECT dex.unpause_schedule(NULL);
SELECT dex.unpause_schedule('no-such');
SELECT dex.delete_schedule(NULL);
SELECT dex.delete_schedule('no-such');
SELECT dex.trigger_schedule(NULL);
SELECT dex.trigger_schedule('no-such');
SELECT dex.trigger_schedule('sch-ok', overlap => 'maybe');
SELECT * FROM dex.backfill_schedule(NULL, '2030-01-01', '2030-01-02');
SELECT * FROM dex.backfill_schedule('no-such', '2030-01-01', '2030-01-02');
SELECT * FROM dex.backfill_schedule('sch-ok', NULL, '2030-01-02');
SELECT * FROM dex.backfill_schedule('sch-ok', '2030-01-01', NULL);
SELECT * FROM dex.backfill_schedule('sch-ok', '2030-01-02', '2030-01-01');
SELECT * FROM dex.backfill_schedule('sch-ok', '-infinity', '2030-01-01');
SELECT * FROM dex.backfill_schedule('sch-ok', '2030-01-01', '2030-03-01');      -- over 1000 ticks
SELECT * FROM dex.backfill_schedule('sch-ok', '2030-01-01', '2030-01-02', overlap => 'x');
SELECT dex.schedule_next_times(NULL, 1);
SELECT dex.schedule_next_times('no-such', 1);
SELECT dex.schedule_next_times('sch-ok', 0);
SELECT dex.schedule_next_times('sch-ok', 1001);
SELECT dex.schedule_next_times('sch-ok', NULL);
SELECT pg_temp.fingerprint() = :'fp' AS unchanged;
SELECT dex.delete_schedule('sch-ok');

-- 5. Overlap policies, through dex.trigger_schedule (the tick now) on a schedule whose own
-- ticks start in 2030.  Its runs carry the labels dex.schedule and dex.tick and an instance id.
SELECT dex.create_schedule('sch-ov', 'ov', 'sch-wf', every => '1 day', start_at => '2030-01-01',
                           argument => '{"n": 1}', labels => '{"team": "ops"}') IS NOT NULL AS created;
SELECT dex.trigger_schedule('sch-ov') AS r1 \gset
SELECT workflow_name, status, labels->>'team' AS team, labels->>'dex.schedule' AS schedule,
       labels ? 'dex.tick' AS has_tick, instance_id LIKE 'sch-ov@%Z' AS instance_id_of_tick,
       dex.payload_value(argument) AS argument
  FROM dex.workflow_run WHERE id = :'r1';
SELECT dex.trigger_schedule('sch-ov') IS NULL AS skipped;                        -- skip (its policy)
SELECT dex.trigger_schedule('sch-ov', overlap => 'buffer_one') IS NULL AS buffered;
SELECT dex.trigger_schedule('sch-ov', overlap => 'buffer_one') IS NULL AS skipped_buffer_full;
SELECT buffered_tick IS NOT NULL AS has_buffered, runs_started, skipped_overlap, last_run_status
  FROM dex.schedules WHERE name = 'sch-ov';
SELECT dex.trigger_schedule('sch-ov', overlap => 'allow_all') AS r2 \gset
SELECT count(*) AS active FROM dex.workflow_run WHERE labels->>'dex.schedule' = 'sch-ov' AND status = 'CREATED';
SELECT dex.trigger_schedule('sch-ov', overlap => 'cancel_other') AS r3 \gset
SELECT id = :'r1' AS r1, id = :'r2' AS r2, status FROM dex.workflow_run
 WHERE id IN (:'r1', :'r2', :'r3') ORDER BY id;
SELECT dex.trigger_schedule('sch-ov', overlap => 'terminate_other') AS r4 \gset
SELECT status FROM dex.workflow_run WHERE id = :'r3';
SELECT last_run_id = :'r4' AS last_is_r4, last_run_status, runs_started, skipped_overlap FROM dex.schedules WHERE name = 'sch-ov';
-- a RUNNING run asked to cancel stays active until its workflow ends it
SELECT lock_version AS v FROM dex.poll_tasks('sch-wf', 'w') WHERE run_id = :'r4' \gset
SELECT dex.complete_task(:'r4', 0, :v, '[]');
SELECT dex.trigger_schedule('sch-ov', overlap => 'cancel_other') AS r5 \gset
SELECT status, cancel_requested FROM dex.workflow_run WHERE id = :'r4';
-- the buffered tick starts when the runs before it have ended (their end wakes the scheduler)
SELECT dex.terminate_run(:'r4', 'done'), dex.terminate_run(:'r5', 'done');
SELECT pg_temp.wait_until($$SELECT buffered_tick IS NULL FROM dex.schedule WHERE name = 'sch-ov'$$);
SELECT runs_started, last_run_status FROM dex.schedules WHERE name = 'sch-ov';
SELECT count(*) AS active_runs_known FROM dex.schedule_run sr JOIN dex.schedule s ON s.id = sr.schedule_id
 WHERE s.name = 'sch-ov';

-- 5b. The policies when the scheduler fires the ticks (every second, no worker: runs stay active)
SELECT count(dex.create_schedule('sch-pol-' || p, 'pol', 'sch-wf', every => '1 second', overlap => p))
  FROM unnest('{skip,buffer_one,cancel_other,terminate_other}'::text[]) p;
SELECT pg_temp.wait_until($$SELECT bool_and(runs_started + skipped_overlap >= 3) AND count(*) = 4
                              FROM dex.schedule WHERE name LIKE 'sch-pol-%'$$);
SELECT count(dex.pause_schedule(name)) FROM dex.schedules WHERE name LIKE 'sch-pol-%';
-- skip: one run, the other ticks skipped; buffer_one: one run, a tick kept, the others skipped
SELECT name, runs_started, skipped_overlap >= 1 AS skipped, buffered_tick IS NOT NULL AS buffered
  FROM dex.schedules WHERE name IN ('sch-pol-skip', 'sch-pol-buffer_one') ORDER BY name;
-- cancel_other and terminate_other: each tick ended the run before it (a CREATED run is
-- cancelled at once): only the last run is active
SELECT s.name, s.runs_started >= 3 AS ticked,
       count(*) FILTER (WHERE r.status = 'CREATED') AS active,
       count(*) FILTER (WHERE r.status IN ('CANCELLED', 'TERMINATED')) = s.runs_started - 1 AS others_ended,
       string_agg(DISTINCT r.status, ',' ORDER BY r.status) AS statuses,
       bool_and(r.id = s.last_run_id) FILTER (WHERE r.status = 'CREATED') AS last_is_active
  FROM dex.schedules s JOIN dex.workflow_run r ON r.labels->>'dex.schedule' = s.name
 WHERE s.name IN ('sch-pol-cancel_other', 'sch-pol-terminate_other')
 GROUP BY s.name, s.runs_started, s.last_run_id ORDER BY s.name;
SELECT skipped_overlap, skipped_missed FROM dex.schedules WHERE name = 'sch-pol-terminate_other';

-- 6. Catch-up: a schedule whose start_at is in the past has missed the ticks since then;
-- those within catchup_window fire (under the overlap policy), older ones are counted
SELECT dex.create_schedule('sch-catchup-skip', 'cu', 'sch-wf', every => '1 minute',
                           start_at => now() - interval '10 minutes 30 seconds',
                           catchup_window => '2 minutes 15 seconds') IS NOT NULL AS created;
SELECT dex.create_schedule('sch-catchup-all', 'cu', 'sch-wf', every => '1 minute',
                           start_at => now() - interval '10 minutes 30 seconds',
                           catchup_window => '2 minutes 15 seconds', overlap => 'allow_all') IS NOT NULL AS created;
SELECT pg_temp.wait_until($$SELECT count(*) = 2 FROM dex.schedule
                            WHERE name LIKE 'sch-catchup-%' AND next_tick > now()$$);
SELECT name, runs_started, skipped_overlap, skipped_missed, skipped, last_run_status
  FROM dex.schedules WHERE name LIKE 'sch-catchup-%' ORDER BY name;
SELECT s.name, count(*) AS runs FROM dex.workflow_run r JOIN dex.schedule s ON s.name = r.labels->>'dex.schedule'
 WHERE s.name LIKE 'sch-catchup-%' GROUP BY 1 ORDER BY 1;

-- 7. Pause and unpause; alter; the view
SELECT dex.pause_schedule('sch-catchup-skip', 'maintenance');
SELECT paused, note, next_fire_at FROM dex.schedules WHERE name = 'sch-catchup-skip';
SELECT due_at FROM dex.schedule WHERE name = 'sch-catchup-skip';
SELECT dex.unpause_schedule('sch-catchup-skip') > now() AS next_in_future;
SELECT paused, note, next_fire_at > now() AS next_in_future FROM dex.schedules WHERE name = 'sch-catchup-skip';
SELECT dex.alter_schedule('sch-catchup-skip', cron => '0 12 * * *', timezone => 'Europe/Berlin',
                          jitter => '10 minutes', overlap => 'allow_all', labels => '{"v": "2"}') > now() AS next_in_future;
SELECT cron, every, timezone, overlap, jitter, labels,
       next_fire_at >= next_tick AND next_fire_at < next_tick + interval '10 minutes' AS jittered,
       to_char(next_tick AT TIME ZONE 'Europe/Berlin', 'HH24:MI') AS local_tick
  FROM dex.schedules WHERE name = 'sch-catchup-skip';
-- jitter is the same for the same tick, whoever computes it
SELECT dex.alter_schedule('sch-catchup-skip', labels => '{"v": "3"}') = next_fire_at AS same_jitter
  FROM dex.schedules WHERE name = 'sch-catchup-skip';

-- 8. Backfill: the ticks of a range, one after another, under the overlap policy
SELECT dex.create_schedule('sch-bf', 'bf', 'sch-wf', cron => '0 */6 * * *', start_at => '2030-01-01',
                           overlap => 'allow_all') IS NOT NULL AS created;
SELECT tick, run_id IS NOT NULL AS started FROM dex.backfill_schedule('sch-bf', '2025-01-01', '2025-01-02');
SELECT tick, run_id IS NOT NULL AS started FROM dex.backfill_schedule('sch-bf', '2025-02-01', '2025-02-01 13:00', overlap => 'skip');
SELECT runs_started, skipped_overlap FROM dex.schedules WHERE name = 'sch-bf';
SELECT count(*) FROM dex.workflow_run WHERE labels->>'dex.schedule' = 'sch-bf';
-- a tick whose run is still active does not start a second one (its instance id)
SELECT tick, run_id IS NULL AS not_again FROM dex.backfill_schedule('sch-bf', '2025-01-01', '2025-01-01 01:00', overlap => 'allow_all');

-- 9. end_at: no tick after it
SELECT dex.create_schedule('sch-end', 'e', 'sch-wf', every => '1 hour', start_at => '2030-01-01', end_at => '2030-01-01 02:00') AS first;
SELECT t FROM dex.schedule_next_times('sch-end', 10) t;

-- 10. Delete: the schedule goes, its runs stay
SELECT dex.delete_schedule('sch-bf');
SELECT count(*) FROM dex.schedules WHERE name = 'sch-bf';
SELECT count(*) FROM dex.workflow_run WHERE labels->>'dex.schedule' = 'sch-bf';

-- clean up: the schedules go, and so do the runs (no worker serves them)
SELECT count(*) AS deleted FROM (SELECT dex.delete_schedule(name) FROM dex.schedules WHERE name LIKE 'sch-%') d;
SELECT count(*) >= 4 AS terminated
  FROM (SELECT dex.terminate_run(id, 'test over') FROM dex.workflow_run
         WHERE labels ? 'dex.schedule' AND status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED', 'TERMINATED', 'TIMED_OUT')) t;
