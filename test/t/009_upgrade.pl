# Upgrades: install dex 1.0, leave runs in flight (an activity leased, a timer
# pending, a wait for an event), ALTER EXTENSION dex UPDATE to 1.1, finish
# them, then UPDATE to 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8 (tasks leased on 1.7's partitions are
# completed on 1.8's task tables), 1.9, 1.10 (a task leased on 1.9 completes on a queue that
# publishes) and to the default version, 1.11 (the status sweep indexes every run that is not
# COMPLETED, made by any version before); the updated database then has
# exactly the objects of a fresh install (functions with their definitions,
# rights and comments, tables, columns, indexes, constraints, views, grants,
# what pg_dump dumps of the extension's tables).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = dex_cluster('dex', conf => q{
dex.status_sweep_age = '10s'
});

$node->safe_psql('postgres', q{
	CREATE EXTENSION dex VERSION '1.0';
	SELECT dex.create_queue('wf', 'workflow');
	SELECT dex.create_queue('act', 'activity');
});
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'dex'}),
	'1.0', 'dex 1.0 is installed');

# run A: an activity, leased; run B: a timer; run C: waits for an event
$node->safe_psql('postgres', q{
	CREATE TABLE lease AS SELECT NULL::uuid AS run_id, 0 AS task_id, 0::bigint AS lock_version WHERE false;
	SELECT dex.create_run('a', 'wf', instance_id => 'A');
	SELECT dex.create_run('b', 'wf', instance_id => 'B');
	SELECT dex.create_run('c', 'wf', instance_id => 'C');
	SELECT dex.complete_task(t.run_id, 0, t.lock_version,
	         CASE r.instance_id
	           WHEN 'A' THEN '[{"id": 1, "scheduleActivity": {"name": "charge", "queue": "act"}}]'::jsonb
	           WHEN 'B' THEN '[{"id": 1, "startTimer": {"delay": "1s"}}]'::jsonb
	           ELSE '[{"id": 1, "waitExternalEvent": {"eventId": "go", "timeout": "3600s"}}]'::jsonb END)
	  FROM dex.poll_tasks('wf', 'w', 10) t JOIN dex.workflow_run r ON r.id = t.run_id;
	INSERT INTO lease SELECT run_id, task_id, lock_version FROM dex.poll_tasks('act', 'w');
});
is($node->safe_psql('postgres', q{SELECT count(*) FROM lease}), '1', 'the activity is leased under 1.0');

$node->safe_psql('postgres', q{ALTER EXTENSION dex UPDATE TO '1.1'});
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'dex'}),
	'1.1', 'dex is updated to 1.1');
is($node->safe_psql('postgres', q{SELECT string_agg(coalesce(capacity::text, 'none'), ',') FROM dex.queue}),
	'none,none', 'queues keep no limit: 1.0 did not enforce its capacity');

# the runs go on: the lease taken under 1.0 still completes, the event arrives, the timer fires
$node->safe_psql('postgres', q{
	SELECT dex.complete_task(run_id, task_id, lock_version, '"charged"') FROM lease;
	SELECT dex.send_external_event_to_instance('C', 'go', '"now"');
});
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 3 FROM dex.workflow_task t JOIN dex.workflow_run r ON r.id = t.run_id}),
	'each run has a workflow task again');
$node->safe_psql('postgres', q{
	SELECT dex.complete_task(run_id, 0, lock_version, '[{"completeRun": {}}]')
	  FROM dex.poll_tasks('wf', 'w', 10);
});
is($node->safe_psql('postgres', q{
	SELECT string_agg(instance_id || ':' || status, ' ' ORDER BY instance_id) FROM dex.workflow_run}),
	'A:COMPLETED B:COMPLETED C:COMPLETED', 'the runs started under 1.0 complete under 1.1');
