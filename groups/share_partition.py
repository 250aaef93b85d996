"""A share partition (KIP-932): which records of one topic partition a share group has handed
out, to whom, how often, and which are done. Kafka's `SharePartition`, as pure rules.

    state = replay_all(EMPTY, [Initialized(start_offset=0)])
    out = acquire(state, member_id="m1", batches=[(0, 9)], max_records=500, now_ms=t, limits=LIMITS)
    state = replay_all(state, out.records)          # only replay changes state
    out.acquired                                    # ((first, last, delivery_count), ...)
    started = acknowledge(state, member_id="m1", first=0, last=9, types=(ACCEPT,), limits=LIMITS)
    state = replay_all(state, started)              # pending: still acquired, until its write
    state = replay_all(state, complete(started, commit=write_ok))   # done, or acquired again

The share-partition start offset (SPSO) is the first offset not yet done; the end offset
(SPEO) is one past the last offset ever acquired. Every offset in [SPSO, SPEO) has a state:
AVAILABLE (to be acquired again), ACQUIRED (by one member until its lock deadline),
ACKNOWLEDGED or ARCHIVED (done). Offsets at or past SPEO are AVAILABLE and never delivered.
Delivery counts and the archive-on-limit rule are Kafka's (`SharePartition.java`): a record's
delivery count goes up by one each time it is acquired; when it is released (by the member,
by a lock timeout, or by its member leaving) at the delivery count limit it is archived
instead of becoming available. SPSO moves past every leading done offset, so the in-flight
map holds only [SPSO, SPEO).

An acknowledgement is a pending transition until its share state is durable (Kafka's
`InFlightState.startStateTransition` / `completeStateTransition`): the records stay ACQUIRED
by the member, under the same lock, with the target state beside; nobody acquires or
acknowledges them meanwhile and their lock does not run out. A successful write commits the
target; a failed one rolls it back, so the records are still the member's until their lock
expires and then are delivered again (with their delivery count kept): never lost to a write
the client was told failed.

A rule reads a state and returns records; `replay` is the one place state changes, and
computes the derived facts (delivery count + 1, SPSO's advance) once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum
from types import MappingProxyType
from typing import Final

from common.errors import ErrorCode

NO_DEADLINE: Final = -1  # lock_deadline_ms of a record nobody holds
NO_MEMBER: Final = ""
# Kafka's group.share.partition.max.record.locks default: at most this many offsets in
# [SPSO, SPEO) at once; a fetch acquires nothing new past it (records)
DEFAULT_MAX_IN_FLIGHT_RECORDS: Final = 2_000


class RecordState(Enum):
    AVAILABLE = "AVAILABLE"
    ACQUIRED = "ACQUIRED"
    ACKNOWLEDGED = "ACKNOWLEDGED"
    ARCHIVED = "ARCHIVED"


DONE: Final = frozenset({RecordState.ACKNOWLEDGED, RecordState.ARCHIVED})


class AcknowledgeType(IntEnum):
    """ShareFetch/ShareAcknowledge's acknowledge_types (KIP-932)."""

    GAP = 0  # no record at that offset (compacted away, or a control record)
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


@dataclass(frozen=True, slots=True)
class ShareLimits:
    """The group's share settings (Kafka's group.share.* broker configs)."""

    record_lock_duration_ms: int = 30_000  # group.share.record.lock.duration.ms
    delivery_count_limit: int = 5  # group.share.delivery.count.limit
    max_in_flight_records: int = DEFAULT_MAX_IN_FLIGHT_RECORDS  # group.share.partition.max.record.locks

    def __post_init__(self) -> None:
        if self.record_lock_duration_ms < 1 or self.delivery_count_limit < 1 or self.max_in_flight_records < 1:
            raise ValueError(f"share limits must be positive: {self}")


@dataclass(frozen=True, slots=True)
class InFlight:
    """One offset in [SPSO, SPEO)."""

    state: RecordState
    delivery_count: int
    member_id: str = NO_MEMBER
    lock_deadline_ms: int = NO_DEADLINE
    pending: RecordState | None = None  # an acknowledgement's target state, until its write completes


