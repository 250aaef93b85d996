"""Request validation of the controller's HTTP API: tables of bad bodies -> status, error, field.

The pure validators (`quorum.admin_api`, the RPC decoders of `quorum.broker_rpc`) are fed
bodies directly; the aiohttp shell (`quorum.controller_server`) is then served on loopback
over an in-memory log, so body limits, JSON errors, tokens and unknown routes are checked
through real HTTP: every bad input is a 4xx with a JSON error, never a 500.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgpack
import pytest

from common.config import parse_config
from common.config_schema import ConfigError
from common.prometheus import samples
from metadata.image import MetadataImage
from metadata.partition_change import Election
from metadata.records import BeginEpoch, NoOp, encode_records
from metadata.snapshot import decode_snapshot
from quorum import admin_api as api
from quorum import topic_requests as tr
from quorum.active_controller import ActiveController
from quorum.admin_api import AdminError, ApiSettings
from quorum.config_control import AlterConfigOp, AlterConfigOpType, ConfigChanges
from quorum.controller_server import ControllerServer
from quorum.log_state import MetadataLogState
from quorum.openapi import openapi_document
from quorum.quorum_settings import QuorumSettings, QuorumStatus
from localcluster.launcher import free_ports

# --- The pure validators ------------------------------------------------------------

LONG = "a" * 250
CREATE_TOPIC_BAD = [  # (body, status, error, field)
    ([], 400, "INVALID_REQUEST", None),
    ("orders", 400, "INVALID_REQUEST", None),
    (None, 400, "INVALID_REQUEST", None),
    ({}, 400, "INVALID_REQUEST", "name"),
    ({"name": "t", "partitons": 1}, 400, "INVALID_REQUEST", "partitons"),
    ({"name": 5}, 400, "INVALID_REQUEST", "name"),
    ({"name": ""}, 400, "INVALID_TOPIC_EXCEPTION", "name"),
    ({"name": "."}, 400, "INVALID_TOPIC_EXCEPTION", "name"),
    ({"name": ".."}, 400, "INVALID_TOPIC_EXCEPTION", "name"),
    ({"name": "a/b"}, 400, "INVALID_TOPIC_EXCEPTION", "name"),
    ({"name": "caf\u00e9"}, 400, "INVALID_TOPIC_EXCEPTION", "name"),
    ({"name": LONG}, 400, "INVALID_TOPIC_EXCEPTION", "name"),
    ({"name": "t", "partitions": "3"}, 400, "INVALID_REQUEST", "partitions"),
    ({"name": "t", "partitions": True}, 400, "INVALID_REQUEST", "partitions"),
    ({"name": "t", "partitions": 3.0}, 400, "INVALID_REQUEST", "partitions"),
    ({"name": "t", "partitions": None}, 400, "INVALID_REQUEST", "partitions"),
    ({"name": "t", "partitions": 0}, 400, "INVALID_PARTITIONS", "partitions"),
    ({"name": "t", "partitions": -1}, 400, "INVALID_PARTITIONS", "partitions"),
    ({"name": "t", "partitions": 10_001}, 400, "INVALID_PARTITIONS", "partitions"),
    ({"name": "t", "replication_factor": 0}, 400, "INVALID_REPLICATION_FACTOR", "replication_factor"),
    ({"name": "t", "replication_factor": -3}, 400, "INVALID_REPLICATION_FACTOR", "replication_factor"),
    ({"name": "t", "replication_factor": 2**15}, 400, "INVALID_REPLICATION_FACTOR", "replication_factor"),
    ({"name": "t", "replication_factor": "3"}, 400, "INVALID_REQUEST", "replication_factor"),
    ({"name": "t", "configs": []}, 400, "INVALID_REQUEST", "configs"),
    ({"name": "t", "configs": {"retention.ms": 5}}, 400, "INVALID_CONFIG", "configs.retention.ms"),
    ({"name": "t", "configs": {"retention.ms": None}}, 400, "INVALID_CONFIG", "configs.retention.ms"),
    ({"name": "t", "configs": {"": "x"}}, 400, "INVALID_CONFIG", "configs."),
    ({"name": "t", "configs": {"k": "v" * (api.MAX_CONFIG_VALUE_CHARS + 1)}}, 400, "INVALID_CONFIG", "configs.k"),
    ({"name": "t", "configs": {f"k{i}": "v" for i in range(api.MAX_CONFIGS_PER_REQUEST + 1)}}, 400,
     "INVALID_CONFIG", "configs"),
    ({"name": "t", "validate_only": "yes"}, 400, "INVALID_REQUEST", "validate_only"),
    ({"name": "t", "validate_only": 1}, 400, "INVALID_REQUEST", "validate_only"),
    ({"name": "t", "assignments": {"0": [1]}}, 400, "INVALID_REQUEST", "assignments"),
    ({"name": "t", "assignments": [[1, 2]]}, 400, "INVALID_REQUEST", "assignments[0]"),
    ({"name": "t", "assignments": [{"partition": 0}]}, 400, "INVALID_REQUEST", "assignments[0].replicas"),
    ({"name": "t", "assignments": [{"partition": 0, "replicas": [1], "x": 1}]}, 400, "INVALID_REQUEST",
     "assignments[0].x"),
    ({"name": "t", "assignments": [{"partition": -1, "replicas": [1]}]}, 400, "INVALID_REPLICA_ASSIGNMENT",
     "assignments[0].partition"),
    ({"name": "t", "assignments": [{"partition": 0, "replicas": "1,2"}]}, 400, "INVALID_REPLICA_ASSIGNMENT",
     "assignments[0].replicas"),
    ({"name": "t", "assignments": [{"partition": 0, "replicas": [1, "2"]}]}, 400, "INVALID_REQUEST",
     "assignments[0].replicas[1]"),
    ({"name": "t", "assignments": [{"partition": 0, "replicas": [-4]}]}, 400, "INVALID_REPLICA_ASSIGNMENT",
     "assignments[0].replicas[0]"),
    ({"name": "t", "assignments": [{"partition": 0, "replicas": [1]}], "partitions": -2}, 400,
     "INVALID_PARTITIONS", "partitions"),
]


def refusal(exc: AdminError) -> tuple[int, str, str | None]:
    return exc.status, exc.error, exc.field


@pytest.mark.parametrize(("body", "status", "error", "field"), CREATE_TOPIC_BAD)
def test_create_topic_refusals(body: Any, status: int, error: str, field: str | None) -> None:
    with pytest.raises(AdminError) as caught:
        tr.parse_create_topic(body, default_partitions=1, default_replication_factor=1)
    assert refusal(caught.value) == (status, error, field)
    assert caught.value.body() == {"error": error, "message": caught.value.message, "field": field}


def test_create_topic_defaults_and_values() -> None:
    got = tr.parse_create_topic({"name": "orders"}, default_partitions=3, default_replication_factor=2)
    assert (got.name, got.partitions, got.replication_factor, dict(got.configs)) == ("orders", 3, 2, {})
    got = tr.parse_create_topic({"name": "a.b_c-9", "partitions": 10_000, "replication_factor": 3,
                                  "configs": {"retention.ms": "1000"}},
                                 default_partitions=1, default_replication_factor=1)
    assert (got.partitions, got.replication_factor, dict(got.configs)) == (10_000, 3, {"retention.ms": "1000"})
    assert not got.validate_only and got.assignments == ()
    # manual assignments: the sizes are -1 (unset) unless given; the rule refuses given ones
    got = tr.parse_create_topic({"name": "m", "assignments": [{"partition": 1, "replicas": [5, 4]},
                                                              {"partition": 0, "replicas": [4, 4]}],
                                 "validate_only": True}, default_partitions=3, default_replication_factor=2)
    assert (got.partitions, got.replication_factor, got.validate_only) == (-1, -1, True)
    assert got.assignments == ((1, (5, 4)), (0, (4, 4)))  # order and duplicates kept for the rule
    got = tr.parse_create_topic({"name": "m", "assignments": [{"partition": 0, "replicas": [4]}], "partitions": 2},
                                default_partitions=3, default_replication_factor=2)
    assert (got.partitions, got.replication_factor) == (2, -1)
    got = tr.parse_create_topic({"name": "m", "assignments": []}, default_partitions=3, default_replication_factor=2)
    assert (got.partitions, got.replication_factor, got.assignments) == (3, 2, ())


OTHER_BAD = [  # (parser, body, status, error, field)
    (tr.parse_create_partitions, {}, 400, "INVALID_REQUEST", "count"),
    (tr.parse_create_partitions, {"count": 0}, 400, "INVALID_PARTITIONS", "count"),
    (tr.parse_create_partitions, {"count": -2}, 400, "INVALID_PARTITIONS", "count"),
    (tr.parse_create_partitions, {"count": "2"}, 400, "INVALID_REQUEST", "count"),
    (tr.parse_create_partitions, {"count": 2, "extra": 1}, 400, "INVALID_REQUEST", "extra"),
    (tr.parse_create_partitions, {"count": 2, "validate_only": "true"}, 400, "INVALID_REQUEST", "validate_only"),
    (tr.parse_create_partitions, {"count": 2, "assignments": [1, 2]}, 400, "INVALID_REPLICA_ASSIGNMENT",
     "assignments[0]"),
    (tr.parse_create_partitions, {"count": 2, "assignments": {"1": [1]}}, 400, "INVALID_REQUEST", "assignments"),
    (tr.parse_create_partitions, {"count": 2, "assignments": [[1, None]]}, 400, "INVALID_REQUEST",
     "assignments[0][1]"),
    (tr.parse_alter_configs, {}, 400, "INVALID_REQUEST", "configs"),
    (tr.parse_alter_configs, {"configs": {}}, 400, "INVALID_CONFIG", "configs"),
    (tr.parse_alter_configs, {"configs": []}, 400, "INVALID_REQUEST", "configs"),
    (tr.parse_alter_configs, {"configs": {"retention.ms": 1}}, 400, "INVALID_CONFIG", "configs.retention.ms"),
    (tr.parse_alter_configs, {"retention.ms": "1"}, 400, "INVALID_REQUEST", "retention.ms"),
    (tr.parse_alter_configs, {"configs": {"a": "1"}, "ops": []}, 400, "INVALID_REQUEST", "ops"),
    (tr.parse_alter_configs, {"ops": []}, 400, "INVALID_REQUEST", "ops"),
    (tr.parse_alter_configs, {"ops": [{"name": "a"}]}, 400, "INVALID_REQUEST", "ops[0].op"),
    (tr.parse_alter_configs, {"ops": [{"name": "a", "op": "MULTIPLY"}]}, 400, "INVALID_REQUEST", "ops[0].op"),
    (tr.parse_alter_configs, {"ops": [{"name": "a", "op": 0}]}, 400, "INVALID_REQUEST", "ops[0].op"),
    (tr.parse_alter_configs, {"ops": [{"name": 5, "op": "SET"}]}, 400, "INVALID_REQUEST", "ops[0].name"),
    (tr.parse_alter_configs, {"ops": [{"name": "a", "op": "SET", "value": 3}]}, 400, "INVALID_CONFIG",
     "ops[0].a"),
    (tr.parse_alter_configs, {"replace": {"a": None}}, 400, "INVALID_CONFIG", "replace.a"),
    (tr.parse_alter_configs, {"configs": {"a": "1"}, "validate_only": "yes"}, 400, "INVALID_REQUEST",
     "validate_only"),
    (api.parse_elections, {}, 400, "INVALID_REQUEST", "type"),
    (api.parse_elections, {"type": "sideways"}, 400, "INVALID_REQUEST", "type"),
    (api.parse_elections, {"type": "PREFERRED"}, 400, "INVALID_REQUEST", "type"),
    (api.parse_elections, {"type": "preferred", "partitions": "all"}, 400, "INVALID_REQUEST", "partitions"),
    (api.parse_elections, {"type": "preferred", "partitions": [5]}, 400, "INVALID_REQUEST", "partitions[0]"),
    (api.parse_elections, {"type": "preferred", "partitions": [{"topic": "t"}]}, 400, "INVALID_REQUEST",
     "partitions[0].partition"),
    (api.parse_elections, {"type": "unclean", "partitions": [{"topic": "t", "partition": -1}]}, 400,
     "INVALID_REQUEST", "partitions[0].partition"),
    (api.parse_elections, {"type": "unclean", "partitions": [{"topic": "t", "partition": 0, "x": 1}]}, 400,
     "INVALID_REQUEST", "partitions[0].x"),
    (api.parse_elections, {"type": "unclean", "partitions": [{"topic": "no/", "partition": 0}]}, 400,
     "INVALID_TOPIC_EXCEPTION", "partitions[0].topic"),
    (api.parse_broker_id, "abc", 400, "INVALID_REQUEST", "id"),
    (api.parse_broker_id, "-1", 400, "INVALID_REQUEST", "id"),
    (api.parse_broker_id, "2147483648", 400, "INVALID_REQUEST", "id"),
    (api.parse_broker_id, "\u0663", 400, "INVALID_REQUEST", "id"),  # a digit, but not an ASCII one
]


@pytest.mark.parametrize(("parse", "body", "status", "error", "field"), OTHER_BAD)
def test_other_refusals(parse: Any, body: Any, status: int, error: str, field: str | None) -> None:
    with pytest.raises(AdminError) as caught:
        parse(body)
    assert refusal(caught.value) == (status, error, field)


def test_good_bodies() -> None:
    assert tr.parse_create_partitions({"count": 7}) == tr.CreatePartitionsRequest(7)
    assert tr.parse_create_partitions({"count": 3, "assignments": [[4, 5], [5, 4]], "validate_only": True}) \
        == tr.CreatePartitionsRequest(3, ((4, 5), (5, 4)), True)
    assert tr.parse_create_partitions({"count": 3, "assignments": None}) == tr.CreatePartitionsRequest(3)
    assert tr.parse_alter_configs({"configs": {"a": None, "b": "1"}}) == ConfigChanges(configs={"a": None, "b": "1"})
    assert tr.parse_alter_configs({"ops": [{"name": "a", "op": "append", "value": "x"}, {"name": "b", "op": "DELETE"}],
                                   "validate_only": True}) == ConfigChanges(
        ops=(AlterConfigOp("a", AlterConfigOpType.APPEND, "x"), AlterConfigOp("b", AlterConfigOpType.DELETE)),
        validate_only=True)
    assert tr.parse_alter_configs({"replace": {}}) == ConfigChanges(replace={})
    assert api.parse_elections({"type": "preferred"}) == api.ElectionRequest(Election.PREFERRED, None)
    got = api.parse_elections({"type": "unclean", "partitions": [{"topic": "t", "partition": 1},
                                                                  {"topic": "t", "partition": 1}]})
    assert got == api.ElectionRequest(Election.UNCLEAN, (("t", 1),))  # one election per partition
    assert api.parse_broker_id("42") == 42


def test_unknown_topic_is_404() -> None:
    with pytest.raises(AdminError) as caught:
        api.known_topic(MetadataImage(), "orders")
    assert refusal(caught.value) == (404, "UNKNOWN_TOPIC_OR_PARTITION", "name")


# The broker RPC bodies' decoders are common.rpc's: tests/unit/test_rpc.py.
HEARTBEAT = {"broker_id": 1, "broker_epoch": 5, "current_metadata_offset": 9}


# --- Settings --------------------------------------------------------------------------

BASE_CONFIG = {"node.id": "2", "process.roles": "controller", "controller.cluster.password": "s",
               "controller.quorum.voters": "1@127.0.0.1:9093,2@127.0.0.2:9093,3@127.0.0.3:9093",
               "metadata.log.dir": "/nonexistent"}


def api_settings(**overrides: str) -> ApiSettings | None:
    config = parse_config({**BASE_CONFIG, **overrides})
    return ApiSettings.from_config(config, QuorumSettings.from_config(config))


def test_settings_from_config() -> None:
    assert api_settings() is None  # no controller.listener: no HTTP API
    got = api_settings(**{"controller.listener": "127.0.0.2:8080", "admin.token": "t0ken"})
    assert got is not None
    assert (got.node_id, got.host, got.port, got.token) == (2, "127.0.0.2", 8080, "t0ken")
    assert dict(got.api_voters) == {1: "127.0.0.1:8080", 2: "127.0.0.2:8080", 3: "127.0.0.3:8080"}
    assert got.quorum_ids["127.0.0.3:9093"] == 3
    assert len(got.cluster_id) == 22 and got.cluster_id == api_settings(
        **{"controller.listener": "127.0.0.2:1"}).cluster_id  # type: ignore[union-attr]
    assert (got.session_timeout_ms, got.heartbeat_interval_ms) == (9000, 2000)
    explicit = api_settings(**{"controller.listener": "127.0.0.2:8080", "cluster.id": "abc",
                               "controller.api.voters": "1@h1:1,2@h2:2,3@h3:3"})
    assert explicit is not None and explicit.cluster_id == "abc"
    assert dict(explicit.api_voters) == {1: "h1:1", 2: "127.0.0.2:8080", 3: "h3:3"}  # its own: the listener


@pytest.mark.parametrize(("overrides", "named"), [
    ({"controller.listener": "8080"}, "controller.listener"),
    ({"controller.listener": "host:99999"}, "controller.listener"),
    ({"controller.listener": "h:1", "controller.api.voters": "1@h:1,2@h:2"}, "controller.api.voters"),
    ({"controller.listener": "h:1", "controller.api.voters": "1@h:1,x"}, "controller.api.voters"),
    ({"controller.listener": "h:1", "broker.session.timeout.ms": "0"}, "broker.session.timeout.ms"),
])
def test_settings_refusals(overrides: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        api_settings(**overrides)
    assert named in str(caught.value)


# --- The HTTP shell, over an in-memory log that never leads --------------------------

TOKEN = "unit-test-token"


class FollowerLog:
    """What ControllerServer reads of a MetadataLog: an empty committed log, no leader known."""

    def __init__(self) -> None:
        self.state = MetadataLogState()

    def image(self) -> MetadataImage:
        return self.state.image

    def in_transaction(self) -> bool:
        return self.state.in_transaction

    def leadership(self) -> tuple[bool, int]:
        return False, 0

    def leader_address(self) -> str | None:
        return None

    def add_apply_listener(self, listener: Any) -> None:
        pass  # nothing is ever applied to this log after the server starts

    def remove_apply_listener(self, listener: Any) -> None:
        pass

    def fatal_error(self) -> str | None:
        return None

    def getStatus(self) -> dict[str, Any]:  # noqa: N802 - pysyncobj's name
        return {}

    def records_from(self, offset: int, max_records: int) -> list[Any]:
        return self.state.records_from(offset, max_records)

    def record_maps_from(self, offset: int, max_records: int) -> list[Any]:
        return self.state.record_maps_from(offset, max_records)

    def base_snapshot(self) -> tuple[int, bytes]:
        return self.state.log_start_offset - 1, self.state.base_snapshot

    def status(self) -> QuorumStatus:
        image = self.state.image
        return QuorumStatus(node_id=1, is_leader=False, term=0, leader=None, commit_index=0, last_applied=0,
                            ready=True, log_start_offset=self.state.log_start_offset,
                            last_offset=image.offset, dump_offset=-1, image=image)


@pytest.fixture
async def server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    monkeypatch.setattr(api, "ACTIVE_WAIT", 0.02)  # a write with no active controller gives up soon
    (port,) = free_ports(("127.0.0.1",), 1)
    settings = ApiSettings(node_id=1, host="127.0.0.1", port=port, api_voters={1: f"127.0.0.1:{port}"},
                           quorum_ids={"127.0.0.1:1": 1}, cluster_id="unit", token=TOKEN)
    log = FollowerLog()
    server = ControllerServer(log, ActiveController(log), settings)  # type: ignore[arg-type]
    await server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await server.stop()


AUTH = {"Authorization": f"Bearer {TOKEN}"}
HTTP_BAD = [  # (method, path, headers, body, status, error, field)
    ("POST", "/v1/topics", {}, b'{"name": "t"}', 401, "CLUSTER_AUTHORIZATION_FAILED", "Authorization"),
    ("POST", "/v1/topics", {"Authorization": "Bearer nope"}, b"{}", 403, "CLUSTER_AUTHORIZATION_FAILED",
     "Authorization"),
    ("DELETE", "/v1/topics/t", {"Authorization": f"Basic {TOKEN}"}, b"", 403, "CLUSTER_AUTHORIZATION_FAILED",
     "Authorization"),
    ("POST", "/v1/topics", AUTH, b"{not json", 400, "INVALID_REQUEST", None),
    ("POST", "/v1/topics", AUTH, b"", 400, "INVALID_REQUEST", None),
    ("POST", "/v1/topics", AUTH, b'{"name": "t", "partitions": NaN}', 400, "INVALID_REQUEST", None),
    ("POST", "/v1/topics", AUTH, b"\xff\xfe{}", 400, "INVALID_REQUEST", None),
    ("POST", "/v1/topics", AUTH, b"[" * 100_000, 400, "INVALID_REQUEST", None),
    ("POST", "/v1/topics", AUTH, b" " * (api.MAX_ADMIN_BODY_BYTES + 1), 413, "INVALID_REQUEST", None),
    ("POST", "/v1/topics", AUTH, b'{"name": "t", "partitions": 0}', 400, "INVALID_PARTITIONS", "partitions"),
    ("PATCH", "/v1/topics/t/configs", AUTH, b'{"configs": {"a": 1}}', 400, "INVALID_CONFIG", "configs.a"),
    ("POST", "/v1/topics/t/partitions", AUTH, b'{"count": 0}', 400, "INVALID_PARTITIONS", "count"),
    ("POST", "/v1/elections", AUTH, b'{"type": "x"}', 400, "INVALID_REQUEST", "type"),
    ("GET", "/v1/topics/nope", {}, b"", 404, "UNKNOWN_TOPIC_OR_PARTITION", "name"),
    ("GET", "/v1/topics/nope/configs", {}, b"", 404, "UNKNOWN_TOPIC_OR_PARTITION", "name"),
    ("GET", "/v1/brokers/x", {}, b"", 400, "INVALID_REQUEST", "id"),
    ("GET", "/v1/brokers/7", {}, b"", 404, "BROKER_ID_NOT_REGISTERED", "id"),
    ("GET", "/v1/nothing", {}, b"", 404, "INVALID_REQUEST", None),
    ("PUT", "/v1/topics", AUTH, b"{}", 405, "INVALID_REQUEST", None),
    # valid, but no controller is active and none is known: nothing written
    ("POST", "/v1/topics", AUTH, b'{"name": "t"}', 503, "NOT_CONTROLLER", None),
]


@pytest.mark.parametrize(("method", "path", "headers", "body", "status", "error", "field"), HTTP_BAD)
async def test_http_refusals(server: str, method: str, path: str, headers: dict[str, str], body: bytes,
                             status: int, error: str, field: str | None) -> None:
    async with aiohttp.ClientSession() as session, \
            session.request(method, server + path, data=body, headers=headers) as response:
        got = await response.json()
        assert (response.status, got["error"], got["field"]) == (status, error, field), got
        if status == 401:
            assert response.headers["WWW-Authenticate"].startswith("Bearer")


async def test_reads_on_a_follower(server: str) -> None:
    async with aiohttp.ClientSession() as session:
        for path in ("/v1/cluster", "/v1/brokers", "/v1/topics", "/openapi.json", "/metrics"):
            async with session.get(server + path) as response:
                assert response.status == 200, path
        async with session.get(server + "/v1/cluster") as response:
            cluster = await response.json()
        assert (cluster["active_controller"], cluster["is_active"], cluster["cluster_id"]) == (None, False, "unit")
        async with session.get(server + "/metrics") as response:
            assert samples(await response.text())["tidelog_controller_active_controller_count"] == 0
            assert response.content_type == "text/plain"


RPC_HTTP_BAD = [  # (rpc, body, status, error_code)
    ("broker-heartbeat", b"\xc1", 400, 42),
    ("broker-heartbeat", b"", 400, 42),
    ("broker-heartbeat", msgpack.packb({"broker_id": 1}), 400, 42),
    ("broker-registration", msgpack.packb([1, 2]), 400, 42),
    ("metadata-fetch", b"\x00" * (api.MAX_RPC_BODY_BYTES + 1), 413, 42),
    # well-formed, but this controller is not active: NOT_CONTROLLER with where to go (unknown here)
    ("broker-heartbeat", msgpack.packb(HEARTBEAT), 200, 41),
    ("allocate-producer-ids", msgpack.packb({"broker_id": 1, "broker_epoch": 0}), 200, 41),
]


@pytest.mark.parametrize(("rpc", "body", "status", "error_code"), RPC_HTTP_BAD)
async def test_rpc_http_refusals(server: str, rpc: str, body: bytes, status: int, error_code: int) -> None:
    async with aiohttp.ClientSession() as session, session.post(f"{server}/rpc/{rpc}", data=body) as response:
        reply = msgpack.unpackb(await response.read(), raw=False)
        assert (response.status, reply["error_code"]) == (status, error_code), reply


async def test_metadata_fetch_long_poll_is_bounded(server: str) -> None:
    async with aiohttp.ClientSession() as session, session.post(f"{server}/rpc/metadata-fetch", data=msgpack.packb(
            {"offset": 0, "max_wait_ms": 50})) as response:
        reply = msgpack.unpackb(await response.read(), raw=False)
    assert (reply["error_code"], reply["records"], reply["last_offset"], reply["snapshot"]) == (0, [], -1, None)


def junk(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value, biased towards the shapes the API expects."""
    choices = [None, True, -1, 0, 2**40, 1.5, "", "orders", "a/b", "x" * 300]
    if depth < 3:
        keys = ["name", "partitions", "replication_factor", "configs", "count", "type", "topic", "partition", "z"]
        choices += [[junk(rng, depth + 1) for _ in range(rng.randrange(3))],
                    {rng.choice(keys): junk(rng, depth + 1) for _ in range(rng.randrange(4))}]
    return rng.choice(choices)


