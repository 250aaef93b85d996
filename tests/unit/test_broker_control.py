"""quorum/broker_control.py: registration, heartbeats, fencing and unregistration, as tables."""

from __future__ import annotations

import pytest

from common.errors import ErrorCode
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.records import (
    NO_LEADER,
    BeginEpoch,
    BrokerRegistrationChange,
    Config,
    ConfigResourceType,
    FeatureLevel,
    LeaderRecoveryState,
    Listener,
    Partition,
    PartitionChange,
    RegisterBroker,
    Topic,
    UnregisterBroker,
)
from quorum.broker_control import (
    HeartbeatReply,
    check_broker_epoch,
    fence_broker,
    fence_if_expired,
    process_heartbeat,
    register_broker,
    unregister_broker,
)
from quorum.controller_result import ControllerApiError
from quorum.heartbeat_manager import BrokerHeartbeatManager
from quorum.topic_control import ELR_FEATURE

TOPIC = ConfigResourceType.TOPIC
RECOVERING = LeaderRecoveryState.RECOVERING
E = ErrorCode
TIMEOUT = 1000


def replay(image, *records):
    return apply(image, enumerate(records, start=image.offset + 1))


def listeners(b):
    return (Listener("PLAINTEXT", f"127.0.0.{b}", 9092),)


def change(topic_id, partition_id=0, **fields):
    return PartitionChange(topic_id, partition_id, **fields)


# Offsets 1..3 register brokers 1..3, so broker b has broker_epoch b.
REGISTERED = replay(EMPTY_IMAGE, BeginEpoch(1), *(RegisterBroker(b, f"inc-{b}", listeners(b)) for b in (1, 2, 3)))
CLUSTER = replay(REGISTERED, *(BrokerRegistrationChange(b, b, fenced=False) for b in (1, 2, 3)))
TOPICS = replay(
    CLUSTER,
    Topic("orders", "ORDERS"),
    Partition("ORDERS", 0, (1, 2, 3), (1, 2, 3), leader=1),
    Partition("ORDERS", 1, (2, 3, 1), (2, 3, 1), leader=2),
    Partition("ORDERS", 2, (3, 1, 2), (3, 1, 2), leader=3),
    Topic("shrunk", "SHRUNK"), Partition("SHRUNK", 0, (1, 2, 3), (2,), leader=2),
    Topic("solo", "SOLO"), Partition("SOLO", 0, (2,), (2,), leader=2),
    Config(TOPIC, "unclean", "unclean.leader.election.enable", "true"),
    Topic("unclean", "UNCLEAN"), Partition("UNCLEAN", 0, (1, 2, 3), (2,), leader=2),
)
# KIP-966 on, min.insync.replicas 2: a broker leaving an ISR of 2 joins the ELR.
ELR = replay(CLUSTER, FeatureLevel(ELR_FEATURE, 1), Config(TOPIC, "durable", "min.insync.replicas", "2"),
             Topic("durable", "DURABLE"), Partition("DURABLE", 0, (1, 2, 3), (1, 2), leader=1))
IN_SHUTDOWN = replay(CLUSTER, BrokerRegistrationChange(3, 3, in_controlled_shutdown=True))

FENCE_2_CHANGES = [
    change("ORDERS", 0, isr=(1, 3)),
    change("ORDERS", 1, leader=3, isr=(3, 1)),
    change("ORDERS", 2, isr=(3, 1)),
    change("SHRUNK", leader=NO_LEADER),  # KIP-841: the last ISR member stays, nobody leads
    change("SOLO", leader=NO_LEADER),
    change("UNCLEAN", leader=1, isr=(1,), leader_recovery_state=RECOVERING),
]
FENCED_2 = replay(TOPICS, BrokerRegistrationChange(2, 2, fenced=True), *FENCE_2_CHANGES)
# A controlled shutdown writes the same changes, its leaderships first (the broker waits for those).
SHUT_DOWN_2_CHANGES = [c for c in FENCE_2_CHANGES if TOPICS.topic_by_id(c.topic_id).partitions[c.partition_id].leader == 2] \
    + [c for c in FENCE_2_CHANGES if TOPICS.topic_by_id(c.topic_id).partitions[c.partition_id].leader != 2]


