"""Fuzz a real broker's Kafka listener over loopback: the broker never crashes, keeps serving.

    .venv/bin/python bench/fuzz_broker.py                    # 100,000 cases (make fuzz)
    .venv/bin/python bench/fuzz_broker.py --cases 5000 --seed 7

A LocalCluster (3 controllers + 1 broker, real processes) is started in a temporary
directory and always stopped. Cases are random byte strings, random size prefixes (huge,
negative, over `socket.request.max.bytes`, short bodies) and mutations (bit flips, byte
sets, truncation, insertion, duplicated / deleted / garbled fields, garbage after a frame)
of REAL request frames built with the broker's own codecs, for every implemented API and
version. Several connections run in parallel; each pipelines cases until one of them ends
it.

The oracle is the pure core itself (style.md, "Edges"): every case is first run through
`FrameDecoder` + `parse_request_header` + `decode_request` here, which says exactly which
correlation ids the broker must answer, in order, and whether the connection must then stay
open, be closed by the broker (ProtocolError), or wait for more bytes (we half-close it).
Any disagreement is a failure. So are: a timeout that no long-poll Fetch explains, a
canary connection (Metadata + Produce + Fetch through the codecs every N cases) answered
wrongly or late, a dead broker, a traceback (or "unexpected error") in the broker log,
real produce/consume with confluent-kafka failing afterwards, and an unclean broker stop.
Exit status 1 on any failure; every failure line carries the seed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import struct
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

from common.units import KIB, MIB, SECONDS

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the project's packages are importable
    sys.path.insert(0, str(ROOT))

from common.protocol import (  # noqa: E402
    acls,
    api_versions,
    describe_configs,
    fetch,
    produce,  # noqa: E402
)
from common.protocol import messages  # noqa: E402
from common.protocol.messages import KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION  # noqa: E402
from common.protocol import list_offsets as lo  # noqa: E402
from common.protocol import metadata as md  # noqa: E402
from common.protocol import offset_commit as oc  # noqa: E402
from common.protocol import offset_for_leader_epoch as ofle  # noqa: E402
from common.protocol.api_keys import ApiKey, is_supported  # noqa: E402
from broker.request_handler import IMPLEMENTED_VERSIONS, decode_request  # noqa: E402
from common.protocol.frame import (
    RequestHeader,
    encode_request_header,
    join_chunks,
    parse_request_header,  # noqa: E402
)
from common.protocol.primitives import ProtocolError  # noqa: E402
from common.record_batch import read_batches  # noqa: E402
from groups.partitioner import GROUP_METADATA_TOPIC_NAME, coordinator_partition  # noqa: E402
from common.records import build_batch, decode_records  # noqa: E402
from localcluster.launcher import LocalCluster, free_ports  # noqa: E402

# --- limits, in one place -------------------------------------------------------------------
MAX_REQUEST_BYTES: Final = 1 * MIB  # the broker's socket.request.max.bytes for this run
CASE_TIMEOUT: Final = 10 * SECONDS  # an answer (or the close) must come within this
LONG_POLL_WAIT: Final = 0.5 * SECONDS  # a Fetch with max_wait_ms > 0 is given this, then dropped
CANARY_TIMEOUT: Final = 10 * SECONDS
MAX_PIPELINE: Final = 6  # cases written back to back before reading their answers
MAX_RANDOM_BYTES: Final = 512
READY_TIMEOUT: Final = 60 * SECONDS
CLIENT_TIMEOUT: Final = 20 * SECONDS
HOSTS: Final = ("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4")
BROKER_ID: Final = 4
FUZZ_TOPIC: Final = "fuzz"
CANARY_TOPIC: Final = "fuzz-canary-topic"
CHECK_TOPIC: Final = "fuzz-after-check"
CLIENT_ID: Final = "fuzz"
CANARY_CORRELATION_BASE: Final = 1_000_000
OFFSETS_TOPIC_PARTITIONS: Final = 8  # the fuzz cluster's internal topics: few partitions, quick to create
TRANSACTION_STATE_PARTITIONS: Final = 4
# A bit-flipped topic name must not create topics (the controller is not under test here).
EXTRA_PROPERTIES: Final = {"socket.request.max.bytes": str(MAX_REQUEST_BYTES),
                           "auto.create.topics.enable": "false",
                           "broker.heartbeat.interval.ms": "200", "broker.session.timeout.ms": "3000",
                           "offsets.topic.num.partitions": str(OFFSETS_TOPIC_PARTITIONS),
                           "transaction.state.log.num.partitions": str(TRANSACTION_STATE_PARTITIONS)}
INTERESTING: Final = (0, 1, -1, 2, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF,
                      -0x80000000, MAX_REQUEST_BYTES, MAX_REQUEST_BYTES + 1)


# --- real frames for every implemented API and version --------------------------------------

def _batch(value: bytes) -> bytes:
    return build_batch([(b"k", value)], base_timestamp=1_700_000_000_000)


def request_body(api: ApiKey, version: int, topic: str = FUZZ_TOPIC, *, value: bytes = b"fuzz-value",
                 fetch_offset: int = 0) -> bytes:
    """One well-formed request body: what a real client sends for this API and version."""
    if api is ApiKey.API_VERSIONS:
        return messages.encode(api_versions.request(version, "tidelog-fuzz", "1.0"))
    if api is ApiKey.METADATA:
        return join_chunks(md.encode_metadata_request(md.MetadataRequest((topic, "fuzz-absent"), False), version))
    if api is ApiKey.PRODUCE:
        produced = produce.ProduceRequest(None, 1, 1000, (produce.TopicProduceData(
            topic, (produce.PartitionProduceData(0, _batch(value)),)),))
        return join_chunks(produce.encode_produce_request(produced, version))
    if api is ApiKey.FETCH:
        fetched = fetch.FetchRequest(-1, 0, 1, 64 * KIB, 0, (fetch.FetchTopic(
            topic, (fetch.FetchPartition(0, fetch_offset, 64 * KIB),)),), 0, -1, (), "")
        return join_chunks(fetch.encode_fetch_request(fetched, version))
    if api is ApiKey.LIST_OFFSETS:
        if version == 0:
            return join_chunks(lo.encode_request(lo.V0Request(-1, (lo.V0Topic(topic, (
                lo.V0Partition(0, lo.LATEST_TIMESTAMP, 1), lo.V0Partition(0, lo.EARLIEST_TIMESTAMP, 1))),)), 0))
        req = lo.request(version, -1, [(topic, 0, lo.LATEST_TIMESTAMP, lo.NO_LEADER_EPOCH),
                                       (topic, 0, lo.EARLIEST_TIMESTAMP, lo.NO_LEADER_EPOCH)])
        return join_chunks(lo.encode_request(req, version))
    if api is ApiKey.OFFSET_FOR_LEADER_EPOCH:
        req = ofle.request(version, [(topic, 0, 0, ofle.UNDEFINED_EPOCH)])
        return join_chunks(ofle.encode_request(req, version))
    if api is ApiKey.CREATE_TOPICS:  # validate_only: a mutation must also flip it to create anything
        m = messages.request_module(api, version)
        return messages.encode(m.CreateTopicsRequest(topics=(m.CreatableTopic(
            name="fuzz-absent", num_partitions=1, replication_factor=1, assignments=(), configs=()),),
            timeout=timedelta(seconds=1), validate_only=True))
    if api is ApiKey.DELETE_TOPICS:
        m = messages.request_module(api, version)
        topics = (m.DeleteTopicState(name="fuzz-absent", topic_id=None),) if hasattr(m, "DeleteTopicState") else ()
        return messages.encode(messages.build(m.DeleteTopicsRequest, topic_names=("fuzz-absent",),
                                              timeout=timedelta(seconds=1), topics=topics))
    if api is ApiKey.CREATE_PARTITIONS:
        m = messages.request_module(api, version)
        return messages.encode(m.CreatePartitionsRequest(topics=(
            m.CreatePartitionsTopic(name="fuzz-absent", count=2, assignments=None),), timeout=timedelta(seconds=1),
            validate_only=True))
    if api is ApiKey.DESCRIBE_CONFIGS:
        req = describe_configs.request(version, (2, topic, ("cleanup.policy", "retention.ms")), include_synonyms=True)
        return join_chunks(describe_configs.encode_describe_configs_request(req, version))
    if api in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):  # validate_only, as for creations
        m = messages.request_module(api, version)
        name = "AlterConfigsRequest" if api is ApiKey.ALTER_CONFIGS else "IncrementalAlterConfigsRequest"
        return messages.encode(getattr(m, name)(resources=(m.AlterConfigsResource(
            resource_type=2, resource_name="fuzz-absent", configs=(messages.build(
                m.AlterableConfig, name="retention.ms", value="1000", config_operation=0),)),), validate_only=True))
    for more in (_cluster_request, _group_request, _log_admin_request, _transaction_request, _kafka4_request):
        body = more(api, version, topic)
        if body is not None:
            return body
    raise AssertionError(f"no fuzz frame for {api.name}: add one")  # a new codec: add it here


def _cluster_request(api: ApiKey, version: int, topic: str) -> bytes | None:
    """DescribeCluster, DescribeQuorum (a read of the controllers' Raft state), ElectLeaders
    (the fuzz topic's leader is its preferred replica, so a preferred or unclean election is
    not needed), the reassignment APIs (cancelling nothing) and the ACL APIs
    (SECURITY_DISABLED)."""
    if api is ApiKey.DESCRIBE_CLUSTER:
        m = messages.request_module(api, version)
        return messages.encode(m.DescribeClusterRequest(include_cluster_authorized_operations=True))
    if api is ApiKey.ELECT_LEADERS:
        m = messages.request_module(api, version)
        return messages.encode(messages.build(m.ElectLeadersRequest, election_type=0, timeout=timedelta(seconds=1),
                                              topic_partitions=(m.TopicPartitions(topic=topic, partitions=(0,)),)))
    if api is ApiKey.ALTER_PARTITION_REASSIGNMENTS:  # a cancel of nothing: NO_REASSIGNMENT_IN_PROGRESS
        m = messages.request_module(api, version)
        return messages.encode(m.AlterPartitionReassignmentsRequest(timeout=timedelta(seconds=1), topics=(
            m.ReassignableTopic(name=topic, partitions=(m.ReassignablePartition(partition_index=0, replicas=None),)),)))
    if api is ApiKey.LIST_PARTITION_REASSIGNMENTS:
        m = messages.request_module(api, version)
        return messages.encode(m.ListPartitionReassignmentsRequest(timeout=timedelta(seconds=1), topics=None))
    if api is ApiKey.DESCRIBE_QUORUM:  # as kafka-metadata-quorum.sh asks: the metadata log's partition
        m = messages.request_module(api, version)
        return messages.encode(m.DescribeQuorumRequest(topics=(m.TopicData(
            topic_name=CLUSTER_METADATA_TOPIC, partitions=(m.PartitionData(partition_index=0),)),)))
    acl_filter = (2, topic, None, None, 1, 1, acls.PATTERN_TYPE_LITERAL)
    if api is ApiKey.DESCRIBE_ACLS:
        return join_chunks(acls.encode_request(acls.describe_request(version, acl_filter), version))
    if api is ApiKey.CREATE_ACLS:
        binding = (2, topic, "User:fuzz", "*", 3, 3, acls.PATTERN_TYPE_LITERAL)
        return join_chunks(acls.encode_request(acls.create_request(version, binding), version))
    if api is ApiKey.DELETE_ACLS:
        return join_chunks(acls.encode_request(acls.delete_request(version, acl_filter), version))
    return None


CLUSTER_METADATA_TOPIC: Final = "__cluster_metadata"
FUZZ_USER: Final = "fuzz-absent-user"
ABSENT_VOTER_ID: Final = 9999  # no such controller: the voter APIs refuse (VOTER_NOT_FOUND) and change nothing


def _kafka4_request(api: ApiKey, version: int, topic: str) -> bytes | None:
    """The APIs of issues 28, 29 and 31, each as harmless as a real client's: the voter changes
    name a voter that does not exist, UpdateFeatures only validates, the SCRAM change deletes a
    user that does not exist, SASL frames arrive on a PLAINTEXT listener (refused, one connection
    closed at most), a consumer-protocol member and a share group member join groups of the fuzz
    topic."""
    def build(name: str, **values: Any) -> bytes:
        m = messages.request_module(api, version)
        return messages.encode(messages.build(getattr(m, name), **values))

    m = messages.request_module(api, version) if api in KAFKA4_APIS else None
    if m is None:
        return None
    if api is ApiKey.ADD_RAFT_VOTER:
        return build("AddRaftVoterRequest", cluster_id=None, timeout=timedelta(seconds=1), voter_id=ABSENT_VOTER_ID,
                     voter_directory_id=uuid.UUID(int=1), ack_when_committed=True,
                     listeners=(m.Listener(name="CONTROLLER", host="127.0.0.1", port=1),))
    if api is ApiKey.REMOVE_RAFT_VOTER:
        return build("RemoveRaftVoterRequest", cluster_id=None, voter_id=ABSENT_VOTER_ID,
                     voter_directory_id=uuid.UUID(int=1))
    if api is ApiKey.UPDATE_RAFT_VOTER:
        return build("UpdateRaftVoterRequest", cluster_id=None, current_leader_epoch=-1, voter_id=ABSENT_VOTER_ID,
                     voter_directory_id=uuid.UUID(int=1),
                     listeners=(m.Listener(name="CONTROLLER", host="127.0.0.1", port=1),),
                     k_raft_version_feature=m.KRaftVersionFeature(min_supported_version=0, max_supported_version=1))
    if api is ApiKey.UPDATE_FEATURES:
        update = messages.build(m.FeatureUpdateKey, feature="transaction.version", max_version_level=2,
                                allow_downgrade=False, upgrade_type=1)
        return build("UpdateFeaturesRequest", timeout=timedelta(seconds=1), feature_updates=(update,),
                     validate_only=True)
    if api is ApiKey.DESCRIBE_TOPIC_PARTITIONS:
        return build("DescribeTopicPartitionsRequest", topics=(m.TopicRequest(name=topic),),
                     response_partition_limit=100, cursor=None)
    if api is ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS:
        return build("DescribeUserScramCredentialsRequest", users=None)
    if api is ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        return build("AlterUserScramCredentialsRequest", upsertions=(),
                     deletions=(m.ScramCredentialDeletion(name=FUZZ_USER, mechanism=2),))
    if api is ApiKey.CONSUMER_GROUP_HEARTBEAT:
        return build("ConsumerGroupHeartbeatRequest", group_id=FUZZ_GROUP + "-848", member_id=str(uuid.UUID(int=2)),
                     member_epoch=0, instance_id=None, rack_id=None, rebalance_timeout=timedelta(seconds=1),
                     subscribed_topic_names=(topic,), subscribed_topic_regex=None, server_assignor=None,
                     topic_partitions=())
    if api is ApiKey.CONSUMER_GROUP_DESCRIBE:
        return build("ConsumerGroupDescribeRequest", group_ids=(FUZZ_GROUP + "-848",),
                     include_authorized_operations=True)
    if api is ApiKey.SHARE_GROUP_HEARTBEAT:  # KIP-932: a share group member joins
        return build("ShareGroupHeartbeatRequest", group_id=FUZZ_GROUP + "-932", member_id=str(uuid.UUID(int=3)),
                     member_epoch=0, rack_id=None, subscribed_topic_names=(topic,))
    if api is ApiKey.SHARE_GROUP_DESCRIBE:
        return build("ShareGroupDescribeRequest", group_ids=(FUZZ_GROUP + "-932",), include_authorized_operations=True)
    if api is ApiKey.SHARE_FETCH:  # opens a share session of no partitions: answered at once
        return build("ShareFetchRequest", group_id=FUZZ_GROUP + "-932", member_id=str(uuid.UUID(int=3)),
                     share_session_epoch=0, max_wait=timedelta(0), min_bytes=1, max_bytes=1 << 20, max_records=10,
                     batch_size=10, topics=(), forgotten_topics_data=())
    if api is ApiKey.SHARE_ACKNOWLEDGE:  # a session epoch nobody opened: SHARE_SESSION_NOT_FOUND
        return build("ShareAcknowledgeRequest", group_id=FUZZ_GROUP + "-932", member_id=str(uuid.UUID(int=4)),
                     share_session_epoch=1, topics=())
    if api is ApiKey.READ_SHARE_GROUP_STATE:  # a share partition nobody wrote: uninitialized
        return build("ReadShareGroupStateRequest", group_id=FUZZ_GROUP + "-932", topics=(m.ReadStateData(
            topic_id=uuid.UUID(int=5), partitions=(m.PartitionData(partition=0, leader_epoch=0),)),))
    if api is ApiKey.WRITE_SHARE_GROUP_STATE:  # the state of a topic id that does not exist
        return build("WriteShareGroupStateRequest", group_id=FUZZ_GROUP + "-932", topics=(m.WriteStateData(
            topic_id=uuid.UUID(int=5), partitions=(m.PartitionData(partition=0, state_epoch=0, leader_epoch=0,
                                                                   start_offset=0, state_batches=()),)),))
    if api is ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS:
        return build("DescribeShareGroupOffsetsRequest", groups=(m.DescribeShareGroupOffsetsRequestGroup(
            group_id=FUZZ_GROUP + "-932", topics=None),))
    if api is ApiKey.ALTER_SHARE_GROUP_OFFSETS:  # the fuzz share group's partition 0 starts at 0 again
        return build("AlterShareGroupOffsetsRequest", group_id=FUZZ_GROUP + "-932-admin", topics=(
            m.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=(
                m.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=0),)),))
    if api is ApiKey.DELETE_SHARE_GROUP_OFFSETS:
        return build("DeleteShareGroupOffsetsRequest", group_id=FUZZ_GROUP + "-932-admin", topics=(
            m.DeleteShareGroupOffsetsRequestTopic(topic_name=topic),))
    if api is ApiKey.SASL_HANDSHAKE:
        return build("SaslHandshakeRequest", mechanism="PLAIN")
    if api is ApiKey.SASL_AUTHENTICATE:
        return build("SaslAuthenticateRequest", auth_bytes=b"\0fuzz\0fuzz")
    return None


KAFKA4_APIS: Final = frozenset({
    ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER, ApiKey.UPDATE_RAFT_VOTER, ApiKey.UPDATE_FEATURES,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE,
    ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE,
    ApiKey.READ_SHARE_GROUP_STATE, ApiKey.WRITE_SHARE_GROUP_STATE, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS, ApiKey.DELETE_SHARE_GROUP_OFFSETS})
FUZZ_GROUP: Final = "fuzz-group"


def _group_request(api: ApiKey, version: int, topic: str) -> bytes | None:
    """The group APIs (issue 12); a JoinGroup's rebalance timeout is short: it may wait that long."""
    if api is ApiKey.OFFSET_COMMIT and version < oc.FIRST_GENERATED_VERSION:  # kio has no v0/v1
        old = oc.OldCommitRequest(FUZZ_GROUP, (oc.OldCommitTopic(topic, (oc.OldCommitPartition(0, 1, "fuzz"),)),))
        return join_chunks(oc.encode_request(old, version))
    if api not in GROUP_APIS:
        return None
    m = messages.request_module(api, version)  # kio's messages: the request of this version
    if api is ApiKey.JOIN_GROUP:
        req = messages.build(m.JoinGroupRequest, group_id=FUZZ_GROUP, session_timeout=timedelta(seconds=6),
                             rebalance_timeout=timedelta(milliseconds=100), member_id="", group_instance_id=None,
                             protocol_type="consumer", reason=None, protocols=(
                                 m.JoinGroupRequestProtocol(name="range", metadata=b"\x00" * 6),))
    elif api is ApiKey.SYNC_GROUP:
        req = messages.build(m.SyncGroupRequest, group_id=FUZZ_GROUP, generation_id=1, member_id="m",
                             group_instance_id=None, protocol_type=None, protocol_name=None, assignments=())
    elif api is ApiKey.HEARTBEAT:
        req = messages.build(m.HeartbeatRequest, group_id=FUZZ_GROUP, generation_id=1, member_id="m",
                             group_instance_id=None)
    elif api is ApiKey.LEAVE_GROUP:
        members = (messages.build(m.MemberIdentity, member_id="m", group_instance_id=None, reason=None),) \
            if version >= 3 else ()
        req = messages.build(m.LeaveGroupRequest, group_id=FUZZ_GROUP, member_id="m", members=members)
    elif api is ApiKey.OFFSET_COMMIT:
        req = messages.build(m.OffsetCommitRequest, group_id=FUZZ_GROUP, generation_id_or_member_epoch=-1,
                             member_id="", group_instance_id=None, retention_time=timedelta(milliseconds=-1),
                             topics=(m.OffsetCommitRequestTopic(name=topic, partitions=(messages.build(
                                 m.OffsetCommitRequestPartition, partition_index=0, committed_offset=1,
                                 committed_leader_epoch=-1, committed_metadata="fuzz"),)),))
    elif api is ApiKey.OFFSET_FETCH and version >= 8:
        req = m.OffsetFetchRequest(require_stable=False, groups=(messages.build(
            m.OffsetFetchRequestGroup, group_id=FUZZ_GROUP, member_id=None, member_epoch=-1,
            topics=(m.OffsetFetchRequestTopics(name=topic, partition_indexes=(0,)),)),))
    elif api is ApiKey.OFFSET_FETCH:
        req = messages.build(m.OffsetFetchRequest, group_id=FUZZ_GROUP, require_stable=False,
                             topics=(m.OffsetFetchRequestTopic(name=topic, partition_indexes=(0,)),))
    elif api is ApiKey.OFFSET_DELETE:
        req = m.OffsetDeleteRequest(group_id=FUZZ_GROUP, topics=(m.OffsetDeleteRequestTopic(
            name=topic, partitions=(m.OffsetDeleteRequestPartition(partition_index=0),)),))
    elif api is ApiKey.DESCRIBE_GROUPS:
        req = messages.build(m.DescribeGroupsRequest, groups=(FUZZ_GROUP,), include_authorized_operations=False)
    elif api is ApiKey.LIST_GROUPS:
        req = messages.build(m.ListGroupsRequest, states_filter=(), types_filter=())
    else:
        req = m.DeleteGroupsRequest(groups_names=("fuzz-absent-group",))
    return messages.encode(req)


GROUP_APIS: Final = frozenset({
    ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH, ApiKey.OFFSET_DELETE, ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS, ApiKey.DELETE_GROUPS})


def _log_admin_request(api: ApiKey, version: int, topic: str) -> bytes | None:
    """The storage admin APIs (issue 18). DeleteRecords names an absent topic with timeout 0:
    a mutation must hit the exact topic name to delete anything, and nothing waits."""
    if api not in LOG_ADMIN_APIS:
        return None
    m = messages.request_module(api, version)  # kio's messages: the request of this version
    if api is ApiKey.DELETE_RECORDS:
        return messages.encode(m.DeleteRecordsRequest(topics=(m.DeleteRecordsTopic(name="fuzz-absent", partitions=(
            m.DeleteRecordsPartition(partition_index=0, offset=0),)),), timeout=timedelta(0)))
    if api is ApiKey.DESCRIBE_LOG_DIRS:
        return messages.encode(m.DescribeLogDirsRequest(topics=(
            m.DescribableLogDirTopic(topic=topic, partitions=(0,)),)))
    if api is ApiKey.DESCRIBE_PRODUCERS:
        return messages.encode(m.DescribeProducersRequest(topics=(m.TopicRequest(name=topic, partition_indexes=(0,)),)))
    if api is ApiKey.ALTER_REPLICA_LOG_DIRS:  # a directory the broker does not have: LOG_DIR_NOT_FOUND, nothing moves
        return messages.encode(m.AlterReplicaLogDirsRequest(dirs=(m.AlterReplicaLogDir(
            path="/fuzz-absent", topics=(m.AlterReplicaLogDirTopic(name=topic, partitions=(0,)),)),)))
    raise AssertionError(f"LOG_ADMIN_APIS lists {api.name} without a frame")


LOG_ADMIN_APIS: Final = frozenset({
    ApiKey.DELETE_RECORDS, ApiKey.DESCRIBE_LOG_DIRS, ApiKey.DESCRIBE_PRODUCERS, ApiKey.ALTER_REPLICA_LOG_DIRS})


# Transactions (issue 27): a transactional id that exists nowhere, so the coordinator answers
# errors and writes nothing (InitProducerId stays idempotent: with an id it would register
# one), and a producer id far beyond any block the controllers hand out (blocks of 1,000 from
# 0), so no producer's state on any partition is touched. Only TxnOffsetCommit and
# WriteTxnMarkers write: that producer's pending offsets for a group nobody else uses, and
# its COMMIT markers on the fuzz topic (no data of that producer) and on that group's
# `__consumer_offsets` partition (which ends those pending offsets). Neither the canary's
# topic nor the after-check's is named.
FUZZ_TRANSACTIONAL_ID: Final = "fuzz-absent-txn"
FUZZ_TXN_GROUP: Final = "fuzz-txn-group"
FUZZ_PRODUCER_ID: Final = 1 << 40
# Its epoch and the markers' coordinator epoch at their maximum (int16, int32), so no garbled
# frame can raise them: one accepted above the real frames' fences every later real frame of
# that producer (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED). From 0 nearly any
# garbling did (a 40,000-case run wrote 7 of its ~1,000 markers).
FUZZ_PRODUCER_EPOCH: Final = 0x7FFF
FUZZ_COORDINATOR_EPOCH: Final = 0x7FFF_FFFF


def _transaction_request(api: ApiKey, version: int, topic: str) -> bytes | None:
    """FindCoordinator, InitProducerId and the transaction APIs, on kio's messages, as a
    transactional producer (or, for AddPartitionsToTxn v4+ and WriteTxnMarkers, a broker)
    sends them."""
    if api not in TRANSACTION_APIS:
        return None
    m = messages.request_module(api, version)
    tid, producer = FUZZ_TRANSACTIONAL_ID, {"producer_id": FUZZ_PRODUCER_ID, "producer_epoch": FUZZ_PRODUCER_EPOCH}
    if api is ApiKey.FIND_COORDINATOR:  # v4+ (batched keys): a transactional producer's question
        req = messages.build(m.FindCoordinatorRequest, key=FUZZ_GROUP, key_type=KEY_TYPE_GROUP) if version < 4 \
            else m.FindCoordinatorRequest(key_type=KEY_TYPE_TRANSACTION, coordinator_keys=(tid,))
    elif api is ApiKey.INIT_PRODUCER_ID:
        req = messages.build(m.InitProducerIdRequest, transactional_id=None, transaction_timeout=timedelta(minutes=1),
                             producer_id=-1, producer_epoch=-1)
    elif api is ApiKey.ADD_PARTITIONS_TO_TXN and version < 4:
        req = m.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid, v3_and_below_producer_id=FUZZ_PRODUCER_ID,
            v3_and_below_producer_epoch=FUZZ_PRODUCER_EPOCH,
            v3_and_below_topics=(m.AddPartitionsToTxnTopic(name=topic, partitions=(0,)),))
    elif api is ApiKey.ADD_PARTITIONS_TO_TXN:  # a partition leader's KIP-890 check: verify_only
        req = m.AddPartitionsToTxnRequest(transactions=(m.AddPartitionsToTxnTransaction(
            transactional_id=tid, **producer, verify_only=True,
            topics=(m.AddPartitionsToTxnTopic(name=topic, partitions=(0,)),)),))
    elif api is ApiKey.ADD_OFFSETS_TO_TXN:
        req = m.AddOffsetsToTxnRequest(transactional_id=tid, **producer, group_id=FUZZ_TXN_GROUP)
    elif api is ApiKey.END_TXN:
        req = m.EndTxnRequest(transactional_id=tid, **producer, committed=False)
    elif api is ApiKey.TXN_OFFSET_COMMIT:
        req = messages.build(m.TxnOffsetCommitRequest, transactional_id=tid, group_id=FUZZ_TXN_GROUP, **producer,
                             generation_id=-1, member_id="", group_instance_id=None,
                             topics=(m.TxnOffsetCommitRequestTopic(name=topic, partitions=(
                                 messages.build(m.TxnOffsetCommitRequestPartition, partition_index=0,
                                                committed_offset=1, committed_leader_epoch=-1,
                                                committed_metadata="fuzz"),)),))
    elif api is ApiKey.DESCRIBE_TRANSACTIONS:
        req = m.DescribeTransactionsRequest(transactional_ids=(tid,))
    elif api is ApiKey.LIST_TRANSACTIONS:
        req = messages.build(m.ListTransactionsRequest, state_filters=("Ongoing",),
                             producer_id_filters=(FUZZ_PRODUCER_ID,), duration_filter=-1)
    else:
        req = m.WriteTxnMarkersRequest(markers=(m.WritableTxnMarker(
            **producer, transaction_result=True, coordinator_epoch=FUZZ_COORDINATOR_EPOCH,
            topics=tuple(m.WritableTxnMarkerTopic(name=name, partition_indexes=(index,))
                         for name, index in _marker_partitions(topic))),))
    return messages.encode(req)


