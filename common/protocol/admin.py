"""Topic admin APIs: CreateTopics (19) v2–v7. DeleteTopics and CreatePartitions are served on
kio's generated messages (`messages.py`), DescribeConfigs lives in `describe_configs.py`.

Flexible from CreateTopics v5 and CreatePartitions v2. CreateTopics v5 answers the created
topic's partitions, replication factor and configs (KIP-525), v6 may answer
THROTTLING_QUOTA_EXCEEDED (KIP-599) and v7 the topic id (KIP-516). CreatePartitions v3 may answer
THROTTLING_QUOTA_EXCEEDED: no field changes.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Final

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk, Reader, Writer
from common.protocol.tagged import (
    decode_tagged,
    encode_tagged,
    read_tagged_fields,
    write_tagged_fields,
)

ZERO_UUID: Final = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: "no topic id"
CREATE_RESULT_CONFIGS_VERSION: Final = 5  # KIP-525: sizes and configs of the created topic
CREATE_RESULT_TOPIC_ID_VERSION: Final = 7
_TOPIC_CONFIG_ERROR_CODE_TAG: Final = 0

# ---- CreateTopics ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreatableReplicaAssignment:
    partition_index: int
    broker_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CreatableTopicConfig:
    name: str
    value: str | None


@dataclass(frozen=True, slots=True)
class CreatableTopic:
    name: str
    num_partitions: int  # -1: broker default or manual assignments
    replication_factor: int  # -1: broker default or manual assignments
    assignments: tuple[CreatableReplicaAssignment, ...] = ()
    configs: tuple[CreatableTopicConfig, ...] = ()


@dataclass(frozen=True, slots=True)
class CreateTopicsRequest:
    topics: tuple[CreatableTopic, ...]
    timeout_ms: int
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class CreatableTopicConfigs:
    """v5+: one config of the created (or validated) topic, as DescribeConfigs describes it."""

    name: str
    value: str | None
    read_only: bool
    config_source: int
    is_sensitive: bool


@dataclass(frozen=True, slots=True)
class CreatableTopicResult:
    name: str
    error_code: int
    error_message: str | None = None
    # v5+ (KIP-525), filled on success and for validate_only; v2-v4 encode none of them.
    # An error leaves Kafka's defaults: -1, -1 and an empty (not null) configs array.
    num_partitions: int = -1
    replication_factor: int = -1
    configs: tuple[CreatableTopicConfigs, ...] | None = ()
    topic_config_error_code: int = 0  # v5+, tagged: why configs are not given
    topic_id: uuid.UUID = ZERO_UUID  # v7+


@dataclass(frozen=True, slots=True)
class CreateTopicsResponse:
    throttle_time_ms: int
    topics: tuple[CreatableTopicResult, ...]


def min_size(r: Reader, classic: int, flexible: int) -> int:
    """The smallest encoding of an array item, which depends on the form."""
    return flexible if r.flexible else classic


def decode_create_topics_request(body: memoryview, version: int) -> CreateTopicsRequest:
    check_version(ApiKey.CREATE_TOPICS, version)
    r = reader_for(ApiKey.CREATE_TOPICS, version, body)

    def assignment(r: Reader) -> CreatableReplicaAssignment:
        a = CreatableReplicaAssignment(r.int32(), r.int32_array())
        r.tagged_fields()
        return a

    def config(r: Reader) -> CreatableTopicConfig:
        c = CreatableTopicConfig(r.string(), r.nullable_string())
        r.tagged_fields()
        return c

    def topic(r: Reader) -> CreatableTopic:
        t = CreatableTopic(r.string(), r.int32(), r.int16(), r.array(assignment, min_size(r, 8, 6)),
                           r.array(config, min_size(r, 4, 3)))
        r.tagged_fields()
        return t

    topics = r.array(topic, min_size(r, 16, 10))
    request = CreateTopicsRequest(topics, r.int32(), r.boolean())
    r.tagged_fields()
    return request


def encode_create_topics_request(req: CreateTopicsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_create_topics_request`."""
    check_version(ApiKey.CREATE_TOPICS, version)
    w = writer_for(ApiKey.CREATE_TOPICS, version)

    def assignment(w: Writer, a: CreatableReplicaAssignment) -> None:
        w.int32(a.partition_index)
        w.int32_array(a.broker_ids)
        w.tagged_fields()

    def config(w: Writer, c: CreatableTopicConfig) -> None:
        w.string(c.name)
        w.nullable_string(c.value)
        w.tagged_fields()

    def topic(w: Writer, t: CreatableTopic) -> None:
        w.string(t.name)
        w.int32(t.num_partitions)
        w.int16(t.replication_factor)
        w.array(t.assignments, assignment)
        w.array(t.configs, config)
        w.tagged_fields()

    w.array(req.topics, topic)
    w.int32(req.timeout_ms)
    w.boolean(req.validate_only)
    w.tagged_fields()
    return w.chunks()


def encode_create_topics_response(resp: CreateTopicsResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.CREATE_TOPICS, version)
    w = writer_for(ApiKey.CREATE_TOPICS, version)
    w.int32(resp.throttle_time_ms)

    def config(w: Writer, c: CreatableTopicConfigs) -> None:
        w.string(c.name)
        w.nullable_string(c.value)
        w.boolean(c.read_only)
        w.int8(c.config_source)
        w.boolean(c.is_sensitive)
        w.tagged_fields()

    def result(w: Writer, t: CreatableTopicResult) -> None:
        w.string(t.name)
        if version >= CREATE_RESULT_TOPIC_ID_VERSION:
            w.uuid(t.topic_id)
        w.int16(t.error_code)
        w.nullable_string(t.error_message)
        if version >= CREATE_RESULT_CONFIGS_VERSION:
            w.int32(t.num_partitions)
            w.int16(t.replication_factor)
            w.nullable_array(t.configs, config)
            code = t.topic_config_error_code
            write_tagged_fields(w, {_TOPIC_CONFIG_ERROR_CODE_TAG: encode_tagged(lambda t: t.int16(code))
                                    if code else None})

    w.array(resp.topics, result)
    w.tagged_fields()
    return w.chunks()


def decode_create_topics_response(body: memoryview, version: int) -> CreateTopicsResponse:
    """Client side (tests, tools): the inverse of `encode_create_topics_response`."""
    check_version(ApiKey.CREATE_TOPICS, version)
    r = reader_for(ApiKey.CREATE_TOPICS, version, body)
    throttle = r.int32()

    def config(r: Reader) -> CreatableTopicConfigs:
        c = CreatableTopicConfigs(r.string(), r.nullable_string(), r.boolean(), r.int8(), r.boolean())
        r.tagged_fields()
        return c

    def result(r: Reader) -> CreatableTopicResult:
        name = r.string()
        topic_id = r.uuid() if version >= CREATE_RESULT_TOPIC_ID_VERSION else ZERO_UUID
        error_code, message = r.int16(), r.nullable_string()
        if version < CREATE_RESULT_CONFIGS_VERSION:
            return CreatableTopicResult(name, error_code, message)
        partitions, factor, configs = r.int32(), r.int16(), r.nullable_array(config, 6)
        config_error = decode_tagged(read_tagged_fields(r, {_TOPIC_CONFIG_ERROR_CODE_TAG}),
                                     _TOPIC_CONFIG_ERROR_CODE_TAG, Reader.int16, 0)
        return CreatableTopicResult(name, error_code, message, partitions, factor, configs, config_error,
                                    topic_id)

    topics = r.array(result, min_size(r, 6, 4))
    r.tagged_fields()
    return CreateTopicsResponse(throttle, topics)
