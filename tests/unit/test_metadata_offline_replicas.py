"""metadata: the OfflineReplicas record replayed into the broker's registration, kept by
snapshots, cleared by a new registration and by the topic's removal."""

from __future__ import annotations

import pytest

from metadata.codec import MetadataRecordError
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.records import (
    BeginEpoch,
    BrokerRegistrationChange,
    Listener,
    OfflineReplicas,
    Partition,
    RegisterBroker,
    RemoveTopic,
    Topic,
)
from metadata.snapshot import decode_snapshot, encode_snapshot


def replay(image, *records):
    return apply(image, enumerate(records, start=image.offset + 1))


LISTENERS = (Listener("PLAINTEXT", "127.0.0.1", 9092),)
# broker b registers at offset b: broker epoch b
IMAGE = replay(EMPTY_IMAGE, BeginEpoch(1), RegisterBroker(1, "inc-1", LISTENERS), RegisterBroker(2, "inc-2", LISTENERS),
               BrokerRegistrationChange(1, 1, fenced=False), Topic("orders", "ORD"),
               Partition("ORD", 0, (1, 2), (1, 2), leader=1), Partition("ORD", 1, (2, 1), (2, 1), leader=2),
               Topic("other", "OTH"), Partition("OTH", 0, (1,), (1,), leader=1))
FAILED = replay(IMAGE, OfflineReplicas(1, 1, "ORD", (0, 1)), OfflineReplicas(1, 1, "OTH", (0,)))


def test_the_image_holds_the_failed_replicas_of_the_registration():
    registration = FAILED.broker(1)
    assert registration.offline_replicas == {("ORD", 0), ("ORD", 1), ("OTH", 0)}
    assert registration.is_replica_offline("ORD", 1) and not FAILED.broker(2).is_replica_offline("ORD", 1)
    assert not registration.fenced  # the rest of the registration is untouched
    assert FAILED.failed_replicas(FAILED.partition("ORD", 1)) == (1,)
    assert IMAGE.broker(1).offline_replicas == frozenset()  # the base image is never modified


def test_any_split_of_the_records_reaches_the_same_image():
    one = replay(IMAGE, OfflineReplicas(1, 1, "ORD", (0,)), OfflineReplicas(1, 1, "ORD", (1,)),
                 OfflineReplicas(1, 1, "OTH", (0,)))
    assert one.cluster == FAILED.cluster


def test_a_new_registration_clears_them():
    """A restart after the cause is removed brings the replicas back: the new broker epoch
    starts without offline replicas (as a restarted Kafka broker's log dirs are online again)."""
    image = replay(FAILED, RegisterBroker(1, "inc-1b", LISTENERS))
    assert image.broker(1).offline_replicas == frozenset()
    assert image.broker(1).broker_epoch == image.offset


def test_removing_the_topic_forgets_its_replicas():
    image = replay(FAILED, RemoveTopic("ORD"))
    assert image.broker(1).offline_replicas == {("OTH", 0)}


def test_a_snapshot_keeps_them_and_one_without_them_reads_as_before():
    assert decode_snapshot(encode_snapshot(FAILED)) == FAILED
    assert b"offline_replicas" not in encode_snapshot(IMAGE)  # left out when empty


@pytest.mark.parametrize(("record", "message"), [
    (OfflineReplicas(1, 99, "ORD", (0,)), "broker 1 has broker_epoch 1, not 99"),
    (OfflineReplicas(3, 3, "ORD", (0,)), "broker 3 is not registered"),
    (OfflineReplicas(1, 1, "GONE", (0,)), "unknown topic id GONE"),
    (OfflineReplicas(1, 1, "ORD", (0, 7)), "unknown partition(s) [7]"),
])
def test_a_record_that_contradicts_the_image_is_refused(record, message):
    with pytest.raises(MetadataRecordError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        replay(IMAGE, record)


def test_metadata_responses_list_failed_replicas_as_offline():
    """broker/handlers/metadata.py: Kafka's offline_replicas holds the replicas on brokers that
    are not alive and, now, those whose broker could not open them."""
    from broker.handlers.metadata import _partitions

    alive = {1, 2}
    answered = {p.partition_index: p for p in _partitions(FAILED, FAILED.topic("orders"), alive)}
    assert answered[0].offline_replicas == (1,) and answered[1].offline_replicas == (1,)
    assert all(p.offline_replicas == () for p in _partitions(IMAGE, IMAGE.topic("orders"), alive))
    assert _partitions(IMAGE, IMAGE.topic("orders"), {1})[1].offline_replicas == (2,)  # not alive, as before
