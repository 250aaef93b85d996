"""Table tests for the group APIs' messages (kio's generated ones; OffsetCommit v0/v1 by hand
in common/protocol/offset_commit.py, OffsetFetch v0 on v1's classes): one row of (version,
message, exact bytes) drives encoder and decoder, at each version where a field appears or
goes. Same checks as test_protocol_codecs: exact bytes, trailing bytes tolerated, every
truncation a ProtocolError, frames one byte at a time, the broker's dispatch encodes alike."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from broker.handlers.groups import _join_response
from broker.request_handler import decode_request
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol import offset_commit as oc
from common.protocol.api_keys import ApiKey
from common.protocol.frame import RequestHeader, join_chunks
from common.protocol.primitives import ProtocolError
from groups.outcome import JoinResult
from tests.unit.test_protocol_codecs import (
    TAG,
    Row,
    arr,
    b,
    by,
    carr,
    check_codec_row,
    check_dispatch,
    check_request_frame,
    codec_req,
    codec_resp,
    cs,
    i16,
    i32,
    i64,
    ints,
    kio_req,
    kio_resp,
    s,
)

K = ApiKey
OMITTED = -2147483648  # DescribeGroups' authorized_operations when not asked for


def rq(key: int, version: int, entity: str, /, **fields: Any) -> Any:
    """An entity of kio's request module for (key, version); fields it lacks are dropped."""
    return messages.build(getattr(messages.request_module(key, version), entity), **fields)


def rs(key: int, version: int, entity: str, /, **fields: Any) -> Any:
    return messages.build(getattr(messages.response_module(key, version), entity), **fields)


def ms(value: int) -> timedelta:
    return timedelta(milliseconds=value)


# ---- JoinGroup, SyncGroup -----------------------------------------------------------------

def join_req(v: int, rebalance: int, member: str, instance: str | None, reason: str | None = None) -> Any:
    return rq(K.JOIN_GROUP, v, "JoinGroupRequest", group_id="g", session_timeout=ms(10000),
              rebalance_timeout=ms(rebalance), member_id=member, group_instance_id=instance,
              protocol_type="consumer", reason=reason,
              protocols=(rq(K.JOIN_GROUP, v, "JoinGroupRequestProtocol", name="range", metadata=b"meta"),))


def join_resp(v: int, error: int, generation: int, name: str | None, leader: str, member: str,
              members: tuple[tuple[str, str | None], ...] = (), protocol_type: str | None = None,
              skip: bool = False) -> Any:
    return rs(K.JOIN_GROUP, v, "JoinGroupResponse", throttle_time=ms(0), error_code=ErrorCode(error),
              generation_id=generation, protocol_type=protocol_type, protocol_name=name, leader=leader,
              skip_assignment=skip, member_id=member, members=tuple(
                  rs(K.JOIN_GROUP, v, "JoinGroupResponseMember", member_id=m, group_instance_id=i, metadata=b"meta")
                  for m, i in members))


def sync_req(v: int, instance: str | None, assignments: tuple[tuple[str, bytes], ...],
             protocol_type: str | None = None, protocol_name: str | None = None) -> Any:
    return rq(K.SYNC_GROUP, v, "SyncGroupRequest", group_id="g", generation_id=3, member_id="m-1",
              group_instance_id=instance, protocol_type=protocol_type, protocol_name=protocol_name,
              assignments=tuple(rq(K.SYNC_GROUP, v, "SyncGroupRequestAssignment", member_id=m, assignment=a)
                                for m, a in assignments))


def sync_resp(v: int, error: int, assignment: bytes, protocol_type: str | None = None,
              protocol_name: str | None = None) -> Any:
    return rs(K.SYNC_GROUP, v, "SyncGroupResponse", throttle_time=ms(0), error_code=ErrorCode(error),
              protocol_type=protocol_type, protocol_name=protocol_name, assignment=assignment)


