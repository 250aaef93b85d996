"""The admin API's topic-creation bodies, checked: POST /v1/topics and POST /v1/topics/{name}/partitions.

Pure, like the rest of `quorum.admin_api` (whose field checks and `AdminError` it uses): decoded
JSON in, a frozen request or an `AdminError` naming the field out. What only the image can
decide (registered brokers, partition counts, Kafka's manual-assignment rules) is the rules'
job (`quorum.topic_control`, `quorum.replica_assignment`), for HTTP and Kafka requests alike.

    POST /v1/topics {name, partitions?, replication_factor?, configs?, assignments?, validate_only?}
        assignments: [{"partition": 0, "replicas": [4, 5]}, ...]  (first replica: preferred leader)
    POST /v1/topics/{name}/partitions {count, assignments?, validate_only?}
        assignments: [[4, 5], ...]  (one replica list per new partition, in order)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from quorum.admin_api import (
    MAX_REPLICATION_FACTOR,
    check_configs,
    check_int,
    check_object,
    check_topic_name,
    invalid,
)
from quorum.replica_assignment import UNSET
from quorum.topic_control import MAX_PARTITIONS_PER_REQUEST

MAX_BROKER_ID: Final = 2**31 - 1
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
    if len(value) > MAX_PARTITIONS_PER_REQUEST:
        raise invalid(f"{field} has {len(value)} entries, at most {MAX_PARTITIONS_PER_REQUEST} are allowed",
                      field, "INVALID_PARTITIONS")
    return value


def _topic_assignments(value: Any) -> tuple[tuple[int, tuple[int, ...]], ...]:
    out = []
    for i, item in enumerate(_check_list(value, "assignments")):
        at = f"assignments[{i}]."
        check_object(item, ("partition", "replicas"), ("partition", "replicas"), at)
        out.append((check_int(item["partition"], at + "partition", 0, MAX_PARTITIONS_PER_REQUEST - 1,
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
                           low, MAX_PARTITIONS_PER_REQUEST, "INVALID_PARTITIONS")
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
    count = check_int(body["count"], "count", 1, MAX_PARTITIONS_PER_REQUEST, "INVALID_PARTITIONS")
    assignments = None
    if body.get("assignments") is not None:
        assignments = tuple(_check_replicas(item, f"assignments[{i}]")
                            for i, item in enumerate(_check_list(body["assignments"], "assignments")))
    return CreatePartitionsRequest(count, assignments, _check_bool(body.get("validate_only", False),
                                                                   "validate_only"))
