"""The requests of one `__consumer_offsets` partition that wait for a later answer.

A JoinGroup waits for the join phase to complete and a follower's SyncGroup for the
leader's assignment: their futures are parked here by (group id, member id) and answered by
a later rule's outcome once its records commit (`answer_join`, `answer_sync`), or all at
once with NOT_COORDINATOR when the partition is unloaded (`close`). The groups and offsets
themselves are the coordinator runtime's state (`broker.coordinator`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from common.errors import ErrorCode
from groups.outcome import JoinResult, SyncResult


@dataclass(slots=True)
class Parked:
    joins: dict[tuple[str, str], list[asyncio.Future[JoinResult]]] = field(default_factory=dict)
    syncs: dict[tuple[str, str], list[asyncio.Future[SyncResult]]] = field(default_factory=dict)

    def park_join(self, group_id: str, member_id: str) -> asyncio.Future[JoinResult]:
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        self.joins.setdefault((group_id, member_id), []).append(future)
        return future

    def park_sync(self, group_id: str, member_id: str) -> asyncio.Future[SyncResult]:
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        self.syncs.setdefault((group_id, member_id), []).append(future)
        return future

    def answer_join(self, group_id: str, member_id: str, result: JoinResult) -> None:
        for future in self.joins.pop((group_id, member_id), []):
            if not future.done():
                future.set_result(result)

    def answer_sync(self, group_id: str, member_id: str, result: SyncResult) -> None:
        for future in self.syncs.pop((group_id, member_id), []):
            if not future.done():
                future.set_result(result)

    def close(self, error: ErrorCode) -> None:
        """Leadership moved (or the broker stops): every parked request answers `error`."""
        for (_, member_id), joins in self.joins.items():
            for join in joins:
                if not join.done():
                    join.set_result(JoinResult(error, member_id=member_id))
        for syncs in self.syncs.values():
            for sync in syncs:
                if not sync.done():
                    sync.set_result(SyncResult(error))
        self.joins.clear()
        self.syncs.clear()
