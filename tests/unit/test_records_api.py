"""quorum/records_api.py's pure half: the DeleteRecords body and the error mapping."""

from __future__ import annotations

import pytest

from common.errors import ErrorCode
from quorum.admin_api import AdminError
from quorum.records_api import (
    DEFAULT_TIMEOUT_MS,
    MAX_TIMEOUT_MS,
    error_for,
    parse_delete_records,
)


@pytest.mark.parametrize("body, expected", [
    ({"offset": 60}, (60, DEFAULT_TIMEOUT_MS)),
    ({"offset": -1, "timeout_ms": 0}, (-1, 0)),
    ({"offset": 2**63 - 1, "timeout_ms": MAX_TIMEOUT_MS}, (2**63 - 1, MAX_TIMEOUT_MS)),
])
def test_valid_bodies(body, expected):
    assert parse_delete_records(body) == expected


@pytest.mark.parametrize("body, field", [
    ({}, "offset"),
    ({"offset": -2}, "offset"),
    ({"offset": "5"}, "offset"),
    ({"offset": True}, "offset"),
    ({"offset": 5, "timeout_ms": -1}, "timeout_ms"),
    ({"offset": 5, "timeout_ms": MAX_TIMEOUT_MS + 1}, "timeout_ms"),
    ({"offset": 5, "partition": 1}, "partition"),
    ([5], None),
])
def test_bad_bodies_name_the_field(body, field):
    with pytest.raises(AdminError) as info:
        parse_delete_records(body)
    assert info.value.status == 400
    if field is not None:
        assert info.value.field == field


@pytest.mark.parametrize("code, name, status", [
    (ErrorCode.OFFSET_OUT_OF_RANGE, "OFFSET_OUT_OF_RANGE", 400),
    (ErrorCode.POLICY_VIOLATION, "POLICY_VIOLATION", 400),
    (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "UNKNOWN_TOPIC_OR_PARTITION", 404),
    (ErrorCode.REQUEST_TIMED_OUT, "REQUEST_TIMED_OUT", 504),
    (ErrorCode.NOT_LEADER_OR_FOLLOWER, "NOT_LEADER_OR_FOLLOWER", 503),
    (9999, "ERROR_CODE_9999", 400),
])
def test_broker_errors_keep_kafka_names(code, name, status):
    error = error_for(int(code), "m")
    assert (error.error, error.status) == (name, status)
