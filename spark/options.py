"""The options of `format("tidelog")`: Spark's Kafka source and sink options, parsed and checked.

Pure. Names, defaults and rules are those of Spark's `KafkaSourceProvider`, so switching
between `format("kafka")` and `format("tidelog")` is one word; option names are case
insensitive (Spark lowercases them). Where Spark silently ignores something we say so:
an unknown option is an error naming it (with a "did you mean"), and so are two options
that contradict each other (`subscribe` with `assign`; `startingOffsets` with
`startingTimestamp`, where Spark would quietly prefer one).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from spark.kafka_security import SecurityOptionError, librdkafka_security
from spark.offsets import (
    EARLIEST,
    LATEST,
    OffsetsError,
    TopicPartition,
    parse_assign,
    parse_partition_offsets,
    parse_partition_timestamps,
)

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

KAFKA_PREFIX: Final = "kafka."
SUBSCRIBE: Final = "subscribe"
SUBSCRIBE_PATTERN: Final = "subscribePattern"
ASSIGN: Final = "assign"
STARTING_OFFSETS, ENDING_OFFSETS = "startingOffsets", "endingOffsets"
STARTING_TIMESTAMP, ENDING_TIMESTAMP = "startingTimestamp", "endingTimestamp"
STARTING_BY_TIMESTAMP, ENDING_BY_TIMESTAMP = "startingOffsetsByTimestamp", "endingOffsetsByTimestamp"
NO_MATCH_STRATEGY = "startingOffsetsByTimestampStrategy"
MAX_OFFSETS_PER_TRIGGER = "maxOffsetsPerTrigger"
MIN_OFFSETS_PER_TRIGGER, MAX_TRIGGER_DELAY = "minOffsetsPerTrigger", "maxTriggerDelay"
COMMIT_OFFSETS_TO_GROUP = "commitOffsetsToGroup"  # ours: Spark's Kafka source never commits (SPARK-27549)
MIN_PARTITIONS, MAX_RECORDS_PER_PARTITION = "minPartitions", "maxRecordsPerPartition"
FAIL_ON_DATA_LOSS, INCLUDE_HEADERS = "failOnDataLoss", "includeHeaders"
POLL_TIMEOUT_MS = "kafkaConsumer.pollTimeoutMs"
FETCH_OFFSET_NUM_RETRIES, FETCH_OFFSET_RETRY_INTERVAL_MS = "fetchOffset.numRetries", "fetchOffset.retryIntervalMs"
GROUP_ID_PREFIX = "groupIdPrefix"
TOPIC = "topic"
CHECKPOINT_LOCATION = "checkpointLocation"  # Spark hands the streaming sink its own option too

STRATEGIES: Final = (SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN)
STARTING_KEYS: Final = (STARTING_OFFSETS, STARTING_TIMESTAMP, STARTING_BY_TIMESTAMP)
ENDING_KEYS: Final = (ENDING_OFFSETS, ENDING_TIMESTAMP, ENDING_BY_TIMESTAMP)
SOURCE_OPTIONS: Final = (*STRATEGIES, *STARTING_KEYS, *ENDING_KEYS, NO_MATCH_STRATEGY, MAX_OFFSETS_PER_TRIGGER,
                         MIN_OFFSETS_PER_TRIGGER, MAX_TRIGGER_DELAY, COMMIT_OFFSETS_TO_GROUP, MIN_PARTITIONS, MAX_RECORDS_PER_PARTITION, FAIL_ON_DATA_LOSS, INCLUDE_HEADERS,
                         POLL_TIMEOUT_MS, FETCH_OFFSET_NUM_RETRIES, FETCH_OFFSET_RETRY_INTERVAL_MS, GROUP_ID_PREFIX)
TRANSACTIONAL, COMMIT_LOG_TOPIC = "transactional", "commitLogTopic"
SINK_OPTIONS: Final = (TOPIC, TRANSACTIONAL, COMMIT_LOG_TOPIC)
# Options of Spark's Kafka source that we do not implement: an error says so, not "unknown".
NOT_SUPPORTED: Final[tuple[str, ...]] = ()
HINTS: Final = {TOPIC: "option 'topic' is for writing; to read a topic use 'subscribe'",
                SUBSCRIBE: "option 'subscribe' is for reading; to write use 'topic' (or a topic column)",
                "isolation.level": "Spark's Kafka source names it 'kafka.isolation.level'",
                "transactional.id": "the transactional id prefix is option 'kafka.transactional.id'"}
ISOLATION_LEVELS: Final = ("read_uncommitted", "read_committed")
# The exactly-once sink's defaults: the prefix of its transactional ids, and the compacted topic
# holding the last batch id each transactional id committed (spark/txn_sink.py).
DEFAULT_TRANSACTIONAL_ID_PREFIX: Final = "tidelog-spark"
DEFAULT_COMMIT_LOG_TOPIC: Final = "_tidelog_spark_sink_commits"

# librdkafka settings that would break reading by offset ranges (Spark rejects the same ones)
FORBIDDEN_CONSUMER: Final = {
    "auto.offset.reset": f"set '{STARTING_OFFSETS}' to 'earliest' or 'latest' instead: the source, not the "
                         "consumer, decides where to read, and a restarted query resumes from its checkpoint",
    "key.deserializer": "keys are always binary: cast or decode them with DataFrame operations",
    "value.deserializer": "values are always binary: cast or decode them with DataFrame operations",
    "enable.auto.commit": "the source never commits offsets: progress lives in Spark's checkpoint",
    "interceptor.classes": "interceptors could change records behind Spark's back",
}
FORBIDDEN_PRODUCER: Final = {
    "key.serializer": "keys are written as bytes (a string column is encoded as UTF-8)",
    "value.serializer": "values are written as bytes (a string column is encoded as UTF-8)",
}

DEFAULT_POLL_TIMEOUT_MS: Final = 120_000  # Spark's default: spark.network.timeout (120 s)
DEFAULT_FETCH_OFFSET_NUM_RETRIES: Final = 3
# Spark's default is 10 ms: over three retries that outlasts no leader move. One second spans
# a failover's election here, so a look-up during it waits instead of failing the query.
DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS: Final = 1_000
DEFAULT_GROUP_ID_PREFIX: Final = "tidelog-spark"
DEFAULT_MAX_TRIGGER_DELAY_MS: Final = 15 * 60_000  # Spark's Kafka source: "15m"
# Spark's time strings (JavaUtils.timeStringAs): an integer and an optional unit, ms without one
_TIME_STRING: Final = re.compile(r"^\s*(\d+)\s*([a-z]+)?\s*$")
_TIME_UNIT_MS: Final = {"us": 0.001, "ms": 1, "s": 1_000, "m": 60_000, "min": 60_000, "h": 3_600_000,
                        "d": 86_400_000}

BoundKind = Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
StrategyKind = Literal["subscribe", "subscribePattern", "assign"]


class OptionError(ValueError):
    """An option that is unknown, malformed, or contradicts another one; the message names them."""


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which topic-partitions to read: `subscribe`, `subscribePattern` or `assign`."""
    kind: StrategyKind
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[TopicPartition, ...] = ()

    def wants_topic(self, topic: str) -> bool:
        """True if this subscription covers `topic` (a pattern must match all of it, as in Java)."""
        if self.kind == SUBSCRIBE:
            return topic in self.topics
        if self.kind == ASSIGN:
            return any(tp.topic == topic for tp in self.partitions)
        assert self.pattern is not None
        return re.fullmatch(self.pattern, topic) is not None


