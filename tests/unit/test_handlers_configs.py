"""broker/handlers/configs.py for BROKER resources: Kafka's ConfigAdminManager checks before a change
goes to the controllers (the broker named must be this one, each resource once, null only for a
DELETE), the body the controllers get, and DescribeConfigs of this broker and of the cluster default
from the image's dynamic configs (v4, flexible)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from broker.request_handler import RequestHandler
from broker.topic_admin import AdminReply
from common.config import parse_config
from common.protocol import messages
from common.protocol import describe_configs as dc
from common.protocol.api_keys import ApiKey
from common.log_config import LogConfig
from metadata.delta import apply
from metadata.image import MetadataImage
from metadata.records import Config, ConfigResourceType
from tests.unit.test_request_handler import call

ME = 1
BROKER = int(ConfigResourceType.BROKER)
IMAGE = apply(MetadataImage(), [(0, Config(ConfigResourceType.BROKER, "", "log.retention.ms", "60000")),
                                (1, Config(ConfigResourceType.BROKER, "1", "log.segment.bytes", "4096")),
                                (2, Config(ConfigResourceType.BROKER, "2", "log.segment.bytes", "8192"))])


class BrokerConfigAdmin:
    """The controllers' admin API as far as broker configs go: records each body, accepts it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def alter_broker_configs(self, name: str, body: dict[str, Any]) -> AdminReply:
        self.calls.append((name, dict(body)))
        return AdminReply(0)


@pytest.fixture
def handler(tmp_path: Path) -> Any:
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=0)
    replicas = ReplicaManager(ME, log_manager, now_ms=lambda: 0)
    admin = BrokerConfigAdmin()
    config = parse_config({"node.id": str(ME), "process.roles": "broker", "log.segment.bytes": "100000"})
    yield RequestHandler(ME, replicas, lambda: IMAGE, ("127.0.0.1", 9092), None, topic_admin=admin,  # type: ignore[arg-type]
                         broker_config=config), admin
    log_manager.shutdown()


IAC = messages.request_module(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1)  # kio's messages
AC = messages.request_module(ApiKey.ALTER_CONFIGS, 2)


def config(name: str, value: str | None, operation: int) -> Any:
    return IAC.AlterableConfig(name=name, value=value, config_operation=operation)


def resource(resource_type: int, name: str, configs: tuple[Any, ...]) -> Any:
    return IAC.AlterConfigsResource(resource_type=resource_type, resource_name=name, configs=configs)


def incremental(*resources: Any, validate_only: bool = False) -> Any:
    return IAC.IncrementalAlterConfigsRequest(resources=resources, validate_only=validate_only)


SET_RETENTION = (config("log.retention.ms", "1000", 0),)


@pytest.mark.parametrize(("resources", "expected"), [
    ((resource(BROKER, "2", SET_RETENTION),), [(42, "Unexpected broker id, expected 1, but received 2")]),
    ((resource(BROKER, "one", SET_RETENTION),), [(42, "Node id must be an integer, but it is: one")]),
    ((resource(BROKER, "1", SET_RETENTION), resource(BROKER, "1", SET_RETENTION)),
     [(42, "Each resource must appear at most once.")] * 2),
    ((resource(BROKER, "", (config("log.retention.ms", None, 0),)),),
     [(42, "Null value not supported for : log.retention.ms")]),
    ((resource(9, "x", SET_RETENTION),), [(42, "resource type 9 has no configs to alter")]),
])
async def test_refused_before_the_controller(handler: Any, resources: tuple[Any, ...],
                                             expected: list[tuple[int, str]]) -> None:
    kafka, admin = handler
    response = await call(kafka, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, incremental(*resources),
                          messages.encode_request, messages.response_decoder(ApiKey.INCREMENTAL_ALTER_CONFIGS))
    assert [(r.error_code, r.error_message) for r in response.responses] == expected
    assert admin.calls == []


async def test_changes_go_to_the_controller_in_the_admin_api_body(handler: Any) -> None:
    kafka, admin = handler
    request = incremental(resource(BROKER, "1", SET_RETENTION + (
        config("log.cleanup.policy", "compact", 2), config("log.segment.bytes", None, 1))),
        resource(BROKER, "", SET_RETENTION), validate_only=True)
    response = await call(kafka, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, request,
                          messages.encode_request, messages.response_decoder(ApiKey.INCREMENTAL_ALTER_CONFIGS))
    assert [r.error_code for r in response.responses] == [0, 0]
    assert admin.calls == [
        ("1", {"ops": [{"name": "log.retention.ms", "op": "SET", "value": "1000"},
                       {"name": "log.cleanup.policy", "op": "APPEND", "value": "compact"},
                       {"name": "log.segment.bytes", "op": "DELETE", "value": None}], "validate_only": True}),
        ("", {"ops": [{"name": "log.retention.ms", "op": "SET", "value": "1000"}], "validate_only": True})]
    legacy = AC.AlterConfigsRequest(resources=(AC.AlterConfigsResource(resource_type=BROKER, resource_name="", configs=(
        AC.AlterableConfig(name="log.retention.ms", value="1000"),)),), validate_only=False)
    response = await call(kafka, ApiKey.ALTER_CONFIGS, 2, legacy, messages.encode_request,
                          messages.response_decoder(ApiKey.ALTER_CONFIGS))
    assert response.responses[0].error_code == 0
    assert admin.calls[-1] == ("", {"replace": {"log.retention.ms": "1000"}, "validate_only": False})


async def test_describe_this_broker_and_the_cluster_default(handler: Any) -> None:
    kafka, _ = handler
    request = dc.request(4, (BROKER, "1", ("log.segment.bytes", "log.retention.ms", "log.dirs")),
                         (BROKER, "", None), (BROKER, "2", None), include_synonyms=True)
    mine, default, other = (await call(kafka, ApiKey.DESCRIBE_CONFIGS, 4, request, dc.encode_describe_configs_request,
                                       dc.decode_describe_configs_response)).results
    assert [(c.name, c.value, c.config_source, c.read_only) for c in mine.configs] == [
        ("log.segment.bytes", "4096", 2, False), ("log.retention.ms", "60000", 3, False),
        ("log.dirs", "/tmp/kraft-combined-logs", 5, True)]
    assert [(s.name, s.value, s.source) for s in mine.configs[0].synonyms] == [
        ("log.segment.bytes", "4096", 2), ("log.segment.bytes", "100000", 4), ("log.segment.bytes", "1073741824", 5)]
    assert [(c.name, c.value, c.config_source) for c in default.configs] == [("log.retention.ms", "60000", 3)]
    assert (other.error_code, other.configs) == (42, ())
