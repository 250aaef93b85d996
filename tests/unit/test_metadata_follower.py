"""broker/metadata_follower.py: fetch replies in, images and LocalReplicaChanges out; heartbeats."""

from __future__ import annotations

from typing import Any

import pytest

from broker.metadata_follower import (
    CHECKPOINT_COST_FACTOR,
    MAX_CHECKPOINT_DEFER_MS,
    NO_BROKER_EPOCH,
    HeartbeatDecision,
    MetadataFollowerError,
    MetadataFollowerState,
    has_changes,
    own_registration_replayed,
    ready_to_publish,
)
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.records import (
    AbortTransaction,
    BeginEpoch,
    BeginTransaction,
    EndTransaction,
    BrokerRegistrationChange,
    Listener,
    NoOp,
    Partition,
    PartitionChange,
    RegisterBroker,
    RemoveTopic,
    Topic,
    record_to_map,
)
from metadata.snapshot import encode_snapshot

ORDERS = "orders-id"
BROKER = 4


def listeners(n: int) -> tuple[Listener, ...]:
    return (Listener("PLAINTEXT", "127.0.0.1", 9000 + n),)


# Offsets 0..7: an epoch, three brokers, a topic with two partitions (4 leads 0, follows 1).
LOG = [
    BeginEpoch(1),
    RegisterBroker(4, "inc-4", listeners(4)),
    RegisterBroker(5, "inc-5", listeners(5)),
    RegisterBroker(6, "inc-6", listeners(6)),
    Topic("orders", ORDERS),
    Partition(ORDERS, 0, replicas=(4, 5), isr=(4, 5), leader=4),
    Partition(ORDERS, 1, replicas=(5, 4), isr=(5, 4), leader=5),
    BrokerRegistrationChange(4, 1, fenced=False),
]
# Offsets 8..10: leadership of partition 1 moves to 4, partition 0 shrinks, the topic goes.
LATER = [PartitionChange(ORDERS, 1, isr=(4,), leader=4), PartitionChange(ORDERS, 0, isr=(4,)), NoOp()]


def page(records: list[Any], start: int, *, last: int | None = None) -> dict[str, Any]:
    pairs = [[start + i, record_to_map(r)] for i, r in enumerate(records)]
    return {"error_code": 0, "error_message": None, "records": pairs,
            "last_offset": (start + len(records) - 1) if last is None else last,
            "log_start_offset": 0, "snapshot": None, "snapshot_offset": None}


def snapshot_reply(records: list[Any]) -> dict[str, Any]:
    image = apply(EMPTY_IMAGE, enumerate(records))
    return {"error_code": 0, "error_message": None, "records": [], "last_offset": image.offset,
            "log_start_offset": image.offset + 1, "snapshot": encode_snapshot(image),
            "snapshot_offset": image.offset}


def names(parts) -> list[tuple[str, int]]:
    return [(p.topic_name, p.partition_id) for p in parts]


def test_records_applied_in_order_give_local_changes() -> None:
    state = MetadataFollowerState(BROKER)
    assert state.next_fetch_offset == 0
    changes = state.on_fetch_reply(page(LOG, 0))
    assert state.applied_offset == 7 and state.next_fetch_offset == 8
    assert state.image == apply(EMPTY_IMAGE, enumerate(LOG))
    assert names(changes.leaders) == names(changes.elected_leaders) == [("orders", 0)]
    assert names(changes.followers) == [("orders", 1)] and changes.deletes == ()
    later = state.on_fetch_reply(page(LATER, 8))
    assert names(later.leaders) == [("orders", 0), ("orders", 1)]
    assert names(later.elected_leaders) == [("orders", 1)]  # 0 only shrank its ISR: same leader epoch
    assert state.image.partition(ORDERS, 1).leader_epoch == 1
    removed = state.on_fetch_reply(page([RemoveTopic(ORDERS)], 11))
    assert names(removed.deletes) == [("orders", 0), ("orders", 1)] and state.image.topic("orders") is None


