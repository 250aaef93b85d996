"""`tidelog spark ingest` with no --bootstrap-server finds the brokers in --data-dir's
cluster.json, as every other tidelog command does: one real available-now run against the
Spark suite's cluster (conftest.py), in this process, with its own SparkSession."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.spark.spark_fixtures import create_topic, make_records, produce
from tidelog import cli
from localcluster.launcher import LocalCluster

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

PARTITIONS = 2
RECORDS = 300


def test_ingest_finds_the_cluster_in_the_data_dir(cluster: LocalCluster, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow.parquet as pq

    topic = "from-data-dir"
    create_topic(cluster, topic, PARTITIONS, 1)
    produced = produce(cluster.bootstrap_servers or "", topic, make_records(RECORDS, PARTITIONS))
    status = cli.main(["spark", "ingest", "--topic", topic, "--to", str(tmp_path / "data"),
                       "--data-dir", str(cluster.root)])
    out = capsys.readouterr().out
    assert status == 0, out
    assert f"ingesting {topic} from {cluster.bootstrap_servers} into " in out, out
    assert "spark: master local[2], application local-" in out and "UI off" in out, out
    # Spark's committed output: pyarrow skips _spark_metadata and the checkpoint ("_" prefix)
    assert pq.read_table(tmp_path / "data").num_rows == len(produced) == RECORDS
