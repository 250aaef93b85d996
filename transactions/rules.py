"""The transaction coordinator's rules: a state in, a `Decision` out; only replay changes state.

    d = init_producer_id(image, "tx", 60_000, None, new_producer_id=None, config=cfg, now_ms=now)
    if d.needs_producer_id:                  # the shell allocates one and asks again
        d = init_producer_id(image, "tx", 60_000, None, new_producer_id=4000, config=cfg, now_ms=now)
    d.error, d.write                          # the answer, and the metadata to write (or None)

Kafka's TransactionCoordinator (3.9, transactions v0/v1) with TransactionMetadata's
prepare* transitions, in its order of checks: InitProducerId (a new id, an epoch bump, KIP-360
recovery with the client's producer id and epoch, fencing an ongoing transaction by aborting
it with a bumped epoch, a new producer id when the epoch is exhausted), AddPartitionsToTxn
(AddOffsetsToTxn adds the group's `__consumer_offsets` partition the same way), EndTxn, the
markers' completion, the timeout abort and transactional-id expiration.

A rule writes at most one record: the transactional id's new metadata (Dead is a tombstone).
Kafka's PrepareEpochFence is never written: its epoch bump and the abort that follows are one
PrepareAbort record here as there; the decision's `via` names it for the operator's log line.
Every write is checked against the state table (`transactions.state`).

Transactions v2 (KIP-890 part 2, Kafka 4's TransactionCoordinator.endTransaction and
TransactionMetadata.prepareAbortOrCommit/prepareComplete): a client speaking EndTxn v5
(`client_version` TV2) has its producer epoch bumped by every commit or abort, so the markers
carry the new epoch and a late EndTxn (or Produce) of an earlier transaction is fenced; the
answer names the new producer id and epoch. At an exhausted epoch the end allocates the next
producer id (`next_producer_id`, recorded in the prepare) which the completion switches to at
epoch 0. A retried EndTxn (the epoch just before the bumped one, or the last epoch before an
overflow) is answered as done. Without partitions a TV2 client may still abort (Empty or a
completed transaction -> PrepareAbort). The leader's Produce verification adds the partition
(AddPartitionsToTxn v5 `verify_only=false`), so a TV2 client sends no AddPartitionsToTxn.
Older clients (`client_version` 0) keep v1's rules unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Final

from common.errors import ErrorCode
from transactions.image import TransactionsImage
from transactions.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TransactionMetadata, encode_record
from transactions.state import EXPIRABLE, PREPARED, TransactionState, check_transition

PURE = True

E = ErrorCode
S = TransactionState
MAX_PRODUCER_EPOCH: Final = 32_767  # Short.MaxValue
# Kafka's isEpochExhausted: one epoch is kept in reserve for the fence of a timed-out transaction.
EXHAUSTED_EPOCH: Final = MAX_PRODUCER_EPOCH - 1
# `transaction.version` from which every transaction end bumps the producer epoch (Kafka's
# TransactionVersion.TV_2.supportsEpochBump); v1 clients are TV_0 to the coordinator.
TV_0: Final = 0
TV_2: Final = 2


@dataclass(frozen=True, slots=True)
class TxnConfig:
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms


@dataclass(frozen=True, slots=True)
class Decision:
    """What a rule decided: the error answered (after `write` commits, when there is one), the
    transactional id's metadata before and after, and why."""

    error: ErrorCode = E.NONE
    write: TransactionMetadata | None = None
    before: TransactionMetadata | None = None
    needs_producer_id: bool = False  # InitProducerId: ask again with a new producer id
    via: TransactionState | None = None  # a state passed through without a record (PrepareEpochFence)
    reason: str = ""

    @property
    def markers(self) -> bool:
        """The write prepares a commit or an abort: markers go out once it commits."""
        return self.write is not None and self.write.state in PREPARED