TRANSACTION_APIS: Final = frozenset({
    ApiKey.FIND_COORDINATOR, ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN,
    ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT, ApiKey.DESCRIBE_TRANSACTIONS, ApiKey.LIST_TRANSACTIONS,
    ApiKey.WRITE_TXN_MARKERS})


def _marker_partitions(topic: str) -> tuple[tuple[str, int], ...]:
    """Where a COMMIT of the fuzz producer's transaction goes: the fuzz topic and the
    `__consumer_offsets` partition of the group its TxnOffsetCommit frames name."""
    return (topic, 0), (GROUP_METADATA_TOPIC_NAME, coordinator_partition(FUZZ_TXN_GROUP, OFFSETS_TOPIC_PARTITIONS))


def frame(api: ApiKey, version: int, correlation_id: int, body: bytes) -> bytes:
    payload = encode_request_header(RequestHeader(int(api), version, correlation_id, CLIENT_ID)) + body
    return struct.pack(">i", len(payload)) + payload


API_VERSION_PAIRS: Final = tuple((api, v) for api, (low, high) in IMPLEMENTED_VERSIONS.items()
                                 for v in range(low, high + 1))
REAL_BODIES: Final = {(api, v): request_body(api, v) for api, v in API_VERSION_PAIRS}


# --- the oracle: what the pure core says the broker must do --------------------------------

