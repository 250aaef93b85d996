"""The transactional ids of one `__transaction_state` partition, rebuilt by replay.

    image = TransactionsImage.EMPTY.replay(key, value)     # loading, and after every write
    image.get("tx-1")                                      # TransactionMetadata | None

A tombstone (an expired id) removes its id. `last_producer_epoch` is memory-only state in
Kafka (lost on a coordinator move), so replay sets it to -1; a rule that knows it hands the
runtime its state directly (`with_metadata`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar

from transactions.records import TransactionMetadata, decode_record

PURE = True


@dataclass(frozen=True, slots=True)
class TransactionsImage:
    by_id: Mapping[str, TransactionMetadata] = field(default_factory=lambda: MappingProxyType({}))

    EMPTY: ClassVar[TransactionsImage]

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        return self.by_id.get(transactional_id)

    def __iter__(self) -> Iterator[TransactionMetadata]:
        return iter(self.by_id.values())

    def __len__(self) -> int:
        return len(self.by_id)

    def with_metadata(self, transactional_id: str, metadata: TransactionMetadata | None) -> TransactionsImage:
        """This image with one id replaced (None: removed). Copies the id map: a partition
        holds few enough ids for that to cost less than one append."""
        changed = dict(self.by_id)
        if metadata is None:
            changed.pop(transactional_id, None)
        else:
            changed[transactional_id] = metadata
        return TransactionsImage(MappingProxyType(changed))

    def replay(self, key: bytes, value: bytes | None) -> TransactionsImage:
        transactional_id, metadata = decode_record(key, value)
        return self.with_metadata(transactional_id, metadata)


TransactionsImage.EMPTY = TransactionsImage()
