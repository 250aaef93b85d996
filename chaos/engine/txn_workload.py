"""The transactional workload: transactional clients in processes of their own, readers at both
isolation levels, the probe for hanging transactions and the final reads.

    txns = TxnWorkload(bootstrap, spec, history, log_dir)   # spec: the scenario's WorkloadSpec
    txns.start()            # producers tp0.., the transform tt0, readers rc0 and ru0
    txns.pause("tp0")       # faults on a client (selector client:NAME): pause, resume, kill, restart
    ...
    txns.stop_clients()     # after the heal: SIGTERM, the current transaction ends
    txns.probe()            # DescribeProducers, ListTransactions until nothing is open
    txns.final_reads()      # read_committed and read_uncommitted to every partition's end
    txns.stop()

Clients are `python -m chaos.engine.txn_client` (see there for what a transaction writes);
their JSON lines become history events, placed on the history's clock by their own
time.monotonic() (one clock for every process of the machine). Events are the ones
chaos.checkers.transactions reads. A client whose name is in `spec.txn_held` runs with the
group id HOLD_GID, whose connections the hold proxy (chaos.nemeses.hold) intercepts.
"""

from __future__ import annotations

import json
import logging
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, Final

from chaos.engine.workload import CLIENT_LOG, JOIN_S
from chaos.history import History
from chaos.scenarios.spec import WorkloadSpec
from common.limits import CHAOS_POLL_S
from localcluster.security_setup import read_client_config

log = logging.getLogger(__name__)

CLIENT_STOP_S: Final = 30.0
STACK_DUMP_S: Final = 20.0  # a client ends its transaction (a commit of up to 10 s) and its producer
PROBE_EVERY_S: Final = 1.0
FINAL_READ_S: Final = 60.0
# Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms default: how often a
# coordinator looks for transactions past their timeout; a probe waits the timeout plus this
ABORT_INTERVAL_S: Final = 10.0
MARKERS_S: Final = 5.0  # markers written after the abort decision
HOLD_GID: Final = 4242  # the group of clients whose connections go through the hold proxy
HELD_REQUEST_TIMEOUT_MS: Final = 5000  # a held client times a held request out soon, and retries it
TRANSFORM: Final = "tt0"
OPEN_COORDINATOR_STATES: Final = ("Ongoing", "PrepareCommit", "PrepareAbort")  # ListTransactions' state filter


class ClientProcess:
    """One client process and the thread relaying its events into the history."""

    def __init__(self, name: str, argv: list[str], history: History, log_path: Path, held: bool) -> None:
        self.name, self.argv, self.history, self.log_path, self.held = name, argv, history, log_path, held
        self.incarnation = 0
        self.paused = False
        self.process: subprocess.Popen[str] | None = None
        self.relay: threading.Thread | None = None

    def spawn(self) -> None:
        argv = [*self.argv, "--incarnation", str(self.incarnation)]
        if self.held:
            argv += ["--request-timeout-ms", str(HELD_REQUEST_TIMEOUT_MS)]
        with self.log_path.open("a", encoding="utf-8") as stderr:
            self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                            group=HOLD_GID if self.held else None)
        self.incarnation += 1
        stdout = self.process.stdout
        assert stdout is not None
        self.relay = threading.Thread(target=self._relay, args=(stdout,), name=f"chaos-txn-{self.name}", daemon=True)
        self.relay.start()
        self.history.record("note", what="txn-client-start", client=self.name, pid=self.process.pid,
                            incarnation=self.incarnation - 1)

    def _relay(self, stdout: IO[str]) -> None:
        for line in stdout:  # until the process closes its stdout (it ended)
            try:
                event = json.loads(line)
                mono = float(event.pop("mono"))
                kind = str(event.pop("kind"))
                self.history.record(kind, t=self.history.now() - (time.monotonic() - mono), **event)
            except (ValueError, KeyError, TypeError) as exc:  # a torn line of a killed client
                log.info("client %s: unreadable event line %r: %s", self.name, line[:200], exc)

    def _dump_stacks(self) -> None:
        """A client that does not stop is stuck somewhere: its native and Python stacks (py-spy,
        when installed) go to its log before it is killed."""
        if self.process is None or shutil.which("py-spy") is None:
            return
        try:
            dump = subprocess.run(["py-spy", "dump", "--native", "--pid", str(self.process.pid)], capture_output=True,
                                  text=True, timeout=STACK_DUMP_S, check=False)
        except subprocess.TimeoutExpired:
            return
        with self.log_path.open("a", encoding="utf-8") as log_file:
            log_file.write(f"--- stacks of {self.name} (pid {self.process.pid}), stuck at the end ---\n"
                           f"{dump.stdout}{dump.stderr}\n")

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.process is not None and self.running():
            self.process.send_signal(sig)

    def wait(self, timeout_s: float) -> None:
        if self.process is None:
            return
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._dump_stacks()
            self.process.kill()
            self.process.wait(JOIN_S)
            self.history.record("note", what="txn-client-killed", client=self.name, why="did not stop")
        if self.relay is not None:
            self.relay.join(JOIN_S)