@dataclass(frozen=True, slots=True)
class Prediction:
    answers: tuple[int, ...]  # correlation ids answered, in order
    end: str  # "open": connection stays usable; "error": broker closes it; "partial": waits for bytes
    long_poll: bool  # a parsed Fetch may wait max_wait_ms, a JoinGroup/SyncGroup a rebalance, before answering
    silent: int  # Produce acks=0 frames (no answer)
    error: str | None = None  # a non-ProtocolError from the codecs: a bug in the pure core


def predict(data: bytes) -> Prediction:
    """Frame, parse and decode `data` exactly as the broker's server + handler would."""
    answers: list[int] = []
    long_poll, silent, pos = False, 0, 0
    try:
        while len(data) - pos >= 4:  # bounded: each pass consumes a prefix or stops
            size = struct.unpack_from(">i", data, pos)[0]
            if size < 0 or size > MAX_REQUEST_BYTES:
                raise ProtocolError(f"size {size}")
            if len(data) - pos - 4 < size:
                break
            header, body = parse_request_header(data[pos + 4:pos + 4 + size])
            pos += 4 + size
            # An ApiVersions request at a version we do not serve is answered (v0, error 35)
            # without reading its body; at a served version its body is decoded like any
            # other (v3+ carries fields, and a malformed one closes the connection, as Kafka's
            # InvalidRequestException does).
            if header.request_api_key != ApiKey.API_VERSIONS \
                    or is_supported(ApiKey.API_VERSIONS, header.request_api_version):
                request = decode_request(header, body)
                if isinstance(request, produce.ProduceRequest) and request.acks == 0:
                    silent += 1
                    continue
                long_poll |= isinstance(request, fetch.FetchRequest) and request.max_wait_ms > 0
                long_poll |= header.request_api_key in (ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP)  # a rebalance
            answers.append(header.correlation_id)
    except ProtocolError:
        return Prediction(tuple(answers), "error", long_poll, silent)
    except Exception as exc:  # noqa: BLE001 - the very thing a fuzzer looks for
        return Prediction(tuple(answers), "error", long_poll, silent, f"{type(exc).__name__}: {exc}")
    return Prediction(tuple(answers), "open" if pos == len(data) else "partial", long_poll, silent)


