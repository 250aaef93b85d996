"""WriteTxnMarkers (API 27): the transaction coordinator asks the leaders of a transaction's
partitions to write its COMMIT or ABORT marker (Kafka's KafkaApis.handleWriteTxnMarkersRequest).

For each marker and each partition this broker leads, one control batch is appended as the
leader with origin COORDINATOR (`ReplicaManager.append_marker`: no sequence check;
the producer state ends the transaction, an ABORT is indexed in the `.txnindex`), and the
answer waits until every appended marker is replicated to the ISR (acks=-1, as Kafka's
appendRecords with requiredAcks -1), bounded by MARKER_REPLICATION_TIMEOUT_MS. A partition of
`__consumer_offsets` is the group coordinator's (its pending transactional offsets become
committed or go): `ctx.groups.complete_transaction` appends the marker through the coordinator
runtime and answers that partition's error.

Per partition errors, as Kafka's: UNKNOWN_TOPIC_OR_PARTITION (no such partition),
NOT_LEADER_OR_FOLLOWER (not led here), NOT_ENOUGH_REPLICAS (ISR below min.insync.replicas),
INVALID_PRODUCER_EPOCH (a marker for an older producer epoch), TRANSACTION_COORDINATOR_FENCED
(from an older coordinator epoch than the last marker seen), REQUEST_TIMED_OUT (appended, not
replicated in time), KAFKA_STORAGE_ERROR. The coordinator retries what was not written.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from broker.handlers.context import BrokerContext, ClientInfo
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.topic_partition import TopicPartition
from common.units import SECOND_MS
from groups.partitioner import GROUP_METADATA_TOPIC_NAME

log = logging.getLogger(__name__)

# Kafka waits request.timeout.ms (default 30 s) for the markers to replicate.
MARKER_REPLICATION_TIMEOUT_MS: Final = 30 * SECOND_MS
COMMIT: Final = True  # WritableTxnMarker.transaction_result: true commits, false aborts


async def handle_write_txn_markers(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's WriteTxnMarkersRequest (v0-v1); the answer its response, one result per
    marker in request order."""
    m = messages.response_module(ApiKey.WRITE_TXN_MARKERS, version)
    image = ctx.image()
    codes: list[dict[TopicPartition, int]] = []
    required: dict[TopicPartition, int] = {}  # the HW each appended partition must reach
    waiting: list[tuple[int, TopicPartition]] = []  # (marker index, partition) appended here
    for i, marker in enumerate(req.markers):
        marker_codes: dict[TopicPartition, int] = {}
        for topic in marker.topics:
            for index in topic.partition_indexes:
                tp = TopicPartition(topic.name, index)
                if tp.topic == GROUP_METADATA_TOPIC_NAME:
                    marker_codes[tp] = await _complete_offsets_transaction(ctx, tp, marker)
                    continue
                try:
                    end = _append_marker(ctx, tp, marker)
                except Exception as e:  # noqa: BLE001 - a failure answers this partition only
                    marker_codes[tp] = ctx.partition_error(tp, e, image)
                    continue
                required[tp] = max(required.get(tp, 0), end)
                waiting.append((i, tp))
                marker_codes[tp] = int(ErrorCode.NONE)
        codes.append(marker_codes)
    if required:
        replicated = ctx.replicas.replicated_now(required)
        if replicated is None:
            replicated = await ctx.replicas.wait_for_replication(
                required, MARKER_REPLICATION_TIMEOUT_MS / SECOND_MS)
        for i, tp in waiting:
            codes[i][tp] = replicated.get(tp, int(ErrorCode.REQUEST_TIMED_OUT))
    return m.WriteTxnMarkersResponse(markers=tuple(
        m.WritableTxnMarkerResult(producer_id=marker.producer_id, topics=_by_topic(m, marker_codes))
        for marker, marker_codes in zip(req.markers, codes)))


async def _complete_offsets_transaction(ctx: BrokerContext, tp: TopicPartition, marker: Any) -> int:
    """The group coordinator writes the marker of an `__consumer_offsets` partition."""
    try:
        return int(await ctx.groups.complete_transaction(
            tp.partition, marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
            marker.transaction_result == COMMIT))
    except Exception as e:  # noqa: BLE001 - a failure answers this partition only
        return ctx.partition_error(tp, e, ctx.image())


def _append_marker(ctx: BrokerContext, tp: TopicPartition, marker: Any) -> int:
    """Append one marker as leader; the offset the high watermark must reach. Raises KafkaError."""
    committed = marker.transaction_result == COMMIT
    info = ctx.replicas.append_marker(tp, producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                                      coordinator_epoch=marker.coordinator_epoch, committed=committed)
    log.info("Wrote the %s marker of producer %d (epoch %d, coordinator epoch %d) to %s at offset %d",
             "COMMIT" if committed else "ABORT", marker.producer_id, marker.producer_epoch,
             marker.coordinator_epoch, tp, info.first_offset)
    return info.last_offset + 1


def _by_topic(m: Any, codes: dict[TopicPartition, int]) -> tuple[Any, ...]:
    topics: dict[str, list[Any]] = {}
    for tp, code in codes.items():
        topics.setdefault(tp.topic, []).append(
            m.WritableTxnMarkerPartitionResult(partition_index=tp.partition, error_code=ErrorCode(code)))
    return tuple(m.WritableTxnMarkerTopicResult(name=name, partitions=tuple(parts))
                 for name, parts in topics.items())
