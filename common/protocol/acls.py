"""DescribeAcls (key 29), CreateAcls (key 30) and DeleteAcls (key 31), v0–v3 each: v1 adds
the resource pattern type (KIP-290), v2 is the first flexible version, v3 allows the
USER_PRINCIPAL resource type. Without an authorizer a Kafka broker answers all three with
SECURITY_DISABLED, which is what tidelog does until security lands (broker/handlers/acls.py).

Their messages are kio's generated ones from v1. kio (Kafka 4's schemas, KIP-896) has no v0,
which Kafka 3.9 answers, and v0's bytes are v1's without the pattern type: so v0 alone keeps a
codec here, reading a v0 request into kio's v1 request (pattern LITERAL, the only one before
v1) and writing kio's v1 response without the pattern type (CreateAcls' response is the same
bytes in v0 and v1). A handler always sees and answers the classes of `schema_version`. Also
here: Kafka's AclOperation codes and the operations each resource type supports, which
"authorized operations" fields carry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta
from enum import IntEnum
from typing import Any, Final

from common.protocol import messages
from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.dispatch import Codec
from common.protocol.primitives import Chunk, Reader, Writer

PATTERN_TYPE_LITERAL: Final = 3  # Kafka's PatternType.LITERAL: the only pattern before v1
FIRST_GENERATED_VERSION: Final = 1


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


def schema_version(version: int) -> int:
    """The version whose kio classes carry `version`'s messages."""
    return max(version, FIRST_GENERATED_VERSION)


Filter = tuple[int, str | None, str | None, str | None, int, int, int]  # (type, name, principal, host, op, perm, pattern)
Binding = tuple[int, str, str, str, int, int, int]


def describe_request(version: int, f: Filter) -> Any:
    """Client side: kio's DescribeAclsRequest of `version` (v0: v1's, pattern LITERAL)."""
    m = messages.request_module(ApiKey.DESCRIBE_ACLS, schema_version(version))
    return m.DescribeAclsRequest(**_filter_fields(f))


def create_request(version: int, *bindings: Binding) -> Any:
    m = messages.request_module(ApiKey.CREATE_ACLS, schema_version(version))
    return m.CreateAclsRequest(creations=tuple(m.AclCreation(
        resource_type=t, resource_name=n, resource_pattern_type=pattern, principal=who, host=host,
        operation=op, permission_type=perm) for t, n, who, host, op, perm, pattern in bindings))


def delete_request(version: int, *filters: Filter) -> Any:
    m = messages.request_module(ApiKey.DELETE_ACLS, schema_version(version))
    return m.DeleteAclsRequest(filters=tuple(m.DeleteAclsFilter(**_filter_fields(f)) for f in filters))


def _filter_fields(f: Filter) -> dict[str, Any]:
    resource_type, name, principal, host, operation, permission, pattern = f
    return {"resource_type_filter": resource_type, "resource_name_filter": name, "pattern_type_filter": pattern,
            "principal_filter": principal, "host_filter": host, "operation": operation,
            "permission_type": permission}


# ---- v0, by hand: the shared shapes ------------------------------------------------------

def _read_filter(r: Reader) -> Filter:
    return (r.int8(), r.nullable_string(), r.nullable_string(), r.nullable_string(), r.int8(), r.int8(),
            PATTERN_TYPE_LITERAL)


def _write_filter(w: Writer, f: Any) -> None:
    w.int8(f.resource_type_filter)
    w.nullable_string(f.resource_name_filter)
    w.nullable_string(f.principal_filter)
    w.nullable_string(f.host_filter)
    w.int8(f.operation)
    w.int8(f.permission_type)


def _read_binding(r: Reader) -> Binding:
    return r.int8(), r.string(), r.string(), r.string(), r.int8(), r.int8(), PATTERN_TYPE_LITERAL


def _write_binding(w: Writer, a: Any) -> None:
    """An AclCreation or a DeleteAclsMatchingAcl's binding, without v1's pattern type."""
    w.int8(a.resource_type)
    w.string(a.resource_name)
    w.string(a.principal)
    w.string(a.host)
    w.int8(a.operation)
    w.int8(a.permission_type)


def _v0_writer(api_key: ApiKey, resp: Any) -> Writer:
    check_version(api_key, 0)
    w = writer_for(api_key, 0)
    w.int32(messages.milliseconds(resp.throttle_time))
    return w


def _v0_reader(api_key: ApiKey, body: memoryview) -> Reader:
    check_version(api_key, 0)
    return reader_for(api_key, 0, body)


# ---- DescribeAcls -------------------------------------------------------------------------

def _describe_v0_response(resp: Any) -> list[Chunk]:
    w = _v0_writer(ApiKey.DESCRIBE_ACLS, resp)
    w.int16(resp.error_code)
    w.nullable_string(resp.error_message)

    def acl(w: Writer, a: Any) -> None:
        w.string(a.principal)
        w.string(a.host)
        w.int8(a.operation)
        w.int8(a.permission_type)

    def resource(w: Writer, res: Any) -> None:
        w.int8(res.resource_type)
        w.string(res.resource_name)
        w.array(res.acls, acl)

    w.array(resp.resources, resource)
    return w.chunks()


