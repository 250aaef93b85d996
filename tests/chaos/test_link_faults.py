"""Each link fault measured on a plain TCP echo between two loopback addresses: the configured
delay against the observed round trip, the rate against the observed throughput, the loss
probability against the dropped share, a slow close against the FIN's lateness; and after each
test the machine's link-fault rules, qdiscs and proxy are gone (the state equals the one before),
even when the test body failed."""

from __future__ import annotations

import math
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

import pytest

from chaos.links import install
from chaos.links.install import LinkFaults
from chaos.links.rules import DelayParams
from chaos.nemeses.links import PacketMatch

pytestmark = pytest.mark.skipif(install.missing() is not None, reason=str(install.missing()))
SERVER, CLIENT, OTHER = "127.0.0.7", "127.0.0.8", "127.0.0.9"
TOLERANCE: Final = 0.10  # the bound: observed within 10 % of configured
ROUND_TRIPS: Final = 15
IO_TIMEOUT_S: Final = 10.0
CHUNK: Final = 64 * 1024


class EchoServer:
    """Echoes each connection's bytes until it closes, then closes its side; `closing` mode
    answers the first message and closes at once (the slow-close test)."""

    def __init__(self, *, close_after_first: bool = False) -> None:
        self.listener = socket.create_server((SERVER, 0))
        self.port = int(self.listener.getsockname()[1])
        self.close_after_first = close_after_first
        self._stopping = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stopping:  # until stop()
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(connection,), daemon=True).start()

    def _echo(self, connection: socket.socket) -> None:
        with connection:
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                while data := connection.recv(CHUNK):  # until the client closes
                    connection.sendall(data)
                    if self.close_after_first:
                        return
            except OSError:
                return

    def stop(self) -> None:
        self._stopping = True
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()


def _ours(state: tuple[str, str, str, str]) -> tuple[list[str], list[str], str, str]:
    """The parts of the machine's state link faults may touch: their chains' lines, lo's qdiscs
    and classes (other engineers' runs add chains of their own to the same tables meanwhile)."""
    filter_rules, nat_rules, qdiscs, classes = state
    return ([line for line in filter_rules.splitlines() if "TIDELOG-LINK" in line],
            [line for line in nat_rules.splitlines() if "TIDELOG-LINK" in line], qdiscs, classes)


@pytest.fixture
def unchanged() -> Iterator[None]:
    before = _ours(install.state())
    yield
    assert _ours(install.state()) == before and install.leftovers() == []


@pytest.fixture
def echo(unchanged: None) -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.stop()


def link(port: int) -> list[PacketMatch]:
    """CLIENT <-> SERVER:port, both directions (requests and answers)."""
    return [PacketMatch(CLIENT, SERVER, port, True), PacketMatch(SERVER, CLIENT, port, False)]


def connect(port: int, source: str = CLIENT) -> socket.socket:
    s = socket.create_connection((SERVER, port), timeout=IO_TIMEOUT_S, source_address=(source, 0))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def receive(s: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:  # bounded by size; the socket's timeout bounds each wait
        chunk = s.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)


def round_trips_ms(port: int, count: int = ROUND_TRIPS, source: str = CLIENT) -> list[float]:
    times = []
    with connect(port, source) as s:
        for n in range(count):
            message = f"ping {n:04d}".encode()
            start = time.monotonic()
            s.sendall(message)
            assert receive(s, len(message)) == message  # in order, intact
            times.append((time.monotonic() - start) * 1000)
    return times


@pytest.mark.parametrize("delay_ms, jitter_ms", [(25, 0), (50, 10)])
def test_delay_adds_twice_the_configured_delay_to_a_round_trip(echo: EchoServer, delay_ms: int,
                                                               jitter_ms: int) -> None:
    baseline = statistics.median(round_trips_ms(echo.port))
    with LinkFaults.open() as faults:
        handle = faults.delay(link(echo.port), DelayParams(delay_ms, jitter_ms), seed=7)
        observed = statistics.median(round_trips_ms(echo.port))
        assert faults.relayed(handle) == 1
        other = statistics.median(round_trips_ms(echo.port, source=OTHER))
    expected = 2 * delay_ms  # each direction's bytes wait delay ± jitter
    assert abs(observed - baseline - expected) <= TOLERANCE * expected, (observed, baseline, expected)
    assert other < delay_ms / 2  # another address to the same port: not on the link
    assert statistics.median(round_trips_ms(echo.port)) < delay_ms / 2  # healed


