"""A large CreateTopics is atomic across a controller failover (KIP-868 metadata transactions).

3 controllers + broker 4. A topic of PARTITIONS partitions needs dozens of metadata-log chunks,
framed by BeginTransaction ... EndTransaction. The active controller is SIGKILLed once some of
them committed (its Raft index moved) and before the create answered. Meanwhile watchers ask
the surviving controllers (admin API) and the broker (a confluent-kafka Metadata request) for
the topic every few milliseconds: every answer must be "no such topic" or all PARTITIONS
partitions, never a part. The new active controller must log that it aborted the open
transaction (when the kill landed inside it), and the create must then either have fully
happened or succeed when retried, with every partition led by the broker.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tests.integration.cluster_fixtures import http, running_cluster, wait_until
from localcluster.launcher import LocalCluster
from localcluster.node_process import NodeProcess

TOPIC = "atomic"
PARTITIONS = 3000
KILL_AFTER_ENTRIES = 4  # Raft entries applied after the create started: inside the transaction
WATCH_POLL_S = 0.01


def _json(url: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    status, raw = http(url, method, body)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def _active(cluster: LocalCluster, exclude: int | None = None) -> NodeProcess:
    def find() -> NodeProcess | None:
        for node in cluster.controllers:
            if node.spec.node_id == exclude or not node.running():
                continue
            try:
                status, view = _json(node.spec.admin_url + "/v1/cluster")
            except OSError:
                continue
            if status == 200 and view.get("is_active"):
                return node
        return None
    return wait_until("an active controller", find, 30.0)  # type: ignore[no-any-return]


class Watcher:
    """Partition counts of TOPIC seen by the surviving controllers and the broker (0: absent)."""

    def __init__(self, urls: list[str], bootstrap: str) -> None:
        self.urls, self.bootstrap = urls, bootstrap
        self.seen: set[tuple[str, int]] = set()
        self.answers = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="transaction-watcher", daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        while not self._stop.is_set():  # bounded by __exit__
            for url in self.urls:
                try:
                    status, view = _json(f"{url}/v1/topics/{TOPIC}")
                except OSError:
                    continue
                self.seen.add(("controller", len(view["partitions"]) if status == 200 else 0))
                self.answers += 1
            try:  # all topics: naming one could auto-create it
                topic = admin.list_topics(timeout=2).topics.get(TOPIC)
                self.seen.add(("broker", 0 if topic is None or topic.error else len(topic.partitions)))
                self.answers += 1
            except KafkaException:  # while the broker looks for a new controller
                pass
            time.sleep(WATCH_POLL_S)


def test_a_large_create_is_all_or_nothing_across_a_controller_kill(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        active = _active(cluster)
        others = [n.spec.admin_url for n in cluster.controllers if n is not active]
        _, before = _json(active.spec.admin_url + "/v1/cluster")
        result: dict[str, Any] = {}

        def create() -> None:
            try:
                result["answer"] = _json(active.spec.admin_url + "/v1/topics", "POST",
                                         {"name": TOPIC, "partitions": PARTITIONS, "replication_factor": 1})
            except OSError as exc:  # the controller died under the request
                result["answer"] = (None, repr(exc))

        assert cluster.bootstrap_servers is not None
        with Watcher(others, cluster.bootstrap_servers) as watcher:
            creator = threading.Thread(target=create, name="create", daemon=True)
            creator.start()
            wait_until("the create's first chunks applied on the active controller", lambda: _json(
                active.spec.admin_url + "/v1/cluster")[1]["last_applied"] >= before["last_applied"]
                + KILL_AFTER_ENTRIES, 30.0, poll_s=0.002)
            killed_before_answer = "answer" not in result
            active.send(signal.SIGKILL)
            creator.join(30)
            survivor = _active(cluster, exclude=active.spec.node_id)
            wait_until("the broker to follow the new controller", lambda: ("broker", 0) in watcher.seen
                       or ("broker", PARTITIONS) in watcher.seen, 30.0)
            time.sleep(1.0)  # the watchers keep looking after the failover
        assert killed_before_answer, f"the create answered before the kill: {result}"
        assert watcher.seen <= {(who, n) for who in ("controller", "broker") for n in (0, PARTITIONS)}, \
            f"a partly created topic was visible: {sorted(watcher.seen)}"
        assert watcher.answers > 10
        status, view = _json(f"{survivor.spec.admin_url}/v1/topics/{TOPIC}")
        if status == 404:  # aborted: the create can be retried, and then it happens whole
            logs = [n.spec.log_path.read_text(errors="replace") for n in cluster.controllers if n is not active]
            assert any("aborting the open metadata transaction" in log for log in logs), logs[0][-3000:]
            status, answer = _json(survivor.spec.admin_url + "/v1/topics", "POST",
                                   {"name": TOPIC, "partitions": PARTITIONS, "replication_factor": 1})
            assert status in (200, 201), answer
            status, view = _json(f"{survivor.spec.admin_url}/v1/topics/{TOPIC}")
        assert status == 200 and len(view["partitions"]) == PARTITIONS
        wait_until("every partition led by broker 4", lambda: all(
            p["leader"] == 4 for p in _json(f"{survivor.spec.admin_url}/v1/topics/{TOPIC}")[1]["partitions"]),
            60.0)
        # the dead controller comes back and replays the same log (the aborted records included)
        restarted = NodeProcess.spawn(active.spec)
        cluster.nodes[cluster.nodes.index(active)] = restarted
        cluster.write_cluster_file()
        wait_until("the restarted controller to hold the whole topic", lambda: len(_json(
            f"{restarted.spec.admin_url}/v1/topics/{TOPIC}")[1].get("partitions", ())) == PARTITIONS, 60.0)