JOIN_MEMBERS = (("m-1", "inst"),)
JOIN_V6_BYTES = (cs("g") + i32(10000) + i32(300000) + cs("m-1") + cs("inst") + cs("consumer")
                 + carr(cs("range") + b"\x05meta" + TAG))
JOIN_RESP_V7_BYTES_HEAD = i32(0) + i16(0) + i32(3) + cs("consumer") + cs("range") + cs("m-1")
JOIN_RESP_MEMBERS = cs("m-1") + carr(cs("m-1") + cs("inst") + b"\x05meta" + TAG) + TAG

JOIN_SYNC_REQUESTS = [
    kio_req(K.JOIN_GROUP, 0, join_req(0, 10000, "", None),
            s("g") + i32(10000) + s("") + s("consumer") + arr(s("range") + by(b"meta"))),
    kio_req(K.JOIN_GROUP, 5, join_req(5, 300000, "m-1", "inst"),
            s("g") + i32(10000) + i32(300000) + s("m-1") + s("inst") + s("consumer") + arr(s("range") + by(b"meta"))),
    kio_req(K.JOIN_GROUP, 6, join_req(6, 300000, "m-1", "inst"), JOIN_V6_BYTES + TAG),
    kio_req(K.JOIN_GROUP, 7, join_req(7, 300000, "m-1", "inst"), JOIN_V6_BYTES + TAG),
    *[kio_req(K.JOIN_GROUP, v, join_req(v, 300000, "m-1", "inst", "poll timeout"),
              JOIN_V6_BYTES + cs("poll timeout") + TAG) for v in (8, 9)],
    kio_req(K.JOIN_GROUP, 8, join_req(8, 300000, "m-1", "inst"), JOIN_V6_BYTES + cs(None) + TAG),
    kio_req(K.SYNC_GROUP, 0, sync_req(0, None, ()), s("g") + i32(3) + s("m-1") + arr()),
    kio_req(K.SYNC_GROUP, 3, sync_req(3, "inst", (("m-1", b"asg"),)),
            s("g") + i32(3) + s("m-1") + s("inst") + arr(s("m-1") + by(b"asg"))),
    kio_req(K.SYNC_GROUP, 4, sync_req(4, "inst", (("m-1", b"asg"),)),
            cs("g") + i32(3) + cs("m-1") + cs("inst") + carr(cs("m-1") + b"\x04asg" + TAG) + TAG),
    kio_req(K.SYNC_GROUP, 5, sync_req(5, "inst", (("m-1", b"asg"),), "consumer", "range"),
            cs("g") + i32(3) + cs("m-1") + cs("inst") + cs("consumer") + cs("range")
            + carr(cs("m-1") + b"\x04asg" + TAG) + TAG),
]
JOIN_SYNC_RESPONSES = [
    kio_resp(K.JOIN_GROUP, 0, join_resp(0, 79, -1, "", "", "m-9"), i16(79) + i32(-1) + s("") + s("") + s("m-9") + arr()),
    kio_resp(K.JOIN_GROUP, 2, join_resp(2, 0, 3, "range", "m-1", "m-1", (("m-1", None),)),
             i32(0) + i16(0) + i32(3) + s("range") + s("m-1") + s("m-1") + arr(s("m-1") + by(b"meta"))),
    kio_resp(K.JOIN_GROUP, 5, join_resp(5, 0, 3, "range", "m-1", "m-1", JOIN_MEMBERS),
             i32(0) + i16(0) + i32(3) + s("range") + s("m-1") + s("m-1")
             + arr(s("m-1") + s("inst") + by(b"meta"))),
    kio_resp(K.JOIN_GROUP, 6, join_resp(6, 0, 3, "range", "m-1", "m-1", JOIN_MEMBERS),
             i32(0) + i16(0) + i32(3) + cs("range") + cs("m-1") + cs("m-1")
             + carr(cs("m-1") + cs("inst") + b"\x05meta" + TAG) + TAG),
    *[kio_resp(K.JOIN_GROUP, v, join_resp(v, 0, 3, "range", "m-1", "m-1", JOIN_MEMBERS, "consumer"),
               JOIN_RESP_V7_BYTES_HEAD + JOIN_RESP_MEMBERS) for v in (7, 8)],
    kio_resp(K.JOIN_GROUP, 7, join_resp(7, 79, -1, None, "", "m-9"),
             i32(0) + i16(79) + i32(-1) + cs(None) + cs(None) + cs("") + cs("m-9") + carr() + TAG),
    kio_resp(K.JOIN_GROUP, 9, join_resp(9, 0, 3, "range", "m-1", "m-1", JOIN_MEMBERS, "consumer", skip=True),
             JOIN_RESP_V7_BYTES_HEAD + b(True) + JOIN_RESP_MEMBERS),
    kio_resp(K.SYNC_GROUP, 0, sync_resp(0, 27, b""), i16(27) + by(b"")),
    kio_resp(K.SYNC_GROUP, 3, sync_resp(3, 0, b"asg"), i32(0) + i16(0) + by(b"asg")),
    kio_resp(K.SYNC_GROUP, 4, sync_resp(4, 0, b"asg"), i32(0) + i16(0) + b"\x04asg" + TAG),
    kio_resp(K.SYNC_GROUP, 5, sync_resp(5, 0, b"asg", "consumer", "range"),
             i32(0) + i16(0) + cs("consumer") + cs("range") + b"\x04asg" + TAG),
    kio_resp(K.SYNC_GROUP, 5, sync_resp(5, 23, b""), i32(0) + i16(23) + cs(None) + cs(None) + b"\x01" + TAG),
]


