# Schedules fired by the scheduler worker with no client connected.
#   1. Lateness: a schedule every second and a cron schedule ("* * * * *")
#      fire each tick at its instant: the scheduler sleeps until the earliest
#      fire time (the naptime is left at its default of 10 minutes, so nothing
#      but that wakes it), and each run's creation is at most 1 s after its
#      tick.  The figures are printed.
#      A buffer_one schedule's kept tick starts within 200 ms of the end of
#      the run before it (the commit that ends it wakes the scheduler).
#   2. No double start across crashes: 50 schedules every second (allow_all,
#      so that each tick starts a run) while the scheduler is killed with
#      SIGKILL (the server restarts) three times and the server is stopped
#      with -m immediate once.  Every tick from each schedule's first to its
#      last has exactly one run (those missed while down are caught up: the
#      catch-up window is a minute), and each schedule's runs_started counts
#      its runs.
#   3. Catch-up after the server was down: a schedule every 2 seconds with a
#      5-second catch-up window; the server is down for about 12 s; after
#      the start the ticks within the window fire at once, the older ones are
#      counted as missed, and every tick is accounted for once.
#   4. Failover: a streaming replica of the same cluster is promoted; it
#      goes on with the ticks where the primary left them (the 50 schedules
#      of 2 tick all along), none twice.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

my $node = dex_cluster('primary', init => { allows_streaming => 1 },
	conf => "restart_after_crash = on\n");
$node->safe_psql('postgres', q{
	CREATE EXTENSION dex;
	SELECT dex.create_queue('wf', 'workflow');
});

# how late each run of the schedules named like $pattern was: its creation after its tick
sub lateness
{
	my ($pattern) = @_;
	return split /\|/, $node->safe_psql('postgres', qq{
		SELECT count(*),
		       round(max(extract(epoch FROM r.created_at - (r.labels->>'dex.tick')::timestamptz)) * 1000, 1),
		       round(avg(extract(epoch FROM r.created_at - (r.labels->>'dex.tick')::timestamptz)) * 1000, 1),
		       round(min(extract(epoch FROM r.created_at - (r.labels->>'dex.tick')::timestamptz)) * 1000, 1)
		  FROM dex.workflow_run r WHERE r.labels->>'dex.schedule' LIKE '$pattern'});
}

# ---- 1. lateness
$node->safe_psql('postgres', q{
	SELECT dex.create_schedule('cron-minute', 'late', 'wf', cron => '* * * * *', overlap => 'allow_all');
	SELECT dex.create_schedule('every-second', 'late', 'wf', every => '1 second', overlap => 'allow_all');
});
my $start = time;
$node->poll_query_until('postgres', q{
	SELECT count(*) >= 8 FROM dex.workflow_run WHERE labels->>'dex.schedule' = 'every-second'})
  or die 'the every-second schedule did not fire';
$node->safe_psql('postgres', q{SELECT dex.pause_schedule('every-second')});
my ($n, $max, $avg, $min) = lateness('every-second');
diag("every 1 second: $n ticks, lateness min $min ms, avg $avg ms, max $max ms");
cmp_ok($n, '>=', 8, 'the every-second schedule fired');
cmp_ok($min, '>=', 0, 'no tick fired before its instant');
cmp_ok($max, '<', 1000, 'each tick fired within 1 s of its instant');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM (SELECT labels->>'dex.tick' FROM dex.workflow_run
	                       WHERE labels->>'dex.schedule' = 'every-second' GROUP BY 1 HAVING count(*) > 1) d}),
	'0', 'one run per tick');
# the scheduler sleeps between ticks: it is idle, waiting on its latch
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE backend_type = 'dex scheduler' AND query LIKE 'dex scheduler: sleeping%'}),
	'the scheduler sleeps until the next fire time');

# the cron schedule's first tick, on the minute (at most a minute away)
$node->poll_query_until('postgres', q{
	SELECT count(*) >= 1 FROM dex.workflow_run WHERE labels->>'dex.schedule' = 'cron-minute'})
  or die 'the cron schedule did not fire';
