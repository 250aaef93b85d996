"""broker/metadata_follower_loop.py: once published, the follower pauses the cyclic GC while
another broker is in controlled shutdown (its leaderships move here, and it leaves once every
active broker replayed them) and collects again once that broker is fenced, or after
MAX_GC_PAUSE_MS; a shutdown that used its pause up does not pause again, the next one does."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.follower_settings import FollowerSettings
from broker.metadata_follower_loop import MAX_GC_PAUSE_MS, MetadataFollower, monotonic_ms
from metadata.records import BrokerRegistrationChange, encode_records
from quorum.log_state import MetadataLogState
from tests.unit.test_metadata_follower_fetch_ahead import BROKER, EPOCH, LogClient, controller_log

LEAVING = 5  # another broker of controller_log's cluster
WAIT_S = 20.0  # bound on each wait below (each takes a few fetches of 10 ms)


async def fetches_after(client: LogClient, condition: Callable[[], bool], fetches: int = 2) -> bool:
    """Wait until `condition` holds, then for `fetches` more fetches; whether the GC ran at the last."""
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.005)
        seen = len(client.collecting)
        while len(client.collecting) < seen + fetches:
            await asyncio.sleep(0.005)
    return client.collecting[-1]


def commit(log: MetadataLogState, **change: bool) -> None:
    epoch = log.image.cluster.brokers[LEAVING].broker_epoch
    assert log.apply_chunk(encode_records([BrokerRegistrationChange(LEAVING, epoch, **change)]), EPOCH).committed


async def scenario(tmp_path: Path) -> list[tuple[str, bool]]:
    """Another broker's controlled shutdown ending in its fencing, one that outlasts the pause, and
    the next one: whether the GC ran at the fetches after each step."""
    log = controller_log()
    client = LogClient(log)
    skew = [0]  # ms added to the follower's clock
    settings = FollowerSettings(broker_id=BROKER, incarnation_id="inc", listeners=(), log_dir=tmp_path,
                                fetch_max_wait_ms=10)
    follower = MetadataFollower(settings, client, lambda changes, image: None,  # type: ignore[arg-type]
                                clock=lambda: monotonic_ms() + skew[0])
    client.follower = follower
    shutting_down = lambda: follower.state.another_broker_shutting_down  # noqa: E731
    applied = lambda: follower.state.applied_offset == log.last_offset  # noqa: E731
    seen: list[tuple[str, bool]] = []
    task = asyncio.create_task(follower.run())
    try:
        await asyncio.wait_for(follower.published.wait(), WAIT_S)
        seen.append(("published", await fetches_after(client, applied)))
        commit(log, in_controlled_shutdown=True)
        seen.append(("in controlled shutdown", await fetches_after(client, shutting_down)))
        commit(log, fenced=True)
        seen.append(("fenced", await fetches_after(client, lambda: applied() and not shutting_down())))
        commit(log, fenced=False)
        commit(log, in_controlled_shutdown=True)
        seen.append(("in controlled shutdown again", await fetches_after(client, shutting_down)))
        skew[0] += MAX_GC_PAUSE_MS
        seen.append(("paused MAX_GC_PAUSE_MS", await fetches_after(client, lambda: True)))
        commit(log, fenced=True)
        seen.append(("fenced again", await fetches_after(client, lambda: applied() and not shutting_down())))
        commit(log, fenced=False)
        commit(log, in_controlled_shutdown=True)
        seen.append(("the next shutdown", await fetches_after(client, shutting_down)))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        gc.enable()
    return seen


def test_the_gc_pauses_while_another_broker_is_in_controlled_shutdown(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="broker.metadata_follower_loop"):
        seen = asyncio.run(scenario(tmp_path))
    assert seen == [("published", True), ("in controlled shutdown", False), ("fenced", True),
                    ("in controlled shutdown again", False), ("paused MAX_GC_PAUSE_MS", True),
                    ("fenced again", True), ("the next shutdown", False)]
    assert gc.isenabled()  # the follower's end collects again
    assert caplog.text.count("the cyclic GC pauses while its leaderships move") == 3
    assert "the cyclic GC collects again after" in caplog.text
