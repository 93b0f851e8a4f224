# Long poll: CALL dex.wait_for_tasks sleeps holding no snapshot (backend_xmin
# stays NULL) and wakes as soon as a commit makes tasks pollable on its queue:
# a new run, an activity scheduled by a workflow, a timer fired by the
# scheduler, a workflow-task lease that expired.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = dex_cluster('dex');
$node->safe_psql('postgres', q{
	CREATE EXTENSION dex;
	SELECT dex.create_queue('wf', 'workflow');
	SELECT dex.create_queue('act', 'activity');
});

# Run a statement in a psql of its own, in the background; returns the IPC::Run harness
# and its output ref.
sub start_call
{
	my ($sql) = @_;
	return dex_psql_start($node, $sql);
}

# Start a waiting worker; returns the IPC::Run harness and its output ref.
sub start_waiter
{
	my ($queue, $timeout) = @_;
	return start_call("CALL dex.wait_for_tasks('$queue', '$timeout')");
}

sub wait_until_sleeping
{
	my ($queue) = @_;
	return $node->poll_query_until('postgres', qq{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE query LIKE 'CALL dex.wait_for_tasks(''$queue''%' AND wait_event_type = 'Extension'});
}

# 1. a waiting worker holds no xmin and wakes on a new run
my ($h, $out) = start_waiter('wf', '60s');
ok(wait_until_sleeping('wf'), 'the worker sleeps in dex.wait_for_tasks');
# PostgreSQL 15 has no custom wait events: the query text says what it waits for
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM pg_stat_activity
	 WHERE query LIKE '%-- dex: waiting for tasks on queue "wf"' AND state = 'active'}),
	'1', 'pg_stat_activity shows the queue it waits for');
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE backend_type = 'dex scheduler' AND wait_event_type = 'Extension'
	   AND query LIKE 'dex scheduler: sleeping%'}),
	'and the sleeping scheduler that it sleeps');
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE backend_type = 'dex launcher' AND wait_event_type = 'Extension'
	   AND query LIKE 'dex launcher: waiting%'}),
	'and so does the launcher');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM pg_stat_activity
	 WHERE query LIKE 'CALL dex.wait_for_tasks%' AND backend_xmin IS NULL AND backend_xid IS NULL}),
	'1', 'it holds no snapshot: backend_xmin is NULL');
my $t0 = time;
my $run = $node->safe_psql('postgres', q{SELECT dex.create_run('lp', 'wf')});
$h->finish;
my $woke_after = time - $t0;
is($$out, "t\n", 'it returns ready = true');
cmp_ok($woke_after, '<', 5, "it woke when the run was committed (after ${woke_after}s, not the 60 s timeout)");

# 2. an activity queue wakes when a workflow schedules an activity
($h, $out) = start_waiter('act', '60s');
ok(wait_until_sleeping('act'), 'an activity worker sleeps');
$node->safe_psql('postgres', q{
	SELECT dex.complete_task(run_id, task_id, lock_version,
	       '[{"id": 1, "scheduleActivity": {"name": "a", "queue": "act"}},
	         {"id": 2, "startTimer": {"delay": "2s"}}]')
	  FROM dex.poll_tasks('wf', 'w')});
$h->finish;
is($$out, "t\n", 'the activity worker wakes when the activity is scheduled');
$node->safe_psql('postgres', q{
	SELECT dex.complete_task(run_id, task_id, lock_version, '1') FROM dex.poll_tasks('act', 'w')});
$node->safe_psql('postgres', q{
	SELECT dex.complete_task(run_id, task_id, lock_version, '[]') FROM dex.poll_tasks('wf', 'w')});

# 3. a timer fired by the scheduler wakes the workflow worker
($h, $out) = start_waiter('wf', '60s');
ok(wait_until_sleeping('wf'), 'the workflow worker sleeps while the timer runs');
$t0 = time;
$h->finish;
is($$out, "t\n", 'the fired timer wakes it');
cmp_ok(time - $t0, '<', 5, 'within the timer delay, not the 60 s timeout');

