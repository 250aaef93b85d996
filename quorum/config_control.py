"""Config changes as Kafka's admin requests express them, turned into one resource's set/delete map,
and the rule for dynamic broker configs.

    changes = incremental_changes(current, ops)        # IncrementalAlterConfigs (KIP-339)
    changes = replacement_changes(current, configs)    # AlterConfigs: the given set replaces all
    result = alter_topic_configs(image, name, changes) # records (quorum.topic_control)
    result = alter_broker_configs(image, "4", changes) # BROKER "4" or "" (cluster default): records

Kafka's ConfigurationControlManager rules, kept exactly:
- SET sets and DELETE removes a key; APPEND and SUBTRACT apply only to LIST keys
  (INVALID_CONFIG otherwise) and start from the key's current value, or from its default when
  it has none: APPEND adds each comma-separated item not yet there, in order; SUBTRACT removes
  each one present.
- One key may appear once per resource (INVALID_REQUEST "duplicate config keys").
- An unknown op type is INVALID_REQUEST.
- AlterConfigs (the legacy API) replaces the whole set: a key set before and not named now
  goes back to its default.
Values are validated by `alter_topic_configs`, which also names a near miss for an unknown key,
and for brokers by `alter_broker_configs` (common.dynamic_config: only the dynamic keys; APPEND
and SUBTRACT of a broker LIST key start from the resource's dynamic value, else Kafka's default).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from common.config_schema import ConfigType
from common.dynamic_config import (
    BrokerConfigError,
    check_broker_changes,
    check_resource_name,
    default_string,
    is_broker_key,
    is_list_key,
)
from common.errors import ErrorCode
from common.protocol.api_versions import ELR_VERSION
from common.topic_config import (
    MIN_INSYNC_REPLICAS,
    TOPIC_CONFIGS_BY_NAME,
    UNCLEAN_LEADER_ELECTION_ENABLE,
    config_string,
    default_value,
)
from metadata.image import MetadataImage
from metadata.records import Config, ConfigResourceType, Record
from quorum.controller_result import ControllerApiError, ControllerResult
from quorum.feature_control import elr_clearing_records
from quorum.topic_control import elect_leaderless

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)


class AlterConfigOpType(enum.IntEnum):
    """IncrementalAlterConfigs' config_operation (Kafka's AlterConfigOp.OpType ids)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    name: str
    op: AlterConfigOpType
    value: str | None = None


def parse_op_type(raw: int | str) -> AlterConfigOpType:
    """An op type from its wire id or its name; INVALID_REQUEST otherwise."""
    try:
        return AlterConfigOpType[raw.upper()] if isinstance(raw, str) else AlterConfigOpType(raw)
    except (KeyError, ValueError):
        raise ControllerApiError(ErrorCode.INVALID_REQUEST, f"unknown config operation {raw!r}; expected "
                                 "SET, DELETE, APPEND or SUBTRACT", field="op") from None


def _is_list(name: str) -> bool:
    definition = TOPIC_CONFIGS_BY_NAME.get(name)
    return definition is not None and definition.key.type is ConfigType.LIST


def _items(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def _topic_default(name: str) -> str | None:
    default = default_value(name)
    return None if default is None else config_string(default)


def _start_list(current: Mapping[str, str], name: str, default: Callable[[str], str | None]) -> list[str]:
    return _items(current[name] if name in current else default(name))


def _check_unique(names: Sequence[str]) -> None:
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ControllerApiError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys: "
                                 + ", ".join(duplicates), field=duplicates[0])


def incremental_changes(current: Mapping[str, str], ops: Sequence[AlterConfigOp], *,
                        broker: bool = False) -> dict[str, str | None]:
    """The key -> new value (None: delete) map that `ops` make of a resource's `current` configs
    (a topic's, or with `broker` a BROKER resource's)."""
    is_list, is_known, default = ((is_list_key, is_broker_key, default_string) if broker
                                  else (_is_list, TOPIC_CONFIGS_BY_NAME.__contains__, _topic_default))
    _check_unique([op.name for op in ops])
    changes: dict[str, str | None] = {}
    for op in ops:
        if op.op is AlterConfigOpType.SET:
            changes[op.name] = op.value if op.value is not None else ""
        elif op.op is AlterConfigOpType.DELETE:
            changes[op.name] = None
        else:
            if not is_list(op.name):
                what = "not a LIST" if is_known(op.name) else "unknown"
                raise ControllerApiError(ErrorCode.INVALID_CONFIG, f"Can't {op.op.name} to key {op.name} "
                                         f"because its type is {what}.", field=op.name)
            items = _start_list(current, op.name, default)
            if op.op is AlterConfigOpType.APPEND:
                items += [item for item in dict.fromkeys(_items(op.value)) if item not in items]
            else:
                removed = set(_items(op.value))
                items = [item for item in items if item not in removed]
            changes[op.name] = ",".join(items)
    return changes