@pytest.mark.parametrize("split", [1, 2, 3, 5, 8])
def test_any_split_into_pages_reaches_the_same_image(split: int) -> None:
    state = MetadataFollowerState(BROKER)
    everything = LOG + LATER
    for start in range(0, len(everything), split):
        state.on_fetch_reply(page(everything[start:start + split], start))
    assert state.image == apply(EMPTY_IMAGE, enumerate(everything))


# Offsets 8..12: partition 1 moves to 4 and partition 0 shrinks, as one KIP-868 transaction.
IN_TRANSACTION = [BeginTransaction("fence 5"), *LATER[:2], EndTransaction()]


@pytest.mark.parametrize("split", [1, 2, 3, 4])
def test_a_transaction_reaches_the_replica_manager_only_at_its_end(split: int) -> None:
    state = MetadataFollowerState(BROKER)
    state.on_fetch_reply(page(LOG, 0))
    published = state.image
    seen = []
    for start in range(0, len(IN_TRANSACTION), split):
        changes = state.on_fetch_reply(page(IN_TRANSACTION[start:start + split], 8 + start, last=11))
        seen.append(changes)
        assert state.next_fetch_offset == 8 + min(start + split, len(IN_TRANSACTION))
        if start + split < len(IN_TRANSACTION):
            assert changes is None and state.image is published and state.applied_offset == 7
    assert state.applied_offset == 11 and state.image.partition(ORDERS, 1).leader == 4
    assert names(seen[-1].elected_leaders) == [("orders", 1)]  # the whole change in one publish


def test_an_aborted_transaction_changes_nothing_but_the_offset() -> None:
    state = MetadataFollowerState(BROKER)
    state.on_fetch_reply(page(LOG, 0))
    published = state.image
    assert state.on_fetch_reply(page([BeginTransaction("fence 5"), LATER[0]], 8, last=9)) is None
    changes = state.on_fetch_reply(page([AbortTransaction("controller failover"), BeginEpoch(2)], 10))
    assert changes is not None and not changes.leaders and not changes.followers and not changes.deletes
    assert state.applied_offset == 11 and state.image.partition(ORDERS, 1) == published.partition(ORDERS, 1)


def test_an_empty_page_changes_nothing_but_the_known_end() -> None:
    state = MetadataFollowerState(BROKER)
    state.on_fetch_reply(page(LOG, 0))
    image = state.image
    assert state.on_fetch_reply(page([], 8, last=20)) is None
    assert state.image is image and state.controller_last_offset == 20 and state.lag == 13


def test_changes_that_do_not_touch_this_broker_are_empty() -> None:
    state = MetadataFollowerState(6)
    changes = state.on_fetch_reply(page(LOG, 0))
    assert changes is not None and not has_changes(changes)


GAPS_AND_DUPLICATES = [  # (already applied, reply page start, records, message)
    (LOG, 9, LATER, "a gap: record at offset 9 where offset 8 was expected"),
    (LOG, 7, LATER, "a repeated offset: record at offset 7 where offset 8 was expected"),
    (LOG, 0, LOG, "a repeated offset: record at offset 0 where offset 8 was expected"),
    ([], 1, LOG, "a gap: record at offset 1 where offset 0 was expected"),
]


@pytest.mark.parametrize(("applied", "start", "records", "message"), GAPS_AND_DUPLICATES)
def test_gaps_and_duplicates_are_rejected_and_change_nothing(applied, start, records, message) -> None:
    state = MetadataFollowerState(BROKER)
    if applied:
        state.on_fetch_reply(page(applied, 0))
    before = state.image
    with pytest.raises(MetadataFollowerError, match=message):
        state.on_fetch_reply(page(records, start))
    assert state.image is before


def test_a_gap_inside_one_page_is_rejected_whole() -> None:
    state = MetadataFollowerState(BROKER)
    reply = page(LOG, 0)
    reply["records"][5][0] = 50
    with pytest.raises(MetadataFollowerError, match="a gap: record at offset 50 where offset 5"):
        state.on_fetch_reply(reply)
    assert state.image is EMPTY_IMAGE