# 4. a workflow-task lease that expires wakes waiting workers
$node->safe_psql('postgres', q{SELECT count(*) FROM dex.poll_tasks('wf', 'w', 10, '2 s')});
($h, $out) = start_waiter('wf', '60s');
ok(wait_until_sleeping('wf'), 'a worker sleeps while the task is leased');
$t0 = time;
$h->finish;
is($$out, "t\n", 'the expired lease wakes it');
cmp_ok(time - $t0, '<', 10, 'soon after the lease expired');
is($node->safe_psql('postgres', q{SELECT count(*) FROM dex.poll_tasks('wf', 'w2')}), '1',
	'and the task can be leased again');

# 5. the timeout returns ready = false; inside a transaction block it refuses to wait
($h, $out) = start_waiter('act', '0.3s');
$h->finish;
is($$out, "f\n", 'an empty queue times out with ready = false');
my ($ret, $stdout, $stderr) = $node->psql('postgres',
	"BEGIN; CALL dex.wait_for_tasks('act', '1s'); COMMIT;");
like($stderr, qr/cannot wait inside a transaction block/, 'inside a transaction block it refuses to wait');

# 6. a client killed while it waits: its backend notices within seconds and
# ends, instead of holding its connection slot until the timeout (a day here)
($h, $out) = start_waiter('act', '1 day');
ok(wait_until_sleeping('act'), 'a worker waits for a day');
my $waiter_pid = $node->safe_psql('postgres', q{
	SELECT pid FROM pg_stat_activity WHERE query LIKE 'CALL dex.wait_for_tasks(''act''%'});
$h->signal('KILL');
$h->finish;
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $waiter_pid"),
	'the backend of the killed client ends');
ok($node->log_contains('connection to client lost'), 'it says why');

# 7. a client waits for a run to end: CALL dex.wait_for_run sleeps holding no
# snapshot and returns as soon as another session ends the run
my $run = $node->safe_psql('postgres', q{SELECT dex.create_run('awaited', 'wf')});
my ($run_waiter, $run_out) = start_call("CALL dex.wait_for_run('$run', '60 s')");
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE query LIKE 'CALL dex.wait_for_run(%' AND wait_event_type = 'Extension'
	   AND backend_xmin IS NULL AND backend_xid IS NULL}),
	'a client waits for a run in dex.wait_for_run, holding no snapshot');
my $ended_at = time();
$node->safe_psql('postgres', q{
	SELECT dex.complete_task(run_id, 0, lock_version, '[{"completeRun": {"result": {"json": "42"}}}]')
	  FROM dex.poll_tasks('wf', 'w', 10)});
$run_waiter->finish;
is($$run_out, "COMPLETED|42|\n", 'it returns the status and the result as soon as the run ends');
cmp_ok(time() - $ended_at, '<', 10, 'woken by the end of the run, not by its 60 s timeout');

# 8. a commit that makes k tasks pollable wakes k of the queue's waiting
# workers, not all of them: the others sleep on, and no task is left with a
# worker asleep
$node->safe_psql('postgres', q{SELECT dex.create_queue('wk', 'workflow')});
my @waiters = map { [ start_waiter('wk', '60s') ] } 1 .. 4;
sub sleeping_on_wk
{
	return $node->safe_psql('postgres', q{
		SELECT count(*) FROM pg_stat_activity
		 WHERE query LIKE 'CALL dex.wait_for_tasks(''wk''%' AND wait_event_type = 'Extension'});
}
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 4 FROM pg_stat_activity
	 WHERE query LIKE 'CALL dex.wait_for_tasks(''wk''%' AND wait_event_type = 'Extension'}),
	'four workers wait on one queue');
$node->safe_psql('postgres', q{SELECT dex.create_run('one', 'wk')});
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 3 FROM pg_stat_activity
	 WHERE query LIKE 'CALL dex.wait_for_tasks(''wk''%' AND wait_event_type = 'Extension'}),
	'one new task wakes one of them');
sleep 1;
is(sleeping_on_wk(), '3', 'and the three others sleep on');
$node->safe_psql('postgres', q{SELECT count(*) FROM dex.create_runs('three', 'wk', '{1, 2, 3}')});
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM pg_stat_activity
	 WHERE query LIKE 'CALL dex.wait_for_tasks(''wk''%' AND wait_event_type = 'Extension'}),
	'three new tasks in one commit wake the three');
