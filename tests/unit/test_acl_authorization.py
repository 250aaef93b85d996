"""broker/handlers/authorization.py through the request handler: requests checked against the
ACLs of the broker's image, per resource where Kafka is (bytes in, bytes out, no sockets)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from broker.request_handler import RequestHandler
from common.config import parse_config
from common.errors import ErrorCode
from common.log_config import LogConfig
from common.protocol import acls as acl_wire
from common.protocol import metadata as md
from common.protocol.api_keys import ApiKey
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.local_changes import changes_for_broker
from metadata.records import AccessControlEntry, Partition, Topic
from security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from tests.log_helpers import NOW, batch
from tests.unit.test_request_handler import (
    ADVERTISED,
    IMAGE,
    ME,
    FakeAdmin,
    FakeControllerClient,
    call,
    do_fetch,
    do_produce,
    fetch_request,
    kio_call,
    partitions,
    replay,
)

Op, Res, Pat, Perm = AclOperation, ResourceType, PatternType, AclPermissionType
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED


def acl(i: int, rtype: ResourceType, name: str, op: AclOperation, perm: AclPermissionType = Perm.ALLOW,
        pattern: PatternType = Pat.LITERAL, who: str = "User:ANONYMOUS") -> AccessControlEntry:
    return AccessControlEntry(f"acl-{i}", int(rtype), name, int(pattern), who, "*", int(op), int(perm))


# orders: WRITE (and so DESCRIBE); audit-*: READ by prefix; audit-secret: READ denied; the group "g" READ
SECURED = replay(
    IMAGE,
    Topic("audit-log", "AUDITLOG"), Partition("AUDITLOG", 0, (ME,), (ME,), leader=ME),
    Topic("audit-secret", "SECRET"), Partition("SECRET", 0, (ME,), (ME,), leader=ME),
    acl(1, Res.TOPIC, "orders", Op.WRITE),
    acl(2, Res.TOPIC, "audit-", Op.READ, pattern=Pat.PREFIXED),
    acl(3, Res.TOPIC, "audit-secret", Op.READ, Perm.DENY),
    acl(4, Res.GROUP, "g", Op.READ),
)


def make(tmp_path, image: MetadataImage, **config: str) -> tuple[RequestHandler, LogManager]:
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    replicas = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
    replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, image, ME), image)
    broker_config = parse_config({"node.id": str(ME), "process.roles": "broker", **config})
    handler = RequestHandler(ME, replicas, lambda: image, ADVERTISED, FakeControllerClient(),  # type: ignore[arg-type]
                             auto_create_topics=True, cluster_id="test-cluster", topic_admin=FakeAdmin(),
                             broker_config=broker_config)
    return handler, log_manager


@pytest.fixture
def secured(tmp_path):
    handler, log_manager = make(tmp_path, SECURED, **{"authorizer.class.name": "standard"})
    yield handler
    log_manager.shutdown()


async def test_produce_is_refused_per_topic(secured) -> None:
    answer = partitions(await do_produce(secured, 1, ("orders", 0, batch(1, tag="a")), ("audit-log", 0, batch(1, tag="b"))))
    assert answer[("orders", 0)].error_code == ErrorCode.NONE
    assert answer[("audit-log", 0)].error_code == TOPIC_DENIED


async def test_produce_acks_0_to_a_denied_topic_answers_nothing(secured) -> None:
    assert await do_produce(secured, 0, ("audit-log", 0, batch(1, tag="b"))) is None


async def test_fetch_is_refused_per_topic_deny_wins(secured) -> None:
    answer = partitions(await do_fetch(secured, fetch_request(("audit-log", 0, 0), ("audit-secret", 0, 0),
                                                               ("orders", 0, 0))))
    assert answer[("audit-log", 0)].error_code == ErrorCode.NONE  # PREFIXED READ
    assert answer[("audit-secret", 0)].error_code == TOPIC_DENIED  # DENY over the prefixed ALLOW
    assert answer[("orders", 0)].error_code == TOPIC_DENIED  # WRITE is not READ


async def test_metadata_hides_or_refuses_topics(secured) -> None:
    def request(topics, **kw):
        return md.MetadataRequest(topics, **kw)

    everything = await call(secured, ApiKey.METADATA, 9, request(None), md.encode_metadata_request,
                            md.decode_metadata_response)
    # DESCRIBE is implied by WRITE and by the prefixed READ; a DENY of READ does not deny DESCRIBE
    assert sorted(t.name for t in everything.topics) == ["audit-log", "audit-secret", "orders"]
    named = await call(secured, ApiKey.METADATA, 9, request(("dark", "orders", "new-one"),
                                                            include_topic_authorized_operations=True),
                       md.encode_metadata_request, md.decode_metadata_response)
    by_name = {t.name: t for t in named.topics}
    assert by_name["dark"].error_code == TOPIC_DENIED and by_name["new-one"].error_code == TOPIC_DENIED
    assert by_name["orders"].error_code == ErrorCode.NONE
    assert by_name["orders"].topic_authorized_operations == acl_wire.operations_bitfield({Op.WRITE, Op.DESCRIBE})


async def test_group_acl(secured) -> None:
    ok = await kio_call(secured, ApiKey.FIND_COORDINATOR, 3, key="g", key_type=0)
    assert ok.error_code != ErrorCode.GROUP_AUTHORIZATION_FAILED
    refused = await kio_call(secured, ApiKey.FIND_COORDINATOR, 3, key="other", key_type=0)
    assert refused.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    heartbeat = await kio_call(secured, ApiKey.HEARTBEAT, 4, group_id="other", generation_id=1, member_id="m",
                               group_instance_id=None)
    assert heartbeat.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED


def test_every_api_checked_whole_answers_a_top_level_error_in_every_version() -> None:
    """No refusal closes the connection: an API without a gate of its own has a top-level error
    code in every version the broker serves (the others answer per item, authorization_items)."""
    from broker.handlers.acl_verdicts import top_level_refusal
    from broker.handlers.authorization import _GATES
    from broker.request_handler import IMPLEMENTED_VERSIONS
    whole = [key for key, check in _GATES.items() if check.__qualname__.startswith("whole")]
    assert ApiKey.END_TXN in whole and ApiKey.DESCRIBE_LOG_DIRS not in whole
    missing = [(key.name, v) for key in whole for v in range(IMPLEMENTED_VERSIONS[key][0], IMPLEMENTED_VERSIONS[key][1] + 1)
               if top_level_refusal(key, v, int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)) is None]
    assert missing == []


async def test_log_dir_and_scram_apis_answer_cluster_authorization_failed_per_item(secured) -> None:
    from common.protocol import messages
    old = await kio_call(secured, ApiKey.DESCRIBE_LOG_DIRS, 1, topics=None)  # no top-level error: no results
    assert old.results == ()
    answer = await kio_call(secured, ApiKey.DESCRIBE_LOG_DIRS, 4, topics=None)
    assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and answer.results == ()
    m = messages.request_module(ApiKey.ALTER_REPLICA_LOG_DIRS, 2)
    answer = await kio_call(secured, ApiKey.ALTER_REPLICA_LOG_DIRS, 2, dirs=(
        m.AlterReplicaLogDir(path="/d1", topics=(m.AlterReplicaLogDirTopic(name="orders", partitions=(0, 1)),)),))
    assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in answer.results] == [
        ("orders", [(0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED), (1, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)])]
    m = messages.request_module(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0)
    answer = await kio_call(secured, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, upsertions=(),
                            deletions=(m.ScramCredentialDeletion(name="alice", mechanism=2),))
    assert [(r.user, r.error_code) for r in answer.results] == [("alice", ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]


async def test_write_txn_markers_needs_cluster_action(secured) -> None:
    from common.protocol import messages
    m = messages.request_module(ApiKey.WRITE_TXN_MARKERS, 1)
    answer = await kio_call(secured, ApiKey.WRITE_TXN_MARKERS, 1, markers=(m.WritableTxnMarker(
        producer_id=7, producer_epoch=0, transaction_result=True, coordinator_epoch=0,
        topics=(m.WritableTxnMarkerTopic(name="orders", partition_indexes=(0,)),)),))
    assert [(r.producer_id, [(t.name, [p.error_code for p in t.partitions]) for t in r.topics])
            for r in answer.markers] == [(7, [("orders", [ErrorCode.CLUSTER_AUTHORIZATION_FAILED])])]


async def test_offset_for_leader_epoch_is_checked_per_topic(secured) -> None:
    """KIP-320: a consumer needs DESCRIBE on the topic (WRITE on orders implies it), a follower
    CLUSTER_ACTION; the refused topic answers TOPIC_AUTHORIZATION_FAILED, the other is served."""
    from common.protocol import offset_for_leader_epoch as ofle
    request = ofle.request(4, [("orders", 0, 0, -1), ("dark", 0, 0, -1)], replica_id=-1)
    answer = await call(secured, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, request, ofle.encode_request,
                        ofle.decode_response)
    codes = {t.topic: [p.error_code for p in t.partitions] for t in answer.topics}
    assert codes["dark"] == [TOPIC_DENIED] and codes["orders"] != [TOPIC_DENIED]


async def test_add_partitions_to_txn_answers_per_partition(tmp_path) -> None:
    from common.protocol import messages
    image = replay(SECURED, acl(9, Res.TRANSACTIONAL_ID, "tx", Op.WRITE))
    handler, log_manager = make(tmp_path, image, **{"authorizer.class.name": "standard"})
    m = messages.request_module(ApiKey.ADD_PARTITIONS_TO_TXN, 3)
    topics = (m.AddPartitionsToTxnTopic(name="orders", partitions=(0, 1)),
              m.AddPartitionsToTxnTopic(name="audit-log", partitions=(0,)))

    def codes(answer):
        return {t.name: [int(p.partition_error_code) for p in t.results_by_partition]
                for t in answer.results_by_topic_v3_and_below}
    try:
        answer = await kio_call(handler, ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id="other",
                                v3_and_below_producer_id=1, v3_and_below_producer_epoch=0, v3_and_below_topics=topics)
        txn = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        assert codes(answer) == {"orders": [txn, txn], "audit-log": [txn]}
        answer = await kio_call(handler, ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id="tx",
                                v3_and_below_producer_id=1, v3_and_below_producer_epoch=0, v3_and_below_topics=topics)
        skipped = int(ErrorCode.OPERATION_NOT_ATTEMPTED)  # READ on audit-* is not WRITE
        assert codes(answer) == {"orders": [skipped, skipped], "audit-log": [int(TOPIC_DENIED)]}
        v5 = messages.request_module(ApiKey.ADD_PARTITIONS_TO_TXN, 5)
        answer = await kio_call(handler, ApiKey.ADD_PARTITIONS_TO_TXN, 5, transactions=(v5.AddPartitionsToTxnTransaction(
            transactional_id="tx", producer_id=1, producer_epoch=0, verify_only=True,
            topics=(v5.AddPartitionsToTxnTopic(name="orders", partitions=(0,)),)),))
        assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED  # a broker's, verifying (KIP-890)
        answer = await kio_call(handler, ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=("b", "a"))
        assert [(t.transactional_id, t.error_code) for t in answer.transaction_states] == [
            ("b", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), ("a", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)]
        answer = await kio_call(handler, ApiKey.UPDATE_RAFT_VOTER, 0, cluster_id=None, current_leader_epoch=-1,
                                voter_id=1, voter_directory_id=__import__("uuid").UUID(int=1), listeners=(),
                                k_raft_version_feature=messages.request_module(ApiKey.UPDATE_RAFT_VOTER, 0)
                                .KRaftVersionFeature(min_supported_version=0, max_supported_version=1))
        assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        em = messages.request_module(ApiKey.ELECT_LEADERS, 0)
        answer = await kio_call(handler, ApiKey.ELECT_LEADERS, 0, timeout=timedelta(seconds=5),
                                topic_partitions=(em.TopicPartitions(topic="orders", partitions=(0,)),))
        assert [(r.topic, [p.error_code for p in r.partition_result]) for r in answer.replica_election_results] == [
            ("orders", [ErrorCode.CLUSTER_AUTHORIZATION_FAILED])]  # v0: no top-level error code
    finally:
        log_manager.shutdown()


async def test_describe_acls_from_the_image(secured) -> None:
    request = acl_wire.describe_request(2, (int(Res.ANY), None, None, None, int(Op.ANY), int(Perm.ANY),
                                            int(Pat.ANY)))
    answer = await call(secured, ApiKey.DESCRIBE_ACLS, 2, request, acl_wire.encode_request,
                        acl_wire.response_decoder(ApiKey.DESCRIBE_ACLS))
    assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED  # no DESCRIBE on the cluster


async def test_super_user_bypasses_and_describes_acls(tmp_path) -> None:
    handler, log_manager = make(tmp_path, SECURED, **{"authorizer.class.name": "standard",
                                                      "super.users": "User:ANONYMOUS"})
    try:
        answer = partitions(await do_produce(handler, 1, ("audit-secret", 0, batch(1, tag="a"))))
        assert answer[("audit-secret", 0)].error_code == ErrorCode.NONE
        request = acl_wire.describe_request(2, (int(Res.TOPIC), None, None, None, int(Op.ANY), int(Perm.ANY),
                                                int(Pat.ANY)))
        described = await call(handler, ApiKey.DESCRIBE_ACLS, 2, request, acl_wire.encode_request,
                               acl_wire.response_decoder(ApiKey.DESCRIBE_ACLS))
        assert described.error_code == ErrorCode.NONE
        assert {(r.resource_name, r.pattern_type) for r in described.resources} == {
            ("orders", Pat.LITERAL), ("audit-", Pat.PREFIXED), ("audit-secret", Pat.LITERAL)}
    finally:
        log_manager.shutdown()


async def test_without_an_authorizer_nothing_is_checked(tmp_path) -> None:
    handler, log_manager = make(tmp_path, SECURED)
    try:
        assert handler.context.authorizer is None
        answer = partitions(await do_produce(handler, 1, ("audit-secret", 0, batch(1, tag="a"))))
        assert answer[("audit-secret", 0)].error_code == ErrorCode.NONE
    finally:
        log_manager.shutdown()


async def test_followers_need_cluster_action(secured) -> None:
    from common.protocol import fetch
    from common.protocol import offset_for_leader_epoch as ofle

    follower_fetch = fetch.FetchRequest(2, 0, 0, 1 << 20, fetch.READ_UNCOMMITTED, (
        fetch.FetchTopic("audit-log", (fetch.FetchPartition(0, 0, 1 << 20),)),), 0, 0)
    answer = partitions(await do_fetch(secured, follower_fetch))
    assert answer[("audit-log", 0)].error_code == TOPIC_DENIED  # READ is not CLUSTER_ACTION
    # without CLUSTER_ACTION a follower is a client: DESCRIBE per topic, as Kafka checks (KIP-320)
    request = ofle.request(3, [("dark", 0, 0, 0)], replica_id=2)
    answer = await call(secured, ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, request, ofle.encode_request, ofle.decode_response)
    assert [[p.error_code for p in t.partitions] for t in answer.topics] == [[TOPIC_DENIED]]


async def test_configs_are_checked_per_resource(tmp_path) -> None:
    from common.protocol import describe_configs as dc
    from common.protocol import messages

    image = replay(SECURED, acl(5, Res.TOPIC, "audit-log", Op.ALTER_CONFIGS))
    handler, log_manager = make(tmp_path, image, **{"authorizer.class.name": "standard"})
    try:
        async def describe(resource_type: int, name: str) -> int:
            request = dc.request(4, (resource_type, name, None))
            answer = await call(handler, ApiKey.DESCRIBE_CONFIGS, 4, request, dc.encode_describe_configs_request,
                                dc.decode_describe_configs_response)
            [result] = answer.results
            return int(result.error_code)

        assert await describe(2, "audit-log") == ErrorCode.NONE  # DESCRIBE_CONFIGS implied by ALTER_CONFIGS
        assert await describe(2, "orders") == TOPIC_DENIED
        assert await describe(4, str(ME)) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        m = messages.request_module(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1)
        answer = await kio_call(handler, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=True, resources=(
            m.AlterConfigsResource(resource_type=2, resource_name="orders", configs=(
                m.AlterableConfig(name="retention.ms", config_operation=0, value="1"),)),))
        assert [(r.resource_name, r.error_code) for r in answer.responses] == [("orders", TOPIC_DENIED)]
    finally:
        log_manager.shutdown()


async def test_create_topics_needs_create_on_the_cluster_or_the_topic(tmp_path) -> None:
    from common.protocol import messages

    image = replay(SECURED, acl(6, Res.TOPIC, "new-", Op.CREATE, pattern=Pat.PREFIXED))
    handler, log_manager = make(tmp_path, image, **{"authorizer.class.name": "standard"})
    try:
        m = messages.request_module(ApiKey.CREATE_TOPICS, 7)
        topics = tuple(m.CreatableTopic(name=n, num_partitions=1, replication_factor=1, assignments=(), configs=())
                       for n in ("new-a", "other"))
        answer = await kio_call(handler, ApiKey.CREATE_TOPICS, 7, topics=topics, timeout=timedelta(seconds=5),
                                validate_only=True)
        assert {t.name: t.error_code for t in answer.topics} == {"new-a": ErrorCode.NONE, "other": TOPIC_DENIED}
        assert [c[1] for c in handler.context.topic_admin.calls] == ["new-a"]  # the refused one never left
    finally:
        log_manager.shutdown()


async def test_authorized_operations_of_the_cluster_and_groups(tmp_path) -> None:
    image = replay(SECURED, acl(7, Res.CLUSTER, "kafka-cluster", Op.DESCRIBE),
                   acl(8, Res.CLUSTER, "kafka-cluster", Op.ALTER_CONFIGS))
    handler, log_manager = make(tmp_path, image, **{"authorizer.class.name": "standard"})
    try:
        cluster = await kio_call(handler, ApiKey.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=True,
                                 endpoint_type=1)
        assert cluster.error_code == ErrorCode.NONE
        assert cluster.cluster_authorized_operations == acl_wire.operations_bitfield(
            {Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS})
        groups = await kio_call(handler, ApiKey.DESCRIBE_GROUPS, 5, groups=("g", "other"),
                                include_authorized_operations=True)
        by_id = {g.group_id: g for g in groups.groups}
        assert by_id["other"].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert by_id["g"].error_code != ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert by_id["g"].authorized_operations == acl_wire.operations_bitfield({Op.READ, Op.DESCRIBE})
    finally:
        log_manager.shutdown()
    refused, log_manager = make(tmp_path / "2", SECURED, **{"authorizer.class.name": "standard"})
    try:
        answer = await kio_call(refused, ApiKey.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=True,
                                endpoint_type=1)
        assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    finally:
        log_manager.shutdown()


async def test_a_whole_refusal_carries_the_top_level_error_where_the_api_has_one(secured) -> None:
    answer = await kio_call(secured, ApiKey.END_TXN, 3, transactional_id="t1", producer_id=1, producer_epoch=0,
                            committed=True)
    assert answer.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    answer = await kio_call(secured, ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, timeout=timedelta(seconds=5),
                            topics=None)
    assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and answer.topics == ()


async def test_per_item_admin_apis(secured) -> None:
    from common.protocol import messages

    m = messages.request_module(ApiKey.CREATE_PARTITIONS, 3)
    answer = await kio_call(secured, ApiKey.CREATE_PARTITIONS, 3, timeout=timedelta(seconds=5), validate_only=True,
                            topics=(m.CreatePartitionsTopic(name="orders", count=4, assignments=None),))
    assert [(r.name, r.error_code) for r in answer.results] == [("orders", TOPIC_DENIED)]  # WRITE is not ALTER
    answer = await kio_call(secured, ApiKey.DELETE_GROUPS, 2, groups_names=("g", "other"))
    # READ on "g" does not imply DELETE: both refused, the coordinator never asked
    assert {r.group_id: int(r.error_code) for r in answer.results} == {
        "g": ErrorCode.GROUP_AUTHORIZATION_FAILED, "other": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    every = await kio_call(secured, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, topics=(), response_partition_limit=100,
                           cursor=None)
    assert sorted(t.name for t in every.topics) == ["audit-log", "audit-secret", "orders"]
    rm = messages.request_module(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0)
    named = await kio_call(secured, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, topics=(rm.TopicRequest(name="dark"),),
                           response_partition_limit=100, cursor=None)
    assert [(t.name, t.error_code) for t in named.topics] == [("dark", TOPIC_DENIED)]


async def test_transactional_offsets_check_id_then_group_then_topics(tmp_path) -> None:
    from common.protocol import messages

    image = replay(SECURED, acl(9, Res.TRANSACTIONAL_ID, "tx", Op.WRITE))
    handler, log_manager = make(tmp_path, image, **{"authorizer.class.name": "standard"})
    try:
        answer = await kio_call(handler, ApiKey.ADD_OFFSETS_TO_TXN, 3, transactional_id="other", producer_id=1,
                                producer_epoch=0, group_id="g")
        assert answer.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        answer = await kio_call(handler, ApiKey.ADD_OFFSETS_TO_TXN, 3, transactional_id="tx", producer_id=1,
                                producer_epoch=0, group_id="no-acl")
        assert answer.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        m = messages.request_module(ApiKey.TXN_OFFSET_COMMIT, 3)
        topics = (m.TxnOffsetCommitRequestTopic(name="orders", partitions=(m.TxnOffsetCommitRequestPartition(
            partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=None),)),)
        answer = await kio_call(handler, ApiKey.TXN_OFFSET_COMMIT, 3, transactional_id="tx", group_id="g",
                                producer_id=1, producer_epoch=0, generation_id=-1, member_id="",
                                group_instance_id=None, topics=topics)
        assert [(t.name, [int(p.error_code) for p in t.partitions]) for t in answer.topics] == [
            ("orders", [TOPIC_DENIED])]  # WRITE on orders is not READ
        answer = await kio_call(handler, ApiKey.OFFSET_DELETE, 0, group_id="g", topics=())
        assert answer.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED  # READ is not DELETE
    finally:
        log_manager.shutdown()


async def test_describe_acls_refuses_an_unknown_filter(tmp_path) -> None:
    handler, log_manager = make(tmp_path, SECURED, **{"authorizer.class.name": "standard",
                                                      "super.users": "User:ANONYMOUS"})
    try:
        request = acl_wire.describe_request(2, (int(Res.TOPIC), None, None, None, int(Op.UNKNOWN), int(Perm.ANY),
                                                int(Pat.ANY)))
        answer = await call(handler, ApiKey.DESCRIBE_ACLS, 2, request, acl_wire.encode_request,
                            acl_wire.response_decoder(ApiKey.DESCRIBE_ACLS))
        assert answer.error_code == ErrorCode.INVALID_REQUEST and answer.error_message == "Unknown entryFilter."
    finally:
        log_manager.shutdown()


async def test_share_group_apis_answer_per_group_and_partition(secured) -> None:
    """KIP-932's APIs without a top-level error code: a refused group in its own row, the brokers'
    share-state RPCs refused per partition without CLUSTER_ACTION."""
    import uuid

    from common.protocol import messages
    answer = await kio_call(secured, ApiKey.SHARE_GROUP_DESCRIBE, 1, group_ids=("other",),
                            include_authorized_operations=False)
    assert [(g.group_id, g.error_code) for g in answer.groups] == [("other", ErrorCode.GROUP_AUTHORIZATION_FAILED)]
    m = messages.request_module(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0)
    answer = await kio_call(secured, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, groups=(
        m.DescribeShareGroupOffsetsRequestGroup(group_id="other", topics=()),))
    assert [(g.group_id, g.error_code) for g in answer.groups] == [("other", ErrorCode.GROUP_AUTHORIZATION_FAILED)]
    for api, data, extra in ((ApiKey.READ_SHARE_GROUP_STATE, "ReadStateData", {"leader_epoch": 0}),
                             (ApiKey.WRITE_SHARE_GROUP_STATE, "WriteStateData",
                              {"state_epoch": 0, "leader_epoch": 0, "start_offset": 0, "state_batches": ()})):
        m = messages.request_module(api, 0)
        topics = (getattr(m, data)(topic_id=uuid.UUID(int=5), partitions=(m.PartitionData(partition=0, **extra),)),)
        answer = await kio_call(secured, api, 0, group_id="g", topics=topics)
        assert [[p.error_code for p in r.partitions] for r in answer.results] == [[ErrorCode.CLUSTER_AUTHORIZATION_FAILED]]
