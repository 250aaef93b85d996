"""quorum/transaction_api.py: the transaction endpoints' refusals (each naming its field), their
parsers as tables, and the JSON views; served by a real ControllerServer on a follower log
(no brokers: a call that needs one answers 503)."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from common import transaction_admin as ta
from common.topic_partition import TopicPartition
from quorum import transaction_api as tapi
from quorum.admin_api import AdminError
from quorum.openapi import openapi_document
from tests.unit.test_admin_api_validation import AUTH, server  # noqa: F401 - the fixture

TP = TopicPartition("orders", 2)


class Query(dict[str, str]):
    """What aiohttp's request.query offers the parsers: get() and iteration."""


@pytest.mark.parametrize(("query", "expected"), [
    ({"topic": "orders"}, {"topic": "orders", "partition": None, "broker_id": None,
                           "max_transaction_timeout_ms": 15 * 60_000}),
    ({"topic": "orders", "partition": "1", "max_transaction_timeout": "0"},
     {"topic": "orders", "partition": 1, "broker_id": None, "max_transaction_timeout_ms": 0}),
    ({"broker_id": "3"}, {"topic": None, "partition": None, "broker_id": 3, "max_transaction_timeout_ms": 900_000}),
])
def test_hanging_parameters(query: dict[str, str], expected: dict[str, Any]) -> None:
    assert tapi.parse_hanging(Query(query)) == expected


@pytest.mark.parametrize(("query", "field"), [
    ({}, "topic"),                                        # Kafka: --topic or --broker-id is required
    ({"partition": "0", "broker_id": "1"}, "partition"),  # --partition needs --topic
    ({"broker_id": "x"}, "broker_id"),
    ({"broker_id": "-1"}, "broker_id"),
    ({"topic": "orders", "max_transaction_timeout": "-5"}, "max_transaction_timeout"),
    ({"topic": "orders", "max_transaction_timeout": "99999999"}, "max_transaction_timeout"),
    ({"topic": "bad/name"}, "topic"),
    ({"topic": "orders", "since": "1"}, "since"),
])
def test_hanging_refusals_name_the_parameter(query: dict[str, str], field: str) -> None:
    with pytest.raises(AdminError) as e:
        tapi.parse_hanging(Query(query))
    assert (e.value.status, e.value.field) == (400, field)


@pytest.mark.parametrize(("body", "expected"), [
    ({"start_offset": 120}, 120),
    ({"producer_id": 4000, "producer_epoch": 3, "coordinator_epoch": -1}, ta.AbortSpec(TP, 4000, 3, 0)),
    ({"producer_id": 4000, "producer_epoch": 3, "coordinator_epoch": 9}, ta.AbortSpec(TP, 4000, 3, 9)),
])
def test_abort_bodies(body: dict[str, Any], expected: object) -> None:
    assert tapi.parse_abort(body, TP) == expected


@pytest.mark.parametrize(("body", "field"), [
    ({}, "start_offset"),
    ({"start_offset": -1}, "start_offset"),
    ({"start_offset": "1"}, "start_offset"),
    ({"start_offset": 1, "producer_id": 2}, "producer_id"),
    ({"producer_id": 2, "producer_epoch": 0}, "coordinator_epoch"),
    ({"producer_id": 2, "producer_epoch": 40000, "coordinator_epoch": 0}, "producer_epoch"),
    ({"offset": 1}, "offset"),
    ([], None),
])
def test_abort_refusals_name_the_field(body: Any, field: str | None) -> None:
    with pytest.raises(AdminError) as e:
        tapi.parse_abort(body, TP)
    assert (e.value.status, e.value.field) == (400, field)


def test_json_views() -> None:
    d = ta.TransactionDescription(2, "app", 4000, 1, "Ongoing", 60_000, 1_000, (TP,))
    assert tapi.description_json(d, 4_000) == {
        "coordinator_id": 2, "transactional_id": "app", "producer_id": 4000, "producer_epoch": 1, "state": "Ongoing",
        "transaction_timeout_ms": 60_000, "transaction_start_time_ms": 1_000, "transaction_duration_ms": 3_000,
        "partitions": [{"topic": "orders", "partition": 2}]}
    p = ta.ProducerState(4000, 1, 5, 1_000, None, 77)
    assert tapi.hanging_json(ta.OpenTransaction(TP, p), 1_000 + 20 * 60_000) == {
        "topic": "orders", "partition": 2, "producer_id": 4000, "producer_epoch": 1, "coordinator_epoch": None,
        "last_sequence": 5, "last_timestamp": 1_000, "current_transaction_start_offset": 77, "duration_minutes": 20}


def test_every_route_is_in_the_openapi_document() -> None:
    paths = openapi_document()["paths"]
    for route in tapi.TransactionApi(lambda: None, lambda r: None).routes():  # type: ignore[arg-type,return-value]
        assert route.method.lower() in paths[route.path], route.path


HTTP_BAD = [  # (method, path, headers, body, status, error, field)
    ("GET", "/v1/hanging-transactions", {}, b"", 400, "INVALID_REQUEST", "topic"),
    ("GET", "/v1/hanging-transactions?broker_id=1&partition=0", {}, b"", 400, "INVALID_REQUEST", "partition"),
    ("GET", "/v1/hanging-transactions?topic=nope", {}, b"", 404, "UNKNOWN_TOPIC_OR_PARTITION", "topic"),
    ("GET", "/v1/topics/nope/partitions/0/producers", {}, b"", 404, "UNKNOWN_TOPIC_OR_PARTITION", "name"),
    ("POST", "/v1/topics/nope/partitions/0/abort-transaction", {}, b'{"start_offset": 1}', 401,
     "CLUSTER_AUTHORIZATION_FAILED", "Authorization"),
    ("POST", "/v1/topics/nope/partitions/0/abort-transaction", AUTH, b'{"start_offset": 1}', 404,
     "UNKNOWN_TOPIC_OR_PARTITION", "name"),
    ("GET", "/v1/transactions?state=Ongoing", {}, b"", 400, "INVALID_REQUEST", "state"),
    ("GET", "/v1/transactions?duration_filter=soon", {}, b"", 400, "INVALID_REQUEST", "duration_filter"),
    # no broker is registered: nobody to ask
    ("GET", "/v1/transactions/app-1", {}, b"", 503, "BROKER_NOT_AVAILABLE", None),
]


@pytest.mark.parametrize(("method", "path", "headers", "body", "status", "error", "field"), HTTP_BAD)
async def test_http_refusals(server: str, method: str, path: str, headers: dict[str, str],  # noqa: F811
                             body: bytes, status: int, error: str, field: str | None) -> None:
    async with aiohttp.ClientSession() as session, \
            session.request(method, server + path, data=body, headers=headers) as response:
        got = await response.json()
        assert (response.status, got["error"], got["field"]) == (status, error, field), got


async def test_list_with_no_brokers_is_empty(server: str) -> None:  # noqa: F811
    async with aiohttp.ClientSession() as session, session.get(server + "/v1/transactions") as response:
        assert (response.status, await response.json()) == (200, [])
