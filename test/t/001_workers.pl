# The background workers: the launcher starts the scheduler for dex.database,
# a client completes a workflow with one activity and a durable timer using
# nothing but SQL, and an immediate shutdown (a crash) loses nothing: the
# UNLOGGED workflow-task partitions are rebuilt and the runs finish.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('dex');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'dex'
dex.database = 'postgres'
restart_after_crash = on
});
$node->start;

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

# A crash: runs waiting on their first workflow task, on a timer and on a
# retry survive an immediate shutdown.
$node->safe_psql('postgres', q{
	SELECT dex.create_run('crash-fresh', 'wf') FROM generate_series(1, 5);
});
my $sleeper = $node->safe_psql('postgres', q{SELECT dex.create_run('crash-timer', 'wf')});
$node->safe_psql('postgres', qq{
	SELECT dex.complete_task(run_id, task_id, lock_version, '[{"id": 1, "startTimer": {"delay": "2s"}}]')
	  FROM dex.poll_tasks('wf', 'tap-worker', 100) WHERE run_id = '$sleeper';
});
$node->stop('immediate');
$node->start;

is($node->safe_psql('postgres', q{SELECT count(*) FROM dex.workflow_task}), '5',
	'workflow tasks of the new runs were rebuilt after the crash');
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM dex.workflow_task WHERE run_id = '$sleeper'"),
	'the timer set before the crash fires after it');

# drain: complete every run that has a task
for my $i (1 .. 10)
{
	$node->safe_psql('postgres', q{
		SELECT dex.complete_task(run_id, task_id, lock_version, '[{"completeRun": {}}]')
		  FROM dex.poll_tasks('wf', 'tap-worker', 100);
	});
}
is($node->safe_psql('postgres', q{SELECT string_agg(DISTINCT status, ',') FROM dex.workflow_run}),
	'COMPLETED', 'every run finished after the crash');

# kill -9 of the scheduler: the postmaster resets the server, the launcher starts a new scheduler
my $pid = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'dex scheduler'");
kill 'KILL', $pid;
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dex scheduler' AND pid <> $pid"),
	'a new scheduler runs after kill -9');

$node->stop;
done_testing();
