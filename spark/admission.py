"""Admission control of the streaming source: how far the next micro-batch reads.

Pure: the caller passes the offsets, the clock reading and the time of the last trigger, and
keeps the returned `last_trigger_ms`. The rules are those of Spark's Kafka source
(`KafkaMicroBatchStream.latestOffset` / `delayBatch`):

- `max_rows` (maxOffsetsPerTrigger): at most that many records, shared between partitions
  in proportion to their backlog (`offsets.rate_limit`).
- `min_rows` (minOffsetsPerTrigger): no batch until that many records wait, unless
  `max_trigger_delay_ms` (maxTriggerDelay) has passed since the last batch that ran. A
  delayed trigger answers the start offsets unchanged, which Spark reads as "no new data".
  The first trigger of a source always runs (its last trigger is at time 0, as in Spark).
  Both limits together: the delay check first, then the cap.

What Spark's Python streaming API cannot carry, and how we keep Spark's semantics anyway:
PySpark's `ReadMinRows` has no `maxTriggerDelay`, and there is no `CompositeReadLimit` (the
worker's `ReadLimitRegistry` knows only the five single limits). So the source announces
`ReadMinRows(min)` when minOffsetsPerTrigger is set (else `ReadMaxRows`, else
`ReadAllAvailable`), and takes the delay and the cap from its own options; an engine that
asks for `ReadAllAvailable` (Trigger.Once) gets everything, as Spark's Kafka source does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from spark.offsets import PartitionOffsets, TopicPartition, rate_limit

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)


@dataclass(frozen=True, slots=True)
class Limits:
    """The admission limits of one trigger; None: no such limit."""
    min_rows: int | None = None
    max_rows: int | None = None
    max_trigger_delay_ms: int = 0

    def __post_init__(self) -> None:
        for name in ("min_rows", "max_rows"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if self.max_trigger_delay_ms < 0:
            raise ValueError(f"max_trigger_delay_ms must not be negative, got {self.max_trigger_delay_ms}")


ALL_AVAILABLE = Limits()


@dataclass(frozen=True, slots=True)
class Admission:
    """The end offsets of the next batch (== start when `delayed`) and the time of its trigger."""
    end: PartitionOffsets
    last_trigger_ms: int
    delayed: bool = False


def backlog(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]) -> int:
    """Records waiting past `start` in the partitions of both (a log gone back counts nothing)."""
    return sum(max(0, offset - start[tp]) for tp, offset in latest.items() if tp in start)


def admit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], limits: Limits, *,
          now_ms: int, last_trigger_ms: int) -> Admission:
    """How far the next batch reads from `start`, given the `latest` offsets of the same partitions."""
    if limits.min_rows is not None:
        if now_ms - last_trigger_ms < limits.max_trigger_delay_ms and backlog(start, latest) < limits.min_rows:
            return Admission(dict(start), last_trigger_ms, delayed=True)
        last_trigger_ms = now_ms  # the delay has passed, or enough records wait: this trigger runs
    end = dict(latest) if limits.max_rows is None else rate_limit(start, latest, limits.max_rows)
    return Admission(end, last_trigger_ms)
