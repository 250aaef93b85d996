"""broker/request_handler.py: request bytes in, response bytes out, without sockets."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from broker.request_handler import API_TABLE, IMPLEMENTED_VERSIONS, RequestHandler
from broker.server import Later
from broker.topic_admin import AdminReply
from common.config import parse_config
from common.errors import ErrorCode
from common.protocol import api_versions, fetch, messages, produce
from common.protocol import describe_configs as dc
from common.protocol import list_offsets as lo
from common.protocol import metadata as md
from common.protocol import offset_for_leader_epoch as ofle
from common.protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from common.protocol.frame import (
    RequestHeader,
    encode_request_header,
    parse_request_header,
)
from common.protocol.primitives import ProtocolError
from common.record_batch import set_partition_leader_epoch
from common.log_config import LogConfig
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.local_changes import changes_for_broker
from metadata.records import (
    BeginEpoch,
    BrokerRegistrationChange,
    Config,
    ConfigResourceType,
    Listener,
    Partition,
    RegisterBroker,
    Topic,
)
from tests.log_helpers import NOW, batch

ME = 1
ADVERTISED = ("127.0.0.1", 19092)

VERSIONS_ANSWER = messages.response_decoder(ApiKey.API_VERSIONS)  # ApiVersions, on kio's messages


def replay(image, *records):
    return apply(image, enumerate(records, start=image.offset + 1))


# Brokers 1 and 2 unfenced, 3 registered but fenced.
CLUSTER = replay(EMPTY_IMAGE, BeginEpoch(1),
                 *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", f"127.0.0.{b}", 9092),)) for b in (1, 2, 3)),
                 *(BrokerRegistrationChange(b, b, fenced=False) for b in (1, 2)))
IMAGE = replay(
    CLUSTER,
    Config(ConfigResourceType.TOPIC, "orders", "retention.ms", "1000"),
    Topic("orders", "ORDERS"),
    Partition("ORDERS", 0, (1,), (1,), leader=1),
    Partition("ORDERS", 1, (2, 1), (2, 1), leader=2),
    Topic("dark", "DARK"), Partition("DARK", 0, (3,), (3,), leader=3),
)


class FakeAdmin:
    """The controllers' admin API as the broker sees it: records each call, answers as told."""

    def __init__(self):
        self.calls = []
        self.next_offset = IMAGE.offset + 1  # where the next committed change lands
        self.topic_ids = {}  # name -> the id a creation answers (none: the reply names no id)

    def _committed(self, **fields):
        offset, self.next_offset = self.next_offset, self.next_offset + 1
        return AdminReply(0, None, offset, **fields)

    async def create_topic(self, name, partitions, replication_factor, configs, *, assignments=(),
                           validate_only=False):
        self.calls.append(("create", name, partitions, replication_factor, dict(configs))
                          + ((tuple(assignments),) if assignments else ()) + (("validate_only",) if validate_only else ()))
        if name == "orders":
            return AdminReply(36, f"Topic '{name}' already exists.")
        sizes = {"num_partitions": partitions or len(assignments),
                 "replication_factor": replication_factor or len(assignments[0][1]),
                 "configs": tuple(sorted(configs.items()))}
        if validate_only:
            return AdminReply(0, None, None, **sizes)
        return self._committed(**sizes, topic_id=self.topic_ids.get(name))

    async def delete_topic(self, name):
        self.calls.append(("delete", name))
        return self._committed()

    async def create_partitions(self, name, count, *, assignments=None, validate_only=False):
        self.calls.append(("partitions", name, count) + ((assignments,) if assignments is not None else ())
                          + (("validate_only",) if validate_only else ()))
        return AdminReply(0, None, None, count) if validate_only else self._committed(num_partitions=count)


class FakeControllerClient:
    def __init__(self):
        self.calls = []

    async def call(self, name, body):
        self.calls.append((name, dict(body)))
        return {"error_code": 0, "producer_id_start": 1000, "producer_id_len": 2}


