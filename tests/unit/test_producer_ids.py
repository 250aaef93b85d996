"""quorum/producer_ids.py: producer id blocks are contiguous, never reused, and refused to strangers."""

from __future__ import annotations

import pytest

from common.errors import ErrorCode
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.records import BeginEpoch, Listener, ProducerIds, RegisterBroker
from quorum.controller_result import ControllerApiError
from quorum.producer_ids import MAX_PRODUCER_ID, ProducerIdBlock, allocate_producer_ids

E = ErrorCode


def replay(image, *records):
    return apply(image, enumerate(records, start=image.offset + 1))


# Brokers 1 and 2 registered at offsets 1 and 2: broker epoch == broker id.
CLUSTER = replay(EMPTY_IMAGE, BeginEpoch(1),
                 *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", "127.0.0.1", 9090 + b),)) for b in (1, 2)))
AFTER_ONE_BLOCK = replay(CLUSTER, ProducerIds(1, 1, 1000))
NEARLY_EXHAUSTED = replay(CLUSTER, ProducerIds(1, 1, MAX_PRODUCER_ID - 1000))

# (image, broker, block size, expected block, expected next_producer_id_block_start)
ALLOCATE = [
    pytest.param(CLUSTER, 1, 1000, ProducerIdBlock(1, 0, 1000), 1000, id="first-block-starts-at-zero"),
    pytest.param(AFTER_ONE_BLOCK, 2, 1000, ProducerIdBlock(2, 1000, 1000), 2000, id="next-block-follows"),
    pytest.param(AFTER_ONE_BLOCK, 2, 10, ProducerIdBlock(2, 1000, 10), 1010, id="custom-block-size"),
    pytest.param(NEARLY_EXHAUSTED, 2, 1000, ProducerIdBlock(2, MAX_PRODUCER_ID - 1000, 1000), MAX_PRODUCER_ID,
                 id="the-last-block-fits-exactly"),
]


@pytest.mark.parametrize(("image", "broker_id", "size", "block", "next_start"), ALLOCATE)
def test_allocate_producer_ids(image, broker_id, size, block, next_start):
    result = allocate_producer_ids(image, broker_id=broker_id, broker_epoch=broker_id, block_size=size)
    assert result.records == (ProducerIds(broker_id, broker_id, next_start),)
    assert result.response == block
    assert block.next_block_first_id == next_start and block.last_producer_id == next_start - 1
    after = replay(image, *result.records)
    assert after.producer_ids.next_producer_id_block_start == next_start


def test_blocks_never_overlap():
    image, blocks = CLUSTER, []
    for broker_id in (1, 2, 1, 2):
        result = allocate_producer_ids(image, broker_id=broker_id, broker_epoch=broker_id)
        blocks.append(result.response)
        image = replay(image, *result.records)
    assert [(b.assigned_broker_id, b.first_producer_id, b.last_producer_id) for b in blocks] == [
        (1, 0, 999), (2, 1000, 1999), (1, 2000, 2999), (2, 3000, 3999)]


ALLOCATE_ERRORS = [
    pytest.param(CLUSTER, dict(broker_id=9, broker_epoch=9), E.BROKER_ID_NOT_REGISTERED, "broker_id",
                 id="unknown-broker"),
    pytest.param(CLUSTER, dict(broker_id=1, broker_epoch=2), E.STALE_BROKER_EPOCH, "broker_epoch",
                 id="stale-broker-epoch"),
    pytest.param(CLUSTER, dict(broker_id=1, broker_epoch=1, block_size=0), E.INVALID_REQUEST, "block_size",
                 id="empty-block"),
    pytest.param(NEARLY_EXHAUSTED, dict(broker_id=1, broker_epoch=1, block_size=1001), E.UNKNOWN_SERVER_ERROR,
                 None, id="exhausted"),
]


@pytest.mark.parametrize(("image", "kwargs", "code", "field"), ALLOCATE_ERRORS)
def test_allocate_producer_ids_errors(image, kwargs, code, field):
    with pytest.raises(ControllerApiError) as info:
        allocate_producer_ids(image, **kwargs)
    assert (info.value.code, info.value.field) == (code, field)
