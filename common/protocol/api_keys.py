"""Kafka API keys, the version ranges tidelog answers, and which versions are flexible.

The ranges started as design.md's measured set (the newest non-flexible versions that
librdkafka, kafka-python, aiokafka and kcat all accept); APIs move to Kafka 3.9's ranges,
flexible versions included, as their codecs implement every field.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from types import MappingProxyType
from typing import Final

from common.protocol.primitives import ProtocolError, Reader, Writer


class ApiKey(IntEnum):
    """Kafka request API keys (the ones tidelog knows about)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    CREATE_PARTITIONS = 37
    SASL_AUTHENTICATE = 36
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55
    UPDATE_FEATURES = 57
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81
    UPDATE_RAFT_VOTER = 82
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


API_VERSIONS_KEY: Final = int(ApiKey.API_VERSIONS)  # an int compares with an int in C, an IntEnum member not

# (min, max) version answered per API, inclusive.
SUPPORTED_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.API_VERSIONS: (0, 4),
    # SASL (issue 29): served by the listener's authenticator (security.sasl_server) before authentication
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    # KIP-554 (issue 29): SCRAM credentials in the metadata log
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.METADATA: (0, 12),
    ApiKey.PRODUCE: (3, 12),  # v12: a transactions v2 client's (KIP-890 part 2: the leader adds the partition)
    ApiKey.FETCH: (4, 17),
    ApiKey.LIST_OFFSETS: (0, 9),
    ApiKey.FIND_COORDINATOR: (0, 5),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.OFFSET_COMMIT: (0, 9),
    ApiKey.OFFSET_FETCH: (0, 9),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.DESCRIBE_CONFIGS: (0, 4),  # Kafka 3.9's, flexible from v4 (issue 18)
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 4),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.DELETE_GROUPS: (0, 2),
    # KIP-848 (issue 31): v1 is Kafka 4's (the consumer names itself; ConsumerGroupDescribe's member_type)
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    # KIP-932 share groups (issue 31): v1 is Kafka 4.1's, the first GA version (v0 was early access)
    ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1),
    ApiKey.SHARE_GROUP_DESCRIBE: (1, 1),
    ApiKey.SHARE_FETCH: (1, 1),
    ApiKey.SHARE_ACKNOWLEDGE: (1, 1),
    # broker to broker: a share partition's leader and the share group's coordinator
    ApiKey.READ_SHARE_GROUP_STATE: (0, 0),
    ApiKey.WRITE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 1),  # v1 adds each share partition's lag (KIP-1226)
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.OFFSET_DELETE: (0, 0),  # never flexible
    # Kafka 3.9's ranges, flexible where Kafka's are (issue 18)
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (0, 4),
    ApiKey.ALTER_REPLICA_LOG_DIRS: (1, 2),  # Kafka 3.9 and 4.x: v0 was removed in 4.0 (KIP-896)
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_ACLS: (0, 3),
    ApiKey.CREATE_ACLS: (0, 3),
    ApiKey.DELETE_ACLS: (0, 3),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    ApiKey.DESCRIBE_QUORUM: (0, 2),  # issue 28: asked of the active controller through the broker
    ApiKey.UPDATE_FEATURES: (0, 2),  # issue 28: KIP-584, Kafka 4's range (v2: one top-level error)
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0),  # issue 28: KIP-966's ELR fields
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),  # v1 (KIP-1101, Kafka 4.0) is not 3.9's
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    # the transaction coordinator (issue 27): Kafka 4's ranges; EndTxn v5 and AddPartitionsToTxn v5
    # are transactions v2's (KIP-890 part 2, `transaction.version` 2 in ApiVersions' features).
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),  # v4+: the batched broker form (KIP-890 part 1)
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 5),
    ApiKey.TXN_OFFSET_COMMIT: (0, 5),  # the group coordinator's part (v3+: KIP-447's member checks; v5: transactions v2)
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),  # v1: KIP-994's duration filter
    # KIP-853 (issue 28): asked of the active controller through the broker; Kafka 4's ranges
    ApiKey.ADD_RAFT_VOTER: (0, 1),
    ApiKey.REMOVE_RAFT_VOTER: (0, 0),
    ApiKey.UPDATE_RAFT_VOTER: (0, 0),
    ApiKey.WRITE_TXN_MARKERS: (1, 1),  # coordinator -> leaders (broker/handlers/txn_markers.py); v0 removed in Kafka 4 (KIP-896), as in kio
}

