"""Per-group configs (KIP-848's GroupConfig): a group's own session timeout and heartbeat
interval, set with IncrementalAlterConfigs on a GROUP resource and kept in the metadata log as
Config records of resource type GROUP.

    error = check_group_config("consumer.heartbeat.interval.ms", "7000")     # None: fine
    config = consumer_config(broker_defaults, image.config(GROUP, "app"))      # the group's

Kafka's names (GroupConfig.java): `consumer.session.timeout.ms` and
`consumer.heartbeat.interval.ms`; for share groups (KIP-932) `share.session.timeout.ms`,
`share.heartbeat.interval.ms`, `share.record.lock.duration.ms`, `share.delivery.count.limit`,
`share.partition.max.record.locks` and `share.auto.offset.reset` (earliest or latest; Kafka's
`by_duration:` and `share.isolation.level` are refused as unknown here), checked against
GroupConfig's own bounds and used as they are (`broker.share.state.share_settings`).

Kafka's controller checks a value against the brokers' group.consumer.min/max.* settings;
here the controller checks the type and sign, and the coordinator keeps a consumer group's
value within its own min and max (a value outside them counts as
the nearest bound; a heartbeat interval not below the session timeout leaves the broker's
pair), so brokers with other bounds never refuse a member.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Final

from groups.consumer_group import ConsumerGroupConfig

CONSUMER_SESSION_TIMEOUT_MS: Final = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS: Final = "consumer.heartbeat.interval.ms"
# KIP-932 share groups' (broker/share/state.py share_settings): Kafka's GroupConfig names
SHARE_SESSION_TIMEOUT_MS: Final = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL_MS: Final = "share.heartbeat.interval.ms"
SHARE_RECORD_LOCK_DURATION_MS: Final = "share.record.lock.duration.ms"
SHARE_DELIVERY_COUNT_LIMIT: Final = "share.delivery.count.limit"
SHARE_PARTITION_MAX_RECORD_LOCKS: Final = "share.partition.max.record.locks"
SHARE_AUTO_OFFSET_RESET: Final = "share.auto.offset.reset"
GROUP_CONFIG_KEYS: Final = (CONSUMER_HEARTBEAT_INTERVAL_MS, CONSUMER_SESSION_TIMEOUT_MS, SHARE_AUTO_OFFSET_RESET,
                            SHARE_DELIVERY_COUNT_LIMIT, SHARE_HEARTBEAT_INTERVAL_MS, SHARE_PARTITION_MAX_RECORD_LOCKS,
                            SHARE_RECORD_LOCK_DURATION_MS, SHARE_SESSION_TIMEOUT_MS)  # Kafka's, sorted
GROUP_CONFIG_DOCS: Final = {
    CONSUMER_SESSION_TIMEOUT_MS: "The timeout to detect client failures when using the consumer group protocol.",
    CONSUMER_HEARTBEAT_INTERVAL_MS: "The heartbeat interval given to the members.",
    SHARE_SESSION_TIMEOUT_MS: "The timeout to detect client failures when using the share group protocol.",
    SHARE_HEARTBEAT_INTERVAL_MS: "The heartbeat interval given to the members of a share group.",
    SHARE_RECORD_LOCK_DURATION_MS: "The record acquisition lock duration in milliseconds for share groups.",
    SHARE_DELIVERY_COUNT_LIMIT: "The maximum number of delivery attempts for a record delivered to a share group.",
    SHARE_PARTITION_MAX_RECORD_LOCKS: "Share-partition record lock limit.",
    SHARE_AUTO_OFFSET_RESET: "The strategy to initialize the share-partition start offset: earliest or latest.",
}
MAX_GROUP_CONFIG_MS: Final = 2**31 - 1  # an int32, as Kafka's INT configs
# Kafka's GroupConfig lower bounds (atLeast); the others' is 1
GROUP_CONFIG_MIN: Final = {SHARE_RECORD_LOCK_DURATION_MS: 1_000, SHARE_DELIVERY_COUNT_LIMIT: 2,
                           SHARE_PARTITION_MAX_RECORD_LOCKS: 100}
# group.share.max.delivery.count.limit's default: the broker's own limit is bounded by it too
MAX_SHARE_DELIVERY_COUNT_LIMIT: Final = 10
SHARE_AUTO_OFFSET_RESETS: Final = ("earliest", "latest")  # Kafka's by_duration:<ISO 8601> is not supported


def check_group_config(name: str, value: str | None) -> str | None:
    """Why `value` cannot be `name`'s (Kafka's INVALID_CONFIG message), None when it can
    (`value` None: a deletion, only the key is checked)."""
    if name not in GROUP_CONFIG_KEYS:
        return f"Unknown group config name: {name}"
    if value is None:
        return None
    if name == SHARE_AUTO_OFFSET_RESET:
        if value.lower() not in SHARE_AUTO_OFFSET_RESETS:
            return f"Invalid value {value} for configuration {name}: must be one of {', '.join(SHARE_AUTO_OFFSET_RESETS)}"
        return None
    try:
        number = int(value)
    except ValueError:
        return f"Invalid value {value} for configuration {name}: Not a number of type INT"
    low = GROUP_CONFIG_MIN.get(name, 1)
    if not low <= number <= MAX_GROUP_CONFIG_MS:
        return f"Invalid value {value} for configuration {name}: Value must be at least {low}"
    if name == SHARE_DELIVERY_COUNT_LIMIT and number > MAX_SHARE_DELIVERY_COUNT_LIMIT:
        return f"{name} must be less than or equal to group.share.max.delivery.count.limit " \
               f"({MAX_SHARE_DELIVERY_COUNT_LIMIT})"
    return None


def group_int(overrides: Mapping[str, str], name: str, default: int) -> int:
    """The group's own INT value of `name`, or `default` when it has none (or one stored by
    another version that does not parse)."""
    value = overrides.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        return default


def _within(value: str | None, default: int, low: int, high: int) -> int:
    if value is None:
        return default
    try:
        return min(max(int(value), low), high)
    except ValueError:  # stored by another version: the broker's own
        return default


def consumer_config(broker: ConsumerGroupConfig, overrides: Mapping[str, str]) -> ConsumerGroupConfig:
    """The group's consumer-protocol settings: the broker's, with the group's own values (within
    the broker's min and max)."""
    if not overrides:
        return broker
    session = _within(overrides.get(CONSUMER_SESSION_TIMEOUT_MS), broker.session_timeout_ms,
                      broker.min_session_timeout_ms, broker.max_session_timeout_ms)
    heartbeat = _within(overrides.get(CONSUMER_HEARTBEAT_INTERVAL_MS), broker.heartbeat_interval_ms,
                        broker.min_heartbeat_interval_ms, broker.max_heartbeat_interval_ms)
    if heartbeat >= session:  # Kafka's rule: a member heartbeats within its session; the broker's pair holds
        return broker
    return replace(broker, session_timeout_ms=session, heartbeat_interval_ms=heartbeat)
