"""The role changes of the partitions this broker hosts, from the committed metadata: Kafka's
ReplicaManager.applyDelta (delete, then makeLeaders, then makeFollowers).

    roles = ReplicaRoles(broker_id, log_manager, partitions, topic_configs, isr, now_ms=..., wake=...)
    fetching = roles.apply(changes, image)   # then: fetchers.remove(fetching.stop), add(fetching.start)

A partition new to this broker gets its log (created together when several arrive at once) and
its producer state; a new leadership assigns its leader epoch (in memory: the checkpoint file
is written by the first append in that epoch, see `LeaderEpochCache`) and moves the high
watermark; a follower whose leader or
leader epoch changed goes to the replica fetchers. `broker.replica_manager` owns the hosted
partitions and calls this on every batch of LocalReplicaChanges.

One partition's storage failure is that partition's alone (Kafka marks a replica or its log
dir offline, never the broker): an OSError (EMFILE, ENOSPC, EACCES, ENOTDIR...) or a
KafkaStorageError while creating, opening, leading or following one partition makes it a
failed replica (`failed`): logged once with its errno, dropped from the hosted partitions,
answered KAFKA_STORAGE_ERROR, reported to the controller in every heartbeat (which moves its
ISR seat and leadership away), and never retried until the broker restarts, as Kafka keeps
an offline log dir offline until then. Every other partition of the batch goes on.
"""

from __future__ import annotations

import errno as errno_names
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from broker.hosted_topic_configs import HostedTopicConfigs
from broker.log.log_manager import LogManager
from broker.producer_state import ProducerStateManager
from broker.replica_appends import rebuild_producer_state, use_producer_state
from broker.replication.isr_manager import IsrManager
from broker.replication.leader_rules import follower_keeps_fetching, is_new_leadership
from broker.replication.partition import Partition
from common.topic_partition import TopicPartition
from common.errors import KafkaStorageError
from metadata.image import MetadataImage
from metadata.local_changes import LocalPartition, LocalReplicaChanges
from metadata.records import LeaderRecoveryState

log = logging.getLogger(__name__)

# Change sets of at most this many partitions log each partition's new role at INFO; larger ones
# (a topic created, a broker's leaderships moving) log one summary line at INFO and the
# partitions at DEBUG: 3,300 lines per broker were seconds of a controlled shutdown at 10,000.
DETAILED_CHANGES_MAX: Final = 32
MAX_CAUSE_DEPTH: Final = 8  # exceptions followed down a cause chain for its OSError (short; guards a cycle)


@dataclass(frozen=True, slots=True)
class FetcherChanges:
    """What one batch of role changes asks of the replica fetchers."""

    stop: list[TopicPartition]  # deleted, now led here, or without a leader
    start: list[tuple[TopicPartition, int, int]]  # (tp, leader id, leader epoch)
    # Followed as before (same leader and leader epoch) but this broker joined or left the ISR:
    # the only registration change a fetcher's entry for it depends on (an out-of-sync follower
    # names it in every fetch, and only then can it be throttled). Another ISR change (a peer
    # leaving it, as all 66,000 partitions a surviving broker shares with a broker in controlled
    # shutdown at 100,000 partitions) asks nothing of the fetchers.
    seat_changed: list[TopicPartition]


@dataclass(frozen=True, slots=True)
class FailedReplica:
    """A replica this broker could not create, open, lead or follow; offline here until restart."""

    topic_id: str
    during: str  # what was being done: "creating or opening its log", "becoming leader in leader epoch 3"
    errno: int | None  # the OSError's errno, when one is at the root of the failure
    reason: str  # the error in words (strerror and the path, or the storage error's message)

    @property
    def errno_text(self) -> str:
        """`24 (EMFILE)`, or `-` when no OSError caused it."""
        if self.errno is None:
            return "-"
        return f"{self.errno} ({errno_names.errorcode.get(self.errno, '?')})"


