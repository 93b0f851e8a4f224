# 200 runs in the states an operator leaves them in survive a crash and a
# failover, then finish correctly.  Per 50 runs: suspended with an activity
# held back; blocked (their workflow task failed); delayed (start_at 15 s
# ahead); with an execution timeout, half of them an hour (they complete) and
# half 5 s (they time out, the deadline passing while the server is down or
# just after).  The primary is stopped with -m immediate and started (the
# UNLOGGED task tables come back empty and are rebuilt); separately a
# streaming replica is promoted.  In each copy every run is found in its
# state, nothing of a suspended, blocked or delayed run is handed out early,
# the deadlines fire, the delayed runs start at start_at with no client
# polling for them, and after dex.resume_run every other run completes, each
# held activity run once.
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

# suspended: each schedules activity "a", then is suspended (the activity is held back)
$primary->safe_psql('postgres', q{
	SELECT count(dex.create_run('suspended', 'wf', to_jsonb(i))) FROM generate_series(1, 50) i;
	SELECT count(dex.complete_task(run_id, 0, lock_version,
	         '[{"id": 1, "scheduleActivity": {"name": "a", "queue": "act"}}]'))
	  FROM dex.poll_tasks('wf', 'w', 100);
	SELECT count(dex.suspend_run(id)) FROM dex.workflow_run WHERE workflow_name = 'suspended';
});
# blocked: their first workflow task fails, and one failure parks them
$primary->safe_psql('postgres', q{
	SET dex.max_workflow_task_failures = 1;
	SELECT count(dex.create_run('blocked', 'wf', to_jsonb(i))) FROM generate_series(1, 50) i;
	SELECT count(dex.fail_task(run_id, 0, lock_version, '{"message": "bug"}'))
	  FROM dex.poll_tasks('wf', 'w', 100);
});
# delayed, and with deadlines (not polled yet: their first task waits)
$primary->safe_psql('postgres', q{
	SELECT count(dex.create_run('delayed', 'wf', to_jsonb(i), start_at => now() + interval '15 s'))
	  FROM generate_series(1, 50) i;
	SELECT count(dex.create_run('bounded', 'wf', to_jsonb(i), execution_timeout => interval '1 hour'))
	  FROM generate_series(1, 25) i;
	SELECT count(dex.create_run('short', 'wf', to_jsonb(i), execution_timeout => interval '5 s'))
	  FROM generate_series(1, 25) i;
});
my $states = q{SELECT string_agg(workflow_name || ':' || status || ':' || n, ' ' ORDER BY workflow_name, status)
	FROM (SELECT workflow_name, status, count(*) n FROM dex.workflow_run GROUP BY 1, 2) s};
is($primary->safe_psql('postgres', $states),
	'blocked:BLOCKED:50 bounded:CREATED:25 delayed:DELAYED:50 short:CREATED:25 suspended:SUSPENDED:50',
	'200 runs in mixed states');

$primary->backup('mixed');
my $replica = PostgreSQL::Test::Cluster->new('replica');
$replica->init_from_backup($primary, 'mixed', has_streaming => 1);
$replica->start;
$primary->wait_for_catchup($replica);

