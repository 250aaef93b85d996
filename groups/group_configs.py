"""Per-group configs (KIP-848's GroupConfig): a group's own session timeout and heartbeat
interval, set with IncrementalAlterConfigs on a GROUP resource and kept in the metadata log as
Config records of resource type GROUP.

    error = check_group_config("consumer.heartbeat.interval.ms", "7000")     # None: fine
    config = consumer_config(broker_defaults, image.config(GROUP, "app"))      # the group's

Kafka's names (GroupConfig.java): `consumer.session.timeout.ms` and
`consumer.heartbeat.interval.ms`. Kafka's controller checks a value against the brokers'
group.consumer.min/max.* settings; here the controller checks the type and sign, and the
coordinator keeps a group's value within its own min and max (a value outside them counts as
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
GROUP_CONFIG_KEYS: Final = (CONSUMER_HEARTBEAT_INTERVAL_MS, CONSUMER_SESSION_TIMEOUT_MS)  # Kafka's, sorted
GROUP_CONFIG_DOCS: Final = {
    CONSUMER_SESSION_TIMEOUT_MS: "The timeout to detect client failures when using the consumer group protocol.",
    CONSUMER_HEARTBEAT_INTERVAL_MS: "The heartbeat interval given to the members.",
}
MAX_GROUP_CONFIG_MS: Final = 2**31 - 1  # an int32, as Kafka's INT configs


def check_group_config(name: str, value: str) -> str | None:
    """Why `value` cannot be `name`'s (Kafka's INVALID_CONFIG message), None when it can."""
    if name not in GROUP_CONFIG_KEYS:
        return f"Unknown group config name: {name}"
    try:
        number = int(value)
    except ValueError:
        return f"Invalid value {value} for configuration {name}: Not a number of type INT"
    if not 1 <= number <= MAX_GROUP_CONFIG_MS:
        return f"Invalid value {value} for configuration {name}: Value must be at least 1"
    return None


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