@dataclass(frozen=True, slots=True)
class OffsetBound:
    """Where a read starts or ends: earliest, latest, per-partition offsets or timestamps."""
    kind: BoundKind
    option: str  # the option it came from, for messages ("" for a default)
    pairs: tuple[tuple[TopicPartition, int], ...] = ()  # kind "offsets" or "timestamps"
    timestamp_ms: int | None = None  # kind "timestamp"

    @property
    def per_partition(self) -> dict[TopicPartition, int]:
        return dict(self.pairs)


EARLIEST_BOUND: Final = OffsetBound("earliest", "")
LATEST_BOUND: Final = OffsetBound("latest", "")


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Everything a batch or stream read needs, checked."""
    subscription: Subscription
    starting: OffsetBound
    ending: OffsetBound | None  # None for streaming reads
    kafka_params: tuple[tuple[str, str], ...]
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    commit_offsets_to_group: str | None = None  # streaming only: each completed batch's end offsets
    no_match_latest: bool = False  # startingOffsetsByTimestampStrategy=latest
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    fetch_offset_num_retries: int = DEFAULT_FETCH_OFFSET_NUM_RETRIES
    fetch_offset_retry_interval_ms: int = DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS
    group_id_prefix: str = DEFAULT_GROUP_ID_PREFIX
    warnings: tuple[str, ...] = ()  # said once, on the driver

    @property
    def kafka(self) -> dict[str, str]:
        return dict(self.kafka_params)


    @property
    def read_committed(self) -> bool:
        """kafka.isolation.level=read_committed (checked when parsed; Spark's default is read_uncommitted)."""
        return self.kafka.get("isolation.level", ISOLATION_LEVELS[0]) == "read_committed"


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """What a batch or stream write needs, checked. `transactional_id_prefix` set: the
    exactly-once sink (spark/txn_sink.py), whose producers get their transactional.id from it;
    `kafka_params` then holds no transactional.id of its own."""
    topic: str | None
    kafka_params: tuple[tuple[str, str], ...]
    transactional_id_prefix: str | None = None
    commit_log_topic: str = DEFAULT_COMMIT_LOG_TOPIC

    @property
    def transactional(self) -> bool:
        return self.transactional_id_prefix is not None

    @property
    def kafka(self) -> dict[str, str]:
        return dict(self.kafka_params)


# --- helpers -------------------------------------------------------------------------------


def _canonical(names: tuple[str, ...]) -> dict[str, str]:
    return {name.lower(): name for name in names}


def _check_names(options: Mapping[str, str], allowed: tuple[str, ...], what: str) -> None:
    """OptionError naming the first unknown option, with the closest known name."""
    known = _canonical(allowed)
    unsupported = _canonical(NOT_SUPPORTED)
    for key in sorted(options):
        lower = key.lower()
        if lower in known or lower.startswith(KAFKA_PREFIX):
            continue
        if lower in unsupported:
            raise OptionError(f"option '{unsupported[lower]}' of Spark's Kafka source is not supported by "
                              f"tidelog's {what}")
        if lower in HINTS:
            raise OptionError(f"unknown option '{key}' for the tidelog {what}: {HINTS[lower]}")
        close = difflib.get_close_matches(lower, [*known, "kafka.bootstrap.servers"], n=1, cutoff=0.75)
        hint = f" (did you mean '{known.get(close[0], close[0])}'?)" if close else ""
        raise OptionError(f"unknown option '{key}' for the tidelog {what}{hint}; known options: "
                          f"{', '.join(allowed)} and kafka.* (librdkafka settings)")


def _kafka_params(options: Mapping[str, str], forbidden: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    params = {key.lower()[len(KAFKA_PREFIX):]: value for key, value in options.items()
              if key.lower().startswith(KAFKA_PREFIX)}
    for name, why in forbidden.items():
        if name in params:
            raise OptionError(f"option 'kafka.{name}' is not supported: {why}")
    if not params.get("bootstrap.servers", "").strip():
        raise OptionError("option 'kafka.bootstrap.servers' must be specified (host:port of the brokers)")
    try:  # Spark's Java-client security options (sasl.jaas.config, PEM stores) as librdkafka's
        params = librdkafka_security(params)
    except SecurityOptionError as exc:
        raise OptionError(str(exc)) from None
    return tuple(sorted(params.items()))


def _get(options: Mapping[str, str], name: str) -> str | None:
    lowered = {key.lower(): value for key, value in options.items()}
    return lowered.get(name.lower())


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = _get(options, name)
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise OptionError(f"option '{name}' must be true or false, got {text!r}")
    return text.strip().lower() == "true"


def _int(options: Mapping[str, str], name: str, *, minimum: int = 1) -> int | None:
    text = _get(options, name)
    if text is None:
        return None
    try:
        number = int(text.strip())
    except ValueError:
        raise OptionError(f"option '{name}' must be an integer, got {text!r}") from None
    if number < minimum:
        raise OptionError(f"option '{name}' must be at least {minimum}, got {number}")
    return number


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = [name for name in STRATEGIES if _get(options, name) is not None]
    if not given:
        raise OptionError(f"one of the options {', '.join(repr(s) for s in STRATEGIES)} must be specified")
    if len(given) > 1:
        raise OptionError(f"options {' and '.join(repr(g) for g in given)} cannot be used together: pick one")
    [kind] = given
    value = _get(options, kind) or ""
    if kind == SUBSCRIBE:
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise OptionError(f"option 'subscribe' names no topic (got {value!r}); give a comma-separated list")
        return Subscription(SUBSCRIBE, topics=topics)
    if kind == SUBSCRIBE_PATTERN:
        pattern = value.strip()
        if not pattern:
            raise OptionError("option 'subscribePattern' is empty; give a regular expression for topic names")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern' is not a valid regular expression: {exc}") from None
        return Subscription(SUBSCRIBE_PATTERN, pattern=pattern)
    try:
        return Subscription(ASSIGN, partitions=parse_assign(value, ASSIGN))
    except OffsetsError as exc:
        raise OptionError(str(exc)) from None


def _bound(options: Mapping[str, str], keys: tuple[str, str, str], default: OffsetBound) -> OffsetBound:
    offsets_key, timestamp_key, by_timestamp_key = keys
    given = [key for key in keys if _get(options, key) is not None]
    if len(given) > 1:
        raise OptionError(f"options {' and '.join(repr(g) for g in given)} contradict each other: "
                          "give only one of them")
    if not given:
        return default
    [key] = given
    text = (_get(options, key) or "").strip()
    try:
        if key == timestamp_key:
            try:
                stamp = int(text)
            except ValueError:
                raise OptionError(f"option '{key}' must be one timestamp in milliseconds, got {text!r}") from None
            if stamp < 0:
                raise OptionError(f"option '{key}' must not be negative, got {stamp}")
            return OffsetBound("timestamp", key, timestamp_ms=stamp)
        if key == by_timestamp_key:
            return OffsetBound("timestamps", key, tuple(sorted(parse_partition_timestamps(text, key).items())))
        if text.lower() in ("earliest", "latest"):
            return OffsetBound(text.lower(), key)  # type: ignore[arg-type]  # checked just above
        return OffsetBound("offsets", key, tuple(sorted(parse_partition_offsets(text, key).items())))
    except OffsetsError as exc:
        raise OptionError(str(exc)) from None


def _check_bound_topics(bound: OffsetBound, subscription: Subscription) -> None:
    for tp, _ in bound.pairs:
        if not subscription.wants_topic(tp.topic):
            raise OptionError(f"option '{bound.option}' names {tp}, which the '{subscription.kind}' option "
                              "does not read")
    if subscription.kind == ASSIGN and bound.pairs and {tp for tp, _ in bound.pairs} != set(subscription.partitions):
        raise OptionError(f"option '{bound.option}' must list exactly the partitions of option 'assign'")


def _check_batch_bounds(starting: OffsetBound, ending: OffsetBound) -> None:
    """Spark's batch rules: no 'latest' start, no 'earliest' end, start <= end where both are given."""
    if starting.kind == "latest" or any(o == LATEST for _, o in starting.pairs if starting.kind == "offsets"):
        raise OptionError(f"option '{starting.option}': starting offset can't be latest for batch queries")
    if ending.kind == "earliest" or any(o == EARLIEST for _, o in ending.pairs if ending.kind == "offsets"):
        raise OptionError(f"option '{ending.option}': ending offset can't be earliest for batch queries")
    if starting.kind == ending.kind and starting.kind in ("offsets", "timestamps"):
        start, end = starting.per_partition, ending.per_partition
        if set(start) != set(end):
            raise OptionError(f"options '{starting.option}' and '{ending.option}' must name the same partitions "
                              f"(only in one of them: {', '.join(str(tp) for tp in sorted(set(start) ^ set(end)))})")
        for tp, first in sorted(start.items()):
            if first >= 0 and end[tp] >= 0 and first > end[tp]:
                raise OptionError(f"options '{starting.option}' and '{ending.option}': {tp} starts at {first}, "
                                  f"after its end {end[tp]}")


# --- entry points ---------------------------------------------------------------------------


def include_headers(options: Mapping[str, str]) -> bool:
    """Just `includeHeaders` (what the schema depends on), checked."""
    return _bool(options, INCLUDE_HEADERS, False)


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Check every option of a read; OptionError naming the option at the first problem."""
    what = "streaming source" if streaming else "batch source"
    _check_names(options, SOURCE_OPTIONS, what)
    kafka_params = _isolation_checked(_kafka_params(options, FORBIDDEN_CONSUMER))
    subscription = _subscription(options)
    warnings: list[str] = []
    if "group.id" in dict(kafka_params):
        warnings.append("option 'kafka.group.id' is set: it only names the consumers; tidelog never joins "
                        f"the group nor commits to it (option '{COMMIT_OFFSETS_TO_GROUP}' commits to a group)")
    starting = _bound(options, STARTING_KEYS, LATEST_BOUND if streaming else EARLIEST_BOUND)
    if streaming:
        for key in ENDING_KEYS:
            if _get(options, key) is not None:
                raise OptionError(f"option '{key}' is not valid in streaming queries (a stream has no end)")
        ending = None
    else:
        ending = _bound(options, ENDING_KEYS, LATEST_BOUND)
        _check_batch_bounds(starting, ending)
        for name in (MAX_OFFSETS_PER_TRIGGER, MIN_OFFSETS_PER_TRIGGER, MAX_TRIGGER_DELAY):
            if _get(options, name) is not None:
                warnings.append(f"option '{name}' is ignored in batch queries")
        if _get(options, COMMIT_OFFSETS_TO_GROUP) is not None:
            raise OptionError(f"option '{COMMIT_OFFSETS_TO_GROUP}' is for streaming queries (it commits each "
                              "completed micro-batch); a batch read has no progress to commit")
    for bound in (starting, ending):
        if bound is not None:
            _check_bound_topics(bound, subscription)
    strategy = (_get(options, NO_MATCH_STRATEGY) or "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"option '{NO_MATCH_STRATEGY}' must be 'error' or 'latest', got {strategy!r}")
    prefix = (_get(options, GROUP_ID_PREFIX) or DEFAULT_GROUP_ID_PREFIX).strip()
    admission = _admission(options, streaming, warnings)
    return SourceOptions(
        subscription=subscription, starting=starting, ending=ending, kafka_params=kafka_params,
        fail_on_data_loss=_bool(options, FAIL_ON_DATA_LOSS, True),
        include_headers=_bool(options, INCLUDE_HEADERS, False),
        min_partitions=_int(options, MIN_PARTITIONS),
        max_records_per_partition=_int(options, MAX_RECORDS_PER_PARTITION),
        max_offsets_per_trigger=_int(options, MAX_OFFSETS_PER_TRIGGER),
        min_offsets_per_trigger=admission[0], max_trigger_delay_ms=admission[1],
        commit_offsets_to_group=_group_id(options),
        no_match_latest=strategy == "latest",
        poll_timeout_ms=_or(_int(options, POLL_TIMEOUT_MS), DEFAULT_POLL_TIMEOUT_MS),
        fetch_offset_num_retries=_or(_int(options, FETCH_OFFSET_NUM_RETRIES, minimum=0),
                                     DEFAULT_FETCH_OFFSET_NUM_RETRIES),
        fetch_offset_retry_interval_ms=_or(_int(options, FETCH_OFFSET_RETRY_INTERVAL_MS, minimum=0),
                                           DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS),
        group_id_prefix=prefix or DEFAULT_GROUP_ID_PREFIX, warnings=tuple(warnings))


def _admission(options: Mapping[str, str], streaming: bool, warnings: list[str]) -> tuple[int | None, int]:
    """minOffsetsPerTrigger and maxTriggerDelay (ms), checked as Spark's Kafka source does."""
    low, high = _int(options, MIN_OFFSETS_PER_TRIGGER), _int(options, MAX_OFFSETS_PER_TRIGGER)
    delay_text = _get(options, MAX_TRIGGER_DELAY)
    delay_ms = DEFAULT_MAX_TRIGGER_DELAY_MS if delay_text is None else parse_time_ms(delay_text, MAX_TRIGGER_DELAY)
    if streaming and delay_text is not None and low is None:  # Spark ignores it then too (its TODO)
        warnings.append(f"option '{MAX_TRIGGER_DELAY}' has no effect without '{MIN_OFFSETS_PER_TRIGGER}'")
    if streaming and low is not None and high is not None and low > high:
        warnings.append(f"option '{MIN_OFFSETS_PER_TRIGGER}' ({low}) is above '{MAX_OFFSETS_PER_TRIGGER}' "
                        f"({high}): a batch waits for {low} records and then reads {high} of them")
    return low, delay_ms


def parse_time_ms(text: str, option: str) -> int:
    """A Spark time string (`15m`, `30s`, `500ms`, `500` = ms) in milliseconds; OptionError naming `option`."""
    match = _TIME_STRING.match(text.lower())
    unit = (match.group(2) or "ms") if match else ""
    if not match or unit not in _TIME_UNIT_MS:
        raise OptionError(f"option '{option}' must be a duration like 15m, 30s or 500ms "
                          f"(units {', '.join(_TIME_UNIT_MS)}), got {text!r}")
    return int(int(match.group(1)) * _TIME_UNIT_MS[unit])


def _group_id(options: Mapping[str, str]) -> str | None:
    text = _get(options, COMMIT_OFFSETS_TO_GROUP)
    if text is not None and not text.strip():
        raise OptionError(f"option '{COMMIT_OFFSETS_TO_GROUP}' is empty: give the consumer group id to commit to")
    return None if text is None else text.strip()


def parse_sink_options(options: Mapping[str, str], *, streaming: bool) -> SinkOptions:
    """Check every option of a write; OptionError naming the option at the first problem."""
    allowed = (*SINK_OPTIONS, CHECKPOINT_LOCATION) if streaming else SINK_OPTIONS
    _check_names(options, allowed, "streaming sink" if streaming else "batch sink")
    kafka_params = _kafka_params(options, FORBIDDEN_PRODUCER)
    topic = _get(options, TOPIC)
    if topic is not None and not topic.strip():
        raise OptionError("option 'topic' is empty")
    prefix, kafka_params = _transactional(options, kafka_params)
    commit_log_topic = (_get(options, COMMIT_LOG_TOPIC) or DEFAULT_COMMIT_LOG_TOPIC).strip()
    if _get(options, COMMIT_LOG_TOPIC) is not None and prefix is None:
        raise OptionError(f"option '{COMMIT_LOG_TOPIC}' is for the exactly-once sink: set '{TRANSACTIONAL}' "
                          "to true or give 'kafka.transactional.id'")
    if not commit_log_topic:
        raise OptionError(f"option '{COMMIT_LOG_TOPIC}' is empty")
    return SinkOptions(topic=None if topic is None else topic.strip(), kafka_params=kafka_params,
                       transactional_id_prefix=prefix, commit_log_topic=commit_log_topic)


def _transactional(options: Mapping[str, str], kafka_params: tuple[tuple[str, str], ...]
                   ) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """The exactly-once sink's transactional id prefix (None: at-least-once), and the kafka.*
    settings without it: each task's producer gets its own id derived from the prefix."""
    params = dict(kafka_params)
    given = params.pop("transactional.id", None)
    wanted = _bool(options, TRANSACTIONAL, given is not None)
    if given is not None and not wanted:
        raise OptionError(f"option 'kafka.transactional.id' asks for transactions but option '{TRANSACTIONAL}' "
                          "is false: drop one of them")
    if given is not None and not given.strip():
        raise OptionError("option 'kafka.transactional.id' is empty; give a prefix or drop it for the default "
                          f"({DEFAULT_TRANSACTIONAL_ID_PREFIX!r})")
    if not wanted:
        return None, kafka_params
    for name in ("enable.idempotence", "acks"):
        if name in params and params[name].strip().lower() not in ("true", "all", "-1"):
            raise OptionError(f"option 'kafka.{name}={params[name]}' contradicts '{TRANSACTIONAL}': "
                              "transactions need an idempotent acks=all producer")
    prefix = (given or DEFAULT_TRANSACTIONAL_ID_PREFIX).strip()
    return prefix, tuple(sorted(params.items()))


def _isolation_checked(kafka_params: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """kafka.isolation.level checked and lowercased on the driver (tasks read it as is)."""
    params = dict(kafka_params)
    if "isolation.level" not in params:
        return kafka_params
    level = params["isolation.level"].strip().lower()
    if level not in ISOLATION_LEVELS:
        raise OptionError(f"option 'kafka.isolation.level' must be read_committed or read_uncommitted, "
                          f"not {params['isolation.level']!r}")
    params["isolation.level"] = level
    return tuple(sorted(params.items()))


def _or(value: int | None, default: int) -> int:
    return default if value is None else value