def replacement_changes(current: Mapping[str, str], configs: Mapping[str, str | None]) -> dict[str, str | None]:
    """AlterConfigs: `configs` is the whole new set; keys set before and not named are deleted."""
    changes: dict[str, str | None] = {key: None for key in current if key not in configs}
    changes.update(configs)
    return changes


@dataclass(frozen=True, slots=True)
class ConfigChanges:
    """One resource's change in whichever form it came (exactly one of the three is set)."""

    configs: Mapping[str, str | None] | None = None  # value sets, None deletes
    ops: tuple[AlterConfigOp, ...] | None = None  # IncrementalAlterConfigs
    replace: Mapping[str, str] | None = None  # AlterConfigs: the whole new set
    validate_only: bool = False

    def __post_init__(self) -> None:
        if sum(form is not None for form in (self.configs, self.ops, self.replace)) != 1:
            raise ValueError("ConfigChanges takes exactly one of configs, ops and replace")

    def against(self, current: Mapping[str, str], *, broker: bool = False) -> dict[str, str | None]:
        """The set/delete map these changes make of `current` (a BROKER resource's with `broker`)."""
        if self.ops is not None:
            return incremental_changes(current, self.ops, broker=broker)
        if self.replace is not None:
            return replacement_changes(current, self.replace)
        assert self.configs is not None
        return dict(self.configs)


def alter_broker_configs(image: MetadataImage, name: str,
                         changes: Mapping[str, str | None]) -> ControllerResult[None]:
    """Dynamic broker configs of broker `name` ("": the cluster-wide default): one Config record
    (resource type BROKER) per key whose value changes; nothing when any key is refused (the
    error names it). Kafka's controller takes any broker id, registered or not."""
    try:
        check_resource_name(name)
        checked = check_broker_changes(changes, per_broker=name != "")
    except BrokerConfigError as e:
        raise ControllerApiError(e.code, e.message, field=e.key or "name") from None
    current = image.config(ConfigResourceType.BROKER, name)
    records: list[Record] = [Config(ConfigResourceType.BROKER, name, key, value)
                             for key, value in sorted(checked.items()) if current.get(key) != value]
    if name == "" and UNCLEAN_LEADER_ELECTION_ENABLE in checked:
        records += _default_unclean_elections(image, current.get(UNCLEAN_LEADER_ELECTION_ENABLE),
                                              checked[UNCLEAN_LEADER_ELECTION_ENABLE])
    if name == "" and MIN_INSYNC_REPLICAS in checked and image.feature_level(ELR_VERSION) >= 1:
        records += _cluster_min_isr_with_elr(image, checked[MIN_INSYNC_REPLICAS])
    return ControllerResult(records, None)


def _cluster_min_isr_with_elr(image: MetadataImage, value: str | None) -> tuple[Record, ...]:
    """KIP-966 (Kafka 4.1) with ELR on: the cluster-wide min.insync.replicas is what the ELR is
    kept against, so it cannot be removed; and setting it, even to the same value, clears every
    partition's ELR (chosen under the old minimum)."""
    if value is None:
        raise ControllerApiError(ErrorCode.INVALID_CONFIG, (
            f"Cannot remove the cluster-level {MIN_INSYNC_REPLICAS} while {ELR_VERSION} is enabled"),
            field=MIN_INSYNC_REPLICAS)
    return elr_clearing_records(image, error=ErrorCode.INVALID_CONFIG, field=MIN_INSYNC_REPLICAS,
                                why=f"Setting the cluster-level {MIN_INSYNC_REPLICAS}")


def _default_unclean_elections(image: MetadataImage, before: str | None, after: str | None) -> list[Record]:
    """Turning the cluster-wide unclean.leader.election.enable on brings back, at once, the
    leaderless partitions of every topic that does not set it itself (as a topic's own change does
    in quorum.topic_control): the first live replica leads, marked RECOVERING."""
    if after != "true" or before == after:
        return []

    out: list[Record] = []
    for topic_name in sorted(image.topics.by_name):
        if UNCLEAN_LEADER_ELECTION_ENABLE in image.config(ConfigResourceType.TOPIC, topic_name):
            continue  # the topic's own value decides
        out.extend(elect_leaderless(image, image.topics.by_name[topic_name]))
    return out
