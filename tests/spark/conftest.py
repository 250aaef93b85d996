"""One real cluster (controller 1 + brokers 2-4) for every Spark test module of the run.

Starting a cluster costs seconds on a loaded 2-core machine; each module still gets its own
SparkSession. Modules use their own topics; the one that stops a broker starts it again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration import cluster_fixtures
from tests.spark.spark_fixtures import spark_cluster
from localcluster.launcher import LocalCluster

HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    cluster_fixtures.configure(config)  # its nodes fork from the test zygote unless ini tidelog_fast_start = false


def pytest_collection_finish(session: pytest.Session) -> None:
    cluster_fixtures.start_zygote_early(session, HERE)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with spark_cluster(tmp_path_factory.mktemp("spark") / "cluster") as started:
        yield started  # every node stopped on exit, even on failure
