"""Link and power faults of tidelog.testing.Cluster (issue 33), each seen from a client: a slow
link raises acks=all latency by its delay, a lossy link drops packets and loses no record, a
shaped link slows replication to its rate, and a controller's power loss with fsync on loses no
topic. Every rule, HTB class, proxy and mount is gone after each test, even one that fails.
Through the plugin: the power_loss=True marker, and a skip with the reason where links cannot run."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.links import install
from chaos.links.rules import burst_bytes
from chaos.power import fuse_missing
from tests.integration import cluster_fixtures
from tidelog.testing import Cluster
from tidelog.testing.cluster import ClusterSpec

DELIVERY_TIMEOUT_S = 30.0
SLOW_MS = 150
RECORDS = 5


def produce(bootstrap: str, topic: str, values: list[bytes]) -> list[float]:
    """Each value sent on its own to partition 0 with acks=all; the seconds each took."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "message.max.bytes": 2_000_000})
    took = []
    for value in values:
        began = time.monotonic()
        producer.produce(topic, value, partition=0)
        assert producer.flush(DELIVERY_TIMEOUT_S) == 0
        took.append(time.monotonic() - began)
    return took


def end_offset(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "link-faults-count"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


# iptables and lo's qdisc are the host's: under pytest-xdist (-n 4) the workers' link tests take
# turns, and each compares only what is not another process's chain (TIDELOG-LINK-<pid>)
HOST_LINKS_LOCK = Path(tempfile.gettempdir()) / "tidelog-link-tests.lock"
OTHERS_CHAIN = re.compile(r"TIDELOG-LINK(?:NAT)?-(\d+)")


@contextlib.contextmanager
def host_links_locked() -> Iterator[None]:
    with open(HOST_LINKS_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # bounded by the other worker's test, itself bounded
        yield


def own_state() -> tuple[str, ...]:
    """install.state() without the lines of other processes' chains."""
    def mine(line: str) -> bool:
        found = OTHERS_CHAIN.search(line)
        return found is None or int(found.group(1)) == os.getpid()
    return tuple("\n".join(line for line in part.splitlines() if mine(line)) for part in install.state())


def mounts_under(root: Path) -> list[str]:
    return [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
            if line.split()[1].startswith(str(root))]


# -- links ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    why = install.missing()
    if why is not None:
        pytest.skip(why)
    started = Cluster(brokers=3, base_dir=tmp_path_factory.mktemp("links"), fast_start=cluster_fixtures.FORK_NODES).start()
    try:
        yield started
    finally:
        with host_links_locked():  # the stop removes this process's chains: it takes its turn too
            started.stop()
    assert install.leftovers() == []


@pytest.fixture
def clean_links(cluster: Cluster) -> Iterator[None]:
    """Whatever the test does, its rules, classes and proxy are gone after it."""
    with host_links_locked():
        before = own_state()
        try:
            yield
        finally:
            cluster.recover()
            cluster.close_link_faults()
            assert own_state() == before


@pytest.fixture
def follower_link(cluster: Cluster, clean_links: None, request: pytest.FixtureRequest) -> Iterator[tuple[str, int, int]]:
    """A fresh 3-replica topic, its leader and one follower."""
    topic = cluster.create_topic(request.node.name[:40].replace("[", "-").replace("]", ""), partitions=1,
                                 replication_factor=3, configs={"min.insync.replicas": 3})
    leader = cluster.leader_of(topic)
    follower = next(r for r in cluster.partition(topic)["isr"] if r != leader)
    produce(cluster.bootstrap_servers, topic, [b"warm-up"])  # connections and metadata out of the way
    yield topic, leader, follower
    cluster.recover()
    cluster.delete_topic(topic)


BAD_INPUT: list[tuple[str, Callable[[Cluster], Any], str]] = [
    ("unknown node", lambda c: c.slow_link(4, 99, 100), "b: no node 99"),
    ("unknown first node", lambda c: c.lossy_link(0, 5, 0.1), "a: no node 0"),
    ("same node", lambda c: c.bandwidth(5, 5, 800), "b: a link joins two nodes"),
    ("negative delay", lambda c: c.slow_link(4, 5, -1), "delay_ms"),
    ("jitter above delay", lambda c: c.slow_link(4, 5, 10, jitter_ms=20), "jitter_ms"),
    ("no loss", lambda c: c.lossy_link(4, 5, 0), "loss"),
    ("certain loss", lambda c: c.lossy_link(4, 5, 1.0), "loss"),
    ("zero bandwidth", lambda c: c.bandwidth(4, 5, 0), "kbit"),
    ("text bandwidth", lambda c: c.bandwidth(4, 5, "800"), "kbit"),
]


@pytest.mark.parametrize(("why", "call", "named"), BAD_INPUT, ids=[row[0] for row in BAD_INPUT])
def test_bad_input_names_the_argument_and_installs_nothing(cluster: Cluster, clean_links: None, why: str,
                                                           call: Callable[[Cluster], Any], named: str) -> None:
    before = own_state()
    with pytest.raises(ValueError, match=named):
        call(cluster)
    assert cluster.link_faults() == []
    assert own_state() == before


def test_a_slow_link_to_a_follower_raises_acks_all_latency(cluster: Cluster,
                                                           follower_link: tuple[str, int, int]) -> None:
    topic, leader, follower = follower_link
    with cluster.slow_link(leader, follower, delay_ms=SLOW_MS) as slow:
        slowed = produce(cluster.bootstrap_servers, topic, [b"slow-%d" % i for i in range(RECORDS)])
        assert slow.relayed() >= 1  # the follower's fetch connection went through the proxy
        assert cluster.link_faults() == [slow]
    produce(cluster.bootstrap_servers, topic, [b"reconnect"])  # the follower reconnects directly (~200 ms)
    healthy = produce(cluster.bootstrap_servers, topic, [b"fast-%d" % i for i in range(RECORDS)])
    # each write waits for the follower's fetch: one held answer and one held next request
    assert min(slowed) >= SLOW_MS / 1000, slowed
    assert sorted(healthy)[RECORDS // 2] < SLOW_MS / 1000, healthy  # the median: a loaded machine has outliers
    assert end_offset(cluster.bootstrap_servers, topic) == 2 + 2 * RECORDS


def test_a_lossy_link_drops_packets_and_loses_no_record(cluster: Cluster,
                                                        follower_link: tuple[str, int, int]) -> None:
    topic, leader, follower = follower_link
    with cluster.lossy_link(leader, follower, loss=0.3) as lossy:
        produce(cluster.bootstrap_servers, topic, [b"lossy-%d" % i for i in range(2 * RECORDS)])
        seen, dropped = lossy.lost()
    assert 0 < dropped < seen, (seen, dropped)
    assert end_offset(cluster.bootstrap_servers, topic) == 1 + 2 * RECORDS


def test_bandwidth_slows_replication_to_its_rate(cluster: Cluster, follower_link: tuple[str, int, int]) -> None:
    topic, leader, follower = follower_link
    kbit, size = 2_000, 400_000  # 250 kB/s: a 400 kB record reaches the follower after about 1.3 s
    with cluster.bandwidth(leader, follower, kbit=kbit):
        took = produce(cluster.bootstrap_servers, topic, [b"x" * size])
    unshaped = burst_bytes(kbit)  # HTB lets one burst through at once
    assert took[0] >= 0.8 * (size - unshaped) * 8 / (kbit * 1000), took
    assert end_offset(cluster.bootstrap_servers, topic) == 2


def test_power_loss_needs_the_layer(cluster: Cluster) -> None:
    with pytest.raises(RuntimeError, match="power_loss=True"):
        cluster.power_loss(1)
    assert all(n.running() for n in cluster.local.nodes)
    with pytest.raises(ValueError, match="no node 99"):
        cluster.power_loss(99)


def test_power_loss_and_combined_do_not_mix() -> None:
    with pytest.raises(ValueError, match="power_loss"):
        ClusterSpec.of(brokers=3, combined=True, power_loss=True)
    assert ClusterSpec.of(brokers=3, power_loss=True).id == "3c+3b-power"


# -- power ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def powered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    why = fuse_missing()
    if why is not None:
        pytest.skip(why)
    base = tmp_path_factory.mktemp("power")
    try:
        with Cluster(brokers=3, power_loss=True, base_dir=base, fast_start=cluster_fixtures.FORK_NODES) as started:
            assert len(mounts_under(started.data_dir)) == 6  # every controller's metadata, every broker's data
            yield started
    finally:
        assert mounts_under(base) == []


def test_power_loss_of_the_active_controller_with_fsync_loses_no_topic(powered: Cluster) -> None:
    created = [powered.create_topic(f"powered-{i}", partitions=1, replication_factor=3) for i in range(3)]
    active = powered.active_controller()
    fault = powered.power_loss(active, restart=True)  # back on the bytes it had fsynced
    assert fault.node_id == active and powered.node(active).running()
    assert "bytes_dropped" in fault.lost, fault.lost
    powered.wait_until_healthy()
    assert set(created) <= set(powered.topic_names())
    # every controller's plug pulled: what the quorum acknowledged must come back from their own disks
    faults = [powered.power_loss(c) for c in powered.controller_ids]
    assert not any(n.running() for n in powered.local.controllers)
    powered.recover()  # every controller restarted on what it had fsynced
    assert all(f.lost.get("power_loss") is True for f in faults), [f.lost for f in faults]
    assert set(created) <= set(powered.topic_names())


# -- through the pytest plugin ------------------------------------------------------------------------

pytest_plugins = ["pytester"]
PLUGIN = ("-p", "tidelog.testing.plugin", "-p", "no:cacheprovider")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester whose inner pytest and nodes import this checkout's tidelog."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    return pytester


def test_the_marker_gives_a_cluster_with_the_power_layer(inner: pytest.Pytester) -> None:
    if fuse_missing() is not None:
        pytest.skip(fuse_missing())
    inner.makepyfile(test_inner="""
        import pytest

        @pytest.mark.tidelog(brokers=1, power_loss=True)
        def test_power(tidelog_cluster):
            fault = tidelog_cluster.power_loss(4, restart=True)
            assert fault.lost["power_loss"] is True and tidelog_cluster.node(4).running()
    """)
    result = inner.runpytest_subprocess(*PLUGIN, timeout=240)
    result.assert_outcomes(passed=1)
    assert mounts_under(inner.path) == []


def test_link_faults_skip_with_a_reason(inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no /usr/sbin: no iptables, tc nor ss
    inner.makeini("[pytest]\ntidelog_brokers = 1\n")
    inner.makepyfile(test_inner="""
        def test_slow(tidelog_cluster):
            tidelog_cluster.slow_link(1, 4, 100)
    """)
    result = inner.runpytest_subprocess(*PLUGIN, "-rs", timeout=240)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*link faults need*"])
