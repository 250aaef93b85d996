"""The pure part of tidelog.hosts.partition: which DROP rules a cut between hosts puts in which
namespace, and the commands that add and delete them."""

from __future__ import annotations

import pytest

from tidelog.hosts.netns import NetnsError, plan_network
from tidelog.hosts.partition import HostRule, cut_rules, rule_command

PLAN = plan_network("4242xa1b2c3", ["node1", "node2", "node3", "client"])
NS = {h.name: h.namespace for h in PLAN.hosts}
ADDRESS = {h.name: h.address for h in PLAN.hosts}


def rule(host: str, chain: str, peer: str) -> HostRule:
    return HostRule(NS[host], chain, ADDRESS[peer])


@pytest.mark.parametrize(("side_a", "side_b", "one_way", "expected"), [
    (["node1"], ["node2"], False, {rule("node1", "OUTPUT", "node2"), rule("node2", "INPUT", "node1"),
                                   rule("node2", "OUTPUT", "node1"), rule("node1", "INPUT", "node2")}),
    (["node1"], ["node2"], True, {rule("node1", "OUTPUT", "node2"), rule("node2", "INPUT", "node1")}),
    (["node1"], ["node2", "node3"], False, {
        rule("node1", "OUTPUT", "node2"), rule("node2", "INPUT", "node1"), rule("node2", "OUTPUT", "node1"),
        rule("node1", "INPUT", "node2"), rule("node1", "OUTPUT", "node3"), rule("node3", "INPUT", "node1"),
        rule("node3", "OUTPUT", "node1"), rule("node1", "INPUT", "node3")}),
])
def test_cut_rules(side_a: list[str], side_b: list[str], one_way: bool, expected: set[HostRule]) -> None:
    rules = cut_rules(PLAN, side_a, side_b, one_way=one_way)
    assert set(rules) == expected and len(rules) == len(expected)
    assert not any(r.namespace == NS["client"] for r in rules)  # a host on neither side keeps its links


@pytest.mark.parametrize(("side_a", "side_b", "error", "message"), [
    ([], ["node2"], ValueError, "a host on each side"),
    (["node1"], ["node1", "node2"], ValueError, "node1 on both sides"),
    (["node1"], ["node9"], NetnsError, "no host 'node9'"),
])
def test_bad_cuts(side_a: list[str], side_b: list[str], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        cut_rules(PLAN, side_a, side_b)


def test_commands_act_inside_the_namespace() -> None:
    output = rule("node1", "OUTPUT", "node2")
    assert rule_command(output, "-A") == ["ip", "netns", "exec", NS["node1"], "iptables", "-w", "5", "-A",
                                          "OUTPUT", "-d", f"{ADDRESS['node2']}/32", "-j", "DROP"]
    assert rule_command(rule("node2", "INPUT", "node1"), "-D")[-6:] == [
        "-D", "INPUT", "-s", f"{ADDRESS['node1']}/32", "-j", "DROP"]
    with pytest.raises(ValueError, match="operation"):
        rule_command(output, "-F")
