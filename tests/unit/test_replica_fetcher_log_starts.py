"""broker/replication/replica_fetcher.py: the log starts a fetch answer moved (the leader's
DeleteRecords reaching its followers) are written to the log-start file once per answer, before
the next fetch reports them; not once per partition with the event loop waiting for each write."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from broker.log.log_manager import LOG_START_OFFSET_CHECKPOINT
from common.protocol import fetch
from tests.log_helpers import batch
from tests.unit.test_replica_fetcher import IMAGE, LEADER, ME, MOVED, QUIET, Leader, follower
from metadata.image import EMPTY_IMAGE
from metadata.local_changes import changes_for_broker


class DeletingLeader(Leader):
    """Answers each partition's first fetch with 3 records and log start 2 (records deleted on
    the leader), then holds every later fetch."""

    def __init__(self) -> None:
        super().__init__({QUIET.partition: (3, batch(3)), MOVED.partition: (3, batch(3))})
        self.files_at_fetch: list[str] = []  # the log-start file as each fetch was sent
        self.file: Path | None = None

    async def request(self, api_key: int, version: int, payload: Any, decode: Any, **kw: Any) -> Any:
        assert self.file is not None
        self.files_at_fetch.append(self.file.read_text() if self.file.exists() else "")
        answer = await super().request(api_key, version, payload, decode, **kw)
        return fetch.FetchResponse(answer.throttle_time_ms, tuple(
            fetch.FetchTopicResponse(t.topic, tuple(
                fetch.FetchPartitionResponse(p.partition_index, 0, p.high_watermark, p.records, log_start_offset=2)
                for p in t.partitions)) for t in answer.responses), 0, answer.session_id)


def test_log_starts_an_answer_moved_are_written_once_before_the_next_fetch(tmp_path: Path) -> None:
    async def scenario() -> None:
        leader = DeletingLeader()
        async with follower(tmp_path, IMAGE) as (replicas, manager):
            leader.file = tmp_path / LOG_START_OFFSET_CHECKPOINT
            writes: list[tuple[Any, ...]] = []
            checkpoint = replicas.log_manager.checkpoint_log_start_offsets

            def counted(*tps: Any, wait: bool = True) -> Any:
                writes.append(tps)
                return checkpoint(*tps, wait=wait)
            replicas.log_manager.checkpoint_log_start_offsets = counted  # type: ignore[method-assign]
            replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, IMAGE, ME), IMAGE)
            fetcher = manager.fetchers[LEADER]
            fetcher._conn = leader  # type: ignore[assignment]
            async with asyncio.timeout(10):
                while len(leader.named) < 2:
                    leader.fetched.clear()
                    await leader.fetched.wait()
            for tp in (QUIET, MOVED):
                partition = replicas.get_partition(tp)
                assert partition is not None and partition.log.log_start_offset == 2
            assert writes == [(QUIET, MOVED)]  # one write for the answer, not one per partition
            assert "t 0 2" in leader.files_at_fetch[1] and "t 1 2" in leader.files_at_fetch[1]
            assert leader.named[1] == {0, 1}  # and the fetch after it reports the new starts

    asyncio.run(scenario())
