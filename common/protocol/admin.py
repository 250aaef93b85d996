"""Topic admin APIs: CreateTopics (19) v2–v4, DeleteTopics (20) v1–v3, CreatePartitions (37)
v0–v1. DescribeConfigs lives in `describe_configs.py`."""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version
from common.protocol.primitives import Chunk, Reader, Writer

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
    # v5+ (KIP-525), filled on success and for validate_only; v2-v4 encode none of them
    num_partitions: int = -1
    replication_factor: int = -1
    configs: tuple[CreatableTopicConfigs, ...] | None = None


@dataclass(frozen=True, slots=True)
class CreateTopicsResponse:
    throttle_time_ms: int
    topics: tuple[CreatableTopicResult, ...]


def decode_create_topics_request(body: memoryview, version: int) -> CreateTopicsRequest:
    check_version(ApiKey.CREATE_TOPICS, version)
    r = Reader(body)

    def assignment(r: Reader) -> CreatableReplicaAssignment:
        return CreatableReplicaAssignment(r.int32(), r.int32_array())

    def config(r: Reader) -> CreatableTopicConfig:
        return CreatableTopicConfig(r.string(), r.nullable_string())

    def topic(r: Reader) -> CreatableTopic:
        return CreatableTopic(r.string(), r.int32(), r.int16(), r.array(assignment, 8),
                              r.array(config, 4))

    topics = r.array(topic, 16)
    return CreateTopicsRequest(topics, r.int32(), r.boolean())


def encode_create_topics_request(req: CreateTopicsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_create_topics_request`."""
    check_version(ApiKey.CREATE_TOPICS, version)
    w = Writer()

    def assignment(w: Writer, a: CreatableReplicaAssignment) -> None:
        w.int32(a.partition_index)
        w.int32_array(a.broker_ids)

    def config(w: Writer, c: CreatableTopicConfig) -> None:
        w.string(c.name)
        w.nullable_string(c.value)

    def topic(w: Writer, t: CreatableTopic) -> None:
        w.string(t.name)
        w.int32(t.num_partitions)
        w.int16(t.replication_factor)
        w.array(t.assignments, assignment)
        w.array(t.configs, config)

    w.array(req.topics, topic)
    w.int32(req.timeout_ms)
    w.boolean(req.validate_only)
    return w.chunks()


def encode_create_topics_response(resp: CreateTopicsResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.CREATE_TOPICS, version)
    w = Writer()
    w.int32(resp.throttle_time_ms)

    def result(w: Writer, t: CreatableTopicResult) -> None:
        w.string(t.name)
        w.int16(t.error_code)
        w.nullable_string(t.error_message)

    w.array(resp.topics, result)
    return w.chunks()


def decode_create_topics_response(body: memoryview, version: int) -> CreateTopicsResponse:
    """Client side (tests, tools): the inverse of `encode_create_topics_response`."""
    check_version(ApiKey.CREATE_TOPICS, version)
    r = Reader(body)
    throttle = r.int32()

    def result(r: Reader) -> CreatableTopicResult:
        return CreatableTopicResult(r.string(), r.int16(), r.nullable_string())

    return CreateTopicsResponse(throttle, r.array(result, 6))


# ---- DeleteTopics ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeleteTopicsRequest:
    topic_names: tuple[str, ...]
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class DeletableTopicResult:
    name: str
    error_code: int


@dataclass(frozen=True, slots=True)
class DeleteTopicsResponse:
    throttle_time_ms: int
    responses: tuple[DeletableTopicResult, ...]


def decode_delete_topics_request(body: memoryview, version: int) -> DeleteTopicsRequest:
    check_version(ApiKey.DELETE_TOPICS, version)
    r = Reader(body)
    names = r.array(Reader.string, 2)
    return DeleteTopicsRequest(names, r.int32())


def encode_delete_topics_request(req: DeleteTopicsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_delete_topics_request`."""
    check_version(ApiKey.DELETE_TOPICS, version)
    w = Writer()
    w.string_array(req.topic_names)
    w.int32(req.timeout_ms)
    return w.chunks()


def encode_delete_topics_response(resp: DeleteTopicsResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.DELETE_TOPICS, version)
    w = Writer()
    w.int32(resp.throttle_time_ms)

    def result(w: Writer, t: DeletableTopicResult) -> None:
        w.string(t.name)
        w.int16(t.error_code)

    w.array(resp.responses, result)
    return w.chunks()


def decode_delete_topics_response(body: memoryview, version: int) -> DeleteTopicsResponse:
    """Client side (tests, tools): the inverse of `encode_delete_topics_response`."""
    check_version(ApiKey.DELETE_TOPICS, version)
    r = Reader(body)
    throttle = r.int32()
    results = r.array(lambda r: DeletableTopicResult(r.string(), r.int16()), 4)
    return DeleteTopicsResponse(throttle, results)


# ---- CreatePartitions ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreatePartitionsAssignment:
    broker_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CreatePartitionsTopic:
    name: str
    count: int  # the new total partition count
    assignments: tuple[CreatePartitionsAssignment, ...] | None = None


@dataclass(frozen=True, slots=True)
class CreatePartitionsRequest:
    topics: tuple[CreatePartitionsTopic, ...]
    timeout_ms: int
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class CreatePartitionsTopicResult:
    name: str
    error_code: int
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class CreatePartitionsResponse:
    throttle_time_ms: int
    results: tuple[CreatePartitionsTopicResult, ...]


def decode_create_partitions_request(body: memoryview, version: int) -> CreatePartitionsRequest:
    check_version(ApiKey.CREATE_PARTITIONS, version)
    r = Reader(body)

    def topic(r: Reader) -> CreatePartitionsTopic:
        name, count = r.string(), r.int32()
        assignments = r.nullable_array(lambda r: CreatePartitionsAssignment(r.int32_array()), 4)
        return CreatePartitionsTopic(name, count, assignments)

    topics = r.array(topic, 10)
    return CreatePartitionsRequest(topics, r.int32(), r.boolean())


def encode_create_partitions_request(req: CreatePartitionsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_create_partitions_request`."""
    check_version(ApiKey.CREATE_PARTITIONS, version)
    w = Writer()

    def topic(w: Writer, t: CreatePartitionsTopic) -> None:
        w.string(t.name)
        w.int32(t.count)
        w.nullable_array(t.assignments, lambda w, a: w.int32_array(a.broker_ids))

    w.array(req.topics, topic)
    w.int32(req.timeout_ms)
    w.boolean(req.validate_only)
    return w.chunks()


def encode_create_partitions_response(resp: CreatePartitionsResponse,
                                      version: int) -> list[Chunk]:
    check_version(ApiKey.CREATE_PARTITIONS, version)
    w = Writer()
    w.int32(resp.throttle_time_ms)

    def result(w: Writer, t: CreatePartitionsTopicResult) -> None:
        w.string(t.name)
        w.int16(t.error_code)
        w.nullable_string(t.error_message)

    w.array(resp.results, result)
    return w.chunks()


def decode_create_partitions_response(body: memoryview,
                                      version: int) -> CreatePartitionsResponse:
    """Client side (tests, tools): the inverse of `encode_create_partitions_response`."""
    check_version(ApiKey.CREATE_PARTITIONS, version)
    r = Reader(body)
    throttle = r.int32()

    def result(r: Reader) -> CreatePartitionsTopicResult:
        return CreatePartitionsTopicResult(r.string(), r.int16(), r.nullable_string())

    return CreatePartitionsResponse(throttle, r.array(result, 6))
