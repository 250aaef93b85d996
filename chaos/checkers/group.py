"""Kafka's promises to a consumer group, checked over the `group-*` events of a history.

- group-lost: a write the cluster acknowledged and still holds (the final read has it) that
  no member ever polled, although the group caught up to every high watermark: a committed
  offset skipped records across a rebalance or a coordinator failover.
- group-duplicates: one (partition, offset) polled twice by the group. Kafka promises
  at-least-once across a rebalance (a member resumes from the last committed offset, which
  may be behind what the previous owner polled), so a duplicate with a rebalance (any
  `group-assign`) between its two polls is counted, not failed; one without is an anomaly.
- group-non-monotonic: within one member's generation, its polls of a partition go forward.
- group-commit-lost: a member given a partition resumes at the committed offset, fetched
  after its assignment; resuming below an offset the coordinator acknowledged before that
  assignment means the coordinator lost a commit (e.g. across its own failover).

A history without group events (no `group_consumers` in the workload) passes all three.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from chaos.checkers.result import CheckResult, examples

if TYPE_CHECKING:  # a type alias; the history's file and clock stay in chaos.history
    from chaos.history import Event

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

NAMES = ("group-lost", "group-duplicates", "group-non-monotonic", "group-commit-lost")


def _has_group(events: Sequence[Event]) -> bool:
    return any(e["kind"] in ("group-assign", "group-read") for e in events)


def check_unconsumed(events: Sequence[Event], *, name: str, consumed: set[str], catch_up: str,
                     verb: str, detail: Mapping[str, str] | None = None) -> CheckResult:
    """Acknowledged writes the final read holds that the group never `verb` (values not in
    `consumed`), with whether its `catch_up` note says it reached every high watermark. Shared
    by the classic, consumer-protocol and share group checkers; `detail` adds what is known of a
    value to its example line."""
    final = {(e["partition"], e["offset"]): e["value"] for e in events if e["kind"] == "final-read"}
    held = {value: where for where, value in final.items()}
    missing = sorted((e for e in events if e["kind"] == "ok" and e["value"] in held and e["value"] not in consumed),
                     key=lambda e: (e["partition"], e["offset"]))
    notes = [e for e in events if e["kind"] == "note" and e.get("what") == catch_up]
    caught_up = bool(notes) and bool(notes[-1].get("ok"))
    detail = detail or {}
    lines = [f"value {e['value']} acknowledged at {e['partition']}/{e['offset']} (t={e['t']:.3f} s), never "
             f"{verb}{detail.get(e['value'], '')}" for e in missing]
    state = "the group caught up to every high watermark" if caught_up else "the group did NOT catch up"
    return CheckResult(name, len(missing), f"{len(missing)} acknowledged writes never {verb} "
                       f"({len(consumed)} distinct values; {state})", examples(lines), {"caught_up": caught_up})


def check_group_lost(events: Sequence[Event]) -> CheckResult:
    if not _has_group(events):
        return CheckResult("group-lost", 0, "no consumer group in this workload")
    polled = {e["value"] for e in events if e["kind"] == "group-read"}
    return check_unconsumed(events, name="group-lost", consumed=polled, catch_up="group-catch-up",
                            verb="polled by a member")


def check_group_duplicates(events: Sequence[Event]) -> CheckResult:
    if not _has_group(events):
        return CheckResult("group-duplicates", 0, "no consumer group in this workload")
    first: dict[tuple[int, int], Event] = {}
    rebalances = 0  # group-assign events seen so far, of any member
    assigns_at_first: dict[tuple[int, int], int] = {}
    after_rebalance = 0
    unexplained: list[str] = []
    for e in events:
        if e["kind"] == "group-assign":
            rebalances += 1
            continue
        if e["kind"] != "group-read":
            continue
        key = (e["partition"], e["offset"])
        if key not in first:
            first[key] = e
            assigns_at_first[key] = rebalances
            continue
        if rebalances > assigns_at_first[key]:
            after_rebalance += 1
        else:
            f = first[key]
            unexplained.append(f"{key[0]}/{key[1]} polled by {f['member']} (t={f['t']:.3f} s) and again by "
                               f"{e['member']} (t={e['t']:.3f} s) with no rebalance between")
    return CheckResult("group-duplicates", len(unexplained),
                       f"{after_rebalance} records polled again after a rebalance (at-least-once, counted), "
                       f"{len(unexplained)} without one", examples(unexplained),
                       {"after_rebalance": after_rebalance, "rebalances": rebalances})


def check_group_order(events: Sequence[Event]) -> CheckResult:
    if not _has_group(events):
        return CheckResult("group-non-monotonic", 0, "no consumer group in this workload")
    last: dict[tuple[str, int, int], int] = {}
    back: list[str] = []
    for e in events:
        if e["kind"] != "group-read":
            continue
        key = (str(e["member"]), int(e["generation"]), int(e["partition"]))
        previous = last.get(key)
        last[key] = e["offset"]
        if previous is not None and e["offset"] <= previous:
            back.append(f"member {key[0]} generation {key[1]} partition {key[2]}: offset {previous} then "
                        f"{e['offset']} (t={e['t']:.3f} s)")
    return CheckResult("group-non-monotonic", len(back), f"{len(back)} polls went back within a member's "
                       "generation", examples(back))


def check_group_resume(events: Sequence[Event]) -> CheckResult:
    if not _has_group(events):
        return CheckResult("group-commit-lost", 0, "no consumer group in this workload")
    committed: dict[int, int] = {}  # partition -> highest offset acknowledged so far
    at_assign: dict[tuple[str, int], dict[int, int]] = {}  # (member, generation) -> committed then
    resumed: set[tuple[str, int, int]] = set()
    below: list[str] = []
    for e in events:
        if e["kind"] == "group-commit":
            committed[e["partition"]] = max(committed.get(e["partition"], 0), e["offset"])
        elif e["kind"] == "group-assign":
            at_assign[(str(e["member"]), int(e["generation"]))] = dict(committed)
        elif e["kind"] == "group-read":
            member, generation, partition = str(e["member"]), int(e["generation"]), int(e["partition"])
            if (member, generation, partition) in resumed:
                continue
            resumed.add((member, generation, partition))
            floor = at_assign.get((member, generation), {}).get(partition, 0)
            if e["offset"] < floor:
                below.append(f"member {member} generation {generation} resumed partition {partition} at "
                             f"{e['offset']}, below the commit of {floor} acknowledged before (t={e['t']:.3f} s)")
    return CheckResult("group-commit-lost", len(below), f"{len(below)} of {len(resumed)} assignments resumed below "
                       "an acknowledged commit", examples(below))


def check_group(events: Sequence[Event]) -> list[CheckResult]:
    return [check_group_lost(events), check_group_duplicates(events), check_group_order(events),
            check_group_resume(events)]
