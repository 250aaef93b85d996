"""FindCoordinator (key 10), v0–v2: which broker coordinates a group or transaction."""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version
from common.protocol.primitives import Chunk, Reader, Writer

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


@dataclass(frozen=True, slots=True)
class FindCoordinatorRequest:
    key: str
    key_type: int = KEY_TYPE_GROUP  # v1+


@dataclass(frozen=True, slots=True)
class FindCoordinatorResponse:
    error_code: int
    node_id: int
    host: str
    port: int
    error_message: str | None = None  # v1+
    throttle_time_ms: int = 0  # v1+


def decode_find_coordinator_request(body: memoryview, version: int) -> FindCoordinatorRequest:
    check_version(ApiKey.FIND_COORDINATOR, version)
    r = Reader(body)
    key = r.string()
    return FindCoordinatorRequest(key, r.int8() if version >= 1 else KEY_TYPE_GROUP)


def encode_find_coordinator_request(req: FindCoordinatorRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_find_coordinator_request`."""
    check_version(ApiKey.FIND_COORDINATOR, version)
    w = Writer()
    w.string(req.key)
    if version >= 1:
        w.int8(req.key_type)
    return w.chunks()


def encode_find_coordinator_response(resp: FindCoordinatorResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.FIND_COORDINATOR, version)
    w = Writer()
    if version >= 1:
        w.int32(resp.throttle_time_ms)
    w.int16(resp.error_code)
    if version >= 1:
        w.nullable_string(resp.error_message)
    w.int32(resp.node_id)
    w.string(resp.host)
    w.int32(resp.port)
    return w.chunks()


def decode_find_coordinator_response(body: memoryview, version: int) -> FindCoordinatorResponse:
    """Client side (tests, tools): the inverse of `encode_find_coordinator_response`."""
    check_version(ApiKey.FIND_COORDINATOR, version)
    r = Reader(body)
    throttle = r.int32() if version >= 1 else 0
    error_code = r.int16()
    message = r.nullable_string() if version >= 1 else None
    return FindCoordinatorResponse(error_code, r.int32(), r.string(), r.int32(), message, throttle)