@pytest.fixture
def node(tmp_path):
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    replicas = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
    replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, IMAGE, ME), IMAGE)
    admin_api, controller = FakeAdmin(), FakeControllerClient()
    handler = RequestHandler(ME, replicas, lambda: IMAGE, ADVERTISED, controller,  # type: ignore[arg-type]
                             auto_create_topics=True, cluster_id="test-cluster", topic_admin=admin_api)
    yield handler, admin_api, controller
    log_manager.shutdown()


def flatten(chunks):
    return b"".join(c if isinstance(c, bytes) else c.read_bytes() for c in chunks)


async def call(handler, api, version, request, encode, decode=None):
    frame = encode_request_header(RequestHeader(api, version, 42, "test")) + b"".join(encode(request, version))
    header, body = parse_request_header(frame)
    chunks = await handler.handle(header, body)
    if chunks is None or decode is None:
        return chunks
    return decode(memoryview(flatten(chunks)), version)


async def kio_call(handler: RequestHandler, api: ApiKey, version: int, **fields: Any) -> Any:
    """`api` at `version` on kio's messages: the request built from `fields`, the answer decoded."""
    request = messages.build(messages.request_type(api, version), **fields)
    return await call(handler, api, version, request, messages.encode_request, messages.response_decoder(api))


def produce_request(acks, *parts, timeout_ms=1000):
    topics = {}
    for topic, partition, records in parts:
        topics.setdefault(topic, []).append(produce.PartitionProduceData(partition, records))
    return produce.ProduceRequest(None, acks, timeout_ms, tuple(
        produce.TopicProduceData(t, tuple(ps)) for t, ps in topics.items()))


async def do_produce(handler, acks, *parts, version=8):
    return await call(handler, ApiKey.PRODUCE, version, produce_request(acks, *parts),
                      produce.encode_produce_request, produce.decode_produce_response)


def fetch_request(*parts, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, partition_max_bytes=1 << 20):
    topics = {}
    for topic, partition, offset in parts:
        topics.setdefault(topic, []).append(fetch.FetchPartition(partition, offset, partition_max_bytes))
    return fetch.FetchRequest(-1, max_wait_ms, min_bytes, max_bytes, fetch.READ_UNCOMMITTED, tuple(
        fetch.FetchTopic(t, tuple(ps)) for t, ps in topics.items()), 0, 0)


async def do_fetch(handler, request, version=11):
    return await call(handler, ApiKey.FETCH, version, request, fetch.encode_fetch_request,
                      fetch.decode_fetch_response)


def partitions(response):
    return {(t.name if hasattr(t, "name") else t.topic, p.partition_index): p
            for t in response.responses for p in t.partitions}


def stamped(data, epoch):
    buf = bytearray(data)
    set_partition_leader_epoch(buf, 0, epoch)
    return bytes(buf)


async def test_api_versions_v5_gets_a_v0_body_with_error_35(node):
    handler, _, _ = node
    v0 = await call(handler, ApiKey.API_VERSIONS, 5, None, lambda r, v: [],
                    lambda body, v: VERSIONS_ANSWER(body, 0))
    assert v0.error_code == 35
    v2 = await call(handler, ApiKey.API_VERSIONS, 2, api_versions.request(2), messages.encode_request,
                    VERSIONS_ANSWER)
    advertised = {a.api_key: (a.min_version, a.max_version) for a in v2.api_keys}
    # Produce is announced from v0 so that old librdkafka (kcat) keeps compressing ...
    assert v2.error_code == 0 and advertised[ApiKey.PRODUCE] == (0, 12) and advertised[ApiKey.JOIN_GROUP] == (0, 9)