def test_a_connection_established_before_the_delay_is_reset_and_reconnects_through_it(echo: EchoServer) -> None:
    with connect(echo.port) as before, LinkFaults.open() as faults:
        faults.delay(link(echo.port), DelayParams(30), seed=1)
        with pytest.raises(OSError):
            before.sendall(b"x")
            receive(before, 1)
        assert statistics.median(round_trips_ms(echo.port, 5)) >= 60 * (1 - TOLERANCE)


def test_bandwidth_limits_throughput_to_the_configured_rate(unchanged: None) -> None:
    rate_kbit = 8_000  # 1 MB/s
    size = 3_000_000  # 3 s of it: the class's 10 ms burst is under 1 % of the transfer
    received: list[tuple[int, float]] = []
    with socket.create_server((SERVER, 0)) as listener:
        port = int(listener.getsockname()[1])

        def sink() -> None:  # counts bytes from the first to the end of stream
            connection, _ = listener.accept()
            with connection:
                first = connection.recv(CHUNK)
                start, count = time.monotonic(), len(first)
                while data := connection.recv(CHUNK):  # until the client closes
                    count += len(data)
                received.append((count, time.monotonic() - start))

        reader = threading.Thread(target=sink, daemon=True)
        reader.start()
        with LinkFaults.open() as faults:
            faults.bandwidth(link(port), rate_kbit)
            with connect(port) as s:
                s.sendall(b"x" * size)
            reader.join(IO_TIMEOUT_S)
        count, elapsed = received[0]
    observed_kbit = count * 8 / 1000 / elapsed
    assert count == size and abs(observed_kbit - rate_kbit) <= TOLERANCE * rate_kbit, observed_kbit


def test_bandwidth_leaves_other_traffic_unlimited(echo: EchoServer) -> None:
    with LinkFaults.open() as faults:
        faults.bandwidth(link(echo.port), 8)  # 1 kB/s: the link itself barely moves
        with connect(echo.port, OTHER) as s:
            size = 1_000_000
            start = time.monotonic()
            sender = threading.Thread(target=s.sendall, args=(b"y" * size,))
            sender.start()
            assert len(receive(s, size)) == size
            sender.join()
        assert time.monotonic() - start < 1.0  # another address to the same port: the default class


LOSS_ROUND_TRIPS: Final = 600
LOSS_CONNECTIONS: Final = 6  # each lost packet costs its connection a TCP retransmit timeout (>= 200 ms): overlap them


def echo_round_trips(port: int, numbers: range) -> None:
    """One message per number over one connection, each answered whole before the next is sent."""
    with connect(port) as s:  # TCP resends what was lost: the echo still arrives whole
        for n in numbers:
            message = f"{n:06d}".encode() * 16
            s.sendall(message)
            assert receive(s, len(message)) == message


def test_loss_drops_the_configured_share_of_the_links_packets(echo: EchoServer) -> None:
    probability = 0.05
    with LinkFaults.open() as faults:
        handle = faults.loss(link(echo.port), probability)
        share = LOSS_ROUND_TRIPS // LOSS_CONNECTIONS
        with ThreadPoolExecutor(LOSS_CONNECTIONS) as pool:
            done = [pool.submit(echo_round_trips, echo.port, range(c * share, (c + 1) * share))
                    for c in range(LOSS_CONNECTIONS)]
            for future in done:
                future.result(timeout=IO_TIMEOUT_S * 6)  # a failed echo's assertion, raised here
        seen, dropped = faults.loss_counters(handle)
        untouched = round_trips_ms(echo.port, 5, source=OTHER)
    assert seen >= 1000
    bound = 4.5 * math.sqrt(probability * (1 - probability) / seen)  # a false alarm ~1 in 10^5
    assert abs(dropped / seen - probability) <= bound, (seen, dropped, bound)
    assert statistics.median(untouched) < 5


