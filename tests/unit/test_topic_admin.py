"""broker/topic_admin.py and the topic-write handlers (broker/handlers/admin.py): broker defaults for
unset sizes (KIP-464, auto-creation), the admin API's answers, validate_only and manual assignments
forwarded, and read-your-writes: the answer waits until this broker's image holds the write."""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import timedelta

import pytest

from broker.applied_offset import AppliedOffsetWaiters
from broker.handlers.admin import plan_deletions
from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from broker.request_handler import RequestHandler
from broker.topic_admin import AdminReply, TopicDefaults, _reply_of, resolve_topic_sizes
from common.config import BROKER_KEYS, parse_config
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol import metadata as md
from common.protocol.api_keys import ApiKey
from common.log_config import LogConfig
from metadata.records import BrokerRegistrationChange, NoOp
from tests.log_helpers import NOW
from tests.unit.test_request_handler import (
    ADVERTISED,
    IMAGE,
    ME,
    FakeAdmin,
    call,
    replay,
)
from tests.unit.test_topic_admin_codecs import create_request

E = ErrorCode
# DeleteTopics is served on kio's generated messages: requests built and answers read with them
KIO_DELETE = (lambda request, version: [messages.encode(request)],
              lambda body, version: messages.decode_response(ApiKey.DELETE_TOPICS, version, body))


# CreatePartitions too
KIO_PARTITIONS = (KIO_DELETE[0], lambda body, version: messages.decode_response(ApiKey.CREATE_PARTITIONS, version, body))


def grow(version, *topics, timeout_ms=5000, validate_only=False):
    """A CreatePartitionsRequest of (name, new total[, assignments as broker-id lists]) topics."""
    m = messages.request_module(ApiKey.CREATE_PARTITIONS, version)
    return m.CreatePartitionsRequest(topics=tuple(
        m.CreatePartitionsTopic(name=t[0], count=t[1], assignments=None if len(t) < 3 else tuple(
            m.CreatePartitionsAssignment(broker_ids=ids) for ids in t[2])) for t in topics),
        timeout=timedelta(milliseconds=timeout_ms), validate_only=validate_only)


def delete_by_name(version, *names, timeout_ms=5000):
    return messages.request_type(ApiKey.DELETE_TOPICS, version)(
        topic_names=names, timeout=timedelta(milliseconds=timeout_ms))
ONE_LIVE = replay(IMAGE, BrokerRegistrationChange(2, 2, fenced=True))  # only broker 1 alive

SIZES = [  # (image, defaults, asked partitions, asked rf, expected, warns)
    pytest.param(IMAGE, TopicDefaults(1, 1), -1, -1, (1, 1), False, id="kafka-defaults"),
    pytest.param(IMAGE, TopicDefaults(6, 2), -1, -1, (6, 2), False, id="broker-defaults"),
    pytest.param(IMAGE, TopicDefaults(6, 3), -1, -1, (6, 2), True, id="rf-capped-to-live-brokers"),
    pytest.param(ONE_LIVE, TopicDefaults(6, 3), 4, -1, (4, 1), True, id="fenced-brokers-do-not-count"),
    pytest.param(IMAGE, TopicDefaults(6, 3), 4, 3, (4, 3), False, id="explicit-rf-never-capped"),
    pytest.param(IMAGE, TopicDefaults(6, 3), 0, 0, (0, 0), False, id="bad-values-left-to-the-controller"),
]


@pytest.mark.parametrize(("image", "defaults", "partitions", "rf", "expected", "warns"), SIZES)
def test_resolve_topic_sizes(image, defaults, partitions, rf, expected, warns, caplog):
    with caplog.at_level(logging.WARNING, logger="broker.topic_admin"):
        assert resolve_topic_sizes(image, defaults, "t", partitions, rf) == expected
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert bool(warnings) == warns
    if warns:
        assert f"default.replication.factor={defaults.replication_factor}" in warnings[0]


def test_topic_defaults_from_broker_config():
    config = parse_config({"node.id": "1", "process.roles": "broker", "num.partitions": "12",
                           "default.replication.factor": "3"}, keys=BROKER_KEYS)
    assert TopicDefaults.from_config(config) == TopicDefaults(12, 3)


