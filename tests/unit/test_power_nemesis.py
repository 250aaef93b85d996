"""chaos.nemeses.power's choices: which roles get the layer, which nodes a power fault takes."""

from __future__ import annotations

import random
from typing import Any

import pytest

from chaos.engine.targets import TargetError
from chaos.nemeses.power import needs_brokers, power_targets
from chaos.scenarios.spec import ClusterShape, Fault, FaultAction

SHAPE = ClusterShape(controllers=3, brokers=3)


@pytest.mark.parametrize(("targets", "brokers"), [
    (["active-controller", "controller-follower", "majority", "minority", "controllers"], False),
    (["node:3"], False),
    (["node:4"], True),
    (["nodes:1,2"], False),
    (["nodes:2,5"], True),
    (["leader:chaos:0"], True),
    (["controllers", "replicas:chaos:1"], True),
    (["broker:random"], True),
])
def test_only_the_roles_a_scenario_powers_off_are_mounted(targets: list[str], brokers: bool) -> None:
    assert needs_brokers(targets, SHAPE) is brokers


class View:
    """ClusterView's reads the nemesis makes, from fixed answers."""

    def partitions(self, topic: str) -> list[dict[str, Any]]:
        return [{"partition": 0, "leader": 5, "replicas": [6, 4, 5]}, {"partition": 1, "leader": 4,
                                                                      "replicas": [4, 5, 6]}]

    def partition(self, topic: str, number: int) -> dict[str, Any]:
        return self.partitions(topic)[number]

    def active_controller(self) -> int:
        return 2


def fault(target: str, **params: Any) -> Fault:
    return Fault(FaultAction.POWER, target, 1.0, 1.0, params=tuple(sorted(params.items())))


@pytest.mark.parametrize("seed", range(5))
def test_a_partial_power_loss_takes_the_leader_first(seed: int) -> None:
    chosen, replicas = power_targets(fault("replicas:chaos:0", nodes=2), [4, 5, 6], View(),  # type: ignore[arg-type]
                                     "chaos", random.Random(seed))
    assert 5 in chosen and len(chosen) == 2
    assert replicas == {"0": [4, 5, 6], "1": [4, 5, 6]}


def test_a_controller_majority_takes_the_active_controller_first() -> None:
    chosen, _ = power_targets(fault("controllers", nodes=2), [1, 2, 3], View(), "chaos",  # type: ignore[arg-type]
                              random.Random(0))
    assert 2 in chosen and len(chosen) == 2


def test_a_controller_majority_needs_no_active_controller() -> None:
    class Electing(View):
        def active_controller(self) -> int:
            raise TargetError("no active controller right now")

    chosen, _ = power_targets(fault("controllers", nodes=2), [1, 2, 3], Electing(), "chaos",  # type: ignore[arg-type]
                              random.Random(0))
    assert len(chosen) == 2


def test_without_nodes_every_target_goes() -> None:
    chosen, _ = power_targets(fault("replicas:chaos:1"), [4, 5, 6], View(), "chaos",  # type: ignore[arg-type]
                              random.Random(0))
    assert chosen == [4, 5, 6]


@pytest.mark.parametrize("nodes", [0, 4, "two"])
def test_a_bad_node_count_names_the_parameter(nodes: Any) -> None:
    with pytest.raises(TargetError, match="params.nodes"):
        power_targets(fault("replicas:chaos:1", nodes=nodes), [4, 5, 6], View(), "chaos",  # type: ignore[arg-type]
                      random.Random(0))
