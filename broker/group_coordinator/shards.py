"""One `__consumer_offsets` partition as its coordinator holds it: a shard.

A shard is created when this broker becomes the partition's leader (state LOADING while its
records are replayed), serves its groups while ACTIVE, and is dropped when leadership moves
(every waiting JoinGroup/SyncGroup then answers NOT_COORDINATOR). It keeps the shell's
mutable parts: the current group values, the committed offsets and the parked requests.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass, field

from common.errors import ErrorCode
from groups.group import ClassicGroup
from groups.image import GroupsImage, Offsets
from groups.outcome import JoinResult, SyncResult

log = logging.getLogger(__name__)


class ShardState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"


@dataclass(slots=True)
class Shard:
    partition: int
    leader_epoch: int
    state: ShardState = ShardState.LOADING
    groups: dict[str, ClassicGroup] = field(default_factory=dict)
    offsets: Offsets = field(default_factory=dict)
    joins: dict[tuple[str, str], list[asyncio.Future[JoinResult]]] = field(default_factory=dict)
    syncs: dict[tuple[str, str], list[asyncio.Future[SyncResult]]] = field(default_factory=dict)
    load_task: asyncio.Task[None] | None = None

    def activate(self, image: GroupsImage) -> None:
        self.groups = dict(image.groups)
        self.offsets = image.offsets
        self.state = ShardState.ACTIVE

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
        if self.load_task is not None:
            self.load_task.cancel()
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
