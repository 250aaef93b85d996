"""common/protocol/describe_producers.py: v0 (flexible) against kafka-python's encoding,
nullable error messages, truncation and trailing bytes."""

from __future__ import annotations

import pytest

from common.protocol import describe_producers as dp
from common.protocol.primitives import ProtocolError
from tests.kafka_python_oracle import (
    every_truncation_fails,
    kafka_python_body,
)

kafka_admin = pytest.importorskip("kafka.protocol.admin")

REQUEST = dp.DescribeProducersRequest((dp.DescribeProducersTopic("orders", (0, 1, 5)),
                                       dp.DescribeProducersTopic("none", ())))
KP_REQUEST = {"topics": [("orders", [0, 1, 5]), ("none", [])]}
RESPONSE = dp.DescribeProducersResponse(0, (
    dp.DescribeProducersTopicResponse("orders", (
        dp.DescribeProducersPartition(0, 0, None, (
            dp.ProducerState(1000, 2, 41, 1_700_000_000_123),
            dp.ProducerState(1001, 0, 0, 1_700_000_000_456, -1, -1))),
        dp.DescribeProducersPartition(5, 6, "not the leader"),
    )),
))
KP_RESPONSE = {"throttle_time_ms": 0, "topics": [("orders", [
    (0, 0, None, [(1000, 2, 41, 1_700_000_000_123, -1, -1), (1001, 0, 0, 1_700_000_000_456, -1, -1)]),
    (5, 6, "not the leader", []),
])]}


def test_request_matches_kafka_python_and_round_trips():
    body = kafka_python_body(kafka_admin.DescribeProducersRequest, 0, **KP_REQUEST)
    assert b"".join(dp.encode_describe_producers_request(REQUEST, 0)) == body
    assert dp.decode_describe_producers_request(memoryview(body), 0) == REQUEST
    assert dp.decode_describe_producers_request(memoryview(body + b"\x00"), 0) == REQUEST
    every_truncation_fails(dp.decode_describe_producers_request, body, 0)


def test_response_matches_kafka_python_and_round_trips():
    ours = dp.encode_describe_producers_response(RESPONSE, 0)
    assert b"".join(ours) == kafka_python_body(kafka_admin.DescribeProducersResponse, 0, **KP_RESPONSE)
    assert dp.decode_describe_producers_response(memoryview(b"".join(ours)), 0) == RESPONSE


def test_tagged_fields_from_a_newer_client_are_skipped():
    # one topic "t", one partition, then a struct-level tag 0 of 2 bytes, then none at the top
    body = b"\x02\x02t\x02\x00\x00\x00\x07\x01\x00\x02ab\x00"
    assert dp.decode_describe_producers_request(memoryview(body), 0) == \
        dp.DescribeProducersRequest((dp.DescribeProducersTopic("t", (7,)),))


@pytest.mark.parametrize("body", [b"\x02\x02t\x02\x00\x00\x00\x07\x02\x00\x02ab\x00\x02x\x00",
                                  b"\x02\x02\xff\x01\x00\x00"],
                         ids=["tags-out-of-order", "bad-utf8"])
def test_malformed_requests_raise_protocol_error(body):
    with pytest.raises(ProtocolError):
        dp.decode_describe_producers_request(memoryview(body), 0)
