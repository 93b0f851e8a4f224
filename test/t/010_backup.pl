# Backups: a database with runs in flight is copied two ways and every run
# goes on in the copy.
#   logical:  pg_dumpall --globals-only (the roles) and pg_dump -Fc, restored
#             with psql and pg_restore into a new cluster (serially, in
#             parallel into a second database, and as SQL run by a psql
#             session that stays connected into a third): no restore error,
#             the same rows, no task in the dump, the task
#             tables rebuilt once the restoring session has ended (not
#             before), queue grants by role name;
#   physical: pg_basebackup (with its WAL) of the running server, started as
#             a new cluster: the UNLOGGED task tables come back empty, as
#             after a crash, and are rebuilt.
# In each copy, plain SQL then drives every run to completion: a run waiting
# for its first workflow task, activities pending, leased (that lease is void)
# and retrying, a timer, an event wait, a suspended run, a run waiting for
# its concurrency key, a tenant's run on a queue granted to a login role.
# Lock versions handed out in a copy are greater than any handed out before.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

# every database with dex is served: three restored ones take six workers
# (the status sweep indexes runs ten seconds old, its least, not a minute)
my %dex = (database => '*', conf => "max_worker_processes = 16\ndex.status_sweep_age = '10s'\n");

# allows_streaming: pg_basebackup needs a replication connection
my $src = dex_cluster('source', %dex, init => { allows_streaming => 1 });
$src->safe_psql('postgres', 'CREATE DATABASE app');

$src->safe_psql('app', q{
	CREATE EXTENSION dex;
	SELECT dex.create_queue('wf', 'workflow');
	SELECT dex.create_queue('act', 'activity');
	-- a tenant's queue, for its login role only
	SELECT dex.create_queue('tenant-wf', 'workflow');
	CREATE ROLE tenant LOGIN IN ROLE dex_client, dex_worker;
	SELECT dex.revoke_queue('tenant-wf', r) FROM unnest('{dex_client,dex_worker}'::regrole[]) r;
	SELECT dex.grant_queue('tenant-wf', 'tenant');
	SET ROLE tenant;
	SELECT dex.create_run('tenant', 'tenant-wf');
	RESET ROLE;
});

# Runs in flight.  Each run's first workflow task gets its own commands;
# "waiter" waits for the concurrency key "event" holds, "first" is created
# after the poll and waits for its first task.
my %commands = (
	done => '[{"id": 1, "scheduleActivity": {"name": "done", "queue": "act", "priority": 50}}]',
	leased => '[{"id": 1, "scheduleActivity": {"name": "leased", "queue": "act", "priority": 50}}]',
	retry => '[{"id": 1, "scheduleActivity": {"name": "retry", "queue": "act", "priority": 50, '
	  . '"retryPolicy": {"initialDelay": "1s", "maxAttempts": 3}}}]',
	pending => '[{"id": 1, "scheduleActivity": {"name": "pending", "queue": "act"}}]',
	timer => '[{"id": 1, "startTimer": {"name": "t", "delay": "8s"}}]',
	event => '[{"id": 1, "waitExternalEvent": {"eventId": "go", "timeout": "3600s"}}]',
	suspended => '[]');