@dataclass(frozen=True, slots=True)
class SharePartitionState:
    initialized: bool = False
    start_offset: int = 0  # SPSO
    end_offset: int = 0  # SPEO
    in_flight: Mapping[int, InFlight] = field(default_factory=lambda: MappingProxyType({}))

    def state_of(self, offset: int) -> InFlight | None:
        """None: below SPSO (done) or at/past SPEO (never delivered)."""
        return self.in_flight.get(offset)


EMPTY: Final = SharePartitionState()


# ---- records ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Initialized:
    """The share partition starts at `start_offset` (share.auto.offset.reset, or an offset an
    admin set with AlterShareGroupOffsets): SPSO = SPEO = it, nothing in flight."""

    start_offset: int

    def __post_init__(self) -> None:
        if self.start_offset < 0:
            raise ValueError(f"start offset {self.start_offset} < 0")


@dataclass(frozen=True, slots=True)
class Acquired:
    """Offsets [first, last] acquired by `member_id` until `lock_deadline_ms`; replay adds one to
    each one's delivery count. Offsets from SPEO up to `first` hold no record (the log read that
    found the range passed over them) and are archived."""

    first: int
    last: int
    member_id: str
    lock_deadline_ms: int

    def __post_init__(self) -> None:
        if not 0 <= self.first <= self.last:
            raise ValueError(f"bad acquired range [{self.first}, {self.last}]")


@dataclass(frozen=True, slots=True)
class Transitioned:
    """Offsets [first, last] move to `state` (AVAILABLE, ACKNOWLEDGED or ARCHIVED): no holder."""

    first: int
    last: int
    state: RecordState

    def __post_init__(self) -> None:
        if not 0 <= self.first <= self.last or self.state is RecordState.ACQUIRED:
            raise ValueError(f"bad transition [{self.first}, {self.last}] -> {self.state}")


@dataclass(frozen=True, slots=True)
class TransitionStarted:
    """An acknowledgement of offsets [first, last] (ACQUIRED) to `state`, pending until the share
    state write completes: they stay acquired by their member, under the same lock."""

    first: int
    last: int
    state: RecordState

    def __post_init__(self) -> None:
        if not 0 <= self.first <= self.last or self.state is RecordState.ACQUIRED:
            raise ValueError(f"bad pending transition [{self.first}, {self.last}] -> {self.state}")


@dataclass(frozen=True, slots=True)
class TransitionCompleted:
    """The pending transitions of [first, last] end: `commit` (their write succeeded) moves each
    to its target state, with no holder; otherwise (rolled back) each is acquired again as it
    was. Offsets with nothing pending (SPSO moved past them, a new leader restarted the
    partition) are left as they are."""

    first: int
    last: int
    commit: bool

    def __post_init__(self) -> None:
        if not 0 <= self.first <= self.last:
            raise ValueError(f"bad completed range [{self.first}, {self.last}]")


@dataclass(frozen=True, slots=True)
class StartMoved:
    """SPSO jumps to `start_offset` (the log start passed it, or an admin moved it): offsets
    below it leave the in-flight map; SPEO is at least it."""

    start_offset: int


@dataclass(frozen=True, slots=True)
class Restored:
    """The share partition as its durable snapshot holds it (a new leader reads it): SPSO, and
    (first, last, delivery state, delivery count) batches of [SPSO, SPEO) in Kafka's delivery
    states; nothing is acquired after a restore."""

    start_offset: int
    batches: tuple[tuple[int, int, int, int], ...]


ShareRecord = Initialized | Acquired | Transitioned | TransitionStarted | TransitionCompleted | StartMoved | Restored

# Kafka's RecordState ids, as share-state batches store them (an acquired record is stored
# AVAILABLE: after a failover it is delivered again)
DELIVERY_STATE_IDS: Final = {RecordState.AVAILABLE: 0, RecordState.ACQUIRED: 0, RecordState.ACKNOWLEDGED: 2,
                             RecordState.ARCHIVED: 4}
_STATE_OF_ID: Final = {0: RecordState.AVAILABLE, 2: RecordState.ACKNOWLEDGED, 4: RecordState.ARCHIVED}


