# DROP EXTENSION dex deletes every run with the extension's tables: while a
# database has runs it is refused (2BP01), DROP SCHEMA dex CASCADE too,
# unless the operator sets dex.allow_drop_with_runs.  The schema dex, made
# by CREATE EXTENSION but not a member of the extension, goes with it when
# nothing else is in it.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = dex_cluster('dex');

my $schema = q{SELECT count(*) FROM pg_namespace WHERE nspname = 'dex'};
my $ext = q{SELECT count(*) FROM pg_extension WHERE extname = 'dex'};

$node->safe_psql('postgres', q{
	CREATE EXTENSION dex;
	SELECT dex.create_queue('wf', 'workflow');
	SELECT dex.create_run('w', 'wf');
});

my ($ret, $out, $err) = $node->psql('postgres', 'DROP EXTENSION dex', extra_params => ['-v', 'VERBOSITY=verbose']);
like($err, qr/2BP01.*cannot drop extension dex: this database has workflow runs/s,
	'DROP EXTENSION is refused while there are runs');
like($err, qr/SET dex.allow_drop_with_runs = on/, 'and says how to do it anyway');
($ret, $out, $err) = $node->psql('postgres', 'DROP EXTENSION dex CASCADE');
like($err, qr/has workflow runs/, 'with CASCADE too');
($ret, $out, $err) = $node->psql('postgres', 'DROP SCHEMA dex CASCADE');
like($err, qr/has workflow runs/, 'DROP SCHEMA dex CASCADE too');
is($node->safe_psql('postgres', q{SELECT count(*) FROM dex.workflow_run}), '1', 'the run is still there');

# only a superuser may say it is meant
$node->safe_psql('postgres', q{CREATE ROLE plain LOGIN});
($ret, $out, $err) = $node->psql('postgres', 'SET ROLE plain; SET dex.allow_drop_with_runs = on');
like($err, qr/permission denied to set parameter/, 'a plain role cannot set dex.allow_drop_with_runs');

$node->safe_psql('postgres', q{SET dex.allow_drop_with_runs = on; DROP EXTENSION dex});
is($node->safe_psql('postgres', $ext), '0', 'with dex.allow_drop_with_runs the extension is dropped');
is($node->safe_psql('postgres', $schema), '0', 'and no empty schema dex is left behind');

# no runs: nothing to refuse; a user's own object in schema dex keeps the schema
$node->safe_psql('postgres', q{CREATE EXTENSION dex; SELECT dex.create_queue('wf', 'workflow')});
$node->safe_psql('postgres', q{DROP EXTENSION dex});
is($node->safe_psql('postgres', "SELECT ($ext) + ($schema)"), '0',
	'without runs DROP EXTENSION needs nothing, and leaves no schema');
$node->safe_psql('postgres', q{CREATE EXTENSION dex; CREATE TABLE dex.mine (x int); INSERT INTO dex.mine VALUES (1)});
$node->safe_psql('postgres', q{DROP EXTENSION dex});
is($node->safe_psql('postgres', q{SELECT x FROM dex.mine}), '1', 'a schema dex that holds other objects stays, with them');

# DROP EXTENSION under a hostile search_path runs none of the attacker's code: an
# operator = (oid, integer) matches a comparison with a literal better than pg_catalog's
$node->safe_psql('postgres', q{DROP TABLE dex.mine; DROP SCHEMA dex; CREATE EXTENSION dex;
	CREATE SCHEMA evil; CREATE TABLE evil.ran (what text);
	CREATE FUNCTION evil.eq(oid, integer) RETURNS boolean LANGUAGE plpgsql AS
	  $$BEGIN INSERT INTO evil.ran VALUES ('eq'); RETURN $1::integer = $2; END$$;
	CREATE OPERATOR evil.= (LEFTARG = oid, RIGHTARG = integer, FUNCTION = evil.eq);
	CREATE FUNCTION evil.exists(boolean) RETURNS boolean LANGUAGE plpgsql AS
	  $$BEGIN INSERT INTO evil.ran VALUES ('exists'); RETURN $1; END$$;});
$node->safe_psql('postgres', q{SET search_path = evil, pg_catalog; DROP EXTENSION dex});
is($node->safe_psql('postgres', q{SELECT count(*) FROM evil.ran}), '0',
	'DROP EXTENSION dex under a hostile search_path runs no attacker code');
is($node->safe_psql('postgres', $schema), '0', 'and still drops the empty schema');
$node->safe_psql('postgres', q{DROP SCHEMA evil CASCADE});

# an extension created again after a drop works
$node->safe_psql('postgres', q{CREATE EXTENSION dex;
	SELECT dex.create_queue('wf', 'workflow'); SELECT dex.create_run('w', 'wf')});
is($node->safe_psql('postgres', q{SELECT count(*) FROM dex.poll_tasks('wf', 'w')}), '1',
	'dex created again works');

# One session through a drop and a create: the queue ids start over (the new
# queue 1 has another name and partition), and what the backend keeps across
# transactions (its queue cache, its kept plans, the queues of the tasks it
# leased) must not lead it to the dropped queue: the new queue's task is found.
# Each psql step is the same session (one psql, statements in sequence).
is( $node->safe_psql(
		'postgres', q{
	SET dex.allow_drop_with_runs = on;
	DROP EXTENSION dex;
	CREATE EXTENSION dex;
	SELECT dex.create_queue('first', 'workflow'), dex.create_queue('first-act', 'activity');
	SELECT dex.create_run('w', 'first') IS NOT NULL;
	SELECT count(*) FROM dex.poll_tasks('first', 'w');
	DROP EXTENSION dex;
	CREATE EXTENSION dex;
	SELECT dex.create_queue('second', 'workflow');
	SELECT dex.create_run('w', 'second') IS NOT NULL;
	SELECT id || ':' || count(*) FROM dex.poll_tasks('second', 'w'), dex.queue WHERE name = 'second' GROUP BY id;
}),
	"|\nt\n1\n\nt\n1:1",
	'in one session, a queue that takes the id of a dropped one gets its own tasks');

$node->stop;
done_testing();
