"""Batch reads: `spark.read.format("tidelog")`.

`partitions()` runs once on the driver: it resolves startingOffsets/endingOffsets (or the
timestamps) to concrete offsets — `latest` is each partition's high watermark at that
moment, so a batch read never waits for records that are not there — and plans one input
partition per topic-partition range, split for minPartitions / maxRecordsPerPartition.
`read()` runs in a Spark task and reads one range (`range_reader`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from spark.offset_resolver import OffsetResolver
from spark.offsets import OffsetRange, describe_offsets, split_ranges
from spark.options import OptionError, SourceOptions
from spark.range_reader import RangePartition, read_partition

log = logging.getLogger("tidelog.spark")


class TidelogBatchReader(DataSourceReader):
    """Reads the offset ranges a batch query asks for; holds only options (it is pickled)."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        """One partition per non-empty range, split as the options ask (driver side)."""
        assert self.options.ending is not None, "a batch read always has an end"
        for warning in self.options.warnings:
            log.warning("%s", warning)
        resolver = OffsetResolver(self.options)
        tps = resolver.partitions()
        if not tps:
            log.warning("the subscription (%s) matches no partition: the result is empty",
                        self.options.subscription.kind)
            return []
        start = resolver.resolve(self.options.starting, tps, is_start=True)
        end = resolver.resolve(self.options.ending, tps, is_start=False)
        ranges = []
        for tp in tps:
            if start[tp] > end[tp]:  # Spark refuses this too, whatever failOnDataLoss says
                raise OptionError(f"{tp}: the starting offset {start[tp]} is after the ending offset {end[tp]} "
                                  f"(starting {describe_offsets(start)}; ending {describe_offsets(end)})")
            ranges.append(OffsetRange(tp.topic, tp.partition, start[tp], end[tp]))
        pieces = split_ranges(ranges, self.options.min_partitions, self.options.max_records_per_partition)
        return [RangePartition(piece) for piece in pieces]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The records of one range, as Arrow batches (worker side)."""
        return read_partition(partition, self.options)
