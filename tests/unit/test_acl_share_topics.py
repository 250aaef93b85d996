"""broker/handlers/authorization_share.py: the share-group APIs check each topic after the group,
as Kafka's KafkaApis does (a principal with READ on the group but not on a topic gets
TOPIC_AUTHORIZATION_FAILED for that topic), through the real request handler."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.metadata import wire_topic_id
from security.acl import AclOperation, ResourceType
from tests.unit.test_acl_authorization import SECURED, acl, make
from tests.unit.test_request_handler import kio_call, replay

# SECURED: group "g" READ; audit-log READ (prefixed), audit-secret READ denied, orders WRITE only
# (so DESCRIBE too), "dark" no ACL at all (allow.everyone.if.no.acl.found is off)
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
LOG_ID, SECRET_ID = wire_topic_id("AUDITLOG"), wire_topic_id("SECRET")


@pytest.fixture
def secured(tmp_path):
    handler, log_manager = make(tmp_path, SECURED, **{"authorizer.class.name": "standard"})
    yield handler
    log_manager.shutdown()


async def heartbeat(handler: Any, group: str, topics: tuple[str, ...]) -> Any:
    return await kio_call(handler, ApiKey.SHARE_GROUP_HEARTBEAT, 1, group_id=group, member_id=str(uuid.uuid4()),
                          member_epoch=0, rack_id=None, subscribed_topic_names=topics)


async def test_heartbeat_subscribing_a_topic_without_read_is_refused_whole(secured) -> None:
    answer = await heartbeat(secured, "g", ("audit-log", "orders", "audit-secret"))
    assert answer.error_code == TOPIC_DENIED and answer.assignment is None
    assert "audit-secret, orders" in answer.error_message
    assert (await heartbeat(secured, "g", ("audit-log",))).error_code not in (TOPIC_DENIED, GROUP_DENIED)
    assert (await heartbeat(secured, "other", ("audit-log",))).error_code == GROUP_DENIED  # the group first


def rows(responses: Any) -> dict[Any, list[tuple[int, int]]]:
    return {t.topic_id: [(p.partition_index, p.error_code) for p in t.partitions] for t in responses}


async def test_share_fetch_refuses_per_topic(secured) -> None:
    m = messages.request_module(ApiKey.SHARE_FETCH, 1)
    batch = m.AcknowledgementBatch(first_offset=0, last_offset=0, acknowledge_types=(1,))
    answer = await kio_call(secured, ApiKey.SHARE_FETCH, 1, group_id="g", member_id=str(uuid.uuid4()),
                            share_session_epoch=0, max_wait=timedelta(0), min_bytes=1, max_bytes=1024,
                            max_records=10, batch_size=10, forgotten_topics_data=(), topics=(
                                m.FetchTopic(topic_id=LOG_ID, partitions=(m.FetchPartition(partition_index=0, acknowledgement_batches=()),)),
                                m.FetchTopic(topic_id=SECRET_ID, partitions=(m.FetchPartition(partition_index=0, acknowledgement_batches=(batch,)),))))
    by_topic = rows(answer.responses)
    assert by_topic[SECRET_ID] == [(0, TOPIC_DENIED)]
    assert TOPIC_DENIED not in dict(by_topic.get(LOG_ID, [])).values()  # the handler's answer, whatever it is
    secret = next(t for t in answer.responses if t.topic_id == SECRET_ID).partitions[0]
    assert secret.acknowledge_error_code == TOPIC_DENIED  # its acknowledgements were not applied either


async def test_share_acknowledge_refuses_per_topic(secured) -> None:
    m = messages.request_module(ApiKey.SHARE_ACKNOWLEDGE, 1)
    batch = m.AcknowledgementBatch(first_offset=0, last_offset=0, acknowledge_types=(1,))
    answer = await kio_call(secured, ApiKey.SHARE_ACKNOWLEDGE, 1, group_id="g", member_id=str(uuid.uuid4()),
                            share_session_epoch=1, topics=(
                                m.AcknowledgeTopic(topic_id=SECRET_ID, partitions=(m.AcknowledgePartition(partition_index=0, acknowledgement_batches=(batch,)),)),))
    assert rows(answer.responses)[SECRET_ID] == [(0, TOPIC_DENIED)]


async def test_alter_and_delete_offsets_need_read_on_each_topic(secured) -> None:
    m = messages.request_module(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0)
    answer = await kio_call(secured, ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, group_id="g", topics=(
        m.AlterShareGroupOffsetsRequestTopic(topic_name="orders", partitions=(
            m.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=0),)),))
    assert answer.error_code == ErrorCode.NONE
    assert [(t.topic_name, [p.error_code for p in t.partitions]) for t in answer.responses] == [
        ("orders", [TOPIC_DENIED])]  # WRITE is not READ
    m = messages.request_module(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0)
    answer = await kio_call(secured, ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, group_id="g", topics=(
        m.DeleteShareGroupOffsetsRequestTopic(topic_name="orders"),))
    # DELETE on the group comes first: "g" has READ only, so the group is refused whole
    assert answer.error_code == GROUP_DENIED


async def test_delete_offsets_needs_read_on_each_topic(tmp_path) -> None:
    handler, log_manager = make(tmp_path, replay(SECURED, acl(90, ResourceType.GROUP, "g", AclOperation.DELETE)),
                                **{"authorizer.class.name": "standard"})
    try:
        m = messages.request_module(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0)
        answer = await kio_call(handler, ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, group_id="g", topics=(
            m.DeleteShareGroupOffsetsRequestTopic(topic_name="orders"),))
        assert [(t.topic_name, t.error_code) for t in answer.responses] == [("orders", TOPIC_DENIED)]
        assert answer.error_code == ErrorCode.NONE  # every topic refused: the handler did not run
    finally:
        log_manager.shutdown()


async def test_describe_offsets_needs_describe_on_each_named_topic(secured) -> None:
    m = messages.request_module(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0)
    answer = await kio_call(secured, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, groups=(
        m.DescribeShareGroupOffsetsRequestGroup(group_id="g", topics=(
            m.DescribeShareGroupOffsetsRequestTopic(topic_name="dark", partitions=(0, 1)),
            m.DescribeShareGroupOffsetsRequestTopic(topic_name="orders", partitions=(0,)))),
        m.DescribeShareGroupOffsetsRequestGroup(group_id="other", topics=())))
    groups = {g.group_id: g for g in answer.groups}
    assert groups["other"].error_code == GROUP_DENIED
    topics = {t.topic_name: [p.error_code for p in t.partitions] for t in groups["g"].topics}
    assert topics["dark"] == [TOPIC_DENIED, TOPIC_DENIED]
    # orders went on to the handler (WRITE implies DESCRIBE), whatever it answers for the group
    assert [name for name, codes in topics.items() if TOPIC_DENIED in codes] == ["dark"]
