"""AlterConfigs (key 33, v0–v2) and IncrementalAlterConfigs (key 44, v0–v1): config writes.

Both carry, per resource (type, name), config entries and a validate_only flag, and answer one
(error code, message) per resource. AlterConfigs names the whole new set of a resource's
configs; IncrementalAlterConfigs names one operation per key (KIP-339: SET, DELETE, APPEND,
SUBTRACT). v1 of AlterConfigs only changes the throttling semantics (KIP-219); AlterConfigs v2
and IncrementalAlterConfigs v1 are their first flexible versions (KIP-482), same fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
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


def _decode(r: Reader, incremental: bool) -> AlterConfigsRequest:
    def entry(r: Reader) -> AlterableConfig:
        name = r.string()
        operation = r.int8() if incremental else 0
        config = AlterableConfig(name, r.nullable_string(), operation)
        r.tagged_fields()
        return config

    def resource(r: Reader) -> AlterConfigsResource:
        res = AlterConfigsResource(r.int8(), r.string(), r.array(entry, 2))
        r.tagged_fields()
        return res

    # array sizes are bounded by the frame: each item's smallest (compact) encoding must fit in what is left
    req = AlterConfigsRequest(r.array(resource, 3), r.boolean())
    r.tagged_fields()
    return req


def _encode(w: Writer, req: AlterConfigsRequest, incremental: bool) -> list[Chunk]:
    def entry(w: Writer, c: AlterableConfig) -> None:
        w.string(c.name)
        if incremental:
            w.int8(c.config_operation)
        w.nullable_string(c.value)
        w.tagged_fields()

    def resource(w: Writer, res: AlterConfigsResource) -> None:
        w.int8(res.resource_type)
        w.string(res.resource_name)
        w.array(res.configs, entry)
        w.tagged_fields()

    w.array(req.resources, resource)
    w.boolean(req.validate_only)
    w.tagged_fields()
    return w.chunks()


def decode_alter_configs_request(body: memoryview, version: int) -> AlterConfigsRequest:
    check_version(ApiKey.ALTER_CONFIGS, version)
    return _decode(reader_for(ApiKey.ALTER_CONFIGS, version, body), incremental=False)


def decode_incremental_alter_configs_request(body: memoryview, version: int) -> AlterConfigsRequest:
    check_version(ApiKey.INCREMENTAL_ALTER_CONFIGS, version)
    return _decode(reader_for(ApiKey.INCREMENTAL_ALTER_CONFIGS, version, body), incremental=True)


def encode_alter_configs_request(req: AlterConfigsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools)."""
    check_version(ApiKey.ALTER_CONFIGS, version)
    return _encode(writer_for(ApiKey.ALTER_CONFIGS, version), req, incremental=False)


def encode_incremental_alter_configs_request(req: AlterConfigsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools)."""
    check_version(ApiKey.INCREMENTAL_ALTER_CONFIGS, version)
    return _encode(writer_for(ApiKey.INCREMENTAL_ALTER_CONFIGS, version), req, incremental=True)


def _encode_response(w: Writer, resp: AlterConfigsResponse) -> list[Chunk]:
    w.int32(resp.throttle_time_ms)

    def response(w: Writer, res: AlterConfigsResourceResponse) -> None:
        w.int16(res.error_code)
        w.nullable_string(res.error_message)
        w.int8(res.resource_type)
        w.string(res.resource_name)
        w.tagged_fields()

    w.array(resp.responses, response)
    w.tagged_fields()
    return w.chunks()


def _decode_response(r: Reader) -> AlterConfigsResponse:
    throttle = r.int32()

    def response(r: Reader) -> AlterConfigsResourceResponse:
        res = AlterConfigsResourceResponse(r.int16(), r.nullable_string(), r.int8(), r.string())
        r.tagged_fields()
        return res

    resp = AlterConfigsResponse(throttle, r.array(response, 5))
    r.tagged_fields()
    return resp


# Both APIs answer the same fields; they differ in which version is the first flexible one.
def encode_alter_configs_response(resp: AlterConfigsResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.ALTER_CONFIGS, version)
    return _encode_response(writer_for(ApiKey.ALTER_CONFIGS, version), resp)


def encode_incremental_alter_configs_response(resp: AlterConfigsResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.INCREMENTAL_ALTER_CONFIGS, version)
    return _encode_response(writer_for(ApiKey.INCREMENTAL_ALTER_CONFIGS, version), resp)


def decode_alter_configs_response(body: memoryview, version: int) -> AlterConfigsResponse:
    """Client side (tests, tools): the inverse of `encode_alter_configs_response`."""
    check_version(ApiKey.ALTER_CONFIGS, version)
    return _decode_response(reader_for(ApiKey.ALTER_CONFIGS, version, body))


def decode_incremental_alter_configs_response(body: memoryview, version: int) -> AlterConfigsResponse:
    """Client side (tests, tools): the inverse of `encode_incremental_alter_configs_response`."""
    check_version(ApiKey.INCREMENTAL_ALTER_CONFIGS, version)
    return _decode_response(reader_for(ApiKey.INCREMENTAL_ALTER_CONFIGS, version, body))
