"""The pure part of tidelog.hosts.netns: names, addresses, the `ip` commands, dead runs."""

from __future__ import annotations

import ipaddress

import pytest

from tidelog.hosts.netns import (
    BRIDGE_DEVICE,
    HOST_NETWORK,
    NetnsError,
    NetworkPlan,
    dead_runs,
    new_run_id,
    parse_namespace_list,
    plan_network,
    run_creator,
    runs_of,
    setup_commands,
)

RUN = "4242xa1b2c3"
PLAN = plan_network(RUN, ["node1", "node2", "client"])


def test_plan_names_and_addresses() -> None:
    assert [h.namespace for h in PLAN.hosts] == [
        "tidelog-4242xa1b2c3-node1", "tidelog-4242xa1b2c3-node2", "tidelog-4242xa1b2c3-client"]
    assert [h.address for h in PLAN.hosts] == ["198.18.0.10", "198.18.0.11", "198.18.0.12"]
    assert PLAN.bridge_namespace == "tidelog-4242xa1b2c3-bridge"
    assert PLAN.namespaces[-1] == PLAN.bridge_namespace  # removed last
    assert all(ipaddress.IPv4Address(h.address) in HOST_NETWORK for h in PLAN.hosts)


def test_commands_never_touch_the_root_namespace() -> None:
    """Every link command names a namespace (-n, or netns on both veth ends): the machine's own
    network gets no interface, address or route."""
    for command in setup_commands(PLAN):
        if command[:3] == ["ip", "netns", "add"]:
            continue
        if command[:3] == ["ip", "link", "add"]:
            assert command.count("netns") == 2, command
        else:
            assert command[1] == "-n" and command[2] in PLAN.namespaces, command
    bridge_commands = [c for c in setup_commands(PLAN) if "master" in c]
    assert all(c[2] == PLAN.bridge_namespace and c[-1] == BRIDGE_DEVICE for c in bridge_commands)


@pytest.mark.parametrize(("run_id", "names", "error"), [
    ("4242", ["a"], "run id"),
    (RUN, [], "1 to"),
    (RUN, ["a", "a"], "repeat"),
    (RUN, ["Node1"], "lowercase"),
    (RUN, ["bridge"], "lowercase"),
    (RUN, ["thirteenchars"], "lowercase"),
])
def test_bad_plans(run_id: str, names: list[str], error: str) -> None:
    with pytest.raises(NetnsError, match=error):
        plan_network(run_id, names)


def test_document_round_trip_and_refusals() -> None:
    assert NetworkPlan.from_document(PLAN.to_document()) == PLAN
    with pytest.raises(NetnsError, match="malformed"):
        NetworkPlan.from_document({"kind": "netns"})
    bad = PLAN.to_document()
    bad["bridge_namespace"] = "eth0"
    with pytest.raises(NetnsError, match="not a tidelog namespace"):
        NetworkPlan.from_document(bad)


def test_run_ids_and_listing() -> None:
    run = new_run_id(17)
    assert run.startswith("17x") and run_creator(run) == 17
    assert new_run_id(17, "abcdef") == "17xabcdef"
    listing = "tidelog-1x000001-node1 (id: 3)\ntidelog-1x000001-bridge\nother-ns\n\ntidelog-2x000002-client\n"
    names = parse_namespace_list(listing)
    assert names == ["tidelog-1x000001-node1", "tidelog-1x000001-bridge", "other-ns", "tidelog-2x000002-client"]
    assert runs_of(names) == {"1x000001": ["tidelog-1x000001-bridge", "tidelog-1x000001-node1"],
                              "2x000002": ["tidelog-2x000002-client"]}


@pytest.mark.parametrize(("alive", "busy", "dead"), [
    ({"1x000001": False}, {}, ["1x000001"]),  # creator gone, nothing runs: a leftover
    ({"1x000001": True}, {}, []),  # its creator still runs it
    ({"1x000001": False}, {"tidelog-1x000001-node1": True}, []),  # a detached cluster's nodes keep it
])
def test_dead_runs(alive: dict[str, bool], busy: dict[str, bool], dead: list[str]) -> None:
    runs = {"1x000001": ["tidelog-1x000001-bridge", "tidelog-1x000001-node1"]}
    assert dead_runs(runs, creator_alive=alive, busy=busy) == dead
