"""broker/metadata_follower_loop.py: a page of an open metadata transaction (KIP-868) replays but
publishes nothing until the transaction's End; the follower asks for the next page at once, and
pauses (EMPTY_FETCH_PAUSE) only after a fetch that replayed nothing."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

import broker.metadata_follower_loop as loop_module
from broker.follower_settings import FollowerSettings
from broker.metadata_follower_loop import EMPTY_FETCH_PAUSE, FETCH_PAGE_RECORDS, MetadataFollower
from quorum.log_state import MetadataLogState, transaction_chunks
from quorum.topic_control import create_topic
from tests.unit.test_metadata_follower_fetch_ahead import EPOCH, WAIT_S, LogClient, controller_log

BROKER = 4
MAX_WAIT_MS = 20  # the double's long-poll: not EMPTY_FETCH_PAUSE, which this test counts


class CountingClient(LogClient):
    """Counts the replies that held no records (each may be followed by one pause)."""

    def __init__(self, log: MetadataLogState) -> None:
        super().__init__(log)
        self.empty_replies = 0

    async def fetch_metadata(self, offset: int, max_wait_ms: int, *, broker_id: int = -1,
                             max_records: int | None = None) -> dict[str, Any]:
        reply = await super().fetch_metadata(offset, max_wait_ms, broker_id=broker_id, max_records=max_records)
        if not reply.get("records"):
            self.empty_replies += 1
        return reply


def add_topic(log: MetadataLogState, name: str, partitions: int) -> None:
    created = create_topic(log.image, name=name, partitions=partitions, replication_factor=3, configs={},
                           topic_id=f"id-{name}", rng=random.Random(35))
    for chunk in transaction_chunks(created.records, f"create {name}"):
        assert log.apply_chunk(chunk, EPOCH).committed


async def follow(log: MetadataLogState, tmp_path: Path) -> tuple[MetadataFollower, CountingClient]:
    """Catch up (the log holds transactions of several pages), then follow one more such
    transaction committed after the first publish."""
    client = CountingClient(log)
    settings = FollowerSettings(broker_id=BROKER, incarnation_id="inc", listeners=(), log_dir=tmp_path,
                                fetch_max_wait_ms=MAX_WAIT_MS)
    follower = MetadataFollower(settings, client, lambda changes, image: None)  # type: ignore[arg-type]
    client.follower = follower
    task = asyncio.create_task(follower.run())
    try:
        await asyncio.wait_for(follower.published.wait(), WAIT_S)
        add_topic(log, "late", 3 * FETCH_PAGE_RECORDS)
        async with asyncio.timeout(WAIT_S):
            while follower.state.applied_offset < log.last_offset:  # bounded by the timeout
                await asyncio.sleep(0.001)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return follower, client


def test_pages_of_an_open_transaction_are_fetched_without_a_pause(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    pauses = 0
    real_sleep = asyncio.sleep

    async def sleep(delay: float, result: Any = None) -> Any:
        nonlocal pauses
        pauses += delay == EMPTY_FETCH_PAUSE
        return await real_sleep(delay, result)

    monkeypatch.setattr(loop_module.asyncio, "sleep", sleep)
    log = controller_log()
    follower, client = asyncio.run(follow(log, tmp_path))
    assert follower.state.image == log.image
    pages = sum(1 for offset, _ in client.asked if offset <= log.last_offset)
    assert pages >= 7  # the catch-up's four pages, and the late topic's three or more
    assert pauses <= client.empty_replies, (pauses, client.empty_replies, pages)
