"""The invariants checked after every committed batch and every event (issue 15).

Safety, on the committed metadata (each batch, `on_commit`):
- leader-epoch: a partition's leader epoch never goes back, and one (partition, leader
  epoch) names one leader: epochs are never reused;
- leader-in-isr: a leader is a member of its ISR;
- fenced-leader: a fenced or unregistered broker never leads;
- isr-eligible (KIP-841): ISR members are registered, unfenced and not shutting down,
  except the last member of a leaderless partition, which KIP-841 keeps on purpose; a
  batch never adds a fenced or shutting-down broker to an ISR.
Safety, on the brokers (`after_event`):
- one-leader-per-epoch: two brokers never act as leader of one partition in one epoch;
- hw-monotonic: a leader's HW never goes back while one process leads one leader epoch.
  Followers are not held to it, as in Kafka: a follower takes its leader's HW, and that HW
  is lower when the leader is new (KIP-207) or restarted before the controller noticed
  (its HW comes back from the checkpoint) — both seen by this simulator;
- replicas-agree: two replicas hold the same entries below both their HWs (unclean
  election off; KIP-101's divergence, also with min.insync.replicas 1);
- acked-write-kept: an acks=all write acknowledged on a topic with min.insync.replicas >= 2
  and unclean election off is in the current leader's log at its offset.
Controlled shutdown (`on_transition`): shutdown-exit: a broker exits clean only once it
leads nothing in the committed metadata.
Safety of the metadata quorum itself (issue 28: what a power loss over unsynced Raft state
breaks when controllers acknowledge before their fsync):
- election-safety: at most one leader is elected per term (`on_elected`; Raft never elects
  twice in one term, so a second election in a term, even of the same voter, is one);
- committed-kept (state machine safety, leader completeness): a newly elected leader's log
  holds every committed record at its offset, and commits continue that log;
- metadata-prefix: the metadata each broker applied is a prefix of the longest any applied
  (`on_metadata_applied`), so no broker acted on a record the quorum later lost.
Partitions that ever had an unclean election are exempt from the data checks (they may lose
acknowledged data by design). A partition a power failure hit loses its acked-write-kept check
(acks=all survives process crashes, not the loss of unflushed tails; tidelog, like Kafka, does
not fsync appends) but keeps every other, KIP-101's divergence check first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from chaos.sim.messages import PartitionKey
from metadata.image import MetadataImage, PartitionRegistration
from metadata.records import NO_LEADER, LeaderRecoveryState, PartitionChange, Record
from quorum.topic_control import topic_election_config
from shutdown.broker_lifecycle import LifecycleEvent, Transition

if TYPE_CHECKING:
    from chaos.sim.broker import SimBroker
    from chaos.sim.producer import SimProducer


class Violation(Exception):
    """An invariant failed: its name and what was seen."""

    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"{invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail


def _partitions(image: MetadataImage) -> list[tuple[PartitionKey, PartitionRegistration]]:
    return [((t.topic_id, pid), p) for t in image.topics.by_id.values() for pid, p in t.partitions.items()]


class Invariants:
    def __init__(self) -> None:
        self.epoch_leaders: dict[tuple[PartitionKey, int], int] = {}  # committed
        self.acting_leaders: dict[tuple[PartitionKey, int], int] = {}  # as the brokers act
        self.unclean: set[PartitionKey] = set()
        self.safe: set[PartitionKey] = set()  # min.insync.replicas >= 2 and unclean election off
        self.clean: set[PartitionKey] = set()  # unclean election off (replicas must agree below the HW)
        self._hw: dict[tuple[int, int, PartitionKey, int, bool], int] = {}
        # what was last checked, to skip logs and leaders that did not change since
        self._agreed: dict[PartitionKey, tuple[tuple[int, int, int], ...]] = {}
        self._kept: dict[tuple[int, PartitionKey], tuple[int, int, int, int]] = {}
        self.image: MetadataImage | None = None
        self.power_failed: set[PartitionKey] = set()
        self.committed: list[Record] = []  # every record committed so far, by offset
        self.elected: dict[int, str] = {}  # term -> the voter elected in it
        self.applied: list[Record] = []  # the longest metadata any broker applied, by offset

    # ---- the committed metadata ------------------------------------------------------------

    def on_commit(self, before: MetadataImage, after: MetadataImage, batch: Sequence[tuple[int, Record]]) -> None:
        if batch and batch[0][0] != len(self.committed):
            raise Violation("committed-kept", f"a batch committed at offset {batch[0][0]} while {len(self.committed)} "
                                              f"records were committed before it")
        self.committed.extend(record for _, record in batch)
        self.image = after
        changed = {(r.topic_id, r.partition_id) for _, r in batch if isinstance(r, PartitionChange)}
        for key, p in _partitions(after):
            old = before.partition(*key)
            if old is None:
                config = topic_election_config(after, after.topic_by_id(key[0]).name)  # type: ignore[union-attr]
                if not config.unclean_allowed:
                    self.clean.add(key)
                    if config.min_insync_replicas >= 2:
                        self.safe.add(key)
            elif key not in changed and old is p:
                continue
            self._check_partition(key, old, p, after)

    def _check_partition(self, key: PartitionKey, old: PartitionRegistration | None, p: PartitionRegistration,
                         image: MetadataImage) -> None:
        where = f"partition {key[0]}-{key[1]} at metadata offset {image.offset}"
        if p.leader_recovery_state is LeaderRecoveryState.RECOVERING:
            self.unclean.add(key)
        if old is not None and p.leader_epoch < old.leader_epoch:
            raise Violation("leader-epoch", f"{where}: leader epoch went from {old.leader_epoch} to {p.leader_epoch}")
        if p.leader != NO_LEADER:
            seen = self.epoch_leaders.setdefault((key, p.leader_epoch), p.leader)
            if seen != p.leader:
                raise Violation("leader-epoch", f"{where}: leader epoch {p.leader_epoch} names leader "
                                                f"{p.leader} after leader {seen}")
            if p.leader not in p.isr:
                raise Violation("leader-in-isr", f"{where}: leader {p.leader} not in ISR {list(p.isr)}")
            registration = image.broker(p.leader)
            if registration is None or registration.fenced:
                raise Violation("fenced-leader", f"{where}: leader {p.leader} is fenced or unregistered")
        sole_member_kept = p.leader == NO_LEADER and len(p.isr) == 1
        for member in p.isr:
            registration = image.broker(member)
            active = registration is not None and registration.is_active
            if active or (sole_member_kept and (old is None or member in old.isr)):
                continue
            state = "unregistered" if registration is None else (
                "fenced" if registration.fenced else "in controlled shutdown")
            raise Violation("isr-eligible", f"{where}: ISR {list(p.isr)} (leader {p.leader}) holds broker "
                                            f"{member}, {state}")

    # ---- the metadata quorum ----------------------------------------------------------------

    def on_elected(self, leader: str, term: int, log: Sequence[Record]) -> None:
        """`leader` won term `term` holding `log`: before it leads (chaos.sim.quorum)."""
        seen = self.elected.get(term)
        if seen is not None:
            raise Violation("election-safety", f"controller {leader} elected in term {term}, which already elected "
                                               f"controller {seen} (a vote or term forgotten)")
        self.elected[term] = leader
        committed = self.committed
        lost = next((o for o in range(len(committed))
                     if o >= len(log) or (log[o] is not committed[o] and log[o] != committed[o])), None)
        if lost is not None:
            has = repr(log[lost]) if lost < len(log) else "nothing"
            raise Violation("committed-kept", f"controller {leader} elected in term {term} with a log of {len(log)} "
                                              f"records: committed offset {lost} ({committed[lost]!r}) is lost "
                                              f"(it has {has}) of {len(committed)} committed")

    def on_metadata_applied(self, broker_id: int, batch: Sequence[tuple[int, Record]]) -> None:
        """Broker `broker_id` applied `batch` (contiguous, after what it applied before)."""
        applied = self.applied
        for offset, record in batch:
            if offset == len(applied):
                applied.append(record)
            elif offset > len(applied) or (applied[offset] is not record and applied[offset] != record):
                seen = repr(applied[offset]) if offset < len(applied) else f"only {len(applied)} records"
                raise Violation("metadata-prefix", f"broker {broker_id} applied {record!r} at metadata offset "
                                                   f"{offset}, where another broker applied {seen}")

    def power_lost(self, broker: SimBroker) -> None:
        """`broker` lost power: its logs lose their unflushed tails."""
        for key, log in sorted(broker.logs.items()):
            if log.flushed_offset < log.log_end_offset:
                self.power_failed.add(key)
            log.lose_unflushed()

    def on_transition(self, broker_id: int, transition: Transition) -> None:
        if transition.event is not LifecycleEvent.SHOULD_SHUT_DOWN or self.image is None:
            return
        led = sorted(f"{k[0]}-{k[1]}" for k, p in _partitions(self.image) if p.leader == broker_id)
        if led:
            raise Violation("shutdown-exit", f"broker {broker_id} was told to shut down while it leads {led}")

    # ---- the brokers ------------------------------------------------------------------------

    def after_event(self, brokers: Sequence[SimBroker], producer: SimProducer) -> None:
        for key, what in producer.acked_twice:
            if key in self.safe and key not in self.unclean and key not in self.power_failed:
                raise Violation("acked-write-kept", what)
        for b in brokers:
            if b.running:
                self._check_broker(b)
        self._check_agreement(brokers)
        self._check_acked(brokers, producer)

    def _check_broker(self, b: SimBroker) -> None:
        replicas = b.replicas
        for key, p in replicas.partitions.items():
            leading = p.is_leader(b.broker_id)
            if leading:
                seen = self.acting_leaders.setdefault((key, p.leader_epoch), b.broker_id)
                if seen != b.broker_id:
                    raise Violation("one-leader-per-epoch", f"brokers {seen} and {b.broker_id} both lead "
                                                            f"{key[0]}-{key[1]} in leader epoch {p.leader_epoch}")
            else:
                continue
            if key in self.unclean:
                continue
            hw_key = (b.broker_id, b.incarnation, key, p.leader_epoch, leading)
            hw = p.log.high_watermark
            previous = self._hw.get(hw_key, hw)
            if hw < previous:
                raise Violation("hw-monotonic", f"broker {b.broker_id} (leader) "
                                                f"of {key[0]}-{key[1]}: HW went from {previous} to {hw} in "
                                                f"leader epoch {p.leader_epoch}")
            self._hw[hw_key] = hw

    def _check_agreement(self, brokers: Sequence[SimBroker]) -> None:
        for key in sorted(self.clean - self.unclean):
            logs = [(b.broker_id, b.logs[key]) for b in brokers if key in b.logs]
            seen = tuple((b, log.version, id(log)) for b, log in logs)
            if self._agreed.get(key) == seen:
                continue
            self._agreed[key] = seen
            for i, (a, log_a) in enumerate(logs):
                for c, log_c in logs[i + 1:]:
                    upto = min(log_a.high_watermark, log_c.high_watermark)
                    if log_a.entries[:upto] != log_c.entries[:upto]:
                        raise Violation("replicas-agree", f"{key[0]}-{key[1]}: brokers {a} and {c} differ below "
                                                          f"HW {upto}: {log_a.entries[:upto]} vs {log_c.entries[:upto]}")

    def _check_acked(self, brokers: Sequence[SimBroker], producer: SimProducer) -> None:
        image = self.image
        if image is None or not producer.acked:
            return
        for b in brokers:
            if not b.running:
                continue
            for key, p in b.replicas.partitions.items():
                committed = image.partition(*key)
                if (key not in self.safe or key in self.unclean or key in self.power_failed or committed is None
                        or not p.is_leader(b.broker_id) or p.leader_epoch != committed.leader_epoch):
                    continue
                log = b.logs[key]
                seen = (b.incarnation, p.leader_epoch, log.version, len(producer.acked))
                if self._kept.get((b.broker_id, key)) == seen:
                    continue
                self._kept[(b.broker_id, key)] = seen
                entries = log.entries
                for (k, offset), value in producer.acked.items():
                    if k == key and (offset >= len(entries) or entries[offset][1] != value):
                        got = entries[offset] if offset < len(entries) else "nothing"
                        raise Violation("acked-write-kept", f"{key[0]}-{key[1]}: value {value} acknowledged at "
                                                            f"offset {offset} but leader {b.broker_id} (leader "
                                                            f"epoch {p.leader_epoch}) has {got}")