def snapshot_batches(state: SharePartitionState) -> tuple[tuple[int, int, int, int], ...]:
    """[SPSO, SPEO) as Kafka's state batches: runs of one delivery state and count."""
    out: list[tuple[int, int, int, int]] = []
    for offset in range(state.start_offset, state.end_offset):
        f = state.in_flight.get(offset, _UNSEEN)
        kind = DELIVERY_STATE_IDS[f.state]
        if out and out[-1][1] + 1 == offset and out[-1][2] == kind and out[-1][3] == f.delivery_count:
            out[-1] = (out[-1][0], offset, kind, f.delivery_count)
        else:
            out.append((offset, offset, kind, f.delivery_count))
    return tuple(out)


def replay(state: SharePartitionState, record: ShareRecord) -> SharePartitionState:
    """The one place a share partition changes."""
    if isinstance(record, Initialized):
        return SharePartitionState(True, record.start_offset, record.start_offset)
    if isinstance(record, Restored):
        restored = {o: InFlight(_STATE_OF_ID.get(kind, RecordState.AVAILABLE), count)
                    for first, last, kind, count in record.batches
                    for o in range(max(first, record.start_offset), last + 1)}
        end = max([record.start_offset, *(o + 1 for o in restored)])
        state = SharePartitionState(True, record.start_offset, end, MappingProxyType(restored))
        return replay(state, StartMoved(record.start_offset))  # SPSO past what the batches say is done
    in_flight = dict(state.in_flight)
    end = state.end_offset
    start = state.start_offset
    if isinstance(record, Acquired):
        # offsets between SPEO and the range are ones the log read passed over without a record
        # (compacted away, control batches): nothing to deliver, so they are done
        for offset in range(end, record.first):
            in_flight[offset] = InFlight(RecordState.ARCHIVED, 0)
        for offset in range(record.first, record.last + 1):
            count = in_flight[offset].delivery_count if offset in in_flight else 0
            in_flight[offset] = InFlight(RecordState.ACQUIRED, count + 1, record.member_id, record.lock_deadline_ms)
        end = max(end, record.last + 1)
    elif isinstance(record, Transitioned):
        for offset in range(max(record.first, start), min(record.last + 1, end)):
            before = in_flight.get(offset)
            in_flight[offset] = InFlight(record.state, before.delivery_count if before else 0)
    elif isinstance(record, TransitionStarted):
        for offset in range(max(record.first, start), min(record.last + 1, end)):
            if (before := in_flight.get(offset)) is not None:
                in_flight[offset] = replace(before, pending=record.state)
    elif isinstance(record, TransitionCompleted):
        for offset in range(max(record.first, start), min(record.last + 1, end)):
            before = in_flight.get(offset)
            if before is None or before.pending is None:
                continue
            in_flight[offset] = (InFlight(before.pending, before.delivery_count) if record.commit
                                 else replace(before, pending=None))
    else:  # StartMoved
        for offset in [o for o in in_flight if o < record.start_offset]:
            del in_flight[offset]
        start = max(start, record.start_offset) if state.initialized else record.start_offset
        end = max(end, start)
    while start < end and in_flight.get(start, _UNSEEN).state in DONE:  # SPSO passes what is done
        del in_flight[start]
        start += 1
    return SharePartitionState(True, start, end, MappingProxyType(in_flight))


_UNSEEN: Final = InFlight(RecordState.AVAILABLE, 0)


def replay_all(state: SharePartitionState, records: Iterable[ShareRecord]) -> SharePartitionState:
    for record in records:
        state = replay(state, record)
    return state


# ---- rules -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Acquisition:
    records: tuple[ShareRecord, ...]
    acquired: tuple[tuple[int, int, int], ...]  # (first, last, delivery count), ascending


def _ranges(offsets: Sequence[int]) -> list[tuple[int, int]]:
    """Ascending offsets as maximal [first, last] runs."""
    runs: list[tuple[int, int]] = []
    for offset in offsets:
        if runs and runs[-1][1] + 1 == offset:
            runs[-1] = (runs[-1][0], offset)
        else:
            runs.append((offset, offset))
    return runs


