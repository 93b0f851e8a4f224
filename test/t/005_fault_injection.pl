# Fault injection under load.  Thousands of runs, each with three
# activities (some fail and are retried, some are abandoned until their lease
# expires, a few fail for good), a durable timer and a wait for an external
# event with a timeout, are driven by workers written in PL/pgSQL.  While they
# run, the test SIGKILLs worker backends, the scheduler (once right after a
# crash, while it rebuilds the task tables) and the maintenance worker when
# there is one, and crashes the server once with an immediate shutdown; every
# SIGKILL of a backend makes the postmaster reset the server, so each kill is
# a crash recovery too.  Afterwards every run has completed, each history is
# well-formed, every activity result and external event that the API accepted
# was recorded exactly once, and nothing is left behind.
#
# The clients keep their own log in ordinary tables, written in the same
# transaction as the API call they record (the run a creator started, the
# completion or failure an activity worker got accepted, the event a sender
# got accepted): what committed is what the engine promised, and the history
# must show it.
#
# Environment: DEX_FAULT_RUNS (default 3000) runs, DEX_FAULT_SEED the random
# seed of the kill plan (printed, to replay a plan).
use strict;
use warnings;
use IPC::Run;
use List::Util qw(shuffle);
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $runs = $ENV{DEX_FAULT_RUNS} || 3000;
my $seed = $ENV{DEX_FAULT_SEED} || int(rand(1_000_000));
srand($seed);
note "runs = $runs, seed = $seed";

my $node = dex_cluster('dex', conf => q{
restart_after_crash = on
max_connections = 40
log_statement = none
});
my $t_start = time;

$node->safe_psql('postgres', q{
	CREATE EXTENSION dex;
	SELECT dex.create_queue('fi-wf', 'workflow');
	SELECT dex.create_queue('fi-act', 'activity');
});
# the maintenance worker (when the installed dex has one) passes every second
my $has_maintenance = $node->safe_psql('postgres',
	"SELECT count(*) FROM pg_settings WHERE name = 'dex.maintenance_naptime'");
if ($has_maintenance)
{
	$node->safe_psql('postgres', q{
		ALTER SYSTEM SET dex.maintenance_naptime = '1s';
		SELECT pg_reload_conf();
	});
}

# ----------------------------------------------------------------------
# The clients, in PL/pgSQL.  Each commits after every API call it makes.
# ----------------------------------------------------------------------
$node->safe_psql('postgres', <<'EOSQL');
CREATE TABLE fi_control (stop boolean NOT NULL);
INSERT INTO fi_control VALUES (false);
-- what the clients got accepted, each row written with the call it records
CREATE TABLE fi_created (n integer PRIMARY KEY, run_id uuid NOT NULL UNIQUE,
                         send_after timestamptz);   -- NULL: this run gets no event
CREATE TABLE fi_sent (run_id uuid PRIMARY KEY, accepted boolean NOT NULL, rejected boolean NOT NULL);
CREATE TABLE fi_resent (run_id uuid PRIMARY KEY, accepted boolean, rejected boolean NOT NULL);
CREATE TABLE fi_act_log (run_id uuid NOT NULL, act integer NOT NULL, attempt integer NOT NULL,
                         outcome text NOT NULL, worker text NOT NULL);
CREATE TABLE fi_wf_log (run_id uuid NOT NULL, outcome text NOT NULL, worker text NOT NULL);
CREATE TABLE fi_late (run_id uuid NOT NULL, act integer NOT NULL, outcome text NOT NULL);
-- tasks a worker that survives the crash holds (its memory, as a table)
CREATE TABLE fi_held (id serial PRIMARY KEY, run_id uuid NOT NULL, task_id integer NOT NULL,
                      lock_version bigint NOT NULL, task jsonb NOT NULL);
CREATE TABLE fi_survivor (run_id uuid NOT NULL, act integer NOT NULL, outcome text NOT NULL,
                          after_crash boolean NOT NULL);
