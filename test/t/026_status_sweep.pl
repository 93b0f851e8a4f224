# The status sweep (1.11, src/engine/status_index.c) beside the transactions
# that change runs.  Every run that is not COMPLETED and older than the sweep's
# horizon is in dex.run_status_index with its status; the sweep skips the runs
# a transaction holds and stops there, so a transaction that changes thousands
# of runs' statuses while the sweep goes over them (as a batch of completions
# does, in its own order) never meets a deadlock, and once it commits the sweep
# goes on and the index is right.  (Before, the sweep inserted rows that such a
# transaction's trigger was inserting too, and each waited for the other.)  A
# restart does not stop the sweep until the old worker's lease expires.
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
	CREATE EXTENSION dex;
	SELECT dex.create_queue('wf', 'workflow');
	SELECT count(*) FROM dex.create_runs('w', 'wf', array_fill(NULL::jsonb, ARRAY[10000]));
	SELECT count(*) FROM dex.create_runs('w', 'wf', array_fill(NULL::jsonb, ARRAY[10000]));
	SELECT count(*) FROM dex.create_runs('w', 'wf', array_fill(NULL::jsonb, ARRAY[10000]));
});

# what must hold once the sweep has passed every run
my $index_right = q{
	SELECT (SELECT horizon > (SELECT id FROM dex.workflow_run ORDER BY id DESC LIMIT 1) FROM dex.run_status_sweep)
	   AND NOT EXISTS (SELECT FROM dex.workflow_run r LEFT JOIN dex.run_status_index i ON i.run_id = r.id
	                    WHERE r.status <> 'COMPLETED' AND i.status IS DISTINCT FROM r.status)
	   AND NOT EXISTS (SELECT FROM dex.run_status_index i LEFT JOIN dex.workflow_run r ON r.id = i.run_id
	                    WHERE r.status IS NULL OR r.status = 'COMPLETED')};
ok($node->poll_query_until('postgres', $index_right), 'the sweep indexes 30,000 CREATED runs ten seconds old (dex.status_sweep_age)');
is($node->safe_psql('postgres', q{SELECT status || ' ' || count(*) FROM dex.run_status_index GROUP BY status}),
	'CREATED 30000', 'each with its status');

# The index emptied and the sweep started over (as after a restore), and at the same time one
# transaction changes every run's status, in an order of its own, and holds them a while.
my $log_start = -s $node->logfile;
my $bulk = $node->background_psql('postgres');
$node->safe_psql('postgres', q{
	UPDATE dex.run_status_sweep SET horizon = '00000000-0000-0000-0000-000000000000', swept_at = '-infinity';
	DELETE FROM dex.run_status_index;
});
$bulk->query_safe(q{
	BEGIN;
	UPDATE dex.workflow_run SET status = CASE WHEN x.h % 3 = 0 THEN 'COMPLETED' WHEN x.h % 3 = 1 THEN 'FAILED'
	                                          ELSE 'RUNNING' END
	  FROM (SELECT id AS rid, abs(hashtext(id::text)) AS h FROM dex.workflow_run) x WHERE id = x.rid;
});
sleep 2;
is($node->safe_psql('postgres', q{
	SELECT swept_at > '-infinity' AND horizon <= (SELECT id FROM dex.workflow_run ORDER BY id LIMIT 1)
	  FROM dex.run_status_sweep}),
	't', 'the sweep tries, and does not pass the runs the transaction holds');
$bulk->query_safe('COMMIT');
$bulk->quit;
ok($node->poll_query_until('postgres', $index_right), 'once it commits, the sweep goes on and the index is right');
is($node->safe_psql('postgres', q{
	SELECT string_agg(status || ' ' || n, ', ' ORDER BY status)
	  FROM (SELECT status, count(*) n FROM dex.run_status_index GROUP BY 1) s}),
	$node->safe_psql('postgres', q{
	SELECT string_agg(status || ' ' || n, ', ' ORDER BY status)
	  FROM (SELECT status, count(*) n FROM dex.workflow_run WHERE status <> 'COMPLETED' GROUP BY 1) s}),
	'every FAILED and RUNNING run is there, and no COMPLETED one');
my $log = slurp_file($node->logfile, $log_start);
unlike($log, qr/deadlock detected/, 'no deadlock');
unlike($log, qr/ERROR/, 'no error');

# A restart: the new maintenance worker takes the lease of the one that is gone at once (not
# when it expires, four minutes later), a new run is swept, a terminated one indexed.
$node->restart;
$node->safe_psql('postgres', q{
	SELECT dex.create_run('w', 'wf');
	SELECT dex.terminate_run(id) FROM (SELECT id FROM dex.workflow_run WHERE status = 'RUNNING' ORDER BY id LIMIT 1) r;
});
my $newest = $node->safe_psql('postgres', q{SELECT id FROM dex.workflow_run ORDER BY id DESC LIMIT 1});
ok($node->poll_query_until('postgres', qq{
	SELECT horizon > '$newest' FROM dex.run_status_sweep}, 't'),
	'after a restart the sweep goes on within seconds');
ok($node->poll_query_until('postgres', $index_right), 'and the index is right');

done_testing();
