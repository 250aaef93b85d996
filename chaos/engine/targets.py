"""Fault targets resolved from live metadata: the active controller, the leader of P, ...

    view = ClusterView(cluster)
    ids = resolve("leader:chaos:0", view, rng)        # [5]
    ids = resolve("minority", view, rng)              # the active controller (of 3 voters)

Selectors (chaos.scenarios.spec.SELECTOR_HEADS): `active-controller`, `controller-follower`
(a Raft follower), `leader:T:P`, `follower:T:P`, `isr:T:P` (the whole ISR), `replicas:T:P`,
`broker:random` / `broker:N`, `node:N`, `nodes:1,4` (a fixed set: two such sides and a node on neither make Jepsen's
bridge), `majority` / `minority` of the quorum (the minority
holds the active controller, so cutting it off forces an election on the majority side),
`brokers`, `controllers`, `rack:NAME` (the brokers registered with that broker.rack),
`coordinator:GROUP` (the leader of the group's `__consumer_offsets` partition, for
the default `offsets.topic.num.partitions`), `txn-coordinator:TRANSACTIONAL_ID` (the leader of its
`__transaction_state` partition, Kafka's same hash over `transaction.state.log.num.partitions`),
and for a fault's peer `others` (every node not targeted). `client:NAME` (a transactional client
process, chaos.engine.txn_workload) is resolved by the fault applier, not here.
"""

from __future__ import annotations

from common.config import default_int
import http.client
import ipaddress
import json
import random
from typing import Any, Final

from common.limits import NODE_READ_TIMEOUT
from groups.partitioner import (
    DEFAULT_OFFSETS_TOPIC_PARTITIONS,
    GROUP_METADATA_TOPIC_NAME,
    coordinator_partition,
)
from localcluster.launcher import LocalCluster

TRANSACTION_STATE_TOPIC: Final = "__transaction_state"
TRANSACTION_STATE_PARTITIONS: Final = default_int("transaction.state.log.num.partitions")

# The harness's own admin calls leave from an address no node uses: controller 1 is 127.0.0.1,
# and a partition cutting it off must not cut the harness's view of the other controllers.
HARNESS_ADDRESS: Final = "127.0.0.250"


def harness_source(host: str) -> tuple[str, int] | None:
    """The source of the harness's own admin calls to `host`: HARNESS_ADDRESS on loopback; the
    kernel's choice for a namespaced host (tidelog.hosts: the harness runs on the client host,
    where a loopback source cannot reach it)."""
    return (HARNESS_ADDRESS, 0) if ipaddress.ip_address(host).is_loopback else None


def admin_headers(cluster: LocalCluster) -> dict[str, str]:
    """The Authorization a cluster's admin API requires: a namespaced cluster's (its `admin_token`,
    needed beyond loopback, reads included); none on loopback."""
    token = getattr(cluster, "admin_token", None)
    return {"Authorization": f"Bearer {token}"} if isinstance(token, str) and token else {}


class TargetError(RuntimeError):
    """The selector names nothing right now (no leader, no active controller, ...)."""


