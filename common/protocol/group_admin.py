"""DescribeGroups (key 15) v0–v5, ListGroups (key 16) v0–v5, DeleteGroups (key 42) v0–v2.

DescribeGroups v1+ adds throttle_time_ms, v3+ include_authorized_operations and
authorized_operations, v4+ each member's group_instance_id, v5 is flexible. ListGroups and
DeleteGroups v1+ add throttle_time_ms; ListGroups v3 is flexible and v4 (KIP-518) filters by
state and answers each group's state, v5 (KIP-848) filters by type and answers each group's
type ("classic" for every group tidelog has); DeleteGroups v2 is flexible.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk, Reader, Writer

AUTHORIZED_OPERATIONS_OMITTED = -2147483648  # Kafka's INT32_MIN: "not asked for"

# ---- DescribeGroups -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DescribeGroupsRequest:
    groups: tuple[str, ...]
    include_authorized_operations: bool = False  # v3+


@dataclass(frozen=True, slots=True)
class DescribedGroupMember:
    member_id: str
    group_instance_id: str | None  # v4+
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    error_code: int
    group_id: str
    group_state: str
    protocol_type: str
    protocol_data: str
    members: tuple[DescribedGroupMember, ...] = ()
    authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED  # v3+


@dataclass(frozen=True, slots=True)
class DescribeGroupsResponse:
    groups: tuple[DescribedGroup, ...]
    throttle_time_ms: int = 0  # v1+


def decode_describe_groups_request(body: memoryview, version: int) -> DescribeGroupsRequest:
    check_version(ApiKey.DESCRIBE_GROUPS, version)
    r = reader_for(ApiKey.DESCRIBE_GROUPS, version, body)
    groups = r.array(Reader.string, 1)
    request = DescribeGroupsRequest(groups, r.boolean() if version >= 3 else False)
    r.tagged_fields()
    return request


def encode_describe_groups_request(req: DescribeGroupsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_describe_groups_request`."""
    check_version(ApiKey.DESCRIBE_GROUPS, version)
    w = writer_for(ApiKey.DESCRIBE_GROUPS, version)
    w.string_array(req.groups)
    if version >= 3:
        w.boolean(req.include_authorized_operations)
    w.tagged_fields()
    return w.chunks()


def encode_describe_groups_response(resp: DescribeGroupsResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.DESCRIBE_GROUPS, version)
    w = writer_for(ApiKey.DESCRIBE_GROUPS, version)
    if version >= 1:
        w.int32(resp.throttle_time_ms)

    def member(ww: Writer, m: DescribedGroupMember) -> None:
        ww.string(m.member_id)
        if version >= 4:
            ww.nullable_string(m.group_instance_id)
        ww.string(m.client_id)
        ww.string(m.client_host)
        ww.bytes_(m.member_metadata)
        ww.bytes_(m.member_assignment)
        ww.tagged_fields()

    def group(ww: Writer, g: DescribedGroup) -> None:
        ww.int16(g.error_code)
        ww.string(g.group_id)
        ww.string(g.group_state)
        ww.string(g.protocol_type)
        ww.string(g.protocol_data)
        ww.array(g.members, member)
        if version >= 3:
            ww.int32(g.authorized_operations)
        ww.tagged_fields()

    w.array(resp.groups, group)
    w.tagged_fields()
    return w.chunks()


def decode_describe_groups_response(body: memoryview, version: int) -> DescribeGroupsResponse:
    """Client side (tests, tools): the inverse of `encode_describe_groups_response`."""
    check_version(ApiKey.DESCRIBE_GROUPS, version)
    r = reader_for(ApiKey.DESCRIBE_GROUPS, version, body)
    throttle = r.int32() if version >= 1 else 0

    def member(rr: Reader) -> DescribedGroupMember:
        member_id = rr.string()
        instance = rr.nullable_string() if version >= 4 else None
        m = DescribedGroupMember(member_id, instance, rr.string(), rr.string(),
                                 bytes(rr.bytes_()), bytes(rr.bytes_()))
        rr.tagged_fields()
        return m

    def group(rr: Reader) -> DescribedGroup:
        error, group_id, state, ptype, pdata = rr.int16(), rr.string(), rr.string(), rr.string(), rr.string()
        members = rr.array(member, 6)
        ops = rr.int32() if version >= 3 else AUTHORIZED_OPERATIONS_OMITTED
        rr.tagged_fields()
        return DescribedGroup(error, group_id, state, ptype, pdata, members, ops)

    response = DescribeGroupsResponse(r.array(group, 7), throttle)
    r.tagged_fields()
    return response


