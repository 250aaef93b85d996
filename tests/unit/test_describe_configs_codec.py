"""common/protocol/describe_configs.py at the versions the classic table does not cover: v0
(no include_synonyms; is_default instead of config_source, no synonyms: our codec, to and from
kio's v1 classes) and v4 (flexible, kio's),
against bytes built from Kafka 3.9's DescribeConfigs layouts, both directions, and through
the broker's dispatch."""

from __future__ import annotations

from datetime import timedelta
from types import ModuleType
from typing import Any

import pytest

from common.errors import ErrorCode
from common.protocol import describe_configs as dc
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.primitives import ProtocolError
from tests.unit.test_protocol_codecs import (
    TAG,
    Row,
    arr,
    b,
    carr,
    check_codec_row,
    check_dispatch,
    check_request_frame,
    cs,
    i8,
    i16,
    i32,
    req,
    resp,
    s,
)

RESOURCES = ((2, "t", None), (4, "1", ("log.dirs",)))
REQ_V0 = dc.request(0, *RESOURCES)
REQ_V0_BYTES = arr(i8(2) + s("t") + i32(-1), i8(4) + s("1") + arr(s("log.dirs")))
REQ_V4 = dc.request(4, *RESOURCES, include_synonyms=True, include_documentation=True)
REQ_V4_BYTES = carr(i8(2) + cs("t") + b"\x00" + TAG, i8(4) + cs("1") + carr(cs("log.dirs")) + TAG) \
    + b(True) + b(True) + TAG



def module(version: int) -> ModuleType:
    return messages.response_module(ApiKey.DESCRIBE_CONFIGS, dc.schema_version(version))


def entry(version: int, name: str, value: str | None, read_only: bool, source: int, sensitive: bool,
          synonyms: tuple[tuple[str, str, int], ...] = (), config_type: int = 0, doc: str | None = None) -> Any:
    m = module(version)
    return messages.build(m.DescribeConfigsResourceResult, name=name, value=value, read_only=read_only,
                          config_source=source, is_sensitive=sensitive, synonyms=tuple(
                              m.DescribeConfigsSynonym(name=n, value=v, source=src) for n, v, src in synonyms),
                          config_type=config_type, documentation=doc)


def response(version: int, throttle_ms: int, *results: tuple[int, str | None, int, str, tuple[Any, ...]]) -> Any:
    m = module(version)
    return m.DescribeConfigsResponse(throttle_time=timedelta(milliseconds=throttle_ms), results=tuple(
        m.DescribeConfigsResult(error_code=ErrorCode(code), error_message=message, resource_type=kind,
                                resource_name=name, configs=configs)
        for code, message, kind, name, configs in results))


def dynamic(version: int) -> Any:
    return entry(version, "log.retention.ms", "1000", False, 3, False, (("log.retention.ms", "1000", 3),), 5, "doc")


RESP_V0 = response(0, 0, (0, None, 2, "t", (entry(0, "segment.bytes", "1024", False, 5, False),
                                            entry(0, "retention.ms", "9", True, 0, True))))
RESP_V0_BYTES = i32(0) + arr(i16(0) + s(None) + i8(2) + s("t") + arr(
    s("segment.bytes") + s("1024") + b(False) + b(True) + b(False),  # is_default: source 5
    s("retention.ms") + s("9") + b(True) + b(False) + b(True)))
RESP_V4 = response(4, 7, (0, None, 4, "", (dynamic(4),)), (42, "bad", 4, "9", ()))
RESP_V4_BYTES = i32(7) + carr(
    i16(0) + cs(None) + i8(4) + cs("") + carr(
        cs("log.retention.ms") + cs("1000") + b(False) + i8(3) + b(False)
        + carr(cs("log.retention.ms") + cs("1000") + i8(3) + TAG) + i8(5) + cs("doc") + TAG) + TAG,
    i16(42) + cs("bad") + i8(4) + cs("9") + carr() + TAG) + TAG

