"""Table tests for common/protocol/reassignments.py: AlterPartitionReassignments (45) and
ListPartitionReassignments (46), v0, flexible. One row of (dataclass, exact bytes) drives
encoder and decoder, truncations, trailing bytes and request frames fed one byte at a time
(the shared harness of test_protocol_codecs)."""

from __future__ import annotations

import pytest

from broker.request_handler import ADVERTISED_API_VERSIONS, decode_request
from common.protocol import reassignments as ra
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
    req,
    resp,
)

K = ApiKey


def cints(*v: int) -> bytes:
    return carr(*map(i32, v))


ALTER = ra.AlterPartitionReassignmentsRequest((ra.ReassignableTopic("t", (
    ra.ReassignablePartition(0, (5, 6, 7)), ra.ReassignablePartition(1, None))),), 30_000)
ALTER_RESP = ra.AlterPartitionReassignmentsResponse((ra.ReassignableTopicResponse("t", (
    ra.ReassignablePartitionResponse(0, 0), ra.ReassignablePartitionResponse(1, 85, "none"))),))
LIST_ALL = ra.ListPartitionReassignmentsRequest(None, 1000)
LIST_SOME = ra.ListPartitionReassignmentsRequest((ra.ListPartitionReassignmentsTopics("t", (0, 3)),), 1000)
LIST_RESP = ra.ListPartitionReassignmentsResponse((ra.OngoingTopicReassignment("t", (
    ra.OngoingPartitionReassignment(0, (5, 6, 7, 4), (7,), (4,)),)),))

ROWS = [
    req(ra, "alter_partition_reassignments", K.ALTER_PARTITION_REASSIGNMENTS, 0, ALTER,
        i32(30_000) + carr(cs("t") + carr(i32(0) + cints(5, 6, 7) + TAG, i32(1) + b"\x00" + TAG) + TAG) + TAG),
    resp(ra, "alter_partition_reassignments", K.ALTER_PARTITION_REASSIGNMENTS, 0, ALTER_RESP,
         i32(0) + i16(0) + cs(None)
         + carr(cs("t") + carr(i32(0) + i16(0) + cs(None) + TAG, i32(1) + i16(85) + cs("none") + TAG) + TAG)
         + TAG),
    resp(ra, "alter_partition_reassignments", K.ALTER_PARTITION_REASSIGNMENTS, 0,
         ra.AlterPartitionReassignmentsResponse((), 39, "bad"), i32(0) + i16(39) + cs("bad") + carr() + TAG),
    req(ra, "list_partition_reassignments", K.LIST_PARTITION_REASSIGNMENTS, 0, LIST_ALL, i32(1000) + b"\x00" + TAG),
    req(ra, "list_partition_reassignments", K.LIST_PARTITION_REASSIGNMENTS, 0, LIST_SOME,
        i32(1000) + carr(cs("t") + cints(0, 3) + TAG) + TAG),
    resp(ra, "list_partition_reassignments", K.LIST_PARTITION_REASSIGNMENTS, 0, LIST_RESP,
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
