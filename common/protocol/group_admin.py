"""DescribeGroups (key 15) v0–v4, ListGroups (key 16) v0–v2, DeleteGroups (key 42) v0–v1.

DescribeGroups v1+ adds throttle_time_ms, v3+ include_authorized_operations and
authorized_operations, v4+ each member's group_instance_id. ListGroups and DeleteGroups
v1+ add throttle_time_ms.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version
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
    r = Reader(body)
    groups = r.array(Reader.string, 2)
    return DescribeGroupsRequest(groups, r.boolean() if version >= 3 else False)


def encode_describe_groups_request(req: DescribeGroupsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_describe_groups_request`."""
    check_version(ApiKey.DESCRIBE_GROUPS, version)
    w = Writer()
    w.string_array(req.groups)
    if version >= 3:
        w.boolean(req.include_authorized_operations)
    return w.chunks()


def encode_describe_groups_response(resp: DescribeGroupsResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.DESCRIBE_GROUPS, version)
    w = Writer()
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

    def group(ww: Writer, g: DescribedGroup) -> None:
        ww.int16(g.error_code)
        ww.string(g.group_id)
        ww.string(g.group_state)
        ww.string(g.protocol_type)
        ww.string(g.protocol_data)
        ww.array(g.members, member)
        if version >= 3:
            ww.int32(g.authorized_operations)

    w.array(resp.groups, group)
    return w.chunks()


def decode_describe_groups_response(body: memoryview, version: int) -> DescribeGroupsResponse:
    """Client side (tests, tools): the inverse of `encode_describe_groups_response`."""
    check_version(ApiKey.DESCRIBE_GROUPS, version)
    r = Reader(body)
    throttle = r.int32() if version >= 1 else 0

    def member(rr: Reader) -> DescribedGroupMember:
        member_id = rr.string()
        instance = rr.nullable_string() if version >= 4 else None
        return DescribedGroupMember(member_id, instance, rr.string(), rr.string(),
                                    bytes(rr.bytes_()), bytes(rr.bytes_()))

    def group(rr: Reader) -> DescribedGroup:
        error, group_id, state, ptype, pdata = rr.int16(), rr.string(), rr.string(), rr.string(), rr.string()
        members = rr.array(member, 14)
        ops = rr.int32() if version >= 3 else AUTHORIZED_OPERATIONS_OMITTED
        return DescribedGroup(error, group_id, state, ptype, pdata, members, ops)

    return DescribeGroupsResponse(r.array(group, 12), throttle)


# ---- ListGroups ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListGroupsRequest:
    pass


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str


@dataclass(frozen=True, slots=True)
class ListGroupsResponse:
    error_code: int
    groups: tuple[ListedGroup, ...]
    throttle_time_ms: int = 0  # v1+


def decode_list_groups_request(body: memoryview, version: int) -> ListGroupsRequest:
    check_version(ApiKey.LIST_GROUPS, version)
    return ListGroupsRequest()  # v0-v2 have no fields


def encode_list_groups_request(req: ListGroupsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_list_groups_request`."""
    check_version(ApiKey.LIST_GROUPS, version)
    return []


def encode_list_groups_response(resp: ListGroupsResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.LIST_GROUPS, version)
    w = Writer()
    if version >= 1:
        w.int32(resp.throttle_time_ms)
    w.int16(resp.error_code)

    def group(ww: Writer, g: ListedGroup) -> None:
        ww.string(g.group_id)
        ww.string(g.protocol_type)

    w.array(resp.groups, group)
    return w.chunks()


def decode_list_groups_response(body: memoryview, version: int) -> ListGroupsResponse:
    """Client side (tests, tools): the inverse of `encode_list_groups_response`."""
    check_version(ApiKey.LIST_GROUPS, version)
    r = Reader(body)
    throttle = r.int32() if version >= 1 else 0
    error = r.int16()

    def group(rr: Reader) -> ListedGroup:
        return ListedGroup(rr.string(), rr.string())

    return ListGroupsResponse(error, r.array(group, 4), throttle)


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
    return DeleteGroupsRequest(Reader(body).array(Reader.string, 2))


def encode_delete_groups_request(req: DeleteGroupsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_delete_groups_request`."""
    check_version(ApiKey.DELETE_GROUPS, version)
    w = Writer()
    w.string_array(req.groups_names)
    return w.chunks()


def encode_delete_groups_response(resp: DeleteGroupsResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.DELETE_GROUPS, version)
    w = Writer()
    w.int32(resp.throttle_time_ms)

    def result(ww: Writer, g: DeletableGroupResult) -> None:
        ww.string(g.group_id)
        ww.int16(g.error_code)

    w.array(resp.results, result)
    return w.chunks()


def decode_delete_groups_response(body: memoryview, version: int) -> DeleteGroupsResponse:
    """Client side (tests, tools): the inverse of `encode_delete_groups_response`."""
    check_version(ApiKey.DELETE_GROUPS, version)
    r = Reader(body)
    throttle = r.int32()

    def result(rr: Reader) -> DeletableGroupResult:
        return DeletableGroupResult(rr.string(), rr.int16())

    return DeleteGroupsResponse(r.array(result, 4), throttle)