async def test_api_versions_v3_is_flexible_and_checks_the_client_software(node):
    handler, _, _ = node
    good = ("confluent-kafka-python", "2.6.0-rdkafka-2.6.0")
    v3 = await call(handler, ApiKey.API_VERSIONS, 3, api_versions.request(3, *good), messages.encode_request,
                    VERSIONS_ANSWER)
    v4 = await call(handler, ApiKey.API_VERSIONS, 4, api_versions.request(4, *good), messages.encode_request,
                    VERSIONS_ANSWER)
    ranges = [[(a.api_key, a.min_version, a.max_version) for a in v.api_keys] for v in (v3, v4)]
    assert v3.error_code == 0 and ranges[0] == ranges[1]  # each version's own classes, the same ranges
    assert (18, 0, 4) in [(a.api_key, a.min_version, a.max_version) for a in v3.api_keys]
    for bad in (("", "1.0"), ("name with space", "1"), ("ok", "-1.0")):
        answer = await call(handler, ApiKey.API_VERSIONS, 3, api_versions.request(3, *bad), messages.encode_request,
                            VERSIONS_ANSWER)
        assert (answer.error_code, answer.api_keys) == (42, ())  # INVALID_REQUEST, as Kafka


async def test_api_versions_advertises_exactly_the_dispatch_table(node):
    handler, _, _ = node
    v1 = await call(handler, ApiKey.API_VERSIONS, 1, api_versions.request(1), messages.encode_request,
                    VERSIONS_ANSWER)
    advertised = [(a.api_key, a.min_version, a.max_version) for a in v1.api_keys]
    assert advertised == sorted((int(row.api_key), *row.advertised_versions) for row in API_TABLE)
    assert {row.api_key for row in API_TABLE} == set(IMPLEMENTED_VERSIONS)


def test_every_row_is_a_distinct_api_with_a_handler_and_a_codec():
    assert len({row.api_key for row in API_TABLE}) == len(API_TABLE)
    for row in API_TABLE:
        assert callable(row.handler) and callable(row.codec.decode) and callable(row.codec.encode)
        assert row.versions == SUPPORTED_VERSIONS[row.api_key]  # what the codecs check


async def test_produce_below_v3_is_refused_although_advertised(node):
    handler, _, _ = node
    header = RequestHeader(int(ApiKey.PRODUCE), 2, 7, "old-client")
    with pytest.raises(ProtocolError):  # ... but v0-v2 bodies are never decoded: the connection closes
        await handler.handle(header, memoryview(b"\x00" * 32))


async def test_produce_then_fetch_returns_the_exact_batches(node):
    handler, _, _ = node
    first, second = batch(2, tag="a"), batch(3, tag="b")
    response = await do_produce(handler, 1, ("orders", 0, first))
    assert partitions(response)[("orders", 0)].error_code == 0
    response = await do_produce(handler, -1, ("orders", 0, second))
    assert partitions(response)[("orders", 0)].base_offset == 2
    fetched = partitions(await do_fetch(handler, fetch_request(("orders", 0, 0))))[("orders", 0)]
    assert fetched.error_code == 0 and fetched.high_watermark == fetched.last_stable_offset == 5
    second_stamped = bytearray(stamped(second, 0))
    second_stamped[7] = 2  # base offset 2, assigned by the broker (bytes 0..7, outside the CRC)
    assert bytes(fetched.records) == stamped(first, 0) + bytes(second_stamped)


async def test_acks_0_sends_nothing_but_appends(node):
    handler, _, _ = node
    assert await do_produce(handler, 0, ("orders", 0, batch(1))) is None
    fetched = partitions(await do_fetch(handler, fetch_request(("orders", 0, 0))))[("orders", 0)]
    assert fetched.high_watermark == 1


