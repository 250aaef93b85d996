"""DescribeProducers (key 61, v0, flexible) on kio's generated messages through the dispatch
table: kafka-python's bytes decode, our answers encode to kafka-python's bytes, nullable error
messages, tagged fields, truncation and trailing bytes."""

from __future__ import annotations

import pytest

from broker.request_handler import decode_request, encode_response
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.frame import RequestHeader
from common.protocol.primitives import ProtocolError
from tests.kafka_python_oracle import (
    every_truncation_fails,
    kafka_python_body,
)

kafka_admin = pytest.importorskip("kafka.protocol.admin")

KEY = ApiKey.DESCRIBE_PRODUCERS
REQ = messages.request_module(KEY, 0)
RESP = messages.response_module(KEY, 0)
REQUEST = REQ.DescribeProducersRequest(topics=(REQ.TopicRequest(name="orders", partition_indexes=(0, 1, 5)),
                                               REQ.TopicRequest(name="none", partition_indexes=())))
KP_REQUEST = {"topics": [("orders", [0, 1, 5]), ("none", [])]}
RESPONSE = RESP.DescribeProducersResponse(throttle_time=messages.NO_THROTTLE, topics=(
    RESP.TopicResponse(name="orders", partitions=(
        RESP.PartitionResponse(partition_index=0, error_code=ErrorCode.NONE, error_message=None, active_producers=(
            RESP.ProducerState(producer_id=1000, producer_epoch=2, last_sequence=41,
                               last_timestamp=1_700_000_000_123, coordinator_epoch=-1),
            RESP.ProducerState(producer_id=1001, producer_epoch=0, last_sequence=0,
                               last_timestamp=1_700_000_000_456, coordinator_epoch=-1, current_txn_start_offset=-1))),
        RESP.PartitionResponse(partition_index=5, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                               error_message="not the leader", active_producers=()),
    )),
))
KP_RESPONSE = {"throttle_time_ms": 0, "topics": [("orders", [
    (0, 0, None, [(1000, 2, 41, 1_700_000_000_123, -1, -1), (1001, 0, 0, 1_700_000_000_456, -1, -1)]),
    (5, 6, "not the leader", []),
])]}


def decode(body: bytes, version: int = 0):
    return decode_request(RequestHeader(KEY, version, 1, None), memoryview(body))


def test_request_matches_kafka_python():
    body = kafka_python_body(kafka_admin.DescribeProducersRequest, 0, **KP_REQUEST)
    assert messages.encode(REQUEST) == body
    assert decode(body) == REQUEST
    assert decode(body + b"\x00") == REQUEST
    every_truncation_fails(lambda b, v: decode(bytes(b), v), body, 0)


def test_response_matches_kafka_python():
    ours = b"".join(encode_response(KEY, RESPONSE, 0))
    assert ours == kafka_python_body(kafka_admin.DescribeProducersResponse, 0, **KP_RESPONSE)
    assert messages.decode_response(KEY, 0, ours) == RESPONSE


def test_tagged_fields_from_a_newer_client_are_skipped():
    # one topic "t", one partition, then a struct-level tag 0 of 2 bytes, then none at the top
    body = b"\x02\x02t\x02\x00\x00\x00\x07\x01\x00\x02ab\x00"
    assert decode(body) == REQ.DescribeProducersRequest(topics=(REQ.TopicRequest(name="t", partition_indexes=(7,)),))


@pytest.mark.parametrize("body", [b"\x02\x02t\x02\x00\x00\x00\x07\x02\x00\x02ab\x00\x02x\x00",
                                  b"\x02\x02\xff\x01\x00\x00", b"\x00"],
                         ids=["tags-out-of-order", "bad-utf8", "null-array"])
def test_malformed_requests_raise_protocol_error(body):
    with pytest.raises(ProtocolError):
        decode(body)


def test_unsupported_version_is_refused():
    with pytest.raises(ProtocolError):
        decode(b"\x01\x00", 1)