CREATE TABLE fi_error (worker text NOT NULL, sqlstate text NOT NULL, message text NOT NULL,
                       at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TYPE fi_task AS (run_id uuid, task_id integer, lock_version bigint, task jsonb);

CREATE FUNCTION fi_hash(key text) RETURNS integer LANGUAGE sql IMMUTABLE
AS $$ SELECT abs(hashtext(key) % 1000) $$;

-- The workflow "fi-flow", deterministic in its history: the first task
-- schedules activities 1 and 2, a timer 3 and a wait 4 for the event "go"
-- (with a timeout); once activity 1 has an outcome it schedules activity 5;
-- once 1, 2 and 5 have outcomes, the timer has fired and the wait is over
-- (the event came or the timeout fired) it completes the run.
CREATE FUNCTION fi_decide(task jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    ev jsonb := coalesce(task->'history', '[]') || coalesce(task->'newEvents', '[]');
    n integer := (jsonb_path_query_first(ev, '$[*].runCreated.argument.json') #>> '{}')::jsonb->>'n';
    retry jsonb := '{"maxAttempts": 5, "initialDelay": "0.2s", "multiplier": 1.5, "maxDelay": "1s",
                     "randomizationFactor": 0.2}';
    cmds jsonb := '[]';
    done1 boolean;
    done2 boolean;
    done5 boolean;
BEGIN
    IF n IS NULL THEN
        RAISE EXCEPTION 'no runCreated in the task: %', task;
    END IF;
    IF NOT ev @> '[{"id": 1, "activityTaskCreated": {}}]' THEN
        RETURN jsonb_build_array(
            jsonb_build_object('id', 1, 'scheduleActivity', jsonb_build_object(
                'name', 'fi-a', 'queue', 'fi-act', 'argument', jsonb_build_object('json', n::text),
                'retryPolicy', retry)),
            jsonb_build_object('id', 2, 'scheduleActivity', jsonb_build_object(
                'name', 'fi-b', 'queue', 'fi-act', 'argument', jsonb_build_object('json', n::text),
                'retryPolicy', retry)),
            jsonb_build_object('id', 3, 'startTimer', jsonb_build_object(
                'name', 'fi-t', 'delay', (0.5 + (n % 5) * 0.5)::text || 's')),
            jsonb_build_object('id', 4, 'waitExternalEvent', jsonb_build_object(
                'eventId', 'go', 'timeout', (4 + n % 8)::text || 's')));
    END IF;
    done1 := ev @> '[{"activityTaskCompleted": {"activityTaskCreatedEventId": 1}}]'
          OR ev @> '[{"activityTaskFailed": {"activityTaskCreatedEventId": 1}}]';
    done2 := ev @> '[{"activityTaskCompleted": {"activityTaskCreatedEventId": 2}}]'
          OR ev @> '[{"activityTaskFailed": {"activityTaskCreatedEventId": 2}}]';
    done5 := ev @> '[{"activityTaskCompleted": {"activityTaskCreatedEventId": 5}}]'
          OR ev @> '[{"activityTaskFailed": {"activityTaskCreatedEventId": 5}}]';
    IF done1 AND NOT ev @> '[{"id": 5, "activityTaskCreated": {}}]' THEN
        cmds := cmds || jsonb_build_array(
            jsonb_build_object('id', 5, 'scheduleActivity', jsonb_build_object(
                'name', 'fi-c', 'queue', 'fi-act', 'argument', jsonb_build_object('json', n::text),
                'retryPolicy', retry)));
    END IF;
    IF done1 AND done2 AND done5
       AND ev @> '[{"timerElapsed": {"timerCreatedEventId": 3}}]'
       AND (ev @> '[{"externalEventReceived": {"eventId": "go"}}]'
            OR ev @> '[{"timerElapsed": {"timerCreatedEventId": 4}}]') THEN
        cmds := cmds || jsonb_build_array(jsonb_build_object('completeRun', jsonb_build_object(
            'result', jsonb_build_object('json', jsonb_build_object(
                'n', n,
                'event', ev @> '[{"externalEventReceived": {"eventId": "go"}}]',
                'failed', jsonb_array_length(jsonb_path_query_array(ev, '$[*].activityTaskFailed'))
            )::text))));
    END IF;
    RETURN cmds;
END $$;

-- up to 4 tasks of a queue; a failed poll is logged
CREATE FUNCTION fi_poll(queue text, wid text, lease interval) RETURNS fi_task[] LANGUAGE plpgsql AS $$
BEGIN
    RETURN ARRAY(SELECT ROW(p.run_id, p.task_id, p.lock_version, p.task)::fi_task
                   FROM dex.poll_tasks(queue, wid, 4, lease) p);
EXCEPTION WHEN others THEN
    INSERT INTO fi_error (worker, sqlstate, message) VALUES (wid, SQLSTATE, 'poll: ' || SQLERRM);
    RETURN '{}';
END $$;

-- A workflow worker.  One by one (each completion its own transaction; now
-- and then it fails a task instead, as a worker in a crash loop would), or
-- in batches: every task it polled completed by one dex.complete_tasks.
CREATE PROCEDURE fi_workflow_worker(wid text, batch boolean) LANGUAGE plpgsql AS $$
DECLARE
    tasks fi_task[];
    t fi_task;
    b_runs uuid[];
    b_versions bigint[];
    b_commands jsonb[];
    ready boolean;
BEGIN
    LOOP
        tasks := fi_poll('fi-wf', wid, '10 s');
        COMMIT;
        IF batch AND cardinality(tasks) > 0 THEN
            b_runs := '{}';
            b_versions := '{}';
            b_commands := '{}';
            FOREACH t IN ARRAY tasks LOOP
                b_runs := b_runs || t.run_id;
                b_versions := b_versions || t.lock_version;
                b_commands := b_commands || fi_decide(t.task);
            END LOOP;
            BEGIN
                WITH c AS (SELECT * FROM dex.complete_tasks(b_runs, array_fill(0, ARRAY[cardinality(b_runs)]),
                                                            b_versions, b_commands)),
                     logged AS (INSERT INTO fi_wf_log SELECT c.run_id, 'completed', wid FROM c WHERE c.completed)
                INSERT INTO fi_error (worker, sqlstate, message)
                SELECT wid, 'not-completed', 'batch: completed = false' FROM c WHERE NOT c.completed;
            EXCEPTION WHEN others THEN
                INSERT INTO fi_error (worker, sqlstate, message) VALUES (wid, SQLSTATE, 'batch: ' || SQLERRM);
            END;
            COMMIT;
        ELSE
            FOREACH t IN ARRAY tasks LOOP
                BEGIN
                    IF random() < 0.01 THEN
                        PERFORM dex.fail_task(t.run_id, 0, t.lock_version,
                                              '{"message": "worker hiccup"}');
                        INSERT INTO fi_wf_log VALUES (t.run_id, 'failed', wid);
                    ELSE
                        PERFORM dex.complete_task(t.run_id, 0, t.lock_version, fi_decide(t.task));
                        INSERT INTO fi_wf_log VALUES (t.run_id, 'completed', wid);
                    END IF;
                EXCEPTION WHEN others THEN
                    INSERT INTO fi_error (worker, sqlstate, message) VALUES (wid, SQLSTATE, SQLERRM);
                END;
                COMMIT;
            END LOOP;
        END IF;
        IF cardinality(tasks) = 0 THEN
            EXIT WHEN (SELECT stop FROM fi_control);
            COMMIT;
            CALL dex.wait_for_tasks('fi-wf', '0.5 s', ready);
        END IF;
    END LOOP;
END $$;

-- An activity worker.  Per activity (a hash of run and id) the first attempt
-- fails (15 %), is abandoned until its lease expires (2 %), or is completed
-- 4 s late, after its 3 s lease expired (1 %: refused unless the scheduler
-- had not reclaimed the lease yet); activity 2 fails for good in 5 % of the
-- runs; the rest completes.  One by one, or in batches (dex.complete_tasks
-- and dex.fail_tasks).
CREATE PROCEDURE fi_activity_worker(wid text, batch boolean) LANGUAGE plpgsql AS $$
DECLARE
    tasks fi_task[];
    late fi_task[] := '{}';
    late_due timestamptz[] := '{}';
    t fi_task;
    attempt integer;
    h integer;
    kind text;
    c_runs uuid[];
    c_ids integer[];
    c_versions bigint[];
    c_results jsonb[];
    c_attempts integer[];
    f_runs uuid[];
    f_ids integer[];
    f_versions bigint[];
    f_failures jsonb[];
    f_attempts integer[];
    f_kinds text[];
    ready boolean;
BEGIN
    LOOP
        tasks := fi_poll('fi-act', wid, '3 s');
        COMMIT;
        -- a late completion that is due
        IF cardinality(late) > 0 AND late_due[1] <= clock_timestamp() THEN
            t := late[1];
            late := late[2:];
            late_due := late_due[2:];
            BEGIN
                PERFORM dex.complete_task(t.run_id, t.task_id, t.lock_version,
                    jsonb_build_object('act', t.task_id, 'attempt', 1, 'late', true));
                INSERT INTO fi_act_log VALUES (t.run_id, t.task_id, 1, 'completed', wid);
                INSERT INTO fi_late VALUES (t.run_id, t.task_id, 'accepted');
            EXCEPTION WHEN others THEN
                INSERT INTO fi_late VALUES (t.run_id, t.task_id, SQLSTATE);
            END;
            COMMIT;
        END IF;
        c_runs := '{}'; c_ids := '{}'; c_versions := '{}'; c_results := '{}'; c_attempts := '{}';
        f_runs := '{}'; f_ids := '{}'; f_versions := '{}'; f_failures := '{}'; f_attempts := '{}';
        f_kinds := '{}';
        FOREACH t IN ARRAY tasks LOOP
            attempt := (t.task->>'attempt')::integer;
            h := fi_hash(t.run_id::text || ':' || t.task_id);
            kind := CASE WHEN attempt = 1 AND h < 150 THEN 'retry'
                         WHEN attempt = 1 AND h < 170 THEN 'abandon'
                         WHEN attempt = 1 AND h < 180 THEN 'late'
                         WHEN t.task_id = 2 AND h >= 950 THEN 'failed'
                         ELSE 'completed' END;
            IF kind = 'abandon' THEN
                CONTINUE;       -- the scheduler reclaims the lease
            ELSIF kind = 'late' THEN
                late := late || t;
                late_due := late_due || (clock_timestamp() + interval '4 s');
            ELSIF batch AND kind = 'completed' THEN
                c_runs := c_runs || t.run_id;
                c_ids := c_ids || t.task_id;
                c_versions := c_versions || t.lock_version;
                c_results := c_results || jsonb_build_object('act', t.task_id, 'attempt', attempt,
                                                             'argument', t.task->'argument'->>'json');
                c_attempts := c_attempts || attempt;
            ELSIF batch THEN
                f_runs := f_runs || t.run_id;
                f_ids := f_ids || t.task_id;
                f_versions := f_versions || t.lock_version;
                f_failures := f_failures || CASE kind WHEN 'retry' THEN '{"message": "flaky", "type": "Flaky"}'::jsonb
                                                      ELSE '{"message": "declined", "terminal": true}'::jsonb END;
                f_attempts := f_attempts || attempt;
                f_kinds := f_kinds || kind;
            ELSE
                BEGIN
                    IF kind = 'retry' THEN
                        PERFORM dex.fail_task(t.run_id, t.task_id, t.lock_version,
                                              '{"message": "flaky", "type": "Flaky"}');
                    ELSIF kind = 'failed' THEN
                        PERFORM dex.fail_task(t.run_id, t.task_id, t.lock_version,
                                              '{"message": "declined", "terminal": true}');
                    ELSE
                        PERFORM dex.complete_task(t.run_id, t.task_id, t.lock_version,
                            jsonb_build_object('act', t.task_id, 'attempt', attempt,
                                               'argument', t.task->'argument'->>'json'));
                    END IF;
                    INSERT INTO fi_act_log VALUES (t.run_id, t.task_id, attempt, kind, wid);
                EXCEPTION WHEN others THEN
                    INSERT INTO fi_error (worker, sqlstate, message) VALUES (wid, SQLSTATE, SQLERRM);
                END;
                COMMIT;
            END IF;
        END LOOP;
        IF cardinality(c_runs) > 0 THEN
            BEGIN
                WITH c AS (SELECT * FROM dex.complete_tasks(c_runs, c_ids, c_versions, c_results)),
                     logged AS (INSERT INTO fi_act_log
                                SELECT a.run_id, a.act, a.attempt, 'completed', wid
                                  FROM c JOIN unnest(c_runs, c_ids, c_attempts) a(run_id, act, attempt)
                                    ON a.run_id = c.run_id AND a.act = c.task_id
                                 WHERE c.completed)
                INSERT INTO fi_error (worker, sqlstate, message)
                SELECT wid, 'not-completed', 'batch: completed = false' FROM c WHERE NOT c.completed;
            EXCEPTION WHEN others THEN
                INSERT INTO fi_error (worker, sqlstate, message) VALUES (wid, SQLSTATE, 'batch: ' || SQLERRM);
            END;
            COMMIT;
        END IF;
        IF cardinality(f_runs) > 0 THEN
            BEGIN
                WITH f AS (SELECT * FROM dex.fail_tasks(f_runs, f_ids, f_versions, f_failures)),
                     logged AS (INSERT INTO fi_act_log
                                SELECT a.run_id, a.act, a.attempt, a.kind, wid
                                  FROM f JOIN unnest(f_runs, f_ids, f_attempts, f_kinds) a(run_id, act, attempt, kind)
                                    ON a.run_id = f.run_id AND a.act = f.task_id
                                 WHERE f.failed)
                INSERT INTO fi_error (worker, sqlstate, message)
                SELECT wid, 'not-failed', 'batch: failed = false' FROM f WHERE NOT f.failed;
            EXCEPTION WHEN others THEN
                INSERT INTO fi_error (worker, sqlstate, message) VALUES (wid, SQLSTATE, 'batch: ' || SQLERRM);
            END;
            COMMIT;
        END IF;
        IF cardinality(tasks) = 0 THEN
            EXIT WHEN (SELECT stop FROM fi_control);
            COMMIT;
            CALL dex.wait_for_tasks('fi-act', CASE WHEN cardinality(late) > 0 THEN '0.2 s'
                                                   ELSE '0.5 s' END::interval, ready);
        END IF;
    END LOOP;
END $$;

-- A worker outside the server survives its crashes: before each fault it
-- leases a few tasks (for a minute) and keeps them; after the restart it
-- completes them.  The crash made those leases void: each completion must be
-- refused (WD001).
CREATE PROCEDURE fi_hold_tasks() LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + interval '0.5 s';
BEGIN
    -- up to 2 workflow and 3 activity tasks, in half a second at most
    WHILE clock_timestamp() < deadline
          AND (SELECT count(*) FILTER (WHERE task_id = 0) < 2 OR count(*) FILTER (WHERE task_id <> 0) < 3
                 FROM fi_held) LOOP
        IF (SELECT count(*) FROM fi_held WHERE task_id = 0) < 2 THEN
            INSERT INTO fi_held (run_id, task_id, lock_version, task)
            SELECT run_id, task_id, lock_version, task FROM dex.poll_tasks('fi-wf', 'survivor', 1, '60 s');
        END IF;
        IF (SELECT count(*) FROM fi_held WHERE task_id <> 0) < 3 THEN
            INSERT INTO fi_held (run_id, task_id, lock_version, task)
            SELECT run_id, task_id, lock_version, task FROM dex.poll_tasks('fi-act', 'survivor', 1, '60 s');
        END IF;
        COMMIT;
        PERFORM pg_sleep(0.005);
    END LOOP;
END $$;
CREATE PROCEDURE fi_complete_held(after_crash boolean) LANGUAGE plpgsql AS $$
DECLARE
    h record;
    attempt integer;
BEGIN
    FOR h IN SELECT * FROM fi_held ORDER BY id LOOP
        attempt := (h.task->>'attempt')::integer;
        BEGIN
            IF h.task_id = 0 THEN
                PERFORM dex.complete_task(h.run_id, 0, h.lock_version, fi_decide(h.task));
                INSERT INTO fi_wf_log VALUES (h.run_id, 'completed', 'survivor');
            ELSE
                PERFORM dex.complete_task(h.run_id, h.task_id, h.lock_version,
                    jsonb_build_object('act', h.task_id, 'attempt', attempt, 'survivor', true));
                INSERT INTO fi_act_log VALUES (h.run_id, h.task_id, attempt, 'completed', 'survivor');
            END IF;
            INSERT INTO fi_survivor VALUES (h.run_id, h.task_id, 'accepted', after_crash);
        EXCEPTION WHEN others THEN
            INSERT INTO fi_survivor VALUES (h.run_id, h.task_id, SQLSTATE, after_crash);
        END;
        DELETE FROM fi_held WHERE id = h.id;
        COMMIT;
    END LOOP;
END $$;

-- the creator starts runs 10 a transaction, each with an instance id, until
-- there are target; 70 % of them are to get the event "go" 0 to 9 s later
CREATE PROCEDURE fi_creator(target integer, pause float8) LANGUAGE plpgsql AS $$
DECLARE
    n integer;
    id uuid;
BEGIN
    LOOP
        EXIT WHEN (SELECT stop FROM fi_control);
        SELECT coalesce(max(c.n), 0) INTO n FROM fi_created c;
        EXIT WHEN n >= target;
        FOR i IN n + 1 .. least(n + 10, target) LOOP
            id := dex.create_run('fi-flow', 'fi-wf', jsonb_build_object('n', i),
                                 instance_id => 'fi-' || i);
            INSERT INTO fi_created VALUES (i, id,
                CASE WHEN fi_hash('send:' || i) < 700
                     THEN clock_timestamp() + fi_hash('delay:' || i) * interval '9 ms' END);
        END LOOP;
        COMMIT;
        PERFORM pg_sleep(pause);
    END LOOP;
END $$;

-- the sender sends "go" when due, and to 30 % of the runs it sends it again
-- later in a transaction of its own (which must be dropped)
CREATE PROCEDURE fi_sender(wid text) LANGUAGE plpgsql AS $$
DECLARE
    due uuid[];
    again uuid[];
    r uuid;
    accepted boolean;
BEGIN
    LOOP
        EXIT WHEN (SELECT stop FROM fi_control);
        due := ARRAY(SELECT c.run_id FROM fi_created c
                      WHERE c.send_after <= clock_timestamp()
                        AND NOT EXISTS (SELECT 1 FROM fi_sent s WHERE s.run_id = c.run_id)
                      ORDER BY c.send_after LIMIT 20);
        again := ARRAY(SELECT s.run_id FROM fi_sent s
                        WHERE s.accepted AND fi_hash('again:' || s.run_id) < 300
                          AND NOT EXISTS (SELECT 1 FROM fi_resent x WHERE x.run_id = s.run_id)
                        LIMIT 5);
        COMMIT;
        FOREACH r IN ARRAY due LOOP
            BEGIN
                accepted := dex.send_external_event(r, 'go', '{"from": "fi"}');
                INSERT INTO fi_sent VALUES (r, accepted, false);
            EXCEPTION
                WHEN object_not_in_prerequisite_state THEN    -- 55000: the run has ended
                    INSERT INTO fi_sent VALUES (r, false, true);
                WHEN others THEN
                    INSERT INTO fi_error (worker, sqlstate, message) VALUES (wid, SQLSTATE, SQLERRM);
            END;
            COMMIT;
        END LOOP;
        FOREACH r IN ARRAY again LOOP
            BEGIN
                accepted := dex.send_external_event(r, 'go', '{"from": "fi", "again": true}');
                INSERT INTO fi_resent VALUES (r, accepted, false);
            EXCEPTION
                WHEN object_not_in_prerequisite_state THEN
                    INSERT INTO fi_resent VALUES (r, NULL, true);
                WHEN others THEN
                    INSERT INTO fi_error (worker, sqlstate, message) VALUES (wid, SQLSTATE, SQLERRM);
            END;
            COMMIT;
        END LOOP;
        IF cardinality(due) = 0 AND cardinality(again) = 0 THEN
            PERFORM pg_sleep(0.1);
        END IF;
    END LOOP;
END $$;
EOSQL

# ----------------------------------------------------------------------
# The client processes: one psql each, restarted whenever it dies.
# ----------------------------------------------------------------------
my $logdir = $PostgreSQL::Test::Utils::log_path;
# creation is paced to take about a minute, the time the kills take
my $pause = sprintf('%.3f', 60.0 / ($runs / 10));
my %clients = (
	# the third workflow and activity workers complete in batches
	(map { ("wf$_" => "CALL fi_workflow_worker('wf$_', " . ($_ == 3 ? 'true' : 'false') . ')') } 1 .. 3),
	(map { ("act$_" => "CALL fi_activity_worker('act$_', " . ($_ == 3 ? 'true' : 'false') . ')') } 1 .. 3),
	sender => "CALL fi_sender('sender')",
	creator => "CALL fi_creator($runs, $pause)");
my %harness;
my $client_starts = 0;
my $stopping = 0;

sub start_client
{
	my ($name) = @_;
	my $log = "$logdir/fi_client_$name.log";
	$harness{$name} = IPC::Run::start(
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1',
		  '-d', $node->connstr('postgres') . " application_name=fi-$name",
		  '-c', "SET dex.retry_initial_delay = '200ms'",
		  '-c', "SET dex.retry_max_delay = '1s'",
		  '-c', $clients{$name} ],
		'<', '/dev/null', '>>', $log, '2>>', $log);
	$client_starts++;
}

# reap clients that ended; start them again while the test is not stopping
sub tend_clients
{
	for my $name (sort keys %clients)
	{
		my $h = $harness{$name};
		next if $h && $h->pumpable;
		$h->finish if $h;
		delete $harness{$name};
		start_client($name) unless $stopping;
	}
}

# a query that may fail (the server may be restarting): its output or undef
sub try_query
{
	my ($sql) = @_;
	my $timed_out;
	my ($ret, $out, $err) = $node->psql('postgres', $sql, timeout => 30, timed_out => \$timed_out);
	return !$timed_out && defined $ret && $ret == 0 ? $out : undef;
}

# wait until the server has reset after the death of $pid and serves again
sub wait_recovered
{
	my ($pid) = @_;
	sleep 0.3;
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid")
	  or die "the server did not come back after the kill of $pid";
}

my (%suspect, %stuck);
my %count = (client => 0, launcher => 0, scheduler => 0, scheduler_in_rebuild => 0, maintenance => 0,
	crash => 0);

# SIGKILL a backend chosen by a condition on pg_stat_activity, busy ones
# first (not sleeping in dex.wait_for_tasks or pg_sleep); its pid or 0
sub kill_backend
{
	my ($where) = @_;
	my $pid = try_query(qq{
		SELECT pid FROM pg_stat_activity WHERE $where
		 ORDER BY coalesce(wait_event_type, '') <> 'Extension' AND coalesce(wait_event, '') <> 'PgSleep' DESC,
		          random()
		 LIMIT 1});
	return 0 unless defined $pid && $pid =~ /^\d+$/;
	try_query('CALL fi_hold_tasks()');
	kill 'KILL', $pid or return 0;
	return $pid;
}

# the pids of the postmaster's children whose title matches, from /proc:
# much faster than a query, and it works while the server starts
sub postmaster_children
{
	my ($title) = @_;
	my $pm = (split /\n/, slurp_file($node->data_dir . '/postmaster.pid'))[0];
	my @pids;
	opendir(my $dh, '/proc') or return ();
	for my $p (grep { /^\d+$/ } readdir $dh)
	{
		open(my $fh, '<', "/proc/$p/stat") or next;
		my $stat = <$fh> // '';
		close $fh;
		next unless $stat =~ /\) \S (\d+) / && $1 == $pm;
		open($fh, '<', "/proc/$p/cmdline") or next;
		my $cmd = <$fh> // '';
		close $fh;
		push @pids, $p if $cmd =~ $title;
	}
	closedir $dh;
	return @pids;
}

