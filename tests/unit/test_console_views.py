"""console.views and console.chaos_views: the console's pure views, as tables."""

from __future__ import annotations

import json
from typing import Any

import pytest

from console import chaos_views, views
from metadata.delta import apply
from metadata.image import MetadataImage
from metadata.records import (
    BeginEpoch,
    BrokerRegistrationChange,
    Config,
    ConfigResourceType,
    Listener,
    Partition,
    PartitionChange,
    RegisterBroker,
    RemoveTopic,
    Topic,
)
from quorum.admin_api import AdminError

ORDERS, AUDIT = "AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBB"
RECORDS: list[tuple[int, Any]] = [
    (1, BeginEpoch(1)),
    *[(1 + b, RegisterBroker(b, f"inc{b}", (Listener("PLAINTEXT", "127.0.0.1", 9092 + b),), fenced=False))
      for b in (1, 2, 3)],
    (5, Topic("orders", ORDERS)),
    (6, Partition(ORDERS, 0, (1, 2, 3), (1, 2, 3), leader=1)),
    (7, Partition(ORDERS, 1, (2, 3, 1), (2,), leader=2)),  # under-replicated and under min ISR 2
    (8, Partition(ORDERS, 2, (3, 1, 2), (3, 1), leader=3)),  # under-replicated only
    (9, Topic("audit", AUDIT)),
    (10, Partition(AUDIT, 0, (1, 2), (), leader=-1)),  # offline
    (11, Config(ConfigResourceType.TOPIC, "orders", "min.insync.replicas", "2")),
]
IMAGE = apply(MetadataImage(), RECORDS)


def test_topic_rows_count_offline_under_replicated_and_under_min_isr() -> None:
    rows = {r.name: r for r in views.topic_rows(IMAGE, default_min_isr=1)}
    assert rows["orders"] == views.TopicRow("orders", ORDERS, 3, 3, offline=0, under_replicated=2, under_min_isr=1)
    assert rows["audit"] == views.TopicRow("audit", AUDIT, 1, 2, offline=1, under_replicated=1, under_min_isr=1)


@pytest.mark.parametrize(("records", "expected"), [
    ([], 1),  # the controller's static default
    ([Config(ConfigResourceType.BROKER, "", "min.insync.replicas", "3")], 3),  # the cluster-level default
    ([Config(ConfigResourceType.BROKER, "", "min.insync.replicas", "3"),
      Config(ConfigResourceType.TOPIC, "audit", "min.insync.replicas", "2")], 2),  # the topic's own wins
])
def test_min_isr_falls_back_from_topic_to_cluster_default(records: list[Any], expected: int) -> None:
    image = apply(IMAGE, enumerate(records, start=100))
    assert views.min_isr(image, "audit", 1) == expected


@pytest.mark.parametrize(("query", "page", "size", "names", "pages"), [
    ("", 0, 50, ["audit", "orders"], 1),
    ("ORD", 0, 50, ["orders"], 1),  # case-insensitive
    ("", 1, 1, ["orders"], 2),
    ("", 5, 1, [], 2),  # past the last page: empty, the counts still there
    ("nothing", 0, 50, [], 1),
])
def test_topic_page_searches_pages_and_keeps_cluster_totals(query: str, page: int, size: int, names: list[str],
                                                           pages: int) -> None:
    answer = views.topic_page(views.topic_rows(IMAGE, 1), query=query, page=page, size=size)
    assert [t["name"] for t in answer["topics"]] == names and answer["pages"] == pages
    assert answer["totals"] == {"topics": 2, "partitions": 4, "offline_partitions": 1,
                                "under_replicated_partitions": 3, "under_min_isr_partitions": 2}


@pytest.mark.parametrize(("query", "expected"), [
    ({}, ("", 0, views.DEFAULT_PAGE_SIZE)),
    ({"q": " ord ", "page": "2", "size": "10"}, ("ord", 2, 10)),
])
def test_parse_topic_query(query: dict[str, str], expected: tuple[str, int, int]) -> None:
    assert views.parse_topic_query(query) == expected


@pytest.mark.parametrize(("query", "field"), [
    ({"page": "x"}, "page"), ({"page": "-1"}, "page"), ({"size": "0"}, "size"),
    ({"size": str(views.MAX_PAGE_SIZE + 1)}, "size"), ({"sort": "name"}, "sort"), ({"q": "x" * 250}, "q"),
])
def test_parse_topic_query_refuses_bad_input(query: dict[str, str], field: str) -> None:
    with pytest.raises(AdminError) as caught:
        views.parse_topic_query(query)
    assert caught.value.field == field and caught.value.status == 400


