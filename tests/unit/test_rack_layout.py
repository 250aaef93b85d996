"""localcluster/racks.py: which broker.rack each broker of a local cluster gets (`tidelog up --racks N`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.properties import parse_properties
from localcluster.cluster_layout import BROKER, COMBINED, CONTROLLER, NodeSpec
from localcluster.racks import RackError, broker_racks, with_racks


def node(node_id: int, role: str, root: Path = Path("/nonexistent")) -> NodeSpec:
    return NodeSpec(node_id, role, f"127.0.0.{node_id}", 9093, 8080, root / f"node-{node_id}", 9092, 9101)


THREE_BY_THREE = [node(1, CONTROLLER), node(2, CONTROLLER), node(3, CONTROLLER),
                  node(4, BROKER), node(5, BROKER), node(6, BROKER), node(7, BROKER)]

# (nodes, racks, expected broker.rack by node id)
CASES = [
    pytest.param(THREE_BY_THREE, 0, {}, id="no-racks"),
    pytest.param(THREE_BY_THREE, 3, {4: "rack-1", 5: "rack-2", 6: "rack-3", 7: "rack-1"}, id="round-robin"),
    pytest.param(THREE_BY_THREE, 1, {4: "rack-1", 5: "rack-1", 6: "rack-1", 7: "rack-1"}, id="one-rack"),
    pytest.param([node(2, COMBINED), node(1, COMBINED), node(3, BROKER)], 2, {1: "rack-1", 2: "rack-2", 3: "rack-1"},
                 id="combined-nodes-by-id"),
]


@pytest.mark.parametrize(("nodes", "racks", "expected"), CASES)
def test_broker_racks(nodes: list[NodeSpec], racks: int, expected: dict[int, str]) -> None:
    assert broker_racks(nodes, racks) == expected


@pytest.mark.parametrize(("racks", "message"), [
    (5, "--racks 5 is more than the 4 broker"),
    (-1, "--racks must be between 0 and 64, got -1"),
    (65, "--racks must be between 0 and 64, got 65"),
])
def test_bad_rack_counts(racks: int, message: str) -> None:
    with pytest.raises(RackError, match=message):
        broker_racks(THREE_BY_THREE, racks)


def test_only_new_brokers_files_get_a_rack(tmp_path: Path) -> None:
    nodes = [node(1, CONTROLLER, tmp_path), node(4, BROKER, tmp_path), node(5, BROKER, tmp_path)]
    existing = nodes[2].properties_path
    existing.parent.mkdir(parents=True)
    existing.write_text("node.id=5\n")  # made by an earlier `up`: its rack (or none) stays
    files = {1: "node.id=1\n", 4: "node.id=4\n", 5: "node.id=5\nlog.dirs=/x\n"}
    out = with_racks(files, nodes, broker_racks(nodes, 2))
    assert parse_properties(out[4], "4") == {"node.id": "4", "broker.rack": "rack-1"}
    assert out[1] == files[1] and out[5] == files[5]
