"""Every checker over one history, and the verdict of a scenario's expectations on them.

    results = run_all(events)                       # one CheckResult per checker
    verdicts = judge(results, scenario.expect)      # one Verdict per expectation
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chaos.checkers.availability import check_availability
from chaos.checkers.consumer_protocol import NAMES as CONSUMER_PROTOCOL
from chaos.checkers.consumer_protocol import check_consumer_protocol
from chaos.checkers.fencing import check_fencing
from chaos.checkers.group import check_group
from chaos.checkers.latency import check_latency
from chaos.checkers.quorum_safety import NAMES as QUORUM_SAFETY
from chaos.checkers.quorum_safety import (
    check_active_controllers,
    check_metadata_views,
    check_power_loss_writes,
    summarize_power_losses,
)
from chaos.checkers.queue import (
    check_duplicates,
    check_g1a,
    check_inconsistent_offsets,
    check_lost,
    check_unseen,
)
from chaos.checkers.reads import check_read_order
from chaos.checkers.result import CheckResult, examples
from chaos.checkers.share import NAMES as SHARE_GROUP
from chaos.checkers.share import check_share
from chaos.checkers.topics import check_topic_creations
from chaos.checkers.transactions import NAMES as TXN_ANOMALIES
from chaos.checkers.transactions import check_transactions
from chaos.checkers.unclean import check_expected_loss, unclean_elections
from chaos.history import Event
from chaos.scenarios.spec import Expectations, LossPolicy

ANOMALIES = ("lost", "unseen", "inconsistent-offsets", "duplicates", "non-monotonic", "skipped", "G1a",
             "divergence", "topic-creations", "group-lost", "group-duplicates", "group-non-monotonic",
             "group-commit-lost", "early-fencing", *TXN_ANOMALIES, *QUORUM_SAFETY, *CONSUMER_PROTOCOL, *SHARE_GROUP)
CREATED_PARTITIONS = 1  # chaos.engine.admin_workload creates one-partition topics


def check_divergence(events: Sequence[Event]) -> CheckResult:
    """Replicas compared after the last heal (the runner records `divergence` per partition that differs)."""
    found = [e for e in events if e["kind"] == "divergence"]
    compared = [e for e in events if e["kind"] == "note" and e.get("what") == "replicas-compared"]
    lines = [f"partition {e['partition']}: {e['detail']}" for e in found]
    summary = (f"{len(found)} partitions whose replicas differ up to the high watermark"
               if compared else "replicas not compared (the run ended before the final heal)")
    return CheckResult("divergence", len(found), summary, examples(lines))


def check_isr_changes(events: Sequence[Event]) -> CheckResult:
    """Per partition: did a sample show the ISR below the replicas, and a later one the full ISR?"""
    shrunk: dict[int, float] = {}
    expanded: dict[int, float] = {}
    replicas: dict[int, int] = {}
    for e in events:
        if e["kind"] != "sample" or e.get("isr") is None:
            continue
        p, size = e["partition"], len(e["isr"])
        replicas[p] = max(replicas.get(p, 0), size)
        if size < replicas[p] and p not in shrunk:
            shrunk[p] = e["t"]
        elif p in shrunk and p not in expanded and size == replicas[p]:
            expanded[p] = e["t"]
    lines = [f"partition {p}: ISR shrank at t={t:.2f} s, " + (f"full again at t={expanded[p]:.2f} s"
             if p in expanded else "never full again") for p, t in sorted(shrunk.items())]
    return CheckResult("isr-changes", 0, f"{len(shrunk)} partitions saw their ISR shrink, {len(expanded)} expand "
                       "again", examples(lines), {"shrunk": len(shrunk), "expanded": len(expanded)})


def check_offline(events: Sequence[Event]) -> CheckResult:
    """Samples in which a partition had no leader (offline), per partition first and last seen."""
    seen: dict[int, list[float]] = {}
    for e in events:
        if e["kind"] == "sample" and e.get("leader") == -1:
            seen.setdefault(e["partition"], []).append(e["t"])
    lines = [f"partition {p}: offline in {len(ts)} samples from t={ts[0]:.2f} to t={ts[-1]:.2f} s"
             for p, ts in sorted(seen.items())]
    return CheckResult("offline", 0, f"{len(seen)} partitions seen offline", examples(lines),
                       {"partitions": len(seen)})


def check_skipped_faults(events: Sequence[Event]) -> CheckResult:
    """Faults the harness could not apply (no root, no iptables, no netem, no such target now)."""
    skipped = [e for e in events if e["kind"] == "skip"]
    applied = sum(1 for e in events if e["kind"] == "fault-start")
    return CheckResult("faults", len(skipped), f"{applied} faults applied, {len(skipped)} skipped",
                       examples([f"{e['id']} {e['description']}: {e['why']}" for e in skipped]))


def check_controller_changes(events: Sequence[Event]) -> CheckResult:
    """New active controllers (epochs) after the workload began: a needless change shows here."""
    started = next((e["t"] for e in events if e["kind"] == "phase" and e.get("name") == "workload"), 0.0)
    changes = [e for e in events if e["kind"] == "controller-epoch" and e["t"] >= started]
    lines = [f"t={e['t']:.2f} s: a controller became active with epoch {e['epoch']}" for e in changes]
    return CheckResult("controller-changes", 0, f"{len(changes)} new active controllers during the workload",
                       examples(lines), {"changes": len(changes)})


def workload_counts(events: Sequence[Event]) -> CheckResult:
    counts = {k: sum(1 for e in events if e["kind"] == k) for k in ("invoke", "ok", "fail", "info", "read",
                                                                      "final-read")}
    return CheckResult("workload", 0, f"{counts['invoke']} sends: {counts['ok']} acknowledged, {counts['fail']} "
                       f"failed, {counts['info']} unknown; {counts['read']} polled, {counts['final-read']} in the "
                       "final read", (), counts)


def run_all(events: Sequence[Event]) -> list[CheckResult]:
    elections = unclean_elections(events)
    rewritten_from: dict[int, int] = {}
    unclean_at: dict[int, float] = {}
    for u in elections:
        rewritten_from[u.partition] = min(u.start_offset, rewritten_from.get(u.partition, u.start_offset))
        unclean_at[u.partition] = min(u.t, unclean_at.get(u.partition, u.t))
    expected, explained = check_expected_loss(events)
    non_monotonic, skipped = check_read_order(events, unclean_at=unclean_at)
    return [workload_counts(events), check_latency(events), check_lost(events, explained=explained), expected,
            check_unseen(events, explained=explained),
            check_inconsistent_offsets(events, rewritten_from=rewritten_from), check_duplicates(events),
            non_monotonic, skipped, check_g1a(events), check_divergence(events), check_availability(events),
            check_isr_changes(events), check_offline(events),
            check_topic_creations(events, partitions=CREATED_PARTITIONS), *check_group(events),
            *check_consumer_protocol(events), *check_share(events),
            check_fencing(events), check_controller_changes(events), *check_transactions(events),
            check_active_controllers(events), check_metadata_views(events), check_power_loss_writes(events),
            summarize_power_losses(events),
            check_skipped_faults(events)]


@dataclass(frozen=True, slots=True)
class Verdict:
    expectation: str
    ok: bool
    detail: str


def judge(results: Sequence[CheckResult], expect: Expectations) -> list[Verdict]:
    """One verdict per anomaly checker and per stated expectation; all ok means 'as promised'."""
    by_name = {r.name: r for r in results}
    faults = by_name["faults"]
    # a scenario whose faults did not happen proved nothing: say so rather than pass
    verdicts: list[Verdict] = [Verdict("every scheduled fault applied", faults.count == 0, faults.summary)]
    for name in ANOMALIES:
        if name in expect.allow or name not in by_name:
            continue
        r = by_name[name]
        if name == "lost" and expect.lost is LossPolicy.ANY:
            continue
        verdicts.append(Verdict(f"no {name}", r.count == 0, r.summary))
    loss = by_name["expected-loss"]
    if expect.lost is LossPolicy.NONE:
        verdicts.append(Verdict("no loss, not even by unclean election", loss.count == 0, loss.summary))
    if expect.min_lost:
        # after the heal, an acknowledged write beyond every partition's end (unseen) is gone too
        total = loss.count + by_name["lost"].count + by_name["unseen"].count
        verdicts.append(Verdict(f"at least {expect.min_lost} acknowledged writes lost (counted)",
                                total >= expect.min_lost, f"{total} lost ({by_name['lost'].count} below the end, "
                                f"{by_name['unseen'].count} beyond it); {loss.summary}"))
    elections = int(loss.data.get("unclean_elections", 0))
    if expect.unclean_elections is not None:
        verdicts.append(Verdict(f"unclean elections {'happen' if expect.unclean_elections else 'never happen'}",
                                (elections > 0) == expect.unclean_elections, f"{elections} unclean elections"))
    worst = float(by_name["availability"].data.get("worst_s", 0.0))
    if expect.max_unavailable_s is not None:
        verdicts.append(Verdict(f"every partition writable again within {expect.max_unavailable_s:g} s",
                                worst <= expect.max_unavailable_s, by_name["availability"].summary))
    if expect.min_unavailable_s is not None:
        verdicts.append(Verdict(f"an outage of at least {expect.min_unavailable_s:g} s is reported",
                                worst >= expect.min_unavailable_s, by_name["availability"].summary))
    if expect.isr_shrink_expand:
        isr = by_name["isr-changes"]
        verdicts.append(Verdict("an ISR shrinks, then expands again", int(isr.data["expanded"]) > 0, isr.summary))
    if expect.stays_online:
        offline = by_name["offline"]
        verdicts.append(Verdict("every partition keeps a leader", offline.data["partitions"] == 0, offline.summary))
    if expect.stable_controller:
        changes = by_name["controller-changes"]
        verdicts.append(Verdict("the active controller never changes", changes.data["changes"] == 0,
                                changes.summary))
        fencing = by_name["early-fencing"]
        fenced = sum(fencing.data["causes"].values())
        verdicts.append(Verdict("no broker fenced", fenced == 0, fencing.summary))
    acked = int(by_name["workload"].data.get("ok", 0))
    verdicts.append(Verdict(f"at least {expect.min_acked} writes acknowledged", acked >= expect.min_acked,
                            by_name["workload"].summary))
    if "txn-workload" in by_name:  # a transactional workload: it committed something to judge
        txns = by_name["txn-workload"]
        verdicts.append(Verdict(f"at least {expect.min_acked} transactions committed",
                                int(txns.data["committed"]) >= expect.min_acked, txns.summary))
    return verdicts
