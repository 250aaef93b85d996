"""`tidelog acls add|remove|list`: kafka-acls.sh over the Kafka protocol (CreateAcls,
DeleteAcls, DescribeAcls), with its options and its output lines.

    tidelog acls add --allow-principal User:alice --operation Read --operation Describe --topic orders
    tidelog acls add --deny-principal User:mallory --operation All --topic pay --resource-pattern-type prefixed
    tidelog acls add --allow-principal User:app --consumer --topic orders --group app
    tidelog acls add --allow-principal User:app --producer --topic orders
    tidelog acls list [--topic orders] [--principal User:alice] [--resource-pattern-type match]
    tidelog acls remove --allow-principal User:alice --operation Read --topic orders

The broker must run an authorizer (`authorizer.class.name`); without one it answers
SECURITY_DISABLED, shown as the error. --producer is WRITE, DESCRIBE and CREATE on the topics
(and WRITE, DESCRIBE on --transactional-id, IDEMPOTENT_WRITE on the cluster with --idempotent);
--consumer is READ and DESCRIBE on the topics and READ on the group, as in kafka-acls.sh.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from typing import Any, Final

from common.protocol import acls as acl_wire
from common.protocol.api_keys import ApiKey
from security.acl import (
    CLUSTER_NAME,
    WILDCARD,
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tidelog import cli_common
from tidelog.cli_common import ClusterError, UsageError

ACL_VERSION: Final = 2  # the first flexible version of all three APIs; every client-visible field
Op, Res, Pat, Perm = AclOperation, ResourceType, PatternType, AclPermissionType
# kafka-acls.sh's operation names (Read, ClusterAction, ...), matched without case or underscores
OPERATIONS: Final = {op.name.replace("_", "").lower(): op for op in Op if op not in (Op.UNKNOWN, Op.ANY)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="acls_command", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="create ACLs (kafka-acls --add)")
    remove = actions.add_parser("remove", help="delete the ACLs the options match (kafka-acls --remove)")
    list_ = actions.add_parser("list", help="list the ACLs the options match (kafka-acls --list)")
    for action in (add, remove, list_):
        cli_common.add_cluster_options(action, admin=False)
        action.add_argument("--topic", action="append", default=[], help="a topic (or * for all, or a prefix)")
        action.add_argument("--group", action="append", default=[], help="a consumer group (or *, or a prefix)")
        action.add_argument("--transactional-id", action="append", default=[], help="a transactional id")
        action.add_argument("--cluster", action="store_true", help="the cluster resource")
        action.add_argument("--resource-pattern-type", default=None, metavar="TYPE",
                            help="literal (default) or prefixed; list and remove also take any and match")
    for action in (add, remove):
        action.add_argument("--allow-principal", action="append", default=[], metavar="Type:name")
        action.add_argument("--deny-principal", action="append", default=[], metavar="Type:name")
        action.add_argument("--allow-host", action="append", default=[], help="default: * with --allow-principal")
        action.add_argument("--deny-host", action="append", default=[], help="default: * with --deny-principal")
        action.add_argument("--operation", action="append", default=[],
                            help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                                 "AlterConfigs, IdempotentWrite, All (default: All)")
        action.add_argument("--producer", action="store_true", help="the ACLs a producer needs")
        action.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs (with --group)")
        action.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite too")
    list_.add_argument("--principal", action="append", default=[], metavar="Type:name",
                       help="only the ACLs of this principal")
    add.set_defaults(run=cli_common.guarded("acls add", run_add))
    remove.set_defaults(run=cli_common.guarded("acls remove", run_remove))
    list_.set_defaults(run=cli_common.guarded("acls list", run_list))


# --- pure: options to bindings and filters, answers to lines -----------------------------------

def parse_operation(text: str) -> AclOperation:
    op = OPERATIONS.get(text.replace("_", "").replace("-", "").lower())
    if op is None:
        raise UsageError(f"--operation {text!r}: expected one of {', '.join(_shown(o) for o in OPERATIONS.values())}")
    return op


def parse_pattern(text: str | None, *, filtering: bool) -> PatternType:
    if text is None:
        return Pat.LITERAL
    allowed = (Pat.LITERAL, Pat.PREFIXED, Pat.ANY, Pat.MATCH) if filtering else (Pat.LITERAL, Pat.PREFIXED)
    try:
        pattern = Pat[text.upper()]
    except KeyError:
        pattern = Pat.UNKNOWN
    if pattern not in allowed:
        raise UsageError(f"--resource-pattern-type {text!r}: expected one of "
                         f"{', '.join(p.name.lower() for p in allowed)}")
    return pattern


def resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    out = [(Res.TOPIC, t) for t in args.topic] + [(Res.GROUP, g) for g in args.group]
    out += [(Res.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((Res.CLUSTER, CLUSTER_NAME))
    return out


def _ops_for(args: argparse.Namespace, resource_type: ResourceType) -> list[AclOperation]:
    """The operations on one resource type: --operation, or what --producer / --consumer imply."""
    if not args.producer and not args.consumer:
        return [parse_operation(o) for o in args.operation] or [Op.ALL]
    ops: list[AclOperation] = []
    if args.producer:
        ops += {Res.TOPIC: [Op.WRITE, Op.DESCRIBE, Op.CREATE], Res.TRANSACTIONAL_ID: [Op.WRITE, Op.DESCRIBE],
                Res.CLUSTER: [Op.IDEMPOTENT_WRITE] if args.idempotent else []}.get(resource_type, [])
    if args.consumer:
        ops += {Res.TOPIC: [Op.READ, Op.DESCRIBE], Res.GROUP: [Op.READ]}.get(resource_type, [])
    return list(dict.fromkeys(ops))


def _entries(args: argparse.Namespace) -> list[tuple[str, str, AclPermissionType]]:
    """(principal, host, permission) for every --allow/--deny principal and host."""
    if not args.allow_principal and not args.deny_principal:
        raise UsageError("give --allow-principal or --deny-principal (Type:name, e.g. User:alice)")
    out = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, Perm.ALLOW),
                                          (args.deny_principal, args.deny_host, Perm.DENY)):
        for principal in principals:
            if ":" not in principal:
                raise UsageError(f"principal {principal!r}: expected Type:name, e.g. User:alice")
            out += [(principal, host, permission) for host in (hosts or [WILDCARD])]
    return out


def bindings(args: argparse.Namespace) -> list[AclBinding]:
    """What `add` creates (and `remove` deletes): every resource x entry x operation."""
    if args.consumer and not args.group:
        raise UsageError("--consumer needs --group")
    found = resources(args)
    if args.producer and args.idempotent and not args.cluster:
        found.append((Res.CLUSTER, CLUSTER_NAME))
    if not found:
        raise UsageError("give a resource: --topic, --group, --transactional-id or --cluster")
    pattern = parse_pattern(args.resource_pattern_type, filtering=False)
    out = []
    for resource_type, name in found:
        for op in _ops_for(args, resource_type):
            for principal, host, permission in _entries(args):
                out.append(AclBinding(resource_type, name, Pat.LITERAL if resource_type == Res.CLUSTER else pattern,
                                      principal, host, op, permission))
    return list(dict.fromkeys(out))


def list_filters(args: argparse.Namespace) -> list[AclFilter]:
    pattern = parse_pattern(args.resource_pattern_type, filtering=True)
    principals: Sequence[str | None] = args.principal or [None]
    found = resources(args)
    if not found:  # every ACL (of the principals)
        return [AclFilter(principal=p) for p in principals]
    return [AclFilter(t, n, pattern, p) for t, n in found for p in principals]


def _shown(op: AclOperation) -> str:
    """kafka-acls.sh's spelling: ClusterAction, IdempotentWrite."""
    return "".join(part.capitalize() for part in op.name.split("_"))


