"""The coordinator runtime's partitions, on this broker's replica manager.

    writer = ReplicaPartitionWriter(replicas, "__consumer_offsets", now_ms)
    replicas.change_listeners.append(writer.listener(runtime.on_partition_change))

Kafka's `CoordinatorPartitionWriter`: appends with acks=all through the replica manager
(`append` returns at once, the commit is seen as a high-watermark move) and the loader that
reads a partition back from its log (Kafka's `CoordinatorLoaderImpl`). The replica manager
calls its change listeners after every append, high-watermark move and role change of a
partition, which is how the runtime learns of commits and leadership without polling.

Loading feeds a transactional batch's records with its producer and a control batch's marker
to the runtime, and skips any other control record. Writing transactions takes the replica
manager's partitions themselves (a layer above this one): the group coordinator's
`TransactionalPartitionWriter` does it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final

from broker.coordinator.runtime import Encoded, LoadSink
from common.control_records import decode_marker
from common.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, iter_batches
from common.records import build_batch, decode_records
from common.topic_partition import TopicPartition
from common.units import MIB

LOAD_READ_BYTES: Final = 1 * MIB  # one read of the partition while loading


class ReplicaPartitionWriter:
    def __init__(self, replicas: Any, topic: str, now_ms: Callable[[], int]) -> None:
        self.replicas = replicas
        self.topic = topic
        self.now_ms = now_ms
        self._tps: dict[int, TopicPartition] = {}

    def _tp(self, partition: int) -> TopicPartition:
        tp = self._tps.get(partition)
        if tp is None:
            tp = self._tps[partition] = TopicPartition(self.topic, partition)
        return tp

    def listener(self, on_change: Callable[[int], None]) -> Callable[[TopicPartition], None]:
        """A replica-manager change listener passing this topic's partitions to `on_change`."""
        topic = self.topic

        def changed(tp: TopicPartition) -> None:
            if tp.topic == topic:
                on_change(tp.partition)
        return changed

    def leader_epoch(self, partition: int) -> int | None:
        p = self.replicas.get_partition(self._tp(partition))
        if p is None or not p.is_leader(self.replicas.broker_id):
            return None
        return int(p.leader_epoch)

    def append(self, partition: int, leader_epoch: int, records: list[Encoded], *,
               producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH) -> int:
        if producer_id != NO_PRODUCER_ID:
            raise TypeError(f"the coordinator of {self.topic} writes no transactions")
        batch = build_batch(records, base_timestamp=self.now_ms())
        info = self.replicas.append(self._tp(partition), batch, acks=-1)
        return int(info.last_offset) + 1

    def append_marker(self, partition: int, leader_epoch: int, *, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int, committed: bool) -> int:
        raise TypeError(f"the coordinator of {self.topic} writes no transactions")

    def high_watermark(self, partition: int) -> int:
        p = self.replicas.get_partition(self._tp(partition))
        return -1 if p is None else int(p.log.high_watermark)

    async def load(self, partition: int, leader_epoch: int, sink: LoadSink) -> int:
        tp = self._tp(partition)
        log = self.replicas.get_partition(tp).log
        offset, end = log.log_start_offset, log.log_end_offset
        while offset < end:  # bounded: each pass reads at least one batch or stops
            read = self.replicas.read(tp, offset, LOAD_READ_BYTES, up_to_high_watermark=False,
                                      current_leader_epoch=leader_epoch)
            data = read.records.read_bytes() if hasattr(read.records, "read_bytes") else bytes(read.records)
            if not data:
                break
            for pos, header in iter_batches(data, allow_partial_tail=True):
                offset = header.base_offset + header.last_offset_delta + 1
                if header.is_control:
                    for rec in decode_records(data, pos, header):
                        marker = decode_marker(rec.key, rec.value)
                        if marker is not None:
                            sink.end_transaction(header.producer_id, header.producer_epoch, marker.committed)
                    continue
                producer = (header.producer_id, header.producer_epoch) if header.is_transactional \
                    else (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
                for rec in decode_records(data, pos, header):
                    if rec.key is not None:
                        sink.record(rec.key, rec.value, *producer)
            await asyncio.sleep(0)  # let requests of the loaded partitions in between
        return max(offset, end)
