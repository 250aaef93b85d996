"""Tests for metadata/transactions.py: KIP-868 replay rules, as (given, records, expected) tables."""

from __future__ import annotations

import pytest

from metadata.codec import MetadataRecordError
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.local_changes import changes_for_broker
from metadata.records import (
    AbortTransaction,
    BeginEpoch,
    BeginTransaction,
    EndTransaction,
    NoOp,
    Partition,
    PartitionChange,
    Record,
    RemoveTopic,
    Topic,
)
from metadata.transactions import ReplayState, replay

BASE = apply(EMPTY_IMAGE, [(0, BeginEpoch(1))])
TOPIC = Topic("orders", "t-orders")
PART0 = Partition("t-orders", 0, replicas=(1,), isr=(1,), leader=1)
PART1 = Partition("t-orders", 1, replicas=(1,), isr=(1,), leader=1)
CREATE: tuple[Record, ...] = (TOPIC, PART0, PART1)


def at(first: int, *records: Record) -> list[tuple[int, Record]]:
    return list(enumerate(records, start=first))


def topics(image: MetadataImage) -> list[str]:
    return sorted(image.topics.by_name)


# (name, records after BASE (offsets from 1), published topics, published offset, open?, last offset)
CASES = [
    ("plain records publish at once", (TOPIC, PART0), ["orders"], 2, False, 2),
    ("begin alone publishes nothing", (BeginTransaction("t"),), [], 0, True, 1),
    ("records inside an open transaction are held back", (BeginTransaction("t"), *CREATE), [], 0, True, 4),
    ("end publishes them all at once", (BeginTransaction("t"), *CREATE, EndTransaction()), ["orders"], 5,
     False, 5),
    ("abort drops them, the offset moves past them", (BeginTransaction("t"), *CREATE, AbortTransaction("x")),
     [], 5, False, 5),
    ("records after an abort publish again", (BeginTransaction(), TOPIC, AbortTransaction(), TOPIC),
     ["orders"], 4, False, 4),
    ("an empty transaction", (BeginTransaction(), EndTransaction()), [], 2, False, 2),
    ("a second transaction after the first ended", (BeginTransaction(), TOPIC, EndTransaction(),
                                                    BeginTransaction(), PART0), ["orders"], 3, True, 5),
]


@pytest.mark.parametrize("name,records,published,offset,in_tx,last", CASES, ids=[c[0] for c in CASES])
def test_replay_table(name: str, records: tuple[Record, ...], published: list[str], offset: int,
                      in_tx: bool, last: int) -> None:
    state = replay(ReplayState(BASE), at(1, *records))
    assert topics(state.image) == published
    assert state.image.offset == offset
    assert state.in_transaction is in_tx
    assert state.last_offset == last


@pytest.mark.parametrize("name,records", [
    ("begin inside a transaction", (BeginTransaction("a"), BeginTransaction("b"))),
    ("end without a transaction", (EndTransaction(),)),
    ("abort without a transaction", (AbortTransaction("x"),)),
    ("a record the working image refuses", (BeginTransaction(), PART0)),  # no topic t-orders
    ("end twice", (BeginTransaction(), EndTransaction(), EndTransaction())),
])
def test_bad_sequences_raise_and_leave_the_state(name: str, records: tuple[Record, ...]) -> None:
    before = ReplayState(BASE)
    with pytest.raises(MetadataRecordError):
        replay(before, at(1, *records))
    assert before.image is BASE and before.transaction is None


def test_any_split_of_the_records_reaches_the_same_state() -> None:
    records = at(1, NoOp(), BeginTransaction("create"), *CREATE, EndTransaction(), BeginTransaction(),
                 Topic("payments", "t-payments"), AbortTransaction("failover"), NoOp())
    whole = replay(ReplayState(BASE), records)
    for cut in range(len(records) + 1):
        split = replay(replay(ReplayState(BASE), records[:cut]), records[cut:])
        assert split.image == whole.image and split.last_offset == whole.last_offset
        assert split.transaction is None


def test_published_image_is_unchanged_object_while_a_transaction_is_open() -> None:
    state = replay(ReplayState(BASE), at(1, BeginTransaction("t"), TOPIC))
    state = replay(state, at(3, PART0))
    assert state.image is BASE  # brokers compare images by identity to skip a publish
    assert state.transaction is not None and state.transaction.begin_offset == 1
    assert topics(state.transaction.image) == ["orders"]


def test_changed_partitions_name_what_the_published_image_gained() -> None:
    opened = replay(ReplayState(BASE), at(1, BeginTransaction("t"), *CREATE))
    assert opened.changed_partitions == frozenset()  # nothing published yet
    ended = replay(opened, at(5, EndTransaction(), PartitionChange("t-orders", 1, isr=())))
    assert ended.changed_partitions == {("t-orders", 0), ("t-orders", 1)}
    aborted = replay(ended, at(7, BeginTransaction(), PartitionChange("t-orders", 0, isr=()), AbortTransaction()))
    assert aborted.changed_partitions == frozenset()


def test_any_split_names_every_partition_change_a_broker_must_see() -> None:
    records = at(1, BeginTransaction("create"), *CREATE, EndTransaction(), PartitionChange("t-orders", 0, leader=2,
                 replicas=(1, 2), isr=(2,)), BeginTransaction(), PartitionChange("t-orders", 1, isr=()),
                 AbortTransaction("failover"), BeginTransaction(), PartitionChange("t-orders", 1, replicas=(2,),
                 isr=(2,), leader=2), EndTransaction(), RemoveTopic("t-orders"))
    base = ReplayState(BASE)
    for cut in range(len(records) + 1):
        first = replay(base, records[:cut])
        second = replay(first, records[cut:])
        for old, new in ((base, first), (first, second)):
            for broker in (1, 2):
                assert changes_for_broker(old.image, new.image, broker, new.changed_partitions) == \
                    changes_for_broker(old.image, new.image, broker), (cut, broker)