def _root_os_error(exc: BaseException) -> OSError | None:
    """The OSError at the root of `exc` (a KafkaStorageError wraps one as its cause)."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < MAX_CAUSE_DEPTH:
        if isinstance(current, OSError):
            return current
        current = current.__cause__ or current.__context__
        seen += 1
    return None


def _in_controlled_shutdown(image: MetadataImage, broker_id: int) -> bool:
    """Whether the committed metadata has this broker in controlled shutdown (the first batch of
    its shutdown writes that, before any of its partitions moves)."""
    registration = image.broker(broker_id)
    return registration is not None and registration.in_controlled_shutdown


def describe_failure(topic_id: str, during: str, exc: BaseException) -> FailedReplica:
    """The failed replica for `exc`, with the errno (and its name) when an OSError caused it."""
    os_error = _root_os_error(exc)
    if os_error is None or os_error.errno is None:
        return FailedReplica(topic_id, during, None, str(exc) or type(exc).__name__)
    where = f" ({os_error.filename})" if os_error.filename else ""
    return FailedReplica(topic_id, during, os_error.errno, f"{os_error.strerror}{where}")


class ReplicaRoles:
    """Applies LocalReplicaChanges to the hosted partitions (shared with the replica manager)."""

    def __init__(self, broker_id: int, log_manager: LogManager, partitions: dict[TopicPartition, Partition],
                 topic_configs: HostedTopicConfigs, isr: IsrManager, *, now_ms: Callable[[], int],
                 wake: Callable[[TopicPartition], None]) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.partitions = partitions
        self.topic_configs = topic_configs
        self.isr = isr
        self._now_ms = now_ms
        self._wake = wake
        # Failed replicas, offline here until the broker restarts (reported in every heartbeat).
        self.failed: dict[TopicPartition, FailedReplica] = {}
        self._detail = logging.INFO  # the level of per-partition role lines in the change set being applied

    def fail(self, tp: TopicPartition, topic_id: str, during: str, exc: BaseException) -> None:
        """Mark one replica failed: one log line with its errno, then it is served no more."""
        if tp in self.failed:
            return
        failure = self.failed[tp] = describe_failure(topic_id, during, exc)
        self.partitions.pop(tp, None)
        log.error("Replica %s (topic id %s) failed on broker %d while %s: errno %s, %s; it is offline "
                  "here until the broker restarts (reported to the controller)", tp, topic_id, self.broker_id,
                  during, failure.errno_text, failure.reason)
        self._wake(tp)  # waiting produces and fetches answer now (KAFKA_STORAGE_ERROR)

    def is_failed(self, tp: TopicPartition, topic_id: str | None = None) -> bool:
        """Whether the replica failed here (for `topic_id`, when given: a recreated topic is new)."""
        failure = self.failed.get(tp)
        return failure is not None and (topic_id is None or failure.topic_id == topic_id)

    def failed_replicas(self) -> list[tuple[str, int]]:
        """(topic_id, partition) of every failed replica, sorted: what heartbeats report."""
        return sorted((f.topic_id, tp.partition) for tp, f in self.failed.items())

    def apply(self, changes: LocalReplicaChanges, image: MetadataImage) -> FetcherChanges:
        """Act on this broker's LocalReplicaChanges: delete, lead, follow (Kafka's order)."""
        stop_fetching: list[TopicPartition] = []
        start_fetching: list[tuple[TopicPartition, int, int]] = []
        seat_changed: list[TopicPartition] = []
        stopped_hosting = 0
        size = len(changes.deletes) + len(changes.leaders) + len(changes.followers)
        self._detail = logging.INFO if size <= DETAILED_CHANGES_MAX else logging.DEBUG
        for local in changes.deletes:
            tp = TopicPartition(local.topic_name, local.partition_id)
            stop_fetching.append(tp)
            stopped_hosting += self._delete(tp)
        if changes.deletes:
            self.topic_configs.forget_unhosted(local.topic_name for local in changes.deletes)
        self.topic_configs.refresh(image)
        # Each partition's TopicPartition once (a frozen dataclass: building one, and hashing it
        # at every lookup, was a good part of what a role change costs after its file write).
        leaders = [(TopicPartition(p.topic_name, p.partition_id), p) for p in changes.leaders]
        followers = [(TopicPartition(p.topic_name, p.partition_id), p) for p in changes.followers]
        self._create_logs([*leaders, *followers], image)
        elected = {(p.topic_name, p.partition_id) for p in changes.elected_leaders}
        leaderships = self._become_leaders(leaders, image, elected)
        stop_fetching.extend(leaderships)
        offline_before = len(stop_fetching)
        in_shutdown = _in_controlled_shutdown(image, self.broker_id)
        for tp, local in followers:
            self._become_follower(tp, local, image, in_shutdown, start_fetching, stop_fetching, seat_changed)
        offline = len(stop_fetching) - offline_before
        if self._detail == logging.DEBUG:  # one line for the change set (DETAILED_CHANGES_MAX)
            log.info("Broker %d: %d new leaderships, %d partitions following a new leader or leader "
                     "epoch, %d not fetched (without a leader, or out of the ISR in controlled shutdown), "
                     "%d no longer hosted; %d other partition "
                     "changes (ISR, epochs)", self.broker_id, len(leaderships), len(start_fetching), offline,
                     stopped_hosting, len(changes.leaders) + len(changes.followers) - len(leaderships)
                     - len(start_fetching) - offline)
        return FetcherChanges(stop_fetching, start_fetching, seat_changed)

    def _hosted(self, tp: TopicPartition, local: LocalPartition, image: MetadataImage,
                partition: Partition | None) -> Partition | None:
        """`tp`'s Partition (`partition`: the one hosted now, if any), opened or created when new
        to this broker, with the new registration; None when it failed here."""
        registration = local.partition
        if self.failed and self.is_failed(tp, local.topic_id):
            return None  # offline here until restart: never retried (Kafka keeps a failed dir offline)
        if partition is None or partition.topic_id != local.topic_id:
            self.failed.pop(tp, None)  # an earlier topic of that name failed here: this one is new
            if not self.topic_configs.is_applied(tp.topic):
                self.topic_configs.apply(tp.topic, image)
            try:
                partition_log = self.log_manager.get_or_create_log(tp, now_ms=self._now_ms())
                partition = Partition(tp, local.topic_id, partition_log, registration.leader,
                                      registration.leader_epoch, registration.partition_epoch,
                                      registration.replicas, registration.isr)
                if partition_log.created_directory and partition_log.log_end_offset == 0:
                    # A log just created holds no batch and no producer snapshot: nothing to
                    # replay, and no listing of its directory for snapshots on the loop (65 % of
                    # this method's py-spy samples in a 100,000-partition create).
                    use_producer_state(partition, ProducerStateManager())
                else:
                    rebuild_producer_state(partition)
            except (KafkaStorageError, OSError) as e:
                self.fail(tp, local.topic_id, "creating or opening its log", e)
                return None
            partition.min_insync_replicas = self.topic_configs.min_insync_replicas(tp.topic)
            self.partitions[tp] = partition
        partition.update_registration(registration)
        return partition

    def _create_logs(self, located: Iterable[tuple[TopicPartition, LocalPartition]], image: MetadataImage) -> None:
        """Create the logs of partitions new to this broker together (`LogManager.create_logs`):
        one directory fsync per log dir, not per partition (a topic of 10 partitions was 10
        fsyncs of the same directory). Failures are left to `_hosted`, which tries each failed
        one again alone and marks it failed with its own error."""
        failed, get_log = self.failed, self.log_manager.get_log
        new = [tp for tp, _ in located if (not failed or tp not in failed) and get_log(tp) is None]
        if len(new) < 2:  # one log: `_hosted` creates it, with the same one fsync
            return
        self.topic_configs.apply_new({tp.topic for tp in new}, image)
        try:
            self.log_manager.create_logs(new, now_ms=self._now_ms())
        except (KafkaStorageError, OSError) as e:
            log.warning("Creating %d logs together failed (%s); creating them one by one", len(new), e)

    def _become_leaders(self, leaders: Iterable[tuple[TopicPartition, LocalPartition]], image: MetadataImage,
                        elected: set[tuple[str, int]]) -> list[TopicPartition]:
        """Lead every partition of `leaders`; the new leaderships (stop fetching them).

        A new leadership writes no file: its leader epoch entry waits in memory for the first
        append in that epoch (`LeaderEpochCache.write_owed`), so it owes no fsync either (a
        write and a rename per leadership were two thirds of a role change's CPU in a controlled
        shutdown at 100,000 partitions). A failure is its own partition's."""
        now_ms = self._now_ms()
        hosted: list[tuple[Partition, bool]] = []
        for tp, local in leaders:
            previous = self.partitions.get(tp)
            was = None if previous is None else (previous.leader_id, previous.leader_epoch)
            partition = self._hosted(tp, local, image, previous)
            if partition is None:
                continue
            hosted.append((partition, is_new_leadership(
                was, broker_id=self.broker_id, leader_epoch=partition.leader_epoch,
                elected=(local.topic_name, local.partition_id) in elected)))
        starting = [partition for partition, new in hosted if new]
        for partition in starting:  # bounded by the change set
            self.isr.forget_pending(partition)  # a proposal of the old leader epoch, not sent yet
            try:
                partition.become_leader(self.broker_id, now_ms)
            except (KafkaStorageError, OSError) as e:
                self.fail(partition.tp, partition.topic_id, f"becoming leader in leader epoch "
                          f"{partition.leader_epoch}", e)
        for partition, new in hosted:
            if partition.tp in self.partitions:  # not failed just now
                self._started_leading(partition, new)
        return [partition.tp for partition in starting]  # a failed one stops fetching too

    def _started_leading(self, partition: Partition, new_leadership: bool) -> None:
        level = logging.INFO if partition.is_recovering else self._detail
        if new_leadership and log.isEnabledFor(level):  # its arguments cost a few us per partition
            partition_log = partition.log
            log.log(level,
                    "Leader %s with leader epoch %d starting at offset %d (high watermark %d, "
                    "ISR %s, partition epoch %d%s)", partition.tp, partition.leader_epoch,
                    partition_log.log_end_offset, partition_log.high_watermark, list(partition.isr),
                    partition.partition_epoch,
                    ", elected uncleanly: RECOVERING" if partition.is_recovering else "")
        if partition.is_recovering and partition.pending_isr is None:
            # KIP-704: an unclean leader serves once the controller has recorded RECOVERED.
            self.isr.propose(partition, partition.isr, LeaderRecoveryState.RECOVERED)
        self.isr.maybe_advance_high_watermark(partition)
        self._wake(partition.tp)

    def _become_follower(self, tp: TopicPartition, local: LocalPartition, image: MetadataImage,
                         in_shutdown: bool, start_fetching: list[tuple[TopicPartition, int, int]],
                         stop_fetching: list[TopicPartition], seat_changed: list[TopicPartition]) -> None:
        """Follow `tp`; `in_shutdown`: this broker is in controlled shutdown (`apply` reads it
        once per change set)."""
        previous = self.partitions.get(tp)
        was = None if previous is None else (previous.leader_id, previous.leader_epoch)
        was_in_isr = previous is not None and self.broker_id in previous.isr  # before the update below
        partition = self._hosted(tp, local, image, previous)
        if partition is None:
            return
        keeps_fetching = follower_keeps_fetching(was, leader_id=partition.leader_id,
                                                 leader_epoch=partition.leader_epoch)
        if not keeps_fetching:
            partition.become_follower()
            self.isr.forget_pending(partition)  # a proposal from its leadership, not sent yet
            self._wake(tp)  # waiting fetches and produces answer NOT_LEADER_OR_FOLLOWER now
        if in_shutdown and (partition.leader_id < 0 or self.broker_id not in partition.isr):
            # Kafka's applyLocalFollowersDelta: in controlled shutdown, a replica without a leader
            # or out of the ISR stops fetching. The controller has just moved it out of the ISR
            # to shut it down; fetching would only truncate (an OffsetsForLeaderEpoch round trip
            # to the new leader per partition: 33,000 at 100,000 partitions) and fetch records
            # this broker will not serve.
            stop_fetching.append(tp)
            log.log(self._detail, "Follower %s stops fetching: broker %d is in controlled shutdown and out of "
                    "its ISR %s", tp, self.broker_id, list(partition.isr))
            return
        if keeps_fetching:  # same leader and epoch (an ISR change): keep fetching as before
            if (self.broker_id in partition.isr) != was_in_isr:
                seat_changed.append(tp)
            return
        if partition.leader_id < 0:
            stop_fetching.append(tp)
            log.log(self._detail, "Follower %s has no leader (leader epoch %d): partition offline",
                    tp, partition.leader_epoch)
            return
        start_fetching.append((tp, partition.leader_id, partition.leader_epoch))
        if log.isEnabledFor(self._detail):  # its arguments cost a few us per partition
            log.log(self._detail, "Follower %s of leader %d with leader epoch %d (log end offset %d, high "
                    "watermark %d)", tp, partition.leader_id, partition.leader_epoch,
                    partition.log.log_end_offset, partition.log.high_watermark)

    def _delete(self, tp: TopicPartition) -> bool:
        """Stop hosting `tp` and delete its log; whether it was hosted (counted in `apply`'s line)."""
        self.failed.pop(tp, None)  # a failed replica removed from this broker is forgotten with it
        partition = self.partitions.pop(tp, None)
        self._wake(tp)
        try:
            self.log_manager.delete_log(tp)
        except (KafkaStorageError, OSError) as e:
            log.error("Cannot delete the log of removed partition %s: %s", tp, e)
        if partition is not None:
            log.log(self._detail, "Stopped hosting %s (removed from its replicas or topic deleted)", tp)
        return partition is not None
