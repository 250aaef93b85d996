"""Kafka requests in, response bodies out: the broker's API layer over the ReplicaManager.

    handler = RequestHandler(broker_id, replicas, image_provider, ("127.0.0.4", 9092),
                             controller_client, auto_create_topics=True, cluster_id=...)
    chunks = await handler.handle(header, body)   # body chunks for frame_response, or None

`handle` raises ProtocolError for a request it cannot decode (the server closes that
connection) and answers everything else, failures per partition as Kafka does. The
synchronous prefix of `handle` does the work that must follow request order (Produce
appends) before the first await, since the server starts one task per request in order.

Topic admin (CreateTopics, DeleteTopics, CreatePartitions, auto topic creation) goes to the
controllers' admin HTTP API through a `TopicAdmin`; `HttpTopicAdmin` is the real one.
Consumer groups (FindCoordinator and the group APIs) go to broker/group_coordinator/.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final

from broker.controller_client import ControllerClient, ControllerUnavailableError
from broker.group_coordinator.handlers import GROUP_HANDLERS
from broker.group_coordinator.offsets_topic import OffsetsTopic
from broker.group_coordinator.runtime import CoordinatorSettings, GroupCoordinator
from broker.replica_manager import (
    LEADER_NOT_AVAILABLE,
    NOT_LEADER_OR_FOLLOWER,
    ReplicaError,
    ReplicaManager,
)
from broker.topic_admin import AdminResult, HttpTopicAdmin, TopicAdmin
from broker.topic_partition import TopicPartition
from common.errors import ErrorCode, KafkaError
from common.protocol import admin, fetch, produce
from common.protocol import describe_configs as dc
from common.protocol import list_offsets as lo
from common.protocol import metadata as md
from common.protocol import offset_for_leader_epoch as ofle
from common.protocol.api_keys import ApiKey
from common.protocol.api_versions import (
    answer_api_versions,
    encode_api_versions_response,
    supported_api_versions,
)
from common.protocol.dispatch import (
    ADVERTISED_VERSIONS,
    decode_request,
    encode_response,
)
from common.protocol.find_coordinator import FindCoordinatorResponse
from common.protocol.frame import RequestHeader
from common.protocol.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from common.protocol.primitives import Chunk, ProtocolError
from common.topic_config import LogConfig
from groups.partitioner import GROUP_METADATA_TOPIC_NAME
from metadata.image import BrokerRegistration, MetadataImage, TopicImage
from metadata.records import ConfigResourceType
from metadata.topic_name import topic_name_error

log = logging.getLogger(__name__)

UNKNOWN_TOPIC: Final = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
UNKNOWN_SERVER_ERROR: Final = -1
COORDINATOR_LOAD_IN_PROGRESS: Final = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
COORDINATOR_NOT_AVAILABLE: Final = ErrorCode.COORDINATOR_NOT_AVAILABLE
INVALID_TOPIC_EXCEPTION: Final = ErrorCode.INVALID_TOPIC_EXCEPTION
FETCH_SESSION_ID_NOT_FOUND: Final = ErrorCode.FETCH_SESSION_ID_NOT_FOUND
INVALID_REQUEST: Final = ErrorCode.INVALID_REQUEST
CONFIG_SOURCE_DYNAMIC_TOPIC: Final = 1
CONFIG_SOURCE_DEFAULT: Final = 5
MAX_PENDING_AUTO_CREATES: Final = 64  # topics whose creation is in flight at once
def default_topic_configs(config: LogConfig) -> dict[str, str]:
    """The broker defaults under Kafka's topic config names (DescribeConfigs)."""
    return {
        "cleanup.policy": ",".join(config.cleanup_policy),
        "file.delete.delay.ms": str(config.file_delete_delay_ms),
        "flush.messages": str(config.flush_messages), "flush.ms": str(config.flush_ms),
        "index.interval.bytes": str(config.index_interval_bytes),
        "max.message.bytes": str(config.max_message_bytes),
        "message.timestamp.type": config.message_timestamp_type.value,
        "min.insync.replicas": "1", "retention.bytes": str(config.retention_bytes),
        "retention.ms": str(config.retention_ms), "segment.bytes": str(config.segment_bytes),
        "segment.index.bytes": str(config.segment_index_bytes),
        "segment.ms": str(config.segment_ms), "unclean.leader.election.enable": "false",
    }