is($node->safe_psql('postgres', q{
	SELECT string_agg(r.instance_id || ':' || (SELECT string_agg((SELECT k FROM jsonb_object_keys(h.event - 'id' - 'timestamp') k), ',' ORDER BY h.sequence)
	                                              FROM dex.run_history(r.id) h
	                                             WHERE h.sequence > 4), ' ' ORDER BY r.instance_id)
	  FROM dex.workflow_run r}),
	'A:activityTaskCreated,workflowTaskStarted,activityTaskCompleted,workflowTaskCompleted,runCompleted '
	. 'B:timerCreated,workflowTaskStarted,timerElapsed,workflowTaskCompleted,runCompleted '
	. 'C:externalEventWaitStarted,workflowTaskStarted,externalEventReceived,workflowTaskCompleted,runCompleted',
	'their histories run on from 1.0 to 1.1');

# run D waits for an event across the update to 1.2, which keys instance ids by queue
my $run_d = $node->safe_psql('postgres', q{SELECT dex.create_run('d', 'wf', instance_id => 'D')});
$node->safe_psql('postgres', q{
	SELECT dex.complete_task(run_id, 0, lock_version,
	       '[{"id": 1, "waitExternalEvent": {"eventId": "go", "timeout": "3600s"}}]')
	  FROM dex.poll_tasks('wf', 'w', 10);
});
# concurrency key "k": held on wf; a run of wf2 waits for it under 1.1's global keys
$node->safe_psql('postgres', q{
	SELECT dex.create_queue('wf2', 'workflow');
	SELECT dex.create_run('k1', 'wf', concurrency_key => 'k');
	SELECT dex.create_run('k2', 'wf2', concurrency_key => 'k');
	SELECT dex.create_run('k3', 'wf', concurrency_key => 'k');
});
is($node->safe_psql('postgres', q{SELECT count(*) FROM dex.workflow_task t JOIN dex.workflow_run r ON r.id = t.run_id
                                   WHERE r.workflow_name LIKE 'k_'}), '1', 'under 1.1 one run holds key k');
$node->safe_psql('postgres', q{ALTER EXTENSION dex UPDATE TO '1.2'});
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'dex'}),
	'1.2', 'dex is updated to 1.2');
is($node->safe_psql('postgres', q{SELECT string_agg(r.workflow_name, ',' ORDER BY r.workflow_name)
                                    FROM dex.workflow_task t JOIN dex.workflow_run r ON r.id = t.run_id
                                   WHERE r.workflow_name LIKE 'k_'}),
	'k1,k2', 'under 1.2 keys are per queue: the run of wf2 that waited for k is admitted, k3 still waits');
$node->safe_psql('postgres', q{
	SELECT dex.complete_task(t.run_id, 0, t.lock_version, '[{"completeRun": {}}]')
	  FROM dex.poll_tasks('wf', 'w', 10) t JOIN dex.workflow_run r ON r.id = t.run_id WHERE r.workflow_name = 'k1';
});
is($node->safe_psql('postgres', q{SELECT string_agg(r.workflow_name, ',' ORDER BY r.workflow_name)
                                    FROM dex.workflow_task t JOIN dex.workflow_run r ON r.id = t.run_id
                                   WHERE r.workflow_name LIKE 'k_' AND t.locked_by IS NULL}),
	'k2,k3', 'when k1 ends, k3 gets the key on wf');
is($node->safe_psql('postgres', q{SELECT dex.create_run('d', 'wf', instance_id => 'D', if_active => 'return')}),
	$run_d, 'the active instance id keeps its run across the update');
$node->safe_psql('postgres', q{
	SELECT dex.send_external_event_to_instance('D', 'go', '"now"');
});
ok($node->poll_query_until('postgres', qq{SELECT count(*) = 1 FROM dex.workflow_task WHERE run_id = '$run_d'}),
	'the event reaches it by instance id');
$node->safe_psql('postgres', q{
	SELECT dex.complete_task(run_id, 0, lock_version, '[{"completeRun": {}}]') FROM dex.poll_tasks('wf', 'w', 10);
});
is($node->safe_psql('postgres', qq{SELECT status FROM dex.workflow_run WHERE id = '$run_d'}),
	'COMPLETED', 'and it completes under 1.2');

