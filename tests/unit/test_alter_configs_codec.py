"""common/protocol/alter_configs.py: AlterConfigs v0-v1 and IncrementalAlterConfigs v0 against
exact bytes built from the protocol guide's layouts, both directions, every truncation refused,
and through the broker's dispatch (request frames and responses)."""

from __future__ import annotations

import pytest

from common.protocol import alter_configs as ac
from common.protocol.api_keys import ApiKey
from common.protocol.primitives import ProtocolError
from tests.unit.test_protocol_codecs import (
    Row,
    arr,
    check_codec_row,
    check_dispatch,
    check_request_frame,
    i8,
    i16,
    i32,
    req,
    resp,
    s,
)

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

ROWS = [
    req(ac, "alter_configs", ApiKey.ALTER_CONFIGS, 0, LEGACY, LEGACY_BYTES),
    req(ac, "alter_configs", ApiKey.ALTER_CONFIGS, 1, LEGACY, LEGACY_BYTES),
    req(ac, "incremental_alter_configs", ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, INCREMENTAL, INCREMENTAL_BYTES),
    resp(ac, "alter_configs", ApiKey.ALTER_CONFIGS, 0, RESPONSE, RESPONSE_BYTES),
    resp(ac, "alter_configs", ApiKey.ALTER_CONFIGS, 1, RESPONSE, RESPONSE_BYTES),
    resp(ac, "alter_configs", ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, RESPONSE, RESPONSE_BYTES),
]


def row_id(row: Row) -> str:
    return f"{ApiKey(row.api_key).name}-v{row.version}-{row.decode.__name__.rsplit('_', 1)[1]}"


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_codec_rows(row: Row) -> None:
    check_codec_row(row)


@pytest.mark.parametrize("row", ROWS[:3], ids=row_id)
def test_request_frame_fed_one_byte_at_a_time(row: Row) -> None:
    check_request_frame(row)


@pytest.mark.parametrize("row", ROWS[3:], ids=row_id)
def test_dispatch_encodes_responses(row: Row) -> None:
    check_dispatch(row)


def test_unanswered_versions_are_refused() -> None:
    with pytest.raises(ProtocolError):
        ac.decode_incremental_alter_configs_request(memoryview(INCREMENTAL_BYTES), 1)
