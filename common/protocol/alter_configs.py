"""AlterConfigs (key 33, v0–v1) and IncrementalAlterConfigs (key 44, v0): config writes.

Both carry, per resource (type, name), config entries and a validate_only flag, and answer one
(error code, message) per resource. AlterConfigs names the whole new set of a resource's
configs; IncrementalAlterConfigs names one operation per key (KIP-339: SET, DELETE, APPEND,
SUBTRACT). v1 of AlterConfigs only changes the throttling semantics (KIP-219).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version
from common.protocol.primitives import Chunk, Reader, Writer

@dataclass(frozen=True, slots=True)
class AlterableConfig:
    name: str
    value: str | None
    config_operation: int = 0  # IncrementalAlterConfigs only: SET 0, DELETE 1, APPEND 2, SUBTRACT 3


@dataclass(frozen=True, slots=True)
class AlterConfigsResource:
    resource_type: int
    resource_name: str
    configs: tuple[AlterableConfig, ...]


@dataclass(frozen=True, slots=True)
class AlterConfigsRequest:
    resources: tuple[AlterConfigsResource, ...]
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class AlterConfigsResourceResponse:
    error_code: int
    error_message: str | None
    resource_type: int
    resource_name: str


@dataclass(frozen=True, slots=True)
class AlterConfigsResponse:
    throttle_time_ms: int
    responses: tuple[AlterConfigsResourceResponse, ...]


def _decode(body: memoryview, incremental: bool) -> AlterConfigsRequest:
    r = Reader(body)

    def entry(r: Reader) -> AlterableConfig:
        name = r.string()
        if incremental:
            operation = r.int8()
            return AlterableConfig(name, r.nullable_string(), operation)
        return AlterableConfig(name, r.nullable_string())

    def resource(r: Reader) -> AlterConfigsResource:
        return AlterConfigsResource(r.int8(), r.string(), r.array(entry, 5 if incremental else 4))

    # array sizes are bounded by the frame: each item's smallest encoding must fit in what is left
    return AlterConfigsRequest(r.array(resource, 7), r.boolean())


def _encode(req: AlterConfigsRequest, incremental: bool) -> list[Chunk]:
    w = Writer()

    def entry(w: Writer, c: AlterableConfig) -> None:
        w.string(c.name)
        if incremental:
            w.int8(c.config_operation)
        w.nullable_string(c.value)

    def resource(w: Writer, res: AlterConfigsResource) -> None:
        w.int8(res.resource_type)
        w.string(res.resource_name)
        w.array(res.configs, entry)

    w.array(req.resources, resource)
    w.boolean(req.validate_only)
    return w.chunks()


def decode_alter_configs_request(body: memoryview, version: int) -> AlterConfigsRequest:
    check_version(ApiKey.ALTER_CONFIGS, version)
    return _decode(body, incremental=False)


def decode_incremental_alter_configs_request(body: memoryview, version: int) -> AlterConfigsRequest:
    check_version(ApiKey.INCREMENTAL_ALTER_CONFIGS, version)
    return _decode(body, incremental=True)


def encode_alter_configs_request(req: AlterConfigsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools)."""
    check_version(ApiKey.ALTER_CONFIGS, version)
    return _encode(req, incremental=False)


def encode_incremental_alter_configs_request(req: AlterConfigsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools)."""
    check_version(ApiKey.INCREMENTAL_ALTER_CONFIGS, version)
    return _encode(req, incremental=True)


def encode_alter_configs_response(resp: AlterConfigsResponse, version: int) -> list[Chunk]:
    """Both APIs answer the same shape at the versions answered here."""
    w = Writer()
    w.int32(resp.throttle_time_ms)

    def response(w: Writer, res: AlterConfigsResourceResponse) -> None:
        w.int16(res.error_code)
        w.nullable_string(res.error_message)
        w.int8(res.resource_type)
        w.string(res.resource_name)

    w.array(resp.responses, response)
    return w.chunks()


def decode_alter_configs_response(body: memoryview, version: int) -> AlterConfigsResponse:
    """Client side (tests, tools): the inverse of `encode_alter_configs_response`."""
    r = Reader(body)
    throttle = r.int32()

    def response(r: Reader) -> AlterConfigsResourceResponse:
        return AlterConfigsResourceResponse(r.int16(), r.nullable_string(), r.int8(), r.string())

    return AlterConfigsResponse(throttle, r.array(response, 8))