# ---- Heartbeat, LeaveGroup ----------------------------------------------------------------

def heartbeat_req(v: int, instance: str | None = None) -> Any:
    return rq(K.HEARTBEAT, v, "HeartbeatRequest", group_id="g", generation_id=3, member_id="m-1",
              group_instance_id=instance)


def heartbeat_resp(v: int, error: int) -> Any:
    return rs(K.HEARTBEAT, v, "HeartbeatResponse", throttle_time=ms(0), error_code=ErrorCode(error))


def leave_req(v: int, *members: tuple[str, str | None, str | None]) -> Any:
    if v < 3:  # one member, by id
        return rq(K.LEAVE_GROUP, v, "LeaveGroupRequest", group_id="g", member_id=members[0][0])
    return rq(K.LEAVE_GROUP, v, "LeaveGroupRequest", group_id="g", members=tuple(
        rq(K.LEAVE_GROUP, v, "MemberIdentity", member_id=m, group_instance_id=i, reason=r) for m, i, r in members))


def leave_resp(v: int, error: int, *members: tuple[str, str | None, int]) -> Any:
    if v < 3:
        return rs(K.LEAVE_GROUP, v, "LeaveGroupResponse", throttle_time=ms(0), error_code=ErrorCode(error))
    return rs(K.LEAVE_GROUP, v, "LeaveGroupResponse", throttle_time=ms(0), error_code=ErrorCode(error),
              members=tuple(rs(K.LEAVE_GROUP, v, "MemberResponse", member_id=m, group_instance_id=i,
                               error_code=ErrorCode(c)) for m, i, c in members))