# --- cases ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Case:
    kind: str
    data: bytes
    chunk: int  # written in pieces of this many bytes (0: at once)
    prediction: Prediction


def mutate(rng: random.Random, data: bytes) -> bytes:
    """1-4 mutations: bit flip, byte set, truncation, insertion, duplicated / deleted / garbled field."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(buf) + 1)
        op = rng.randrange(9)
        if op == 0 and i < len(buf):
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and i < len(buf):
            buf[i] = rng.randrange(256)
        elif op == 2:
            del buf[i:]
        elif op == 3:
            buf[i:i] = rng.randbytes(rng.randint(1, 8))
        elif op == 4:  # a field (or several) duplicated in place
            n = rng.randint(1, 16)
            buf[i:i] = buf[i:i + n]
        elif op == 5:
            del buf[i:i + rng.randint(1, 16)]
        elif op in (6, 7):  # a length / count / id garbled to an interesting value
            width = 2 if op == 6 else 4
            value = rng.choice(INTERESTING) & (0xFFFF if width == 2 else 0xFFFFFFFF)
            buf[i:i + width] = value.to_bytes(width, "big")
        else:
            buf[i:i + rng.randint(1, 4)] = b"\xff" * rng.randint(1, 4)  # -1 lengths
    return bytes(buf)


def _real_payload(rng: random.Random, correlation_id: int) -> bytes:
    api, version = rng.choice(API_VERSION_PAIRS)
    return frame(api, version, correlation_id, REAL_BODIES[(api, version)])[4:]


def _kind_random(rng: random.Random, cid: int) -> tuple[str, bytes]:
    return "random bytes", rng.randbytes(rng.randint(0, MAX_RANDOM_BYTES))


def _kind_size(rng: random.Random, cid: int) -> tuple[str, bytes]:
    size = rng.choice((-1, -2, -0x80000000, 0x7FFFFFFF, MAX_REQUEST_BYTES + 1, MAX_REQUEST_BYTES,
                       0, 1, 2, 3, 7, 8, 9, 10, rng.randint(-0x80000000, 0x7FFFFFFF), rng.randint(0, 600)))
    body_len = rng.choice((0, rng.randint(0, 64), size if 0 <= size <= 600 else 3))
    return "size prefix", struct.pack(">i", size) + rng.randbytes(body_len)


def _kind_header_random_body(rng: random.Random, cid: int) -> tuple[str, bytes]:
    api, version = rng.choice(API_VERSION_PAIRS)
    if rng.random() < 0.2:  # unknown or unsupported API / version
        api_key, version = rng.choice((rng.randint(-5, 70), int(api))), rng.randint(-2, 20)
    else:
        api_key = int(api)
    payload = struct.pack(">hhi", api_key, version, cid) + struct.pack(">h", 4) + b"fuzz"
    payload += rng.randbytes(rng.randint(0, 96))
    return "real header, random body", struct.pack(">i", len(payload)) + payload


def _kind_mutated(rng: random.Random, cid: int) -> tuple[str, bytes]:
    payload = _real_payload(rng, cid)
    if rng.random() < 0.7:  # the size prefix kept honest
        body = mutate(rng, payload)
        return "mutated frame", struct.pack(">i", len(body)) + body
    return "mutated framed bytes", mutate(rng, struct.pack(">i", len(payload)) + payload)


def _kind_stream(rng: random.Random, cid: int) -> tuple[str, bytes]:
    """Two or three real frames back to back, then garbage / a truncation / nothing."""
    frames = [struct.pack(">i", len(p)) + p for p in (_real_payload(rng, cid + k) for k in range(rng.randint(2, 3)))]
    data = b"".join(frames)
    how = rng.randrange(3)
    if how == 0:
        data += rng.randbytes(rng.randint(1, 16))
    elif how == 1:
        data = data[:rng.randrange(len(data))]
    return "frame stream", data


def _kind_real(rng: random.Random, cid: int) -> tuple[str, bytes]:
    payload = _real_payload(rng, cid)
    return "real frame", struct.pack(">i", len(payload)) + payload


KINDS: Final[tuple[tuple[Callable[[random.Random, int], tuple[str, bytes]], int], ...]] = (
    (_kind_random, 10), (_kind_size, 10), (_kind_header_random_body, 15), (_kind_mutated, 45),
    (_kind_stream, 10), (_kind_real, 10))


def make_case(rng: random.Random, correlation_id: int) -> Case:
    make = rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
    kind, data = make(rng, correlation_id)
    chunk = rng.choice((1, 3, 7)) if rng.random() < 0.05 else 0
    return Case(kind, data, chunk, predict(data))


# --- running cases against the broker ---------------------------------------------------------

@dataclass(slots=True)
class Report:
    seed: int
    cases: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    connections: int = 0
    canary_rounds: int = 0
    canary_max_s: float = 0.0
    elapsed_s: float = 0.0
    closing_lines: int = 0
    protocol_errors_sent: int = 0  # cases the codecs reject: each must close with one log line
    failures: list[str] = field(default_factory=list)

    def fail(self, what: str) -> None:
        if len(self.failures) < 50:
            self.failures.append(f"[seed {self.seed}] {what}")

    def summary(self) -> str:
        rate = self.cases / self.elapsed_s if self.elapsed_s else 0.0
        lines = [f"seed {self.seed}: {self.cases} cases in {self.elapsed_s:.1f} s ({rate:.0f} cases/s) "
                 f"over {self.connections} connections",
                 "outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items())),
                 "kinds: " + ", ".join(f"{k} {v}" for k, v in sorted(self.kinds.items())),
                 f"canary: {self.canary_rounds} rounds, slowest {self.canary_max_s * 1000:.0f} ms; "
                 f"'Closing connection' log lines: {self.closing_lines} "
                 f"(for {self.protocol_errors_sent} cases the codecs reject)",
                 f"failures: {len(self.failures)}", *self.failures]
        return "\n".join(lines)


def _describe(case: Case) -> str:
    hexed = case.data[:96].hex()
    return f"{case.kind} ({len(case.data)} bytes: {hexed}{'...' if len(case.data) > 96 else ''})"


async def _read_response(reader: asyncio.StreamReader) -> int:
    """The correlation id of the next response frame (its body is read and dropped)."""
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    if size < 4 or size > 64 * MIB:
        raise ValueError(f"response size {size}")
    return struct.unpack(">i", (await reader.readexactly(size))[:4])[0]


async def _write(writer: asyncio.StreamWriter, case: Case) -> None:
    if not case.chunk:
        writer.write(case.data)
    else:
        for i in range(0, len(case.data), case.chunk):
            writer.write(case.data[i:i + case.chunk])
            await writer.drain()
    await writer.drain()


class Fuzzer:
    def __init__(self, host: str, port: int, total: int, seed: int, report: Report) -> None:
        self.host, self.port, self.total, self.seed, self.report = host, port, total, seed, report
        self.issued = 0  # cases handed out
        self.done = 0  # cases finished
        self.progress = asyncio.Event()  # set whenever a case finishes (the canary waits on it)

    def _next(self, rng: random.Random) -> Case | None:
        if self.issued >= self.total:
            return None
        self.issued += 1
        case = make_case(rng, rng.randint(0, CANARY_CORRELATION_BASE - 1))
        if case.prediction.error is not None:
            self.report.fail(f"codec raised {case.prediction.error} for {_describe(case)}")
        self.report.kinds[case.kind] += 1
        return case

    async def worker(self, index: int) -> None:
        rng = random.Random(f"{self.seed}-{index}")
        pending: Case | None = None
        while True:  # one connection per pass; bounded by self.total cases
            pending = pending or self._next(rng)
            if pending is None:
                return
            pending = await self._connection(rng, pending)

    def _finish(self, outcome: str, count: int = 1) -> None:
        self.report.outcomes[outcome] += count
        self.done += count
        self.report.cases += count
        self.progress.set()

    async def _connection(self, rng: random.Random, first: Case) -> Case | None:
        """Run cases on one new connection until one ends it; the case not yet run, if any."""
        reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), CASE_TIMEOUT)
        self.report.connections += 1
        try:
            case: Case | None = first
            while case is not None:  # bounded by self.total cases
                group: list[Case] = []
                while case is not None and case.prediction.end == "open" and len(group) < MAX_PIPELINE:
                    group.append(case)
                    case = self._next(rng) if len(group) < rng.randint(1, MAX_PIPELINE) else None
                if group:  # cases that leave the connection open: pipelined, then answered in order
                    if not await self._run_open(reader, writer, group):
                        return case
                    case = case if case is not None else self._next(rng)
                    continue
                assert case is not None
                await self._run_last(reader, writer, case)
                return None
            return None
        finally:
            writer.close()
            try:
                await asyncio.wait_for(writer.wait_closed(), 1)
            except (OSError, TimeoutError):
                pass

    async def _run_open(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        group: list[Case]) -> bool:
        long_poll = any(c.prediction.long_poll for c in group)
        try:
            for case in group:
                await _write(writer, case)
            for case in group:
                for expected in case.prediction.answers:
                    got = await asyncio.wait_for(_read_response(reader),
                                                 LONG_POLL_WAIT if long_poll else CASE_TIMEOUT)
                    if got != expected:
                        self.report.fail(f"answered correlation id {got}, expected {expected}: {_describe(case)}")
                        self._finish("mismatch", len(group))
                        return False
        except TimeoutError:
            if not long_poll:
                self.report.fail(f"no answer within {CASE_TIMEOUT} s to {_describe(group[0])} (+{len(group) - 1})")
            self._finish("timeout (long-poll Fetch)" if long_poll else "timeout", len(group))
            return False
        except (OSError, EOFError, asyncio.IncompleteReadError, ValueError) as exc:
            self.report.fail(f"connection ended ({type(exc).__name__}: {exc}) although every frame parses: "
                             + "; ".join(_describe(c) for c in group))
            self._finish("mismatch", len(group))
            return False
        for case in group:
            p = case.prediction
            self._finish("answered" if p.answers else "acks=0, silent" if p.silent else "nothing to answer")
        return True

    async def _run_last(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, case: Case) -> None:
        """A case after which the broker must close (ProtocolError) or, once we half-close, finish."""
        p = case.prediction
        self.report.protocol_errors_sent += p.end == "error"
        received: list[int] = []
        wait = LONG_POLL_WAIT if p.long_poll else CASE_TIMEOUT
        try:
            await _write(writer, case)
            if p.end == "partial":
                writer.write_eof()
            while True:  # bounded by the answers the broker sends before closing, each within `wait`
                received.append(await asyncio.wait_for(_read_response(reader), wait))
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                self.report.fail(f"a truncated response before the close: {_describe(case)}")
        except (ConnectionError, BrokenPipeError):
            pass  # the broker closed with our bytes unread: a reset, as good as a close
        except TimeoutError:
            if not p.long_poll:
                self.report.fail(f"connection neither closed nor answered within {wait} s: {_describe(case)}")
            self._finish("timeout (long-poll Fetch)" if p.long_poll else "timeout")
            return
        except ValueError as exc:
            self.report.fail(f"bad response ({exc}): {_describe(case)}")
        # After a ProtocolError in-flight requests may be cancelled: a prefix of the answers.
        expected = list(p.answers) if p.end == "partial" else list(p.answers[:len(received)])
        if received != expected:
            self.report.fail(f"answered {received}, expected {list(p.answers)} then the close "
                             f"({p.end}): {_describe(case)}")
            self._finish("mismatch")
            return
        self._finish("connection closed (protocol error)" if p.end == "error" else "connection closed (half-close)")


# --- the canary: a well-behaved client that must keep being served ------------------------

class Canary:
    def __init__(self, host: str, port: int, report: Report) -> None:
        self.host, self.port, self.report = host, port, report
        self.correlation_id = CANARY_CORRELATION_BASE
        self.next_offset = 0

    async def _call(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    api: ApiKey, version: int, body: bytes) -> memoryview:
        self.correlation_id += 1
        writer.write(frame(api, version, self.correlation_id, body))
        await writer.drain()
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        data = await reader.readexactly(size)
        got = struct.unpack_from(">i", data)[0]
        if got != self.correlation_id:
            raise AssertionError(f"canary {api.name}: correlation id {got}, expected {self.correlation_id}")
        return memoryview(data)[4:]

    async def round(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Metadata names the broker as leader; a record produced is fetched back intact."""
        meta = md.decode_metadata_response(await self._call(
            reader, writer, ApiKey.METADATA, 8, request_body(ApiKey.METADATA, 8, CANARY_TOPIC)), 8)
        topic = next(t for t in meta.topics if t.name == CANARY_TOPIC)
        assert topic.error_code == 0 and [p.leader_id for p in topic.partitions] == [BROKER_ID], topic
        value = f"canary-{self.next_offset}".encode()
        answer = produce.decode_produce_response(await self._call(
            reader, writer, ApiKey.PRODUCE, 8, request_body(ApiKey.PRODUCE, 8, CANARY_TOPIC, value=value)), 8)
        part = answer.responses[0].partitions[0]
        assert (part.error_code, part.base_offset) == (0, self.next_offset), part
        fetched = fetch.decode_fetch_response(await self._call(
            reader, writer, ApiKey.FETCH, 11,
            request_body(ApiKey.FETCH, 11, CANARY_TOPIC, fetch_offset=self.next_offset)), 11)
        fp = fetched.responses[0].partitions[0]
        assert fp.error_code == 0 and fp.records is not None, fp
        buf = bytes(fp.records)  # type: ignore[arg-type]
        pos, header = read_batches(buf)[0]
        records = decode_records(buf, pos, header)
        assert [(r.offset, r.value) for r in records] == [(self.next_offset, value)], records
        self.next_offset += 1

    async def run(self, fuzzer: Fuzzer, every: int, stop: asyncio.Event) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            mark = 0
            while True:  # bounded: ends when the fuzz does (stop), one round per `every` cases
                final = stop.is_set()
                if final or fuzzer.done >= mark:
                    started = time.monotonic()
                    try:
                        await asyncio.wait_for(self.round(reader, writer), CANARY_TIMEOUT)
                    except Exception as exc:  # noqa: BLE001 - every way of failing is reported
                        self.report.fail(f"canary round {self.report.canary_rounds + 1} after {fuzzer.done} "
                                         f"cases: {type(exc).__name__}: {exc}")
                        return
                    self.report.canary_rounds += 1
                    self.report.canary_max_s = max(self.report.canary_max_s, time.monotonic() - started)
                    mark = fuzzer.done + every
                if final:
                    return
                fuzzer.progress.clear()
                try:
                    await asyncio.wait_for(fuzzer.progress.wait(), 0.05)  # or stop: checked each pass
                except TimeoutError:
                    pass
        finally:
            writer.close()


