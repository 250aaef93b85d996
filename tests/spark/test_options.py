"""spark/options.py: Spark's Kafka source rules, and errors that name the option."""

from __future__ import annotations

import json

import pytest

from spark.offsets import TopicPartition
from spark.options import (
    OptionError,
    include_headers,
    parse_sink_options,
    parse_source_options,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.2:9092"}
A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)


def source(streaming: bool = False, **options: str) -> object:
    return parse_source_options({**BOOT, **options}, streaming=streaming)


def test_batch_defaults_are_sparks() -> None:
    o = parse_source_options({**BOOT, "subscribe": "a, b,,a"}, streaming=False)
    assert o.subscription.topics == ("a", "b")
    assert (o.starting.kind, o.ending and o.ending.kind) == ("earliest", "latest")
    assert (o.fail_on_data_loss, o.include_headers, o.min_partitions, o.max_offsets_per_trigger) == \
        (True, False, None, None)
    assert o.kafka == {"bootstrap.servers": "127.0.0.2:9092"}


def test_stream_defaults_are_sparks() -> None:
    o = parse_source_options({**BOOT, "subscribePattern": "a.*"}, streaming=True)
    assert o.starting.kind == "latest" and o.ending is None
    assert o.subscription.wants_topic("abc") and not o.subscription.wants_topic("xa")  # whole-name match


def test_names_are_case_insensitive_as_in_spark() -> None:
    o = parse_source_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SUBSCRIBE": "a", "MaxOffsetsPerTrigger": "7",
                              "FAILONDATALOSS": "False", "includeheaders": "TRUE"}, streaming=True)
    assert (o.max_offsets_per_trigger, o.fail_on_data_loss, o.include_headers) == (7, False, True)
    assert include_headers({"INCLUDEHEADERS": "true"}) is True


def test_assign_and_offsets() -> None:
    o = parse_source_options({**BOOT, "assign": '{"a": [1, 0]}', "startingOffsets": '{"a": {"0": 5, "1": -2}}',
                              "endingOffsets": '{"a": {"0": 9, "1": -1}}'}, streaming=False)
    assert o.subscription.partitions == (A0, A1)
    assert o.starting.per_partition == {A0: 5, A1: -2} and o.ending and o.ending.per_partition == {A0: 9, A1: -1}