# ---- ListGroups ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListGroupsRequest:
    states_filter: tuple[str, ...] = ()  # v4+: empty lists every group
    types_filter: tuple[str, ...] = ()  # v5+: empty lists every group


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: str = ""  # v4+
    group_type: str = ""  # v5+


@dataclass(frozen=True, slots=True)
class ListGroupsResponse:
    error_code: int
    groups: tuple[ListedGroup, ...]
    throttle_time_ms: int = 0  # v1+


def decode_list_groups_request(body: memoryview, version: int) -> ListGroupsRequest:
    check_version(ApiKey.LIST_GROUPS, version)
    if version < 3:
        return ListGroupsRequest()  # v0-v2 have no fields
    r = reader_for(ApiKey.LIST_GROUPS, version, body)
    states = r.array(Reader.string, 1) if version >= 4 else ()
    types = r.array(Reader.string, 1) if version >= 5 else ()
    r.tagged_fields()
    return ListGroupsRequest(states, types)


def encode_list_groups_request(req: ListGroupsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_list_groups_request`."""
    check_version(ApiKey.LIST_GROUPS, version)
    if version < 3:
        return []
    w = writer_for(ApiKey.LIST_GROUPS, version)
    if version >= 4:
        w.array(req.states_filter, Writer.string)
    if version >= 5:
        w.array(req.types_filter, Writer.string)
    w.tagged_fields()
    return w.chunks()


def encode_list_groups_response(resp: ListGroupsResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.LIST_GROUPS, version)
    w = writer_for(ApiKey.LIST_GROUPS, version)
    if version >= 1:
        w.int32(resp.throttle_time_ms)
    w.int16(resp.error_code)

    def group(ww: Writer, g: ListedGroup) -> None:
        ww.string(g.group_id)
        ww.string(g.protocol_type)
        if version >= 4:
            ww.string(g.group_state)
        if version >= 5:
            ww.string(g.group_type)
        ww.tagged_fields()

    w.array(resp.groups, group)
    w.tagged_fields()
    return w.chunks()


def decode_list_groups_response(body: memoryview, version: int) -> ListGroupsResponse:
    """Client side (tests, tools): the inverse of `encode_list_groups_response`."""
    check_version(ApiKey.LIST_GROUPS, version)
    r = reader_for(ApiKey.LIST_GROUPS, version, body)
    throttle = r.int32() if version >= 1 else 0
    error = r.int16()

    def group(rr: Reader) -> ListedGroup:
        g = ListedGroup(rr.string(), rr.string(), rr.string() if version >= 4 else "",
                        rr.string() if version >= 5 else "")
        rr.tagged_fields()
        return g

    response = ListGroupsResponse(error, r.array(group, 2), throttle)
    r.tagged_fields()
    return response


# ---- DeleteGroups -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeleteGroupsRequest:
    groups_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeletableGroupResult:
    group_id: str
    error_code: int


@dataclass(frozen=True, slots=True)
class DeleteGroupsResponse:
    results: tuple[DeletableGroupResult, ...]
    throttle_time_ms: int = 0


def decode_delete_groups_request(body: memoryview, version: int) -> DeleteGroupsRequest:
    check_version(ApiKey.DELETE_GROUPS, version)
    r = reader_for(ApiKey.DELETE_GROUPS, version, body)
    request = DeleteGroupsRequest(r.array(Reader.string, 1))
    r.tagged_fields()
    return request


def encode_delete_groups_request(req: DeleteGroupsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_delete_groups_request`."""
    check_version(ApiKey.DELETE_GROUPS, version)
    w = writer_for(ApiKey.DELETE_GROUPS, version)
    w.string_array(req.groups_names)
    w.tagged_fields()
    return w.chunks()


def encode_delete_groups_response(resp: DeleteGroupsResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.DELETE_GROUPS, version)
    w = writer_for(ApiKey.DELETE_GROUPS, version)
    w.int32(resp.throttle_time_ms)

    def result(ww: Writer, g: DeletableGroupResult) -> None:
        ww.string(g.group_id)
        ww.int16(g.error_code)
        ww.tagged_fields()

    w.array(resp.results, result)
    w.tagged_fields()
    return w.chunks()


def decode_delete_groups_response(body: memoryview, version: int) -> DeleteGroupsResponse:
    """Client side (tests, tools): the inverse of `encode_delete_groups_response`."""
    check_version(ApiKey.DELETE_GROUPS, version)
    r = reader_for(ApiKey.DELETE_GROUPS, version, body)
    throttle = r.int32()

    def result(rr: Reader) -> DeletableGroupResult:
        g = DeletableGroupResult(rr.string(), rr.int16())
        rr.tagged_fields()
        return g

    response = DeleteGroupsResponse(r.array(result, 3), throttle)
    r.tagged_fields()
    return response
