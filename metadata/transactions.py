"""KIP-868 metadata transactions on replay: records of an open transaction are seen only at its End.

A change too large for one Raft entry (a topic of 10,000 partitions, fencing a broker that
leads thousands) is appended as several chunks framed by BeginTransaction ... EndTransaction.
The chunks commit one by one, and a controller failover can stop the append between two of
them; replay makes that harmless, the way Kafka's MetadataLoader and OffsetControlManager do:

- BeginTransaction opens a transaction. The records after it are replayed into a working
  image (so a record that contradicts the image is still refused at the chunk that carries
  it), but the published image — what the controller decides on, what brokers act on, what a
  snapshot holds — stays the one from before Begin;
- EndTransaction publishes the working image: the whole change appears at once;
- AbortTransaction drops the working image: the published image only moves its offset past
  the discarded records. A newly active controller that finds the log ending inside an open
  transaction appends it with its BeginEpoch (`quorum.log_state.check_epoch` insists);
- Begin inside an open transaction, End or Abort outside one: MetadataRecordError (Kafka
  throws too: it means the writer is broken, and the chunk is refused whole).

`ReplayState` is the pure value both replay shells hold (`quorum.log_state` on controllers,
`broker.metadata_follower` on brokers); `last_offset` is where the next record goes, which
is past the published image's offset while a transaction is open.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from metadata.codec import MetadataRecordError
from metadata.delta import apply, apply_tracked
from metadata.image import MetadataImage
from metadata.records import AbortTransaction, BeginTransaction, EndTransaction, Record


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """A transaction begun at `begin_offset`: `image` is the published image plus its records so far;
    `changed` the partitions they created or changed (one set per applied run: no copy per chunk)."""

    begin_offset: int
    name: str | None
    image: MetadataImage
    changed: tuple[frozenset[tuple[str, int]], ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class ReplayState:
    """The published image and the open transaction, if any."""

    image: MetadataImage
    transaction: OpenTransaction | None = None
    # The partitions the `replay` call that returned this state created or changed in the published
    # image, relative to the published image it was given (nothing else differs but removed
    # topics): a broker's local changes then cost O(changed), not O(partitions of touched topics).
    # Not part of the state's value: replaying the same records in other batches names them in
    # other calls.
    changed: tuple[frozenset[tuple[str, int]], ...] = field(default=(), compare=False)

    @property
    def changed_partitions(self) -> frozenset[tuple[str, int]]:
        """`changed` as one set."""
        return frozenset().union(*self.changed)

    @property
    def last_offset(self) -> int:
        """The offset of the last replayed record, published or still in a transaction."""
        return self.image.offset if self.transaction is None else self.transaction.image.offset

    @property
    def in_transaction(self) -> bool:
        return self.transaction is not None


def _flush(state: ReplayState, run: list[tuple[int, Record]], published: list[frozenset[tuple[str, int]]],
           ) -> ReplayState:
    """Replay a run of ordinary records: into the open transaction, or published at once (what it
    changed then goes to `published`)."""
    if not run:
        return state
    if state.transaction is None:
        image, changed = apply_tracked(state.image, run)
        published.append(changed)
        return ReplayState(image)
    tx = state.transaction
    image, changed = apply_tracked(tx.image, run)
    return ReplayState(state.image, OpenTransaction(tx.begin_offset, tx.name, image, (*tx.changed, changed)))


def replay(state: ReplayState, records_with_offsets: Iterable[tuple[int, Record]]) -> ReplayState:
    """`state` after (offset, record) pairs; all or nothing (MetadataRecordError, `state` unchanged).

    Ordinary records between markers are applied in one `metadata.delta.apply` call each run,
    so a 10,000-record chunk costs one copy of the sub-images it touches, not one per record.
    """
    run: list[tuple[int, Record]] = []
    published: list[frozenset[tuple[str, int]]] = []  # what changed in the published image
    for offset, record in records_with_offsets:  # bounded by the input
        if not isinstance(record, (BeginTransaction, EndTransaction, AbortTransaction)):
            run.append((offset, record))
            continue
        state, run = _flush(state, run, published), []
        if isinstance(record, BeginTransaction):
            if state.transaction is not None:
                raise MetadataRecordError(
                    f"offset {offset}: BeginTransaction inside the transaction begun at offset "
                    f"{state.transaction.begin_offset}")
            opened = apply(state.image, [(offset, record)])
            state = ReplayState(state.image, OpenTransaction(offset, record.name, opened))
            continue
        tx = state.transaction
        if tx is None:
            raise MetadataRecordError(f"offset {offset}: {type(record).__name__} without an open transaction")
        if isinstance(record, EndTransaction):
            state = ReplayState(apply(tx.image, [(offset, record)]))
            published.extend(tx.changed)
        else:  # Abort: the published image skips the discarded offsets
            state = ReplayState(apply(state.image, [(offset, record)]))
    state = _flush(state, run, published)
    return ReplayState(state.image, state.transaction, tuple(published))
