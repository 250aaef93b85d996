"""Streaming reads: `spark.readStream.format("tidelog")`, micro-batch with admission control.

Offsets are Spark's Kafka source offsets, `{"topic": {"partition": next offset}}`, so a
checkpoint is the whole record of progress: a restarted query resumes at the end of the
last batch Spark logged, with no gap and no duplicate. Each trigger looks up the
subscription's partitions and high watermarks (on the driver, in Spark's long-lived
source process), and `maxOffsetsPerTrigger` shares the admitted records between partitions
in proportion to their backlog; minOffsetsPerTrigger / maxTriggerDelay hold a trigger back
until enough records wait (spark/admission.py, with what PySpark's read limits cannot say).
`reportLatestOffset` hands Spark the high watermarks of the last look-up, so the query's
progress shows the backlog (`sources[].latestOffset`).

With commitOffsetsToGroup the end offsets of each completed batch are committed to that
consumer group (spark/group_commit.py): progress for Kafka's lag tools, never read back.

A partition that appears (a new topic matching subscribePattern, partitions added) first
enters the offsets at its log start offset, admitting nothing; the next batch reads it.
That keeps planning a pure function of (start, end): replaying a logged batch after a
restart plans the same ranges.

Data loss follows failOnDataLoss: a partition gone from the metadata, a log start above 0
for a new partition, a high watermark below our position (truncation) or offsets aged out
under a running query. A watermark below our position is looked up again before it is
believed: a new leader may briefly report a lagging high watermark.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from spark.admission import ALL_AVAILABLE, Limits, admit
from spark.group_commit import GroupOffsetCommitter
from spark.offset_resolver import OffsetResolver
from spark.offsets import (
    PartitionOffsets,
    TopicPartition,
    from_json_offsets,
    plan_ranges,
    split_ranges,
    to_json_offsets,
)
from spark.options import SourceOptions
from spark.range_reader import RangePartition, read_partition, report_data_loss

log = logging.getLogger("tidelog.spark")


def wall_clock_ms() -> int:
    """The clock of maxTriggerDelay (Spark's Kafka source reads the system clock too)."""
    return int(time.time() * 1000)


class TidelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The micro-batch source; its admin client lives in the driver's source process only."""

    def __init__(self, options: SourceOptions, schema: StructType,
                 clock: Callable[[], int] = wall_clock_ms) -> None:
        self.options = options
        self.schema = schema
        self.clock = clock
        self._resolver: OffsetResolver | None = None
        self._available_now = False
        self._target: PartitionOffsets | None = None  # Trigger.AvailableNow: latest when it began
        self._latest: PartitionOffsets | None = None  # for reportLatestOffset (query progress)
        self._last_trigger_ms = 0  # minOffsetsPerTrigger: the first trigger always runs, as in Spark
        group = options.commit_offsets_to_group
        self._group: GroupOffsetCommitter | None = None if group is None else GroupOffsetCommitter(options, group)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_resolver"] = None  # a client does not travel to the workers
        return state

    @property
    def resolver(self) -> OffsetResolver:
        if self._resolver is None:
            self._resolver = OffsetResolver(self.options)
        return self._resolver

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts: startingOffsets (default latest) over today's partitions."""
        for warning in self.options.warnings:
            log.warning("%s", warning)
        tps = self.resolver.partitions()
        return to_json_offsets(self.resolver.resolve(self.options.starting, tps, is_start=True) if tps else {})

    def getDefaultReadLimit(self) -> ReadLimit:
        """ReadMinRows(minOffsetsPerTrigger), else ReadMaxRows(maxOffsetsPerTrigger), else all:
        PySpark has no composite limit, so the rest comes from the options (spark/admission.py)."""
        low, high = self.options.min_offsets_per_trigger, self.options.max_offsets_per_trigger
        if low is not None:
            return ReadMinRows(low)
        return ReadAllAvailable() if high is None else ReadMaxRows(high)

    def _limits(self, limit: ReadLimit) -> Limits:
        """The admission limits of one trigger, from the engine's `limit` and our options."""
        if isinstance(limit, ReadAllAvailable):  # Trigger.Once, or the engine overriding us
            return ALL_AVAILABLE
        high = limit.max_rows if isinstance(limit, ReadMaxRows) else self.options.max_offsets_per_trigger
        if self._available_now or not isinstance(limit, ReadMinRows):
            # Trigger.AvailableNow: a held-back trigger would look like "caught up" and end the run
            # before its target (ReadMinRows' own warning), so only the cap applies
            return Limits(max_rows=high)
        return Limits(min_rows=limit.min_rows, max_rows=high,
                      max_trigger_delay_ms=self.options.max_trigger_delay_ms)

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read up to the offsets of the first look-up, then stop."""
        self._available_now = True

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next batch: high watermarks, admission-controlled; new partitions at their start."""
        begin = from_json_offsets(start)
        # Spark calls commit(end) of batch N only when it plans batch N+1, so an idle stream (or the
        # last batch of Trigger.AvailableNow) would never commit its last batch. `start` here is the
        # end of the last completed batch (micro-batches run one after the other): commit it now.
        self._commit_to_group(begin)
        if self._available_now:
            if self._target is None:  # fixed once: a partition whose look-up fails must fail the run,
                self._target = self._fetch_latest(begin, lenient=False)  # not end it "caught up" early
            latest = self._target
        else:
            latest = self._fetch_latest(begin)
        self._latest = latest
        known = {tp: offset for tp, offset in latest.items() if tp in begin}
        admission = admit(begin, known, self._limits(limit), now_ms=self.clock(),
                          last_trigger_ms=self._last_trigger_ms)
        self._last_trigger_ms = admission.last_trigger_ms
        if admission.delayed:  # start unchanged: Spark runs no batch this trigger
            return start
        end = admission.end
        end.update(self._admit_new([tp for tp in latest if tp not in begin]))
        return to_json_offsets(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None if self._latest is None else to_json_offsets(self._latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """The ranges between two offsets, split for minPartitions; data loss per failOnDataLoss."""
        plan = plan_ranges(from_json_offsets(start), from_json_offsets(end))
        for message in plan.data_loss:
            report_data_loss(message, self.options.fail_on_data_loss)
        pieces = split_ranges(plan.ranges, self.options.min_partitions, self.options.max_records_per_partition)
        return [RangePartition(piece) for piece in pieces]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.options)

    def commit(self, end: dict[str, Any]) -> None:
        """Batch `end` is done: with commitOffsetsToGroup its offsets go to the group (for Kafka's
        lag tools only; the checkpoint holds progress, and a restart never reads the group)."""
        self._commit_to_group(from_json_offsets(end))

    def stop(self) -> None:
        self._resolver = None
        if self._group is not None:
            self._group.close()

    def _commit_to_group(self, offsets: PartitionOffsets) -> None:
        if self._group is not None:
            self._group.commit(offsets)

    # --- look-ups -------------------------------------------------------------------------

    def _fetch_latest(self, begin: PartitionOffsets, *, lenient: bool = True) -> PartitionOffsets:
        """High watermarks of the subscription's partitions; where a look-up fails, no progress
        (lenient) or an OffsetLookupError after the retries."""
        resolver = self.resolver
        tps = set(resolver.partitions())
        if any(tp not in tps for tp in begin):  # gone, or metadata caught mid-change: ask once more
            time.sleep(self.options.fetch_offset_retry_interval_ms / 1000)
            tps |= {tp for tp in resolver.partitions() if tp in begin}
        # a topic seen with a transient error is not deleted: its partitions wait, losing nothing
        tps |= {tp for tp in begin if tp.topic in resolver.uncertain_topics}
        latest = resolver.latest(sorted(tps), lenient=lenient)
        for tp in tps & set(begin):
            latest.setdefault(tp, begin[tp])  # unreachable now (leader moving): wait, lose nothing
        return self._confirm_regressions(begin, latest)

    def _confirm_regressions(self, begin: PartitionOffsets, latest: PartitionOffsets) -> PartitionOffsets:
        """Believe a high watermark below our position only if it stays there over the retries."""
        for attempt in range(self.options.fetch_offset_num_retries):  # bounded by the retry option
            behind = [tp for tp, offset in latest.items() if tp in begin and offset < begin[tp]]
            if not behind:
                break
            time.sleep(self.options.fetch_offset_retry_interval_ms / 1000)
            latest.update(self.resolver.latest(behind, lenient=True))
        return latest

    def _admit_new(self, tps: list[TopicPartition]) -> PartitionOffsets:
        """New partitions enter at their log start offset (nothing read yet); above 0 is data loss."""
        if not tps:
            return {}
        starts = self.resolver.earliest(tps, lenient=True)
        for tp, offset in sorted(starts.items()):
            if offset > 0:
                report_data_loss(f"added partition {tp} starts from offset {offset} instead of 0: records were "
                                 "deleted before they could be read", self.options.fail_on_data_loss)
            log.info("new partition %s: reading from offset %d", tp, offset)
        return starts