$src->safe_psql('app', join('', map {
	my $key = $_ eq 'event' ? q{, instance_id => 'order-7', concurrency_key => 'k'} : '';
	"SELECT dex.create_run('$_', 'wf'$key);\n"
} sort keys %commands) . q{SELECT dex.create_run('waiter', 'wf', concurrency_key => 'k');});
my $mapping = join(', ', map { "('$_', '$commands{$_}'::jsonb)" } sort keys %commands);
is($src->safe_psql('app', qq{
	SELECT count(dex.complete_task(p.run_id, p.task_id, p.lock_version, m.commands))
	  FROM dex.poll_tasks('wf', 'src-worker', 100) p
	  JOIN dex.workflow_run r ON r.id = p.run_id
	  JOIN (VALUES $mapping) AS m(name, commands) ON m.name = r.workflow_name;
}), scalar(keys %commands), 'the first workflow task of each run is completed');
# the three activities of priority 50 are leased: "done" completes, "retry"
# fails once, "leased" keeps its lease; "pending" stays queued
$src->safe_psql('app', q{
	SELECT dex.suspend_run(id) FROM dex.workflow_run WHERE workflow_name = 'suspended';
	CREATE TABLE leases AS SELECT p.*, r.workflow_name FROM dex.poll_tasks('act', 'src-worker', 3) p
	  JOIN dex.workflow_run r ON r.id = p.run_id;
	SELECT dex.complete_task(run_id, task_id, lock_version, '"done"') FROM leases WHERE workflow_name = 'done';
	SELECT dex.fail_task(run_id, task_id, lock_version, '{"message": "flaky"}')
	  FROM leases WHERE workflow_name = 'retry';
	SELECT dex.complete_task(run_id, 0, lock_version, '[{"completeRun": {"result": {"json": "\"finished\""}}}]')
	  FROM dex.poll_tasks('wf', 'src-worker', 10);
	SELECT dex.create_run('first', 'wf');
});
is($src->safe_psql('app', q{
	SELECT string_agg(workflow_name || ':' || status, ' ' ORDER BY workflow_name) FROM dex.workflow_run}),
	'done:COMPLETED event:RUNNING first:CREATED leased:RUNNING pending:RUNNING retry:RUNNING '
	. 'suspended:SUSPENDED tenant:CREATED timer:RUNNING waiter:CREATED',
	'runs are in flight');
is($src->safe_psql('app', q{
	SELECT string_agg(r.workflow_name || ':' || a.attempt || ':' || a.status || ':' || (a.locked_by IS NOT NULL),
	                  ' ' ORDER BY r.workflow_name)
	  FROM dex.activity_task a JOIN dex.workflow_run r ON r.id = a.run_id}),
	'leased:1:QUEUED:true pending:1:QUEUED:false retry:2:CREATED:false',
	'activities are leased, queued and waiting to retry');
is($src->safe_psql('app', q{
	SELECT count(*) FROM dex.workflow_inbox i JOIN dex.workflow_run r ON r.id = i.run_id
	 WHERE i.delayed AND r.workflow_name = 'timer'}), '1',
	'the timer is pending');

# What must come back: the rows of every logged table, the histories, the
# grants by role name.  The scheduler and the maintenance worker do not change
# any of it while the runs wait.
my $rows = q{
SELECT string_agg(t || '=' || n, ' ' ORDER BY t) FROM (
	SELECT 'activity_retry' t, count(*) n FROM dex.activity_retry UNION ALL
	SELECT 'concurrency_slot', count(*) FROM dex.concurrency_slot UNION ALL
	SELECT 'concurrency_wait', count(*) FROM dex.concurrency_wait UNION ALL
	SELECT 'external_event', count(*) FROM dex.external_event UNION ALL
	SELECT 'queue', count(*) FROM dex.queue UNION ALL
	SELECT 'queue_grant', count(*) FROM dex.queue_grant UNION ALL
	SELECT 'run_instance', count(*) FROM dex.run_instance UNION ALL
	SELECT 'workflow_history', count(*) FROM dex.workflow_history UNION ALL
	SELECT 'workflow_inbox', count(*) FROM dex.workflow_inbox UNION ALL
	SELECT 'workflow_run', count(*) FROM dex.workflow_run) s};
my $contents = q{
SELECT md5(string_agg(x, E'\n' ORDER BY x)) FROM (
	SELECT r::text AS x FROM dex.workflow_run r UNION ALL
	SELECT h::text FROM dex.workflow_history h UNION ALL
	SELECT q::text FROM dex.queue q UNION ALL
	SELECT i::text FROM dex.run_instance i UNION ALL
	SELECT a::text FROM dex.activity_retry a UNION ALL
	SELECT (s.queue_id, s.key, s.run_id)::text FROM dex.concurrency_slot s UNION ALL
	SELECT (w.queue_id, w.key, w.run_id)::text FROM dex.concurrency_wait w UNION ALL
	SELECT (i.run_id, i.id, i.visible_from, i.event)::text FROM dex.workflow_inbox i) s};
