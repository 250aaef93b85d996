"""Per-partition offsets as Spark's Kafka source writes them, offset ranges, splitting, rate limits.

Pure: no clients, no clocks. The JSON shapes are the Kafka source's, so a checkpoint or an
option value reads the same in both: offsets `{"topic": {"0": 23, "1": -1}}` (-2 earliest,
-1 latest), assignments `{"topic": [0, 1]}`, timestamps `{"topic": {"0": 1700000000000}}`.
Offsets mean "the next offset to read", like `KafkaConsumer.position()`: an end offset is
exclusive.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

EARLIEST: Final = -2  # Spark's JSON sentinel for "the log start offset"
LATEST: Final = -1  # ... and for "the high watermark"


class OffsetsError(ValueError):
    """An offsets, assignment or timestamps JSON value that cannot be used; names the option."""


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


PartitionOffsets = dict[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets [start, end) of one partition: what one Spark task reads."""
    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise ValueError(f"offset range {self.start}..{self.end} of {self.topic}-{self.partition}")

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class RangePlan:
    """The ranges of one read and the data losses found while planning them (messages)."""
    ranges: tuple[OffsetRange, ...]
    data_loss: tuple[str, ...]


# --- JSON ----------------------------------------------------------------------------------


def _load_object(text: str, option: str, example: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise OffsetsError(f"option '{option}' is not valid JSON ({exc}); expected e.g. {example}") from None
    if not isinstance(value, dict) or not value:
        raise OffsetsError(f"option '{option}' must be a non-empty JSON object like {example}, got {text!r:.200}")
    return value


def _partition_number(topic: str, key: Any, option: str) -> int:
    try:
        number = int(key)
    except (TypeError, ValueError):
        number = -1
    if number < 0 or str(key).strip() != str(number):
        raise OffsetsError(f"option '{option}': partition {key!r} of topic {topic!r} is not a partition number")
    return number


def _int_value(value: Any, what: str, option: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OffsetsError(f"option '{option}': {what} must be an integer, got {value!r}")
    return value


def _parse_partition_map(text: str, option: str, example: str, what: str,
                         check: Callable[[int, str], str | None]) -> PartitionOffsets:
    """`{"topic": {"0": n}}` -> {TopicPartition: n}; `check(n, where)` names a bad value."""
    found: PartitionOffsets = {}
    for topic, partitions in _load_object(text, option, example).items():
        if not isinstance(partitions, dict) or not partitions:
            raise OffsetsError(f"option '{option}': topic {topic!r} must map partitions to {what}s, like {example}")
        for key, value in partitions.items():
            number = _int_value(value, f"the {what} of {topic}-{key}", option)
            problem = check(number, f"{topic}-{key}")
            if problem is not None:
                raise OffsetsError(f"option '{option}': {problem}")
            found[TopicPartition(topic, _partition_number(topic, key, option))] = number
    return found


def parse_partition_offsets(text: str, option: str) -> PartitionOffsets:
    """`{"topic": {"0": 23, "1": -1}}` -> {TopicPartition: offset}; -2 earliest, -1 latest."""
    return _parse_partition_map(
        text, option, '{"topicA": {"0": 23, "1": -1}, "topicB": {"0": -2}}', "offset",
        lambda offset, where: None if offset >= EARLIEST else
        f"offset {offset} of {where} is neither an offset (>= 0) nor -2 (earliest) or -1 (latest)")


def parse_partition_timestamps(text: str, option: str) -> PartitionOffsets:
    """`{"topic": {"0": 1700000000000}}` -> {TopicPartition: timestamp in ms}."""
    return _parse_partition_map(
        text, option, '{"topicA": {"0": 1700000000000, "1": 1700000000000}}', "timestamp",
        lambda stamp, where: None if stamp >= 0 else f"timestamp {stamp} of {where} is negative")


def parse_assign(text: str, option: str = "assign") -> tuple[TopicPartition, ...]:
    """`{"topicA": [0, 1], "topicB": [2]}` -> sorted topic-partitions."""
    example = '{"topicA": [0, 1], "topicB": [2, 4]}'
    if not text.strip().startswith("{"):
        raise OffsetsError(f"option '{option}' must be a JSON object like {example}, got {text!r:.200}")
    assigned: set[TopicPartition] = set()
    for topic, partitions in _load_object(text, option, example).items():
        if not isinstance(partitions, list) or not partitions:
            raise OffsetsError(f"option '{option}': topic {topic!r} must list partition numbers, like {example}")
        for number in partitions:
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise OffsetsError(f"option '{option}': {number!r} of topic {topic!r} is not a partition number")
            assigned.add(TopicPartition(topic, number))
    return tuple(sorted(assigned))


def to_json_offsets(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The checkpoint form, topics and partitions sorted: Spark compares offsets as JSON text."""
    document: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        document.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return document


def from_json_offsets(document: Mapping[str, Mapping[str, int]]) -> PartitionOffsets:
    """Back from the checkpoint form (what Spark hands to `latestOffset` and `partitions`)."""
    return {TopicPartition(topic, int(key)): int(offset)
            for topic, partitions in document.items() for key, offset in partitions.items()}


def describe_offsets(offsets: Mapping[TopicPartition, int]) -> str:
    """`orders:0=12,1=7 audit:0=3` for progress lines and error messages."""
    return " ".join(f"{topic}:" + ",".join(f"{p}={o}" for p, o in partitions.items())
                    for topic, partitions in to_json_offsets(offsets).items()) or "-"


# --- planning -----------------------------------------------------------------------------


def plan_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> RangePlan:
    """Pair start and end offsets into ranges, as the Kafka source does between two batches.

    A partition only in `end` has just been admitted at its log start offset (the stream
    reader does that first): nothing to read yet. A partition only in `start` is gone (topic
    deleted); an end below the start means the log was truncated. Those two are data losses,
    reported, never raised here.
    """
    ranges: list[OffsetRange] = []
    losses: list[str] = []
    for tp in sorted(set(start) | set(end)):
        if tp not in end:
            losses.append(f"partition {tp} is gone (its topic was deleted?): offsets from {start[tp]} on are lost")
            continue
        first, last = start.get(tp, end[tp]), end[tp]
        if last < first:
            losses.append(f"the log of {tp} went back from offset {first} to {last} (truncated): "
                          "records may have been lost")
            continue
        if last > first:
            ranges.append(OffsetRange(tp.topic, tp.partition, first, last))
    return RangePlan(tuple(ranges), tuple(losses))


def split_ranges(ranges: Sequence[OffsetRange], min_partitions: int | None = None,
                 max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """One range per topic-partition, split into contiguous pieces of near-equal size.

    With `min_partitions` above the number of ranges, each range gets pieces in proportion
    to its size (at least one), so there are at least `min_partitions` pieces in total;
    `max_records_per_partition` caps every piece. Empty ranges are dropped.
    """
    nonempty = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in nonempty)
    pieces: list[OffsetRange] = []
    for r in nonempty:
        parts = 1
        if min_partitions is not None and min_partitions > len(nonempty):
            parts = max(1, math.ceil(r.size * min_partitions / total))
        if max_records_per_partition is not None:
            parts = max(parts, math.ceil(r.size / max_records_per_partition))
        parts = min(parts, r.size)  # never an empty piece
        pieces.extend(_split_one(r, parts))
    return pieces


def _split_one(r: OffsetRange, parts: int) -> Iterable[OffsetRange]:
    base, extra = divmod(r.size, parts)
    first = r.start
    for index in range(parts):
        last = first + base + (1 if index < extra else 0)
        yield OffsetRange(r.topic, r.partition, first, last)
        first = last


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               max_rows: int) -> PartitionOffsets:
    """End offsets admitting at most `max_rows` records, shared in proportion to each backlog.

    Exact (never more than `max_rows`): floor shares, then the leftover rows one each to the
    largest remainders (ties: larger backlog, then topic-partition order), so a small
    partition is not starved for long. Partitions with nothing new, or not in `start`,
    keep their `latest` offset.
    """
    if max_rows <= 0:
        raise ValueError(f"max_rows must be positive, got {max_rows}")
    backlog = {tp: end - start[tp] for tp, end in latest.items() if tp in start and end > start[tp]}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    shares = {tp: size * max_rows // total for tp, size in backlog.items()}
    leftover = max_rows - sum(shares.values())
    by_remainder = sorted(backlog, key=lambda tp: (-(backlog[tp] * max_rows % total), -backlog[tp], tp))
    for tp in by_remainder[:leftover]:
        shares[tp] += 1
    return {tp: start[tp] + shares[tp] if tp in backlog else end for tp, end in latest.items()}


def count_records(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> int:
    """Offsets between two offset maps, over the partitions of `end` (absent in start: from 0)."""
    return sum(max(0, offset - start.get(tp, 0)) for tp, offset in end.items())