$node->safe_psql('postgres', q{SELECT dex.pause_schedule('cron-minute')});
($n, $max, $avg, $min) = lateness('cron-minute');
diag("cron * * * * *: $n tick(s), lateness max $max ms");
cmp_ok($max, '<', 1000, 'the cron tick fired within 1 s of its instant');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM dex.workflow_run
	 WHERE labels->>'dex.schedule' = 'cron-minute' AND extract(second FROM (labels->>'dex.tick')::timestamptz) <> 0}),
	'0', 'the cron ticks are on the minute');

# a buffered tick starts as soon as the run before it ends: the commit that ends the run
# wakes the scheduler (it watches the run's end in shared memory), no polling
$node->safe_psql('postgres', q{
	SELECT dex.create_schedule('buffered', 'buf', 'wf', every => '1 hour', start_at => '2030-01-01',
	                           overlap => 'buffer_one');
	SELECT dex.trigger_schedule('buffered');
});
$node->safe_psql('postgres', q{SELECT dex.trigger_schedule('buffered')});
is($node->safe_psql('postgres', q{SELECT buffered_tick IS NOT NULL FROM dex.schedule WHERE name = 'buffered'}),
	't', 'a tick is kept while the run is active');
usleep(1_500_000);		# the scheduler is asleep, watching
$node->safe_psql('postgres', q{
	SELECT dex.terminate_run(last_run_id, 'done') FROM dex.schedule WHERE name = 'buffered'});
$node->poll_query_until('postgres', q{SELECT runs_started = 2 FROM dex.schedule WHERE name = 'buffered'})
  or die 'the buffered tick did not start';
my $gap = $node->safe_psql('postgres', q{
	SELECT round(extract(epoch FROM b.created_at - a.completed_at) * 1000, 1)
	  FROM dex.workflow_run a, dex.workflow_run b
	 WHERE a.labels->>'dex.schedule' = 'buffered' AND a.status = 'TERMINATED'
	   AND b.labels->>'dex.schedule' = 'buffered' AND b.status = 'CREATED'});
diag("buffer_one: the buffered run started $gap ms after the run before it ended");
cmp_ok($gap, '<', 200, 'the buffered tick started at once when the run before it ended');
$node->safe_psql('postgres', q{SELECT dex.pause_schedule('buffered')});

# ---- 2. no double start across crashes
$node->safe_psql('postgres', q{
	SELECT count(dex.create_schedule('crash-' || i, 'crash', 'wf', every => '1 second', overlap => 'allow_all'))
	  FROM generate_series(1, 50) i;
});
sub scheduler_pid
{
	my $pid;
	$node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dex scheduler'})
	  or die 'no scheduler';
	return $node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'dex scheduler'});
}
for my $round (1 .. 3)
{
	# at a random moment of a second, so that some kills hit a pass
	usleep(1_000_000 + int(rand(1_000_000)));
	my $pid = scheduler_pid();
	kill 'KILL', $pid;
	note "round $round: SIGKILL to the scheduler (pid $pid)";
	$node->poll_query_until('postgres', 'SELECT true') or die 'the server did not come back';
}
usleep(1_500_000 + int(rand(1_000_000)));
$node->stop('immediate');
note 'stopped with -m immediate';
$node->start;
scheduler_pid();
usleep(3_000_000);
# (a snapshot: the schedules go on ticking)
my $crash_check = q{
	SELECT count(*) FILTER (WHERE runs <> ticks OR runs <> started OR distinct_ticks <> runs), count(*),
	       sum(runs)
	  FROM (SELECT s.name, s.runs_started AS started, count(r.id) AS runs,
	               count(DISTINCT r.labels->>'dex.tick') AS distinct_ticks,
	               extract(epoch FROM max((r.labels->>'dex.tick')::timestamptz)
	                                - min((r.labels->>'dex.tick')::timestamptz))::int + 1 AS ticks
	          FROM dex.schedules s JOIN dex.workflow_run r ON r.labels->>'dex.schedule' = s.name
	         WHERE s.name LIKE 'crash-%' GROUP BY s.name, s.runs_started) c};
