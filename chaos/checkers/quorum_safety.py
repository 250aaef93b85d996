"""Quorum safety under power loss: one active controller per epoch, no committed metadata lost,
and acknowledged writes lost only where replication cannot have kept them.

- `two-active-controllers`: every controller logs "Became active controller with epoch N"
  (quorum.active_controller) when its BeginEpoch commits; the epoch is the Raft term, and Raft
  allows one leader per term. Two controllers active in one epoch means a voter forgot the
  vote it cast (or a term it saw): what an unsynced term/vote file allows after a power loss.
- `metadata-lost`: after the heal each broker's applied metadata (chaos.engine.metadata_views)
  must be a prefix of the quorum's committed log, which is read last. The image is what is
  compared (a broker keeps no record history): a broker holding a topic the quorum lacks, or a
  partition at a leader epoch above the quorum's, applied a committed record the quorum lost.
  A broker that stopped because the fetched records do not apply on its image diverged too.
  Acknowledged topic creations the quorum lost are the `topic-creations` checker's.
- `power-loss-writes`: each acknowledged write the final read lacks is matched to the power
  loss that took it: the first that began after the acknowledgement on brokers holding replicas
  of its partition. A minority of the replicas losing power must lose nothing (the others hold
  every acks=all write); a majority may, and the count per event is the measurement.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from chaos.checkers.queue import Ack, missing_acks
from chaos.checkers.result import CheckResult, examples

if TYPE_CHECKING:
    from chaos.history import Event

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

NAMES: Final = ("two-active-controllers", "metadata-lost", "power-loss-writes")
REPLICATION_NOT_FSYNC: Final = (
    "Kafka's default durability relies on replication, not fsync: a broker acknowledges an acks=all write "
    "once every in-sync replica has it in memory (flush.messages and flush.ms are off), so a power loss of "
    "a majority of a partition's replicas at once may lose acknowledged writes; a minority never may")


def check_active_controllers(events: Sequence[Event]) -> CheckResult:
    """Each epoch begun once: a second "Became active" in an epoch, by another controller or by
    the same one after a restart (a new process always wins a new term), means a forgotten term
    or vote."""
    became: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for e in events:
        if e["kind"] == "controller-epoch" and "node" in e:
            became[int(e["epoch"])].append((float(e["t"]), int(e["node"])))
    twice = {epoch: sorted(found) for epoch, found in sorted(became.items()) if len(found) > 1}
    lines = [f"epoch {epoch}: " + ", ".join(f"controller {node} became active at t={t:.2f} s" for t, node in found)
             for epoch, found in twice.items()]
    return CheckResult("two-active-controllers", len(twice),
                       f"{len(became)} epochs with an active controller, {len(twice)} begun more than once",
                       examples(lines), {"epochs": len(became)})


def check_metadata_views(events: Sequence[Event]) -> CheckResult:
    quorum = next((e for e in reversed(events) if e["kind"] == "quorum-metadata"), None)
    brokers = [e for e in events if e["kind"] == "broker-metadata"]
    if quorum is None or "topics" not in quorum:
        why = quorum.get("error") if quorum else "no power-loss run, or it never healed"
        return CheckResult("metadata-lost", 0, f"applied metadata not compared ({why})")
    committed: dict[str, dict[str, int]] = quorum["topics"]
    problems: list[str] = []
    answered = 0
    for e in brokers:
        if e.get("diverged"):
            problems.append(f"broker {e['node']} stopped: {e['diverged']}")
        if "topics" not in e:
            continue
        answered += 1
        for name, partitions in sorted(e["topics"].items()):
            if name not in committed:
                problems.append(f"broker {e['node']} has topic {name}, which the quorum's log no longer holds")
                continue
            for p, epoch in sorted(partitions.items()):
                if epoch > committed[name].get(p, -1):
                    problems.append(f"broker {e['node']}: {name}-{p} at leader epoch {epoch}, the quorum's log at "
                                    f"{committed[name].get(p, 'none')}")
    return CheckResult("metadata-lost", len(problems),
                       f"{answered} of {len(brokers)} brokers' applied metadata compared with the quorum's "
                       f"({len(committed)} topics): {len(problems)} records applied that the quorum lost",
                       examples(problems), {"brokers": answered})


@dataclass(frozen=True, slots=True)
class PowerLoss:
    id: str
    t: float
    targets: frozenset[int]
    replicas: dict[int, tuple[int, ...]]  # partition -> its replicas when the power went

    def hit(self, partition: int) -> tuple[int, int]:
        """(replicas of `partition` that lost power, replicas)."""
        replicas = self.replicas.get(partition, ())
        return len(self.targets.intersection(replicas)), len(replicas)


def power_losses(events: Sequence[Event]) -> list[PowerLoss]:
    replicas = {e["id"]: {int(p): tuple(r) for p, r in e["replicas"].items()}
                for e in events if e["kind"] == "power-replicas"}
    return [PowerLoss(e["id"], float(e["t"]), frozenset(e["targets"]), replicas.get(e["id"], {}))
            for e in events if e["kind"] == "fault-start" and e.get("action") == "power"]


def check_power_loss_writes(events: Sequence[Event]) -> CheckResult:
    losses = [p for p in power_losses(events) if p.replicas and any(p.hit(q)[0] for q in p.replicas)]
    if not losses:
        return CheckResult("power-loss-writes", 0, "no broker lost power")
    lost, unseen = missing_acks(events)
    by_fault: dict[str, list[Ack]] = defaultdict(list)
    unexplained: list[Ack] = []
    in_order = sorted(losses, key=lambda p: p.t)
    for ack in sorted(lost + unseen, key=lambda a: (a.partition, a.offset)):
        after = [p for p in in_order if p.t >= ack.t and p.hit(ack.partition)[0]]
        # a majority that went dark later took it, rather than a minority before it that could not
        culprit = next((p for p in after if 2 * p.hit(ack.partition)[0] > p.hit(ack.partition)[1]),
                       after[0] if after else None)
        if culprit is None:
            unexplained.append(ack)
        else:
            by_fault[culprit.id].append(ack)
    problems: list[str] = []
    lines: list[str] = []
    for loss in losses:
        for partition in sorted(loss.replicas):
            down, total = loss.hit(partition)
            if not down:
                continue
            taken = [a for a in by_fault[loss.id] if a.partition == partition]
            majority = 2 * down > total
            span = f" (offsets {taken[0].offset}..{taken[-1].offset})" if taken else ""
            line = (f"{loss.id} at t={loss.t:.2f} s, brokers {sorted(loss.targets)}: partition {partition} lost "
                    f"{down} of {total} replicas ({'a majority' if majority else 'a minority'}): "
                    f"{len(taken)} acknowledged writes lost{span}")
            lines.append(line)
            if taken and not majority:
                problems.append(line)
    problems += [f"partition {a.partition} offset {a.offset} ({a.value}): acknowledged at t={a.t:.2f} s, lost, "
                 "and no power loss after it hit its replicas" for a in unexplained]
    counts = {loss.id: len(by_fault[loss.id]) for loss in losses}
    total = sum(counts.values())
    return CheckResult("power-loss-writes", len(problems),
                       f"{total} acknowledged writes lost to {len(losses)} power losses of brokers "
                       f"({', '.join(f'{k}: {v}' for k, v in counts.items())}); {len(problems)} where a minority "
                       f"of the replicas lost power or nothing explains it. {REPLICATION_NOT_FSYNC}",
                       examples(problems + lines), {"lost_by_fault": counts, "lost": total})


def summarize_power_losses(events: Sequence[Event]) -> CheckResult:
    """A measurement: what each pulled plug took back, node by node (the layer's own report)."""
    pulled = [e for e in events if e["kind"] == "power-loss" and e.get("power_loss")]
    failed = [f"{e['id']} node {e['node']}: the plug could not be pulled ({e['error']})"
              for e in events if e["kind"] == "power-loss" and e.get("error")]
    lines = [f"{e['id']} node {e['node']}: {e.get('files_rolled_back', 0)} files rolled back, "
             f"{e.get('bytes_dropped', 0)} bytes dropped, {e.get('entries_undone_count', 0)} directory changes "
             "undone" + (f" ({', '.join(e['entries_undone'][:3])}, ...)" if e.get("entries_undone") else "")
             for e in pulled]
    dropped = sum(int(e.get("bytes_dropped", 0)) for e in pulled)
    return CheckResult("power-losses", 0, f"{len(pulled)} plugs pulled: {dropped} unsynced bytes dropped in all"
                       + (f"; {len(failed)} could not be pulled (the node restarted on everything)" if failed else ""),
                       examples(failed + lines),
                       {"plugs": len(pulled), "bytes_dropped": dropped, "failed": len(failed)})
