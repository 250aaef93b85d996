"""AlterConfigs v0-v2 and IncrementalAlterConfigs v0-v1 on kio's generated messages against
exact bytes built from the protocol guide's layouts, both directions, every truncation refused,
and through the broker's dispatch (request frames and responses)."""

from __future__ import annotations

from typing import Any

import pytest

from broker.request_handler import decode_request
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.frame import RequestHeader
from common.protocol.primitives import ProtocolError
from tests.unit.test_protocol_codecs import (
    TAG,
    Row,
    arr,
    carr,
    cs,
    check_codec_row,
    check_dispatch,
    check_request_frame,
    i8,
    i16,
    i32,
    kio_req,
    kio_resp,
    s,
)

def legacy(version: int) -> Any:
    m = messages.request_module(ApiKey.ALTER_CONFIGS, version)
    return m.AlterConfigsRequest(resources=(m.AlterConfigsResource(resource_type=2, resource_name="t", configs=(
        m.AlterableConfig(name="retention.ms", value="1000"), m.AlterableConfig(name="x", value=None))),),
        validate_only=True)


def incremental(version: int) -> Any:
    m = messages.request_module(ApiKey.INCREMENTAL_ALTER_CONFIGS, version)
    return m.IncrementalAlterConfigsRequest(resources=(
        m.AlterConfigsResource(resource_type=2, resource_name="t", configs=(
            m.AlterableConfig(name="cleanup.policy", config_operation=2, value="compact"),
            m.AlterableConfig(name="retention.ms", config_operation=1, value=None))),
        m.AlterConfigsResource(resource_type=4, resource_name="", configs=())), validate_only=False)


def response(api_key: ApiKey, version: int) -> Any:
    m = messages.response_module(api_key, version)
    results = (m.AlterConfigsResourceResponse(error_code=ErrorCode.NONE, error_message=None, resource_type=2,
                                              resource_name="t"),
               m.AlterConfigsResourceResponse(error_code=ErrorCode.INVALID_REQUEST, error_message="bad",
                                              resource_type=2, resource_name="u"))
    name = "AlterConfigsResponse" if api_key == ApiKey.ALTER_CONFIGS else "IncrementalAlterConfigsResponse"
    return getattr(m, name)(throttle_time=messages.NO_THROTTLE, responses=results)


LEGACY_BYTES = arr(i8(2) + s("t") + arr(s("retention.ms") + s("1000"), s("x") + s(None))) + b"\x01"
INCREMENTAL_BYTES = arr(i8(2) + s("t") + arr(s("cleanup.policy") + i8(2) + s("compact"),
                                              s("retention.ms") + i8(1) + s(None)),
                        i8(4) + s("") + arr()) + b"\x00"
RESPONSE_BYTES = i32(0) + arr(i16(0) + s(None) + i8(2) + s("t"), i16(42) + s("bad") + i8(2) + s("u"))

# The flexible versions (AlterConfigs v2, IncrementalAlterConfigs v1): compact lengths, a
# tagged-field section after every struct.
LEGACY_FLEX_BYTES = carr(i8(2) + cs("t") + carr(cs("retention.ms") + cs("1000") + TAG, cs("x") + cs(None) + TAG)
                         + TAG) + b"\x01" + TAG
INCREMENTAL_FLEX_BYTES = carr(i8(2) + cs("t") + carr(cs("cleanup.policy") + i8(2) + cs("compact") + TAG,
                                                     cs("retention.ms") + i8(1) + cs(None) + TAG) + TAG,
                              i8(4) + cs("") + carr() + TAG) + b"\x00" + TAG
RESPONSE_FLEX_BYTES = i32(0) + carr(i16(0) + cs(None) + i8(2) + cs("t") + TAG,
                                    i16(42) + cs("bad") + i8(2) + cs("u") + TAG) + TAG

AC, IAC = ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS
ROWS = [
    kio_req(AC, 0, legacy(0), LEGACY_BYTES),
    kio_req(AC, 1, legacy(1), LEGACY_BYTES),
    kio_req(IAC, 0, incremental(0), INCREMENTAL_BYTES),
    kio_req(AC, 2, legacy(2), LEGACY_FLEX_BYTES),
    kio_req(IAC, 1, incremental(1), INCREMENTAL_FLEX_BYTES),
    kio_resp(AC, 0, response(AC, 0), RESPONSE_BYTES),
    kio_resp(AC, 1, response(AC, 1), RESPONSE_BYTES),
    kio_resp(AC, 2, response(AC, 2), RESPONSE_FLEX_BYTES),
    kio_resp(IAC, 0, response(IAC, 0), RESPONSE_BYTES),
    kio_resp(IAC, 1, response(IAC, 1), RESPONSE_FLEX_BYTES),
]
REQUEST_ROWS = [row for row in ROWS if row.decode.__name__.endswith("_request")]
RESPONSE_ROWS = [row for row in ROWS if row.decode.__name__.endswith("_response")]


def row_id(row: Row) -> str:
    return f"{ApiKey(row.api_key).name}-v{row.version}-{row.decode.__name__.rsplit('_', 1)[1]}"


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_codec_rows(row: Row) -> None:
    check_codec_row(row)


@pytest.mark.parametrize("row", REQUEST_ROWS, ids=row_id)
def test_request_frame_fed_one_byte_at_a_time(row: Row) -> None:
    check_request_frame(row)


@pytest.mark.parametrize("row", RESPONSE_ROWS, ids=row_id)
def test_dispatch_encodes_responses(row: Row) -> None:
    check_dispatch(row)


def test_unanswered_versions_are_refused() -> None:
    with pytest.raises(ProtocolError):
        decode_request(RequestHeader(IAC, 2, 1, "c"), memoryview(INCREMENTAL_FLEX_BYTES))
    with pytest.raises(ProtocolError):
        decode_request(RequestHeader(AC, 3, 1, "c"), memoryview(LEGACY_FLEX_BYTES))


def test_a_classic_body_is_not_read_as_flexible() -> None:
    """IncrementalAlterConfigs v1 is compact: v0's int32 counts do not parse as it."""
    with pytest.raises(ProtocolError):
        messages.decode_request(IAC, 1, memoryview(INCREMENTAL_BYTES))
