"""A metadata log fold's snapshot, encoded a slice at a time between Raft ticks.

`MetadataLogState.begin_fold` names a fold point: an image kept at a clean chunk boundary.
Encoding it is O(partitions) (~0.3 s of CPU at 100,000 partitions on a quiet box, seconds on a
loaded one), and pysyncobj's tick thread is the only thread that may change the state, so the
controller (`quorum.metadata_log`) hands this encoder a slice of each tick (FOLD_SLICE_TIME)
instead of one long call: the tick thread keeps answering Raft messages and the event loop,
which shares the GIL and the state's lock, keeps serving. The image is immutable, so encoding
it needs no lock; only `finish_fold`, a list cut, takes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from common.units import SECONDS
from metadata.snapshot import snapshot_pieces
from quorum.log_state import FoldPoint, MetadataLogState

# Tick thread time per tick spent encoding: well under pysyncobj's heartbeat period and the
# controller's 1 s stall goal; a 100,000-partition snapshot takes ~15-30 slices on a quiet box.
FOLD_SLICE_TIME: Final = 0.02 * SECONDS


class FoldEncoder:
    """The snapshot of `point` (made by `state`), encoded by calls to `step`."""

    def __init__(self, state: MetadataLogState, point: FoldPoint) -> None:
        self.state = state
        self.point = point
        self._pieces = snapshot_pieces(point.image)
        self._parts: list[bytes] = []
        self.slices = 0
        self.cpu_s = 0.0  # this thread's CPU over every slice
        self.longest_slice_s = 0.0  # wall time of the longest slice

    def step(self, budget_s: float, clock: Callable[[], float] = time.perf_counter) -> bytes | None:
        """Encode for about `budget_s` (at least one piece: a topic); the snapshot once complete."""
        started, cpu = clock(), time.thread_time()
        done = True
        for piece in self._pieces:  # bounded by the image's topics; stops at the budget
            self._parts.append(piece)
            if clock() - started >= budget_s:
                done = False
                break
        self.slices += 1
        self.cpu_s += time.thread_time() - cpu
        self.longest_slice_s = max(self.longest_slice_s, clock() - started)
        return b"".join(self._parts) if done else None
