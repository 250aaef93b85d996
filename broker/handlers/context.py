"""What every request handler may use, and the shape of a handler and of a dispatch row.

    async def handle_x(ctx: BrokerContext, request: XRequest, version: int,
                       client: ClientInfo) -> XResponse | None

A handler answers one decoded request with its response dataclass (None: no response, as
for Produce with acks=0); `broker.request_handler.API_TABLE` pairs it with its API key,
versions and codec. A hot API may also have a `now` form, a plain function that answers at
once or returns `broker.server.Later` (the server then needs no task for most requests). New collaborators (e.g. the group coordinator) become fields here.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from broker.applied_offset import AppliedOffsetWaiters
from broker.controller_client import ControllerClient
from broker.coordinator.location import InternalTopic
from broker.fetch_sessions import FetchSessions
from broker.group_coordinator.runtime import GroupCoordinator
from broker.leader_elections import LeaderElections
from broker.partition_reassignments import HttpPartitionReassignments
from broker.producer_ids import ProducerIdManager
from broker.refusal_log import RefusalLog
from broker.replica_manager import ReplicaManager
from broker.replica_selector import FollowerFetchStats, ReplicaSelector, replica_selector
from broker.topic_metrics import BrokerTopicStats
from broker.transaction_coordinator.coordinator import TransactionCoordinator
from broker.txn_verification import TxnVerifier
from broker.topic_admin import (
    KAFKA_TOPIC_SIZES,
    AutoTopicCreator,
    TopicAdmin,
    TopicDefaults,
)
from common.topic_partition import TopicPartition
from broker.dynamic_config import DynamicBrokerConfig
from common.config_schema import Config
from common.errors import ErrorCode, KafkaError
from common.protocol.api_keys import ApiKey
from common.protocol.dispatch import Codec
from common.topic_config import BrokerTopicDefaults
from metadata.image import MetadataImage
from security.authorizer import ANONYMOUS

log = logging.getLogger(__name__)

UNKNOWN_SERVER_ERROR: Final = int(ErrorCode.UNKNOWN_SERVER_ERROR)


@dataclass(slots=True, eq=False)
class BrokerContext:
    """One broker's collaborators, shared by its handlers (one event loop: no locking)."""

    broker_id: int
    replicas: ReplicaManager
    image: Callable[[], MetadataImage]
    advertised_listener: tuple[str, int]
    listener_name: str | None
    cluster_id: str | None
    controller_client: ControllerClient | None
    topic_admin: TopicAdmin | None
    auto_topics: AutoTopicCreator | None  # None: auto.create.topics.enable=false or no admin
    producer_ids: ProducerIdManager
    dynamic_config: DynamicBrokerConfig  # the dynamic broker configs over `config` (the one accessor)
    config: Config  # the broker's static config (server.properties)
    groups: GroupCoordinator  # consumer groups: the partitions of __consumer_offsets led here
    offsets_topic: InternalTopic  # FindCoordinator, and creating __consumer_offsets when first asked
    transactions: TransactionCoordinator  # the partitions of __transaction_state led here
    transaction_topic: InternalTopic  # FindCoordinator(TRANSACTION), creating __transaction_state
    topic_sizes: TopicDefaults = KAFKA_TOPIC_SIZES  # num.partitions / default.replication.factor
    # topic writes answer once this broker's image holds them; None: no follower (a fixed image)
    applied_offsets: AppliedOffsetWaiters | None = None
    elections: LeaderElections | None = None  # ElectLeaders, on the controllers
    reassignments: HttpPartitionReassignments | None = None  # KIP-455, on the controllers
    fetch_sessions: FetchSessions | None = None  # KIP-227; None: every fetch is sessionless
    # KIP-890 part 1: leaders verify transactional writes with the coordinator; None: they do not
    txn_verifier: TxnVerifier | None = None
    refusals: RefusalLog = field(default_factory=RefusalLog)  # why a request was refused, at INFO
    # authorizer.class.name set: ACLs enforced (broker.handlers.authorization); None: nothing checked
    authorizer: Any = None  # BrokerAuthorizer | None (typed loosely: it imports this module)
    acl_admin: Any = None  # broker.handlers.acls.HttpAclAdmin: CreateAcls/DeleteAcls to the controllers
    scram_admin: Any = None  # the same kind of client for AlterUserScramCredentials (made when first used)
    share: Any = None  # broker.share.state.ShareBroker: KIP-932 share groups (made when first used)
    # KIP-392: replica.selector.class (None: consumers read from leaders only) and its counters
    replica_selector: ReplicaSelector | None = None
    follower_fetches: FollowerFetchStats = field(default_factory=FollowerFetchStats)
    topic_stats: BrokerTopicStats = field(default_factory=BrokerTopicStats)  # per-topic bytes, for /metrics

    def __post_init__(self) -> None:
        # read once: replica.selector.class is a static config (some unit tests build a context without one)
        if self.replica_selector is None and self.config is not None:
            self.replica_selector = replica_selector(self.config.get_optional_str("replica.selector.class"))

    @property
    def topic_defaults(self) -> BrokerTopicDefaults:
        """DescribeConfigs of topics: this broker's effective defaults, dynamic ones included."""
        return self.dynamic_config.topic_defaults

    def partition_error(self, tp: TopicPartition, error: BaseException, image: MetadataImage) -> int:
        """Kafka's code for a partition-level failure; unexpected ones are logged."""
        if isinstance(error, KafkaError):
            code = int(error.code)
            if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:  # not hosted here: does it exist?
                topic = image.topic(tp.topic)
                if topic is not None and tp.partition in topic.partitions:
                    return int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return code
        log.exception("Unexpected error on %s", tp, exc_info=error)
        return UNKNOWN_SERVER_ERROR




