"""The handles of request-level faults (issue 33) on a test cluster, over the chaos engine's
request-fault nemesis (chaos.nemeses.requests: the brokers' control routes).

    client = RequestFaultClient(local)
    handle = client.install({"kind": "error", "api": "Produce", "error": "NOT_LEADER_OR_FOLLOWER",
                             "times": 1}, brokers=[4, 5, 6])
    handle.fired                                       # firings summed over its brokers
    handle.remove()                                    # also on leaving `with handle:`
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from chaos.nemeses.requests import RequestFaultNemesis

if TYPE_CHECKING:
    from localcluster.launcher import LocalCluster


class RequestFault:
    """An installed request fault, on one or more brokers. `fired` sums their counts; `remove()`
    (or leaving a `with` block) removes it everywhere, once, and keeps the final count."""

    def __init__(self, client: RequestFaultClient, spec: Mapping[str, Any], placed: dict[int, int]) -> None:
        self.spec = dict(spec)
        self._client, self._placed = client, placed  # broker id -> the fault's id on that broker
        self._final: int | None = None

    def __repr__(self) -> str:
        state = f"removed, fired {self._final}" if self._final is not None else f"on brokers {self.brokers}"
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
        return self._client.nemesis.fired(self._placed)

    def remove(self) -> None:
        if self._final is not None:
            return
        self._final = sum(self._client.nemesis.remove(self._placed).values())
        self._client.forget(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.remove()


class RequestFaultClient:
    """The request faults a test installed on one local cluster."""

    def __init__(self, local: LocalCluster) -> None:
        self.local = local
        self.nemesis = RequestFaultNemesis(local)
        self.active: list[RequestFault] = []

    def install(self, spec: Mapping[str, Any], brokers: Iterable[int]) -> RequestFault:
        """ValueError naming the argument (API, error, times, broker, ...) with nothing installed."""
        handle = RequestFault(self, spec, self.nemesis.install(spec, brokers))
        self.active.append(handle)
        return handle

    def forget(self, handle: RequestFault) -> None:
        if handle in self.active:
            self.active.remove(handle)

    def clear(self) -> None:
        """Remove every request fault from every running broker (recover()): the test's faults end with it."""
        for handle in list(self.active):
            handle.remove()
        self.nemesis.clear()
