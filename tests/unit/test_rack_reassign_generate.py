"""tidelog/reassign_generate.py: `tidelog reassign --generate`'s proposals, rack-aware as Kafka's
kafka-reassign-partitions.sh, and its refusals."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from tidelog.cli_common import UsageError
from tidelog.reassign_generate import (
    GenerateBroker,
    generate,
    generate_lines,
    listed_brokers,
    parse_broker_list,
    parse_topics_to_move,
)


def registered(*brokers: tuple[int, str | None]) -> list[dict[str, Any]]:
    return [{"broker_id": b, "rack": rack, "fenced": False, "in_controlled_shutdown": False} for b, rack in brokers]


SIX_IN_THREE_RACKS = registered((4, "r1"), (5, "r2"), (6, "r3"), (7, "r1"), (8, "r2"), (9, "r3"))
CURRENT = {("orders", p): [1, 2, 3] for p in range(6)} | {("audit", 0): [1, 2]}


@pytest.mark.parametrize("seed", range(20))
def test_each_partition_spans_the_racks_and_keeps_its_size(seed: int) -> None:
    brokers = listed_brokers(SIX_IN_THREE_RACKS, [4, 5, 6, 7, 8, 9], rack_aware=True)
    before, after = generate(brokers, CURRENT, ["orders", "audit"], random.Random(seed))
    assert [(e["topic"], e["partition"]) for e in after] == [("orders", p) for p in range(6)] + [("audit", 0)]
    assert before[0] == {"topic": "orders", "partition": 0, "replicas": [1, 2, 3], "log_dirs": ["any"] * 3}
    racks = {b["broker_id"]: b["rack"] for b in SIX_IN_THREE_RACKS}
    for entry in after:
        replicas = entry["replicas"]
        assert len(replicas) == len(CURRENT[(entry["topic"], entry["partition"])])
        assert set(replicas) <= set(racks)
        assert len({racks[r] for r in replicas}) == len(replicas), entry  # one replica per rack
    leaders = [e["replicas"][0] for e in after if e["topic"] == "orders"]
    assert sorted(leaders) == [4, 5, 6, 7, 8, 9]  # leaders spread round-robin


def test_disable_rack_aware_drops_the_racks() -> None:
    mixed = registered((4, "r1"), (5, None), (6, "r2"))
    assert [b.rack for b in listed_brokers(mixed, [4, 5, 6], rack_aware=False)] == [None, None, None]


@pytest.mark.parametrize(("brokers", "ids", "message"), [
    (registered((4, "r1"), (5, None), (6, "r2")), [4, 5, 6], "Not all brokers have rack information"),
    (SIX_IN_THREE_RACKS, [4, 11], r"broker\(s\) \[11\] that are not registered"),
])
def test_listed_broker_refusals(brokers: list[dict[str, Any]], ids: list[int], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        listed_brokers(brokers, ids, rack_aware=True)


def test_a_replication_factor_above_the_listed_brokers_is_refused() -> None:
    two = [GenerateBroker(4, None), GenerateBroker(5, None)]
    with pytest.raises(UsageError, match="topic orders: replication factor 3 is larger than the 2"):
        generate(two, CURRENT, ["orders"], random.Random(0))


def test_an_unknown_topic_is_refused() -> None:
    with pytest.raises(UsageError, match=r"topic\(s\) \['nope'\] do not exist"):
        generate([GenerateBroker(4, None)], CURRENT, ["nope"], random.Random(0))


@pytest.mark.parametrize(("document", "expected"), [
    ({"version": 1, "topics": [{"topic": "a"}, {"topic": "b"}, {"topic": "a"}]}, ["a", "b"]),
])
def test_topics_to_move(document: Any, expected: list[str]) -> None:
    assert parse_topics_to_move(document, "f.json") == expected


@pytest.mark.parametrize("document", [[], {"topics": []}, {"topics": [{"name": "a"}]}, {"topics": [{"topic": ""}]}])
def test_bad_topics_to_move_files(document: Any) -> None:
    with pytest.raises(UsageError, match="f.json"):
        parse_topics_to_move(document, "f.json")


@pytest.mark.parametrize(("text", "ids"), [("4,5,6", [4, 5, 6]), ("7", [7])])
def test_broker_list(text: str, ids: list[int]) -> None:
    assert parse_broker_list(text) == ids


@pytest.mark.parametrize("text", ["4,,5", "a", "4,-1", "4,4"])
def test_bad_broker_lists(text: str) -> None:
    with pytest.raises(UsageError, match="--broker-list"):
        parse_broker_list(text)


def test_output_is_two_plan_files() -> None:
    before = [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["any"]}]
    after = [{"topic": "t", "partition": 0, "replicas": [4], "log_dirs": ["any"]}]
    lines = generate_lines(before, after)
    assert lines[0] == "Current partition replica assignment" and lines[3] == "Proposed partition reassignment configuration"
    assert json.loads(lines[4]) == {"version": 1, "partitions": after}
