# The completions a worker passes to CALL dex.poll_tasks_wait commit, when the call then waits,
# without waiting for their WAL to be flushed: the next worker sees their work at once.  The
# call returns (and tells the worker they were applied) only once they are durable, so a crash
# after it returns loses none.  Completions that end or start runs are flushed before anyone
# sees them: a client may read those.  Whether a commit was flushed when its rows were first
# seen: the end of its commit record (pg_walinspect) against the flush position read then.  A
# slow WAL writer keeps what nobody flushed unflushed for seconds.
use strict;
use warnings;
use IPC::Run;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = dex_cluster('dex',
	conf => "restart_after_crash = on\nautovacuum = off\nwal_writer_delay = '10s'\n");
$node->safe_psql('postgres', q{
	CREATE EXTENSION dex;
	CREATE EXTENSION pg_walinspect;
	SELECT dex.create_queue('cw-wf', 'workflow');
	SELECT dex.create_queue('cw-act', 'activity');
	-- wait until the query returns the xmin of a row: that xid, and the flush position then
	CREATE FUNCTION seen(q text, OUT xid xid, OUT flushed pg_lsn) LANGUAGE plpgsql AS $$
	BEGIN
		FOR i IN 1..10000 LOOP
			EXECUTE q INTO xid;
			IF xid IS NOT NULL THEN
				flushed := pg_current_wal_flush_lsn();
				RETURN;
			END IF;
			PERFORM pg_sleep(0.001);
		END LOOP;
	END $$;
	-- whether the commit record of transaction x, written after "since", ends at or before
	-- "flushed" (NULL: there is none)
	CREATE FUNCTION was_flushed(x xid, since pg_lsn, flushed pg_lsn) RETURNS boolean
	LANGUAGE sql AS $$
		SELECT end_lsn <= flushed FROM pg_get_wal_records_info(since, pg_current_wal_flush_lsn())
		 WHERE resource_manager = 'Transaction' AND record_type = 'COMMIT' AND xid = x
	$$;
});

# a new run whose first workflow task is leased: its id and lock version
sub leased_run
{
	my ($name) = @_;
	return split ' ', $node->safe_psql('postgres', qq{
		SELECT dex.create_run('$name', 'cw-wf') AS run \\gset
		SELECT :'run' || ' ' || lock_version FROM dex.poll_tasks('cw-wf', 'w')});
}

# CALL dex.poll_tasks_wait completing the task with these commands, then waiting for
# $timeout, in a psql of its own: the IPC::Run harness and the output's ref
sub complete_and_wait
{
	my ($run, $v, $commands, $timeout) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-A', '-t', '-d', $node->connstr('postgres'), '-c', qq{
			CALL dex.poll_tasks_wait('cw-wf', 'w', 1, '1 min', '$timeout', NULL, false,
				ARRAY['$run']::uuid[], ARRAY[0], ARRAY[$v]::bigint[], ARRAY['$commands']::jsonb[])} ],
		'>', \$out, '2>', \$err);
	return ($h, \$out);
}

# when the rows the query looks for are seen: the xid that wrote them and the flush position
sub seen
{
	my ($query) = @_;
	$query =~ s/'/''/g;
	return split /\|/, $node->safe_psql('postgres', "SELECT * FROM seen('$query')");
}

sub was_flushed
{
	my ($xid, $since, $flushed) = @_;
	return $node->safe_psql('postgres', "SELECT was_flushed('$xid', '$since', '$flushed')");
}

sub insert_lsn
{
	return $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
}

# 1. a completion that schedules an activity: seen at once, flushed by the time the call returns
my $schedule = '[{"id": 1, "scheduleActivity": {"name": "a", "queue": "cw-act"}}]';
my @runs;
my ($unflushed, $flushed_at_return) = (0, 0);
for my $round (1 .. 5)
{
	my ($run, $v) = leased_run("r$round");
	push @runs, $run;
	my $since = insert_lsn();
	my ($h, $out) = complete_and_wait($run, $v, $schedule, '1 s');
	my ($xid, $flushed) = seen("SELECT xmin FROM dex.activity_task WHERE run_id = '$run'");
	$h->finish;
	is($$out, "[]|{t}\n", "round $round: the call applied the completion and returned no task");
	my $returned = $node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()');
	$unflushed += was_flushed($xid, $since, $flushed) eq 'f';
	$flushed_at_return += was_flushed($xid, $since, $returned) eq 't';
}
# the old way flushed before the task could be seen (a WAL writer's round may beat a worker)
cmp_ok($unflushed, '>=', 4,
	"the activity task was seen before its commit was flushed in $unflushed of 5 rounds");
is($flushed_at_return, 5, 'and the commit was flushed when the call returned');

# a crash right after the last call returned: every completion is there
$node->stop('immediate');
$node->start;
is($node->safe_psql('postgres', qq{
	SELECT count(*) FROM unnest(ARRAY['@{[join "','", @runs]}']::uuid[]) r, dex.run_history(r) h
	 WHERE h.event ? 'activityTaskCreated'}),
	'5', 'after a crash, each of the five runs has its activity scheduled');

# 2. a completion that ends a run, or starts one, is flushed before it is seen
my ($run, $v) = leased_run('ender');
my $since = insert_lsn();
my ($h) = complete_and_wait($run, $v, '[{"completeRun": {"result": {"json": "1"}}}]', '30 s');
my ($xid, $flushed) =
  seen("SELECT xmin FROM dex.workflow_run WHERE id = '$run' AND status = 'COMPLETED'");
ok($xid ne '', 'a run ended by a completion of a waiting call is seen ended');
$node->stop('immediate');
$h->finish;
$node->start;
is($node->safe_psql('postgres', "SELECT status FROM dex.get_run('$run')"), 'COMPLETED',
	'it is still ended after a crash while the call waited');
is(was_flushed($xid, $since, $flushed), 't', 'its commit was flushed before it was seen');

($run, $v) = leased_run('parent');
$since = insert_lsn();
($h) = complete_and_wait($run, $v, '[{"id": 1, "startChildRun": {"workflowName": "kid"}}]', '30 s');
($xid, $flushed) = seen("SELECT xmin FROM dex.workflow_run WHERE parent_id = '$run'");
ok($xid ne '', 'a child started by a completion of a waiting call is seen');
$node->stop('immediate');
$h->finish;
$node->start;
is($node->safe_psql('postgres', "SELECT count(*) FROM dex.workflow_run WHERE parent_id = '$run'"),
	'1', 'it is still there after a crash while the call waited');
is(was_flushed($xid, $since, $flushed), 't', 'its commit was flushed before it was seen');

done_testing();