my $grants = q{SELECT string_agg(queue || ':' || role, ' ' ORDER BY queue, role::text) FROM dex.queue_privileges};
my $src_rows = $src->safe_psql('app', $rows);
my $src_contents = $src->safe_psql('app', $contents);
my $src_grants = $src->safe_psql('app', $grants);
is($src_grants,
	'act:dex_client act:dex_worker tenant-wf:tenant wf:dex_client wf:dex_worker',
	'the tenant\'s queue is granted to the tenant only');
my %leased = split /\|/, $src->safe_psql('app', q{
	SELECT run_id || '|' || lock_version FROM leases WHERE workflow_name = 'leased'});
my ($leased_run, $leased_version) = %leased;

# logical: roles, then the database
my $dir = $PostgreSQL::Test::Utils::tmp_check;
my $globals = "$dir/globals.sql";
my $dump = "$dir/app.dump";
$src->command_ok([ 'pg_dumpall', '--globals-only', '-f', $globals ], 'pg_dumpall --globals-only');
$src->command_ok([ 'pg_dump', '-Fc', '-d', 'app', '-f', $dump ], 'pg_dump -Fc');
my $issued_before_dump = $src->safe_psql('app', q{SELECT last_value FROM dex.lease_version});
my ($toc) = run_command([ 'pg_restore', '-l', $dump ]);
unlike($toc, qr/TABLE DATA dex (workflow|activity)_task|_task_q_/, 'the dump holds no task');
like($toc, qr/TABLE DATA dex workflow_history/, 'the dump holds the history');
like($toc, qr/SEQUENCE SET dex lease_version/, 'and the lock-version sequence');

# physical: a base backup of the running server, with the WAL it needs
$src->backup('base', backup_options => [ '--wal-method=stream' ]);
my $issued_before_backup = $src->safe_psql('app', q{SELECT last_value FROM dex.lease_version});

my $dst = dex_cluster('restored', %dex);
# a role made before the restore takes the oids the source's roles had, so a
# grant restored by oid would name another role
$dst->safe_psql('postgres', q{CREATE ROLE intruder LOGIN});
my $src_bootstrap = $src->safe_psql('postgres', q{SELECT current_user});
my $stderr;
$dst->psql('postgres', slurp_file($globals), stderr => \$stderr, on_error_stop => 0);
is(join("\n", grep { $_ ne '' && !/role "\Q$src_bootstrap\E" already exists/ } split /\n/, $stderr), '',
	'the roles are restored (the bootstrap superuser exists already, as pg_dumpall says it may)');
$dst->safe_psql('postgres', q{GRANT dex_client, dex_worker TO intruder});
isnt($dst->safe_psql('postgres', q{SELECT oid FROM pg_roles WHERE rolname = 'tenant'}),
	$src->safe_psql('postgres', q{SELECT oid FROM pg_roles WHERE rolname = 'tenant'}),
	'the tenant role has another oid in the new cluster');

$dst->safe_psql('postgres', 'CREATE DATABASE app');
$dst->command_checks_all([ 'pg_restore', '-d', 'app', $dump ], 0, [qr/^$/], [qr/^$/],
	'pg_restore into a new database');
$dst->safe_psql('postgres', 'CREATE DATABASE app_parallel');
$dst->command_checks_all([ 'pg_restore', '-j', '4', '-d', 'app_parallel', $dump ], 0, [qr/^$/], [qr/^$/],
	'pg_restore -j 4 into another');

my $copy = PostgreSQL::Test::Cluster->new('copy');
$copy->init_from_backup($src, 'base');
$copy->start;