for my $w (@waiters)
{
	$w->[0]->finish;
}
is(join('', sort map { ${ $_->[1] } } @waiters), "t\nt\nt\nt\n", 'every woken worker returned ready = true');

# 9. dex.poll_tasks_wait: the poll and the long poll in one call sleeps holding
# no snapshot and returns the task leased, in one round trip, when a run is
# committed
$node->safe_psql('postgres', q{SELECT dex.create_queue('pw', 'workflow')});
my ($pw, $pw_out) = start_call("CALL dex.poll_tasks_wait('pw', 'one-call', 1, '1 min', '60 s')");
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE query LIKE 'CALL dex.poll_tasks_wait(%' AND wait_event_type = 'Extension'
	   AND backend_xmin IS NULL AND backend_xid IS NULL}),
	'dex.poll_tasks_wait sleeps holding no snapshot');
sleep 2;
$t0 = time;
$node->safe_psql('postgres', q{SELECT dex.create_run('in-one-call', 'pw')});
$pw->finish;
like($$pw_out, qr/"workflowName": "in-one-call"/, 'it returns the new run\'s task');
cmp_ok(time - $t0, '<', 5, 'as soon as the run was committed');
is($node->safe_psql('postgres', q{
	SELECT t.locked_by FROM dex.workflow_task t JOIN dex.workflow_run r ON r.id = t.run_id
	 WHERE r.workflow_name = 'in-one-call'}), 'one-call', 'leased to the worker that waited');
is($node->safe_psql('postgres', q{
	SELECT t.started_at >= r.created_at AND t.locked_until >= r.created_at + interval '59 s'
	  FROM dex.workflow_task t JOIN dex.workflow_run r ON r.id = t.run_id
	 WHERE r.workflow_name = 'in-one-call'}), 't',
	'its lease starts when it was taken, after the wait, and lasts the whole minute');

# 10. sticky wake-ups: a task of a run wakes, among the queue's waiting
# workers, the one that completed the run's last workflow task (it holds the
# run's state), and that worker gets the task without the history it was
# shown (two tasks completed, so that there is some)
$node->safe_psql('postgres', q{
	SELECT dex.create_queue('sk', 'workflow');
	SELECT dex.create_queue('sk-act', 'activity');
});
my $run_sk = $node->safe_psql('postgres', q{SELECT dex.create_run('sticky', 'sk')});
$node->safe_psql('postgres', q{
	SELECT dex.complete_task(run_id, 0, lock_version, '[{"id": 1, "scheduleActivity": {"name": "a", "queue": "sk-act"}}]')
	  FROM dex.poll_tasks('sk', 'holder', 1, '1 min', true)});
$node->safe_psql('postgres', q{
	SELECT dex.complete_task(run_id, task_id, lock_version, '{"json": "1"}') FROM dex.poll_tasks('sk-act', 'a')});
$node->safe_psql('postgres', q{
	SELECT dex.complete_task(run_id, 0, lock_version, '[{"id": 2, "scheduleActivity": {"name": "a", "queue": "sk-act"}}]')
	  FROM dex.poll_tasks('sk', 'holder', 1, '1 min', true)});
my @sk;
# the holder enters the waiters' table between others, so that a wake-up of
# "the first waiter found" would not pick it by chance
for my $worker ('other-1', 'other-2', 'holder', 'other-3')
{
	my ($hh, $o) = start_call("CALL dex.poll_tasks_wait('sk', '$worker', 1, '1 min', '60 s', NULL, true)");
	push @sk, [ $hh, $o, $worker ];
	ok($node->poll_query_until('postgres', qq{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE query LIKE 'CALL dex.poll_tasks_wait(''sk'', ''$worker''%' AND wait_event_type = 'Extension'}),
		"$worker waits on the queue");
}
$node->safe_psql('postgres', q{
	SELECT dex.complete_task(run_id, task_id, lock_version, '{"json": "1"}') FROM dex.poll_tasks('sk-act', 'a')});
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 3 FROM pg_stat_activity
	 WHERE query LIKE 'CALL dex.poll_tasks_wait(''sk''%' AND wait_event_type = 'Extension'}),
	'the activity\'s completion wakes one waiting worker');
