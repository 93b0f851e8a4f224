# A suspended run loses nothing across a crash or a failover, and nothing of
# it is handed out until it is resumed.  Runs are suspended with an activity
# queued, one leased, one waiting out a retry backoff, and a timer pending; the
# primary is stopped with -m immediate (the UNLOGGED task tables come back
# empty and are rebuilt) and, separately, a streaming replica is promoted.
# In each copy nothing is handed out while the runs stay suspended, even after
# the timer and the backoff are due; after dex.resume_run every activity runs
# and every run completes, with each activity completed once.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $primary = dex_cluster('primary', init => { allows_streaming => 1 },
	conf => "dex.scheduler_naptime = '200ms'\n");
$primary->safe_psql('postgres', q{
	CREATE EXTENSION dex;
	SELECT dex.create_queue('wf', 'workflow'), dex.create_queue('act', 'activity');
});

# 20 runs, each scheduling three activities and a 2 s timer; per run the
# "leased" activity is leased, "retry" fails once (retry after 1.5 s, no
# jitter), "queued" stays queued; then every run is suspended
my $runs = 20;
$primary->safe_psql('postgres', qq{
	SELECT dex.create_run('w', 'wf', to_jsonb(i)) FROM generate_series(1, $runs) i;
	SELECT count(dex.complete_task(run_id, 0, lock_version, '[
	  {"id": 1, "scheduleActivity": {"name": "leased", "queue": "act", "priority": 90}},
	  {"id": 2, "scheduleActivity": {"name": "retry", "queue": "act", "priority": 80,
	     "retryPolicy": {"initialDelay": "1.5s", "randomizationFactor": 0}}},
	  {"id": 3, "scheduleActivity": {"name": "queued", "queue": "act", "priority": 10}},
	  {"id": 4, "startTimer": {"name": "t", "delay": "2s"}}]'))
	  FROM dex.poll_tasks('wf', 'w', 100);
	CREATE TABLE leases AS SELECT run_id, task_id, lock_version, task->>'name' AS name
	  FROM dex.poll_tasks('act', 'w', 100) WHERE task->>'name' <> 'queued';
	SELECT count(dex.fail_task(run_id, task_id, lock_version, '{"message": "flaky"}'))
	  FROM leases WHERE name = 'retry';
	SELECT count(dex.suspend_run(id)) FROM dex.workflow_run;
});
is($primary->safe_psql('postgres', q{
	SELECT string_agg(name || ':' || n, ' ' ORDER BY name) FROM (
	  SELECT name, count(*) n FROM dex.activity_task
	   WHERE visible_from = 'infinity' OR locked_by IS NOT NULL GROUP BY name) s}),
	"leased:$runs queued:$runs retry:$runs", 'suspended: the leased activities run on, the others are held');

my $backup = 'suspended';
$primary->backup($backup);
my $replica = PostgreSQL::Test::Cluster->new('replica');
$replica->init_from_backup($primary, $backup, has_streaming => 1);
$replica->start;
$primary->wait_for_catchup($replica);

# nothing is handed out (sleeps past the timer and the backoff), and the
# suspended runs' activities are held back in the rebuilt task tables
sub nothing_handed_out
{
	my ($node, $what) = @_;
	sleep 3;
	is($node->safe_psql('postgres', q{
		SELECT (SELECT count(*) FROM dex.poll_tasks('act', 'late', 100))
		     + (SELECT count(*) FROM dex.poll_tasks('wf', 'late', 100))}), '0',
		"$what: nothing of a suspended run is handed out, timers and backoffs due or not");
	is($node->safe_psql('postgres', q{
		SELECT string_agg(name || ':' || n, ' ' ORDER BY name) FROM (
		  SELECT name, count(*) n FROM dex.activity_task WHERE visible_from = 'infinity'
		  GROUP BY name) s}),
		"leased:$runs queued:$runs retry:$runs",
		"$what: every activity is there, held back (a lease the crash ended is void)");
}

# resume, then work every task until the runs complete: each activity result
# completes its run's activity once, the timer fires, the workflow completes
sub resume_and_finish
{
	my ($node, $what) = @_;
	$node->safe_psql('postgres', q{SELECT count(dex.resume_run(id)) FROM dex.workflow_run});
	for my $i (1 .. 100)
	{
		$node->safe_psql('postgres', q{
			SELECT count(dex.complete_task(run_id, task_id, lock_version, to_jsonb(task->>'name')))
			  FROM dex.poll_tasks('act', 'new', 100);
			SELECT count(dex.complete_task(p.run_id, 0, p.lock_version,
			         CASE WHEN (SELECT count(*) FROM dex.run_history(p.run_id) h
			                     WHERE h.event ?| array['activityTaskCompleted', 'timerElapsed'])
			                 + (SELECT count(*) FROM jsonb_array_elements(p.task->'newEvents') e
			                     WHERE e ?| array['activityTaskCompleted', 'timerElapsed']) >= 4
			              THEN '[{"completeRun": {}}]'::jsonb ELSE '[]'::jsonb END))
			  FROM dex.poll_tasks('wf', 'new', 100) p;
		});
		last if $node->safe_psql('postgres',
			q{SELECT count(*) FROM dex.workflow_run WHERE status <> 'COMPLETED'}) eq '0';
		usleep(100_000);
	}
	is($node->safe_psql('postgres', q{SELECT string_agg(DISTINCT status, ',') FROM dex.workflow_run}),
		'COMPLETED', "$what: after resume every run completes");
	is($node->safe_psql('postgres', q{
		SELECT string_agg(n || 'x' || k, ' ' ORDER BY k) FROM (
		  SELECT h.event->'activityTaskCompleted'->'result'->>'json' AS k, count(*) n
		    FROM dex.workflow_run r, dex.run_history(r.id) h
		   WHERE h.event ? 'activityTaskCompleted' GROUP BY 1) s}),
		"${runs}x\"leased\" ${runs}x\"queued\" ${runs}x\"retry\"",
		"$what: each activity completed once in each run");
}

# a crash: -m immediate, then start; the replica, promoted, has the runs as
# they were when suspended (promoted before the primary's runs go on)
$primary->stop('immediate');
$primary->start;
nothing_handed_out($primary, 'after a crash');
$replica->promote;
$replica->poll_query_until('postgres', q{SELECT NOT pg_is_in_recovery()});
nothing_handed_out($replica, 'after a failover');
resume_and_finish($primary, 'after a crash');
resume_and_finish($replica, 'after a failover');

$replica->stop;
$primary->stop;
done_testing();
