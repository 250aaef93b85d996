"""Fencing a broker that leads tens of thousands of partitions, measured on a real controller quorum.

    with FencingScale.start(root, partitions=30_000) as run:   # 3 controllers, brokers 4, 5, 6
        figures = run.fence(4)                                  # broker 4 stops heartbeating
        assert figures.longest_stall_ms < 1000 and not figures.live_brokers_fenced

Used by tests/integration/test_fencing_scale.py and bench/partition_scale.py (issue 36).

The controllers are real `tidelog controller` processes (`LocalCluster`, no brokers). The
brokers are `BrokerDouble`s: each speaks the controllers' real broker RPCs (registration,
heartbeats, metadata fetches) through the broker's own `broker.controller_client.ControllerClient`
and the `common.rpc` messages, from one asyncio loop on a thread of this process. Why not
real brokers: a broker hosting 30,000 replicas creates 30,000 logs, which takes minutes of
CPU on a 2-core test machine (and 100,000 would not fit at all), while what is measured here
(the controllers' fencing decisions, their stalls, the heartbeats of live brokers meanwhile)
happens entirely in the controllers and depends only on what brokers say over these RPCs.
A double reports as its metadata offset the committed tip it reads with a metadata fetch: a
broker that replays at once.

Every partition is created with broker 4 as its preferred leader (manual assignments, RF=3),
so fencing broker 4 moves every leadership and shrinks every ISR.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from broker.controller_client import ControllerClient, ControllerUnavailableError
from common import rpc, waiting
from common.rpc_messages import BrokerHeartbeatRequest, BrokerRegistrationRequest, ListenerData
from localcluster.cluster_layout import RPC_SECRET_FILE
from localcluster.launcher import LocalCluster, free_ports
from security.rpc_secret import cluster_signer
from tidelog.admin_client import AdminClient

HOSTS: Final = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
BROKERS: Final = (4, 5, 6)
PER_TOPIC: Final = 1_000  # partitions per topic: a topic creation is one decision of this many
SESSION_TIMEOUT_MS: Final = 3_000  # shorter than Kafka's 9 s: a stall shows up as a fenced live broker sooner
HEARTBEAT_INTERVAL_MS: Final = 500
READY_S: Final = 60.0
WAIT_S: Final = 240.0  # creating or fencing 100,000 partitions on a loaded 2-core machine
STOP_S: Final = 10.0
STALL = re.compile(r"Controller (\d+) was stalled for (\d+) ms")
SLOW_DECISION = re.compile(r"Exceptionally slow controller decision: (\d+) ms")


@dataclass
class BrokerDouble:
    """One broker as the controllers see it: registration, then a heartbeat every interval."""

    broker_id: int
    client: ControllerClient
    epoch: int = -1
    tip: int = -1  # the last committed offset seen, reported as replayed
    silent: bool = False  # stopped heartbeating, as a broker that died
    want_shut_down: bool = False  # heartbeats ask for a controlled shutdown, as after a SIGTERM
    shut_down: bool = False  # told to shut down (then silent)
    unfenced: bool = False
    fenced_again: list[str] = field(default_factory=list)  # fenced replies after it was unfenced
    errors: list[str] = field(default_factory=list)
    heartbeat_ms: list[float] = field(default_factory=list)  # round trips, while measuring

    async def register(self) -> None:
        body = rpc.encode(BrokerRegistrationRequest(
            self.broker_id, f"double-{self.broker_id}-{uuid.uuid4()}",
            (ListenerData("PLAINTEXT", "127.0.0.1", 9000 + self.broker_id),)))
        reply = await self.client.register(body)
        if reply["error_code"] != 0:
            raise RuntimeError(f"broker {self.broker_id} registration refused: {reply}")
        self.epoch = reply["broker_epoch"]

    async def beat(self) -> None:
        fetched = await self.client.fetch_metadata(self.tip + 1, 0, broker_id=self.broker_id, max_records=1)
        self.tip = max(self.tip, int(fetched.get("last_offset", self.tip)))
        started = time.monotonic()
        reply = await self.client.heartbeat(rpc.encode(BrokerHeartbeatRequest(
            self.broker_id, self.epoch, self.tip, want_shut_down=self.want_shut_down)))
        self.heartbeat_ms.append((time.monotonic() - started) * 1000)
        if reply["error_code"] != 0:
            self.errors.append(f"heartbeat: {reply}")
        elif reply["should_shut_down"]:
            self.shut_down = self.silent = True  # a broker stops heartbeating once told to shut down
        elif reply["is_fenced"] and self.unfenced:
            self.fenced_again.append(f"fenced at metadata offset {self.tip}")
        else:
            self.unfenced = self.unfenced or not reply["is_fenced"]

    async def run(self, interval_s: float) -> None:
        await self.register()
        while True:  # until cancelled with the doubles
            if not self.silent:
                try:
                    await self.beat()
                except (ControllerUnavailableError, OSError, KeyError, ValueError) as exc:
                    self.errors.append(f"heartbeat failed: {exc!r}")
            await asyncio.sleep(interval_s)


class BrokerDoubles:
    """`BrokerDouble`s for `broker_ids` on one asyncio loop in a thread of this process."""

    def __init__(self, controllers: list[str], broker_ids: tuple[int, ...], interval_ms: int,
                 secret_file: Path | None = None) -> None:
        self._controllers, self._interval_s = controllers, interval_ms / 1000
        self._secret_file = secret_file  # the data dir's RPC secret: each double signs as its broker id
        self.brokers: dict[int, BrokerDouble] = {}
        self._ids = broker_ids
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="broker-doubles", daemon=True)
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(READY_S)

    async def _start(self) -> None:
        for broker_id in self._ids:
            signer = None if self._secret_file is None else cluster_signer(self._secret_file, broker_id)
            double = BrokerDouble(broker_id, ControllerClient(self._controllers, name=f"double-{broker_id}",
                                                              signer=signer))
            self.brokers[broker_id] = double
            self._tasks.append(asyncio.create_task(double.run(self._interval_s)))

    def call(self, fn: Any) -> Any:
        """Run `fn()` on the doubles' loop (their state is that loop's)."""
        async def run() -> Any:
            return fn()
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(STOP_S)

    def stop(self) -> None:
        async def stop() -> None:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            for double in self.brokers.values():
                await double.client.close()
        if self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(stop(), self._loop).result(STOP_S)
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(STOP_S)
        self._loop.close()


@dataclass(frozen=True)
class FencingFigures:
    """What one fencing measured (stalls from the controllers' own log lines)."""

    partitions: int
    fence_s: float  # broker silent (or asking to shut down) -> in no ISR and leading nothing
    detect_s: float  # broker silent -> fenced (its session timeout, plus the pass), or -> told to shut down
    longest_stall_ms: int  # the longest "was stalled for" any controller logged while fencing (0: none)
    stalls: list[str]  # those log lines
    slow_decisions: list[str]  # "Exceptionally slow controller decision" lines while fencing
    batched: bool  # the first decision's transition was logged, and the last batch's "leads no partition"
    live_brokers_fenced: list[str]  # brokers that heartbeat all along yet were fenced
    live_heartbeat_max_ms: float  # the slowest heartbeat round trip of a live broker while fencing
    live_heartbeat_errors: list[str]


class FencingScale:
    """A controller quorum, three broker doubles and `partitions` partitions led by broker 4."""

    def __init__(self, cluster: LocalCluster, doubles: BrokerDoubles, partitions: int) -> None:
        self.cluster, self.doubles, self.partitions = cluster, doubles, partitions
        self.admin = AdminClient([f"http://{n.spec.admin_address}" for n in cluster.controllers], timeout=60.0)
        self.create_s = 0.0

    @classmethod
    @contextmanager
    def start(cls, root: Path, *, partitions: int) -> Iterator[FencingScale]:
        """Start everything; on exit (or failure) stop the doubles and every controller process."""
        raft_port, admin_port = free_ports(HOSTS)
        props = {"broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                 "broker.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS)}
        with LocalCluster.start(root, controllers=len(HOSTS), raft_port=raft_port, admin_port=admin_port,
                                extra_properties=props, ready_timeout=READY_S) as cluster:
            doubles = BrokerDoubles([n.spec.admin_address for n in cluster.controllers], BROKERS,
                                    HEARTBEAT_INTERVAL_MS, cluster.root / RPC_SECRET_FILE)
            try:
                doubles.start()
                run = cls(cluster, doubles, partitions)
                run.wait("brokers 4, 5, 6 unfenced", lambda: run.brokers_in("UNFENCED") == set(BROKERS))
                run.create_s = run.create()
                yield run
            finally:
                doubles.stop()

    def wait(self, what: str, condition: Any, timeout_s: float = WAIT_S) -> Any:
        return waiting.wait_until(what, condition, timeout_s, poll_s=0.2)

    def brokers_in(self, state: str) -> set[int]:
        return {b["broker_id"] for b in self.admin.brokers() if b["state"] == state}

    def create(self) -> float:
        """Topics of PER_TOPIC partitions, replicas [4, 5, 6] or [4, 6, 5]; seconds until created."""
        started = time.monotonic()
        left, index = self.partitions, 0
        while left > 0:  # bounded by the partition count
            count = min(PER_TOPIC, left)
            self.admin.create_topic(f"t{index:04d}", partitions=None, replication_factor=None, configs={},
                                    assignments=[(4, 5, 6) if p % 2 == 0 else (4, 6, 5) for p in range(count)])
            left, index = left - count, index + 1
        return time.monotonic() - started

    def kill_active_once_fenced(self, broker_id: int) -> None:
        """SIGKILL the active controller as soon as it shows `broker_id` FENCED."""
        active = self.admin.cluster()["active_controller"]
        node = next(n for n in self.cluster.controllers if n.spec.node_id == active)
        on_active = AdminClient([f"http://{node.spec.admin_address}"], timeout=60.0)
        waiting.wait_until(f"controller {active} to fence broker {broker_id}", lambda: any(
            b["broker_id"] == broker_id and b["state"] == "FENCED" for b in on_active.brokers()), WAIT_S, poll_s=0.01)
        node.kill()

    def partitions_of(self, broker_id: int) -> tuple[int, int]:
        """(partitions it leads, partitions whose ISR holds it)."""
        led = in_isr = 0
        for topic in self.admin.topics():
            for partition in self.admin.topic(topic["name"])["partitions"]:
                led += partition["leader"] == broker_id
                in_isr += broker_id in partition["isr"]
        return led, in_isr

    def fence(self, broker_id: int, *, fail_over: bool = False) -> FencingFigures:
        """Silence `broker_id` and measure until it leads nothing and is in no ISR. `fail_over`:
        SIGKILL the active controller as soon as its first fencing batch committed (the broker
        shows FENCED), so that the next active controller must finish the job."""
        def act() -> None:
            self.doubles.call(lambda: setattr(self.doubles.brokers[broker_id], "silent", True))
            if fail_over:
                self.kill_active_once_fenced(broker_id)
            self.wait(f"broker {broker_id} fenced", lambda: broker_id in self.brokers_in("FENCED"))
        return self._measure(broker_id, act, batched=f"Fencing broker {broker_id} (")

    def shut_down(self, broker_id: int) -> FencingFigures:
        """`broker_id` heartbeats want_shut_down (a SIGTERMed broker) until it is told to shut
        down, then goes silent; measured until it leads nothing and is in no ISR."""
        def act() -> None:
            self.doubles.call(lambda: setattr(self.doubles.brokers[broker_id], "want_shut_down", True))
            self.wait(f"broker {broker_id} told to shut down",
                      lambda: self.doubles.call(lambda: self.doubles.brokers[broker_id].shut_down))
        return self._measure(broker_id, act, batched=f"Broker {broker_id} goes from UNFENCED to CONTROLLED_SHUTDOWN")

    def _measure(self, broker_id: int, act: Callable[[], None], *, batched: str) -> FencingFigures:
        """Run `act()` (until the broker is fenced or shut down), then wait until it leads nothing
        and is in no ISR; what the controllers logged and the live brokers saw meanwhile."""
        logs = [n.spec.log_path for n in self.cluster.controllers]
        marks = [path.stat().st_size for path in logs]
        live = [d for b, d in self.doubles.brokers.items() if b != broker_id]

        def forget_heartbeats() -> None:
            for double in live:
                double.heartbeat_ms.clear()
        self.doubles.call(forget_heartbeats)
        started = time.monotonic()
        act()
        detected = time.monotonic() - started
        # every topic's description is read per poll: once a second, not to load the controllers
        waiting.wait_until(f"broker {broker_id} in no ISR and leading nothing",
                           lambda: self.partitions_of(broker_id) == (0, 0), WAIT_S, poll_s=1.0)
        done = time.monotonic() - started
        text = "".join(path.read_bytes()[mark:].decode(errors="replace") for path, mark in zip(logs, marks))
        heartbeats = self.doubles.call(lambda: [ms for d in live for ms in d.heartbeat_ms])
        return FencingFigures(
            partitions=self.partitions, fence_s=done, detect_s=detected,
            longest_stall_ms=max((int(m.group(2)) for m in STALL.finditer(text)), default=0),
            stalls=[m.group(0) for m in STALL.finditer(text)],
            slow_decisions=[m.group(0) for m in SLOW_DECISION.finditer(text)],
            batched=batched in text and f"Broker {broker_id} leads no partition" in text,
            live_brokers_fenced=sorted(f"broker {d.broker_id}: {d.fenced_again}" for d in live if d.fenced_again)
            + sorted(f"broker {b}: FENCED in /v1/brokers" for b in self.brokers_in("FENCED") if b != broker_id),
            live_heartbeat_max_ms=max(heartbeats, default=0.0),
            live_heartbeat_errors=[e for d in live for e in d.errors])
