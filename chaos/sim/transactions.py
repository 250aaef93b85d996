"""A seeded simulation of the transaction coordinator's rules (`transactions.rules`) with
transactional clients, partition leaders and a network, on a virtual clock.

    result = simulate_transactions(seed=7, steps=400, rng_factory=random.Random)
    result.violation          # None, or the first invariant broken (with the seed to replay it)

Every decision is the real code's: InitProducerId, AddPartitionsToTxn, EndTxn, the markers'
completion and the timeout abort are `transactions.rules`; every write goes through Kafka's
record format (`transactions.records`) into the coordinator's log, and a coordinator crash
rebuilds its image by replaying that log, as loading `__transaction_state` does. The
simulator only moves requests and time. Partition leaders are modelled on Kafka's producer
state: a Produce is verified with the coordinator (KIP-890 part 1), deduplicated by sequence
per producer epoch, refused below the partition's epoch, and markers end a producer's open
transaction.

Faults from the seed: coordinator crashes (and restarts), requests delayed, a client paused
past its transaction timeout, and a late copy of a Produce (a retry crossing into the next
transaction). `late_end_txn` also sends late copies of EndTxn: KIP-890's case, which the v1
protocol (no epoch bump per transaction) cannot tell from a retry, so it is off by default and
its test shows the simulation finds the torn transaction it causes.

Invariants: after every event, a transactional id's producer epoch never goes back and the
replayed image equals the coordinator's (but for the memory-only last epoch) after a
restart; once every fault healed and every marker was written: each client transaction's
data is all visible under read_committed or none of it, a commit the client saw is visible, an
abort it saw is not, and no partition holds an open transaction.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final

from common.errors import ErrorCode
from transactions.image import TransactionsImage
from transactions.records import TransactionMetadata, encode_record
from transactions.rules import (
    Decision,
    TxnConfig,
    abort_timed_out,
    add_partitions,
    complete,
    end_txn,
    image_after,
    init_producer_id,
    timed_out,
    verify_partitions,
)
from transactions.state import PREPARED, TransactionState

if TYPE_CHECKING:  # the caller owns the generator (random.Random): no global random here
    from random import Random

PURE = True

E = ErrorCode
TOPIC: Final = "t"
PARTITIONS: Final = 4
CLIENTS: Final = 3
TIMEOUT_MS: Final = 2_000  # transaction.timeout.ms of every client
ABORT_CHECK_MS: Final = 500  # the coordinator's timeout scan
NET_MS: Final = (1, 30)  # one-way request delay, uniform
LATE_MS: Final = (300, 3_000)  # a late copy's extra delay
BACKOFF_MS: Final = 50
REQUEST_TIMEOUT_MS: Final = 400  # a client retries a request unanswered this long
QUIESCE_MS: Final = 30_000  # after the last step: every fault healed, every late copy landed


@dataclass(slots=True)
class Partition:
    log: list[tuple[str, Any]] = field(default_factory=list)  # ("data", (pid, epoch, value)) | ("marker", (pid, epoch, commit))
    epochs: dict[int, int] = field(default_factory=dict)  # producer id -> highest epoch seen
    sequences: dict[tuple[int, int], int] = field(default_factory=dict)  # (pid, epoch) -> last sequence
    open: dict[int, int] = field(default_factory=dict)  # producer id -> first offset of its open transaction


@dataclass(slots=True)
class Client:
    tid: str
    pid: int = -1
    epoch: int = -1
    txn: int = 0
    step: str = "init"  # init | add | produce | end | idle
    partitions: tuple[int, ...] = ()
    acked: set[int] = field(default_factory=set)
    sequences: dict[int, int] = field(default_factory=dict)  # next sequence per partition (this epoch)
    assigned: dict[int, int] = field(default_factory=dict)  # this transaction's sequence per partition
    commit: bool = True
    attempt: int = 0  # requests of an older attempt are answered to no one
    paused_until: int = 0


@dataclass(frozen=True, slots=True)
class TxnSimResult:
    seed: int
    steps: int
    violation: str | None
    committed: int
    aborted: int
    faults: dict[str, int]  # crashes, pauses, late copies, timeout aborts: what the seed exercised


class Violation(AssertionError):
    pass


class TxnWorld:
    def __init__(self, rng: Random, *, late_end_txn: bool) -> None:
        self.rng = rng
        self.late_end_txn = late_end_txn
        self.now = 0
        self.queue: list[tuple[int, int, str, Callable[[], object]]] = []
        self.seq = 0
        self.config = TxnConfig()
        self.log: list[tuple[bytes, bytes | None]] = []  # the coordinator's __transaction_state partition
        self.image = TransactionsImage.EMPTY
        self.up = True
        self.next_pid = 1000
        self.partitions = [Partition() for _ in range(PARTITIONS)]
        self.clients = [Client(f"tx-{i}") for i in range(CLIENTS)]
        self.outcomes: dict[tuple[str, int], str] = {}  # (tid, txn) -> committed | aborted | unknown
        self.txn_partitions: dict[tuple[str, int], tuple[int, ...]] = {}
        self.epochs_seen: dict[str, tuple[int, int]] = {}
        self.stopping = False
        self.faults = dict.fromkeys(("crash", "pause", "late", "timeout-abort"), 0)

    # ---- the loop ---------------------------------------------------------------------------
    def at(self, delay_ms: int, what: str, action: Callable[[], object]) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (self.now + delay_ms, self.seq, what, action))

    def net(self) -> int:
        return self.rng.randint(*NET_MS)

    def run(self, steps: int) -> None:
        for client in self.clients:
            self.at(self.net(), f"{client.tid} start", functools.partial(self.send_init, client))
        self.at(ABORT_CHECK_MS, "timeout scan", self.scan_timeouts)
        done, quiesce_end = 0, -1
        while self.queue:  # bounded: `steps` events, then QUIESCE_MS of virtual time
            if done == steps and not self.stopping:
                self.stopping = True  # faults stop, clients finish what they began and begin nothing
                self.restart_if_down()
                for client in self.clients:
                    client.paused_until = 0
                quiesce_end = self.now + QUIESCE_MS
            when, _, _, action = heapq.heappop(self.queue)
            if self.stopping and when > quiesce_end:
                break
            self.now = max(self.now, when)
            action()
            done += 1
            if not self.stopping:
                self.maybe_fault()
            self.check_epochs()

    def maybe_fault(self) -> None:
        roll = self.rng.random()
        if roll < 0.01 and self.up:
            self.up = False
            self.faults["crash"] += 1
            self.at(self.rng.randint(50, 1500), "coordinator restart", self.restart)
        elif roll < 0.015:
            client = self.rng.choice(self.clients)
            self.faults["pause"] += 1
            client.paused_until = self.now + self.rng.randint(TIMEOUT_MS + ABORT_CHECK_MS, 3 * TIMEOUT_MS)

    def restart_if_down(self) -> None:
        if not self.up:
            self.restart()

    def restart(self) -> None:
        """A new coordinator loads the partition: replay every record, then resume its markers."""
        if self.up:
            return
        replayed = TransactionsImage.EMPTY
        for key, value in self.log:
            replayed = replayed.replay(key, value)
        for m in self.image:
            other = replayed.get(m.transactional_id)
            if other is None or replace(other, last_producer_epoch=m.last_producer_epoch) != m:
                raise Violation(f"replaying the log gives {other} for {m.transactional_id}, the coordinator had {m}")
        self.image, self.up = replayed, True
        for m in self.image:
            if m.state in PREPARED:
                self.markers_later(m)

    # ---- the coordinator --------------------------------------------------------------------
    def apply(self, decision: Decision) -> Decision:
        if decision.write is not None:
            self.log.append(encode_record(decision.write))
            self.image = image_after(self.image, decision)
            if decision.markers:
                self.markers_later(decision.write)
        return decision

    def markers_later(self, m: TransactionMetadata) -> None:
        """WriteTxnMarkers to every partition of a prepared transaction, one network hop on."""
        self.at(self.net(), "markers", lambda: self.write_markers(
            m.transactional_id, m.producer_id, m.producer_epoch, m.state is TransactionState.PREPARE_COMMIT,
            tuple(sorted(p for _, p in m.partitions))))

    def write_markers(self, tid: str, pid: int, epoch: int, commit: bool, partitions: tuple[int, ...]) -> None:
        if not self.up:
            return  # the next coordinator resumes them after loading
        for p in partitions:
            part = self.partitions[p]
            if part.epochs.get(pid, -1) <= epoch:
                part.log.append(("marker", (pid, epoch, commit)))
                part.epochs[pid] = epoch
                part.open.pop(pid, None)
        self.apply(complete(self.image, tid, pid, epoch, now_ms=self.now))

    def scan_timeouts(self) -> None:
        if self.up:
            for m in timed_out(self.image, self.now):
                if self.apply(abort_timed_out(self.image, m.transactional_id, m.producer_id,
                                              now_ms=self.now)).write is not None:
                    self.faults["timeout-abort"] += 1
        if not self.stopping or self.queue:
            self.at(ABORT_CHECK_MS, "timeout scan", self.scan_timeouts)

    def check_epochs(self) -> None:
        for m in self.image:
            seen = self.epochs_seen.get(m.transactional_id)
            now = (m.producer_id, m.producer_epoch)
            if seen is not None and seen[0] == now[0] and now[1] < seen[1]:
                raise Violation(f"{m.transactional_id}: epoch went back from {seen} to {now}")
            self.epochs_seen[m.transactional_id] = now

    # ---- requests (each: the client's attempt it belongs to, answered only if still current) ----
    def request(self, client: Client, what: str, handle: Callable[[], ErrorCode], answer: Callable[[ErrorCode], None],
                late: bool = False) -> None:
        attempt = client.attempt

        def deliver() -> None:
            if not self.up and what != "produce":
                error = E.COORDINATOR_NOT_AVAILABLE
            else:
                error = handle()
            if attempt == client.attempt:
                self.at(self.net(), f"{client.tid} answer {what}", lambda: self.answered(client, attempt, error,
                                                                                        answer))

        self.at(self.net(), f"{client.tid} {what}", deliver)
        if late:  # a copy that crosses into a later transaction; nobody waits for its answer
            self.faults["late"] += 1
            self.at(self.rng.randint(*LATE_MS), f"{client.tid} late {what}", handle)
        self.at(REQUEST_TIMEOUT_MS, f"{client.tid} timeout {what}", lambda: self.timed_out_request(client, attempt))

    def answered(self, client: Client, attempt: int, error: ErrorCode, answer: Callable[[ErrorCode], None]) -> None:
        if attempt != client.attempt:
            return
        client.attempt += 1
        delay = max(0, client.paused_until - self.now)
        self.at(delay, f"{client.tid} handles", lambda: answer(error))

    def timed_out_request(self, client: Client, attempt: int) -> None:
        if attempt == client.attempt:  # no answer: the client retries what it was doing
            client.attempt += 1
            self.at(BACKOFF_MS, f"{client.tid} retry", lambda: self.resume(client))

    def resume(self, client: Client) -> None:
        {"init": self.send_init, "add": self.send_add, "produce": self.send_produces, "end": self.send_end,
         "idle": self.begin}[client.step](client)

    # ---- the client -------------------------------------------------------------------------
    def send_init(self, client: Client) -> None:
        client.step = "init"

        def handle() -> ErrorCode:
            d = init_producer_id(self.image, client.tid, TIMEOUT_MS, None, new_producer_id=None, config=self.config,
                                 now_ms=self.now)
            if d.needs_producer_id:
                self.next_pid += 1
                d = init_producer_id(self.image, client.tid, TIMEOUT_MS, None, new_producer_id=self.next_pid,
                                     config=self.config, now_ms=self.now)
            self.apply(d)
            m = self.image.get(client.tid)
            if d.error is E.NONE and m is not None:
                client.pid, client.epoch, client.sequences = m.producer_id, m.producer_epoch, {}
            return d.error

        self.request(client, "init", handle, lambda e: self.begin(client) if e is E.NONE else self.later(client))

    def later(self, client: Client) -> None:
        self.at(BACKOFF_MS, f"{client.tid} backoff", lambda: self.resume(client))

    def begin(self, client: Client) -> None:
        client.step = "idle"
        if self.stopping:
            return
        client.txn += 1
        client.partitions = tuple(sorted(self.rng.sample(range(PARTITIONS), self.rng.randint(1, PARTITIONS))))
        client.acked, client.assigned, client.commit = set(), {}, self.rng.random() < 0.8
        self.txn_partitions[(client.tid, client.txn)] = client.partitions
        self.send_add(client)

    def send_add(self, client: Client) -> None:
        client.step = "add"
        tps = [(TOPIC, p) for p in client.partitions]
        self.request(client, "add", lambda: self.apply(add_partitions(
            self.image, client.tid, client.pid, client.epoch, tps, now_ms=self.now)).error,
            lambda e: self.send_produces(client) if e is E.NONE else self.failed(client, e))

    def send_produces(self, client: Client) -> None:
        client.step = "produce"
        missing = [p for p in client.partitions if p not in client.acked]
        if not missing:
            self.send_end(client)
            return
        p = missing[0]
        if p not in client.assigned:  # a retry keeps its sequence: the leader deduplicates it
            client.assigned[p] = client.sequences.get(p, 0)
            client.sequences[p] = client.assigned[p] + 1
        sequence = client.assigned[p]
        value = f"{client.tid}/{client.txn}"
        pid, epoch = client.pid, client.epoch

        def answer(error: ErrorCode) -> None:
            if error is E.NONE:
                client.acked.add(p)
                self.send_produces(client)
            else:
                self.failed(client, error)

        self.request(client, "produce", lambda: self.produce(client.tid, pid, epoch, p, sequence, value), answer,
                     late=self.rng.random() < 0.05)

    def produce(self, tid: str, pid: int, epoch: int, p: int, sequence: int, value: str) -> ErrorCode:
        """Kafka's partition leader: the epoch, KIP-890 part 1's verification, the sequence."""
        part = self.partitions[p]
        if epoch < part.epochs.get(pid, -1):
            return E.INVALID_PRODUCER_EPOCH
        if pid not in part.open:
            if not self.up:
                return E.NOT_ENOUGH_REPLICAS  # retriable: the verification could not ask the coordinator
            verdict = verify_partitions(self.image, tid, pid, epoch, [(TOPIC, p)])[(TOPIC, p)]
            if verdict is not E.NONE:
                return verdict
        last = part.sequences.get((pid, epoch), -1)
        if sequence <= last:
            return E.NONE  # a duplicate: answered as written, not appended again
        if sequence != last + 1:
            return E.OUT_OF_ORDER_SEQUENCE_NUMBER
        part.sequences[(pid, epoch)] = sequence
        part.epochs[pid] = max(epoch, part.epochs.get(pid, -1))
        part.open.setdefault(pid, len(part.log))
        part.log.append(("data", (pid, epoch, value)))
        return E.NONE

    def send_end(self, client: Client) -> None:
        client.step = "end"
        commit = client.commit
        key = (client.tid, client.txn)

        def answer(error: ErrorCode) -> None:
            if error is E.NONE:
                self.outcomes[key] = "committed" if commit else "aborted"
                self.begin(client)
            elif error in (E.CONCURRENT_TRANSACTIONS, E.COORDINATOR_NOT_AVAILABLE):
                self.later(client)
            else:
                self.outcomes[key] = "unknown"
                self.send_init(client)

        self.request(client, "end", lambda: self.apply(end_txn(
            self.image, client.tid, client.pid, client.epoch, commit, now_ms=self.now)).error, answer,
            late=self.late_end_txn and self.rng.random() < 0.1)

    def failed(self, client: Client, error: ErrorCode) -> None:
        if error in (E.CONCURRENT_TRANSACTIONS, E.COORDINATOR_NOT_AVAILABLE, E.NOT_ENOUGH_REPLICAS):
            self.later(client)
        elif client.step == "produce" and error is not E.PRODUCER_FENCED and error is not E.INVALID_PRODUCER_EPOCH:
            client.commit = False  # an abortable error: abort this transaction
            self.send_end(client)
        else:
            self.outcomes.setdefault((client.tid, client.txn), "unknown")
            self.send_init(client)

    # ---- the end ----------------------------------------------------------------------------
    def check_end(self) -> None:
        """Once every fault healed and every marker was written: read_committed sees each
        client transaction whole or not at all, as its client saw it end; nothing stays open."""
        visible: dict[tuple[str, int], set[int]] = {}  # (tid, txn) -> partitions where read_committed sees it
        for number, part in enumerate(self.partitions):
            if part.open:
                raise Violation(f"partition {number} holds open transactions of producers {sorted(part.open)} "
                                "after every marker was written")
            for offset, (kind, entry) in enumerate(part.log):
                if kind != "data":
                    continue
                pid, _, value = entry
                marker = next((m for k, m in part.log[offset + 1:] if k == "marker" and m[0] == pid), None)
                tid, txn = value.split("/")
                if marker is not None and marker[2]:
                    visible.setdefault((tid, int(txn)), set()).add(number)
        for key, partitions in sorted(self.txn_partitions.items()):
            seen, outcome, name = visible.get(key, set()), self.outcomes.get(key), f"{key[0]}/{key[1]}"
            if seen and seen != set(partitions):
                raise Violation(f"transaction {name} ({outcome}) is torn: read_committed sees it in partitions "
                                f"{sorted(seen)} of {list(partitions)}")
            if outcome == "aborted" and seen:
                raise Violation(f"transaction {name} was aborted, yet read_committed sees it")
            if outcome == "committed" and not seen:
                raise Violation(f"transaction {name} was committed, yet read_committed does not see it")


def simulate_transactions(seed: int, steps: int = 400, *, rng_factory: Callable[[int], Random],
                          late_end_txn: bool = False) -> TxnSimResult:
    """One seed's run; `rng_factory` is `random.Random` (passed in: this module is pure)."""
    world = TxnWorld(rng_factory(seed), late_end_txn=late_end_txn)
    violation = None
    try:
        world.run(steps)
        world.check_end()
    except Violation as exc:
        violation = f"seed {seed}: {exc}"
    outcomes = list(world.outcomes.values())
    return TxnSimResult(seed, steps, violation, outcomes.count("committed"), outcomes.count("aborted"),
                        dict(world.faults))
