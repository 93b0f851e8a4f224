# The interpreter runs the SQL steps of definitions of different owners, and
# nothing one owner's step leaves behind reaches another's: a dex_admin's
# definition defers every constraint, seeds random() and takes a session
# advisory lock; a superuser's definition, run in the same pass, inserts into
# tables with a DEFERRABLE INITIALLY IMMEDIATE and an INITIALLY DEFERRED
# foreign key (both work) and draws a random number that is not the one
# after the admin's seed; the advisory lock is gone once the admin's step
# ends.  Also: the plain event of a user task is refused (only
# dex.complete_user_task sends it), and a 12,000-step linear definition completes (the loop
# guard counts steps beyond the definition's size).  A step that traps the
# cancel of dex.sql_step_timeout fails all the same, and holds nobody up
# beyond the timeout: the interpreter stops itself and its successor fails
# that run.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = dex_cluster('owners');
$node->safe_psql('postgres', q{
	CREATE EXTENSION dex;
	SELECT dex.create_queue('own-wf', 'workflow');
	CREATE TABLE parent (id integer PRIMARY KEY);
	INSERT INTO parent VALUES (1);
	CREATE TABLE child_immediate (parent_id integer REFERENCES parent DEFERRABLE INITIALLY IMMEDIATE);
	CREATE TABLE child_deferred (parent_id integer REFERENCES parent DEFERRABLE INITIALLY DEFERRED);
	CREATE ROLE owner_admin LOGIN IN ROLE dex_admin;
	SET ROLE owner_admin;
	SELECT dex.create_definition('admin-steps', 1, '{"steps": [
	  {"id": "defer", "type": "sql", "sql": "SET CONSTRAINTS ALL DEFERRED", "next": "seed"},
	  {"id": "seed", "type": "sql", "sql": "SELECT setseed(0.25)", "next": "lock"},
	  {"id": "lock", "type": "sql", "sql": "SELECT pg_advisory_lock(770077)", "next": "done"},
	  {"id": "done", "type": "end"}]}');
	RESET ROLE;
	SELECT dex.create_definition('super-steps', 1, '{"steps": [
	  {"id": "immediate", "type": "sql", "sql": "INSERT INTO child_immediate VALUES (1)", "next": "deferred"},
	  {"id": "deferred", "type": "sql", "sql": "INSERT INTO child_deferred VALUES (1)", "next": "draw"},
	  {"id": "draw", "type": "sql", "sql": "SELECT random() AS r", "next": "done"},
	  {"id": "done", "type": "end"}]}');
});

sub wait_for_runs
{
	my ($ids, $what) = @_;
	ok($node->poll_query_until('postgres',
		"SELECT bool_and(status NOT IN ('CREATED', 'RUNNING')) FROM dex.workflow_run WHERE id = ANY ('{$ids}')"),
		$what);
}

sub failures
{
	my ($ids) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT string_agg(workflow_name || ': ' || status || coalesce(' ' || (dex.to_json('dex.v1.Failure', failure)->>'message'), ''),
		                  E'\n' ORDER BY workflow_name, id)
		  FROM dex.workflow_run WHERE id = ANY ('{$ids}') AND status <> 'COMPLETED'});
}

# the runs of both owners made in one transaction: the interpreter's next pass takes them all
my $runs = $node->safe_psql('postgres', q{
	SELECT string_agg(id::text, ',') FROM (
	  SELECT dex.create_run('admin-steps', 'own-wf') AS id
	  UNION ALL SELECT dex.create_run('super-steps', 'own-wf')
	  UNION ALL SELECT dex.create_run('super-steps', 'own-wf')) r});
wait_for_runs($runs, 'the runs of both owners end');
is(failures($runs), '', "every run completed: the admin's deferred constraints did not reach the superuser's steps, "
	. 'and an INITIALLY DEFERRED foreign key works in a step');
is($node->safe_psql('postgres', 'SELECT count(*) FROM child_immediate') . ' '
	. $node->safe_psql('postgres', 'SELECT count(*) FROM child_deferred'), '2 2', 'both inserts of both runs are there');

# the admin's session advisory lock did not outlive its step
is($node->safe_psql('postgres', 'SELECT pg_try_advisory_lock(770077)'), 't',
	"another session takes the advisory lock the admin's step took");
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
	 WHERE l.locktype = 'advisory' AND a.backend_type = 'dex interpreter'}),
	'0', 'the interpreter holds no advisory lock');