BAD_REPLIES = [  # (reply changes, message)
    ({"error_code": 42, "error_message": "offset must be an integer"}, "refused with error 42"),
    ({"records": [[0, {"type": 999, "version": 0}]]}, "unknown metadata record type 999"),
    ({"records": [[0, record_to_map(PartitionChange(ORDERS, 0, isr=(4,)))]]}, "unknown topic id"),
    ({"records": [["0", record_to_map(NoOp())]]}, "records\\[0\\] must be \\[offset, record map\\]"),
    ({"records": "nope"}, "records must be an array"),
    ({"snapshot": b"\xc1garbage"}, "snapshot: not valid msgpack"),
    ({"last_offset": "7"}, "last_offset must be an integer"),
]


@pytest.mark.parametrize(("change", "message"), BAD_REPLIES)
def test_bad_replies_raise_a_clear_error(change: dict[str, Any], message: str) -> None:
    state = MetadataFollowerState(BROKER)
    with pytest.raises(MetadataFollowerError, match=message):
        state.on_fetch_reply({**page([NoOp()], 0), **change})
    assert state.image is EMPTY_IMAGE


def test_a_snapshot_replaces_the_image() -> None:
    state = MetadataFollowerState(BROKER)
    state.on_fetch_reply(page(LOG[:4], 0))  # brokers only
    changes = state.on_fetch_reply(snapshot_reply(LOG + LATER))
    assert state.image == apply(EMPTY_IMAGE, enumerate(LOG + LATER)) and state.applied_offset == 10
    assert names(changes.leaders) == [("orders", 0), ("orders", 1)]
    assert state.on_fetch_reply(snapshot_reply(LOG + LATER)) is None  # the same offset: nothing new
    more = state.on_fetch_reply(page([RemoveTopic(ORDERS)], 11))  # records continue after it
    assert len(more.deletes) == 2


def test_a_snapshot_older_than_the_image_is_refused() -> None:
    state = MetadataFollowerState(BROKER)
    state.on_fetch_reply(page(LOG + LATER, 0))
    with pytest.raises(MetadataFollowerError, match="snapshot at offset 7 is older than the applied offset 10"):
        state.on_fetch_reply(snapshot_reply(LOG))


def test_a_snapshot_whose_declared_offset_differs_is_refused() -> None:
    reply = {**snapshot_reply(LOG), "snapshot_offset": 3}
    with pytest.raises(MetadataFollowerError, match="snapshot_offset 3 but the snapshot holds offset 7"):
        MetadataFollowerState(BROKER).on_fetch_reply(reply)


def registered(epoch: int = 1) -> MetadataFollowerState:
    state = MetadataFollowerState(BROKER)
    assert state.on_registration_reply({"error_code": 0, "error_message": None, "broker_epoch": epoch}) == epoch
    return state


