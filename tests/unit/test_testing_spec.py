"""tidelog.testing's pure parts: the cluster shape (ClusterSpec), the plugin's marker and ini parsing,
and test-derived topic names."""

from __future__ import annotations

import re

import pytest

from tidelog.testing.cluster import ClusterSpec
from tidelog.testing.faults import NO_NETWORK_NEMESIS, Fault, unavailable
from tidelog.testing.plugin import _pairs, marker_spec, topic_name

SPECS = [
    # (kwargs, voters, separate brokers, id)
    ({}, 3, 3, "3c+3b"),
    ({"brokers": 1}, 3, 1, "3c+1b"),
    ({"brokers": 2, "controllers": 1}, 1, 2, "1c+2b"),
    ({"brokers": 1, "combined": True}, 1, 0, "1x"),
    ({"brokers": 3, "combined": True}, 3, 0, "3x"),
    ({"brokers": 5, "combined": True}, 3, 2, "3x+2b"),
    ({"brokers": 3, "controllers": 1, "combined": True}, 1, 2, "1x+2b"),
    ({"broker_config": {"num.partitions": 3}}, 3, 3, "3c+3b-config"),
    ({"topic_config": {"retention.ms": 1000}}, 3, 3, "3c+3b-config"),
]


@pytest.mark.parametrize(("kwargs", "voters", "separate", "ident"), SPECS)
def test_shape(kwargs: dict, voters: int, separate: int, ident: str) -> None:
    spec = ClusterSpec.of(**kwargs)
    assert (spec.voters, spec.separate_brokers, spec.id) == (voters, separate, ident)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"brokers": 0}, "at least 1 broker"),
    ({"controllers": 0}, "at least 1 controller"),
    ({"brokers": 1, "controllers": 2, "combined": True}, "at least as many brokers"),
])
def test_bad_shape(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClusterSpec.of(**kwargs)


def test_configs_are_kafka_strings_and_order_free() -> None:
    one = ClusterSpec.of(broker_config={"b": True, "a": 1})
    two = ClusterSpec.of(broker_config={"a": "1", "b": "true"})
    assert one == two and hash(one) == hash(two)
    assert one.broker_config == (("a", "1"), ("b", "true"))


class Mark:
    def __init__(self, *args: object, **kwargs: object) -> None:
        self.args, self.kwargs = args, kwargs


def test_marker_overrides_the_default() -> None:
    default = ClusterSpec.of(brokers=2, broker_config={"x.y": "1"})
    spec = marker_spec(Mark(combined=True, brokers=1), default)  # type: ignore[arg-type]
    assert spec == ClusterSpec.of(brokers=1, combined=True, broker_config={"x.y": "1"})
    assert marker_spec(Mark(combined=True, brokers=1), default) is spec  # type: ignore[arg-type]  # interned


@pytest.mark.parametrize(("mark", "message"), [
    (Mark(3), "keyword arguments only"),
    (Mark(nodes=3), "unknown argument"),
    (Mark(brokers=0), "at least 1 broker"),
])
def test_bad_marker(mark: Mark, message: str) -> None:
    with pytest.raises(pytest.UsageError, match=message):
        marker_spec(mark, ClusterSpec.of())  # type: ignore[arg-type]


def test_ini_pairs() -> None:
    assert _pairs(["a.b = 1", "c=x=y"], "opt") == {"a.b": "1", "c": "x=y"}
    with pytest.raises(pytest.UsageError, match="not key=value"):
        _pairs(["novalue"], "opt")


@pytest.mark.parametrize(("node_name", "serial", "expected"), [
    ("test_orders", 1, "test_orders-1"),
    ("test_x[param one/two]", 7, "test_x-param-one-two-7"),
    ("[]", 2, "topic-2"),
    ("t" * 300, 12345, "t" * (249 - 6) + "-12345"),
])
def test_topic_name(node_name: str, serial: int, expected: str) -> None:
    name = topic_name(node_name, serial)
    assert name == expected
    assert len(name) <= 249 and re.fullmatch(r"[a-zA-Z0-9._-]+", name)


def test_a_fault_is_undone_once() -> None:
    calls: list[int] = []
    fault = Fault("kill", 4, lambda: calls.append(4))
    with fault as same:
        assert same is fault and not fault.undone
    fault.undo()
    assert calls == [4] and fault.undone
    assert repr(fault) == "Fault(kill node 4, undone)"


def test_an_unavailable_fault_skips_the_test_with_its_reason() -> None:
    with pytest.raises(pytest.skip.Exception, match="network nemesis"):
        unavailable(NO_NETWORK_NEMESIS)
