"""FindCoordinator (key 10), v0–v5: which broker coordinates a group or transaction.

v3 is the first flexible version; v4 batches keys (KIP-699): the request's `key` becomes
`coordinator_keys` and the answer one `Coordinator` per key. v5 only allows
TRANSACTION_ABORTABLE (KIP-890), which tidelog's coordinators never answer.

The broker serves FindCoordinator on kio's messages (broker/handlers/metadata.py); this codec
is the client side of our tools and tests, and its dataclasses the group coordinator's answer
type (`OffsetsTopic`), until those move to kio's classes too.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk, Reader, Writer

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
BATCHED_VERSION = 4


@dataclass(frozen=True, slots=True)
class FindCoordinatorRequest:
    key: str  # v0-v3 ("" from v4)
    key_type: int = KEY_TYPE_GROUP  # v1+
    coordinator_keys: tuple[str, ...] = ()  # v4+


@dataclass(frozen=True, slots=True)
class Coordinator:
    """One key's answer (v4+)."""

    key: str
    node_id: int
    host: str
    port: int
    error_code: int
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class FindCoordinatorResponse:
    error_code: int  # v0-v3, as the four fields after it
    node_id: int
    host: str
    port: int
    error_message: str | None = None  # v1-v3
    throttle_time_ms: int = 0  # v1+
    coordinators: tuple[Coordinator, ...] = ()  # v4+


def decode_find_coordinator_request(body: memoryview, version: int) -> FindCoordinatorRequest:
    check_version(ApiKey.FIND_COORDINATOR, version)
    r = reader_for(ApiKey.FIND_COORDINATOR, version, body)
    key = r.string() if version < BATCHED_VERSION else ""
    key_type = r.int8() if version >= 1 else KEY_TYPE_GROUP
    keys = r.array(Reader.string, 1) if version >= BATCHED_VERSION else ()
    r.tagged_fields()
    return FindCoordinatorRequest(key, key_type, keys)


def encode_find_coordinator_request(req: FindCoordinatorRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_find_coordinator_request`."""
    check_version(ApiKey.FIND_COORDINATOR, version)
    w = writer_for(ApiKey.FIND_COORDINATOR, version)
    if version < BATCHED_VERSION:
        w.string(req.key)
    if version >= 1:
        w.int8(req.key_type)
    if version >= BATCHED_VERSION:
        w.array(req.coordinator_keys, Writer.string)
    w.tagged_fields()
    return w.chunks()


def _write_coordinator(w: Writer, c: Coordinator) -> None:
    w.string(c.key)
    w.int32(c.node_id)
    w.string(c.host)
    w.int32(c.port)
    w.int16(c.error_code)
    w.nullable_string(c.error_message)
    w.tagged_fields()


def _read_coordinator(r: Reader) -> Coordinator:
    c = Coordinator(r.string(), r.int32(), r.string(), r.int32(), r.int16(), r.nullable_string())
    r.tagged_fields()
    return c


def encode_find_coordinator_response(resp: FindCoordinatorResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.FIND_COORDINATOR, version)
    w = writer_for(ApiKey.FIND_COORDINATOR, version)
    if version >= 1:
        w.int32(resp.throttle_time_ms)
    if version >= BATCHED_VERSION:
        w.array(resp.coordinators, _write_coordinator)
    else:
        w.int16(resp.error_code)
        if version >= 1:
            w.nullable_string(resp.error_message)
        w.int32(resp.node_id)
        w.string(resp.host)
        w.int32(resp.port)
    w.tagged_fields()
    return w.chunks()


def decode_find_coordinator_response(body: memoryview, version: int) -> FindCoordinatorResponse:
    """Client side (tests, tools): the inverse of `encode_find_coordinator_response`."""
    check_version(ApiKey.FIND_COORDINATOR, version)
    r = reader_for(ApiKey.FIND_COORDINATOR, version, body)
    throttle = r.int32() if version >= 1 else 0
    if version >= BATCHED_VERSION:
        coordinators = r.array(_read_coordinator, 14)
        r.tagged_fields()
        return FindCoordinatorResponse(0, -1, "", -1, None, throttle, coordinators)
    error_code = r.int16()
    message = r.nullable_string() if version >= 1 else None
    response = FindCoordinatorResponse(error_code, r.int32(), r.string(), r.int32(), message, throttle)
    r.tagged_fields()
    return response
