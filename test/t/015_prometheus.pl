# dex's metrics end to end: the real prometheus-postgres-exporter, with the
# queries file contrib/prometheus/dex-queries.yaml, connected as a role that
# is only in pg_monitor, scraped every second by a real Prometheus server;
# work is done with SQL and the values are read back through Prometheus'
# HTTP API (/api/v1/query): the queues' backlog (ready, leased), the
# counters of what was handed out, completed, failed and polled for nothing,
# runs by status, and the latency histograms (how long tasks wait, activities
# run, runs last, and how late timers fire).  Skipped only when the two
# programs (Debian's prometheus-postgres-exporter and prometheus, which
# test/deps.sh installs) are missing or cannot run.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use File::Path qw(make_path);
use HTTP::Tiny;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $exporter_bin = '/usr/bin/prometheus-postgres-exporter';
my $prometheus_bin = '/usr/bin/prometheus';
for my $bin ($exporter_bin, $prometheus_bin)
{
	plan skip_all => "$bin is not installed (test/deps.sh installs it)"
	  unless -x $bin;
	plan skip_all => "$bin does not run"
	  unless system("$bin --version >/dev/null 2>&1") == 0;
}

my $queries = "$FindBin::RealBin/../../contrib/prometheus/dex-queries.yaml";
my $node = dex_cluster('metrics', conf => "dex.scheduler_naptime = '200ms'\n");
$node->safe_psql('postgres', q{
	CREATE EXTENSION dex;
	SELECT dex.create_queue('wf', 'workflow'), dex.create_queue('act', 'activity'),
	       dex.create_queue('idle', 'workflow'), dex.create_queue('tq', 'workflow');
	CREATE ROLE dex_exporter LOGIN IN ROLE pg_monitor;
});

# the two servers, on free ports, logging into the test's log directory
my $dir = "$PostgreSQL::Test::Utils::tmp_check/prometheus";
make_path("$dir/data");
my $exporter_port = PostgreSQL::Test::Cluster::get_free_port();
my $prometheus_port = PostgreSQL::Test::Cluster::get_free_port();
my @servers;

END
{
	for my $h (@servers) { $h->kill_kill if $h->pumpable; }
}

{
	local $ENV{DATA_SOURCE_NAME} =
	    'postgresql://dex_exporter@:' . $node->port
	  . '/postgres?host=' . $node->host . '&sslmode=disable';
	push @servers, IPC::Run::start(
		[ $exporter_bin, "--extend.query-path=$queries",
		  "--web.listen-address=127.0.0.1:$exporter_port",
		  '--disable-default-metrics', '--disable-settings-metrics' ],
		'<', \undef, '>', "$PostgreSQL::Test::Utils::log_path/exporter.log",
		'2>&1');
}

open(my $conf, '>', "$dir/prometheus.yml") or die "prometheus.yml: $!";
print $conf <<"CONF";
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: dex
    static_configs:
      - targets: ['127.0.0.1:$exporter_port']
CONF
close($conf);
push @servers, IPC::Run::start(
	[ $prometheus_bin, "--config.file=$dir/prometheus.yml",
	  "--storage.tsdb.path=$dir/data",
	  "--web.listen-address=127.0.0.1:$prometheus_port" ],
	'<', \undef, '>', "$PostgreSQL::Test::Utils::log_path/prometheus.log", '2>&1');

my $http = HTTP::Tiny->new(timeout => 5);

