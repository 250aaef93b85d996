"""The group coordinator's partition writer, with the transactions TxnOffsetCommit writes.

    writer = TransactionalPartitionWriter(replicas, "__consumer_offsets", now_ms)
    writer.append(3, epoch, records, producer_id=7, producer_epoch=2)   # a transactional batch
    writer.append_marker(3, epoch, producer_id=7, producer_epoch=2, coordinator_epoch=0, committed=True)

A transaction's offsets are a transactional batch of the producer, appended as a client's
(acks=all) with the sequence that continues the producer's last batch in this partition, so
the partition's producer state opens the transaction as for any transactional produce. Its
marker is written as a leader writes one for WriteTxnMarkers (Kafka's AppendOrigin.COORDINATOR:
`ReplicaManager.append_marker`).
"""

from __future__ import annotations

from broker.coordinator.replica_writer import ReplicaPartitionWriter
from broker.coordinator.runtime import Encoded
from broker.replica_reads import serving_partition
from common.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from common.records import build_batch


class TransactionalPartitionWriter(ReplicaPartitionWriter):
    def append(self, partition: int, leader_epoch: int, records: list[Encoded], *,
               producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH) -> int:
        if producer_id == NO_PRODUCER_ID:
            return super().append(partition, leader_epoch, records)
        tp = self._tp(partition)
        p = serving_partition(self.replicas.partitions, self.replicas.broker_id, tp)
        entry = p.producer_state.last_entry(producer_id)
        sequence = 0  # the producer's first batch here, or of a new epoch
        if entry is not None and entry.producer_epoch == producer_epoch and entry.batches:
            sequence = entry.last_seq + 1
        batch = build_batch(records, base_timestamp=self.now_ms(), producer_id=producer_id,
                            producer_epoch=producer_epoch, base_sequence=sequence, is_transactional=True)
        info = self.replicas.append(tp, batch, acks=-1)
        return int(info.last_offset) + 1

    def append_marker(self, partition: int, leader_epoch: int, *, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int, committed: bool) -> int:
        """The producer's marker, as a leader writes one for WriteTxnMarkers (no sequence check;
        the producer state ends the transaction; fenced by producer and coordinator epochs)."""
        info = self.replicas.append_marker(self._tp(partition), producer_id=producer_id,
                                           producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch,
                                           committed=committed)
        return int(info.last_offset) + 1
