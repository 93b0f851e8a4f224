# Runs' events published through logical decoding (1.10), read by a real
# consumer: wal2json on a logical replication slot made before any work.
#
# Queue pub-wf publishes its runs' events as JSON, pub-pb as protobuf, and
# quiet-wf not at all.  Runs do an activity, publish an event of their own
# (publishEvent), complete, get terminated; one completion is rolled back
# (its publishEvent must never be seen) and done again; one is in flight,
# uncommitted, when the server crashes (immediate stop), and is done again
# after the restart.  Then the consumer reads the slot: for every run of
# pub-wf it saw each event of the run's history exactly once, with the
# history's sequence and kind, in order; nothing of the rolled-back or
# crashed transactions; nothing of quiet-wf; pub-pb's events under prefix
# dex.pb.  With publishing turned off again, new events are not published.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use DexCluster;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = dex_cluster('publish', conf => "wal_level = logical\nrestart_after_crash = on\n");
# PostgreSQL 15.14 and later load only the output plugins output_plugin_libraries names
if ($node->safe_psql('postgres', q{SELECT count(*) FROM pg_settings WHERE name = 'output_plugin_libraries'}) eq '1')
{
	$node->append_conf('postgresql.conf', "output_plugin_libraries = 'pgoutput, test_decoding, wal2json'\n");
	$node->reload;
}
$node->safe_psql('postgres', q{
	CREATE EXTENSION dex;
	SELECT dex.create_queue('pub-wf', 'workflow'), dex.create_queue('pub-pb', 'workflow'),
	       dex.create_queue('quiet-wf', 'workflow'), dex.create_queue('pub-act', 'activity');
	SELECT 'slot' FROM pg_create_logical_replication_slot('consumer', 'wal2json');
	SELECT 'slot' FROM pg_create_logical_replication_slot('pb_consumer', 'test_decoding');
});
my ($rc, $out, $err) = $node->psql('postgres', q{SELECT dex.alter_queue('pub-wf', publish => true)});
is($rc, 0, 'alter_queue turns publishing on');
unlike($err, qr/WARNING/, 'with wal_level logical, no warning');
$node->safe_psql('postgres', q{SELECT dex.alter_queue('pub-pb', publish => true, publish_format => 'protobuf')});
is($node->safe_psql('postgres', q{SELECT string_agg(name || '=' || coalesce(publish, 'off'), ',' ORDER BY name) FROM dex.queue}),
	'pub-act=off,pub-pb=protobuf,pub-wf=json,quiet-wf=off', 'each queue says how it publishes');

# complete the workflow task of run $run on $queue with $commands (JSON), in $sql's place
sub complete_sql
{
	my ($run, $queue, $commands) = @_;
	return qq{SELECT count(dex.complete_task(run_id, 0, lock_version, '$commands'))
	            FROM dex.poll_tasks('$queue', 'w', 10) WHERE run_id = '$run'};
}

sub start_run
{
	my ($queue, $name) = @_;
	return $node->safe_psql('postgres', qq{SELECT dex.create_run('$name', '$queue', '{"n": 1}')});
}

# Run A: an activity, then publishEvent and completeRun
my $a = start_run('pub-wf', 'order');
$node->safe_psql('postgres', complete_sql($a, 'pub-wf',
	'[{"id": 1, "scheduleActivity": {"name": "charge", "queue": "pub-act"}}]'));
is($node->safe_psql('postgres', qq{
	SELECT count(dex.complete_task(run_id, task_id, lock_version, '"paid"'))
	  FROM dex.poll_tasks('pub-act', 'w', 10) WHERE run_id = '$a'}), '1', 'A\'s activity completes');