class ClientProcesses:
    """Client processes by name, and the faults on one (chaos.engine.faults, selector client:NAME):
    pause (SIGSTOP), resume, kill (SIGKILL) and restart. Transactional clients and group members."""

    clients: dict[str, ClientProcess]
    what = "client"  # for the error naming an unknown client

    def client(self, name: str) -> ClientProcess:
        if name not in self.clients:
            raise KeyError(f"no {self.what} {name!r} (clients: {sorted(self.clients)})")
        return self.clients[name]

    def pause(self, name: str) -> None:
        self.client(name).signal(signal.SIGSTOP)
        self.client(name).paused = True

    def resume(self, name: str) -> None:
        self.client(name).signal(signal.SIGCONT)
        self.client(name).paused = False

    def kill(self, name: str) -> None:
        client = self.client(name)
        client.signal(signal.SIGKILL)
        client.paused = False
        client.wait(JOIN_S)

    def restart(self, name: str) -> None:
        if not self.client(name).running():
            self.client(name).spawn()


class TxnWorkload(ClientProcesses):
    what = "transactional client"

    def __init__(self, bootstrap: str, spec: WorkloadSpec, partitions: dict[str, int], history: History,
                 log_dir: Path, *, security_dir: Path | None = None, probe_bootstrap: str | None = None) -> None:
        """`security_dir`: a secured cluster's data dir, whose client settings (client.properties, the
        scenario's `[cluster] security`) every client process and consumer here uses with `bootstrap`;
        `probe_bootstrap`: the PLAINTEXT listeners the open-transactions probe (raw requests) uses."""
        self.bootstrap, self.spec, self.partitions, self.history = bootstrap, spec, partitions, history
        self.probe_bootstrap = probe_bootstrap or bootstrap
        self.security: dict[str, str] = {}
        python = [sys.executable, "-m", "chaos.engine.txn_client"]
        common = ["--bootstrap", bootstrap, "--timeout-ms", str(spec.txn_timeout_ms)]
        if security_dir is not None:
            self.security = read_client_config(security_dir)
            del self.security["bootstrap.servers"]
            common += ["--security-dir", str(security_dir)]
        topic_partitions = min(partitions[t] for t in spec.txn_topics)
        self.clients: dict[str, ClientProcess] = {}
        for i in range(spec.txn_producers):
            name = f"tp{i}"  # not p0: the plain workload's producer is process p0
            argv = [*python, "producer", "--name", name, *common, "--topics", ",".join(spec.txn_topics),
                    "--partitions", str(topic_partitions), "--interval-ms", str(spec.txn_interval_ms)]
            self.clients[name] = ClientProcess(name, argv, history, log_dir / f"client-{name}.log",
                                               name in spec.txn_held)
        if spec.txn_output:
            argv = [*python, "transform", "--name", TRANSFORM, *common, "--input", spec.txn_topics[0],
                    "--output", spec.txn_output, "--partitions", str(partitions[spec.txn_output])]
            self.clients[TRANSFORM] = ClientProcess(TRANSFORM, argv, history, log_dir / f"client-{TRANSFORM}.log",
                                                    TRANSFORM in spec.txn_held)
        self.topics = [*spec.txn_topics, *([spec.txn_output] if spec.txn_output else [])]
        self._stop_readers = threading.Event()
        self._readers = [threading.Thread(target=self._read, args=(name, isolation), name=f"chaos-txn-{name}",
                                          daemon=True)
                         for name, isolation in (("rc0", "read_committed"), ("ru0", "read_uncommitted"))]

    def start(self) -> None:
        self.history.record("note", what="txn-config", transaction_timeout_ms=self.spec.txn_timeout_ms,
                            topics=self.topics, clients=sorted(self.clients), held=list(self.spec.txn_held))
        for client in self.clients.values():
            client.spawn()
        for reader in self._readers:
            reader.start()

    def _consumer(self, group: str, isolation: str) -> Any:
        from confluent_kafka import Consumer

        return Consumer({"bootstrap.servers": self.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": isolation, "fetch.wait.max.ms": 100,
                         "topic.metadata.refresh.interval.ms": 1000, "enable.partition.eof": True,
                         "logger": CLIENT_LOG, **self.security})

    def _assignment(self) -> list[Any]:
        from confluent_kafka import TopicPartition

        return [TopicPartition(t, p, 0) for t in self.topics for p in range(self.partitions[t])]

    def _read(self, name: str, isolation: str) -> None:
        consumer = self._consumer(f"chaos-txn-{name}", isolation)
        try:
            consumer.assign(self._assignment())
            while not self._stop_readers.is_set():  # until stop_readers()
                for m in consumer.consume(500, CHAOS_POLL_S):
                    if m.error() is None:
                        self.history.record("txn-read", reader=name, isolation=isolation, topic=m.topic(),
                                            partition=m.partition(), offset=m.offset(), value=m.value().decode(),
                                            final=False)
        finally:
            consumer.close()

    def stop_clients(self) -> None:
        """Every client resumed and asked to stop after its current transaction; killed if it does not."""
        for client in self.clients.values():
            if client.paused:
                client.signal(signal.SIGCONT)
                client.paused = False
            client.signal(signal.SIGTERM)
        deadline = time.monotonic() + CLIENT_STOP_S  # one wait for all: a stuck client costs it once
        for client in self.clients.values():
            client.wait(max(0.0, deadline - time.monotonic()))

    def stop_readers(self) -> None:
        self._stop_readers.set()
        for reader in self._readers:
            reader.join(JOIN_S)

    def stop(self) -> None:
        self.stop_clients()
        self.stop_readers()

    def probe(self) -> None:
        """DescribeProducers on every partition and ListTransactions on every broker, every
        PROBE_EVERY_S, until no transaction is open or the transaction timeout plus the
        coordinator's abort interval passed: one `txn-probe` each."""
        bound_s = self.spec.txn_timeout_ms / 1000 + ABORT_INTERVAL_S + MARKERS_S
        start = time.monotonic()
        while True:  # bounded by bound_s
            waited = time.monotonic() - start
            try:
                ongoing = open_transactions(self.probe_bootstrap, {t: self.partitions[t] for t in self.topics})
                error = None
            except Exception as exc:  # a broker that does not answer DescribeProducers: the probe says so
                ongoing, error = [], f"{type(exc).__name__}: {exc}"
            done = (not ongoing and error is None) or waited >= bound_s
            if done:
                self.history.record("txn-probe", ongoing=ongoing, waited_s=round(waited, 3), bound_s=bound_s,
                                    error=error)
                return
            time.sleep(PROBE_EVERY_S)

    def final_reads(self) -> bool:
        """Every partition read from 0 to its end under both isolation levels (the end of a
        read_committed consumer is the LSO: librdkafka's watermark query and EOF use it)."""
        ok = True
        for name, isolation in (("final", "read_committed"), ("final-ru", "read_uncommitted")):
            reached = self._final_read(name, isolation)
            self.history.record("note", what="txn-final-read", isolation=isolation, ok=reached)
            ok = ok and reached
        return ok

    def _final_read(self, name: str, isolation: str) -> bool:
        from confluent_kafka import KafkaError, TopicPartition

        consumer = self._consumer(f"chaos-txn-{name}", isolation)
        deadline = time.monotonic() + FINAL_READ_S
        try:
            ends: dict[tuple[str, int], int] = {}
            for t in self.topics:
                for p in range(self.partitions[t]):
                    while (t, p) not in ends and time.monotonic() < deadline:  # bounded by the deadline
                        try:
                            ends[(t, p)] = consumer.get_watermark_offsets(TopicPartition(t, p), timeout=5,
                                                                          cached=False)[1]
                        except Exception:  # KafkaException: a leader still moving
                            time.sleep(CHAOS_POLL_S)
            self.history.record("note", what="txn-final-read-ends", isolation=isolation,
                                ends={f"{t}-{p}": e for (t, p), e in sorted(ends.items())})
            consumer.assign(self._assignment())
            reached: set[tuple[str, int]] = {k for k, end in ends.items() if end == 0}
            while len(reached) < len(ends) and time.monotonic() < deadline:  # bounded by the deadline
                for m in consumer.consume(1000, 0.5):
                    key = (m.topic(), m.partition())
                    if m.error() is None:
                        self.history.record("txn-read", reader=name, isolation=isolation, topic=m.topic(),
                                            partition=m.partition(), offset=m.offset(), value=m.value().decode(),
                                            final=True)
                    elif m.error().code() == KafkaError._PARTITION_EOF and m.offset() >= ends.get(key, 0):
                        reached.add(key)
            return len(ends) == sum(self.partitions[t] for t in self.topics) and len(reached) == len(ends)
        finally:
            consumer.close()


