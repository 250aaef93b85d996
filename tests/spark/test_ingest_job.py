"""spark/ingest_job.py: the parts without Spark (trigger parsing, progress lines, arguments)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from spark.ingest_job import (
    IngestTrigger,
    add_arguments,
    config_from_args,
    parse_trigger,
    progress_line,
    source_options,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("available-now", IngestTrigger("available-now")),
    ("processing-time=10s", IngestTrigger("processing-time", 10_000)),
    ("processing-time=500ms", IngestTrigger("processing-time", 500)),
    ("processing-time=2m", IngestTrigger("processing-time", 120_000)),
    ("processing-time=1.5s", IngestTrigger("processing-time", 1_500)),
])
def test_parse_trigger(text: str, expected: IngestTrigger) -> None:
    assert parse_trigger(text) == expected


@pytest.mark.parametrize("text", ["once", "processing-time", "processing-time=10", "processing-time=fast"])
def test_bad_trigger(text: str) -> None:
    with pytest.raises(ValueError, match="--trigger must be"):
        parse_trigger(text)


def test_progress_line_shows_rows_offsets_and_lag() -> None:
    progress = {"batchId": 3, "numInputRows": 250, "processedRowsPerSecond": 812.4, "sources": [{
        "startOffset": {"t": {"0": 0, "1": 0}}, "endOffset": {"t": {"0": 100, "1": 150}},
        "latestOffset": '{"t": {"0": 400, "1": 150}}'}]}
    assert progress_line(progress) == "batch 3: rows=250 offsets=t:0=100,1=150 lag=300 rows/s=812"
    assert progress_line({"batchId": 0, "numInputRows": 0, "sources": [{"endOffset": None}]}) == \
        "batch 0: rows=0 offsets=- lag=0 rows/s=0"


def test_arguments_to_config(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    config = config_from_args(parser.parse_args([
        "--topic", "orders", "--to", str(tmp_path / "out"), "--trigger", "processing-time=10s",
        "--max-offsets-per-trigger", "1000", "--option", "includeHeaders=true", "--bootstrap-servers", "h:1",
        "--commit-offsets-to-group", "lake"]))
    assert config.checkpoint == str(tmp_path / "out" / "_checkpoint")  # "_": Spark's readers skip it
    assert config.trigger == IngestTrigger("processing-time", 10_000)
    assert source_options(config) == {"kafka.bootstrap.servers": "h:1", "subscribe": "orders",
                                      "startingOffsets": "earliest", "includeHeaders": "true",
                                      "maxOffsetsPerTrigger": "1000", "commitOffsetsToGroup": "lake"}
    with pytest.raises(ValueError, match="--option must be KEY=VALUE"):
        config_from_args(parser.parse_args(["--topic", "t", "--to", "x", "--option", "nokey"]))