def remembered(decision: Decision) -> Callable[[TransactionsImage], TransactionsImage]:
    """What replaying `decision`'s record cannot give back, put back on the replayed image:
    the last producer epoch, which Kafka keeps in memory only (the runtime's `memory`)."""
    m = decision.write

    def keep(image: TransactionsImage) -> TransactionsImage:
        if m is None or m.state is S.DEAD:
            return image
        replayed = image.get(m.transactional_id)
        if replayed is None or replayed.last_producer_epoch == m.last_producer_epoch:
            return image
        return image.with_metadata(m.transactional_id, replace(replayed, last_producer_epoch=m.last_producer_epoch))
    return keep


def image_after(image: TransactionsImage, decision: Decision) -> TransactionsImage:
    """The image once `decision` is written: the replay of its record (as the runtime and a
    reload derive it), plus what memory keeps."""
    if decision.write is None:
        return image
    key, value = encode_record(decision.write)
    return remembered(decision)(image.replay(key, value))


def is_epoch_exhausted(epoch: int) -> bool:
    return epoch >= EXHAUSTED_EPOCH


def _to(before: TransactionMetadata, reason: str, **changes: object) -> Decision:
    after = replace(before, **changes)  # type: ignore[arg-type]
    check_transition(before.state, after.state)
    return Decision(write=after, before=before, reason=reason)


# ---- InitProducerId ------------------------------------------------------------------------


def validate_timeout(timeout_ms: int, config: TxnConfig) -> bool:
    return 0 < timeout_ms <= config.max_timeout_ms


def init_producer_id(image: TransactionsImage, transactional_id: str, timeout_ms: int,
                     expected: tuple[int, int] | None, *, new_producer_id: int | None,
                     config: TxnConfig, now_ms: int) -> Decision:
    """`expected` is the client's (producer id, epoch) when it sends them (KIP-360), else None."""
    if transactional_id == "":
        return Decision(E.INVALID_REQUEST, reason="the transactional id is empty")
    if not validate_timeout(timeout_ms, config):
        return Decision(E.INVALID_TRANSACTION_TIMEOUT,
                        reason=f"transaction timeout {timeout_ms} ms is not in 1..{config.max_timeout_ms} "
                               "(transaction.max.timeout.ms)")
    current = image.get(transactional_id)
    if current is None:
        if new_producer_id is None:
            return Decision(needs_producer_id=True)
        # Kafka creates the metadata in Empty with no epoch, then bumps it to 0 below.
        created = TransactionMetadata(transactional_id, new_producer_id, NO_PRODUCER_EPOCH, timeout_ms, S.EMPTY,
                                      frozenset(), now_ms, -1)
        decision = _init_existing(created, timeout_ms, expected, None, now_ms)
        return replace(decision, before=None) if decision.write is not None else decision
    return _init_existing(current, timeout_ms, expected, new_producer_id, now_ms)


def _valid_producer(m: TransactionMetadata, expected: tuple[int, int]) -> bool:
    producer_id, epoch = expected
    return (m.producer_epoch == NO_PRODUCER_EPOCH or producer_id == m.producer_id
            or (producer_id == m.previous_producer_id and is_epoch_exhausted(epoch)))


def _init_existing(m: TransactionMetadata, timeout_ms: int, expected: tuple[int, int] | None,
                   new_producer_id: int | None, now_ms: int) -> Decision:
    if expected is not None and not _valid_producer(m, expected):
        return Decision(E.PRODUCER_FENCED, before=m,
                        reason=f"producer {expected[0]} is not the current producer {m.producer_id}")
    if m.state in PREPARED:
        return Decision(E.CONCURRENT_TRANSACTIONS, before=m, reason=f"{m.state.label}: markers pending")
    if m.state is S.ONGOING:
        # Abort the ongoing transaction with a bumped epoch (fencing its producer); the client
        # is answered CONCURRENT_TRANSACTIONS and retries, bumping the epoch once more.
        decision = _fence_and_abort(m, now_ms, "a new producer initialised the transactional id")
        return replace(decision, error=E.CONCURRENT_TRANSACTIONS)
    if m.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        if is_epoch_exhausted(m.producer_epoch) and (expected is None or expected[1] == m.producer_epoch):
            if new_producer_id is None:
                return Decision(needs_producer_id=True, before=m)
            return _to(m, f"epoch {m.producer_epoch} exhausted: new producer id", producer_id=new_producer_id,
                       previous_producer_id=m.producer_id, producer_epoch=0,
                       # recorded when the client sent its epoch, so its retry is recognised
                       last_producer_epoch=NO_PRODUCER_EPOCH if expected is None else m.producer_epoch,
                       timeout_ms=timeout_ms, state=S.EMPTY,
                       partitions=frozenset(), start_ms=-1, last_update_ms=now_ms)
        return _bump_epoch(m, timeout_ms, None if expected is None else expected[1], now_ms)
    raise AssertionError(f"transactional id {m.transactional_id} is {m.state.label}, never kept in the image")