def test_slow_close_holds_the_fin(unchanged: None) -> None:
    server = EchoServer(close_after_first=True)
    close_delay_ms = 300
    try:
        with LinkFaults.open() as faults:
            faults.delay(link(server.port), DelayParams(0, 0, close_delay_ms), seed=1)
            with connect(server.port) as s:
                s.sendall(b"bye")
                assert receive(s, 3) == b"bye"
                answered = time.monotonic()
                assert s.recv(1) == b""  # the server's FIN, late
                late_ms = (time.monotonic() - answered) * 1000
    finally:
        server.stop()
    assert abs(late_ms - close_delay_ms) <= TOLERANCE * close_delay_ms, late_ms


def test_everything_goes_away_when_the_body_fails(echo: EchoServer) -> None:
    with pytest.raises(RuntimeError, match="boom"), LinkFaults.open() as faults:
        faults.delay(link(echo.port), DelayParams(10), seed=1)
        faults.bandwidth(link(echo.port), 8_000)
        faults.loss(link(echo.port), 0.5)
        raise RuntimeError("boom")


def test_tidelog_chaos_clean_removes_a_crashed_runs_faults(echo: EchoServer) -> None:
    script = ("import os, sys\nfrom chaos.links.install import LinkFaults\nfrom chaos.links.rules import DelayParams\n"
              "from chaos.nemeses.links import PacketMatch\n"
              f"m = [PacketMatch('{CLIENT}', '{SERVER}', {echo.port}, True)]\n"
              "f = LinkFaults.open(); f.loss(m, 1.0); f.bandwidth(m, 8000)\n"
              "os._exit(0)  # a crash: nothing removed\n")
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", script], cwd=root, timeout=60, check=True)
    assert install.leftovers() != []
    done = subprocess.run([sys.executable, "-m", "tidelog", "chaos", "clean"], capture_output=True, text=True,
                          timeout=60, cwd=root, check=True)
    assert "TIDELOG-LINK" in done.stdout
    assert install.leftovers() == []


# -- on a cluster: the heal of a delay is prompt ----------------------------------------------------

HEALED_WRITE_S: Final = 2.0  # without the reset at removal the first write after it took 5.5 s (measured)
HEALTHY_WRITE_S: Final = 1.0  # a direct acks=all write on a loaded 2-core machine


def test_removing_a_delay_between_leader_and_follower_resets_their_connections(tmp_path: Path) -> None:
    """A follower's fetch connection opened through the delay proxy is reset by the fault's removal:
    the next acks=all write waits for a reconnect, not for replica.socket.timeout.ms on a connection
    whose NAT entry still points at the proxy."""
    from confluent_kafka import Producer

    from chaos.nemeses.links import both_ways
    from tests.integration.cluster_fixtures import FORK_NODES
    from tidelog.testing import Cluster

    def write(producer: Producer, value: bytes) -> float:
        began = time.monotonic()
        producer.produce("healed", value, partition=0)
        assert producer.flush(30) == 0
        return time.monotonic() - began

    with Cluster(brokers=3, base_dir=tmp_path, fast_start=FORK_NODES) as cluster, LinkFaults.open() as faults:
        cluster.create_topic("healed", partitions=1, replication_factor=3, configs={"min.insync.replicas": 3})
        leader = cluster.leader_of("healed")
        follower = next(r for r in cluster.partition("healed")["isr"] if r != leader)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 0})
        write(producer, b"warm-up")
        handle = faults.delay(both_ways(cluster.node(leader).spec, cluster.node(follower).spec), DelayParams(100),
                              seed=1)
        assert write(producer, b"slow") >= 0.2  # one held fetch answer, one held next fetch
        assert faults.relayed(handle) >= 1
        faults.remove(handle)
        took = [write(producer, b"healed-%d" % i) for i in range(3)]
        del producer  # gone before the cluster stops: no reconnect attempts logged at its stop
    assert took[0] < HEALED_WRITE_S and max(took[1:]) < HEALTHY_WRITE_S, took
