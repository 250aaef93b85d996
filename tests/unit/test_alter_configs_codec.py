"""common/protocol/alter_configs.py: AlterConfigs v0-v2 and IncrementalAlterConfigs v0-v1 against
exact bytes built from the protocol guide's layouts, both directions, every truncation refused,
and through the broker's dispatch (request frames and responses)."""

from __future__ import annotations

import pytest

from common.protocol import alter_configs as ac
from common.protocol.api_keys import ApiKey
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

# The flexible versions (AlterConfigs v2, IncrementalAlterConfigs v1): compact lengths, a
# tagged-field section after every struct.
LEGACY_FLEX_BYTES = carr(i8(2) + cs("t") + carr(cs("retention.ms") + cs("1000") + TAG, cs("x") + cs(None) + TAG)
                         + TAG) + b"\x01" + TAG
INCREMENTAL_FLEX_BYTES = carr(i8(2) + cs("t") + carr(cs("cleanup.policy") + i8(2) + cs("compact") + TAG,
                                                     cs("retention.ms") + i8(1) + cs(None) + TAG) + TAG,
                              i8(4) + cs("") + carr() + TAG) + b"\x00" + TAG
RESPONSE_FLEX_BYTES = i32(0) + carr(i16(0) + cs(None) + i8(2) + cs("t") + TAG,
                                    i16(40) + cs("bad") + i8(2) + cs("u") + TAG) + TAG

ROWS = [
    req(ac, "alter_configs", ApiKey.ALTER_CONFIGS, 0, LEGACY, LEGACY_BYTES),
    req(ac, "alter_configs", ApiKey.ALTER_CONFIGS, 1, LEGACY, LEGACY_BYTES),
    req(ac, "incremental_alter_configs", ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, INCREMENTAL, INCREMENTAL_BYTES),
    req(ac, "alter_configs", ApiKey.ALTER_CONFIGS, 2, LEGACY, LEGACY_FLEX_BYTES),
    req(ac, "incremental_alter_configs", ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, INCREMENTAL, INCREMENTAL_FLEX_BYTES),
    resp(ac, "alter_configs", ApiKey.ALTER_CONFIGS, 0, RESPONSE, RESPONSE_BYTES),
    resp(ac, "alter_configs", ApiKey.ALTER_CONFIGS, 1, RESPONSE, RESPONSE_BYTES),
    resp(ac, "alter_configs", ApiKey.ALTER_CONFIGS, 2, RESPONSE, RESPONSE_FLEX_BYTES),
    resp(ac, "incremental_alter_configs", ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, RESPONSE, RESPONSE_BYTES),
    resp(ac, "incremental_alter_configs", ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, RESPONSE, RESPONSE_FLEX_BYTES),
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
        ac.decode_incremental_alter_configs_request(memoryview(INCREMENTAL_FLEX_BYTES), 2)
    with pytest.raises(ProtocolError):
        ac.decode_alter_configs_request(memoryview(LEGACY_FLEX_BYTES), 3)


def test_a_classic_body_is_not_read_as_flexible() -> None:
    """IncrementalAlterConfigs v1 is compact: v0's int32 counts do not parse as it."""
    with pytest.raises(ProtocolError):
        ac.decode_incremental_alter_configs_request(memoryview(INCREMENTAL_BYTES), 1)
