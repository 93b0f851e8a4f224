# No role can stall dex by taking one of its locks.  dex's locks (src/engine/locks.c)
# are object locks whose class is dex.lease: no SQL statement takes them.
# Before 1.2 the capacity lock of a queue's polls was an advisory lock with a
# documented key, which any login role could take, and the rebuild lock was
# a lock on the table dex.lease, on which any role with USAGE on schema dex
# can hold ACCESS SHARE (PREPARE locks what it names before the privilege
# check).  Here a role with no dex grants holds every advisory key dex used,
# and a tenant of another queue holds ACCESS SHARE on every relation of
# schema dex, while dex's callers poll a queue with a capacity, write tasks
# and the scheduler rebuilds the task tables: nothing waits for them.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = dex_cluster('dex');
$node->safe_psql('postgres', q{
	CREATE EXTENSION dex;
	CREATE ROLE nobody LOGIN;
	CREATE ROLE tenant LOGIN IN ROLE dex_client, dex_worker;
	SELECT dex.create_queue('cap', 'workflow', capacity => 2);
	SELECT dex.create_queue('act', 'activity', capacity => 1);
	SELECT dex.revoke_queue(q, r) FROM unnest('{cap,act}'::text[]) q,
	       unnest('{dex_client,dex_worker}'::regrole[]) r;
	CREATE ROLE owner_of_cap LOGIN IN ROLE dex_client, dex_worker;
	SELECT dex.grant_queue('cap', 'owner_of_cap'), dex.grant_queue('act', 'owner_of_cap');
	SELECT dex.create_run('w', 'cap') FROM generate_series(1, 3);
});
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM dex.lease WHERE name = 'tasks_valid'"),
	'the scheduler marked the task tables valid');
my $cap_id = $node->safe_psql('postgres', q{SELECT id FROM dex.queue WHERE name = 'cap'});
my $act_id = $node->safe_psql('postgres', q{SELECT id FROM dex.queue WHERE name = 'act'});

# nobody: every advisory key dex ever used, in both key spaces
my $nobody = $node->background_psql('postgres', on_error_stop => 1);
$nobody->query_safe(qq{
	SET ROLE nobody;
	BEGIN;
	SELECT pg_advisory_lock(6579576, $cap_id), pg_advisory_lock(6579576, $act_id),
	       pg_advisory_xact_lock(6579576, 0), pg_advisory_lock(6579576::bigint << 32 | $cap_id);
});
# the tenant: ACCESS SHARE on every table and sequence of schema dex
my $tenant = $node->background_psql('postgres', on_error_stop => 1);
my @relations = split /\n/, $node->safe_psql('postgres', q{
	SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	 WHERE n.nspname = 'dex' AND c.relkind IN ('r', 'p', 'S') ORDER BY 1});
$tenant->query_safe("SET ROLE tenant; BEGIN;\n"
	. join("\n", map { "PREPARE p$_ AS SELECT 1 FROM $relations[$_];" } 0 .. $#relations));
my $tenant_pid = $tenant->query_safe('SELECT pg_backend_pid()');
is($node->safe_psql('postgres', qq{
	SELECT count(*) FROM pg_locks WHERE pid = $tenant_pid AND locktype = 'relation'
	   AND mode = 'AccessShareLock' AND granted AND relation = 'dex.lease'::regclass}),
	'1', 'the tenant holds ACCESS SHARE on dex.lease, which the rebuild lock was before 1.2');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted}),
	'4', 'nobody holds the advisory keys of the capacity lock before 1.2');

# the callers, who would wait forever behind such locks, give up after 5 s
my $as_owner = "SET lock_timeout = '5s'; SET ROLE owner_of_cap;";
is($node->safe_psql('postgres', qq{$as_owner
	SELECT count(*) FROM dex.poll_tasks('cap', 'w1', 1);}),
	'1', 'a poll of a queue with a capacity is not blocked');
is($node->safe_psql('postgres', qq{$as_owner
	SELECT count(*) FROM (SELECT dex.complete_task(run_id, 0, lock_version,
	       '[{"id": 1, "scheduleActivity": {"name": "a", "queue": "act"}}]')
	  FROM dex.poll_tasks('cap', 'w2', 1)) s;}),
	'1', 'a second poll and a completion are not blocked');
is($node->safe_psql('postgres', qq{$as_owner
	SELECT count(*) FROM dex.poll_tasks('act', 'a1', 5);}),
	'1', 'a poll of an activity queue with a capacity is not blocked');
is($node->safe_psql('postgres', qq{$as_owner
	CALL dex.wait_for_tasks('cap', '0 s');}), 't', 'dex.wait_for_tasks is not blocked');

# a rebuild of the task tables, as after a crash, while both still hold their locks
$node->safe_psql('postgres', q{
	DELETE FROM dex.lease WHERE name = 'tasks_valid';
	SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'dex scheduler';
});
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM dex.lease WHERE name = 'tasks_valid'"),
	'the scheduler rebuilds the task tables');
is($node->safe_psql('postgres', qq{$as_owner
	SELECT dex.create_run('w', 'cap') IS NOT NULL;}),
	't', 'starting a run after the rebuild is not blocked');
is($node->safe_psql('postgres', qq{
	SELECT count(*) FROM pg_stat_activity WHERE datname = 'postgres' AND wait_event_type = 'Lock'}),
	'0', 'nobody waits for a lock');

$nobody->query_safe('ROLLBACK');
$tenant->query_safe('ROLLBACK');
$nobody->quit;
$tenant->quit;
$node->stop;
done_testing();