# random() after the admin's setseed(0.25) is not predictable from it
my $after_seed = $node->safe_psql('postgres', 'SELECT setseed(0.25); SELECT random()');
my $admin = $node->safe_psql('postgres', q{SELECT dex.create_run('admin-steps', 'own-wf')});
wait_for_runs($admin, "the admin's run ends");
my $super = $node->safe_psql('postgres', q{SELECT dex.create_run('super-steps', 'own-wf')});
wait_for_runs($super, "then the superuser's run ends");
is(failures("$admin,$super"), '', 'both completed');
my $drawn = $node->safe_psql('postgres', qq{SELECT dex.to_json('dex.v1.Payload', result)->>'json' FROM dex.workflow_run WHERE id = '$super'});
ok($drawn =~ /"r":\s*([0-9.e-]+)/, "the superuser's step drew a number ($drawn)");
isnt($1, $after_seed, "it is not the number that follows the admin's seed ($after_seed)");

# a user task is completed by dex.complete_user_task only, and then no longer listed
$node->safe_psql('postgres', q{
	SELECT dex.create_definition('two-approvals', 1, '{"steps": [
	  {"id": "first", "type": "user", "next": "second"},
	  {"id": "second", "type": "user", "next": "done"},
	  {"id": "done", "type": "end"}]}');
});
my $approvals = $node->safe_psql('postgres', q{SELECT dex.create_run('two-approvals', 'own-wf')});
ok($node->poll_query_until('postgres', "SELECT count(*) = 1 FROM dex.user_tasks('$approvals')"),
	'the first user task waits');
my $event = $node->safe_psql('postgres', qq{
	SELECT event->'externalEventWaitStarted'->>'eventId' FROM dex.run_history('$approvals')
	 WHERE event ? 'externalEventWaitStarted'});
like($event, qr/^user:first:\d+$/, 'its event id');
my ($rc, $out, $err) = $node->psql('postgres', qq{SELECT dex.send_external_event('$approvals', '$event', '{}')});
like($err, qr/event id "user:first:\d+" is reserved/, 'the plain event of a user task is refused: it would pass by its checks');
is($node->safe_psql('postgres', "SELECT string_agg(step, ',') FROM dex.user_tasks('$approvals')"),
	'first', 'the first user task still waits');
$node->safe_psql('postgres', qq{SELECT dex.complete_user_task('$approvals', 'first', '{}')});
ok($node->poll_query_until('postgres',
	"SELECT string_agg(step, ',') = 'second' FROM dex.user_tasks('$approvals')"),
	'once completed only the second user task is listed');

# a linear definition longer than the loop guard completes
my $steps = join(',', map { qq({"id": "s$_", "type": "sql", "sql": "SELECT $_ AS n", "next": "s) . ($_ + 1) . '"}' } 1 .. 11999)
	. ',{"id": "s12000", "type": "end"}';
$node->safe_psql('postgres', "SELECT dex.create_definition('long', 1, '{\"steps\": [$steps]}')");
my $long = $node->safe_psql('postgres', q{SELECT dex.create_run('long', 'own-wf')});
wait_for_runs($long, 'the 12,000-step run ends');
is(failures($long), '', 'it completed: no step loops');

# a step that traps the cancel of dex.sql_step_timeout fails with 57014 all the same, and
# holds up the other runs no longer than the timeout and the interpreter's restart
$node->append_conf('postgresql.conf', "dex.sql_step_timeout = '2s'");
$node->reload;
$node->safe_psql('postgres', q{
	SET ROLE owner_admin;
	SELECT dex.create_definition('trap', 1, '{"steps": [
	  {"id": "stubborn", "type": "sql",
	   "sql": "DO $$ BEGIN LOOP BEGIN PERFORM pg_sleep(0.2); EXCEPTION WHEN query_canceled THEN NULL; END; END LOOP; END $$",
	   "next": "done"},
	  {"id": "done", "type": "end"}]}');
});
my $started = time;
my ($trap, $behind) = split /,/, $node->safe_psql('postgres', q{
	SELECT string_agg(id::text, ',' ORDER BY n) FROM (
	  SELECT 1 AS n, dex.create_run('trap', 'own-wf') AS id
	  UNION ALL SELECT 2, dex.create_run('admin-steps', 'own-wf')) r});
wait_for_runs("$trap,$behind", 'the trapping run and the run behind it end');
my $took = time - $started;
is($node->safe_psql('postgres', qq{
	SELECT status || ' ' || (dex.to_json('dex.v1.Failure', failure)->>'type') FROM dex.workflow_run WHERE id = '$trap'}),
	'FAILED SQLSTATE 57014', 'the step that trapped its cancel failed its run with 57014');
like($node->safe_psql('postgres', qq{
	SELECT dex.to_json('dex.v1.Failure', failure)->>'message' FROM dex.workflow_run WHERE id = '$trap'}),
	qr/step "stubborn".*trapped the cancel/, 'the failure says what happened');
is(failures($behind), '', 'the run behind it completed');
ok($took < 30, "both ended within 30 s of their start ($took s): nobody waits beyond the timeout and a restart");
ok($node->log_contains('ran past dex.sql_step_timeout and trapped its cancel'), 'the server log says why the interpreter stopped');

done_testing();
