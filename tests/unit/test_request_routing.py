"""quorum.request_routing: a rule's refusal as the API's error, and what a forwarded answer says.

The routing itself (run here, forward, retry on NOT_CONTROLLER, read-your-writes, the read
gate) runs against real controllers in tests/integration/test_controller_api.py and
test_controller_failover.py."""

from __future__ import annotations

import pytest

from common.errors import ErrorCode
from quorum.controller_result import ControllerApiError
from quorum.request_routing import (
    _error_name,
    _metadata_offset,
    _source_address,
    api_error,
)


@pytest.mark.parametrize(("code", "field", "expected"), [
    (ErrorCode.INVALID_PARTITIONS, "count", ("INVALID_PARTITIONS", "count", 400)),
    (ErrorCode.INVALID_PARTITIONS, "total_count", ("INVALID_PARTITIONS", "count", 400)),  # the request's name
    (ErrorCode.INVALID_CONFIG, "retention.ms", ("INVALID_CONFIG", "configs.retention.ms", 400)),
    (ErrorCode.INVALID_CONFIG, "configs", ("INVALID_CONFIG", "configs", 400)),
    (ErrorCode.INVALID_CONFIG, None, ("INVALID_CONFIG", None, 400)),
    (ErrorCode.TOPIC_ALREADY_EXISTS, "name", ("TOPIC_ALREADY_EXISTS", "name", 409)),
    (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, ("UNKNOWN_TOPIC_OR_PARTITION", None, 404)),
])
def test_api_error(code: ErrorCode, field: str | None, expected: tuple[str, str | None, int]) -> None:
    error = api_error(ControllerApiError(code, "why", field))
    assert (error.error, error.field, error.status) == expected
    assert error.message == "why"


@pytest.mark.parametrize(("body", "error", "offset"), [
    (b'{"error": "NOT_CONTROLLER", "message": "m", "field": null}', "NOT_CONTROLLER", None),
    (b'{"name": "t", "metadata_offset": 42}', None, 42),
    (b'{"metadata_offset": "42"}', None, None),  # not a number: not an offset to wait for
    (b'{"error": 7}', None, None),
    (b"[1, 2]", None, None),
    (b"<html>502 Bad Gateway</html>", None, None),
    (b"", None, None),
])
def test_answer_fields(body: bytes, error: str | None, offset: int | None) -> None:
    assert (_error_name(body), _metadata_offset(body)) == (error, offset)


@pytest.mark.parametrize(("host", "expected"), [
    ("127.0.0.2", ("127.0.0.2", 0)), ("", None), ("0.0.0.0", None), ("::", None), ("::1", ("::1", 0)),
])
def test_source_address(host: str, expected: tuple[str, int] | None) -> None:
    assert _source_address(host) == expected
