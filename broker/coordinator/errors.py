"""The one error a coordinator answers a whole request with."""

from __future__ import annotations

from common.errors import ErrorCode


class CoordinatorError(Exception):
    """This broker cannot serve the key now (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE), the key is invalid (INVALID_GROUP_ID), or a write failed
    (its error code: the append's or REQUEST_TIMED_OUT)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
