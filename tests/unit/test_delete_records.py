"""DeleteRecords v0-v2 on kio's generated messages (common/protocol/messages.py): the exact
bytes of kafka-python's encoding both ways, truncation and trailing bytes, and the broker's
decoder (api_table's row) refusing what is not a request."""

from __future__ import annotations

from datetime import timedelta

import pytest

from broker.request_handler import ROWS
from common.errors import ErrorCode
from common.protocol import delete_records as dr
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.primitives import ProtocolError
from tests.kafka_python_oracle import (
    every_truncation_fails,
    kafka_python_body,
)

kafka_admin = pytest.importorskip("kafka.protocol.admin")

KP_REQUEST = {"topics": [("orders", [(0, 42), (3, -1)]), ("é-topic", [])], "timeout_ms": 30000}
KP_RESPONSE = {"throttle_time_ms": 5, "topics": [("orders", [(0, 42, 0), (3, -1, 1)])]}
VERSIONS = (0, 1, 2)
KEY = ApiKey.DELETE_RECORDS


def request(version: int) -> object:
    m = messages.request_module(KEY, version)
    return m.DeleteRecordsRequest(topics=(
        m.DeleteRecordsTopic(name="orders", partitions=(
            m.DeleteRecordsPartition(partition_index=0, offset=42),
            m.DeleteRecordsPartition(partition_index=3, offset=dr.HIGH_WATERMARK))),
        m.DeleteRecordsTopic(name="é-topic", partitions=()),
    ), timeout=timedelta(seconds=30))


def response(version: int) -> object:
    m = messages.response_module(KEY, version)
    return m.DeleteRecordsResponse(throttle_time=timedelta(milliseconds=5), topics=(
        m.DeleteRecordsTopicResult(name="orders", partitions=(
            m.DeleteRecordsPartitionResult(partition_index=0, low_watermark=42, error_code=ErrorCode.NONE),
            m.DeleteRecordsPartitionResult(partition_index=3, low_watermark=dr.INVALID_LOW_WATERMARK,
                                           error_code=ErrorCode.OFFSET_OUT_OF_RANGE))),))


def decode_body(body: memoryview, version: int) -> object:
    return ROWS[KEY].codec.decode(body, version)  # type: ignore[index]


@pytest.mark.parametrize("version", VERSIONS)
def test_request_matches_kafka_python_and_round_trips(version):
    body = kafka_python_body(kafka_admin.DeleteRecordsRequest, version, **KP_REQUEST)
    assert b"".join(messages.encode_request(request(version), version)) == body
    assert decode_body(memoryview(body), version) == request(version)
    assert decode_body(memoryview(body + b"\x00\x07"), version) == request(version)  # trailing bytes
    every_truncation_fails(decode_body, body, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_response_matches_kafka_python_and_round_trips(version):
    body = kafka_python_body(kafka_admin.DeleteRecordsResponse, version, **KP_RESPONSE)
    assert b"".join(ROWS[KEY].codec.encode(response(version), version)) == body  # type: ignore[index]
    assert messages.decode_response(KEY, version, bytearray(body)) == response(version)  # a client's buffer


@pytest.mark.parametrize("version, body", [
    (0, b"\xff\xff\xff\xfe"),  # negative topic count
    (0, b"\x00\x00\x7f\xff"),  # more topics than bytes
    (2, b"\x00"),  # compact null where an array is required
    (2, b"\x02\x00"),  # compact null topic name
    (2, b"\x02\x05ab"),  # name longer than the body
], ids=["negative-count", "count-too-large", "null-array", "null-name", "short-name"])
def test_malformed_requests_raise_protocol_error(version, body):
    with pytest.raises(ProtocolError):
        decode_body(memoryview(body), version)


def test_unsupported_version_is_refused():
    with pytest.raises(ProtocolError):
        decode_body(memoryview(b""), 3)
