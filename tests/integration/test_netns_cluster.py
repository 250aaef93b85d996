"""A cluster whose nodes are separate hosts: 3 controllers and 3 brokers (one per rack), each in
its own network namespace on its own 198.18.0.x address, the clients in a seventh (issue 30).

On one cluster shared by the module: the four unchanged real clients (confluent-kafka,
kafka-python, aiokafka, kcat) produce and consume, each Python client's consumer group reads
everything once; an acks=all idempotent producer loses nothing acknowledged while the partition
leader is SIGKILLed and restarted, while it is stopped by a controlled shutdown, while a partition
cuts two hosts apart (iptables inside their namespaces), and while one rack's host is cut off from
every other node. Each test leaves the cluster whole (every broker unfenced and running). After
the module no namespace of its run remains (and with them, no veth, bridge or rule: they live only
in those namespaces).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.checker import check_acked_read_once, check_offsets_dense
from chaos.workload import Acked, ProducerWorkload, read_all
from common.waiting import wait_until
from localcluster.cluster_layout import RPC_SECRET_FILE
from security.rpc_secret import BROKER_KEY_FILE, broker_key_text, load_secret
from tidelog.admin_client import AdminClient
from tidelog.cli_common import ClusterError
from tidelog.hosts import netns
from tidelog.hosts.cluster import CLIENT_HOST, NetnsCluster, admin_token, remove_recorded
from tidelog.hosts.watchdog import NetnsWatchdog
from tidelog.testing import reaper
from tidelog.testing.cluster import TEST_BROKER_CONFIG

pytest.importorskip("confluent_kafka")
pytest.importorskip("kafka")
pytest.importorskip("aiokafka")
_unavailable = netns.available()
pytestmark = pytest.mark.skipif(_unavailable is not None, reason=f"needs network namespaces: {_unavailable}")

TOPIC = "ledger"
PARTITIONS = 2
READY_S = 60.0
RECORDS = 50
REPO = Path(__file__).resolve().parents[2]
CLI_TIMEOUT_S = 60.0
KCAT = shutil.which("kcat") or shutil.which("kafkacat")
RACKS = 3  # brokers 4, 5, 6 in rack-1, rack-2, rack-3
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
EXIT_BOUND_S = 10.0  # a controlled shutdown's SIGTERM -> exit (controlled.shutdown.timeout.ms is 10 s)


def _admin(cluster: NetnsCluster) -> AdminClient:
    return AdminClient([n.spec.admin_url for n in cluster.controllers], token=admin_token(cluster.root))


def _partition(admin: AdminClient, topic: str, partition: int) -> dict[str, Any]:
    return next(p for p in admin.topic(topic)["partitions"] if p["partition"] == partition)


def _wait_full_isr(admin: AdminClient, topic: str, partitions: int) -> None:
    for p in range(partitions):
        wait_until(f"{topic}-{p}: every replica in the ISR", lambda: (
            (s := _partition(admin, topic, p)) and sorted(s["isr"]) == sorted(s["replicas"]) and s["leader"] >= 0),
            READY_S)


def assert_no_namespace_left(run_id: str) -> None:
    left = [ns for ns in netns.list_namespaces() if run_id in ns]
    assert left == [], f"namespaces of run {run_id} remain: {left}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsCluster]:
    root = tmp_path_factory.mktemp("netns") / "cluster"
    watchdog = NetnsWatchdog(root, remove_data=False)  # kills and removes all if this process dies
    started = None
    at_exit = None
    try:
        started = NetnsCluster.start(root, controllers=3, brokers=3, racks=RACKS, ready_timeout=READY_S,
                                     extra_properties={**TEST_BROKER_CONFIG,
                                                       "replica.selector.class": RACK_AWARE_SELECTOR})
        at_exit = _Removal(started)
        reaper.register(at_exit)  # a KeyboardInterrupt that skips this finally: the interpreter's exit
        yield started
    finally:
        if started is not None:
            if at_exit is not None:
                reaper.unregister(at_exit)
            started.remove()
            assert_no_namespace_left(started.network.plan.run_id)
        watchdog.close()


@pytest.fixture
def whole(cluster: NetnsCluster) -> Iterator[NetnsCluster]:
    """The shared cluster, and after the test: every cut healed, every node running, every broker unfenced."""
    try:
        yield cluster
    finally:
        cluster.partitions.heal_all()
        for node in cluster.nodes:
            if not node.running():
                cluster.restart(node.spec.node_id)
        with cluster.network.entered(CLIENT_HOST):
            admin = _admin(cluster)
            wait_until("every broker registered and unfenced", lambda: sorted(
                b["broker_id"] for b in admin.brokers() if b.get("fenced") is False) == [4, 5, 6], READY_S,
                not_yet=(ClusterError, OSError))


class _Removal:
    """reaper's Stoppable for a netns cluster: its stop also removes the namespaces."""

    def __init__(self, cluster: NetnsCluster) -> None:
        self.cluster = cluster

    def stop(self) -> object:
        return self.cluster.remove()


