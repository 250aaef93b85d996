"""A real cluster for the replication tests: 1 controller + 3 brokers, a Nemesis, and helpers
to look at partitions through the admin API and at replicas' segment files on disk.

Brokers are 2, 3 and 4 on 127.0.0.2-4; the controller is 1 on 127.0.0.1. Small heartbeat,
session and replica-lag timeouts make faults show within seconds.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from chaos.nemesis import Nemesis
from tests.integration.cluster_fixtures import http, spawn_node, wait_until
from localcluster import replica_files
from localcluster.launcher import LocalCluster, free_ports
from tidelog.testing.observe import brokers_agree

__all__ = ["BROKERS", "broker_log", "create_topic", "partition_state", "replica_log_bytes",
           "replicated_cluster", "wait_for_state", "wait_full_isr",
           "wait_replicas_caught_up"]

HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4")
BROKERS = (2, 3, 4)
READY_S = 60.0
FAST = {"broker.heartbeat.interval.ms": "200", "broker.session.timeout.ms": "3000",
        "replica.lag.time.max.ms": "4000", "replica.fetch.backoff.ms": "200",
        "replica.socket.timeout.ms": "5000"}


@contextlib.contextmanager
def replicated_cluster(root: Path, extra: Mapping[str, str] | None = None
                       ) -> Iterator[tuple[LocalCluster, Nemesis]]:
    """Start the cluster; on exit resume paused nodes and stop every process, failure or not."""
    raft_port, admin_port, kafka_port, metrics_port = free_ports(HOSTS, 4)
    with LocalCluster.start(root, controllers=1, brokers=3, raft_port=raft_port, admin_port=admin_port,
                            kafka_port=kafka_port, metrics_port=metrics_port, ready_timeout=READY_S,
                            extra_properties={**FAST, **(extra or {})}, spawn=spawn_node) as cluster:
        with Nemesis(cluster) as nemesis:
            yield cluster, nemesis


def create_topic(cluster: LocalCluster, name: str, *, partitions: int, replication_factor: int = 3,
                 configs: Mapping[str, str] | None = None) -> dict[str, Any]:
    status, body = http(cluster.admin_url + "/v1/topics", "POST", {
        "name": name, "partitions": partitions, "replication_factor": replication_factor,
        "configs": dict(configs or {})})
    assert status == 201, body
    return json.loads(body)


def partition_state(cluster: LocalCluster, topic: str, partition: int) -> dict[str, Any]:
    status, body = http(f"{cluster.admin_url}/v1/topics/{topic}")
    assert status == 200, body
    return next(p for p in json.loads(body)["partitions"] if p["partition"] == partition)


def wait_for_state(cluster: LocalCluster, topic: str, partition: int, what: str, predicate: Any,
                   timeout_s: float = 30.0) -> dict[str, Any]:
    """The partition's state once `predicate(state)` holds (bounded)."""
    def check() -> dict[str, Any] | None:
        state = partition_state(cluster, topic, partition)
        return state if predicate(state) else None

    return wait_until(f"{topic}-{partition}: {what}", check, timeout_s)  # type: ignore[no-any-return]


def wait_full_isr(cluster: LocalCluster, topic: str, partitions: int, timeout_s: float = 60.0) -> None:
    """Every partition led with its whole replica set in the ISR, and every broker's Metadata
    showing those leaders: a new partition's ISR is its replica set from the start, before any
    broker has applied the topic, and a client that asks a broker too early does not see it."""
    for p in range(partitions):
        wait_for_state(cluster, topic, p, "every replica in the ISR",
                       lambda s: sorted(s["isr"]) == sorted(s["replicas"]) and s["leader"] >= 0, timeout_s)

    def brokers_show_leaders() -> bool:  # the controllers' leaders read again each time: they may move
        status, body = http(f"{cluster.admin_url}/v1/topics/{topic}")
        assert status == 200, body
        return brokers_agree(cluster, topic, {p["partition"]: p["leader"] for p in json.loads(body)["partitions"]})
    wait_until(f"every broker's Metadata showing the leaders of {topic}", brokers_show_leaders, timeout_s)


def replica_log_bytes(cluster: LocalCluster, broker_id: int, topic: str, partition: int) -> bytes:
    return replica_files.replica_log_bytes(cluster.node(broker_id), topic, partition)


def wait_replicas_caught_up(cluster: LocalCluster, topic: str, partitions: int,
                            replicas: tuple[int, ...] | list[int] = BROKERS) -> None:
    replica_files.wait_replicas_caught_up([cluster.node(b) for b in replicas], topic, range(partitions))


def broker_log(cluster: LocalCluster, broker_id: int) -> str:
    return cluster.node(broker_id).spec.log_path.read_text(errors="replace")
