"""The leader's small decisions that used to live in the I/O shells, as pure functions.

Moved here (issue 15) so the control-plane simulator (`chaos.sim`) runs the same code as the
broker: the replica manager's role changes (Kafka's makeLeader/makeFollower "is this a new
leader epoch?"), KIP-320's current-leader-epoch check of Fetch/OffsetForLeaderEpoch/
ListOffsets, and acks=all's admission and completion (Kafka's appendRecordsToLeader check
and DelayedProduce's checkEnoughReplicasReachOffset).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from common.errors import ErrorCode

if TYPE_CHECKING:
    from broker.replication.partition import Partition

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

LeaderAndEpoch = tuple[int, int]  # (leader id, leader epoch) as this broker last applied it


def is_new_leadership(was: LeaderAndEpoch | None, *, broker_id: int, leader_epoch: int, elected: bool) -> bool:
    """Whether this broker starts leading anew (forget followers, stamp the epoch at the LEO):
    just elected in the metadata, or it did not lead this very leader epoch before (a restart)."""
    return elected or was != (broker_id, leader_epoch)


def follower_keeps_fetching(was: LeaderAndEpoch | None, *, leader_id: int, leader_epoch: int) -> bool:
    """Same leader and leader epoch as before (an ISR change): the fetcher carries on, no truncation."""
    return was == (leader_id, leader_epoch)


def current_leader_epoch_error(requested: int, current: int) -> ErrorCode | None:
    """KIP-320: a request's current_leader_epoch against the partition's (-1: not checked)."""
    if requested < 0 or requested == current:
        return None
    return ErrorCode.FENCED_LEADER_EPOCH if requested < current else ErrorCode.UNKNOWN_LEADER_EPOCH


def acks_all_refused(isr: Sequence[int], min_insync_replicas: int) -> bool:
    """acks=all is refused with NOT_ENOUGH_REPLICAS before appending when the ISR is too small."""
    return len(isr) < min_insync_replicas


def produce_outcome(partition: Partition | None, broker_id: int, offset: int) -> int | None:
    """One partition of an acks=all produce waiting for `offset` (the end offset of its
    records): its code, or None to wait.

    Kafka's DelayedProduce: once replicated, an ISR that shrank below min.insync.replicas
    meanwhile answers NOT_ENOUGH_REPLICAS_AFTER_APPEND; a lost leadership answers
    NOT_LEADER_OR_FOLLOWER at once.
    """
    if partition is None or not partition.is_leader(broker_id):
        return int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    if partition.log.high_watermark < offset:
        return None
    if len(partition.isr) < partition.min_insync_replicas:
        return int(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    return 0
