"""The CLI's pure parts: tables, finding the cluster, topic options and views, the producer's
router, the consumer's start rules, exit codes of the parser."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from tidelog.cli import build_parser
from tidelog.cli_common import (
    ClusterError,
    Endpoints,
    UsageError,
    endpoints,
    guarded,
    parse_admin_urls,
    parse_bootstrap_servers,
)
from tidelog.cli_consume import parse_offset, start_offset
from tidelog.cli_status import broker_lines, cluster_lines, topic_line
from tidelog.cli_topics import (
    config_changes,
    describe_lines,
    list_lines,
    parse_configs,
    parse_replica_assignment,
)
from tidelog.consumer import StartOffset
from common.kafka_client import PartitionInfo, TopicInfo, error_name
from tidelog.producer import Router
from common.table import render

# --- tables ----------------------------------------------------------------------------------


def test_render_aligns_and_never_pads_the_last_column() -> None:
    assert render(("TOPIC", "PARTITIONS", "NOTE"), [("orders", 3, None), ("a", 12, "x y")], right={1}) == [
        "TOPIC   PARTITIONS  NOTE",
        "orders           3  -",
        "a               12  x y",
    ]


def test_render_cells() -> None:
    assert render(("A", "B"), [(True, "two\nlines\ttab")]) == ["A    B", "yes  two lines tab"]


def test_render_refuses_ragged_rows() -> None:
    with pytest.raises(ValueError, match="2 cells, the header 3"):
        render(("A", "B", "C"), [(1, 2)])


# --- finding the cluster -----------------------------------------------------------------------

DOCUMENT: dict[str, Any] = {
    "cluster_id": "x", "bootstrap_servers": "127.0.0.4:9092,127.0.0.5:9092",
    "nodes": [{"id": 1, "role": "controller", "admin_url": "http://127.0.0.1:9080"},
              {"id": 2, "role": "combined", "admin_url": "http://127.0.0.2:9080"},
              {"id": 4, "role": "broker"}]}
DATA = Path("/srv/data")


@pytest.mark.parametrize(("admin", "bootstrap", "document", "expected"), [
    pytest.param(None, None, DOCUMENT, Endpoints(("http://127.0.0.1:9080", "http://127.0.0.2:9080"),
                                                 (("127.0.0.4", 9092), ("127.0.0.5", 9092)),
                                                 "/srv/data/cluster.json", DOCUMENT), id="cluster-json"),
    pytest.param("127.0.0.9:1", None, DOCUMENT, Endpoints(("http://127.0.0.9:1",),
                                                          (("127.0.0.4", 9092), ("127.0.0.5", 9092)),
                                                          "/srv/data/cluster.json and --admin-url", DOCUMENT),
                 id="explicit-admin-wins"),
    pytest.param(None, "[::1]:9092", None, Endpoints((), (("::1", 9092),), "--bootstrap-server"),
                 id="explicit-only"),
    pytest.param(None, None, None, Endpoints((), (), "nothing"), id="nothing"),
])
def test_endpoints(admin: str | None, bootstrap: str | None, document: dict[str, Any] | None,
                   expected: Endpoints) -> None:
    assert endpoints(admin_url=admin, bootstrap_server=bootstrap, data_dir=DATA, document=document) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("127.0.0.1", "not host:port"), ("127.0.0.1:0", "not host:port"), (":9092", "not host:port"),
    (",", "at least one"), ("h:99999", "not host:port")])
def test_bad_bootstrap_servers(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_bootstrap_servers(text)


@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:9080", ("http://127.0.0.1:9080",)),
    ("http://a:1/, http://b:2", ("http://a:1", "http://b:2")),
    ("https://a:1", ("https://a:1",))])  # a controller listener with TLS (issue 29)
def test_admin_urls(text: str, expected: tuple[str, ...]) -> None:
    assert parse_admin_urls(text) == expected


def test_admin_urls_are_http_or_https() -> None:
    with pytest.raises(UsageError, match="is not http://host:port or https://host:port"):
        parse_admin_urls("ftp://a:1")


@pytest.mark.parametrize(("error", "code"), [
    (UsageError("no"), 2), (ClusterError("TOPIC_ALREADY_EXISTS", "x"), 1), (BrokenPipeError(), 0)])
def test_guarded_exit_codes(error: Exception, code: int, capsys: pytest.CaptureFixture[str],
                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tidelog.cli_common.silence_stdout", lambda: None)

    def body(_: argparse.Namespace) -> int:
        raise error
    assert guarded("x", body)(argparse.Namespace()) == code
    if code == 1:
        assert capsys.readouterr().err == "Error: TOPIC_ALREADY_EXISTS: x\n"


@pytest.mark.parametrize("argv", [
    ["topics", "create"],  # --topic is required
    ["topics", "create", "--topic", "t", "--partitions", "0"],
    ["consume", "t", "--offset", "soon"],
    ["produce", "t", "--request-required-acks", "2"],
    ["produce"],
])
def test_usage_errors_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2


# --- topics ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("items", "expected"), [
    (["retention.ms=1000"], {"retention.ms": "1000"}),
    (["a=1,b=2"], {"a": "1", "b": "2"}),
    (["a=x,y"], {"a": "x,y"}),
    (["a=", "b=c=d"], {"a": "", "b": "c=d"}),
])
def test_parse_configs(items: list[str], expected: dict[str, str]) -> None:
    assert parse_configs(items) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("4", [(4,)]),
    ("4:5,5:6", [(4, 5), (5, 6)]),
    (" 6 : 4 ,5:4", [(6, 4), (5, 4)]),  # int() takes the spaces kafka-topics.sh users type
])
def test_parse_replica_assignment(text: str, expected: list[tuple[int, ...]]) -> None:
    assert parse_replica_assignment(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("4:4", "partition 0 replica list '4:4' may not contain duplicate entries"),
    ("4,5:x", "partition 1 '5:x' is not broker ids"),
    ("4,,5", "partition 1 '' is not broker ids"),
    ("-1", "negative broker id"),
])
def test_parse_replica_assignment_refusals(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_replica_assignment(text)


@pytest.mark.parametrize(("sets", "deletes", "expected"), [
    (["a=1"], ["b,c"], {"a": "1", "b": None, "c": None}),
    ([], ["b"], {"b": None}),
])
def test_config_changes(sets: list[str], deletes: list[str], expected: dict[str, str | None]) -> None:
    assert config_changes(sets, deletes) == expected


@pytest.mark.parametrize(("sets", "deletes", "message"), [
    ([], [], "at least one"), (["a=1"], ["a"], "both set and deleted"), (["novalue"], [], "not key=value"),
    ([], ["a,,b"], "empty config name")])
def test_bad_config_changes(sets: list[str], deletes: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        config_changes(sets, deletes)


TOPIC = {"name": "demo", "topic_id": "AAAA", "configs": {"retention.ms": "1000", "cleanup.policy": "delete"},
         "partitions": [
             {"partition": 0, "leader": 4, "leader_epoch": 2, "replicas": [4, 5], "isr": [4, 5], "elr": [],
              "leader_recovery_state": "RECOVERED"},
             {"partition": 1, "leader": -1, "leader_epoch": 3, "replicas": [5, 4], "isr": [5], "elr": [4],
              "leader_recovery_state": "RECOVERED"}]}


def test_describe_lines() -> None:
    assert describe_lines(TOPIC) == [
        "Topic: demo  TopicId: AAAA  PartitionCount: 2  ReplicationFactor: 2  "
        "Configs: cleanup.policy=delete,retention.ms=1000",
        "  PARTITION  LEADER  LEADER_EPOCH  REPLICAS  ISR  ELR  RECOVERY",
        "          0  4                  2  4,5       4,5  -    RECOVERED",
        "          1  none               3  5,4       5    4    RECOVERED",
    ]


@pytest.mark.parametrize(("under", "unavailable", "partitions"), [
    (True, False, [1]), (False, True, [1]), (True, True, [1])])
def test_describe_filters(under: bool, unavailable: bool, partitions: list[int]) -> None:
    lines = describe_lines(TOPIC, under_replicated=under, unavailable=unavailable)
    assert [int(line.split()[0]) for line in lines[2:]] == partitions


def test_describe_filter_with_nothing_left_prints_nothing() -> None:
    healthy = {**TOPIC, "partitions": TOPIC["partitions"][:1]}
    assert describe_lines(healthy, unavailable=True) == []


def test_list_lines() -> None:
    assert list_lines([]) == []
    assert list_lines([{"name": "demo", "partitions": 3, "offline_partitions": 1, "under_replicated_partitions": 2,
                        "topic_id": "AAAA"}]) == [
        "TOPIC  PARTITIONS  OFFLINE  UNDER_REPLICATED  TOPIC_ID", "demo            3        1                 2  AAAA"]


# --- status ------------------------------------------------------------------------------------


def test_status_lines() -> None:
    view = {"cluster_id": "C", "active_controller": 2, "controller_epoch": 1, "term": 3, "metadata_offset": 57,
            "voters": [{"node_id": 1, "api_address": "127.0.0.1:9080", "quorum_address": "127.0.0.1:9093",
                        "role": "follower", "connected": True, "match_index": None}]}
    assert cluster_lines(view) == [
        "Cluster C: active controller 2, controller epoch 1, Raft term 3, metadata offset 57",
        "CONTROLLER  ADMIN           RAFT            ROLE      CONNECTED  MATCH_INDEX",
        "1           127.0.0.1:9080  127.0.0.1:9093  follower  yes                  -"]
    broker = {"broker_id": 4, "state": "UNFENCED", "broker_epoch": 3, "rack": None, "heartbeat_age_ms": 120,
              "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.4", "port": 9092}]}
    assert broker_lines([broker]) == ["BROKER  STATE     LISTENER        EPOCH  RACK  HEARTBEAT_AGE_MS",
                                      "4       UNFENCED  127.0.0.4:9092      3  -                  120"]
    assert broker_lines([]) == ["No brokers are registered."]
    assert topic_line([{"partitions": 3, "offline_partitions": 1, "under_replicated_partitions": 1},
                       {"partitions": 2, "offline_partitions": 0, "under_replicated_partitions": 0}]) == \
        "Topics: 2, partitions: 5, offline partitions: 1, under-replicated partitions: 1"


# --- the producer's partitioner ------------------------------------------------------------------


def topic(leaders: dict[int, int]) -> TopicInfo:
    return TopicInfo("t", 0, {p: PartitionInfo(p, leader, 0, (leader,), (leader,), 0) for p, leader in leaders.items()})


def test_router_sticks_per_batch_and_rotates() -> None:
    router, info = Router(), topic({0: 4, 1: 5, 2: 4})
    first = {router.partition(None, info) for _ in range(5)}
    router.next_batch()
    second = {router.partition(None, info) for _ in range(5)}
    assert len(first) == len(second) == 1 and first != second


def test_router_skips_partitions_without_a_leader() -> None:
    router, info = Router(), topic({0: -1, 1: 5, 2: -1})
    for _ in range(4):
        assert router.partition(None, info) == 1
        router.next_batch()
    assert Router().partition(None, topic({0: -1})) is None


def test_router_keys_and_explicit_partitions() -> None:
    info = topic({0: 4, 1: -1, 2: 4})
    assert Router().partition(b"abc", info) == 479470107 % 3  # murmur2, even to an offline partition
    assert Router(explicit=1).partition(b"abc", info) == 1


# --- the consumer's start --------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [("earliest", ("earliest", None)), ("7", (None, 7))])
def test_parse_offset(text: str, expected: tuple[str | None, int | None]) -> None:
    assert parse_offset(text) == expected


@pytest.mark.parametrize(("from_beginning", "offset", "partition", "expected"), [
    (False, None, None, StartOffset(named="latest")),
    (True, None, None, StartOffset(named="earliest")),
    (False, (None, 5), 0, StartOffset(offset=5)),
    (False, ("earliest", None), 2, StartOffset(named="earliest")),
])
def test_start_offset(from_beginning: bool, offset: tuple[str | None, int | None] | None, partition: int | None,
                      expected: StartOffset) -> None:
    assert start_offset(from_beginning=from_beginning, offset=offset, partition=partition) == expected


@pytest.mark.parametrize(("from_beginning", "offset", "partition", "message"), [
    (False, (None, 5), None, "--offset needs --partition"),
    (True, (None, 5), 0, "cannot be given together")])
def test_start_offset_clashes(from_beginning: bool, offset: tuple[str | None, int | None], partition: int | None,
                              message: str) -> None:
    with pytest.raises(UsageError, match=message):
        start_offset(from_beginning=from_beginning, offset=offset, partition=partition)


@pytest.mark.parametrize(("code", "name"), [(6, "NOT_LEADER_OR_FOLLOWER"), (36, "TOPIC_ALREADY_EXISTS"),
                                            (999, "ERROR_CODE_999")])
def test_error_names(code: int, name: str) -> None:
    assert error_name(code) == name


def test_a_node_process_builds_only_its_own_subcommand() -> None:
    parser = build_parser("broker")
    assert parser.parse_args(["broker", "--config", "x"]).config == "x"
    with pytest.raises(SystemExit):
        parser.parse_args(["topics", "list"])
    assert build_parser("topics").parse_args(["topics", "list"]).topics_command == "list"
