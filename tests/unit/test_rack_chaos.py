"""The chaos engine's racks: `[cluster] racks`, `workload.client_rack` and the `rack:NAME` target
(chaos/scenarios/spec.py, chaos/engine/targets.py), and the shipped rack-partition scenario."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from chaos.cli import find_scenario
from chaos.engine.targets import TargetError, resolve
from chaos.scenarios.spec import ScenarioError, parse_scenario

BASE = """
[cluster]
brokers = 3
{cluster}
[workload]
{workload}
"""


def scenario(cluster: str = "", workload: str = "") -> Any:
    return parse_scenario(BASE.format(cluster=cluster, workload=workload))


def test_racks_and_client_rack_are_read() -> None:
    parsed = scenario("racks = 3", 'client_rack = "rack-2"')
    assert (parsed.cluster.racks, parsed.workload.client_rack) == (3, "rack-2")
    default = scenario()
    assert (default.cluster.racks, default.workload.client_rack) == (0, None)


@pytest.mark.parametrize(("cluster", "workload", "message"), [
    ("racks = 4", "", "cluster.racks: expected 0 to the 3 broker"),
    ("racks = -1", "", "cluster.racks: expected 0 to the 3 broker"),
    ('racks = "3"', "", "cluster.racks: expected int"),
    ("", "client_rack = 1", "workload.client_rack: expected str"),
])
def test_bad_rack_settings_name_the_field(cluster: str, workload: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        scenario(cluster, workload)


class View:
    """What resolve reads: the cluster's nodes and GET /v1/brokers."""

    def __init__(self, racks: dict[int, str | None]) -> None:
        nodes = [SimpleNamespace(spec=SimpleNamespace(node_id=i)) for i in (1, 2, 3, *racks)]
        self.cluster = SimpleNamespace(nodes=nodes, controllers=nodes[:3], brokers=nodes[3:])
        self._brokers = [{"broker_id": b, "rack": r} for b, r in racks.items()]

    def brokers(self) -> list[dict[str, Any]]:
        return self._brokers


VIEW = View({4: "rack-1", 5: "rack-2", 6: "rack-1", 7: None})


@pytest.mark.parametrize(("selector", "ids"), [("rack:rack-1", [4, 6]), ("rack:rack-2", [5])])
def test_rack_target(selector: str, ids: list[int]) -> None:
    assert resolve(selector, VIEW, random.Random(0)) == ids  # type: ignore[arg-type]


def test_a_rack_without_brokers_is_an_error() -> None:
    with pytest.raises(TargetError, match="'rack:rack-9' names"):
        resolve("rack:rack-9", VIEW, random.Random(0))  # type: ignore[arg-type]


def test_the_shipped_rack_partition_scenario() -> None:
    shipped = find_scenario("rack-partition")
    assert shipped.cluster.racks == 3 and shipped.workload.client_rack == "rack-1"
    assert [f.target for f in shipped.faults] == ["rack:rack-1"]
    assert ("replica.selector.class", "org.apache.kafka.common.replica.RackAwareReplicaSelector") \
        in shipped.cluster.properties