def pattern_line(resource_type: int, name: str, pattern: int) -> str:
    return (f"ResourcePattern(resourceType={Res(resource_type).name}, name={name}, "
            f"patternType={Pat(pattern).name})")


def entry_line(principal: str, host: str, operation: int, permission: int) -> str:
    return (f"\t(principal={principal}, host={host}, operation={Op(operation).name}, "
            f"permissionType={Perm(permission).name})")


def describe_lines(resources_: Iterable[Any]) -> list[str]:
    """kafka-acls.sh --list's lines from a DescribeAclsResponse's resources."""
    out = []
    for r in resources_:
        out.append(f"Current ACLs for resource `{pattern_line(r.resource_type, r.resource_name, r.pattern_type)}`: ")
        out += [f" {entry_line(a.principal, a.host, a.operation, a.permission_type)} " for a in r.acls]
        out.append("")
    return out


# --- the calls ----------------------------------------------------------------------------------

def _call(args: argparse.Namespace, api_key: ApiKey, request: object) -> Any:
    from common.broker_connection import BrokerUnavailable
    from common.kafka_client import KafkaClient

    found = cli_common.resolve(args, need_kafka=True)
    with KafkaClient(found.bootstrap_servers, client_id="tidelog-acls", security=found.security) as client:
        try:
            return client.call(None, api_key, ACL_VERSION, request, acl_wire.encode_request,
                               acl_wire.response_decoder(api_key))
        except BrokerUnavailable as exc:
            raise ClusterError("NETWORK_EXCEPTION", f"cannot reach a broker: {exc}") from None


