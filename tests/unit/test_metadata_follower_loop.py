"""broker/metadata_follower_loop.py's publish: a change set goes to the replica manager in slices
of PUBLISH_SLICE_PARTITIONS, and the event loop is let run (a pause) whenever the slices since the
last pause took PUBLISH_BUSY_S, and after the last slice: time holds the loop, not a count."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker import metadata_follower_loop
from broker.metadata_follower_loop import (
    PUBLISH_BUSY_S,
    PUBLISH_SLICE_PARTITIONS,
    PUBLISH_SLICE_PAUSE,
    publish_in_slices,
)
from metadata.image import EMPTY_IMAGE
from metadata.local_changes import LocalPartition, LocalReplicaChanges

SLICES = 5
CHANGES = LocalReplicaChanges(followers=tuple(
    LocalPartition("t", "T", p, None) for p in range(SLICES * PUBLISH_SLICE_PARTITIONS)))  # type: ignore[arg-type]


@pytest.mark.parametrize("slice_s, pauses_after", [
    (PUBLISH_BUSY_S / 3.5, [3, 4]),  # role changes of hosted partitions: four slices back to back
    (PUBLISH_BUSY_S * 1.5, [0, 1, 2, 3, 4]),  # new logs: a slice takes the whole budget, a pause after each
    (0.0, [4]),  # nothing to do: one pause, after the last
])
def test_the_loop_runs_once_the_slices_took_the_busy_budget(monkeypatch: pytest.MonkeyPatch, slice_s: float,
                                                           pauses_after: list[int]) -> None:
    now = [0.0]
    applied: list[int] = []
    pauses: list[int] = []
    real_sleep = asyncio.sleep

    async def sleep(delay: float, *args: Any) -> Any:
        if delay == PUBLISH_SLICE_PAUSE:
            pauses.append(len(applied) - 1)
        return await real_sleep(0)

    def on_changes(piece: LocalReplicaChanges, image: Any) -> None:
        assert image is EMPTY_IMAGE and len(piece.followers) == PUBLISH_SLICE_PARTITIONS
        applied.append(piece.followers[0].partition_id)
        now[0] += slice_s

    monkeypatch.setattr(metadata_follower_loop.asyncio, "sleep", sleep)
    asyncio.run(publish_in_slices(CHANGES, EMPTY_IMAGE, on_changes, clock=lambda: now[0]))
    assert applied == [i * PUBLISH_SLICE_PARTITIONS for i in range(SLICES)]
    assert pauses == pauses_after
