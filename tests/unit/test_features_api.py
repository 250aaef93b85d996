"""The request and answer edges of features and ELR: the admin API's UpdateFeatures body
(quorum/feature_routes.py), `tidelog features` options and lines (tidelog/cli_features.py), and
DescribeTopicPartitions' paging (broker/handlers/topic_partitions.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from broker.handlers.topic_partitions import handle_describe_topic_partitions
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.records import Partition, Topic
from quorum.admin_api import AdminError
from quorum.feature_control import FeatureUpdate, UpgradeType
from quorum.feature_routes import parse_update_features
from tidelog.cli_common import UsageError
from tidelog.cli_features import describe_lines, parse_updates, result_lines

ELR = "eligible.leader.replicas.version"


@pytest.mark.parametrize(("body", "expected"), [
    ({"updates": [{"feature": ELR, "max_version_level": 1}]}, ([FeatureUpdate(ELR, 1)], False)),
    ({"updates": [{"feature": ELR, "max_version_level": 0, "upgrade_type": "safe_downgrade"}],
      "validate_only": True}, ([FeatureUpdate(ELR, 0, UpgradeType.SAFE_DOWNGRADE)], True)),
    ({"updates": [{"feature": ELR, "max_version_level": 0, "upgrade_type": 3}]},
     ([FeatureUpdate(ELR, 0, UpgradeType.UNSAFE_DOWNGRADE)], False)),
])
def test_update_features_bodies(body: Any, expected: Any) -> None:
    assert parse_update_features(body) == expected


@pytest.mark.parametrize(("body", "field"), [
    (None, None), ({}, "updates"), ({"updates": "x"}, "updates"), ({"updates": [], "extra": 1}, "extra"),
    ({"updates": [{"feature": "", "max_version_level": 1}]}, "updates[0].feature"),
    ({"updates": [{"feature": ELR, "max_version_level": 1.0}]}, "updates[0].max_version_level"),
    ({"updates": [{"feature": ELR, "max_version_level": 2**15}]}, "updates[0].max_version_level"),
    ({"updates": [{"feature": ELR, "max_version_level": 1, "upgrade_type": "sideways"}]}, "updates[0].upgrade_type"),
    ({"updates": [{"feature": ELR, "max_version_level": 1, "upgrade_type": True}]}, "updates[0].upgrade_type"),
    ({"updates": [{"feature": ELR, "max_version_level": 1}], "validate_only": "yes"}, "validate_only"),
    ({"updates": [{"feature": ELR, "max_version_level": 1}] * 65}, "updates"),
])
def test_bad_update_features_bodies_name_their_field(body: Any, field: str | None) -> None:
    with pytest.raises(AdminError) as refused:
        parse_update_features(body)
    assert (refused.value.error, refused.value.field) == ("INVALID_REQUEST", field)


def test_cli_options_and_lines() -> None:
    assert parse_updates("upgrade", [f"{ELR}=1", "transaction.version=2"], None) == {ELR: 1, "transaction.version": 2}
    assert parse_updates("disable", [ELR], None) == {ELR: 0}
    assert parse_updates("upgrade", [], "4.0") == {"transaction.version": 2, ELR: 0}
    for action, features, release in (("upgrade", [], None), ("upgrade", [f"{ELR}=1"], "4.1"),
                                      ("upgrade", [ELR], None), ("upgrade", [f"{ELR}=x"], None),
                                      ("downgrade", [f"{ELR}=0", f"{ELR}=0"], None), ("upgrade", [], "5.0")):
        with pytest.raises(UsageError):
            parse_updates(action, features, release)
    assert result_lines("downgrade", {ELR: 0}, dry_run=True, error=None) == [f"{ELR} can be downgraded to 0."]
    assert result_lines("disable", {ELR: 0}, dry_run=False, error="No.") == [f"Could not disable {ELR}. No."]
    assert describe_lines({"epoch": 42, "features": [
        {"feature": ELR, "supported_min_version": 0, "supported_max_version": 1, "finalized_version_level": 1},
        {"feature": "x", "supported_min_version": 0, "supported_max_version": 1, "finalized_version_level": 0}]}) == [
        f"Feature: {ELR}\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1\tEpoch: 42",
        "Feature: x\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: -\tEpoch: -"]


IDS = {"a": "dG9waWMtYWFhYWFhYWFhYWE", "b": "dG9waWMtYmJiYmJiYmJiYmI"}
IMAGE = apply(EMPTY_IMAGE, enumerate([
    Topic("a", IDS["a"]), *(Partition(IDS["a"], p, (1,), (1,), leader=1) for p in range(3)),
    Topic("b", IDS["b"]), *(Partition(IDS["b"], p, (1,), (1,), leader=1) for p in range(2))]))


def describe(names: list[str], limit: int, cursor: tuple[str, int] | None = None) -> Any:
    m = messages.request_module(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0)
    request = m.DescribeTopicPartitionsRequest(
        topics=tuple(m.TopicRequest(name=n) for n in names), response_partition_limit=limit,
        cursor=None if cursor is None else m.Cursor(topic_name=cursor[0], partition_index=cursor[1]))
    ctx = SimpleNamespace(image=lambda: IMAGE)
    answer = asyncio.run(handle_describe_topic_partitions(ctx, request, 0, None))  # type: ignore[arg-type]
    messages.encode(answer)  # every answer encodes
    return answer


def pages(answer: Any) -> tuple[list[tuple[str, list[int]]], tuple[str, int] | None]:
    cursor = answer.next_cursor
    return ([(t.name, [p.partition_index for p in t.partitions]) for t in answer.topics],
            None if cursor is None else (cursor.topic_name, cursor.partition_index))


@pytest.mark.parametrize(("names", "limit", "cursor", "expected"), [
    ([], 2000, None, ([("a", [0, 1, 2]), ("b", [0, 1])], None)),  # every topic, in name order
    ([], 2, None, ([("a", [0, 1])], ("a", 2))),
    ([], 2, ("a", 2), ([("a", [2]), ("b", [0])], ("b", 1))),
    ([], 3, None, ([("a", [0, 1, 2])], ("b", 0))),
    (["b", "a"], 2000, ("b", 1), ([("b", [1])], None)),
])
def test_describe_topic_partitions_pages(names: list[str], limit: int, cursor: Any, expected: Any) -> None:
    assert pages(describe(names, limit, cursor)) == expected


def test_describe_topic_partitions_unknown_topic() -> None:
    (known, unknown) = describe(["a", "zz"], 2000).topics
    assert (known.error_code, unknown.error_code, unknown.partitions) == (
        ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ())
    assert all(p.error_code == ErrorCode.LEADER_NOT_AVAILABLE for p in known.partitions)  # broker 1 unregistered
