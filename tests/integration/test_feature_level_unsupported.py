"""A FeatureLevel above what this build supports, as Kafka handles it (metadata/feature_support.py).

- A controller replaying one stops: a real voter in this process is handed transaction.version 3
  through the controller's records path (no UpdateFeatures check on the way) and fails with a line
  naming the feature, the level and the range it supports (Kafka: FeatureControlManager.replay
  throws, the fatal fault handler ends the process).
- A broker: a real cluster whose controller is a newer build (one that supports transaction.version
  0-3: the table of supported ranges replaced before it starts) and whose broker is this build.
  `tidelog features upgrade` finalizes transaction.version 3: the running broker says so in one
  error line and keeps serving (Kafka: a broker's metadata loader fault is not fatal); restarted,
  it does not run: it exits 1 with one line naming the feature, the level and the range
  (Kafka: the controller refuses its registration and it shuts down).
"""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

from common.config_schema import Password
from common.protocol.api_versions import TRANSACTION_VERSION_FEATURE
from common.waiting import wait_until_async
from localcluster.cluster_layout import NodeSpec
from localcluster.launcher import LocalCluster, free_ports
from localcluster.node_process import NodeProcess, node_environment
from metadata.records import FeatureLevel
from quorum.active_controller import ActiveController
from quorum.feature_bootstrap import FeatureBootstrapLog
from quorum.metadata_log import MetadataLog
from quorum.quorum_settings import QuorumSettings
from quorum.voters import Voter
from tests.integration.cluster_fixtures import HOSTS, READY_S, spawn_node, wait_until

TV = TRANSACTION_VERSION_FEATURE
WAIT_S = 10.0
EXIT_WAIT_S = 60.0


async def test_a_controller_stops_on_a_level_it_does_not_implement(tmp_path: Path) -> None:
    (port,) = free_ports(("127.0.0.1",), 1)
    log = MetadataLog(QuorumSettings(1, {1: Voter(1, "127.0.0.1", port)}, tmp_path, Password("s3cret")))
    controller = ActiveController(FeatureBootstrapLog(log))
    task = asyncio.create_task(controller.run())
    try:
        await wait_until_async("an active controller", lambda: controller.is_active, WAIT_S, poll_s=0.02)
        assert log.fatal_error() is None
        assert (await controller.append([FeatureLevel(TV, 3)], 2.0)).committed  # a newer controller's record
        await wait_until_async("the voter failed", lambda: log.fatal_error() is not None, WAIT_S, poll_s=0.02)
        fatal = log.fatal_error()
        assert fatal is not None and "finalized transaction.version 3 (this build supports 0-2)" in fatal, fatal
        assert "this controller cannot replay a feature level it does not implement" in fatal, fatal
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        log.close()


# A controller of a newer build: this one with transaction.version 0-3 in the one table of ranges.
NEWER_BUILD = (
    "import runpy, sys\n"
    "from types import MappingProxyType\n"
    "from common.protocol import api_versions as a\n"
    f"a.SUPPORTED_BY_NAME = MappingProxyType({{**a.SUPPORTED_BY_NAME, {TV!r}: a.SupportedFeature({TV!r}, 0, 3)}})\n"
    "sys.argv = ['tidelog', *sys.argv[1:]]\n"
    "runpy.run_module('tidelog', run_name='__main__', alter_sys=True)\n"
)


def spawn_newer_controller(spec: NodeSpec) -> NodeProcess:
    """Controllers of the newer build, brokers of this one."""
    if spec.role != "controller":
        return spawn_node(spec)
    with open(spec.log_path, "ab") as out:
        out.write(b"--- a controller of a newer build (transaction.version 0-3)\n")
        out.flush()
        popen = subprocess.Popen([sys.executable, "-c", NEWER_BUILD, "controller", "--config", str(spec.properties_path)],
                                 stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd=spec.directory,
                                 env=node_environment(), start_new_session=True)
    return NodeProcess(spec, popen.pid, popen)


def features_cli(cluster: LocalCluster, *args: str) -> tuple[int, str]:
    from tidelog.cli import main
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["features", *args, "--admin-url", cluster.admin_url])
    return code, out.getvalue()


RUNNING_LINE = ("Broker {}: the metadata log finalized transaction.version 3 (this build supports 0-2) (applied up to "
                "offset ")
START_LINE = "Broker {} cannot run: the metadata log (applied up to offset "


def test_a_broker_logs_a_level_it_does_not_implement_and_does_not_start_on_it(tmp_path: Path) -> None:
    raft_port, admin_port, kafka_port, metrics_port = free_ports(HOSTS, 4)
    with LocalCluster.start(tmp_path / "cluster", controllers=1, brokers=1, raft_port=raft_port,
                            admin_port=admin_port, kafka_port=kafka_port, metrics_port=metrics_port,
                            ready_timeout=READY_S, spawn=spawn_newer_controller,
                            extra_properties={"broker.heartbeat.interval.ms": "200",
                                              "broker.session.timeout.ms": "3000"}) as cluster:
        broker = cluster.brokers[0]
        running_line, start_line = RUNNING_LINE.format(broker.spec.node_id), START_LINE.format(broker.spec.node_id)
        code, out = features_cli(cluster, "upgrade", "--feature", f"{TV}=3")
        assert (code, out) == (0, f"{TV} was upgraded to 3.\n"), out
        log_path = broker.spec.log_path
        wait_until("the running broker's error line", lambda: running_line in log_path.read_text(errors="replace"))
        time.sleep(0.5)
        assert broker.running()  # it only logs, as a Kafka broker does
        assert broker.stop().exit_status == 0
        restarted = NodeProcess.spawn(broker.spec)  # the same config and data dir, a new process
        cluster.nodes[cluster.nodes.index(broker)] = restarted
        assert restarted.popen is not None
        status = restarted.popen.wait(EXIT_WAIT_S)
        text = log_path.read_text(errors="replace")
        run = text[text.rindex("tidelog launcher: starting"):]  # the restart's lines
        assert status == 1, run[-3000:]
        lines = [line for line in run.splitlines() if start_line in line]
        assert len(lines) == 1, run[-3000:]
        assert "finalizes transaction.version 3 (this build supports 0-2). A controller of a newer build" in lines[0]
        assert "(at " not in lines[0]  # the operator's matter, not a bug: no code location
        assert "cannot run: UnsupportedFeatureLevelError" in lines[0] and "unexpected" not in lines[0]