def _bump_epoch(m: TransactionMetadata, timeout_ms: int, expected_epoch: int | None, now_ms: int) -> Decision:
    """Kafka's prepareIncrementProducerEpoch."""
    bumped = m.producer_epoch + 1
    if expected_epoch is None:
        epoch, last, reason = bumped, NO_PRODUCER_EPOCH, "InitProducerId"
    elif m.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == m.producer_epoch:
        epoch, last, reason = bumped, m.producer_epoch, "InitProducerId (KIP-360 epoch bump)"
    elif expected_epoch == m.last_producer_epoch:
        epoch, last, reason = m.producer_epoch, m.last_producer_epoch, "InitProducerId retried (KIP-360)"
    else:
        return Decision(E.PRODUCER_FENCED, before=m,
                        reason=f"epoch {expected_epoch} is neither the current {m.producer_epoch} "
                               f"nor the last {m.last_producer_epoch}")
    return _to(m, reason, producer_epoch=epoch, last_producer_epoch=last, timeout_ms=timeout_ms,
               state=S.EMPTY, partitions=frozenset(), start_ms=-1, last_update_ms=now_ms)


def _fence_and_abort(m: TransactionMetadata, now_ms: int, reason: str) -> Decision:
    """Kafka's prepareFenceProducerEpoch then endTransaction(ABORT, isFromClient=false): one
    PrepareAbort record with the bumped epoch. At the last epoch it cannot bump (Kafka's
    failed-fence case) and aborts with the current one."""
    check_transition(m.state, S.PREPARE_EPOCH_FENCE)
    epoch = m.producer_epoch + 1 if m.producer_epoch < MAX_PRODUCER_EPOCH else m.producer_epoch
    after = replace(m, producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH, state=S.PREPARE_ABORT,
                    last_update_ms=now_ms)
    check_transition(S.PREPARE_EPOCH_FENCE, after.state)
    return Decision(write=after, before=m, via=S.PREPARE_EPOCH_FENCE, reason=reason)


# ---- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------------


def _check_producer(m: TransactionMetadata | None, producer_id: int, epoch: int) -> Decision | None:
    if m is None or m.producer_id != producer_id:
        return Decision(E.INVALID_PRODUCER_ID_MAPPING, before=m,
                        reason=f"producer {producer_id} does not own the transactional id")
    if m.producer_epoch != epoch:
        return Decision(E.PRODUCER_FENCED, before=m,
                        reason=f"epoch {epoch} is not the current epoch {m.producer_epoch}")
    return None


def add_partitions(image: TransactionsImage, transactional_id: str, producer_id: int, epoch: int,
                   partitions: Iterable[tuple[str, int]], *, now_ms: int, client_version: int = TV_0) -> Decision:
    """Kafka's prepareAddPartitions; a write records the client's transaction version (TV2
    when a leader's Produce verification of a TV2 client adds the partition)."""
    if not transactional_id:
        return Decision(E.INVALID_REQUEST, reason="the transactional id is empty")
    m = image.get(transactional_id)
    refused = _check_producer(m, producer_id, epoch)
    if refused is not None:
        return refused
    assert m is not None
    if m.state in PREPARED:
        return Decision(E.CONCURRENT_TRANSACTIONS, before=m, reason=f"{m.state.label}: markers pending")
    added = frozenset(partitions)
    if m.state is S.ONGOING and added <= m.partitions:
        return Decision(before=m)  # already in the transaction: nothing to write
    starting = m.state is not S.ONGOING
    return _to(m, "AddPartitionsToTxn", state=S.ONGOING, partitions=m.partitions | added,
               start_ms=now_ms if starting else m.start_ms, last_update_ms=now_ms,
               client_transaction_version=client_version)


