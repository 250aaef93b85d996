"""A streaming query copying one topic into another through the exactly-once sink, run as its
own process so a test can SIGKILL its driver (tests/spark/test_spark_exactly_once.py).

    python -m tests.spark.eos_query BOOTSTRAP IN OUT CHECKPOINT MARKERS [--hook before:N|after:N]
                                    [--available-now]

`--hook before:N` stops the driver's commit of batch N before any EndTxn (its tasks'
transactions are prepared, open); `after:N` after every EndTxn, before Spark writes its own
commit log. Either way it writes MARKERS/<when>-<N> and hangs there until killed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Final

from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from spark.data_source import TidelogDataSource
from spark.writer import TidelogStreamWriter

HOOK_ENV: Final = "TIDELOG_EOS_HOOK"  # read in the commit's Python process, which the JVM starts
MARKERS_ENV: Final = "TIDELOG_EOS_MARKERS"
HANG_S: Final = 600.0  # the test kills the process group long before
MAX_OFFSETS_PER_TRIGGER: Final = 200
TIMEOUT_S: Final = 170


class HookedStreamWriter(TidelogStreamWriter):
    """The sink's writer with a place to die in its commit."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        when, _, at = os.environ.get(HOOK_ENV, "").partition(":")
        if when == "before" and at == str(batchId):
            _mark_and_hang(f"before-{batchId}")
        super().commit(messages, batchId)
        if when == "after" and at == str(batchId):
            _mark_and_hang(f"after-{batchId}")


def _mark_and_hang(name: str) -> None:
    (Path(os.environ[MARKERS_ENV]) / name).write_text("")
    time.sleep(HANG_S)  # a deliberate hang: the test's SIGKILL ends it


class HookedDataSource(TidelogDataSource):
    @classmethod
    def name(cls) -> str:
        return "tidelog_eos_hooked"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        writer = super().streamWriter(schema, overwrite)
        assert isinstance(writer, TidelogStreamWriter)
        return HookedStreamWriter(writer.options)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "source", "sink", "checkpoint", "markers"):
        parser.add_argument(name)
    parser.add_argument("--hook", default="")
    parser.add_argument("--available-now", action="store_true")
    args = parser.parse_args(argv)
    os.environ.update({HOOK_ENV: args.hook, MARKERS_ENV: args.markers, "SPARK_LOCAL_IP": "127.0.0.1",
                       "PYSPARK_PYTHON": sys.executable})
    from pyspark.sql import SparkSession

    session: Any = (SparkSession.builder.master("local[2]").appName("tidelog-eos")
                    .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                    .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(TidelogDataSource)
    session.dataSource.register(HookedDataSource)
    stream = (session.readStream.format("tidelog").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.source).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(MAX_OFFSETS_PER_TRIGGER)).load())
    writer = (stream.select("key", "value").writeStream.format("tidelog_eos_hooked")
              .option("kafka.bootstrap.servers", args.bootstrap).option("topic", args.sink)
              .option("kafka.transactional.id", "eos-test").option("checkpointLocation", args.checkpoint))
    writer = writer.trigger(availableNow=True) if args.available_now else writer.trigger(processingTime="100 milliseconds")
    query = writer.start()
    finished = query.awaitTermination(TIMEOUT_S)
    error = query.exception()
    query.stop()
    session.stop()
    if error is not None:
        print(f"query failed: {error}", file=sys.stderr)
        return 1
    return 0 if finished else 2


if __name__ == "__main__":
    # through the module's own name: Spark pickles the data source by reference, and its
    # workers import tests.spark.eos_query, never this __main__
    from tests.spark import eos_query

    sys.exit(eos_query.main(sys.argv[1:]))