def acquire(state: SharePartitionState, *, member_id: str, batches: Sequence[tuple[int, int]], max_records: int,
            now_ms: int, limits: ShareLimits) -> Acquisition:
    """Acquire for `member_id` up to `max_records` offsets among `batches` (the [base, last]
    offsets of the record batches a log read returned, ascending): each AVAILABLE offset in
    [SPSO, SPEO), and each offset at or past SPEO while fewer than
    `limits.max_in_flight_records` are in flight. Offsets below SPSO, acquired by anyone, or done
    are skipped. Consecutive offsets with one delivery count make one range of the answer.

    An AVAILABLE offset whose delivery count already reached the limit is archived, never handed
    out again: a leader's snapshot counts the acquisitions it had in flight, so after a failover a
    record whose last permitted delivery was in flight comes back AVAILABLE at the limit, and
    acquiring it would deliver it once more than `group.share.delivery.count.limit` allows."""
    if not state.initialized:
        raise ValueError("acquire before the share partition is initialized")
    deadline = now_ms + limits.record_lock_duration_ms
    picked: list[tuple[int, int]] = []  # (offset, delivery count once acquired)
    exhausted: list[int] = []  # AVAILABLE at the delivery limit: archived instead
    for base, last in batches:
        for offset in range(max(base, state.start_offset), last + 1):
            if len(picked) >= max_records:
                break
            current = state.in_flight.get(offset)
            if offset >= state.end_offset:
                if offset - state.start_offset >= limits.max_in_flight_records:
                    break
                picked.append((offset, 1))
            elif current is not None and current.state is RecordState.AVAILABLE:
                if current.delivery_count >= limits.delivery_count_limit:
                    exhausted.append(offset)
                else:
                    picked.append((offset, current.delivery_count + 1))
    records = (_transitions([(o, RecordState.ARCHIVED) for o in exhausted])
               + tuple(Acquired(first, last, member_id, deadline) for first, last in _ranges([o for o, _ in picked])))
    acquired: list[tuple[int, int, int]] = []
    for offset, count in picked:
        if acquired and acquired[-1][1] + 1 == offset and acquired[-1][2] == count:
            acquired[-1] = (acquired[-1][0], offset, count)
        else:
            acquired.append((offset, offset, count))
    return Acquisition(records, tuple(acquired))


