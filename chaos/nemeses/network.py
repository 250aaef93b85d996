"""Network faults for `tidelog.testing`: cut one node off from every other node of its
cluster, and heal, over the harness's own iptables chain (`firewall.Firewall`).

The chain is created on the first fault and removed by `close` (the test cluster's stop),
so nothing outlives the cluster; only the links between this cluster's nodes are cut, never
a client's connection nor another cluster's.
"""

from __future__ import annotations

from chaos.nemeses.firewall import Firewall, iptables_missing
from chaos.nemeses.links import complement, cut
from localcluster.launcher import LocalCluster


class NetworkNemesis:
    """isolate(node) / heal() on one LocalCluster."""

    def __init__(self, cluster: LocalCluster) -> None:
        self._cluster = cluster
        self._firewall: Firewall | None = None
        self._faults: list[int] = []

    @staticmethod
    def unavailable_reason() -> str | None:
        """Why network faults cannot run here (no root, no iptables), or None."""
        return iptables_missing()

    def isolate(self, node_id: int) -> None:
        """Drop every packet between `node_id` and the other nodes, both ways."""
        if self._firewall is None:
            self._firewall = Firewall.open()
        specs = [node.spec for node in self._cluster.nodes]
        node = self._cluster.node(node_id).spec
        self._faults.append(self._firewall.drop(cut([node], complement(specs, [node]))))

    def heal(self) -> None:
        """Remove every rule this nemesis added."""
        if self._firewall is not None:
            for handle in self._faults:
                self._firewall.remove(handle)
        self._faults.clear()

    def close(self) -> None:
        """Heal and remove the chain."""
        self.heal()
        if self._firewall is not None:
            self._firewall.close()
            self._firewall = None
