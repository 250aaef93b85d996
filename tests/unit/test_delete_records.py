"""common/protocol/delete_records.py: v0-v2 against kafka-python's encoding, round trips,
truncation and trailing bytes."""

from __future__ import annotations

import pytest

from common.protocol import delete_records as dr
from common.protocol.primitives import ProtocolError
from tests.kafka_python_oracle import (
    every_truncation_fails,
    kafka_python_body,
)

kafka_admin = pytest.importorskip("kafka.protocol.admin")

REQUEST = dr.DeleteRecordsRequest((
    dr.DeleteRecordsTopic("orders", (dr.DeleteRecordsPartition(0, 42), dr.DeleteRecordsPartition(3, dr.HIGH_WATERMARK))),
    dr.DeleteRecordsTopic("é-topic", ()),
), 30000)
KP_REQUEST = {"topics": [("orders", [(0, 42), (3, -1)]), ("é-topic", [])], "timeout_ms": 30000}
RESPONSE = dr.DeleteRecordsResponse(5, (
    dr.DeleteRecordsTopicResult("orders", (dr.DeleteRecordsPartitionResult(0, 42, 0),
                                           dr.DeleteRecordsPartitionResult(3, dr.INVALID_LOW_WATERMARK, 1))),
))
KP_RESPONSE = {"throttle_time_ms": 5, "topics": [("orders", [(0, 42, 0), (3, -1, 1)])]}
VERSIONS = (0, 1, 2)


@pytest.mark.parametrize("version", VERSIONS)
def test_request_matches_kafka_python_and_round_trips(version):
    body = kafka_python_body(kafka_admin.DeleteRecordsRequest, version, **KP_REQUEST)
    assert b"".join(dr.encode_delete_records_request(REQUEST, version)) == body
    assert dr.decode_delete_records_request(memoryview(body), version) == REQUEST
    assert dr.decode_delete_records_request(memoryview(body + b"\x00\x07"), version) == REQUEST  # trailing bytes
    every_truncation_fails(dr.decode_delete_records_request, body, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_response_matches_kafka_python_and_round_trips(version):
    ours = dr.encode_delete_records_response(RESPONSE, version)
    assert b"".join(ours) == \
        kafka_python_body(kafka_admin.DeleteRecordsResponse, version, **KP_RESPONSE)
    assert dr.decode_delete_records_response(memoryview(b"".join(ours)), version) == RESPONSE


@pytest.mark.parametrize("version, body", [
    (0, b"\xff\xff\xff\xfe"),  # negative topic count
    (0, b"\x00\x00\x7f\xff"),  # more topics than bytes
    (2, b"\x00"),  # compact null where an array is required
    (2, b"\x02\x00"),  # compact null topic name
    (2, b"\x02\x05ab"),  # name longer than the body
], ids=["negative-count", "count-too-large", "null-array", "null-name", "short-name"])
def test_malformed_requests_raise_protocol_error(version, body):
    with pytest.raises(ProtocolError):
        dr.decode_delete_records_request(memoryview(body), version)


def test_unsupported_version_is_refused():
    with pytest.raises(ProtocolError):
        dr.decode_delete_records_request(memoryview(b""), 3)
