# The background workers: the launcher starts the scheduler for dex.database,
# a client completes a workflow with one activity and a durable timer using
# nothing but SQL, and an immediate shutdown (a crash) loses nothing: the
# UNLOGGED workflow task table is rebuilt and the runs finish.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = dex_cluster('dex', conf => "restart_after_crash = on\n");

# the launcher and the scheduler run, recognisable in pg_stat_activity
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type IN ('dex launcher', 'dex scheduler')"),
	'launcher and scheduler are running');

$node->safe_psql('postgres', q{
	CREATE EXTENSION dex;
	SELECT dex.create_queue('wf', 'workflow');
	SELECT dex.create_queue('act', 'activity');
});

# one step of a worker: poll a queue and answer with SQL; returns the run id handled
sub workflow_step
{
	my ($commands) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT dex.complete_task(run_id, task_id, lock_version, '$commands'), run_id
		  FROM dex.poll_tasks('wf', 'tap-worker');
	});
}

my $run = $node->safe_psql('postgres', q{SELECT dex.create_run('tap-flow', 'wf', '1')});
like($run, qr/^[0-9a-f-]{36}$/, 'run created');

# workflow task 1: schedule the activity and a 1 s timer
isnt(workflow_step('[{"id": 1, "scheduleActivity": {"name": "inc", "queue": "act"}}, {"id": 2, "startTimer": {"name": "t", "delay": "1s"}}]'),
	'', 'first workflow task completed');

# the activity worker
is($node->safe_psql('postgres', q{
	SELECT count(dex.complete_task(run_id, task_id, lock_version, ((task->'argument'->>'json')::int + 1)::text::jsonb))
	  FROM dex.poll_tasks('act', 'tap-worker');
}), '1', 'activity task completed');

# workflow task 2 sees the activity result; the timer has not fired yet
isnt(workflow_step('[]'), '', 'second workflow task completed');

# the scheduler fires the timer: a workflow task appears without any client statement
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM dex.workflow_task WHERE run_id = '$run' AND locked_by IS NULL"),
	'the scheduler fired the durable timer');
isnt(workflow_step('[{"completeRun": {"result": {"json": "\"done\""}}}]'), '', 'run completed by the third task');

is($node->safe_psql('postgres', "SELECT status || ' ' || result FROM dex.get_run('$run')"),
	'COMPLETED "done"', 'get_run shows COMPLETED with the result');
is($node->safe_psql('postgres', qq{
	SELECT string_agg((SELECT k FROM jsonb_object_keys(event - 'id' - 'timestamp') k), ',' ORDER BY sequence)
	  FROM dex.run_history('$run')}),
	'workflowTaskStarted,runCreated,runStarted,workflowTaskCompleted,activityTaskCreated,timerCreated,'
	. 'workflowTaskStarted,activityTaskCompleted,workflowTaskCompleted,'
	. 'workflowTaskStarted,timerElapsed,workflowTaskCompleted,runCompleted',
	'history has every event in order');

# A crash: runs waiting on their first workflow task, on a timer, and on
# activities in every state (queued, leased, waiting for a retry, done but not
# yet seen by the workflow) survive an immediate shutdown, although the task
# tables are UNLOGGED.
my %run;
for my $what (qw(timer queued leased retry done))
{
	$run{$what} = $node->safe_psql('postgres', "SELECT dex.create_run('crash-$what', 'wf')");
}
my %commands = (
	timer => '[{"id": 1, "startTimer": {"delay": "4s"}}]',
	queued => '[{"id": 1, "scheduleActivity": {"name": "queued", "queue": "act"}}]',
	leased => '[{"id": 1, "scheduleActivity": {"name": "leased", "queue": "act"}}]',
	retry => '[{"id": 1, "scheduleActivity": {"name": "retry", "queue": "act", "retryPolicy": {"initialDelay": "1s", "maxAttempts": 3}}}]',
	done => '[{"id": 1, "scheduleActivity": {"name": "done", "queue": "act"}}]');
# one poll leases every workflow task; each run gets its own commands
my $mapping = join(', ', map { "('$run{$_}'::uuid, '$commands{$_}'::jsonb)" } sort keys %commands);
$node->safe_psql('postgres', qq{
	SELECT count(dex.complete_task(p.run_id, p.task_id, p.lock_version, m.commands))
	  FROM dex.poll_tasks('wf', 'tap-worker', 100) p
	  JOIN (VALUES $mapping) AS m(run_id, commands) ON m.run_id = p.run_id;
});
# lease all three activities, then: fail "retry" once, complete "done", keep "leased"
$node->safe_psql('postgres', qq{
	CREATE TABLE leases AS SELECT * FROM dex.poll_tasks('act', 'tap-worker', 10);
	SELECT dex.fail_task(run_id, task_id, lock_version, '{"message": "flaky"}')
	  FROM leases WHERE run_id = '$run{retry}';
	SELECT dex.complete_task(run_id, task_id, lock_version, '"ok"')
	  FROM leases WHERE run_id = '$run{done}';
	-- put "queued" back: it was leased by the poll above
	SELECT dex.fail_task(run_id, task_id, lock_version, '{"message": "again"}')
	  FROM leases WHERE run_id = '$run{queued}';
});
is($node->safe_psql('postgres', q{SELECT count(*) FROM dex.activity_task}), '3',
	'three activities are pending before the crash');
$node->safe_psql('postgres', q{
	SELECT dex.create_run('crash-fresh', 'wf') FROM generate_series(1, 5);
});

$node->stop('immediate');
$node->start;

ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM dex.lease WHERE name = 'tasks_valid'"),
	'the scheduler rebuilt the task tables after the crash');
is($node->safe_psql('postgres', q{SELECT count(*) FROM dex.workflow_task}), '6',
	'workflow tasks were rebuilt: five new runs and the run whose activity result is unseen');
is($node->safe_psql('postgres', qq{
	SELECT string_agg(name || ':' || attempt || ':' || (locked_by IS NULL), ' ' ORDER BY name)
	  FROM dex.activity_task}),
	'leased:1:true queued:2:true retry:2:true',
	'activity tasks were rebuilt with their attempts; the interrupted lease is void');
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM dex.workflow_task WHERE run_id = '$run{timer}'"),
	'the timer set before the crash fires after it');

# drain: run every activity and complete every run that has a task
for my $i (1 .. 20)
{
	$node->safe_psql('postgres', q{
		SELECT dex.complete_task(run_id, task_id, lock_version, '"ok"')
		  FROM dex.poll_tasks('act', 'tap-worker', 100);
		SELECT dex.complete_task(run_id, task_id, lock_version, '[{"completeRun": {}}]')
		  FROM dex.poll_tasks('wf', 'tap-worker', 100);
	});
	last if $node->safe_psql('postgres',
		q{SELECT count(*) FROM dex.workflow_run WHERE status <> 'COMPLETED'}) eq '0';
	sleep 1;
}
is($node->safe_psql('postgres', q{SELECT string_agg(DISTINCT status, ',') FROM dex.workflow_run}),
	'COMPLETED', 'every run finished after the crash');
is($node->safe_psql('postgres', q{SELECT count(*) FROM dex.activity_retry}), '0',
	'no retry record is left behind');

# kill -9 of the scheduler: the postmaster resets the server, the launcher starts a new scheduler
my $pid = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'dex scheduler'");
kill 'KILL', $pid;
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dex scheduler' AND pid <> $pid"),
	'a new scheduler runs after kill -9');

$node->stop;
done_testing();
