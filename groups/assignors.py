"""The server-side assignors of KIP-848: `uniform` (the default) and `range`.

    target = assign("uniform", members, topics, current_target)

`members` maps each member id to the topic ids it subscribes to; `topics` maps a topic id to
its partition count; `current_target` is the group's target assignment before this epoch, so
both assignors are sticky where Kafka's are: a member keeps the partitions it was given as
long as they stay subscribed and the balance allows. Pure functions: ids are sorted before
iterating so every broker, and every run, computes the same target.

uniform (Kafka's UniformAssignor): a partition goes only to a subscriber of its topic, and no
member holds two or more partitions more than another subscriber of one of its partitions
could take: with one subscription for all (the common case) every member gets ⌊n/m⌋ or
⌈n/m⌉. Kafka's general builder aims at the same balance; its exact tie-breaks (which KIP-848
does not specify) differ: ours go by member id and partition order.

range (Kafka's RangeAssignor, server side): per topic, its subscribers sorted by member id get
consecutive ranges of partitions, the first n % m members one more. Sticky as Kafka 3.7+'s:
a member keeps those of its previous partitions that fit its new range size.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from groups.consumer_records import Assignment, TopicIdPartition

UNIFORM: Final = "uniform"
RANGE: Final = "range"
ASSIGNORS: Final = (UNIFORM, RANGE)  # group.consumer.assignors: the first is the default
Subscriptions = Mapping[str, frozenset[str]]  # member id -> subscribed topic ids
PartitionCounts = Mapping[str, int]  # topic id -> partitions
Target = Mapping[str, Assignment]  # member id -> its target partitions
PartitionRacks = Mapping[TopicIdPartition, frozenset[str]]  # the racks of each partition's replicas
NO_RACKS: Final[PartitionRacks] = {}


class UnsupportedAssignor(ValueError):
    """An assignor name that group.consumer.assignors does not list (UNSUPPORTED_ASSIGNOR)."""


def assign(name: str, members: Subscriptions, topics: PartitionCounts, current: Target, *,
           member_racks: Mapping[str, str | None] | None = None,
           partition_racks: PartitionRacks = NO_RACKS) -> dict[str, Assignment]:
    """The target assignment of every member (empty for a member with nothing to read).
    `member_racks` (the heartbeats' rack_id) and `partition_racks` (the brokers' broker.rack of
    each partition's replicas) make `uniform` rack-aware, as Kafka's is: a new partition goes to
    a member in one of its replicas' racks when one can take it without unbalancing the group."""
    if name == UNIFORM:
        return uniform(members, topics, current, member_racks=member_racks or {}, partition_racks=partition_racks)
    if name == RANGE:
        return range_(members, topics, current)
    raise UnsupportedAssignor(f"unknown assignor {name!r}: the broker has {', '.join(ASSIGNORS)}")


def uniform(members: Subscriptions, topics: PartitionCounts, current: Target, *,
            member_racks: Mapping[str, str | None] | None = None,
            partition_racks: PartitionRacks = NO_RACKS) -> dict[str, Assignment]:
    racks = member_racks or {}
    subscribers: dict[TopicIdPartition, list[str]] = {}
    for topic_id in sorted(topics):
        who = sorted(m for m in members if topic_id in members[m])
        for p in range(topics[topic_id] if who else 0):
            subscribers[(topic_id, p)] = who
    out: dict[str, set[TopicIdPartition]] = {m: set() for m in sorted(members)}
    for m in out:  # sticky: what a member had and still subscribes to stays
        out[m].update(tp for tp in current.get(m, frozenset()) if m in subscribers.get(tp, ()))
    owner = {tp: m for m, tps in out.items() for tp in tps}
    readers = {m for who in subscribers.values() for m in who}
    quota = -(-len(subscribers) // len(readers)) if readers else 0  # ⌈partitions / members⌉
    for tp in sorted(subscribers):  # the rest to the least loaded subscriber (ties by member id)
        if tp not in owner:
            # rack-aware: a subscriber in one of its replicas' racks while it holds less than its
            # quota (the moves below restore the balance where subscriptions differ)
            local = [m for m in subscribers[tp] if racks.get(m) is not None
                     and racks[m] in partition_racks.get(tp, frozenset()) and len(out[m]) < quota]
            m = min(local or subscribers[tp], key=lambda m: (len(out[m]), m))
            out[m].add(tp)
            owner[tp] = m
    # Then move partitions from a member to a subscriber holding two or more fewer until none
    # can move: each move lowers the sum of squared loads, so the loop ends (at most
    # partitions² moves; in practice one pass).
    moved = True
    while moved:
        moved = False
        for tp in sorted(owner):
            m = owner[tp]
            target = min(subscribers[tp], key=lambda c: (len(out[c]), c))
            if len(out[m]) - len(out[target]) >= 2:
                out[m].discard(tp)
                out[target].add(tp)
                owner[tp] = target
                moved = True
    return {m: frozenset(ps) for m, ps in out.items()}


def range_(members: Subscriptions, topics: PartitionCounts, current: Target) -> dict[str, Assignment]:
    out: dict[str, set[TopicIdPartition]] = {m: set() for m in sorted(members)}
    for topic_id in sorted(topics):
        subscribers = sorted(m for m in members if topic_id in members[m])
        count = topics[topic_id]
        if not subscribers or count <= 0:
            continue
        base, extra = divmod(count, len(subscribers))
        quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(subscribers)}
        free = set(range(count))
        for m in subscribers:  # sticky: keep previous partitions of this topic within the quota
            keep = sorted(p for t, p in current.get(m, frozenset()) if t == topic_id and p in free)[:quota[m]]
            out[m].update((topic_id, p) for p in keep)
            free.difference_update(keep)
        for m in subscribers:  # the rest in ascending order, a member's new ones contiguous
            have = sum(1 for t, _ in out[m] if t == topic_id)
            for p in sorted(free)[:quota[m] - have]:
                out[m].add((topic_id, p))
                free.discard(p)
    return {m: frozenset(ps) for m, ps in out.items()}
