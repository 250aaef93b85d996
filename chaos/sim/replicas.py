"""One broker's replicas: leader and follower sides of replication over the real rules.

The decisions are `broker.replication`'s: `Partition.become_leader/next_high_watermark/
isr_to_expand/isr_to_shrink` (HW over the maximal ISR, Kafka's isFollowerInSync and
isFollowerOutOfSync), `truncation.start_truncation/on_epoch_end_offset/end_offset_for`
(KIP-101/279), `high_watermark.follower_high_watermark`. The role changes mirror
`broker.replica_roles.ReplicaRoles.apply` (delete, lead, follow; a follower keeps fetching when
leader and leader epoch are unchanged), and the AlterPartition bookkeeping mirrors
`broker.replication.isr_manager` (nothing changes locally until the metadata commits).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from broker.replication.high_watermark import follower_high_watermark
from broker.replication.leader_rules import (
    acks_all_refused,
    current_leader_epoch_error,
    follower_keeps_fetching,
    is_new_leadership,
    produce_outcome,
)
from broker.replication.partition import Partition, PendingIsrChange
from broker.replication.truncation import (
    AskLeader,
    TruncateFully,
    TruncateTo,
    TruncationStep,
    end_offset_for,
    on_epoch_end_offset,
    start_truncation,
)
from common.topic_partition import TopicPartition
from chaos.sim import messages as m
from chaos.sim.replica_log import SimLog
from chaos.sim.seams import PlantedBugs
from common.errors import ErrorCode
from metadata.image import MetadataImage
from metadata.local_changes import LocalReplicaChanges
from metadata.partition_change import IsrMember
from metadata.records import LeaderRecoveryState
from quorum.topic_control import topic_election_config

MAX_FETCH_ENTRIES = 4
REQUEST_TIMEOUT_MS = 200
PRODUCE_TIMEOUT_MS = 1500
Send = Callable[[str, object], None]


@dataclass(slots=True)
class FollowerFetch:
    """A followed partition: whom it fetches from, and its truncation still to finish."""

    leader: int
    leader_epoch: int
    step: TruncationStep | None
    in_flight: int | None = None  # request id
    sent_ms: int = 0
    responses: int = 0  # fetch answers applied in this leader epoch


@dataclass(frozen=True, slots=True)
class PendingProduce:
    src: str
    request_id: int
    offset: int
    deadline_ms: int


class Replicas:
    """The partitions one broker hosts; `logs` outlive a crash, the rest does not."""

    def __init__(self, broker_id: int, logs: dict[m.PartitionKey, SimLog], send: Send,
                 send_controller: Callable[[object], None], *, replica_lag_time_max_ms: int,
                 bugs: PlantedBugs, broker_epoch: Callable[[], int]) -> None:
        self.broker_id = broker_id
        self.logs = logs
        self.partitions: dict[m.PartitionKey, Partition] = {}
        self.following: dict[m.PartitionKey, FollowerFetch] = {}
        self.produces: dict[m.PartitionKey, list[PendingProduce]] = {}
        self._alters: dict[int, tuple[Partition, PendingIsrChange, int]] = {}  # id -> (.., sent ms)
        self._send, self._send_controller = send, send_controller
        self._lag_ms = replica_lag_time_max_ms
        self._bugs = bugs
        self._broker_epoch = broker_epoch
        self._image: MetadataImage | None = None
        self._next_request = 0
        self._now_ms = 0  # of the latest metadata change or ISR check, for request timeouts

    def _request_id(self) -> int:
        self._next_request += 1
        return self._next_request

    def is_eligible(self, replica_id: int) -> bool:
        """isReplicaIsrEligible on this broker's image (IsrManager.is_eligible)."""
        if self._bugs.skip_isr_eligibility:
            return True
        registration = None if self._image is None else self._image.broker(replica_id)
        return registration is not None and registration.is_active

    # ---- metadata ----------------------------------------------------------------------

    def apply_changes(self, changes: LocalReplicaChanges, image: MetadataImage, now_ms: int) -> None:
        self._image, self._now_ms = image, now_ms
        for local in changes.deletes:
            self._drop((local.topic_id, local.partition_id))
        elected = {(p.topic_id, p.partition_id) for p in changes.elected_leaders}
        for local in changes.leaders:
            key = (local.topic_id, local.partition_id)
            previous = self.partitions.get(key)
            was = None if previous is None else (previous.leader_id, previous.leader_epoch)
            p = self._hosted(key, local.topic_name, image)
            p.update_registration(local.partition)
            if is_new_leadership(was, broker_id=self.broker_id, leader_epoch=p.leader_epoch, elected=key in elected):
                p.become_leader(self.broker_id, now_ms)
                self.following.pop(key, None)
            if p.is_recovering and p.pending_isr is None:  # KIP-704: ask to be marked RECOVERED
                self.propose(p, p.isr, LeaderRecoveryState.RECOVERED)
            self.maybe_advance_high_watermark(p, now_ms)
        for local in changes.followers:
            key = (local.topic_id, local.partition_id)
            previous = self.partitions.get(key)
            was = None if previous is None else (previous.leader_id, previous.leader_epoch)
            p = self._hosted(key, local.topic_name, image)
            p.update_registration(local.partition)
            if follower_keeps_fetching(was, leader_id=p.leader_id, leader_epoch=p.leader_epoch) \
                    and key in self.following:
                continue  # an ISR change: keep fetching as before
            p.become_follower()
            self._fail_produces(key, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            self.following.pop(key, None)
            if p.leader_id >= 0:
                self._start_following(key, p)

    def _hosted(self, key: m.PartitionKey, topic_name: str, image: MetadataImage) -> Partition:
        p = self.partitions.get(key)
        if p is None:
            log = self.logs.setdefault(key, SimLog())
            p = Partition(TopicPartition(topic_name, key[1]), key[0], log, -1, 0, 0, (), ())  # type: ignore[arg-type]
            p.min_insync_replicas = topic_election_config(image, topic_name).min_insync_replicas
            self.partitions[key] = p
        return p

    def _drop(self, key: m.PartitionKey) -> None:
        self.partitions.pop(key, None)
        self.following.pop(key, None)
        self._fail_produces(key, ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def _start_following(self, key: m.PartitionKey, p: Partition) -> None:
        log: SimLog = p.log  # type: ignore[assignment]
        if self._bugs.truncate_to_hw:  # pre-KIP-101: trust the local high watermark
            log.truncate(log.high_watermark)
            self.following[key] = FollowerFetch(p.leader_id, p.leader_epoch, None)
            return
        step = start_truncation(log.leader_epoch_cache.entries, log.log_end_offset)
        if isinstance(step, TruncateFully):
            log.truncate(0)
        self.following[key] = FollowerFetch(p.leader_id, p.leader_epoch, step if isinstance(step, AskLeader) else None)

    # ---- leader: HW, ISR, produce -------------------------------------------------------

    def maybe_advance_high_watermark(self, p: Partition, now_ms: int) -> None:
        hw = p.next_high_watermark(self.broker_id, now_ms, self._lag_ms, self.is_eligible)
        if hw.advanced:
            p.log.update_high_watermark(hw.offset)
            self._complete_produces(p)

    def propose(self, p: Partition, new_isr: tuple[int, ...], recovery: LeaderRecoveryState) -> None:
        """IsrManager.propose: AlterPartition to the controller; pending until it commits."""
        image = self._image
        if image is None or image.broker(self.broker_id) is None:
            return
        def epoch(replica: int) -> int:  # a joining member's broker epoch is checked (KIP-903)
            registration = image.broker(replica)
            return -1 if replica in p.isr or registration is None else registration.broker_epoch
        members = tuple(IsrMember(r, epoch(r)) for r in new_isr)
        pending = PendingIsrChange(tuple(new_isr), recovery)
        request_id = self._request_id()
        self._alters[request_id] = (p, pending, self._now_ms)
        p.pending_isr = pending
        self._send_controller(m.AlterPartitionRequest(
            self.broker_id, self._broker_epoch(), (p.topic_id, p.tp.partition), p.leader_epoch,
            p.partition_epoch, members, recovery, request_id))

    def on_alter_response(self, resp: m.AlterPartitionResponse) -> None:
        """IsrManager._on_alter_result."""
        found = self._alters.pop(resp.request_id, None)
        if found is None:
            return
        p, pending, _ = found
        if self.partitions.get(resp.partition) is not p or p.pending_isr is not pending:
            return
        if resp.error is not ErrorCode.NONE:
            p.pending_isr = None
            return
        if p.partition_epoch >= resp.partition_epoch:
            p.pending_isr = None
        else:
            p.pending_isr = dataclasses.replace(pending, committed_partition_epoch=resp.partition_epoch)

    def expire_alters(self, now_ms: int) -> None:
        """An AlterPartition not answered in time (lost, or the controller moved): forget it, so
        the next ISR check proposes again (AlterPartitionManager answers it with a timeout)."""
        for request_id, (p, pending, sent_ms) in list(self._alters.items()):
            if now_ms - sent_ms < REQUEST_TIMEOUT_MS:
                continue
            if p.pending_isr is pending and pending.committed_partition_epoch is None:
                p.pending_isr = None
            del self._alters[request_id]

    def shrink_isrs(self, now_ms: int) -> None:
        self._now_ms = now_ms
        for p in self.partitions.values():
            if p.is_leader(self.broker_id):
                proposed = p.isr_to_shrink(self.broker_id, now_ms, self._lag_ms)
                if proposed is not None:
                    self.propose(p, proposed, p.leader_recovery_state)

    def handle_produce(self, src: str, req: m.ProduceRequest, now_ms: int) -> None:
        p = self.partitions.get(req.partition)
        if p is None or not p.is_leader(self.broker_id) or p.is_recovering:
            self._send(src, m.ProduceResponse(req.request_id, req.partition, ErrorCode.NOT_LEADER_OR_FOLLOWER))
            return
        if acks_all_refused(p.isr, p.min_insync_replicas):
            self._send(src, m.ProduceResponse(req.request_id, req.partition, ErrorCode.NOT_ENOUGH_REPLICAS))
            return
        log: SimLog = p.log  # type: ignore[assignment]
        offset = log.log_end_offset
        log.append([(p.leader_epoch, req.value)])
        self.produces.setdefault(req.partition, []).append(
            PendingProduce(src, req.request_id, offset, now_ms + PRODUCE_TIMEOUT_MS))
        self.maybe_advance_high_watermark(p, now_ms)

    def _complete_produces(self, p: Partition) -> None:
        """Kafka's checkEnoughReplicasReachOffset for every waiting acks=all produce."""
        key = (p.topic_id, p.tp.partition)
        waiting = self.produces.get(key)
        if not waiting:
            return
        keep = []
        for w in waiting:
            code = produce_outcome(p, self.broker_id, w.offset + 1)  # the end offset of its record
            if code is None:
                keep.append(w)
            else:
                self._send(w.src, m.ProduceResponse(w.request_id, key, ErrorCode(code), w.offset))
        self.produces[key] = keep

    def _fail_produces(self, key: m.PartitionKey, error: ErrorCode) -> None:
        for w in self.produces.pop(key, []):
            self._send(w.src, m.ProduceResponse(w.request_id, key, error))

    def expire_produces(self, now_ms: int) -> None:
        for key, waiting in self.produces.items():
            for w in waiting:
                if w.deadline_ms <= now_ms:
                    self._send(w.src, m.ProduceResponse(w.request_id, key, ErrorCode.REQUEST_TIMED_OUT))
            self.produces[key] = [w for w in waiting if w.deadline_ms > now_ms]

    # ---- leader: serving followers -------------------------------------------------------

    def _leader_error(self, key: m.PartitionKey, epoch: int) -> tuple[Partition | None, ErrorCode]:
        p = self.partitions.get(key)
        if p is None:
            return None, ErrorCode.NOT_LEADER_OR_FOLLOWER
        error = current_leader_epoch_error(epoch, p.leader_epoch)
        if error is not None:
            return None, error
        if not p.is_leader(self.broker_id):
            return None, ErrorCode.NOT_LEADER_OR_FOLLOWER
        return p, ErrorCode.NONE

    def handle_fetch(self, src: str, req: m.FetchRequest, now_ms: int) -> None:
        self._now_ms = now_ms
        p, error = self._leader_error(req.partition, req.leader_epoch)
        if p is None or req.fetch_offset > p.log.log_end_offset:
            error = error if p is None else ErrorCode.OFFSET_OUT_OF_RANGE
            self._send(src, m.FetchResponse(req.request_id, req.partition, error))
            return
        p.record_follower_fetch(req.replica_id, req.fetch_offset, now_ms)
        proposed = p.isr_to_expand(self.is_eligible)
        if proposed is not None:
            self.propose(p, proposed, p.leader_recovery_state)
        self.maybe_advance_high_watermark(p, now_ms)
        log: SimLog = p.log  # type: ignore[assignment]
        entries = tuple(log.entries[req.fetch_offset:req.fetch_offset + MAX_FETCH_ENTRIES])
        self._send(src, m.FetchResponse(req.request_id, req.partition, ErrorCode.NONE, entries, log.high_watermark))

    def handle_epoch(self, src: str, req: m.EpochRequest) -> None:
        p, error = self._leader_error(req.partition, req.current_leader_epoch)
        answer = None if p is None else end_offset_for(p.log.leader_epoch_cache.entries, req.leader_epoch,
                                                       p.log.log_end_offset)
        self._send(src, m.EpochResponse(req.request_id, req.partition, error, answer))

    # ---- follower ----------------------------------------------------------------------------

    def fetch_tick(self, now_ms: int) -> None:
        for key, f in self.following.items():
            if f.in_flight is not None and now_ms - f.sent_ms < REQUEST_TIMEOUT_MS:
                continue
            f.in_flight, f.sent_ms = self._request_id(), now_ms
            log = self.logs[key]
            if isinstance(f.step, AskLeader):
                if f.step.truncate_to is not None:
                    log.truncate(f.step.truncate_to)
                    f.step = AskLeader(f.step.epoch)
                self._send(f"b{f.leader}", m.EpochRequest(self.broker_id, key, f.leader_epoch, f.step.epoch, f.in_flight))
            else:
                self._send(f"b{f.leader}", m.FetchRequest(self.broker_id, key, f.leader_epoch,
                                                           log.log_end_offset, f.in_flight))

    def _answered(self, key: m.PartitionKey, request_id: int) -> FollowerFetch | None:
        f = self.following.get(key)
        if f is None or f.in_flight != request_id:
            return None  # late, duplicated or for an earlier role
        f.in_flight = None
        return f

    def on_epoch_response(self, resp: m.EpochResponse) -> None:
        f = self._answered(resp.partition, resp.request_id)
        if f is None or resp.error is not ErrorCode.NONE or resp.answer is None or not isinstance(f.step, AskLeader):
            return  # retried on the next tick; a newer epoch arrives through the metadata
        log = self.logs[resp.partition]
        step = on_epoch_end_offset(log.leader_epoch_cache.entries, log.log_end_offset,
                                   asked_epoch=f.step.epoch, answer=resp.answer)
        if isinstance(step, TruncateTo):
            log.truncate(step.offset)
            f.step = None
        elif isinstance(step, TruncateFully):
            log.truncate(0)
            f.step = None
        else:
            f.step = step

    def on_fetch_response(self, resp: m.FetchResponse) -> None:
        f = self._answered(resp.partition, resp.request_id)
        if f is None or f.step is not None:
            return
        log = self.logs[resp.partition]
        if resp.error is ErrorCode.OFFSET_OUT_OF_RANGE and self._bugs.truncate_to_hw:
            log.truncate(log.high_watermark)  # pre-KIP-101: back to the HW and fetch again
            return
        if resp.error is ErrorCode.OFFSET_OUT_OF_RANGE:  # ahead of the leader: truncate by epoch again
            step = start_truncation(log.leader_epoch_cache.entries, log.log_end_offset)
            f.step = step if isinstance(step, AskLeader) else None
            return
        if resp.error is not ErrorCode.NONE:
            return
        log.append(resp.entries)
        # As broker.replica_appends and Kafka's updateHighWatermark: the leader's HW, capped by
        # the LEO, even when lower (a new leader's HW may lag, KIP-207).
        log.update_high_watermark(follower_high_watermark(leader_high_watermark=resp.high_watermark,
                                                          log_end_offset=log.log_end_offset))
        f.responses += 1
