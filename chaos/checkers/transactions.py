"""Jepsen's transactional anomalies (the Bufstream analysis, 2024) over the `txn-*` events.

The events (chaos.engine.txn_workload writes them; every value is unique within its topic):

- `txn-invoke` (process, txn, writes: [{topic, partition, value}], consumed: [{topic,
  partition, offset, value}] for a consume-transform-produce transaction): a transaction
  began with these intended writes; `txn-write` (process, txn, topic, partition, offset,
  value): one of its writes acknowledged at that offset; `txn-commit-invoke` (process, txn):
  `commit_transaction()` called, recorded before the call, so no EndTxn(commit) left before it.
- Outcomes, Jepsen's: `txn-ok` (committed: `commit_transaction()` returned), `txn-fail`
  (aborted: `abort_transaction()` returned, or nothing was written), `txn-info` (unknown:
  the client failed somewhere in between, e.g. fenced or timed out mid-commit).
- `txn-read` (reader, isolation `read_committed` | `read_uncommitted`, topic, partition,
  offset, value, final): one record a reader polled (`final`: the catch-up read after heal),
  and a `note` what=txn-final-read (isolation, ok: it reached every partition's end).
- `txn-probe` (ongoing: [{topic, partition, producer_id, producer_epoch, txn_start_offset}
  from DescribeProducers, or {coordinator, transactional_id, producer_id, state} from
  ListTransactions], waited_s, bound_s, error): both after the heal, once every client
  stopped, repeated until nothing is open or `bound_s` (the transaction timeout plus the
  coordinator's abort interval) passed.

The checkers, Jepsen's definitions:

- txn-aborted-read: a read_committed reader saw a value of a transaction that aborted, or of
  one whose client never called commit (only an abort, by the client or the timeout, ends it).
- txn-torn: a reader saw part of a committed (or unknown) transaction but not a write of it
  whose offset it read past (it polled a later offset of that partition), Jepsen's
  "torn transaction", judged per reader; and, once the final read_committed read reached
  every end, a transaction of unknown outcome partly visible there (a write refused after a
  late EndTxn had already committed the transaction has no offset to read past; a committed
  transaction's missing write is lost instead).
- txn-lost: a committed transaction's write that no read_committed reader saw, although the
  final read_committed read reached every partition's end (the LSO after the heal).
- txn-duplicates: one value at two offsets of a topic under read_committed: across the
  consume-transform-produce loop, an input whose offsets were committed with its output in
  one transaction appeared twice in the output.
- txn-beyond-lso: the criterion is the client's own clock, not a sampled LSO (a sampled LSO
  lags, and a new leader's may go back): a read_committed reader that polled a value of a
  transaction before that transaction's `commit_transaction()` was called read a record of
  an open transaction: its partition's LSO was at or below that record, since the first
  offset of an ongoing transaction bounds the LSO and no commit marker could exist yet
  (a transaction never committed is an aborted read instead).
- txn-zombie-commit: a transaction open across a pause of its client (SIGSTOP, a
  `fault-start` with `client`) longer than the transaction timeout committed: the coordinator
  had to abort it and fence the producer.
- txn-hanging: after the heal and the wait, a partition still shows an ongoing transaction
  (KIP-664's hanging transaction: its LSO is stuck); a transactional run never probed counts 1.

A history without `txn-invoke` events (a workload without transactions) gets no result at all
(the verdict table of a plain run stays as it was).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chaos.checkers.result import CheckResult, examples

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

NAMES = ("txn-aborted-read", "txn-torn", "txn-lost", "txn-duplicates", "txn-beyond-lso", "txn-zombie-commit",
         "txn-hanging")
READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
Event = dict[str, Any]  # chaos.history's event, named here: that module writes files
Key = tuple[str, str]  # (topic, value): values are unique within a topic
Where = tuple[str, int]  # (topic, partition)


@dataclass(slots=True)
class Txn:
    """What the history says of one transaction."""

    process: str
    txn: str
    invoked_t: float
    writes: list[Key]
    offsets: dict[Key, tuple[int, int]]  # acknowledged writes: (partition, offset)
    consumed: list[dict[str, Any]]
    outcome: str = "info"  # ok | fail | info, Jepsen's
    commit_t: float | None = None  # when commit_transaction() was called
    end_t: float | None = None


def transactions(events: Sequence[Event]) -> dict[str, Txn]:
    """Every transaction by id, with its writes, offsets and outcome."""
    found: dict[str, Txn] = {}
    for e in events:
        kind = e["kind"]
        if kind == "txn-invoke":
            found[e["txn"]] = Txn(str(e["process"]), str(e["txn"]), float(e["t"]),
                                  [(str(w["topic"]), str(w["value"])) for w in e.get("writes", [])], {},
                                  list(e.get("consumed", [])))
            continue
        txn = found.get(str(e.get("txn"))) if kind.startswith("txn-") else None
        if txn is None:
            continue
        if kind == "txn-write":
            txn.offsets[(str(e["topic"]), str(e["value"]))] = (int(e["partition"]), int(e["offset"]))
        elif kind == "txn-commit-invoke":
            txn.commit_t = float(e["t"])
        elif kind in ("txn-ok", "txn-fail", "txn-info"):
            txn.outcome, txn.end_t = kind[4:], float(e["t"])
    return found


def _reads(events: Sequence[Event], isolation: str) -> list[Event]:
    return [e for e in events if e["kind"] == "txn-read" and e["isolation"] == isolation]


def _owners(txns: dict[str, Txn]) -> dict[Key, Txn]:
    return {key: txn for txn in txns.values() for key in txn.writes}


def check_aborted_reads(events: Sequence[Event], txns: dict[str, Txn]) -> CheckResult:
    owners = _owners(txns)
    seen: list[str] = []
    for e in _reads(events, READ_COMMITTED):
        txn = owners.get((e["topic"], e["value"]))
        if txn is not None and (txn.outcome == "fail" or txn.commit_t is None):
            how = (f"aborted at t={txn.end_t:.3f} s" if txn.outcome == "fail" else
                   "never committed: its client never called commit, so only an abort could end it")
            seen.append(f"reader {e['reader']} saw {e['value']!r} at {e['topic']}-{e['partition']}@{e['offset']} "
                        f"(t={e['t']:.3f} s) of {txn.txn}, {how}")
    aborted = sum(1 for t in txns.values() if t.outcome == "fail")
    return CheckResult("txn-aborted-read", len(seen), f"{len(seen)} read_committed reads of values of the "
                       f"{aborted} aborted transactions", examples(seen))


def check_torn(events: Sequence[Event], txns: dict[str, Txn]) -> CheckResult:
    owners = _owners(txns)
    observed: dict[str, set[Key]] = {}
    past: dict[str, dict[Where, int]] = {}  # reader -> highest offset polled per partition
    isolation: dict[str, str] = {}
    for e in events:
        if e["kind"] != "txn-read":
            continue
        reader = str(e["reader"])
        isolation[reader] = e["isolation"]
        observed.setdefault(reader, set()).add((e["topic"], e["value"]))
        where = (str(e["topic"]), int(e["partition"]))
        highest = past.setdefault(reader, {})
        highest[where] = max(highest.get(where, -1), int(e["offset"]))
    torn: list[str] = []
    torn_txns: set[str] = set()
    for reader in sorted(observed):
        if isolation[reader] != READ_COMMITTED:
            continue  # a read_uncommitted reader may see any prefix of an open transaction
        seen_txns = {owners[k].txn for k in observed[reader] if k in owners}
        for txn_id in sorted(seen_txns):
            txn = txns[txn_id]
            if txn.outcome == "fail":
                continue  # an aborted read, counted there
            for key, (partition, offset) in sorted(txn.offsets.items()):
                if key not in observed[reader] and past[reader].get((key[0], partition), -1) > offset:
                    torn.append(f"reader {reader} saw part of {txn_id} ({txn.outcome}) but not {key[1]!r} at "
                                f"{key[0]}-{partition}@{offset}, though it read past it")
                    torn_txns.add(txn_id)
                    break
    torn += _torn_at_the_end(events, txns, owners, torn_txns)
    return CheckResult("txn-torn", len(torn), f"{len(torn)} transactions a read_committed reader saw only part "
                       "of", examples(torn))


def _torn_at_the_end(events: Sequence[Event], txns: dict[str, Txn], owners: dict[Key, Txn],
                     already: set[str]) -> list[str]:
    """Once the final read_committed read reached every end: a transaction partly visible has
    every intended write visible, acknowledged or not. Only the client's EndTxn(commit) may
    commit, and the client sends it after every write was acknowledged; so a write refused or
    never acknowledged in a transaction that committed anyway (a late EndTxn from before
    ended it: KIP-890's case) is an atomicity violation, whose write has no offset to read past."""
    finals = [e for e in events if e["kind"] == "note" and e.get("what") == "txn-final-read"
              and e.get("isolation") == READ_COMMITTED]
    if not finals or not finals[-1].get("ok"):
        return []
    seen = {(e["topic"], e["value"]) for e in _reads(events, READ_COMMITTED) if e.get("final")}
    found: list[str] = []
    for txn_id in sorted({owners[k].txn for k in seen if k in owners} - already):
        txn = txns[txn_id]
        missing = [k for k in txn.writes if k not in seen]
        if txn.outcome == "info" and missing:  # a committed one's missing write is lost, counted there
            found.append(f"the final read_committed read saw {len(txn.writes) - len(missing)} of the "
                         f"{len(txn.writes)} writes of {txn_id} ({txn.outcome}), not {missing[0][1]!r} to "
                         f"{missing[0][0]}")
    return found


def check_lost(events: Sequence[Event], txns: dict[str, Txn]) -> CheckResult:
    finals = [e for e in events if e["kind"] == "note" and e.get("what") == "txn-final-read"
              and e.get("isolation") == READ_COMMITTED]
    committed = [t for t in txns.values() if t.outcome == "ok"]
    if not finals or not finals[-1].get("ok"):
        return CheckResult("txn-lost", 1, "not judged: the final read_committed read did not reach every "
                           "partition's end", ("the final read_committed read did not complete",))
    seen = {(e["topic"], e["value"]) for e in _reads(events, READ_COMMITTED)}
    lost = [f"{key[1]!r} to {key[0]} of {t.txn}, committed at t={t.end_t:.3f} s" +
            (f" (acknowledged at {key[0]}-{t.offsets[key][0]}@{t.offsets[key][1]})" if key in t.offsets else "")
            for t in committed for key in t.writes if key not in seen]
    return CheckResult("txn-lost", len(lost), f"{len(lost)} writes of the {len(committed)} committed transactions "
                       "never read under read_committed", examples(lost))


def check_duplicates(events: Sequence[Event], txns: dict[str, Txn]) -> CheckResult:
    outputs = {w[0] for t in txns.values() if t.consumed for w in t.writes}
    where: dict[Key, set[tuple[int, int]]] = {}
    for e in _reads(events, READ_COMMITTED):
        where.setdefault((e["topic"], e["value"]), set()).add((int(e["partition"]), int(e["offset"])))
    twice = [f"{key[1]!r} in {key[0]}{' (transform output)' if key[0] in outputs else ''} at "
             + ", ".join(f"{p}@{o}" for p, o in sorted(places)) for key, places in sorted(where.items())
             if len(places) > 1]
    transformed = sum(len(t.consumed) for t in txns.values() if t.outcome == "ok")
    return CheckResult("txn-duplicates", len(twice), f"{len(twice)} values at more than one offset under "
                       f"read_committed ({transformed} inputs transformed in committed transactions)",
                       examples(twice))


def check_beyond_lso(events: Sequence[Event], txns: dict[str, Txn]) -> CheckResult:
    owners = _owners(txns)
    early: list[str] = []
    for e in _reads(events, READ_COMMITTED):
        txn = owners.get((e["topic"], e["value"]))
        if txn is None or txn.commit_t is None or e.get("final"):
            continue  # never committed: an aborted read, counted there
        if e["t"] < txn.commit_t:
            early.append(f"reader {e['reader']} saw {e['value']!r} at {e['topic']}-{e['partition']}@{e['offset']} "
                         f"at t={e['t']:.3f} s, while {txn.txn} was open (commit called at t={txn.commit_t:.3f} s)")
    return CheckResult("txn-beyond-lso", len(early), f"{len(early)} read_committed reads of a transaction still "
                       "open (before its commit was called)", examples(early))


def check_zombie_commits(events: Sequence[Event], txns: dict[str, Txn]) -> CheckResult:
    config = next((e for e in events if e["kind"] == "note" and e.get("what") == "txn-config"), {})
    timeout_s = float(config.get("transaction_timeout_ms", 60_000)) / 1000
    ends = {e["id"]: e["t"] for e in events if e["kind"] == "fault-end"}
    pauses = [(str(e["client"]), float(e["t"]), float(ends.get(e["id"], float("inf"))))
              for e in events if e["kind"] == "fault-start" and e.get("client") and e.get("action") == "pause"]
    long_pauses = [(c, s, end) for c, s, end in pauses if end - s > timeout_s]
    zombies = [f"{t.txn} of {t.process} open across its pause t={s:.2f}..{end:.2f} s (> {timeout_s:g} s) "
               f"committed at t={t.end_t:.3f} s" for c, s, end in long_pauses for t in txns.values()
               if t.process == c and t.outcome == "ok" and t.invoked_t < s and t.end_t is not None and t.end_t > end]
    return CheckResult("txn-zombie-commit", len(zombies), f"{len(zombies)} transactions committed across a client "
                       f"pause longer than the transaction timeout ({len(long_pauses)} such pauses)",
                       examples(zombies), {"long_pauses": len(long_pauses)})


def check_hanging(events: Sequence[Event]) -> CheckResult:
    probes = [e for e in events if e["kind"] == "txn-probe"]
    if not probes:
        return CheckResult("txn-hanging", 1, "never probed for hanging transactions (the run ended before)",
                           ("no txn-probe after the heal",))
    last = probes[-1]
    if last.get("error"):
        return CheckResult("txn-hanging", 1, f"the probe failed: {last['error']}", (str(last["error"]),))
    ongoing = list(last.get("ongoing", []))
    lines = [f"{o['topic']}-{o['partition']}: producer {o['producer_id']} epoch {o['producer_epoch']} open since "
             f"offset {o['txn_start_offset']}" if "topic" in o else
             f"coordinator {o['coordinator']}: {o['transactional_id']} (producer {o['producer_id']}) still {o['state']}"
             for o in ongoing]
    return CheckResult("txn-hanging", len(ongoing), f"{len(ongoing)} transactions still open {last['waited_s']:.1f} s "
                       f"after every client stopped (bound {last['bound_s']:.1f} s)", examples(lines))


def transaction_counts(events: Sequence[Event], txns: dict[str, Txn]) -> CheckResult:
    """A measurement: how many transactions committed, aborted, ended unknown, and the clients
    that did not stop when asked (stuck in a call: their log holds the stacks)."""
    counts = {o: sum(1 for t in txns.values() if t.outcome == o) for o in ("ok", "fail", "info")}
    killed = [f"client {e['client']} did not stop when asked: killed (its log has its stacks)" for e in events
              if e["kind"] == "note" and e.get("what") == "txn-client-killed"]
    stuck = [f"client {e['process']} stuck {e['after_s']:g} s in {e['call']}() of {e['txn']} (t={e['t']:.2f} s)"
             for e in events if e["kind"] == "note" and e.get("what") == "txn-client-stuck"]
    return CheckResult("txn-workload", 0, f"{len(txns)} transactions: {counts['ok']} committed, {counts['fail']} "
                       f"aborted, {counts['info']} unknown; {len(killed)} clients stuck at the end", examples(stuck + killed),
                       {"committed": counts["ok"], "stuck_clients": len(killed), **counts})


HELD_API_NAMES = {0: "Produce", 26: "EndTxn"}


def held_requests(events: Sequence[Event]) -> CheckResult:
    """A measurement: each request the hold nemesis kept back, and how its late delivery was
    answered (an EndTxn below v5 answered NONE ended whichever transaction was open then:
    what the other checkers judge is whether that broke atomicity)."""
    from common.errors import ErrorCode

    starts = [e for e in events if e["kind"] == "note" and e.get("what") == "hold-start"]
    released = [e for e in events if e["kind"] == "note" and e.get("what") == "hold-released"]
    lines = []
    for start, done in zip(starts, released):
        code = done.get("error_code")
        answer = "no answer" if code is None else (
            ErrorCode(code).name if code in ErrorCode._value2member_map_ else f"error {code}")
        lines.append(f"{HELD_API_NAMES.get(start['api_key'], start['api_key'])} v{start['version']} held at "
                     f"t={start['t']:.2f} s, delivered at t={done['t']:.2f} s: {answer}"
                     + (f" ({done['why']})" if done.get("why") else ""))
    return CheckResult("txn-held-requests", 0, f"{len(starts)} requests held, {len(released)} delivered late",
                       examples(lines), {"held": len(starts), "released": len(released)})


def check_transactions(events: Sequence[Event]) -> list[CheckResult]:
    txns = transactions(events)
    if not txns:
        return []  # no transactional workload: nothing to report, no verdict to give
    return [transaction_counts(events, txns), check_aborted_reads(events, txns), check_torn(events, txns), check_lost(events, txns),
            check_duplicates(events, txns), check_beyond_lso(events, txns), check_zombie_commits(events, txns),
            check_hanging(events), held_requests(events)]
