"""What a test cluster looks like right now, and bounded waits until it looks as a test needs.

Two views, and a wait is over only when both agree: the controllers' committed metadata (the
admin API: leaders, ISRs, fenced brokers) and what each live broker tells a Kafka client in a
Metadata response (the view a client under test routes by). Every wait has a deadline and, when
it passes, says what it saw last and shows the log tail of any node that exited.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

from common.limits import NODE_READ_TIMEOUT, POLL_INTERVAL
from common.units import SECONDS
from tidelog.admin_client import AdminClient
from tidelog.cli_common import ClusterError
from common.broker_connection import BrokerUnavailable
from common.kafka_client import NO_LEADER, ClusterInfo, KafkaClient
from localcluster.launcher import LocalCluster, probe_cluster_view, unfenced_brokers
from localcluster.node_process import NodeProcess
from common.waiting import WaitTimeout, wait_until

WAIT_TIMEOUT: Final = 30 * SECONDS  # default bound of every wait
LOG_TAIL_LINES: Final = 30
# Not-yet answers while a cluster heals: a node not listening, an answer from a controller that has
# not applied the last record, a broker that dropped the connection.
NOT_YET: Final = (OSError, ClusterError, BrokerUnavailable, ValueError, KeyError, TypeError)

T = TypeVar("T")


class ClusterTimeout(TimeoutError):
    """A wait's deadline passed; the message says what was awaited, what was seen, and node logs."""


def process_state(pid: int | None) -> str | None:
    """The state letter of /proc/<pid>/stat ("T": stopped by SIGSTOP); None if gone."""
    if pid is None:
        return None
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None


def is_paused(node: NodeProcess) -> bool:
    return node.running() and process_state(node.pid) == "T"


def serving(node: NodeProcess) -> bool:
    """Running and not paused: it can answer."""
    return node.running() and not is_paused(node)


def log_tails(nodes: Iterable[NodeProcess], lines: int = LOG_TAIL_LINES) -> str:
    parts = []
    for node in nodes:
        if node.running():
            status = "running"
        else:
            status = "not running" if node.exit_status is None else f"exited with status {node.exit_status}"
        parts.append(f"--- {node.spec.label} (pid {node.pid}, {status}), the end of {node.spec.log_path}:\n"
                     f"{node.log_tail(lines)}")
    return "\n".join(parts)


def poll(what: str, condition: Callable[[], T | None], timeout: float, *,
         nodes: Sequence[NodeProcess] = ()) -> T:
    """condition()'s first value that is not None or False; ClusterTimeout after `timeout` seconds.

    Answers in NOT_YET count as "not yet". The timeout message holds the last answer and the log
    tails of `nodes` that have exited (why a cluster did not heal is usually there).
    """
    def found() -> _Found[T] | None:  # 0 and [] are answers here, not "not yet"
        value = condition()
        return None if value is None or value is False else _Found(value)

    try:
        return wait_until(what, found, timeout, poll_s=POLL_INTERVAL, not_yet=NOT_YET).value
    except WaitTimeout as exc:
        dead = [n for n in nodes if not n.running()]
        tails = f"\n{log_tails(dead)}" if dead else ""
        raise ClusterTimeout(f"{exc}{tails}") from None


@dataclass(frozen=True, slots=True)
class _Found(Generic[T]):
    value: T


def admin(local: LocalCluster, timeout: float = NODE_READ_TIMEOUT) -> AdminClient:
    """An admin client over the controllers that can answer now (running, not paused)."""
    urls = [n.spec.admin_url for n in local.controllers if serving(n)]
    if not urls:
        raise ClusterError("CONTROLLER_UNREACHABLE", "no controller is running and unpaused")
    return AdminClient(urls, timeout=timeout)