# query(PROMQL): the result vector of an instant query, as
# { 'label=value,...' => value }, labels other than job and instance
sub query
{
	my ($promql) = @_;
	my $res = $http->get("http://127.0.0.1:$prometheus_port/api/v1/query?query="
		  . join('', map { sprintf('%%%02X', ord) } split //, $promql));
	return undef unless $res->{success};
	my $body = decode_json($res->{content});
	return undef unless $body->{status} eq 'success';
	my %out;
	for my $s (@{ $body->{data}{result} })
	{
		my %l = %{ $s->{metric} };
		delete @l{qw(__name__ job instance server)};
		$out{ join(',', map { "$_=$l{$_}" } sort keys %l) } = $s->{value}[1] + 0;
	}
	return \%out;
}

# scraped(PROMQL, WANT): wait (60 s at most) until the query's vector is WANT;
# returns what it was last
sub scraped
{
	my ($promql, $want) = @_;
	my $got;
	for (1 .. 600)
	{
		$got = query($promql);
		return $got if defined $got && encode_json($got) eq encode_json($want);
		usleep(100_000);
	}
	return $got;
}

sub scraped_is
{
	my ($promql, $want, $name) = @_;
	my $json = JSON::PP->new->canonical;
	is($json->encode(scraped($promql, $want) // {}), $json->encode($want), $name);
}

# Prometheus is up and scrapes the exporter, which reaches the database
scraped_is('up', { '' => 1 }, 'Prometheus scrapes the exporter');
scraped_is('dex_queue_ready{queue="wf"}', { 'kind=workflow,queue=wf' => 0 },
	'the queries file is read: an empty queue');

# the work: 10 runs, left ready for over a second; 4 workflow tasks handed
# out and completed, each run scheduling an activity; 2 more handed out and
# held; on the activity queue 3 of the 4 activities handed out, 1 completed
# after over half a second, 1 failed without retries, 1 held; an empty poll
# of "idle"
$node->safe_psql('postgres', q{
	SELECT dex.create_run('w', 'wf', to_jsonb(i)) FROM generate_series(1, 10) i;
	SELECT pg_sleep(1.1);
	SELECT count(dex.complete_task(run_id, 0, lock_version, '[
	  {"id": 1, "scheduleActivity": {"name": "a", "queue": "act",
	     "retryPolicy": {"maxAttempts": 1}}}]'))
	  FROM dex.poll_tasks('wf', 'w1', 4);
	SELECT count(*) FROM dex.poll_tasks('wf', 'w2', 2, '1 hour');
	CREATE TABLE leases AS
	  SELECT run_id, task_id, lock_version FROM dex.poll_tasks('act', 'w3', 3, '1 hour');
	SELECT pg_sleep(0.6);
	SELECT dex.complete_task(run_id, task_id, lock_version, '{"json": "1"}')
	  FROM (SELECT * FROM leases ORDER BY run_id LIMIT 1) l;
	SELECT dex.fail_task(run_id, task_id, lock_version, '{"message": "no"}')
	  FROM (SELECT * FROM leases ORDER BY run_id OFFSET 1 LIMIT 1) l;
	SELECT count(*) FROM dex.poll_tasks('idle', 'w4', 1);
});

scraped_is('dex_queue_ready', {
		'kind=activity,queue=act' => 1,
		'kind=workflow,queue=idle' => 0,
		'kind=workflow,queue=tq' => 0,
		'kind=workflow,queue=wf' => 4 + 2,	# 4 not polled, 2 runs with an activity's result or failure
	}, 'ready gauges: the backlog of each queue');
scraped_is('dex_queue_leased', {
		'kind=activity,queue=act' => 1,
		'kind=workflow,queue=idle' => 0,
		'kind=workflow,queue=tq' => 0,
		'kind=workflow,queue=wf' => 2,
	}, 'leased gauges');
scraped_is('dex_queue_tasks_leased_total', {
		'kind=activity,queue=act' => 3,
		'kind=workflow,queue=idle' => 0,
		'kind=workflow,queue=tq' => 0,
		'kind=workflow,queue=wf' => 6,
	}, 'handed-out counters');
scraped_is('dex_queue_tasks_completed_total', {
		'kind=activity,queue=act' => 1,
		'kind=workflow,queue=idle' => 0,
		'kind=workflow,queue=tq' => 0,
		'kind=workflow,queue=wf' => 4,
	}, 'completed counters equal what was completed');
scraped_is('dex_queue_tasks_failed_total{queue="act"}', { 'kind=activity,queue=act' => 1 },
	'failed counter');
scraped_is('dex_queue_polls_empty_total', {
		'kind=activity,queue=act' => 0,
		'kind=workflow,queue=idle' => 1,
		'kind=workflow,queue=tq' => 0,
		'kind=workflow,queue=wf' => 0,
	}, 'polls that found nothing');
scraped_is('dex_queue_tasks_created_total{queue="act"}', { 'kind=activity,queue=act' => 4 },
	'activity tasks created');
scraped_is('dex_runs_runs', { 'status=CREATED,workflow=w' => 6, 'status=RUNNING,workflow=w' => 4 },
	'runs by status');
scraped_is('dex_scheduler_passes_total > bool 0', { '' => 1 }, 'scheduler passes are counted');

# the latency histograms: a task_wait observation per task handed out, the
# 6 of "wf" each after more than a second ready; one activity_execution
# observation of more than half a second; no run has ended yet
scraped_is('dex_task_wait_seconds_count',
	{ 'queue=act' => 3, 'queue=wf' => 6 }, 'task_wait counts the tasks handed out');
scraped_is('dex_task_wait_seconds_bucket{queue="wf",le=~"1|5|[+]Inf"}',
	{ 'le=1,queue=wf' => 0, 'le=5,queue=wf' => 6, 'le=+Inf,queue=wf' => 6 },
	'task_wait buckets: each of them waited between 1 and 5 seconds');
scraped_is('dex_task_wait_seconds_sum{queue="wf"} > bool 6.6',
	{ 'queue=wf' => 1 }, 'task_wait sum: over 6 times 1.1 seconds');
scraped_is('dex_activity_execution_seconds_bucket{le=~"0.5|5"}',
	{ 'le=0.5,queue=act' => 0, 'le=5,queue=act' => 1 },
	'activity_execution: the completed attempt, between 0.5 and 5 seconds');
scraped_is('histogram_quantile(0.5, dex_task_wait_seconds_bucket{queue="wf"}) > bool 1',
	{ 'queue=wf' => 1 }, 'histogram_quantile over task_wait');
is_deeply(query('dex_run_duration_seconds_count'), {}, 'run_duration: no run ended yet');

# timer_lag: 3 runs on "tq" start a 1 s timer; the scheduler (200 ms naptime)
# wakes each once, late by less than 5 s however busy the machine
$node->safe_psql('postgres', q{
	SELECT dex.create_run('t', 'tq', to_jsonb(i)) FROM generate_series(1, 3) i;
	SELECT count(dex.complete_task(run_id, 0, lock_version,
	         '[{"id": 1, "startTimer": {"name": "t", "delay": "1s"}}]'))
	  FROM dex.poll_tasks('tq', 'w5', 10);
});
scraped_is('dex_timer_lag_seconds_bucket{le=~"5|[+]Inf"}',
	{ 'le=5,queue=tq' => 3, 'le=+Inf,queue=tq' => 3 },
	'timer_lag: each run woken once for its timer, less than 5 s late');

# a counter is monotonic: more work only adds; a PromQL rate sees it
$node->safe_psql('postgres', q{
	SELECT count(dex.complete_task(run_id, 0, lock_version, '[{"completeRun": {}}]'))
	  FROM dex.poll_tasks('wf', 'w1', 100);
});
scraped_is('dex_queue_tasks_completed_total{queue="wf"}', { 'kind=workflow,queue=wf' => 10 },
	'completed counter after more work');
scraped_is('dex_runs_runs{status="COMPLETED"}', { 'status=COMPLETED,workflow=w' => 6 },
	'completed runs');
scraped_is('increase(dex_queue_tasks_completed_total{queue="wf"}[10m]) > bool 0',
	{ 'kind=workflow,queue=wf' => 1 }, 'increase() sees the counter grow');
scraped_is('dex_run_duration_seconds_bucket{le=~"1|[+]Inf"}',
	{ 'le=1,workflow=w' => 0, 'le=+Inf,workflow=w' => 6 },
	'run_duration: the 6 runs that ended, each after more than a second');
scraped_is('dex_task_wait_seconds_count{queue="wf"}', { 'queue=wf' => 12 },
	'task_wait after more work');

done_testing();