LEAVING = (("m-1", None, None), ("", "inst", None))
MEMBERSHIP_REQUESTS = [
    kio_req(K.HEARTBEAT, 0, heartbeat_req(0), s("g") + i32(3) + s("m-1")),
    kio_req(K.HEARTBEAT, 3, heartbeat_req(3, "inst"), s("g") + i32(3) + s("m-1") + s("inst")),
    kio_req(K.HEARTBEAT, 4, heartbeat_req(4), cs("g") + i32(3) + cs("m-1") + cs(None) + TAG),
    kio_req(K.LEAVE_GROUP, 0, leave_req(0, ("m-1", None, None)), s("g") + s("m-1")),
    kio_req(K.LEAVE_GROUP, 3, leave_req(3, *LEAVING), s("g") + arr(s("m-1") + s(None), s("") + s("inst"))),
    kio_req(K.LEAVE_GROUP, 4, leave_req(4, *LEAVING),
            cs("g") + carr(cs("m-1") + cs(None) + TAG, cs("") + cs("inst") + TAG) + TAG),
    kio_req(K.LEAVE_GROUP, 5, leave_req(5, ("m-1", None, "shutting down"), ("", "inst", None)),
            cs("g") + carr(cs("m-1") + cs(None) + cs("shutting down") + TAG, cs("") + cs("inst") + cs(None) + TAG)
            + TAG),
]
MEMBERSHIP_RESPONSES = [
    kio_resp(K.HEARTBEAT, 0, heartbeat_resp(0, 27), i16(27)),
    kio_resp(K.HEARTBEAT, 3, heartbeat_resp(3, 0), i32(0) + i16(0)),
    kio_resp(K.HEARTBEAT, 4, heartbeat_resp(4, 27), i32(0) + i16(27) + TAG),
    kio_resp(K.LEAVE_GROUP, 0, leave_resp(0, 25), i16(25)),
    kio_resp(K.LEAVE_GROUP, 3, leave_resp(3, 0, ("m-1", None, 0), ("", "inst", 82)),
             i32(0) + i16(0) + arr(s("m-1") + s(None) + i16(0), s("") + s("inst") + i16(82))),
    *[kio_resp(K.LEAVE_GROUP, v, leave_resp(v, 0, ("m-1", None, 0)),
               i32(0) + i16(0) + carr(cs("m-1") + cs(None) + i16(0) + TAG) + TAG) for v in (4, 5)],
]


# ---- OffsetCommit, OffsetFetch, OffsetDelete ----------------------------------------------

def commit_req(v: int, instance: str | None, *parts: tuple[int, int, int, str | None]) -> Any:
    return rq(K.OFFSET_COMMIT, v, "OffsetCommitRequest", group_id="g", generation_id_or_member_epoch=3,
              member_id="m-1", group_instance_id=instance, retention_time=ms(-1), topics=(
                  rq(K.OFFSET_COMMIT, v, "OffsetCommitRequestTopic", name="t", partitions=tuple(
                      rq(K.OFFSET_COMMIT, v, "OffsetCommitRequestPartition", partition_index=p, committed_offset=o,
                         committed_leader_epoch=e, committed_metadata=m) for p, o, e, m in parts)),))


def commit_resp(v: int) -> Any:
    sv = oc.schema_version(v)
    return rs(K.OFFSET_COMMIT, sv, "OffsetCommitResponse", throttle_time=ms(0), topics=(
        rs(K.OFFSET_COMMIT, sv, "OffsetCommitResponseTopic", name="t", partitions=tuple(
            rs(K.OFFSET_COMMIT, sv, "OffsetCommitResponsePartition", partition_index=p, error_code=ErrorCode(c))
            for p, c in ((0, 0), (1, 12)))),))


def fetch_req(v: int, topics: tuple[tuple[str, tuple[int, ...]], ...] | None, require_stable: bool = False) -> Any:
    return rq(K.OFFSET_FETCH, v, "OffsetFetchRequest", group_id="g", require_stable=require_stable,
              topics=None if topics is None else tuple(
                  rq(K.OFFSET_FETCH, v, "OffsetFetchRequestTopic", name=t, partition_indexes=ps) for t, ps in topics))


def fetch_groups_req(v: int, require_stable: bool, *groups: tuple[str, Any, str | None, int]) -> Any:
    return rq(K.OFFSET_FETCH, v, "OffsetFetchRequest", require_stable=require_stable, groups=tuple(
        rq(K.OFFSET_FETCH, v, "OffsetFetchRequestGroup", group_id=g, member_id=member, member_epoch=epoch,
           topics=None if topics is None else tuple(
               rq(K.OFFSET_FETCH, v, "OffsetFetchRequestTopics", name=t, partition_indexes=ps) for t, ps in topics))
        for g, topics, member, epoch in groups))


