"""Which packets a network fault drops: by the two nodes' addresses and the ports their roles
talk on, never a whole address (other clusters and the harness's clients share 127.0.0.N)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.nemeses.links import PacketMatch, cut, link_ports, one_way

RAFT, ADMIN, KAFKA, METRICS = 9093, 9094, 9092, 9095


def node(node_id: int, role: str) -> object:
    from localcluster.cluster_layout import NodeSpec

    kafka = KAFKA if role in ("broker", "combined") else 0
    return NodeSpec(node_id, role, f"127.0.0.{node_id}", RAFT, ADMIN, Path("/x"), kafka, METRICS if kafka else 0)


C1, C2, B4, B5 = node(1, "controller"), node(2, "controller"), node(4, "broker"), node(5, "broker")


@pytest.mark.parametrize("client, server, ports", [
    (C1, C2, (RAFT, ADMIN)),   # raft, and admin writes forwarded to the active controller
    (B4, C1, (ADMIN,)),        # broker RPCs and metadata fetches
    (C1, B4, ()),              # a controller never connects to a broker
    (B4, B5, (KAFKA,)),        # replica fetches
])
def test_link_ports(client: object, server: object, ports: tuple[int, ...]) -> None:
    assert link_ports(client, server) == ports  # type: ignore[arg-type]


def test_one_way_drops_requests_and_answers_of_the_sender_only() -> None:
    assert one_way(B4, C1) == [PacketMatch("127.0.0.4", "127.0.0.1", ADMIN, True)]  # type: ignore[arg-type]
    # controller 1 never calls broker 4; it answers broker 4's calls from its admin port
    assert one_way(C1, B4) == [PacketMatch("127.0.0.1", "127.0.0.4", ADMIN, False)]  # type: ignore[arg-type]


def test_isolating_a_broker_cuts_both_ways_with_every_other_node() -> None:
    matches = cut([B4], [C1, C2, B5])  # type: ignore[list-item]
    assert {(m.source, m.destination) for m in matches} == {
        ("127.0.0.4", "127.0.0.1"), ("127.0.0.1", "127.0.0.4"), ("127.0.0.4", "127.0.0.2"),
        ("127.0.0.2", "127.0.0.4"), ("127.0.0.4", "127.0.0.5"), ("127.0.0.5", "127.0.0.4")}
    # the harness's clients connect from 127.0.0.1 to broker 4's Kafka port: never matched
    assert not any(m.source == "127.0.0.1" and m.port == KAFKA for m in matches)
    assert len(matches) == len(set(matches))


def test_rules_render_for_iptables_and_tc() -> None:
    m = PacketMatch("127.0.0.4", "127.0.0.5", KAFKA, True)
    assert m.iptables_args() == ["-s", "127.0.0.4/32", "-d", "127.0.0.5/32", "-p", "tcp", "--dport", "9092"]
    assert m.u32_args()[-4:] == ["ip", "dport", "9092", "0xffff"]


def test_only_loopback_is_ever_touched() -> None:
    with pytest.raises(ValueError, match="loopback"):
        PacketMatch("10.0.0.1", "127.0.0.5", KAFKA, True)