# 1.3: a run started under 1.2 is terminated after the update
my $run_e = $node->safe_psql('postgres', q{SELECT dex.create_run('to-terminate', 'wf')});
$node->safe_psql('postgres', q{ALTER EXTENSION dex UPDATE TO '1.3'});
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'dex'}),
	'1.3', 'dex is updated to 1.3');
$node->safe_psql('postgres', qq{SELECT dex.terminate_run('$run_e', 'upgrade test')});
is($node->safe_psql('postgres', qq{SELECT status FROM dex.workflow_run WHERE id = '$run_e'}),
	'TERMINATED', 'under 1.3 a run started before the update can be terminated');

# 1.4: a run started under 1.3 is restarted after the update, a new one is delayed
$node->safe_psql('postgres', q{ALTER EXTENSION dex UPDATE TO '1.4'});
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'dex'}),
	'1.4', 'dex is updated to 1.4');
my $run_f = $node->safe_psql('postgres', qq{SELECT dex.restart_run('$run_e')});
is($node->safe_psql('postgres', qq{SELECT r.workflow_name || ' ' || r.origin || ' ' || (r.origin_run_id = '$run_e')
	FROM dex.workflow_run r WHERE r.id = '$run_f'}),
	'to-terminate RESTART true', 'under 1.4 a run of 1.3 can be restarted');
my $run_g = $node->safe_psql('postgres',
	q{SELECT dex.create_run('later', 'wf', start_at => now() + interval '1 hour')});
is($node->safe_psql('postgres', qq{SELECT status FROM dex.workflow_run WHERE id = '$run_g'}),
	'DELAYED', 'under 1.4 a run can be delayed');

# 1.5: a run whose workflow tasks a worker completed under 1.4 (polls without
# worker_cache) leaves its history out for that worker after the update
my $run_h = $node->safe_psql('postgres', q{SELECT dex.create_run('incremental', 'wf')});
$node->safe_psql('postgres', qq{
	SELECT dex.complete_task(run_id, 0, lock_version, '[{"id": 1, "startTimer": {"delay": "0.01s"}}]')
	  FROM dex.poll_tasks('wf', 'w-inc', 10) WHERE run_id = '$run_h'});
ok($node->poll_query_until('postgres', qq{SELECT count(*) = 1 FROM dex.workflow_task WHERE run_id = '$run_h'}),
	'the first timer of the run fires');
$node->safe_psql('postgres', qq{
	SELECT dex.complete_task(run_id, 0, lock_version, '[{"id": 2, "startTimer": {"delay": "0.01s"}}]')
	  FROM dex.poll_tasks('wf', 'w-inc', 10) WHERE run_id = '$run_h'});
$node->safe_psql('postgres', q{ALTER EXTENSION dex UPDATE TO '1.5'});
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'dex'}),
	'1.5', 'dex is updated to 1.5');
ok($node->poll_query_until('postgres', qq{SELECT count(*) = 1 FROM dex.workflow_task WHERE run_id = '$run_h'}),
	'the second timer of the run fires');
is($node->safe_psql('postgres', qq{
	SELECT (task->>'historyOmitted') || ' of ' || (task->>'historyLength')
	  FROM dex.poll_tasks('wf', 'w-inc', 10, '1 min', worker_cache => true) WHERE run_id = '$run_h'}),
	'5 of 9', 'under 1.5 the worker that completed its task under 1.4 gets it without what it was shown');

# 1.6: a run whose task waits under 1.5 gets its workflow and version on the task; a poll
# that declares them takes it, one that declares another version does not
my $run_i = $node->safe_psql('postgres',
	q{SELECT dex.create_run('to-declare', 'wf', workflow_version => 3)});
$node->safe_psql('postgres', q{ALTER EXTENSION dex UPDATE TO '1.6'});
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'dex'}),
	'1.6', 'dex is updated to 1.6');
is($node->safe_psql('postgres', qq{SELECT workflow_name || ' ' || workflow_version
	FROM dex.workflow_task WHERE run_id = '$run_i'}),
	'to-declare 3', 'under 1.6 the task of 1.5 has its run\'s workflow and version');
