"""common/rpc.py: every broker<->controller message round-trips through the one codec, and bad
bodies are refused naming the field."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from common import rpc, rpc_messages
from common.rpc import RpcDecodeError
from common.rpc_messages import (
    AllocateProducerIdsReply,
    AlterPartitionData,
    AlterPartitionPartitionReply,
    AlterPartitionReply,
    AlterPartitionRequest,
    AlterPartitionTopic,
    AlterPartitionTopicReply,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    BrokerIdAndEpoch,
    BrokerRegistrationReply,
    BrokerRegistrationRequest,
    IsrMemberData,
    ListenerData,
    MetadataFetchReply,
    MetadataFetchRequest,
    RpcStatus,
)


def wire(body: dict) -> dict:
    """What the other side reads: the map through msgpack, as it travels."""
    return msgpack.unpackb(msgpack.packb(body, use_bin_type=True), raw=False, strict_map_key=True)


REQUESTS = [
    (BrokerRegistrationRequest(4, "inc-1", (ListenerData("PLAINTEXT", "127.0.0.4", 9092),), "rack-a", "cid"),
     rpc.decode_registration_request),
    (BrokerRegistrationRequest(4, "inc-1", (), None, None), rpc.decode_registration_request),
    (BrokerHeartbeatRequest(4, 12, 40, want_fence=True, want_shut_down=False), rpc.decode_heartbeat_request),
    (BrokerHeartbeatRequest(4, -1, -1, want_fence=False, want_shut_down=True), rpc.decode_heartbeat_request),
    (BrokerHeartbeatRequest(4, 12, 40, offline_replicas=(rpc_messages.OfflineReplicaTopic("tid", (0, 7)),)),
     rpc.decode_heartbeat_request),
    (AlterPartitionRequest(4, 12, (AlterPartitionTopic("tid", (
        AlterPartitionData(0, 3, 7, (IsrMemberData(4, 12), IsrMemberData(5, -1)), 1),
        AlterPartitionData(1, 0, 0, ())),),)), rpc.decode_alter_partition_request),
    (BrokerIdAndEpoch(4, 12), rpc.decode_broker_id_and_epoch),
    (MetadataFetchRequest(10, 1000, 50, 4), rpc.decode_fetch_request),
    (MetadataFetchRequest(0), rpc.decode_fetch_request),
]

REPLIES = [
    BrokerRegistrationReply(17),
    BrokerHeartbeatReply(is_caught_up=True, is_fenced=False, should_shut_down=False, shutdown_requested=True),
    AllocateProducerIdsReply(1000, 1000),
    AlterPartitionReply((AlterPartitionTopicReply("tid", (
        AlterPartitionPartitionReply(0, 0, None, 4, 3, (4, 5), 8, 0),
        AlterPartitionPartitionReply(1, 77, "stale broker epoch"))),)),
    MetadataFetchReply(((5, {"type": "NoOp", "version": 0}),), 5, 0, None, None, 2, "127.0.0.2:9094", 7),
    MetadataFetchReply((), 9, 3, b"\x00snapshot", 9, None, None, 8),
]


@pytest.mark.parametrize(("message", "decode"), REQUESTS, ids=lambda v: type(v).__name__)
def test_every_request_round_trips(message, decode) -> None:
    assert decode(wire(rpc.encode(message))) == message


@pytest.mark.parametrize("message", REPLIES, ids=lambda v: type(v).__name__)
def test_every_reply_round_trips(message) -> None:
    assert rpc.decode_reply(type(message), wire(rpc.encode_reply(message))) == (RpcStatus(), message)


@pytest.mark.parametrize("kind", [type(m) for m in REPLIES])
def test_an_error_reply_carries_the_envelope_only(kind) -> None:
    status = RpcStatus(41, "not the active controller", None, 2, "127.0.0.2:9094")
    body = wire(rpc.encode_reply(None, status))
    assert rpc.decode_reply(kind, body) == (status, None)
    assert set(body) == {"error_code", "error_message", "controller_id", "controller_address"}


def test_the_wire_names_are_kafkas() -> None:
    """Both sides used to spell one flag differently (want_shut_down / want_shutdown)."""
    assert rpc.encode(BrokerHeartbeatRequest(4, 12, 40, want_shut_down=True)) == {
        "broker_id": 4, "broker_epoch": 12, "current_metadata_offset": 40, "want_fence": False,
        "want_shut_down": True, "offline_replicas": []}


BAD_REQUESTS = [  # (decoder, body, field named)
    (rpc.decode_heartbeat_request, [], None),
    (rpc.decode_heartbeat_request, {"broker_id": 4, "broker_epoch": 1}, "current_metadata_offset"),
    (rpc.decode_heartbeat_request, {"broker_id": 4, "broker_epoch": 1, "current_metadata_offset": 0,
                                    "want_shutdown": True}, "want_shutdown"),
    (rpc.decode_heartbeat_request, {"broker_id": -1, "broker_epoch": 1, "current_metadata_offset": 0}, "broker_id"),
    (rpc.decode_heartbeat_request, {"broker_id": 4, "broker_epoch": 1, "current_metadata_offset": 0,
                                    "want_fence": 1}, "want_fence"),
    (rpc.decode_heartbeat_request, {"broker_id": 4, "broker_epoch": 1, "current_metadata_offset": 0,
                                    "offline_replicas": [{"topic_id": "tid", "partitions": [-1]}]},
     "offline_replicas[0].partitions"),
    (rpc.decode_registration_request, {"broker_id": 4, "incarnation_id": "", "listeners": []}, "incarnation_id"),
    (rpc.decode_registration_request, {"broker_id": 4, "incarnation_id": "i", "listeners": [
        {"name": "P", "host": "h", "port": 0}]}, "listeners[0].port"),
    (rpc.decode_alter_partition_request, {"broker_id": 4, "broker_epoch": 1, "topics": [
        {"topic_id": "t", "partitions": [
            {"partition_index": 0, "leader_epoch": 0, "partition_epoch": 0, "new_isr_with_epochs": []},
            {"partition_index": 0, "leader_epoch": 0, "partition_epoch": 0, "new_isr_with_epochs": []}]}]},
     "topics[0].partitions[1].partition_index"),
    (rpc.decode_fetch_request, {"offset": 0, "max_wait_ms": rpc.LONG_POLL_MAX_WAIT_MS + 1}, "max_wait_ms"),
]


@pytest.mark.parametrize(("decode", "body", "field"), BAD_REQUESTS)
def test_bad_requests_name_the_field(decode, body, field) -> None:
    with pytest.raises(RpcDecodeError) as info:
        decode(body)
    assert info.value.field == field


def test_bad_replies_are_refused() -> None:
    with pytest.raises(RpcDecodeError):
        rpc.decode_reply(BrokerHeartbeatReply, {"error_code": 0, "is_caught_up": True})
    with pytest.raises(RpcDecodeError):
        rpc.decode_reply(MetadataFetchReply, {"error_code": 0, "records": [[1]], "last_offset": 1,
                                              "log_start_offset": 0})
    with pytest.raises(RpcDecodeError):
        rpc.decode_status({"error_message": "no code"})


HEARTBEAT = {"broker_id": 1, "broker_epoch": 5, "current_metadata_offset": 9}
LISTENER = {"name": "PLAINTEXT", "host": "127.0.0.4", "port": 9092}
REGISTRATION = {"broker_id": 4, "incarnation_id": "i-1", "listeners": [LISTENER]}
ALTER_PARTITION = {"broker_id": 4, "broker_epoch": 1, "topics": [{"topic_id": "t", "partitions": [
    {"partition_index": 0, "leader_epoch": 0, "partition_epoch": 0, "new_isr_with_epochs": []}]}]}
RPC_BAD = [  # (decoder, body, field)
    (rpc.decode_heartbeat_request, [], None),
    (rpc.decode_heartbeat_request, {}, "broker_id"),
    (rpc.decode_heartbeat_request, {**HEARTBEAT, "broker_id": "1"}, "broker_id"),
    (rpc.decode_heartbeat_request, {**HEARTBEAT, "broker_id": -1}, "broker_id"),
    (rpc.decode_heartbeat_request, {**HEARTBEAT, "broker_epoch": 2**63}, "broker_epoch"),
    (rpc.decode_heartbeat_request, {**HEARTBEAT, "want_fence": 1}, "want_fence"),
    (rpc.decode_heartbeat_request, {**HEARTBEAT, "want_shutdown": True}, "want_shutdown"),  # Kafka: want_shut_down
    (rpc.decode_registration_request, {**REGISTRATION, "listeners": "PLAINTEXT://x:1"}, "listeners"),
    (rpc.decode_registration_request, {**REGISTRATION, "listeners": [{**LISTENER, "port": 0}]}, "listeners[0].port"),
    (rpc.decode_registration_request, {**REGISTRATION, "listeners": [{"name": "P", "host": "h"}]}, "listeners[0].port"),
    (rpc.decode_registration_request, {**REGISTRATION, "incarnation_id": ""}, "incarnation_id"),
    (rpc.decode_registration_request, {**REGISTRATION, "rack": 3}, "rack"),
    (rpc.decode_broker_id_and_epoch, {"broker_id": 1}, "broker_epoch"),
    (rpc.decode_fetch_request, {"offset": -1}, "offset"),
    (rpc.decode_fetch_request, {"offset": 0, "max_wait_ms": rpc.LONG_POLL_MAX_WAIT_MS + 1}, "max_wait_ms"),
    (rpc.decode_fetch_request, {"offset": 0, "max_records": 0}, "max_records"),
    (rpc.decode_alter_partition_request, {**ALTER_PARTITION, "topics": {}}, "topics"),
    (rpc.decode_alter_partition_request, {**ALTER_PARTITION, "topics": [{"topic_id": "t", "partitions": [
        {"partition_index": 0, "leader_epoch": 0, "partition_epoch": 0, "new_isr_with_epochs": [],
         "leader_recovery_state": 2}]}]}, "topics[0].partitions[0].leader_recovery_state"),
    (rpc.decode_alter_partition_request, {**ALTER_PARTITION, "topics": ALTER_PARTITION["topics"] * 2},
     "topics[1].partitions[0].partition_index"),  # the same partition twice
]


@pytest.mark.parametrize(("decode", "body", "field"), RPC_BAD)
def test_rpc_refusals(decode: Any, body: Any, field: str | None) -> None:
    with pytest.raises(RpcDecodeError) as caught:
        decode(body)
    assert caught.value.field == field


def test_rpc_good_bodies() -> None:
    assert rpc.decode_heartbeat_request({**HEARTBEAT, "want_shut_down": True}) == BrokerHeartbeatRequest(
        1, 5, 9, want_fence=False, want_shut_down=True)
    assert rpc.decode_fetch_request({"offset": 3}) == MetadataFetchRequest(3, 0, rpc_messages.MAX_FETCH_RECORDS, -1)
    assert rpc.decode_registration_request(REGISTRATION).listeners[0] == ListenerData("PLAINTEXT", "127.0.0.4", 9092)
    assert rpc.decode_alter_partition_request(ALTER_PARTITION).topics[0].partitions[0].partition_index == 0