def assert_left_every_isr(image, broker_id):
    """After fencing: the broker leads nothing and is in no ISR unless it is the last member."""
    assert image.broker(broker_id).fenced
    for topic in image.topics.by_id.values():
        for partition in topic.partitions.values():
            assert partition.leader != broker_id
            assert broker_id not in partition.isr or partition.isr == (broker_id,)


# --- fence_broker ------------------------------------------------------------------------

FENCE = [
    pytest.param(TOPICS, 2, [BrokerRegistrationChange(2, 2, fenced=True), *FENCE_2_CHANGES],
                 id="leaders-move-isrs-shrink-last-member-stays-unclean-elects"),
    pytest.param(TOPICS, 1, [BrokerRegistrationChange(1, 1, fenced=True), change("ORDERS", 0, leader=2, isr=(2, 3)),
                             change("ORDERS", 1, isr=(2, 3)), change("ORDERS", 2, isr=(3, 2))],
                 id="broker-1"),
    pytest.param(CLUSTER, 3, [BrokerRegistrationChange(3, 3, fenced=True)], id="no-partitions"),
    pytest.param(FENCED_2, 2, [], id="already-fenced-nothing-to-do"),
    pytest.param(ELR, 2, [BrokerRegistrationChange(2, 2, fenced=True), change("DURABLE", isr=(1,), elr=(2,))],
                 id="elr-and-min-insync-replicas-from-the-topic-config"),
]


@pytest.mark.parametrize(("image", "broker_id", "expected"), FENCE)
def test_fence_broker(image, broker_id, expected):
    result = fence_broker(image, broker_id, reason="session expired")
    assert list(result.records) == expected and result.response is None
    assert_left_every_isr(replay(image, *result.records), broker_id)


def _sessions(last_contact_ms):
    heartbeats = BrokerHeartbeatManager(TIMEOUT)
    for broker_id in (1, 2, 3):
        heartbeats.touch(broker_id, last_contact_ms, 0)
    return heartbeats


@pytest.mark.parametrize(("image", "last_contact_ms", "now_ms", "expected"), [
    pytest.param(TOPICS, 0, TIMEOUT + 1, [BrokerRegistrationChange(2, 2, fenced=True), *FENCE_2_CHANGES],
                 id="expired-fences-as-fence_broker"),
    pytest.param(TOPICS, 0, TIMEOUT, [], id="valid-at-the-timeout-itself"),
    pytest.param(TOPICS, 500, TIMEOUT + 1, [], id="heartbeated-since-the-pass-chose-it"),
    pytest.param(FENCED_2, 0, TIMEOUT + 1, [], id="already-fenced"),
    pytest.param(CLUSTER, 0, TIMEOUT + 1, [BrokerRegistrationChange(2, 2, fenced=True)], id="leads-nothing"),
])
def test_fence_if_expired(image, last_contact_ms, now_ms, expected):
    result = fence_if_expired(image, 2, heartbeats=_sessions(last_contact_ms), now_ms=now_ms)
    assert list(result.records) == expected


def test_fence_if_expired_ignores_an_unregistered_broker():
    assert fence_if_expired(CLUSTER, 9, heartbeats=_sessions(0), now_ms=TIMEOUT + 1).records == ()


def test_fence_unknown_broker():
    with pytest.raises(ControllerApiError) as info:
        fence_broker(TOPICS, 9, reason="test")
    assert (info.value.code, info.value.field) == (E.BROKER_ID_NOT_REGISTERED, "broker_id")


# --- unregister_broker -------------------------------------------------------------------

