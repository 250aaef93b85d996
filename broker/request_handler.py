"""Kafka requests in, response bodies out: one dispatch table from API key to its versions,
codec and handler.

    handler = RequestHandler(broker_id, replicas, image_provider, ("127.0.0.4", 9092),
                             controller_client, auto_create_topics=True, cluster_id=...,
                             broker_config=config)
    chunks = await handler.handle(header, body)   # body chunks for frame_response, or None

A new API is its row in common/protocol/api_table.py (versions, kio's generated messages,
ACL and forwarding facts), one `ApiRow` here pairing it with its handler (`broker/handlers/`,
grouped by concern), and no codec; ApiVersions advertises from the same table. `handle` raises ProtocolError for a
request it cannot decode (the server closes that connection) and answers everything else,
failures per partition as Kafka does. The synchronous prefix of a handler runs before the
next request's (broker/server.py keeps that order): Produce appends there, and answers at
once unless acks=all (`start` returns `Later` then). At the end of that prefix `start` wakes
the parked fetches the request made due (`FetchSessions.run_pending`, Kafka's
tryCompleteActions): a produce's followers read all its partitions' appends in its own turn.

Topic admin (CreateTopics, DeleteTopics, CreatePartitions, auto topic creation) goes to the
controllers' admin HTTP API through a `TopicAdmin`; `HttpTopicAdmin` is the real one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from broker.applied_offset import AppliedOffsetWaiters
from broker.controller_client import ControllerClient
from broker.coordinator.location import Endpoint
from broker.dynamic_config import DynamicBrokerConfig
from broker.fetch_sessions import FetchSessions
from broker.group_coordinator.offsets_topic import offsets_topic as offsets_topic_of
from broker.group_coordinator.runtime import CoordinatorSettings, GroupCoordinator
from broker.handlers import groups as group
from broker.handlers import consumer_groups
from broker.handlers import share_fetch, share_groups, share_state
from broker.handlers import authorization
from broker.handlers.acls import (
    handle_create_acls,
    handle_delete_acls,
    handle_describe_acls,
    install as install_authorizer,
)
from broker.handlers.admin import (
    handle_create_partitions,
    handle_create_topics,
    handle_delete_topics,
)
from broker.handlers.cluster import handle_describe_cluster, handle_elect_leaders
from broker.handlers.describe_quorum import handle_describe_quorum
from broker.handlers.raft_voters import handle_add_raft_voter, handle_remove_raft_voter, handle_update_raft_voter
from broker.handlers.features import handle_update_features
from broker.handlers.sasl import handle_sasl_authenticate, handle_sasl_handshake
from broker.handlers.scram_credentials import (
    handle_alter_user_scram_credentials,
    handle_describe_user_scram_credentials,
)
from broker.handlers.configs import (
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from broker.handlers.context import (
    ApiRow,
    BrokerContext,
    ClientInfo,
    Handler,
    NowHandler,
    client_info,
)
from broker.handlers.fetch import fetch_now, handle_fetch
from broker.handlers.fetch_partitions import topic_name as fetch_topic_name
from broker.request_fault_hook import start_faulted
from broker.request_faults import FaultTable
from broker.handlers.log_admin import (
    handle_alter_replica_log_dirs,
    handle_delete_records,
    handle_describe_log_dirs,
    handle_describe_producers,
)
from broker.handlers.metadata import (
    broker_endpoint,
    handle_find_coordinator,
    handle_metadata,
)
from broker.handlers.offset_lookups import handle_list_offsets, handle_offset_for_leader_epoch
from broker.handlers.produce import handle_produce, produce_now
from broker.handlers.topic_partitions import handle_describe_topic_partitions
from broker.handlers.transactions import (
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_describe_transactions,
    handle_end_txn,
    handle_init_producer_id,
    handle_list_transactions,
)
from broker.handlers.txn_offsets import handle_txn_offset_commit
from broker.handlers.txn_markers import handle_write_txn_markers
from broker.txn_verification import VERIFICATION_ENABLE, TxnVerifier
from broker.handlers.reassignments import (
    handle_alter_partition_reassignments,
    handle_list_partition_reassignments,
)
from broker.leader_elections import HttpLeaderElections
from broker.partition_reassignments import HttpPartitionReassignments
from broker.producer_ids import ProducerIdManager
from broker.replica_manager import ReplicaManager
from broker.server import Encoding, Later
from broker.transaction_coordinator.coordinator import TransactionCoordinator, TxnSettings
from broker.transaction_coordinator.markers import MarkerSender
from broker.transaction_coordinator.state_topic import transaction_state_topic
from broker.topic_admin import (
    AutoTopicCreator,
    HttpTopicAdmin,
    TopicAdmin,
    TopicDefaults,
)
from common.config_schema import Config
from common.errors import ErrorCode
from common.protocol import api_versions
from common.protocol.api_keys import (
    API_VERSIONS_KEY,
    SUPPORTED_VERSIONS,
    ApiKey,
    is_supported,
)
from common.protocol.api_table import API_SPECS
from common.protocol.frame import RequestHeader
from common.protocol.primitives import Chunk, ProtocolError
from common.log_config import KAFKA_DEFAULT_BROKER_CONFIG
from metadata.image import MetadataImage
from security.authorizer import ANONYMOUS


async def handle_api_versions(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's ApiVersionsRequest of `version`; the answer that version's response."""
    if not api_versions.is_valid(req, version):  # Kafka: INVALID_REQUEST and no list
        return api_versions.response(version, ErrorCode.INVALID_REQUEST, ())
    image = ctx.image()  # the finalized features and their epoch: the image's (KRaftMetadataCache.features)
    return api_versions.response(version, ErrorCode.NONE, ADVERTISED_API_VERSIONS,
                                 api_versions.broker_features(image.features.levels), image.offset)


