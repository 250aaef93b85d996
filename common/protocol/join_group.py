"""JoinGroup (key 11) v0–v9 and SyncGroup (key 14) v0–v5: the classic rebalance.

Layouts (Kafka's JoinGroupRequest.json / SyncGroupRequest.json at 3.9):
JoinGroup v1+ adds rebalance_timeout_ms, v2+ throttle_time_ms in the response, v5+
group_instance_id (KIP-345) in the request and in each member of the response, v6 is
flexible, v7 answers the protocol type (nullable) and lets the protocol name be null, v8
adds the request's reason (KIP-800), v9 answers skip_assignment (KIP-814: a static leader
rejoining a Stable group learns it leads without running the assignor).
SyncGroup v1+ adds throttle_time_ms, v3+ group_instance_id, v4 is flexible, v5 carries the
protocol type and name both ways (checked against the group's: INCONSISTENT_GROUP_PROTOCOL).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk, Reader, Writer

# ---- JoinGroup ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinGroupRequestProtocol:
    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int  # v1+; v0: the session timeout, as Kafka does
    member_id: str
    group_instance_id: str | None  # v5+
    protocol_type: str
    protocols: tuple[JoinGroupRequestProtocol, ...]
    reason: str | None = None  # v8+


@dataclass(frozen=True, slots=True)
class JoinGroupResponseMember:
    member_id: str
    group_instance_id: str | None  # v5+
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    error_code: int
    generation_id: int
    protocol_name: str | None  # null only v7+ (older versions: "")
    leader: str
    member_id: str
    members: tuple[JoinGroupResponseMember, ...] = ()
    throttle_time_ms: int = 0  # v2+
    protocol_type: str | None = None  # v7+
    skip_assignment: bool = False  # v9+


def decode_join_group_request(body: memoryview, version: int) -> JoinGroupRequest:
    check_version(ApiKey.JOIN_GROUP, version)
    r = reader_for(ApiKey.JOIN_GROUP, version, body)
    group_id = r.string()
    session = r.int32()
    rebalance = r.int32() if version >= 1 else session
    member_id = r.string()
    instance = r.nullable_string() if version >= 5 else None
    protocol_type = r.string()

    def protocol(rr: Reader) -> JoinGroupRequestProtocol:
        p = JoinGroupRequestProtocol(rr.string(), bytes(rr.bytes_()))
        rr.tagged_fields()
        return p

    protocols = r.array(protocol, 2)
    reason = r.nullable_string() if version >= 8 else None
    request = JoinGroupRequest(group_id, session, rebalance, member_id, instance, protocol_type,
                               protocols, reason)
    r.tagged_fields()
    return request


def encode_join_group_request(req: JoinGroupRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_join_group_request`."""
    check_version(ApiKey.JOIN_GROUP, version)
    w = writer_for(ApiKey.JOIN_GROUP, version)
    w.string(req.group_id)
    w.int32(req.session_timeout_ms)
    if version >= 1:
        w.int32(req.rebalance_timeout_ms)
    w.string(req.member_id)
    if version >= 5:
        w.nullable_string(req.group_instance_id)
    w.string(req.protocol_type)

    def protocol(ww: Writer, p: JoinGroupRequestProtocol) -> None:
        ww.string(p.name)
        ww.bytes_(p.metadata)
        ww.tagged_fields()

    w.array(req.protocols, protocol)
    if version >= 8:
        w.nullable_string(req.reason)
    w.tagged_fields()
    return w.chunks()


def encode_join_group_response(resp: JoinGroupResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.JOIN_GROUP, version)
    w = writer_for(ApiKey.JOIN_GROUP, version)
    if version >= 2:
        w.int32(resp.throttle_time_ms)
    w.int16(resp.error_code)
    w.int32(resp.generation_id)
    if version >= 7:
        w.nullable_string(resp.protocol_type)
        w.nullable_string(resp.protocol_name)
    else:  # Kafka's JoinGroupResponse: no null name before v7, "" instead
        w.string(resp.protocol_name or "")
    w.string(resp.leader)
    if version >= 9:
        w.boolean(resp.skip_assignment)
    w.string(resp.member_id)

    def member(ww: Writer, m: JoinGroupResponseMember) -> None:
        ww.string(m.member_id)
        if version >= 5:
            ww.nullable_string(m.group_instance_id)
        ww.bytes_(m.metadata)
        ww.tagged_fields()

    w.array(resp.members, member)
    w.tagged_fields()
    return w.chunks()