async def test_produce_errors_are_per_partition(node):
    handler, _, _ = node
    response = await do_produce(handler, 1, ("orders", 0, batch(1)), ("orders", 1, batch(1)),
                                ("nope", 0, batch(1)), ("orders", 0, b"\x00" * 10))
    by_topic = {t.name: [p.error_code for p in t.partitions] for t in response.responses}
    assert by_topic == {"orders": [0, 6, 2], "nope": [3]}  # 2: garbage records, CORRUPT_MESSAGE
    bad_acks = await do_produce(handler, 5, ("orders", 0, batch(1)))
    assert partitions(bad_acks)[("orders", 0)].error_code == 21


async def test_fetch_waits_and_is_woken_by_a_produce(node):
    handler, _, _ = node
    loop = asyncio.get_running_loop()
    started = loop.time()
    waiting = asyncio.create_task(do_fetch(handler, fetch_request(("orders", 0, 0), max_wait_ms=5000, min_bytes=1)))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await do_produce(handler, 1, ("orders", 0, batch(1)))
    fetched = partitions(await asyncio.wait_for(waiting, 2.0))[("orders", 0)]
    assert fetched.high_watermark == 1 and len(fetched.records) > 0
    assert loop.time() - started < 2.0


async def test_fetch_times_out_empty_and_reports_errors(node):
    handler, _, _ = node
    empty = await do_fetch(handler, fetch_request(("orders", 0, 0), max_wait_ms=30, min_bytes=1))
    assert bytes(partitions(empty)[("orders", 0)].records) == b""
    result = partitions(await do_fetch(handler, fetch_request(
        ("orders", 0, 7), ("orders", 1, 0), ("nope", 0, 0), max_wait_ms=5000, min_bytes=1)))
    assert [result[k].error_code for k in [("orders", 0), ("orders", 1), ("nope", 0)]] == [1, 0, 3]
    # orders-1 is a follower here: since Fetch v11 (KIP-392) a follower serves consumers up to
    # its high watermark; before v11 a consumer must go to the leader
    old = partitions(await do_fetch(handler, fetch_request(("orders", 1, 0), max_wait_ms=0), version=10))
    assert old[("orders", 1)].error_code == 6  # NOT_LEADER_OR_FOLLOWER


async def test_fetch_response_limit_lets_the_first_partition_exceed(node):
    handler, _, _ = node
    await do_produce(handler, 1, ("orders", 0, batch(5)))
    fetched = partitions(await do_fetch(handler, fetch_request(("orders", 0, 0), max_bytes=10)))
    assert len(fetched[("orders", 0)].records) > 10