FETCHED = (0, 42, 5, "meta", 0)


def fetched_topics(v: int, topic: str, partition: str, *parts: tuple[int, int, int, str, int]) -> tuple[Any, ...]:
    return (rs(K.OFFSET_FETCH, v, topic, name="t", partitions=tuple(
        rs(K.OFFSET_FETCH, v, partition, partition_index=i, committed_offset=o, committed_leader_epoch=e,
           metadata=m, error_code=ErrorCode(c)) for i, o, e, m, c in parts)),)


def fetch_resp(v: int, error: int, *parts: tuple[int, int, int, str, int]) -> Any:
    return rs(K.OFFSET_FETCH, v, "OffsetFetchResponse", throttle_time=ms(0), error_code=ErrorCode(error),
              topics=fetched_topics(v, "OffsetFetchResponseTopic", "OffsetFetchResponsePartition", *parts))


def fetch_groups_resp(v: int) -> Any:
    return rs(K.OFFSET_FETCH, v, "OffsetFetchResponse", throttle_time=ms(0), groups=(
        rs(K.OFFSET_FETCH, v, "OffsetFetchResponseGroup", group_id="g", error_code=ErrorCode.NONE,
           topics=fetched_topics(v, "OffsetFetchResponseTopics", "OffsetFetchResponsePartitions", FETCHED)),
        rs(K.OFFSET_FETCH, v, "OffsetFetchResponseGroup", group_id="h", error_code=ErrorCode(15), topics=())))


COMMIT_BYTES_V8 = (cs("g") + i32(3) + cs("m-1") + cs("inst")
                   + carr(cs("t") + carr(i32(0) + i64(42) + i32(5) + cs("meta") + TAG) + TAG) + TAG)
COMMIT_RESP_V0_BYTES = arr(s("t") + arr(i32(0) + i16(0), i32(1) + i16(12)))
COMMIT_RESP_V8_BYTES = i32(0) + carr(cs("t") + carr(i32(0) + i16(0) + TAG, i32(1) + i16(12) + TAG) + TAG) + TAG
FETCH_RESP_V6_BYTES = (i32(0) + carr(cs("t") + carr(i32(0) + i64(42) + i32(5) + cs("meta") + i16(0) + TAG) + TAG)
                       + i16(14) + TAG)
