"""tidelog/cli_spark.py: `tidelog spark ingest` finds its brokers as the other commands do —
--bootstrap-server (or its old spelling --bootstrap-servers), else --data-dir's cluster.json."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from tidelog import cli
from tidelog.cli_common import UsageError, format_bootstrap_servers
from tidelog.cli_spark import ingest_bootstrap_servers
from localcluster.cluster_layout import CLUSTER_FILE, cluster_document, plan

BASE_ARGS = ("spark", "ingest", "--topic", "orders", "--to", "out")


def write_cluster(root: Path, *, brokers: int, kafka_port: int = 19092) -> None:
    nodes = plan(root, controllers=1, brokers=brokers, kafka_port=kafka_port)
    root.mkdir(parents=True, exist_ok=True)
    document = cluster_document("AAAAAAAAAAAAAAAAAAAAAA", nodes, {n.node_id: None for n in nodes})
    (root / CLUSTER_FILE).write_text(json.dumps(document))


def parsed(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args([*BASE_ARGS, *argv])


def test_brokers_come_from_the_data_dirs_cluster_file(tmp_path: Path) -> None:
    write_cluster(tmp_path / "data", brokers=3)
    args = parsed("--data-dir", str(tmp_path / "data"))
    assert ingest_bootstrap_servers(args) == "127.0.0.2:19092,127.0.0.3:19092,127.0.0.4:19092"


@pytest.mark.parametrize("option", ["--bootstrap-server", "--bootstrap-servers"])
def test_an_explicit_bootstrap_server_wins_over_the_data_dir(tmp_path: Path, option: str) -> None:
    write_cluster(tmp_path, brokers=1)
    args = parsed("--data-dir", str(tmp_path), option, "h1:1,[::1]:2")
    assert ingest_bootstrap_servers(args) == "h1:1,[::1]:2"


@pytest.mark.parametrize(("brokers", "message"), [
    (None, "no broker to talk to: give --bootstrap-server"),  # no cluster.json at all
    (0, "no broker to talk to: give --bootstrap-server"),  # a cluster of controllers only
])
def test_no_broker_anywhere_is_a_usage_error(tmp_path: Path, brokers: int | None, message: str) -> None:
    if brokers is not None:
        write_cluster(tmp_path, brokers=brokers)
    with pytest.raises(UsageError, match=message):
        ingest_bootstrap_servers(parsed("--data-dir", str(tmp_path)))


def test_the_command_exits_2_naming_the_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*BASE_ARGS, "--data-dir", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("tidelog spark ingest: no broker to talk to") and str(tmp_path / CLUSTER_FILE) in error


def test_format_bootstrap_servers() -> None:
    assert format_bootstrap_servers([("127.0.0.4", 9092), ("::1", 9093)]) == "127.0.0.4:9092,[::1]:9093"
    assert format_bootstrap_servers([]) == ""