@pytest.mark.parametrize(("query", "expected"), [
    ({}, views.Browse(0, None, None, views.DEFAULT_BROWSE_RECORDS, "text")),
    ({"partition": "2", "offset": "5", "limit": "3", "format": "hex"}, views.Browse(2, 5, None, 3, "hex")),
    ({"timestamp": "1700000000000", "format": "json"}, views.Browse(0, None, 1700000000000, 20, "json")),
])
def test_parse_browse(query: dict[str, str], expected: views.Browse) -> None:
    assert views.parse_browse(query) == expected


@pytest.mark.parametrize(("query", "field"), [
    ({"offset": "1", "timestamp": "2"}, "offset"), ({"offset": "-1"}, "offset"), ({"format": "xml"}, "format"),
    ({"limit": str(views.MAX_BROWSE_RECORDS + 1)}, "limit"), ({"partition": "1e3"}, "partition"),
    ({"whole": "true"}, "whole"),
])
def test_parse_browse_refuses_bad_input(query: dict[str, str], field: str) -> None:
    with pytest.raises(AdminError) as caught:
        views.parse_browse(query)
    assert caught.value.field == field


@pytest.mark.parametrize(("data", "fmt", "expected"), [
    (None, "text", {"null": True, "size": 0}),
    (b"hello", "text", {"size": 5, "truncated": False, "text": "hello"}),
    (b'{"a":[1]}', "json", {"size": 9, "truncated": False, "text": '{\n  "a": [\n    1\n  ]\n}'}),
    (b"\x00\xff", "hex", {"size": 2, "truncated": False, "text": "00 ff"}),
    (b"\xff", "text", {"size": 1, "truncated": False, "text": "\ufffd"}),
])
def test_shown(data: bytes | None, fmt: str, expected: dict[str, Any]) -> None:
    assert views.shown(data, fmt) == expected


def test_shown_cuts_large_values_and_says_what_is_not_json() -> None:
    big = views.shown(b"x" * (views.MAX_SHOWN_BYTES + 1), "text")
    assert big["truncated"] and len(big["text"]) == views.MAX_SHOWN_BYTES and big["size"] == views.MAX_SHOWN_BYTES + 1
    not_json = views.shown(b"plain", "json")
    assert not_json["text"] == "plain" and "json_error" in not_json


def test_history_names_each_transition() -> None:
    later = [(12, BrokerRegistrationChange(2, 3, fenced=True)), (13, PartitionChange(ORDERS, 1, leader=3)),
             (14, PartitionChange(AUDIT, 0, isr=(1,))),  # no leader change: not a transition
             (15, BrokerRegistrationChange(2, 3, fenced=False)), (16, BrokerRegistrationChange(3, 4,
                                                                                               in_controlled_shutdown=True)),
             (17, PartitionChange(ORDERS, 2, leader=-1)), (18, RemoveTopic(AUDIT))]
    shown = views.history([*RECORDS, *later], apply(IMAGE, later))
    assert [e["text"] for e in shown] == [
        "controller epoch 1 began", "broker 1 registered", "broker 2 registered", "broker 3 registered",
        "topic orders created", "topic audit created", "broker 2 fenced (epoch 3)", "orders-1 leader -> 3",
        "broker 2 unfenced (epoch 3)", "broker 3 in controlled shutdown", "orders-2 has no leader",
        "topic audit deleted"]
    assert [e["offset"] for e in shown][-1] == 18


def test_history_keeps_the_newest() -> None:
    many = [(i, BrokerRegistrationChange(1, 2, fenced=bool(i % 2))) for i in range(1000)]
    shown = views.history(many, IMAGE)
    assert len(shown) == views.MAX_HISTORY_EVENTS and shown[-1]["offset"] == 999


@pytest.mark.parametrize(("view", "state"), [
    ({"fenced": False, "in_controlled_shutdown": False, "heartbeat_age_ms": 10}, "RUNNING"),
    ({"fenced": False, "in_controlled_shutdown": True, "heartbeat_age_ms": 10}, "CONTROLLED_SHUTDOWN"),
    ({"fenced": True, "in_controlled_shutdown": False, "heartbeat_age_ms": 10}, "RECOVERY"),
    ({"fenced": True, "in_controlled_shutdown": False, "heartbeat_age_ms": 9000}, "FENCED"),
    ({"fenced": True, "in_controlled_shutdown": False, "heartbeat_age_ms": None}, "FENCED"),
])
def test_lifecycle_state(view: dict[str, Any], state: str) -> None:
    assert views.lifecycle_state(view, session_timeout_ms=9000) == state


