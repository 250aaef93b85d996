"""quorum/heartbeat_manager.py: sessions on a fake clock, expiry one broker at a time, as tables."""

from __future__ import annotations

import pytest

from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.records import (
    BeginEpoch,
    BrokerRegistrationChange,
    Listener,
    RegisterBroker,
)
from quorum.heartbeat_manager import DEFAULT_SESSION_TIMEOUT_MS, BrokerHeartbeatManager

TIMEOUT = 1000


def replay(image, *records):
    return apply(image, enumerate(records, start=image.offset + 1))


def brokers(unfenced=(), fenced=()):
    """Registered brokers (epoch == id when registered in id order); `unfenced` ones unfenced."""
    ids = sorted({*unfenced, *fenced})
    image = replay(EMPTY_IMAGE, BeginEpoch(1),
                   *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", "127.0.0.1", 9000 + b),)) for b in ids))
    return replay(image, *(BrokerRegistrationChange(b, image.broker(b).broker_epoch, fenced=False)
                           for b in sorted(unfenced)))


UNFENCED_123 = brokers(unfenced=(1, 2, 3))
UNFENCED_12_FENCED_3 = brokers(unfenced=(1, 2), fenced=(3,))

# (image, touches as (broker, now_ms), now_ms, expected next_expired)
NEXT_EXPIRED = [
    pytest.param(UNFENCED_123, [(1, 0), (2, 0), (3, 0)], TIMEOUT, None, id="exactly-at-timeout-still-valid"),
    pytest.param(UNFENCED_123, [(1, 0), (2, 0), (3, 0)], TIMEOUT + 1, 1, id="all-expired-lowest-id-first"),
    pytest.param(UNFENCED_123, [(1, 500), (2, 100), (3, 300)], 1200, 2, id="oldest-contact-first"),
    pytest.param(UNFENCED_123, [(1, 500), (2, 100), (3, 300)], 1050, None, id="none-expired-yet"),
    pytest.param(UNFENCED_12_FENCED_3, [(1, 900), (2, 900), (3, 0)], 1500, None, id="fenced-brokers-never-expire"),
    pytest.param(UNFENCED_123, [(1, 900), (2, 900)], 1500, None, id="untracked-unfenced-broker-starts-now"),
    pytest.param(UNFENCED_123, [(1, 0), (1, 800), (2, 900), (3, 900)], 1500, None, id="touch-renews-the-session"),
]


@pytest.mark.parametrize(("image", "touches", "now_ms", "expected"), NEXT_EXPIRED)
def test_next_expired(image, touches, now_ms, expected):
    heartbeats = BrokerHeartbeatManager(TIMEOUT)
    for broker_id, at in touches:
        heartbeats.touch(broker_id, at, metadata_offset=at)
    assert heartbeats.next_expired(now_ms, image) == expected


def test_one_broker_per_pass_in_age_order():
    heartbeats = BrokerHeartbeatManager(TIMEOUT)
    for broker_id, at in [(1, 300), (2, 100), (3, 200)]:
        heartbeats.touch(broker_id, at, 0)
    image, order = UNFENCED_123, []
    while (expired := heartbeats.next_expired(5000, image)) is not None:  # bounded: 3 brokers
        order.append(expired)
        image = replay(image, BrokerRegistrationChange(expired, image.broker(expired).broker_epoch, fenced=True))
    assert order == [2, 3, 1]


def test_a_new_active_controller_gives_every_unfenced_broker_a_full_session():
    heartbeats = BrokerHeartbeatManager(TIMEOUT)
    assert heartbeats.next_expired(10_000, UNFENCED_123) is None
    assert heartbeats.last_contact_ms(2) == 10_000 and heartbeats.metadata_offset(2) == -1
    assert heartbeats.next_expired(10_000 + TIMEOUT, UNFENCED_123) is None
    assert heartbeats.next_expired(10_000 + TIMEOUT + 1, UNFENCED_123) == 1


def test_touch_remove_and_lookups():
    heartbeats = BrokerHeartbeatManager(TIMEOUT)
    assert heartbeats.last_contact_ms(1) is None and heartbeats.metadata_offset(1) is None
    heartbeats.touch(1, 100, 42)
    assert (heartbeats.last_contact_ms(1), heartbeats.metadata_offset(1)) == (100, 42)
    assert heartbeats.has_valid_session(1, 100 + TIMEOUT)
    assert not heartbeats.has_valid_session(1, 101 + TIMEOUT)
    assert not heartbeats.has_valid_session(2, 0)
    heartbeats.remove(1)
    heartbeats.remove(1)  # removing twice is fine
    assert heartbeats.last_contact_ms(1) is None


def test_ages_for_metrics():
    heartbeats = BrokerHeartbeatManager(TIMEOUT)
    heartbeats.touch(2, 700, 0)
    heartbeats.touch(1, 100, 0)
    assert heartbeats.ages(1000) == {1: 900, 2: 300}


@pytest.mark.parametrize("timeout", [0, -1, 1.5, None])
def test_session_timeout_must_be_a_positive_integer(timeout):
    with pytest.raises(ValueError, match="session_timeout_ms"):
        BrokerHeartbeatManager(timeout)


def test_kafka_default_session_timeout():
    assert BrokerHeartbeatManager().session_timeout_ms == DEFAULT_SESSION_TIMEOUT_MS == 9000


def test_controlled_shutdown_offset_is_kept_once_and_survives_heartbeats():
    heartbeats = BrokerHeartbeatManager(TIMEOUT)
    heartbeats.maybe_update_controlled_shutdown_offset(2, 40)  # no session yet: nothing to keep it in
    assert heartbeats.controlled_shutdown_offset(2) is None
    heartbeats.touch(2, 0, 10)
    heartbeats.maybe_update_controlled_shutdown_offset(2, 40)
    heartbeats.maybe_update_controlled_shutdown_offset(2, 55)  # already known: Kafka keeps the first
    heartbeats.touch(2, 100, 41)
    assert (heartbeats.controlled_shutdown_offset(2), heartbeats.metadata_offset(2)) == (40, 41)
    heartbeats.clear_controlled_shutdown_offset(2)
    assert heartbeats.controlled_shutdown_offset(2) is None


def test_next_expiry_is_the_earliest_unfenced_session_end():
    from metadata.delta import apply
    from metadata.image import EMPTY_IMAGE
    from metadata.records import (
        BeginEpoch,
        BrokerRegistrationChange,
        Listener,
        RegisterBroker,
    )

    records = [BeginEpoch(1), *(RegisterBroker(b, f"i{b}", (Listener("PLAINTEXT", "127.0.0.1", 9092 + b),))
                                for b in (1, 2, 3)),
               BrokerRegistrationChange(1, 1, fenced=False), BrokerRegistrationChange(2, 2, fenced=False)]
    image = apply(EMPTY_IMAGE, enumerate(records))
    sessions = BrokerHeartbeatManager(session_timeout_ms=1000)
    assert sessions.next_expiry_ms(image) is None
    sessions.touch(1, 5000, 0)
    sessions.touch(2, 4000, 0)
    sessions.touch(3, 100, 0)  # fenced: its session does not count
    assert sessions.next_expiry_ms(image) == 5001


def test_a_stalled_controller_restarts_every_unfenced_session_and_keeps_offsets():
    heartbeats = BrokerHeartbeatManager(TIMEOUT)
    heartbeats.touch(1, 100, metadata_offset=7)
    heartbeats.touch(3, 100, metadata_offset=9)
    heartbeats.restart_sessions(UNFENCED_12_FENCED_3, 5000)
    assert heartbeats.last_contact_ms(1) == 5000 and heartbeats.metadata_offset(1) == 7
    assert heartbeats.last_contact_ms(2) == 5000 and heartbeats.metadata_offset(2) == -1
    assert heartbeats.last_contact_ms(3) == 100  # fenced: nothing to restart
    assert heartbeats.next_expired(5000 + TIMEOUT, UNFENCED_12_FENCED_3) is None
    assert heartbeats.next_expired(5000 + TIMEOUT + 1, UNFENCED_12_FENCED_3) == 1
