"""Topic creations under faults, recorded in the history (`admin-*` events).

A thread asks the controllers (the first that answers; a follower forwards to the active
one) to create topics `<prefix>-0`, `<prefix>-1`, ... one at a time. Outcomes: `admin-ok`
(201), `admin-fail` (a 4xx: definitely refused), `admin-info` (a 5xx such as 504
REQUEST_TIMED_OUT, or no answer: the creation may or may not have committed). After the
last heal, `final_topics` records what exists (`admin-final`): chaos.checkers.topics then
checks that every acknowledged creation exists whole and nothing exists half-made.
"""

from __future__ import annotations

import http.client
import json
import threading
from typing import Final

from chaos.engine.targets import ClusterView, admin_headers, harness_source
from chaos.history import History

CREATE_TIMEOUT_S: Final = 10.0
JOIN_S: Final = 15.0


class TopicCreations:
    def __init__(self, view: ClusterView, history: History, *, prefix: str, partitions: int,
                 replication_factor: int, interval_s: float) -> None:
        self.view, self.history, self.prefix = view, history, prefix
        self.partitions, self.replication_factor, self.interval_s = partitions, replication_factor, interval_s
        self.created = 0
        self.names: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-topic-creations", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _post(self, name: str) -> tuple[str, str]:
        """(outcome kind, detail) of one creation, trying each running controller until one answers."""
        body = json.dumps({"name": name, "partitions": self.partitions,
                           "replication_factor": self.replication_factor}).encode()
        last = "no controller running"
        for node in sorted(self.view.cluster.controllers, key=lambda n: n.spec.node_id):
            if not node.running():
                continue
            connection = http.client.HTTPConnection(node.spec.host, node.spec.admin_port, timeout=CREATE_TIMEOUT_S,
                                                    source_address=harness_source(node.spec.host))
            try:
                connection.request("POST", "/v1/topics", body, {"Content-Type": "application/json",
                                                                **admin_headers(self.view.cluster)})
                answer = connection.getresponse()
                text = answer.read(4096).decode(errors="replace")
            except (OSError, http.client.HTTPException) as exc:
                last = f"controller {node.spec.node_id}: {exc}"
                if isinstance(exc, ConnectionRefusedError):
                    continue  # nothing was sent: try the next controller
                return "admin-info", last  # sent, then no answer: it may have committed
            finally:
                connection.close()
            if answer.status < 300:
                return "admin-ok", str(answer.status)
            if answer.status < 500:
                return "admin-fail", f"{answer.status} {text[:200]}"
            return "admin-info", f"{answer.status} {text[:200]}"
        return "admin-fail", last  # nothing was sent anywhere

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):  # until stop(); one creation per pass
            name = f"{self.prefix}-{len(self.names)}"
            self.names.append(name)
            self.history.record("admin-invoke", topic=name)
            kind, detail = self._post(name)
            if kind == "admin-ok":
                self.created += 1
            self.history.record(kind, topic=name, detail=detail)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(JOIN_S)


def final_topics(view: ClusterView, history: History, names: list[str], replication_factor: int) -> None:
    """What exists of each attempted topic after the heal: partitions, and how many are whole
    (a leader and replication_factor replicas)."""
    existing = {t["name"] if isinstance(t, dict) else t for t in view.get("/v1/topics")}
    for name in names:
        if name not in existing:
            history.record("admin-final", topic=name, exists=False)
            continue
        partitions = view.partitions(name)
        whole = sum(1 for p in partitions if p["leader"] >= 0 and len(p["replicas"]) == replication_factor)
        history.record("admin-final", topic=name, exists=True, partitions=len(partitions), whole=whole)
