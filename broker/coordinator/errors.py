"""The one error a coordinator answers a whole request with, and how a failed append reads to a client."""

from __future__ import annotations

from typing import Final

from common.errors import ErrorCode

E = ErrorCode


class CoordinatorError(Exception):
    """This broker cannot serve the key now (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE), the key is invalid (INVALID_GROUP_ID), or a write failed
    (its error code: the append's or REQUEST_TIMED_OUT)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


# A coordinator's failed append as its clients understand it: Kafka's GroupMetadataManager and
# TransactionStateManager.appendTransactionToLog map the log's errors the same way.
APPEND_ERRORS: Final[dict[int, ErrorCode]] = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.REQUEST_TIMED_OUT: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
}


def client_error(code: ErrorCode) -> ErrorCode:
    """The error a coordinator answers for an append that failed with `code`."""
    return APPEND_ERRORS.get(int(code), code)