$node->safe_psql('postgres', complete_sql($a, 'pub-wf',
	'[{"id": 2, "publishEvent": {"name": "order.paid", "payload": {"json": "{\"total\": 42}"}}},
	  {"id": 3, "completeRun": {"result": {"json": "\"done\""}}}]'));

# Run B: a completion rolled back, then done again with other commands
my $b = start_run('pub-wf', 'order');
$node->safe_psql('postgres', 'BEGIN; ' . complete_sql($b, 'pub-wf',
	'[{"id": 1, "publishEvent": {"name": "never.seen"}}, {"id": 2, "completeRun": {}}]') . '; ROLLBACK;');
$node->safe_psql('postgres', q{UPDATE dex.workflow_task SET locked_until = now() - interval '1 second'});
$node->safe_psql('postgres', complete_sql($b, 'pub-wf',
	'[{"id": 1, "publishEvent": {"name": "order.b"}}, {"id": 2, "completeRun": {}}]'));

# Run C: terminated while it waits on a timer (the run ends at once, without a task)
my $c = start_run('pub-wf', 'order');
$node->safe_psql('postgres', complete_sql($c, 'pub-wf',
	'[{"id": 1, "startTimer": {"name": "wait", "delay": "3600s"}}]'));
$node->safe_psql('postgres', qq{SELECT dex.terminate_run('$c', 'operator')});

# Runs of the other queues
my $q = start_run('quiet-wf', 'order');
$node->safe_psql('postgres', complete_sql($q, 'quiet-wf',
	'[{"id": 1, "publishEvent": {"name": "quiet"}}, {"id": 2, "completeRun": {}}]'));
my $p = start_run('pub-pb', 'order');
$node->safe_psql('postgres', complete_sql($p, 'pub-pb',
	'[{"id": 1, "publishEvent": {"name": "pb"}}, {"id": 2, "completeRun": {}}]'));

# Run D: its completion is in flight, uncommitted, when the server crashes
my $d = start_run('pub-wf', 'order');
my ($h, $hout) = dex_psql_start($node,
	'BEGIN; ' . complete_sql($d, 'pub-wf',
		'[{"id": 1, "publishEvent": {"name": "lost.in.crash"}}, {"id": 2, "completeRun": {}}]')
	  . '; SELECT pg_sleep(600);');
$node->poll_query_until('postgres',
	q{SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE '%pg_sleep(600)%' AND state = 'active' AND pid <> pg_backend_pid()})
  or die 'the in-flight completion did not start';
$node->stop('immediate');
$h->kill_kill;
$node->start;
$node->poll_query_until('postgres', qq{SELECT count(*) = 1 FROM dex.workflow_task WHERE run_id = '$d'})
  or die 'D\'s workflow task was not rebuilt';
$node->safe_psql('postgres', q{UPDATE dex.workflow_task SET locked_until = now() - interval '1 second'});
$node->safe_psql('postgres', complete_sql($d, 'pub-wf',
	'[{"id": 1, "publishEvent": {"name": "after.crash"}}, {"id": 2, "completeRun": {}}]'));

# Publishing off: E's events are not published
$node->safe_psql('postgres', q{SELECT dex.alter_queue('pub-wf', publish => false)});
my $e = start_run('pub-wf', 'order');
$node->safe_psql('postgres', complete_sql($e, 'pub-wf', '[{"id": 1, "completeRun": {}}]'));

# The consumer reads everything once
my @messages = map { decode_json($_) } split /\n/, $node->safe_psql('postgres', q{
	SELECT data FROM pg_logical_slot_get_changes('consumer', NULL, NULL, 'format-version', '2',
	                                             'include-transaction', 'false', 'filter-tables', '*.*',
	                                             'add-msg-prefixes', 'dex')});
my @dex = grep { $_->{action} eq 'M' && $_->{prefix} eq 'dex' } @messages;
ok(scalar(@dex) > 0, 'the consumer received dex messages');
ok(!(grep { !$_->{transactional} } @dex), 'every message is transactional');
my %seen;
for my $m (@dex)
{
	my $body = decode_json($m->{content});
	push @{ $seen{ $body->{runId} } }, $body;
}

for my $run ([ 'A', $a ], [ 'B', $b ], [ 'C', $c ], [ 'D', $d ])
{
	my ($label, $id) = @$run;
	my $history = $node->safe_psql('postgres', qq{
		SELECT string_agg(sequence || ':' || (SELECT k FROM jsonb_object_keys(event) k
		                                        WHERE k NOT IN ('id', 'timestamp')), ',' ORDER BY sequence)
		  FROM dex.run_history('$id')});
	my $got = join ',', map { "$_->{sequence}:$_->{kind}" } @{ $seen{$id} // [] };
	is($got, $history, "run $label: each event of its history once, in order, with its kind");
	ok(!(grep { $_->{queue} ne 'pub-wf' || $_->{workflowName} ne 'order' || $_->{workflowVersion} != 1 }
			@{ $seen{$id} // [] }), "run $label: every message names its queue and workflow");
}
my @published = map { $_->{event}{eventPublished}{name} }
  grep { $_->{kind} eq 'eventPublished' } map { @$_ } values %seen;
is(join(',', sort @published), 'after.crash,order.b,order.paid',
	'publishEvent: the committed ones only, not the rolled-back or the crashed one');
my ($paid) = grep { $_->{kind} eq 'eventPublished' && $_->{event}{eventPublished}{name} eq 'order.paid' } @{ $seen{$a} };
is($paid->{event}{eventPublished}{payload}{json}, '{"total": 42}', 'a published event carries its payload');
my ($activity) = grep { $_->{kind} eq 'activityTaskCompleted' } @{ $seen{$a} };
is($activity->{event}{activityTaskCompleted}{result}{json}, '"paid"', 'an activity\'s result is published');
is(scalar(grep { $_->{kind} eq 'runTerminated' } @{ $seen{$c} }), 1, 'a run terminated at once is published');
ok(!exists $seen{$q}, 'nothing of a queue that does not publish');
ok(!exists $seen{$e}, 'nothing after publishing is turned off');
ok(!(grep { $_->{action} eq 'M' && $_->{prefix} ne 'dex' } @messages), 'wal2json kept the prefix asked for');
# protobuf bodies are bytes: read with test_decoding's binary output
is($node->safe_psql('postgres', qq{
	SELECT count(*) FILTER (WHERE position(convert_to('$p', 'UTF8') IN data) > 0)
	       || '/' || count(*) || '/' || (SELECT count(*) FROM dex.run_history('$p'))
	  FROM pg_logical_slot_get_binary_changes('pb_consumer', NULL, NULL)
	 WHERE position(convert_to('message: transactional: 1 prefix: dex.pb,', 'UTF8') IN data) = 1}),
	do { my $n = $node->safe_psql('postgres', qq{SELECT count(*) FROM dex.run_history('$p')}); "$n/$n/$n" },
	'the protobuf queue: one transactional dex.pb message per event, each naming its run');

# commit order: A's messages all come before B's, which come before D's
my @order = map { decode_json($_->{content})->{runId} } @dex;
my %last;
@last{@order} = (0 .. $#order);
my %first;
for my $i (reverse 0 .. $#order) { $first{ $order[$i] } = $i }
ok($last{$a} < $first{$b} && $last{$b} < $first{$d}, 'runs\' messages arrive in commit order');

# Bad arguments change nothing
($rc, $out, $err) = $node->psql('postgres', q{SELECT dex.alter_queue('pub-pb', publish_format => 'xml')});
like($err, qr/publish format must be "json" or "protobuf"/, 'an unknown format is refused');
($rc, $out, $err) = $node->psql('postgres', q{SELECT dex.alter_queue('quiet-wf', publish_format => 'protobuf')});
like($err, qr/does not publish its events/, 'a format for a queue that does not publish is refused');
is($node->safe_psql('postgres', q{SELECT coalesce(publish, 'off') FROM dex.queue WHERE name = 'quiet-wf'}),
	'off', 'and changes nothing');

$node->stop;
done_testing();
