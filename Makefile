# dex: durable execution engine as a PostgreSQL extension (PGXS build).
#
#   make && make install     build and install into the PostgreSQL found by pg_config
#   bash test/run-tests.sh   every test suite on a throwaway cluster (see README)
#   bash test/demo.sh        the demo on a throwaway cluster

EXTENSION = dex
# The install scripts (sql/): two bases, 1.0 (for upgrades from the first release, which
# test/t/009_upgrade.pl starts from) and 1.7 (CREATE EXTENSION dex runs it and the updates
# after it), and the update from each release to the next.  A release adds its update only.
DATA = $(addprefix sql/, dex--1.0.sql dex--1.7.sql \
       dex--1.0--1.1.sql dex--1.1--1.2.sql dex--1.2--1.3.sql dex--1.3--1.4.sql dex--1.4--1.5.sql \
       dex--1.5--1.6.sql dex--1.6--1.7.sql dex--1.7--1.8.sql dex--1.8--1.9.sql \
       dex--1.9--1.10.sql dex--1.10--1.11.sql)
MODULE_big = dex

PROTOS = common event command task
WKT_PROTOS = timestamp duration
GEN = src/wire/gen
PROTO_SRCS = $(PROTOS:%=$(GEN)/dex/v1/%.pb-c.c) $(WKT_PROTOS:%=$(GEN)/google/protobuf/%.pb-c.c)
PROTO_HDRS = $(PROTO_SRCS:.c=.h)

# One folder per duty; dependencies run one way (src/README.md, checked by test/layers.py):
#   api, workers -> engine -> shmem, wire -> util
SRCS = src/dex.c \
       $(wildcard src/util/*.c) $(wildcard src/wire/*.c) $(wildcard src/shmem/*.c) \
       $(wildcard src/engine/*.c) $(wildcard src/api/*.c) $(wildcard src/workers/*.c)
OBJS = $(SRCS:.c=.o) $(PROTO_SRCS:.c=.o)

PG_CPPFLAGS = -I$(srcdir)/src -I$(srcdir)/$(GEN)
PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers \
            -Wno-sign-compare -Wno-cast-function-type
SHLIB_LINK = -lprotobuf-c

# make installcheck runs these suites against a running server (PGHOST, PGPORT, PGUSER as for
# psql, a superuser), which needs in its postgresql.conf:
#   shared_preload_libraries = 'dex'
#   dex.database = 'dex_regress'
# pg_regress makes the database dex_regress afresh (CONTRIB_TESTDB, below the include) and
# test/regress/sql/setup.sql creates the extension there; the isolation specs then run in that same
# database. The TAP tests start their own clusters. bash test/run-tests.sh runs the same
# suites, and more, on a throwaway cluster.
REGRESS = setup codec queues runs tasks errors batch events control suspend terminate blocked lifecycle history_cache listing children keys timeouts capacity monitoring bad_input roles queue_access instances versions api_tokens security batch_forms debounce schedules flow_control definitions definition_grants publish status_index
# the database pg_regress makes is UTF8 with the C locale, as in test/lib.sh's cluster, whatever
# the server's defaults
REGRESS_OPTS = --inputdir=test/regress --encoding=UTF8 --no-locale
ISOLATION = $(sort $(basename $(notdir $(wildcard test/isolation/specs/*.spec))))
# --use-existing: in the database the regress suite left, where dex is installed and served
ISOLATION_OPTS = --inputdir=test/isolation --use-existing
TAP_TESTS = 1
# PGXS's prove looks for t/*.pl; ours are in test/t (PROVE_TESTS=test/t/012_... picks some)
PROVE_TESTS = test/t/*.pl

EXTRA_CLEAN = $(GEN)

PROTOC_C ?= protoc-c
PROTO_INCLUDE ?= /usr/include

# no LLVM bitcode: dex gains nothing from JIT inlining, and clang need not be installed
override with_llvm = no

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# make installcheck: the database the server's dex.database names (test/regress/sql/setup.sql shows it),
# not PGXS's contrib_regression and isolation_regression
CONTRIB_TESTDB = dex_regress
ISOLATION_TESTDB = dex_regress

# protoc-c output: the engine's protocol and the two well-known types it uses.
$(GEN)/dex/v1/%.pb-c.c $(GEN)/dex/v1/%.pb-c.h: proto/dex/v1/%.proto
	@mkdir -p $(GEN)
	$(PROTOC_C) --c_out=$(GEN) -Iproto -I$(PROTO_INCLUDE) $<

$(GEN)/google/protobuf/%.pb-c.c $(GEN)/google/protobuf/%.pb-c.h: $(PROTO_INCLUDE)/google/protobuf/%.proto
	@mkdir -p $(GEN)
	$(PROTOC_C) --c_out=$(GEN) -I$(PROTO_INCLUDE) google/protobuf/$*.proto

# Every C file may include any generated header.
$(SRCS:.c=.o): $(PROTO_HDRS) $(wildcard src/*.h src/*/*.h)

# Generated code is not ours to lint: keep -Werror but silence what protoc-c emits.
$(PROTO_SRCS:.c=.o): override CFLAGS += -Wno-unused-parameter

.PHONY: test demo
test:
	bash test/run-tests.sh
demo:
	bash test/demo.sh
.PHONY: bench
bench:
	bash bench/run.sh

# ---- Fuzzing (test/fuzz/): a libFuzzer harness of the codec, built with clang outside the
# server. "make fuzz" builds it and runs every target for DEX_FUZZ_SECONDS in all (default 75);
# "make fuzz-build" only builds, into FUZZ_OUT (default test/fuzz/build).
FUZZ_OUT ?= $(CURDIR)/test/fuzz/build
.PHONY: fuzz fuzz-build
fuzz-build: $(PROTO_SRCS) $(PROTO_HDRS)
	$(MAKE) -C test/fuzz PG_CONFIG=$(PG_CONFIG) O=$(FUZZ_OUT)
fuzz:
	bash test/fuzz/run.sh
