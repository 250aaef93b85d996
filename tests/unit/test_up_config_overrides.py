"""`tidelog up --broker-config K=V / --controller-config K=V`: the properties text rule and how
`LocalCluster.start` writes the overrides (spawning faked, as in test_cluster_layout: no process
starts). The real CLI with a real broker acting on an override is in test_tidelog_up.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from common.config import parse_config
from common.properties import load_properties, parse_properties, set_entries
from tests.unit.test_cluster_layout import PRIVATE, mode, no_processes, open_umask  # noqa: F401 (fixtures)
from localcluster import launcher
from localcluster.cluster_layout import LayoutError, NodeSpec, plan

COMMENT = "set by a test"


@pytest.mark.parametrize(("text", "entries", "expected"), [
    ("a=1\nb=2\n", {"b": "3"}, "a=1\n# set by a test\nb=3\n"),
    ("a=1\n", {"c": "x y"}, "a=1\n# set by a test\nc=x y\n"),
    # every earlier line of the key goes, continuation lines and a second definition included
    ("b=1\\\n  2\n# keep me\nb : 4\na=1\n\n\n", {"b": "5"}, "# keep me\na=1\n# set by a test\nb=5\n"),
    ("# only a comment\n", {"a": "tab\there"}, "# only a comment\n# set by a test\na=tab\\there\n"),
    ("a=1\n", {}, "a=1\n"),
])
def test_set_entries(text: str, entries: dict[str, str], expected: str) -> None:
    updated = set_entries(text, entries, "t.properties", COMMENT)
    assert updated == expected
    assert parse_properties(updated, "t") == {**parse_properties(text, "t"), **entries}


def test_set_entries_keeps_a_key_that_only_looks_alike() -> None:
    assert set_entries("bb=1\nb.c=2\n", {"b": "3"}, "t", COMMENT) == "bb=1\nb.c=2\n# set by a test\nb=3\n"


def start(root: Path, **kwargs: object) -> None:
    launcher.LocalCluster.start(root, controllers=1, brokers=1, raft_port=19093, admin_port=19080,
                                kafka_port=19092, metrics_port=19094, **kwargs)  # type: ignore[arg-type]


def test_overrides_go_to_their_role_on_first_start_and_again_on_restart(
        tmp_path: Path, no_processes: list[NodeSpec], open_umask: None) -> None:
    root = tmp_path.resolve()
    start(root, broker_config={"offsets.topic.num.partitions": "5"},
          controller_config={"broker.session.timeout.ms": "12000"})
    controller, broker = plan(root, controllers=1, brokers=1, raft_port=19093, admin_port=19080,
                              kafka_port=19092, metrics_port=19094)
    assert parse_config(load_properties(broker.properties_path))["offsets.topic.num.partitions"] == 5
    assert "offsets.topic.num.partitions" not in load_properties(controller.properties_path)
    assert parse_config(load_properties(controller.properties_path))["broker.session.timeout.ms"] == 12000

    edited = broker.properties_path.read_text() + "# an operator was here\nlog.retention.ms=60000\n"
    broker.properties_path.write_text(edited)
    start(root)  # no overrides: nothing rewritten
    assert broker.properties_path.read_text() == edited
    start(root, broker_config={"offsets.topic.num.partitions": "7"})
    entries = load_properties(broker.properties_path)
    assert (entries["offsets.topic.num.partitions"], entries["log.retention.ms"]) == ("7", "60000")
    assert broker.properties_path.read_text().count("offsets.topic.num.partitions") == 1
    assert "# an operator was here" in broker.properties_path.read_text()
    assert mode(broker.properties_path) == mode(controller.properties_path) == PRIVATE
    assert parse_config(load_properties(controller.properties_path))["broker.session.timeout.ms"] == 12000


@pytest.mark.parametrize(("option", "entries", "message"), [
    ("broker_config", {"num.partitons": "3"}, r"broker 2: --broker-config: .*'num.partitons'"),
    ("broker_config", {"offsets.topic.num.partitions": "many"}, r"broker 2: --broker-config: .*offsets.topic.num.partitions"),
    ("controller_config", {"broker.session.timeout.ms": "-5"},
     r"controller 1: --controller-config: .*broker.session.timeout.ms"),
])
def test_a_bad_override_is_refused_before_anything_is_written_or_started(
        tmp_path: Path, no_processes: list[NodeSpec], option: str, entries: dict[str, str], message: str) -> None:
    root = tmp_path.resolve()
    start(root)
    before = {p: p.read_bytes() for p in root.rglob("*.properties")}
    no_processes.clear()
    with pytest.raises(LayoutError, match=message):
        start(root, **{option: entries})
    assert no_processes == []
    assert {p: p.read_bytes() for p in root.rglob("*.properties")} == before


def test_a_combined_node_takes_both_sets_and_refuses_a_clash(
        tmp_path: Path, no_processes: list[NodeSpec]) -> None:
    root = tmp_path.resolve()
    launcher.LocalCluster.start(root, controllers=1, combined=True, broker_config={"offsets.topic.num.partitions": "4"},
                                controller_config={"broker.session.timeout.ms": "10000"})
    node = plan(root, controllers=1, combined=True)[0]
    config = parse_config(load_properties(node.properties_path))
    assert (config["offsets.topic.num.partitions"], config["broker.session.timeout.ms"]) == (4, 10000)
    with pytest.raises(LayoutError, match="different values for offsets.topic.num.partitions"):
        launcher.LocalCluster.start(root, broker_config={"offsets.topic.num.partitions": "4"},
                                    controller_config={"offsets.topic.num.partitions": "2"})