# the rebuilt task tables, as after a crash: the interrupted lease is void
my $tasks = q{
SELECT (SELECT string_agg(r.workflow_name, ' ' ORDER BY r.workflow_name)
          FROM dex.workflow_task t JOIN dex.workflow_run r ON r.id = t.run_id
         WHERE r.workflow_name <> 'timer')
       || ' / ' ||
       (SELECT string_agg(r.workflow_name || ':' || a.attempt || ':' || (a.locked_by IS NULL), ' '
                          ORDER BY r.workflow_name)
          FROM dex.activity_task a JOIN dex.workflow_run r ON r.id = a.run_id)};
# the task tables: UNLOGGED members of the extension, one per kind, none per queue
my $task_tables = q{
SELECT string_agg(c.relname || ':' || (c.relpersistence = 'u') || ':'
                  || EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                                AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'dex')
                                AND d.deptype = 'e'), ' ' ORDER BY c.relname)
  FROM pg_class c WHERE c.relnamespace = 'dex'::regnamespace AND c.relname ~ '_task' AND c.relkind IN ('r', 'p')};

for my $case ([ $dst, 'app', 'restored' ], [ $dst, 'app_parallel', 'restored in parallel' ],
	[ $copy, 'app', 'physical copy' ])
{
	my ($node, $db, $what) = @$case;
	ok($node->poll_query_until($db, q{
		SELECT count(*) = 1 FROM dex.lease WHERE name = 'tasks_valid'
		   AND NOT EXISTS (SELECT FROM dex.lease WHERE name = 'restore')}),
		"$what: the scheduler rebuilt the task tables");
	is($node->safe_psql($db, $rows), $src_rows, "$what: every logged table has its rows");
	is($node->safe_psql($db, $contents), $src_contents, "$what: with the same contents");
	is($node->safe_psql($db, $grants), $src_grants, "$what: the queue grants name the same roles");
	is($node->safe_psql($db, $task_tables),
		'activity_task:true:true user_task:false:true workflow_task:true:true',
		"$what: the task tables are UNLOGGED members of the extension, none of a queue's own");
	is($node->safe_psql($db, $tasks),
		'first tenant / leased:1:true pending:1:true retry:2:true',
		"$what: tasks rebuilt for the new runs and the open activities, with their attempts");
	ok($node->poll_query_until($db, q{
		SELECT (SELECT horizon > (SELECT id FROM dex.workflow_run ORDER BY id DESC LIMIT 1) FROM dex.run_status_sweep)
		   AND NOT EXISTS (SELECT FROM dex.workflow_run r LEFT JOIN dex.run_status_index i ON i.run_id = r.id
		                    WHERE r.status <> 'COMPLETED' AND i.status IS DISTINCT FROM r.status)
		   AND NOT EXISTS (SELECT FROM dex.run_status_index i LEFT JOIN dex.workflow_run r ON r.id = i.run_id
		                    WHERE r.status IS NULL OR r.status = 'COMPLETED')}),
		"$what: the status sweep indexes every run that is not COMPLETED (1.11)");
}
like(slurp_file($copy->logfile), qr/dex scheduler rebuilt the task tables of database "app"/,
	'physical copy: its UNLOGGED tables started empty, and were rebuilt');

# The rebuild waits for the restoring session to end: restore a plain dump
# with psql in a session that stays connected.
my $plain = "$dir/app.sql";
command_ok([ 'pg_restore', '-f', $plain, $dump ], 'pg_restore -f: the dump as SQL');
$dst->safe_psql('postgres', 'CREATE DATABASE app_plain');
my $log_offset = -s $dst->logfile;
my $restorer = $dst->background_psql('app_plain');
$restorer->query_safe("\\i $plain");
my $restorer_pid = $restorer->query_safe('SELECT pg_backend_pid()');
$dst->wait_for_log(qr/process $restorer_pid is restoring database "app_plain"; the task tables will be rebuilt when its session ends/,
	$log_offset);
is($dst->safe_psql('app_plain', q{SELECT holder FROM dex.lease WHERE name = 'restore'}), $restorer_pid,
	'the restoring session is noted');
sleep 2;
is($dst->safe_psql('app_plain', q{SELECT count(*) FROM dex.lease WHERE name = 'restore'}), '1',
	'while it is connected, the scheduler waits');
