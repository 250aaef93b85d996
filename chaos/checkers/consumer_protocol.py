"""KIP-848's promises to a consumer-protocol group, checked over the `cgroup-*` events of a history
(chaos.engine.member_client's consumer members, one process per incarnation).

An owner is one incarnation of one member, (member, incarnation). It holds a partition from the
`cgroup-assign` naming it until a `cgroup-revoke` naming it (on_revoke, or on_lost when the
coordinator fenced it) or its `member-end` (its process ended: stopped, or killed by a fault).

- cgroup-overlap: KIP-848 reconciles incrementally: a partition is revoked from its owner before
  it is assigned to another. A `cgroup-assign` of a partition another owner still holds is an
  anomaly, unless that owner's holding ended by being fenced (`lost`): a zombie the coordinator
  had already removed, which Kafka allows (it can no longer commit); those are counted.
- cgroup-duplicates: one (partition, offset) polled again, with no end of the previous poller's
  holding of that partition between the two polls: two members (or one, twice) consumed it in
  one generation. Polled again after such an end is Kafka's at-least-once (the next owner
  resumes at the last committed offset), counted.
- cgroup-lost: an acknowledged write the final read holds that no member polled (the group
  caught up to every high watermark, or the summary says it did not).

A history without `cgroup-*` events passes all three. Events are taken in time order: the
members' events reach the history through relays, not in the order they happened.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from chaos.checkers.group import check_unconsumed
from chaos.checkers.result import CheckResult, examples

if TYPE_CHECKING:  # a type alias; the history's file and clock stay in chaos.history
    from chaos.history import Event

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

NAMES = ("cgroup-lost", "cgroup-duplicates", "cgroup-overlap")
CATCH_UP = "consumer-group-catch-up"  # chaos.engine.member_workload's note

Owner = tuple[str, int]  # (member, incarnation)


def _has(events: Sequence[Event]) -> bool:
    return any(str(e["kind"]).startswith("cgroup-") for e in events)


def _in_time_order(events: Sequence[Event]) -> list[Event]:
    return sorted(events, key=lambda e: float(e["t"]))  # stable: one process's events keep their order


def _owner(e: Event) -> Owner:
    return (str(e["member"]), int(e["incarnation"]))


def check_cgroup_duplicates(events: Sequence[Event]) -> CheckResult:
    if not _has(events):
        return CheckResult("cgroup-duplicates", 0, "no consumer-protocol group in this workload")
    ends: dict[tuple[Owner, int], int] = {}  # (owner, partition) -> holdings of it ended so far
    gone: set[Owner] = set()
    last: dict[tuple[int, int], tuple[Owner, int, Event]] = {}  # (partition, offset) -> its last poll
    again = 0
    unexplained: list[str] = []
    for e in _in_time_order(events):
        if e["kind"] == "cgroup-revoke":
            for p in e["partitions"]:
                ends[(_owner(e), p)] = ends.get((_owner(e), p), 0) + 1
        elif e["kind"] == "member-end":
            gone.add(_owner(e))
        elif e["kind"] == "cgroup-read":
            owner, key = _owner(e), (int(e["partition"]), int(e["offset"]))
            previous = last.get(key)
            last[key] = (owner, ends.get((owner, key[0]), 0), e)
            if previous is None:
                continue
            first_owner, ended_then, first = previous
            if first_owner in gone or ends.get((first_owner, key[0]), 0) > ended_then:
                again += 1
            else:
                unexplained.append(f"{key[0]}/{key[1]} polled by {first_owner[0]}#{first_owner[1]} "
                                   f"(t={first['t']:.3f} s) and again by {owner[0]}#{owner[1]} (t={e['t']:.3f} s) "
                                   f"with no revocation from {first_owner[0]}#{first_owner[1]} between")
    return CheckResult("cgroup-duplicates", len(unexplained),
                       f"{again} records polled again after their partition was revoked (at-least-once, counted), "
                       f"{len(unexplained)} without a revocation between", examples(unexplained),
                       {"after_revocation": again})


def check_cgroup_overlap(events: Sequence[Event]) -> CheckResult:
    if not _has(events):
        return CheckResult("cgroup-overlap", 0, "no consumer-protocol group in this workload")
    ordered = _in_time_order(events)
    # how each holding ended, in time order: a fenced owner (lost) explains an overlap
    endings: dict[tuple[Owner, int], list[tuple[float, bool]]] = {}
    for e in ordered:
        if e["kind"] == "cgroup-revoke":
            for p in e["partitions"]:
                endings.setdefault((_owner(e), p), []).append((float(e["t"]), bool(e.get("lost"))))
    held: dict[int, set[Owner]] = {}
    last_owner: dict[int, Owner] = {}
    zombies = handovers = 0
    overlaps: list[str] = []
    for e in ordered:
        if e["kind"] == "cgroup-assign":
            owner = _owner(e)
            for p in e["partitions"]:
                for other in sorted(held.get(p, set()) - {owner}):
                    after = [lost for t, lost in endings.get((other, p), []) if t >= float(e["t"])]
                    if after and after[0]:
                        zombies += 1
                    else:
                        overlaps.append(f"partition {p} assigned to {owner[0]}#{owner[1]} at t={e['t']:.3f} s "
                                        f"while {other[0]}#{other[1]} still held it")
                held.setdefault(p, set()).add(owner)
                handovers += last_owner.get(p, owner) != owner
                last_owner[p] = owner
        elif e["kind"] == "cgroup-revoke":
            for p in e["partitions"]:
                held.get(p, set()).discard(_owner(e))
        elif e["kind"] == "member-end":
            for owners in held.values():
                owners.discard(_owner(e))
    return CheckResult("cgroup-overlap", len(overlaps),
                       f"{len(overlaps)} partitions assigned before their owner's revocation; {zombies} more held "
                       f"by an owner the coordinator had fenced (counted); {handovers} moved from one owner to "
                       "another", examples(overlaps), {"fenced": zombies, "handovers": handovers})


def check_cgroup_lost(events: Sequence[Event]) -> CheckResult:
    if not _has(events):
        return CheckResult("cgroup-lost", 0, "no consumer-protocol group in this workload")
    polled = {str(e["value"]) for e in events if e["kind"] == "cgroup-read"}
    return check_unconsumed(events, name="cgroup-lost", consumed=polled, catch_up=CATCH_UP,
                            verb="polled by a consumer-protocol member")


def check_consumer_protocol(events: Sequence[Event]) -> list[CheckResult]:
    return [check_cgroup_lost(events), check_cgroup_duplicates(events), check_cgroup_overlap(events)]
