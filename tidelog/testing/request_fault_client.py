"""The harness side of request-level faults (issue 33): install, read and remove faults on brokers
through their control routes (broker/request_fault_hook.py, on each broker's metrics port).

    client = RequestFaultClient(local)                 # reads the data dir's RPC secret
    handle = client.install({"kind": "error", "api": "Produce", "error": "NOT_LEADER_OR_FOLLOWER",
                             "times": 1}, brokers=[4, 5, 6])
    handle.fired                                       # firings summed over its brokers
    handle.remove()                                    # also on leaving `with handle:`

The spec is checked here first with the broker's own rules (broker.request_faults.parse_fault),
so bad input is a ValueError naming the argument before any broker is asked; a broker that refuses
anyway (400) makes the install fail with nothing left installed on the others.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self

from broker.request_fault_hook import ROUTE, control_token
from broker.request_faults import parse_fault
from localcluster import cluster_layout as layout
from security.rpc_secret import load_secret

if TYPE_CHECKING:
    from localcluster.launcher import LocalCluster
    from localcluster.node_process import NodeProcess

HTTP_TIMEOUT: Final = 5.0  # seconds per control request (a loopback call answered at once)


class RequestFaultError(RuntimeError):
    """A broker did not take or answer a control request."""


class RequestFault:
    """An installed request fault, on one or more brokers. `fired` sums their counts; `remove()`
    (or leaving a `with` block) removes it everywhere, once, and keeps the final count."""

    def __init__(self, client: RequestFaultClient, spec: Mapping[str, Any], placed: dict[int, int]) -> None:
        self.spec = dict(spec)
        self._client, self._placed = client, placed  # broker id -> the fault's id on that broker
        self._final: int | None = None

    def __repr__(self) -> str:
        state = f"removed, fired {self._final}" if self._final is not None else f"on brokers {sorted(self._placed)}"
        return f"RequestFault({self.spec['kind']} {self.spec['api']}, {state})"

    @property
    def brokers(self) -> list[int]:
        return sorted(self._placed)

    @property
    def removed(self) -> bool:
        return self._final is not None

    @property
    def fired(self) -> int:
        """How many requests this fault changed, summed over its brokers (a broker restarted since
        has lost its faults and counts 0 from then on)."""
        if self._final is not None:
            return self._final
        return sum(self.fired_on().values())

    def fired_on(self) -> dict[int, int]:
        """Firings per broker."""
        counts: dict[int, int] = {}
        for broker_id, fault_id in sorted(self._placed.items()):
            counts[broker_id] = self._client.fired(broker_id, fault_id)
        return counts

    def remove(self) -> None:
        if self._final is not None:
            return
        total = 0
        for broker_id, fault_id in sorted(self._placed.items()):
            total += self._client.remove(broker_id, fault_id)
        self._final = total
        self._client.forget(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.remove()


class RequestFaultClient:
    """Talks to the brokers of one local cluster."""

    def __init__(self, local: LocalCluster) -> None:
        self.local = local
        self._token = control_token(load_secret(local.root / layout.RPC_SECRET_FILE))
        self.active: list[RequestFault] = []

    def install(self, spec: Mapping[str, Any], brokers: Iterable[int]) -> RequestFault:
        parse_fault(spec)  # ValueError naming the argument, before any broker is asked
        placed: dict[int, int] = {}
        try:
            for broker_id in brokers:
                answer = self._call(broker_id, "POST", ROUTE, spec)
                placed[broker_id] = int(answer["id"])
        except BaseException:
            for broker_id, fault_id in placed.items():  # nothing stays installed
                self.remove(broker_id, fault_id)
            raise
        handle = RequestFault(self, spec, placed)
        self.active.append(handle)
        return handle

    def fired(self, broker_id: int, fault_id: int) -> int:
        node = self._node(broker_id)
        if not node.running():
            return 0
        for fault in self._call(broker_id, "GET", ROUTE)["faults"]:
            if fault["id"] == fault_id:
                return int(fault["fired"])
        return 0  # gone: the broker restarted, or a recover() cleared it

    def remove(self, broker_id: int, fault_id: int) -> int:
        """Remove one fault from one broker; its final count (0 when the broker lost it)."""
        if not self._node(broker_id).running():
            return 0
        try:
            return int(self._call(broker_id, "DELETE", f"{ROUTE}/{fault_id}")["fired"])
        except RequestFaultError as exc:
            if "404" in str(exc):
                return 0
            raise

    def forget(self, handle: RequestFault) -> None:
        if handle in self.active:
            self.active.remove(handle)

    def clear(self) -> None:
        """Remove every fault from every running broker (recover()): the test's faults end with it."""
        for handle in list(self.active):
            handle.remove()
        for node in self.local.brokers:
            if node.running():
                self._call(node.spec.node_id, "DELETE", ROUTE)

    def _node(self, broker_id: int) -> NodeProcess:
        for node in self.local.brokers:
            if node.spec.node_id == broker_id:
                return node
        raise ValueError(f"broker: no broker {broker_id} in this cluster (brokers: "
                         f"{[n.spec.node_id for n in self.local.brokers]})")

    def _call(self, broker_id: int, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        spec = self._node(broker_id).spec
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://{spec.host}:{spec.metrics_port}{path}", data=data, method=method,
                                         headers={"Authorization": f"Bearer {self._token}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as answer:  # noqa: S310 - our broker
                return json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            if exc.code == 400:  # the broker's own check, naming the field
                raise ValueError(json.loads(detail).get("error", detail)) from None
            raise RequestFaultError(f"broker {broker_id}: {method} {path} answered {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise RequestFaultError(f"broker {broker_id}: {method} {path} failed: {exc}") from None
