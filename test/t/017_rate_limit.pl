# Rate limits (1.7): a queue with rate_limit n and rate_period p hands out at most n tasks at
# once and then n per p, across every worker and backend (a token bucket in shared memory).
#
# 1. Eight workers long-poll the queue at once (dex.poll_tasks_wait in a loop, as the SDKs
#    do) for a few periods: in all they lease exactly what the bucket let through (the
#    leases equal dex.rate_limits().tasks_granted), never more than n + n * elapsed / p, and
#    close to that (they are not starved).
# 2. A worker long-polling an empty bucket is woken when a token comes back: it returns with
#    a task about one token's time later, not at its timeout, and it does not spin meanwhile
#    (a handful of polls, not thousands).  dex.wait_for_tasks likewise.
use strict;
use warnings;
use IPC::Run;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = dex_cluster('dex', conf => "max_connections = 40\n");
$node->safe_psql('postgres', q{
	CREATE EXTENSION dex;
	SELECT dex.create_queue('rl', 'workflow');
	SELECT count(dex.create_run('r', 'rl')) FROM generate_series(1, 2000);
});

my ($n, $period) = (20, 1);    # 20 tasks per second
my $seconds = 4;

# 1. eight long-polling workers for $seconds seconds
my $t_set = $node->safe_psql('postgres', q{SELECT extract(epoch FROM clock_timestamp())});
$node->safe_psql('postgres',
	"SELECT dex.alter_queue('rl', rate_limit => $n, rate_period => '$period s')");
my $until = $t_set + $seconds;
my @workers;
for my $i (1 .. 8)
{
	my ($out, $err) = ('', '');
	my $sql = qq{
	DO \$\$
	DECLARE
		t jsonb;
		c boolean[];
		got integer := 0;
	BEGIN
		WHILE extract(epoch FROM clock_timestamp()) < $until LOOP
			t := NULL;
			CALL dex.poll_tasks_wait('rl', 'w$i', 5, '10 min', '2 s', tasks => t, completed => c);
			got := got + jsonb_array_length(t);
			COMMIT;
		END LOOP;
		RAISE NOTICE 'got %', got;
	END \$\$};
	push @workers, [ IPC::Run::start(
		[ 'psql', '-X', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-c', $sql ],
		'>', \$out, '2>', \$err), \$err ];
}
my $got = 0;
for my $w (@workers)
{
	$w->[0]->finish;
	my ($g) = ${ $w->[1] } =~ /got (\d+)/;
	ok(defined $g, 'a worker polled until the end') or diag ${ $w->[1] };
	$got += $g // 0;
}
my $t_end = $node->safe_psql('postgres', q{SELECT extract(epoch FROM clock_timestamp())});
my $leased = $node->safe_psql('postgres',
	q{SELECT count(*) FROM dex.workflow_task WHERE locked_by LIKE 'w%'});
my $granted = $node->safe_psql('postgres', q{
	SELECT tasks_granted FROM dex.rate_limits() b JOIN dex.queue q ON q.id = b.queue_id
	 WHERE q.name = 'rl'});
is($leased, $got, 'the workers leased what they report');
is($granted, $leased, 'the bucket let through exactly what was leased');
my $bound = $n + int($n * ($t_end - $t_set) / $period);
cmp_ok($leased, '<=', $bound, "at most n + n * elapsed / period ($leased of at most $bound)");
cmp_ok($leased, '>=', int(0.8 * $n * $seconds / $period),
	"and close to the rate: the workers were not starved ($leased)");
my $per_worker = $node->safe_psql('postgres', q{
	SELECT count(DISTINCT locked_by) FROM dex.workflow_task WHERE locked_by LIKE 'w%'});
is($per_worker, '8', 'every worker got tasks: the sleepers take the tokens in turn');

# 2. a long poll of an empty bucket is woken by the next token
$node->safe_psql('postgres', q{SELECT dex.alter_queue('rl', rate_limit => 1, rate_period => '2 s')});
$node->safe_psql('postgres', q{SELECT count(*) FROM dex.poll_tasks('rl', 'drain', 10)});
is($node->safe_psql('postgres', q{SELECT count(*) FROM dex.poll_tasks('rl', 'drain', 10)}),
	'0', 'the bucket is empty');
my $throttled_before = $node->safe_psql('postgres', q{
	SELECT polls_throttled FROM dex.queue_limits WHERE queue = 'rl'});
my ($out, $err) = ('', '');
my $t0 = time;
my $h = IPC::Run::start(
	[ 'psql', '-X', '-A', '-t', '-d', $node->connstr('postgres'),
	  '-c', q{CALL dex.poll_tasks_wait('rl', 'sleeper', 5, '10 min', '30 s')} ],
	'>', \$out, '2>', \$err);
$h->finish;
my $latency = time - $t0;
like($out, qr/"runId"/, 'the sleeping worker got a task');
cmp_ok($latency, '>', 1.0, sprintf('when the token came back (%.2f s)', $latency));
cmp_ok($latency, '<', 4.0, 'not at its timeout');
my $throttled = $node->safe_psql('postgres', q{
	SELECT polls_throttled FROM dex.queue_limits WHERE queue = 'rl'}) - $throttled_before;
cmp_ok($throttled, '<=', 4, "without spinning ($throttled polls held back)");

# dex.wait_for_tasks: ready when the next token comes
$t0 = time;
$out = '';
$h = IPC::Run::start(
	[ 'psql', '-X', '-A', '-t', '-d', $node->connstr('postgres'),
	  '-c', q{CALL dex.wait_for_tasks('rl', '30 s')} ],
	'>', \$out, '2>', \$err);
$h->finish;
$latency = time - $t0;
is($out, "t\n", 'dex.wait_for_tasks says ready');
cmp_ok($latency, '<', 4.0, sprintf('when the token comes back (%.2f s)', $latency));

$node->stop;
done_testing();
