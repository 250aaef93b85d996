"""tidelog/cli_acls.py's pure part: kafka-acls.sh options to bindings and filters, answers to
its lines."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from security.acl import AclBinding, AclFilter, AclOperation, AclPermissionType, PatternType, ResourceType
from tidelog import cli_acls
from tidelog.cli_common import UsageError

Op, Res, Pat, Perm = AclOperation, ResourceType, PatternType, AclPermissionType


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    cli_acls.add_arguments(sub.add_parser("acls"))
    return parser.parse_args(["acls", *argv])


def b(rtype: ResourceType, name: str, op: AclOperation, perm: AclPermissionType = Perm.ALLOW, *,
      who: str = "User:a", host: str = "*", pattern: PatternType = Pat.LITERAL) -> AclBinding:
    return AclBinding(rtype, name, pattern, who, host, op, perm)


@pytest.mark.parametrize(("argv", "expected"), [
    (["add", "--allow-principal", "User:a", "--operation", "Read", "--topic", "t"], [b(Res.TOPIC, "t", Op.READ)]),
    (["add", "--allow-principal", "User:a", "--topic", "t"], [b(Res.TOPIC, "t", Op.ALL)]),
    (["add", "--deny-principal", "User:*", "--deny-host", "10.0.0.1", "--operation", "cluster_action", "--cluster"],
     [b(Res.CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION, Perm.DENY, who="User:*", host="10.0.0.1")]),
    (["add", "--allow-principal", "User:a", "--operation", "Write", "--topic", "p-",
      "--resource-pattern-type", "prefixed"], [b(Res.TOPIC, "p-", Op.WRITE, pattern=Pat.PREFIXED)]),
    (["add", "--allow-principal", "User:a", "--consumer", "--topic", "t", "--group", "g"],
     [b(Res.TOPIC, "t", Op.READ), b(Res.TOPIC, "t", Op.DESCRIBE), b(Res.GROUP, "g", Op.READ)]),
    (["add", "--allow-principal", "User:a", "--producer", "--idempotent", "--topic", "t", "--transactional-id", "x"],
     [b(Res.TOPIC, "t", Op.WRITE), b(Res.TOPIC, "t", Op.DESCRIBE), b(Res.TOPIC, "t", Op.CREATE),
      b(Res.TRANSACTIONAL_ID, "x", Op.WRITE), b(Res.TRANSACTIONAL_ID, "x", Op.DESCRIBE),
      b(Res.CLUSTER, "kafka-cluster", Op.IDEMPOTENT_WRITE)]),
])
def test_bindings(argv: list[str], expected: list[AclBinding]) -> None:
    assert cli_acls.bindings(parse(*argv)) == expected


@pytest.mark.parametrize(("argv", "message"), [
    (["add", "--topic", "t"], "--allow-principal or --deny-principal"),
    (["add", "--allow-principal", "alice", "--topic", "t"], "Type:name"),
    (["add", "--allow-principal", "User:a"], "give a resource"),
    (["add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"], "--operation 'Fly'"),
    (["add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"],
     "--resource-pattern-type 'match'"),
    (["add", "--allow-principal", "User:a", "--consumer", "--topic", "t"], "--consumer needs --group"),
])
def test_usage_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        cli_acls.bindings(parse(*argv))


def test_list_filters() -> None:
    assert cli_acls.list_filters(parse("list")) == [AclFilter()]
    assert cli_acls.list_filters(parse("list", "--topic", "t", "--resource-pattern-type", "match",
                                       "--principal", "User:a")) == [AclFilter(Res.TOPIC, "t", Pat.MATCH, "User:a")]


def test_describe_lines_are_kafka_acls() -> None:
    acl = SimpleNamespace(principal="User:a", host="*", operation=3, permission_type=3)
    resource = SimpleNamespace(resource_type=2, resource_name="t", pattern_type=3, acls=[acl])
    assert cli_acls.describe_lines([resource]) == [
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`: ",
        " \t(principal=User:a, host=*, operation=READ, permissionType=ALLOW) ",
        ""]