def _group(handler: Callable[[GroupCoordinator, Any, int, ClientInfo], Awaitable[Any]]) -> Handler:
    """A group API handler (broker/handlers/groups.py) served by this broker's
    coordinator."""
    async def serve(ctx: BrokerContext, request: Any, version: int, client: ClientInfo) -> Any:
        return await handler(ctx.groups, request, version, client)
    return serve


def _row(api_key: ApiKey, handler: Handler, *, advertised: tuple[int, int] | None = None,
         now: NowHandler | None = None, ordered_appends: bool = False) -> ApiRow:
    # The versions and the messages (kio's, or a hand-tuned codec) are the API's row in
    # common/protocol/api_table.py, with the facts SASL and ACLs hook on.
    spec = API_SPECS[api_key]
    return ApiRow(api_key, spec.versions, spec.codec, handler, advertised, now, ordered_appends)


API_TABLE: Final[tuple[ApiRow, ...]] = (
    # Produce is advertised from v0 although v0-v2 are refused when sent: librdkafka before
    # 2.10 (kcat on Debian 12 has 2.0.2) silently stops compressing with gzip, snappy and
    # lz4 unless the broker's Produce range starts at 0 (librdkafka issue 4956); Kafka 4.0
    # does the same (KAFKA-18659). Every client that matters sends v3+.
    _row(ApiKey.PRODUCE, handle_produce, advertised=(0, SUPPORTED_VERSIONS[ApiKey.PRODUCE][1]), now=produce_now,
         ordered_appends=True),
    _row(ApiKey.FETCH, handle_fetch, now=fetch_now),
    _row(ApiKey.LIST_OFFSETS, handle_list_offsets),
    _row(ApiKey.METADATA, handle_metadata),
    _row(ApiKey.FIND_COORDINATOR, handle_find_coordinator),
    _row(ApiKey.API_VERSIONS, handle_api_versions),
    # SASL listeners answer these in their authenticator (broker/server.py); here: Kafka's ILLEGAL_SASL_STATE
    _row(ApiKey.SASL_HANDSHAKE, handle_sasl_handshake),
    _row(ApiKey.SASL_AUTHENTICATE, handle_sasl_authenticate),
    # KIP-554: broker/handlers/scram_credentials.py
    _row(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, handle_describe_user_scram_credentials),
    _row(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, handle_alter_user_scram_credentials),
    _row(ApiKey.CREATE_TOPICS, handle_create_topics),
    _row(ApiKey.DELETE_TOPICS, handle_delete_topics),
    _row(ApiKey.INIT_PRODUCER_ID, handle_init_producer_id),
    _row(ApiKey.OFFSET_FOR_LEADER_EPOCH, handle_offset_for_leader_epoch),
    _row(ApiKey.DESCRIBE_CONFIGS, handle_describe_configs),
    _row(ApiKey.CREATE_PARTITIONS, handle_create_partitions),
    _row(ApiKey.ALTER_CONFIGS, handle_alter_configs),
    _row(ApiKey.INCREMENTAL_ALTER_CONFIGS, handle_incremental_alter_configs),
    # storage-side admin: broker/handlers/log_admin.py
    _row(ApiKey.DELETE_RECORDS, handle_delete_records),
    _row(ApiKey.DESCRIBE_LOG_DIRS, handle_describe_log_dirs),
    _row(ApiKey.ALTER_REPLICA_LOG_DIRS, handle_alter_replica_log_dirs),
    _row(ApiKey.DESCRIBE_PRODUCERS, handle_describe_producers),
    # consumer groups: broker/group_coordinator/
    _row(ApiKey.JOIN_GROUP, _group(group.join)),
    _row(ApiKey.SYNC_GROUP, _group(group.sync)),
    _row(ApiKey.HEARTBEAT, _group(group.heartbeat_)),
    _row(ApiKey.LEAVE_GROUP, _group(group.leave)),
    _row(ApiKey.OFFSET_COMMIT, _group(group.commit)),
    _row(ApiKey.OFFSET_FETCH, _group(group.fetch)),
    _row(ApiKey.OFFSET_DELETE, _group(group.offset_delete)),
    _row(ApiKey.DESCRIBE_GROUPS, _group(group.describe)),
    _row(ApiKey.LIST_GROUPS, share_groups.list_groups),  # the coordinator's groups, then its share groups
    _row(ApiKey.DELETE_GROUPS, _group(group.delete)),
    # KIP-848: broker/handlers/consumer_groups.py
    _row(ApiKey.CONSUMER_GROUP_HEARTBEAT, _group(consumer_groups.consumer_heartbeat)),
    _row(ApiKey.CONSUMER_GROUP_DESCRIBE, _group(consumer_groups.consumer_describe)),
    # KIP-932: broker/handlers/share_groups.py, share_fetch.py, broker/share/
    _row(ApiKey.SHARE_GROUP_HEARTBEAT, share_groups.share_heartbeat),
    _row(ApiKey.SHARE_GROUP_DESCRIBE, share_groups.share_describe),
    _row(ApiKey.SHARE_FETCH, share_fetch.share_fetch),
    _row(ApiKey.SHARE_ACKNOWLEDGE, share_fetch.share_acknowledge),
    _row(ApiKey.READ_SHARE_GROUP_STATE, share_state.read_share_state),  # leader -> coordinator
    _row(ApiKey.WRITE_SHARE_GROUP_STATE, share_state.write_share_state),
    _row(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, share_state.describe_share_offsets),
    _row(ApiKey.ALTER_SHARE_GROUP_OFFSETS, share_state.alter_share_offsets),
    _row(ApiKey.DELETE_SHARE_GROUP_OFFSETS, share_state.delete_share_offsets),
    # cluster admin: broker/handlers/cluster.py
    _row(ApiKey.DESCRIBE_CLUSTER, handle_describe_cluster),
    _row(ApiKey.DESCRIBE_QUORUM, handle_describe_quorum),  # broker/handlers/describe_quorum.py (issue 28)
    _row(ApiKey.UPDATE_FEATURES, handle_update_features),  # broker/handlers/features.py (issue 28)
    _row(ApiKey.ADD_RAFT_VOTER, handle_add_raft_voter),  # broker/handlers/raft_voters.py (KIP-853)
    _row(ApiKey.REMOVE_RAFT_VOTER, handle_remove_raft_voter),
    _row(ApiKey.UPDATE_RAFT_VOTER, handle_update_raft_voter),
    _row(ApiKey.DESCRIBE_TOPIC_PARTITIONS, handle_describe_topic_partitions),  # KIP-966's ELR (issue 28)
    _row(ApiKey.ELECT_LEADERS, handle_elect_leaders),
    # partition reassignment (KIP-455): broker/handlers/reassignments.py
    _row(ApiKey.ALTER_PARTITION_REASSIGNMENTS, handle_alter_partition_reassignments),
    _row(ApiKey.LIST_PARTITION_REASSIGNMENTS, handle_list_partition_reassignments),
    # ACLs without an authorizer: broker/handlers/acls.py
    _row(ApiKey.DESCRIBE_ACLS, handle_describe_acls),
    _row(ApiKey.CREATE_ACLS, handle_create_acls),
    _row(ApiKey.DELETE_ACLS, handle_delete_acls),
    # transactions: broker/handlers/transactions.py, broker/transaction_coordinator/
    _row(ApiKey.ADD_PARTITIONS_TO_TXN, handle_add_partitions_to_txn),
    _row(ApiKey.ADD_OFFSETS_TO_TXN, handle_add_offsets_to_txn),
    _row(ApiKey.END_TXN, handle_end_txn),
    _row(ApiKey.TXN_OFFSET_COMMIT, handle_txn_offset_commit),  # broker/handlers/txn_offsets.py
    _row(ApiKey.DESCRIBE_TRANSACTIONS, handle_describe_transactions),
    _row(ApiKey.LIST_TRANSACTIONS, handle_list_transactions),
    _row(ApiKey.WRITE_TXN_MARKERS, handle_write_txn_markers),  # broker/handlers/txn_markers.py
)
ROWS: Final[Mapping[ApiKey, ApiRow]] = {row.api_key: row for row in API_TABLE}
if len(ROWS) != len(API_TABLE) or set(ROWS) != set(API_SPECS):
    raise AssertionError("API_TABLE lists an API twice, or not every API of api_table")