is($node->safe_psql('postgres', q{SELECT count(*) FROM dex.poll_tasks('wf', 'w', 10,
	names => '{to-declare}', versions => '{2}')}),
	'0', 'a poll declaring another version does not take it');
is($node->safe_psql('postgres', qq{SELECT run_id FROM dex.poll_tasks('wf', 'w', 10,
	names => '{to-declare}', versions => '{3}')}),
	$run_i, 'a poll declaring its version does');

$node->safe_psql('postgres', q{ALTER EXTENSION dex UPDATE TO '1.7'});
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'dex'}),
	'1.7', 'dex is updated to 1.7');

# 1.8: the task tables stop being partitioned by queue.  Under 1.7 run J's activity is leased,
# run K's workflow task is leased and run L's waits; the update keeps all three, and the leases
# taken on 1.7's partitions complete on 1.8's tables.
$node->safe_psql('postgres', q{SELECT dex.create_queue('wf-1-7', 'workflow')});
my $run_j = $node->safe_psql('postgres', q{SELECT dex.create_run('across-1-8', 'wf-1-7', instance_id => 'J')});
$node->safe_psql('postgres', q{
	SELECT dex.complete_task(run_id, 0, lock_version,
	       '[{"id": 1, "scheduleActivity": {"name": "step", "queue": "act"}}]')
	  FROM dex.poll_tasks('wf-1-7', 'w', 10);
});
my ($act_task, $act_version) = split /\|/, $node->safe_psql('postgres', qq{
	SELECT task_id || '|' || lock_version FROM dex.poll_tasks('act', 'w', 10) WHERE run_id = '$run_j'});
my $run_k = $node->safe_psql('postgres', q{SELECT dex.create_run('across-1-8', 'wf-1-7', instance_id => 'K')});
my $k_version = $node->safe_psql('postgres', qq{
	SELECT lock_version FROM dex.poll_tasks('wf-1-7', 'w', 10) WHERE run_id = '$run_k'});
my $run_l = $node->safe_psql('postgres', q{SELECT dex.create_run('across-1-8', 'wf-1-7', instance_id => 'L')});
ok($act_version && $k_version, 'under 1.7 an activity and a workflow task are leased');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_class WHERE relname = 'workflow_task_q_wf_1_7'}),
	'1', 'under 1.7 the queue has its partition');
$node->safe_psql('postgres', q{ALTER EXTENSION dex UPDATE TO '1.8'});
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'dex'}),
	'1.8', 'dex is updated to 1.8');
is($node->safe_psql('postgres', q{
	SELECT string_agg(relname || ':' || relkind::text || ':' || relpersistence::text, ' ' ORDER BY relname) FROM pg_class
	 WHERE relnamespace = 'dex'::regnamespace AND (relname IN ('workflow_task', 'activity_task') OR relname ~ '_task_q_')}),
	'activity_task:r:u workflow_task:r:u',
	'1.8 has one UNLOGGED table per kind of task, and no partition');
is($node->safe_psql('postgres', qq{
	SELECT string_agg(r.instance_id || ':' || (t.locked_by IS NOT NULL), ' ' ORDER BY r.instance_id)
	  FROM dex.workflow_task t JOIN dex.workflow_run r ON r.id = t.run_id WHERE r.workflow_name = 'across-1-8'}),
	'K:true L:false', 'the workflow tasks are kept across the update, the lease with them');
$node->safe_psql('postgres', qq{
	SELECT dex.complete_task('$run_j', $act_task, $act_version, '"done"');
	SELECT dex.complete_task('$run_k', 0, $k_version, '[{"completeRun": {}}]');
});
$node->safe_psql('postgres', q{
	SELECT dex.complete_task(run_id, 0, lock_version, '[{"completeRun": {}}]')
	  FROM dex.poll_tasks('wf-1-7', 'w', 10);
});
is($node->safe_psql('postgres', q{
	SELECT string_agg(instance_id || ':' || status, ' ' ORDER BY instance_id) FROM dex.workflow_run
	 WHERE workflow_name = 'across-1-8'}),
	'J:COMPLETED K:COMPLETED L:COMPLETED', 'the leases of 1.7 complete under 1.8, and every run ends');
