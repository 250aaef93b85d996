"""DescribeLogDirs (key 35) v0-v4 on kio's generated messages through the dispatch table:
kafka-python's bytes (v3's error code, v4's volume bytes), v0 read and answered as v1 (the
same bytes), the null topic list, truncation and trailing bytes."""

from __future__ import annotations

import pytest

from broker.request_handler import decode_request, encode_response
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.frame import RequestHeader
from tests.kafka_python_oracle import (
    every_truncation_fails,
    kafka_python_body,
)

kafka_admin = pytest.importorskip("kafka.protocol.admin")

KEY = ApiKey.DESCRIBE_LOG_DIRS
KP_REQUESTS = [{"topics": [("orders", [0, 2]), ("x", [])]}, {"topics": None}]  # some, every partition


def request(version: int, kp: dict):
    m = messages.request_module(KEY, version)
    topics = None if kp["topics"] is None else tuple(
        m.DescribableLogDirTopic(topic=name, partitions=tuple(parts)) for name, parts in kp["topics"])
    return m.DescribeLogDirsRequest(topics=topics)


def response(version: int):
    m = messages.response_module(KEY, version)
    build = messages.build
    return build(m.DescribeLogDirsResponse, throttle_time=messages.NO_THROTTLE, error_code=ErrorCode.NONE, results=(
        build(m.DescribeLogDirsResult, error_code=ErrorCode.NONE, log_dir="/data/a", topics=(
            m.DescribeLogDirsTopic(name="orders", partitions=(
                m.DescribeLogDirsPartition(partition_index=0, partition_size=1234, offset_lag=0, is_future_key=False),
                m.DescribeLogDirsPartition(partition_index=2, partition_size=0, offset_lag=7, is_future_key=True))),
            m.DescribeLogDirsTopic(name="quiet", partitions=()),
        ), total_bytes=10_000_000_000, usable_bytes=4_000_000_000),
        build(m.DescribeLogDirsResult, error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir="/data/b", topics=()),
    ))


def kp_response(version: int) -> dict:
    results = [[0, "/data/a", [("orders", [(0, 1234, 0, False), (2, 0, 7, True)]), ("quiet", [])]],
               [56, "/data/b", []]]
    if version >= 4:
        results[0] += [10_000_000_000, 4_000_000_000]
        results[1] += [-1, -1]
    fields = {"throttle_time_ms": 0, "results": [tuple(r) for r in results]}
    if version >= 3:
        fields["error_code"] = 0
    return fields


def decode(body: bytes, version: int):
    return decode_request(RequestHeader(KEY, version, 1, None), memoryview(body))


@pytest.mark.parametrize("kp", KP_REQUESTS, ids=["some", "all"])
@pytest.mark.parametrize("version", [1, 2, 3, 4])  # kafka-python's schema starts at v1 (v0 == v1)
def test_request_matches_kafka_python(version, kp):
    body = kafka_python_body(kafka_admin.DescribeLogDirsRequest, version, **kp)
    assert messages.encode(request(version, kp)) == body
    for v in (0, 1) if version == 1 else (version,):
        assert decode(body, v) == request(v, kp)
        assert decode(body + b"\x01", v) == request(v, kp)
        every_truncation_fails(lambda b, ver: decode(bytes(b), ver), body, v)


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_response_matches_kafka_python(version):
    ours = b"".join(encode_response(KEY, response(version), version))
    assert ours == kafka_python_body(kafka_admin.DescribeLogDirsResponse, version, **kp_response(version))
    assert messages.decode_response(KEY, version, ours) == response(version)


def test_v0_response_is_v1():
    assert encode_response(KEY, response(0), 0) == encode_response(KEY, response(1), 1)
