"""Kafka error codes and the typed exceptions the broker raises for them.

One error type per Kafka error code, each carrying its code, so that the protocol layer
translates an exception to a response in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)


class ErrorCode(IntEnum):
    """Kafka's protocol error codes (`org.apache.kafka.common.protocol.Errors`): the one enum
    broker, controller and clients share. Names and numbers are Kafka's."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    UNKNOWN_TOPIC_ID = 100
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    FENCED_MEMBER_EPOCH = 110  # KIP-848: a heartbeat's member epoch is not the member's
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113  # KIP-848: an OffsetCommit's member epoch is behind the member's
    MISMATCHED_ENDPOINT_TYPE = 114
    INVALID_RECORD_STATE = 121  # KIP-932: an acknowledgement for a record the member has not acquired
    SHARE_SESSION_NOT_FOUND = 122  # KIP-932: a ShareFetch/ShareAcknowledge epoch > 0 with no share session
    INVALID_SHARE_SESSION_EPOCH = 123  # KIP-932: the share session's epoch is not the one expected
    FENCED_STATE_EPOCH = 124  # KIP-932: a share-state write of an older state epoch (the offsets were altered)
    DUPLICATE_VOTER = 126  # KIP-853: AddRaftVoter names a voter id already in the voter set
    VOTER_NOT_FOUND = 127  # KIP-853: RemoveRaftVoter/UpdateRaftVoter name no voter (id and directory id)
    INVALID_REGULAR_EXPRESSION = 128  # KIP-848: a heartbeat's subscribed_topic_regex does not compile

    @property
    def retriable(self) -> bool:
        """Kafka's RetriableException subclasses: a client may retry the same request."""
        return self in _RETRIABLE


_RETRIABLE: frozenset[ErrorCode] = frozenset({
    ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.NOT_CONTROLLER,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
    ErrorCode.INVALID_FETCH_SESSION_EPOCH, ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
    ErrorCode.UNSTABLE_OFFSET_COMMIT, ErrorCode.THROTTLING_QUOTA_EXCEEDED,
    ErrorCode.CONCURRENT_TRANSACTIONS,
})


@dataclass(frozen=True, slots=True)
class RecordError:
    """KIP-467: one record of a produced batch that broke a rule (its index in the batch, why)."""

    batch_index: int
    message: str

    def __str__(self) -> str:  # Kafka's RecordError.toString, which its error message lists
        return f"RecordError(batchIndex={self.batch_index}, message='{self.message}')"


class KafkaError(Exception):
    """Base of every error that maps to a Kafka error code."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR
    # Kafka's RecordValidationException: the records that made a produce fail (Produce v8+)
    record_errors: tuple[RecordError, ...] = ()


class CorruptRecordError(KafkaError):
    """A record batch failed its CRC, magic or framing checks."""

    code = ErrorCode.CORRUPT_MESSAGE


class InvalidRecordError(KafkaError):
    """A batch is well-framed but breaks a rule (count vs offsets, empty batch, ...)."""

    code = ErrorCode.INVALID_RECORD


class UnsupportedCompressionError(KafkaError):
    """A batch names a compression codec that does not exist."""

    code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


class UnsupportedMessageFormatError(KafkaError):
    """A batch with a magic other than 2: tidelog stores record batch v2 only."""

    code = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


class RecordTooLargeError(KafkaError):
    """One batch is larger than `max.message.bytes` or the segment size."""

    code = ErrorCode.MESSAGE_TOO_LARGE


class InvalidTimestampError(KafkaError):
    """A CreateTime record outside message.timestamp.before.max.ms / after.max.ms of now."""

    code = ErrorCode.INVALID_TIMESTAMP


class RecordListTooLargeError(KafkaError):
    """One append is larger than a whole segment (`segment.bytes`)."""

    code = ErrorCode.RECORD_LIST_TOO_LARGE


class OffsetsOutOfOrderError(KafkaError):
    """A replica append whose offsets do not continue the log (a replication bug)."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(KafkaError):
    """A read below the log start offset or above the log end offset."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE


class KafkaStorageError(KafkaError):
    """The log directory failed an I/O operation (full disk, read-only, corrupt file)."""

    code = ErrorCode.KAFKA_STORAGE_ERROR
