"""Producer id blocks: Kafka's ProducerIdControlManager.

Brokers hand out producer ids (InitProducerId) from blocks the controller allocates. The
image keeps where the next block starts (-1 before the first, which then starts at 0);
a ProducerIds record moves it past the block, so no id is ever handed out twice, even
across controller failover.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from common.errors import ErrorCode
from metadata.image import MetadataImage
from metadata.records import ProducerIds
from quorum.broker_control import check_broker_epoch
from quorum.controller_result import ControllerApiError, ControllerResult

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

PRODUCER_ID_BLOCK_SIZE: Final = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
MAX_PRODUCER_ID: Final = 2**63 - 1  # producer ids are Java longs


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """Kafka's ProducerIdsBlock: ids first_producer_id .. first_producer_id + size - 1, for one broker."""

    assigned_broker_id: int
    first_producer_id: int
    size: int

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1

    @property
    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size


def allocate_producer_ids(image: MetadataImage, *, broker_id: int, broker_epoch: int,
                          block_size: int = PRODUCER_ID_BLOCK_SIZE) -> ControllerResult[ProducerIdBlock]:
    """AllocateProducerIds: the next block for this broker and the ProducerIds record that reserves it."""
    check_broker_epoch(image, broker_id, broker_epoch)
    if type(block_size) is not int or block_size <= 0:
        raise ControllerApiError(ErrorCode.INVALID_REQUEST,
                                 f"block size must be a positive integer, got {block_size!r}", field="block_size")
    first = max(image.producer_ids.next_producer_id_block_start, 0)
    if first > MAX_PRODUCER_ID - block_size:
        raise ControllerApiError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                 "Exhausted all producerIds as the next block's end producerId "
                                 "has exceeded the int64 type limit")
    block = ProducerIdBlock(broker_id, first, block_size)
    return ControllerResult((ProducerIds(broker_id, broker_epoch, block.next_block_first_id),), block)
