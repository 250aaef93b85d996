"""README "Spark"'s spark-submit procedure, run end to end: the command block under "On a Spark
cluster" is taken from README.md itself (so the test fails when the README drifts from what
works), its placeholders filled in for this machine (the standalone master of
spark/standalone.py, this venv's Python, the suite's brokers), and run with bash, spark-submit
coming from the installed pyspark. The job runs available-now (ingest_job.py's default trigger)
over RECORDS records in PARTITIONS partitions; then the Parquet output Spark's file sink
committed holds every offset exactly once, and `tidelog groups describe` shows the group at
the log end offsets with lag 0. Long (JVM start-ups): `make test-spark`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster.launcher import LocalCluster
from spark.standalone import StandaloneCluster, standalone_cluster
from tests.spark.spark_fixtures import create_topic
from tests.spark.test_spark_standalone import committed_files, fast_produce

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")
pytestmark = [pytest.mark.long, pytest.mark.timeout(900)]  # JVMs on a loaded 2-core machine

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent  # spark-submit and the workers' Python both come from here
RECORDS = 20_000
PARTITIONS = 3
SUBMIT_TIMEOUT_S = 600.0  # driver + executor JVM start-ups and the whole available-now run, loaded machine
DESCRIBE_TIMEOUT_S = 60.0
README_PYTHON = "/opt/tidelog/venv/bin/python"  # the README's example interpreter
README_COMMAND = re.compile(r"```\n(spark-submit --master spark://HOST:7077 .*?)\n```", re.DOTALL)


def readme_command() -> str:
    """The README's spark-submit block, verbatim (continuation lines included)."""
    match = README_COMMAND.search((ROOT / "README.md").read_text())
    assert match, "README 'Spark' has no ```spark-submit --master spark://HOST:7077 ...``` block"
    return match.group(1)


def fill_in(command: str, *, master_url: str, topic: str, output: Path, bootstrap: str, group: str) -> str:
    """The README's placeholders replaced by this run's values; every one must be there."""
    replacements = {"spark://HOST:7077": master_url, README_PYTHON: sys.executable,
                    "--topic orders": f"--topic {shlex.quote(topic)}",
                    "--to /lake/orders": f"--to {shlex.quote(str(output))}",
                    "--bootstrap-server broker1:9092": f"--bootstrap-server {shlex.quote(bootstrap)}",
                    "--commit-offsets-to-group lake-orders": f"--commit-offsets-to-group {shlex.quote(group)}"}
    for placeholder, value in replacements.items():
        assert placeholder in command, f"the README command lost {placeholder!r}: {command}"
        command = command.replace(placeholder, value)
    return command


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with standalone_cluster(tmp_path_factory.mktemp("submit-standalone"), workers=1) as started:
        yield started  # master, worker and its executors killed on exit, even on failure


def group_rows(bootstrap: str, group: str) -> dict[int, tuple[int, int, int]]:
    """`tidelog groups describe`'s rows: partition -> (current offset, log end offset, lag)."""
    done = subprocess.run([sys.executable, "-m", "tidelog", "groups", "describe", "--group", group,
                           "--bootstrap-server", bootstrap], cwd=ROOT, capture_output=True, text=True,
                          timeout=DESCRIBE_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    rows: dict[int, tuple[int, int, int]] = {}
    for line in done.stdout.splitlines():
        cells = line.split()
        if len(cells) >= 6 and cells[0] == group and cells[2].isdigit():
            rows[int(cells[2])] = (int(cells[3]), int(cells[4]), int(cells[5]))
    return rows


def test_readme_spark_submit_ingests_every_offset_once_and_leaves_lag_zero(
        standalone: StandaloneCluster, cluster: LocalCluster, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    topic, group = "submit-orders", "lake-submit-orders"
    create_topic(cluster, topic, PARTITIONS, 1)
    bootstrap = cluster.bootstrap_servers or ""
    fast_produce(bootstrap, topic, RECORDS, PARTITIONS)
    output, log = tmp_path / "lake" / "orders", tmp_path / "spark-submit.log"
    command = fill_in(readme_command(), master_url=standalone.master_url, topic=topic, output=output,
                      bootstrap=bootstrap, group=group)
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    with log.open("wb") as sink:
        submit = subprocess.Popen(["bash", "-c", command], cwd=tmp_path, env=env, stdout=sink,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        code = submit.wait(SUBMIT_TIMEOUT_S)
    finally:
        with_group_killed(submit)
    text = log.read_text(errors="replace")
    assert code == 0, f"{command}\n{text[-4000:]}"
    assert f"spark: master {standalone.master_url}" in text, text[-4000:]  # it ran on the cluster, not local[2]

    rows = [(p, o) for f in committed_files(output)
            for p, o in zip(*(pq.read_table(f, columns=["partition", "offset"]).column(c).to_pylist()
                              for c in ("partition", "offset")))]
    ends = {p: len(range(p, RECORDS, PARTITIONS)) for p in range(PARTITIONS)}
    assert len(rows) == len(set(rows)) == RECORDS, (len(rows), len(set(rows)))
    assert set(rows) == {(p, o) for p, end in ends.items() for o in range(end)}
    assert group_rows(bootstrap, group) == {p: (end, end, 0) for p, end in ends.items()}


def with_group_killed(process: subprocess.Popen[bytes]) -> None:
    """spark-submit's process group (its driver JVM and Python) SIGKILLed if still there."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)