@dataclass(frozen=True, slots=True)
class ClientInfo:
    """Who sent a request (Kafka's RequestContext): the header's client id, the peer, and the
    principal the connection authenticated as (User:ANONYMOUS until an authenticator sets it)."""

    client_id: str
    host: str  # as Kafka shows a member's host: "/127.0.0.1"
    principal: str = ANONYMOUS  # "Type:name", what ACLs name (security.authorizer)

    @classmethod
    def of(cls, client_id: str | None, peer_host: str, principal: str = ANONYMOUS) -> ClientInfo:
        return client_info(client_id, peer_host, principal)


def _client_info(client_id: str | None, peer_host: str, principal: str) -> ClientInfo:
    return ClientInfo(client_id or "", f"/{peer_host}" if peer_host else "", principal)


# A request's ClientInfo: the same few (client id, host, principal) send nearly every request,
# so one frozen instance each is kept rather than a dataclass built per request (~45 opcodes
# and a formatted host each time; a cache hit is one C call). Bounded: client ids are the
# clients' own strings.
CLIENT_INFO_CACHE_ENTRIES: Final = 1024
client_info: Final = functools.lru_cache(maxsize=CLIENT_INFO_CACHE_ENTRIES)(_client_info)


Handler = Callable[[BrokerContext, Any, int, ClientInfo], Awaitable[Any]]
# A handler that may answer without awaiting (no task per request): the response, None for no
# response, or `Later(awaitable)` when it must wait (Produce with acks=all).
NowHandler = Callable[[BrokerContext, Any, int, ClientInfo], Any]


@dataclass(frozen=True, slots=True)
class ApiRow:
    """One API the broker serves: the versions it answers (and advertises, unless
    `advertised` says otherwise), its codec and its handler."""

    api_key: ApiKey
    versions: tuple[int, int]
    codec: Codec
    handler: Handler
    advertised: tuple[int, int] | None = None
    now: NowHandler | None = None  # the same handler, answering at once when it can
    # Its handling appends (Produce): served in the connection's arrival order, as Kafka's
    # muted channel serves it, so a delay fault holds its answer rather than its serving.
    ordered_appends: bool = False

    def __post_init__(self) -> None:
        low, high = self.versions
        if not 0 <= low <= high:
            raise ValueError(f"{self.api_key.name}: bad version range {self.versions}")

    @property
    def advertised_versions(self) -> tuple[int, int]:
        return self.advertised or self.versions