async def test_no_junk_body_is_a_server_error(server: str) -> None:
    rng = random.Random(20261121)
    writes = [("POST", "/v1/topics"), ("POST", "/v1/topics/t/partitions"), ("PATCH", "/v1/topics/t/configs"),
              ("POST", "/v1/elections"), ("DELETE", "/v1/topics/t")]
    async with aiohttp.ClientSession() as session:
        for i in range(150):  # bounded; each answer is immediate or after ACTIVE_WAIT
            method, path = writes[i % len(writes)]
            body = json.dumps(junk(rng)).encode() if i % 3 else rng.randbytes(rng.randrange(64))
            async with session.request(method, server + path, data=body, headers=AUTH) as response:
                got = await response.json()
                assert 400 <= response.status < 500 or got["error"] == "NOT_CONTROLLER", (body, got)
                assert set(got) == {"error", "message", "field"}
            rpc = ["broker-heartbeat", "broker-registration", "alter-partition", "metadata-fetch"][i % 4]
            async with session.post(f"{server}/rpc/{rpc}", data=msgpack.packb(junk(rng))) as response:
                reply = msgpack.unpackb(await response.read(), raw=False)
                assert response.status in (200, 400) and reply["error_code"] in (0, 41, 42), reply


async def test_metadata_fetch_below_the_log_start_sends_a_snapshot() -> None:
    log = FollowerLog()
    log.state.apply_chunk(encode_records([BeginEpoch(1)]), 1)
    log.state.apply_chunk(encode_records([NoOp(), NoOp()]), 1)
    log.state.apply_chunk(encode_records([NoOp()]), 1)
    log.state.fold(1)  # offsets 0..2 now live only in the snapshot
    (port,) = free_ports(("127.0.0.1",), 1)
    settings = ApiSettings(node_id=1, host="127.0.0.1", port=port, api_voters={}, quorum_ids={},
                           cluster_id="unit")
    controller_server = ControllerServer(log, ActiveController(log), settings)  # type: ignore[arg-type]
    await controller_server.start()
    try:
        async with aiohttp.ClientSession() as session:
            replies = []
            for offset in (0, 3):
                async with session.post(f"http://127.0.0.1:{port}/rpc/metadata-fetch",
                                        data=msgpack.packb({"offset": offset})) as response:
                    replies.append(msgpack.unpackb(await response.read(), raw=False))
    finally:
        await controller_server.stop()
    snapshot, tail = replies
    # the fold's own bytes (offsets 0..2), never the image encoded again; the last offset says
    # the records after it are there to fetch (Kafka's FetchSnapshot, then Fetch)
    assert (snapshot["records"], snapshot["snapshot_offset"], snapshot["log_start_offset"],
            snapshot["last_offset"]) == ([], 2, 3, 3)
    assert snapshot["snapshot"] == log.state.base_snapshot
    assert decode_snapshot(snapshot["snapshot"]).offset == 2
    assert (tail["snapshot"], tail["records"], tail["last_offset"]) == (None, [[3, {"type": 20, "version": 0}]], 3)


def test_openapi_describes_every_route() -> None:
    log = FollowerLog()
    settings = ApiSettings(node_id=1, host="127.0.0.1", port=1, api_voters={}, quorum_ids={}, cluster_id="unit")
    app = ControllerServer(log, ActiveController(log), settings).app  # type: ignore[arg-type]
    routes = {(r.method.lower(), r.resource.canonical) for r in app.router.routes()
              if r.resource is not None and r.method != "HEAD"}
    document = openapi_document()
    described = {(method, path) for path, item in document["paths"].items() for method in item
                 if method != "parameters"}
    assert routes == described
    for path, item in document["paths"].items():  # every $ref resolves
        for ref in [v for v in json.dumps(item).split('"') if v.startswith("#/components/schemas/")]:
            assert ref.rsplit("/", 1)[1] in document["components"]["schemas"], (path, ref)
