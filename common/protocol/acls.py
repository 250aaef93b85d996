"""DescribeAcls (key 29), CreateAcls (key 30) and DeleteAcls (key 31), v0–v3 each: v1 adds
the resource pattern type (KIP-290), v2 is the first flexible version, v3 allows the
USER_PRINCIPAL resource type. Without an authorizer a Kafka broker answers all three with
SECURITY_DISABLED, which is what tidelog does until security lands (broker/handlers/acls.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk, Reader, Writer

PATTERN_TYPE_LITERAL: Final = 3  # Kafka's PatternType.LITERAL: the only pattern before v1


class AclOperation(IntEnum):
    """Kafka's org.apache.kafka.common.acl.AclOperation codes."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


# Kafka's AclEntry.supportedOperations per resource type: without an authorizer every one
# is authorized (AuthHelper.authorizedOperations), so these are what "authorized
# operations" fields carry when a client asks for them.
CLUSTER_OPERATIONS: Final = frozenset({
    AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, AclOperation.DESCRIBE})
TOPIC_OPERATIONS: Final = frozenset({
    AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE, AclOperation.DELETE,
    AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

GROUP_OPERATIONS: Final = frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE})


def operations_bitfield(operations: Iterable[AclOperation]) -> int:
    """Kafka's Utils.to32BitField: bit n set for the operation with code n."""
    return sum(1 << int(op) for op in set(operations))


@dataclass(frozen=True, slots=True)
class AclFilter:
    """A DescribeAcls request, or one DeleteAcls filter (null strings match anything)."""

    resource_type: int
    resource_name: str | None
    principal: str | None
    host: str | None
    operation: int
    permission_type: int
    pattern_type: int = PATTERN_TYPE_LITERAL  # v1+


@dataclass(frozen=True, slots=True)
class AclCreation:
    resource_type: int
    resource_name: str
    principal: str
    host: str
    operation: int
    permission_type: int
    pattern_type: int = PATTERN_TYPE_LITERAL  # v1+


@dataclass(frozen=True, slots=True)
class AclDescription:
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True)
class DescribeAclsResource:
    resource_type: int
    resource_name: str
    acls: tuple[AclDescription, ...]
    pattern_type: int = PATTERN_TYPE_LITERAL  # v1+


@dataclass(frozen=True, slots=True)
class DescribeAclsResponse:
    error_code: int
    error_message: str | None
    resources: tuple[DescribeAclsResource, ...]
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class CreateAclsRequest:
    creations: tuple[AclCreation, ...]


@dataclass(frozen=True, slots=True)
class AclCreationResult:
    error_code: int
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class CreateAclsResponse:
    results: tuple[AclCreationResult, ...]
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class DeleteAclsRequest:
    filters: tuple[AclFilter, ...]


@dataclass(frozen=True, slots=True)
class DeleteAclsMatchingAcl:
    error_code: int
    error_message: str | None
    acl: AclCreation  # the binding that matched and was (or was not) deleted


@dataclass(frozen=True, slots=True)
class DeleteAclsFilterResult:
    error_code: int
    error_message: str | None
    matching_acls: tuple[DeleteAclsMatchingAcl, ...] = ()


@dataclass(frozen=True, slots=True)
class DeleteAclsResponse:
    filter_results: tuple[DeleteAclsFilterResult, ...]
    throttle_time_ms: int = 0


# ---- the shared shapes ------------------------------------------------------------------

def _read_filter(r: Reader, version: int) -> AclFilter:
    resource_type, name = r.int8(), r.nullable_string()
    pattern = r.int8() if version >= 1 else PATTERN_TYPE_LITERAL
    return AclFilter(resource_type, name, r.nullable_string(), r.nullable_string(), r.int8(), r.int8(),
                     pattern)


