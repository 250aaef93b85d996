"""tidelog/cli_configs.py's pure parts: kafka-configs.sh's --add-config syntax and describe lines."""

from __future__ import annotations

from typing import Any

import pytest

from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from tidelog.cli_common import UsageError
from tidelog.cli_configs import alter_request, describe_lines, parse_add_config

M = messages.response_module(ApiKey.DESCRIBE_CONFIGS, 4)  # kio's, as tidelog configs describe reads them


def described(resource_type: int, name: str, configs: tuple[Any, ...]) -> Any:
    return M.DescribeConfigsResult(error_code=ErrorCode.NONE, error_message=None, resource_type=resource_type,
                                   resource_name=name, configs=configs)


def config(name: str, value: str | None, read_only: bool, source: int, sensitive: bool,
           synonyms: tuple[Any, ...]) -> Any:
    return M.DescribeConfigsResourceResult(name=name, value=value, read_only=read_only, config_source=source,
                                           is_sensitive=sensitive, synonyms=synonyms, config_type=0, documentation=None)


def synonym(name: str, value: str | None, source: int) -> Any:
    return M.DescribeConfigsSynonym(name=name, value=value, source=source)


@pytest.mark.parametrize(("items", "expected"), [
    (["a=1"], {"a": "1"}),
    (["a=1,b=2"], {"a": "1", "b": "2"}),
    (["cleanup.policy=[compact,delete],retention.ms=5"], {"cleanup.policy": "compact,delete", "retention.ms": "5"}),
    (["a=[x,y]"], {"a": "x,y"}),
    (["a=", "b=2"], {"a": "", "b": "2"}),
    (["a=1", "a=2"], {"a": "2"}),
])
def test_parse_add_config(items: list[str], expected: dict[str, str]) -> None:
    assert parse_add_config(items) == expected


@pytest.mark.parametrize("item", ["oops", "=1", "a=[x,y", "a=[x]y", "a=1,,b=2"])
def test_parse_add_config_refusals(item: str) -> None:
    with pytest.raises(UsageError, match="--add-config"):
        parse_add_config([item])


def test_alter_request_refusals() -> None:
    with pytest.raises(UsageError, match="both name a"):
        alter_request(2, "t", {"a": "1"}, ["a"])
    with pytest.raises(UsageError, match="give --add-config"):
        alter_request(2, "t", {}, [])
    request = alter_request(2, "t", {"a": "1"}, ["b"])
    assert [(c.name, c.value, c.config_operation) for c in request.resources[0].configs] == [("a", "1", 0),
                                                                                         ("b", None, 1)]


def test_describe_lines_dynamic_and_all() -> None:
    result = described(2, "t", (
        config("retention.ms", "5", False, 1, False, (
            synonym("retention.ms", "5", 1), synonym("log.retention.hours", "168", 5))),
        config("segment.bytes", "1073741824", False, 5, False, ()),
        config("min.insync.replicas", "1", False, 3, False, ()),  # the cluster default: not the topic's own
        config("secret", None, True, 4, True, ()),
    ))
    assert describe_lines("topic", "t", result, show_all=False) == [
        "Dynamic configs for topic t are:",
        "  retention.ms=5 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=5, "
        "DEFAULT_CONFIG:log.retention.hours=168}"]
    every = describe_lines("topic", "t", result, show_all=True)
    assert every[0] == "All configs for topic t are:" and len(every) == 5
    assert every[4] == "  secret=null sensitive=true synonyms={}"


def test_describe_lines_of_the_brokers_cluster_default() -> None:
    result = described(4, "", (
        config("log.retention.ms", "60000", False, 3, False, (
            synonym("log.retention.ms", "60000", 3),)),))
    assert describe_lines("broker", "", result, show_all=False) == [
        "Default configs for brokers in the cluster are:",
        "  log.retention.ms=60000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=60000}"]
