# The scheduler's passes that only make due work pollable (timers, children's results, the end
# of a retry's backoff) commit without waiting for their WAL to be flushed; nothing that
# depends on such a pass can be durable before it (WAL is flushed in order), and a crash that
# undoes one leaves the work due, so the next pass fires it again.  Twenty timers falling due
# 100 ms apart fire in twenty passes, and the WAL is written far fewer times than that
# (pg_stat_wal: a commit that waits for its flush writes the WAL first).  A crash right after
# timers fired loses none: each run sees its timer once, and completes.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

# no autovacuum and a slow WAL writer: the WAL is written by commits that wait for it
my $node = dex_cluster('dex',
	conf => "restart_after_crash = on\nautovacuum = off\nwal_writer_delay = '10s'\n");
$node->safe_psql('postgres', q{
	CREATE EXTENSION dex;
	SELECT dex.create_queue('sleepers', 'workflow');
});

# N runs, each with a timer of FIRST s, FIRST + 0.1 s, ...: two transactions
sub start_sleepers
{
	my ($n, $first) = @_;
	$node->safe_psql('postgres', qq{
		SELECT count(*) FROM dex.create_runs('sleeper', 'sleepers', array_fill('{}'::jsonb, ARRAY[$n]));
		BEGIN;
		SELECT array_agg(run_id ORDER BY run_id) AS runs, array_agg(lock_version ORDER BY run_id) AS versions
		FROM dex.poll_tasks('sleepers', 'starter', $n) \\gset
		SELECT count(*) FILTER (WHERE completed) FROM dex.complete_tasks(:'runs'::uuid[],
		  array_fill(0, ARRAY[$n]), :'versions'::bigint[],
		  (SELECT array_agg(format('[{"id": 1, "startTimer": {"delay": "%ss"}}]',
		                           round($first + 0.1 * i, 1))::jsonb ORDER BY i)
		   FROM generate_series(0, $n - 1) i));
		COMMIT;
	});
}

# Complete the runs whose timers fired, in one transaction; how many
sub complete_woken
{
	return $node->safe_psql('postgres', q{
		BEGIN;
		SELECT array_agg(run_id) AS runs, array_agg(lock_version) AS versions, count(*) AS n
		FROM dex.poll_tasks('sleepers', 'finisher', 100) \gset
		SELECT count(*) FILTER (WHERE completed) FROM dex.complete_tasks(:'runs'::uuid[],
		  array_fill(0, ARRAY[:n]), :'versions'::bigint[],
		  array_fill('[{"completeRun": {"result": {"json": "1"}}}]'::jsonb, ARRAY[:n]))
		WHERE :n > 0;
		COMMIT;
	});
}

my $pending = q{(SELECT count(*) FROM dex.workflow_inbox WHERE delayed)};

start_sleepers(20, 2);
is($node->safe_psql('postgres', "SELECT $pending"), '20', 'twenty timers wait');
my $counts = q{SELECT (SELECT wal_write FROM pg_stat_wal) || ' ' || (SELECT sum(scheduler_passes) FROM dex.stat_counters())};
my ($writes_before, $passes_before) = split ' ', $node->safe_psql('postgres', $counts);
ok($node->poll_query_until('postgres', "SELECT $pending = 0"), 'they fire');
like(complete_woken(), qr/^20$/m, 'their runs take their workflow tasks and complete');
# the scheduler reports its counts at most once a second: one more timer, later, flushes them
sleep 1.5;
start_sleepers(1, 0.1);
ok($node->poll_query_until('postgres', "SELECT $pending = 0"), 'one more fires');
like(complete_woken(), qr/^1$/m, 'and its run completes');
sleep 1;
my ($writes, $passes) = split ' ', $node->safe_psql('postgres', $counts);
$writes -= $writes_before;
$passes -= $passes_before;
# 100 ms apart, the timers fire in a pass each (a stall of the machine may join a few)
cmp_ok($passes, '>=', 15, "the timers fired in $passes passes");
cmp_ok($writes, '<', 10, "and the WAL was written $writes times meanwhile (clients' commits too), not once per pass");

# a crash right after timers fire: each fires once, after the crash if the crash undid it
start_sleepers(20, 1);
ok($node->poll_query_until('postgres', "SELECT $pending < 20"), 'the first timers fire');
$node->stop('immediate');
$node->start;
ok($node->poll_query_until('postgres', "SELECT $pending = 0"), 'after the crash, every timer has fired');
my $completed = 0;
for my $try (1 .. 50)
{
	$completed += (complete_woken() =~ /^(\d+)$/m)[0] // 0;
	last if $completed >= 20;
	sleep 0.2;
}
is($completed, 20, 'and every run completes');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM dex.runs r, dex.run_history(r.id) h
	WHERE r.status = 'COMPLETED' AND h.event ? 'timerElapsed'}),
	'41', 'each of the 41 runs saw its timer elapse once');

done_testing();