def _write_filter(w: Writer, f: AclFilter, version: int) -> None:
    w.int8(f.resource_type)
    w.nullable_string(f.resource_name)
    if version >= 1:
        w.int8(f.pattern_type)
    w.nullable_string(f.principal)
    w.nullable_string(f.host)
    w.int8(f.operation)
    w.int8(f.permission_type)


def _read_binding(r: Reader, version: int) -> AclCreation:
    resource_type, name = r.int8(), r.string()
    pattern = r.int8() if version >= 1 else PATTERN_TYPE_LITERAL
    return AclCreation(resource_type, name, r.string(), r.string(), r.int8(), r.int8(), pattern)


def _write_binding(w: Writer, a: AclCreation, version: int) -> None:
    w.int8(a.resource_type)
    w.string(a.resource_name)
    if version >= 1:
        w.int8(a.pattern_type)
    w.string(a.principal)
    w.string(a.host)
    w.int8(a.operation)
    w.int8(a.permission_type)


# ---- DescribeAcls -----------------------------------------------------------------------

def decode_describe_acls_request(body: memoryview, version: int) -> AclFilter:
    check_version(ApiKey.DESCRIBE_ACLS, version)
    r = reader_for(ApiKey.DESCRIBE_ACLS, version, body)
    request = _read_filter(r, version)
    r.tagged_fields()
    return request


def encode_describe_acls_request(req: AclFilter, version: int) -> list[Chunk]:
    check_version(ApiKey.DESCRIBE_ACLS, version)
    w = writer_for(ApiKey.DESCRIBE_ACLS, version)
    _write_filter(w, req, version)
    w.tagged_fields()
    return w.chunks()


def encode_describe_acls_response(resp: DescribeAclsResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.DESCRIBE_ACLS, version)
    w = writer_for(ApiKey.DESCRIBE_ACLS, version)
    w.int32(resp.throttle_time_ms)
    w.int16(resp.error_code)
    w.nullable_string(resp.error_message)

    def acl(w: Writer, a: AclDescription) -> None:
        w.string(a.principal)
        w.string(a.host)
        w.int8(a.operation)
        w.int8(a.permission_type)
        w.tagged_fields()

    def resource(w: Writer, res: DescribeAclsResource) -> None:
        w.int8(res.resource_type)
        w.string(res.resource_name)
        if version >= 1:
            w.int8(res.pattern_type)
        w.array(res.acls, acl)
        w.tagged_fields()

    w.array(resp.resources, resource)
    w.tagged_fields()
    return w.chunks()


def decode_describe_acls_response(body: memoryview, version: int) -> DescribeAclsResponse:
    check_version(ApiKey.DESCRIBE_ACLS, version)
    r = reader_for(ApiKey.DESCRIBE_ACLS, version, body)
    throttle, error_code, message = r.int32(), r.int16(), r.nullable_string()

    def acl(r: Reader) -> AclDescription:
        a = AclDescription(r.string(), r.string(), r.int8(), r.int8())
        r.tagged_fields()
        return a

    def resource(r: Reader) -> DescribeAclsResource:
        resource_type, name = r.int8(), r.string()
        pattern = r.int8() if version >= 1 else PATTERN_TYPE_LITERAL
        res = DescribeAclsResource(resource_type, name, r.array(acl, 4), pattern)
        r.tagged_fields()
        return res

    resources = r.array(resource, 4)
    r.tagged_fields()
    return DescribeAclsResponse(error_code, message, resources, throttle)


# ---- CreateAcls -------------------------------------------------------------------------

def decode_create_acls_request(body: memoryview, version: int) -> CreateAclsRequest:
    check_version(ApiKey.CREATE_ACLS, version)
    r = reader_for(ApiKey.CREATE_ACLS, version, body)

    def creation(r: Reader) -> AclCreation:
        c = _read_binding(r, version)
        r.tagged_fields()
        return c

    request = CreateAclsRequest(r.array(creation, 5))
    r.tagged_fields()
    return request


