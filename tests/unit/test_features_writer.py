"""metadata.version 2 gates the short PartitionChange: the controller's encoders write it exactly
when the image they encode for has finalized level 2 (common.metadata_version), and a log of the
builds before (level 1) keeps the full form until an upgrade to 2 commits."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence

import msgpack
import pytest

from common.metadata_version import METADATA_VERSION as MV
from common.waiting import wait_until_async
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.snapshot import encode_snapshot
from metadata.records import (
    BeginEpoch,
    BrokerRegistrationChange,
    Listener,
    Partition,
    PartitionChange,
    Record,
    RegisterBroker,
    Topic,
    decode_records,
)
from quorum.active_controller import ActiveController
from quorum.broker_control import continue_leaving
from quorum.controller_result import ControllerResult, LeaveFollowUp
from quorum.controller_runtime import _encoded_ahead
from quorum.feature_control import FeatureUpdate, activation_records, update_features
from quorum.log_state import AppendOutcome, MetadataLogState, split_records, transaction_chunks
from tests.unit.test_quorum_active_controller import ScriptedLog

TOPIC_ID = "dG9waWMtaWQtYWFhYWFhYQ"
FULL_KEYS = {"type", "version", "topic_id", "partition_id", "isr", "elr", "leader", "replicas", "leader_recovery_state"}


def replay(image: MetadataImage, *records: Record) -> MetadataImage:
    return apply(image, enumerate(records, start=image.offset + 1))


def cluster(partitions: int, *levels: Record) -> MetadataImage:
    """Brokers 1-3 unfenced, broker 3 shutting down and leading every partition of one topic (RF 3)."""
    image = replay(EMPTY_IMAGE, BeginEpoch(1), *levels,
                   *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", "127.0.0.1", 9090 + b),)) for b in (1, 2, 3)))
    image = replay(image, *(BrokerRegistrationChange(b, image.broker(b).broker_epoch, fenced=False)  # type: ignore[union-attr]
                            for b in (1, 2, 3)))
    image = replay(image, Topic("t", TOPIC_ID),
                   *(Partition(TOPIC_ID, p, (3, 1, 2), (3, 1, 2), leader=3) for p in range(partitions)))
    return replay(image, BrokerRegistrationChange(3, image.broker(3).broker_epoch,  # type: ignore[union-attr]
                                                  in_controlled_shutdown=True))


NEW = activation_records(replay(EMPTY_IMAGE, BeginEpoch(1)))  # a new cluster: metadata.version 2
OLD: tuple[Record, ...] = ()  # a log of the builds before: no metadata.version, read as 1


def maps(chunks: Sequence[bytes]) -> list[dict[str, object]]:
    return [m for chunk in chunks for m in msgpack.unpackb(chunk)]


def test_a_new_cluster_writes_a_controlled_shutdowns_moves_short() -> None:
    """The leadership batch of a controlled shutdown as the runtime encodes it ahead: full on a log
    at level 1, short at 2 (the moved leader and the new ISR only), a third fewer chunks (Raft
    entries) for a batch of 5,000, and the same records either way."""
    entries = {}
    for name, levels in (("old", OLD), ("new", NEW)):
        image = cluster(5_000, *levels)
        result = _encoded_ahead(image, (), LeaveFollowUp(3, None, leaders_only=True))
        assert result.chunks is not None and len(result.records) == 5_000
        written = maps(result.chunks)
        assert {frozenset(m) for m in written} == (
            {frozenset(FULL_KEYS)} if name == "old" else {frozenset(FULL_KEYS - {"elr", "replicas", "leader_recovery_state"})})
        assert tuple(r for chunk in result.chunks for r in decode_records(chunk)) == result.records
        entries[name] = len(result.chunks)
    assert entries == {"old": 21, "new": 14}


def test_the_encoders_take_the_level_they_are_given() -> None:
    moves = [PartitionChange(TOPIC_ID, p, isr=(1, 2), leader=1) for p in range(2_000)]
    for encode in (split_records, transaction_chunks):
        assert {frozenset(m) for m in maps(encode(moves)) if m["type"] == 5} == {frozenset(FULL_KEYS)}
        short = maps(encode(moves, metadata_version=2))
        assert {frozenset(m) for m in short if m["type"] == 5} == {
            frozenset({"type", "version", "topic_id", "partition_id", "isr", "leader"})}


class RecordingLog(ScriptedLog):
    """The active controller's tests' scripted log, led by this node at term 1, from `image`, also
    keeping the chunks of every append_chunks (a splittable decision of more than one chunk, which
    ActiveController encodes)."""

    def __init__(self, image: MetadataImage) -> None:
        super().__init__()
        self.state = MetadataLogState(encode_snapshot(image))
        self.chunks: list[bytes] = []
        self.lead(1)

    async def append_chunks(self, chunks: Sequence[bytes], epoch: int, timeout_s: float) -> list[AppendOutcome]:
        self.chunks.extend(chunks)
        return await super().append_chunks(chunks, epoch, timeout_s)


@pytest.fixture
async def old_log() -> RecordingLog:
    """A log of the builds before, activated by this build: metadata.version 1."""
    old = cluster(1_000)
    return RecordingLog(replay(old, *activation_records(old)))


@pytest.fixture
async def controller(old_log: RecordingLog) -> AsyncIterator[ActiveController]:
    controller = ActiveController(old_log)
    task = asyncio.create_task(controller.run())
    try:
        await wait_until_async("the controller to be active", lambda: controller.is_active, 2.0, poll_s=0.005)
        yield controller
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def leave(after: int | None) -> Callable[[MetadataImage], ControllerResult[int]]:
    """A controlled shutdown's leadership batch of 400 partitions after `after` (more than one chunk)."""
    return lambda image: continue_leaving(image, 3, after=None if after is None else (TOPIC_ID, after),
                                          leaders_only=True, max_leaderships=400)


async def test_an_upgrade_switches_the_writer_at_the_decision_after_it_commits(
        old_log: RecordingLog, controller: ActiveController) -> None:
    assert old_log.image().feature_level(MV) == 1
    await controller.decide(leave(None), 5.0)
    full = len(old_log.chunks)
    assert full > 1 and {frozenset(m) for m in maps(old_log.chunks)} == {frozenset(FULL_KEYS)}
    # `tidelog features upgrade --feature metadata.version=2`, then the next batch
    await controller.decide(lambda image: update_features(image, [FeatureUpdate(MV, 2)]), 5.0)
    assert old_log.image().feature_level(MV) == 2
    await controller.decide(leave(399), 5.0)
    short = maps(old_log.chunks[full:])
    assert len(short) == 400 and {frozenset(m) for m in short} == {
        frozenset({"type", "version", "topic_id", "partition_id", "isr", "leader"})}
    moved = old_log.image().topic("t").partitions  # type: ignore[union-attr]
    assert [moved[p].leader != 3 for p in range(800)] == [True] * 800  # both forms replayed alike
