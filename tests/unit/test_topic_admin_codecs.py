"""Table tests for the topic admin codecs at Kafka 3.9's versions: CreateTopics v2–v7 (v5
flexible with KIP-525's sizes, configs and tagged TopicConfigErrorCode; v7 the topic id),
DeleteTopics v1–v6 (v4 flexible, v5 error messages, v6 names or ids; a zero topic id reads as
None) and CreatePartitions v0–v3 (v2 flexible), all on kio's generated messages. Same checks as
test_protocol_codecs: exact bytes both ways, trailing bytes tolerated, every truncation a
ProtocolError, request frames one byte at a time, dispatch."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from broker.request_handler import decode_request
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.frame import RequestHeader
from common.protocol.primitives import ProtocolError
from tests.unit.test_protocol_codecs import (
    TAG,
    TOPIC_UUID,
    ZERO16,
    Row,
    arr,
    b,
    carr,
    check_codec_row,
    check_dispatch,
    check_request_frame,
    cs,
    i8,
    i16,
    i32,
    kio_req,
    kio_resp,
    row_id,
    s,
)

TopicSpec = tuple[Any, ...]  # (name, num_partitions, replication_factor[, assignments[, configs]])


def create_request(version: int, *topics: TopicSpec, timeout_ms: int = 5000, validate_only: bool = False) -> Any:
    """kio's CreateTopicsRequest of `version`: assignments as (partition, broker ids), configs as
    (name, value) pairs (tests and tidelog's own client build it so)."""
    m = messages.request_module(19, version)

    def topic(name: str, partitions: int, rf: int, assignments: tuple[Any, ...] = (),
              configs: tuple[tuple[str, str | None], ...] = ()) -> Any:
        return m.CreatableTopic(name=name, num_partitions=partitions, replication_factor=rf, assignments=tuple(
            m.CreatableReplicaAssignment(partition_index=p, broker_ids=tuple(b)) for p, b in assignments),
            configs=tuple(m.CreatableTopicConfig(name=k, value=v) for k, v in configs))

    return m.CreateTopicsRequest(topics=tuple(topic(*t) for t in topics), timeout=timedelta(milliseconds=timeout_ms),
                                 validate_only=validate_only)


def create_result(version: int, name: str, error: ErrorCode, message: str | None = None, partitions: int = -1,
                  rf: int = -1, configs: tuple[tuple[str, str | None, int, bool], ...] | None = (),
                  config_error: int = 0, topic_id: uuid.UUID | None = None) -> Any:
    """One CreatableTopicResult of `version` (configs as (name, value, source, sensitive);
    Kafka's defaults for a refused topic: -1, -1 and an empty array)."""
    m = messages.response_module(19, version)
    entries = None if configs is None else tuple(
        m.CreatableTopicConfigs(name=k, value=v, read_only=False, config_source=src, is_sensitive=sens)
        for k, v, src, sens in configs) if hasattr(m, "CreatableTopicConfigs") else ()
    return messages.build(m.CreatableTopicResult, name=name, error_code=error, error_message=message,
                          num_partitions=partitions, replication_factor=rf, configs=entries,
                          topic_config_error_code=config_error, topic_id=topic_id)


def created(version: int, *results: Any) -> Any:
    return messages.response_module(19, version).CreateTopicsResponse(throttle_time=messages.NO_THROTTLE,
                                                                      topics=results)


CREATE_TOPICS = (("t", 3, 2, (), (("cleanup.policy", "delete"), ("x", None))), ("u", -1, -1, ((0, (1, 2)),)))
CREATE_REQ_FLEX = (carr(cs("t") + i32(3) + i16(2) + carr() + carr(cs("cleanup.policy") + cs("delete") + TAG,
                                                                 cs("x") + cs(None) + TAG) + TAG,
                        cs("u") + i32(-1) + i16(-1) + carr(i32(0) + carr(i32(1), i32(2)) + TAG) + carr() + TAG)
                   + i32(5000) + b(True) + TAG)



def create_results(version: int) -> tuple[Any, ...]:
    topic_id = TOPIC_UUID if version >= 7 else None
    return (create_result(version, "t", ErrorCode.NONE, None, 3, 2, (("retention.ms", "1000", 1, False),
                                                                    ("secret", None, 5, True)), topic_id=topic_id),
            create_result(version, "u", ErrorCode.TOPIC_ALREADY_EXISTS, "exists"),
            create_result(version, "v", ErrorCode.NONE, None, 1, 1, None, 29))  # configs not given, and why


CREATED_BODY = (i16(0) + cs(None) + i32(3) + i16(2)
                + carr(cs("retention.ms") + cs("1000") + b(False) + i8(1) + b(False) + TAG,
                       cs("secret") + cs(None) + b(False) + i8(5) + b(True) + TAG) + TAG)
REFUSED_BODY = i16(36) + cs("exists") + i32(-1) + i16(-1) + carr() + TAG
HIDDEN_BODY = i16(0) + cs(None) + i32(1) + i16(1) + b"\x00" + b"\x01\x00\x02" + i16(29)


ZERO_UUID = uuid.UUID(int=0)  # Kafka's "no topic id"; kio reads it as None


def create_resp_flex(version: int) -> bytes:
    topic_id = (lambda u: u.bytes) if version >= 7 else (lambda u: b"")
    return i32(0) + carr(cs("t") + topic_id(TOPIC_UUID) + CREATED_BODY,
                         cs("u") + topic_id(ZERO_UUID) + REFUSED_BODY,
                         cs("v") + topic_id(ZERO_UUID) + HIDDEN_BODY) + TAG


DQ = {v: messages.request_module(20, v) for v in (3, 4, 5, 6)}  # DeleteTopics, on kio's messages
DR = {v: messages.response_module(20, v) for v in (4, 5, 6)}
T30 = timedelta(seconds=30)
DELETE_V6 = DQ[6].DeleteTopicsRequest(timeout=T30, topics=(
    DQ[6].DeleteTopicState(name="a", topic_id=None), DQ[6].DeleteTopicState(name=None, topic_id=TOPIC_UUID)))


def deleted(version: int, *results: tuple[str | None, ErrorCode, str | None, uuid.UUID | None], throttle_ms: int = 0):
    m = DR[version]
    return m.DeleteTopicsResponse(throttle_time=timedelta(milliseconds=throttle_ms), responses=tuple(
        messages.build(m.DeletableTopicResult, name=n, error_code=e, error_message=msg, topic_id=i)
        for n, e, msg, i in results))


E = ErrorCode
DELETE_RESP = deleted(6, ("t", E.NONE, None, TOPIC_UUID), ("u", E.UNKNOWN_TOPIC_OR_PARTITION, "unknown", None))
DELETE_BY_ID_RESP = deleted(6, (None, E.UNKNOWN_TOPIC_ID, "This server does not host this topic ID.", TOPIC_UUID),
                            throttle_ms=5)

CPQ = {v: messages.request_module(37, v) for v in (1, 2, 3)}  # CreatePartitions, on kio's messages
CPR = {v: messages.response_module(37, v) for v in (2, 3)}


def parts_req(version: int):
    m = CPQ[version]
    return m.CreatePartitionsRequest(topics=(
        m.CreatePartitionsTopic(name="t", count=4, assignments=None),
        m.CreatePartitionsTopic(name="u", count=2, assignments=(m.CreatePartitionsAssignment(broker_ids=(1, 2)),))),
        timeout=timedelta(milliseconds=100), validate_only=True)


PARTS_REQ_FLEX = (carr(cs("t") + i32(4) + b"\x00" + TAG, cs("u") + i32(2) + carr(carr(i32(1), i32(2)) + TAG) + TAG)
                  + i32(100) + b(True) + TAG)


def parts_resp(version: int):
    m = CPR[version]
    return m.CreatePartitionsResponse(throttle_time=timedelta(milliseconds=1), results=(
        m.CreatePartitionsTopicResult(name="t", error_code=E.INVALID_PARTITIONS, error_message="no"),
        m.CreatePartitionsTopicResult(name="u", error_code=E.NONE, error_message=None)))


ROWS = [
    *[kio_req(19, v, create_request(v, *CREATE_TOPICS, validate_only=True), CREATE_REQ_FLEX) for v in (5, 6, 7)],
    *[kio_resp(19, v, created(v, *create_results(v)), create_resp_flex(v)) for v in (5, 6, 7)],
    kio_resp(19, 4, created(4, create_result(4, "u", ErrorCode.TOPIC_ALREADY_EXISTS, "exists")),
             i32(0) + arr(s("u") + i16(36) + s("exists"))),
    kio_req(20, 3, DQ[3].DeleteTopicsRequest(topic_names=("a", "b"), timeout=T30), arr(s("a"), s("b")) + i32(30000)),
    *[kio_req(20, v, DQ[v].DeleteTopicsRequest(topic_names=("a", "b"), timeout=T30),
              carr(cs("a"), cs("b")) + i32(30000) + TAG) for v in (4, 5)],
    kio_req(20, 6, DELETE_V6, carr(cs("a") + ZERO16 + TAG, cs(None) + TOPIC_UUID.bytes + TAG) + i32(30000) + TAG),
    kio_resp(20, 4, deleted(4, ("t", E.NONE, None, None), ("u", E.UNKNOWN_TOPIC_OR_PARTITION, None, None)),
             i32(0) + carr(cs("t") + i16(0) + TAG, cs("u") + i16(3) + TAG) + TAG),
    kio_resp(20, 5, deleted(5, ("t", E.NONE, None, None), ("u", E.UNKNOWN_TOPIC_OR_PARTITION, "unknown", None)),
             i32(0) + carr(cs("t") + i16(0) + cs(None) + TAG, cs("u") + i16(3) + cs("unknown") + TAG) + TAG),
    kio_resp(20, 6, DELETE_RESP,
             i32(0) + carr(cs("t") + TOPIC_UUID.bytes + i16(0) + cs(None) + TAG,
                           cs("u") + ZERO16 + i16(3) + cs("unknown") + TAG) + TAG),
    kio_resp(20, 6, DELETE_BY_ID_RESP,
             i32(5) + carr(cs(None) + TOPIC_UUID.bytes + i16(100) + cs("This server does not host this topic ID.")
                           + TAG) + TAG),
    kio_req(37, 1, parts_req(1),
            arr(s("t") + i32(4) + i32(-1), s("u") + i32(2) + arr(arr(i32(1), i32(2)))) + i32(100) + b(True)),
    *[kio_req(37, v, parts_req(v), PARTS_REQ_FLEX) for v in (2, 3)],
    *[kio_resp(37, v, parts_resp(v),
               i32(1) + carr(cs("t") + i16(37) + cs("no") + TAG, cs("u") + i16(0) + cs(None) + TAG) + TAG)
      for v in (2, 3)],
]
REQUESTS = [r for r in ROWS if r.decode.__name__.endswith("_request")]
RESPONSES = [r for r in ROWS if r.decode.__name__.endswith("_response")]


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_codec_rows(row: Row) -> None:
    check_codec_row(row)


@pytest.mark.parametrize("row", REQUESTS, ids=row_id)
def test_request_frame_fed_one_byte_at_a_time(row: Row) -> None:
    check_request_frame(row)


@pytest.mark.parametrize("row", RESPONSES, ids=row_id)
def test_dispatch_encodes_responses(row: Row) -> None:
    check_dispatch(row)


@pytest.mark.parametrize(("decode", "version"), [
    (lambda body, v: decode_request(RequestHeader(19, v, 1, "c"), body), 8),
    (lambda body, v: decode_request(RequestHeader(19, v, 1, "c"), body), 1),
    (lambda body, v: messages.decode_request(20, v, body), 7), (lambda body, v: messages.decode_request(37, v, body), 4)])
def test_versions_outside_the_ranges_are_protocol_errors(decode, version) -> None:
    with pytest.raises(ProtocolError):
        decode(memoryview(CREATE_REQ_FLEX), version)


def test_v6_topics_without_a_name_need_their_bytes() -> None:
    """A null name is one byte; the 16-byte id after it must be there."""
    with pytest.raises(ProtocolError):
        messages.decode_request(20, 6, memoryview(carr(cs(None) + ZERO16[:8]) + i32(1) + TAG))