def encode_create_acls_request(req: CreateAclsRequest, version: int) -> list[Chunk]:
    check_version(ApiKey.CREATE_ACLS, version)
    w = writer_for(ApiKey.CREATE_ACLS, version)

    def creation(w: Writer, c: AclCreation) -> None:
        _write_binding(w, c, version)
        w.tagged_fields()

    w.array(req.creations, creation)
    w.tagged_fields()
    return w.chunks()


def encode_create_acls_response(resp: CreateAclsResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.CREATE_ACLS, version)
    w = writer_for(ApiKey.CREATE_ACLS, version)
    w.int32(resp.throttle_time_ms)

    def result(w: Writer, res: AclCreationResult) -> None:
        w.int16(res.error_code)
        w.nullable_string(res.error_message)
        w.tagged_fields()

    w.array(resp.results, result)
    w.tagged_fields()
    return w.chunks()


def decode_create_acls_response(body: memoryview, version: int) -> CreateAclsResponse:
    check_version(ApiKey.CREATE_ACLS, version)
    r = reader_for(ApiKey.CREATE_ACLS, version, body)
    throttle = r.int32()

    def result(r: Reader) -> AclCreationResult:
        res = AclCreationResult(r.int16(), r.nullable_string())
        r.tagged_fields()
        return res

    results = r.array(result, 3)
    r.tagged_fields()
    return CreateAclsResponse(results, throttle)


# ---- DeleteAcls -------------------------------------------------------------------------

def decode_delete_acls_request(body: memoryview, version: int) -> DeleteAclsRequest:
    check_version(ApiKey.DELETE_ACLS, version)
    r = reader_for(ApiKey.DELETE_ACLS, version, body)

    def one(r: Reader) -> AclFilter:
        f = _read_filter(r, version)
        r.tagged_fields()
        return f

    request = DeleteAclsRequest(r.array(one, 5))
    r.tagged_fields()
    return request


def encode_delete_acls_request(req: DeleteAclsRequest, version: int) -> list[Chunk]:
    check_version(ApiKey.DELETE_ACLS, version)
    w = writer_for(ApiKey.DELETE_ACLS, version)

    def one(w: Writer, f: AclFilter) -> None:
        _write_filter(w, f, version)
        w.tagged_fields()

    w.array(req.filters, one)
    w.tagged_fields()
    return w.chunks()


def encode_delete_acls_response(resp: DeleteAclsResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.DELETE_ACLS, version)
    w = writer_for(ApiKey.DELETE_ACLS, version)
    w.int32(resp.throttle_time_ms)

    def matching(w: Writer, m: DeleteAclsMatchingAcl) -> None:
        w.int16(m.error_code)
        w.nullable_string(m.error_message)
        _write_binding(w, m.acl, version)
        w.tagged_fields()

    def result(w: Writer, res: DeleteAclsFilterResult) -> None:
        w.int16(res.error_code)
        w.nullable_string(res.error_message)
        w.array(res.matching_acls, matching)
        w.tagged_fields()

    w.array(resp.filter_results, result)
    w.tagged_fields()
    return w.chunks()


def decode_delete_acls_response(body: memoryview, version: int) -> DeleteAclsResponse:
    check_version(ApiKey.DELETE_ACLS, version)
    r = reader_for(ApiKey.DELETE_ACLS, version, body)
    throttle = r.int32()

    def matching(r: Reader) -> DeleteAclsMatchingAcl:
        m = DeleteAclsMatchingAcl(r.int16(), r.nullable_string(), _read_binding(r, version))
        r.tagged_fields()
        return m

    def result(r: Reader) -> DeleteAclsFilterResult:
        res = DeleteAclsFilterResult(r.int16(), r.nullable_string(), r.array(matching, 9))
        r.tagged_fields()
        return res

    results = r.array(result, 4)
    r.tagged_fields()
    return DeleteAclsResponse(results, throttle)