def open_transactions(bootstrap: str, partitions: dict[str, int]) -> list[dict[str, Any]]:
    """Every producer with an open transaction on these partitions (DescribeProducers, KIP-664:
    the partitions' side, where a hanging transaction holds the LSO back), and every
    transaction a coordinator still holds open (ListTransactions: Ongoing or prepared)."""
    from common.kafka_client import KafkaClient
    from common.protocol import messages
    from common.protocol.api_keys import ApiKey

    servers = [(h, int(p)) for h, p in (s.rsplit(":", 1) for s in bootstrap.split(","))]
    request_type = messages.request_type(ApiKey.DESCRIBE_PRODUCERS, 0)
    module = messages.request_module(ApiKey.DESCRIBE_PRODUCERS, 0)
    ongoing: list[dict[str, Any]] = []
    with KafkaClient(servers, client_id="tidelog-chaos-probe") as client:
        cluster = client.metadata(sorted(partitions))
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, count in sorted(partitions.items()):
            for p in range(count):
                leader = cluster.topics[topic].partitions[p].leader
                if leader < 0:
                    raise RuntimeError(f"{topic}-{p} has no leader")
                by_leader.setdefault(leader, {}).setdefault(topic, []).append(p)
        for leader, topics in sorted(by_leader.items()):
            request = request_type(topics=tuple(module.TopicRequest(name=t, partition_indexes=tuple(ps))
                                                for t, ps in sorted(topics.items())))
            answer = client.call(leader, ApiKey.DESCRIBE_PRODUCERS, 0, request, messages.encode_request,
                                 lambda body, v: messages.decode_response(ApiKey.DESCRIBE_PRODUCERS, v, body))
            for t in answer.topics:
                for p in t.partitions:
                    if p.error_code != 0:
                        raise RuntimeError(f"DescribeProducers {t.name}-{p.partition_index}: error {p.error_code}")
                    ongoing += [{"topic": t.name, "partition": p.partition_index, "producer_id": s.producer_id,
                                 "producer_epoch": s.producer_epoch, "txn_start_offset": s.current_txn_start_offset}
                                for s in p.active_producers if s.current_txn_start_offset >= 0]
        list_type = messages.request_type(ApiKey.LIST_TRANSACTIONS, 0)
        for broker in sorted(cluster.brokers):
            listed = client.call(broker, ApiKey.LIST_TRANSACTIONS, 0,
                                 list_type(state_filters=OPEN_COORDINATOR_STATES, producer_id_filters=()),
                                 messages.encode_request,
                                 lambda body, v: messages.decode_response(ApiKey.LIST_TRANSACTIONS, v, body))
            if listed.error_code != 0:
                raise RuntimeError(f"ListTransactions on broker {broker}: error {listed.error_code}")
            ongoing += [{"coordinator": broker, "transactional_id": x.transactional_id, "producer_id": x.producer_id,
                         "state": x.transaction_state} for x in listed.transaction_states]
    return ongoing