FENCED_SILENT = {"fenced": True, "in_controlled_shutdown": False, "heartbeat_age_ms": None}
UNFENCED = {"fenced": False, "in_controlled_shutdown": False, "heartbeat_age_ms": 10}


@pytest.mark.parametrize(("text", "state"), [
    ('tidelog_broker_state{state="STARTING"} 1.0', "STARTING"),  # only the broker can tell it
    ('tidelog_broker_state{state="RECOVERY"} 2.0', "RECOVERY"),
    ('tidelog_broker_state{state="RUNNING"} 3.0', "RUNNING"),
    ('tidelog_broker_state{state="PENDING_CONTROLLED_SHUTDOWN"} 6.0', "CONTROLLED_SHUTDOWN"),
    ('tidelog_broker_state{state="SHUTTING_DOWN"} 7.0', "SHUTTING_DOWN"),
])
def test_the_brokers_own_state_wins_over_the_controllers_guess(text: str, state: str) -> None:
    reported = views.broker_state(f"# TYPE tidelog_broker_state gauge\n{text}\ntidelog_broker_bytes_in_total 5.0\n")
    assert reported == state
    assert views.lifecycle_state(UNFENCED if state != "RUNNING" else FENCED_SILENT, 9000, reported) == state


@pytest.mark.parametrize("text", [
    "tidelog_broker_bytes_in_total 5.0\n",  # an older broker: no state gauge
    'tidelog_broker_state{state="X"} 4.0\n',  # a number Kafka does not define
    'tidelog_broker_state{state="X"} many\n',
])
def test_without_the_brokers_state_the_controllers_guess_is_shown(text: str) -> None:
    reported = views.broker_state(text)
    assert reported is None
    assert views.lifecycle_state(FENCED_SILENT, 9000, reported) == "FENCED"
    assert views.lifecycle_state(UNFENCED, 9000, reported) == "RUNNING"


METRICS = """# HELP tidelog_broker_bytes_in_total Bytes read.
# TYPE tidelog_broker_bytes_in_total counter
tidelog_broker_bytes_in_total 1000.0
tidelog_broker_bytes_out_total 500
tidelog_broker_requests_total{api="FETCH"} 7
"""


@pytest.mark.parametrize(("before", "after", "expected"), [
    (None, (1.0, {views.BYTES_IN: 10.0}), {"bytes_in_per_s": None, "bytes_out_per_s": None}),
    ((1.0, {views.BYTES_IN: 0.0, views.BYTES_OUT: 0.0}), (3.0, {views.BYTES_IN: 1000.0, views.BYTES_OUT: 500.0}),
     {"bytes_in_per_s": 500.0, "bytes_out_per_s": 250.0}),
    ((1.0, {views.BYTES_IN: 900.0}), (2.0, {views.BYTES_IN: 10.0}),  # a restart: the counter went down
     {"bytes_in_per_s": None, "bytes_out_per_s": None}),
    ((2.0, {views.BYTES_IN: 0.0}), (2.0, {views.BYTES_IN: 10.0}), {"bytes_in_per_s": None, "bytes_out_per_s": None}),
])
def test_rates(before: Any, after: Any, expected: dict[str, Any]) -> None:
    assert views.rates(before, after) == expected


def test_metric_values_reads_unlabelled_samples() -> None:
    assert views.metric_values(METRICS, (views.BYTES_IN, views.BYTES_OUT)) == {views.BYTES_IN: 1000.0,
                                                                              views.BYTES_OUT: 500.0}



def test_topic_sample_reads_the_brokers_per_topic_counter() -> None:
    """Against the broker's own exposition (broker_metrics.topic_families), so the two agree."""
    from broker.broker_metrics import topic_families
    from broker.topic_metrics import BrokerTopicStats
    from common.prometheus import exposition

    text = METRICS + exposition(topic_families(BrokerTopicStats({"orders": 1234, "orders-eu": 99})))
    assert views.topic_sample(text, views.TOPIC_BYTES_OUT, "orders") == 1234.0
    assert views.topic_sample(text, views.TOPIC_BYTES_OUT, "orders-eu") == 99.0
    assert views.topic_sample(text, views.TOPIC_BYTES_OUT, "order") is None  # no consumer read it yet
    assert views.topic_sample(text, views.BYTES_OUT, "orders") is None  # unlabelled: not a topic's


# --- chaos_views