my ($bad, $schedules, $runs) = split /\|/, $node->safe_psql('postgres', $crash_check);
is($schedules, '50', 'every crash schedule fired');
is($bad, '0', "every tick of each schedule has exactly one run across the crashes ($runs runs)");
is($node->safe_psql('postgres', q{SELECT sum(skipped_missed) FROM dex.schedule WHERE name LIKE 'crash-%'}),
	'0', 'no tick missed: those due while the server was down were caught up');

# ---- 3. catch-up after the server was down
$node->safe_psql('postgres', q{
	SELECT dex.create_schedule('down', 'down', 'wf', every => '2 seconds', overlap => 'allow_all',
	                           catchup_window => '5 seconds');
});
$node->poll_query_until('postgres', q{SELECT runs_started >= 2 FROM dex.schedule WHERE name = 'down'})
  or die 'the schedule did not fire';
$node->stop('fast');
my $down_at = time;
sleep 12;
$node->start;
my $up_at = time;
$node->poll_query_until('postgres', q{SELECT next_tick > now() FROM dex.schedule WHERE name = 'down'})
  or die 'the schedule did not catch up';
$node->safe_psql('postgres', q{SELECT dex.pause_schedule('down')});
my ($fired, $missed, $first, $last_tick, $next_tick, $runs_down) = split /\|/, $node->safe_psql('postgres', q{
	SELECT s.runs_started, s.skipped_missed,
	       extract(epoch FROM min((r.labels->>'dex.tick')::timestamptz)),
	       extract(epoch FROM max((r.labels->>'dex.tick')::timestamptz)),
	       extract(epoch FROM s.next_tick), count(r.id)
	  FROM dex.schedule s JOIN dex.workflow_run r ON r.labels->>'dex.schedule' = s.name
	 WHERE s.name = 'down' GROUP BY s.runs_started, s.skipped_missed, s.next_tick});
diag(sprintf('down for %.1f s: %d ticks fired, %d missed (older than the 5 s catch-up window)',
	$up_at - $down_at, $fired, $missed));
cmp_ok($missed, '>=', 2, 'the ticks older than the catch-up window were counted as missed');
is($fired, $runs_down, 'runs_started counts the runs');
is($fired + $missed, ($next_tick - $first) / 2, 'every tick fired or was counted, once');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM dex.workflow_run
	 WHERE labels->>'dex.schedule' = 'down' AND created_at - (labels->>'dex.tick')::timestamptz > interval '6 s'}),
	'0', 'no tick older than the window fired late');

# ---- 4. failover: a replica promoted goes on where the primary left
$node->backup('ticking');
my $replica = PostgreSQL::Test::Cluster->new('replica');
$replica->init_from_backup($node, 'ticking', has_streaming => 1);
$replica->start;
$node->wait_for_catchup($replica);
usleep(1_000_000 + int(rand(1_000_000)));
$node->stop('immediate');
$replica->promote;
$replica->poll_query_until('postgres', q{SELECT NOT pg_is_in_recovery()}) or die 'no promotion';
$replica->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dex scheduler'}) or die 'no scheduler';
usleep(3_000_000);
$replica->safe_psql('postgres', q{
	SELECT count(dex.pause_schedule(name)) FROM dex.schedules WHERE name LIKE 'crash-%'});
($bad, $schedules, $runs) = split /\|/, $replica->safe_psql('postgres', $crash_check);
is($bad, '0', "after the failover every tick has exactly one run ($runs runs)");
is($replica->safe_psql('postgres', q{
	SELECT count(*) FROM dex.schedule WHERE name LIKE 'crash-%' AND last_tick < now() - interval '5 s'}),
	'0', 'the promoted server fires the ticks');

$replica->stop;
done_testing();
