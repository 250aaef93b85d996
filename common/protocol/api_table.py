"""One row per Kafka API tidelog serves: its versions, its messages, and the facts that
authentication and authorization hook on.

    spec = API_SPECS[ApiKey.CREATE_TOPICS]
    spec.codec.decode(body, version)           # kio's generated messages, or a hand-tuned codec
    spec.acl.operation, spec.acl.resources     # Kafka's AclOperation / ResourceType checked
    spec.forwarded, spec.before_authentication

The broker pairs each row with its handler (`broker.request_handler.API_TABLE`). A row on
kio's messages (`messages.kio_codec`) needs no codec of ours; a hand-tuned codec stays only
where bench/codecs.py shows kio costs the broker measurably (Produce and Fetch bodies,
Metadata encoding) or where kio's schemas (Kafka 4's) dropped versions Kafka 3.9 still
answers.

The ACL facts are Kafka's `KafkaApis` checks (Kafka 3.9): the operation and the resource
types it authorizes for the API, the first of them the one a client needs at least.
`forwarded` is true where a Kafka broker forwards the request to the active controller
(`maybeForwardToController`); tidelog sends those to the controller quorum's admin API.
`before_authentication` marks what a SASL connection may send before it authenticates
(Kafka's SaslServerAuthenticator: ApiVersions, SaslHandshake, SaslAuthenticate).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from common.protocol import (
    acls,
    describe_configs,
    fetch,
    metadata,
    produce,
)
from common.protocol import list_offsets, offset_commit, offset_for_leader_epoch
from common.protocol.acls import AclOperation
from common.protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from common.protocol.dispatch import Codec
from common.protocol.messages import kio_codec


class ResourceType(IntEnum):
    """Kafka's org.apache.kafka.common.resource.ResourceType codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


@dataclass(frozen=True, slots=True)
class AclCheck:
    """What Kafka authorizes for an API: `operation` on a resource of one of `resources`
    (CreateTopics: CREATE on the CLUSTER, or else on each TOPIC)."""

    operation: AclOperation
    resources: tuple[ResourceType, ...]


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """One API: versions answered, messages (codec), and its authentication facts."""

    api_key: ApiKey
    versions: tuple[int, int]
    codec: Codec
    acl: AclCheck | None  # None: Kafka authorizes nothing (ApiVersions, SASL)
    forwarded: bool = False
    before_authentication: bool = False
    generated: bool = False  # served on kio's messages, no codec of ours

    def __post_init__(self) -> None:
        low, high = self.versions
        if not 0 <= low <= high:
            raise ValueError(f"{self.api_key.name}: bad version range {self.versions}")


Op, Res = AclOperation, ResourceType
TOPIC: Final = (Res.TOPIC,)
GROUP: Final = (Res.GROUP,)
CLUSTER: Final = (Res.CLUSTER,)


def _hand(api_key: ApiKey, codec: Codec, acl: AclCheck | None, *, forwarded: bool = False,
          before_authentication: bool = False) -> ApiSpec:
    return ApiSpec(api_key, SUPPORTED_VERSIONS[api_key], codec, acl, forwarded, before_authentication)


def _kio(api_key: ApiKey, acl: AclCheck | None, *, forwarded: bool = False,
         before_authentication: bool = False) -> ApiSpec:
    return ApiSpec(api_key, SUPPORTED_VERSIONS[api_key], kio_codec(api_key), acl, forwarded,
                   before_authentication, generated=True)


def _codec(module: object, name: str) -> Codec:
    return Codec(getattr(module, f"decode_{name}_request"), getattr(module, f"encode_{name}_response"))