async def test_list_offsets_by_time_earliest_and_latest(node):
    handler, _, _ = node
    await do_produce(handler, 1, ("orders", 0, batch(2, ts=NOW)))
    await do_produce(handler, 1, ("orders", 0, batch(2, ts=NOW + 100)))

    async def offset_for(timestamp, version=4):
        request = lo.request(version, -1, [("orders", 0, timestamp, -1)])
        response = await call(handler, ApiKey.LIST_OFFSETS, version, request, lo.encode_request, lo.decode_response)
        p = response.topics[0].partitions[0]
        return p.error_code, p.offset, p.timestamp, getattr(p, "leader_epoch", -1)  # v4+

    assert await offset_for(NOW + 50) == (0, 2, NOW + 100, 0)
    assert await offset_for(NOW + 1) == (0, 1, NOW + 1, 0)
    assert await offset_for(NOW + 1000) == (0, -1, -1, -1)
    assert await offset_for(-1) == (0, 4, -1, 0)
    assert await offset_for(-2) == (0, 0, -1, 0)
    assert (await offset_for(-1, version=1))[:2] == (0, 4)
    # The flexible versions: v7 MAX_TIMESTAMP (-3) names the record with the largest
    # timestamp, v8 EARLIEST_LOCAL (-4) is the log start without tiered storage.
    assert await offset_for(-1, version=6) == (0, 4, -1, 0)
    assert await offset_for(lo.MAX_TIMESTAMP, version=7) == (0, 3, NOW + 101, 0)
    assert await offset_for(lo.EARLIEST_LOCAL_TIMESTAMP, version=8) == (0, 0, -1, 0)
    # v0: offsets of segment starts (one segment here) and the high watermark, newest first
    async def old_style(timestamp, max_num_offsets):
        request = lo.V0Request(-1, (lo.V0Topic("orders", (
            lo.V0Partition(0, timestamp, max_num_offsets), lo.V0Partition(7, -1, 1))),))
        response = await call(handler, ApiKey.LIST_OFFSETS, 0, request, lo.encode_request, lo.decode_response)
        return [(p.partition_index, p.error_code, p.old_style_offsets) for p in response.topics[0].partitions]

    assert await old_style(-1, 10) == [(0, 0, (4, 0)), (7, 3, ())]
    assert await old_style(-1, 1) == [(0, 0, (4,)), (7, 3, ())]
    assert await old_style(-2, 10) == [(0, 0, (0,)), (7, 3, ())]
    assert (await old_style(lo.MAX_TIMESTAMP, 1))[0] == (0, ErrorCode.UNSUPPORTED_VERSION, ())
    # v9 LATEST_TIERED (-5): no tiered storage, so no tiered offset (KIP-1005)
    assert await offset_for(lo.LATEST_TIERED_TIMESTAMP, version=9) == (0, -1, -1, -1)
    # a special timestamp older than its version is UNSUPPORTED_VERSION for that partition
    for timestamp, version in ((lo.MAX_TIMESTAMP, 6), (lo.EARLIEST_LOCAL_TIMESTAMP, 7),
                               (lo.LATEST_TIERED_TIMESTAMP, 8)):
        assert await offset_for(timestamp, version) == (ErrorCode.UNSUPPORTED_VERSION, -1, -1, -1)


async def test_offset_for_leader_epoch(node):
    handler, _, _ = node
    await do_produce(handler, 1, ("orders", 0, batch(3)))
    for version in (0, 1, 3, 4):  # v0 and v1 by hand into kio's v2 classes
        request = ofle.request(version, [("orders", 0, 0, -1), ("orders", 1, 0, -1)])
        response = await call(handler, ApiKey.OFFSET_FOR_LEADER_EPOCH, version, request, ofle.encode_request,
                              ofle.decode_response)
        answers = [(p.error_code, p.partition, p.leader_epoch, p.end_offset) for p in response.topics[0].partitions]
        assert answers == [(0, 0, 0 if version else -1, 3), (6, 1, -1, -1)], version  # v0 has no epoch


async def test_metadata_known_unknown_and_auto_created_topics(node):
    handler, admin_api, _ = node
    request = md.MetadataRequest(("orders", "dark", "fresh", "bad/name"), allow_auto_topic_creation=True)
    response = await call(handler, ApiKey.METADATA, 8, request, md.encode_metadata_request,
                          md.decode_metadata_response)
    assert [(b.node_id, b.host, b.port) for b in response.brokers] == [(1, *ADVERTISED), (2, "127.0.0.2", 9092)]
    assert response.cluster_id == "test-cluster" and response.controller_id == ME
    topics = {t.name: t for t in response.topics}
    assert topics["orders"].error_code == 0
    assert [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes) for p in topics["orders"].partitions] \
        == [(0, 1, (1,), (1,)), (1, 2, (2, 1), (2, 1))]
    dark = topics["dark"].partitions[0]
    assert (dark.error_code, dark.offline_replicas) == (5, (3,))  # leader fenced
    assert topics["fresh"].error_code == 5 and topics["bad/name"].error_code == 17
    await asyncio.sleep(0)  # the creation task runs
    assert admin_api.calls == [("create", "fresh", 1, 1, {})]  # num.partitions, default.replication.factor
    no_auto = await call(handler, ApiKey.METADATA, 4, md.MetadataRequest(("other",), False),
                         md.encode_metadata_request, md.decode_metadata_response)
    assert no_auto.topics[0].error_code == 3
    everything = await call(handler, ApiKey.METADATA, 1, md.MetadataRequest(None), md.encode_metadata_request,
                            md.decode_metadata_response)
    assert sorted(t.name for t in everything.topics) == ["dark", "orders"]
    # v0: an empty list asks for every topic (no creation), and a named one auto-creates
    v0_all = await call(handler, ApiKey.METADATA, 0, md.MetadataRequest(None), md.encode_metadata_request,
                        md.decode_metadata_response)
    assert sorted(t.name for t in v0_all.topics) == ["dark", "orders"] and v0_all.controller_id == -1
    assert [(b.node_id, b.rack) for b in v0_all.brokers] == [(1, None), (2, None)]
    v0_named = await call(handler, ApiKey.METADATA, 0, md.MetadataRequest(("v0-topic",)), md.encode_metadata_request,
                          md.decode_metadata_response)
    assert [(t.name, t.error_code) for t in v0_named.topics] == [("v0-topic", 5)]


