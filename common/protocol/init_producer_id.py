"""InitProducerId (key 22), v0–v5: a producer id and epoch for idempotent producers.

v2 is the first flexible version. v3 (KIP-360) adds the producer's current id and epoch to
the request, so a producer can ask again after an error; both -1 when it has none. v4 lets the
broker answer PRODUCER_FENCED and v5 TRANSACTION_ABORTABLE (KIP-890): both are a transaction
coordinator's answers, and the response's fields do not change.

The broker serves InitProducerId on kio's messages (broker/handlers/transactions.py); this
codec is the client side of our tools and tests until they move to kio's classes too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk

NO_PRODUCER_ID: Final = -1  # Kafka's RecordBatch.NO_PRODUCER_ID
NO_PRODUCER_EPOCH: Final = -1  # Kafka's RecordBatch.NO_PRODUCER_EPOCH
EPOCH_VERSION: Final = 3  # KIP-360: the request carries the producer's id and epoch


@dataclass(frozen=True, slots=True)
class InitProducerIdRequest:
    transactional_id: str | None
    transaction_timeout_ms: int
    producer_id: int = NO_PRODUCER_ID  # v3+
    producer_epoch: int = NO_PRODUCER_EPOCH  # v3+


@dataclass(frozen=True, slots=True)
class InitProducerIdResponse:
    throttle_time_ms: int
    error_code: int
    producer_id: int
    producer_epoch: int


def decode_init_producer_id_request(body: memoryview, version: int) -> InitProducerIdRequest:
    check_version(ApiKey.INIT_PRODUCER_ID, version)
    r = reader_for(ApiKey.INIT_PRODUCER_ID, version, body)
    transactional_id, timeout_ms = r.nullable_string(), r.int32()
    if version >= EPOCH_VERSION:
        request = InitProducerIdRequest(transactional_id, timeout_ms, r.int64(), r.int16())
    else:
        request = InitProducerIdRequest(transactional_id, timeout_ms)
    r.tagged_fields()
    return request


def encode_init_producer_id_request(req: InitProducerIdRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_init_producer_id_request`."""
    check_version(ApiKey.INIT_PRODUCER_ID, version)
    w = writer_for(ApiKey.INIT_PRODUCER_ID, version)
    w.nullable_string(req.transactional_id)
    w.int32(req.transaction_timeout_ms)
    if version >= EPOCH_VERSION:
        w.int64(req.producer_id)
        w.int16(req.producer_epoch)
    w.tagged_fields()
    return w.chunks()


def encode_init_producer_id_response(resp: InitProducerIdResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.INIT_PRODUCER_ID, version)
    w = writer_for(ApiKey.INIT_PRODUCER_ID, version)
    w.int32(resp.throttle_time_ms)
    w.int16(resp.error_code)
    w.int64(resp.producer_id)
    w.int16(resp.producer_epoch)
    w.tagged_fields()
    return w.chunks()


def decode_init_producer_id_response(body: memoryview, version: int) -> InitProducerIdResponse:
    """Client side (tests, tools): the inverse of `encode_init_producer_id_response`."""
    check_version(ApiKey.INIT_PRODUCER_ID, version)
    r = reader_for(ApiKey.INIT_PRODUCER_ID, version, body)
    response = InitProducerIdResponse(r.int32(), r.int16(), r.int64(), r.int16())
    r.tagged_fields()
    return response
