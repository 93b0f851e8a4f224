# Workflows defined in JSON survive crashes: a five-step definition (a SQL
# task, a service task, a gateway, parallel branches, a user task) is taken
# through every step with an immediate shutdown (a crash) after each, and
# finishes with the right variables; its SQL step's effect is there exactly
# once (it commits with the step's record).  A crash in the middle of a SQL step loses
# that step's transaction, and the step runs again once.  Also: the interpreter worker
# runs per database, and a crash in the middle of its passes loses nothing.  A SQL step
# longer than dex.sql_step_timeout fails its run.  Commits that make no task of a definition's run
# do not wake the interpreter.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = dex_cluster('dex', conf => "restart_after_crash = on\n");

ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dex interpreter'"),
	'the interpreter worker runs');

$node->safe_psql('postgres', q{
	CREATE EXTENSION dex;
	SELECT dex.create_queue('loans', 'workflow');
	SELECT dex.create_queue('checks', 'activity');
	CREATE TABLE audit (id serial, amount integer);
	SELECT dex.create_definition('loan', 1, '{"steps": [
	  {"id": "score", "type": "sql",
	   "sql": "INSERT INTO audit (amount) VALUES (($1->>''amount'')::int) RETURNING ($1->>''amount'')::int / 100 AS score",
	   "next": "check"},
	  {"id": "check", "type": "service", "activity": "credit_check", "queue": "checks", "retryCount": 2,
	   "next": "route"},
	  {"id": "route", "type": "gateway",
	   "conditions": [{"when": "$.amount > 1000", "next": "split"}], "default": "done"},
	  {"id": "split", "type": "parallel", "branches": ["fees", "approve"]},
	  {"id": "fees", "type": "sql", "sql": "SELECT ($1->>''amount'')::int / 50 AS fee", "next": "join"},
	  {"id": "approve", "type": "user", "candidateGroups": ["officers"], "next": "join"},
	  {"id": "join", "type": "join", "next": "done"},
	  {"id": "done", "type": "end"}]}');
});

sub crash
{
	my ($what) = @_;
	$node->stop('immediate');
	$node->start;
	ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dex interpreter'"),
		"the interpreter runs again after a crash $what");
}

my $run = $node->safe_psql('postgres', q{SELECT dex.create_run('loan', 'loans', '{"amount": 5000}')});
crash('after the run was created');

# the SQL step ran, the service task waits for a worker
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM dex.activity_task WHERE run_id = '$run' AND status = 'QUEUED'"),
	'the service task is queued');
crash('after the SQL step');
is($node->safe_psql('postgres', 'SELECT count(*) FROM audit'), '1', 'the SQL step ran once');

# a worker completes the activity
is($node->safe_psql('postgres', q{
	SELECT count(dex.complete_task(run_id, task_id, lock_version, '{"rating": "A"}'))
	  FROM dex.poll_tasks('checks', 'tap-worker');
}), '1', 'the activity is completed');
crash('after the service task');

# the gateway took the large-amount path: the SQL branch ran, the user task waits
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM dex.user_tasks('$run')"),
	'the user task waits');
crash('while the user task waits');
is($node->safe_psql('postgres', "SELECT step || ' ' || candidate_groups::text FROM dex.user_tasks('$run')"),
	'approve {officers}', 'the user task is still listed');

$node->safe_psql('postgres', "SELECT dex.complete_user_task('$run', 'approve', '{\"approved\": true}')");
crash('after the user task was completed');

ok($node->poll_query_until('postgres',
	"SELECT status = 'COMPLETED' FROM dex.workflow_run WHERE id = '$run'"),
	'the run completed');
is($node->safe_psql('postgres', "SELECT dex.payload_value(result) FROM dex.workflow_run WHERE id = '$run'"),
	'{"fee": 100, "score": 50, "amount": 5000, "rating": "A", "approved": true}',
	'with the right variables');
is($node->safe_psql('postgres', 'SELECT count(*) FROM audit'), '1', 'the SQL step ran once in all');
is($node->safe_psql('postgres', "SELECT count(*) FROM dex.user_tasks('$run')"), '0', 'no user task is left');

# a crash while a SQL step runs: its transaction is lost with what it did, and the step runs
# again once, after the restart
$node->safe_psql('postgres', q{
	SELECT dex.create_definition('slow', 1, '{"steps": [
	  {"id": "work", "type": "sql",
	   "sql": "INSERT INTO audit (amount) SELECT 7 FROM pg_sleep(2) RETURNING 7 AS seven", "next": "e"},
	  {"id": "e", "type": "end"}]}');
});
my $slow = $node->safe_psql('postgres', q{SELECT dex.create_run('slow', 'loans')});
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE backend_type = 'dex interpreter' AND wait_event = 'PgSleep'}),
	'the interpreter is in the middle of the SQL step');
$node->stop('immediate');
$node->start;
ok($node->poll_query_until('postgres',
	"SELECT status = 'COMPLETED' FROM dex.workflow_run WHERE id = '$slow'"),
	'the run completed after the crash');
is($node->safe_psql('postgres', "SELECT dex.payload_value(result) FROM dex.workflow_run WHERE id = '$slow'"),
	'{"seven": 7}', 'with the step\'s result');
