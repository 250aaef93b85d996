"""DescribeConfigs (key 32), v1–v3: topic and broker configuration, with sources/synonyms."""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version
from common.protocol.primitives import Chunk, Reader, Writer

RESOURCE_TYPE_TOPIC = 2
RESOURCE_TYPE_BROKER = 4


@dataclass(frozen=True, slots=True)
class DescribeConfigsResource:
    resource_type: int
    resource_name: str
    configuration_keys: tuple[str, ...] | None  # None: every key


@dataclass(frozen=True, slots=True)
class DescribeConfigsRequest:
    resources: tuple[DescribeConfigsResource, ...]
    include_synonyms: bool = False
    include_documentation: bool = False  # v3+


@dataclass(frozen=True, slots=True)
class DescribeConfigsSynonym:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True, slots=True)
class DescribeConfigsResourceResult:
    name: str
    value: str | None
    read_only: bool
    config_source: int
    is_sensitive: bool
    synonyms: tuple[DescribeConfigsSynonym, ...] = ()
    config_type: int = 0  # v3+
    documentation: str | None = None  # v3+


@dataclass(frozen=True, slots=True)
class DescribeConfigsResult:
    error_code: int
    error_message: str | None
    resource_type: int
    resource_name: str
    configs: tuple[DescribeConfigsResourceResult, ...]


@dataclass(frozen=True, slots=True)
class DescribeConfigsResponse:
    throttle_time_ms: int
    results: tuple[DescribeConfigsResult, ...]


def decode_describe_configs_request(body: memoryview, version: int) -> DescribeConfigsRequest:
    check_version(ApiKey.DESCRIBE_CONFIGS, version)
    r = Reader(body)

    def resource(r: Reader) -> DescribeConfigsResource:
        return DescribeConfigsResource(r.int8(), r.string(), r.nullable_array(Reader.string, 2))

    resources = r.array(resource, 7)
    synonyms = r.boolean()
    documentation = r.boolean() if version >= 3 else False
    return DescribeConfigsRequest(resources, synonyms, documentation)


def encode_describe_configs_request(req: DescribeConfigsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_describe_configs_request`."""
    check_version(ApiKey.DESCRIBE_CONFIGS, version)
    w = Writer()

    def resource(w: Writer, res: DescribeConfigsResource) -> None:
        w.int8(res.resource_type)
        w.string(res.resource_name)
        w.nullable_array(res.configuration_keys, Writer.string)

    w.array(req.resources, resource)
    w.boolean(req.include_synonyms)
    if version >= 3:
        w.boolean(req.include_documentation)
    return w.chunks()


def encode_describe_configs_response(resp: DescribeConfigsResponse,
                                     version: int) -> list[Chunk]:
    check_version(ApiKey.DESCRIBE_CONFIGS, version)
    w = Writer()
    w.int32(resp.throttle_time_ms)

    def synonym(w: Writer, s: DescribeConfigsSynonym) -> None:
        w.string(s.name)
        w.nullable_string(s.value)
        w.int8(s.source)

    def config(w: Writer, c: DescribeConfigsResourceResult) -> None:
        w.string(c.name)
        w.nullable_string(c.value)
        w.boolean(c.read_only)
        w.int8(c.config_source)
        w.boolean(c.is_sensitive)
        w.array(c.synonyms, synonym)
        if version >= 3:
            w.int8(c.config_type)
            w.nullable_string(c.documentation)

    def result(w: Writer, res: DescribeConfigsResult) -> None:
        w.int16(res.error_code)
        w.nullable_string(res.error_message)
        w.int8(res.resource_type)
        w.string(res.resource_name)
        w.array(res.configs, config)

    w.array(resp.results, result)
    return w.chunks()


def decode_describe_configs_response(body: memoryview,
                                     version: int) -> DescribeConfigsResponse:
    """Client side (tests, tools): the inverse of `encode_describe_configs_response`."""
    check_version(ApiKey.DESCRIBE_CONFIGS, version)
    r = Reader(body)
    throttle = r.int32()

    def synonym(r: Reader) -> DescribeConfigsSynonym:
        return DescribeConfigsSynonym(r.string(), r.nullable_string(), r.int8())

    def config(r: Reader) -> DescribeConfigsResourceResult:
        name, value, read_only, source, sensitive = (
            r.string(), r.nullable_string(), r.boolean(), r.int8(), r.boolean())
        synonyms = r.array(synonym, 5)
        config_type, doc = (r.int8(), r.nullable_string()) if version >= 3 else (0, None)
        return DescribeConfigsResourceResult(name, value, read_only, source, sensitive,
                                             synonyms, config_type, doc)

    def result(r: Reader) -> DescribeConfigsResult:
        return DescribeConfigsResult(r.int16(), r.nullable_string(), r.int8(), r.string(),
                                     r.array(config, 11))

    return DescribeConfigsResponse(throttle, r.array(result, 11))