CLIENTS = ("ck", "kp", "ak", "kcat")  # confluent-kafka, kafka-python, aiokafka, kcat: each writes RECORDS values


async def _aiokafka_round_trip(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    """aiokafka writes its RECORDS values with acks=all, then its group reads `expected` values."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for i in range(RECORDS):
            await producer.send_and_wait(topic, f"ak-{i}".encode(), key=str(i).encode())
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="ak-group",
                                auto_offset_reset="earliest")
    await consumer.start()
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + READY_S
        while len(values) < expected and time.monotonic() < deadline:  # bounded by the deadline
            batches = await consumer.getmany(timeout_ms=500)
            values += [record.value for records in batches.values() for record in records if record.value]
    finally:
        await consumer.stop()
    return values


def _kcat(cluster: NetnsCluster, *args: str, stdin: str | None = None) -> str:
    """kcat run in the client namespace (`ip netns exec`, as a user would)."""
    assert KCAT is not None
    done = subprocess.run(cluster.network.command(CLIENT_HOST, [KCAT, "-b", str(cluster.bootstrap_servers), *args]),
                          capture_output=True, text=True, input=stdin, timeout=CLI_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
def test_clients_and_a_group_across_six_hosts(whole: NetnsCluster) -> None:
    """Each of the four clients writes to an RF=3 topic across the hosts; confluent-kafka's,
    kafka-python's and aiokafka's groups each read all of it once, and kcat reads it too."""
    from confluent_kafka import Consumer, Producer
    from kafka import KafkaConsumer, KafkaProducer

    cluster = whole
    assert len({n.spec.host for n in cluster.nodes}) == 6
    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None
    everything = sorted(f"{c}-{i}".encode() for c in CLIENTS for i in range(RECORDS))
    with cluster.network.entered(CLIENT_HOST):
        admin = _admin(cluster)
        admin.create_topic("matrix", partitions=3, replication_factor=3, configs={"min.insync.replicas": "2"})
        _wait_full_isr(admin, "matrix", 3)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(RECORDS):
            producer.produce("matrix", f"ck-{i}".encode(), key=str(i).encode())
        assert producer.flush(30) == 0
        kp = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all")
        for i in range(RECORDS):
            kp.send("matrix", f"kp-{i}".encode(), key=str(i).encode())
        kp.flush(30)
        kp.close()
        _kcat(cluster, "-P", "-t", "matrix", "-K", ":", "-X", "acks=all",
              stdin="".join(f"{i}:kcat-{i}\n" for i in range(RECORDS)))
        aiokafka_read = asyncio.run(_aiokafka_round_trip(bootstrap, "matrix", len(everything)))
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ck-group",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["matrix"])
        seen: list[bytes] = []
        deadline = time.monotonic() + READY_S
        while len(seen) < len(everything) and time.monotonic() < deadline:  # bounded by the deadline
            message = consumer.poll(0.5)
            value = None if message is None or message.error() is not None else message.value()
            if value is not None:
                seen.append(value)
        consumer.close()
        reader = KafkaConsumer("matrix", bootstrap_servers=bootstrap.split(","),
                               group_id="kp-group", auto_offset_reset="earliest", consumer_timeout_ms=15_000)
        values = []
        for record in reader:  # bounded: consumer_timeout_ms ends the iteration
            values.append(record.value)
            if len(values) == len(everything):
                break
        reader.close()
    kcat_read = _kcat(cluster, "-C", "-t", "matrix", "-o", "beginning", "-e", "-q", "-f", "%s\n").split()
    assert sorted(seen) == everything
    assert sorted(values) == everything
    assert sorted(aiokafka_read) == everything
    assert sorted(v.encode() for v in kcat_read) == everything


def test_nothing_acknowledged_lost_through_a_leader_sigkill(whole: NetnsCluster) -> None:
    cluster = whole
    with cluster.network.entered(CLIENT_HOST):
        admin = _admin(cluster)
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, configs={"min.insync.replicas": "2"})
        _wait_full_isr(admin, TOPIC, PARTITIONS)
        bootstrap = cluster.bootstrap_servers
        assert bootstrap is not None
        with ProducerWorkload(bootstrap, TOPIC, partitions=PARTITIONS) as writer:
            wait_until("200 acknowledged writes", lambda: len(writer.acked) >= 200, READY_S)
            leader = _partition(admin, TOPIC, 0)["leader"]
            cluster.node(leader).kill()
            killed_at = time.monotonic()  # Acked.at is monotonic
            wait_until("an acknowledged write to partition 0 after the SIGKILL", lambda: any(
                a.partition == 0 and a.at > killed_at for a in list(writer.acked)), READY_S)
            cluster.restart(leader)
            _wait_full_isr(admin, TOPIC, PARTITIONS)
            before = len(writer.acked)
            wait_until("more writes after the restart", lambda: len(writer.acked) > before + 100, READY_S)
            assert writer.stop() == 0, "records still unacknowledged after the flush"
        assert writer.errors == [], writer.errors[:10]
        acked = [(a.partition, a.offset, a.value) for a in writer.acked]
        read = read_all(bootstrap, TOPIC, PARTITIONS)
        problems = check_acked_read_once(acked, read) + check_offsets_dense(read)
        assert problems == [], problems[:10]


def _check_nothing_lost(bootstrap: str, topic: str, partitions: int, acked: list[Acked]) -> None:
    read = read_all(bootstrap, topic, partitions)
    problems = check_acked_read_once([(a.partition, a.offset, a.value) for a in acked], read)
    assert problems + check_offsets_dense(read) == [], problems[:10]


def _fenced(admin: AdminClient, broker: int) -> bool:
    return bool(next(b for b in admin.brokers() if b["broker_id"] == broker)["fenced"])


def test_controlled_shutdown_across_hosts_fails_no_write(whole: NetnsCluster) -> None:
    """SIGTERM of the leader's broker: it moves every leadership off itself over the hosts' links
    before it exits, so an idempotent acks=all producer sees no failed delivery and loses nothing."""
    cluster = whole
    with cluster.network.entered(CLIENT_HOST):
        admin = _admin(cluster)
        admin.create_topic("shutdown", partitions=3, replication_factor=3, configs={"min.insync.replicas": "2"})
        _wait_full_isr(admin, "shutdown", 3)
        bootstrap = str(cluster.bootstrap_servers)
        with ProducerWorkload(bootstrap, "shutdown", partitions=3) as writer:
            wait_until("100 acknowledged writes", lambda: len(writer.acked) >= 100, READY_S)
            victim = _partition(admin, "shutdown", 0)["leader"]
            started = time.monotonic()
            report = cluster.node(victim).stop()
            took = time.monotonic() - started
            assert (report.outcome, report.exit_status) == ("stopped", 0), report
            assert took < EXIT_BOUND_S, f"SIGTERM -> exit took {took:.1f} s"
            assert victim not in [_partition(admin, "shutdown", p)["leader"] for p in range(3)]
            assert _fenced(admin, victim)
            during = len(writer.acked)
            wait_until("writes while the broker is down", lambda: len(writer.acked) > during + 100, READY_S)
            cluster.restart(victim)
            _wait_full_isr(admin, "shutdown", 3)
            assert writer.stop() == 0
        assert writer.errors == [], writer.errors[:10]
        _check_nothing_lost(bootstrap, "shutdown", 3, writer.acked)
    log = cluster.node(victim).spec.log_path.read_text(errors="replace")
    assert "Transitioning from PENDING_CONTROLLED_SHUTDOWN to SHUTTING_DOWN" in log, log[-3000:]


def test_a_partition_between_two_hosts(whole: NetnsCluster) -> None:
    """The leader's host and one follower's host cut apart, both ways, by iptables in their own
    namespaces: the follower leaves the ISR while both still reach the controllers (neither is
    fenced), acks=all writes go on with the other two replicas, and after the heal the follower
    catches up and rejoins; nothing acknowledged is lost."""
    cluster = whole
    with cluster.network.entered(CLIENT_HOST):
        admin = _admin(cluster)
        admin.create_topic("cut", partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"})
        _wait_full_isr(admin, "cut", 1)
        bootstrap = str(cluster.bootstrap_servers)
        leader = _partition(admin, "cut", 0)["leader"]
        follower = next(r for r in _partition(admin, "cut", 0)["isr"] if r != leader)
        with ProducerWorkload(bootstrap, "cut", partitions=1) as writer:
            wait_until("100 acknowledged writes", lambda: len(writer.acked) >= 100, READY_S)
            handle = cluster.partition([leader], [follower])
            wait_until(f"broker {follower} out of the ISR", lambda: follower not in _partition(admin, "cut", 0)["isr"],
                       READY_S)
            shrunk = len(writer.acked)
            wait_until("acks=all writes with the ISR shrunk", lambda: len(writer.acked) > shrunk + 100, READY_S)
            assert _partition(admin, "cut", 0)["leader"] == leader
            assert not _fenced(admin, leader) and not _fenced(admin, follower)
            cluster.partitions.heal(handle)
            _wait_full_isr(admin, "cut", 1)
            assert writer.stop() == 0
        assert writer.errors == [], writer.errors[:10]
        _check_nothing_lost(bootstrap, "cut", 1, writer.acked)


def test_a_rack_cut_off_from_the_other_racks_and_the_controllers(whole: NetnsCluster) -> None:
    """The rack-partition scenario by namespaces: rack-1's host (broker 4) cut from every other
    node's host, the clients still reaching it. Broker 4 is fenced and its leaderships move; writes
    go on; a consumer in rack-1 (client.rack, KIP-392) reads every acknowledged record through the
    cut and after the heal, when broker 4 rejoins every ISR; nothing acknowledged is lost."""
    from confluent_kafka import Consumer, TopicPartition

    cluster = whole
    rack_1 = [n.spec.node_id for n in cluster.brokers if "broker.rack=rack-1" in n.spec.properties_path.read_text()]
    assert rack_1 == [4]
    others = [n.spec.node_id for n in cluster.nodes if n.spec.node_id not in rack_1]
    with cluster.network.entered(CLIENT_HOST):
        admin = _admin(cluster)
        admin.create_topic("racked", partitions=3, replication_factor=3, configs={"min.insync.replicas": "2"})
        _wait_full_isr(admin, "racked", 3)
        bootstrap = str(cluster.bootstrap_servers)
        reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "rack-1-reader", "client.rack": "rack-1",
                           "enable.auto.commit": False, "fetch.wait.max.ms": 100})
        reader.assign([TopicPartition("racked", p, 0) for p in range(3)])
        read: list[bytes] = []

        def poll_some() -> None:
            for message in reader.consume(500, 0.2):
                if message.error() is None and message.value() is not None:
                    read.append(message.value())

        try:
            with ProducerWorkload(bootstrap, "racked", partitions=3) as writer:
                wait_until("100 acknowledged writes", lambda: (poll_some(), len(writer.acked) >= 100)[1], READY_S)
                handle = cluster.partition(rack_1, others)
                wait_until("rack-1's broker fenced", lambda: (poll_some(), _fenced(admin, 4))[1], READY_S)
                wait_until("no leader in rack-1", lambda: (poll_some(), 4 not in [
                    _partition(admin, "racked", p)["leader"] for p in range(3)])[1], READY_S)
                cut_at = len(writer.acked)
                wait_until("writes while rack-1 is cut off", lambda: (poll_some(), len(writer.acked) > cut_at + 100)[1],
                           READY_S)
                cluster.partitions.heal(handle)
                wait_until("rack-1's broker unfenced", lambda: (poll_some(), not _fenced(admin, 4))[1], READY_S)
                _wait_full_isr(admin, "racked", 3)
                assert writer.stop() == 0
            acked = {a.value for a in writer.acked}
            wait_until("the rack-1 consumer reading every acknowledged record",
                       lambda: (poll_some(), acked <= set(read))[1], READY_S)
        finally:
            reader.close()
        assert writer.errors == [], writer.errors[:10]
        _check_nothing_lost(bootstrap, "racked", 3, writer.acked)


def _tidelog(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidelog", *args], capture_output=True, text=True, input=stdin,
                          cwd=REPO, timeout=CLI_TIMEOUT_S, env=_cli_env())


def _cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("TIDELOG_ADMIN_TOKEN", None)  # the data dir's token is found by the commands themselves
    return env


@pytest.mark.long  # two namespaced cluster starts and seven CLI runs (~1 min): make test-long
def test_tidelog_up_hosts_netns_and_sigkill_of_the_launcher(tmp_path: Path) -> None:
    """`tidelog up --hosts netns`: READY, cluster.json records the namespaces, status/produce/consume
    --data-dir work from this (root-namespace) shell, a SIGKILL of `up` leaves nothing behind, and
    `up --hosts netns --detach` on the same data dir brings the cluster back with its data until `down`."""
    root = tmp_path / "data"
    up = subprocess.Popen([sys.executable, "-m", "tidelog", "up", "--hosts", "netns", "--data-dir", str(root)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=_cli_env())
    run_id = None
    try:
        assert up.stdout is not None
        lines = []
        for line in up.stdout:  # bounded: `up` prints READY or exits within its ready timeout
            lines.append(line)
            if line.startswith("Press Ctrl-C"):
                break
        assert any(line.startswith("READY ") for line in lines), "".join(lines)
        document = json.loads((root / "cluster.json").read_text())
        run_id = document["hosts"]["run_id"]
        assert document["hosts"]["hosts"]["client"]["namespace"] in netns.list_namespaces()
        assert _tidelog("status", "--data-dir", str(root)).returncode == 0
        produced = _tidelog("produce", "greetings", "--data-dir", str(root), stdin="hello\nworld\n")
        assert produced.returncode == 0, produced.stderr
        consumed = _tidelog("consume", "greetings", "--from-beginning", "--max-messages", "2", "--data-dir", str(root))
        assert consumed.returncode == 0 and consumed.stdout.split() == ["hello", "world"], consumed
        pids = [n["pid"] for n in document["nodes"]]
        up.kill()  # SIGKILL: no finally, no atexit; the watchdog's stdin reaches EOF
        up.wait(CLI_TIMEOUT_S)
        wait_until("the watchdog removing every namespace of the run",
                   lambda: not any(run_id in ns for ns in netns.list_namespaces()), CLI_TIMEOUT_S)
        wait_until("every node gone", lambda: not any(_alive(pid) for pid in pids), CLI_TIMEOUT_S)
        again = _tidelog("up", "--hosts", "netns", "--detach", "--data-dir", str(root))  # the same namespaces
        assert again.returncode == 0 and "READY " in again.stdout, again.stderr
        consumed = _tidelog("consume", "greetings", "--from-beginning", "--max-messages", "2", "--data-dir", str(root))
        assert consumed.stdout.split() == ["hello", "world"], consumed  # the records survived the SIGKILL
        down = _tidelog("down", "--data-dir", str(root))
        assert down.returncode == 0, down.stderr
        assert not any(run_id in ns for ns in netns.list_namespaces())
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(CLI_TIMEOUT_S)
        if (root / "cluster.json").exists():
            remove_recorded(root)
        if run_id is not None:
            assert_no_namespace_left(run_id)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"


def test_three_machines_procedure(tmp_path: Path) -> None:
    """README "Three machines", step by step, each machine a namespace: format the first node,
    copy its cluster.secrets, format the other two with it, start each with `tidelog combined
    --config`, then a client on a fourth host creates a topic, produces and consumes."""
    from confluent_kafka import Consumer, Producer

    network = netns.HostNetwork.create(["machine1", "machine2", "machine3", "client"])
    nodes: list[subprocess.Popen[bytes]] = []
    try:
        addresses = [network.address(f"machine{i}") for i in (1, 2, 3)]
        controllers = ",".join(f"{i}@{a}" for i, a in enumerate(addresses, start=1))
        dirs = [tmp_path / f"machine{i}" / "tidelog" for i in (1, 2, 3)]
        for i, (address, directory) in enumerate(zip(addresses, dirs), start=1):
            copied = []
            if i > 1:  # "copy cluster.secrets from the first machine" (scp, in the README)
                copy = directory.parent / "cluster.secrets"
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(dirs[0] / "cluster.secrets", copy)
                copied = ["--secrets", str(copy)]
            done = subprocess.run(network.command(f"machine{i}", [
                sys.executable, "-m", "tidelog", "format", "--dir", str(directory), "--node-id", str(i),
                "--roles", "broker,controller", "--host", address, "--controllers", controllers, *copied]),
                capture_output=True, text=True, cwd=REPO, env=_cli_env(), timeout=CLI_TIMEOUT_S)
            assert done.returncode == 0, done.stderr
        for i, directory in enumerate(dirs, start=1):
            with open(directory / "node.log", "ab") as log:
                nodes.append(network.popen(f"machine{i}", [
                    sys.executable, "-m", "tidelog", "combined", "--config", str(directory / "server.properties")],
                    stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=REPO, env=_cli_env(),
                    start_new_session=True))
        token = (dirs[0] / "server.properties").read_text().split("admin.token=")[1].split()[0]
        bootstrap = ",".join(f"{a}:9092" for a in addresses)
        with network.entered("client"):
            admin = AdminClient([f"http://{a}:9080" for a in addresses], token=token)
            wait_until("three unfenced brokers", lambda: len(
                [b for b in admin.brokers() if b.get("fenced") is False]) == 3, READY_S,
                not_yet=(ClusterError, OSError))  # the nodes are starting: no admin API yet
            admin.create_topic("machines", partitions=3, replication_factor=3, configs={"min.insync.replicas": "2"})
            _wait_full_isr(admin, "machines", 3)
            producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
            for i in range(RECORDS):
                producer.produce("machines", str(i).encode())
            assert producer.flush(30) == 0
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "machines",
                                 "auto.offset.reset": "earliest"})
            consumer.subscribe(["machines"])
            seen: list[bytes] = []
            deadline = time.monotonic() + READY_S
            while len(seen) < RECORDS and time.monotonic() < deadline:  # bounded by the deadline
                message = consumer.poll(0.5)
                value = None if message is None or message.error() is not None else message.value()
                if value is not None:
                    seen.append(value)
            consumer.close()
        assert sorted(seen) == sorted(str(i).encode() for i in range(RECORDS))
    finally:
        for node in nodes:
            node.kill()
            node.wait(CLI_TIMEOUT_S)
        network.remove()
        assert_no_namespace_left(network.plan.run_id)


def _bad_broker(cluster: NetnsCluster, tmp_path: Path, name: str, **changes: str) -> subprocess.CompletedProcess[str]:
    """Broker 4's config with `changes` (keys with dots as __), started in the client namespace: it
    must refuse to start at once (exit 2), naming the setting."""
    entries = dict(line.split("=", 1) for line in cluster.node(4).spec.properties_path.read_text().splitlines()
                   if "=" in line and not line.startswith("#"))
    directory = tmp_path / name
    directory.mkdir()
    entries.update({"log.dirs": str(directory / "data"), "listeners": "PLAINTEXT://0.0.0.0:9092",
                    "advertised.listeners": f"PLAINTEXT://{cluster.network.address(CLIENT_HOST)}:9092",
                    "metrics.listener": f"{cluster.network.address(CLIENT_HOST)}:9081"})
    entries.update({key.replace("__", "."): value for key, value in changes.items()})
    # its own RPC key, as the launcher writes a broker's (broker 4's would be refused for another id)
    key = directory / BROKER_KEY_FILE
    key.write_text(broker_key_text(load_secret(cluster.root / RPC_SECRET_FILE), int(entries["node.id"])),
                   encoding="ascii")
    key.chmod(0o600)
    entries["controller.rpc.secret.file"] = str(key)
    config = directory / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in entries.items()))
    return subprocess.run(cluster.network.command(CLIENT_HOST, [
        sys.executable, "-m", "tidelog", "broker", "--config", str(config)]),
        capture_output=True, text=True, cwd=REPO, env=_cli_env(), timeout=CLI_TIMEOUT_S)


def test_bad_input_between_hosts_is_refused_at_start(whole: NetnsCluster, tmp_path: Path) -> None:
    """Two nodes with one id, an advertised address the controllers cannot reach, a controller list
    that disagrees: each a clear error naming the setting within seconds (not a hang)."""
    cluster = whole
    controllers = [n.spec for n in cluster.controllers]
    wrong_api = ",".join(f"{s.node_id}@{s.host}:{s.admin_port + (s.node_id == 3)}" for s in controllers)
    cases = {
        "duplicate": ({"node__id": "4"}, "'node.id' 4 is registered by another live broker"),
        "loopback": ({"node__id": "7", "advertised__listeners": "PLAINTEXT://127.0.0.1:9092"},
                     "'advertised.listeners' advertises 127.0.0.1:9092"),
        "voters": ({"node__id": "8", "controller__api__voters": wrong_api}, "'controller.api.voters' here is"),
    }
    for name, (changes, expected) in cases.items():
        started = time.monotonic()
        done = _bad_broker(cluster, tmp_path, name, **changes)
        assert done.returncode == 2 and expected in done.stderr, (name, done.returncode, done.stderr[-2000:])
        assert time.monotonic() - started < 20, f"{name}: refused only after {time.monotonic() - started:.1f} s"