# Crash the server, then kill the new scheduler as soon as the server log
# says it started, before it has rebuilt the task tables (which takes a few
# milliseconds; its rebuild is in the log if it got that far).  The crash is
# the kill of a client, or of the launcher when the clients have not
# reconnected yet.  Up to 5 tries.
sub kill_scheduler_in_rebuild
{
	for my $try (1 .. 5)
	{
		my $logpos = -s $node->logfile;
		my $what = 'client';
		my $victim = kill_backend("application_name LIKE 'fi-%'");
		if (!$victim)
		{
			$what = 'launcher';
			($victim) = postmaster_children(qr/dex launcher/) or return 0;
			try_query('CALL fi_hold_tasks()');
			kill 'KILL', $victim;
		}
		$count{$what}++;
		note sprintf('%6.1f s: SIGKILL %s (pid %d), to kill the next scheduler',
			time - $t_start, $what, $victim);
		my $deadline = time + 20;
		my $pid;
		while (!$pid && time < $deadline)
		{
			open(my $fh, '<', $node->logfile) or die $!;
			seek($fh, $logpos, 0);
			local $/;
			my $new = <$fh> // '';
			close $fh;
			($pid) = $new =~ /\[(\d+)\] LOG:  dex scheduler started/;
			sleep 0.0005 unless $pid;
		}
		die 'no scheduler started after the crash' unless $pid;
		sleep rand(0.003);
		kill 'KILL', $pid;
		$count{scheduler}++;
		wait_recovered($pid);
		my $rebuilt = slurp_file($node->logfile) =~ /\[$pid\] LOG:  dex scheduler rebuilt/;
		note sprintf('%6.1f s: SIGKILL scheduler (pid %d) %s', time - $t_start, $pid,
			$rebuilt ? 'after its rebuild' : 'during its rebuild');
		if (!$rebuilt)
		{
			$count{scheduler_in_rebuild}++;
			return 1;
		}
	}
	return 0;
}

