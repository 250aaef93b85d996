"""DescribeConfigs (key 32), v0–v4: kio's generated messages, and v0's bytes by hand.

Kafka 3.9's layouts: v0 answers `is_default` where v1+ answer `config_source` and synonyms
(and take `include_synonyms`); v3 adds `include_documentation`, `config_type` and
`documentation`; v4 is the first flexible version (compact lengths, tagged fields).

kio's classes (Kafka 4's schemas) start at v1 (KIP-896 dropped v0, which Kafka 3.9 still
answers), and v0's bytes are not v1's: so v0 alone keeps a codec here, which reads a v0
request into kio's v1 request (include_synonyms false) and writes kio's v1 response as v0
(is_default is "config_source is DEFAULT_CONFIG"; synonyms dropped). A handler therefore
always sees and answers the classes of `schema_version(version)`. The four functions below
have the shape of the hand codecs (`api_table` pairs the broker's two; clients and tests use
the other two with `KafkaClient.call`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Final

from common.protocol import messages
from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk, Reader, Writer

RESOURCE_TYPE_TOPIC: Final = 2
RESOURCE_TYPE_BROKER: Final = 4
DEFAULT_CONFIG_SOURCE: Final = 5  # ConfigSource.DEFAULT_CONFIG: v0's is_default is "source is this"
UNKNOWN_CONFIG_SOURCE: Final = 0  # what v0's is_default false reads back as (v0 does not say)
FIRST_GENERATED_VERSION: Final = 1
_KEY: Final = ApiKey.DESCRIBE_CONFIGS

Resource = tuple[int, str, tuple[str, ...] | None]  # (resource type, name, keys; None: every key)


def schema_version(version: int) -> int:
    """The version whose kio classes carry `version`'s request and response."""
    return max(version, FIRST_GENERATED_VERSION)


def request(version: int, *resources: Resource, include_synonyms: bool = False,
            include_documentation: bool = False) -> Any:
    """Client side: kio's DescribeConfigsRequest for `version` (v0: v1's, synonyms off)."""
    m = messages.request_module(_KEY, schema_version(version))
    return messages.build(m.DescribeConfigsRequest, resources=tuple(
        m.DescribeConfigsResource(resource_type=kind, resource_name=name, configuration_keys=keys)
        for kind, name, keys in resources), include_synonyms=include_synonyms and version >= 1,
        include_documentation=include_documentation)


def decode_describe_configs_request(body: memoryview, version: int) -> Any:
    if version >= FIRST_GENERATED_VERSION:
        return messages.decode_request(_KEY, version, body)
    check_version(_KEY, version)
    r = reader_for(_KEY, version, body)

    def resource(r: Reader) -> Resource:
        return r.int8(), r.string(), r.nullable_array(Reader.string, 1)

    return request(version, *r.array(resource, 3))


def encode_describe_configs_request(req: Any, version: int) -> list[Chunk]:
    """Client side: the inverse of `decode_describe_configs_request`."""
    if version >= FIRST_GENERATED_VERSION:
        return messages.encode_request(req, version)
    check_version(_KEY, version)
    w = writer_for(_KEY, version)

    def resource(w: Writer, res: Any) -> None:
        w.int8(res.resource_type)
        w.string(res.resource_name)
        w.nullable_array(res.configuration_keys, Writer.string)

    w.array(req.resources, resource)
    return w.chunks()


def encode_describe_configs_response(resp: Any, version: int) -> list[Chunk]:
    if version >= FIRST_GENERATED_VERSION:
        return DESCRIBE_CONFIGS_KIO.encode(resp, version)
    check_version(_KEY, version)
    w = writer_for(_KEY, version)
    w.int32(messages.milliseconds(resp.throttle_time))

    def config(w: Writer, c: Any) -> None:
        w.string(c.name)
        w.nullable_string(c.value)
        w.boolean(c.read_only)
        w.boolean(c.config_source == DEFAULT_CONFIG_SOURCE)
        w.boolean(c.is_sensitive)

    def result(w: Writer, res: Any) -> None:
        w.int16(res.error_code)
        w.nullable_string(res.error_message)
        w.int8(res.resource_type)
        w.string(res.resource_name)
        w.array(res.configs, config)

    w.array(resp.results, result)
    return w.chunks()


def decode_describe_configs_response(body: memoryview, version: int) -> Any:
    """Client side: the inverse of `encode_describe_configs_response` (v0's is_default reads
    back as DEFAULT_CONFIG or UNKNOWN)."""
    if version >= FIRST_GENERATED_VERSION:
        return messages.decode_response(_KEY, version, body)
    check_version(_KEY, version)
    m = messages.response_module(_KEY, schema_version(version))
    r = reader_for(_KEY, version, body)
    throttle = r.int32()

    def config(r: Reader) -> Any:
        name, value, read_only = r.string(), r.nullable_string(), r.boolean()
        source = DEFAULT_CONFIG_SOURCE if r.boolean() else UNKNOWN_CONFIG_SOURCE
        return m.DescribeConfigsResourceResult(name=name, value=value, read_only=read_only, config_source=source,
                                               is_sensitive=r.boolean(), synonyms=())

    def result(r: Reader) -> Any:
        return m.DescribeConfigsResult(error_code=messages.error_code(r.int16()), error_message=r.nullable_string(),
                                       resource_type=r.int8(), resource_name=r.string(), configs=r.array(config, 5))

    results = r.array(result, 6)
    return m.DescribeConfigsResponse(throttle_time=timedelta(milliseconds=throttle), results=results)


DESCRIBE_CONFIGS_KIO: Final = messages.kio_codec(_KEY)
