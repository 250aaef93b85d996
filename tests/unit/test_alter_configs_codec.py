"""common/protocol/alter_configs.py: AlterConfigs v0-v1 and IncrementalAlterConfigs v0 against
exact bytes built from the protocol guide's layouts, both directions, every truncation refused,
and through the broker's dispatch (request frames and responses)."""

from __future__ import annotations

import struct

import pytest

from broker.request_handler import decode_request, encode_response
from common.protocol import alter_configs as ac
from common.protocol.api_keys import ApiKey
from common.protocol.frame import RequestHeader, join_chunks
from common.protocol.primitives import ProtocolError


def i8(v: int) -> bytes: return struct.pack(">b", v)
def i16(v: int) -> bytes: return struct.pack(">h", v)
def i32(v: int) -> bytes: return struct.pack(">i", v)
def s(v: str | None) -> bytes: return i16(-1) if v is None else i16(len(v.encode())) + v.encode()
def arr(*items: bytes) -> bytes: return i32(len(items)) + b"".join(items)


LEGACY = ac.AlterConfigsRequest((ac.AlterConfigsResource(2, "t", (
    ac.AlterableConfig("retention.ms", "1000"), ac.AlterableConfig("x", None))),), True)
LEGACY_BYTES = arr(i8(2) + s("t") + arr(s("retention.ms") + s("1000"), s("x") + s(None))) + b"\x01"
INCREMENTAL = ac.AlterConfigsRequest((ac.AlterConfigsResource(2, "t", (
    ac.AlterableConfig("cleanup.policy", "compact", 2), ac.AlterableConfig("retention.ms", None, 1))),
    ac.AlterConfigsResource(4, "", ())), False)
INCREMENTAL_BYTES = arr(i8(2) + s("t") + arr(s("cleanup.policy") + i8(2) + s("compact"),
                                              s("retention.ms") + i8(1) + s(None)),
                        i8(4) + s("") + arr()) + b"\x00"
RESPONSE = ac.AlterConfigsResponse(0, (ac.AlterConfigsResourceResponse(0, None, 2, "t"),
                                       ac.AlterConfigsResourceResponse(40, "bad", 2, "u")))
RESPONSE_BYTES = i32(0) + arr(i16(0) + s(None) + i8(2) + s("t"), i16(40) + s("bad") + i8(2) + s("u"))

REQUESTS = [  # (api key, version, value, bytes, decode, encode)
    (ApiKey.ALTER_CONFIGS, 0, LEGACY, LEGACY_BYTES, ac.decode_alter_configs_request,
     ac.encode_alter_configs_request),
    (ApiKey.ALTER_CONFIGS, 1, LEGACY, LEGACY_BYTES, ac.decode_alter_configs_request,
     ac.encode_alter_configs_request),
    (ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, INCREMENTAL, INCREMENTAL_BYTES,
     ac.decode_incremental_alter_configs_request, ac.encode_incremental_alter_configs_request),
]


@pytest.mark.parametrize(("key", "version", "value", "data", "decode", "encode"), REQUESTS)
def test_requests(key: ApiKey, version: int, value: ac.AlterConfigsRequest, data: bytes, decode, encode) -> None:  # type: ignore[no-untyped-def]
    assert join_chunks(encode(value, version)) == data
    assert decode(memoryview(data + b"trailing"), version) == value
    assert decode_request(RequestHeader(key, version, 1, "c"), memoryview(data)) == value
    for cut in range(len(data)):
        with pytest.raises(ProtocolError):
            decode(memoryview(data[:cut]), version)


@pytest.mark.parametrize(("key", "version"), [(ApiKey.ALTER_CONFIGS, 0), (ApiKey.ALTER_CONFIGS, 1),
                                              (ApiKey.INCREMENTAL_ALTER_CONFIGS, 0)])
def test_responses(key: ApiKey, version: int) -> None:
    assert join_chunks(encode_response(key, RESPONSE, version)) == RESPONSE_BYTES
    assert ac.decode_alter_configs_response(memoryview(RESPONSE_BYTES), version) == RESPONSE


def test_unanswered_versions_are_refused() -> None:
    with pytest.raises(ProtocolError):
        ac.decode_incremental_alter_configs_request(memoryview(INCREMENTAL_BYTES), 1)
