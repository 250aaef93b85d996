"""Which packets make up a link between two nodes: pure rule building for iptables and tc
(not marked PURE: it takes its nodes from `localcluster.cluster_layout`, which reads files).

Every node of a local cluster listens on its own 127.0.0.N, but other clusters on this
machine (other test runs) use the same addresses with other ports, and the harness's own
clients connect from 127.0.0.1 like controller 1. So a rule never matches an address pair
alone: it matches the ports the two roles talk on. A connection from node A to node B goes
to one of B's listeners (the *service ports* of the pair, `link_ports`):
controller -> controller: B's raft port; broker -> controller: B's admin API port (the
broker's RPCs and metadata fetches); broker -> broker: B's Kafka listener (replica fetches).
The active controller's idle connection to each broker's Kafka listener (its listener watch)
is left alone: it shares controller 1's address and the Kafka port with the harness's clients,
and it carries nothing a cut could stop, so a cut broker is fenced by its session as before.
Cutting A -> B drops A's packets to those ports of B and A's answers to B's connections
to A's service ports; the harness's clients use other ports, so they keep talking.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from localcluster.cluster_layout import NodeSpec, runs_broker, runs_controller

CHAIN: Final = "TIDELOG-CHAOS"  # each run's chain is CHAIN-<n>-<pid>
LOOPBACK: Final = ipaddress.ip_network("127.0.0.0/8")


@dataclass(frozen=True, slots=True)
class PacketMatch:
    """Packets from `source` to `destination` with this TCP destination (or source) port."""

    source: str
    destination: str
    port: int
    port_is_destination: bool

    def __post_init__(self) -> None:
        for address in (self.source, self.destination):
            if ipaddress.ip_address(address) not in LOOPBACK:
                raise ValueError(f"chaos touches loopback traffic only, not {address}")

    def iptables_args(self) -> list[str]:
        """The match part of an iptables rule."""
        return ["-s", f"{self.source}/32", "-d", f"{self.destination}/32", "-p", "tcp",
                "--dport" if self.port_is_destination else "--sport", str(self.port)]

    def u32_args(self) -> list[str]:
        """The match part of a tc u32 filter."""
        return ["match", "ip", "src", f"{self.source}/32", "match", "ip", "dst", f"{self.destination}/32",
                "match", "ip", "dport" if self.port_is_destination else "sport", str(self.port), "0xffff"]


def link_ports(client: NodeSpec, server: NodeSpec) -> tuple[int, ...]:
    """The ports of `server` that `client` connects to (empty: the two never talk)."""
    ports: list[int] = []
    if runs_controller(client.role) and runs_controller(server.role):
        ports.append(server.raft_port)
        ports.append(server.admin_port)  # a controller forwards admin writes to the active one
    if runs_broker(client.role) and runs_controller(server.role):
        ports.append(server.admin_port)
    if runs_broker(client.role) and runs_broker(server.role):
        ports.append(server.kafka_port)
    return tuple(sorted(set(ports)))


def one_way(sender: NodeSpec, receiver: NodeSpec) -> list[PacketMatch]:
    """Every packet `sender` sends `receiver` on the cluster's links (requests and answers)."""
    if sender.host == receiver.host:
        return []
    requests = [PacketMatch(sender.host, receiver.host, p, True) for p in link_ports(sender, receiver)]
    answers = [PacketMatch(sender.host, receiver.host, p, False) for p in link_ports(receiver, sender)]
    return requests + answers


def both_ways(a: NodeSpec, b: NodeSpec) -> list[PacketMatch]:
    return one_way(a, b) + one_way(b, a)


def cut(side_a: Iterable[NodeSpec], side_b: Iterable[NodeSpec], *, one_way_only: bool = False
        ) -> list[PacketMatch]:
    """Matches for every link between the two sides (a node on both sides keeps its links)."""
    a_nodes, b_nodes = sorted(side_a, key=_id), sorted(side_b, key=_id)
    matches: list[PacketMatch] = []
    for a in a_nodes:
        for b in b_nodes:
            if a.node_id != b.node_id:
                matches += one_way(a, b) if one_way_only else both_ways(a, b)
    return list(dict.fromkeys(matches))


def _id(node: NodeSpec) -> int:
    return node.node_id


def complement(nodes: Sequence[NodeSpec], chosen: Iterable[NodeSpec]) -> list[NodeSpec]:
    ids = {n.node_id for n in chosen}
    return [n for n in nodes if n.node_id not in ids]