# First flexible version per API (Kafka's "flexibleVersions" in its message JSON): the
# request and response header versions and the codecs' Reader/Writer (`reader_for`,
# `writer_for`) follow from it.
FIRST_FLEXIBLE_VERSION: dict[int, int] = {
    ApiKey.PRODUCE: 9,
    ApiKey.FETCH: 12,
    ApiKey.LIST_OFFSETS: 6,
    ApiKey.METADATA: 9,
    ApiKey.OFFSET_COMMIT: 8,
    ApiKey.OFFSET_FETCH: 6,
    ApiKey.FIND_COORDINATOR: 3,
    ApiKey.JOIN_GROUP: 6,
    ApiKey.HEARTBEAT: 4,
    ApiKey.LEAVE_GROUP: 4,
    ApiKey.SYNC_GROUP: 4,
    ApiKey.API_VERSIONS: 3,
    ApiKey.SASL_AUTHENTICATE: 2,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.CREATE_TOPICS: 5,
    ApiKey.DELETE_TOPICS: 4,
    ApiKey.INIT_PRODUCER_ID: 2,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: 4,
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.ALTER_CONFIGS: 2,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
    ApiKey.CREATE_PARTITIONS: 2,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.LIST_GROUPS: 3,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: 0,
    ApiKey.CONSUMER_GROUP_DESCRIBE: 0,
    ApiKey.SHARE_GROUP_HEARTBEAT: 0,
    ApiKey.SHARE_GROUP_DESCRIBE: 0,
    ApiKey.SHARE_FETCH: 0,
    ApiKey.SHARE_ACKNOWLEDGE: 0,
    ApiKey.READ_SHARE_GROUP_STATE: 0,
    ApiKey.WRITE_SHARE_GROUP_STATE: 0,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: 0,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: 0,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: 0,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.DELETE_RECORDS: 2,
    ApiKey.DESCRIBE_LOG_DIRS: 2,
    ApiKey.ALTER_REPLICA_LOG_DIRS: 2,
    ApiKey.DESCRIBE_PRODUCERS: 0,
    ApiKey.DESCRIBE_ACLS: 2,
    ApiKey.CREATE_ACLS: 2,
    ApiKey.DELETE_ACLS: 2,
    ApiKey.ELECT_LEADERS: 2,
    ApiKey.DESCRIBE_CLUSTER: 0,
    ApiKey.DESCRIBE_QUORUM: 0,
    ApiKey.UPDATE_FEATURES: 0,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: 0,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 0,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: 0,
    ApiKey.ADD_PARTITIONS_TO_TXN: 3,
    ApiKey.ADD_OFFSETS_TO_TXN: 3,
    ApiKey.END_TXN: 3,
    ApiKey.TXN_OFFSET_COMMIT: 3,
    ApiKey.WRITE_TXN_MARKERS: 1,  # Kafka 4 dropped v0; the coordinator sends v1
    ApiKey.DESCRIBE_TRANSACTIONS: 0,
    ApiKey.LIST_TRANSACTIONS: 0,
    ApiKey.ADD_RAFT_VOTER: 0,
    ApiKey.REMOVE_RAFT_VOTER: 0,
    ApiKey.UPDATE_RAFT_VOTER: 0,
}


# Every request asks these (each codec's check_version, the header parse, the response
# framing): a plain int finds its IntEnum key in the dicts above as it is (an IntEnum hashes
# and compares as its int), with no ApiKey(api_key) call (an Enum lookup, ~36 opcodes).
NEVER_FLEXIBLE: Final = 1 << 15  # past every int16 version: an API with no flexible version


def is_supported(api_key: int, api_version: int) -> bool:
    """True when tidelog answers this API at this version."""
    versions = SUPPORTED_VERSIONS.get(api_key)  # type: ignore[call-overload]  # an int finds its ApiKey
    return versions is not None and versions[0] <= api_version <= versions[1]


def is_flexible(api_key: int, api_version: int) -> bool:
    """True when the request uses header v2 (tagged fields); unknown APIs count as classic."""
    return api_version >= FIRST_FLEXIBLE_VERSION.get(api_key, NEVER_FLEXIBLE)


def request_header_version(api_key: int, api_version: int) -> int:
    """1 for classic requests, 2 for flexible ones (ControlledShutdown v0's header 0 is moot)."""
    return 2 if is_flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """0 for classic responses, 1 for flexible ones, except ApiVersions: always 0, so a
    client that does not know the broker's versions yet can still read the answer."""
    return 1 if api_version >= FIRST_FLEXIBLE_RESPONSE.get(api_key, NEVER_FLEXIBLE) else 0


# The first version whose response has header v1 (`response_header_version`), as one lookup:
# every answer's framing asks (common.protocol.frame.response_head)
FIRST_FLEXIBLE_RESPONSE: Final[Mapping[int, int]] = MappingProxyType(
    {key: version for key, version in FIRST_FLEXIBLE_VERSION.items() if key != API_VERSIONS_KEY})


def reader_for(api_key: ApiKey, api_version: int, body: bytes | bytearray | memoryview) -> Reader:
    """A Reader over a request or response body, compact when this version is flexible."""
    return Reader(body, flexible=is_flexible(api_key, api_version))


def writer_for(api_key: ApiKey, api_version: int) -> Writer:
    """A Writer for a body, compact when this version is flexible."""
    return Writer(flexible=is_flexible(api_key, api_version))


def check_version(api_key: ApiKey, api_version: int) -> None:
    """Raise ProtocolError unless tidelog has a codec for this API at this version."""
    if not is_supported(api_key, api_version):
        raise ProtocolError(f"{api_key.name} v{api_version} is not supported")