def verify_partitions(image: TransactionsImage, transactional_id: str, producer_id: int, epoch: int,
                      partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
    """KIP-890 part 1, AddPartitionsToTxn v4+ `verify_only`: is each partition in the ongoing
    transaction of this producer? Kafka answers a partition not in it (or a producer not
    current) with INVALID_TXN_STATE, or the producer check's error for all."""
    m = image.get(transactional_id)
    refused = _check_producer(m, producer_id, epoch)
    if refused is not None:
        return {tp: refused.error for tp in partitions}
    assert m is not None
    ongoing = m.state is S.ONGOING
    return {tp: E.NONE if ongoing and tp in m.partitions else E.INVALID_TXN_STATE for tp in partitions}


# ---- EndTxn and the markers ------------------------------------------------------------------


def end_txn(image: TransactionsImage, transactional_id: str, producer_id: int, epoch: int, commit: bool,
            *, now_ms: int, client_version: int = TV_0, new_producer_id: int | None = None) -> Decision:
    """Kafka's endTransaction from a client. TV2 (`client_version`, EndTxn v5) may answer
    `needs_producer_id` (an exhausted epoch): ask again with `new_producer_id`."""
    if not transactional_id:
        return Decision(E.INVALID_REQUEST, reason="the transactional id is empty")
    if client_version >= TV_2:
        return _end_txn_v2(image, transactional_id, producer_id, epoch, commit, now_ms, new_producer_id)
    m = image.get(transactional_id)
    refused = _check_producer(m, producer_id, epoch)
    if refused is not None:
        return refused
    assert m is not None
    result = "commit" if commit else "abort"
    wrong = Decision(E.INVALID_TXN_STATE, before=m, reason=f"EndTxn({result}) in state {m.state.label}")
    if m.state is S.ONGOING:
        return _to(m, f"EndTxn({result})", state=S.PREPARE_COMMIT if commit else S.PREPARE_ABORT,
                   last_update_ms=now_ms)
    if m.state is S.COMPLETE_COMMIT:
        return Decision(before=m) if commit else wrong  # a retried EndTxn: already done
    if m.state is S.COMPLETE_ABORT:
        return wrong if commit else Decision(before=m)
    if m.state is S.PREPARE_COMMIT:
        return Decision(E.CONCURRENT_TRANSACTIONS, before=m, reason="markers pending") if commit else wrong
    if m.state is S.PREPARE_ABORT:
        return wrong if commit else Decision(E.CONCURRENT_TRANSACTIONS, before=m, reason="markers pending")
    return wrong  # Empty: nothing to end


def _end_txn_v2(image: TransactionsImage, transactional_id: str, producer_id: int, epoch: int, commit: bool,
                now_ms: int, new_producer_id: int | None) -> Decision:
    """Kafka 4's endTransaction for a TV2 client, in its order of checks. The state and the
    same epoch do not tell a retry apart here: the epoch does (one below the bumped epoch, or
    the last epoch of the producer id an overflow replaced)."""
    m = image.get(transactional_id)
    if m is None:
        return Decision(E.INVALID_PRODUCER_ID_MAPPING, reason=f"no transactional id {transactional_id}")
    retry_on_overflow = (m.previous_producer_id == producer_id and epoch == EXHAUSTED_EPOCH
                         and m.producer_epoch == 0)
    retry_on_bump = m.producer_epoch == epoch + 1
    if m.state in (S.ONGOING, S.EMPTY):
        valid_epoch = epoch == m.producer_epoch
    else:  # CompleteCommit, CompleteAbort (PrepareCommit/PrepareAbort wait, below)
        valid_epoch = retry_on_bump or retry_on_overflow or epoch == m.producer_epoch
    if m.producer_id != producer_id and not retry_on_overflow:
        return Decision(E.INVALID_PRODUCER_ID_MAPPING, before=m,
                        reason=f"producer {producer_id} does not own the transactional id")
    if m.state in PREPARED:
        # Kafka checks the pending transition before the epoch (KAFKA-18464): while markers are
        # written the client's next request (at the bumped epoch) must wait, not be fenced
        return Decision(E.CONCURRENT_TRANSACTIONS, before=m, reason=f"{m.state.label}: markers pending")
    if not valid_epoch:
        return Decision(E.PRODUCER_FENCED, before=m,
                        reason=f"epoch {epoch} is not valid for {m.state.label} at epoch {m.producer_epoch} "
                               "(a late EndTxn of an earlier transaction)")
    retry = retry_on_bump or retry_on_overflow
    result = "commit" if commit else "abort"
    wrong = Decision(E.INVALID_TXN_STATE, before=m, reason=f"EndTxn({result}) v5 in state {m.state.label}")
    retried = Decision(before=m, reason=f"EndTxn({result}) retried")  # answered with the current id/epoch
    if m.state is S.ONGOING:
        return _prepare_v2(m, S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, False, new_producer_id, now_ms)
    if m.state is S.COMPLETE_COMMIT:
        if commit:
            return retried if retry else wrong
        return wrong if retry else _prepare_v2(m, S.PREPARE_ABORT, True, new_producer_id, now_ms)
    if m.state is S.COMPLETE_ABORT:
        if not commit:
            return retried if retry else _prepare_v2(m, S.PREPARE_ABORT, True, new_producer_id, now_ms)
        return wrong
    # Empty: a TV2 client may abort a transaction it is unsure the coordinator saw
    return _prepare_v2(m, S.PREPARE_ABORT, True, new_producer_id, now_ms) if not commit else wrong


def _prepare_v2(m: TransactionMetadata, state: TransactionState, no_partition_added: bool,
                new_producer_id: int | None, now_ms: int) -> Decision:
    """Kafka's prepareAbortOrCommit with an epoch bump; an exhausted epoch first needs the
    next producer id (the bump then reaches Short.MaxValue, seen only by the markers)."""
    next_id = -1
    if is_epoch_exhausted(m.producer_epoch):
        if new_producer_id is None:
            return Decision(needs_producer_id=True, before=m)
        next_id = new_producer_id
    result = "commit" if state is S.PREPARE_COMMIT else "abort"
    return _to(m, f"EndTxn({result}) v5: epoch {m.producer_epoch} -> {m.producer_epoch + 1}"
               + (f", next producer id {next_id}" if next_id >= 0 else ""),
               # capped: an id already at Short.MaxValue (a v1 fence) leaves it by next_id
               state=state, producer_epoch=min(m.producer_epoch + 1, MAX_PRODUCER_EPOCH),
               last_producer_epoch=m.producer_epoch,
               next_producer_id=next_id, client_transaction_version=TV_2,
               # an abort with no partition added has no start: Kafka uses the update time
               start_ms=now_ms if no_partition_added else m.start_ms, last_update_ms=now_ms)


def end_txn_answer(decision: Decision) -> tuple[int, int]:
    """EndTxn v5's producer id and epoch for a successful `decision`: the bumped epoch, or the
    next producer id at epoch 0 after an overflow (the client never sees Short.MaxValue); a
    retry is answered with the current ones."""
    m = decision.write if decision.write is not None else decision.before
    if m is None:
        return NO_PRODUCER_ID, NO_PRODUCER_EPOCH
    if m.next_producer_id != NO_PRODUCER_ID:
        return m.next_producer_id, 0
    return m.producer_id, m.producer_epoch


def complete(image: TransactionsImage, transactional_id: str, producer_id: int, epoch: int,
             *, now_ms: int) -> Decision:
    """Every partition acknowledged the markers: PrepareCommit -> CompleteCommit (or Abort).
    Nothing (an error) when the transaction moved on meanwhile."""
    m = image.get(transactional_id)
    if m is None or m.producer_id != producer_id or m.producer_epoch != epoch:
        return Decision(E.PRODUCER_FENCED, before=m, reason="the transaction changed while its markers were written")
    if m.state not in PREPARED:
        return Decision(E.INVALID_TXN_STATE, before=m, reason=f"markers completed in state {m.state.label}")
    done = S.COMPLETE_COMMIT if m.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
    if m.client_transaction_version >= TV_2 and m.next_producer_id != NO_PRODUCER_ID:
        # Kafka's prepareComplete after an overflow: the next producer id at epoch 0; the
        # previous id stays recorded so the client's retried EndTxn is recognised
        return _to(m, f"markers written: producer id {m.producer_id} -> {m.next_producer_id} (epoch overflow)",
                   state=done, partitions=frozenset(), last_update_ms=now_ms, producer_id=m.next_producer_id,
                   producer_epoch=0, previous_producer_id=m.producer_id, next_producer_id=NO_PRODUCER_ID,
                   last_producer_epoch=EXHAUSTED_EPOCH)
    return _to(m, "markers written", state=done, partitions=frozenset(), last_update_ms=now_ms)


# ---- timers ----------------------------------------------------------------------------------


def timed_out(image: TransactionsImage, now_ms: int) -> list[TransactionMetadata]:
    """Ongoing transactions past their timeout (Kafka's timedOutTransactions), by id."""
    return sorted((m for m in image if m.state is S.ONGOING and m.start_ms + m.timeout_ms < now_ms),
                  key=lambda m: m.transactional_id)


def abort_timed_out(image: TransactionsImage, transactional_id: str, producer_id: int, *, now_ms: int) -> Decision:
    """Fence the producer (epoch + 1) and abort: Kafka's abortTimedOutTransactions."""
    m = image.get(transactional_id)
    if m is None or m.producer_id != producer_id or m.state is not S.ONGOING:
        return Decision(before=m)  # it moved on meanwhile: nothing to abort
    if m.start_ms + m.timeout_ms >= now_ms:
        return Decision(before=m)
    return _fence_and_abort(m, now_ms, f"transaction timed out after {m.timeout_ms} ms")


def expired(image: TransactionsImage, now_ms: int, config: TxnConfig) -> list[TransactionMetadata]:
    return sorted((m for m in image if m.state in EXPIRABLE
                   and m.last_update_ms <= now_ms - config.id_expiration_ms), key=lambda m: m.transactional_id)


def expire(image: TransactionsImage, transactional_id: str, *, now_ms: int, config: TxnConfig) -> Decision:
    """A transactional id unused for transactional.id.expiration.ms goes (a tombstone)."""
    m = image.get(transactional_id)
    if m is None or m.state not in EXPIRABLE or m.last_update_ms > now_ms - config.id_expiration_ms:
        return Decision(before=m)
    return _to(m, f"unused for {config.id_expiration_ms} ms (transactional.id.expiration.ms)",
               state=S.DEAD, partitions=frozenset(), last_update_ms=now_ms)


# ---- reads -----------------------------------------------------------------------------------


def list_transactions(image: TransactionsImage, *, states: frozenset[str], producer_ids: frozenset[int],
                      min_duration_ms: int, now_ms: int) -> list[TransactionMetadata]:
    """ListTransactions' filters: states by name and producer ids (empty: any), and v1's
    duration (KIP-994: started more than `min_duration_ms` ago; negative: any)."""
    out = []
    for m in image:
        if states and m.state.label not in states:
            continue
        if producer_ids and m.producer_id not in producer_ids:
            continue
        if min_duration_ms >= 0 and now_ms - m.start_ms <= min_duration_ms:
            continue
        out.append(m)
    return sorted(out, key=lambda m: m.transactional_id)