ANSWERS = [  # the admin API's 2xx bodies -> AdminReply
    ({"name": "t", "metadata_offset": 40, "configs": {"retention.ms": "5"},
      "partitions": [{"partition": 0, "replicas": [4, 5]}, {"partition": 1, "replicas": [5, 6]}]},
     AdminReply(0, None, 40, 2, 2, (("retention.ms", "5"),))),
    ({"name": "t", "validate_only": True, "partitions": 3, "replication_factor": 2, "configs": {},
      "assignments": []}, AdminReply(0, None, None, 3, 2, ())),
    ({"name": "t", "validate_only": True, "count": 5, "assignments": []}, AdminReply(0, None, None, 5)),
    ({"name": "t", "deleted": True, "metadata_offset": 41}, AdminReply(0, None, 41)),
    ("not an object", AdminReply(0)),
    ({"metadata_offset": "40"}, AdminReply(0)),
]


@pytest.mark.parametrize(("answer", "expected"), ANSWERS)
def test_admin_api_answers(answer, expected):
    assert _reply_of(answer) == expected


# --- the handlers, with this broker's image following behind the controller ------------------

class Follower:
    """This broker's image, applying the controller's committed changes only when told."""

    def __init__(self):
        self.image = IMAGE
        self.waiters = AppliedOffsetWaiters(lambda: self.image.offset)

    def apply_up_to(self, offset: int) -> None:
        while self.image.offset < offset:
            self.image = replay(self.image, NoOp())
        self.waiters.advanced(self.image.offset)


@pytest.fixture
def broker(tmp_path):
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    replicas = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
    follower, admin_api = Follower(), FakeAdmin()
    config = parse_config({"node.id": "1", "process.roles": "broker", "num.partitions": "4",
                           "default.replication.factor": "3"}, keys=BROKER_KEYS)
    handler = RequestHandler(ME, replicas, lambda: follower.image, ADVERTISED, None,  # type: ignore[arg-type]
                             topic_admin=admin_api, broker_config=config, applied_offsets=follower.waiters)
    yield handler, admin_api, follower
    log_manager.shutdown()


def create_topics(*topics, timeout_ms=5000, validate_only=False):
    """The request, for any version: topics as (name, partitions, rf[, assignments[, configs]])."""
    return lambda version: create_request(version, *topics, timeout_ms=timeout_ms, validate_only=validate_only)


async def send_create(handler, request, version=4):
    return await call(handler, ApiKey.CREATE_TOPICS, version, request(version), messages.encode_request,
                      messages.response_decoder(ApiKey.CREATE_TOPICS))


async def test_create_topics_answers_once_this_broker_applied_it(broker):
    handler, _, follower = broker
    pending = asyncio.create_task(send_create(handler, create_topics(("new", 2, 1))))
    await asyncio.sleep(0.02)
    assert not pending.done()  # committed at IMAGE.offset + 1, not applied here yet
    follower.apply_up_to(IMAGE.offset + 1)
    response = await asyncio.wait_for(pending, 1)
    assert [(t.name, t.error_code) for t in response.topics] == [("new", 0)]


async def test_create_topics_times_out_when_this_broker_lags(broker):
    handler, _, follower = broker
    response = await send_create(handler, create_topics(("new", 2, 1), timeout_ms=30))
    assert response.topics[0].error_code == E.REQUEST_TIMED_OUT
    assert f"committed at metadata offset {IMAGE.offset + 1}" in response.topics[0].error_message
    assert follower.waiters.waiting == 0


async def test_delete_and_create_partitions_wait_too(broker):
    handler, _, follower = broker
    delete = asyncio.create_task(call(handler, ApiKey.DELETE_TOPICS, 3, delete_by_name(3, "orders"), *KIO_DELETE))
    grown = asyncio.create_task(call(handler, ApiKey.CREATE_PARTITIONS, 1, grow(1, ("orders", 4)), *KIO_PARTITIONS))
    await asyncio.sleep(0.02)
    assert not delete.done() and not grown.done()
    follower.apply_up_to(IMAGE.offset + 1)  # the deletion only
    assert (await asyncio.wait_for(delete, 1)).responses[0].error_code == 0
    await asyncio.sleep(0.02)
    assert not grown.done()
    follower.apply_up_to(IMAGE.offset + 2)
    assert (await asyncio.wait_for(grown, 1)).results[0].error_code == 0


