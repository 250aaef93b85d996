"""The controller benches' cluster (bench/quorum_fsync.py, bench/console_topics.py): three
controllers and no broker process, the brokers played by tidelog.testing.fencing_scale's
BrokerDoubles (registered, heartbeating, each signing its RPCs with the cluster's secret as its
own broker id), so that only the controllers' work is measured.

    with doubled_quorum(root, {"controller.quorum.fsync": "true"}) as cluster:
        admin = AdminClient(admin_urls(cluster), timeout=WRITE_TIMEOUT_S)

The benches run as scripts (`python bench/x.py`): bench/ is on sys.path, so `import
doubled_quorum` works from any of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, TypeVar

from common import waiting
from localcluster.cluster_layout import RPC_SECRET_FILE
from localcluster.launcher import LocalCluster, free_ports
from tidelog.admin_client import AdminClient
from tidelog.cli_common import ClusterError
from tidelog.testing.fencing_scale import BROKERS, HEARTBEAT_INTERVAL_MS, BrokerDoubles

HOSTS: Final = ("127.0.0.1", "127.0.0.2", "127.0.0.3")  # one controller on each
READY_S: Final = 90.0  # the controllers' start on a loaded 2-core box
WAIT_S: Final = 120.0  # one wait_for's bound
WRITE_TIMEOUT_S: Final = 60.0  # one admin request (a 10,000-partition topic on a loaded box)
POLL_S: Final = 0.02  # fine enough for quorum_fsync's failover times
T = TypeVar("T")


def percentile(values: list[float], q: float) -> float:
    """The `q` quantile of `values`, nearest rank (no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def wait_for(what: str, condition: Callable[[], T | None], timeout_s: float = WAIT_S) -> T:
    """condition()'s first truthy value; a controller's error answer or a refused connection
    (one restarting, an election) counts as "not yet"."""
    return waiting.wait_until(what, condition, timeout_s, poll_s=POLL_S,
                              not_yet=(*waiting.NOT_YET_ERRORS, ClusterError))


def admin_urls(cluster: LocalCluster, skip: int | None = None) -> list[str]:
    """The controllers' admin API URLs, but controller `skip`'s."""
    return [f"http://{n.spec.admin_address}" for n in cluster.controllers if n.spec.node_id != skip]


@contextmanager
def doubled_quorum(root: Path, extra_properties: Mapping[str, Any] | None = None) -> Iterator[LocalCluster]:
    """The controllers in `root`, and the broker doubles BROKERS; yields once every double is
    UNFENCED. The doubles stop when the block ends, then the controllers."""
    raft_port, admin_port = free_ports(HOSTS)
    props = {"broker.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS), **(extra_properties or {})}
    with LocalCluster.start(root, controllers=len(HOSTS), raft_port=raft_port, admin_port=admin_port,
                            extra_properties=props, ready_timeout=READY_S) as cluster:
        doubles = BrokerDoubles([n.spec.admin_address for n in cluster.controllers], BROKERS, HEARTBEAT_INTERVAL_MS,
                                secret_file=root / RPC_SECRET_FILE)  # unsigned, the controllers refuse them
        try:
            doubles.start()
            admin = AdminClient(admin_urls(cluster), timeout=WRITE_TIMEOUT_S)
            wait_for(f"brokers {', '.join(map(str, BROKERS))} unfenced", lambda: {
                b["broker_id"] for b in admin.brokers() if b["state"] == "UNFENCED"} == set(BROKERS))
            yield cluster
        finally:
            doubles.stop()
