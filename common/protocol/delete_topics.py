"""DeleteTopics (key 20), v1–v6: delete topics by name, or (v6+, KIP-516) by topic id.

v4 is the first flexible version; v5 adds an error message per topic and may answer
THROTTLING_QUOTA_EXCEEDED (KIP-599); v6 replaces the list of names with (name, topic id) pairs,
one of the two set, and answers both for every topic.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Final

from common.protocol.admin import ZERO_UUID, min_size
from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk, Reader, Writer

DELETE_ERROR_MESSAGE_VERSION: Final = 5
DELETE_BY_ID_VERSION: Final = 6


@dataclass(frozen=True, slots=True)
class DeleteTopicState:
    """v6+: a topic to delete, by name (topic_id zero) or by id (name None)."""

    name: str | None
    topic_id: uuid.UUID = ZERO_UUID


@dataclass(frozen=True, slots=True)
class DeleteTopicsRequest:
    topic_names: tuple[str, ...]  # v0-v5
    timeout_ms: int
    topics: tuple[DeleteTopicState, ...] = ()  # v6+


@dataclass(frozen=True, slots=True)
class DeletableTopicResult:
    name: str | None  # None (v6+) for an id the broker cannot name
    error_code: int
    error_message: str | None = None  # v5+
    topic_id: uuid.UUID = ZERO_UUID  # v6+


@dataclass(frozen=True, slots=True)
class DeleteTopicsResponse:
    throttle_time_ms: int
    responses: tuple[DeletableTopicResult, ...]


def decode_delete_topics_request(body: memoryview, version: int) -> DeleteTopicsRequest:
    check_version(ApiKey.DELETE_TOPICS, version)
    r = reader_for(ApiKey.DELETE_TOPICS, version, body)
    if version < DELETE_BY_ID_VERSION:
        names = r.array(Reader.string, min_size(r, 2, 1))
        request = DeleteTopicsRequest(names, r.int32())
    else:
        def topic(r: Reader) -> DeleteTopicState:
            state = DeleteTopicState(r.nullable_string(), r.uuid())
            r.tagged_fields()
            return state

        topics = r.array(topic, 18)
        request = DeleteTopicsRequest((), r.int32(), topics)
    r.tagged_fields()
    return request


def encode_delete_topics_request(req: DeleteTopicsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_delete_topics_request`."""
    check_version(ApiKey.DELETE_TOPICS, version)
    w = writer_for(ApiKey.DELETE_TOPICS, version)
    if version < DELETE_BY_ID_VERSION:
        w.string_array(req.topic_names)
    else:
        def topic(w: Writer, t: DeleteTopicState) -> None:
            w.nullable_string(t.name)
            w.uuid(t.topic_id)
            w.tagged_fields()

        w.array(req.topics, topic)
    w.int32(req.timeout_ms)
    w.tagged_fields()
    return w.chunks()


def encode_delete_topics_response(resp: DeleteTopicsResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.DELETE_TOPICS, version)
    w = writer_for(ApiKey.DELETE_TOPICS, version)
    w.int32(resp.throttle_time_ms)

    def result(w: Writer, t: DeletableTopicResult) -> None:
        if version >= DELETE_BY_ID_VERSION:
            w.nullable_string(t.name)
            w.uuid(t.topic_id)
        else:
            w.string(t.name or "")  # below v6 every topic was asked for by name
        w.int16(t.error_code)
        if version >= DELETE_ERROR_MESSAGE_VERSION:
            w.nullable_string(t.error_message)
        w.tagged_fields()

    w.array(resp.responses, result)
    w.tagged_fields()
    return w.chunks()


def decode_delete_topics_response(body: memoryview, version: int) -> DeleteTopicsResponse:
    """Client side (tests, tools): the inverse of `encode_delete_topics_response`."""
    check_version(ApiKey.DELETE_TOPICS, version)
    r = reader_for(ApiKey.DELETE_TOPICS, version, body)
    throttle = r.int32()

    def result(r: Reader) -> DeletableTopicResult:
        if version >= DELETE_BY_ID_VERSION:
            name, topic_id = r.nullable_string(), r.uuid()
        else:
            name, topic_id = r.string(), ZERO_UUID
        code = r.int16()
        message = r.nullable_string() if version >= DELETE_ERROR_MESSAGE_VERSION else None
        r.tagged_fields()
        return DeletableTopicResult(name, code, message, topic_id)

    results = r.array(result, min_size(r, 4, 3))
    r.tagged_fields()
    return DeleteTopicsResponse(throttle, results)
