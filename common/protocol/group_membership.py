"""Heartbeat (key 12) v0–v4 and LeaveGroup (key 13) v0–v5 (Kafka 3.9's ranges).

Heartbeat v1+ adds throttle_time_ms, v3+ group_instance_id. LeaveGroup v0–v2 carry one
member_id; v3 (KIP-345) carries a batch of (member_id, group_instance_id) and answers each.
v4 is the first flexible version of both; LeaveGroup v5 adds each member's reason (KIP-800),
which the coordinator logs with the rebalance it causes.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk, Reader, Writer

# ---- Heartbeat ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None  # v3+


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error_code: int
    throttle_time_ms: int = 0  # v1+


def decode_heartbeat_request(body: memoryview, version: int) -> HeartbeatRequest:
    check_version(ApiKey.HEARTBEAT, version)
    r = reader_for(ApiKey.HEARTBEAT, version, body)
    group_id, generation, member_id = r.string(), r.int32(), r.string()
    request = HeartbeatRequest(group_id, generation, member_id, r.nullable_string() if version >= 3 else None)
    r.tagged_fields()
    return request


def encode_heartbeat_request(req: HeartbeatRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_heartbeat_request`."""
    check_version(ApiKey.HEARTBEAT, version)
    w = writer_for(ApiKey.HEARTBEAT, version)
    w.string(req.group_id)
    w.int32(req.generation_id)
    w.string(req.member_id)
    if version >= 3:
        w.nullable_string(req.group_instance_id)
    w.tagged_fields()
    return w.chunks()


def encode_heartbeat_response(resp: HeartbeatResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.HEARTBEAT, version)
    w = writer_for(ApiKey.HEARTBEAT, version)
    if version >= 1:
        w.int32(resp.throttle_time_ms)
    w.int16(resp.error_code)
    w.tagged_fields()
    return w.chunks()


def decode_heartbeat_response(body: memoryview, version: int) -> HeartbeatResponse:
    """Client side (tests, tools): the inverse of `encode_heartbeat_response`."""
    check_version(ApiKey.HEARTBEAT, version)
    r = reader_for(ApiKey.HEARTBEAT, version, body)
    throttle = r.int32() if version >= 1 else 0
    response = HeartbeatResponse(r.int16(), throttle)
    r.tagged_fields()
    return response


# ---- LeaveGroup ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None  # v5+


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    members: tuple[MemberIdentity, ...]  # v0-v2: exactly one, from member_id


@dataclass(frozen=True, slots=True)
class MemberResponse:
    member_id: str
    group_instance_id: str | None
    error_code: int


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    error_code: int
    members: tuple[MemberResponse, ...] = ()  # v3+
    throttle_time_ms: int = 0  # v1+


def decode_leave_group_request(body: memoryview, version: int) -> LeaveGroupRequest:
    check_version(ApiKey.LEAVE_GROUP, version)
    r = reader_for(ApiKey.LEAVE_GROUP, version, body)
    group_id = r.string()
    if version < 3:
        return LeaveGroupRequest(group_id, (MemberIdentity(r.string()),))

    def member(rr: Reader) -> MemberIdentity:
        m = MemberIdentity(rr.string(), rr.nullable_string(), rr.nullable_string() if version >= 5 else None)
        rr.tagged_fields()
        return m

    request = LeaveGroupRequest(group_id, r.array(member, 2))
    r.tagged_fields()
    return request


def encode_leave_group_request(req: LeaveGroupRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_leave_group_request`."""
    check_version(ApiKey.LEAVE_GROUP, version)
    w = writer_for(ApiKey.LEAVE_GROUP, version)
    w.string(req.group_id)
    if version < 3:
        w.string(req.members[0].member_id)
        return w.chunks()

    def member(ww: Writer, m: MemberIdentity) -> None:
        ww.string(m.member_id)
        ww.nullable_string(m.group_instance_id)
        if version >= 5:
            ww.nullable_string(m.reason)
        ww.tagged_fields()

    w.array(req.members, member)
    w.tagged_fields()
    return w.chunks()


def encode_leave_group_response(resp: LeaveGroupResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.LEAVE_GROUP, version)
    w = writer_for(ApiKey.LEAVE_GROUP, version)
    if version >= 1:
        w.int32(resp.throttle_time_ms)
    w.int16(resp.error_code)
    if version >= 3:
        def member(ww: Writer, m: MemberResponse) -> None:
            ww.string(m.member_id)
            ww.nullable_string(m.group_instance_id)
            ww.int16(m.error_code)
            ww.tagged_fields()

        w.array(resp.members, member)
    w.tagged_fields()
    return w.chunks()


def decode_leave_group_response(body: memoryview, version: int) -> LeaveGroupResponse:
    """Client side (tests, tools): the inverse of `encode_leave_group_response`."""
    check_version(ApiKey.LEAVE_GROUP, version)
    r = reader_for(ApiKey.LEAVE_GROUP, version, body)
    throttle = r.int32() if version >= 1 else 0
    error = r.int16()
    if version < 3:
        return LeaveGroupResponse(error, (), throttle)

    def member(rr: Reader) -> MemberResponse:
        m = MemberResponse(rr.string(), rr.nullable_string(), rr.int16())
        rr.tagged_fields()
        return m

    response = LeaveGroupResponse(error, r.array(member, 4), throttle)
    r.tagged_fields()
    return response