OFFSETS_REQUESTS = [
    codec_req(oc, K.OFFSET_COMMIT, 0, oc.OldCommitRequest("g", (oc.OldCommitTopic("t", (
        oc.OldCommitPartition(0, 42, "meta"),)),)), s("g") + arr(s("t") + arr(i32(0) + i64(42) + s("meta")))),
    codec_req(oc, K.OFFSET_COMMIT, 1, oc.OldCommitRequest("g", (oc.OldCommitTopic("t", (
        oc.OldCommitPartition(0, 42, "meta", 1700000000000),)),), 3, "m-1"),
        s("g") + i32(3) + s("m-1") + arr(s("t") + arr(i32(0) + i64(42) + i64(1700000000000) + s("meta")))),
    codec_req(oc, K.OFFSET_COMMIT, 2, commit_req(2, None, (0, 42, -1, "meta"), (1, 7, -1, None)),
              s("g") + i32(3) + s("m-1") + i64(-1)
              + arr(s("t") + arr(i32(0) + i64(42) + s("meta"), i32(1) + i64(7) + s(None)))),
    codec_req(oc, K.OFFSET_COMMIT, 7, commit_req(7, "inst", (0, 42, 5, "meta")),
              s("g") + i32(3) + s("m-1") + s("inst") + arr(s("t") + arr(i32(0) + i64(42) + i32(5) + s("meta")))),
    *[codec_req(oc, K.OFFSET_COMMIT, v, commit_req(v, "inst", (0, 42, 5, "meta")), COMMIT_BYTES_V8) for v in (8, 9)],
    *[kio_req(K.OFFSET_FETCH, v, fetch_req(v, (("t", (0, 1)),)), s("g") + arr(s("t") + ints(0, 1))) for v in (0, 1)],
    kio_req(K.OFFSET_FETCH, 5, fetch_req(5, None), s("g") + i32(-1)),
    kio_req(K.OFFSET_FETCH, 6, fetch_req(6, (("t", (0, 1)),)), cs("g") + carr(cs("t") + carr(i32(0), i32(1)) + TAG) + TAG),
    kio_req(K.OFFSET_FETCH, 7, fetch_req(7, None, True), cs("g") + b"\x00" + b(True) + TAG),
    kio_req(K.OFFSET_FETCH, 8, fetch_groups_req(8, False, ("g", (("t", (0, 1)),), None, -1), ("h", None, None, -1)),
            carr(cs("g") + carr(cs("t") + carr(i32(0), i32(1)) + TAG) + TAG, cs("h") + b"\x00" + TAG) + b(False) + TAG),
    kio_req(K.OFFSET_FETCH, 9, fetch_groups_req(9, True, ("g", None, "m-1", 3)),
            carr(cs("g") + cs("m-1") + i32(3) + b"\x00" + TAG) + b(True) + TAG),
    kio_req(K.OFFSET_DELETE, 0, rq(K.OFFSET_DELETE, 0, "OffsetDeleteRequest", group_id="g", topics=(
        rq(K.OFFSET_DELETE, 0, "OffsetDeleteRequestTopic", name="t", partitions=tuple(
            rq(K.OFFSET_DELETE, 0, "OffsetDeleteRequestPartition", partition_index=p) for p in (0, 2))),)),
        s("g") + arr(s("t") + ints(0, 2))),
]
OFFSETS_RESPONSES = [
    *[codec_resp(oc, K.OFFSET_COMMIT, v, commit_resp(v), COMMIT_RESP_V0_BYTES) for v in (0, 1, 2)],
    codec_resp(oc, K.OFFSET_COMMIT, 7, commit_resp(7), i32(0) + COMMIT_RESP_V0_BYTES),
    *[codec_resp(oc, K.OFFSET_COMMIT, v, commit_resp(v), COMMIT_RESP_V8_BYTES) for v in (8, 9)],
    *[kio_resp(K.OFFSET_FETCH, v, fetch_resp(v, 0, (0, 42, -1, "meta", 0)),
               arr(s("t") + arr(i32(0) + i64(42) + s("meta") + i16(0)))) for v in (0, 1)],
    kio_resp(K.OFFSET_FETCH, 5, fetch_resp(5, 14, FETCHED),
             i32(0) + arr(s("t") + arr(i32(0) + i64(42) + i32(5) + s("meta") + i16(0))) + i16(14)),
    *[kio_resp(K.OFFSET_FETCH, v, fetch_resp(v, 14, FETCHED), FETCH_RESP_V6_BYTES) for v in (6, 7)],
    *[kio_resp(K.OFFSET_FETCH, v, fetch_groups_resp(v),
               i32(0) + carr(cs("g") + carr(cs("t") + carr(i32(0) + i64(42) + i32(5) + cs("meta") + i16(0) + TAG) + TAG)
                             + i16(0) + TAG, cs("h") + carr() + i16(15) + TAG) + TAG) for v in (8, 9)],
    kio_resp(K.OFFSET_DELETE, 0, rs(K.OFFSET_DELETE, 0, "OffsetDeleteResponse", error_code=ErrorCode.NONE,
                                    throttle_time=ms(0), topics=(rs(K.OFFSET_DELETE, 0, "OffsetDeleteResponseTopic",
                                    name="t", partitions=(rs(K.OFFSET_DELETE, 0, "OffsetDeleteResponsePartition",
                                                             partition_index=0, error_code=ErrorCode(86)),)),)),
             i16(0) + i32(0) + arr(s("t") + arr(i32(0) + i16(86)))),
]


# ---- DescribeGroups, ListGroups, DeleteGroups ---------------------------------------------

