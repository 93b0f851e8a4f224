# Many queues, with PostgreSQL's default settings (max_locks_per_transaction = 64,
# max_connections = 100): a database with 1,000 queues (500 of each kind) and 40 sessions
# polling and completing one task per call across them.
#   - a workflow's calls lock the same relations with 1,000 queues as with 2 (up to 1.7 each
#     statement locked every queue's task partition);
#   - no call fails: none runs the shared lock table out of space (53200 "out of shared
#     memory" up to 1.7), none deadlocks;
#   - every run completes.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = dex_cluster('many_queues');
is($node->safe_psql('postgres', q{SELECT current_setting('max_locks_per_transaction') || ' '
	|| current_setting('max_connections')}), '64 100', 'the lock table and connections have their defaults');
$node->safe_psql('postgres', q{CREATE EXTENSION dex});

# The relation locks a session holds at the end of a transaction that polls and completes a
# one-activity workflow's three tasks on queues "<prefix>-wf" and "<prefix>-act" (the
# statements planned once per session, as every dex statement is, and run twice first).
my $one_workflow = q{
	SELECT dex.create_queue('%1$s-wf', 'workflow'), dex.create_queue('%1$s-act', 'activity')
	 WHERE NOT EXISTS (SELECT FROM dex.queue WHERE name = '%1$s-wf');
	CREATE TEMP TABLE IF NOT EXISTS locks (n bigint);
	CREATE OR REPLACE FUNCTION pg_temp.one_workflow(measure boolean) RETURNS void LANGUAGE plpgsql AS $$
	BEGIN
	  PERFORM dex.create_run('lk', '%1$s-wf');
	  PERFORM dex.complete_task(run_id, 0, lock_version,
	            '[{"id": 1, "scheduleActivity": {"name": "a", "queue": "%1$s-act"}}]')
	     FROM dex.poll_tasks('%1$s-wf', 'w', 1);
	  PERFORM dex.complete_task(run_id, task_id, lock_version, '1') FROM dex.poll_tasks('%1$s-act', 'w', 1);
	  PERFORM dex.complete_task(run_id, 0, lock_version, '[{"completeRun": {}}]')
	     FROM dex.poll_tasks('%1$s-wf', 'w', 1);
	  IF measure THEN
	    INSERT INTO locks SELECT count(*) FROM pg_locks
	     WHERE pid = pg_backend_pid() AND locktype = 'relation'
	       AND relation IN (SELECT oid FROM pg_class WHERE relnamespace = 'dex'::regnamespace);
	  END IF;
	END $$;
	SELECT pg_temp.one_workflow(false);
	SELECT pg_temp.one_workflow(false);
	SELECT pg_temp.one_workflow(true);
	SELECT n FROM locks;
};
sub locks_of_a_workflow
{
	my ($prefix) = @_;
	# the last line: what the statements before it printed comes first
	return (split /\n/, $node->safe_psql('postgres', sprintf($one_workflow, $prefix)))[-1];
}
my $locks_2 = locks_of_a_workflow('lk2');
cmp_ok($locks_2, '>', 5, "a workflow's calls lock dex's relations ($locks_2 with 2 queues)");

# 1,000 queues more, 25 of each kind per transaction
for (my $i = 1; $i <= 500; $i += 25)
{
	my $last = $i + 24;
	$node->safe_psql('postgres', qq{
		SELECT dex.create_queue('mq-wf-' || q, 'workflow'), dex.create_queue('mq-act-' || q, 'activity')
		  FROM generate_series($i, $last) q});
}
is($node->safe_psql('postgres', q{SELECT count(*) FROM dex.queue WHERE name LIKE 'mq-%'}), '1000',
	'1,000 queues are made');
is(locks_of_a_workflow('lk1002'), $locks_2,
	"with 1,004 queues a workflow's calls lock as many relations ($locks_2)");

# four runs on each workflow queue; each schedules one activity on its activity queue
$node->safe_psql('postgres', q{
	SELECT count(dex.create_run('mq', 'mq-wf-' || q, to_jsonb(q))) FROM generate_series(1, 500) q, generate_series(1, 4)});

# 40 sessions, each taking one task per call from a workflow queue and then from an activity
# queue picked at random among the 500 pairs, for 15 s
my $worker = q{
\set q random(1, 500)
SELECT count(dex.complete_task(t.run_id, 0, t.lock_version,
         CASE WHEN t.task::text LIKE '%activityTaskCompleted%' THEN '[{"completeRun": {}}]'::jsonb
              ELSE jsonb_build_array(jsonb_build_object('id', 1, 'scheduleActivity',
                     jsonb_build_object('name', 'step', 'queue', 'mq-act-' || :q))) END))
  FROM dex.poll_tasks('mq-wf-' || :q, 'w' || :client_id, 1) t;
SELECT count(dex.complete_task(t.run_id, t.task_id, t.lock_version, '1'))
  FROM dex.poll_tasks('mq-act-' || :q, 'w' || :client_id, 1) t;
};
my $log_offset = -s $node->logfile;
$node->pgbench('--no-vacuum --client=40 --jobs=4 --time=15', 0,
	[ qr/number of failed transactions: 0/, qr/number of transactions actually processed: [1-9]/ ],
	[ qr/^$/ ], '40 sessions poll and complete across the queues for 15 s, no call fails',
	{ 'worker' => $worker });
my $log = slurp_file($node->logfile, $log_offset);
unlike($log, qr/out of shared memory|deadlock detected|max_locks_per_transaction/,
	'the server logged no lock table exhaustion and no deadlock');
my $done_concurrently = $node->safe_psql('postgres',
	q{SELECT count(*) FROM dex.workflow_run WHERE workflow_name = 'mq' AND status = 'COMPLETED'});
cmp_ok($done_concurrently, '>', 0, "runs completed while the 40 sessions worked ($done_concurrently)");

# then one session takes what is left, queue by queue
for my $round (1 .. 3)
{
	$node->safe_psql('postgres', q{
		SELECT count(dex.complete_task(t.run_id, 0, t.lock_version,
		         CASE WHEN t.task::text LIKE '%activityTaskCompleted%' THEN '[{"completeRun": {}}]'::jsonb
		              ELSE jsonb_build_array(jsonb_build_object('id', 1, 'scheduleActivity',
		                     jsonb_build_object('name', 'step', 'queue', 'mq-act-' || q))) END))
		  FROM generate_series(1, 500) q, LATERAL dex.poll_tasks('mq-wf-' || q, 'drain', 10) t;
		SELECT count(dex.complete_task(t.run_id, t.task_id, t.lock_version, '1'))
		  FROM generate_series(1, 500) q, LATERAL dex.poll_tasks('mq-act-' || q, 'drain', 10) t;
	});
}
is($node->safe_psql('postgres', q{SELECT count(*) FILTER (WHERE status = 'COMPLETED') || ' of ' || count(*)
	FROM dex.workflow_run WHERE workflow_name = 'mq'}), '2000 of 2000', 'every run completed');

$node->stop;
done_testing();