# the surviving worker completes what it held before the fault (which
# crashed the server, unless the victim was gone before the kill)
sub complete_held
{
	my ($after_crash) = @_;
	$node->poll_query_until('postgres', 'SELECT true')
	  or die 'the server does not answer';
	try_query("CALL fi_complete_held($after_crash)");
}

sub fault
{
	my ($what) = @_;
	my $pid;
	%suspect = ();
	if ($what eq 'client')
	{
		$pid = kill_backend("application_name LIKE 'fi-%'");
	}
	elsif ($what eq 'scheduler')
	{
		$pid = kill_backend("backend_type = 'dex scheduler'");
	}
	elsif ($what eq 'maintenance')
	{
		$pid = kill_backend("backend_type = 'dex maintenance'");
	}
	elsif ($what eq 'scheduler_in_rebuild')
	{
		kill_scheduler_in_rebuild()
		  or note 'no scheduler kill landed during a rebuild';
		complete_held('true');
		return;
	}
	elsif ($what eq 'crash')
	{
		try_query('CALL fi_hold_tasks()');
		$node->stop('immediate');
		$node->start;
		$count{crash}++;
		note sprintf('%6.1f s: immediate shutdown and restart', time - $t_start);
		complete_held('true');
		return;
	}
	if ($pid)
	{
		$count{$what}++;
		note sprintf('%6.1f s: SIGKILL %s (pid %d)', time - $t_start, $what, $pid);
		wait_recovered($pid);
		complete_held('true');
	}
	else
	{
		note sprintf('%6.1f s: no %s to kill', time - $t_start, $what);
		complete_held('false');
	}
}

