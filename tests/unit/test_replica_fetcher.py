"""broker/replication/replica_fetcher.py: what a fetch answer leaves for the next round. A
partition whose answer moved its log (records appended) has its entry built again; one whose
answer moved only the high watermark keeps its entry, and the next fetch does not name it (a new
leader answers each partition a follower moves to it once, with no records)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from broker.replication.fetcher_manager import ReplicaFetcherManager
from broker.replication.fetcher_state import FetcherSettings
from common.log_config import LogConfig
from common.protocol import fetch
from common.protocol.api_keys import ApiKey
from common.topic_partition import TopicPartition
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.local_changes import changes_for_broker
from metadata.records import BeginEpoch, BrokerRegistrationChange, Listener, Partition, RegisterBroker, Topic
from tests.log_helpers import NOW, batch

ME, LEADER = 5, 4
IMAGE = apply(EMPTY_IMAGE, enumerate([
    BeginEpoch(1),
    *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", "127.0.0.1", 1),)) for b in (LEADER, ME)),
    *(BrokerRegistrationChange(b, i, fenced=False) for i, b in enumerate((LEADER, ME), start=1)),
    Topic("t", "T"),
    *(Partition("T", p, (LEADER, ME), (LEADER, ME), leader=LEADER, leader_epoch=1) for p in range(2)),
]))
QUIET, MOVED = TopicPartition("t", 0), TopicPartition("t", 1)


class Leader:
    """A leader's connection: answers each Fetch with `answers` (partition -> (HW, records))."""

    def __init__(self, answers: dict[int, tuple[int, bytes]]) -> None:
        self.closed = False
        self.address = "leader"
        self.answers = answers
        self.named: list[set[int]] = []  # the partitions each Fetch named
        self.fetched = asyncio.Event()

    def abort(self) -> None:
        self.closed = True

    async def request(self, api_key: int, version: int, payload: Any, decode: Any, **_: Any) -> Any:
        assert api_key == ApiKey.FETCH
        request = fetch.decode_fetch_request(memoryview(b"".join(payload)), version)
        named = {p.partition for t in request.topics for p in t.partitions}
        self.named.append(named)
        self.fetched.set()
        if not named:
            await asyncio.sleep(3600)  # a long poll with no news: the test ends first
        answer = fetch.FetchResponse(0, (fetch.FetchTopicResponse("t", tuple(
            fetch.FetchPartitionResponse(p, 0, self.answers[p][0], self.answers[p][1], log_start_offset=0)
            for p in sorted(named))),), 0, 77)
        return decode(memoryview(b"".join(fetch.encode_fetch_response(answer, version))), version)

    async def requests(self, api_key: int, version: int, payload: Any, decode: Any, on_answer: Any,
                       **kw: Any) -> None:
        """KafkaConnection.requests, each answer handed on in this task: a request while
        `on_answer` returns one."""
        while payload is not None:  # until on_answer stops (or a request never ends)
            payload = on_answer(await self.request(api_key, version, payload, decode, **kw))


@asynccontextmanager
async def follower(directory: Path, image: MetadataImage) -> AsyncIterator[tuple[ReplicaManager, ReplicaFetcherManager]]:
    """Broker ME's replica manager and replica fetchers over `image` (its partitions not yet
    applied), shut down after."""
    log_manager = LogManager([directory], LogConfig(), now_ms=NOW)
    replicas = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
    manager = ReplicaFetcherManager(replicas, FetcherSettings(ME), image=lambda: image)
    replicas.fetchers = manager
    try:
        yield replicas, manager
    finally:
        await manager.shutdown()
        log_manager.shutdown()


def test_an_answer_that_moved_only_the_high_watermark_leaves_the_entry_alone(tmp_path: Path) -> None:
    async def scenario() -> None:
        leader = Leader({QUIET.partition: (7, b""), MOVED.partition: (3, batch(3))})
        async with follower(tmp_path, IMAGE) as (replicas, manager):
            replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, IMAGE, ME), IMAGE)
            fetcher = manager.fetchers[LEADER]
            fetcher._conn = leader  # type: ignore[assignment]
            rebuilt: list[TopicPartition] = []  # entries built again (at once, or touched) once fetching
            touch, refresh = fetcher._rounds.touch, fetcher._refresh

            def noted_touch(tp: TopicPartition) -> None:
                rebuilt.extend([tp] if leader.named else [])
                touch(tp)

            def noted_refresh(tp: TopicPartition, *args: Any) -> None:
                rebuilt.extend([tp] if leader.named else [])
                refresh(tp, *args)
            fetcher._rounds.touch = noted_touch  # type: ignore[method-assign]
            fetcher._refresh = noted_refresh  # type: ignore[method-assign]
            async with asyncio.timeout(10):
                while len(leader.named) < 2:
                    leader.fetched.clear()
                    await leader.fetched.wait()
            assert leader.named[0] == {0, 1}  # the session's first, full fetch
            assert replicas.get_partition(QUIET).log.high_watermark == 0  # min(leader HW 7, own LEO 0)
            assert replicas.get_partition(MOVED).log.log_end_offset == 3
            assert rebuilt == [MOVED]  # built again: QUIET's entry is as it was
            assert leader.named[1] == {1}  # only the partition whose fetch offset moved
            assert fetcher._rounds.session.wanted[QUIET].fetch_offset == 0

    asyncio.run(scenario())
