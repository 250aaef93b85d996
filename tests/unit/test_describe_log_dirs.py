"""common/protocol/describe_log_dirs.py: v0-v4 against kafka-python's encoding (v3's error
code, v4's volume bytes), the null topic list, truncation and trailing bytes."""

from __future__ import annotations

import pytest

from common.protocol import describe_log_dirs as dld
from tests.kafka_python_oracle import (
    every_truncation_fails,
    kafka_python_body,
)

kafka_admin = pytest.importorskip("kafka.protocol.admin")

REQUESTS = [
    (dld.DescribeLogDirsRequest((dld.DescribableLogDirTopic("orders", (0, 2)),
                                 dld.DescribableLogDirTopic("x", ()))),
     {"topics": [("orders", [0, 2]), ("x", [])]}),
    (dld.DescribeLogDirsRequest(None), {"topics": None}),  # every partition
]
RESPONSE = dld.DescribeLogDirsResponse(0, (
    dld.DescribeLogDirsResult(0, "/data/a", (
        dld.DescribeLogDirsTopic("orders", (dld.DescribeLogDirsPartition(0, 1234, 0, False),
                                            dld.DescribeLogDirsPartition(2, 0, 7, True))),
        dld.DescribeLogDirsTopic("quiet", ()),
    ), total_bytes=10_000_000_000, usable_bytes=4_000_000_000),
    dld.DescribeLogDirsResult(56, "/data/b", ()),
), error_code=0)


def kp_response(version: int) -> dict:
    results = []
    for d in RESPONSE.results:
        row = [d.error_code, d.log_dir, [(t.name, [(p.partition_index, p.partition_size, p.offset_lag,
                                                    p.is_future_key) for p in t.partitions])
                                         for t in d.topics]]
        if version >= 4:
            row += [d.total_bytes, d.usable_bytes]
        results.append(tuple(row))
    fields = {"throttle_time_ms": 0, "results": results}
    if version >= 3:
        fields["error_code"] = 0
    return fields


@pytest.mark.parametrize("request_, kp", REQUESTS, ids=["some", "all"])
@pytest.mark.parametrize("version", [1, 2, 3, 4])  # kafka-python's schema starts at v1 (v0 == v1)
def test_request_matches_kafka_python_and_round_trips(version, request_, kp):
    body = kafka_python_body(kafka_admin.DescribeLogDirsRequest, version, **kp)
    assert b"".join(dld.encode_describe_log_dirs_request(request_, version)) == body
    for v in (0, 1) if version == 1 else (version,):
        assert dld.decode_describe_log_dirs_request(memoryview(body), v) == request_
        assert dld.decode_describe_log_dirs_request(memoryview(body + b"\x01"), v) == request_
        every_truncation_fails(dld.decode_describe_log_dirs_request, body, v)


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_response_matches_kafka_python_and_round_trips(version):
    ours = dld.encode_describe_log_dirs_response(RESPONSE, version)
    assert b"".join(ours) == \
        kafka_python_body(kafka_admin.DescribeLogDirsResponse, version, **kp_response(version))
    expected = RESPONSE
    if version < 4:  # the volume bytes exist from v4
        expected = dld.DescribeLogDirsResponse(0, tuple(
            dld.DescribeLogDirsResult(d.error_code, d.log_dir, d.topics) for d in RESPONSE.results))
    assert dld.decode_describe_log_dirs_response(memoryview(b"".join(ours)), version) == expected


def test_v0_response_is_v1():
    assert dld.encode_describe_log_dirs_response(RESPONSE, 0) == dld.encode_describe_log_dirs_response(RESPONSE, 1)
