"""common.preflight's pure part: what a node at start refuses, each naming the setting."""

from __future__ import annotations

from typing import Any

import pytest

from common.preflight import NodeView, beyond_loopback, local_problems, peer_problems

API = {1: "10.0.0.1:9080", 2: "10.0.0.2:9080"}
QUORUM = {1: "10.0.0.1:9093", 2: "10.0.0.2:9093"}
BROKER = NodeView(4, "broker", "C" * 22, {}, API, ("10.0.0.4:9092",))
CONTROLLER = NodeView(2, "controller", "C" * 22, QUORUM, API, ("10.0.0.2:9080",))


def view(api: dict[int, str] = API, quorum: dict[int, str] = QUORUM, cluster_id: str = "C" * 22) -> dict[str, Any]:
    return {"cluster_id": cluster_id, "voters": [
        {"node_id": i, "api_address": api[i], "quorum_address": quorum.get(i)} for i in sorted(api)]}


def registered(broker_id: int, host: str, fenced: bool = False) -> dict[str, Any]:
    return {"broker_id": broker_id, "fenced": fenced, "listeners": [{"name": "PLAINTEXT", "host": host, "port": 9092}]}


def test_loopback_nodes_are_not_checked() -> None:
    assert not beyond_loopback(NodeView(4, "broker", None, {}, {1: "127.0.0.1:9080"}, ("127.0.0.4:9092",)))
    assert beyond_loopback(BROKER)


@pytest.mark.parametrize(("me", "resolves", "expected"), [
    (BROKER, {}, []),
    (NodeView(4, "broker", None, {}, API, ("127.0.0.1:9092",)), {}, ["'advertised.listeners' advertises 127.0.0.1"]),
    (NodeView(2, "controller", None, QUORUM, API, ("localhost:9080",)), {}, ["'controller.listener' advertises"]),
    (NodeView(4, "broker", None, {}, API, ("nowhere.invalid:9092",)), {"nowhere.invalid": False},
     ["does not resolve"]),
])
def test_local_problems(me: NodeView, resolves: dict[str, bool], expected: list[str]) -> None:
    problems = local_problems(me, resolves)
    assert len(problems) == len(expected)
    for problem, fragment in zip(problems, expected):
        assert fragment in problem


@pytest.mark.parametrize(("me", "views", "brokers", "expected"), [
    (BROKER, {1: view()}, [registered(5, "10.0.0.5")], []),
    (BROKER, {}, None, []),  # nobody answered (a first start): nothing compared
    (BROKER, {1: view()}, [registered(4, "10.0.0.9")], ["'node.id' 4 is registered by another live broker"]),
    (BROKER, {1: view()}, [registered(4, "10.0.0.4")], []),  # itself restarting: its old session still live
    (BROKER, {1: view()}, [registered(4, "10.0.0.9", fenced=True)], []),  # gone: its id is free
    (BROKER, {1: view(api={1: "10.0.0.1:9080", 2: "10.0.0.7:9080"})}, None,
     ["'controller.api.voters' here is 1@10.0.0.1:9080,2@10.0.0.2:9080"]),
    (BROKER, {1: view(api={**API, 3: "10.0.0.3:9080"})}, None, []),  # a voter added at run time (KIP-853)
    (CONTROLLER, {1: view(quorum={1: "10.0.0.1:9093", 2: "10.0.0.2:9999"})}, None,
     ["'controller.quorum.voters' here is"]),
    (CONTROLLER, {1: view(cluster_id="D" * 22)}, None, ["'cluster.id' is CCCC"]),
])
def test_peer_problems(me: NodeView, views: dict[int, dict[str, Any]], brokers: list[dict[str, Any]] | None,
                       expected: list[str]) -> None:
    problems = peer_problems(me, views, brokers)
    assert len(problems) == len(expected), problems
    for problem, fragment in zip(problems, expected):
        assert fragment in problem
