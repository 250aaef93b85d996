"""Producer ids for InitProducerId: handed out from blocks the controller allocates.

    error = init_producer_id_error(transactional_id, producer_id, producer_epoch)  # None: go on
    ids = ProducerIdManager(broker_id, controller_client, image)
    producer_id = await ids.next_id()     # None while the controller cannot be reached

Kafka's RPCProducerIdManager: the controller commits a ProducerIds record reserving a block
for this broker (by broker epoch), and the broker hands ids out of it one by one.

An idempotent (non-transactional) producer always gets a new id with epoch 0, whatever id and
epoch it sends (InitProducerId v3+, KIP-360): Kafka's TransactionCoordinator "blindly accepts"
a null transactional id. The epoch bump KIP-360 describes for such a producer happens in the
client (the Java producer bumps its own epoch; librdkafka asks for a new id, as here). Only the
transaction coordinator (broker/transaction_coordinator/) bumps or fences an epoch: it takes
its new producer ids from this same manager.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from broker.controller_client import ControllerClient, ControllerUnavailableError
from common import rpc, rpc_messages
from common.errors import ErrorCode
from common.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from metadata.image import MetadataImage

log = logging.getLogger(__name__)


def init_producer_id_error(transactional_id: str | None, producer_id: int, producer_epoch: int) -> ErrorCode | None:
    """Why an InitProducerId is refused before anything is looked up, in Kafka's order; None
    when it goes on (to a new idempotent id, or to the transaction coordinator). KafkaApis
    refuses an id without an epoch or an epoch without an id; the TransactionCoordinator
    refuses an empty transactional id."""
    if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
        return ErrorCode.INVALID_REQUEST
    if transactional_id == "":
        return ErrorCode.INVALID_REQUEST
    return None


class ProducerIdManager:
    """The block [next, end) this broker hands out; a new one when it runs out."""

    def __init__(self, broker_id: int, controller_client: ControllerClient | None,
                 image: Callable[[], MetadataImage]) -> None:
        self.broker_id = broker_id
        self._client = controller_client
        self._image = image
        self._block = (0, 0)
        self._lock = asyncio.Lock()  # one allocation at a time: concurrent callers share it

    async def next_id(self) -> int | None:
        async with self._lock:
            next_id, end = self._block
            if next_id >= end:
                block = await self._allocate()
                if block is None:
                    return None
                next_id, end = block
            self._block = (next_id + 1, end)
        return next_id

    async def _allocate(self) -> tuple[int, int] | None:
        registration = self._image().broker(self.broker_id)
        if self._client is None or registration is None:
            return None
        try:
            status, reply = rpc.decode_reply(rpc_messages.AllocateProducerIdsReply, await self._client.call(
                "allocate-producer-ids", rpc.encode(rpc_messages.BrokerIdAndEpoch(self.broker_id, registration.broker_epoch))))
        except ControllerUnavailableError as e:
            log.warning("Cannot allocate producer ids: %s", e)
            return None
        if reply is None:
            log.warning("Controller refused producer ids: %s", status.error_message)
            return None
        start, length = reply.producer_id_start, reply.producer_id_len
        log.info("Allocated producer ids %d..%d to broker %d", start, start + length - 1, self.broker_id)
        return start, start + length