class RequestHandler:
    """Answers every API in `dispatch.IMPLEMENTED_VERSIONS` for one broker."""

    def __init__(self, broker_id: int, replica_manager: ReplicaManager,
                 image_provider: Callable[[], MetadataImage], advertised_listener: tuple[str, int],
                 controller_client: ControllerClient | None, *, auto_create_topics: bool = True,
                 cluster_id: str | None = None, listener_name: str | None = None,
                 topic_admin: TopicAdmin | None = None,
                 group_settings: CoordinatorSettings | None = None) -> None:
        self.broker_id = broker_id
        self.replicas = replica_manager
        self._image = image_provider
        self.advertised_listener = advertised_listener
        self.controller_client = controller_client
        self.auto_create_topics = auto_create_topics
        self.cluster_id = cluster_id
        self.listener_name = listener_name
        if topic_admin is None and controller_client is not None:
            topic_admin = HttpTopicAdmin(controller_client)
        self.topic_admin = topic_admin
        self._api_versions = supported_api_versions(ADVERTISED_VERSIONS)
        self._auto_creating: dict[str, asyncio.Task[None]] = {}
        self._producer_ids = (0, 0)  # [next, end) of the block handed to this broker
        self._producer_id_lock = asyncio.Lock()
        # --- consumer groups (issue 12)
        self.groups = GroupCoordinator(broker_id, replica_manager, image_provider,
                                       group_settings or CoordinatorSettings())
        self.groups.ensure_started()  # offsets partitions load as soon as this broker leads them
        self.offsets_topic = OffsetsTopic(
            self.groups, topic_admin, lambda image, broker_id: self._broker_endpoint(image, broker_id))

    async def close(self) -> None:
        for task in list(self._auto_creating.values()):
            task.cancel()
        await self.groups.close()  # consumer groups (issue 12)
        await self.offsets_topic.close()
        close = getattr(self.topic_admin, "close", None)
        if close is not None:
            await close()

    async def handle(self, header: RequestHeader, body: memoryview) -> list[Chunk] | None:
        """The response body chunks; None for Produce with acks=0. ProtocolError when undecodable."""
        version = header.request_api_version
        if header.request_api_key == ApiKey.API_VERSIONS:
            response, answer_version = answer_api_versions(version, self._api_versions)
            return encode_api_versions_response(response, answer_version)
        request = decode_request(header, body)  # ProtocolError: the server closes the connection
        api = ApiKey(header.request_api_key)
        if api is ApiKey.PRODUCE:
            return await self._produce(request, version)
        group_handler = GROUP_HANDLERS.get(api)  # consumer groups (issue 12): they need the client id
        if group_handler is not None:
            response = await group_handler(self.groups, request, version, header.client_id or "")
            return encode_response(api, response, version)
        answer = self._handlers.get(api)
        if answer is None:  # a codec without a handler: a bug, never a client's fault
            raise ProtocolError(f"{api.name} has no handler")
        return encode_response(api, await answer(self, request, version), version)

    # ---- partition errors --------------------------------------------------------------

    def _error_code(self, tp: TopicPartition, error: BaseException, image: MetadataImage) -> int:
        """Kafka's code for a partition-level failure; unexpected ones are logged."""
        if isinstance(error, KafkaError):
            code = int(error.code)
            if code == UNKNOWN_TOPIC:  # not hosted here: does it exist at all?
                topic = image.topic(tp.topic)
                if topic is not None and tp.partition in topic.partitions:
                    return NOT_LEADER_OR_FOLLOWER
            return code
        log.exception("Unexpected error on %s", tp, exc_info=error)
        return UNKNOWN_SERVER_ERROR

    # ---- Produce -----------------------------------------------------------------------

    async def _produce(self, req: produce.ProduceRequest, version: int) -> list[Chunk] | None:
        image = self._image()
        results: list[tuple[str, list[tuple[produce.PartitionProduceResponse, int]]]] = []
        for topic in req.topic_data:  # appends first, before any await: request order
            parts = []
            for p in topic.partition_data:
                tp = TopicPartition(topic.name, p.index)
                if p.records is None:
                    parts.append((produce.PartitionProduceResponse(
                        p.index, int(ErrorCode.CORRUPT_MESSAGE), -1, -1, -1, (), "records are null"), -1))
                    continue
                try:
                    info = self.replicas.append(tp, p.records, acks=req.acks)
                except Exception as e:  # every failure answers this partition only
                    parts.append((produce.PartitionProduceResponse(
                        p.index, self._error_code(tp, e, image), -1, -1, -1, (), str(e) or None), -1))
                    continue
                parts.append((produce.PartitionProduceResponse(
                    p.index, 0, info.first_offset, info.log_append_time, info.log_start_offset),
                    info.last_offset + 1))
            results.append((topic.name, parts))
        if req.acks == 0:
            return None
        if req.acks == -1:
            results = await self._await_replication(results, req.timeout_ms)
        responses = tuple(produce.TopicProduceResponse(name, tuple(r for r, _ in parts))
                          for name, parts in results)
        return produce.encode_produce_response(produce.ProduceResponse(responses), version)

    async def _await_replication(self, results: Any, timeout_ms: int) -> Any:
        """acks=-1: each appended partition waits for its high watermark (at once for RF=1)."""
        out = []
        for name, parts in results:
            done = []
            for response, end_offset in parts:
                if response.error_code == 0:
                    code = await self.replicas.wait_for_high_watermark(
                        TopicPartition(name, response.partition_index), end_offset,
                        max(timeout_ms, 0) / 1000)
                    if code:
                        response = produce.PartitionProduceResponse(
                            response.partition_index, code, -1, -1, -1, (),
                            "not replicated to the ISR within the request timeout")
                done.append((response, end_offset))
            out.append((name, done))
        return out

    # ---- Fetch -------------------------------------------------------------------------

    async def _fetch(self, req: fetch.FetchRequest, version: int) -> fetch.FetchResponse:
        if version >= 7 and req.session_id != 0:  # no fetch sessions: full fetches only
            return fetch.FetchResponse(0, (), FETCH_SESSION_ID_NOT_FOUND, 0)
        tps = [TopicPartition(t.topic, p.partition) for t in req.topics for p in t.partitions]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(req.max_wait_ms, 0) / 1000
        while True:  # bounded by max_wait_ms: each pass waits for an append or the deadline
            responses, total_bytes, failed = self._read_fetch(req)
            remaining = deadline - loop.time()
            if total_bytes >= req.min_bytes or failed or remaining <= 0 or not tps:
                return fetch.FetchResponse(0, responses)
            await self.replicas.wait_for_data(tps, remaining)

    def _read_fetch(self, req: fetch.FetchRequest) -> tuple[tuple[fetch.FetchTopicResponse, ...], int, bool]:
        image = self._image()
        # A follower's fetch (replica id >= 0) reads up to the log end offset and tells the
        # leader where the follower is (its LEO for the HW and the ISR): ReplicaManager.read.
        budget, total, failed = req.max_bytes, 0, False
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition)
                limit = max(min(p.partition_max_bytes, budget), 0)
                try:
                    read = self.replicas.read(tp, p.fetch_offset, limit,
                                              current_leader_epoch=p.current_leader_epoch,
                                              min_one_batch=total == 0,  # Kafka: progress first
                                              replica_id=req.replica_id)
                except Exception as e:
                    failed = True
                    parts.append(fetch.FetchPartitionResponse(
                        p.partition, self._error_code(tp, e, image), -1, b"", -1, -1))
                    continue
                size = read.records.length
                total += size
                budget -= size
                parts.append(fetch.FetchPartitionResponse(
                    p.partition, 0, read.high_watermark, read.records if size else b"",
                    last_stable_offset=read.high_watermark, log_start_offset=read.log_start_offset))
            topics.append(fetch.FetchTopicResponse(t.topic, tuple(parts)))
        return tuple(topics), total, failed

    # ---- ListOffsets, OffsetForLeaderEpoch ---------------------------------------------

    async def _list_offsets(self, req: lo.ListOffsetsRequest, version: int) -> lo.ListOffsetsResponse:
        image = self._image()
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                try:
                    parts.append(self._offset_for(tp, p, consumer=req.replica_id < 0))
                except Exception as e:
                    parts.append(lo.ListOffsetsPartitionResponse(
                        p.partition_index, self._error_code(tp, e, image), -1, -1, -1))
            topics.append(lo.ListOffsetsTopicResponse(t.name, tuple(parts)))
        return lo.ListOffsetsResponse(tuple(topics))

    def _offset_for(self, tp: TopicPartition, p: lo.ListOffsetsPartition, *,
                    consumer: bool) -> lo.ListOffsetsPartitionResponse:
        partition = self.replicas.leader_partition(tp, p.current_leader_epoch)
        partition_log = partition.log
        if consumer and partition_log.high_watermark < partition.leader_epoch_start_offset:
            # KIP-207: a new leader's HW may still be its follower-time one, behind what the
            # previous leader had exposed; answering it would move a client's view backwards.
            raise ReplicaError(ErrorCode.OFFSET_NOT_AVAILABLE,
                               f"the high watermark of {tp} has not reached the start of leader "
                               f"epoch {partition.leader_epoch} yet")
        # Consumers never see past the HW; last_stable_offset == HW (no transactions).
        fetchable = partition_log.high_watermark if consumer else partition_log.log_end_offset
        if p.timestamp == lo.LATEST_TIMESTAMP:
            return lo.ListOffsetsPartitionResponse(p.partition_index, 0, -1, fetchable,
                                                   partition.leader_epoch)
        found = partition_log.offset_for_timestamp(p.timestamp)
        if found is None or found.offset >= fetchable and p.timestamp != lo.EARLIEST_TIMESTAMP:
            return lo.ListOffsetsPartitionResponse(p.partition_index, 0, -1, -1, -1)
        return lo.ListOffsetsPartitionResponse(p.partition_index, 0, found.timestamp, found.offset,
                                               found.leader_epoch)

    async def _offset_for_leader_epoch(self, req: ofle.OffsetForLeaderEpochRequest,
                                       version: int) -> ofle.OffsetForLeaderEpochResponse:
        image = self._image()
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition)
                try:
                    partition = self.replicas.leader_partition(tp, p.current_leader_epoch)
                    end = partition.log.end_offset_for_epoch(p.leader_epoch)
                    parts.append(ofle.EpochEndOffset(0, p.partition, end.leader_epoch, end.end_offset))
                except Exception as e:
                    parts.append(ofle.EpochEndOffset(self._error_code(tp, e, image), p.partition,
                                                     ofle.UNDEFINED_EPOCH, ofle.UNDEFINED_EPOCH_OFFSET))
            topics.append(ofle.OffsetForLeaderTopicResult(t.topic, tuple(parts)))
        return ofle.OffsetForLeaderEpochResponse(tuple(topics))

    # ---- Metadata ----------------------------------------------------------------------

    async def _metadata(self, req: md.MetadataRequest, version: int) -> md.MetadataResponse:
        image = self._image()
        brokers = self._alive_brokers(image)
        alive = {b.node_id for b in brokers}
        if req.topics is None:
            names = sorted(image.topics.by_name)
        else:
            names = list(dict.fromkeys(req.topics))
        auto_create = self.auto_create_topics and req.allow_auto_topic_creation and req.topics is not None
        topics = []
        for name in names:
            topic = image.topic(name)
            if topic is not None:
                internal = name == GROUP_METADATA_TOPIC_NAME  # consumer groups (issue 12)
                topics.append(md.MetadataResponseTopic(0, name, internal, _partitions(topic, alive)))
            elif topic_name_error(name) is not None:
                topics.append(md.MetadataResponseTopic(INVALID_TOPIC_EXCEPTION, name, False, ()))
            elif auto_create and self._start_auto_create(name):
                topics.append(md.MetadataResponseTopic(LEADER_NOT_AVAILABLE, name, False, ()))
            else:
                topics.append(md.MetadataResponseTopic(UNKNOWN_TOPIC, name, False, ()))
        controller_id = self.broker_id if self.broker_id in alive else min(alive, default=-1)
        return md.MetadataResponse(0, tuple(brokers), self.cluster_id, controller_id, tuple(topics))

    def _alive_brokers(self, image: MetadataImage) -> list[md.MetadataResponseBroker]:
        out = []
        for broker_id in sorted(image.cluster.brokers):
            registration = image.cluster.brokers[broker_id]
            if registration.fenced:
                continue
            endpoint = self._endpoint(registration)
            if endpoint is not None:
                out.append(md.MetadataResponseBroker(broker_id, endpoint[0], endpoint[1], registration.rack))
        return out

    def _endpoint(self, registration: BrokerRegistration) -> tuple[str, int] | None:
        if registration.broker_id == self.broker_id:
            return self.advertised_listener
        for listener in registration.listeners:
            if self.listener_name is None or listener.name == self.listener_name:
                return listener.host, listener.port
        return None

    def _start_auto_create(self, name: str) -> bool:
        """Ask the controllers to create `name` (once at a time); False when impossible."""
        if self.topic_admin is None:
            return False
        if name in self._auto_creating:
            return True
        if len(self._auto_creating) >= MAX_PENDING_AUTO_CREATES:
            return True  # LEADER_NOT_AVAILABLE makes the client ask again later
        admin_api = self.topic_admin

        async def create() -> None:
            try:
                code, message = await admin_api.create_topic(name, None, None, {})
                if code not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS (a concurrent creation)
                    log.warning("Auto-creating topic %s failed: error %d: %s", name, code, message)
                else:
                    log.info("Auto-created topic %s", name)
            finally:
                self._auto_creating.pop(name, None)

        self._auto_creating[name] = asyncio.get_running_loop().create_task(create())
        return True

    # ---- admin -------------------------------------------------------------------------

    async def _create_topics(self, req: admin.CreateTopicsRequest, version: int) -> admin.CreateTopicsResponse:
        results = []
        for t in req.topics:
            code, message = await self._create_one(t, req.validate_only)
            results.append(admin.CreatableTopicResult(t.name, code, message))
        return admin.CreateTopicsResponse(0, tuple(results))

    async def _create_one(self, t: admin.CreatableTopic, validate_only: bool) -> AdminResult:
        if self.topic_admin is None:
            return UNKNOWN_SERVER_ERROR, "this broker has no controller to send topic admin requests to"
        if validate_only:
            return INVALID_REQUEST, "validate_only is not supported by tidelog"
        if t.assignments:
            return INVALID_REQUEST, "manual replica assignments are not supported by tidelog"
        configs = {c.name: c.value for c in t.configs if c.value is not None}
        return await self.topic_admin.create_topic(
            t.name, t.num_partitions if t.num_partitions > 0 else None,
            t.replication_factor if t.replication_factor > 0 else None, configs)

    async def _delete_topics(self, req: admin.DeleteTopicsRequest, version: int) -> admin.DeleteTopicsResponse:
        results = []
        for name in req.topic_names:
            if self.topic_admin is None:
                code = UNKNOWN_SERVER_ERROR
            else:
                code, message = await self.topic_admin.delete_topic(name)
                if code:
                    log.info("DeleteTopics %s: error %d: %s", name, code, message)
            results.append(admin.DeletableTopicResult(name, code))
        return admin.DeleteTopicsResponse(0, tuple(results))

    async def _create_partitions(self, req: admin.CreatePartitionsRequest,
                                 version: int) -> admin.CreatePartitionsResponse:
        results = []
        for t in req.topics:
            if self.topic_admin is None:
                code, message = UNKNOWN_SERVER_ERROR, "no controller to send the request to"
            elif req.validate_only or t.assignments is not None:
                code, message = INVALID_REQUEST, "validate_only and manual assignments are not supported"
            else:
                code, message = await self.topic_admin.create_partitions(t.name, t.count)
            results.append(admin.CreatePartitionsTopicResult(t.name, code, message))
        return admin.CreatePartitionsResponse(0, tuple(results))

    async def _describe_configs(self, req: dc.DescribeConfigsRequest,
                                version: int) -> dc.DescribeConfigsResponse:
        image = self._image()
        defaults = default_topic_configs(self.replicas.log_manager.default_config)
        results = []
        for res in req.resources:
            if res.resource_type != dc.RESOURCE_TYPE_TOPIC:  # broker configs: none are dynamic
                results.append(dc.DescribeConfigsResult(0, None, res.resource_type, res.resource_name, ()))
                continue
            if image.topic(res.resource_name) is None:
                results.append(dc.DescribeConfigsResult(
                    UNKNOWN_TOPIC, f"topic {res.resource_name!r} does not exist", res.resource_type,
                    res.resource_name, ()))
                continue
            overrides = image.config(ConfigResourceType.TOPIC, res.resource_name)
            values = {**defaults, **overrides}
            wanted = sorted(values) if res.configuration_keys is None else \
                [k for k in res.configuration_keys if k in values]
            configs = []
            for key in wanted:
                source = CONFIG_SOURCE_DYNAMIC_TOPIC if key in overrides else CONFIG_SOURCE_DEFAULT
                synonyms = (dc.DescribeConfigsSynonym(key, values[key], source),) if req.include_synonyms else ()
                configs.append(dc.DescribeConfigsResourceResult(key, values[key], False, source, False, synonyms))
            results.append(dc.DescribeConfigsResult(0, None, res.resource_type, res.resource_name,
                                                    tuple(configs)))
        return dc.DescribeConfigsResponse(0, tuple(results))

    # ---- producer ids, coordinators ----------------------------------------------------

    async def _init_producer_id(self, req: InitProducerIdRequest, version: int) -> InitProducerIdResponse:
        if req.transactional_id is not None:
            return InitProducerIdResponse(0, COORDINATOR_NOT_AVAILABLE, -1, -1)
        async with self._producer_id_lock:
            next_id, end = self._producer_ids
            if next_id >= end:
                block = await self._allocate_producer_ids()
                if block is None:
                    return InitProducerIdResponse(0, COORDINATOR_LOAD_IN_PROGRESS, -1, -1)
                next_id, end = block
            self._producer_ids = (next_id + 1, end)
        return InitProducerIdResponse(0, 0, next_id, 0)

    async def _allocate_producer_ids(self) -> tuple[int, int] | None:
        registration = self._image().broker(self.broker_id)
        if self.controller_client is None or registration is None:
            return None
        try:
            reply = await self.controller_client.call("allocate-producer-ids", {
                "broker_id": self.broker_id, "broker_epoch": registration.broker_epoch})
        except ControllerUnavailableError as e:
            log.warning("Cannot allocate producer ids: %s", e)
            return None
        if reply["error_code"] != 0:
            log.warning("Controller refused producer ids: %s", reply.get("error_message"))
            return None
        start, length = reply["producer_id_start"], reply["producer_id_len"]
        return start, start + length

    async def _find_coordinator(self, req: Any, version: int) -> FindCoordinatorResponse:
        return self.offsets_topic.find_coordinator(req, self._image())  # consumer groups (issue 12)

    def _broker_endpoint(self, image: MetadataImage, broker_id: int) -> tuple[str, int] | None:
        registration = image.broker(broker_id)
        if registration is None or registration.fenced:
            return None
        return self._endpoint(registration)

    _handlers: Final[dict[ApiKey, Callable[[Any, Any, int], Any]]] = {
        ApiKey.FETCH: _fetch, ApiKey.LIST_OFFSETS: _list_offsets, ApiKey.METADATA: _metadata,
        ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
        ApiKey.INIT_PRODUCER_ID: _init_producer_id, ApiKey.FIND_COORDINATOR: _find_coordinator,
        ApiKey.CREATE_TOPICS: _create_topics, ApiKey.DELETE_TOPICS: _delete_topics,
        ApiKey.CREATE_PARTITIONS: _create_partitions, ApiKey.DESCRIBE_CONFIGS: _describe_configs,
    }


def _partitions(topic: TopicImage, alive: set[int]) -> tuple[md.MetadataResponsePartition, ...]:
    out = []
    for partition_id in sorted(topic.partitions):
        p = topic.partitions[partition_id]
        offline = tuple(r for r in p.replicas if r not in alive)
        error = 0 if p.has_leader and p.leader in alive else LEADER_NOT_AVAILABLE
        out.append(md.MetadataResponsePartition(error, partition_id, p.leader, p.leader_epoch,
                                                p.replicas, p.isr, offline))
    return tuple(out)