async def test_admin_requests_go_to_the_topic_admin(node):
    handler, admin_api, _ = node
    from tests.unit.test_topic_admin_codecs import create_request

    request = create_request(4, ("new", 3, -1), ("orders", 1, 1), timeout_ms=1000)
    response = await call(handler, ApiKey.CREATE_TOPICS, 4, request, messages.encode_request,
                          messages.response_decoder(ApiKey.CREATE_TOPICS))
    assert [(t.name, t.error_code) for t in response.topics] == [("new", 0), ("orders", 36)]
    await call(handler, ApiKey.DELETE_TOPICS, 3, messages.request_type(ApiKey.DELETE_TOPICS, 3)(
        topic_names=("new",), timeout=timedelta(seconds=1)), lambda request, version: [messages.encode(request)])
    m = messages.request_module(ApiKey.CREATE_PARTITIONS, 1)
    await call(handler, ApiKey.CREATE_PARTITIONS, 1, m.CreatePartitionsRequest(
        topics=(m.CreatePartitionsTopic(name="orders", count=4, assignments=None),), timeout=timedelta(seconds=1),
        validate_only=False), lambda request, version: [messages.encode(request)])
    assert admin_api.calls == [("create", "new", 3, 1, {}), ("create", "orders", 1, 1, {}),
                               ("delete", "new"), ("partitions", "orders", 4)]


async def test_describe_configs_merges_overrides_and_defaults(node):
    handler, _, _ = node
    request = dc.request(3, (dc.RESOURCE_TYPE_TOPIC, "orders", ("retention.ms", "segment.bytes")),
                         (dc.RESOURCE_TYPE_TOPIC, "nope", None), (dc.RESOURCE_TYPE_TOPIC, "bad/name", None))
    response = await call(handler, ApiKey.DESCRIBE_CONFIGS, 3, request, dc.encode_describe_configs_request,
                          dc.decode_describe_configs_response)
    orders, nope, bad = response.results
    assert (bad.error_code, bad.configs) == (17, ())  # INVALID_TOPIC_EXCEPTION, as Topic.validate
    assert [(c.name, c.value, c.config_source) for c in orders.configs] == [
        ("retention.ms", "1000", 1), ("segment.bytes", str(LogConfig().segment_bytes), 5)]
    assert nope.error_code == 3


async def test_init_producer_id_hands_out_a_block_from_the_controller(node):
    handler, _, controller = node

    async def init():
        request = messages.request_type(ApiKey.INIT_PRODUCER_ID, 1)(
            transactional_id=None, transaction_timeout=timedelta(milliseconds=60000))
        return await call(handler, ApiKey.INIT_PRODUCER_ID, 1, request, messages.encode_request,
                          messages.response_decoder(ApiKey.INIT_PRODUCER_ID))

    ids = [(r.error_code, r.producer_id, r.producer_epoch) for r in [await init() for _ in range(3)]]
    assert ids == [(0, 1000, 0), (0, 1001, 0), (0, 1000, 0)]  # the fake hands out the same block again
    assert controller.calls == [("allocate-producer-ids", {"broker_id": 1, "broker_epoch": 1})] * 2


