"""A replica's segment files, read from outside the broker: what tests and chaos runs compare.

Replicas are compared byte for byte once every one of them has the same log end offset; a
sleep "for one more fetch round" is no substitute, so `wait_replicas_caught_up` waits on
the offsets read from the files themselves (a batch still being written at the tail does
not count yet).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from common.record_batch import iter_batches
from common.units import SECONDS
from localcluster.node_process import NodeProcess
from common.waiting import wait_until

CATCH_UP_TIMEOUT = 30 * SECONDS


def partition_dir(node: NodeProcess, topic: str, partition: int) -> Path:
    return node.spec.directory / "data" / f"{topic}-{partition}"


def replica_log_bytes(node: NodeProcess, topic: str, partition: int) -> bytes:
    """The concatenated .log segments of one replica, oldest first (segments may split differently)."""
    return b"".join(path.read_bytes() for path in sorted(partition_dir(node, topic, partition).glob("*.log")))


def replica_log_end_offset(node: NodeProcess, topic: str, partition: int) -> int:
    """One replica's log end offset, read from its segment files (0 when it has none)."""
    end = 0
    for path in sorted(partition_dir(node, topic, partition).glob("*.log")):
        for _, header in iter_batches(path.read_bytes(), verify=False, allow_partial_tail=True):
            end = header.base_offset + header.last_offset_delta + 1
    return end


def wait_replicas_caught_up(replicas: Sequence[NodeProcess], topic: str, partitions: Iterable[int],
                            timeout_s: float = CATCH_UP_TIMEOUT) -> None:
    """Every replica of each partition at the same log end offset on disk (no writer running)."""
    for p in partitions:
        def same_end(p: int = p) -> dict[int, int] | None:
            ends = {node.spec.node_id: replica_log_end_offset(node, topic, p) for node in replicas}
            return ends if len(set(ends.values())) == 1 else None

        wait_until(f"{topic}-{p}: every replica at the same log end offset", same_end, timeout_s)
