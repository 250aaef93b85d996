"""Table tests for the group API codecs (join_group, group_membership, offset_commit,
group_admin): one row of (version, dataclass, exact bytes) drives encoder and decoder, at
each version where a field appears or goes. Same checks as test_protocol_codecs: exact
bytes, trailing bytes tolerated, every truncation a ProtocolError, frames one byte at a time."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.request_handler import decode_request
from common.protocol import group_admin as ga
from common.protocol import group_membership as gm
from common.protocol import join_group as jg
from common.protocol import offset_commit as oc
from common.protocol import offset_fetch as of
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
    by,
    carr,
    cs,
    i16,
    i32,
    i64,
    ints,
    req,
    resp,
    s,
)

K = ApiKey

JOIN_PROTOCOLS = (jg.JoinGroupRequestProtocol("range", b"meta"),)
JOIN_V0 = jg.JoinGroupRequest("g", 10000, 10000, "", None, "consumer", JOIN_PROTOCOLS)
JOIN_V5 = jg.JoinGroupRequest("g", 10000, 300000, "m-1", "inst", "consumer", JOIN_PROTOCOLS)
JOIN_RESP = jg.JoinGroupResponse(0, 3, "range", "m-1", "m-1",
                                 (jg.JoinGroupResponseMember("m-1", "inst", b"meta"),))
JOIN_RESP_V0 = jg.JoinGroupResponse(79, -1, "", "", "m-9", ())
SYNC_V3 = jg.SyncGroupRequest("g", 3, "m-1", "inst", (jg.SyncGroupRequestAssignment("m-1", b"asg"),))
SYNC_V0 = jg.SyncGroupRequest("g", 3, "m-1", None, ())
LEAVE_V3 = gm.LeaveGroupRequest("g", (gm.MemberIdentity("m-1", None), gm.MemberIdentity("", "inst")))
COMMIT_PARTS = (oc.OffsetCommitRequestPartition(0, 42, -1, "meta"),
                oc.OffsetCommitRequestPartition(1, 7, -1, None))
COMMIT_V2 = oc.OffsetCommitRequest("g", 3, "m-1", (oc.OffsetCommitRequestTopic("t", COMMIT_PARTS),), None, -1)
COMMIT_V7 = oc.OffsetCommitRequest("g", 3, "m-1", (oc.OffsetCommitRequestTopic(
    "t", (oc.OffsetCommitRequestPartition(0, 42, 5, "meta"),)),), "inst")
COMMIT_RESP = oc.OffsetCommitResponse((oc.TopicErrors("t", (oc.PartitionError(0, 0), oc.PartitionError(1, 12))),))
FETCH_PART = of.OffsetFetchResponsePartition(0, 42, 5, "meta", 0)
DESCRIBED = ga.DescribedGroup(0, "g", "Stable", "consumer", "range", (
    ga.DescribedGroupMember("m-1", "inst", "client", "/127.0.0.1", b"sub", b"asg"),))

ROWS = [
    req(jg, "join_group", K.JOIN_GROUP, 0, JOIN_V0,
        s("g") + i32(10000) + s("") + s("consumer") + arr(s("range") + by(b"meta"))),
    req(jg, "join_group", K.JOIN_GROUP, 5, JOIN_V5,
        s("g") + i32(10000) + i32(300000) + s("m-1") + s("inst") + s("consumer") + arr(s("range") + by(b"meta"))),
    resp(jg, "join_group", K.JOIN_GROUP, 0, JOIN_RESP_V0, i16(79) + i32(-1) + s("") + s("") + s("m-9") + arr()),
    resp(jg, "join_group", K.JOIN_GROUP, 2, jg.JoinGroupResponse(0, 3, "range", "m-1", "m-1",
                                                                 (jg.JoinGroupResponseMember("m-1", None, b"meta"),)),
         i32(0) + i16(0) + i32(3) + s("range") + s("m-1") + s("m-1") + arr(s("m-1") + by(b"meta"))),
    resp(jg, "join_group", K.JOIN_GROUP, 5, JOIN_RESP,
         i32(0) + i16(0) + i32(3) + s("range") + s("m-1") + s("m-1") + arr(s("m-1") + s("inst") + by(b"meta"))),
    req(jg, "join_group", K.JOIN_GROUP, 6, JOIN_V5,
        cs("g") + i32(10000) + i32(300000) + cs("m-1") + cs("inst") + cs("consumer")
        + carr(cs("range") + b"\x05meta" + TAG) + TAG),
    resp(jg, "join_group", K.JOIN_GROUP, 6, JOIN_RESP,
         i32(0) + i16(0) + i32(3) + cs("range") + cs("m-1") + cs("m-1")
         + carr(cs("m-1") + cs("inst") + b"\x05meta" + TAG) + TAG),
    req(jg, "sync_group", K.SYNC_GROUP, 4, SYNC_V3,
        cs("g") + i32(3) + cs("m-1") + cs("inst") + carr(cs("m-1") + b"\x04asg" + TAG) + TAG),
    resp(jg, "sync_group", K.SYNC_GROUP, 4, jg.SyncGroupResponse(0, b"asg"), i32(0) + i16(0) + b"\x04asg" + TAG),
    req(jg, "sync_group", K.SYNC_GROUP, 0, SYNC_V0, s("g") + i32(3) + s("m-1") + arr()),
    req(jg, "sync_group", K.SYNC_GROUP, 3, SYNC_V3,
        s("g") + i32(3) + s("m-1") + s("inst") + arr(s("m-1") + by(b"asg"))),
    resp(jg, "sync_group", K.SYNC_GROUP, 0, jg.SyncGroupResponse(27, b""), i16(27) + by(b"")),
    resp(jg, "sync_group", K.SYNC_GROUP, 3, jg.SyncGroupResponse(0, b"asg"), i32(0) + i16(0) + by(b"asg")),
    req(gm, "heartbeat", K.HEARTBEAT, 0, gm.HeartbeatRequest("g", 3, "m-1"), s("g") + i32(3) + s("m-1")),
    req(gm, "heartbeat", K.HEARTBEAT, 3, gm.HeartbeatRequest("g", 3, "m-1", "inst"),
        s("g") + i32(3) + s("m-1") + s("inst")),
    resp(gm, "heartbeat", K.HEARTBEAT, 0, gm.HeartbeatResponse(27), i16(27)),
    resp(gm, "heartbeat", K.HEARTBEAT, 3, gm.HeartbeatResponse(0), i32(0) + i16(0)),
    req(gm, "heartbeat", K.HEARTBEAT, 4, gm.HeartbeatRequest("g", 3, "m-1", None),
        cs("g") + i32(3) + cs("m-1") + cs(None) + TAG),
    resp(gm, "heartbeat", K.HEARTBEAT, 4, gm.HeartbeatResponse(27), i32(0) + i16(27) + TAG),
    req(gm, "leave_group", K.LEAVE_GROUP, 4, LEAVE_V3,
        cs("g") + carr(cs("m-1") + cs(None) + TAG, cs("") + cs("inst") + TAG) + TAG),
    resp(gm, "leave_group", K.LEAVE_GROUP, 4, gm.LeaveGroupResponse(0, (gm.MemberResponse("m-1", None, 0),)),
         i32(0) + i16(0) + carr(cs("m-1") + cs(None) + i16(0) + TAG) + TAG),
    req(gm, "leave_group", K.LEAVE_GROUP, 0, gm.LeaveGroupRequest("g", (gm.MemberIdentity("m-1"),)),
        s("g") + s("m-1")),
    req(gm, "leave_group", K.LEAVE_GROUP, 3, LEAVE_V3, s("g") + arr(s("m-1") + s(None), s("") + s("inst"))),
    resp(gm, "leave_group", K.LEAVE_GROUP, 0, gm.LeaveGroupResponse(25), i16(25)),
    resp(gm, "leave_group", K.LEAVE_GROUP, 3, gm.LeaveGroupResponse(0, (gm.MemberResponse("m-1", None, 0),
                                                                        gm.MemberResponse("", "inst", 82))),
         i32(0) + i16(0) + arr(s("m-1") + s(None) + i16(0), s("") + s("inst") + i16(82))),
    req(oc, "offset_commit", K.OFFSET_COMMIT, 2, COMMIT_V2,
        s("g") + i32(3) + s("m-1") + i64(-1)
        + arr(s("t") + arr(i32(0) + i64(42) + s("meta"), i32(1) + i64(7) + s(None)))),
    req(oc, "offset_commit", K.OFFSET_COMMIT, 7, COMMIT_V7,
        s("g") + i32(3) + s("m-1") + s("inst") + arr(s("t") + arr(i32(0) + i64(42) + i32(5) + s("meta")))),
    resp(oc, "offset_commit", K.OFFSET_COMMIT, 2, COMMIT_RESP,
         arr(s("t") + arr(i32(0) + i16(0), i32(1) + i16(12)))),
    resp(oc, "offset_commit", K.OFFSET_COMMIT, 7, COMMIT_RESP,
         i32(0) + arr(s("t") + arr(i32(0) + i16(0), i32(1) + i16(12)))),
    req(of, "offset_fetch", K.OFFSET_FETCH, 1, of.OffsetFetchRequest("g", (of.OffsetFetchRequestTopic("t", (0, 1)),)),
        s("g") + arr(s("t") + ints(0, 1))),
    req(of, "offset_fetch", K.OFFSET_FETCH, 5, of.OffsetFetchRequest("g", None), s("g") + i32(-1)),
    resp(of, "offset_fetch", K.OFFSET_FETCH, 1,
         of.OffsetFetchResponse((of.OffsetFetchResponseTopic("t", (of.OffsetFetchResponsePartition(0, 42, -1, "meta", 0),)),)),
         arr(s("t") + arr(i32(0) + i64(42) + s("meta") + i16(0)))),
    resp(of, "offset_fetch", K.OFFSET_FETCH, 5,
         of.OffsetFetchResponse((of.OffsetFetchResponseTopic("t", (FETCH_PART,)),), 14),
         i32(0) + arr(s("t") + arr(i32(0) + i64(42) + i32(5) + s("meta") + i16(0))) + i16(14)),
    # the flexible versions: OffsetCommit 8, OffsetFetch 6 and 7 (require_stable)
    req(oc, "offset_commit", K.OFFSET_COMMIT, 8, COMMIT_V7,
        cs("g") + i32(3) + cs("m-1") + cs("inst")
        + carr(cs("t") + carr(i32(0) + i64(42) + i32(5) + cs("meta") + TAG) + TAG) + TAG),
    resp(oc, "offset_commit", K.OFFSET_COMMIT, 8, COMMIT_RESP,
         i32(0) + carr(cs("t") + carr(i32(0) + i16(0) + TAG, i32(1) + i16(12) + TAG) + TAG) + TAG),
    req(of, "offset_fetch", K.OFFSET_FETCH, 6, of.OffsetFetchRequest("g", (of.OffsetFetchRequestTopic("t", (0, 1)),)),
        cs("g") + carr(cs("t") + carr(i32(0), i32(1)) + TAG) + TAG),
    req(of, "offset_fetch", K.OFFSET_FETCH, 7, of.OffsetFetchRequest("g", None, True), cs("g") + b"\x00" + b(True) + TAG),
    *[resp(of, "offset_fetch", K.OFFSET_FETCH, v,
           of.OffsetFetchResponse((of.OffsetFetchResponseTopic("t", (FETCH_PART,)),), 14),
           i32(0) + carr(cs("t") + carr(i32(0) + i64(42) + i32(5) + cs("meta") + i16(0) + TAG) + TAG) + i16(14) + TAG)
      for v in (6, 7)],
    req(oc, "offset_delete", K.OFFSET_DELETE, 0,
        oc.OffsetDeleteRequest("g", (oc.OffsetDeleteRequestTopic("t", (0, 2)),)), s("g") + arr(s("t") + ints(0, 2))),
    resp(oc, "offset_delete", K.OFFSET_DELETE, 0,
         oc.OffsetDeleteResponse(0, (oc.TopicErrors("t", (oc.PartitionError(0, 86),)),)),
         i16(0) + i32(0) + arr(s("t") + arr(i32(0) + i16(86)))),
    req(ga, "describe_groups", K.DESCRIBE_GROUPS, 0, ga.DescribeGroupsRequest(("g", "h")), arr(s("g"), s("h"))),
    req(ga, "describe_groups", K.DESCRIBE_GROUPS, 4, ga.DescribeGroupsRequest(("g",), True), arr(s("g")) + b(True)),
    resp(ga, "describe_groups", K.DESCRIBE_GROUPS, 0, ga.DescribeGroupsResponse((ga.DescribedGroup(
        0, "g", "Stable", "consumer", "range", (ga.DescribedGroupMember("m-1", None, "client", "/127.0.0.1",
                                                                        b"sub", b"asg"),)),)),
         arr(i16(0) + s("g") + s("Stable") + s("consumer") + s("range")
             + arr(s("m-1") + s("client") + s("/127.0.0.1") + by(b"sub") + by(b"asg")))),
    resp(ga, "describe_groups", K.DESCRIBE_GROUPS, 4, ga.DescribeGroupsResponse((DESCRIBED,)),
         i32(0) + arr(i16(0) + s("g") + s("Stable") + s("consumer") + s("range")
                      + arr(s("m-1") + s("inst") + s("client") + s("/127.0.0.1") + by(b"sub") + by(b"asg"))
                      + i32(-2147483648))),
    req(ga, "list_groups", K.LIST_GROUPS, 2, ga.ListGroupsRequest(), b""),
    resp(ga, "list_groups", K.LIST_GROUPS, 0, ga.ListGroupsResponse(0, (ga.ListedGroup("g", "consumer"),)),
         i16(0) + arr(s("g") + s("consumer"))),
    resp(ga, "list_groups", K.LIST_GROUPS, 2, ga.ListGroupsResponse(14, ()), i32(0) + i16(14) + arr()),
    req(ga, "delete_groups", K.DELETE_GROUPS, 1, ga.DeleteGroupsRequest(("g",)), arr(s("g"))),
    resp(ga, "delete_groups", K.DELETE_GROUPS, 0, ga.DeleteGroupsResponse((ga.DeletableGroupResult("g", 68),)),
         i32(0) + arr(s("g") + i16(68))),
    # the flexible versions: DescribeGroups 5, ListGroups 3 and 4 (states), DeleteGroups 2
    req(ga, "describe_groups", K.DESCRIBE_GROUPS, 5, ga.DescribeGroupsRequest(("g",), True),
        carr(cs("g")) + b(True) + TAG),
    resp(ga, "describe_groups", K.DESCRIBE_GROUPS, 5, ga.DescribeGroupsResponse((DESCRIBED,)),
         i32(0) + carr(i16(0) + cs("g") + cs("Stable") + cs("consumer") + cs("range")
                       + carr(cs("m-1") + cs("inst") + cs("client") + cs("/127.0.0.1") + b"\x04sub" + b"\x04asg" + TAG)
                       + i32(-2147483648) + TAG) + TAG),
    req(ga, "list_groups", K.LIST_GROUPS, 3, ga.ListGroupsRequest(), TAG),
    req(ga, "list_groups", K.LIST_GROUPS, 4, ga.ListGroupsRequest(("Stable", "empty")),
        carr(cs("Stable"), cs("empty")) + TAG),
    resp(ga, "list_groups", K.LIST_GROUPS, 3, ga.ListGroupsResponse(0, (ga.ListedGroup("g", "consumer"),)),
         i32(0) + i16(0) + carr(cs("g") + cs("consumer") + TAG) + TAG),
    resp(ga, "list_groups", K.LIST_GROUPS, 4, ga.ListGroupsResponse(0, (ga.ListedGroup("g", "consumer", "Stable"),)),
         i32(0) + i16(0) + carr(cs("g") + cs("consumer") + cs("Stable") + TAG) + TAG),
    req(ga, "delete_groups", K.DELETE_GROUPS, 2, ga.DeleteGroupsRequest(("g", "h")), carr(cs("g"), cs("h")) + TAG),
    resp(ga, "delete_groups", K.DELETE_GROUPS, 2, ga.DeleteGroupsResponse((ga.DeletableGroupResult("g", 68),)),
         i32(0) + carr(cs("g") + i16(68) + TAG) + TAG),
]
# Kafka 3.9's newer versions (issue 18): JoinGroup 7-9, SyncGroup 5, LeaveGroup 5, OffsetCommit
# 0, 1 and 9, OffsetFetch 0, 8 and 9, ListGroups 5.
JOIN_V8 = replace(JOIN_V5, reason="poll timeout")
JOIN_V6_BYTES = (cs("g") + i32(10000) + i32(300000) + cs("m-1") + cs("inst") + cs("consumer")
                 + carr(cs("range") + b"\x05meta" + TAG))
JOIN_RESP_V7 = replace(JOIN_RESP, protocol_type="consumer")
JOIN_RESP_V7_BYTES_HEAD = i32(0) + i16(0) + i32(3) + cs("consumer") + cs("range") + cs("m-1")
JOIN_RESP_MEMBERS = cs("m-1") + carr(cs("m-1") + cs("inst") + b"\x05meta" + TAG) + TAG
SYNC_V5 = replace(SYNC_V3, protocol_type="consumer", protocol_name="range")
LEAVE_V5 = gm.LeaveGroupRequest("g", (gm.MemberIdentity("m-1", None, "shutting down"), gm.MemberIdentity("", "inst")))
COMMIT_V0 = oc.OffsetCommitRequest("g", -1, "", (oc.OffsetCommitRequestTopic(
    "t", (oc.OffsetCommitRequestPartition(0, 42, -1, "meta"),)),))
COMMIT_V1 = oc.OffsetCommitRequest("g", 3, "m-1", (oc.OffsetCommitRequestTopic(
    "t", (oc.OffsetCommitRequestPartition(0, 42, -1, "meta", 1700000000000),)),))
FETCH_V8 = of.OffsetFetchRequest("", None, False, (
    of.OffsetFetchRequestGroup("g", (of.OffsetFetchRequestTopic("t", (0, 1)),)), of.OffsetFetchRequestGroup("h", None)))
FETCH_V9 = of.OffsetFetchRequest("", None, True, (of.OffsetFetchRequestGroup("g", None, "m-1", 3),))
FETCH_RESP_V8 = of.OffsetFetchResponse((), groups=(
    of.OffsetFetchResponseGroup("g", (of.OffsetFetchResponseTopic("t", (FETCH_PART,)),)),
    of.OffsetFetchResponseGroup("h", (), 15)))

ROWS += [
    req(jg, "join_group", K.JOIN_GROUP, 7, JOIN_V5, JOIN_V6_BYTES + TAG),
    *[req(jg, "join_group", K.JOIN_GROUP, v, JOIN_V8, JOIN_V6_BYTES + cs("poll timeout") + TAG) for v in (8, 9)],
    req(jg, "join_group", K.JOIN_GROUP, 8, JOIN_V5, JOIN_V6_BYTES + cs(None) + TAG),
    *[resp(jg, "join_group", K.JOIN_GROUP, v, JOIN_RESP_V7, JOIN_RESP_V7_BYTES_HEAD + JOIN_RESP_MEMBERS) for v in (7, 8)],
    resp(jg, "join_group", K.JOIN_GROUP, 7, jg.JoinGroupResponse(79, -1, None, "", "m-9"),
         i32(0) + i16(79) + i32(-1) + cs(None) + cs(None) + cs("") + cs("m-9") + carr() + TAG),
    resp(jg, "join_group", K.JOIN_GROUP, 9, replace(JOIN_RESP_V7, skip_assignment=True),
         JOIN_RESP_V7_BYTES_HEAD + b(True) + JOIN_RESP_MEMBERS),
    req(jg, "sync_group", K.SYNC_GROUP, 5, SYNC_V5,
        cs("g") + i32(3) + cs("m-1") + cs("inst") + cs("consumer") + cs("range")
        + carr(cs("m-1") + b"\x04asg" + TAG) + TAG),
    resp(jg, "sync_group", K.SYNC_GROUP, 5, jg.SyncGroupResponse(0, b"asg", 0, "consumer", "range"),
         i32(0) + i16(0) + cs("consumer") + cs("range") + b"\x04asg" + TAG),
    resp(jg, "sync_group", K.SYNC_GROUP, 5, jg.SyncGroupResponse(23, b""),
         i32(0) + i16(23) + cs(None) + cs(None) + b"\x01" + TAG),
    req(gm, "leave_group", K.LEAVE_GROUP, 5, LEAVE_V5,
        cs("g") + carr(cs("m-1") + cs(None) + cs("shutting down") + TAG, cs("") + cs("inst") + cs(None) + TAG) + TAG),
    resp(gm, "leave_group", K.LEAVE_GROUP, 5, gm.LeaveGroupResponse(0, (gm.MemberResponse("m-1", None, 0),)),
         i32(0) + i16(0) + carr(cs("m-1") + cs(None) + i16(0) + TAG) + TAG),
    req(oc, "offset_commit", K.OFFSET_COMMIT, 0, COMMIT_V0, s("g") + arr(s("t") + arr(i32(0) + i64(42) + s("meta")))),
    req(oc, "offset_commit", K.OFFSET_COMMIT, 1, COMMIT_V1,
        s("g") + i32(3) + s("m-1") + arr(s("t") + arr(i32(0) + i64(42) + i64(1700000000000) + s("meta")))),
    *[resp(oc, "offset_commit", K.OFFSET_COMMIT, v, COMMIT_RESP, arr(s("t") + arr(i32(0) + i16(0), i32(1) + i16(12))))
      for v in (0, 1)],
    req(oc, "offset_commit", K.OFFSET_COMMIT, 9, COMMIT_V7,
        cs("g") + i32(3) + cs("m-1") + cs("inst")
        + carr(cs("t") + carr(i32(0) + i64(42) + i32(5) + cs("meta") + TAG) + TAG) + TAG),
    resp(oc, "offset_commit", K.OFFSET_COMMIT, 9, COMMIT_RESP,
         i32(0) + carr(cs("t") + carr(i32(0) + i16(0) + TAG, i32(1) + i16(12) + TAG) + TAG) + TAG),
    req(of, "offset_fetch", K.OFFSET_FETCH, 0, of.OffsetFetchRequest("g", (of.OffsetFetchRequestTopic("t", (0, 1)),)),
        s("g") + arr(s("t") + ints(0, 1))),
    resp(of, "offset_fetch", K.OFFSET_FETCH, 0,
         of.OffsetFetchResponse((of.OffsetFetchResponseTopic("t", (of.OffsetFetchResponsePartition(0, 42, -1, "meta", 0),)),)),
         arr(s("t") + arr(i32(0) + i64(42) + s("meta") + i16(0)))),
    req(of, "offset_fetch", K.OFFSET_FETCH, 8, FETCH_V8,
        carr(cs("g") + carr(cs("t") + carr(i32(0), i32(1)) + TAG) + TAG, cs("h") + b"\x00" + TAG) + b(False) + TAG),
    req(of, "offset_fetch", K.OFFSET_FETCH, 9, FETCH_V9, carr(cs("g") + cs("m-1") + i32(3) + b"\x00" + TAG) + b(True) + TAG),
    *[resp(of, "offset_fetch", K.OFFSET_FETCH, v, FETCH_RESP_V8,
           i32(0) + carr(cs("g") + carr(cs("t") + carr(i32(0) + i64(42) + i32(5) + cs("meta") + i16(0) + TAG) + TAG)
                         + i16(0) + TAG, cs("h") + carr() + i16(15) + TAG) + TAG) for v in (8, 9)],
    req(ga, "list_groups", K.LIST_GROUPS, 5, ga.ListGroupsRequest(("Stable",), ("classic", "Consumer")),
        carr(cs("Stable")) + carr(cs("classic"), cs("Consumer")) + TAG),
    resp(ga, "list_groups", K.LIST_GROUPS, 5, ga.ListGroupsResponse(0, (ga.ListedGroup("g", "consumer", "Stable", "classic"),)),
         i32(0) + i16(0) + carr(cs("g") + cs("consumer") + cs("Stable") + cs("classic") + TAG) + TAG),
]
REQUESTS = [r for r in ROWS if r.decode.__name__.endswith("_request")]
RESPONSES = [r for r in ROWS if r.decode.__name__.endswith("_response")]


def row_id(row: Row) -> str:
    return f"{ApiKey(row.api_key).name}-v{row.version}-{row.decode.__name__.rsplit('_', 1)[1]}"


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_codec_rows(row: Row) -> None:
    check_codec_row(row)


@pytest.mark.parametrize("row", REQUESTS, ids=row_id)
def test_request_frame_fed_one_byte_at_a_time(row: Row) -> None:
    check_request_frame(row)


@pytest.mark.parametrize("row", RESPONSES, ids=row_id)
def test_dispatch_encodes_responses(row: Row) -> None:
    check_dispatch(row)


def test_join_group_protocol_name_is_never_null_before_v7() -> None:
    """Kafka's JoinGroupResponse: an absent protocol name is "" where the field is not nullable."""
    body = jg.encode_join_group_response(jg.JoinGroupResponse(79, -1, None, "", "m-9"), 6)
    assert b"".join(bytes(c) for c in body) == i32(0) + i16(79) + i32(-1) + cs("") + cs("") + cs("m-9") + carr() + TAG


# Kafka 3.9's maximum of each group API, plus one (and its first versions are all answered)
@pytest.mark.parametrize("api, version", [(K.JOIN_GROUP, 10), (K.SYNC_GROUP, 6), (K.OFFSET_COMMIT, 10),
                                          (K.OFFSET_FETCH, 10), (K.DESCRIBE_GROUPS, 6), (K.HEARTBEAT, 5),
                                          (K.LEAVE_GROUP, 6), (K.LIST_GROUPS, 6), (K.DELETE_GROUPS, 3),
                                          (K.OFFSET_DELETE, 1), (K.FIND_COORDINATOR, 6), (K.LIST_OFFSETS, 10)])
def test_versions_outside_the_ranges_are_protocol_errors(api: ApiKey, version: int) -> None:
    with pytest.raises(ProtocolError):
        decode_request(RequestHeader(api, version, 1, None), memoryview(b"\x00" * 64))
