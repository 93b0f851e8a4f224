# The launcher serves several databases at once, each with its own scheduler
# and maintenance worker; DROP DATABASE and ALTER DATABASE RENAME are not
# blocked by them; with dex.database = '*' it serves every database where
# dex is installed, and notices CREATE EXTENSION; SIGHUP changes the list.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = dex_cluster('dex', database => 'one, two', conf => "max_worker_processes = 20\n");
$node->safe_psql('postgres', 'CREATE DATABASE one; CREATE DATABASE two; CREATE DATABASE three;');

sub workers
{
	return $node->safe_psql('postgres', q{
		SELECT coalesce(string_agg(datname || ':' || backend_type, ' ' ORDER BY datname, backend_type), '')
		  FROM pg_stat_activity WHERE backend_type IN ('dex scheduler', 'dex maintenance')});
}

ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 4 FROM pg_stat_activity WHERE backend_type IN ('dex scheduler', 'dex maintenance')}),
	'two databases, two workers each');
is(workers(), 'one:dex maintenance one:dex scheduler two:dex maintenance two:dex scheduler',
	'the listed databases are served');

# a timer fires in each database: each has its own scheduler
for my $db ('one', 'two')
{
	$node->safe_psql($db, q{
		CREATE EXTENSION dex;
		SELECT dex.create_queue('wf', 'workflow');
		SELECT dex.create_run('flow', 'wf');
		SELECT dex.complete_task(run_id, 0, lock_version, '[{"id": 1, "startTimer": {"delay": "0.3s"}}]')
		  FROM dex.poll_tasks('wf', 'w');
	});
}
for my $db ('one', 'two')
{
	ok($node->poll_query_until($db, q{SELECT count(*) = 1 FROM dex.poll_tasks('wf', 'w')}),
		"the timer fired in database $db");
}

# DROP DATABASE is not blocked by the workers, and the others go on
my ($ret, $out, $err) = $node->psql('postgres', 'DROP DATABASE two');
is($ret, 0, 'DROP DATABASE of a served database succeeds') or diag($err);
ok($node->poll_query_until('postgres', q{
	SELECT string_agg(datname || ':' || backend_type, ' ' ORDER BY datname, backend_type)
	       = 'one:dex maintenance one:dex scheduler'
	  FROM pg_stat_activity WHERE backend_type IN ('dex scheduler', 'dex maintenance')}),
	'the dropped database is no longer served, the other one still is');

# renaming a served database works too; the old name is no longer served
($ret, $out, $err) = $node->psql('postgres', 'ALTER DATABASE one RENAME TO uno');
is($ret, 0, 'ALTER DATABASE RENAME of a served database succeeds') or diag($err);
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type IN ('dex scheduler', 'dex maintenance')}),
	'a renamed database is served only under a listed name');

# "*": every database with dex installed, and one where it is installed later
$node->append_conf('postgresql.conf', "dex.database = '*'\n");
$node->reload;
ok($node->poll_query_until('postgres', q{
	SELECT string_agg(datname || ':' || backend_type, ' ' ORDER BY datname, backend_type)
	       = 'uno:dex maintenance uno:dex scheduler'
	  FROM pg_stat_activity WHERE backend_type IN ('dex scheduler', 'dex maintenance')}),
	'with "*" only the database with dex is served');
$node->safe_psql('three', 'CREATE EXTENSION dex');
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 2 FROM pg_stat_activity
	 WHERE backend_type IN ('dex scheduler', 'dex maintenance') AND datname = 'three'}),
	'CREATE EXTENSION dex makes the launcher serve the database');
$node->safe_psql('three', q{
	SELECT dex.create_queue('wf', 'workflow');
	SELECT dex.create_run('flow', 'wf');
	SELECT dex.complete_task(run_id, 0, lock_version, '[{"id": 1, "startTimer": {"delay": "0.3s"}}]')
	  FROM dex.poll_tasks('wf', 'w');
});
ok($node->poll_query_until('three', q{SELECT count(*) = 1 FROM dex.poll_tasks('wf', 'w')}),
	'and its timers fire');

# the launcher logs no crash loop for databases without dex
my $log = slurp_file($node->logfile);
my $restarts = () = $log =~ /exited; restarting/g;
cmp_ok($restarts, '<=', 2, 'databases without dex cause no restart loop');

$node->stop;
done_testing();