async def fuzz(host: str, port: int, *, cases: int, seed: int, connections: int, canary_every: int,
               report: Report) -> None:
    fuzzer = Fuzzer(host, port, cases, seed, report)
    canary = Canary(host, port, report)
    stop = asyncio.Event()
    canary_task = asyncio.create_task(canary.run(fuzzer, canary_every, stop))
    started = time.monotonic()
    results = await asyncio.gather(*(fuzzer.worker(i) for i in range(connections)), return_exceptions=True)
    report.elapsed_s = time.monotonic() - started
    for result in results:
        if isinstance(result, BaseException):
            report.fail(f"a fuzz connection failed: {type(result).__name__}: {result}")
    stop.set()
    await canary_task


# --- the cluster around it --------------------------------------------------------------------

def _create_topic(cluster: LocalCluster, name: str) -> None:
    """Through the admin API; then wait until the broker answers Metadata as its leader."""
    import json
    import urllib.request
    request = urllib.request.Request(f"{cluster.admin_url}/v1/topics", method="POST",
                                     data=json.dumps({"name": name, "partitions": 1,
                                                      "replication_factor": 1}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=CLIENT_TIMEOUT) as answer:
        if answer.status != 201:
            raise RuntimeError(f"creating {name}: HTTP {answer.status}")
    host, port = _kafka_address(cluster)

    async def led() -> bool:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(frame(ApiKey.METADATA, 8, 1, request_body(ApiKey.METADATA, 8, name)))
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            meta = md.decode_metadata_response(memoryview(await reader.readexactly(size))[4:], 8)
        except asyncio.IncompleteReadError:
            return False  # closed unanswered: the broker serves clients only once its start-up is done
        finally:
            writer.close()
        topic = next(t for t in meta.topics if t.name == name)
        return topic.error_code == 0 and [p.leader_id for p in topic.partitions] == [BROKER_ID]
    deadline = time.monotonic() + CLIENT_TIMEOUT
    while not asyncio.run(led()):  # bounded by the deadline
        if time.monotonic() > deadline:
            raise RuntimeError(f"broker {BROKER_ID} does not lead {name} after {CLIENT_TIMEOUT} s")
        time.sleep(0.1)


def _start_coordinators(host: str, port: int) -> None:
    """Create `__consumer_offsets` and `__transaction_state` as clients do, by asking for a
    coordinator until the broker names itself, so the transaction frames reach the
    coordinators' code rather than NOT_COORDINATOR."""
    version = 3  # FindCoordinator's last single-key version

    async def found(key_type: int, key: str) -> bool:
        m = messages.request_module(ApiKey.FIND_COORDINATOR, version)
        body = messages.encode(m.FindCoordinatorRequest(key=key, key_type=key_type))
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(frame(ApiKey.FIND_COORDINATOR, version, 1, body))
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            data = await reader.readexactly(size)
            # v3 is flexible: the response header carries a tagged-field count after the id
            answer = messages.decode_response(ApiKey.FIND_COORDINATOR, version, memoryview(data)[5:])
            return bool(answer.error_code == 0 and answer.node_id == BROKER_ID)
        finally:
            writer.close()
    for key_type, key in ((KEY_TYPE_GROUP, FUZZ_TXN_GROUP), (KEY_TYPE_TRANSACTION, FUZZ_TRANSACTIONAL_ID)):
        deadline = time.monotonic() + CLIENT_TIMEOUT
        while not asyncio.run(found(key_type, key)):  # bounded by the deadline
            if time.monotonic() > deadline:
                raise RuntimeError(f"no coordinator for {key!r} (key type {key_type}) after {CLIENT_TIMEOUT} s")
            time.sleep(0.1)


def _kafka_address(cluster: LocalCluster) -> tuple[str, int]:
    assert cluster.bootstrap_servers is not None
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    return host, int(port)


def produce_consume(bootstrap: str, topic: str, count: int = 200) -> list[str]:
    """Real data through confluent-kafka: produce `count` records, read every one back."""
    import confluent_kafka
    problems: list[str] = []
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": "5"})
    delivered: list[Any] = []
    sent = [(f"key-{i}".encode(), f"value-{i}".encode() * (1 + i % 5)) for i in range(count)]
    for key, value in sent:
        producer.produce(topic, value=value, key=key, partition=0,
                         on_delivery=lambda err, msg: delivered.append(err or msg.offset()))
        producer.poll(0)
    if producer.flush(CLIENT_TIMEOUT) != 0 or delivered != list(range(count)):
        problems.append(f"produce to {topic}: delivered {delivered[:5]}... ({len(delivered)} of {count})")
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                                         "enable.auto.commit": "false", "fetch.wait.max.ms": "100"})
    got: list[tuple[bytes | None, bytes | None]] = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + CLIENT_TIMEOUT
        while len(got) < count and time.monotonic() < deadline:  # bounded by the deadline
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                problems.append(f"consume {topic}: {msg.error()}")
                break
            got.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    if got != sent:
        problems.append(f"consume {topic}: read {len(got)} records, {'not ' if got != sent[:len(got)] else ''}"
                        f"a prefix of the {count} produced")
    return problems