IMPLEMENTED_VERSIONS: Final[Mapping[ApiKey, tuple[int, int]]] = {
    row.api_key: row.versions for row in sorted(API_TABLE, key=lambda r: r.api_key)}
ADVERTISED_API_VERSIONS: Final = api_versions.supported_api_versions(
    {row.api_key: row.advertised_versions for row in API_TABLE})


def row_for(header: RequestHeader) -> ApiRow:
    """The row serving this header's API at its version; ProtocolError otherwise."""
    row = ROWS.get(header.request_api_key)  # type: ignore[call-overload]  # an int finds its ApiKey
    if row is None:
        raise ProtocolError(f"unsupported API key {header.request_api_key}")
    low, high = row.versions
    if not low <= header.request_api_version <= high:
        raise ProtocolError(f"{row.api_key.name} v{header.request_api_version} is not supported")
    return row


def decode_request(header: RequestHeader, body: memoryview) -> Any:
    """The request dataclass for this header's API and version; ProtocolError otherwise."""
    return row_for(header).codec.decode(body, header.request_api_version)


def encode_response(api_key: ApiKey, response: Any, version: int) -> list[Chunk]:
    """The response body chunks (frame them with `frame.frame_response`)."""
    return ROWS[api_key].codec.encode(response, version)


class RequestHandler:
    """Answers every API in `API_TABLE` for one broker."""

    def __init__(self, broker_id: int, replica_manager: ReplicaManager,
                 image_provider: Callable[[], MetadataImage], advertised_listener: tuple[str, int],
                 controller_client: ControllerClient | None, *, auto_create_topics: bool = True,
                 cluster_id: str | None = None, listener_name: str | None = None,
                 topic_admin: TopicAdmin | None = None, broker_config: Config | None = None,
                 group_settings: CoordinatorSettings | None = None,
                 applied_offsets: AppliedOffsetWaiters | None = None,
                 dynamic_config: DynamicBrokerConfig | None = None) -> None:
        if topic_admin is None and controller_client is not None:
            topic_admin = HttpTopicAdmin(controller_client)
        # Without a config file (tests): every key at Kafka's default.
        config = broker_config or KAFKA_DEFAULT_BROKER_CONFIG
        topic_sizes = TopicDefaults.from_config(config)
        groups = GroupCoordinator(broker_id, replica_manager, image_provider,  # on the broker's timers
                                  group_settings or CoordinatorSettings(), timers=replica_manager.timers)
        groups.ensure_started()  # offsets partitions load as soon as this broker leads them
        endpoint: Endpoint = lambda image, broker: broker_endpoint(self.context, image, broker)  # noqa: E731
        # brokers' own requests to each other (markers, verification) go to the inter-broker listener
        internal: Endpoint = lambda image, broker: broker_endpoint(  # noqa: E731
            self.context, image, broker, self.context.listener_name)
        offsets_topic = offsets_topic_of(groups, topic_admin, endpoint)
        transactions = TransactionCoordinator(broker_id, replica_manager, image_provider,
                                              TxnSettings.from_config(config), timers=replica_manager.timers)
        transactions.markers = MarkerSender(transactions, internal, client_id=f"broker-{broker_id}-txn-marker-sender")
        transactions.ensure_started()  # __transaction_state partitions load as soon as this broker leads them
        transaction_topic = transaction_state_topic(transactions, topic_admin, endpoint)
        # Also the wakes every request drains at its end (`start`): held here, not looked up per request.
        fetch_sessions = self._fetch_sessions = FetchSessions(
            replica_manager, max_entries=config.get_int("max.incremental.fetch.session.cache.slots"))
        self.context = BrokerContext(
            broker_id=broker_id, replicas=replica_manager, image=image_provider,
            advertised_listener=advertised_listener, listener_name=listener_name,
            cluster_id=cluster_id, controller_client=controller_client, topic_admin=topic_admin,
            auto_topics=AutoTopicCreator(topic_admin, image_provider, topic_sizes)
            if auto_create_topics and topic_admin else None,
            producer_ids=ProducerIdManager(broker_id, controller_client, image_provider),
            dynamic_config=dynamic_config or DynamicBrokerConfig(broker_id, config), config=config,
            groups=groups, offsets_topic=offsets_topic, topic_sizes=topic_sizes,
            transactions=transactions, transaction_topic=transaction_topic,
            applied_offsets=applied_offsets,
            elections=HttpLeaderElections(controller_client) if controller_client is not None else None,
            reassignments=HttpPartitionReassignments(controller_client) if controller_client is not None else None,
            fetch_sessions=fetch_sessions,
            txn_verifier=TxnVerifier(internal,
                                     client_id=f"broker-{broker_id}-txn-verifier")
            if config.get_bool(VERIFICATION_ENABLE) else None)
        install_authorizer(self.context, config)  # authorizer.class.name: ACLs enforced in `start`
        self.faults = FaultTable()  # request-level faults (broker/request_faults.py), installed over HTTP

    async def close(self) -> None:
        await self.context.groups.close()
        await self.context.offsets_topic.close()
        await self.context.transactions.close()
        await self.context.transaction_topic.close()
        if self.context.txn_verifier is not None:
            await self.context.txn_verifier.close()
        if self.context.auto_topics is not None:
            self.context.auto_topics.close()
        close = getattr(self.context.topic_admin, "close", None)
        if close is not None:
            await close()
        elections = self.context.elections
        if isinstance(elections, HttpLeaderElections):
            await elections.close()
        if self.context.reassignments is not None:
            await self.context.reassignments.close()
        if self.context.acl_admin is not None:
            await self.context.acl_admin.close()
        if self.context.scram_admin is not None:
            await self.context.scram_admin.close()

    def start(self, header: RequestHeader, body: memoryview, client_host: str = "",
              principal: str = ANONYMOUS) -> list[Chunk] | None | Later[list[Chunk] | None]:
        """The response body chunks now (None: no response, Produce with acks=0), or `Later`
        when the handler must wait. ProtocolError when the request cannot be decoded."""
        # Kafka's KafkaApis.handle `finally { replicaManager.tryCompleteActions() }`: fetches this
        # request made due (a produce's followers) are woken once all of it is appended, in its
        # own turn; while a request runs, a change only lists them (broker/fetch_sessions.py).
        sessions = self._fetch_sessions
        sessions.in_request = True
        try:
            version = header.request_api_version
            if header.request_api_key == API_VERSIONS_KEY \
                    and not is_supported(API_VERSIONS_KEY, version):  # an int: ApiKey.X is an Enum attribute lookup
                # Kafka answers any ApiVersions version: a v0 body with UNSUPPORTED_VERSION and
                # the list, so the client retries lower (librdkafka opens with v3).
                response, answer_version = api_versions.answer_api_versions(version, ADVERTISED_API_VERSIONS)
                low, high = IMPLEMENTED_VERSIONS[ApiKey.API_VERSIONS]
                self.context.refusals.refused(  # a client newer than this broker: it retries lower
                    ClientInfo.of(header.client_id, client_host), f"ApiVersions v{version}",
                    int(ErrorCode.UNSUPPORTED_VERSION), f"this broker serves ApiVersions v{low}-v{high}")
                return API_SPECS[ApiKey.API_VERSIONS].codec.encode(response, answer_version)
            row = row_for(header)  # ProtocolError: the server closes the connection
            request = row.codec.decode(body, version)
            client = client_info(header.client_id, client_host, principal)  # principal: the listener's authenticator
            if self.faults.installed:  # request faults a test installed (issue 33); otherwise this one branch
                fault = self.faults.match(row.api_key, request, header.client_id,
                                          lambda topic_id: fetch_topic_name(self.context.image(), topic_id))
                if fault is not None:
                    return start_faulted(fault, row, request, version, client,
                                         lambda served: self._serve(served, request, version, client))
            return self._serve(row, request, version, client)
        finally:
            sessions.in_request = False
            if sessions.pending_wakes:  # per request: this test alone
                sessions.run_pending()

    def _serve(self, row: ApiRow, request: Any, version: int,
               client: ClientInfo) -> list[Chunk] | None | Later[list[Chunk] | None]:
        if self.context.authorizer is not None:  # ACLs enforced; without an authorizer, this one branch
            return authorization.start_authorized(self.context, row, request, version, client, self._answer)
        if row.now is None:
            return Later(Encoding(row.handler(self.context, request, version, client), row.codec.encode, version))
        response = row.now(self.context, request, version, client)
        if isinstance(response, Later):  # the codec's encode and the version as they are: no closure per request
            return Later(Encoding(response.answer, row.codec.encode, version))
        return None if response is None else row.codec.encode(response, version)

    async def handle(self, header: RequestHeader, body: memoryview,
                     client_host: str = "", principal: str = ANONYMOUS) -> list[Chunk] | None:
        """`start` as one awaitable."""
        answer = self.start(header, body, client_host, principal)
        return await answer.answer if isinstance(answer, Later) else answer

    @staticmethod
    def _answer(row: ApiRow, pending: Awaitable[Any], version: int) -> Encoding[Any, list[Chunk]]:
        """The response `pending` will give, encoded: no coroutine of its own (broker.server.Encoding
        waits for an acks=all Produce's future with no task, and runs a handler's coroutine as
        the request's task)."""
        return Encoding(pending, row.codec.encode, version)
