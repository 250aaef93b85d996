"""Kafka error codes and the typed exceptions the broker raises for them.

One error type per Kafka error code, each carrying its code, so that the protocol layer
translates an exception to a response in one place.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """Kafka protocol error codes (the subset tidelog produces)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    TOPIC_AUTHORIZATION_FAILED = 29
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_PRODUCER_EPOCH = 47
    KAFKA_STORAGE_ERROR = 56
    UNKNOWN_PRODUCER_ID = 59
    FETCH_SESSION_ID_NOT_FOUND = 70
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    OFFSET_NOT_AVAILABLE = 78
    INVALID_RECORD = 87
    INELIGIBLE_REPLICA = 107

class KafkaError(Exception):
    """Base of every error that maps to a Kafka error code."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR


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