$node->safe_psql('postgres', q{SELECT dex.create_queue('WF-1.7', 'workflow')});
is($node->safe_psql('postgres', q{SELECT count(*) FROM dex.queue WHERE lower(name) LIKE 'wf_1_7'}),
	'2', 'under 1.8 queue names that 1.7 mapped to one partition name two queues');

# 1.9: a token's requests record who acted
$node->safe_psql('postgres', q{ALTER EXTENSION dex UPDATE TO '1.9'});
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'dex'}),
	'1.9', 'dex is updated to 1.9');

# 1.10: queues may publish their runs' events; a task leased on 1.9 completes after the update
$node->safe_psql('postgres', q{
	SELECT dex.create_queue('across-1-10', 'workflow');
	SELECT dex.create_run('across-1-10', 'across-1-10');
	CREATE TABLE leased_1_9 AS SELECT run_id, lock_version FROM dex.poll_tasks('across-1-10', 'w', 1);
});
$node->safe_psql('postgres', q{ALTER EXTENSION dex UPDATE TO '1.10'});
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'dex'}),
	'1.10', 'dex is updated to 1.10');
$node->safe_psql('postgres', q{
	SET client_min_messages = error;   -- this cluster's wal_level is not logical: a warning
	SELECT dex.alter_queue('across-1-10', publish => true);
	SELECT dex.complete_task(run_id, 0, lock_version, '[{"id": 1, "publishEvent": {"name": "e"}}, {"id": 2, "completeRun": {}}]')
	  FROM leased_1_9;
	DROP TABLE leased_1_9;
});
is($node->safe_psql('postgres', q{
	SELECT status || ' ' || (SELECT count(*) FROM dex.run_history(r.id) h WHERE h.event ? 'eventPublished')
	  FROM dex.workflow_run r WHERE workflow_name = 'across-1-10'}),
	'COMPLETED 1', 'a task leased on 1.9 completes under 1.10 with a published event');

# 1.11: the runs of every version before that are not COMPLETED are swept into
# dex.run_status_index, with their status; a run that ends now is kept there by the trigger
$node->safe_psql('postgres', q{
	SELECT dex.create_queue('across-1-11', 'workflow');
	SELECT dex.create_run('across-1-11', 'across-1-11');
	SELECT dex.create_run('across-1-11', 'across-1-11');
});
# (a reload wakes the maintenance worker, which found no sweep to do under 1.10)
$node->safe_psql('postgres', q{ALTER EXTENSION dex UPDATE; SELECT pg_reload_conf()});
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'dex'}),
	'1.11', 'dex is updated to the default version, 1.11');
$node->safe_psql('postgres', q{
	SELECT dex.terminate_run(id) FROM dex.workflow_run WHERE workflow_name = 'across-1-11' ORDER BY id LIMIT 1});
ok($node->poll_query_until('postgres', q{
	SELECT (SELECT horizon > (SELECT id FROM dex.workflow_run ORDER BY id DESC LIMIT 1) FROM dex.run_status_sweep)
	   AND NOT EXISTS (SELECT FROM dex.workflow_run r LEFT JOIN dex.run_status_index i ON i.run_id = r.id
	                    WHERE r.status IS DISTINCT FROM 'COMPLETED' AND i.status IS DISTINCT FROM r.status)
	   AND NOT EXISTS (SELECT FROM dex.run_status_index i JOIN dex.workflow_run r ON r.id = i.run_id
	                    WHERE r.status = 'COMPLETED')}),
	'the sweep indexes every run made before 1.11 that is not COMPLETED, with its status');
