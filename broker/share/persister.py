"""A share partition leader's durable state, kept by the share group's coordinator (KIP-932's
persister): ReadShareGroupState when the leader starts the share partition, WriteShareGroupState
after each change it must not lose, broker to broker on the inter-broker listener.

    store = ShareStore(image_provider, endpoint, client_id="broker-1-share-persister")
    code, snapshot = await store.read("g", tp, leader_epoch=4)     # snapshot None: no state yet
    code = await store.write("g", tp, leader_epoch=4, state_epoch=0, start_offset=10, batches=((10, 14, 2, 1),))

The coordinator is the leader of the group's `__consumer_offsets` partition (tidelog's share
coordinator is the group coordinator: broker/handlers/share_state.py). One connection per
coordinator broker, one request in flight on it at a time. A read (a share partition starting on
its new leader, often right after a failover that also moved the coordinator) that finds the
coordinator unreachable, moving or still loading (COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR) asks again, from the newest metadata, after a
doubling backoff (COORDINATOR_ATTEMPTS in all), as Kafka's PersisterStateManager retries them:
librdkafka's share consumer raises such a code from a ShareFetch as unexpected. A write is not
asked again here: its failure goes back to the member (ShareAcknowledge, or the acknowledgements
of a ShareFetch) and the leader rolls the acknowledgement back (issue 31).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

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
# Asked again: the group's coordinator moves with its partition's leadership (a failover) and
# loads its state before it answers.
COORDINATOR_RETRIABLE: Final = frozenset({E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS,
                                          E.NOT_COORDINATOR})
COORDINATOR_ATTEMPTS: Final = 6  # with the backoff below: ~3 s of a coordinator moving, then the code is passed on
COORDINATOR_BACKOFF_S: Final = 0.05  # before the second attempt; doubles after each
T = TypeVar("T")


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
        return await _retrying(lambda: self._read(group_id, tp, leader_epoch=leader_epoch), lambda r: r[0],
                               f"ReadShareGroupState of {tp} for share group {group_id}")

    async def _read(self, group_id: str, tp: TopicPartition, *, leader_epoch: int
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


async def _retrying(attempt: Callable[[], Awaitable[T]], code_of: Callable[[T], ErrorCode], what: str) -> T:
    """`attempt()` until its code is not one of COORDINATOR_RETRIABLE, at most COORDINATOR_ATTEMPTS
    times with a doubling backoff between (each attempt reads the newest metadata)."""
    backoff = COORDINATOR_BACKOFF_S
    for tries in range(1, COORDINATOR_ATTEMPTS + 1):  # bounded: COORDINATOR_ATTEMPTS
        outcome = await attempt()
        code = code_of(outcome)
        if code not in COORDINATOR_RETRIABLE or tries == COORDINATOR_ATTEMPTS:
            if tries > 1:
                log.info("%s: %s after %d attempts", what, code.name, tries)
            return outcome
        await asyncio.sleep(backoff)
        backoff *= 2
    raise AssertionError("unreachable: the last attempt returns")
