"""quorum.request_routing: a rule's refusal as the API's error, and what a forwarded answer says.

A write that timed out in a busy controller's decision queue is queued again (a double of the
controller). The rest of the routing (run here, forward, retry on NOT_CONTROLLER, read-your-writes,
the read gate) runs against real controllers in tests/integration/test_controller_api.py and
test_controller_failover.py."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from common.errors import ErrorCode
from common.limits import MAX_RECORDS_PER_USER_OP
from common.units import INT_MAX
from metadata.records import Partition, Topic
from quorum import admin_api as api
from quorum.admin_api import AdminError, ApiSettings
from quorum.controller_result import ControllerApiError
from quorum.controller_runtime import QueueTimeoutError
from quorum.log_state import transaction_chunks
from quorum.metadata_log import CHUNK_COMMIT_BUDGET
from quorum.request_routing import (
    RequestRouter,
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


# --- a busy active controller: a write that timed out in the decision queue is queued again ----

class _Active:
    """An ActiveController double that is active."""

    is_active = True


def _router() -> RequestRouter:
    settings = ApiSettings(node_id=1, host="127.0.0.1", port=1, api_voters={}, quorum_ids={}, cluster_id="unit")
    return RequestRouter(None, _Active(), settings, lambda: (1, None))  # type: ignore[arg-type]


def _decisions(timeouts: int) -> tuple[list[int], Callable[[], Awaitable[web.Response]]]:
    """A `run` that times out in the queue `timeouts` times (nothing appended), then answers."""
    calls: list[int] = []

    async def run() -> web.Response:
        calls.append(1)
        if len(calls) <= timeouts:
            raise QueueTimeoutError("the decision timed out in the queue; nothing was appended")
        return web.json_response({"name": "t"}, status=201)
    return calls, run


async def test_a_write_timed_out_in_the_queue_is_queued_again() -> None:
    calls, run = _decisions(timeouts=2)
    response = await _router().write(make_mocked_request("POST", "/v1/topics"), b"{}", run)
    assert (response.status, len(calls)) == (201, 3)


async def test_queueing_again_is_bounded_by_queue_retry_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api, "QUEUE_RETRY_WAIT", 0.05)
    calls, run = _decisions(timeouts=10**9)

    async def slow_run() -> web.Response:  # each try waits in the queue a while, as the real one
        await asyncio.sleep(0.02)
        return await run()
    with pytest.raises(AdminError) as refused:
        await _router().write(make_mocked_request("POST", "/v1/topics"), b"{}", slow_run)
    assert refused.value.error == "REQUEST_TIMED_OUT" and 2 <= len(calls) <= 5


async def test_any_other_timeout_is_answered_at_once() -> None:
    # a TimeoutError that is not the queue's may follow an append: never run the write again
    calls: list[int] = []

    async def run() -> web.Response:
        calls.append(1)
        raise TimeoutError("some later wait")
    with pytest.raises(AdminError) as refused:
        await _router().write(make_mocked_request("POST", "/v1/topics"), b"{}", run)
    assert refused.value.error == "REQUEST_TIMED_OUT" and len(calls) == 1


def test_a_forwarder_waits_for_the_largest_user_operation() -> None:
    # the active controller gives a MAX_RECORDS_PER_USER_OP-partition create this long to append
    # (quorum.metadata_log.append): the forwarder must not answer 504 before it could commit
    topic_id = "x" * 22
    biggest = [Topic("t" * 249, topic_id), *(Partition(topic_id, p, (INT_MAX - 2, INT_MAX - 1, INT_MAX),
                                                       (INT_MAX - 2, INT_MAX - 1, INT_MAX), leader=INT_MAX - 2)
                                             for p in range(MAX_RECORDS_PER_USER_OP))]
    assert len(transaction_chunks(biggest)) * CHUNK_COMMIT_BUDGET <= api.USER_OP_APPEND_BUDGET
    assert api.FORWARD_TIMEOUT >= (api.ACTIVE_WAIT + api.QUEUE_RETRY_WAIT + api.WRITE_TIMEOUT
                                   + api.USER_OP_APPEND_BUDGET)