def _events() -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"t": 0.0, "kind": "note", "what": "scenario", "name": "s", "seed": 3,
         "schedule": [{"id": "f1", "start_s": 1.0, "end_s": 2.0, "fault": "kill leader:t:0"},
                      {"id": "f2", "start_s": 5.0, "end_s": 6.0, "fault": "pause broker 4"}]},
        {"t": 0.1, "kind": "phase", "name": "workload"}]
    for n in range(10):
        events.append({"t": 0.2 + n * 0.1, "kind": "invoke", "process": "p0", "value": str(n)})
        events.append({"t": 0.25 + n * 0.1, "kind": "ok", "process": "p0", "value": str(n)})
    events += [{"t": 1.1, "kind": "fault-start", "id": "f1", "description": "kill leader:t:0 (broker 4)"},
               {"t": 1.5, "kind": "invoke", "process": "p1", "value": "x"},
               {"t": 2.1, "kind": "fault-end", "id": "f1"}, {"t": 2.5, "kind": "ok", "process": "p1", "value": "x"}]
    return events


def test_live_run_summarises_faults_acks_and_latency_fed_in_any_split() -> None:
    whole, split = chaos_views.LiveRun(), chaos_views.LiveRun()
    whole.feed(_events())
    for event in _events():
        split.feed([event])
    view = whole.view()
    assert view == split.view()
    assert (view["scenario"], view["seed"], view["phase"], view["acks_total"], view["finished"]) == ("s", 3, "workload",
                                                                                                     11, False)
    f1, f2 = view["faults"]
    assert (f1["start_s"], f1["end_s"], f1["description"]) == (1.1, 2.1, "kill leader:t:0 (broker 4)")
    assert f2["start_s"] is None and f2["planned_start_s"] == 5.0
    per_second = {s["t"]: s for s in view["per_second"]}
    assert per_second[0]["acks"] == 8 and per_second[0]["p50_ms"] == pytest.approx(50.0)
    assert per_second[2]["acks"] == 1 and per_second[2]["p99_ms"] == pytest.approx(1000.0)


def test_live_run_takes_the_verdicts_once_decided() -> None:
    run = chaos_views.LiveRun()
    run.feed(_events())
    results = json.loads('{"passed": false, "verdicts": [{"expectation": "no lost", "ok": false, "detail": "1 lost"}]}')
    view = run.view(results)
    assert view["finished"] and view["passed"] is False and view["verdicts"][0]["detail"] == "1 lost"


def test_report_entry() -> None:
    assert chaos_views.report_entry("r1", ["history.jsonl", "clients.log"], None) == {
        "name": "r1", "files": ["history.jsonl"], "finished": False, "scenario": None, "passed": None}
    assert chaos_views.report_entry("r2", ["history.jsonl", "results.json"], {"scenario": "s", "passed": True})[
        "passed"] is True


@pytest.mark.parametrize(("query", "partitions", "expected"), [
    ({}, 3, (0, views.DEFAULT_PARTITION_PAGE, [0, 1, 2])),
    ({"page": "1", "size": "4"}, 10, (1, 4, [4, 5, 6, 7])),
    ({"page": "2", "size": "4"}, 10, (2, 4, [8, 9])),
    ({"page": "9"}, 10, (9, views.DEFAULT_PARTITION_PAGE, [])),
])
def test_parse_partition_page(query: dict[str, str], partitions: int, expected: tuple[int, int, list[int]]) -> None:
    assert views.parse_partition_page(query, partitions) == expected


def test_partitions_view_shows_the_page_asked_for() -> None:
    orders = IMAGE.topic("orders")
    assert orders is not None
    shown = views.partitions_view(orders, {1: (0, 5)}, {1: 99}, [1, 2, 7])
    assert [(p["partition"], p["log_end_offset"], p["size_bytes"]) for p in shown] == [(1, 5, 99), (2, None, None)]
    with pytest.raises(AdminError):
        views.parse_partition_page({"size": str(views.MAX_PARTITION_PAGE + 1)}, 10)


def test_share_partitions_start_end_and_lag() -> None:
    starts = {("audit", 1): 8, ("audit", 0): 3, ("jobs", 0): -1, ("gone", 0): 5}
    ends = {("audit", 0): 10, ("audit", 1): 8, ("jobs", 0): 4}  # gone-0: its leader did not answer
    assert [(p["topic"], p["partition"], p["start_offset"], p["log_end_offset"], p["lag"])
            for p in views.share_partitions(starts, ends)] == [
        ("audit", 0, 3, 10, 7), ("audit", 1, 8, 8, 0), ("gone", 0, 5, None, None), ("jobs", 0, None, 4, None)]
