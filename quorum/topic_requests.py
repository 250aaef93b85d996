"""The admin API's topic bodies, checked: POST /v1/topics, POST /v1/topics/{name}/partitions and
PATCH /v1/topics/{name}/configs.

Pure, like the rest of `quorum.admin_api` (whose field checks and `AdminError` it uses): decoded
JSON in, a frozen request or an `AdminError` naming the field out. What only the image can
decide (registered brokers, partition counts, Kafka's manual-assignment rules) is the rules'
job (`quorum.topic_control`, `quorum.replica_assignment`), for HTTP and Kafka requests alike.

    POST /v1/topics {name, partitions?, replication_factor?, configs?, assignments?, validate_only?}
        assignments: [{"partition": 0, "replicas": [4, 5]}, ...]  (first replica: preferred leader)
    POST /v1/topics/{name}/partitions {count, assignments?, validate_only?}
        assignments: [[4, 5], ...]  (one replica list per new partition, in order)
    PATCH /v1/topics/{name}/configs {configs | ops | replace, validate_only?}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from common.limits import MAX_RECORDS_PER_USER_OP, MAX_REPLICATION_FACTOR
from common.units import INT_MAX
from quorum.admin_api import (
    MAX_CONFIGS_PER_REQUEST,
    json_type,
    check_configs,
    check_int,
    check_object,
    check_topic_name,
    invalid,
)
from quorum.config_control import AlterConfigOp, ConfigChanges, parse_op_type
from quorum.controller_result import ControllerApiError
from quorum.replica_assignment import UNSET

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

MAX_BROKER_ID: Final = INT_MAX
CREATE_TOPIC_FIELDS: Final = ("name", "partitions", "replication_factor", "configs", "assignments",
                              "validate_only")
CREATE_PARTITIONS_FIELDS: Final = ("count", "assignments", "validate_only")


@dataclass(frozen=True, slots=True)
class CreateTopicRequest:
    name: str
    partitions: int  # -1 (UNSET) with manual assignments
    replication_factor: int  # -1 (UNSET) with manual assignments
    configs: Mapping[str, str]
    assignments: tuple[tuple[int, tuple[int, ...]], ...] = ()  # (partition, replicas), request order
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class CreatePartitionsRequest:
    count: int  # the new total
    assignments: tuple[tuple[int, ...], ...] | None = None  # one replica list per new partition
    validate_only: bool = False


def _check_bool(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise invalid(f"{field} must be true or false, got {type(value).__name__}", field)
    return value


def _check_replicas(value: Any, field: str) -> tuple[int, ...]:
    """A list of broker ids; emptiness and duplicates are the rule's (Kafka's messages)."""
    if not isinstance(value, list):
        raise invalid(f"{field} must be an array of broker ids", field, "INVALID_REPLICA_ASSIGNMENT")
    if len(value) > MAX_REPLICATION_FACTOR:
        raise invalid(f"{field} names {len(value)} replicas, at most {MAX_REPLICATION_FACTOR} are allowed",
                      field, "INVALID_REPLICA_ASSIGNMENT")
    return tuple(check_int(b, f"{field}[{i}]", 0, MAX_BROKER_ID, "INVALID_REPLICA_ASSIGNMENT")
                 for i, b in enumerate(value))


def _check_list(value: Any, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise invalid(f"{field} must be an array", field)
    if len(value) > MAX_RECORDS_PER_USER_OP:
        raise invalid(f"{field} has {len(value)} entries, at most {MAX_RECORDS_PER_USER_OP} are allowed",
                      field, "INVALID_PARTITIONS")
    return value


def _topic_assignments(value: Any) -> tuple[tuple[int, tuple[int, ...]], ...]:
    out = []
    for i, item in enumerate(_check_list(value, "assignments")):
        at = f"assignments[{i}]."
        check_object(item, ("partition", "replicas"), ("partition", "replicas"), at)
        out.append((check_int(item["partition"], at + "partition", 0, MAX_RECORDS_PER_USER_OP - 1,
                              "INVALID_REPLICA_ASSIGNMENT"),
                    _check_replicas(item["replicas"], at + "replicas")))
    return tuple(out)


def parse_create_topic(body: Any, *, default_partitions: int,
                       default_replication_factor: int) -> CreateTopicRequest:
    """POST /v1/topics. With `assignments`, partitions and replication_factor are -1 unless given
    (then the rule refuses them, as Kafka: INVALID_REQUEST); without, they default to the
    controller's num.partitions and default.replication.factor."""
    body = check_object(body, CREATE_TOPIC_FIELDS, ("name",))
    name = check_topic_name(body["name"])
    assignments = _topic_assignments(body["assignments"]) if "assignments" in body else ()
    manual = bool(assignments)
    low = UNSET if manual else 1
    partitions = check_int(body.get("partitions", UNSET if manual else default_partitions), "partitions",
                           low, MAX_RECORDS_PER_USER_OP, "INVALID_PARTITIONS")
    replication_factor = check_int(
        body.get("replication_factor", UNSET if manual else default_replication_factor),
        "replication_factor", low, MAX_REPLICATION_FACTOR, "INVALID_REPLICATION_FACTOR")
    configs = check_configs(body.get("configs", {}), "configs", allow_delete=False)
    validate_only = _check_bool(body.get("validate_only", False), "validate_only")
    return CreateTopicRequest(name, partitions, replication_factor,
                              MappingProxyType({k: v for k, v in configs.items() if v is not None}),
                              assignments, validate_only)