def test_unregister_broker_removes_the_registration_then_moves_leaders():
    heartbeats = BrokerHeartbeatManager(TIMEOUT)
    heartbeats.touch(2, 0, 0)
    result = unregister_broker(TOPICS, 2, heartbeats=heartbeats)
    assert list(result.records) == [UnregisterBroker(2, 2), *FENCE_2_CHANGES]
    after = replay(TOPICS, *result.records)
    assert after.broker(2) is None and heartbeats.last_contact_ms(2) is None
    assert all(p.leader != 2 for t in after.topics.by_id.values() for p in t.partitions.values())


def test_unregister_unknown_broker():
    with pytest.raises(ControllerApiError) as info:
        unregister_broker(TOPICS, 9)
    assert info.value.code == E.BROKER_ID_NOT_REGISTERED


# --- register_broker ---------------------------------------------------------------------

def sessions(*touches):
    heartbeats = BrokerHeartbeatManager(TIMEOUT)
    for broker_id, at in touches:
        heartbeats.touch(broker_id, at, 0)
    return heartbeats


REGISTER = [
    pytest.param(TOPICS, 4, "inc-4", sessions(), [RegisterBroker(4, "inc-4", listeners(4), "r1")],
                 id="new-broker-registers-fenced"),
    pytest.param(FENCED_2, 2, "inc-2b", sessions((2, 0)), [RegisterBroker(2, "inc-2b", listeners(2), "r1")],
                 id="new-incarnation-of-a-fenced-broker"),
    pytest.param(FENCED_2, 2, "inc-2", sessions((2, 0)), [RegisterBroker(2, "inc-2", listeners(2), "r1")],
                 id="same-incarnation-retry"),
    pytest.param(TOPICS, 2, "inc-2b", sessions((2, 0)),
                 [RegisterBroker(2, "inc-2b", listeners(2), "r1"), *FENCE_2_CHANGES],
                 id="session-expired-new-incarnation-takes-over-and-is-fenced"),
    pytest.param(TOPICS, 2, "inc-2", sessions((2, 4000)),
                 [RegisterBroker(2, "inc-2", listeners(2), "r1"), *FENCE_2_CHANGES],
                 id="same-incarnation-while-unfenced-registers-fenced-again"),
]


@pytest.mark.parametrize(("image", "broker_id", "incarnation", "heartbeats", "expected"), REGISTER)
def test_register_broker(image, broker_id, incarnation, heartbeats, expected):
    result = register_broker(image, broker_id=broker_id, incarnation_id=incarnation,
                             listeners=listeners(broker_id), rack="r1", now_ms=5000, heartbeats=heartbeats)
    assert list(result.records) == expected and result.response is None
    after = replay(image, *result.records)
    registration = after.broker(broker_id)
    assert registration.fenced and registration.incarnation_id == incarnation
    assert registration.broker_epoch == image.offset + 1  # the offset of RegisterBroker, records[0]
    assert_left_every_isr(after, broker_id)
    if image.broker(broker_id) is not None and image.broker(broker_id).incarnation_id != incarnation:
        assert heartbeats.last_contact_ms(broker_id) is None  # the old incarnation's session is gone


REGISTER_ERRORS = [
    pytest.param(TOPICS, sessions((2, 4500)), 5000, E.DUPLICATE_BROKER_REGISTRATION, "broker_id",
                 id="another-incarnation-with-a-live-session"),
    pytest.param(TOPICS, sessions(), 5000, E.DUPLICATE_BROKER_REGISTRATION, "broker_id",
                 id="new-active-controller-gives-the-old-incarnation-a-session-first"),
]


@pytest.mark.parametrize(("image", "heartbeats", "now_ms", "code", "field"), REGISTER_ERRORS)
def test_register_broker_errors(image, heartbeats, now_ms, code, field):
    with pytest.raises(ControllerApiError) as info:
        register_broker(image, broker_id=2, incarnation_id="inc-2b", listeners=listeners(2), rack=None,
                        now_ms=now_ms, heartbeats=heartbeats)
    assert (info.value.code, info.value.field) == (code, field)


