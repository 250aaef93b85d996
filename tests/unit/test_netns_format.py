"""`tidelog format`'s pure part (tidelog.cli_format): the files it writes, and every request it refuses
with the option named."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.config import parse_config
from common.properties import parse_properties
from security.rpc_secret import broker_key_text
from tidelog.cli_format import (
    META_FILE,
    PROPERTIES_FILE,
    RPC_SECRET_FILE,
    SECRETS_FILE,
    ClusterSecretsBundle,
    FormatError,
    FormatRequest,
    format_files,
    parse_controllers,
)

SECRETS = ClusterSecretsBundle("AAAAAAAAAAAAAAAAAAAAAA", "p" * 43, "t" * 43, "ab" * 32)
VOTERS = parse_controllers("1@10.0.0.1,2@10.0.0.2,3@10.0.0.3")
NODE1 = FormatRequest(Path("/srv/t"), 1, "broker,controller", "10.0.0.1", "0.0.0.0", VOTERS)
BROKER4 = FormatRequest(Path("/srv/t"), 4, "broker", "10.0.0.4", "10.0.0.4", VOTERS)


def test_first_combined_node() -> None:
    files = format_files(NODE1, SECRETS, first=True)
    assert sorted(files) == sorted([PROPERTIES_FILE, META_FILE, RPC_SECRET_FILE, SECRETS_FILE])
    entries = parse_properties(files[PROPERTIES_FILE], PROPERTIES_FILE)
    assert entries["controller.quorum.voters"] == "1@10.0.0.1:9093,2@10.0.0.2:9093,3@10.0.0.3:9093"
    assert entries["controller.api.voters"] == "1@10.0.0.1:9080,2@10.0.0.2:9080,3@10.0.0.3:9080"
    assert entries["listeners"] == "PLAINTEXT://0.0.0.0:9092"  # bound on every interface,
    assert entries["advertised.listeners"] == "PLAINTEXT://10.0.0.1:9092"  # advertised as reachable
    assert entries["controller.listener"] == "10.0.0.1:9080"
    parse_config(entries)  # the node accepts it
    assert ClusterSecretsBundle.from_text(files[SECRETS_FILE], SECRETS_FILE) == SECRETS
    assert "cluster.id=AAAAAAAAAAAAAAAAAAAAAA" in files[META_FILE] and "node.id=1" in files[META_FILE]


def test_a_broker_copies_the_secrets() -> None:
    files = format_files(BROKER4, SECRETS, first=False)
    assert SECRETS_FILE not in files
    entries = parse_properties(files[PROPERTIES_FILE], PROPERTIES_FILE)
    assert "controller.quorum.voters" not in entries and entries["admin.token"] == SECRETS.admin_token
    # a broker gets only its own RPC key, never the master that signs for every broker (issue 29)
    assert files[RPC_SECRET_FILE] == broker_key_text(bytes.fromhex(SECRETS.rpc_secret_hex), 4)
    assert SECRETS.rpc_secret_hex not in files[RPC_SECRET_FILE]


@pytest.mark.parametrize(("text", "error"), [
    ("1@a,1@b", "node id twice"),
    ("1@a,2@a", "host twice"),
    ("1:a", "ID@HOST"),
    ("1@a:9093", "ID@HOST"),
])
def test_bad_controller_lists(text: str, error: str) -> None:
    with pytest.raises(FormatError, match=error):
        parse_controllers(text)


@pytest.mark.parametrize(("request_", "error"), [
    (FormatRequest(Path("/t"), 4, "broker,controller", "10.0.0.4", "10.0.0.4", VOTERS), "not in --controllers"),
    (FormatRequest(Path("/t"), 1, "controller", "10.0.0.9", "10.0.0.9", VOTERS), "same list"),
    (FormatRequest(Path("/t"), 2, "broker", "10.0.0.2", "10.0.0.2", VOTERS), "no controller has"),
    (FormatRequest(Path("/t"), 4, "broker", "0.0.0.0", "0.0.0.0", VOTERS), "wildcard"),
    (FormatRequest(Path("/t"), 4, "broker", "127.0.0.1", "127.0.0.1", VOTERS), "loopback"),
    (FormatRequest(Path("/t"), 4, "broker", "10.0.0.4", "10.0.0.4", VOTERS, kafka_port=9081), "distinct"),
    (FormatRequest(Path("/t"), 4, "broker", "bad host!", "10.0.0.4", VOTERS), "--host"),
])
def test_refused_requests_name_the_option(request_: FormatRequest, error: str) -> None:
    with pytest.raises(FormatError, match=error):
        format_files(request_, SECRETS, first=False)


def test_secrets_file_must_be_complete() -> None:
    with pytest.raises(FormatError, match="lacks admin.token, rpc.secret"):
        ClusterSecretsBundle.from_text("cluster.id=x\ncontroller.cluster.password=y\n", "copy")