$restorer->quit;
ok($dst->poll_query_until('app_plain', q{
	SELECT count(*) = 1 FROM dex.lease WHERE name = 'tasks_valid'
	   AND NOT EXISTS (SELECT FROM dex.lease WHERE name = 'restore')}),
	'when it has ended, the scheduler rebuilds the task tables');
is($dst->safe_psql('app_plain', $tasks), 'first tenant / leased:1:true pending:1:true retry:2:true',
	'from every restored row');

# Drive every run to completion in a copy with plain SQL; lock versions are
# recorded to compare them with those handed out before the copy.
sub drive
{
	my ($node, $db, $what, $issued_before) = @_;

	# the lease taken before the copy is void
	my $err;
	$node->psql($db, qq{\\set VERBOSITY sqlstate
		SELECT dex.complete_task('$leased_run', 1, $leased_version, '"late"')},
		stderr => \$err);
	like($err, qr/WD001/, "$what: a completion under a lease taken before the copy is refused (WD001)");

	# the tenant's queue: the tenant may use it, another role with dex's roles may not
	if ($node == $dst)
	{
		$node->psql($db, q{\set VERBOSITY sqlstate
			SET ROLE intruder;
			SELECT count(*) FROM dex.poll_tasks('tenant-wf', 'intruder')}, stderr => \$err);
		like($err, qr/42501/, "$what: a role the tenant's queue is not granted to may not poll it");
	}
	is($node->safe_psql($db, q{
		SET ROLE tenant;
		SELECT count(dex.complete_task(run_id, 0, lock_version, '[{"completeRun": {}}]'))
		  FROM dex.poll_tasks('tenant-wf', 'tenant');
		SELECT status FROM dex.runs WHERE workflow_name = 'tenant'}),
		"1\nCOMPLETED", "$what: the tenant runs its run on its queue");

	$node->safe_psql($db, q{
		CREATE TABLE seen (lock_version bigint);
		SELECT dex.send_external_event_to_instance('order-7', 'go', '"now"', queue => 'wf');
		SELECT dex.resume_run(id) FROM dex.workflow_run WHERE workflow_name = 'suspended';
	});
	for my $i (1 .. 60)
	{
		$node->safe_psql($db, q{
			INSERT INTO seen SELECT lock_version FROM dex.poll_tasks('act', 'new-worker', 100) p,
			  LATERAL dex.complete_task(p.run_id, p.task_id, p.lock_version,
			                            to_jsonb('attempt ' || (p.task->>'attempt')));
			INSERT INTO seen SELECT lock_version FROM dex.poll_tasks('wf', 'new-worker', 100) p,
			  LATERAL dex.complete_task(p.run_id, 0, p.lock_version, '[{"completeRun": {}}]');
		});
		last if $node->safe_psql($db,
			q{SELECT count(*) FROM dex.workflow_run WHERE status <> 'COMPLETED'}) eq '0';
		usleep(500_000);
	}
	is($node->safe_psql($db, q{SELECT string_agg(DISTINCT status, ',') FROM dex.workflow_run}),
		'COMPLETED', "$what: every run completed");
	cmp_ok($node->safe_psql($db, q{SELECT min(lock_version) FROM seen}), '>', $issued_before,
		"$what: every lock version handed out is greater than those handed out before the copy");
	is($node->safe_psql($db, q{
		SELECT string_agg(r.workflow_name || ':' || (
		         SELECT string_agg((SELECT k FROM jsonb_object_keys(h.event - 'id' - 'timestamp') k), ','
		                           ORDER BY h.sequence)
		           FROM dex.run_history(r.id) h WHERE h.sequence > 4), E'\n' ORDER BY r.workflow_name)
		  FROM dex.workflow_run r}),
		join("\n",
			'done:activityTaskCreated,workflowTaskStarted,activityTaskCompleted,workflowTaskCompleted,runCompleted',
			'event:externalEventWaitStarted,workflowTaskStarted,externalEventReceived,workflowTaskCompleted,runCompleted',
			'first:runCompleted',
			'leased:activityTaskCreated,workflowTaskStarted,activityTaskCompleted,workflowTaskCompleted,runCompleted',
			'pending:activityTaskCreated,workflowTaskStarted,activityTaskCompleted,workflowTaskCompleted,runCompleted',
			'retry:activityTaskCreated,workflowTaskStarted,activityTaskCompleted,workflowTaskCompleted,runCompleted',
			'suspended:workflowTaskStarted,runSuspended,runResumed,workflowTaskCompleted,runCompleted',
			'tenant:runCompleted',
			'timer:timerCreated,workflowTaskStarted,timerElapsed,workflowTaskCompleted,runCompleted',
			'waiter:runCompleted'),
		"$what: each history goes on from where the copy left it");
	is($node->safe_psql($db, q{
		SELECT string_agg(r.workflow_name || '=' || (h.event->'activityTaskCompleted'->'result'->>'json'), ' '
		                  ORDER BY r.workflow_name)
		  FROM dex.workflow_run r, dex.run_history(r.id) h WHERE h.event ? 'activityTaskCompleted'}),
		'done="done" leased="attempt 1" pending="attempt 1" retry="attempt 2"',
		"$what: the activities ran in the copy, the retried one at its second attempt");
	is($node->safe_psql($db, q{SELECT result FROM dex.runs WHERE workflow_name = 'done'}), '"finished"',
		"$what: the run completed before the copy keeps its result");
	is($node->safe_psql($db, q{
		SELECT dex.create_queue('after-copy', 'activity');
		SELECT id FROM dex.queue WHERE name = 'after-copy'}), "\n4",
		"$what: a new queue takes the next id");
}