def broker_metadata(node: NodeProcess, topics: Iterable[str] | None = ()) -> ClusterInfo:
    """The Metadata response of this one broker (no other broker is asked)."""
    with KafkaClient([(node.spec.host, node.spec.kafka_port)], client_id="tidelog-testing",
                     request_timeout=NODE_READ_TIMEOUT) as client:
        return client.metadata(None if topics is None else list(topics))


def active_controller(local: LocalCluster) -> int | None:
    """The active controller every serving controller names; None while they disagree or elect."""
    views = {n.spec.node_id: probe_cluster_view(n.spec) for n in local.controllers if serving(n)}
    named = {view.get("active_controller") for view in views.values()}
    if len(named) != 1 or None in named:
        return None
    active = named.pop()
    return active if isinstance(active, int) and active in views else None


def unfenced_everywhere(local: LocalCluster) -> set[int]:
    """Brokers every serving controller shows registered, unfenced and not shutting down."""
    views = [unfenced_brokers(admin_view(n, "/v1/brokers")) for n in local.controllers if serving(n)]
    return set.intersection(*views) if views else set()


def admin_view(node: NodeProcess, path: str) -> Any:
    return AdminClient([node.spec.admin_url], timeout=NODE_READ_TIMEOUT).request("GET", path)


def partition_view(local: LocalCluster, topic: str, partition: int) -> Mapping[str, Any]:
    """The controllers' committed state of one partition (leader, leader_epoch, replicas, isr, ...)."""
    view = admin(local).topic(topic)
    for entry in view["partitions"]:
        if entry["partition"] == partition:
            return entry
    raise ClusterError("UNKNOWN_TOPIC_OR_PARTITION", f"{topic} has no partition {partition}")


def brokers_agree(local: LocalCluster, topic: str, leaders: Mapping[int, int]) -> bool:
    """Every serving broker's Metadata names `leaders` (partition -> broker) for `topic`."""
    for node in local.brokers:
        if not serving(node):
            continue
        info = broker_metadata(node, [topic]).topics.get(topic)
        if info is None or info.error_code != 0:
            return False
        if {p: info.partitions[p].leader if p in info.partitions else NO_LEADER for p in leaders} != dict(leaders):
            return False
    return True


def brokers_know_brokers(local: LocalCluster, wanted: set[int]) -> bool:
    """Every serving broker lists at least `wanted` in its Metadata response's brokers."""
    return all(wanted <= set(broker_metadata(n, ()).brokers)
               for n in local.brokers if serving(n))


def healthy(local: LocalCluster) -> str | None:
    """None when the whole cluster is well, else what is not yet (a sentence for the timeout message).

    Well: every node runs unpaused; the controllers agree on an active one; every broker is
    registered and unfenced on every controller; every partition has a leader and its whole
    replica set in the ISR; every broker's Metadata lists every broker and the controllers' leaders.
    """
    down = [n.spec.label for n in local.nodes if not serving(n)]
    if down:
        return f"not running or paused: {', '.join(down)}"
    if active_controller(local) is None:
        return "the controllers do not agree on an active controller"
    wanted = {n.spec.node_id for n in local.brokers}
    missing = wanted - unfenced_everywhere(local)
    if missing:
        return f"brokers not yet registered and unfenced on every controller: {sorted(missing)}"
    if not brokers_know_brokers(local, wanted):
        return "a broker's Metadata does not list every broker yet"
    client = admin(local)
    for summary in client.topics():
        if summary["partitions"] == 0:
            continue
        view = client.topic(summary["name"])
        leaders = {}
        for p in view["partitions"]:
            if p["leader"] < 0 or sorted(p["isr"]) != sorted(p["replicas"]):
                return f"{view['name']}-{p['partition']}: leader {p['leader']}, isr {p['isr']}, replicas {p['replicas']}"
            leaders[p["partition"]] = p["leader"]
        if not brokers_agree(local, view["name"], leaders):
            return f"a broker's Metadata for {view['name']} does not show the controllers' leaders yet"
    return None