# A run that has events a workflow task would show (inbox rows not delayed)
# but no workflow task is stuck: nothing would ever hand it out again, short
# of a crash (whose rebuild would hide it).  Runs seen so in two samples at
# least 3 s apart, with no fault in between, are counted.
my $next_sample = 0;
my $samples = 0;

sub sample_stuck
{
	return if time < $next_sample;
	$next_sample = time + 1;
	my $ids = try_query(q{
		SELECT string_agg(r.id::text, ' ') FROM dex.workflow_run r
		 WHERE r.status IN ('CREATED', 'RUNNING')
		   AND EXISTS (SELECT 1 FROM dex.lease WHERE name = 'tasks_valid')
		   AND EXISTS (SELECT 1 FROM dex.workflow_inbox i WHERE i.run_id = r.id AND NOT i.delayed)
		   AND NOT EXISTS (SELECT 1 FROM dex.workflow_task t WHERE t.run_id = r.id)});
	return unless defined $ids;
	$samples++;
	my %now = map { $_ => 1 } split / /, $ids;
	delete $suspect{$_} for grep { !$now{$_} } keys %suspect;
	for my $id (keys %now)
	{
		$suspect{$id} //= time;
		$stuck{$id} = 1 if time - $suspect{$id} >= 3;
	}
}

