"""Table tests for the flexible admin APIs: DescribeCluster (v0–v1) and ElectLeaders (v0–v2)
on kio's generated messages, DescribeAcls / CreateAcls / DeleteAcls (v0–v3) on our codec. One row of (version, dataclass, exact bytes)
drives encoder and decoder at each version where a field appears or the encoding turns
flexible. Same checks as test_protocol_codecs: exact bytes, trailing bytes tolerated, every
truncation a ProtocolError, request frames (header v2 when flexible) one byte at a time."""

from __future__ import annotations


import pytest

from broker.request_handler import decode_request
from datetime import timedelta

from common.errors import ErrorCode
from common.protocol import acls, messages
from common.protocol.api_keys import ApiKey
from common.protocol.frame import RequestHeader
from common.protocol.primitives import ProtocolError
from tests.unit.test_protocol_codecs import (
    check_codec_row,
    check_dispatch,
    check_request_frame,
    TAG,
    Row,
    arr,
    b,
    carr,
    cs,
    i8,
    i16,
    i32,
    ints,
    kio_req,
    kio_resp,
    req,
    resp,
    s,
)

K = ApiKey
DCQ = {v: messages.request_module(K.DESCRIBE_CLUSTER, v) for v in (0, 1)}
DCR = {v: messages.response_module(K.DESCRIBE_CLUSTER, v) for v in (0, 1)}


def dc_resp(version: int):
    m = DCR[version]
    return m.DescribeClusterResponse(
        throttle_time=messages.NO_THROTTLE, error_code=ErrorCode.NONE, error_message=None, cluster_id="cid",
        controller_id=4, brokers=(m.DescribeClusterBroker(broker_id=4, host="127.0.0.4", port=9092, rack="r1"),),
        cluster_authorized_operations=0x1FA0)


DC_BYTES_TAIL = cs("cid") + i32(4) + carr(i32(4) + cs("127.0.0.4") + i32(9092) + cs("r1") + TAG) + i32(0x1FA0) + TAG
ELQ = {v: messages.request_module(K.ELECT_LEADERS, v) for v in (0, 1, 2)}
ELR = {v: messages.response_module(K.ELECT_LEADERS, v) for v in (0, 1, 2)}


def elect(version: int, topics: list[tuple[str, tuple[int, ...]]] | None, timeout_ms: int, election_type: int = 0):
    m = ELQ[version]
    return messages.build(m.ElectLeadersRequest, election_type=election_type, timeout=timedelta(milliseconds=timeout_ms),
                          topic_partitions=None if topics is None else tuple(
                              m.TopicPartitions(topic=t, partitions=ps) for t, ps in topics))


def elect_results(version: int, error_code: ErrorCode = ErrorCode.NONE, *, empty: bool = False):
    m = ELR[version]
    results = () if empty else (m.ReplicaElectionResult(topic="t", partition_result=(
        m.PartitionResult(partition_id=0, error_code=ErrorCode.NONE, error_message=None),
        m.PartitionResult(partition_id=2, error_code=ErrorCode.ELECTION_NOT_NEEDED, error_message="not needed"))),)
    return messages.build(m.ElectLeadersResponse, throttle_time=messages.NO_THROTTLE, error_code=error_code,
                          replica_election_results=results)


FILTER = acls.AclFilter(2, "t", None, "*", 3, 1, 3)
FILTER_V0 = acls.AclFilter(2, "t", None, "*", 3, 1)
BINDING = acls.AclCreation(2, "t", "User:a", "*", 3, 3, 3)


def filter_bytes(version: int) -> bytes:
    if version >= 2:
        return i8(2) + cs("t") + i8(3) + cs(None) + cs("*") + i8(3) + i8(1)
    return i8(2) + s("t") + (i8(3) if version else b"") + s(None) + s("*") + i8(3) + i8(1)


def binding_bytes(version: int) -> bytes:
    if version >= 2:
        return i8(2) + cs("t") + i8(3) + cs("User:a") + cs("*") + i8(3) + i8(3)
    return i8(2) + s("t") + (i8(3) if version else b"") + s("User:a") + s("*") + i8(3) + i8(3)


