"""quorum/config_control.py: Kafka's IncrementalAlterConfigs / AlterConfigs rules as tables, and
the records they make through alter_topic_configs on a real image."""

from __future__ import annotations

import pytest

from common.errors import ErrorCode
from metadata.delta import apply
from metadata.image import MetadataImage
from metadata.records import Config, ConfigResourceType, Topic
from quorum.config_control import (
    alter_broker_configs,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigChanges,
    incremental_changes,
    parse_op_type,
    replacement_changes,
)
from quorum.controller_result import ControllerApiError
from quorum.topic_control import alter_topic_configs

SET, DELETE, APPEND, SUBTRACT = (AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND,
                                 AlterConfigOpType.SUBTRACT)


@pytest.mark.parametrize(("current", "ops", "expected"), [
    ({}, [AlterConfigOp("retention.ms", SET, "1000")], {"retention.ms": "1000"}),
    ({"retention.ms": "5"}, [AlterConfigOp("retention.ms", DELETE)], {"retention.ms": None}),
    # APPEND starts from the default (delete) when the key is unset, adds only what is missing
    ({}, [AlterConfigOp("cleanup.policy", APPEND, "compact")], {"cleanup.policy": "delete,compact"}),
    ({"cleanup.policy": "compact"}, [AlterConfigOp("cleanup.policy", APPEND, "compact,delete")],
     {"cleanup.policy": "compact,delete"}),
    ({"cleanup.policy": "compact,delete"}, [AlterConfigOp("cleanup.policy", SUBTRACT, "delete")],
     {"cleanup.policy": "compact"}),
    ({}, [AlterConfigOp("cleanup.policy", SUBTRACT, "compact")], {"cleanup.policy": "delete"}),
    ({"a": "1"}, [], {}),
])
def test_incremental_changes(current: dict[str, str], ops: list[AlterConfigOp],
                             expected: dict[str, str | None]) -> None:
    assert incremental_changes(current, ops) == expected


@pytest.mark.parametrize(("ops", "code", "field"), [
    ([AlterConfigOp("retention.ms", APPEND, "5")], ErrorCode.INVALID_CONFIG, "retention.ms"),
    ([AlterConfigOp("no.such.key", SUBTRACT, "5")], ErrorCode.INVALID_CONFIG, "no.such.key"),
    ([AlterConfigOp("retention.ms", SET, "5"), AlterConfigOp("retention.ms", DELETE)],
     ErrorCode.INVALID_REQUEST, "retention.ms"),
])
def test_incremental_refusals(ops: list[AlterConfigOp], code: ErrorCode, field: str) -> None:
    with pytest.raises(ControllerApiError) as caught:
        incremental_changes({}, ops)
    assert (caught.value.code, caught.value.field) == (code, field)


@pytest.mark.parametrize("raw", [4, -1, "MULTIPLY", ""])
def test_unknown_op_types(raw: int | str) -> None:
    with pytest.raises(ControllerApiError) as caught:
        parse_op_type(raw)
    assert caught.value.code is ErrorCode.INVALID_REQUEST


def test_replacement_deletes_what_it_does_not_name() -> None:
    assert replacement_changes({"a": "1", "b": "2"}, {"b": "3", "c": "4"}) == {"a": None, "b": "3", "c": "4"}


def test_config_changes_take_exactly_one_form() -> None:
    with pytest.raises(ValueError):
        ConfigChanges(configs={}, replace={})
    with pytest.raises(ValueError):
        ConfigChanges()


