# The maintenance worker deletes runs that ended more than
# dex.retention_period ago, with everything they own (history, inbox,
# external events, retry records, instance ids), and nothing else: runs
# still active, and runs that ended recently, stay.  It runs as its own
# background worker, comes back after a kill -9, and holds the
# "maintenance" lease while it works.  It also removes the queue grants of
# dropped roles.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = dex_cluster('dex', conf => q{
dex.retention_period = '1h'
dex.maintenance_naptime = '200ms'
dex.retention_batch_size = 7
restart_after_crash = on
});
$node->safe_psql('postgres', q{
	CREATE EXTENSION dex;
	SELECT dex.create_queue('wf', 'workflow');
	SELECT dex.create_queue('act', 'activity');
});

ok($node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dex maintenance'}),
	'the maintenance worker runs');

# 30 runs that end: completed (with an external event and an instance id),
# failed, cancelled; 5 that stay RUNNING with an activity pending; 5 CREATED
$node->safe_psql('postgres', q{
	SELECT dex.create_run('done', 'wf', instance_id => 'inst-' || i) FROM generate_series(1, 10) i;
	SELECT dex.create_run('fail', 'wf') FROM generate_series(1, 10);
	SELECT dex.create_run('cancel', 'wf') FROM generate_series(1, 10);
	SELECT dex.create_run('busy', 'wf') FROM generate_series(1, 5);
});
$node->safe_psql('postgres', q{
	SELECT dex.send_external_event(id, 'hello') FROM dex.workflow_run WHERE workflow_name = 'done';
	SELECT dex.cancel_run(id, 'stop') FROM dex.workflow_run WHERE workflow_name = 'cancel';
	SELECT dex.complete_task(t.run_id, 0, t.lock_version,
	         CASE r.workflow_name
	           WHEN 'done' THEN '[{"completeRun": {}}]'::jsonb
	           WHEN 'fail' THEN '[{"failRun": {"failure": {"message": "no"}}}]'::jsonb
	           ELSE '[{"id": 1, "scheduleActivity": {"name": "a", "queue": "act"}}]'::jsonb END)
	  FROM dex.poll_tasks('wf', 'w', 100) t JOIN dex.workflow_run r ON r.id = t.run_id;
	SELECT dex.create_run('new', 'wf') FROM generate_series(1, 5);
});
is($node->safe_psql('postgres',
	q{SELECT string_agg(status || ':' || n, ' ' ORDER BY status)
	    FROM (SELECT status, count(*) n FROM dex.workflow_run GROUP BY status) s}),
	'CANCELLED:10 COMPLETED:10 CREATED:5 FAILED:10 RUNNING:5', 'the runs before retention');

sleep 1;
is($node->safe_psql('postgres', q{SELECT count(*) FROM dex.workflow_run}), '40',
	'runs that ended less than the retention period ago stay');

# a short retention period: the ended runs go, in batches of 7
$node->append_conf('postgresql.conf', "dex.retention_period = '1s'\n");
$node->reload;
ok($node->poll_query_until('postgres', q{SELECT count(*) = 10 FROM dex.workflow_run}),
	'runs that ended go after the retention period');
is($node->safe_psql('postgres',
	q{SELECT string_agg(status || ':' || n, ' ' ORDER BY status)
	    FROM (SELECT status, count(*) n FROM dex.workflow_run GROUP BY status) s}),
	'CREATED:5 RUNNING:5', 'active runs stay');
is($node->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM dex.workflow_history h
	         WHERE NOT EXISTS (SELECT 1 FROM dex.workflow_run r WHERE r.id = h.run_id))
	     + (SELECT count(*) FROM dex.workflow_inbox i
	         WHERE NOT EXISTS (SELECT 1 FROM dex.workflow_run r WHERE r.id = i.run_id))
	     + (SELECT count(*) FROM dex.external_event e
	         WHERE NOT EXISTS (SELECT 1 FROM dex.workflow_run r WHERE r.id = e.run_id))
	     + (SELECT count(*) FROM dex.run_instance)}),
	'0', 'history, inbox, events and instance ids went with their runs');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM dex.workflow_history h JOIN dex.workflow_run r ON r.id = h.run_id}),
	'5', 'the history of active runs stays');
is($node->safe_psql('postgres', q{SELECT count(*) FROM dex.activity_task}), '5',
	'their activity tasks stay');
like($node->safe_psql('postgres', q{SELECT holder FROM dex.lease WHERE name = 'maintenance'}),
	qr/^dex maintenance pid \d+$/, 'the worker holds the maintenance lease');

# the worker dies: the launcher starts it again (after the crash restart)
my $pid = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'dex maintenance'});
kill 'KILL', $pid;
ok($node->poll_query_until('postgres',
	qq{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dex maintenance' AND pid <> $pid}),
	'the maintenance worker comes back after kill -9');

# and goes on: the active runs end and go too
$node->safe_psql('postgres', q{
	SELECT dex.cancel_run(id) FROM dex.workflow_run;
	SELECT dex.complete_task(run_id, 0, lock_version, '[{"cancelRun": {}}]') FROM dex.poll_tasks('wf', 'w', 100);
});
ok($node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM dex.workflow_run}),
	'runs that end later go too');
is($node->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM dex.workflow_history) + (SELECT count(*) FROM dex.activity_task)
	     + (SELECT count(*) FROM dex.workflow_task) + (SELECT count(*) FROM dex.workflow_inbox)}),
	'0', 'nothing of them is left');

# the grants of a dropped role go too: a role created later with its oid
# must not inherit them
$node->safe_psql('postgres', q{
	CREATE ROLE tenant_gone;
	SELECT dex.grant_queue('wf', 'tenant_gone');
	DROP ROLE tenant_gone;
});
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM dex.queue_grant g
	 WHERE NOT EXISTS (SELECT FROM pg_roles r WHERE r.oid = g.grantee)}),
	'the maintenance worker removes the grants of dropped roles');
is($node->safe_psql('postgres', q{SELECT string_agg(role::text, ' ' ORDER BY role::text)
	FROM dex.queue_privileges WHERE queue = 'wf'}), 'dex_client dex_worker',
	'the other grants stay');

$node->stop;
done_testing();