_SPECS: Final[tuple[ApiSpec, ...]] = (
    # hand-tuned for the broker's hot paths (bench/codecs.py)
    _hand(ApiKey.PRODUCE, _codec(produce, "produce"), AclCheck(Op.WRITE, TOPIC)),
    # Fetch: the entries without a version check of their own (RequestHandler's row_for checked it)
    _hand(ApiKey.FETCH, Codec(fetch.decode_request_in_range, fetch.encode_response_in_range),
          AclCheck(Op.READ, TOPIC)),  # followers: CLUSTER_ACTION CLUSTER
    _hand(ApiKey.METADATA, _codec(metadata, "metadata"), AclCheck(Op.DESCRIBE, TOPIC)),
    # kio's messages; the versions kio lacks by hand (ListOffsets v0, OffsetForLeaderEpoch v0-v1)
    _hand(ApiKey.LIST_OFFSETS, list_offsets.CODEC, AclCheck(Op.DESCRIBE, TOPIC)),
    _hand(ApiKey.OFFSET_FOR_LEADER_EPOCH, offset_for_leader_epoch.CODEC, AclCheck(Op.DESCRIBE, TOPIC)),
    _kio(ApiKey.API_VERSIONS, None, before_authentication=True),
    # SASL (issue 29): the SASL listener's authenticator answers them (broker/server.py, security.sasl_server)
    _kio(ApiKey.SASL_HANDSHAKE, None, before_authentication=True),
    _kio(ApiKey.SASL_AUTHENTICATE, None, before_authentication=True),
    # KIP-554: Describe from the broker's image, Alter to the controllers' admin API (Kafka forwards it)
    _kio(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, AclCheck(Op.DESCRIBE, CLUSTER)),
    _kio(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, AclCheck(Op.ALTER, CLUSTER), forwarded=True),
    _kio(ApiKey.FIND_COORDINATOR, AclCheck(Op.DESCRIBE, (Res.GROUP, Res.TRANSACTIONAL_ID))),
    _kio(ApiKey.INIT_PRODUCER_ID, AclCheck(Op.WRITE, (Res.TRANSACTIONAL_ID,))),  # idempotent: IDEMPOTENT_WRITE or any topic WRITE
    # topic admin, forwarded to the controller
    _kio(ApiKey.CREATE_TOPICS, AclCheck(Op.CREATE, (Res.CLUSTER, Res.TOPIC)), forwarded=True),
    _kio(ApiKey.DELETE_TOPICS, AclCheck(Op.DELETE, TOPIC), forwarded=True),
    _kio(ApiKey.CREATE_PARTITIONS, AclCheck(Op.ALTER, TOPIC), forwarded=True),
    # configs
    _hand(ApiKey.DESCRIBE_CONFIGS, _codec(describe_configs, "describe_configs"),  # kio's from v1; v0 by hand
          AclCheck(Op.DESCRIBE_CONFIGS, (Res.CLUSTER, Res.TOPIC))),
    _kio(ApiKey.ALTER_CONFIGS, AclCheck(Op.ALTER_CONFIGS, (Res.CLUSTER, Res.TOPIC)), forwarded=True),
    _kio(ApiKey.INCREMENTAL_ALTER_CONFIGS, AclCheck(Op.ALTER_CONFIGS, (Res.CLUSTER, Res.TOPIC)), forwarded=True),
    # storage-side admin
    _kio(ApiKey.DELETE_RECORDS, AclCheck(Op.DELETE, TOPIC)),
    _kio(ApiKey.DESCRIBE_LOG_DIRS, AclCheck(Op.DESCRIBE, CLUSTER)),
    _kio(ApiKey.ALTER_REPLICA_LOG_DIRS, AclCheck(Op.ALTER, CLUSTER)),
    _kio(ApiKey.DESCRIBE_PRODUCERS, AclCheck(Op.READ, TOPIC)),
    # consumer groups
    _kio(ApiKey.JOIN_GROUP, AclCheck(Op.READ, GROUP)),
    _kio(ApiKey.SYNC_GROUP, AclCheck(Op.READ, GROUP)),
    _kio(ApiKey.HEARTBEAT, AclCheck(Op.READ, GROUP)),
    _kio(ApiKey.LEAVE_GROUP, AclCheck(Op.READ, GROUP)),
    # kio's messages from v2; v0 and v1 by hand (offset_commit.CODEC)
    _hand(ApiKey.OFFSET_COMMIT, offset_commit.CODEC, AclCheck(Op.READ, (Res.GROUP, Res.TOPIC))),
    _kio(ApiKey.OFFSET_FETCH, AclCheck(Op.DESCRIBE, (Res.GROUP, Res.TOPIC))),  # v0 on v1's classes
    _kio(ApiKey.OFFSET_DELETE, AclCheck(Op.DELETE, (Res.GROUP,))),
    _kio(ApiKey.DESCRIBE_GROUPS, AclCheck(Op.DESCRIBE, GROUP)),
    _kio(ApiKey.LIST_GROUPS, AclCheck(Op.DESCRIBE, (Res.CLUSTER, Res.GROUP))),
    _kio(ApiKey.DELETE_GROUPS, AclCheck(Op.DELETE, GROUP)),
    # KIP-848 (issue 31): READ on the group (and DESCRIBE on the topics named), DESCRIBE to describe
    _kio(ApiKey.CONSUMER_GROUP_HEARTBEAT, AclCheck(Op.READ, (Res.GROUP, Res.TOPIC))),
    _kio(ApiKey.CONSUMER_GROUP_DESCRIBE, AclCheck(Op.DESCRIBE, GROUP)),
    # KIP-932 share groups (KafkaApis: READ on the group; ShareFetch/ShareAcknowledge also READ on each topic)
    _kio(ApiKey.SHARE_GROUP_HEARTBEAT, AclCheck(Op.READ, (Res.GROUP, Res.TOPIC))),
    _kio(ApiKey.SHARE_GROUP_DESCRIBE, AclCheck(Op.DESCRIBE, GROUP)),
    _kio(ApiKey.SHARE_FETCH, AclCheck(Op.READ, (Res.GROUP, Res.TOPIC))),
    _kio(ApiKey.SHARE_ACKNOWLEDGE, AclCheck(Op.READ, (Res.GROUP, Res.TOPIC))),
    _kio(ApiKey.READ_SHARE_GROUP_STATE, AclCheck(Op.CLUSTER_ACTION, CLUSTER)),  # brokers only
    _kio(ApiKey.WRITE_SHARE_GROUP_STATE, AclCheck(Op.CLUSTER_ACTION, CLUSTER)),
    _kio(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, AclCheck(Op.DESCRIBE, (Res.GROUP, Res.TOPIC))),
    _kio(ApiKey.ALTER_SHARE_GROUP_OFFSETS, AclCheck(Op.READ, (Res.GROUP, Res.TOPIC))),  # KafkaApis: READ both
    _kio(ApiKey.DELETE_SHARE_GROUP_OFFSETS, AclCheck(Op.DELETE, (Res.GROUP, Res.TOPIC))),
    # cluster admin
    _kio(ApiKey.DESCRIBE_CLUSTER, AclCheck(Op.DESCRIBE, CLUSTER)),
    # Kafka's brokers forward DescribeQuorum to the controller; ours ask the active one over its
    # describe-quorum RPC (broker/handlers/describe_quorum.py), not through the admin-API forwarding
    _kio(ApiKey.DESCRIBE_QUORUM, AclCheck(Op.DESCRIBE, CLUSTER)),
    # Kafka forwards UpdateFeatures too; ours asks the active controller's update-features RPC
    # (broker/handlers/features.py), as DescribeQuorum
    _kio(ApiKey.UPDATE_FEATURES, AclCheck(Op.ALTER, CLUSTER)),
    # KIP-853, as DescribeQuorum: the active controller's voter RPCs (broker/handlers/raft_voters.py);
    # Kafka's ACLs: ALTER on the CLUSTER to add or remove a voter, CLUSTER_ACTION for a voter's update
    _kio(ApiKey.ADD_RAFT_VOTER, AclCheck(Op.ALTER, CLUSTER)),
    _kio(ApiKey.REMOVE_RAFT_VOTER, AclCheck(Op.ALTER, CLUSTER)),
    _kio(ApiKey.UPDATE_RAFT_VOTER, AclCheck(Op.CLUSTER_ACTION, CLUSTER)),
    _kio(ApiKey.DESCRIBE_TOPIC_PARTITIONS, AclCheck(Op.DESCRIBE, TOPIC)),  # from the broker's image
    _kio(ApiKey.ELECT_LEADERS, AclCheck(Op.ALTER, CLUSTER), forwarded=True),
    _kio(ApiKey.ALTER_PARTITION_REASSIGNMENTS, AclCheck(Op.ALTER, CLUSTER), forwarded=True),
    _kio(ApiKey.LIST_PARTITION_REASSIGNMENTS, AclCheck(Op.DESCRIBE, CLUSTER), forwarded=True),
    # ACLs
    # ACLs: kio's messages from v1, v0 by hand (acls.codec)
    _hand(ApiKey.DESCRIBE_ACLS, acls.codec(ApiKey.DESCRIBE_ACLS), AclCheck(Op.DESCRIBE, CLUSTER)),
    _hand(ApiKey.CREATE_ACLS, acls.codec(ApiKey.CREATE_ACLS), AclCheck(Op.ALTER, CLUSTER), forwarded=True),
    _hand(ApiKey.DELETE_ACLS, acls.codec(ApiKey.DELETE_ACLS), AclCheck(Op.ALTER, CLUSTER), forwarded=True),
    # transactions (Kafka's KafkaApis checks): WRITE on the TRANSACTIONAL_ID, and for
    # AddPartitionsToTxn WRITE on each TOPIC, for AddOffsetsToTxn READ on the GROUP; the v4+
    # broker form of AddPartitionsToTxn needs CLUSTER_ACTION on the CLUSTER
    _kio(ApiKey.ADD_PARTITIONS_TO_TXN, AclCheck(Op.WRITE, (Res.TRANSACTIONAL_ID, Res.TOPIC))),
    _kio(ApiKey.ADD_OFFSETS_TO_TXN, AclCheck(Op.WRITE, (Res.TRANSACTIONAL_ID, Res.GROUP))),
    _kio(ApiKey.END_TXN, AclCheck(Op.WRITE, (Res.TRANSACTIONAL_ID,))),
    # TxnOffsetCommit: WRITE on the TRANSACTIONAL_ID, then READ on the GROUP and each TOPIC
    _kio(ApiKey.TXN_OFFSET_COMMIT, AclCheck(Op.WRITE, (Res.TRANSACTIONAL_ID, Res.GROUP, Res.TOPIC))),
    _kio(ApiKey.DESCRIBE_TRANSACTIONS, AclCheck(Op.DESCRIBE, (Res.TRANSACTIONAL_ID,))),
    _kio(ApiKey.LIST_TRANSACTIONS, AclCheck(Op.DESCRIBE, (Res.TRANSACTIONAL_ID,))),
    # WriteTxnMarkers: brokers only (Kafka: CLUSTER_ACTION on the CLUSTER)
    _kio(ApiKey.WRITE_TXN_MARKERS, AclCheck(Op.CLUSTER_ACTION, CLUSTER)),
)
API_SPECS: Final[Mapping[ApiKey, ApiSpec]] = {spec.api_key: spec for spec in _SPECS}
if len(API_SPECS) != len(_SPECS):
    raise AssertionError("api_table lists an API twice")
if set(API_SPECS) != set(SUPPORTED_VERSIONS):
    raise AssertionError(f"api_table and SUPPORTED_VERSIONS differ: {set(API_SPECS) ^ set(SUPPORTED_VERSIONS)}")
