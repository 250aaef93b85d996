"""KIP-932's promises to a share group, checked over the `share-*` events of a history
(chaos.engine.member_client's share members: `share-read` per delivery with its delivery count,
`share-ack` per acknowledgement as it is sent (`pending`), then with its partition's answer: ok
true, false or null = unknown; a member killed in between leaves it pending, i.e. unknown).

A record (partition, offset) is delivered, each time to one member, with a delivery count that
grows by one per acquisition; it is finished when an ACCEPT is taken, or archived when its
delivery count reached `group.share.delivery.count.limit` without one (the workload's poison
values are RELEASEd every time, so they must end archived).

- share-duplicates: a record accepted twice (two ACCEPTs the leader took), or delivered again
  with a higher count after an ACCEPT the leader took. A redelivery after a RELEASE, after a
  refused or unanswered acknowledgement, or after the lock ran out (a member killed or paused
  past the lock duration) is counted, not failed.
- share-double-delivery: two deliveries of one record with the same delivery count (two members
  held one acquisition), or a count past the limit. Deliveries are compared by count, not by
  when a member saw them (see `records`). After a broker fault between them, the
  same count again is counted, not failed: Kafka persists a record's state when it is
  acknowledged or its lock runs out, not when it is acquired, so a new partition leader hands
  out again what the old one had acquired, with the persisted count.
- share-lost: an acknowledged write the final read holds that the group neither accepted (an
  ACCEPT not refused) nor archived (delivered up to the limit).
- share-deliveries (a measurement): accepted, archived, redelivered and why.

A history without `share-*` events passes all of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from chaos.checkers.group import check_unconsumed
from chaos.checkers.result import CheckResult, examples

if TYPE_CHECKING:  # a type alias; the history's file and clock stay in chaos.history
    from chaos.history import Event

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

NAMES = ("share-lost", "share-duplicates", "share-double-delivery")
CATCH_UP = "share-group-catch-up"  # chaos.engine.member_workload's notes
CONFIG = "share-group-config"
PENDING = "pending"  # an acknowledgement sent, its answer not (yet) recorded: a killed member's stays so
NODE_FAULTS = ("kill", "pause", "shutdown", "power", "disk", "partition", "drop")  # a leader may move


@dataclass(slots=True)
class Delivery:
    t: float
    member: str
    incarnation: int
    count: int
    acks: list[tuple[float, str, bool | None, str | None]] = field(default_factory=list)  # (t, type, ok, error)

    def accepted(self) -> bool | None:
        """True: an ACCEPT the leader took; None: one with an unknown answer; False: none."""
        answers = [ok for _, kind, ok, _ in self.acks if kind == "accept"]
        return True if True in answers else None if None in answers else False


@dataclass(slots=True)
class Record:
    partition: int
    offset: int
    value: str
    deliveries: list[Delivery] = field(default_factory=list)


def _has(events: Sequence[Event]) -> bool:
    return any(str(e["kind"]).startswith("share-") for e in events)


def delivery_limit(events: Sequence[Event]) -> int:
    return next((int(e["delivery_limit"]) for e in events if e["kind"] == "note" and e.get("what") == CONFIG), 0)


def records(events: Sequence[Event]) -> dict[tuple[int, int], Record]:
    """Each record's deliveries by delivery count, each with the acknowledgements its member sent
    for it. Not by the time a member saw them: a member paused inside poll() returns, after the
    pause, records the leader gave it before, since redelivered to others with higher counts."""
    found: dict[tuple[int, int], Record] = {}
    for e in sorted(events, key=lambda e: float(e["t"])):  # relayed: not in the order they happened
        if e["kind"] == "share-read":
            key = (int(e["partition"]), int(e["offset"]))
            record = found.setdefault(key, Record(key[0], key[1], str(e["value"])))
            record.deliveries.append(Delivery(float(e["t"]), str(e["member"]), int(e["incarnation"]),
                                              int(e["delivery_count"])))
        elif e["kind"] == "share-ack":
            acked = found.get((int(e["partition"]), int(e["offset"])))
            owner = (str(e["member"]), int(e["incarnation"]))
            mine = [d for d in acked.deliveries if (d.member, d.incarnation) == owner] if acked else []
            if mine:  # the member's latest delivery of it: it acknowledges what it polled last
                acks = mine[-1].acks
                if not e.get("pending"):  # the answer replaces the acknowledgement's sending
                    acks[:] = [a for a in acks if not (a[1] == str(e["type"]) and a[2] is None and a[3] == PENDING)]
                error = PENDING if e.get("pending") else e.get("error")
                acks.append((float(e["t"]), str(e["type"]), e.get("ok"), error))
    for record in found.values():  # in the order the leader handed them out
        record.deliveries.sort(key=lambda d: (d.count, d.t))
    return found


def _finished(record: Record, limit: int) -> str | None:
    """'accepted', 'archived' or None (neither: lost, or not yet)."""
    if any(d.accepted() is not False for d in record.deliveries):
        return "accepted"
    if limit and any(d.count >= limit for d in record.deliveries):
        return "archived"
    return None


def check_share_duplicates(events: Sequence[Event]) -> CheckResult:
    if not _has(events):
        return CheckResult("share-duplicates", 0, "no share group in this workload")
    bad: list[str] = []
    after_release = after_lock = 0
    for (p, o), record in sorted(records(events).items()):
        taken = [d for d in record.deliveries if d.accepted() is True]
        if len(taken) > 1:
            bad.append(f"{p}/{o} (value {record.value}) accepted {len(taken)} times: "
                       + ", ".join(f"{d.member}#{d.incarnation} at delivery {d.count}" for d in taken))
        elif taken and any(d.count > taken[0].count for d in record.deliveries):
            later = next(d for d in record.deliveries if d.count > taken[0].count)
            bad.append(f"{p}/{o} (value {record.value}) accepted by {taken[0].member}#{taken[0].incarnation} at "
                       f"delivery {taken[0].count}, delivered again to {later.member}#{later.incarnation} "
                       f"(delivery {later.count}, t={later.t:.3f} s)")
        for previous in record.deliveries[:-1]:
            if any(kind == "release" and ok is not False for _, kind, ok, _ in previous.acks):
                after_release += 1
            else:
                after_lock += 1
    return CheckResult("share-duplicates", len(bad),
                       f"{len(bad)} records accepted more than once or delivered after their acceptance; "
                       f"{after_release} redeliveries after a release, {after_lock} after the lock ran out or an "
                       "acknowledgement was refused or unanswered (counted)", examples(bad),
                       {"after_release": after_release, "after_lock": after_lock})


def _node_faults(events: Sequence[Event]) -> list[float]:
    return sorted(float(e["t"]) for e in events if e["kind"] == "fault-start" and e.get("targets")
                  and e.get("action") in NODE_FAULTS)


def check_share_double_delivery(events: Sequence[Event]) -> CheckResult:
    if not _has(events):
        return CheckResult("share-double-delivery", 0, "no share group in this workload")
    limit, faults = delivery_limit(events), _node_faults(events)
    bad: list[str] = []
    after_fault = over_after_fault = 0
    for (p, o), record in sorted(records(events).items()):
        for a, b in zip(record.deliveries, record.deliveries[1:]):
            if b.count > a.count:
                continue
            if any(min(a.t, b.t) <= t <= max(a.t, b.t) for t in faults):
                after_fault += 1
                continue
            bad.append(f"{p}/{o} (value {record.value}) delivered to {a.member}#{a.incarnation} (t={a.t:.3f} s) and "
                       f"to {b.member}#{b.incarnation} (t={b.t:.3f} s), both with delivery count {a.count}")
        over = [d for d in record.deliveries if limit and d.count > limit]
        if over:
            bad.append(f"{p}/{o} (value {record.value}) delivered with count {over[0].count}, past the limit {limit}")
            before = [d.t for d in record.deliveries if d.count < over[0].count]
            # which path: a new leader after a broker fault (its snapshot held the acquired count)
            over_after_fault += bool(before) and any(max(before) <= t <= over[0].t for t in faults)
    return CheckResult("share-double-delivery", len(bad),
                       f"{len(bad)} deliveries that repeat or pass a delivery count (limit {limit}); {after_fault} "
                       "repeated across a broker fault (counted)", examples(bad),
                       {"after_fault": after_fault, "over_limit_after_fault": over_after_fault})


def check_share_lost(events: Sequence[Event]) -> CheckResult:
    if not _has(events):
        return CheckResult("share-lost", 0, "no share group in this workload")
    limit, found = delivery_limit(events), records(events).values()
    finished = {r.value for r in found if _finished(r, limit) is not None}
    last = {r.value: r.deliveries[-1] for r in found if r.deliveries}
    detail = {value: f": delivered last to {d.member}#{d.incarnation} at t={d.t:.3f} s (delivery {d.count}), "
                     + (f"its {d.acks[-1][1]} answered ok={d.acks[-1][2]} ({d.acks[-1][3]})" if d.acks
                        else "not acknowledged")
              for value, d in last.items() if value not in finished}
    result = check_unconsumed(events, name="share-lost", consumed=finished, catch_up=CATCH_UP,
                              verb="accepted or archived by the share group", detail=detail)
    # per lost value, the answer to the last acknowledgement of its last delivery (or how it ended):
    # which broker path lost it
    held = {str(e["value"]) for e in events if e["kind"] == "final-read"}
    acked = {str(e["value"]) for e in events if e["kind"] == "ok"}
    answers: dict[str, int] = {}
    for value in sorted((held & acked) - finished):
        d = last.get(value)
        why = "never delivered" if d is None else str(d.acks[-1][3]) if d.acks else "not acknowledged"
        answers[why] = answers.get(why, 0) + 1
    return dataclasses.replace(result, data={**result.data, "last_answers": answers})


def share_deliveries(events: Sequence[Event]) -> CheckResult:
    if not _has(events):
        return CheckResult("share-deliveries", 0, "no share group in this workload")
    limit = delivery_limit(events)
    found = records(events).values()
    outcomes = [_finished(r, limit) for r in found]
    accepted, archived = outcomes.count("accepted"), outcomes.count("archived")
    confirmed = sum(1 for r in found if any(d.accepted() is True for d in r.deliveries))
    deliveries = sum(len(r.deliveries) for r in found)
    return CheckResult("share-deliveries", 0, f"{len(found)} records delivered {deliveries} times: {accepted} "
                       f"accepted ({confirmed} confirmed by the leader), {archived} archived at the delivery limit "
                       f"{limit}, {deliveries - len(found)} redeliveries", (),
                       {"records": len(found), "accepted": accepted, "confirmed": confirmed, "archived": archived,
                        "redeliveries": deliveries - len(found)})


def check_share(events: Sequence[Event]) -> list[CheckResult]:
    return [check_share_lost(events), check_share_duplicates(events), check_share_double_delivery(events),
            share_deliveries(events)]