def run(root: Path, *, cases: int, seed: int, connections: int = 16, canary_every: int = 1000) -> Report:
    """Start a cluster under `root`, fuzz its broker, check it, stop it (always)."""
    report = Report(seed)
    raft_port, admin_port, kafka_port, metrics_port = free_ports(HOSTS, 4)
    with LocalCluster.start(root, controllers=3, raft_port=raft_port, admin_port=admin_port, brokers=1,
                            kafka_port=kafka_port, metrics_port=metrics_port, ready_timeout=READY_TIMEOUT,
                            extra_properties=EXTRA_PROPERTIES) as cluster:
        broker = cluster.brokers[0]
        try:
            for topic in (FUZZ_TOPIC, CANARY_TOPIC, CHECK_TOPIC):
                _create_topic(cluster, topic)
            host, port = _kafka_address(cluster)
            _start_coordinators(host, port)
            asyncio.run(fuzz(host, port, cases=cases, seed=seed, connections=connections,
                             canary_every=canary_every, report=report))
            if not broker.running():
                report.fail(f"the broker died (exit status {broker.exit_status}):\n{broker.log_tail()}")
            else:
                assert cluster.bootstrap_servers is not None
                for problem in produce_consume(cluster.bootstrap_servers, CHECK_TOPIC):
                    report.fail(f"after the fuzz: {problem}")
        finally:
            stopped = {r.node.node_id: r for r in cluster.stop()}
        log = broker.spec.log_path.read_text(errors="replace")
        # a connection closed before the broker's start-up was done (the wait for the topic's leader
        # retries it) is no fuzz case
        report.closing_lines = log.count("Closing connection from") - log.count("the broker is still starting")
        if (stopped[BROKER_ID].outcome, stopped[BROKER_ID].exit_status) != ("stopped", 0):
            report.fail(f"broker stop: {stopped[BROKER_ID].describe()}")
        if report.closing_lines != report.protocol_errors_sent:
            report.fail(f"{report.protocol_errors_sent} cases the codecs reject, but {report.closing_lines} "
                        f"'Closing connection from' lines in the broker log")
        for bad in ("Traceback", "unexpected error", "Unexpected error"):
            if bad in log:
                at = log.index(bad)
                report.fail(f"{bad!r} in the broker log:\n{log[max(0, at - 1500):at + 2500]}")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--canary-every", type=int, default=1000)
    parser.add_argument("--data-dir", type=Path, default=None, help="kept afterwards (default: a temporary one)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "big")
    print(f"fuzzing the broker with {args.cases} cases, seed {seed}", flush=True)
    with tempfile.TemporaryDirectory(prefix="tidelog-fuzz-") as tmp:
        root = args.data_dir if args.data_dir is not None else Path(tmp) / "cluster"
        report = run(root, cases=args.cases, seed=seed, connections=args.connections,
                     canary_every=args.canary_every)
    print(report.summary())
    print("FAILED" if report.failures else "OK")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
