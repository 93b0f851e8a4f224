# Queue capacity and pause, with workers waiting in dex.wait_for_tasks: a
# worker waiting on a paused queue is woken when it is resumed, and one
# waiting on a full queue when a lease ends (a completion, or a lease that
# runs out); concurrent polls never hold more leases than the capacity.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = dex_cluster('dex');
$node->safe_psql('postgres', q{
	CREATE EXTENSION dex;
	SELECT dex.create_queue('wf', 'workflow');
	SELECT dex.create_queue('act', 'activity', capacity => 2);
	SELECT dex.create_run('fan', 'wf');
	SELECT dex.complete_task(run_id, 0, lock_version,
	       (SELECT jsonb_agg(jsonb_build_object('id', i, 'scheduleActivity',
	                                            jsonb_build_object('name', 'a', 'queue', 'act')))
	          FROM generate_series(1, 20) i))
	  FROM dex.poll_tasks('wf', 'w');
});

sub start_waiter
{
	my ($queue, $timeout) = @_;
	return dex_psql_start($node, "CALL dex.wait_for_tasks('$queue', '$timeout')");
}

sub wait_until_sleeping
{
	my ($queue) = @_;
	return $node->poll_query_until('postgres', qq{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE query LIKE 'CALL dex.wait_for_tasks(''$queue''%' AND wait_event_type = 'Extension'});
}

my $leased = q{SELECT count(*) FROM dex.activity_task WHERE locked_by IS NOT NULL AND locked_until > now()};

# 1. full: two leases taken (one with a short lease); a waiter sleeps until one ends
$node->safe_psql('postgres', q{SELECT count(*) FROM dex.poll_tasks('act', 'short', 1, '2 s')});
$node->safe_psql('postgres', q{SELECT count(*) FROM dex.poll_tasks('act', 'long', 10)});
is($node->safe_psql('postgres', $leased), '2', 'two leases: the queue is full');
my ($h, $out) = start_waiter('act', '60s');
ok(wait_until_sleeping('act'), 'a worker waits on the full queue');
my $t0 = time;
$node->safe_psql('postgres', q{
	SELECT dex.complete_task(run_id, event_id, lock_version, '1') FROM dex.activity_task
	 WHERE locked_by = 'long'});
$h->finish;
is($$out, "t\n", 'a completion wakes it');
cmp_ok(time - $t0, '<', 5, 'at once, not after the timeout');

# 2. a lease that runs out frees room too (the scheduler reclaims it)
$node->safe_psql('postgres', q{SELECT count(*) FROM dex.poll_tasks('act', 'long', 10)});
is($node->safe_psql('postgres', $leased), '2', 'full again');
($h, $out) = start_waiter('act', '60s');
ok(wait_until_sleeping('act'), 'a worker waits again');
$h->finish;
is($$out, "t\n", 'the short lease running out wakes it');

# 3. paused: a waiter sleeps through new work, and wakes on resume
$node->safe_psql('postgres', q{SELECT dex.alter_queue('act', capacity => 0, paused => true)});
($h, $out) = start_waiter('act', '60s');
ok(wait_until_sleeping('act'), 'a worker waits on the paused queue');
sleep 1;
ok(wait_until_sleeping('act'), 'it keeps waiting although tasks are there');
$t0 = time;
$node->safe_psql('postgres', q{SELECT dex.alter_queue('act', paused => false, capacity => 5)});
$h->finish;
is($$out, "t\n", 'resuming wakes it');
cmp_ok(time - $t0, '<', 5, 'at once');

# 4. many concurrent polls never exceed the capacity
my @pollers;
for my $i (1 .. 6)
{
	push @pollers, (dex_psql_start($node, "SELECT count(*) FROM dex.poll_tasks('act', 'p$i', 10)"))[0];
}
$_->finish for @pollers;
cmp_ok($node->safe_psql('postgres', $leased), '<=', 5, 'concurrent polls stay within the capacity');
is($node->safe_psql('postgres', $leased), '5', 'and fill it');

$node->stop;
done_testing();