async def test_find_coordinator_creates_the_offsets_topic_first(node):
    handler, admin_api, _ = node
    response = await kio_call(handler, ApiKey.FIND_COORDINATOR, 1, key="group")
    assert response.error_code == 15 and "being created" in response.error_message
    await asyncio.sleep(0.01)
    # 50 partitions; replication factor 3 capped to the 2 live brokers; kept forever (no compaction yet)
    assert admin_api.calls == [("create", "__consumer_offsets", 50, 2,
                                {"cleanup.policy": "compact", "segment.bytes": "104857600"})]


async def test_find_coordinator_for_transactions_is_not_available(node):
    handler, admin_api, _ = node
    response = await kio_call(handler, ApiKey.FIND_COORDINATOR, 1, key="tx", key_type=1)
    assert response.error_code == 15 and admin_api.calls == []


@pytest.mark.parametrize("api, version, body", [
    (ApiKey.PRODUCE, 8, b"\x00"),  # truncated
    (ApiKey.JOIN_GROUP, 0, b""),  # truncated group request
    (ApiKey.FETCH, 99, b""),  # unsupported version
], ids=["truncated", "no-codec", "bad-version"])
async def test_undecodable_requests_raise_protocol_error(node, api, version, body):
    handler, _, _ = node
    with pytest.raises(ProtocolError):
        await handler.handle(RequestHeader(api, version, 1, None), memoryview(body))


async def test_describe_configs_answers_the_brokers_effective_defaults(tmp_path):
    # The bug: min.insync.replicas=1 and unclean.leader.election.enable=false were answered
    # from a hard-coded table whatever the broker's config said.
    config = parse_config({"node.id": str(ME), "process.roles": "broker", "min.insync.replicas": "2",
                           "unclean.leader.election.enable": "true"})
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    replicas = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
    handler = RequestHandler(ME, replicas, lambda: IMAGE, ADVERTISED, None, broker_config=config)
    keys = ("min.insync.replicas", "unclean.leader.election.enable", "retention.ms")
    request = dc.request(3, (dc.RESOURCE_TYPE_TOPIC, "orders", keys), include_synonyms=True,
                         include_documentation=True)
    try:
        response = await call(handler, ApiKey.DESCRIBE_CONFIGS, 3, request,
                              dc.encode_describe_configs_request, dc.decode_describe_configs_response)
    finally:
        log_manager.shutdown()
    (orders,) = response.results
    assert [(c.name, c.value, c.config_source) for c in orders.configs] == [
        ("min.insync.replicas", "2", 4), ("unclean.leader.election.enable", "true", 4),
        ("retention.ms", "1000", 1)]  # STATIC_BROKER_CONFIG twice, then the topic's override
    assert [(s.name, s.value, s.source) for s in orders.configs[0].synonyms] == [
        ("min.insync.replicas", "2", 4), ("min.insync.replicas", "1", 5)]
    assert [c.config_type for c in orders.configs] == [3, 1, 5]  # INT, BOOLEAN, LONG (v3)
    assert all(c.documentation for c in orders.configs)


WIDE = replay(IMAGE, Topic("wide", "WIDE"),
              *(Partition("WIDE", p, (1, 2), (1, 2), leader=1) for p in range(6)))


