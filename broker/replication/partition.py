"""One hosted topic-partition: its registration, its log, and — as leader — its followers.

Kafka's Partition, without I/O: the ReplicaManager feeds it metadata, follower fetches and
the clock; it answers with the high watermark and the ISR changes to propose. The rules
themselves are the pure functions of `broker.replication`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from broker.producer_state import ProducerStateManager
from broker.replication.high_watermark import (
    UNKNOWN_OFFSET,
    FollowerState,
    HighWatermark,
    high_watermark,
    is_caught_up,
    on_follower_fetch,
    reset_follower_state,
)
from broker.replication.isr_policy import isr_to_shrink, replicas_to_expand
from common.topic_partition import TopicPartition
from common.topic_config import MIN_INSYNC_REPLICAS, default_int
from metadata.image import PartitionRegistration
from metadata.records import LeaderRecoveryState

if TYPE_CHECKING:  # the log's files are the shell's; the rules only read its offsets and epoch cache
    from broker.log.partition_log import PartitionLog

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

DEFAULT_MIN_INSYNC_REPLICAS: Final = default_int(MIN_INSYNC_REPLICAS)  # common.topic_config's


@dataclass(frozen=True, slots=True)
class PendingIsrChange:
    """An AlterPartition sent and not yet seen in the committed metadata.

    `committed_partition_epoch` is set from the controller's answer: the change is done
    when the metadata image reaches that partition epoch. `awaiting_metadata`: the controller
    refused it because this broker's view is stale (FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION,
    ...): nothing is proposed again until the metadata brings a new partition epoch (Kafka's
    Partition keeps the pending state on those errors, "awaiting the latest metadata"), or
    every follower fetch would send the same stale proposal again.
    """

    proposed_isr: tuple[int, ...]
    leader_recovery_state: LeaderRecoveryState
    committed_partition_epoch: int | None = None
    awaiting_metadata: bool = False


@dataclass(slots=True, eq=False)
class VerificationGuard:
    """Kafka's VerificationGuard: made before a leader asks the coordinator about a producer's
    transaction, compared by identity after the answer. A marker for the producer removes it
    meanwhile, and the waiting write is then refused."""

    producer_epoch: int
    verified: bool = False


@dataclass(slots=True, eq=False)
class Partition:
    """What the metadata log says about one partition, its log, and its replication state."""

    tp: TopicPartition
    topic_id: str
    log: PartitionLog
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED
    min_insync_replicas: int = DEFAULT_MIN_INSYNC_REPLICAS
    # Leader only (soft state, reset on every leadership change): what each follower fetched.
    follower_states: dict[int, FollowerState] = field(default_factory=dict)
    # The log end offset when this broker became leader in `leader_epoch`.
    leader_epoch_start_offset: int = 0
    pending_isr: PendingIsrChange | None = None
    # Idempotent producers and open transactions, rebuilt from the log when the partition opens.
    producer_state: ProducerStateManager = field(default_factory=ProducerStateManager)
    # Leader only (soft state): producer id -> epoch the transaction coordinator said may start a
    # transaction here (KIP-890's verification, `broker.txn_verification`); an entry goes when a
    # marker ends that producer's transaction, all of them when leadership moves.
    verified_txns: dict[int, VerificationGuard] = field(default_factory=dict)
    # Leader only (soft state): the ISR follower found holding the HW where it was at the last
    # look (`raised_high_watermark`), or -1. Between two follower fetches of a round every look
    # finds the same one (the one that has not fetched the new records yet), so it is asked first.
    hw_held_by: int = -1

    def is_leader(self, broker_id: int) -> bool:
        return self.leader_id == broker_id

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: min(first offset of the oldest unstable transaction, high watermark);
        leaders and followers alike (both replay the markers)."""
        return self.producer_state.last_stable_offset(self.log.high_watermark)

    def update_registration(self, registration: PartitionRegistration) -> None:
        """Take the committed state; a pending ISR change the image now covers is done, and one
        refused for a stale view ends with any new partition epoch."""
        moved_on = registration.partition_epoch != self.partition_epoch
        self.leader_id, self.leader_epoch = registration.leader, registration.leader_epoch
        self.partition_epoch = registration.partition_epoch
        self.replicas, self.isr = registration.replicas, registration.isr
        self.leader_recovery_state = registration.leader_recovery_state
        pending = self.pending_isr
        if pending is None:
            return
        if (pending.committed_partition_epoch is not None
                and self.partition_epoch >= pending.committed_partition_epoch) \
                or (pending.awaiting_metadata and moved_on):
            self.pending_isr = None

    # ---- leader side -------------------------------------------------------------------

    def become_leader(self, broker_id: int, now_ms: int) -> None:
        """A new leader epoch: record it at the log end and forget every follower's state.

        The entry is in memory at once, as in Kafka's makeLeader: a follower holding a later
        epoch than any of this log's (two quick elections) must get this epoch's start as the
        end of the one below. Its file write waits for the first append in this epoch
        (`LeaderEpochCache.write_owed`): until then no data depends on it, and a restart
        drops an entry at the log end anyway (`PartitionLog` loads with a cut there)."""
        self.log.leader_epoch_cache.assign(self.leader_epoch, self.log.log_end_offset, write=False)
        self.leader_epoch_start_offset = self.log.log_end_offset
        self.follower_states = {r: reset_follower_state(now_ms=now_ms, in_isr=r in self.isr)
                                for r in self.replicas if r != broker_id}
        self.pending_isr = None
        self.verified_txns = {}

    def become_follower(self) -> None:
        self.follower_states = {}
        self.pending_isr = None
        self.verified_txns = {}

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The committed ISR plus pending additions (Kafka's maximalIsr): the HW waits for
        replicas being added, and for replicas being removed until the removal commits."""
        pending = self.pending_isr
        if pending is None:
            return self.isr
        return (*self.isr, *(r for r in pending.proposed_isr if r not in self.isr))

    @property
    def is_recovering(self) -> bool:
        """Elected uncleanly and not yet marked RECOVERED by the controller."""
        return self.leader_recovery_state is LeaderRecoveryState.RECOVERING

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int,
                              log_start_offset: int = UNKNOWN_OFFSET) -> None:
        """A follower fetched from `fetch_offset` (validated against the log by the caller),
        its own log starting at `log_start_offset`."""
        state = self.follower_states.get(replica_id) or reset_follower_state(now_ms=now_ms, in_isr=False)
        self.follower_states[replica_id] = on_follower_fetch(
            state, fetch_offset=fetch_offset, leader_leo=self.log.log_end_offset, now_ms=now_ms,
            log_start_offset=log_start_offset)

    def low_watermark(self, is_alive: Callable[[int], bool]) -> int:
        """Leader: the lowest log start offset among this log and the followers on live
        brokers (Kafka's lowWatermarkIfLeader); a follower that has not fetched in this
        leader epoch counts as unknown (-1), so a DeleteRecords waits for it."""
        low = self.log.log_start_offset
        for replica_id, state in self.follower_states.items():
            if is_alive(replica_id) and state.log_start_offset < low:
                low = state.log_start_offset
        return low

    def next_high_watermark(self, broker_id: int, now_ms: int, replica_lag_time_max_ms: int,
                            is_eligible: Callable[[int], bool]) -> HighWatermark:
        """min LEO over the maximal ISR and the caught-up eligible followers outside it; it stands
        still while the ISR is below min.insync.replicas (capped at the replica count, Kafka's
        effectiveMinIsr): KIP-966's rule (Kafka's maybeIncrementLeaderHW since 3.7), so no record
        only this leader holds becomes committed and readable. An ELR member, which left the ISR
        below min ISR, then has every record a consumer may have read when it is elected."""
        offset = self.raised_high_watermark(broker_id, now_ms, replica_lag_time_max_ms, is_eligible)
        if offset < 0:
            offset = self.log.high_watermark
        return HighWatermark(offset, offset > self.log.high_watermark, offset >= self.leader_epoch_start_offset)

    def raised_high_watermark(self, broker_id: int, now_ms: int, replica_lag_time_max_ms: int,
                              is_eligible: Callable[[int], bool]) -> int:
        """`next_high_watermark`'s offset when it is above the log's HW, else -1: the leader's
        shell asks after every append and follower fetch (5 times per acks=all produce at RF=3)
        and needs only that, with no HighWatermark built for the usual answer, "not moved"."""
        partition_log = self.log
        isr_size = len(self.isr)  # below min(min.insync.replicas, replicas), without a min() call:
        if isr_size < self.min_insync_replicas and isr_size < len(self.replicas):
            return -1
        leader_leo = partition_log.log_end_offset
        current_hw = partition_log.high_watermark
        if current_hw == leader_leo:  # nothing above the HW to commit: most calls after a follower fetch
            return -1
        states = self.follower_states
        # The follower that held it at the last look, asked first (an ISR member at or below the
        # HW holds it, whatever the others: the walk below would return at it too).
        held = self.hw_held_by
        if held in self.isr:
            state = states.get(held)
            if state is not None and state.log_end_offset <= current_hw:
                return -1
        maximal = self.maximal_isr
        # Fast returns for what follows every leader append (the HW is min LEO, never backwards).
        # An ISR follower at or below the HW (or not yet fetched in this epoch) holds it where it
        # is, whatever the others: after an append at RF>1 the followers' LEOs did not move, so
        # the walk below would only find that. With no follower at all (RF=1; the loop has seen
        # that every ISR follower has a state), nothing outside the ISR can be waited for either:
        # the HW is the log end. The log keeps 0 <= HW <= LEO, the range high_watermark checks.
        for r in maximal:  # bounded by the replicas
            if r != broker_id:
                state = states.get(r)
                if state is None or state.log_end_offset <= current_hw:
                    self.hw_held_by = r
                    return -1
        if not states:
            return leader_leo if leader_leo > current_hw else -1
        # Outside the ISR, only followers that fetched in this epoch (a known LEO) can hold it.
        # One pass over the followers for both (after every append and follower fetch).
        follower_leos = {}
        waiting = []
        for r, state in states.items():  # bounded by the replicas
            leo = follower_leos[r] = state.log_end_offset
            if r not in maximal and leo >= 0 and is_eligible(r) and is_caught_up(
                    state, leader_leo=leader_leo, now_ms=now_ms, replica_lag_time_max_ms=replica_lag_time_max_ms):
                waiting.append(r)
        hw = high_watermark(
            leader=broker_id, leader_leo=leader_leo, isr=maximal, follower_leos=follower_leos,
            current_hw=current_hw, leader_epoch_start_offset=self.leader_epoch_start_offset,
            waiting_for=waiting)
        return hw.offset if hw.advanced else -1

    def isr_to_expand(self, is_eligible: Callable[[int], bool]) -> tuple[int, ...] | None:
        """The ISR with every in-sync follower added, or None (nothing pending, recovered only)."""
        if self.pending_isr is not None or self.leader_recovery_state is LeaderRecoveryState.RECOVERING:
            return None
        isr = self.isr
        for replica in self.replicas:  # bounded by the replicas
            if replica not in isr:
                break
        else:  # every replica in the ISR, nothing to add: what each follower fetch finds
            return None
        return replicas_to_expand(self.replicas, self.isr, self.follower_states,
                                  self.log.high_watermark, self.leader_epoch_start_offset,
                                  is_eligible=is_eligible)

    def isr_to_shrink(self, broker_id: int, now_ms: int, replica_lag_time_max_ms: int
                      ) -> tuple[int, ...] | None:
        """The ISR without followers that have lagged too long, or None."""
        if self.pending_isr is not None:
            return None
        return isr_to_shrink(self.isr, broker_id, self.follower_states, now_ms,
                             leader_leo=self.log.log_end_offset,
                             replica_lag_time_max_ms=replica_lag_time_max_ms)
