# A completion's commit is seen, and wakes the worker that takes its work, before its WAL is
# flushed; the completing session then waits for the flush before it goes on: the completions
# a worker passes to CALL dex.poll_tasks_wait, and a dex.complete_task that is a transaction of
# its own.  So the call (or the function) tells the worker its completions were applied only
# once they are durable, and a crash after it returns loses none.  Completions that end or
# start runs, or that commit in a transaction block, are flushed before anyone sees them.
# Whether a commit was flushed when its rows were first seen: the end of its commit record
# (pg_walinspect) against the flush position read then.  The completing sessions sleep 50 ms
# before each flush (commit_delay), which a commit that waits for its flush does before it is
# seen, and an early one after.  fsync is on (the test clusters' default is off), and a slow
# WAL writer keeps what nobody flushed unflushed for seconds.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = dex_cluster('dex',
	conf => "restart_after_crash = on\nautovacuum = off\nwal_writer_delay = '10s'\nfsync = on\n");
$node->safe_psql('postgres', q{
	CREATE EXTENSION dex;
	CREATE EXTENSION pg_walinspect;
	SELECT dex.create_queue('cw-wf', 'workflow');
	SELECT dex.create_queue('cw-act', 'activity');
	-- wait until the query returns the xmin of a row: that xid, and the flush position then
	-- (a nap of 0 spins, for up to 20 s)
	CREATE FUNCTION seen(q text, nap float8 DEFAULT 0.001, OUT xid xid, OUT flushed pg_lsn)
	LANGUAGE plpgsql AS $$
	DECLARE
		deadline timestamptz := clock_timestamp() + interval '20 s';
	BEGIN
		WHILE clock_timestamp() < deadline LOOP
			EXECUTE q INTO xid;
			IF xid IS NOT NULL THEN
				flushed := pg_current_wal_flush_lsn();
				RETURN;
			END IF;
			IF nap > 0 THEN
				PERFORM pg_sleep(nap);
			END IF;
		END LOOP;
	END $$;
	-- the same, spinning on a run's workflow task with a plan made once
	CREATE FUNCTION seen_workflow_task(run uuid, OUT xid xid, OUT flushed pg_lsn)
	LANGUAGE plpgsql AS $$
	DECLARE
		deadline timestamptz := clock_timestamp() + interval '20 s';
	BEGIN
		WHILE clock_timestamp() < deadline LOOP
			SELECT t.xmin INTO xid FROM dex.workflow_task t WHERE t.run_id = run;
			IF xid IS NOT NULL THEN
				flushed := pg_current_wal_flush_lsn();
				RETURN;
			END IF;
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

# a new run whose first workflow task is leased: its id and lock version (other tasks of the
# queue, such as a child's, are leased and left)
sub leased_run
{
	my ($name) = @_;
	return split ' ', $node->safe_psql('postgres', qq{
		SELECT dex.create_run('$name', 'cw-wf') AS run \\gset
		SELECT :'run' || ' ' || lock_version FROM dex.poll_tasks('cw-wf', 'w', 100)
		 WHERE run_id = :'run'});
}

# CALL dex.poll_tasks_wait completing the task with these commands, then waiting for
# $timeout, in a psql of its own: the IPC::Run harness and the output's ref
sub complete_and_wait
{
	my ($run, $v, $commands, $timeout) = @_;
	return dex_psql_start($node, 'SET commit_delay = 50000', 'SET commit_siblings = 0', qq{
			CALL dex.poll_tasks_wait('cw-wf', 'w', 1, '1 min', '$timeout', NULL, false,
				ARRAY['$run']::uuid[], ARRAY[0], ARRAY[$v]::bigint[], ARRAY['$commands']::jsonb[])});
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

# 1. a completion that schedules an activity: seen at once, flushed before the call returns
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

# 3. dex.complete_task in a transaction of its own: seen before its flush, which it waits for
# before it returns
sub spin_until_seen
{
	my ($query) = @_;
	my ($h, $out) = dex_psql_start($node, $query);
	# it spins before the completion commits
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE 'SELECT * FROM seen%'")
	  or die 'the spinning session did not start';
	return ($h, $out);
}

# runs whose activity is leased: [run, activity lock version]
my @leased;
for my $i (1 .. 10)
{
	my ($r, $lv) = leased_run("act$i");
	$node->safe_psql('postgres', qq{SELECT dex.complete_task('$r', 0, $lv, '$schedule')});
	push @leased, [ $r, $node->safe_psql('postgres', qq{
		SELECT lock_version FROM dex.poll_tasks('cw-act', 'aw', 100) WHERE run_id = '$r'}) ];
}
($unflushed, $flushed_at_return) = (0, 0);
for my $l (@leased)
{
	my ($r, $lv) = @$l;
	$since = insert_lsn();
	my ($spinner, $out) = spin_until_seen("SELECT * FROM seen_workflow_task('$r')");
	$node->safe_psql('postgres', qq{SET commit_delay = 50000; SET commit_siblings = 0;
		SELECT dex.complete_task('$r', 1, $lv, '"done"')});
	my $returned = $node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()');
	$spinner->finish;
	my ($x, $f) = split /\|/, $$out;
	chomp $f;
	$unflushed += was_flushed($x, $since, $f) eq 'f';
	$flushed_at_return += was_flushed($x, $since, $returned) eq 't';
}
# the old way flushed before the task could be seen: never
cmp_ok($unflushed, ">=", 8,
	"the next workflow task was seen before the activity's completion was flushed ($unflushed of 10)");
is($flushed_at_return, 10, 'and the completion was flushed when dex.complete_task returned');

# in a transaction block the commit waits for its flush, as always
my ($r, $lv) = leased_run('block');
$since = insert_lsn();
my ($spinner, $out) = spin_until_seen(
	"SELECT * FROM seen('SELECT xmin FROM dex.activity_task WHERE run_id = ''$r''', 0)");
$node->safe_psql('postgres', qq{SET commit_delay = 50000; SET commit_siblings = 0;
	BEGIN; SELECT dex.complete_task('$r', 0, $lv, '$schedule'); COMMIT;});
$spinner->finish;
($xid, $flushed) = split /\|/, $$out;
chomp $flushed;
is(was_flushed($xid, $since, $flushed), 't', 'a completion in BEGIN ... COMMIT is flushed before it is seen');

# one that ends its run is flushed before it is seen
($r, $lv) = leased_run('last');
$since = insert_lsn();
($spinner, $out) = spin_until_seen("SELECT * FROM seen('SELECT xmin FROM dex.workflow_run "
	  . "WHERE id = ''$r'' AND status = ''COMPLETED''', 0)");
$node->safe_psql('postgres', qq{SET commit_delay = 50000; SET commit_siblings = 0;
	SELECT dex.complete_task('$r', 0, $lv, '[{"completeRun": {}}]')});
$spinner->finish;
($xid, $flushed) = split /\|/, $$out;
chomp $flushed;
is(was_flushed($xid, $since, $flushed), 't', 'a dex.complete_task that ends its run is flushed before it is seen');

done_testing();