def _filter_tuple(f: AclFilter) -> acl_wire.Filter:
    return (int(f.resource_type), f.resource_name, f.principal, f.host, int(f.operation), int(f.permission_type),
            int(f.pattern_type))


def _describe(args: argparse.Namespace, flt: AclFilter) -> list[Any]:
    from common.kafka_client import error_name

    answer = _call(args, ApiKey.DESCRIBE_ACLS, acl_wire.describe_request(ACL_VERSION, _filter_tuple(flt)))
    if answer.error_code:
        raise ClusterError(error_name(answer.error_code), answer.error_message or "")
    return list(answer.resources)


def run_add(args: argparse.Namespace) -> int:
    from common.kafka_client import error_name

    wanted = bindings(args)
    request = acl_wire.create_request(ACL_VERSION, *(
        (int(b.resource_type), b.resource_name, b.principal, b.host, int(b.operation), int(b.permission_type),
         int(b.pattern_type)) for b in wanted))
    by_pattern: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in wanted:
        by_pattern.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    for (t, name, pattern), found in by_pattern.items():
        cli_common.say(f"Adding ACLs for resource `{pattern_line(t, name, pattern)}`: ")
        cli_common.say_lines([f" {entry_line(b.principal, b.host, b.operation, b.permission_type)} " for b in found])
        cli_common.say()
    answer = _call(args, ApiKey.CREATE_ACLS, request)
    for result in answer.results:
        if result.error_code:
            raise ClusterError(error_name(result.error_code), result.error_message or "")
    for t, name, pattern in by_pattern:
        cli_common.say_lines(describe_lines(_describe(args, AclFilter(Res(t), name, Pat(pattern)))))
    return 0


def run_remove(args: argparse.Namespace) -> int:
    from common.kafka_client import error_name

    filters = [AclFilter(b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host, b.operation,
                         b.permission_type) for b in bindings(args)]
    answer = _call(args, ApiKey.DELETE_ACLS, acl_wire.delete_request(ACL_VERSION, *map(_filter_tuple, filters)))
    removed = 0
    for result in answer.filter_results:
        if result.error_code:
            raise ClusterError(error_name(result.error_code), result.error_message or "")
        for a in result.matching_acls:
            removed += 1
            cli_common.say(f"Removed ACL for resource `{pattern_line(a.resource_type, a.resource_name, a.pattern_type)}`:"
                           f" {entry_line(a.principal, a.host, a.operation, a.permission_type).strip()}")
    if not removed:
        cli_common.say("No matching ACLs were found.")
    return 0


def run_list(args: argparse.Namespace) -> int:
    for flt in list_filters(args):
        cli_common.say_lines(describe_lines(_describe(args, flt)))
    return 0
