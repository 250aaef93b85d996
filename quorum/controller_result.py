"""What a controller rule returns, and the one error it raises.

Kafka's `ControllerResult(records, response)`: a rule reads the committed image and returns
the records to append plus the reply to send once they commit; it never changes state.
Only replay (`metadata.delta.apply`) does. A rule that refuses its input raises
`ControllerApiError` before producing any record, so nothing is appended; the shell
(admin API, broker RPC server) translates it once into a Kafka error code or a 4xx.

Every rule is meant to run inside `ActiveController.decide(fn(image) -> records)`:

    def decision(image):
        result = create_topic(image, name=..., ...)
        replies.append(result.response)
        return result.records
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Generic, TypeAlias, TypeVar

from common.errors import ErrorCode
from metadata.records import Record

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

R = TypeVar("R")

# Partitions one broker decision (fence, unregister, controlled shutdown, re-registration) moves
# away from a broker; the rest follow in later decisions (quorum.controller_runtime), so the
# decision queue and the event loop serve heartbeats in between. Kafka bounds its controller
# events alike (ReplicationControlManager.MAX_ELECTIONS_PER_IMBALANCE = 1_000 elections, then it
# reschedules). Measured at 30,000 partitions: the rule and the encoding take 20-40 us per
# partition on the event loop and ~160 partition records fill a 16 KiB chunk, so one batch is
# 20-65 ms of event-loop work and a transaction of ~7 Raft entries.
MAX_PARTITIONS_PER_DECISION: Final = 1_000  # partitions
# Leaderships one controlled-shutdown decision moves (its first pass; the ISR-seat batches after
# it, fencing and unregistration keep MAX_PARTITIONS_PER_DECISION). The broker's shutdown waits
# for these batches, each committed before the next starts. As metadata transactions, their
# BeginTransaction chunk and EndTransaction chunk each waited for a Raft commit of their own, the
# body in rounds of PIPELINE_WINDOW chunks (quorum.metadata_log): 1,000 leaderships (7 chunks) took
# 4 commit rounds, 5,000 (~31 chunks) ~10. They are splittable now (ControllerResult.splittable:
# plain chunks, ~8 rounds for 5,000). The rule and its encoding hold the event loop ~40 us per
# partition on a quiet machine (~0.2 s per decision; ~3 times that under load), under the ~1 s a
# controller may stall before live brokers' heartbeats go unanswered.
MAX_LEADERSHIPS_PER_DECISION: Final = 5_000  # partitions
PartitionKey: TypeAlias = tuple[str, int]  # (topic name, partition id): the order rules walk partitions in


@dataclass(frozen=True, slots=True)
class LeaveFollowUp:
    """A rule stopped at its batch limit (`MAX_PARTITIONS_PER_DECISION`):
    the partitions of `broker_id` after `after` still need `remove_from_isr`, in later decisions
    that the shell (`quorum.controller_runtime`) queues one at a time, so the decision queue
    serves other events (heartbeats of live brokers) in between. `leaders_only`: the walk moves
    only the broker's leaderships (a controlled shutdown's first pass, in batches of
    `MAX_LEADERSHIPS_PER_DECISION`; None `after` then starts the second pass, every ISR seat, from
    the first partition)."""

    broker_id: int
    after: PartitionKey | None
    leaders_only: bool = False


@dataclass(frozen=True, slots=True)
class ElectFollowUp:
    """An unfence's elections stopped at their batch limit (`MAX_PARTITIONS_PER_DECISION`): the
    leaderless partitions `broker_id` replicates after `after` (None: from the first) are elected
    in later decisions, queued by the shell (`quorum.controller_runtime`) like `LeaveFollowUp`.
    Kafka elects them all in the unfence's event; at 100,000 leaderless partitions that was one
    decision of 100,001 records, 30 s long, and the active controller lost Raft leadership in it."""

    broker_id: int
    after: PartitionKey | None


FollowUp: TypeAlias = LeaveFollowUp | ElectFollowUp


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[R]):
    """The records a rule wants appended (in order) and the reply for when they commit.

    `atomic` is Kafka's isAtomic (`ControllerResult.atomicOf`). Since KIP-868 transactions
    (`quorum.metadata_log.MetadataLog.append`) every list commits all together or not at all,
    a list longer than one chunk as BeginTransaction ... EndTransaction, so the flag only
    documents what the rule needs.

    `splittable` opts out of that: every record stands alone, so a list longer than one chunk
    goes as plain chunks, each published as it commits (what Kafka's QuorumController does with
    every non-atomic result; `quorum.active_controller`). Only for rules whose half-committed
    list a failover leaves in a state the next active controller finishes from the image alone:
    a broker's partitions moving away (`quorum.broker_control.brokers_left_behind`), an
    unfence's elections (`brokers_with_elections_left`); the registration change, if any, first.
    """

    records: Sequence[Record]  # kept as a tuple: rules may hand over a list
    response: R
    atomic: bool = False
    follow_up: FollowUp | None = None  # work the rule left to later decisions (LeaveFollowUp, ElectFollowUp)
    splittable: bool = False
    # A splittable result's records already cut into chunks (`quorum.log_state.split_records`): a
    # batch computed ahead is encoded on the worker thread too, not on the event loop between two
    # batches (None: the shell encodes them).
    chunks: Sequence[bytes] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "records", tuple(self.records))
        if self.atomic and self.splittable:
            raise ValueError("a result is atomic or splittable, not both")
        if self.chunks is not None and not self.splittable:
            raise ValueError("only a splittable result's records are appended as the chunks given")


class ControllerApiError(Exception):
    """A request the controller refuses: Kafka's error code, why in words, and the field at fault."""

    def __init__(self, code: ErrorCode, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message
        self.field = field

    def __repr__(self) -> str:
        return f"ControllerApiError({self.code.name}, {self.message!r}, field={self.field!r})"