async def test_unset_sizes_take_the_broker_defaults_capped(broker, caplog):
    handler, admin_api, follower = broker
    follower.apply_up_to(IMAGE.offset + 10)  # nothing to wait for
    with caplog.at_level(logging.WARNING):
        await send_create(handler, create_topics(("a", -1, -1), ("b", 2, -1),
                                                 ("c", -1, 1)))
    # num.partitions=4, default.replication.factor=3 capped to the 2 live brokers, with a WARNING
    assert admin_api.calls == [("create", "a", 4, 2, {}), ("create", "b", 2, 2, {}), ("create", "c", 4, 1, {})]
    assert sum("default.replication.factor=3 but only 2 broker(s) are alive" in r.getMessage()
               for r in caplog.records) == 2


async def test_auto_creation_uses_the_broker_defaults(broker):
    handler, admin_api, _ = broker
    response = await call(handler, ApiKey.METADATA, 8, md.MetadataRequest(("auto",), True),
                          md.encode_metadata_request, md.decode_metadata_response)
    assert response.topics[0].error_code == E.LEADER_NOT_AVAILABLE
    await asyncio.sleep(0.01)
    assert admin_api.calls == [("create", "auto", 4, 2, {})]
    refused = await call(handler, ApiKey.METADATA, 8, md.MetadataRequest(("other",), False),
                         md.encode_metadata_request, md.decode_metadata_response)
    assert refused.topics[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert len(admin_api.calls) == 1  # allow_auto_topic_creation=false: nothing asked


async def test_validate_only_and_assignments_are_forwarded_and_not_waited_for(broker):
    handler, admin_api, _ = broker
    request = create_topics(("v", 3, 2, (), (("retention.ms", "9"),)),
                            ("m", -1, -1, ((0, (2, 1)),)),
                            validate_only=True)
    response = await asyncio.wait_for(send_create(handler, request), 1)  # no metadata offset: no wait
    assert [(t.name, t.error_code) for t in response.topics] == [("v", 0), ("m", 0)]
    assert admin_api.calls == [("create", "v", 3, 2, {"retention.ms": "9"}, "validate_only"),
                               ("create", "m", None, None, {}, ((0, (2, 1)),), "validate_only")]
    assert not hasattr(response.topics[0], "num_partitions")  # v4's result has no v5 (KIP-525) fields
    partitions = await asyncio.wait_for(call(handler, ApiKey.CREATE_PARTITIONS, 1, grow(
        1, ("orders", 3, [(1, 2)]), validate_only=True), *KIO_PARTITIONS), 1)
    assert partitions.results[0].error_code == 0
    assert admin_api.calls[-1] == ("partitions", "orders", 3, ((1, 2),), "validate_only")


async def test_create_topics_result_carries_sizes_and_configs(broker):
    handler, _, follower = broker
    follower.apply_up_to(IMAGE.offset + 1)
    ctx = handler.context
    from broker.handlers.admin import handle_create_topics
    from broker.handlers.context import ClientInfo
    response = await handle_create_topics(ctx, create_topics((
        "s", 3, 2, (), (("retention.ms", "9"),)))(5), 5, ClientInfo("c", ""))  # v5: KIP-525's fields
    result = response.topics[0]
    assert (result.error_code, result.num_partitions, result.replication_factor) == (0, 3, 2)
    configs = {c.name: (c.value, c.config_source) for c in result.configs}
    assert configs["retention.ms"] == ("9", 1)  # DYNAMIC_TOPIC_CONFIG
    assert configs["segment.bytes"][1] == 5  # DEFAULT_CONFIG


async def test_duplicate_names_are_refused_once_and_not_created(broker):
    handler, admin_api, follower = broker
    follower.apply_up_to(IMAGE.offset + 10)
    response = await send_create(handler, create_topics(("d", 1, 1), ("x", 1, 1),
                                                        ("d", 2, 1)))
    assert [(t.name, t.error_code) for t in response.topics] == [("x", 0), ("d", E.INVALID_REQUEST)]
    assert "multiple entries for the following topics: d" in response.topics[1].error_message
    assert [c[1] for c in admin_api.calls] == ["x"]


async def test_controller_errors_pass_through_without_waiting(broker):
    handler, _, _ = broker
    response = await asyncio.wait_for(send_create(handler, create_topics(("orders", 1, 1))), 1)
    assert (response.topics[0].error_code, response.topics[0].error_message) == (36, "Topic 'orders' already exists.")


async def test_auto_create_topics_disabled_creates_nothing(tmp_path):
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    try:
        admin_api = FakeAdmin()
        handler = RequestHandler(ME, ReplicaManager(ME, log_manager, now_ms=lambda: NOW), lambda: IMAGE, ADVERTISED,
                                 None, auto_create_topics=False, topic_admin=admin_api)  # type: ignore[arg-type]
        for version in (1, 8):  # before v4 a client cannot say; the broker config still decides
            response = await call(handler, ApiKey.METADATA, version, md.MetadataRequest(("wanted",), True),
                                  md.encode_metadata_request, md.decode_metadata_response)
            assert response.topics[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
        await asyncio.sleep(0.01)
        assert admin_api.calls == []
        await handler.close()
    finally:
        log_manager.shutdown()


async def test_create_partitions_refuses_duplicate_topics(broker):
    handler, admin_api, follower = broker
    follower.apply_up_to(IMAGE.offset + 10)
    request = grow(1, ("orders", 4), ("other", 2), ("orders", 5))
    response = await call(handler, ApiKey.CREATE_PARTITIONS, 1, request, *KIO_PARTITIONS)
    assert [(r.name, r.error_code, r.error_message) for r in response.results] == [
        ("orders", E.INVALID_REQUEST, "Duplicate topic in request."), ("other", 0, None),
        ("orders", E.INVALID_REQUEST, "Duplicate topic in request.")]
    assert admin_api.calls == [("partitions", "other", 2)]


# --- Kafka 3.9's versions: CreateTopics v5-v7, DeleteTopics v4-v6, CreatePartitions v2-v3 -------------------

ORDERS_ID = md.wire_topic_id("ORDERS")
DARK_ID = md.wire_topic_id("DARK")
OTHER_ID = uuid.UUID(int=7)
Z = uuid.UUID(int=0)  # Kafka's "no topic id"


def state(name=None, topic_id=Z):
    """A v6 DeleteTopicState as kio reads it: a zero topic id is None."""
    return messages.request_module(ApiKey.DELETE_TOPICS, 6).DeleteTopicState(
        name=name, topic_id=None if topic_id == Z else topic_id)


PLANS = [  # (names (v0-v5), topics (v6+), Kafka's plan: (name, id, error code, message))
    pytest.param(("orders", "fresh"), (), [("orders", ORDERS_ID, 0, None), ("fresh", Z, 0, None)], id="names"),
    pytest.param((), (state("orders"), state(None, DARK_ID)), [("orders", ORDERS_ID, 0, None),
                                                                 ("dark", DARK_ID, 0, None)], id="name-and-id"),
    pytest.param((), (state(None, OTHER_ID),), [(None, OTHER_ID, E.UNKNOWN_TOPIC_ID,
                                                 "This server does not host this topic ID.")], id="unknown-id"),
    pytest.param((), (state(),), [(None, Z, E.INVALID_REQUEST, "Neither topic name nor id were specified.")],
                 id="neither"),
    pytest.param((), (state("orders", ORDERS_ID),), [("orders", ORDERS_ID, E.INVALID_REQUEST,
                                                      "You may not specify both topic name and topic id.")], id="both"),
    pytest.param(("orders", "orders"), (), [("orders", Z, E.INVALID_REQUEST, "Duplicate topic name.")],
                 id="duplicate-name-answered-once"),
    pytest.param((), (state(None, DARK_ID), state(None, DARK_ID)), [(None, DARK_ID, E.INVALID_REQUEST,
                                                                     "Duplicate topic id.")], id="duplicate-id"),
    pytest.param((), (state(None, ORDERS_ID), state("orders")), [
        ("orders", ORDERS_ID, 0, None),
        ("orders", ORDERS_ID, E.INVALID_REQUEST, "The provided topic name maps to an ID that was already supplied.")],
        id="name-of-a-given-id"),
]


@pytest.mark.parametrize(("names", "topics", "expected"), PLANS)
def test_plan_deletions(names, topics, expected):
    plan = plan_deletions(IMAGE, names, topics)
    assert [(d.name, d.topic_id, d.error_code, d.error_message) for d in plan] == expected


async def test_delete_topics_by_id_v6(broker):
    handler, admin_api, follower = broker
    follower.apply_up_to(IMAGE.offset + 10)
    request = messages.request_type(ApiKey.DELETE_TOPICS, 6)(
        timeout=timedelta(seconds=5), topics=(state(None, ORDERS_ID), state(None, OTHER_ID), state("dark")))
    response = await call(handler, ApiKey.DELETE_TOPICS, 6, request, *KIO_DELETE)
    assert [(r.name, r.topic_id, r.error_code, r.error_message) for r in response.responses] == [
        ("orders", ORDERS_ID, 0, None), (None, OTHER_ID, E.UNKNOWN_TOPIC_ID, "This server does not host this topic ID."),
        ("dark", DARK_ID, 0, None)]
    assert admin_api.calls == [("delete", "orders"), ("delete", "dark")]  # the unknown id asked nothing
    v5 = await call(handler, ApiKey.DELETE_TOPICS, 5, delete_by_name(5, "x", "x"), *KIO_DELETE)
    assert [(r.name, r.error_code, r.error_message) for r in v5.responses] == [
        ("x", E.INVALID_REQUEST, "Duplicate topic name.")]


@pytest.mark.parametrize("version", [5, 6, 7])
async def test_create_topics_flexible_versions_answer_sizes_configs_and_id(broker, version):
    handler, admin_api, follower = broker
    follower.apply_up_to(IMAGE.offset + 10)
    created_id = "AAECAwQFBgcICQoLDA0ODw"
    admin_api.topic_ids["s"] = created_id
    response = await send_create(handler, create_topics((
        "s", 3, 2, (), (("retention.ms", "9"),)), ("orders", 1, 1)),
        version=version)
    created, refused = response.topics
    assert (created.error_code, created.num_partitions, created.replication_factor) == (0, 3, 2)
    assert {c.name: (c.value, c.config_source) for c in created.configs}["retention.ms"] == ("9", 1)
    assert getattr(created, "topic_id", None) == (md.wire_topic_id(created_id) if version >= 7 else None)
    assert created.topic_config_error_code == 0
    assert (refused.error_code, refused.num_partitions, refused.replication_factor, refused.configs,
            getattr(refused, "topic_id", None)) == (36, -1, -1, (), None)  # kio reads a zero id as None
    validated = await send_create(handler, create_topics(("v", 2, 1), validate_only=True),
                                  version=version)
    assert (validated.topics[0].num_partitions, getattr(validated.topics[0], "topic_id", None)) == (2, None)  # none created


@pytest.mark.parametrize("version", [2, 3])
async def test_create_partitions_flexible_versions(broker, version):
    handler, admin_api, follower = broker
    follower.apply_up_to(IMAGE.offset + 10)
    request = grow(version, ("orders", 4, [(1, 2), (2, 1)]))
    response = await call(handler, ApiKey.CREATE_PARTITIONS, version, request, *KIO_PARTITIONS)
    assert [(r.name, r.error_code) for r in response.results] == [("orders", 0)]
    assert admin_api.calls == [("partitions", "orders", 4, ((1, 2), (2, 1)))]


def test_admin_api_answer_carries_the_created_topic_id():
    answer = {"name": "t", "topic_id": "AAECAwQFBgcICQoLDA0ODw", "metadata_offset": 3, "configs": {},
              "partitions": [{"partition": 0, "replicas": [1]}]}
    assert _reply_of(answer).topic_id == "AAECAwQFBgcICQoLDA0ODw"