drive($dst, 'app', 'restored', $issued_before_dump);
drive($copy, 'app', 'physical copy', $issued_before_backup);

# The maintenance worker deletes no run while a restore is under way: runs
# restored before their history would leave that history without a run.
# With a retention of one second, the run completed before the dump goes only
# once the restoring session has ended.
$dst->safe_psql('postgres', 'CREATE DATABASE app_retained');
$restorer = $dst->background_psql('app_retained');
$restorer->query_safe("\\i $plain");
$dst->safe_psql('postgres', q{ALTER SYSTEM SET dex.retention_period = '1s';
	ALTER SYSTEM SET dex.maintenance_naptime = '100ms'; SELECT pg_reload_conf()});
sleep 3;
is($dst->safe_psql('app_retained', q{SELECT count(*) FROM dex.workflow_run WHERE workflow_name = 'done'}), '1',
	'while a restore is under way, retention deletes no run');
$restorer->quit;
ok($dst->poll_query_until('app_retained', q{
	SELECT NOT EXISTS (SELECT FROM dex.workflow_run WHERE workflow_name = 'done')
	   AND NOT EXISTS (SELECT FROM dex.workflow_history h
	                    WHERE NOT EXISTS (SELECT FROM dex.workflow_run r WHERE r.id = h.run_id))}),
	'once it has ended, the ended run goes with its history');
$dst->safe_psql('postgres', q{ALTER SYSTEM RESET dex.retention_period;
	ALTER SYSTEM RESET dex.maintenance_naptime; SELECT pg_reload_conf()});

# a database updated from 1.1 (through 1.7's task partitions) dumps no task either
$src->safe_psql('postgres', 'CREATE DATABASE old');
$src->safe_psql('old', q{CREATE EXTENSION dex VERSION '1.1'; SELECT dex.create_queue('wf', 'workflow');
	ALTER EXTENSION dex UPDATE});
$src->command_ok([ 'pg_dump', '-Fc', '-d', 'old', '-f', "$dir/old.dump" ], 'pg_dump of a database updated from 1.1');
($toc) = run_command([ 'pg_restore', '-l', "$dir/old.dump" ]);
unlike($toc, qr/TABLE DATA dex (workflow|activity)_task|_task_q_/, 'its dump holds no task');
like($toc, qr/TABLE DATA dex queue /, 'but its queues');

$copy->stop;
$dst->stop;
$src->stop;
done_testing();