def test_register_broker_with_bad_listeners():
    with pytest.raises(ControllerApiError) as info:
        register_broker(CLUSTER, broker_id=4, incarnation_id="inc-4", listeners=[("PLAINTEXT", "h", 70000)],
                        rack=None, now_ms=0, heartbeats=sessions())
    assert info.value.code == E.INVALID_REQUEST and "port" in info.value.message


# --- process_heartbeat -------------------------------------------------------------------

# (image, broker, epoch, metadata_offset, want_fence, want_shutdown, expected records, expected reply)
HEARTBEAT = [
    pytest.param(REGISTERED, 1, 1, 0, False, False, [], HeartbeatReply(False, True, False),
                 id="fenced-not-caught-up-stays-fenced"),
    pytest.param(REGISTERED, 1, 1, 1, False, False, [BrokerRegistrationChange(1, 1, fenced=False)],
                 HeartbeatReply(True, False, False), id="caught-up-to-registration-offset-unfences"),
    pytest.param(REGISTERED, 1, 1, 5, True, False, [], HeartbeatReply(True, True, False),
                 id="caught-up-but-wants-fence-stays-fenced"),
    pytest.param(FENCED_2, 2, 2, 40, False, False,
                 [BrokerRegistrationChange(2, 2, fenced=False), change("SHRUNK", leader=2), change("SOLO", leader=2)],
                 HeartbeatReply(True, False, False), id="unfenced-broker-leads-its-leaderless-partitions-again"),
    pytest.param(CLUSTER, 1, 1, 9, False, False, [], HeartbeatReply(True, False, False), id="steady-state"),
    pytest.param(TOPICS, 2, 2, 9, True, False, [BrokerRegistrationChange(2, 2, fenced=True), *FENCE_2_CHANGES],
                 HeartbeatReply(True, True, False), id="want-fence-fences-and-moves-leaders"),
    # --- want_shutdown (shutdown.controller_states decides, records_plan says what to write)
    pytest.param(TOPICS, 2, 2, 9, False, True,
                 [BrokerRegistrationChange(2, 2, in_controlled_shutdown=True), *SHUT_DOWN_2_CHANGES],
                 HeartbeatReply(True, False, False), id="want-shutdown-while-leading-enters-controlled-shutdown"),
    pytest.param(CLUSTER, 1, 1, 9, False, True, [BrokerRegistrationChange(1, 1, fenced=True)],
                 HeartbeatReply(True, True, True), id="want-shutdown-leading-nothing-shuts-down-now"),
    pytest.param(TOPICS, 2, 2, 9, True, True, [BrokerRegistrationChange(2, 2, fenced=True), *FENCE_2_CHANGES],
                 HeartbeatReply(True, True, True), id="want-fence-and-shutdown-fences-and-shuts-down-now"),
    pytest.param(FENCED_2, 2, 2, 40, False, True, [], HeartbeatReply(True, True, True),
                 id="fenced-broker-wanting-shutdown-is-granted-it-at-once"),
    pytest.param(IN_SHUTDOWN, 3, 3, 9, True, True, [], HeartbeatReply(True, False, False),
                 id="in-controlled-shutdown-waits-for-active-brokers-to-catch-up"),
    pytest.param(IN_SHUTDOWN, 3, 3, 9, False, False, [], HeartbeatReply(True, False, False),
                 id="in-controlled-shutdown-ignores-the-flags"),
]


@pytest.mark.parametrize(("image", "broker_id", "epoch", "offset", "want_fence", "want_shutdown",
                          "expected", "reply"), HEARTBEAT)
def test_process_heartbeat(image, broker_id, epoch, offset, want_fence, want_shutdown, expected, reply):
    heartbeats = sessions()
    result = process_heartbeat(image, broker_id=broker_id, broker_epoch=epoch, metadata_offset=offset,
                               want_fence=want_fence, want_shutdown=want_shutdown, now_ms=777,
                               heartbeats=heartbeats)
    assert list(result.records) == expected
    assert result.response == reply
    assert (heartbeats.last_contact_ms(broker_id), heartbeats.metadata_offset(broker_id)) == (777, offset)
    after = replay(image, *result.records)
    assert after.broker(broker_id).fenced == reply.is_fenced


