"""A standalone Spark cluster on this machine, started from the installed pyspark: one master
and N workers, each its own JVM (`spark-class org.apache.spark.deploy.master.Master` /
`...worker.Worker`), so executors run in their own JVMs with their own Python workers, as on
a real cluster. For the long tests and the benchmark; `tidelog spark ingest --master
<master_url>` runs against it.

    with standalone_cluster(tmp / "spark", workers=2) as cluster:
        session = cluster_session(cluster.master_url, "my-app")

Everything binds to `host` (default 127.0.0.1) on ports found free; each daemon logs into
`<work>/logs/`, workers keep their application dirs in `<work>/worker-N`. Each daemon
is started in a session of its own, so stopping it kills its process group: a worker and
the executors and Python workers it launched, even when the caller failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final

from common.units import SECONDS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_HOST: Final = "127.0.0.1"
DAEMON_READY_TIMEOUT: Final = 90 * SECONDS  # JVM start-ups on a loaded 2-core machine
DAEMON_STOP_TIMEOUT: Final = 10 * SECONDS  # after SIGTERM, then SIGKILL
POLL: Final = 0.5 * SECONDS
MASTER_UI_TIMEOUT: Final = 5 * SECONDS
DAEMON_MEMORY: Final = "256m"  # the master's and each worker's own JVM heap
WORKER_MEMORY: Final = "1g"  # what a worker offers executors
EXECUTOR_MEMORY: Final = "512m"  # Spark refuses executors under ~450 MiB (300 MiB reserved x 1.5)


class StandaloneError(RuntimeError):
    """The cluster did not come up; the message names the daemon and the tail of its log."""


@dataclass(frozen=True, slots=True)
class StandaloneCluster:
    master_url: str  # spark://host:port: what --master takes
    master_ui: str  # http://host:port of the master's web UI (JSON at /json/)
    work_dir: Path
    workers: int
    cores_per_worker: int

    def status(self) -> dict[str, object]:
        """The master's JSON status: aliveworkers, cores, activeapps, completedapps..."""
        with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=MASTER_UI_TIMEOUT) as answer:
            status: dict[str, object] = json.loads(answer.read())
        return status


def spark_home() -> Path:
    """The installed pyspark package: its bin/spark-class starts the daemons."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def daemon_env(work: Path, host: str) -> dict[str, str]:
    """The daemons' environment: loopback addresses, this interpreter for Python workers,
    every directory under `work`."""
    return {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": host, "SPARK_PUBLIC_DNS": host,
            "PYSPARK_PYTHON": sys.executable, "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            "SPARK_LOCAL_DIRS": str(work / "local"), "SPARK_LOG_DIR": str(work / "logs"),
            "SPARK_NO_DAEMONIZE": "1"}


class _Daemon:
    def __init__(self, name: str, args: list[str], env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("wb")
        self.process = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], env=env,
                                        stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                        start_new_session=True)

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM to the daemon's process group (its executors too), SIGKILL after DAEMON_STOP_TIMEOUT."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
            try:
                self.process.wait(DAEMON_STOP_TIMEOUT)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):  # children the daemon left behind in its group
            os.killpg(self.process.pid, signal.SIGKILL)
        self._log.close()


@contextlib.contextmanager
def standalone_cluster(work: Path, *, workers: int = 2, cores_per_worker: int = 1, host: str = DEFAULT_HOST,
                       ready_timeout: float = DAEMON_READY_TIMEOUT) -> Iterator[StandaloneCluster]:
    """A master and `workers` workers of `cores_per_worker` cores each, ready (every worker
    registered); every daemon and what it launched stopped on exit, even on failure."""
    (work / "logs").mkdir(parents=True, exist_ok=True)
    env = daemon_env(work, host)
    port, ui_port = free_port(host), free_port(host)
    cluster = StandaloneCluster(f"spark://{host}:{port}", f"http://{host}:{ui_port}", work, workers, cores_per_worker)
    daemons: list[_Daemon] = []
    try:
        daemons.append(_Daemon("master", ["org.apache.spark.deploy.master.Master", "--host", host, "--port",
                                          str(port), "--webui-port", str(ui_port)], env, work / "logs" / "master.log"))
        for index in range(workers):
            worker_dir = work / f"worker-{index}"
            worker_dir.mkdir(exist_ok=True)
            daemons.append(_Daemon(f"worker-{index}", [
                "org.apache.spark.deploy.worker.Worker", "--host", host, "--port", str(free_port(host)),
                "--webui-port", str(free_port(host)), "--cores", str(cores_per_worker), "--memory", WORKER_MEMORY,
                "--work-dir", str(worker_dir), cluster.master_url], env, work / "logs" / f"worker-{index}.log"))
        _wait_ready(cluster, daemons, ready_timeout)
        yield cluster
    finally:
        for daemon in reversed(daemons):  # workers (and their executors) first, then the master
            daemon.stop()


def _wait_ready(cluster: StandaloneCluster, daemons: list[_Daemon], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    alive: object = None
    while time.monotonic() < deadline:  # bounded by the deadline
        for daemon in daemons:
            if daemon.process.poll() is not None:
                raise StandaloneError(f"spark {daemon.name} exited with {daemon.process.returncode}:\n"
                                      f"{daemon.tail()}")
        with contextlib.suppress(OSError, ValueError):
            alive = cluster.status().get("aliveworkers")
            if alive == cluster.workers:
                return
        time.sleep(POLL)
    raise StandaloneError(f"the standalone master at {cluster.master_url} has {alive} of {cluster.workers} workers "
                          f"after {timeout:g} s; master log:\n{daemons[0].tail()}")


def cluster_session(master_url: str, app_name: str, *, executor_memory: str = EXECUTOR_MEMORY,
                    host: str = DEFAULT_HOST) -> SparkSession:
    """A driver in this process for `master_url`, bound to `host`, its executors sized for the
    workers above, with the tidelog source registered (the executors import it from this
    interpreter's installed tidelog)."""
    os.environ["SPARK_LOCAL_IP"] = host
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark import register

    session = (SparkSession.builder.master(master_url).appName(app_name)
               .config("spark.driver.host", host).config("spark.driver.bindAddress", host)
               .config("spark.executor.memory", executor_memory).config("spark.executor.cores", "1")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session