# every run in its state; what may be handed out is only the first tasks of
# the runs with deadlines (and, once started, the delayed runs')
sub check_after
{
	my ($node, $what) = @_;
	my $s = $node->safe_psql('postgres', $states);
	like($s, qr/^blocked:BLOCKED:50 bounded:CREATED:25 delayed:(DELAYED:50|CREATED:50) /,
		"$what: blocked and delayed runs are as they were");
	like($s, qr/suspended:SUSPENDED:50$/, "$what: suspended runs are as they were");
	is($node->safe_psql('postgres', q{
		SELECT count(*) FROM dex.activity_task WHERE name = 'a' AND visible_from = 'infinity'}),
		'50', "$what: the suspended runs' activities are there, held back");
	is($node->safe_psql('postgres', q{
		SELECT (SELECT count(*) FROM dex.run_timer)
		     = (SELECT count(*) FILTER (WHERE workflow_name IN ('bounded', 'short') AND status = 'CREATED')
		             + count(*) FILTER (WHERE workflow_name = 'delayed' AND status = 'DELAYED')
		          FROM dex.workflow_run)}), 't',
		"$what: the pending starts and deadlines are kept");
	# the short deadlines fire, with no client involved
	$node->poll_query_until('postgres', q{
		SELECT count(*) = 25 FROM dex.workflow_run WHERE workflow_name = 'short' AND status = 'TIMED_OUT'})
	  or die "$what: the short deadlines did not fire";
	pass("$what: the runs past their deadline ended TIMED_OUT");
	is($node->safe_psql('postgres', q{
		SELECT count(*) FROM dex.poll_tasks('act', 'early', 100)}), '0',
		"$what: nothing of a suspended run is handed out");
	is($node->safe_psql('postgres', q{
		SELECT string_agg(DISTINCT r.workflow_name, ',')
		  FROM dex.poll_tasks('wf', 'early', 200, '1 ms') p JOIN dex.workflow_run r ON r.id = p.run_id
		 WHERE r.workflow_name NOT IN ('bounded', 'delayed')}), '',
		"$what: nothing of a blocked or timed-out run is handed out");
}

# resume the suspended and blocked runs, then work until every run not timed
# out completes: a suspended run's workflow completes once its activity did
sub resume_and_finish
{
	my ($node, $what) = @_;
	$node->safe_psql('postgres', q{
		SELECT count(dex.resume_run(id)) FROM dex.workflow_run WHERE status IN ('SUSPENDED', 'BLOCKED')});
	for my $i (1 .. 300)
	{
		$node->safe_psql('postgres', q{
			SELECT count(dex.complete_task(run_id, task_id, lock_version, '"done"'))
			  FROM dex.poll_tasks('act', 'new', 100);
			SELECT count(dex.complete_task(p.run_id, 0, p.lock_version,
			         CASE WHEN r.workflow_name <> 'suspended'
			                OR p.task->'newEvents' @> '[{"activityTaskCompleted": {}}]'
			              THEN '[{"completeRun": {}}]'::jsonb ELSE '[]'::jsonb END))
			  FROM dex.poll_tasks('wf', 'new', 200) p JOIN dex.workflow_run r ON r.id = p.run_id;
		});
		last if $node->safe_psql('postgres', q{
			SELECT count(*) FROM dex.workflow_run WHERE status NOT IN ('COMPLETED', 'TIMED_OUT')}) eq '0';
		usleep(100_000);
	}
	is($node->safe_psql('postgres', $states),
		'blocked:COMPLETED:50 bounded:COMPLETED:25 delayed:COMPLETED:50 short:TIMED_OUT:25 suspended:COMPLETED:50',
		"$what: every run finished as it should");
	is($node->safe_psql('postgres', q{
		SELECT count(*) FROM dex.workflow_run r, dex.run_history(r.id) h
		 WHERE h.event ? 'activityTaskCompleted'}), '50',
		"$what: each held activity completed once");
	is($node->safe_psql('postgres', q{
		SELECT count(*) FROM dex.workflow_run r
		 WHERE r.workflow_name = 'delayed'
		   AND (SELECT (h.event->>'timestamp')::timestamptz FROM dex.run_history(r.id) h
		         WHERE h.event ? 'workflowTaskStarted' ORDER BY h.sequence LIMIT 1)
		       >= r.created_at + interval '15 s'}), '50',
		"$what: no delayed run started before its start_at");
	is($node->safe_psql('postgres', q{SELECT count(*) FROM dex.run_timer}), '0',
		"$what: no timer is left once the runs ended");
}

$primary->stop('immediate');
$primary->start;
check_after($primary, 'after a crash');
$replica->promote;
$replica->poll_query_until('postgres', q{SELECT NOT pg_is_in_recovery()});
check_after($replica, 'after a failover');
resume_and_finish($primary, 'after a crash');
resume_and_finish($replica, 'after a failover');

$replica->stop;
$primary->stop;
done_testing();
