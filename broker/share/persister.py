"""A share partition leader's durable state, kept by the share group's coordinator (KIP-932's
persister): ReadShareGroupState when the leader starts the share partition, WriteShareGroupState
after each change it must not lose, broker to broker on the inter-broker listener.

    store = ShareStore(image_provider, endpoint, client_id="broker-1-share-persister")
    code, snapshot = await store.read("g", tp, leader_epoch=4)     # snapshot None: no state yet
    code = await store.write("g", tp, leader_epoch=4, state_epoch=0, start_offset=10, batches=((10, 14, 2, 1),))

The coordinator is the leader of the group's `__consumer_offsets` partition (tidelog's share
coordinator is the group coordinator: broker/handlers/share_state.py). One connection per
coordinator broker, one request in flight on it at a time. An unreachable or moving coordinator
answers COORDINATOR_NOT_AVAILABLE, which ShareFetch and ShareAcknowledge pass on (clients retry).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from broker.broker_connections import BrokerConnections, Endpoint
from broker.replication.kafka_connection import BrokerConnectionError, KafkaConnection
from common.errors import ErrorCode
from common.limits import CLIENT_REQUEST_TIMEOUT
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.metadata import wire_topic_id
from common.topic_partition import TopicPartition
from groups.partitioner import GROUP_METADATA_TOPIC_NAME, coordinator_partition
from groups.share_records import ShareSnapshotValue, StateBatch
from metadata.image import MetadataImage

log = logging.getLogger(__name__)

STATE_VERSION: Final = 0  # Read/WriteShareGroupState v0 (Kafka 4.1's)
UNINITIALIZED: Final = -1
E = ErrorCode


def coordinator_of(image: MetadataImage, group_id: str) -> int | None:
    """The broker leading the group's `__consumer_offsets` partition; None if none."""
    topic = image.topic(GROUP_METADATA_TOPIC_NAME)
    if topic is None or not topic.partitions:
        return None
    registration = topic.partitions.get(coordinator_partition(group_id, len(topic.partitions)))
    return None if registration is None or registration.leader < 0 else registration.leader


class ShareStore:
    def __init__(self, image: Callable[[], MetadataImage], endpoint: Endpoint, *, client_id: str) -> None:
        self._image, self.client_id = image, client_id
        self._coordinators = BrokerConnections(endpoint, self._open)

    async def read(self, group_id: str, tp: TopicPartition, *, leader_epoch: int
                   ) -> tuple[ErrorCode, ShareSnapshotValue | None]:
        image = self._image()
        topic = image.topic(tp.topic)
        if topic is None:
            return E.UNKNOWN_TOPIC_OR_PARTITION, None
        m = messages.request_module(ApiKey.READ_SHARE_GROUP_STATE, STATE_VERSION)
        request = m.ReadShareGroupStateRequest(group_id=group_id, topics=(m.ReadStateData(
            topic_id=wire_topic_id(topic.topic_id),
            partitions=(m.PartitionData(partition=tp.partition, leader_epoch=leader_epoch),)),))
        response = await self._call(image, group_id, ApiKey.READ_SHARE_GROUP_STATE, request)
        if isinstance(response, ErrorCode):
            return response, None
        p = response.results[0].partitions[0]
        if p.error_code:
            return ErrorCode(p.error_code), None
        if p.start_offset == UNINITIALIZED:
            return E.NONE, None
        return E.NONE, ShareSnapshotValue(p.state_epoch, leader_epoch, p.start_offset, tuple(
            (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches))

    async def write(self, group_id: str, tp: TopicPartition, *, leader_epoch: int, state_epoch: int,
                    start_offset: int, batches: tuple[StateBatch, ...]) -> ErrorCode:
        image = self._image()
        topic = image.topic(tp.topic)
        if topic is None:
            return E.UNKNOWN_TOPIC_OR_PARTITION
        m = messages.request_module(ApiKey.WRITE_SHARE_GROUP_STATE, STATE_VERSION)
        request = m.WriteShareGroupStateRequest(group_id=group_id, topics=(m.WriteStateData(
            topic_id=wire_topic_id(topic.topic_id), partitions=(m.PartitionData(
                partition=tp.partition, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
                state_batches=tuple(m.StateBatch(first_offset=b[0], last_offset=b[1], delivery_state=b[2],
                                                 delivery_count=b[3]) for b in batches)),)),))
        response = await self._call(image, group_id, ApiKey.WRITE_SHARE_GROUP_STATE, request)
        if isinstance(response, ErrorCode):
            return response
        return ErrorCode(response.results[0].partitions[0].error_code)

    async def _call(self, image: MetadataImage, group_id: str, api: ApiKey, request: Any) -> Any:
        coordinator = coordinator_of(image, group_id)
        if coordinator is None:
            return E.COORDINATOR_NOT_AVAILABLE
        try:
            return await self._coordinators.request(image, coordinator, api, STATE_VERSION, request)
        except (BrokerConnectionError, OSError) as e:
            log.info("%s for share group %s to coordinator %d failed: %s", api.name, group_id, coordinator, e)
            return E.COORDINATOR_NOT_AVAILABLE

    async def _open(self, host: str, port: int) -> KafkaConnection:
        return await KafkaConnection.open(host, port, client_id=self.client_id, timeout_s=CLIENT_REQUEST_TIMEOUT)

    async def close(self) -> None:
        self._coordinators.close()