is($node->safe_psql('postgres', qq{SELECT locked_by FROM dex.workflow_task WHERE run_id = '$run_sk'}),
	'holder', 'the one that holds the run');
$sk[2][0]->finish;
like(${ $sk[2][1] }, qr/"historyOmitted": 5/, 'and its task leaves out the 5 events it was shown before');
is(scalar(() = ${ $sk[2][1] } =~ /"timestamp"/g), 4 + 2,
	'it carries the 4 events of its last completion, and the 2 new ones');
$node->safe_psql('postgres', q{SELECT count(*) FROM dex.create_runs('rest', 'sk', '{1, 2, 3}')});
$_->[0]->finish for @sk[0, 1, 3];
is(join(',', map { ${ $_->[1] } =~ /"workflowName": "rest"/ ? 'rest' : 'none' } @sk[0, 1, 3]), 'rest,rest,rest',
	'the other workers get new runs');

# 11. version-aware wake-ups: a waiting worker that declared what it runs is
# woken only for a task it may take; a task of a version one waiter runs and
# another does not goes to the one that runs it, however they entered the
# waiters' table, and one that declared nothing is woken as before
$node->safe_psql('postgres', q{SELECT dex.create_queue('vd', 'workflow')});
sub start_versioned
{
	my ($worker, $version) = @_;
	my $declared = defined $version ? ", names => '{flow}', versions => '{$version}'" : '';
	my ($hh, $o) = start_call("CALL dex.poll_tasks_wait('vd', '$worker', 1, '1 min', '60 s'$declared)");
	ok($node->poll_query_until('postgres', qq{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE query LIKE 'CALL dex.poll_tasks_wait(''vd'', ''$worker''%' AND wait_event_type = 'Extension'}),
		"$worker waits on the queue");
	return [ $hh, $o, $worker ];
}
sub vd_sleeping
{
	return $node->safe_psql('postgres', q{
		SELECT string_agg(substring(query from '''vd'', ''([a-z0-9-]+)'''), ',' ORDER BY 1) FROM pg_stat_activity
		 WHERE query LIKE 'CALL dex.poll_tasks_wait(''vd''%' AND wait_event_type = 'Extension'});
}
my @vd = (start_versioned('v1-a', 1), start_versioned('v2-a', 2), start_versioned('v2-b', 2));
$node->safe_psql('postgres', q{SELECT dex.create_run('flow', 'vd', workflow_version => 2)});
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 2 FROM pg_stat_activity
	 WHERE query LIKE 'CALL dex.poll_tasks_wait(''vd''%' AND wait_event_type = 'Extension'}),
	'a version-2 task wakes one waiting worker');
like(vd_sleeping(), qr/^v1-a,v2-[ab]$/, 'a version-2 one: the version-1 worker sleeps on');
is($node->safe_psql('postgres', q{SELECT locked_by LIKE 'v2-_' FROM dex.workflow_task t
	JOIN dex.workflow_run r ON r.id = t.run_id WHERE r.workflow_name = 'flow' AND r.workflow_version = 2}),
	't', 'and it took the task');
$node->safe_psql('postgres', q{SELECT dex.create_run('flow', 'vd', workflow_version => 1)});
$vd[0][0]->finish;
like(${ $vd[0][1] }, qr/"workflowVersion": 1/, 'a version-1 task goes to the version-1 worker');
like(vd_sleeping(), qr/^v2-[ab]$/, 'while the other version-2 worker sleeps on');
$node->safe_psql('postgres', q{SELECT dex.create_run('flow', 'vd', workflow_version => 2)});
$_->[0]->finish for @vd[1, 2];
is(join(',', map { ${ $_->[1] } =~ /"workflowVersion": 2/ ? 'v2' : 'none' } @vd[1, 2]), 'v2,v2',
	'the next version-2 task wakes the other version-2 worker');