def parse_create_partitions(body: Any) -> CreatePartitionsRequest:
    """POST /v1/topics/{name}/partitions: the new total, as Kafka's CreatePartitions."""
    body = check_object(body, CREATE_PARTITIONS_FIELDS, ("count",))
    count = check_int(body["count"], "count", 1, MAX_RECORDS_PER_USER_OP, "INVALID_PARTITIONS")
    assignments = None
    if body.get("assignments") is not None:
        assignments = tuple(_check_replicas(item, f"assignments[{i}]")
                            for i, item in enumerate(_check_list(body["assignments"], "assignments")))
    return CreatePartitionsRequest(count, assignments, _check_bool(body.get("validate_only", False),
                                                                   "validate_only"))


def parse_alter_configs(body: Any) -> ConfigChanges:
    """PATCH /v1/topics/{name}/configs: exactly one of {configs: {name: value | null}} (null
    deletes), {ops: [{name, op: SET|DELETE|APPEND|SUBTRACT, value}]} (IncrementalAlterConfigs) and
    {replace: {name: value}} (AlterConfigs: the whole set), with validate_only (default false)."""
    forms = ("configs", "ops", "replace")
    body = check_object(body, (*forms, "validate_only"))
    given = [form for form in forms if form in body]
    if len(given) != 1:
        raise invalid(f"give exactly one of configs, ops and replace (got {', '.join(given) or 'none'})",
                      given[1] if len(given) > 1 else "configs")
    validate_only = body.get("validate_only", False)
    if not isinstance(validate_only, bool):
        raise invalid(f"validate_only must be a boolean, got {json_type(validate_only)}", "validate_only")
    if "replace" in body:
        replace = check_configs(body["replace"], "replace", allow_delete=False)
        return ConfigChanges(replace=MappingProxyType({k: v for k, v in replace.items() if v is not None}),
                             validate_only=validate_only)
    if "ops" in body:
        return ConfigChanges(ops=_parse_ops(body["ops"]), validate_only=validate_only)
    changes = check_configs(body["configs"], "configs", allow_delete=True)
    if not changes:
        raise invalid("configs must name at least one config", "configs", "INVALID_CONFIG")
    return ConfigChanges(configs=MappingProxyType(changes), validate_only=validate_only)


def _parse_ops(items: Any) -> tuple[AlterConfigOp, ...]:
    if not isinstance(items, list) or not items or len(items) > MAX_CONFIGS_PER_REQUEST:
        raise invalid(f"ops must be an array of 1..{MAX_CONFIGS_PER_REQUEST} operations, got "
                      f"{json_type(items)}", "ops")
    ops = []
    for i, item in enumerate(items):
        item = check_object(item, ("name", "op", "value"), ("name", "op"), f"ops[{i}].")
        name, value = item["name"], item.get("value")
        if not isinstance(name, str):
            raise invalid(f"ops[{i}].name must be a string, got {json_type(name)}", f"ops[{i}].name")
        checked = check_configs({name: value}, f"ops[{i}]", allow_delete=True)
        if not isinstance(item["op"], str):
            raise invalid(f"ops[{i}].op must be a string, got {json_type(item['op'])}", f"ops[{i}].op")
        try:
            op = parse_op_type(item["op"])
        except ControllerApiError as exc:
            raise invalid(exc.message, f"ops[{i}].op") from None
        ops.append(AlterConfigOp(name, op, checked[name]))
    return tuple(ops)