is($node->safe_psql('postgres', q{
	SELECT string_agg(i.status, ',' ORDER BY i.status) FROM dex.run_status_index i
	  JOIN dex.workflow_run r ON r.id = i.run_id WHERE r.workflow_name = 'across-1-11'}),
	'CREATED,TERMINATED', 'a run made under 1.10 and terminated under 1.11 is indexed TERMINATED');

# the updated schema is the fresh schema
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION dex');
my $catalog = q{
SELECT string_agg(x, E'\n' ORDER BY x) FROM (
  SELECT 'function ' || p.oid::regprocedure || ' ' || pg_get_functiondef(p.oid)
         || ' acl=' || coalesce(p.proacl::text, '') || ' comment=' || coalesce(obj_description(p.oid, 'pg_proc'), '') AS x
    FROM pg_proc p WHERE p.pronamespace = 'dex'::regnamespace AND p.prokind <> 'a'
  UNION ALL
  SELECT 'relation ' || c.relname || ' kind=' || c.relkind::text || ' persistence=' || c.relpersistence::text
         || ' acl=' || coalesce(c.relacl::text, '') || ' comment=' || coalesce(obj_description(c.oid, 'pg_class'), '')
         || ' options=' || coalesce(c.reloptions::text, '')
    FROM pg_class c WHERE c.relnamespace = 'dex'::regnamespace AND c.relname !~ '_task_q_'
  UNION ALL
  SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
         || ' notnull=' || a.attnotnull || ' default=' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
         || ' acl=' || coalesce(a.attacl::text, '')
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE c.relnamespace = 'dex'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
     AND c.relname !~ '_task_q_'
  UNION ALL
  SELECT 'index ' || pg_get_indexdef(i.indexrelid)
    FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
   WHERE c.relnamespace = 'dex'::regnamespace AND c.relname !~ '_task_q_'
  UNION ALL
  SELECT 'constraint ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
    FROM pg_constraint WHERE connamespace = 'dex'::regnamespace AND conrelid::regclass::text !~ '_task_q_'
  UNION ALL
  SELECT 'view ' || c.relname || ' ' || pg_get_viewdef(c.oid)
    FROM pg_class c WHERE c.relnamespace = 'dex'::regnamespace AND c.relkind = 'v'
  UNION ALL
  SELECT 'trigger ' || pg_get_triggerdef(t.oid)
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
   WHERE c.relnamespace = 'dex'::regnamespace AND NOT t.tgisinternal
  UNION ALL
  SELECT 'statistics ' || stxname || ' ' || stxkind::text[]::text FROM pg_statistic_ext WHERE stxnamespace = 'dex'::regnamespace
  UNION ALL
  SELECT 'schema acl ' || coalesce(nspacl::text, '') FROM pg_namespace WHERE nspname = 'dex'
  UNION ALL
  SELECT 'dumped ' || c::regclass || ' where ' || coalesce(w, '')
    FROM pg_extension e, unnest(e.extconfig, e.extcondition) AS u(c, w) WHERE e.extname = 'dex'
  UNION ALL
  SELECT 'member ' || r.rolname || ' of ' || g.rolname FROM pg_auth_members m
    JOIN pg_roles r ON r.oid = m.member JOIN pg_roles g ON g.oid = m.roleid WHERE g.rolname LIKE 'dex\_%'
) s};
my $fresh = $node->safe_psql('fresh', $catalog);
my @f = split /\n/, $fresh;
my %in_f = map { $_ => 1 } @f;
ok(@f > 100, 'the catalog comparison sees the schema (' . scalar(@f) . ' objects)');

# the same for every released version updated straight to the current one:
# "postgres" came from 1.0 through 1.1, 1.2, 1.3, 1.4, 1.5, 1.6 and 1.7; "from_1_1" starts at 1.1,
# "from_1_3" at 1.3, "from_1_4" at 1.4, "from_1_5" at 1.5, "from_1_6" at 1.6, "from_1_7" at 1.7
# (PostgreSQL makes 1.1 to 1.6 from 1.0's script and the updates: their full scripts are gone;
# 1.7's is the base of a fresh install)
$node->safe_psql('postgres', 'CREATE DATABASE from_1_1');
$node->safe_psql('from_1_1', q{CREATE EXTENSION dex VERSION '1.1'; SELECT dex.create_queue('wf', 'workflow');
	SELECT dex.create_run('w', 'wf', instance_id => 'i', concurrency_key => 'k'); ALTER EXTENSION dex UPDATE});