async def test_acks_all_over_many_partitions_times_out_once(tmp_path):
    # Follower 2 never fetches: every partition times out. Kafka's DelayedProduce has one
    # deadline per request; waiting partition after partition took 6 x 0.3 s = 1.8 s.
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    replicas = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
    replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, WIDE, ME), WIDE)
    handler = RequestHandler(ME, replicas, lambda: WIDE, ADVERTISED, None)
    loop = asyncio.get_running_loop()
    try:
        started = loop.time()
        response = await call(handler, ApiKey.PRODUCE, 8,
                              produce_request(-1, *(("wide", p, batch(1)) for p in range(6)), timeout_ms=300),
                              produce.encode_produce_request, produce.decode_produce_response)
        elapsed = loop.time() - started
    finally:
        log_manager.shutdown()
    (wide,) = response.responses
    assert [p.error_code for p in wide.partitions] == [7] * 6  # REQUEST_TIMED_OUT
    # One timeout for the request (timeouts are whole ms: up to 1 ms early); six take at least 1.8 s.
    assert 0.3 - 0.001 <= elapsed < 5 * 0.3, elapsed


@pytest.mark.parametrize("version, head", [(1, b""), (2, b"\x00")], ids=["classic", "flexible"])
async def test_a_flexible_response_carries_header_v1_tags(node, version, head):
    """The handler answers the body; framing adds the response header, v1 (tagged fields) for
    a flexible version."""
    from common.protocol import messages
    from common.protocol.frame import RequestHeader, frame_response_for

    handler, _, _ = node
    q = messages.request_module(ApiKey.DELETE_RECORDS, version)
    request = q.DeleteRecordsRequest(topics=(q.DeleteRecordsTopic(name="absent", partitions=(
        q.DeleteRecordsPartition(partition_index=0, offset=0),)),), timeout=timedelta(0))
    chunks = await call(handler, ApiKey.DELETE_RECORDS, version, request, messages.encode_request)
    m = messages.response_module(ApiKey.DELETE_RECORDS, version)
    expected = messages.encode(m.DeleteRecordsResponse(throttle_time=messages.NO_THROTTLE, topics=(
        m.DeleteRecordsTopicResult(name="absent", partitions=(m.DeleteRecordsPartitionResult(
            partition_index=0, low_watermark=-1, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),)),)))
    assert flatten(chunks) == expected
    framed = flatten(frame_response_for(RequestHeader(ApiKey.DELETE_RECORDS, version, 7, "c"), chunks))
    assert framed[8:] == head + expected  # after the size and correlation id


def start_produce(handler, acks, *parts):
    frame = encode_request_header(RequestHeader(ApiKey.PRODUCE, 8, 42, "test")) + b"".join(
        produce.encode_produce_request(produce_request(acks, *parts), 8))
    return handler.start(*parse_request_header(frame))


@pytest.mark.parametrize("acks", [0, 1, -1])
async def test_start_answers_produce_at_once_when_nothing_must_wait(node, acks):
    # the server needs no task for these (broker/server.py): acks 0, 1, and acks=all with an
    # ISR of the leader alone; a refused partition is answered at once too
    handler, _, _ = node
    answer = start_produce(handler, acks, ("orders", 0, batch(2)), ("nope", 0, batch(1)))
    assert not isinstance(answer, Later)
    if acks == 0:
        assert answer is None
        return
    response = produce.decode_produce_response(memoryview(flatten(answer)), 8)
    assert {(t.name, p.error_code, p.base_offset) for t in response.responses for p in t.partitions} == {
        ("orders", 0, 0), ("nope", 3, -1)}


async def test_start_leaves_acks_all_waiting_for_followers_to_a_later_answer(tmp_path):
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    replicas = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
    replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, WIDE, ME), WIDE)
    handler = RequestHandler(ME, replicas, lambda: WIDE, ADVERTISED, None)
    try:
        answer = start_produce(handler, -1, ("wide", 0, batch(1)))
        assert isinstance(answer, Later)
        assert len(replicas.produce_purgatory.operations) == 1  # watched at once, as Kafka's tryCompleteElseWatch
        waiting = asyncio.ensure_future(answer.answer)
        await asyncio.sleep(0.05)
        assert len(replicas.produce_purgatory.operations) == 1 and not waiting.done()
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
    finally:
        log_manager.shutdown()
