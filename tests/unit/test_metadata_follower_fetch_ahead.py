"""broker/metadata_follower_loop.py: a follower behind by several pages asks for the next page
before it applies the one it holds (the controller reads it meanwhile), and reaches the same
image as fetching one page after the other; one behind the log start loads the snapshot; the
cyclic GC is paused until the first publish. broker/metadata_follower.py's `offset_after`."""

from __future__ import annotations

import asyncio
import gc
import random
from pathlib import Path
from typing import Any

import pytest

from broker.follower_settings import FollowerSettings
from broker.metadata_follower import offset_after
from broker.metadata_follower_loop import FETCH_PAGE_RECORDS, MetadataFollower
from common import rpc
from common.rpc_messages import BrokerHeartbeatReply, BrokerRegistrationReply, MetadataFetchReply
from metadata.codec import Listener
from metadata.records import BeginEpoch, RegisterBroker, encode_records
from metadata.snapshot import encode_snapshot
from quorum.log_state import MetadataLogState, transaction_chunks
from quorum.topic_control import create_topic

BROKER = 4
EPOCH = 1
TOPICS = 3  # of FETCH_PAGE_RECORDS partitions each: a catch-up of four pages
WAIT_S = 20.0  # bound on the whole catch-up (it takes well under a second)


def controller_log() -> MetadataLogState:
    log = MetadataLogState()
    assert log.apply_chunk(encode_records([BeginEpoch(EPOCH)]), EPOCH).committed
    for broker in (BROKER, 5, 6):
        listeners = (Listener("PLAINTEXT", f"127.0.0.{broker}", 9092),)
        assert log.apply_chunk(encode_records([RegisterBroker(broker, f"inc-{broker}", listeners, fenced=False)]),
                               EPOCH).committed
    rng = random.Random(35)
    for t in range(TOPICS):
        created = create_topic(log.image, name=f"t{t}", partitions=FETCH_PAGE_RECORDS, replication_factor=3,
                               configs={}, topic_id=f"id-{t}", rng=rng)
        for chunk in transaction_chunks(created.records, f"create t{t}"):
            assert log.apply_chunk(chunk, EPOCH).committed
    return log


class LogClient:
    """A ControllerClient double answering from one committed log, as every controller does."""

    target = "controller-1"

    def __init__(self, log: MetadataLogState) -> None:
        self.log = log
        self.follower: MetadataFollower | None = None
        self.asked: list[tuple[int, int]] = []  # (offset asked, where the follower's replay had reached then)
        self.collecting: list[bool] = []  # whether the cyclic GC ran at each fetch

    async def fetch_metadata(self, offset: int, max_wait_ms: int, *, broker_id: int = -1,
                             max_records: int | None = None) -> dict[str, Any]:
        assert self.follower is not None and max_records is not None
        self.asked.append((offset, self.follower.state.next_fetch_offset))
        self.collecting.append(gc.isenabled())
        await asyncio.sleep(0)  # an answer takes a loop turn at least
        try:
            pairs = tuple(self.log.record_maps_from(offset, max_records))
        except IndexError:  # folded: the base snapshot, then the records after it, as quorum.broker_rpc answers
            base = self.log.log_start_offset - 1
            return rpc.encode_reply(MetadataFetchReply((), max(self.log.last_offset, base), self.log.log_start_offset,
                                                       self.log.base_snapshot, base))
        if not pairs:  # caught up: a long-poll that times out at once
            await asyncio.sleep(max_wait_ms / 1000)
        return rpc.encode_reply(MetadataFetchReply(pairs, self.log.last_offset, self.log.log_start_offset))

    async def register(self, body: dict[str, Any]) -> dict[str, Any]:
        return rpc.encode_reply(BrokerRegistrationReply(self.log.image.cluster.brokers[BROKER].broker_epoch))

    async def heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        return rpc.encode_reply(BrokerHeartbeatReply(is_caught_up=True, is_fenced=False, should_shut_down=False))


async def catch_up(log: MetadataLogState, tmp_path: Path) -> tuple[MetadataFollower, LogClient]:
    client = LogClient(log)
    settings = FollowerSettings(broker_id=BROKER, incarnation_id="inc", listeners=(), log_dir=tmp_path,
                                fetch_max_wait_ms=10)
    follower = MetadataFollower(settings, client, lambda changes, image: None)  # type: ignore[arg-type]
    client.follower = follower
    task = asyncio.create_task(follower.run())
    try:
        await asyncio.wait_for(follower.published.wait(), WAIT_S)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return follower, client


def test_a_follower_pages_behind_asks_for_the_next_page_before_applying_this_one(tmp_path: Path) -> None:
    log = controller_log()
    follower, client = asyncio.run(catch_up(log, tmp_path))
    assert follower.state.image == log.image
    assert gc.isenabled() and not any(client.collecting[:4]), client.collecting  # paused until published
    catch_up_pages = [(offset, replayed) for offset, replayed in client.asked if offset <= log.last_offset]
    assert [offset for offset, _ in catch_up_pages] == list(range(0, log.last_offset + 1, FETCH_PAGE_RECORDS))
    # every page after the first was asked while the previous one was not replayed yet
    assert all(replayed < offset for offset, replayed in catch_up_pages[1:]), catch_up_pages


def test_a_follower_behind_the_log_start_loads_the_snapshot(tmp_path: Path) -> None:
    log = controller_log()
    log.fold(keep_records=FETCH_PAGE_RECORDS)
    assert log.log_start_offset > 0
    follower, client = asyncio.run(catch_up(log, tmp_path))
    assert follower.state.image == log.image  # the snapshot, then the records after it
    assert client.asked[0] == (0, 0) and gc.isenabled()
    assert client.asked[1][0] == log.log_start_offset, client.asked


def reply(records: tuple[tuple[int, dict[str, Any]], ...], last_offset: int, **snapshot: Any) -> MetadataFetchReply:
    return MetadataFetchReply(records, last_offset, 0, **snapshot)


SNAPSHOT = encode_snapshot(MetadataLogState().image)


@pytest.mark.parametrize(("fetched", "after"), [
    (reply(((5, {}), (6, {})), 9), 7),  # more committed than this page holds
    (reply(((5, {}), (6, {})), 6), None),  # this page ends where the log ends
    (reply((), 9), None),  # nothing here: the next fetch asks again, not ahead
    (reply((), 9, snapshot=SNAPSHOT, snapshot_offset=4), 5),
    (reply((), 4, snapshot=SNAPSHOT, snapshot_offset=4), None),
    (reply((), 9, snapshot=SNAPSHOT), None),  # no declared offset: wait for the decoded snapshot's
], ids=["behind", "at-end", "empty", "snapshot-behind", "snapshot-at-end", "snapshot-undeclared"])
def test_offset_after(fetched: MetadataFetchReply, after: int | None) -> None:
    assert offset_after(fetched) == after
