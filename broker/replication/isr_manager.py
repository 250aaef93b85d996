"""A leader's high watermark and the ISR changes it proposes to the controller.

    isr = IsrManager(broker_id, now_ms=clock_ms, replica_lag_time_max_ms=30_000,
                     alter_partition=manager, image=lambda: image, on_change=wake)
    isr.maybe_advance_high_watermark(partition)   # after an append or a follower fetch
    isr.maybe_expand_isr(partition)               # after a follower fetch
    isr.maybe_shrink_isr(partitions)              # look at these ISRs now
    isr.maybe_shrink_due()                        # Kafka's isr-expiration task: the ones due

Kafka's Partition.maybeIncrementLeaderHW / maybeExpandIsr / maybeShrinkIsr and the
AlterPartition round trip. The rules are `partition.Partition`'s (pure); this shell sends
the proposals and records the answer. Nothing changes the ISR locally until the committed
metadata comes back (KIP-497): the controller's answer only marks the change pending.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import Final

from broker.replication.alter_partition_manager import (
    AlterPartitionItem,
    AlterPartitionManager,
    error_name,
)
from broker.replication.isr_expiration import IsrExpirationSchedule
from broker.replication.isr_policy import next_shrink_check
from broker.replication.partition import Partition, PendingIsrChange
from common.topic_partition import TopicPartition
from common import rpc_messages
from common.errors import ErrorCode
from metadata.image import MetadataImage
from metadata.records import LeaderRecoveryState

log = logging.getLogger(__name__)

NO_BROKER_EPOCH: Final = -1  # an ISR member whose broker epoch the controller need not check
# While at most this many proposals are pending, each is logged at INFO; beyond, at DEBUG, and the
# AlterPartition manager's one line per answered request says what happened (a restarted broker
# made 260,000 per-partition INFO lines at 100,000 partitions).
DETAILED_PROPOSALS_MAX: Final = 32
# Answers saying this broker's view of the partition is stale: Kafka's Partition then waits for
# the metadata instead of proposing again (handleAlterPartitionError returns false, no retry).
AWAIT_METADATA_ERRORS: Final = frozenset(int(e) for e in (
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.INVALID_REQUEST, ErrorCode.NEW_LEADER_ELECTED))


class IsrManager:
    """HW moves and AlterPartition proposals for the partitions this broker leads."""

    def __init__(self, broker_id: int, *, now_ms: Callable[[], int], replica_lag_time_max_ms: int,
                 alter_partition: AlterPartitionManager | None, image: Callable[[], MetadataImage],
                 is_current: Callable[[Partition], bool],
                 on_change: Callable[[TopicPartition], None]) -> None:
        self.broker_id = broker_id
        self._now_ms = now_ms
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.alter_partition = alter_partition
        self._image = image
        self._is_current = is_current  # still hosted as this same Partition object
        self._on_change = on_change  # wakes the requests waiting on the partition
        # The led partitions by when their ISR can next shrink (the isr-expiration pass's work).
        self.expiration: IsrExpirationSchedule[Partition] = IsrExpirationSchedule()

    def is_eligible(self, replica_id: int) -> bool:
        """May join an ISR: registered, unfenced, not shutting down (isReplicaIsrEligible)."""
        registration = self._image().broker(replica_id)
        return registration is not None and registration.is_active

    def maybe_advance_high_watermark(self, partition: Partition, now_ms: int | None = None) -> bool:
        """Leader: HW = min LEO over the (maximal) ISR, never backwards; wakes waiters. `now_ms`:
        the caller's clock reading of this event (an append, a follower fetch), else read here."""
        offset = partition.raised_high_watermark(self.broker_id, self._now_ms() if now_ms is None else now_ms,
                                                 self.replica_lag_time_max_ms, self.is_eligible)
        if offset < 0:
            return False
        partition.log.update_high_watermark(offset)
        self._on_change(partition.tp)
        return True

    def maybe_expand_isr(self, partition: Partition) -> None:
        proposed = partition.isr_to_expand(self.is_eligible)
        if proposed is not None:
            self.propose(partition, proposed, partition.leader_recovery_state)

    def maybe_shrink_isr(self, partitions: Iterable[Partition]) -> int:
        """Propose removing lagging followers from each ISR of `partitions` this broker leads;
        the number of proposals sent. Each one led goes back to `expiration` at the time
        it can next shrink (`next_shrink_check`)."""
        now = self._now_ms()
        lag = self.replica_lag_time_max_ms
        sent = 0
        for partition in partitions:
            if not partition.is_leader(self.broker_id):
                continue
            if self.schedule_shrink_check(partition, now) != now:
                continue  # no member out of sync now (next_shrink_check is the rule's inverse)
            proposed = partition.isr_to_shrink(self.broker_id, now, lag)
            if proposed is not None and self.propose(partition, proposed,
                                                     partition.leader_recovery_state):
                sent += 1
        return sent

    def schedule_shrink_check(self, partition: Partition, now_ms: int) -> int | None:
        """Put led `partition` in `expiration` by when its ISR can next shrink; that time."""
        at_ms, held = next_shrink_check(partition.isr, self.broker_id, partition.follower_states, now_ms,
                                        leader_leo=partition.log.log_end_offset,
                                        replica_lag_time_max_ms=self.replica_lag_time_max_ms)
        self.expiration.checked(partition, at_ms, held)
        return at_ms

    def maybe_shrink_due(self) -> int:
        """Kafka's isr-expiration pass over the led partitions whose ISR can shrink now
        (`expiration`), not all of them; the number of proposals sent."""
        due = [p for p in self.expiration.take_due(self._now_ms()) if self._is_current(p)]
        return self.maybe_shrink_isr(due)

    def propose(self, partition: Partition, new_isr: Iterable[int],
                recovery: LeaderRecoveryState) -> bool:
        """Send AlterPartition for `partition`; nothing changes locally until it commits."""
        image = self._image()
        if self.alter_partition is None or image.broker(self.broker_id) is None:
            return False
        new_isr = tuple(new_isr)
        members = tuple((r, _broker_epoch(image, r) if r not in partition.isr else NO_BROKER_EPOCH)
                        for r in new_isr)
        item = AlterPartitionItem(partition.tp, partition.topic_id, partition.leader_epoch,
                                  partition.partition_epoch, members, int(recovery))
        pending = PendingIsrChange(new_isr, recovery)
        if not self.alter_partition.submit(item, lambda code, reply: self._on_alter_result(
                partition, pending, item, code, reply)):
            return False
        partition.pending_isr = pending
        level = logging.INFO if self.alter_partition.pending <= DETAILED_PROPOSALS_MAX else logging.DEBUG
        log.log(level, "Proposing %s%s (was ISR %s)", item.describe(),
                ", leader recovery RECOVERED" if partition.is_recovering else "", list(partition.isr))
        return True

    def forget_pending(self, partition: Partition) -> None:
        """`partition`'s leader epoch ended here: drop its proposal that was not sent yet (the
        controller would refuse it FENCED_LEADER_EPOCH); an answer to one sent is ignored."""
        if self.alter_partition is not None:
            self.alter_partition.discard(partition.tp)

    def _on_alter_result(self, partition: Partition, pending: PendingIsrChange,
                         item: AlterPartitionItem, code: int,
                         reply: rpc_messages.AlterPartitionPartitionReply | None) -> None:
        if not self._is_current(partition) or partition.pending_isr is not pending:
            return  # the partition moved on (new leader epoch, deleted): the answer is stale
        if code != 0 or reply is None:
            # The manager's line per request reports failures; a retriable one (no controller,
            # a timeout) is proposed again from the next follower fetch or expiration pass.
            # (unless the metadata already moved past the proposal's epochs: nothing more is coming)
            awaiting = code in AWAIT_METADATA_ERRORS and partition.partition_epoch == item.partition_epoch \
                and partition.leader_epoch == item.leader_epoch
            partition.pending_isr = dataclasses.replace(pending, awaiting_metadata=True) if awaiting else None
            log.debug("AlterPartition %s failed: %s%s", item.describe(), error_name(code),
                      "; awaiting the metadata before proposing again" if awaiting else "")
            return
        committed = partition.partition_epoch if reply.partition_epoch is None else reply.partition_epoch
        if partition.partition_epoch >= committed:
            partition.pending_isr = None  # the metadata got here first
        else:
            partition.pending_isr = dataclasses.replace(pending, committed_partition_epoch=committed)
        log.debug("AlterPartition %s committed: ISR %s, partition epoch %d", item.describe(),
                  None if reply.isr is None else list(reply.isr), committed)


def _broker_epoch(image: MetadataImage, broker_id: int) -> int:
    registration = image.broker(broker_id)
    return NO_BROKER_EPOCH if registration is None else registration.broker_epoch
