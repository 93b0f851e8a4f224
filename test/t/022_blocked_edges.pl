# BLOCKED runs at the edges: a run parked after its workflow task failed
# dex.max_workflow_task_failures times keeps what it has and what arrives
# across a crash.  Parent P has an activity pending (leased when the server
# crashes), a child, and an event; its workflow task fails and P is BLOCKED;
# the child completes while P is parked; the server crashes
# (immediate stop).  After the rebuild P's activity is pollable again and
# completes, and dex.resume_run shows P everything that arrived: the event, the
# child's result, the activity's result, and runResumed with its reason and
# caller.  Then P completes.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = dex_cluster('blocked');
$node->safe_psql('postgres', q{
	CREATE EXTENSION dex;
	SELECT dex.create_queue('blk-wf', 'workflow'), dex.create_queue('blk-kids', 'workflow'),
	       dex.create_queue('blk-act', 'activity');
});
my $p = $node->safe_psql('postgres', q{SELECT dex.create_run('parent', 'blk-wf')});
$node->safe_psql('postgres', qq{
	SELECT dex.complete_task(run_id, 0, lock_version,
	  '[{"id": 1, "scheduleActivity": {"name": "ship", "queue": "blk-act"}},
	    {"id": 2, "startChildRun": {"workflowName": "kid", "queue": "blk-kids"}}]')
	  FROM dex.poll_tasks('blk-wf', 'w', 10) WHERE run_id = '$p';
});
my $kid = $node->safe_psql('postgres', qq{SELECT id FROM dex.workflow_run WHERE parent_id = '$p'});
ok($kid, 'the parent started a child');
# the activity is leased when the server crashes
my $leased = $node->safe_psql('postgres', q{SELECT count(*) FROM dex.poll_tasks('blk-act', 'w1', 10)});
is($leased, '1', 'the activity is leased');

# an event arrives; the parent's next workflow task fails once, which parks it
$node->safe_psql('postgres', qq{SELECT dex.send_external_event('$p', 'note', '"hello"')});
$node->safe_psql('postgres', qq{
	SET dex.max_workflow_task_failures = 1;
	SELECT dex.fail_task(run_id, 0, lock_version, '{"message": "bad deploy"}')
	  FROM dex.poll_tasks('blk-wf', 'w', 10) WHERE run_id = '$p';
});
is($node->safe_psql('postgres', qq{SELECT status FROM dex.workflow_run WHERE id = '$p'}),
	'BLOCKED', 'the parent is BLOCKED');

# the child completes while its parent is parked
$node->safe_psql('postgres', qq{
	SELECT dex.complete_task(run_id, 0, lock_version, '[{"completeRun": {"result": {"json": "42"}}}]')
	  FROM dex.poll_tasks('blk-kids', 'w', 10) WHERE run_id = '$kid';
});
is($node->safe_psql('postgres', qq{SELECT status FROM dex.workflow_run WHERE id = '$kid'}),
	'COMPLETED', 'the child completed');

# crash
$node->stop('immediate');
$node->start;
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dex.lease WHERE name = 'tasks_valid'}),
	'the scheduler rebuilt the task tables after the crash');
is($node->safe_psql('postgres', qq{SELECT status FROM dex.workflow_run WHERE id = '$p'}),
	'BLOCKED', 'the parent is still BLOCKED');
is($node->safe_psql('postgres', qq{SELECT count(*) FROM dex.workflow_task WHERE run_id = '$p'}), '0',
	'with no workflow task');

# its activity runs on: the lease the crash interrupted is void, the task is pollable again
is($node->safe_psql('postgres', qq{
	SELECT count(dex.complete_task(run_id, task_id, lock_version, '"shipped"'))
	  FROM dex.poll_tasks('blk-act', 'w2', 10) WHERE run_id = '$p'}),
	'1', 'the blocked run\'s activity is rebuilt after the crash and completes');

# the fix is deployed; resume shows everything that arrived, and who resumed it and why
$node->safe_psql('postgres', qq{SELECT dex.resume_run('$p', 'fixed in 1.2.3')});
my ($version, $shown) = split /\|/, $node->safe_psql('postgres', qq{
	SELECT t.lock_version || '|' || (SELECT string_agg(k, ',' ORDER BY k)
	                                   FROM jsonb_array_elements(t.task->'newEvents') e,
	                                        jsonb_object_keys(e - 'id' - 'timestamp') k)
	  FROM dex.poll_tasks('blk-wf', 'w', 10) t WHERE t.run_id = '$p'});
like($shown, qr/activityTaskCompleted/, 'the resumed run is shown the activity\'s result');
like($shown, qr/childRunCompleted/, 'and the result of the child that ended while it was parked');
like($shown, qr/externalEventReceived/, 'and the event');
like($shown, qr/runResumed/, 'and runResumed');
$node->safe_psql('postgres', qq{SELECT dex.complete_task('$p', 0, $version, '[{"completeRun": {}}]')});
is($node->safe_psql('postgres', qq{SELECT status FROM dex.workflow_run WHERE id = '$p'}),
	'COMPLETED', 'the parent completes');
is($node->safe_psql('postgres', qq{
	SELECT (event->'runResumed'->>'reason') || ' by ' || (event->'runResumed'->>'by')
	  FROM dex.run_history('$p') WHERE event ? 'runResumed'}),
	'fixed in 1.2.3 by ' . $node->safe_psql('postgres', 'SELECT session_user'),
	'its history records the resume with its reason and caller');

$node->stop;
done_testing();
