"""DescribeConfigs (key 32), v0–v4: topic and broker configuration, with sources/synonyms.

Kafka 3.9's layouts: v0 answers `is_default` where v1+ answer `config_source` and synonyms
(and take `include_synonyms`); v3 adds `include_documentation`, `config_type` and
`documentation`; v4 is the first flexible version (compact lengths, tagged fields).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk, Reader, Writer

RESOURCE_TYPE_TOPIC = 2
RESOURCE_TYPE_BROKER = 4
DEFAULT_CONFIG_SOURCE = 5  # ConfigSource.DEFAULT_CONFIG: v0's is_default is "source is this"


@dataclass(frozen=True, slots=True)
class DescribeConfigsResource:
    resource_type: int
    resource_name: str
    configuration_keys: tuple[str, ...] | None  # None: every key


@dataclass(frozen=True, slots=True)
class DescribeConfigsRequest:
    resources: tuple[DescribeConfigsResource, ...]
    include_synonyms: bool = False  # v1+
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
    config_source: int  # v1+; v0 carries is_default (config_source == DEFAULT_CONFIG) instead
    is_sensitive: bool
    synonyms: tuple[DescribeConfigsSynonym, ...] = ()  # v1+
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


_KEY = ApiKey.DESCRIBE_CONFIGS


def decode_describe_configs_request(body: memoryview, version: int) -> DescribeConfigsRequest:
    check_version(_KEY, version)
    r = reader_for(_KEY, version, body)

    def resource(r: Reader) -> DescribeConfigsResource:
        res = DescribeConfigsResource(r.int8(), r.string(), r.nullable_array(Reader.string, 1))
        r.tagged_fields()
        return res

    resources = r.array(resource, 3)
    synonyms = r.boolean() if version >= 1 else False
    documentation = r.boolean() if version >= 3 else False
    r.tagged_fields()
    return DescribeConfigsRequest(resources, synonyms, documentation)


def encode_describe_configs_request(req: DescribeConfigsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_describe_configs_request`."""
    check_version(_KEY, version)
    w = writer_for(_KEY, version)

    def resource(w: Writer, res: DescribeConfigsResource) -> None:
        w.int8(res.resource_type)
        w.string(res.resource_name)
        w.nullable_array(res.configuration_keys, Writer.string)
        w.tagged_fields()

    w.array(req.resources, resource)
    if version >= 1:
        w.boolean(req.include_synonyms)
    if version >= 3:
        w.boolean(req.include_documentation)
    w.tagged_fields()
    return w.chunks()


def encode_describe_configs_response(resp: DescribeConfigsResponse, version: int) -> list[Chunk]:
    check_version(_KEY, version)
    w = writer_for(_KEY, version)
    w.int32(resp.throttle_time_ms)

    def synonym(w: Writer, s: DescribeConfigsSynonym) -> None:
        w.string(s.name)
        w.nullable_string(s.value)
        w.int8(s.source)
        w.tagged_fields()

    def config(w: Writer, c: DescribeConfigsResourceResult) -> None:
        w.string(c.name)
        w.nullable_string(c.value)
        w.boolean(c.read_only)
        if version == 0:
            w.boolean(c.config_source == DEFAULT_CONFIG_SOURCE)
        else:
            w.int8(c.config_source)
        w.boolean(c.is_sensitive)
        if version >= 1:
            w.array(c.synonyms, synonym)
        if version >= 3:
            w.int8(c.config_type)
            w.nullable_string(c.documentation)
        w.tagged_fields()

    def result(w: Writer, res: DescribeConfigsResult) -> None:
        w.int16(res.error_code)
        w.nullable_string(res.error_message)
        w.int8(res.resource_type)
        w.string(res.resource_name)
        w.array(res.configs, config)
        w.tagged_fields()

    w.array(resp.results, result)
    w.tagged_fields()
    return w.chunks()


def decode_describe_configs_response(body: memoryview, version: int) -> DescribeConfigsResponse:
    """Client side (tests, tools): the inverse of `encode_describe_configs_response` (v0's
    is_default reads back as DEFAULT_CONFIG or UNKNOWN)."""
    check_version(_KEY, version)
    r = reader_for(_KEY, version, body)
    throttle = r.int32()

    def synonym(r: Reader) -> DescribeConfigsSynonym:
        s = DescribeConfigsSynonym(r.string(), r.nullable_string(), r.int8())
        r.tagged_fields()
        return s

    def config(r: Reader) -> DescribeConfigsResourceResult:
        name, value, read_only = r.string(), r.nullable_string(), r.boolean()
        if version == 0:
            source = DEFAULT_CONFIG_SOURCE if r.boolean() else 0
        else:
            source = r.int8()
        sensitive = r.boolean()
        synonyms = r.array(synonym, 3) if version >= 1 else ()
        config_type, doc = (r.int8(), r.nullable_string()) if version >= 3 else (0, None)
        r.tagged_fields()
        return DescribeConfigsResourceResult(name, value, read_only, source, sensitive,
                                             synonyms, config_type, doc)

    def result(r: Reader) -> DescribeConfigsResult:
        res = DescribeConfigsResult(r.int16(), r.nullable_string(), r.int8(), r.string(), r.array(config, 5))
        r.tagged_fields()
        return res

    results = r.array(result, 6)
    r.tagged_fields()
    return DescribeConfigsResponse(throttle, results)
