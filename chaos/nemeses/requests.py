"""The request-fault nemesis (issue 33): Kafka-request-level faults installed inside brokers through
their control route (broker/request_fault_hook.py, on each broker's metrics port), authenticated
with the token derived from the cluster's RPC secret file in its data dir.

    nemesis = RequestFaultNemesis(cluster)                       # a LocalCluster
    spec = fault_spec({"kind": "error", "api": "Produce", "error": "NOT_LEADER_OR_FOLLOWER", "times": 1})
    placed = nemesis.install(spec, [4, 5])                       # broker id -> the fault's id there
    nemesis.fired(placed)                                        # {4: 1, 5: 0}
    nemesis.remove(placed)                                       # the final counts; gone everywhere

The scenario action `request-fault` (chaos.engine.faults) uses it with the fault's `params` as the
spec; tidelog.testing's `inject`/`delay`/`drop_connection`/`throttle` use it too. A spec is checked
with the broker's own rules first (a ValueError naming the field), and an install that fails on
one broker is removed from the others: nothing is left half installed.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from broker.request_fault_hook import ROUTE, control_token
from broker.request_faults import parse_fault
from localcluster import cluster_layout as layout
from security.rpc_auth import broker_key
from security.rpc_secret import load_secret

if TYPE_CHECKING:
    from localcluster.launcher import LocalCluster
    from localcluster.node_process import NodeProcess

HTTP_TIMEOUT: Final = 5.0  # seconds per control request (a loopback call the broker answers at once)


class RequestFaultError(RuntimeError):
    """A broker did not take or answer a control request; `status` is its HTTP status (0: no answer)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def fault_spec(params: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON spec of a fault, checked (ValueError naming the field); None-valued fields left out."""
    spec = {k: v for k, v in params.items() if v is not None}
    parse_fault(spec)
    return spec


class RequestFaultNemesis:
    """Installs, reads and removes request faults on the brokers of one local cluster."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self._master = load_secret(cluster.root / layout.RPC_SECRET_FILE)  # each broker's token is of its own key

    def broker(self, broker_id: int) -> NodeProcess:
        for node in self.cluster.brokers:
            if node.spec.node_id == broker_id:
                return node
        raise ValueError(f"broker: no broker {broker_id} in this cluster (brokers: "
                         f"{[n.spec.node_id for n in self.cluster.brokers]})")

    def install(self, spec: Mapping[str, Any], broker_ids: Iterable[int]) -> dict[int, int]:
        checked = fault_spec(spec)
        targets = [self.broker(b).spec.node_id for b in broker_ids]  # ValueError before any install
        placed: dict[int, int] = {}
        try:
            for broker_id in targets:
                placed[broker_id] = int(self._call(broker_id, "POST", ROUTE, checked)["id"])
        except BaseException:
            self.remove(placed)
            raise
        return placed

    def fired(self, placed: Mapping[int, int]) -> dict[int, int]:
        """Firings per broker (0 where the broker is down or lost the fault in a restart)."""
        counts: dict[int, int] = {}
        for broker_id, fault_id in sorted(placed.items()):
            counts[broker_id] = 0
            if self.broker(broker_id).running():
                for fault in self._call(broker_id, "GET", ROUTE)["faults"]:
                    if fault["id"] == fault_id:
                        counts[broker_id] = int(fault["fired"])
        return counts

    def remove(self, placed: Mapping[int, int]) -> dict[int, int]:
        """Remove a fault from its brokers; the final count per broker."""
        counts: dict[int, int] = {}
        for broker_id, fault_id in sorted(placed.items()):
            counts[broker_id] = 0
            if not self.broker(broker_id).running():
                continue
            try:
                counts[broker_id] = int(self._call(broker_id, "DELETE", f"{ROUTE}/{fault_id}")["fired"])
            except RequestFaultError as exc:
                if exc.status != 404:  # 404: already gone (a restart, a clear)
                    raise
        return counts

    def clear(self) -> None:
        """Remove every request fault from every running broker."""
        for node in self.cluster.brokers:
            if node.running():
                self._call(node.spec.node_id, "DELETE", ROUTE)

    def _call(self, broker_id: int, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        spec = self.broker(broker_id).spec
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://{spec.host}:{spec.metrics_port}{path}", data=data, method=method,
                                         headers={"Authorization": "Bearer " + control_token(
                                                      broker_key(self._master, broker_id)),
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as answer:  # noqa: S310 - our broker
                return json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            if exc.code == 400:  # the broker's own check, naming the field
                raise ValueError(json.loads(detail).get("error", detail)) from None
            raise RequestFaultError(f"broker {broker_id}: {method} {path} answered {exc.code}: {detail}",
                                    exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            raise RequestFaultError(f"broker {broker_id}: {method} {path} failed: {exc}") from None