ROWS = [
    req(dc, "describe_configs", ApiKey.DESCRIBE_CONFIGS, 0, REQ_V0, REQ_V0_BYTES),
    req(dc, "describe_configs", ApiKey.DESCRIBE_CONFIGS, 4, REQ_V4, REQ_V4_BYTES),
    resp(dc, "describe_configs", ApiKey.DESCRIBE_CONFIGS, 0, RESP_V0, RESP_V0_BYTES),
    resp(dc, "describe_configs", ApiKey.DESCRIBE_CONFIGS, 4, RESP_V4, RESP_V4_BYTES),
]


def row_id(row: Row) -> str:
    return f"v{row.version}-{row.decode.__name__.rsplit('_', 1)[1]}"


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_codec_rows(row: Row) -> None:
    check_codec_row(row)


@pytest.mark.parametrize("row", ROWS[:2], ids=row_id)
def test_request_frame_fed_one_byte_at_a_time(row: Row) -> None:
    check_request_frame(row)


@pytest.mark.parametrize("row", ROWS[2:], ids=row_id)
def test_dispatch_encodes_responses(row: Row) -> None:
    check_dispatch(row)


def test_v0_reports_is_default_only() -> None:
    """v0 has no config_source: a dynamic config answers is_default false, the rest is dropped."""
    body = b"".join(bytes(c) for c in dc.encode_describe_configs_response(
        response(0, 0, (0, None, 4, "", (dynamic(0),))), 0))
    assert body == i32(0) + arr(i16(0) + s(None) + i8(4) + s("") + arr(
        s("log.retention.ms") + s("1000") + b(False) + b(False) + b(False)))


def test_unanswered_versions_are_refused() -> None:
    with pytest.raises(ProtocolError):
        dc.decode_describe_configs_request(memoryview(REQ_V4_BYTES), 5)
    with pytest.raises(ProtocolError):  # v4's compact bytes are not v0's
        dc.decode_describe_configs_request(memoryview(REQ_V4_BYTES), 0)


def test_the_flexible_bytes_read_the_same_in_kafka_pythons_schema_codecs() -> None:
    """An oracle built from Kafka's own message JSON schemas (kafka-python 3's protocol classes)
    reads the table's bytes as the same values, for the config APIs' flexible versions."""
    configs = pytest.importorskip("kafka.protocol.admin.configs")
    from tests.unit.test_alter_configs_codec import (
        INCREMENTAL_FLEX_BYTES,
        LEGACY_FLEX_BYTES,
        RESPONSE_FLEX_BYTES,
    )

    response = configs.DescribeConfigsResponse.decode(RESP_V4_BYTES, version=4).to_dict()
    [entry] = response["results"][0]["configs"]
    assert (entry["name"], entry["config_source"], entry["config_type"], entry["documentation"]) == \
        ("log.retention.ms", 3, 5, "doc")
    assert entry["synonyms"] == [{"name": "log.retention.ms", "value": "1000", "source": 3}]
    request = configs.DescribeConfigsRequest.decode(REQ_V4_BYTES, version=4).to_dict()
    assert request["resources"][1]["configuration_keys"] == ["log.dirs"] and request["include_documentation"]
    assert [c["is_default"] for c in configs.DescribeConfigsResponse.decode(RESP_V0_BYTES, version=0).to_dict()[
        "results"][0]["configs"]] == [True, False]
    incremental = configs.IncrementalAlterConfigsRequest.decode(INCREMENTAL_FLEX_BYTES, version=1).to_dict()
    assert incremental["resources"][0]["configs"][0] == {"name": "cleanup.policy", "config_operation": 2,
                                                          "value": "compact"}
    legacy = configs.AlterConfigsRequest.decode(LEGACY_FLEX_BYTES, version=2).to_dict()
    assert legacy["validate_only"] and legacy["resources"][0]["configs"][1] == {"name": "x", "value": None}
    answer = configs.IncrementalAlterConfigsResponse.decode(RESPONSE_FLEX_BYTES, version=1).to_dict()
    assert [r["error_code"] for r in answer["responses"]] == [0, 42]