def test_the_changes_become_config_records_and_bad_values_name_their_key() -> None:
    image = apply(MetadataImage(), [(0, Topic("t", "AAAAAAAAAAAAAAAAAAAAAA")),
                                    (1, Config(ConfigResourceType.TOPIC, "t", "retention.ms", "5"))])
    changes = ConfigChanges(ops=(AlterConfigOp("cleanup.policy", APPEND, "compact"),
                                 AlterConfigOp("retention.ms", DELETE)))
    result = alter_topic_configs(image, "t", changes.against(image.config(ConfigResourceType.TOPIC, "t")))
    assert list(result.records) == [Config(ConfigResourceType.TOPIC, "t", "cleanup.policy", "delete,compact"),
                                    Config(ConfigResourceType.TOPIC, "t", "retention.ms", None)]
    bad = ConfigChanges(replace={"retention.ms": "soon"})
    with pytest.raises(ControllerApiError) as caught:
        alter_topic_configs(image, "t", bad.against(image.config(ConfigResourceType.TOPIC, "t")))
    assert (caught.value.code, caught.value.field) == (ErrorCode.INVALID_CONFIG, "retention.ms")


@pytest.mark.parametrize(("configs", "refused"), [
    ({"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "1000"}, True),
    ({"min.compaction.lag.ms": "1000", "max.compaction.lag.ms": "1000"}, False),
    ({"max.compaction.lag.ms": "1"}, False),  # min defaults to 0
    ({"min.compaction.lag.ms": "9223372036854775807"}, False),  # max defaults to Long.MAX_VALUE
])
def test_the_whole_set_is_checked_on_create_and_alter(configs: dict[str, str], refused: bool) -> None:
    from quorum.topic_control import check_config_set

    image = apply(MetadataImage(), [(0, Topic("t", "AAAAAAAAAAAAAAAAAAAAAA"))])
    for attempt in (lambda: check_config_set(configs), lambda: alter_topic_configs(image, "t", dict(configs))):
        if refused:
            with pytest.raises(ControllerApiError) as caught:
                attempt()
            assert (caught.value.code, caught.value.field) == (ErrorCode.INVALID_CONFIG, "min.compaction.lag.ms")
            assert "conflict topic config setting" in caught.value.message
        else:
            attempt()


# ---- dynamic broker configs (alter_broker_configs) ---------------------------------------------

BROKER = ConfigResourceType.BROKER
BROKER_IMAGE = apply(MetadataImage(), [(0, Config(BROKER, "", "log.retention.ms", "60000")),
                                       (1, Config(BROKER, "4", "log.cleanup.policy", "compact"))])


@pytest.mark.parametrize(("name", "current", "ops", "expected"), [
    ("4", {}, [AlterConfigOp("log.retention.ms", SET, "1000")], {"log.retention.ms": "1000"}),
    # a broker LIST key appends to the resource's own dynamic value, else Kafka's default
    ("4", {}, [AlterConfigOp("log.cleanup.policy", APPEND, "compact")], {"log.cleanup.policy": "delete,compact"}),
    ("", {"log.cleanup.policy": "compact,delete"}, [AlterConfigOp("log.cleanup.policy", SUBTRACT, "delete")],
     {"log.cleanup.policy": "compact"}),
    ("", {"log.retention.ms": "5"}, [AlterConfigOp("log.retention.ms", DELETE)], {"log.retention.ms": None}),
])
def test_incremental_changes_of_broker_keys(name: str, current: dict[str, str], ops: list[AlterConfigOp],
                                            expected: dict[str, str | None]) -> None:
    assert ConfigChanges(ops=tuple(ops)).against(current, broker=True) == expected


@pytest.mark.parametrize(("op", "what"), [
    (AlterConfigOp("log.retention.ms", APPEND, "1"), "not a LIST"),
    (AlterConfigOp("no.such.key", SUBTRACT, "1"), "unknown"),
])
def test_broker_list_ops_need_a_list_key(op: AlterConfigOp, what: str) -> None:
    with pytest.raises(ControllerApiError) as caught:
        incremental_changes({}, [op], broker=True)
    assert caught.value.code is ErrorCode.INVALID_CONFIG and what in caught.value.message


@pytest.mark.parametrize(("name", "changes", "records"), [
    ("4", {"log.retention.ms": "1000"}, [Config(BROKER, "4", "log.retention.ms", "1000")]),
    ("", {"log.retention.ms": "60000"}, []),  # unchanged: nothing written
    ("", {"log.retention.ms": None, "log.segment.bytes": "1048576"},
     [Config(BROKER, "", "log.retention.ms", None), Config(BROKER, "", "log.segment.bytes", "1048576")]),
    ("4", {"log.cleanup.policy": "compact, delete"}, [Config(BROKER, "4", "log.cleanup.policy", "compact,delete")]),
    ("7", {"min.insync.replicas": "2"}, [Config(BROKER, "7", "min.insync.replicas", "2")]),  # any id, as Kafka
    ("4", {"log.dirs": None}, []),  # deleting a static key that is not set: nothing to do, as Kafka
    # a key no broker knows is stored as given, as Kafka's DynamicBrokerConfig keeps it
    ("4", {"cleanup.policy": "compact, delete"}, [Config(BROKER, "4", "cleanup.policy", "compact, delete")]),
    ("", {"listener.name.plaintext.ssl.keystore.location": "/k"},
     [Config(BROKER, "", "listener.name.plaintext.ssl.keystore.location", "/k")]),
])
def test_broker_changes_become_broker_config_records(name: str, changes: dict[str, str | None],
                                                     records: list[Config]) -> None:
    assert list(alter_broker_configs(BROKER_IMAGE, name, changes).records) == records


@pytest.mark.parametrize(("name", "changes", "code", "field", "text"), [
    ("4", {"log.dirs": "/x"}, ErrorCode.INVALID_REQUEST, "log.dirs", "Cannot update these configs dynamically: log.dirs"),
    ("", {"num.partitions": "3", "log.retention.ms": "5"}, ErrorCode.INVALID_REQUEST, "num.partitions",
     "Cannot update these configs dynamically"),
    ("4", {"ssl.keystore.location": "/k"}, ErrorCode.INVALID_REQUEST, "ssl.keystore.location",
     "only per-listener using the listener prefix: ssl.keystore.location"),
    ("4", {"log.retention.ms": "soon"}, ErrorCode.INVALID_CONFIG, "log.retention.ms", "an integer"),
    ("", {"log.retention.ms": "0"}, ErrorCode.INVALID_CONFIG, "log.retention.ms", "-1 (unlimited) or positive"),
    ("", {"unclean.leader.election.enable": "maybe"}, ErrorCode.INVALID_CONFIG, "unclean.leader.election.enable",
     "boolean"),
    ("x", {"log.retention.ms": "5"}, ErrorCode.INVALID_REQUEST, "name", "Node id must be an integer"),
])
def test_broker_refusals_name_the_key_and_write_nothing(name: str, changes: dict[str, str | None], code: ErrorCode,
                                                        field: str, text: str) -> None:
    with pytest.raises(ControllerApiError) as caught:
        alter_broker_configs(BROKER_IMAGE, name, changes)
    assert (caught.value.code, caught.value.field) == (code, field) and text in caught.value.message


@pytest.mark.parametrize(("name", "value", "own", "elected"), [
    ("", "true", None, True),  # the cluster default brings the leaderless partition back at once
    ("", "false", None, False),
    ("", "true", "false", False),  # the topic's own value decides
    ("1", "true", None, False),  # a per-broker value is not what the controller's elections read
])
def test_enabling_the_default_unclean_election_elects_offline_partitions(name: str, value: str, own: str | None,
                                                                         elected: bool) -> None:
    from tests.unit.test_topic_control import OFFLINE

    image = OFFLINE if own is None else apply(OFFLINE, [(OFFLINE.offset + 1, Config(
        ConfigResourceType.TOPIC, "offline", "unclean.leader.election.enable", own))])
    result = alter_broker_configs(image, name, {"unclean.leader.election.enable": value})
    after = apply(image, list(enumerate(result.records, start=image.offset + 1)))
    assert (after.topic("offline").partitions[0].leader == 1) is elected