# ----------------------------------------------------------------------
# Load, with faults
# ----------------------------------------------------------------------
my @plan = shuffle(('client') x 6, ('scheduler') x 3, 'scheduler_in_rebuild', 'crash',
	$has_maintenance ? (('maintenance') x 2) : ());
note 'fault plan: ' . join(' ', @plan);

my $created_sql = 'SELECT count(*) FROM fi_created';
tend_clients();
my $next_fault = time + 3 + rand(3);
while (1)
{
	tend_clients();
	sample_stuck();
	if (@plan && time >= $next_fault)
	{
		fault(shift @plan);
		$next_fault = time + 2 + rand(5);
	}
	last if !@plan && (try_query($created_sql) // 0) == $runs;
	last if time > $t_start + 240;    # the checks below say what went wrong
	sleep 0.25;
}
my $t_load = time - $t_start;
note sprintf('%6.1f s: %s runs created, %d faults left to inject', $t_load,
	try_query($created_sql) // '?', scalar(@plan));

# let every run finish: at most 3 minutes
my $deadline = time + 180;
my $open_sql = "SELECT count(*) FROM dex.workflow_run WHERE status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')";
my $open;
while (time < $deadline)
{
	tend_clients();
	sample_stuck();
	$open = try_query($open_sql);
	last if defined $open && $open eq '0';
	sleep 0.5;
}
my $t_drain = time - $t_start;
note sprintf('%6.1f s: %s runs still open', $t_drain, $open // '?');

# stop the clients
$stopping = 1;
$node->safe_psql('postgres', 'UPDATE fi_control SET stop = true');
for my $name (sort keys %harness)
{
	my $h = $harness{$name};
	my $until = time + 30;
	sleep 0.1 while $h->pumpable && time < $until;
	$h->kill_kill if $h->pumpable;
	$h->finish;
}

# the run that is still open, if any, with what it waits for
if (defined $open && $open ne '0')
{
	diag $node->safe_psql('postgres', q{
		SELECT r.id, r.status, r.history_length,
		       (SELECT count(*) FROM dex.workflow_task t WHERE t.run_id = r.id) AS wf_tasks,
		       (SELECT count(*) FROM dex.activity_task t WHERE t.run_id = r.id) AS act_tasks,
		       (SELECT count(*) FROM dex.workflow_inbox i WHERE i.run_id = r.id) AS inbox,
		       (SELECT count(*) FROM dex.workflow_inbox i WHERE i.run_id = r.id
		           AND NOT i.delayed AND i.visible_from <= now()) AS visible_inbox
		  FROM dex.workflow_run r
		 WHERE r.status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')
		 ORDER BY r.id LIMIT 10});
}

# ----------------------------------------------------------------------
# Checks
# ----------------------------------------------------------------------
sub q1 { return $node->safe_psql('postgres', $_[0]); }

# every history, decoded once, with the kind of each event
q1(q{
	CREATE TABLE fi_event AS
	SELECT r.id AS run_id, h.sequence, h.event,
	       (SELECT k FROM jsonb_object_keys(h.event - 'id' - 'timestamp') k) AS kind,
	       coalesce((h.event->>'id')::integer, 0) AS cmd_id
	  FROM dex.workflow_run r, LATERAL dex.run_history(r.id) h;
	CREATE INDEX ON fi_event (run_id, sequence);
	ANALYZE fi_event;
});

is(q1('SELECT count(*) FROM fi_created'), $runs, "the creator started $runs runs");

# lost: a started run that is missing or did not complete; an accepted
# activity outcome or external event that is not in the history
my %lost;
$lost{runs} = q1(q{
	SELECT count(*) FROM fi_created c LEFT JOIN dex.workflow_run r ON r.id = c.run_id
	 WHERE r.id IS NULL OR r.status <> 'COMPLETED'});
$lost{activity_outcomes} = q1(q{
	SELECT count(*) FROM fi_act_log l
	 WHERE l.outcome IN ('completed', 'failed')
	   AND NOT EXISTS (SELECT 1 FROM fi_event e
	                    WHERE e.run_id = l.run_id
	                      AND e.kind = CASE l.outcome WHEN 'completed' THEN 'activityTaskCompleted'
	                                                  ELSE 'activityTaskFailed' END
	                      AND (e.event->e.kind->>'activityTaskCreatedEventId')::integer = l.act)});
$lost{events} = q1(q{
	SELECT count(*) FROM fi_sent s
	 WHERE s.accepted
	   AND NOT EXISTS (SELECT 1 FROM fi_event e
	                    WHERE e.run_id = s.run_id AND e.kind = 'externalEventReceived'
	                      AND e.event->'externalEventReceived'->>'eventId' = 'go')});
# duplicated: an event recorded twice, a second accepted result or event
my %dup;
$dup{activity_outcomes} = q1(q{
	SELECT count(*) FROM (
	  SELECT run_id, (event->kind->>'activityTaskCreatedEventId')::integer AS act
	    FROM fi_event WHERE kind IN ('activityTaskCompleted', 'activityTaskFailed')
	   GROUP BY 1, 2 HAVING count(*) > 1) d});
$dup{accepted_completions} = q1(q{
	SELECT count(*) FROM (
	  SELECT run_id, act FROM fi_act_log WHERE outcome IN ('completed', 'failed')
	   GROUP BY 1, 2 HAVING count(*) > 1) d});
$dup{events} = q1(q{
	SELECT count(*) FROM (
	  SELECT run_id, event->'externalEventReceived'->>'eventId'
	    FROM fi_event WHERE kind = 'externalEventReceived'
	   GROUP BY 1, 2 HAVING count(*) > 1) d});
$dup{resends_accepted} = q1('SELECT count(*) FROM fi_resent WHERE accepted');
$dup{command_events} = q1(q{
	SELECT count(*) FROM (
	  SELECT run_id, cmd_id FROM fi_event WHERE cmd_id <> 0
	   GROUP BY 1, 2 HAVING count(*) > 1) d});
$dup{timers_elapsed} = q1(q{
	SELECT count(*) FROM (
	  SELECT run_id, event->'timerElapsed'->>'timerCreatedEventId'
	    FROM fi_event WHERE kind = 'timerElapsed'
	   GROUP BY 1, 2 HAVING count(*) > 1) d});
$dup{run_events} = q1(q{
	SELECT count(*) FROM (
	  SELECT run_id, kind FROM fi_event
	   WHERE kind IN ('runCreated', 'runStarted', 'runCompleted', 'runFailed', 'runCancelled')
	   GROUP BY 1, 2 HAVING count(*) > 1) d});

is($lost{runs}, '0', 'every run completed');
is(q1(q{SELECT count(*) FROM dex.workflow_run r
         WHERE NOT EXISTS (SELECT 1 FROM fi_created c WHERE c.run_id = r.id)}),
	'0', 'there is no run the creator did not record');
is($lost{activity_outcomes}, '0', 'every accepted activity outcome is in its history');
is($lost{events}, '0', 'every accepted external event is in its history');
is($dup{activity_outcomes}, '0', 'no activity has two outcomes');
is($dup{accepted_completions}, '0', 'no activity outcome was accepted twice');
is($dup{events}, '0', 'no external event was recorded twice');
is($dup{resends_accepted}, '0', 'an event sent again is dropped');
is($dup{command_events}, '0', 'no command event (activity, timer, wait) was recorded twice');
is($dup{timers_elapsed}, '0', 'no timer fired twice');
is($dup{run_events}, '0', 'runCreated, runStarted and runCompleted appear once per run');

# well-formed histories
is(q1(q{
	SELECT count(*) FROM dex.workflow_run r
	  LEFT JOIN (SELECT run_id, count(*) AS n, min(sequence) AS lo, max(sequence) AS hi
	               FROM fi_event GROUP BY run_id) e ON e.run_id = r.id
	 WHERE e.n IS DISTINCT FROM r.history_length::bigint OR e.lo <> 1 OR e.hi <> e.n}),
	'0', 'every history is numbered 1 .. history_length without a gap');
is(q1(q{
	SELECT count(*) FROM dex.workflow_run r
	 WHERE (SELECT string_agg(kind, ',' ORDER BY sequence) FROM
	          (SELECT kind, sequence FROM fi_event e WHERE e.run_id = r.id ORDER BY sequence LIMIT 3) f)
	       <> 'workflowTaskStarted,runCreated,runStarted'
	    OR (SELECT kind FROM fi_event e WHERE e.run_id = r.id ORDER BY sequence DESC LIMIT 1)
	       <> 'runCompleted'}),
	'0', 'every history starts with the first task and ends with runCompleted');
is(q1(q{
	SELECT count(*) FROM (
	  SELECT run_id, kind, lag(kind) OVER (PARTITION BY run_id ORDER BY sequence) AS prev
	    FROM fi_event WHERE kind IN ('workflowTaskStarted', 'workflowTaskCompleted')) s
	 WHERE kind = prev OR (prev IS NULL AND kind <> 'workflowTaskStarted')}),
	'0', 'workflowTaskStarted and workflowTaskCompleted alternate');
is(q1(q{
	SELECT count(*) FROM (
	  SELECT run_id FROM fi_event
	   GROUP BY run_id
	  HAVING count(*) FILTER (WHERE kind = 'workflowTaskStarted')
	      <> count(*) FILTER (WHERE kind = 'workflowTaskCompleted')) s}),
	'0', 'every workflowTaskStarted has its workflowTaskCompleted');
is(q1(q{
	SELECT count(*) FROM (
	  SELECT a.run_id, a.act FROM
	    (SELECT r.id AS run_id, act FROM dex.workflow_run r, unnest(ARRAY[1, 2, 5]) act) a
	    LEFT JOIN fi_event c ON c.run_id = a.run_id AND c.kind = 'activityTaskCreated' AND c.cmd_id = a.act
	    LEFT JOIN fi_event o ON o.run_id = a.run_id
	          AND o.kind IN ('activityTaskCompleted', 'activityTaskFailed')
	          AND (o.event->o.kind->>'activityTaskCreatedEventId')::integer = a.act
	          AND o.sequence > c.sequence
	   GROUP BY 1, 2 HAVING count(DISTINCT c.sequence) <> 1 OR count(DISTINCT o.sequence) <> 1) s}),
	'0', 'each activity was created once and has one outcome, after its creation');
is(q1(q{
	SELECT count(*) FROM dex.workflow_run r
	 WHERE NOT EXISTS (SELECT 1 FROM fi_event e WHERE e.run_id = r.id AND e.kind = 'timerElapsed'
	                     AND e.event->'timerElapsed'->>'timerCreatedEventId' = '3')
	    OR NOT EXISTS (SELECT 1 FROM fi_event e WHERE e.run_id = r.id
	                     AND (e.kind = 'externalEventReceived'
	                          OR (e.kind = 'timerElapsed'
	                              AND e.event->'timerElapsed'->>'timerCreatedEventId' = '4')))}),
	'0', 'every run saw its timer fire and its wait end');
is(q1(q{
	SELECT count(*) FROM fi_act_log l
	  JOIN fi_event e ON e.run_id = l.run_id AND e.kind = 'activityTaskCompleted'
	   AND (e.event->'activityTaskCompleted'->>'activityTaskCreatedEventId')::integer = l.act
	 WHERE l.outcome = 'completed'
	   AND (e.event->'activityTaskCompleted'->>'attempt')::integer <> l.attempt}),
	'0', 'each recorded result carries the attempt that produced it');

# nothing left behind: every run ended, so every table of pending work is
# empty (tasks a poll held when a run ended are cleared by later polls and
# by the scheduler: give them a moment)
my $leftovers_sql = q{
	SELECT concat_ws(' ',
	  'workflow_task=' || (SELECT count(*) FROM dex.workflow_task),
	  'activity_task=' || (SELECT count(*) FROM dex.activity_task),
	  'inbox=' || (SELECT count(*) FROM dex.workflow_inbox),
	  'activity_retry=' || (SELECT count(*) FROM dex.activity_retry),
	  'external_event=' || (SELECT count(*) FROM dex.external_event),
	  'run_instance=' || (SELECT count(*) FROM dex.run_instance))};
my $nothing = 'workflow_task=0 activity_task=0 inbox=0 activity_retry=0 external_event=0 run_instance=0';
$node->poll_query_until('postgres', $leftovers_sql, $nothing);
my $leftovers = q1($leftovers_sql);
is($leftovers, $nothing, 'no task, inbox row, retry record or instance id is left behind');

# the server log: crash restarts, kills, deadlocks, assertion failures
my $log = slurp_file($node->logfile);
my $crash_restarts = () = $log =~ /all server processes terminated; reinitializing/g;
my $sigkills = () = $log =~ /was terminated by signal 9/g;
my $deadlocks = () = $log =~ /deadlock detected/g;
my $aborts = () = $log =~ /terminated by signal 6|TRAP:|PANIC:/g;
my @log_errors = $log =~ /^.*\bERROR:.*$/mg;
is($aborts, 0, 'no assertion failure or PANIC in the server log');
is(scalar(@log_errors), 0, 'no ERROR in the server log')
  or diag join("\n", @log_errors[0 .. ($#log_errors < 19 ? $#log_errors : 19)]);
# the clients' psql output: only what a crash says, no error of their own
my @client_errors;
for my $name (sort keys %clients)
{
	my $f = "$logdir/fi_client_$name.log";
	next unless -e $f;
	push @client_errors, map { "$name: $_" } slurp_file($f) =~ /^.*\bERROR:.*$/mg;
}
is(scalar(@client_errors), 0, 'no client procedure failed')
  or diag join("\n", @client_errors[0 .. ($#client_errors < 19 ? $#client_errors : 19)]);
is($deadlocks, 0, 'no deadlock in the server log');

# what the clients met
my $errors = q1(q{
	SELECT string_agg(format('%s x%s', sqlstate, n), ', ' ORDER BY n DESC)
	  FROM (SELECT sqlstate, count(*) AS n FROM fi_error GROUP BY 1) e});
note 'client errors: ' . ($errors || 'none');
# lost leases are expected (WD001, or completed = false in a batch, which is
# also how a completion set aside for events it did not show is reported)
my $unexpected = q{FROM fi_error WHERE sqlstate NOT IN ('WD001', 'not-completed', 'not-failed')};
is(q1("SELECT count(*) $unexpected"), '0', 'clients met no errors but lost leases')
  or diag q1("SELECT worker, sqlstate, message $unexpected ORDER BY at LIMIT 20");
is(q1(q{SELECT count(*) FROM fi_late WHERE outcome NOT IN ('accepted', 'WD001')}), '0',
	'a completion after the lease expired is accepted or refused with WD001');
cmp_ok($samples, '>=', 20, "runs were sampled for lost wake-ups ($samples samples)");
is(q1(q{SELECT count(*) FROM fi_held}), '0', 'the surviving worker completed all it held');
is(q1(q{SELECT count(*) FROM fi_survivor WHERE after_crash AND outcome <> 'WD001'}), '0',
	'a lease a crash interrupted is void: completing it is refused with WD001')
  or diag q1(q{SELECT string_agg(DISTINCT outcome, ',') FROM fi_survivor WHERE after_crash});
is(scalar(keys %stuck), 0, 'no run was left with unseen events and no workflow task')
  or diag 'stuck runs: ' . join(' ', sort keys %stuck);

my $figures = q1(q{
	SELECT format('%s workflow tasks completed (%s in batches), %s activity outcomes accepted (%s in batches), %s activity attempts retried, %s completed late (%s refused), %s completed after a crash (%s refused), %s activities failed for good, %s events sent (%s dropped as resent, %s refused by ended runs), %s events in %s histories, %s workflow tasks failed by workers',
	  (SELECT count(*) FROM fi_wf_log WHERE outcome = 'completed'),
	  (SELECT count(*) FROM fi_wf_log WHERE outcome = 'completed' AND worker = 'wf3'),
	  (SELECT count(*) FROM fi_act_log),
	  (SELECT count(*) FROM fi_act_log WHERE worker = 'act3'),
	  (SELECT count(*) FROM fi_act_log WHERE outcome = 'retry'),
	  (SELECT count(*) FROM fi_late),
	  (SELECT count(*) FROM fi_late WHERE outcome = 'WD001'),
	  (SELECT count(*) FROM fi_survivor WHERE after_crash),
	  (SELECT count(*) FROM fi_survivor WHERE after_crash AND outcome = 'WD001'),
	  (SELECT count(*) FROM fi_event WHERE kind = 'activityTaskFailed'),
	  (SELECT count(*) FROM fi_sent WHERE accepted),
	  (SELECT count(*) FROM fi_resent WHERE NOT accepted),
	  (SELECT count(*) FROM fi_sent WHERE rejected),
	  (SELECT count(*) FROM fi_event),
	  (SELECT count(DISTINCT run_id) FROM fi_event),
	  (SELECT count(*) FROM fi_wf_log WHERE outcome = 'failed'))});
my $lost = 0;
$lost += $_ for values %lost;
my $duplicated = 0;
$duplicated += $_ for values %dup;
my $summary = sprintf(
	'fault injection: runs = %d, client kills = %d, launcher kills = %d, scheduler kills = %d (%d during a rebuild), '
	  . 'maintenance kills = %s, crashes = %d immediate shutdown + %d crash restarts, '
	  . 'client restarts = %d, deadlocks = %d, lost = %d, duplicated = %d, in %.0f s (load %.0f s, drain %.0f s)',
	$runs, $count{client}, $count{launcher}, $count{scheduler},
	$count{scheduler_in_rebuild},
	$has_maintenance ? $count{maintenance} : 'n/a (no maintenance worker)',
	$count{crash}, $crash_restarts, $client_starts - scalar(keys %clients), $deadlocks,
	$lost, $duplicated, time - $t_start, $t_load, $t_drain - $t_load);
diag $summary;
diag $figures;
note 'SIGKILLs in the server log: ' . $sigkills;
is($lost, 0, 'lost = 0');
is($duplicated, 0, 'duplicated = 0');

$node->stop;
done_testing();
