# The task-table rebuild does not interleave with clients: when the
# scheduler starts and finds the task tables unmarked (after a crash, or in a
# database where the extension was just created) it rebuilds them while
# holding back every API call that writes tasks, and it first waits for the
# API transactions in flight.  Without that, a rebuild running beside busy
# workers deadlocked with them and could queue a completed activity again.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = dex_cluster('dex');

$node->safe_psql('postgres', q{
	CREATE EXTENSION dex;
	SELECT dex.create_queue('wf', 'workflow');
	SELECT dex.create_queue('act', 'activity');
});

my $scheduler_pid = "SELECT pid FROM pg_stat_activity WHERE backend_type = 'dex scheduler'";
ok($node->poll_query_until('postgres', "SELECT count(*) = 1 FROM ($scheduler_pid) s"),
	'the scheduler is running');
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM dex.lease WHERE name = 'tasks_valid'"),
	'the scheduler marked the task tables valid');

# a run whose workflow task is done and whose activity is queued
my $run = $node->safe_psql('postgres', q{SELECT dex.create_run('flow', 'wf', '1')});
$node->safe_psql('postgres', q{
	SELECT dex.complete_task(run_id, task_id, lock_version,
	       '[{"id": 1, "scheduleActivity": {"name": "step", "queue": "act"}}]')
	  FROM dex.poll_tasks('wf', 'tap-worker');
});

# an activity worker completes the activity in a transaction it keeps open
my $worker = $node->background_psql('postgres');
$worker->query_safe(q{
	BEGIN;
	SELECT dex.complete_task(run_id, task_id, lock_version, '"done"')
	  FROM dex.poll_tasks('act', 'tap-worker');
});

# then forget that the tasks are valid, as a crash would (in this order: a
# scheduler pass between the two would rebuild before the worker's
# transaction began, and the restarted scheduler would find nothing to do)
$node->safe_psql('postgres', q{DELETE FROM dex.lease WHERE name = 'tasks_valid'});

# the restarted scheduler must wait for it before rebuilding
my $old_pid = $node->safe_psql('postgres', $scheduler_pid);
$node->safe_psql('postgres', "SELECT pg_terminate_backend($old_pid)");
ok($node->poll_query_until('postgres', qq{
	SELECT count(*) = 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
	 WHERE a.backend_type = 'dex scheduler' AND a.pid <> $old_pid
	   AND l.locktype = 'object' AND l.classid = 'dex.lease'::regclass AND l.objid = 0
	   AND l.objsubid = 1 AND l.mode = 'ExclusiveLock' AND NOT l.granted}),
	'the rebuild waits for the API transaction in flight');

$worker->query_safe('COMMIT');
$worker->quit;

ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM dex.lease WHERE name = 'tasks_valid'"),
	'the rebuild ran once the worker committed');

# the completed activity was not queued again; the workflow task that
# handles its result was
is($node->safe_psql('postgres', "SELECT count(*) FROM dex.activity_task WHERE run_id = '$run'"),
	'0', 'the completed activity is not queued again');
is($node->safe_psql('postgres', "SELECT count(*) FROM dex.workflow_task WHERE run_id = '$run'"),
	'1', 'the workflow task for the result is queued');

# and the run finishes
$node->safe_psql('postgres', q{
	SELECT dex.complete_task(run_id, task_id, lock_version,
	       '[{"id": 2, "completeRun": {"result": {"json": "\"ok\""}}}]')
	  FROM dex.poll_tasks('wf', 'tap-worker');
});
is($node->safe_psql('postgres', "SELECT status FROM dex.runs WHERE id = '$run'"),
	'COMPLETED', 'the run completes');

$node->stop;
done_testing();