def decode_join_group_response(body: memoryview, version: int) -> JoinGroupResponse:
    """Client side (tests, tools): the inverse of `encode_join_group_response`."""
    check_version(ApiKey.JOIN_GROUP, version)
    r = reader_for(ApiKey.JOIN_GROUP, version, body)
    throttle = r.int32() if version >= 2 else 0
    error, generation = r.int16(), r.int32()
    protocol_type = r.nullable_string() if version >= 7 else None
    protocol: str | None = r.nullable_string() if version >= 7 else r.string()
    leader = r.string()
    skip = r.boolean() if version >= 9 else False
    member_id = r.string()

    def member(rr: Reader) -> JoinGroupResponseMember:
        mid = rr.string()
        instance = rr.nullable_string() if version >= 5 else None
        m = JoinGroupResponseMember(mid, instance, bytes(rr.bytes_()))
        rr.tagged_fields()
        return m

    response = JoinGroupResponse(error, generation, protocol, leader, member_id, r.array(member, 3), throttle,
                                 protocol_type, skip)
    r.tagged_fields()
    return response


# ---- SyncGroup ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SyncGroupRequestAssignment:
    member_id: str
    assignment: bytes


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None  # v3+
    assignments: tuple[SyncGroupRequestAssignment, ...]
    protocol_type: str | None = None  # v5+
    protocol_name: str | None = None  # v5+


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error_code: int
    assignment: bytes
    throttle_time_ms: int = 0  # v1+
    protocol_type: str | None = None  # v5+
    protocol_name: str | None = None  # v5+


def decode_sync_group_request(body: memoryview, version: int) -> SyncGroupRequest:
    check_version(ApiKey.SYNC_GROUP, version)
    r = reader_for(ApiKey.SYNC_GROUP, version, body)
    group_id, generation, member_id = r.string(), r.int32(), r.string()
    instance = r.nullable_string() if version >= 3 else None
    protocol_type = r.nullable_string() if version >= 5 else None
    protocol_name = r.nullable_string() if version >= 5 else None

    def assignment(rr: Reader) -> SyncGroupRequestAssignment:
        a = SyncGroupRequestAssignment(rr.string(), bytes(rr.bytes_()))
        rr.tagged_fields()
        return a

    request = SyncGroupRequest(group_id, generation, member_id, instance, r.array(assignment, 2),
                               protocol_type, protocol_name)
    r.tagged_fields()
    return request


def encode_sync_group_request(req: SyncGroupRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_sync_group_request`."""
    check_version(ApiKey.SYNC_GROUP, version)
    w = writer_for(ApiKey.SYNC_GROUP, version)
    w.string(req.group_id)
    w.int32(req.generation_id)
    w.string(req.member_id)
    if version >= 3:
        w.nullable_string(req.group_instance_id)
    if version >= 5:
        w.nullable_string(req.protocol_type)
        w.nullable_string(req.protocol_name)

    def assignment(ww: Writer, a: SyncGroupRequestAssignment) -> None:
        ww.string(a.member_id)
        ww.bytes_(a.assignment)
        ww.tagged_fields()

    w.array(req.assignments, assignment)
    w.tagged_fields()
    return w.chunks()


def encode_sync_group_response(resp: SyncGroupResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.SYNC_GROUP, version)
    w = writer_for(ApiKey.SYNC_GROUP, version)
    if version >= 1:
        w.int32(resp.throttle_time_ms)
    w.int16(resp.error_code)
    if version >= 5:
        w.nullable_string(resp.protocol_type)
        w.nullable_string(resp.protocol_name)
    w.bytes_(resp.assignment)
    w.tagged_fields()
    return w.chunks()


def decode_sync_group_response(body: memoryview, version: int) -> SyncGroupResponse:
    """Client side (tests, tools): the inverse of `encode_sync_group_response`."""
    check_version(ApiKey.SYNC_GROUP, version)
    r = reader_for(ApiKey.SYNC_GROUP, version, body)
    throttle = r.int32() if version >= 1 else 0
    error = r.int16()
    protocol_type = r.nullable_string() if version >= 5 else None
    protocol_name = r.nullable_string() if version >= 5 else None
    response = SyncGroupResponse(error, bytes(r.bytes_()), throttle, protocol_type, protocol_name)
    r.tagged_fields()
    return response
