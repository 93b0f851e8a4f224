# A revoke reaches calls that are already waiting.  Two roles wait for the
# tasks of queue "rv" in dex.poll_tasks_wait: "revoked", which may use it
# through dex_worker, and "kept", which has a grant of its own.  The queue is
# revoked from dex_worker: the waiting call of "revoked" is refused at once
# (42501), though it looked and was allowed before it slept; a run created
# then is leased by "kept" only, and nothing is leased to a role that could
# never complete it.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = dex_cluster('revoke');
$node->safe_psql('postgres', q{
	CREATE EXTENSION dex;
	SELECT dex.create_queue('rv', 'workflow');
	CREATE ROLE revoked IN ROLE dex_worker;
	CREATE ROLE kept IN ROLE dex_worker;
	SELECT dex.grant_queue('rv', 'kept');
});

sub waiting_calls
{
	my ($n) = @_;
	return $node->poll_query_until('postgres', qq{
		SELECT count(*) = $n FROM pg_stat_activity
		 WHERE query LIKE '%-- dex: waiting for tasks on queue "rv"' AND state = 'active'});
}

my ($h_revoked, $out_revoked) = dex_psql_start($node, 'SET SESSION AUTHORIZATION revoked',
	q{CALL dex.poll_tasks_wait('rv', 'w-revoked', 10, '1 min', '60 s')});
ok(waiting_calls(1), 'the call of "revoked" waits');
my ($h_kept, $out_kept) = dex_psql_start($node, 'SET SESSION AUTHORIZATION kept',
	q{CALL dex.poll_tasks_wait('rv', 'w-kept', 10, '1 min', '60 s')});
ok(waiting_calls(2), 'so does the call of "kept"');

my $revoked_at = time;
$node->safe_psql('postgres', q{SELECT dex.revoke_queue('rv', 'dex_worker')});
ok(waiting_calls(1), 'the revoke ends the waiting call of the role it concerns');
cmp_ok(time - $revoked_at, '<', 30, 'at once, not when its 60 s wait times out');
$h_revoked->finish;
like(slurp_file($node->logfile), qr/ERROR:  permission denied for queue "rv"/,
	'refused: permission denied for queue "rv"');
is(${ $out_revoked }, '', 'having leased nothing');

my $run = $node->safe_psql('postgres', q{SELECT dex.create_run('x', 'rv')});
$h_kept->finish;
like(${ $out_kept }, qr/\Q$run\E/, 'a run created then is leased by the call of the role that kept the queue');
is($node->safe_psql('postgres', qq{SELECT locked_by FROM dex.workflow_task WHERE run_id = '$run'}),
	'w-kept', 'and by it only');

$node->stop;
done_testing();
