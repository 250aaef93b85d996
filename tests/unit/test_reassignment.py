"""metadata/reassignment.py, metadata/reassignment_replicas.py and quorum/reassignment_control.py:
Kafka's KIP-455 rules as tables, and the records round-trip."""

from __future__ import annotations

import pytest

from common.errors import ErrorCode
from metadata.delta import apply, merge_partition_change
from metadata.image import (
    EMPTY_IMAGE,
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
)
from metadata.partition_change import IsrMember, alter_partition, remove_from_isr
from metadata.reassignment import (
    ReassignmentRejected,
    cancel_reassignment,
    change_reassignment,
    list_reassignments,
    validate_target,
)
from metadata.reassignment_replicas import maybe_complete, reassignment_replicas, revert
from metadata.records import (
    NO_LEADER,
    Partition,
    PartitionChange,
    RegisterBroker,
    Topic,
    decode_record,
    encode_record,
)
from metadata.snapshot import decode_snapshot, encode_snapshot
from quorum.reassignment_control import (
    ReassignmentRequest,
    alter_partition_reassignments,
    complete_reassignments,
)

T = "TOPIC-id"
BROKERS = {b: BrokerRegistration(b, 10 + b, f"inc-{b}", (), fenced=False) for b in range(1, 8)}
lookup = BROKERS.get


def active(b: int) -> bool:
    return b in BROKERS


def part(replicas, isr, leader, *, adding=(), removing=()) -> PartitionRegistration:
    return PartitionRegistration(T, 0, replicas, isr, leader=leader, leader_epoch=5, partition_epoch=7,
                                 adding_replicas=adding, removing_replicas=removing)


def change(**fields) -> PartitionChange:
    return PartitionChange(T, 0, **fields)


# (current, target, expected replicas, adding, removing) -- PartitionReassignmentReplicas
REPLICAS = [
    ((4, 5, 6), (5, 6, 7), (5, 6, 7, 4), (7,), (4,)),
    ((1,), (1, 2, 3), (1, 2, 3), (2, 3), ()),
    ((1, 2, 3), (1,), (1, 2, 3), (), (2, 3)),
    ((1, 2, 3), (4, 5, 6), (4, 5, 6, 1, 2, 3), (4, 5, 6), (1, 2, 3)),
    ((1, 2, 3), (3, 2, 1), (3, 2, 1), (), ()),
]


@pytest.mark.parametrize("current,target,replicas,adding,removing", REPLICAS)
def test_reassignment_replicas(current, target, replicas, adding, removing):
    moves = reassignment_replicas(current, target)
    assert (moves.replicas, moves.adding, moves.removing) == (replicas, adding, removing)


# (replicas, adding, removing, isr, min_isr, expected (replicas, isr) or None)
COMPLETE = [
    pytest.param((5, 6, 7, 4), (7,), (4,), (4, 5, 6), 1, None, id="adding-not-in-isr-yet"),
    pytest.param((5, 6, 7, 4), (7,), (4,), (4, 5, 6, 7), 1, ((5, 6, 7), (5, 6, 7)), id="completes"),
    pytest.param((1, 2, 3), (), (2, 3), (1, 2, 3), 1, ((1,), (1,)), id="rf-down-at-once"),
    pytest.param((1, 2, 3), (), (2, 3), (1, 2, 3), 2, ((1,), (1,)), id="rf-below-min-isr-still-completes"),
    pytest.param((1, 2), (), (1,), (1,), 1, None, id="never-into-an-empty-isr"),
    pytest.param((2, 3, 4, 1), (4,), (1,), (1, 4), 2, None, id="would-shrink-isr-below-min-isr"),
    pytest.param((2, 3, 4, 1), (4,), (1,), (1, 4, 2), 2, ((2, 3, 4), (4, 2)), id="min-isr-kept"),
    pytest.param((1, 2, 3), (), (), (1, 2, 3), 1, None, id="nothing-running"),
]


@pytest.mark.parametrize("replicas,adding,removing,isr,min_isr,expected", COMPLETE)
def test_maybe_complete(replicas, adding, removing, isr, min_isr, expected):
    assert maybe_complete(replicas, adding, removing, isr, min_isr) == expected


def test_revert():
    assert revert((5, 6, 7, 4), (4, 5, 7), (7,)).replicas == (5, 6, 4)
    back = revert((4, 5, 6, 1, 2, 3), (4, 5, 6), (4, 5, 6))
    assert (back.replicas, back.isr, back.unclean) == ((1, 2, 3), (), True)


