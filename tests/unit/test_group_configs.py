"""groups/group_configs.py and quorum/group_config_routes.py's rule: KIP-848's per-group configs."""

from __future__ import annotations

import pytest

from common.errors import ErrorCode
from groups.consumer_group import ConsumerGroupConfig
from groups.group_configs import check_group_config, consumer_config
from metadata.image import MetadataImage
from metadata.records import Config, ConfigResourceType
from quorum.controller_result import ControllerApiError
from quorum.group_config_routes import alter_group_configs

BROKER = ConsumerGroupConfig(session_timeout_ms=45_000, min_session_timeout_ms=10_000, max_session_timeout_ms=60_000,
                             heartbeat_interval_ms=5_000, min_heartbeat_interval_ms=1_000,
                             max_heartbeat_interval_ms=15_000)


@pytest.mark.parametrize("name, value, fine", [
    ("consumer.session.timeout.ms", "30000", True), ("consumer.heartbeat.interval.ms", "1", True),
    ("consumer.heartbeat.interval.ms", "0", False), ("consumer.heartbeat.interval.ms", "x", False),
    ("share.record.lock.duration.ms", "1000", True), ("share.record.lock.duration.ms", "999", False),
    ("share.delivery.count.limit", "2", True), ("share.delivery.count.limit", "11", False),
    ("share.partition.max.record.locks", "99", False), ("share.session.timeout.ms", "1", True),
    ("share.auto.offset.reset", "earliest", True), ("share.auto.offset.reset", "by_duration:PT1H", False),
    ("share.isolation.level", "read_committed", False),  # not served per group (yet)
])
def test_check(name: str, value: str, fine: bool) -> None:
    assert (check_group_config(name, value) is None) is fine


@pytest.mark.parametrize("overrides, session, heartbeat", [
    ({}, 45_000, 5_000),
    ({"consumer.session.timeout.ms": "20000", "consumer.heartbeat.interval.ms": "2000"}, 20_000, 2_000),
    ({"consumer.session.timeout.ms": "1"}, 10_000, 5_000),  # within the broker's min
    ({"consumer.session.timeout.ms": "1", "consumer.heartbeat.interval.ms": "99999"}, 45_000, 5_000),  # no pair
])
def test_a_groups_values_within_the_brokers_bounds(overrides: dict[str, str], session: int, heartbeat: int) -> None:
    config = consumer_config(BROKER, overrides)
    assert (config.session_timeout_ms, config.heartbeat_interval_ms) == (session, heartbeat)


def test_the_rule_writes_changed_keys_and_refuses_unknown_ones() -> None:
    image = MetadataImage()
    result = alter_group_configs(image, "app", {"consumer.heartbeat.interval.ms": "7000"})
    assert list(result.records) == [Config(ConfigResourceType.GROUP, "app", "consumer.heartbeat.interval.ms", "7000")]
    with pytest.raises(ControllerApiError) as e:
        alter_group_configs(image, "app", {"bogus": "1"})
    assert e.value.code is ErrorCode.INVALID_CONFIG