def describe_resp(v: int, instance: str | None) -> Any:
    member = rs(K.DESCRIBE_GROUPS, v, "DescribedGroupMember", member_id="m-1", group_instance_id=instance,
                client_id="client", client_host="/127.0.0.1", member_metadata=b"sub", member_assignment=b"asg")
    return rs(K.DESCRIBE_GROUPS, v, "DescribeGroupsResponse", throttle_time=ms(0), groups=(
        rs(K.DESCRIBE_GROUPS, v, "DescribedGroup", error_code=ErrorCode.NONE, group_id="g", group_state="Stable",
           protocol_type="consumer", protocol_data="range", members=(member,), authorized_operations=OMITTED),))


def list_req(v: int, states: tuple[str, ...] = (), types: tuple[str, ...] = ()) -> Any:
    return rq(K.LIST_GROUPS, v, "ListGroupsRequest", states_filter=states, types_filter=types)


def list_resp(v: int, error: int, *groups: tuple[str, str, str, str]) -> Any:
    return rs(K.LIST_GROUPS, v, "ListGroupsResponse", throttle_time=ms(0), error_code=ErrorCode(error), groups=tuple(
        rs(K.LIST_GROUPS, v, "ListedGroup", group_id=g, protocol_type=p, group_state=st, group_type=ty)
        for g, p, st, ty in groups))


def delete_resp(v: int) -> Any:
    return rs(K.DELETE_GROUPS, v, "DeleteGroupsResponse", throttle_time=ms(0), results=(
        rs(K.DELETE_GROUPS, v, "DeletableGroupResult", group_id="g", error_code=ErrorCode(68)),))


def names(key: int, v: int, field: str, *values: str) -> Any:
    return rq(key, v, {K.DESCRIBE_GROUPS: "DescribeGroupsRequest", K.DELETE_GROUPS: "DeleteGroupsRequest"}[key],
              **{field: values}, include_authorized_operations=True)


ADMIN_REQUESTS = [
    kio_req(K.DESCRIBE_GROUPS, 0, names(K.DESCRIBE_GROUPS, 0, "groups", "g", "h"), arr(s("g"), s("h"))),
    kio_req(K.DESCRIBE_GROUPS, 4, names(K.DESCRIBE_GROUPS, 4, "groups", "g"), arr(s("g")) + b(True)),
    kio_req(K.DESCRIBE_GROUPS, 5, names(K.DESCRIBE_GROUPS, 5, "groups", "g"), carr(cs("g")) + b(True) + TAG),
    kio_req(K.LIST_GROUPS, 2, list_req(2), b""),
    kio_req(K.LIST_GROUPS, 3, list_req(3), TAG),
    kio_req(K.LIST_GROUPS, 4, list_req(4, ("Stable", "empty")), carr(cs("Stable"), cs("empty")) + TAG),
    kio_req(K.LIST_GROUPS, 5, list_req(5, ("Stable",), ("classic", "Consumer")),
            carr(cs("Stable")) + carr(cs("classic"), cs("Consumer")) + TAG),
    kio_req(K.DELETE_GROUPS, 1, names(K.DELETE_GROUPS, 1, "groups_names", "g"), arr(s("g"))),
    kio_req(K.DELETE_GROUPS, 2, names(K.DELETE_GROUPS, 2, "groups_names", "g", "h"), carr(cs("g"), cs("h")) + TAG),
]
ADMIN_RESPONSES = [
    kio_resp(K.DESCRIBE_GROUPS, 0, describe_resp(0, None),
             arr(i16(0) + s("g") + s("Stable") + s("consumer") + s("range")
                 + arr(s("m-1") + s("client") + s("/127.0.0.1") + by(b"sub") + by(b"asg")))),
    kio_resp(K.DESCRIBE_GROUPS, 4, describe_resp(4, "inst"),
             i32(0) + arr(i16(0) + s("g") + s("Stable") + s("consumer") + s("range")
                          + arr(s("m-1") + s("inst") + s("client") + s("/127.0.0.1") + by(b"sub") + by(b"asg"))
                          + i32(OMITTED))),
    kio_resp(K.DESCRIBE_GROUPS, 5, describe_resp(5, "inst"),
             i32(0) + carr(i16(0) + cs("g") + cs("Stable") + cs("consumer") + cs("range")
                           + carr(cs("m-1") + cs("inst") + cs("client") + cs("/127.0.0.1") + b"\x04sub" + b"\x04asg"
                                  + TAG) + i32(OMITTED) + TAG) + TAG),
    kio_resp(K.LIST_GROUPS, 0, list_resp(0, 0, ("g", "consumer", "", "")), i16(0) + arr(s("g") + s("consumer"))),
    kio_resp(K.LIST_GROUPS, 2, list_resp(2, 14), i32(0) + i16(14) + arr()),
    kio_resp(K.LIST_GROUPS, 3, list_resp(3, 0, ("g", "consumer", "", "")),
             i32(0) + i16(0) + carr(cs("g") + cs("consumer") + TAG) + TAG),
    kio_resp(K.LIST_GROUPS, 4, list_resp(4, 0, ("g", "consumer", "Stable", "")),
             i32(0) + i16(0) + carr(cs("g") + cs("consumer") + cs("Stable") + TAG) + TAG),
    kio_resp(K.LIST_GROUPS, 5, list_resp(5, 0, ("g", "consumer", "Stable", "classic")),
             i32(0) + i16(0) + carr(cs("g") + cs("consumer") + cs("Stable") + cs("classic") + TAG) + TAG),
    kio_resp(K.DELETE_GROUPS, 0, delete_resp(0), i32(0) + arr(s("g") + i16(68))),
    kio_resp(K.DELETE_GROUPS, 2, delete_resp(2), i32(0) + carr(cs("g") + i16(68) + TAG) + TAG),
]

