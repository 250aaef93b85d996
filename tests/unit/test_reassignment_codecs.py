"""Table tests for AlterPartitionReassignments (45) and ListPartitionReassignments (46), v0,
flexible, served on kio's generated messages. One row of (dataclass, exact bytes) drives
encoder and decoder, truncations, trailing bytes and request frames fed one byte at a time
(the shared harness of test_protocol_codecs)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from broker.request_handler import ADVERTISED_API_VERSIONS, decode_request
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.frame import RequestHeader
from common.protocol.primitives import ProtocolError
from tests.unit.test_protocol_codecs import (
    TAG,
    Row,
    carr,
    check_codec_row,
    check_dispatch,
    check_request_frame,
    cs,
    i16,
    i32,
    kio_req,
    kio_resp,
)

K = ApiKey


def cints(*v: int) -> bytes:
    return carr(*map(i32, v))


AQ = messages.request_module(K.ALTER_PARTITION_REASSIGNMENTS, 0)
AR = messages.response_module(K.ALTER_PARTITION_REASSIGNMENTS, 0)
LQ = messages.request_module(K.LIST_PARTITION_REASSIGNMENTS, 0)
LR = messages.response_module(K.LIST_PARTITION_REASSIGNMENTS, 0)
ALTER = AQ.AlterPartitionReassignmentsRequest(timeout=timedelta(seconds=30), topics=(AQ.ReassignableTopic(
    name="t", partitions=(AQ.ReassignablePartition(partition_index=0, replicas=(5, 6, 7)),
                          AQ.ReassignablePartition(partition_index=1, replicas=None))),))
ALTER_RESP = AR.AlterPartitionReassignmentsResponse(
    throttle_time=messages.NO_THROTTLE, error_code=ErrorCode.NONE, error_message=None, responses=(
        AR.ReassignableTopicResponse(name="t", partitions=(
            AR.ReassignablePartitionResponse(partition_index=0, error_code=ErrorCode.NONE, error_message=None),
            AR.ReassignablePartitionResponse(partition_index=1, error_code=ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                                             error_message="none"))),))
ALTER_FAILED = AR.AlterPartitionReassignmentsResponse(
    throttle_time=messages.NO_THROTTLE, error_code=ErrorCode.INVALID_REPLICA_ASSIGNMENT, error_message="bad",
    responses=())
LIST_ALL = LQ.ListPartitionReassignmentsRequest(timeout=timedelta(seconds=1), topics=None)
LIST_SOME = LQ.ListPartitionReassignmentsRequest(timeout=timedelta(seconds=1), topics=(
    LQ.ListPartitionReassignmentsTopics(name="t", partition_indexes=(0, 3)),))
LIST_RESP = LR.ListPartitionReassignmentsResponse(
    throttle_time=messages.NO_THROTTLE, error_code=ErrorCode.NONE, error_message=None, topics=(
        LR.OngoingTopicReassignment(name="t", partitions=(LR.OngoingPartitionReassignment(
            partition_index=0, replicas=(5, 6, 7, 4), adding_replicas=(7,), removing_replicas=(4,)),)),))

ROWS = [
    kio_req(K.ALTER_PARTITION_REASSIGNMENTS, 0, ALTER,
            i32(30_000) + carr(cs("t") + carr(i32(0) + cints(5, 6, 7) + TAG, i32(1) + b"\x00" + TAG) + TAG) + TAG),
    kio_resp(K.ALTER_PARTITION_REASSIGNMENTS, 0, ALTER_RESP,
             i32(0) + i16(0) + cs(None)
             + carr(cs("t") + carr(i32(0) + i16(0) + cs(None) + TAG, i32(1) + i16(85) + cs("none") + TAG) + TAG)
             + TAG),
    kio_resp(K.ALTER_PARTITION_REASSIGNMENTS, 0, ALTER_FAILED, i32(0) + i16(39) + cs("bad") + carr() + TAG),
    kio_req(K.LIST_PARTITION_REASSIGNMENTS, 0, LIST_ALL, i32(1000) + b"\x00" + TAG),
    kio_req(K.LIST_PARTITION_REASSIGNMENTS, 0, LIST_SOME, i32(1000) + carr(cs("t") + cints(0, 3) + TAG) + TAG),
    kio_resp(K.LIST_PARTITION_REASSIGNMENTS, 0, LIST_RESP,
             i32(0) + i16(0) + cs(None)
             + carr(cs("t") + carr(i32(0) + cints(5, 6, 7, 4) + cints(7) + cints(4) + TAG) + TAG) + TAG),
]
REQUESTS = [r for r in ROWS if r.decode.__name__.endswith("_request")]
RESPONSES = [r for r in ROWS if r.decode.__name__.endswith("_response")]


def row_id(row: Row) -> str:
    return f"{row.decode.__name__}-v{row.version}"


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_codec_rows(row: Row) -> None:
    check_codec_row(row)


@pytest.mark.parametrize("row", REQUESTS, ids=row_id)
def test_request_frame_fed_one_byte_at_a_time(row: Row) -> None:
    check_request_frame(row)


@pytest.mark.parametrize("row", RESPONSES, ids=row_id)
def test_dispatch_encodes_responses(row: Row) -> None:
    check_dispatch(row)


@pytest.mark.parametrize("api", [K.ALTER_PARTITION_REASSIGNMENTS, K.LIST_PARTITION_REASSIGNMENTS])
def test_v0_only_advertised_and_v1_refused(api: ApiKey) -> None:
    assert any(v.api_key == api and (v.min_version, v.max_version) == (0, 0) for v in ADVERTISED_API_VERSIONS)
    with pytest.raises(ProtocolError):
        decode_request(RequestHeader(api, 1, 1, None), memoryview(b"\x00" * 64))
