"""Config changes as Kafka's admin requests express them, turned into one topic's set/delete map.

    changes = incremental_changes(current, ops)        # IncrementalAlterConfigs (KIP-339)
    changes = replacement_changes(current, configs)    # AlterConfigs: the given set replaces all
    result = alter_topic_configs(image, name, changes) # records (quorum.topic_control)

Kafka's ConfigurationControlManager rules, kept exactly:
- SET sets and DELETE removes a key; APPEND and SUBTRACT apply only to LIST keys
  (INVALID_CONFIG otherwise) and start from the key's current value, or from its default when
  it has none: APPEND adds each comma-separated item not yet there, in order; SUBTRACT removes
  each one present.
- One key may appear once per resource (INVALID_REQUEST "duplicate config keys").
- An unknown op type is INVALID_REQUEST.
- AlterConfigs (the legacy API) replaces the whole set: a key set before and not named now
  goes back to its default.
Values are validated by `alter_topic_configs`, which also names a near miss for an unknown key.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from common.config_schema import ConfigType
from common.errors import ErrorCode
from common.topic_config import TOPIC_CONFIGS_BY_NAME, config_string, default_value
from quorum.controller_result import ControllerApiError


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


def _start_list(current: Mapping[str, str], name: str) -> list[str]:
    if name in current:
        return _items(current[name])
    default = default_value(name)
    return [] if default is None else _items(config_string(default))


def _check_unique(names: Sequence[str]) -> None:
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ControllerApiError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys: "
                                 + ", ".join(duplicates), field=duplicates[0])


def incremental_changes(current: Mapping[str, str], ops: Sequence[AlterConfigOp]) -> dict[str, str | None]:
    """The key -> new value (None: delete) map that `ops` make of a resource's `current` configs."""
    _check_unique([op.name for op in ops])
    changes: dict[str, str | None] = {}
    for op in ops:
        if op.op is AlterConfigOpType.SET:
            changes[op.name] = op.value if op.value is not None else ""
        elif op.op is AlterConfigOpType.DELETE:
            changes[op.name] = None
        else:
            if not _is_list(op.name):
                what = "unknown" if op.name not in TOPIC_CONFIGS_BY_NAME else "not a LIST"
                raise ControllerApiError(ErrorCode.INVALID_CONFIG, f"Can't {op.op.name} to key {op.name} "
                                         f"because its type is {what}.", field=op.name)
            items = _start_list(current, op.name)
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

    def against(self, current: Mapping[str, str]) -> dict[str, str | None]:
        """The set/delete map these changes make of `current`."""
        if self.ops is not None:
            return incremental_changes(current, self.ops)
        if self.replace is not None:
            return replacement_changes(current, self.replace)
        assert self.configs is not None
        return dict(self.configs)
