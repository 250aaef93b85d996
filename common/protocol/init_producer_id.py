"""InitProducerId (key 22), v0–v2: a producer id and epoch for idempotent producers.

v2 is the first flexible version. v3+ (KIP-360: an idempotent producer bumping its own
epoch after an error) is not answered: tidelog always hands out a new id."""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk


@dataclass(frozen=True, slots=True)
class InitProducerIdRequest:
    transactional_id: str | None
    transaction_timeout_ms: int


@dataclass(frozen=True, slots=True)
class InitProducerIdResponse:
    throttle_time_ms: int
    error_code: int
    producer_id: int
    producer_epoch: int


def decode_init_producer_id_request(body: memoryview, version: int) -> InitProducerIdRequest:
    check_version(ApiKey.INIT_PRODUCER_ID, version)
    r = reader_for(ApiKey.INIT_PRODUCER_ID, version, body)
    request = InitProducerIdRequest(r.nullable_string(), r.int32())
    r.tagged_fields()
    return request


def encode_init_producer_id_request(req: InitProducerIdRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_init_producer_id_request`."""
    check_version(ApiKey.INIT_PRODUCER_ID, version)
    w = writer_for(ApiKey.INIT_PRODUCER_ID, version)
    w.nullable_string(req.transactional_id)
    w.int32(req.transaction_timeout_ms)
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
