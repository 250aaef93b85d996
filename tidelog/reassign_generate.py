"""`tidelog reassign --generate`: kafka-reassign-partitions.sh's proposal, pure.

    tidelog reassign --generate --topics-to-move-json-file topics.json --broker-list 4,5,6 [--disable-rack-aware]

topics.json is Kafka's {"version": 1, "topics": [{"topic": "orders"}, ...]}. For each topic the
proposal keeps its partition count and replication factor and places its replicas on the listed
brokers with the placement of new topics (`metadata.placement`: Kafka's AdminUtils walk, rack-aware
from broker.rack), a random start as Kafka's tool draws one. As in Kafka's
ReassignPartitionsCommand, rack awareness needs every listed broker to have a rack or none to
(else "Not all brokers have rack information...", unless --disable-rack-aware), and a listed id
that is not a registered broker is refused. Output: the current assignment and the proposal,
each a plan file --execute takes (log_dirs "any", as Kafka writes them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from random import Random
from typing import Any

from metadata.placement import PlacementError, place_replicas
from tidelog.cli_common import UsageError

Plan = list[dict[str, Any]]
Assignment = Mapping[tuple[str, int], Sequence[int]]


@dataclass(frozen=True, slots=True)
class GenerateBroker:
    """A listed broker as placement reads it (rack None when rack awareness is off)."""

    broker_id: int
    rack: str | None
    fenced: bool = False
    in_controlled_shutdown: bool = False


def parse_topics_to_move(document: Any, source: str) -> list[str]:
    """The topic names of Kafka's topics-to-move file, in order, without repeats."""
    topics = document.get("topics") if isinstance(document, dict) else None
    if not isinstance(topics, list) or not topics:
        raise UsageError(f'{source}: expected {{"version": 1, "topics": [{{"topic": "name"}}, ...]}}')
    names: list[str] = []
    for i, entry in enumerate(topics):
        name = entry.get("topic") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            raise UsageError(f"{source}: topics[{i}] needs a \"topic\" name, got {entry!r}")
        if name not in names:
            names.append(name)
    return names


def parse_broker_list(text: str) -> list[int]:
    """--broker-list "4,5,6": distinct non-negative broker ids."""
    try:
        ids = [int(part) for part in text.split(",")]
    except ValueError:
        raise UsageError(f"--broker-list {text!r}: expected broker ids separated by commas, e.g. 4,5,6") from None
    if any(i < 0 for i in ids) or len(set(ids)) != len(ids):
        raise UsageError(f"--broker-list {text!r}: broker ids must be distinct and not negative")
    return ids


def listed_brokers(registered: Sequence[Mapping[str, Any]], broker_ids: Sequence[int], *,
                   rack_aware: bool) -> list[GenerateBroker]:
    """The listed brokers from GET /v1/brokers, racks kept only when rack-aware (Kafka's rule)."""
    by_id = {int(b["broker_id"]): b for b in registered}
    unknown = sorted(set(broker_ids) - set(by_id))
    if unknown:
        raise UsageError(f"--broker-list names broker(s) {unknown} that are not registered "
                         f"(registered: {sorted(by_id)})")
    out = [GenerateBroker(i, by_id[i].get("rack") if rack_aware else None, bool(by_id[i].get("fenced")),
                          bool(by_id[i].get("in_controlled_shutdown"))) for i in sorted(broker_ids)]
    racked = sum(1 for b in out if b.rack)
    if rack_aware and 0 < racked < len(out):
        raise UsageError("Not all brokers have rack information. Add --disable-rack-aware in command line to "
                         "make replica assignment without rack information.")
    return out


def generate(brokers: Sequence[GenerateBroker], current: Assignment, topics: Sequence[str],
             rng: Random) -> tuple[Plan, Plan]:
    """(current, proposed) plans for `topics`, partitions in order; UsageError when one cannot be placed."""
    missing = [t for t in topics if not any(key[0] == t for key in current)]
    if missing:
        raise UsageError(f"topic(s) {missing} do not exist")
    before: Plan = []
    after: Plan = []
    for topic in topics:
        partitions = sorted((p, list(r)) for (t, p), r in current.items() if t == topic)
        try:
            placed = place_replicas(brokers, partitions=len(partitions), replication_factor=len(partitions[0][1]),
                                    rng=rng)
        except PlacementError as exc:
            raise UsageError(f"topic {topic}: {exc}") from None
        for partition, replicas in partitions:
            before.append(_entry(topic, partition, replicas))
            after.append(_entry(topic, partition, list(placed[partition])))
    return before, after


def _entry(topic: str, partition: int, replicas: list[int]) -> dict[str, Any]:
    return {"topic": topic, "partition": partition, "replicas": replicas, "log_dirs": ["any"] * len(replicas)}


def generate_lines(before: Plan, after: Plan) -> list[str]:
    """kafka-reassign-partitions --generate's output."""
    return ["Current partition replica assignment", json.dumps({"version": 1, "partitions": before}), "",
            "Proposed partition reassignment configuration", json.dumps({"version": 1, "partitions": after})]