class AcknowledgeError(Exception):
    """An acknowledgement Kafka refuses (INVALID_RECORD_STATE, INVALID_REQUEST): the partition's
    acknowledgements change nothing."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _released(current: InFlight, limits: ShareLimits) -> RecordState:
    """Where a record given back goes: available again, or archived once its deliveries ran out."""
    return RecordState.ARCHIVED if current.delivery_count >= limits.delivery_count_limit else RecordState.AVAILABLE


def acknowledge(state: SharePartitionState, *, member_id: str, first: int, last: int, types: Sequence[int],
                limits: ShareLimits) -> tuple[TransitionStarted, ...]:
    """One acknowledgement batch of `member_id`, as pending transitions (`complete` ends them
    once the write is done): `types` holds one type for the whole of [first, last], or one per
    offset. Every offset must be ACQUIRED by the member with no acknowledgement already pending
    (Kafka: INVALID_RECORD_STATE otherwise, the whole batch refused)."""
    if last < first or first < 0:
        raise AcknowledgeError(ErrorCode.INVALID_REQUEST, f"bad acknowledgement range [{first}, {last}]")
    if len(types) not in (1, last - first + 1):
        raise AcknowledgeError(ErrorCode.INVALID_REQUEST,
                               f"{len(types)} acknowledge types for {last - first + 1} offsets [{first}, {last}]")
    try:
        kinds = [AcknowledgeType(t) for t in types]
    except ValueError:
        raise AcknowledgeError(ErrorCode.INVALID_REQUEST, f"unknown acknowledge type in {list(types)}") from None
    changes: list[tuple[int, RecordState]] = []
    for i, offset in enumerate(range(first, last + 1)):
        current = state.in_flight.get(offset)
        if current is None or current.state is not RecordState.ACQUIRED or current.member_id != member_id:
            held = "not in flight" if current is None else f"{current.state.value} by {current.member_id or 'nobody'}"
            raise AcknowledgeError(ErrorCode.INVALID_RECORD_STATE,
                                   f"offset {offset} is {held}, not acquired by member {member_id}")
        if current.pending is not None:
            raise AcknowledgeError(ErrorCode.INVALID_RECORD_STATE,
                                   f"offset {offset} has an acknowledgement in flight (to {current.pending.value})")
        kind = kinds[0] if len(kinds) == 1 else kinds[i]
        target = {AcknowledgeType.ACCEPT: RecordState.ACKNOWLEDGED, AcknowledgeType.REJECT: RecordState.ARCHIVED,
                  AcknowledgeType.GAP: RecordState.ARCHIVED}.get(kind) or _released(current, limits)
        changes.append((offset, target))
    return tuple(TransitionStarted(first, last, target) for first, last, target in _runs(changes))


def complete(started: Iterable[TransitionStarted], *, commit: bool) -> tuple[TransitionCompleted, ...]:
    """End an acknowledgement's pending transitions: `commit` once its share state write
    succeeded, else roll them back (Kafka's rollbackOrProcessStateUpdates)."""
    return tuple(TransitionCompleted(r.first, r.last, commit) for r in started)


def _runs(changes: Sequence[tuple[int, RecordState]]) -> list[tuple[int, int, RecordState]]:
    """(offset, state) pairs, ascending, as the fewest [first, last] runs of one state."""
    out: list[tuple[int, int, RecordState]] = []
    for offset, target in changes:
        if out and out[-1][1] + 1 == offset and out[-1][2] is target:
            out[-1] = (out[-1][0], offset, target)
        else:
            out.append((offset, offset, target))
    return out


def _transitions(changes: Sequence[tuple[int, RecordState]]) -> tuple[ShareRecord, ...]:
    """(offset, state) pairs, ascending, as the fewest Transitioned records."""
    return tuple(Transitioned(first, last, target) for first, last, target in _runs(changes))


def release_member(state: SharePartitionState, *, member_id: str, limits: ShareLimits) -> tuple[ShareRecord, ...]:
    """Every record `member_id` holds goes back (its share session closed, it left the group or
    was fenced): available again, or archived at the delivery limit."""
    return _transitions([(o, _released(f, limits)) for o, f in sorted(state.in_flight.items())
                         if _held(f) and f.member_id == member_id])


def expire_locks(state: SharePartitionState, *, now_ms: int, limits: ShareLimits) -> tuple[ShareRecord, ...]:
    """Every acquisition lock past its deadline ends: the record goes back as a release would."""
    return _transitions([(o, _released(f, limits)) for o, f in sorted(state.in_flight.items())
                         if _held(f) and 0 <= f.lock_deadline_ms <= now_ms])


def _held(f: InFlight) -> bool:
    """Acquired with no acknowledgement pending: a release or a lock timeout may return it. A
    pending one waits for its write (Kafka skips a record in a state transition); rolled back,
    its lock (maybe run out meanwhile) returns it."""
    return f.state is RecordState.ACQUIRED and f.pending is None


def next_lock_deadline(state: SharePartitionState) -> int | None:
    """The earliest acquisition lock deadline of a record a timeout may return, None if none."""
    deadlines = [f.lock_deadline_ms for f in state.in_flight.values() if _held(f)]
    return min(deadlines) if deadlines else None


def move_start(state: SharePartitionState, *, log_start_offset: int) -> tuple[ShareRecord, ...]:
    """The log's start passed SPSO (retention, DeleteRecords): those offsets are gone, SPSO
    follows (Kafka's SharePartition.updateCacheAndOffsets)."""
    if state.initialized and log_start_offset > state.start_offset:
        return (StartMoved(log_start_offset),)
    return ()


def counts(state: SharePartitionState) -> dict[str, int]:
    """How many offsets of [SPSO, SPEO) are in each state (describe, metrics, logs)."""
    out = {s.value: 0 for s in RecordState}
    for f in state.in_flight.values():
        out[f.state.value] += 1
    out[RecordState.AVAILABLE.value] += state.end_offset - state.start_offset - len(state.in_flight)
    return out