HEARTBEAT_ERRORS = [
    pytest.param(9, 1, E.BROKER_ID_NOT_REGISTERED, "broker_id", id="unknown-broker"),
    pytest.param(2, 1, E.STALE_BROKER_EPOCH, "broker_epoch", id="stale-epoch"),
]


@pytest.mark.parametrize(("broker_id", "epoch", "code", "field"), HEARTBEAT_ERRORS)
def test_process_heartbeat_errors(broker_id, epoch, code, field):
    heartbeats = sessions()
    with pytest.raises(ControllerApiError) as info:
        process_heartbeat(TOPICS, broker_id=broker_id, broker_epoch=epoch, metadata_offset=0, want_fence=False,
                          want_shutdown=False, now_ms=0, heartbeats=heartbeats)
    assert (info.value.code, info.value.field) == (code, field)
    assert heartbeats.last_contact_ms(broker_id) is None  # a refused heartbeat renews nothing


def test_check_broker_epoch_returns_the_registration():
    assert check_broker_epoch(TOPICS, 2, 2) is TOPICS.broker(2)


def test_fence_then_unfence_round_trip():
    """Session expiry fences broker 2; its next caught-up heartbeat brings it back as leader."""
    heartbeats = sessions((1, 0), (2, 0), (3, 0))
    for b in (1, 3):
        heartbeats.touch(b, 1500, 0)
    expired = heartbeats.next_expired(1500, TOPICS)
    assert expired == 2
    image = replay(TOPICS, *fence_broker(TOPICS, expired, reason="session expired").records)
    assert image == FENCED_2
    result = process_heartbeat(image, broker_id=2, broker_epoch=2, metadata_offset=image.offset,
                               want_fence=False, want_shutdown=False, now_ms=1600, heartbeats=heartbeats)
    image = replay(image, *result.records)
    assert not image.broker(2).fenced
    assert image.topic("solo").partitions[0].leader == 2
    assert image.topic("solo").partitions[0].leader_epoch == 2  # lost then regained: two leader changes


def test_controlled_shutdown_round_trip():
    """Broker 2 asks to shut down: leaders move in one batch with the registration change; it is
    told to shut down (and fenced) once every active broker replayed up to that batch."""
    heartbeats = sessions()
    result = process_heartbeat(TOPICS, broker_id=2, broker_epoch=2, metadata_offset=TOPICS.offset,
                               want_fence=False, want_shutdown=True, now_ms=100, heartbeats=heartbeats)
    image = replay(TOPICS, *result.records)
    assert image.broker(2).in_controlled_shutdown and not image.broker(2).fenced
    assert heartbeats.controlled_shutdown_offset(2) == image.offset  # the end of that batch
    assert_left_every_isr(replay(image, BrokerRegistrationChange(2, 2, fenced=True)), 2)

    def beat(metadata_offset, now_ms):
        return process_heartbeat(image, broker_id=2, broker_epoch=2, metadata_offset=metadata_offset,
                                 want_fence=False, want_shutdown=True, now_ms=now_ms, heartbeats=heartbeats)

    heartbeats.touch(1, 150, image.offset)
    heartbeats.touch(3, 150, image.offset - 1)  # broker 3 has not replayed the batch yet
    waiting = beat(image.offset, 200)
    assert (list(waiting.records), waiting.response) == ([], HeartbeatReply(True, False, False))
    heartbeats.touch(3, 250, image.offset)
    done = beat(image.offset, 300)
    assert list(done.records) == [BrokerRegistrationChange(2, 2, fenced=True)]
    assert done.response == HeartbeatReply(True, True, True)
    assert heartbeats.controlled_shutdown_offset(2) is None
    assert replay(image, *done.records).broker(2).fenced