def _describe_v0_read_response(body: memoryview) -> Any:
    r = _v0_reader(ApiKey.DESCRIBE_ACLS, body)
    m = messages.response_module(ApiKey.DESCRIBE_ACLS, FIRST_GENERATED_VERSION)
    throttle, error_code, message = r.int32(), messages.error_code(r.int16()), r.nullable_string()

    def acl(r: Reader) -> Any:
        return m.AclDescription(principal=r.string(), host=r.string(), operation=r.int8(), permission_type=r.int8())

    def resource(r: Reader) -> Any:
        return m.DescribeAclsResource(resource_type=r.int8(), resource_name=r.string(),
                                      pattern_type=PATTERN_TYPE_LITERAL, acls=r.array(acl, 4))

    return m.DescribeAclsResponse(throttle_time=timedelta(milliseconds=throttle), error_code=error_code,
                                  error_message=message, resources=r.array(resource, 4))


# ---- CreateAcls ---------------------------------------------------------------------------

def _create_v0_request(req: Any) -> list[Chunk]:
    check_version(ApiKey.CREATE_ACLS, 0)
    w = writer_for(ApiKey.CREATE_ACLS, 0)
    w.array(req.creations, _write_binding)
    return w.chunks()


# ---- DeleteAcls ---------------------------------------------------------------------------

def _delete_v0_response(resp: Any) -> list[Chunk]:
    w = _v0_writer(ApiKey.DELETE_ACLS, resp)

    def matching(w: Writer, a: Any) -> None:
        w.int16(a.error_code)
        w.nullable_string(a.error_message)
        _write_binding(w, a)

    def result(w: Writer, res: Any) -> None:
        w.int16(res.error_code)
        w.nullable_string(res.error_message)
        w.array(res.matching_acls, matching)

    w.array(resp.filter_results, result)
    return w.chunks()


def _delete_v0_read_response(body: memoryview) -> Any:
    r = _v0_reader(ApiKey.DELETE_ACLS, body)
    m = messages.response_module(ApiKey.DELETE_ACLS, FIRST_GENERATED_VERSION)
    throttle = r.int32()

    def matching(r: Reader) -> Any:
        error_code, message = messages.error_code(r.int16()), r.nullable_string()
        t, name, principal, host, op, perm, pattern = _read_binding(r)
        return m.DeleteAclsMatchingAcl(error_code=error_code, error_message=message, resource_type=t,
                                       resource_name=name, pattern_type=pattern, principal=principal, host=host,
                                       operation=op, permission_type=perm)

    def result(r: Reader) -> Any:
        return m.DeleteAclsFilterResult(error_code=messages.error_code(r.int16()), error_message=r.nullable_string(),
                                        matching_acls=r.array(matching, 9))

    return m.DeleteAclsResponse(throttle_time=timedelta(milliseconds=throttle), filter_results=r.array(result, 4))


# ---- the codecs: kio from v1, v0 above -----------------------------------------------------

def _v0_request_reader(api_key: ApiKey) -> Callable[[memoryview], Any]:
    def read(body: memoryview) -> Any:
        r = _v0_reader(api_key, body)
        if api_key == ApiKey.DESCRIBE_ACLS:
            return describe_request(0, _read_filter(r))
        if api_key == ApiKey.CREATE_ACLS:
            return create_request(0, *r.array(_read_binding, 5))
        return delete_request(0, *r.array(_read_filter, 5))
    return read


def _v0_request_writer(api_key: ApiKey) -> Callable[[Any], list[Chunk]]:
    def write(req: Any) -> list[Chunk]:
        if api_key == ApiKey.CREATE_ACLS:
            return _create_v0_request(req)
        check_version(api_key, 0)
        w = writer_for(api_key, 0)
        if api_key == ApiKey.DESCRIBE_ACLS:
            _write_filter(w, req)
        else:
            w.array(req.filters, _write_filter)
        return w.chunks()
    return write


def _v1_bytes(resp: Any) -> list[Chunk]:
    """CreateAcls v0's response: v1's bytes (v1 changed only the request)."""
    return [messages.encode(resp)]


def _v1_read(api_key: ApiKey) -> Callable[[memoryview], Any]:
    return lambda body: messages.decode_response(api_key, FIRST_GENERATED_VERSION, body)


_V0_RESPONSE: Final[dict[ApiKey, tuple[Callable[[Any], list[Chunk]], Callable[[memoryview], Any]]]] = {
    ApiKey.DESCRIBE_ACLS: (_describe_v0_response, _describe_v0_read_response),
    ApiKey.CREATE_ACLS: (_v1_bytes, _v1_read(ApiKey.CREATE_ACLS)),
    ApiKey.DELETE_ACLS: (_delete_v0_response, _delete_v0_read_response),
}


def codec(api_key: ApiKey) -> Codec:
    """The broker's codec of one ACL API (`api_table`): kio's from v1, v0 here."""
    generated = messages.kio_codec(api_key)
    read_v0, write_v0 = _v0_request_reader(api_key), _V0_RESPONSE[api_key][0]

    def decode_body(body: memoryview, version: int) -> Any:
        return read_v0(body) if version == 0 else generated.decode(body, version)

    def encode_body(response: Any, version: int) -> list[Chunk]:
        return write_v0(response) if version == 0 else generated.encode(response, version)

    return Codec(decode_body, encode_body)


def encode_request(request: Any, version: int) -> list[Chunk]:
    """Client side (tests, tools): a request of any ACL API at `version`."""
    if version == 0:
        return _v0_request_writer(ApiKey(request.__api_key__))(request)
    return messages.encode_request(request, version)


def response_decoder(api_key: ApiKey) -> Callable[[memoryview, int], Any]:
    """Client side: `decode(body, version)` for one ACL API's responses."""
    read_v0 = _V0_RESPONSE[api_key][1]

    def decode_body(body: memoryview, version: int) -> Any:
        return read_v0(body) if version == 0 else messages.decode_response(api_key, version, body)

    return decode_body
