"""broker/request_faults.py: fault specs and their refusals, the table's matching and counting, and
the error answers every expressible API encodes at every version it serves."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from broker import request_faults as rf
from broker.request_faults import FaultSpec, FaultTable, error_response, parse_fault
from common.errors import ErrorCode
from common.protocol import fetch as fetch_wire
from common.protocol import messages
from common.protocol import metadata as md
from common.protocol import produce as produce_wire
from common.protocol.api_keys import ApiKey
from common.protocol.api_table import API_SPECS

NOT_LEADER = {"kind": "error", "api": "Produce", "error": "NOT_LEADER_OR_FOLLOWER", "times": 1}
PRODUCE = produce_wire.ProduceRequest(None, -1, 30000, (
    produce_wire.TopicProduceData("orders", (produce_wire.PartitionProduceData(0, b""),
                                             produce_wire.PartitionProduceData(1, b""))),
    produce_wire.TopicProduceData("audit", (produce_wire.PartitionProduceData(0, b""),))))
NO_NAMES = lambda topic_id: None  # noqa: E731 - no Fetch by id in these tables


@pytest.mark.parametrize(("body", "expected"), [
    (NOT_LEADER, FaultSpec("error", ApiKey.PRODUCE, ErrorCode.NOT_LEADER_OR_FOLLOWER, times=1)),
    ({"kind": "error", "api": "LIST_OFFSETS", "error": 6}, FaultSpec("error", ApiKey.LIST_OFFSETS,
                                                                      ErrorCode.NOT_LEADER_OR_FOLLOWER)),
    ({"kind": "delay", "api": "Fetch", "delay_ms": 300}, FaultSpec("delay", ApiKey.FETCH, delay_ms=300)),
    ({"kind": "throttle", "api": "OffsetCommit", "throttle_ms": 50, "group": "g"},
     FaultSpec("throttle", ApiKey.OFFSET_COMMIT, throttle_ms=50, group="g")),
    ({"kind": "drop_after", "api": "Produce", "topic": "orders", "client_id": "app"},
     FaultSpec("drop_after", ApiKey.PRODUCE, topic="orders", client_id="app")),
])
def test_a_fault_parses_from_its_json_form(body: dict[str, Any], expected: FaultSpec) -> None:
    assert parse_fault(body) == expected


@pytest.mark.parametrize(("body", "argument"), [
    ({**NOT_LEADER, "api": "Produsce"}, "api:"),
    ({**NOT_LEADER, "api": 999}, "api:"),
    ({**NOT_LEADER, "error": "NOT_A_KAFKA_ERROR"}, "error:"),
    ({**NOT_LEADER, "error": "NONE"}, "error:"),
    ({**NOT_LEADER, "times": 0}, "times:"),
    ({**NOT_LEADER, "times": -3}, "times:"),
    ({**NOT_LEADER, "times": "1"}, "times:"),
    ({**NOT_LEADER, "kind": "explode"}, "kind:"),
    ({**NOT_LEADER, "colour": "red"}, "colour:"),
    ({**NOT_LEADER, "topic": ""}, "topic:"),
    ({"kind": "error", "api": "Produce"}, "error:"),
    ({"kind": "delay", "api": "Fetch"}, "ms:"),
    ({"kind": "delay", "api": "Fetch", "delay_ms": rf.MAX_DELAY_MS + 1}, "ms:"),
    ({"kind": "throttle", "api": "Fetch", "throttle_ms": -1}, "ms:"),
    ({"kind": "error", "api": "OffsetFetch", "error": "NOT_COORDINATOR"}, "api:"),  # v8+: per group
])
def test_bad_input_is_a_value_error_naming_the_argument(body: dict[str, Any], argument: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_fault(body)
    assert str(refused.value).startswith(argument)


def test_the_first_matching_fault_fires_until_its_times_are_spent_and_stays_listed() -> None:
    table = FaultTable()
    assert not table.installed
    once = table.install(parse_fault(NOT_LEADER))
    always = table.install(parse_fault({"kind": "delay", "api": "Produce", "delay_ms": 5}))
    assert table.installed
    fired = [table.match(ApiKey.PRODUCE, PRODUCE, "app", NO_NAMES) for _ in range(3)]
    assert fired == [once, always, always]
    assert (once.fired, always.fired, once.exhausted) == (1, 2, True)
    assert table.match(ApiKey.FETCH, PRODUCE, "app", NO_NAMES) is None  # another API
    assert [f["fired"] for f in rf.installed_json(table.faults.values())] == [1, 2]
    assert table.remove(once.fault_id) is once and table.installed
    assert table.clear() == [always] and not table.installed


@pytest.mark.parametrize(("filters", "client_id", "matches"), [
    ({"topic": "audit"}, "app", True),
    ({"topic": "payments"}, "app", False),
    ({"client_id": "app"}, "app", True),
    ({"client_id": "app"}, "other", False),
    ({"client_id": "app"}, None, False),
    ({"group": "g"}, "app", False),  # a Produce names no group
])
def test_filters_match_the_requests_topics_client_id_and_group(filters: dict[str, str], client_id: str | None,
                                                              matches: bool) -> None:
    table = FaultTable()
    fault = table.install(parse_fault({**NOT_LEADER, "times": None, **filters}))
    assert (table.match(ApiKey.PRODUCE, PRODUCE, client_id, NO_NAMES) is fault) == matches
    assert fault.fired == int(matches)


def test_a_fetch_by_topic_id_matches_the_topics_name() -> None:
    topic_id = uuid.uuid4()
    fetch = fetch_wire.FetchRequest(-1, 500, 1, 1 << 20, 0, (
        fetch_wire.FetchTopic("", (fetch_wire.FetchPartition(0, 0, 1 << 20),), topic_id),))
    table = FaultTable()
    fault = table.install(parse_fault({"kind": "delay", "api": "Fetch", "delay_ms": 1, "topic": "orders"}))
    assert table.match(ApiKey.FETCH, fetch, None, lambda t: "orders" if t == topic_id else None) is fault


def test_the_table_is_bounded() -> None:
    table = FaultTable()
    for _ in range(rf.MAX_FAULTS):
        table.install(parse_fault(NOT_LEADER))
    with pytest.raises(ValueError, match="MAX_FAULTS"):
        table.install(parse_fault(NOT_LEADER))


def test_a_produce_error_is_per_partition_and_acks_0_gets_no_answer() -> None:
    response = error_response(ApiKey.PRODUCE, 9, PRODUCE, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in response.responses] == [
        ("orders", [(0, 6), (1, 6)]), ("audit", [(0, 6)])]
    acks0 = produce_wire.ProduceRequest(None, 0, 30000, PRODUCE.topic_data)
    assert error_response(ApiKey.PRODUCE, 9, acks0, ErrorCode.NOT_LEADER_OR_FOLLOWER) is None


def test_a_metadata_error_is_per_named_topic() -> None:
    response = error_response(ApiKey.METADATA, 12, md.MetadataRequest(("orders",)), ErrorCode.LEADER_NOT_AVAILABLE)
    assert [(t.name, t.error_code) for t in response.topics] == [("orders", 5)]


def _request(api_key: ApiKey, version: int) -> Any:
    """A request naming topic "orders" partition 0, group "g" and key "g" where the API has them."""
    if api_key == ApiKey.PRODUCE:
        return PRODUCE
    if api_key == ApiKey.FETCH:
        return fetch_wire.FetchRequest(-1, 500, 1, 1 << 20, 0, (
            fetch_wire.FetchTopic("orders", (fetch_wire.FetchPartition(0, 0, 1 << 20),)),))
    if api_key == ApiKey.METADATA:
        return md.MetadataRequest(("orders",))

    class Partition:
        partition_index = 0

    class Topic:
        name = "orders"
        partitions = (Partition(),)

    class Request:
        topics = (Topic(),)
        coordinator_keys = ("g",)
        group_id = "g"
        acks = -1
    return Request()


def _expressible(api_key: ApiKey) -> bool:
    try:
        FaultSpec("error", api_key, ErrorCode.UNKNOWN_SERVER_ERROR)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("api_key", sorted(k for k in API_SPECS if _expressible(k)), ids=lambda k: k.name)
def test_every_expressible_api_encodes_an_error_answer_at_every_version(api_key: ApiKey) -> None:
    codec = API_SPECS[api_key].codec
    low, high = API_SPECS[api_key].versions
    for version in range(low, high + 1):
        response = error_response(api_key, version, _request(api_key, version), ErrorCode.NOT_COORDINATOR)
        assert response is not None, f"{api_key.name} v{version}"
        assert codec.encode(response, version), f"{api_key.name} v{version} encodes to nothing"


def test_the_common_apis_are_expressible() -> None:
    for api_key in (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.LIST_OFFSETS, ApiKey.FIND_COORDINATOR,
                    ApiKey.INIT_PRODUCER_ID, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT,
                    ApiKey.OFFSET_COMMIT, ApiKey.END_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.TXN_OFFSET_COMMIT):
        assert _expressible(api_key), api_key.name


def test_a_top_level_error_fills_every_other_field_with_nothing() -> None:
    response = error_response(ApiKey.INIT_PRODUCER_ID, 5, object(), ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    assert (response.error_code, response.producer_id, response.producer_epoch) == (14, -1, -1)
    join = error_response(ApiKey.JOIN_GROUP, 9, object(), ErrorCode.REBALANCE_IN_PROGRESS)
    assert (join.error_code, join.member_id, join.members) == (27, "", ())


def test_throttle_is_set_in_either_spelling() -> None:
    produce = rf.with_throttle(produce_wire.ProduceResponse(()), 250)
    assert produce.throttle_time_ms == 250
    m = messages.response_type(ApiKey.HEARTBEAT, 4)
    heartbeat = rf.with_throttle(m(throttle_time=messages.NO_THROTTLE, error_code=ErrorCode.NONE), 250)
    assert heartbeat.throttle_time == timedelta(milliseconds=250)