# one that declared nothing and one that declared version 1: a version-3 task goes to the first
my @mixed = (start_versioned('v1-b', 1), start_versioned('any', undef));
$node->safe_psql('postgres', q{SELECT dex.create_run('flow', 'vd', workflow_version => 3)});
$mixed[1][0]->finish;
like(${ $mixed[1][1] }, qr/"workflowVersion": 3/, 'a task no declaring worker runs wakes the one that declared nothing');
is(vd_sleeping(), 'v1-b', 'the version-1 worker sleeps on');
$node->safe_psql('postgres', q{SELECT dex.create_run('flow', 'vd', workflow_version => 1)});
$mixed[0][0]->finish;
like(${ $mixed[0][1] }, qr/"workflowVersion": 1/, 'and takes the next version-1 task');

# 12. dex.stop_waiting: a worker shutting down ends its waiting calls without
# a cancel request; each returns empty, as at its timeout, and leases nothing
$node->safe_psql('postgres', q{SELECT dex.create_queue('sw', 'workflow')});
my @sw = map { [ start_call("CALL dex.poll_tasks_wait('sw', 'leaving', 1, '1 min', '60 s')") ] } 1 .. 2;
my ($other, $other_out) = start_call("CALL dex.poll_tasks_wait('sw', 'staying', 1, '1 min', '60 s')");
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 3 FROM pg_stat_activity
	 WHERE query LIKE 'CALL dex.poll_tasks_wait(''sw''%' AND wait_event_type = 'Extension'}),
	'two calls of one worker and one of another wait');
$t0 = time;
is($node->safe_psql('postgres', q{SELECT dex.stop_waiting('leaving')}), '2', 'stop_waiting ends the two');
$_->[0]->finish for @sw;
cmp_ok(time - $t0, '<', 5, 'at once');
is(join(',', map { ${ $_->[1] } =~ s/\s+$//r } @sw), '[]|,[]|', 'each returns no task, as at its timeout');
is($node->safe_psql('postgres', q{SELECT dex.stop_waiting('leaving')}), '0', 'none of that worker waits now');
$node->safe_psql('postgres', q{SELECT dex.create_run('after', 'sw')});
$other->finish;
like($$other_out, qr/"workflowName": "after"/, 'the other worker waited on, and takes the next task');
unlike(slurp_file($node->logfile), qr/canceling statement/, 'and the server log has no cancel error');

# 13. a waiter that ends without serving its wake-up passes it on: a worker
# killed mid-activity leaves its waiting connection behind, and the commit
# that wakes it (the activity's retry, say) finds its backend about to learn
# that its client is gone.  Another waiter gets the task at once, not at its
# next poll
$node->safe_psql('postgres', q{SELECT dex.create_queue('po', 'workflow')});
my %po;
for my $worker ('po-1', 'po-2')
{
	my ($hh, $o) = start_call("CALL dex.poll_tasks_wait('po', '$worker', 1, '1 min', '60 s')");
	$po{$worker} = [ $hh, $o ];
	ok($node->poll_query_until('postgres', qq{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE query LIKE 'CALL dex.poll_tasks_wait(''po'', ''$worker''%' AND wait_event_type = 'Extension'}),
		"$worker waits on the queue");
}
# a commit wakes the first waiter it finds in the table (by backend id): kill that one
my ($killed, $alive) = split /\|/, $node->safe_psql('postgres', q{
	SELECT string_agg(substring(a.query from '''po'', ''(po-[12])'''), '|' ORDER BY b)
	  FROM pg_stat_get_backend_idset() b JOIN pg_stat_activity a ON a.pid = pg_stat_get_backend_pid(b)
	 WHERE a.query LIKE 'CALL dex.poll_tasks_wait(''po''%'});
$po{$killed}[0]->signal('KILL');
$po{$killed}[0]->finish;
# at once: its backend checks its client every 2 s while it sleeps
$t0 = time;
$node->safe_psql('postgres', q{SELECT dex.create_run('passed-on', 'po')});
$po{$alive}[0]->finish;
like(${ $po{$alive}[1] }, qr/"workflowName": "passed-on"/, 'the other waiter takes the task');
cmp_ok(time - $t0, '<', 10, 'within seconds, not at its timeout (60 s)');
is($node->safe_psql('postgres', q{
	SELECT t.locked_by FROM dex.workflow_task t JOIN dex.workflow_run r ON r.id = t.run_id
	 WHERE r.workflow_name = 'passed-on'}), $alive, 'leased to it, not to the killed worker');

$node->stop;
done_testing();