is($node->safe_psql('postgres', 'SELECT count(*) FROM audit WHERE amount = 7'), '1',
	'the interrupted step\'s effect is there once');

# many runs of SQL steps only, with a crash while the interpreter works through them:
# each finishes, and each SQL step's effect is there exactly once
$node->safe_psql('postgres', q{
	SELECT dex.create_definition('small', 1, '{"steps": [
	  {"id": "a", "type": "sql", "sql": "INSERT INTO audit (amount) VALUES (1) RETURNING 1 AS a", "next": "b"},
	  {"id": "b", "type": "sql", "sql": "SELECT 2 AS b", "next": "e"},
	  {"id": "e", "type": "end"}]}');
	SELECT count(*) FROM dex.create_runs('small', 'loans', array_fill('{}'::jsonb, ARRAY[300]));
});
$node->stop('immediate');
$node->start;
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 300 FROM dex.workflow_run WHERE workflow_name = 'small' AND status = 'COMPLETED'"),
	'300 runs completed across a crash');
is($node->safe_psql('postgres', 'SELECT count(*) FROM audit WHERE amount = 1'), '300',
	'each SQL step committed exactly once');

# dex.sql_step_timeout: a SQL step that runs longer is cancelled (PostgreSQL's statement
# timeout), and its run fails with that error, instead of holding up the interpreter, which
# goes on with the database's other runs
$node->append_conf('postgresql.conf', "dex.sql_step_timeout = '500ms'");
$node->reload;
$node->safe_psql('postgres', q{
	SELECT dex.create_definition('stuck', 1, '{"steps": [
	  {"id": "wait", "type": "sql", "sql": "SELECT pg_sleep(60)", "next": "e"},
	  {"id": "e", "type": "end"}]}');
});
# the interpreter reads the reloaded configuration when it next wakes
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dex interpreter'}),
	'the interpreter runs');
sleep 1;
my $t0 = time;
my $stuck = $node->safe_psql('postgres', q{SELECT dex.create_run('stuck', 'loans')});
ok($node->poll_query_until('postgres', "SELECT status = 'FAILED' FROM dex.runs WHERE id = '$stuck'"),
	'a SQL step longer than dex.sql_step_timeout fails its run');
cmp_ok(time - $t0, '<', 20, 'after the timeout, not after the step\'s 60 s');
like($node->safe_psql('postgres', "SELECT failure::text FROM dex.runs WHERE id = '$stuck'"),
	qr/statement timeout/, 'with the statement timeout\'s error');
my $after = $node->safe_psql('postgres', q{SELECT dex.create_run('small', 'loans')});
ok($node->poll_query_until('postgres', "SELECT status = 'COMPLETED' FROM dex.runs WHERE id = '$after'"),
	'and the interpreter goes on with other runs');

# Wake-ups: commits that make tasks of other workflows (an SDK's) or of activities do not wake
# the interpreter, one that makes a task of a run of a definition does.  With a naptime of an
# hour, a pass is a wake-up, and each pass moves its state_change in pg_stat_activity.
$node->append_conf('postgresql.conf', "dex.interpreter_naptime = '1h'");
$node->reload;
$node->safe_psql('postgres', q{
	SELECT dex.create_queue('sdk', 'workflow');
	SELECT dex.create_queue('sdk_acts', 'activity');
	SELECT dex.create_definition('prompt', 1, '{"steps": [{"id": "e", "type": "end"}]}');
});
ok($node->poll_query_until('postgres', q{
	SELECT state = 'idle' AND now() - state_change > interval '1 second'
	FROM pg_stat_activity WHERE backend_type = 'dex interpreter'}),
	'the interpreter sleeps');
my $interpreter_state = q{SELECT state_change FROM pg_stat_activity WHERE backend_type = 'dex interpreter'};
my $slept = $node->safe_psql('postgres', $interpreter_state);
for my $i (1 .. 10)
{
	my $sdk_run = $node->safe_psql('postgres', q{SELECT dex.create_run('sdk_flow', 'sdk')});
	$node->safe_psql('postgres', qq{
		SELECT lock_version AS v FROM dex.poll_tasks('sdk', 'sdk-worker') \\gset
		SELECT dex.complete_task('$sdk_run', 0, :v,
		  '[{"id": 1, "scheduleActivity": {"name": "charge", "queue": "sdk_acts", "argument": {"json": "1"}}}]');
	});
}
is($node->safe_psql('postgres', q{SELECT count(*) FROM dex.activity_task WHERE name = 'charge'}), '10',
	'ten runs of an SDK workflow scheduled an activity each');
sleep 1;
is($node->safe_psql('postgres', $interpreter_state), $slept,
	'their commits did not wake the interpreter');
$t0 = time;
my $prompt = $node->safe_psql('postgres', q{SELECT dex.create_run('prompt', 'loans')});
ok($node->poll_query_until('postgres', "SELECT status = 'COMPLETED' FROM dex.runs WHERE id = '$prompt'"),
	'a run of a definition wakes it');
cmp_ok(time - $t0, '<', 20, 'at once, not after its naptime');

done_testing();
