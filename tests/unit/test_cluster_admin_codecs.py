"""Table tests for the flexible admin APIs: DescribeCluster (v0–v1) and ElectLeaders (v0–v2)
on kio's generated messages, DescribeAcls / CreateAcls / DeleteAcls (v0–v3) on our codec. One row of (version, dataclass, exact bytes)
drives encoder and decoder at each version where a field appears or the encoding turns
flexible. Same checks as test_protocol_codecs: exact bytes, trailing bytes tolerated, every
truncation a ProtocolError, request frames (header v2 when flexible) one byte at a time."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from broker.request_handler import decode_request
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


FILTER = (2, "t", None, "*", 3, 1, 3)  # ACL APIs: kio's messages from v1, v0 by hand (acls.codec)
BINDING = (2, "t", "User:a", "*", 3, 3, 3)
OFF = ErrorCode.SECURITY_DISABLED


def acl_req(key: ApiKey, version: int, value: Any, data: bytes) -> Row:
    def decode_acl_request(body: memoryview, v: int) -> Any:
        return acls.codec(key).decode(body, v)
    return Row(key, version, value, data, decode_acl_request, acls.encode_request)


def acl_resp(key: ApiKey, version: int, value: Any, data: bytes) -> Row:
    def decode_acl_response(body: memoryview, v: int) -> Any:
        return acls.response_decoder(key)(body, v)
    return Row(key, version, value, data, decode_acl_response, acls.codec(key).encode)


def described(version: int, *resources: tuple[int, str, tuple[tuple[str, str, int, int], ...]]) -> Any:
    m = messages.response_module(K.DESCRIBE_ACLS, acls.schema_version(version))
    return m.DescribeAclsResponse(throttle_time=messages.NO_THROTTLE, error_code=OFF, error_message="off",
                                  resources=tuple(m.DescribeAclsResource(
                                      resource_type=t, resource_name=n, pattern_type=3, acls=tuple(
                                          m.AclDescription(principal=p, host=h, operation=o, permission_type=pt)
                                          for p, h, o, pt in entries)) for t, n, entries in resources))


def created(version: int) -> Any:
    m = messages.response_module(K.CREATE_ACLS, acls.schema_version(version))
    return m.CreateAclsResponse(throttle_time=messages.NO_THROTTLE,
                                results=(m.AclCreationResult(error_code=OFF, error_message="off"),))


def deleted(version: int, matched: bool) -> Any:
    m = messages.response_module(K.DELETE_ACLS, acls.schema_version(version))
    t, n, who, host, op, perm, pattern = BINDING
    matches = (m.DeleteAclsMatchingAcl(error_code=ErrorCode.NONE, error_message=None, resource_type=t, resource_name=n,
                                       pattern_type=pattern, principal=who, host=host, operation=op,
                                       permission_type=perm),) if matched else ()
    return m.DeleteAclsResponse(throttle_time=messages.NO_THROTTLE, filter_results=(m.DeleteAclsFilterResult(
        error_code=ErrorCode.NONE if matched else OFF, error_message=None if matched else "off",
        matching_acls=matches),))


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
    *[acl_req(K.DESCRIBE_ACLS, v, acls.describe_request(v, FILTER), filter_bytes(v)) for v in (0, 1)],
    *[acl_req(K.DESCRIBE_ACLS, v, acls.describe_request(v, FILTER), filter_bytes(v) + TAG) for v in (2, 3)],
    acl_resp(K.DESCRIBE_ACLS, 0, described(0, (2, "t", (("User:a", "*", 3, 3),))),
             i32(0) + i16(54) + s("off") + arr(i8(2) + s("t") + arr(s("User:a") + s("*") + i8(3) + i8(3)))),
    acl_resp(K.DESCRIBE_ACLS, 1, described(1, (2, "t", (("User:a", "*", 3, 3),))),
             i32(0) + i16(54) + s("off") + arr(i8(2) + s("t") + i8(3) + arr(s("User:a") + s("*") + i8(3) + i8(3)))),
    acl_resp(K.DESCRIBE_ACLS, 3, described(3), i32(0) + i16(54) + cs("off") + carr() + TAG),
    # CreateAcls
    acl_req(K.CREATE_ACLS, 0, acls.create_request(0, BINDING), arr(binding_bytes(0))),
    acl_req(K.CREATE_ACLS, 2, acls.create_request(2, BINDING), carr(binding_bytes(2) + TAG) + TAG),
    *[acl_resp(K.CREATE_ACLS, v, created(v), i32(0) + arr(i16(54) + s("off"))) for v in (0, 1)],
    acl_resp(K.CREATE_ACLS, 3, created(3), i32(0) + carr(i16(54) + cs("off") + TAG) + TAG),
    # DeleteAcls
    *[acl_req(K.DELETE_ACLS, v, acls.delete_request(v, FILTER), arr(filter_bytes(v))) for v in (0, 1)],
    acl_req(K.DELETE_ACLS, 2, acls.delete_request(2, FILTER), carr(filter_bytes(2) + TAG) + TAG),
    *[acl_resp(K.DELETE_ACLS, v, deleted(v, True),
               i32(0) + arr(i16(0) + s(None) + arr(i16(0) + s(None) + binding_bytes(v)))) for v in (0, 1)],
    acl_resp(K.DELETE_ACLS, 3, deleted(3, False), i32(0) + carr(i16(54) + cs("off") + carr() + TAG) + TAG),
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
