# The cluster every TAP test of dex starts: a PostgreSQL::Test::Cluster with
# dex preloaded (from where it is installed), serving the database 'postgres'
# unless told otherwise.  A test uses it with
#
#   use FindBin;
#   use lib $FindBin::RealBin;
#   use DexCluster;
#
#   my $node = dex_cluster('dex', conf => "restart_after_crash = on\n");
#
# so that it is found whichever directory prove runs in.
package DexCluster;

use strict;
use warnings;
use Exporter 'import';
use IPC::Run;
use PostgreSQL::Test::Cluster;

our @EXPORT = qw(dex_cluster dex_psql_start);

# dex_cluster(NAME, OPTIONS): a new cluster named NAME, initialised, with
#   shared_preload_libraries = 'dex'
#   dex.database = OPTIONS{database} (default 'postgres')
# and the lines of OPTIONS{conf} after them in postgresql.conf, started.
# OPTIONS{init} is a hash ref of options for PostgreSQL::Test::Cluster::init
# (such as allows_streaming => 1).
sub dex_cluster
{
	my ($name, %options) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%{ $options{init} // {} });
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'dex'\n"
		  . "dex.database = '" . ($options{database} // 'postgres') . "'\n"
		  . ($options{conf} // ''));
	$node->start;
	return $node;
}

# dex_psql_start(NODE, COMMANDS...): a psql of its own runs the commands (a -c each, each its
# own transaction) in NODE's database 'postgres', in the background, printing rows unaligned
# and nothing else; returns the IPC::Run harness (finish it to wait) and a ref to its output.
sub dex_psql_start
{
	my ($node, @commands) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-A', '-t', '-q', '-d', $node->connstr('postgres'),
		  map { ('-c', $_) } @commands ],
		'>', \$out, '2>', \$err);
	return ($h, \$out);
}

1;
