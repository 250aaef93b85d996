"""chaos.links.rules: each fault's parameters checked (a bad one named), and the commands built."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.links import rules
from chaos.links.rules import DelayParams, LinkParamError
from chaos.nemeses.links import PacketMatch

REQUEST = PacketMatch("127.0.0.5", "127.0.0.4", 9092, True)
ANSWER = PacketMatch("127.0.0.4", "127.0.0.5", 9092, False)


@pytest.mark.parametrize("params, expected", [
    ({"delay_ms": 200}, DelayParams(200)),
    ({"delay_ms": 200, "jitter_ms": 20}, DelayParams(200, 20)),
    ({"delay_ms": 0}, DelayParams(0)),
])
def test_delay_params(params: dict[str, Any], expected: DelayParams) -> None:
    assert rules.delay_params(params) == expected


@pytest.mark.parametrize("params, named", [
    ({}, "params.delay_ms: required"),
    ({"delay_ms": -1}, "params.delay_ms: expected 0..60000"),
    ({"delay_ms": 60_001}, "params.delay_ms: expected 0..60000"),
    ({"delay_ms": "200"}, "params.delay_ms: expected a number"),
    ({"delay_ms": True}, "params.delay_ms: expected a number"),
    ({"delay_ms": float("nan")}, "params.delay_ms: expected a number"),
    ({"delay_ms": 10, "jitter_ms": 20}, "params.jitter_ms: at most delay_ms"),
])
def test_bad_delay_params_are_named(params: dict[str, Any], named: str) -> None:
    with pytest.raises(LinkParamError, match=named):
        rules.delay_params(params)


@pytest.mark.parametrize("params, expected", [
    ({"rate_kbit": 8000}, 8000), ({"rate_kbit": 8}, 8), ({"rate_kbit": 10_000_000}, 10_000_000)])
def test_rate(params: dict[str, Any], expected: int) -> None:
    assert rules.rate_kbit(params) == expected


@pytest.mark.parametrize("params, named", [
    ({}, "params.rate_kbit: required"), ({"rate_kbit": 7}, "params.rate_kbit: expected 8..1e"),
    ({"rate_kbit": 10_000_001}, "params.rate_kbit: expected")])
def test_bad_rates_are_named(params: dict[str, Any], named: str) -> None:
    with pytest.raises(LinkParamError, match=named):
        rules.rate_kbit(params)


@pytest.mark.parametrize("params, expected", [({"loss_pct": 10}, 0.1), ({"loss_pct": 0}, 0.0),
                                              ({"loss_pct": 100}, 1.0)])
def test_loss(params: dict[str, Any], expected: float) -> None:
    assert rules.loss_probability(params) == pytest.approx(expected)


@pytest.mark.parametrize("params", [{}, {"loss_pct": 101}, {"loss_pct": -0.5}])
def test_bad_loss_is_named(params: dict[str, Any]) -> None:
    with pytest.raises(LinkParamError, match="params.loss_pct"):
        rules.loss_probability(params)


def test_slow_close_params() -> None:
    assert rules.slow_close_params({"delay_ms": 500}) == DelayParams(0, 0, 500)


def test_only_connection_starts_are_redirected() -> None:
    assert rules.connections([REQUEST, ANSWER]) == [REQUEST]
    assert rules.redirect_rule(REQUEST, 4000) == [
        "-s", "127.0.0.5/32", "-d", "127.0.0.4/32", "-p", "tcp", "--dport", "9092",
        "-m", "mark", "!", "--mark", hex(rules.PROXY_MARK), "-j", "DNAT", "--to-destination", "127.0.0.252:4000"]


def test_loss_rule() -> None:
    assert rules.loss_rule(ANSWER, 0.05)[-7:] == ["-m", "statistic", "--mode", "random", "--probability",
                                                  "0.050000", "-j", "DROP"][-7:]
    assert rules.count_rule(ANSWER) == ANSWER.iptables_args()


def test_loss_counts_read_iptables_listing() -> None:
    listing = "\n".join([
        "-N TIDELOG-LINK-1",
        "-A TIDELOG-LINK-1 -s 127.0.0.5/32 -d 127.0.0.4/32 -p tcp -m tcp --dport 9092 -c 100 9000",
        "-A TIDELOG-LINK-1 -s 127.0.0.5/32 -d 127.0.0.4/32 -p tcp -m tcp --dport 9092 -m statistic --mode random "
        "--probability 0.05000000005 -c 6 540 -j DROP",
        "-A TIDELOG-LINK-1 -s 127.0.0.4/32 -d 127.0.0.5/32 -p tcp -m tcp --sport 9092 -c 50 4000",
        "-A TIDELOG-LINK-1 -s 127.0.0.4/32 -d 127.0.0.5/32 -p tcp -m tcp --sport 9092 -m statistic --mode random "
        "--probability 0.05000000005 -c 2 100 -j DROP",
        "-A TIDELOG-LINK-1 -s 127.0.0.9/32 -d 127.0.0.4/32 -p tcp -m tcp --dport 9092 -c 77 0",  # another fault's
    ])
    assert rules.loss_counts(listing, [REQUEST, ANSWER]) == (150, 8)


def test_a_shaped_class_and_its_filters_share_one_priority() -> None:
    commands = rules.class_commands(0x10, 8000, [REQUEST])
    assert commands[0][:12] == ["tc", "class", "add", "dev", "lo", "parent", "7c2d:", "classid", "7c2d:10", "htb",
                                "rate", "8000kbit"]
    assert "burst" in commands[0] and str(rules.burst_bytes(8000)) in commands[0]
    assert commands[1][-2:] == ["flowid", "7c2d:10"] and commands[1][commands[1].index("prio") + 1] == "16"
    assert rules.class_removal(0x10)[0][-2:] == ["prio", "16"]
    with pytest.raises(ValueError, match="outside"):
        rules.class_commands(1, 8000, [REQUEST])  # the default class is not a link's


def test_classes_in_use_and_the_next_free_one() -> None:
    listing = ("class htb 7c2d:10 root prio 0 rate 8Mbit ceil 8Mbit burst 75536b cburst 75536b\n"
               "class htb 7c2d:1 root prio 0 rate 100Gbit ceil 100Gbit burst 0b cburst 0b\n"
               "class htb 7c1d:11 root prio 0 rate 8Mbit ceil 8Mbit\n")
    assert rules.used_minors(listing) == {0x10}
    assert rules.free_minor({0x10}) == 0x11
    with pytest.raises(RuntimeError, match="in use"):
        rules.free_minor(set(range(rules.FIRST_LINK_MINOR, rules.LAST_LINK_MINOR + 1)))


def test_each_direction_is_shaped_apart() -> None:
    assert rules.by_direction([REQUEST, ANSWER]) == {("127.0.0.4", "127.0.0.5"): [ANSWER],
                                                     ("127.0.0.5", "127.0.0.4"): [REQUEST]}


def test_kill_filter_spares_the_proxys_sockets() -> None:
    assert rules.kill_filter(REQUEST) == ["ss", "-K", "-t", "src", "127.0.0.5", "dst", "127.0.0.4", "dport", "=",
                                          ":9092", "fwmark", "!=", hex(rules.PROXY_MARK)]
