"""quorum.acl_control (CreateAcls / DeleteAcls rules) and the admin API's ACL bodies
(quorum.acl_routes): records out, replay in, answers per creation and per filter."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from common.errors import ErrorCode
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.records import AccessControlEntry, RemoveAccessControlEntry
from quorum.acl_control import acl_bindings, create_acls, delete_acls, describe_acls
from quorum.acl_routes import acl_view, parse_binding, parse_filter
from quorum.admin_api import AdminError
from security.acl import AclBinding, AclFilter, AclOperation, AclPermissionType, PatternType, ResourceType

Op, Res, Pat, Perm = AclOperation, ResourceType, PatternType, AclPermissionType
READ_T = AclBinding(Res.TOPIC, "t", Pat.LITERAL, "User:a", "*", Op.READ, Perm.ALLOW)
WRITE_T = AclBinding(Res.TOPIC, "t", Pat.LITERAL, "User:a", "*", Op.WRITE, Perm.DENY)
GROUP_P = AclBinding(Res.GROUP, "app-", Pat.PREFIXED, "User:*", "*", Op.READ, Perm.ALLOW)
BAD = AclBinding(Res.TOPIC, "t", Pat.MATCH, "User:a", "*", Op.READ, Perm.ALLOW)


def ids() -> Iterator[str]:
    return (f"id-{i}" for i in range(100))


def replay(image: MetadataImage, records: object) -> MetadataImage:
    return apply(image, enumerate(records, start=image.offset + 1))  # type: ignore[call-overload]


def test_create_answers_each_and_skips_existing() -> None:
    result = create_acls(EMPTY_IMAGE, [READ_T, BAD, READ_T, GROUP_P], ids())
    assert [o.error for o in result.response] == [None, ErrorCode.INVALID_REQUEST, None, None]
    assert result.response[1].message == "Invalid patternType MATCH"
    assert [type(r) for r in result.records] == [AccessControlEntry, AccessControlEntry]  # READ_T once
    image = replay(EMPTY_IMAGE, result.records)
    assert sorted(acl_bindings(image).values(), key=repr) == sorted([READ_T, GROUP_P], key=repr)
    again = create_acls(image, [READ_T], ids())
    assert again.records == () and again.response[0].error is None


def test_delete_removes_each_once_and_lists_it() -> None:
    image = replay(EMPTY_IMAGE, create_acls(EMPTY_IMAGE, [READ_T, WRITE_T, GROUP_P], ids()).records)
    result = delete_acls(image, [AclFilter(resource_name="t"), AclFilter(resource_type=Res.TOPIC),
                                 AclFilter(operation=Op.UNKNOWN), AclFilter(resource_type=Res.GROUP)])
    assert [set(o.deleted) for o in result.response] == [{READ_T, WRITE_T}, set(), set(), {GROUP_P}]
    assert result.response[2].error == ErrorCode.INVALID_REQUEST
    assert all(isinstance(r, RemoveAccessControlEntry) for r in result.records) and len(result.records) == 3
    assert not replay(image, result.records).acls.by_id


def test_describe_uses_the_filter() -> None:
    image = replay(EMPTY_IMAGE, create_acls(EMPTY_IMAGE, [READ_T, WRITE_T, GROUP_P], ids()).records)
    assert describe_acls(image, AclFilter(resource_name="app-x", pattern_type=Pat.MATCH)) == [GROUP_P]
    assert describe_acls(image, AclFilter(permission_type=Perm.DENY)) == [WRITE_T]
    assert len(describe_acls(image, AclFilter())) == 3


def test_binding_body_round_trip() -> None:
    for binding in (READ_T, WRITE_T, GROUP_P):
        assert parse_binding(acl_view(binding), "acls[0]") == binding
    minimal = {"resource_type": "topic", "resource_name": "t", "principal": "User:a", "operation": 3}
    assert parse_binding(minimal, "acls[0]") == READ_T  # defaults: LITERAL, host *, ALLOW


@pytest.mark.parametrize(("body", "field"), [
    ({"resource_type": "TOPIK", "resource_name": "t", "principal": "User:a", "operation": "READ"},
     "acls[0].resource_type"),
    ({"resource_type": "TOPIC", "resource_name": 5, "principal": "User:a", "operation": "READ"},
     "acls[0].resource_name"),
    ({"resource_type": "TOPIC", "resource_name": "t", "operation": "READ"}, "acls[0].principal"),
    ({"resource_type": "TOPIC", "resource_name": "t", "principal": "User:a", "operation": "READ", "x": 1},
     "acls[0].x"),
    ({"resource_type": "TOPIC", "resource_name": "t", "principal": "User:a", "operation": 99},
     "acls[0].operation"),
    ([], "acls[0]"),
])
def test_bad_binding_bodies_name_the_field(body: object, field: str) -> None:
    with pytest.raises(AdminError) as caught:
        parse_binding(body, "acls[0]")
    assert caught.value.field == field and caught.value.status == 400


def test_filter_from_query() -> None:
    assert parse_filter({}, "") == AclFilter()
    assert parse_filter({"resource_type": "2", "pattern_type": "match", "resource_name": "t"}, "") == AclFilter(
        Res.TOPIC, "t", Pat.MATCH)
    with pytest.raises(AdminError) as caught:
        parse_filter({"operation": "FLY"}, "")
    assert caught.value.field == "operation"


def test_unknown_filter_parts_are_parsed_for_the_route_to_refuse() -> None:
    from security.acl import filter_error

    assert filter_error(parse_filter({"pattern_type": "UNKNOWN"}, "")) == "Unknown patternFilter."