# (partition, target, expected record or rejection)
MOVE_456_TO_567 = part((4, 5, 6), (4, 5, 6), 4)
CHANGE = [
    pytest.param(MOVE_456_TO_567, (5, 6, 7), change(replicas=(5, 6, 7, 4), adding_replicas=(7,),
                                                    removing_replicas=(4,)), id="grow-keeps-the-epochs"),
    pytest.param(part((1,), (1,), 1), (1, 2, 3), change(replicas=(1, 2, 3), adding_replicas=(2, 3)),
                 id="rf-up-no-epoch-bump"),
    pytest.param(part((1, 2, 3), (1, 2, 3), 2), (1,), change(replicas=(1,), isr=(1,), leader=1),
                 id="rf-down-completes-and-moves-the-leader"),
    pytest.param(part((1, 2, 3), (1, 2, 3), 1), (1, 2, 3), None, id="same-replicas-no-op"),
    pytest.param(part((1, 2, 3), (1, 2, 3), 1), (3, 2, 1), change(replicas=(3, 2, 1)), id="reorder"),
    pytest.param(part((5, 6, 7, 4), (4, 5, 6), 4, adding=(7,), removing=(4,)), (4, 5, 6),
                 change(replicas=(4, 5, 6), adding_replicas=(), removing_replicas=(), leader=4),
                 id="original-replicas-again-cancels"),
    pytest.param(MOVE_456_TO_567, (), ReassignmentRejected(
        ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."),
        id="empty"),
    pytest.param(MOVE_456_TO_567, (5, 5, 6), ReassignmentRejected(
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "The manual partition assignment includes the broker 5 more than once."), id="duplicate"),
    pytest.param(MOVE_456_TO_567, (5, 6, 99), ReassignmentRejected(
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "The manual partition assignment includes broker 99, but no such broker is registered."), id="unknown"),
]


@pytest.mark.parametrize("partition,target,expected", CHANGE)
def test_change_reassignment(partition, target, expected):
    outcome = change_reassignment(partition, target, broker_lookup=lookup, is_acceptable=active)
    assert outcome == expected
    if isinstance(outcome, PartitionChange):  # the record applies to the partition
        merge_partition_change(partition, outcome)


def test_a_move_completes_through_alter_partition_and_the_leader_moves():
    grown = merge_partition_change(MOVE_456_TO_567, change_reassignment(
        MOVE_456_TO_567, (5, 6, 7), broker_lookup=lookup, is_acceptable=active))  # type: ignore[arg-type]
    assert grown.leader_epoch == 5  # growing bumps the partition epoch only
    record = alter_partition(grown, leader_id=4, leader_epoch=5, partition_epoch=grown.partition_epoch,
                             new_isr=[IsrMember(4), IsrMember(5), IsrMember(6), IsrMember(7)],
                             broker_lookup=lookup)
    assert record == change(replicas=(5, 6, 7), isr=(5, 6, 7), leader=5, adding_replicas=(), removing_replicas=())
    done = merge_partition_change(grown, record)
    assert (done.replicas, done.isr, done.leader, done.leader_epoch, done.is_reassigning) == \
        ((5, 6, 7), (5, 6, 7), 5, 6, False)


def test_fencing_a_removing_replica_keeps_the_reassignment_running():
    grown = part((5, 6, 7, 4), (4, 5, 6), 5, adding=(7,), removing=(4,))
    record = remove_from_isr(grown, 4, is_acceptable=active)
    assert record == change(isr=(5, 6))


CANCEL = [
    pytest.param(part((1, 2, 3), (1, 2, 3), 1), False, ReassignmentRejected(
        ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress for this topic-partition."),
        id="nothing-to-cancel"),
    pytest.param(part((5, 6, 7, 4), (4, 5, 6), 4, adding=(7,), removing=(4,)), False,
                 # Kafka's revert keeps the replicas' current order: target first, then the removing ones
                 change(replicas=(5, 6, 4), adding_replicas=(), removing_replicas=(), leader=4), id="revert"),
    pytest.param(part((5, 6, 7, 4), (4, 5, 7), 7, adding=(7,), removing=(4,)), False,
                 change(replicas=(5, 6, 4), isr=(4, 5), leader=5, adding_replicas=(), removing_replicas=()),
                 id="revert-moves-leadership-off-an-adding-replica"),
    pytest.param(part((4, 5, 6, 1, 2, 3), (4, 5, 6), 4, adding=(4, 5, 6), removing=(1, 2, 3)), False,
                 ReassignmentRejected(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                      "Unable to revert partition assignment for t:0 because it would require "
                                      "an unclean leader election."), id="unclean-revert-refused"),
    pytest.param(part((4, 5, 6, 1, 2, 3), (4, 5, 6), 4, adding=(4, 5, 6), removing=(1, 2, 3)), True,
                 change(replicas=(1, 2, 3), isr=(1,), leader=1, adding_replicas=(), removing_replicas=(),
                        leader_recovery_state=1), id="unclean-revert-allowed"),
]


@pytest.mark.parametrize("partition,unclean,expected", CANCEL)
def test_cancel_reassignment(partition, unclean, expected):
    outcome = cancel_reassignment(partition, topic_name="t", is_acceptable=active, unclean_allowed=unclean)
    assert outcome == expected
    if isinstance(outcome, PartitionChange):
        assert not merge_partition_change(partition, outcome).is_reassigning


def test_validate_target_checks_sorted_ids_like_kafka():
    assert validate_target((9, 9), lookup).message.endswith("broker 9, but no such broker is registered.")  # type: ignore[union-attr]
    assert validate_target((3, 1, 2), lookup) is None


# -- records, image, snapshot ----------------------------------------------------------

RECORDS = [
    Partition(T, 0, (5, 6, 7, 4), (4, 5, 6), leader=4, removing_replicas=(4,), adding_replicas=(7,)),
    Partition(T, 0, (1, 2), (1, 2), leader=1),
    PartitionChange(T, 0, replicas=(5, 6, 7), adding_replicas=(), removing_replicas=()),
    PartitionChange(T, 0, isr=(1,)),
]


@pytest.mark.parametrize("record", RECORDS)
def test_records_round_trip(record):
    assert decode_record(encode_record(record)) == record


def test_records_without_the_new_fields_decode_and_encode_as_before():
    old = Partition(T, 0, (1, 2), (1, 2), leader=1)
    assert b"adding_replicas" not in encode_record(old)  # left off at its default
    assert b"adding_replicas" not in encode_record(PartitionChange(T, 0, isr=(1,)))
    assert decode_record(encode_record(old)).adding_replicas == ()
    assert decode_record(encode_record(PartitionChange(T, 0, isr=(1,)))).adding_replicas is None


def _image() -> MetadataImage:
    records = [RegisterBroker(b, f"inc-{b}", (), fenced=False) for b in (4, 5, 6, 7)]
    records += [Topic("t", T), Partition(T, 0, (4, 5, 6), (4, 5, 6), leader=4)]
    return apply(EMPTY_IMAGE, enumerate(records))


def test_controller_rule_per_partition_answers_and_snapshot():
    image = _image()
    result = alter_partition_reassignments(image, [
        ReassignmentRequest("t", 0, (5, 6, 7)), ReassignmentRequest("t", 9, (5,)),
        ReassignmentRequest("nope", 0, (5,)), ReassignmentRequest("t", 0, (5, 5))])
    assert [r.error for r in result.response] == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                  ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                  ErrorCode.INVALID_REPLICA_ASSIGNMENT]
    assert len(result.records) == 1
    moved = apply(image, [(image.offset + 1, result.records[0])])
    assert [(o.topic, o.replicas, o.adding_replicas, o.removing_replicas) for o in list_reassignments(moved)] \
        == [("t", (5, 6, 7, 4), (7,), (4,))]
    assert decode_snapshot(encode_snapshot(moved)) == moved
    assert complete_reassignments(moved).records == ()
    cancelled = alter_partition_reassignments(moved, [ReassignmentRequest("t", 0, None)] * 2)
    assert [r.error for r in cancelled.response] == [ErrorCode.NONE, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS]


def test_complete_reassignments_finishes_one_the_isr_already_allows():
    image = _image()
    stuck = PartitionChange(T, 0, replicas=(5, 6, 7, 4), isr=(4, 5, 6, 7), adding_replicas=(7,),
                            removing_replicas=(4,))
    image = apply(image, [(image.offset + 1, stuck)])
    result = complete_reassignments(image)
    assert result.response == 1
    done = apply(image, [(image.offset + 1, result.records[0])])
    partition = done.partition(T, 0)
    assert partition is not None and (partition.replicas, partition.leader, partition.is_reassigning) == \
        ((5, 6, 7), 5, False)
    assert NO_LEADER != partition.leader
