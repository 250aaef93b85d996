"""A real, fault-injectable tidelog cluster inside your own tests.

    from tidelog.testing import Cluster

    with Cluster(brokers=3) as cluster:
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, ...})
        cluster.kill_leader("orders", 0)

Under pytest the plugin (`tidelog.testing.plugin`, registered through the `pytest11` entry
point) gives the fixtures `tidelog_cluster`, `tidelog_bootstrap` and `tidelog_topic`; see the
README's "Testing your application".
"""

from tidelog.testing.cluster import (
    TEST_BROKER_CONFIG,
    Cluster,
    ClusterSpec,
    ClusterStartError,
    NodeCrashed,
)
from tidelog.testing.faults import Fault, FaultUnavailable
from tidelog.testing.observe import ClusterTimeout

__all__ = ["TEST_BROKER_CONFIG", "Cluster", "ClusterSpec", "ClusterStartError", "ClusterTimeout", "Fault",
           "FaultUnavailable", "NodeCrashed"]
