"""The role changes of the partitions this broker hosts, from the committed metadata: Kafka's
ReplicaManager.applyDelta (delete, then makeLeaders, then makeFollowers).

    roles = ReplicaRoles(broker_id, log_manager, partitions, topic_configs, isr, now_ms=..., wake=...)
    fetching = roles.apply(changes, image)   # then: fetchers.remove(fetching.stop), add(fetching.start)

A partition new to this broker gets its log (created together when many arrive at once) and
its producer state; a new leadership writes its leader epoch checkpoint (on the log manager's
I/O threads when there are many) and moves the high watermark; a follower whose leader or
leader epoch changed goes to the replica fetchers. `broker.replica_manager` owns the hosted
partitions and calls this on every batch of LocalReplicaChanges.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from broker.hosted_topic_configs import HostedTopicConfigs
from broker.log.log_manager import LogManager
from broker.replica_appends import rebuild_producer_state
from broker.replication.isr_manager import IsrManager
from broker.replication.leader_rules import follower_keeps_fetching, is_new_leadership
from broker.replication.partition import Partition
from broker.topic_partition import TopicPartition
from common.errors import KafkaStorageError
from metadata.image import MetadataImage
from metadata.local_changes import LocalPartition, LocalReplicaChanges
from metadata.records import LeaderRecoveryState

log = logging.getLogger(__name__)

# Change sets at least this large create logs and start leaderships on the log manager's I/O
# threads (file creation and fsync release the GIL); smaller ones stay on the caller's thread.
PARALLEL_MIN: Final = 16


@dataclass(frozen=True, slots=True)
class FetcherChanges:
    """What one batch of role changes asks of the replica fetchers."""

    stop: list[TopicPartition]  # deleted, now led here, or without a leader
    start: list[tuple[TopicPartition, int, int]]  # (tp, leader id, leader epoch)


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

    def apply(self, changes: LocalReplicaChanges, image: MetadataImage) -> FetcherChanges:
        """Act on this broker's LocalReplicaChanges: delete, lead, follow (Kafka's order)."""
        stop_fetching: list[TopicPartition] = []
        start_fetching: list[tuple[TopicPartition, int, int]] = []
        for local in changes.deletes:
            tp = TopicPartition(local.topic_name, local.partition_id)
            stop_fetching.append(tp)
            self._delete(tp)
        if changes.deletes:
            self.topic_configs.forget_unhosted()
        self.topic_configs.refresh(image)
        self._create_logs([*changes.leaders, *changes.followers], image)
        elected = {(p.topic_name, p.partition_id) for p in changes.elected_leaders}
        stop_fetching.extend(self._become_leaders(changes.leaders, image, elected))
        for local in changes.followers:
            self._become_follower(local, image, start_fetching, stop_fetching)
        return FetcherChanges(stop_fetching, start_fetching)

    def _hosted(self, local: LocalPartition, image: MetadataImage) -> Partition | None:
        tp = TopicPartition(local.topic_name, local.partition_id)
        registration = local.partition
        partition = self.partitions.get(tp)
        if partition is None or partition.topic_id != local.topic_id:
            if not self.topic_configs.is_applied(tp.topic):
                self.topic_configs.apply(tp.topic, image)
            try:
                partition_log = self.log_manager.get_or_create_log(tp, now_ms=self._now_ms())
            except (KafkaStorageError, OSError) as e:
                log.error("Cannot open the log of %s; the partition stays offline here: %s", tp, e)
                return None
            partition = Partition(tp, local.topic_id, partition_log, registration.leader,
                                  registration.leader_epoch, registration.partition_epoch,
                                  registration.replicas, registration.isr)
            rebuild_producer_state(partition)
            partition.min_insync_replicas = self.topic_configs.min_insync_replicas(tp.topic)
            self.partitions[tp] = partition
        partition.update_registration(registration)
        return partition

    def _create_logs(self, locals_: Iterable[LocalPartition], image: MetadataImage) -> None:
        """Create the logs of partitions new to this broker together (`LogManager.create_logs`):
        one directory fsync per log dir, not per partition. Failures are left to `_hosted`,
        which tries again and keeps that partition offline here."""
        new = [TopicPartition(p.topic_name, p.partition_id) for p in locals_]
        new = [tp for tp in new if self.log_manager.get_log(tp) is None]
        if len(new) < PARALLEL_MIN:
            return
        self.topic_configs.apply_new({tp.topic for tp in new}, image)
        self.log_manager.create_logs(new, now_ms=self._now_ms())

    def _become_leaders(self, leaders: Iterable[LocalPartition], image: MetadataImage,
                        elected: set[tuple[str, int]]) -> list[TopicPartition]:
        """Lead every partition of `leaders`; the new leaderships (stop fetching them).

        A new leadership writes the leader epoch checkpoint with an fsync (Kafka's
        LeaderEpochFileCache.assign does too); thousands of them (a new topic, a controlled
        shutdown moving a third of the leaders here) run on a thread pool, since fsync releases
        the GIL. Each touches only its own partition's files."""
        now_ms = self._now_ms()
        hosted: list[tuple[Partition, bool]] = []
        for local in leaders:
            previous = self.partitions.get(TopicPartition(local.topic_name, local.partition_id))
            was = None if previous is None else (previous.leader_id, previous.leader_epoch)
            partition = self._hosted(local, image)
            if partition is None:
                continue
            hosted.append((partition, is_new_leadership(
                was, broker_id=self.broker_id, leader_epoch=partition.leader_epoch,
                elected=(local.topic_name, local.partition_id) in elected)))
        starting = [partition for partition, new in hosted if new]
        if len(starting) < PARALLEL_MIN:
            for partition in starting:
                partition.become_leader(self.broker_id, now_ms)
        else:  # on the log manager's I/O pool; the first failure re-raised after every one ran
            for future in self.log_manager.run_parallel(lambda p: p.become_leader(self.broker_id, now_ms), starting):
                future.result()
        for partition, new in hosted:
            self._started_leading(partition, new)
        return [partition.tp for partition in starting]

    def _started_leading(self, partition: Partition, new_leadership: bool) -> None:
        if new_leadership:
            partition_log = partition.log
            log.info("Leader %s with leader epoch %d starting at offset %d (high watermark %d, "
                     "ISR %s, partition epoch %d%s)", partition.tp, partition.leader_epoch,
                     partition_log.log_end_offset, partition_log.high_watermark, list(partition.isr),
                     partition.partition_epoch,
                     ", elected uncleanly: RECOVERING" if partition.is_recovering else "")
        if partition.is_recovering and partition.pending_isr is None:
            # KIP-704: an unclean leader serves once the controller has recorded RECOVERED.
            self.isr.propose(partition, partition.isr, LeaderRecoveryState.RECOVERED)
        self.isr.maybe_advance_high_watermark(partition)
        self._wake(partition.tp)

    def _become_follower(self, local: LocalPartition, image: MetadataImage,
                         start_fetching: list[tuple[TopicPartition, int, int]],
                         stop_fetching: list[TopicPartition]) -> None:
        tp = TopicPartition(local.topic_name, local.partition_id)
        previous = self.partitions.get(tp)
        was = None if previous is None else (previous.leader_id, previous.leader_epoch)
        partition = self._hosted(local, image)
        if partition is None:
            return
        if follower_keeps_fetching(was, leader_id=partition.leader_id, leader_epoch=partition.leader_epoch):
            return  # same leader and epoch (an ISR change): keep fetching as before
        partition.become_follower()
        self._wake(tp)  # waiting fetches and produces answer NOT_LEADER_OR_FOLLOWER now
        if partition.leader_id < 0:
            stop_fetching.append(tp)
            log.info("Follower %s has no leader (leader epoch %d): partition offline",
                     tp, partition.leader_epoch)
            return
        start_fetching.append((tp, partition.leader_id, partition.leader_epoch))
        log.info("Follower %s of leader %d with leader epoch %d (log end offset %d, high "
                 "watermark %d)", tp, partition.leader_id, partition.leader_epoch,
                 partition.log.log_end_offset, partition.log.high_watermark)

    def _delete(self, tp: TopicPartition) -> None:
        partition = self.partitions.pop(tp, None)
        self._wake(tp)
        try:
            self.log_manager.delete_log(tp)
        except (KafkaStorageError, OSError) as e:
            log.error("Cannot delete the log of removed partition %s: %s", tp, e)
        if partition is not None:
            log.info("Stopped hosting %s (removed from its replicas or topic deleted)", tp)
