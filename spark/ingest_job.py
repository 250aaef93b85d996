"""`tidelog spark ingest`: stream a topic into Parquet files, exactly once.

    tidelog spark ingest --topic orders --to /lake/orders [--format parquet]
        [--trigger available-now|processing-time=10s] [--checkpoint DIR]
        [--data-dir DIR | --bootstrap-server HOST:PORT[,...]] [--master spark://HOST:7077]
        [--commit-offsets-to-group GROUP] [--spark-ui]

A Structured Streaming query: the tidelog source into Spark's file sink. Exactly-once
output is Spark's: each micro-batch's offsets are logged in the checkpoint before it runs,
and its files become part of the output only when the batch is committed to
`<to>/_spark_metadata` — which every Spark reader of `<to>` honours, so a batch replayed
after a crash is never seen twice. One progress line per micro-batch (rows, end offsets,
lag behind the high watermarks); with an available-now trigger it exits 0 once it has
caught up with the records that existed when it started. It says first which Spark master
it runs against, its application id and its web UI (off unless --spark-ui). With
--commit-offsets-to-group each completed batch's end offsets go to that consumer group, so
`tidelog groups describe` shows the pipeline's lag; the checkpoint, not the group, is where a
restart resumes.

On an existing cluster, submit this module itself (its workers need tidelog installed, README
"Spark"): `spark-submit --master spark://HOST:7077 spark/ingest_job.py --topic T --to DIR
--bootstrap-server HOST:PORT`; without --master the job takes spark-submit's master.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from common.limits import WATCH_INTERVAL

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

FORMATS: Final = ("parquet", "orc", "json")
DEFAULT_MASTER: Final = "local[2]"  # when neither --master nor spark-submit names one
SUBMIT_GATEWAY_ENV: Final = "PYSPARK_GATEWAY_PORT"  # set when spark-submit started this Python, its JVM waiting
_INTERVAL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*$")
_UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


@dataclass(frozen=True, slots=True)
class IngestTrigger:
    """available-now (catch up, then stop) or processing-time every `interval_ms`."""
    kind: str  # "available-now" | "processing-time"
    interval_ms: int = 0


@dataclass(frozen=True, slots=True)
class IngestConfig:
    topic: str
    output: str
    checkpoint: str
    bootstrap_servers: str
    file_format: str = "parquet"
    trigger: IngestTrigger = IngestTrigger("available-now")
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    commit_offsets_to_group: str | None = None
    source_options: tuple[tuple[str, str], ...] = ()


def parse_trigger(text: str) -> IngestTrigger:
    """`available-now` or `processing-time=10s` (units ms, s, m, h)."""
    if text.strip() == "available-now":
        return IngestTrigger("available-now")
    kind, _, interval = text.partition("=")
    match = _INTERVAL.match(interval)
    if kind.strip() != "processing-time" or not match:
        raise ValueError(f"--trigger must be available-now or processing-time=<interval> like 10s or 500ms, "
                         f"got {text!r}")
    return IngestTrigger("processing-time", int(float(match.group(1)) * _UNIT_MS[match.group(2)]))


def source_options(config: IngestConfig) -> dict[str, str]:
    """The tidelog source options of the ingest query."""
    options = {"kafka.bootstrap.servers": config.bootstrap_servers, "subscribe": config.topic,
               "startingOffsets": config.starting_offsets, **dict(config.source_options)}
    if config.max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(config.max_offsets_per_trigger)
    if config.commit_offsets_to_group is not None:
        options["commitOffsetsToGroup"] = config.commit_offsets_to_group
    return options


def start_ingest(session: SparkSession, config: IngestConfig) -> StreamingQuery:
    """Start the query (the data source must be registered in `session`)."""
    stream = session.readStream.format("tidelog").options(**source_options(config)).load()
    writer = (stream.writeStream.format(config.file_format).option("path", config.output)
              .option("checkpointLocation", config.checkpoint).queryName(f"tidelog-ingest-{config.topic}"))
    if config.trigger.kind == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{config.trigger.interval_ms} milliseconds")
    return writer.start()


def _offsets(value: Any) -> dict[str, dict[str, int]]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def progress_line(progress: Mapping[str, Any]) -> str:
    """One line for one micro-batch's progress (Spark's progress JSON as a dict)."""
    sources = progress.get("sources") or [{}]
    source = sources[0]
    end = _offsets(source.get("endOffset"))
    latest = _offsets(source.get("latestOffset"))
    lag = sum(max(0, int(latest.get(t, {}).get(p, o)) - int(o)) for t, parts in end.items() for p, o in parts.items())
    shown = " ".join(f"{t}:" + ",".join(f"{p}={o}" for p, o in parts.items()) for t, parts in end.items()) or "-"
    rate = progress.get("processedRowsPerSecond") or 0.0
    return (f"batch {progress.get('batchId')}: rows={progress.get('numInputRows', 0)} offsets={shown} "
            f"lag={lag} rows/s={rate:.0f}")


def watch(query: StreamingQuery, out: IO[str], interval: float = WATCH_INTERVAL,
          should_stop: Callable[[], bool] = lambda: False) -> None:
    """Print a progress line per finished micro-batch until the query ends (or should_stop())."""
    seen: set[tuple[Any, Any]] = set()

    def report() -> None:
        for item in query.recentProgress:
            progress = json.loads(item.json)
            key = (progress.get("runId"), progress.get("batchId"))
            if key not in seen and progress.get("numInputRows") is not None:
                seen.add(key)
                print(progress_line(progress), file=out, flush=True)
    while query.isActive and not should_stop():  # ends with the query (available-now) or on a stop request
        query.awaitTermination(interval)  # type: ignore[arg-type]  # typed int; a float works (x 1000 ms)
        report()
    report()


def build_session(master: str | None, app_name: str = "tidelog-spark-ingest", ui: bool = False) -> SparkSession:
    """A SparkSession with the driver on SPARK_LOCAL_IP (default 127.0.0.1) and Python workers
    on this interpreter; its web UI only when asked (`ui`). `master` None: spark-submit's
    (`spark.master`), else local[2]."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # spark-submit may name the workers' Python
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    if master is None and SUBMIT_GATEWAY_ENV in os.environ:
        # Under spark-submit its JVM is already up and holds --master as spark.master, but
        # SparkConf() sees the JVM's properties only once connected to it: without this the job
        # ran local[2] whatever master spark-submit was given.
        SparkContext._ensure_initialized()
    builder = SparkSession.builder
    if master is not None or not SparkConf().contains("spark.master"):
        builder = builder.master(master or DEFAULT_MASTER)
    session = (builder.appName(app_name)
               .config("spark.ui.enabled", str(ui).lower()).config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    session.sparkContext.setLogLevel("WARN")
    return session


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", required=True, help="the topic to ingest")
    parser.add_argument("--to", required=True, metavar="DIR", help="output directory (Spark's file sink)")
    parser.add_argument("--format", default="parquet", choices=FORMATS, help="file format (default parquet)")
    parser.add_argument("--trigger", default="available-now", type=parse_trigger,
                        help="available-now (catch up, then exit 0; the default) or processing-time=10s")
    parser.add_argument("--checkpoint", metavar="DIR", help="checkpoint directory (default DIR/_checkpoint)")
    # `tidelog spark ingest` adds --data-dir and, without this option, takes the brokers of the
    # data dir's cluster.json, as every other tidelog command does (tidelog/cli_spark.py)
    parser.add_argument("--bootstrap-server", "--bootstrap-servers", dest="bootstrap_servers",
                        metavar="HOST:PORT[,...]", default=None,
                        help="kafka.bootstrap.servers (default: the brokers of --data-dir's cluster)")
    parser.add_argument("--starting-offsets", default="earliest",
                        help="startingOffsets of a new query: earliest (default), latest or JSON; a restart "
                             "resumes from the checkpoint")
    parser.add_argument("--max-offsets-per-trigger", type=int, help="maxOffsetsPerTrigger (records per batch)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="another source option, e.g. includeHeaders=true (repeatable)")
    parser.add_argument("--master", default=None,
                        help=f"Spark master: local[N] or spark://HOST:PORT of a standalone cluster (its workers need "
                             f"tidelog installed: README 'Spark'); default spark-submit's, else {DEFAULT_MASTER}")
    parser.add_argument("--spark-ui", action="store_true", help="serve the application's web UI (default off)")
    parser.add_argument("--commit-offsets-to-group", metavar="GROUP",
                        help="commit each completed batch's end offsets to this consumer group (commitOffsetsToGroup), "
                             "for Kafka lag tools; restarts still resume from the checkpoint")


def config_from_args(args: argparse.Namespace) -> IngestConfig:
    """The IngestConfig of parsed arguments; ValueError for a malformed --option."""
    extra = []
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--option must be KEY=VALUE, got {item!r}")
        extra.append((key.strip(), value))
    if not args.bootstrap_servers:
        raise ValueError("give --bootstrap-server HOST:PORT[,...]: no cluster to read from")
    output = str(Path(args.to).resolve())
    checkpoint = str(Path(args.checkpoint).resolve()) if args.checkpoint else str(Path(output) / "_checkpoint")
    return IngestConfig(topic=args.topic, output=output, checkpoint=checkpoint,
                        bootstrap_servers=args.bootstrap_servers, file_format=args.format, trigger=args.trigger,
                        starting_offsets=args.starting_offsets, max_offsets_per_trigger=args.max_offsets_per_trigger,
                        commit_offsets_to_group=args.commit_offsets_to_group, source_options=tuple(extra))


def spark_line(session: SparkSession) -> str:
    """Which Spark this job runs on: master, application id and web UI."""
    context = session.sparkContext
    ui = context.uiWebUrl or "off (--spark-ui to serve it)"
    return f"spark: master {context.master}, application {context.applicationId}, UI {ui}"


def run(args: argparse.Namespace) -> int:
    """Run the ingest query until it ends (available-now) or Ctrl-C; 0 on success."""
    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"tidelog spark ingest: {exc}", file=sys.stderr)
        return 2
    from pyspark.sql import SparkSession

    from spark import register

    owned = SparkSession.getActiveSession() is None  # a caller's session is left running
    session = build_session(args.master, ui=args.spark_ui)
    try:
        register(session)
        print(spark_line(session), flush=True)
        print(f"ingesting {config.topic} from {config.bootstrap_servers} into {config.output} "
              f"({config.file_format}, trigger {config.trigger.kind}, checkpoint {config.checkpoint})", flush=True)
        started = time.monotonic()
        query = start_ingest(session, config)
        try:
            watch(query, sys.stdout)
        except KeyboardInterrupt:
            print("stopping (the next run resumes from the checkpoint)", flush=True)
            query.stop()
        except Exception as exc:  # awaitTermination raises the query's failure
            print(f"tidelog spark ingest: the query failed: {exc}", file=sys.stderr)
            return 1
        error = query.exception()
        if error is not None:
            print(f"tidelog spark ingest: the query failed: {error}", file=sys.stderr)
            return 1
        print(f"done in {time.monotonic() - started:.1f} s", flush=True)
        return 0
    finally:
        if owned:
            session.stop()


def main(argv: list[str] | None = None) -> int:
    """The job under spark-submit (`spark-submit spark/ingest_job.py --topic T --to DIR
    --bootstrap-server HOST:PORT`): `tidelog spark ingest` without the data-dir look-up."""
    import logging

    parser = argparse.ArgumentParser(prog="ingest_job.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