ROWS = [
    # DescribeCluster: flexible from v0; v1 adds endpoint_type to both
    kio_req(K.DESCRIBE_CLUSTER, 0, DCQ[0].DescribeClusterRequest(include_cluster_authorized_operations=True),
            b(True) + TAG),
    kio_req(K.DESCRIBE_CLUSTER, 1, DCQ[1].DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                                 endpoint_type=2), b(False) + i8(2) + TAG),
    kio_resp(K.DESCRIBE_CLUSTER, 0, dc_resp(0), i32(0) + i16(0) + cs(None) + DC_BYTES_TAIL),
    kio_resp(K.DESCRIBE_CLUSTER, 1, dc_resp(1), i32(0) + i16(0) + cs(None) + i8(1) + DC_BYTES_TAIL),
    # ElectLeaders: v1 adds election_type and the top-level error; v2 flexible
    kio_req(K.ELECT_LEADERS, 0, elect(0, [("t", (0, 2))], 5000), arr(s("t") + ints(0, 2)) + i32(5000)),
    kio_req(K.ELECT_LEADERS, 1, elect(1, None, 100, 1), i8(1) + i32(-1) + i32(100)),
    kio_req(K.ELECT_LEADERS, 2, elect(2, [("t", (0, 2))], 5000, 1),
            i8(1) + carr(cs("t") + carr(i32(0), i32(2)) + TAG) + i32(5000) + TAG),
    kio_req(K.ELECT_LEADERS, 2, elect(2, None, 100, 0), i8(0) + b"\x00" + i32(100) + TAG),
    kio_resp(K.ELECT_LEADERS, 0, elect_results(0),
             i32(0) + arr(s("t") + arr(i32(0) + i16(0) + s(None), i32(2) + i16(84) + s("not needed")))),
    kio_resp(K.ELECT_LEADERS, 1, elect_results(1, ErrorCode.NOT_CONTROLLER, empty=True),
             i32(0) + i16(41) + arr()),
    kio_resp(K.ELECT_LEADERS, 2, elect_results(2),
             i32(0) + i16(0) + carr(cs("t") + carr(i32(0) + i16(0) + cs(None) + TAG,
                                                   i32(2) + i16(84) + cs("not needed") + TAG) + TAG) + TAG),
    # DescribeAcls
    req(acls, "describe_acls", K.DESCRIBE_ACLS, 0, FILTER_V0, filter_bytes(0)),
    req(acls, "describe_acls", K.DESCRIBE_ACLS, 1, FILTER, filter_bytes(1)),
    req(acls, "describe_acls", K.DESCRIBE_ACLS, 2, FILTER, filter_bytes(2) + TAG),
    req(acls, "describe_acls", K.DESCRIBE_ACLS, 3, FILTER, filter_bytes(3) + TAG),
    resp(acls, "describe_acls", K.DESCRIBE_ACLS, 1, acls.DescribeAclsResponse(54, "off", (
        acls.DescribeAclsResource(2, "t", (acls.AclDescription("User:a", "*", 3, 3),)),)),
        i32(0) + i16(54) + s("off") + arr(i8(2) + s("t") + i8(3) + arr(s("User:a") + s("*") + i8(3) + i8(3)))),
    resp(acls, "describe_acls", K.DESCRIBE_ACLS, 3, acls.DescribeAclsResponse(54, "off", ()),
         i32(0) + i16(54) + cs("off") + carr() + TAG),
    # CreateAcls
    req(acls, "create_acls", K.CREATE_ACLS, 0, acls.CreateAclsRequest((acls.AclCreation(2, "t", "User:a", "*", 3, 3),)),
        arr(binding_bytes(0))),
    req(acls, "create_acls", K.CREATE_ACLS, 2, acls.CreateAclsRequest((BINDING,)), carr(binding_bytes(2) + TAG) + TAG),
    resp(acls, "create_acls", K.CREATE_ACLS, 1, acls.CreateAclsResponse((acls.AclCreationResult(54, "off"),)),
         i32(0) + arr(i16(54) + s("off"))),
    resp(acls, "create_acls", K.CREATE_ACLS, 3, acls.CreateAclsResponse((acls.AclCreationResult(54, "off"),)),
         i32(0) + carr(i16(54) + cs("off") + TAG) + TAG),
    # DeleteAcls
    req(acls, "delete_acls", K.DELETE_ACLS, 1, acls.DeleteAclsRequest((FILTER,)), arr(filter_bytes(1))),
    req(acls, "delete_acls", K.DELETE_ACLS, 2, acls.DeleteAclsRequest((FILTER,)), carr(filter_bytes(2) + TAG) + TAG),
    resp(acls, "delete_acls", K.DELETE_ACLS, 1, acls.DeleteAclsResponse((acls.DeleteAclsFilterResult(0, None, (
        acls.DeleteAclsMatchingAcl(0, None, BINDING),)),)),
        i32(0) + arr(i16(0) + s(None) + arr(i16(0) + s(None) + binding_bytes(1)))),
    resp(acls, "delete_acls", K.DELETE_ACLS, 3, acls.DeleteAclsResponse((acls.DeleteAclsFilterResult(54, "off"),)),
         i32(0) + carr(i16(54) + cs("off") + carr() + TAG) + TAG),
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


@pytest.mark.parametrize("api, version", [(K.DESCRIBE_CLUSTER, 2), (K.ELECT_LEADERS, 3), (K.DESCRIBE_ACLS, 4),
                                          (K.CREATE_ACLS, 4), (K.DELETE_ACLS, 4)])
def test_versions_outside_the_ranges_are_protocol_errors(api: ApiKey, version: int) -> None:
    with pytest.raises(ProtocolError):
        decode_request(RequestHeader(api, version, 1, None), memoryview(b"\x00" * 64))


@pytest.mark.parametrize("data", [
    b"\x01" + b"\x00\x05ab",           # ElectLeaders v2: a topic array whose name runs past the end
    b"\x01\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00",  # a null topic name inside the array
])
def test_malformed_flexible_bodies_are_protocol_errors(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_request(RequestHeader(K.ELECT_LEADERS, 2, 1, None), memoryview(data))