$node->safe_psql('postgres', 'CREATE DATABASE from_1_3');
$node->safe_psql('from_1_3', q{CREATE EXTENSION dex VERSION '1.3'; SELECT dex.create_queue('wf', 'workflow');
	SELECT dex.create_run('w', 'wf');
	SELECT dex.complete_task(run_id, 0, lock_version, '[{"id": 1, "startChildRun": {"workflowName": "kid"}}]')
	  FROM dex.poll_tasks('wf', 'w');
	ALTER EXTENSION dex UPDATE});
# a child started under 1.3 is asked to cancel when its parent ends, as under 1.3
is($node->safe_psql('from_1_3', q{SELECT parent_close_policy FROM dex.workflow_run WHERE workflow_name = 'kid'}),
	'REQUEST_CANCEL', 'a child of 1.3 keeps the parent close policy it had');
$node->safe_psql('from_1_3', q{SELECT dex.terminate_run(id) FROM dex.workflow_run WHERE workflow_name = 'w'});
is($node->safe_psql('from_1_3', q{SELECT status FROM dex.workflow_run WHERE workflow_name = 'kid'}),
	'CANCELLED', 'and when its parent ends it is cancelled (not yet executing: at once), not terminated');
$node->safe_psql('postgres', 'CREATE DATABASE from_1_4');
$node->safe_psql('from_1_4', q{CREATE EXTENSION dex VERSION '1.4'; SELECT dex.create_queue('wf', 'workflow');
	SELECT dex.create_run('w', 'wf'); ALTER EXTENSION dex UPDATE});
$node->safe_psql('postgres', 'CREATE DATABASE from_1_5');
$node->safe_psql('from_1_5', q{CREATE EXTENSION dex VERSION '1.5'; SELECT dex.create_queue('wf', 'workflow');
	SELECT dex.create_run('w', 'wf'); ALTER EXTENSION dex UPDATE});
$node->safe_psql('postgres', 'CREATE DATABASE from_1_6');
$node->safe_psql('from_1_6', q{CREATE EXTENSION dex VERSION '1.6'; SELECT dex.create_queue('wf', 'workflow');
	SELECT dex.create_run('w', 'wf'); ALTER EXTENSION dex UPDATE});
$node->safe_psql('postgres', 'CREATE DATABASE from_1_7');
$node->safe_psql('from_1_7', q{CREATE EXTENSION dex VERSION '1.7'; SELECT dex.create_queue('wf', 'workflow');
	SELECT dex.create_run('w', 'wf'); ALTER EXTENSION dex UPDATE});
for my $db ('postgres', 'from_1_1', 'from_1_3', 'from_1_4', 'from_1_5', 'from_1_6', 'from_1_7')
{
	my @u = split /\n/, $node->safe_psql($db, $catalog);
	my %in_u = map { $_ => 1 } @u;
	my @missing = grep { !$in_u{$_} } @f;
	my @extra = grep { !$in_f{$_} } @u;
	is(scalar(@missing) + scalar(@extra), 0, "the updated schema of $db equals a fresh install")
	  or diag("missing after the update:\n" . join("\n", map { substr($_, 0, 300) } @missing)
		. "\nonly after the update:\n" . join("\n", map { substr($_, 0, 300) } @extra));
}

# and the roles work in the updated database
$node->safe_psql('postgres', q{
	CREATE ROLE upgraded_client IN ROLE dex_client;
	SET ROLE upgraded_client;
	SELECT dex.create_run('e', 'wf');
});
is($node->safe_psql('postgres', q{SELECT count(*) FROM dex.workflow_run WHERE workflow_name = 'e'}),
	'1', 'a dex_client starts a run in the updated database');

$node->stop;
done_testing();