def test_registration_request_and_reply() -> None:
    state = MetadataFollowerState(BROKER)
    body = state.registration_request(incarnation_id="inc", listeners=listeners(4), rack="r1", cluster_id="c")
    assert body == {"broker_id": 4, "incarnation_id": "inc", "rack": "r1", "cluster_id": "c",
                    "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9004}]}
    assert not state.registered
    assert state.on_registration_reply({"error_code": 101, "error_message": "dup"}) is None  # retry later
    with pytest.raises(MetadataFollowerError, match="registration refused with error 104"):
        state.on_registration_reply({"error_code": 104, "error_message": "other cluster"})
    assert state.on_registration_reply({"error_code": 0, "broker_epoch": 12}) == 12
    assert state.registered and state.broker_epoch == 12 and state.fenced


def test_heartbeat_request_fields() -> None:
    state = registered(epoch=1)
    with pytest.raises(MetadataFollowerError, match="before it registered"):
        MetadataFollowerState(BROKER).heartbeat_request()
    state.on_fetch_reply(page(LOG[:3], 0))
    assert state.heartbeat_request() == {"broker_id": 4, "broker_epoch": 1, "current_metadata_offset": 2,
                                         "want_fence": False, "want_shut_down": False}
    assert state.heartbeat_request(want_shut_down=True)["want_shut_down"] is True


HEARTBEAT_REPLIES = [  # (reply, decision, fenced, caught_up, registered)
    ({"error_code": 0, "is_caught_up": True, "is_fenced": False, "should_shut_down": False},
     HeartbeatDecision.CONTINUE, False, True, True),
    ({"error_code": 0, "is_caught_up": False, "is_fenced": True, "should_shut_down": False},
     HeartbeatDecision.CONTINUE, True, False, True),
    ({"error_code": 7, "error_message": "timed out"}, HeartbeatDecision.RETRY, True, False, True),
    ({"error_code": 89, "error_message": "busy"}, HeartbeatDecision.RETRY, True, False, True),
    ({"error_code": 77, "error_message": "stale"}, HeartbeatDecision.REREGISTER, True, False, False),
    ({"error_code": 102, "error_message": "unknown"}, HeartbeatDecision.REREGISTER, True, False, False),
]


@pytest.mark.parametrize(("reply", "decision", "fenced", "caught_up", "is_registered"), HEARTBEAT_REPLIES)
def test_heartbeat_replies(reply, decision, fenced, caught_up, is_registered) -> None:
    state = registered()
    state.heartbeat_request()
    assert state.on_heartbeat_reply(reply) is decision
    assert (state.fenced, state.caught_up, state.registered) == (fenced, caught_up, is_registered)
    if not is_registered:
        assert state.broker_epoch == NO_BROKER_EPOCH


def test_unexpected_heartbeat_errors_are_fatal() -> None:
    state = registered()
    with pytest.raises(MetadataFollowerError, match="heartbeat refused with error 42"):
        state.on_heartbeat_reply({"error_code": 42, "error_message": "bad"})
    with pytest.raises(MetadataFollowerError, match="is_fenced must be a boolean"):
        state.on_heartbeat_reply({"error_code": 0, "is_caught_up": True, "is_fenced": 0, "should_shut_down": False})


def test_checkpoint_is_due_when_the_image_moved_and_the_interval_passed() -> None:
    state = MetadataFollowerState(BROKER, checkpoint_interval_ms=1000)
    assert not state.checkpoint_due(0)
    state.on_fetch_reply(page(LOG[:2], 0))
    assert state.checkpoint_due(0)
    state.on_checkpointed(state.applied_offset, 0)
    state.on_fetch_reply(page(LOG[2:], 2))
    assert not state.checkpoint_due(500) and state.checkpoint_due(500, force=True) and state.checkpoint_due(1000)
    state.on_checkpointed(state.applied_offset, 1000)
    assert not state.checkpoint_due(5000, force=True)  # nothing new to write


def test_a_slow_checkpoint_spaces_the_next_one_by_its_cost() -> None:
    """A large image's write (1.5 s here) is not repeated every second but after 20 times its
    cost; after a cheap one the interval is back to the configured second."""
    state = MetadataFollowerState(BROKER, checkpoint_interval_ms=1000)
    state.on_fetch_reply(page(LOG[:2], 0))
    state.on_checkpointed(state.applied_offset, 0, cost_ms=1500)
    state.on_fetch_reply(page(LOG[2:4], 2))
    assert not state.checkpoint_due(1000) and not state.checkpoint_due(CHECKPOINT_COST_FACTOR * 1500 - 1)
    assert state.checkpoint_due(CHECKPOINT_COST_FACTOR * 1500) and state.checkpoint_due(1000, force=True)
    state.on_checkpointed(state.applied_offset, 30_000, cost_ms=10)
    state.on_fetch_reply(page(LOG[4:], 4))
    assert not state.checkpoint_due(30_999) and state.checkpoint_due(31_000)


@pytest.mark.parametrize(("published", "applied", "last", "registered", "ready"), [
    (False, 4, 9, True, False),  # still catching up: nothing from a checkpoint or half a replay
    (False, 9, 9, True, True),  # caught up with the answering controller: the first publish
    (False, 10, 9, True, True),  # a controller behind this broker: caught up all the same
    (False, 9, 9, False, False),  # caught up, but this incarnation's registration is not replayed yet
    (True, 4, 9, False, True),  # after the first publish every applied batch is published
])
def test_ready_to_publish(published: bool, applied: int, last: int, registered: bool, ready: bool) -> None:
    assert ready_to_publish(published=published, applied_offset=applied, controller_last_offset=last,
                            registration_replayed=registered) is ready


OLD_INCARNATION = apply(EMPTY_IMAGE, [(0, RegisterBroker(1, "old", (Listener("PLAINTEXT", "h", 1),)))])


@pytest.mark.parametrize(("image", "broker_epoch", "replayed"), [
    (EMPTY_IMAGE, NO_BROKER_EPOCH, False),
    (OLD_INCARNATION, NO_BROKER_EPOCH, False),  # not registered yet (a duplicate registration refused)
    (OLD_INCARNATION, 0, True),
    (OLD_INCARNATION, 7, False),  # registered at offset 7, not replayed that far
])
def test_own_registration_replayed(image: MetadataImage, broker_epoch: int, replayed: bool) -> None:
    assert own_registration_replayed(image, 1, broker_epoch) is replayed


def test_a_checkpoint_waits_until_the_follower_caught_up_up_to_a_bound() -> None:
    """During a burst (pages arriving while the controller reports more committed records) the
    image is written once caught up, not after every page; a follower that stays behind still
    writes one every MAX_CHECKPOINT_DEFER_MS."""
    state = MetadataFollowerState(BROKER, checkpoint_interval_ms=1000)
    state.on_fetch_reply(page(LOG[:2], 0))
    state.on_checkpointed(state.applied_offset, 0)
    state.on_fetch_reply(page(LOG[2:4], 2, last=len(LOG) - 1))  # more is committed
    assert state.lag > 0
    assert not state.checkpoint_due(5000) and state.checkpoint_due(5000, force=True)
    assert state.checkpoint_due(MAX_CHECKPOINT_DEFER_MS)
    state.on_fetch_reply(page(LOG[4:], 4))  # caught up: the usual interval
    assert state.lag == 0 and state.checkpoint_due(5000)


def test_a_checkpoint_waits_while_another_broker_is_in_controlled_shutdown() -> None:
    """Another broker leaves once every active broker has replayed its batches; this follower is
    caught up between two of them, and a checkpoint there (the whole image) would delay the next.
    It waits until that broker is fenced (SHUTDOWN_NOW), MAX_CHECKPOINT_DEFER_MS at most; its
    own controlled shutdown does not hold it back (it leaves no one waiting on its replay)."""
    state = MetadataFollowerState(BROKER, checkpoint_interval_ms=1000)
    unfenced = [BrokerRegistrationChange(5, 2, fenced=False), BrokerRegistrationChange(6, 3, fenced=False)]
    state.on_fetch_reply(page(LOG + unfenced, 0))
    state.on_checkpointed(state.applied_offset, 0)
    start = len(LOG) + len(unfenced)
    state.on_fetch_reply(page([BrokerRegistrationChange(5, 2, in_controlled_shutdown=True)], start))
    assert state.lag == 0
    assert not state.checkpoint_due(5000) and state.checkpoint_due(5000, force=True)
    assert state.checkpoint_due(MAX_CHECKPOINT_DEFER_MS)
    state.on_fetch_reply(page([BrokerRegistrationChange(5, 2, fenced=True)], start + 1))  # SHUTDOWN_NOW
    assert state.checkpoint_due(5000)
    state.on_fetch_reply(page([BrokerRegistrationChange(BROKER, 1, in_controlled_shutdown=True)], start + 2))
    assert state.checkpoint_due(5000)  # its own