class ClusterView:
    """Reads of the admin API of whichever controller answers."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster

    def get(self, path: str) -> Any:
        errors = []
        for node in sorted(self.cluster.controllers, key=lambda n: n.spec.node_id):
            if not node.running():
                continue
            connection = http.client.HTTPConnection(node.spec.host, node.spec.admin_port, timeout=NODE_READ_TIMEOUT,
                                                    source_address=harness_source(node.spec.host))
            try:
                connection.request("GET", path, headers=admin_headers(self.cluster))
                answer = connection.getresponse()
                if answer.status != 200:
                    raise OSError(f"GET {path} answered {answer.status}")
                return json.loads(answer.read())
            except (OSError, http.client.HTTPException) as exc:
                errors.append(f"{node.spec.node_id}: {exc}")
            finally:
                connection.close()
        raise OSError(f"no controller answered GET {path}: {'; '.join(errors) or 'none running'}")

    def active_controller(self) -> int:
        active = self.get("/v1/cluster").get("active_controller")
        if active is None or active < 0:
            raise TargetError("no active controller right now")
        return int(active)

    def partition(self, topic: str, partition: int) -> dict[str, Any]:
        for p in self.get(f"/v1/topics/{topic}")["partitions"]:
            if p["partition"] == partition:
                return p
        raise TargetError(f"{topic} has no partition {partition}")

    def partitions(self, topic: str) -> list[dict[str, Any]]:
        return self.get(f"/v1/topics/{topic}")["partitions"]

    def brokers(self) -> list[dict[str, Any]]:
        return self.get("/v1/brokers")


def _partition_args(selector: str) -> tuple[str, int]:
    parts = selector.split(":")
    if len(parts) != 3 or not parts[2].isdigit():
        raise TargetError(f"{selector!r}: expected {parts[0]}:TOPIC:PARTITION")
    return parts[1], int(parts[2])


def resolve(selector: str, view: ClusterView, rng: random.Random, *, exclude: frozenset[int] = frozenset()
            ) -> list[int]:
    """The node ids `selector` names now (sorted); TargetError when it names none."""
    cluster = view.cluster
    controllers = sorted(n.spec.node_id for n in cluster.controllers)
    brokers = sorted(n.spec.node_id for n in cluster.brokers)
    head, _, rest = selector.partition(":")
    ids: list[int]
    if head == "active-controller":
        ids = [view.active_controller()]
    elif head == "controller-follower":
        active = view.active_controller()
        ids = [rng.choice([c for c in controllers if c != active])]
    elif head in ("majority", "minority"):
        active = view.active_controller()
        others = [c for c in controllers if c != active]
        rng.shuffle(others)
        size = max(1, (len(controllers) - 1) // 2)  # the largest side that cannot commit
        minority = [active, *others[: size - 1]]
        ids = minority if head == "minority" else [c for c in controllers if c not in minority]
    elif head in ("leader", "follower", "isr", "replicas"):
        topic, number = _partition_args(selector)
        p = view.partition(topic, number)
        if head == "leader":
            if p["leader"] < 0:
                raise TargetError(f"{topic}-{number} has no leader")
            ids = [p["leader"]]
        elif head == "follower":
            followers = [r for r in p["isr"] if r != p["leader"]] or [r for r in p["replicas"] if r != p["leader"]]
            if not followers:
                raise TargetError(f"{topic}-{number} has no follower")
            ids = [rng.choice(sorted(followers))]
        else:
            ids = list(p["isr"] if head == "isr" else p["replicas"])
    elif head == "coordinator":
        if not rest:
            raise TargetError(f"{selector!r}: expected coordinator:GROUP")
        number = coordinator_partition(rest, DEFAULT_OFFSETS_TOPIC_PARTITIONS)
        leader = view.partition(GROUP_METADATA_TOPIC_NAME, number)["leader"]
        if leader < 0:
            raise TargetError(f"group {rest}'s coordinator partition {number} has no leader")
        ids = [leader]
    elif head == "txn-coordinator":
        if not rest:
            raise TargetError(f"{selector!r}: expected txn-coordinator:TRANSACTIONAL_ID")
        number = coordinator_partition(rest, TRANSACTION_STATE_PARTITIONS)  # Utils.abs(id.hashCode) % n
        leader = view.partition(TRANSACTION_STATE_TOPIC, number)["leader"]
        if leader < 0:
            raise TargetError(f"transactional id {rest}'s coordinator partition {number} has no leader")
        ids = [leader]
    elif head == "broker":
        ids = [rng.choice(brokers)] if rest == "random" else [int(rest)]
    elif head == "node":
        ids = [int(rest)]
    elif head == "nodes":
        ids = [int(n) for n in rest.split(",") if n.strip()]
    elif head == "rack":  # every broker registered with broker.rack NAME (tidelog up --racks)
        ids = [int(b["broker_id"]) for b in view.brokers() if b.get("rack") == rest]
    elif head == "brokers":
        ids = brokers
    elif head == "controllers":
        ids = controllers
    elif head == "others":
        ids = [n.spec.node_id for n in cluster.nodes if n.spec.node_id not in exclude]
    else:
        raise TargetError(f"unknown selector {selector!r}")
    known = {n.spec.node_id for n in cluster.nodes}
    if not ids or not set(ids) <= known:
        raise TargetError(f"{selector!r} names {ids}, not nodes of this cluster")
    return sorted(set(ids))
