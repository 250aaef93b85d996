"""quorum/listener_watch.py over real loopback sockets: which endings count as a process gone.

A "broker" here is a real listening socket on 127.0.0.1 that the test opens and closes: the
process-death case closes the listener and every accepted connection, as a kernel does for an
exiting process; a paused process keeps both; a broker dropping one connection keeps listening.
The absence of a verdict is checked over a short window (the verdict, when due, takes ms).
The last test drives the controller runtime: the verdict fences that incarnation at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from metadata.image import MetadataImage
from metadata.records import BrokerRegistrationChange, Listener, RegisterBroker
from quorum.active_controller import ActiveController
from quorum.listener_watch import ListenerWatch
from tests.unit.test_controller_runtime import Clock, fenced, runtime_for
from tests.unit.test_quorum_active_controller import ScriptedLog, until

QUIET_S = 0.5  # how long a watch must stay silent where no verdict is due
HOST = "127.0.0.1"


class FakeBroker:
    """A real listener; `connections` are the server ends of what the watch opened."""

    def __init__(self) -> None:
        self.connections: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def listen(self) -> None:
        async def accepted(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections.append(writer)
        self.server = await asyncio.start_server(accepted, HOST, self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    def stop_listening(self) -> None:
        assert self.server is not None
        self.server.close()

    def drop_connections(self) -> None:
        for writer in self.connections:
            writer.transport.abort()  # an RST, as for an exiting process's sockets
        self.connections.clear()

    def exit(self) -> None:
        self.stop_listening()
        self.drop_connections()


@pytest.fixture
async def broker() -> AsyncIterator[FakeBroker]:
    fake = FakeBroker()
    await fake.listen()
    try:
        yield fake
    finally:
        fake.exit()


@pytest.fixture
async def cluster(broker: FakeBroker) -> AsyncIterator[tuple[ScriptedLog, ActiveController]]:
    log = ScriptedLog()
    controller = ActiveController(log)
    task = asyncio.create_task(controller.run())
    log.lead(term=1)
    await until(lambda: controller.is_active)
    outcome = await controller.append([RegisterBroker(4, "inc-4", (Listener("PLAINTEXT", HOST, broker.port),))], 1.0)
    await controller.append([BrokerRegistrationChange(4, outcome.first_offset, fenced=False)], 1.0)
    try:
        yield log, controller
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class Verdicts:
    def __init__(self, refusals: int = 0) -> None:
        self.seen: list[tuple[int, int, str]] = []
        self._refusals = refusals  # verdicts answered "not acted on" before one is

    async def __call__(self, broker_id: int, broker_epoch: int, evidence: str) -> bool:
        self.seen.append((broker_id, broker_epoch, evidence))
        if self._refusals:
            self._refusals -= 1
            return False
        return True


async def watching(image: MetadataImage, refusals: int = 0) -> tuple[ListenerWatch, Verdicts]:
    verdicts = Verdicts(refusals)
    watch = ListenerWatch(verdicts, local_host=HOST, connect_timeout=0.5, retry_delay=0.05)
    watch.sync(image)
    return watch, verdicts


async def test_an_exited_process_is_reported_once_with_its_epoch(
        broker: FakeBroker, cluster: tuple[ScriptedLog, ActiveController], caplog: pytest.LogCaptureFixture) -> None:
    log, _ = cluster
    caplog.set_level(logging.INFO, logger="quorum.listener_watch")
    watch, verdicts = await watching(log.image())
    try:
        await until(lambda: len(broker.connections) == 1)
        broker.exit()
        await until(lambda: verdicts.seen != [])
        epoch = log.image().cluster.brokers[4].broker_epoch
        assert [(b, e) for b, e, _ in verdicts.seen] == [(4, epoch)]
        assert f"{HOST}:{broker.port}" in verdicts.seen[0][2]
        # each half of the evidence has its line, so a verdict that never came says which was missing
        lines = [r.getMessage() for r in caplog.records]
        assert [line for line in lines if "holding a connection" in line or "ended" in line] == [
            f"Watching broker 4 (broker epoch {epoch}): holding a connection to its listener {HOST}:{broker.port}",
            f"Broker 4 (broker epoch {epoch}): its listener {HOST}:{broker.port} ended the controller's "
            "connection; connecting again"]
    finally:
        await watch.close()


async def test_a_verdict_not_acted_on_is_given_again_while_the_listener_refuses(
        broker: FakeBroker, cluster: tuple[ScriptedLog, ActiveController]) -> None:
    # a fencing decision that failed (a busy quorum) must not leave the broker to its session
    log, _ = cluster
    watch, verdicts = await watching(log.image(), refusals=2)
    try:
        await until(lambda: len(broker.connections) == 1)
        broker.exit()
        await until(lambda: len(verdicts.seen) == 3)
        await asyncio.sleep(QUIET_S)
        assert len(verdicts.seen) == 3, "asked again after the verdict was acted on"
        assert {(b, e) for b, e, _ in verdicts.seen} == {(4, log.image().cluster.brokers[4].broker_epoch)}
    finally:
        await watch.close()


@pytest.mark.parametrize("fault", ["paused: listener and connection kept",
                                   "a live broker drops the connection and keeps listening",
                                   "the listener closed but the connection kept"])
async def test_no_verdict_without_both_halves_of_the_evidence(
        broker: FakeBroker, cluster: tuple[ScriptedLog, ActiveController], fault: str) -> None:
    log, _ = cluster
    watch, verdicts = await watching(log.image())
    try:
        await until(lambda: len(broker.connections) == 1)
        if fault.startswith("a live broker"):
            broker.drop_connections()
            await until(lambda: len(broker.connections) == 1)  # the watch came back at once
        elif fault.startswith("the listener closed"):
            broker.stop_listening()
        await asyncio.sleep(QUIET_S)
        assert verdicts.seen == []
    finally:
        await watch.close()


async def test_a_listener_never_reached_is_no_evidence(cluster: tuple[ScriptedLog, ActiveController],
                                                       broker: FakeBroker) -> None:
    log, _ = cluster
    broker.exit()  # refused from the first attempt: not yet open, or a REJECT rule
    watch, verdicts = await watching(log.image())
    try:
        await asyncio.sleep(QUIET_S)
        assert verdicts.seen == []
        await broker.listen()  # the same port: the watch holds a connection from now on
        await until(lambda: len(broker.connections) == 1)
    finally:
        await watch.close()


async def test_sync_follows_the_unfenced_brokers(cluster: tuple[ScriptedLog, ActiveController],
                                                 broker: FakeBroker) -> None:
    log, controller = cluster
    watch, _ = await watching(log.image())
    try:
        epoch = log.image().cluster.brokers[4].broker_epoch
        assert watch.watched == {4: (epoch, HOST, broker.port)}
        await controller.append([BrokerRegistrationChange(4, epoch, fenced=True)], 1.0)
        watch.sync(log.image())
        assert watch.watched == {}
        await controller.append([BrokerRegistrationChange(4, epoch, fenced=False)], 1.0)
        watch.sync(log.image())
        assert list(watch.watched) == [4]
        watch.sync(None)  # no longer the active controller
        assert watch.watched == {}
    finally:
        await watch.close()


async def test_the_runtime_fences_the_gone_incarnation_at_once(
        cluster: tuple[ScriptedLog, ActiveController], broker: FakeBroker) -> None:
    log, controller = cluster
    clock = Clock()
    settings_runtime = runtime_for(log, controller, clock, watch_listeners=True)
    try:
        await settings_runtime.run_due(clock.now)  # the first watch pass: no time has to pass
        await until(lambda: len(broker.connections) == 1)
        assert fenced(log) == set()
        broker.exit()
        await until(lambda: fenced(log) == {4})  # long before the 3 s session: the clock never moved
    finally:
        await settings_runtime.close()