REQUESTS = JOIN_SYNC_REQUESTS + MEMBERSHIP_REQUESTS + OFFSETS_REQUESTS + ADMIN_REQUESTS
RESPONSES = JOIN_SYNC_RESPONSES + MEMBERSHIP_RESPONSES + OFFSETS_RESPONSES + ADMIN_RESPONSES
ROWS = REQUESTS + RESPONSES


def row_id(row: Row) -> str:
    kind = "request" if any(row is r for r in REQUESTS) else "response"
    return f"{ApiKey(row.api_key).name}-v{row.version}-{kind}"


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
    response = _join_response(6, JoinResult(ErrorCode(79), member_id="m-9"))
    assert join_chunks([messages.encode(response)]) == \
        i32(0) + i16(79) + i32(-1) + cs("") + cs("") + cs("m-9") + carr() + TAG


def test_offset_commit_v0_v1_requests_are_not_kio_messages() -> None:
    """The client side refuses to send a v2+ message as v0/v1 (kio has no v0/v1 class)."""
    with pytest.raises(ValueError):
        oc.encode_request(commit_req(2, None, (0, 42, -1, "meta")), 1)


# Kafka 3.9's maximum of each group API, plus one (and its first versions are all answered)
@pytest.mark.parametrize("api, version", [(K.JOIN_GROUP, 10), (K.SYNC_GROUP, 6), (K.OFFSET_COMMIT, 10),
                                          (K.OFFSET_FETCH, 10), (K.DESCRIBE_GROUPS, 6), (K.HEARTBEAT, 5),
                                          (K.LEAVE_GROUP, 6), (K.LIST_GROUPS, 6), (K.DELETE_GROUPS, 3),
                                          (K.OFFSET_DELETE, 1), (K.FIND_COORDINATOR, 6), (K.LIST_OFFSETS, 10)])
def test_versions_outside_the_ranges_are_protocol_errors(api: ApiKey, version: int) -> None:
    with pytest.raises(ProtocolError):
        decode_request(RequestHeader(api, version, 1, None), memoryview(b"\x00" * 64))