@pytest.mark.parametrize(("options", "streaming", "message"), [
    ({}, False, "one of the options 'subscribe', 'subscribePattern', 'assign' must be specified"),
    ({"subscribe": "a", "subscribePattern": "a"}, False, "'subscribe' and 'subscribePattern' cannot be used together"),
    ({"subscribe": "a", "assign": '{"a": [0]}'}, True, "'subscribe' and 'assign' cannot be used together"),
    ({"subscribe": " , "}, False, "'subscribe' names no topic"),
    ({"subscribePattern": "("}, False, "'subscribePattern' is not a valid regular expression"),
    ({"assign": "a:0"}, False, "option 'assign' must be a JSON object"),
    ({"subscribe": "a", "startingOffsets": "latest"}, False, "starting offset can't be latest for batch"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": -1}}'}, False, "starting offset can't be latest"),
    ({"subscribe": "a", "endingOffsets": "earliest"}, False, "ending offset can't be earliest"),
    ({"subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}, False, "ending offset can't be earliest"),
    ({"subscribe": "a", "endingOffsets": "latest"}, True, "'endingOffsets' is not valid in streaming queries"),
    ({"subscribe": "a", "endingTimestamp": "5"}, True, "'endingTimestamp' is not valid in streaming"),
    ({"subscribe": "a", "startingOffsets": "earliest", "startingTimestamp": "1"}, True,
     "'startingOffsets' and 'startingTimestamp' contradict each other"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": 5}}', "endingOffsets": '{"a": {"1": 9}}'}, False,
     "must name the same partitions"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": 9}}', "endingOffsets": '{"a": {"0": 5}}'}, False,
     "a-0 starts at 9, after its end 5"),
    ({"subscribe": "a", "startingOffsets": '{"b": {"0": 1}}'}, True, "names b-0, which the 'subscribe' option"),
    ({"assign": '{"a": [0, 1]}', "startingOffsets": '{"a": {"0": 1}}'}, True, "exactly the partitions of option"),
    ({"subscribe": "a", "startingTimestamp": "soon"}, True, "'startingTimestamp' must be one timestamp"),
    ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "maybe"}, True, "must be 'error' or 'latest'"),
    ({"subscribe": "a", "minPartitions": "0"}, False, "'minPartitions' must be at least 1"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "many"}, True, "'maxOffsetsPerTrigger' must be an integer"),
    ({"subscribe": "a", "failOnDataLoss": "yes"}, True, "'failOnDataLoss' must be true or false"),
    ({"subscribe": "a", "startingOfsets": "earliest"}, True, "did you mean 'startingOffsets'"),
    ({"subscribe": "a", "maxOffsetPerTrigger": "5"}, True, "did you mean 'maxOffsetsPerTrigger'"),
    ({"subscribe": "a", "path": "/x"}, False, "unknown option 'path'"),
    ({"topic": "a"}, False, "option 'topic' is for writing"),
    ({"subscribe": "a", "minOffsetsPerTrigger": "0"}, True, "'minOffsetsPerTrigger' must be at least 1"),
    ({"subscribe": "a", "minOffsetsPerTrigger": "5", "maxTriggerDelay": "soon"}, True,
     "'maxTriggerDelay' must be a duration like 15m"),
    ({"subscribe": "a", "maxTriggerDelay": "5 weeks"}, True, "'maxTriggerDelay' must be a duration"),
    ({"subscribe": "a", "commitOffsetsToGroup": " "}, True, "'commitOffsetsToGroup' is empty"),
    ({"subscribe": "a", "commitOffsetsToGroup": "g"}, False, "'commitOffsetsToGroup' is for streaming queries"),
    ({"subscribe": "a", "kafka.auto.offset.reset": "latest"}, True, "'kafka.auto.offset.reset' is not supported"),
    ({"subscribe": "a", "kafka.enable.auto.commit": "true"}, True, "'kafka.enable.auto.commit' is not supported"),
    ({"subscribe": "a", "kafka.value.deserializer": "x"}, True, "'kafka.value.deserializer' is not supported"),
])
def test_bad_options_name_the_option(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_source_options({**BOOT, **options}, streaming=streaming)


def test_bootstrap_servers_are_required() -> None:
    with pytest.raises(OptionError, match="'kafka.bootstrap.servers' must be specified"):
        parse_source_options({"subscribe": "a"}, streaming=False)
    with pytest.raises(OptionError, match="did you mean 'kafka.bootstrap.servers'"):
        parse_source_options({"subscribe": "a", "bootstrap.servers": "h:1"}, streaming=False)


def test_batch_ignores_max_offsets_per_trigger_with_a_warning_like_spark() -> None:
    o = parse_source_options({**BOOT, "subscribe": "a", "maxOffsetsPerTrigger": "5"}, streaming=False)
    assert any("maxOffsetsPerTrigger" in w for w in o.warnings)


def test_group_id_is_allowed_with_a_warning() -> None:
    o = parse_source_options({**BOOT, "subscribe": "a", "kafka.group.id": "mine"}, streaming=True)
    assert o.kafka["group.id"] == "mine" and o.warnings


def test_timestamps() -> None:
    o = parse_source_options({**BOOT, "subscribe": "a", "startingTimestamp": "1700000000000",
                              "startingOffsetsByTimestampStrategy": "LATEST"}, streaming=True)
    assert (o.starting.kind, o.starting.timestamp_ms, o.no_match_latest) == ("timestamp", 1700000000000, True)
    o = parse_source_options({**BOOT, "subscribe": "a", "endingOffsetsByTimestamp": json.dumps({"a": {"0": 7}})},
                             streaming=False)
    assert o.ending and (o.ending.kind, o.ending.per_partition) == ("timestamps", {A0: 7})


def test_sink_options() -> None:
    assert parse_sink_options({**BOOT, "Topic": " t "}, streaming=False).topic == "t"
    assert parse_sink_options({**BOOT, "checkpointLocation": "/c"}, streaming=True).topic is None
    for options, message in (({"checkpointLocation": "/c"}, "unknown option 'checkpointLocation'"),
                             ({"subscribe": "t"}, "option 'subscribe' is for reading"),
                             ({"kafka.key.serializer": "x"}, "'kafka.key.serializer' is not supported"),
                             ({"topic": " "}, "option 'topic' is empty")):
        with pytest.raises(OptionError, match=message):
            parse_sink_options({**BOOT, **options}, streaming=False)


def test_exactly_once_sink_options() -> None:
    plain = parse_sink_options({**BOOT, "topic": "t"}, streaming=True)
    assert (plain.transactional, plain.transactional_id_prefix) == (False, None)
    on = parse_sink_options({**BOOT, "topic": "t", "Transactional": "true"}, streaming=True)
    assert (on.transactional_id_prefix, on.commit_log_topic) == ("tidelog-spark", "_tidelog_spark_sink_commits")
    # a kafka.transactional.id is the prefix: each task's producer gets its own id from it
    prefixed = parse_sink_options({**BOOT, "topic": "t", "kafka.transactional.id": " orders-eos ",
                                   "commitLogTopic": "eos-commits", "checkpointLocation": "/c"}, streaming=True)
    assert (prefixed.transactional_id_prefix, prefixed.commit_log_topic) == ("orders-eos", "eos-commits")
    assert "transactional.id" not in prefixed.kafka
    assert parse_sink_options({**BOOT, "topic": "t", "transactional": "true"}, streaming=False).transactional


@pytest.mark.parametrize(("options", "message"), [
    ({"transactional": "yes"}, "option 'transactional' must be true or false"),
    ({"transactional": "false", "kafka.transactional.id": "p"}, "asks for transactions but option 'transactional'"),
    ({"kafka.transactional.id": " "}, "option 'kafka.transactional.id' is empty"),
    ({"commitLogTopic": "c"}, "option 'commitLogTopic' is for the exactly-once sink"),
    ({"transactional": "true", "commitLogTopic": " "}, "option 'commitLogTopic' is empty"),
    ({"transactional": "true", "kafka.enable.idempotence": "false"}, "transactions need an idempotent"),
    ({"transactional": "true", "kafka.acks": "1"}, "transactions need an idempotent acks=all"),
    ({"transactional.id": "p"}, "the transactional id prefix is option 'kafka.transactional.id'"),
])
def test_exactly_once_sink_option_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_sink_options({**BOOT, "topic": "t", **options}, streaming=True)


def test_isolation_level_is_checked_on_the_driver() -> None:
    assert not source(subscribe="a").read_committed  # Spark's default: read_uncommitted
    committed = source(subscribe="a", **{"kafka.isolation.level": " READ_COMMITTED "})
    assert committed.read_committed and committed.kafka["isolation.level"] == "read_committed"
    assert source(True, subscribe="a", **{"kafka.isolation.level": "read_committed"}).read_committed
    with pytest.raises(OptionError, match="must be read_committed or read_uncommitted, not 'serializable'"):
        source(subscribe="a", **{"kafka.isolation.level": "serializable"})
    with pytest.raises(OptionError, match="Spark's Kafka source names it 'kafka.isolation.level'"):
        source(subscribe="a", **{"isolation.level": "read_committed"})


@pytest.mark.parametrize(("text", "ms"), [("15m", 900_000), ("30s", 30_000), ("500ms", 500), ("500", 500),
                                          ("2h", 7_200_000), ("1d", 86_400_000), ("3min", 180_000), (" 7S ", 7_000)])
def test_max_trigger_delay_takes_sparks_time_strings(text: str, ms: int) -> None:
    o = parse_source_options({**BOOT, "subscribe": "a", "minOffsetsPerTrigger": "10", "maxTriggerDelay": text},
                             streaming=True)
    assert (o.min_offsets_per_trigger, o.max_trigger_delay_ms, o.warnings) == (10, ms, ())


def test_admission_and_group_defaults_and_warnings() -> None:
    o = parse_source_options({**BOOT, "subscribe": "a"}, streaming=True)
    assert (o.min_offsets_per_trigger, o.max_trigger_delay_ms, o.commit_offsets_to_group) == (None, 900_000, None)
    o = parse_source_options({**BOOT, "subscribe": "a", "COMMITOFFSETSTOGROUP": " lake "}, streaming=True)
    assert o.commit_offsets_to_group == "lake"
    o = parse_source_options({**BOOT, "subscribe": "a", "maxTriggerDelay": "1m"}, streaming=True)
    assert o.warnings == ("option 'maxTriggerDelay' has no effect without 'minOffsetsPerTrigger'",)
    o = parse_source_options({**BOOT, "subscribe": "a", "minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "5"},
                             streaming=True)
    assert o.warnings and "a batch waits for 9 records and then reads 5" in o.warnings[0]
    o = parse_source_options({**BOOT, "subscribe": "a", "minOffsetsPerTrigger": "9"}, streaming=False)
    assert o.warnings == ("option 'minOffsetsPerTrigger' is ignored in batch queries",)
