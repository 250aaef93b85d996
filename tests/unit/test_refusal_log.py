"""broker/refusal_log.py: a refusal class is logged once per client and reason, then at most
once per interval with a count of those left out; memory stays bounded. A fake clock, no sleeps."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from broker.handlers.context import ClientInfo
from broker.refusal_log import (
    MAX_REASON_CHARS,
    RefusalKey,
    RefusalLimiter,
    RefusalLog,
    describe_refusal,
)
from common.errors import ErrorCode

INTERVAL = 60_000
TXN = RefusalKey("rdkafka", "FindCoordinator(TRANSACTION)", int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                 "transactions are not supported by tidelog")
OTHER_CLIENT = RefusalKey("quixstreams", TXN.api, TXN.error, TXN.reason)
OTHER_REASON = RefusalKey("rdkafka", "AlterConfigs", int(ErrorCode.INVALID_CONFIG), "Unknown broker config 'x'")

# (refusals as (key, now_ms), what admit answers for each: None = left out, n = logged, n left out)
SEQUENCES = [
    pytest.param([(TXN, 0)], [0], id="first-is-logged"),
    pytest.param([(TXN, 0), (TXN, 1), (TXN, INTERVAL - 1)], [0, None, None], id="repeats-left-out"),
    pytest.param([(TXN, 0), (TXN, 1), (TXN, 2), (TXN, INTERVAL)], [0, None, None, 2], id="after-interval-counts"),
    pytest.param([(TXN, 0), (TXN, INTERVAL), (TXN, INTERVAL + 1), (TXN, 2 * INTERVAL)], [0, 0, None, 1],
                 id="interval-from-last-line"),
    pytest.param([(TXN, 0), (OTHER_CLIENT, 1), (OTHER_REASON, 2), (TXN, 3)], [0, 0, 0, None],
                 id="per-client-and-reason"),
]


@pytest.mark.parametrize(("refusals", "expected"), SEQUENCES)
def test_admit(refusals: list[tuple[RefusalKey, int]], expected: list[int | None]) -> None:
    limiter = RefusalLimiter(interval_ms=INTERVAL)
    assert [limiter.admit(key, now) for key, now in refusals] == expected


def test_memory_is_bounded_and_a_forgotten_key_is_logged_again() -> None:
    limiter = RefusalLimiter(interval_ms=INTERVAL, max_tracked=2)
    assert limiter.admit(TXN, 0) == 0
    assert limiter.admit(OTHER_CLIENT, 1) == 0
    assert limiter.admit(TXN, 2) is None  # TXN is now the most recent
    assert limiter.admit(OTHER_REASON, 3) == 0  # evicts OTHER_CLIENT, the least recent
    assert len(limiter) == 2
    assert limiter.admit(TXN, 4) is None
    assert limiter.admit(OTHER_CLIENT, 5) == 0


@pytest.mark.parametrize(("interval", "tracked"), [(-1, 10), (10, 0)])
def test_bad_limits_are_refused(interval: int, tracked: int) -> None:
    with pytest.raises(ValueError):
        RefusalLimiter(interval_ms=interval, max_tracked=tracked)


def test_the_line_names_client_api_error_and_reason() -> None:
    assert describe_refusal(TXN, "/127.0.0.1", 0, INTERVAL) == (
        "Refused FindCoordinator(TRANSACTION) from client 'rdkafka' at /127.0.0.1: "
        "COORDINATOR_NOT_AVAILABLE: transactions are not supported by tidelog")
    assert describe_refusal(TXN, "", 7, INTERVAL).endswith(
        "tidelog (7 more since the last such line, logged once per 60 s)")
    long = RefusalKey("c", "CreateTopics", 999, "x" * 1000)
    line = describe_refusal(long, "", 0, INTERVAL)
    assert "error 999: " in line and line.endswith("x" * MAX_REASON_CHARS + "...")


def test_the_shell_logs_at_info_on_its_clock(caplog: pytest.LogCaptureFixture) -> None:
    clock = [1_000]
    refusals = RefusalLog(RefusalLimiter(interval_ms=INTERVAL), clock_ms=lambda: clock[0])
    client = ClientInfo.of("rdkafka", "127.0.0.1")
    with caplog.at_level(logging.INFO, logger="broker.refusal_log"):
        for _ in range(3):
            refusals.refused(client, TXN.api, TXN.error, TXN.reason)
        refusals.refused(client, "DescribeAcls", 0, None)  # not a refusal
        clock[0] += INTERVAL
        refusals.refused(client, TXN.api, TXN.error, TXN.reason)
    lines = [r.getMessage() for r in caplog.records]
    assert [r.levelno for r in caplog.records] == [logging.INFO, logging.INFO]
    assert lines[0] == describe_refusal(TXN, "/127.0.0.1", 0, INTERVAL)
    assert "(2 more since the last such line" in lines[1]


# ---- wired into the handlers (the request handler of tests.unit.test_request_handler) --------

from broker.handlers.acls import handle_create_acls, handle_describe_acls  # noqa: E402
from broker.handlers.transactions import handle_init_producer_id  # noqa: E402
from common.protocol import acls  # noqa: E402
from common.protocol.api_keys import ApiKey  # noqa: E402
from common.protocol import messages  # noqa: E402
from tests.unit.test_request_handler import call, node  # noqa: E402, F401 - the fixture

ACL_FILTER = acls.describe_request(1, (2, "t", None, "*", 3, 1, 3))
ACL = (2, "t", "User:a", "*", 3, 3, 3)
CLIENT = ClientInfo.of("app-1", "127.0.0.1")
INIT_TOO_LONG = messages.build(messages.request_type(ApiKey.INIT_PRODUCER_ID, 4), transactional_id="tx-1",
                               transaction_timeout=timedelta(milliseconds=3_600_000), producer_id=-1,
                               producer_epoch=-1)  # above transaction.max.timeout.ms


async def test_refusing_handlers_log_why_once_per_client(node, caplog):  # noqa: F811
    handler, _, _ = node
    ctx = handler.context
    with caplog.at_level(logging.INFO, logger="broker.refusal_log"):
        for _ in range(2):  # the second of each is left out
            await handle_describe_acls(ctx, ACL_FILTER, 1, CLIENT)
            await handle_create_acls(ctx, acls.create_request(1, ACL), 1, CLIENT)
            await handle_init_producer_id(ctx, INIT_TOO_LONG, 4, CLIENT)
            await call(handler, ApiKey.API_VERSIONS, 99, None, lambda r, v: [])
    lines = [r.getMessage() for r in caplog.records if r.name == "broker.refusal_log"]
    assert lines == [
        "Refused DescribeAcls from client 'app-1' at /127.0.0.1: SECURITY_DISABLED: "
        "No Authorizer is configured on the broker",
        "Refused CreateAcls from client 'app-1' at /127.0.0.1: SECURITY_DISABLED: No Authorizer is configured.",
        "Refused InitProducerId from client 'app-1' at /127.0.0.1: INVALID_TRANSACTION_TIMEOUT: "
        "transaction timeout 3600000 ms is not in 1..900000 (transaction.max.timeout.ms)",
        "Refused ApiVersions v99 from client 'test': UNSUPPORTED_VERSION: this broker serves ApiVersions v0-v4",
    ]
