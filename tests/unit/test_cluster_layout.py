"""Tests for localcluster/cluster_layout.py: node planning, server.properties, secrets, cluster.json, lock.

No process or socket is ever started: the planning and rendering tables are pure, the data-dir
tests use tmp_path only, and the one test going through `LocalCluster.start` (the guard that
keeps an operator's server.properties lives there) replaces spawning and probing with fakes.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from common.config import parse_config
from common.config_schema import Config, Password
from common.properties import load_properties
from quorum.admin_api import ApiSettings
from quorum.quorum_settings import METADATA_DIR_NAME, QuorumSettings
from quorum.voters import Voter, parse_voters
from localcluster import cluster_layout, launcher, node_process
from localcluster.cluster_layout import (
    CLUSTER_FILE,
    COMBINED,
    CONTROLLER,
    DEFAULT_ADMIN_PORT,
    DEFAULT_CONTROLLERS,
    DEFAULT_RAFT_PORT,
    LOCK_FILE,
    MAX_CONTROLLERS,
    META_FILE,
    PASSWORD_FILE,
    ClusterSecrets,
    LayoutError,
    NodeSpec,
    cluster_document,
    cluster_id_from_meta,
    data_dir_lock,
    load_or_create_secrets,
    meta_properties,
    node_table,
    nodes_from_document,
    pids_from_document,
    plan,
    read_cluster_file,
    resolve_layout,
    write_atomic,
    write_private,
)
from localcluster.server_properties import node_properties

ROOT = Path("/srv/tidelog")  # pure tests never touch it
SECRETS = ClusterSecrets(cluster_id="MkU3OEVBNTcwNTJENDM2Qg", password="s3cret-quorum-password-0123456789")
ONE_CONTROLLER = (NodeSpec(1, CONTROLLER, "127.0.0.1", 9093, 9080, ROOT / "controller-1"),)
THREE_CONTROLLERS = (
    NodeSpec(1, CONTROLLER, "127.0.0.1", 9093, 9080, ROOT / "controller-1"),
    NodeSpec(2, CONTROLLER, "127.0.0.2", 9093, 9080, ROOT / "controller-2"),
    NodeSpec(3, CONTROLLER, "127.0.0.3", 9093, 9080, ROOT / "controller-3"),
)
FIVE_ON_OTHER_PORTS = tuple(NodeSpec(i, CONTROLLER, f"127.0.0.{i}", 19093, 19080, ROOT / f"controller-{i}")
                            for i in range(1, 6))
NINE_CONTROLLERS = tuple(NodeSpec(i, CONTROLLER, f"127.0.0.{i}", 1, 65535, ROOT / f"controller-{i}")
                         for i in range(1, 10))
PRIVATE = 0o600


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """umask 000: a file is private only if its creator asked for 0600 (not thanks to the umask)."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


# --- planning ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("controllers", "raft_port", "admin_port", "expected"), [
    pytest.param(1, DEFAULT_RAFT_PORT, DEFAULT_ADMIN_PORT, ONE_CONTROLLER, id="one"),
    pytest.param(3, DEFAULT_RAFT_PORT, DEFAULT_ADMIN_PORT, THREE_CONTROLLERS, id="three"),
    pytest.param(5, 19093, 19080, FIVE_ON_OTHER_PORTS, id="five-other-ports"),
    pytest.param(MAX_CONTROLLERS, 1, 65535, NINE_CONTROLLERS, id="max-extreme-ports"),
])
def test_plan(controllers: int, raft_port: int, admin_port: int, expected: tuple[NodeSpec, ...]) -> None:
    assert plan(ROOT, controllers=controllers, raft_port=raft_port, admin_port=admin_port) == expected


def test_plan_defaults() -> None:
    assert DEFAULT_CONTROLLERS == 3
    assert plan(ROOT) == THREE_CONTROLLERS


@pytest.mark.parametrize(("node", "expected"), [
    pytest.param(THREE_CONTROLLERS[1], {
        "properties_path": ROOT / "controller-2" / "server.properties",
        "log_path": ROOT / "controller-2" / "node.log",
        "quorum_address": "127.0.0.2:9093",
        "admin_address": "127.0.0.2:9080",
        "admin_url": "http://127.0.0.2:9080",
        "label": "controller 2",
    }, id="controller-2"),
    pytest.param(NINE_CONTROLLERS[8], {
        "properties_path": ROOT / "controller-9" / "server.properties",
        "log_path": ROOT / "controller-9" / "node.log",
        "quorum_address": "127.0.0.9:1",
        "admin_address": "127.0.0.9:65535",
        "admin_url": "http://127.0.0.9:65535",
        "label": "controller 9",
    }, id="controller-9"),
])
def test_node_spec_addresses_and_paths(node: NodeSpec, expected: Mapping[str, object]) -> None:
    assert {name: getattr(node, name) for name in expected} == expected


@pytest.mark.parametrize(("controllers", "raft_port", "admin_port", "message"), [
    pytest.param(0, 9093, 9080, "--controllers must be between 1 and 9, got 0", id="no-controllers"),
    pytest.param(-1, 9093, 9080, "--controllers must be between 1 and 9, got -1", id="negative"),
    pytest.param(10, 9093, 9080, "--controllers must be between 1 and 9, got 10", id="too-many"),
    pytest.param(3, 0, 9080, "the raft port must be a TCP port (1-65535), got 0", id="raft-port-0"),
    pytest.param(3, 65536, 9080, "the raft port must be a TCP port (1-65535), got 65536", id="raft-port-big"),
    pytest.param(3, 9093, -5, "the admin port must be a TCP port (1-65535), got -5", id="admin-negative"),
    pytest.param(3, 9093, 70000, "the admin port must be a TCP port (1-65535), got 70000", id="admin-big"),
    pytest.param(3, 9093, 9093, "the raft and admin ports must differ, both are 9093", id="same-ports"),
])
def test_plan_refuses(controllers: int, raft_port: int, admin_port: int, message: str) -> None:
    with pytest.raises(LayoutError) as caught:
        plan(ROOT, controllers=controllers, raft_port=raft_port, admin_port=admin_port)
    assert str(caught.value) == message


# --- server.properties --------------------------------------------------------------------------


def written_config(path: Path, text: str) -> tuple[dict[str, str], Config]:
    """Write `text` as `tidelog up` does, read it back as a node does: raw entries and parsed config."""
    write_private(path, text)
    entries = load_properties(path)
    return entries, parse_config(entries)  # an unknown or ill-typed key raises here


@pytest.mark.parametrize("nodes", [
    pytest.param(ONE_CONTROLLER, id="one"),
    pytest.param(THREE_CONTROLLERS, id="three"),
    pytest.param(FIVE_ON_OTHER_PORTS, id="five"),
    pytest.param(NINE_CONTROLLERS, id="nine"),
])
def test_node_properties_parse_back_for_every_node(tmp_path: Path, nodes: tuple[NodeSpec, ...]) -> None:
    raft_port, admin_port = nodes[0].raft_port, nodes[0].admin_port
    expected_voters = {n.node_id: Voter(n.node_id, n.host, raft_port) for n in nodes}
    expected_api = {n.node_id: Voter(n.node_id, n.host, admin_port) for n in nodes}
    for node in nodes:
        entries, config = written_config(tmp_path / f"{node.node_id}.properties",
                                         node_properties(node, nodes, SECRETS))
        assert sorted(entries) == sorted([
            "node.id", "process.roles", "controller.quorum.voters", "controller.listener",
            "controller.api.voters", "controller.cluster.password", "cluster.id", "metadata.log.dir",
            "console.chaos.reports.dir"])  # a controller's web console (no broker here: no metrics port)
        assert config["node.id"] == node.node_id
        assert config["process.roles"] == ("controller",)
        assert dict(parse_voters(config["controller.quorum.voters"])) == expected_voters  # type: ignore[arg-type]
        assert dict(parse_voters(config["controller.api.voters"])) == expected_api  # type: ignore[arg-type]
        assert config["controller.listener"] == f"{node.host}:{admin_port}"
        assert config["controller.cluster.password"] == Password(SECRETS.password)
        assert config["cluster.id"] == SECRETS.cluster_id
        assert config["metadata.log.dir"] == str(node.directory)
        # and the controller's own readers accept it, pointing at this node's directory
        quorum = QuorumSettings.from_config(config)
        assert (quorum.node_id, quorum.data_dir) == (node.node_id, node.directory / METADATA_DIR_NAME)
        api = ApiSettings.from_config(config, quorum)
        assert api is not None
        assert (api.host, api.port, api.cluster_id) == (node.host, admin_port, SECRETS.cluster_id)
        assert dict(api.api_voters) == {i: v.address for i, v in expected_api.items()}


def test_node_properties_text() -> None:
    node = THREE_CONTROLLERS[0]
    assert node_properties(node, THREE_CONTROLLERS, SECRETS).splitlines()[2:] == [
        "node.id=1",
        "process.roles=controller",
        "controller.quorum.voters=1@127.0.0.1:9093,2@127.0.0.2:9093,3@127.0.0.3:9093",
        "controller.listener=127.0.0.1:9080",
        "controller.api.voters=1@127.0.0.1:9080,2@127.0.0.2:9080,3@127.0.0.3:9080",
        f"controller.cluster.password={SECRETS.password}",
        f"cluster.id={SECRETS.cluster_id}",
        "metadata.log.dir=/srv/tidelog/controller-1",
        "console.chaos.reports.dir=/srv/chaos-reports",
    ]


@pytest.mark.parametrize(("extra", "expected"), [
    pytest.param({"broker.session.timeout.ms": "500", "broker.heartbeat.interval.ms": "100"},
                 {"broker.session.timeout.ms": 500, "broker.heartbeat.interval.ms": 100, "node.id": 2},
                 id="new-keys"),
    pytest.param({"cluster.id": "AAAAAAAAAAAAAAAAAAAAAA", "metadata.log.dir": "/elsewhere"},
                 {"cluster.id": "AAAAAAAAAAAAAAAAAAAAAA", "metadata.log.dir": "/elsewhere", "node.id": 2},
                 id="extra-wins"),
])
def test_node_properties_extra_keys_come_last_and_win(
        tmp_path: Path, extra: dict[str, str], expected: dict[str, object]) -> None:
    text = node_properties(THREE_CONTROLLERS[1], THREE_CONTROLLERS, SECRETS, extra)
    _, config = written_config(tmp_path / "server.properties", text)
    assert {key: config[key] for key in expected} == expected
    assert text.splitlines()[-len(extra):] == [f"{key}={value}" for key, value in extra.items()]


# A data dir is whatever --data-dir the operator gives; metadata.log.dir must name it exactly.
@pytest.mark.parametrize("data_dir_name", [
    pytest.param("plain", id="plain"),
    pytest.param("with space", id="space"),
    pytest.param("a=b:c", id="separators"),
    pytest.param("#not-a-comment", id="hash"),
    pytest.param("données", id="non-ascii"),  # passes under a UTF-8 locale (write_private's encoding)
    # BUG: node_properties writes values unescaped, load_properties reads '\s' as 's': the node
    # would keep its metadata log in .../backslash/controller-1, a directory nobody planned.
    pytest.param("back\\slash", id="backslash"),
])
def test_metadata_log_dir_round_trips_for_any_data_dir(tmp_path: Path, data_dir_name: str) -> None:
    nodes = plan(tmp_path / data_dir_name, controllers=1)
    nodes[0].directory.mkdir(parents=True)
    _, config = written_config(nodes[0].properties_path, node_properties(nodes[0], nodes, SECRETS))
    assert config["metadata.log.dir"] == str(nodes[0].directory)


# --- writing files ------------------------------------------------------------------------------


def test_write_private_creates_an_owner_only_file(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "server.properties"
    write_private(path, "node.id=1\n")
    assert (path.read_text(), mode(path)) == ("node.id=1\n", PRIVATE)


def test_write_private_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("# an operator's edit\nnode.id=7\n")
    with pytest.raises(FileExistsError):
        write_private(path, "node.id=1\n")
    assert path.read_text() == "# an operator's edit\nnode.id=7\n"


def test_write_atomic_replaces_and_leaves_no_scratch_file(tmp_path: Path) -> None:
    path = tmp_path / CLUSTER_FILE
    write_atomic(path, "old")
    write_atomic(path, "new")
    assert path.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == [CLUSTER_FILE]


# --- secrets: meta.properties and quorum.password ------------------------------------------------


def test_secrets_are_generated_once_then_reused(tmp_path: Path, open_umask: None) -> None:
    first = load_or_create_secrets(tmp_path)
    files = {name: (tmp_path / name).read_bytes() for name in (META_FILE, PASSWORD_FILE)}
    again = load_or_create_secrets(tmp_path)
    assert again == first
    assert {name: (tmp_path / name).read_bytes() for name in files} == files
    assert mode(tmp_path / PASSWORD_FILE) == PRIVATE
    assert len(first.cluster_id) == 22
    assert len(first.password) >= 40  # 32 random bytes, url-safe base64
    assert load_properties(tmp_path / META_FILE) == {"version": "1", "cluster.id": first.cluster_id}
    assert (tmp_path / PASSWORD_FILE).read_text() == first.password + "\n"


def test_secrets_differ_between_data_dirs(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()  # `up` holds the data-dir lock, which creates it
    one, other = load_or_create_secrets(tmp_path / "a"), load_or_create_secrets(tmp_path / "b")
    assert one.cluster_id != other.cluster_id
    assert one.password != other.password


def test_secrets_read_files_written_by_hand(tmp_path: Path) -> None:
    (tmp_path / META_FILE).write_text(meta_properties(SECRETS.cluster_id))
    write_private(tmp_path / PASSWORD_FILE, f"  {SECRETS.password}\n\n")
    assert load_or_create_secrets(tmp_path) == SECRETS


def test_a_password_file_readable_by_others_is_made_private(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = load_or_create_secrets(tmp_path)
    os.chmod(tmp_path / PASSWORD_FILE, 0o644)
    assert load_or_create_secrets(tmp_path) == first
    assert mode(tmp_path / PASSWORD_FILE) == PRIVATE
    assert "was readable by others; setting its mode to 0600" in capsys.readouterr().err


@pytest.mark.parametrize(("present", "missing"), [
    pytest.param(META_FILE, PASSWORD_FILE, id="password-lost"),
    pytest.param(PASSWORD_FILE, META_FILE, id="meta-lost"),
])
def test_secrets_refuse_half_a_data_dir(tmp_path: Path, present: str, missing: str) -> None:
    secrets = load_or_create_secrets(tmp_path)
    nodes = plan(tmp_path, controllers=1)  # a cluster has run here: its nodes hold these secrets
    write_atomic(tmp_path / CLUSTER_FILE, json.dumps(cluster_document(secrets.cluster_id, nodes, {})))
    (tmp_path / missing).unlink()
    with pytest.raises(LayoutError, match=f"{present} exists but .*{missing} does not"):
        load_or_create_secrets(tmp_path)
    assert not (tmp_path / missing).exists()  # nothing regenerated behind the operator's back


def test_an_interrupted_first_start_does_not_brick_the_data_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # BUG: the first start writes quorum.password, then meta.properties. When the second write
    # fails (disk full, quota, Ctrl-C in between), no node ever saw these secrets and no
    # cluster.json exists, yet every later `up` refuses the data dir for good, telling the
    # operator to "restore it from a backup" of a cluster that never existed.
    def disk_full(path: Path, text: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    with monkeypatch.context() as patch:
        patch.setattr(cluster_layout, "write_atomic", disk_full)
        with pytest.raises(OSError, match="No space left"):
            load_or_create_secrets(tmp_path)
    secrets = load_or_create_secrets(tmp_path)  # the retry, once space is free again
    assert cluster_id_from_meta((tmp_path / META_FILE).read_text()) == secrets.cluster_id
    assert (tmp_path / PASSWORD_FILE).read_text().strip() == secrets.password
    assert load_or_create_secrets(tmp_path) == secrets


@pytest.mark.parametrize(("meta", "password", "message"), [
    pytest.param("cluster.id=short\n", "p" * 20, "cluster id 'short' is not 22", id="bad-cluster-id"),
    pytest.param("version=1\n", "p" * 20, "meta.properties has no cluster.id line", id="no-cluster-id"),
    pytest.param(meta_properties(SECRETS.cluster_id), "tooshort\n", "shorter than 16", id="short-password"),
])
def test_secrets_refuse_damaged_files(tmp_path: Path, meta: str, password: str, message: str) -> None:
    (tmp_path / META_FILE).write_text(meta)
    write_private(tmp_path / PASSWORD_FILE, password)
    with pytest.raises(LayoutError, match=message):
        load_or_create_secrets(tmp_path)


@pytest.mark.parametrize(("text", "cluster_id"), [
    pytest.param(meta_properties(SECRETS.cluster_id), SECRETS.cluster_id, id="as-written"),
    pytest.param("#c\n  cluster.id = MkU3OEVBNTcwNTJENDM2Qg \nversion=1\n", SECRETS.cluster_id, id="blanks"),
])
def test_cluster_id_from_meta(text: str, cluster_id: str) -> None:
    assert cluster_id_from_meta(text) == cluster_id


def test_cluster_secrets_repr_hides_the_password() -> None:
    assert repr(SECRETS) == f"ClusterSecrets(cluster_id={SECRETS.cluster_id!r}, password=[hidden])"
    assert SECRETS.password not in repr(SECRETS)


# --- cluster.json ---------------------------------------------------------------------------------


def write_document(root: Path, nodes: tuple[NodeSpec, ...], pids: Mapping[int, int | None]) -> None:
    """cluster.json as LocalCluster.write_cluster_file writes it."""
    write_atomic(root / CLUSTER_FILE, json.dumps(cluster_document(SECRETS.cluster_id, nodes, pids), indent=2))


@pytest.mark.parametrize(("controllers", "pids", "recorded"), [
    pytest.param(1, {1: 4242}, {1: 4242}, id="one-running"),
    pytest.param(3, {1: 11, 2: 22, 3: 33}, {1: 11, 2: 22, 3: 33}, id="three-running"),
    pytest.param(3, {1: None, 2: None, 3: None}, {}, id="three-stopped"),
    pytest.param(3, {1: 11}, {1: 11}, id="one-of-three-started"),
])
def test_cluster_file_round_trip(tmp_path: Path, controllers: int, pids: dict[int, int | None],
                                 recorded: dict[int, int]) -> None:
    nodes = plan(tmp_path, controllers=controllers, raft_port=19093, admin_port=19080)
    write_document(tmp_path, nodes, pids)
    document = read_cluster_file(tmp_path)
    assert document is not None
    assert nodes_from_document(document) == nodes
    assert pids_from_document(document) == recorded
    assert document["cluster_id"] == SECRETS.cluster_id
    assert document["admin_url"] == "http://127.0.0.1:19080"
    assert document["bootstrap_servers"] is None
    assert document["nodes"][0] == {
        "id": 1, "role": CONTROLLER, "host": "127.0.0.1", "raft_port": 19093, "admin_port": 19080,
        "admin_url": "http://127.0.0.1:19080", "pid": pids.get(1), "data_dir": str(tmp_path / "controller-1"),
        "config_file": str(tmp_path / "controller-1" / "server.properties"),
        "log_file": str(tmp_path / "controller-1" / "node.log"),
    }


def test_no_cluster_file_means_no_cluster(tmp_path: Path) -> None:
    assert read_cluster_file(tmp_path) is None


@pytest.mark.parametrize(("content", "message"), [
    pytest.param(b"{not json", "is not JSON", id="not-json"),
    pytest.param(b"", "is not JSON", id="empty"),
    pytest.param(b"\xff\xfe{}", "is not JSON", id="not-utf-8"),
    pytest.param(b"[]", "is not a version 1 cluster file", id="a-list"),
])
def test_unreadable_cluster_file_is_refused(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / CLUSTER_FILE).write_bytes(content)
    with pytest.raises(LayoutError, match=message):
        read_cluster_file(tmp_path)


GOOD_ENTRY: dict[str, Any] = {"id": 1, "role": CONTROLLER, "host": "127.0.0.1", "raft_port": 9093,
                              "admin_port": 9080, "data_dir": "/srv/tidelog/controller-1"}


@pytest.mark.parametrize(("document", "message"), [
    pytest.param(None, "is not a version 1 cluster file", id="null"),
    pytest.param({"nodes": [GOOD_ENTRY]}, "is not a version 1 cluster file", id="no-version"),
    pytest.param({"version": 2, "nodes": [GOOD_ENTRY]}, "is not a version 1 cluster file", id="version-2"),
    pytest.param({"version": 1}, "lists no nodes", id="no-nodes"),
    pytest.param({"version": 1, "nodes": []}, "lists no nodes", id="empty-nodes"),
    pytest.param({"version": 1, "nodes": {"1": GOOD_ENTRY}}, "lists no nodes", id="nodes-not-a-list"),
    pytest.param({"version": 1, "nodes": [{**GOOD_ENTRY, "host": None}]},
                 "node 1 is not a loopback controller", id="host-null"),
    pytest.param({"version": 1, "nodes": [{k: v for k, v in GOOD_ENTRY.items() if k != "raft_port"}]},
                 "a malformed node entry", id="missing-key"),
    pytest.param({"version": 1, "nodes": [{**GOOD_ENTRY, "id": "one"}]}, "a malformed node entry", id="bad-id"),
    pytest.param({"version": 1, "nodes": ["controller-1"]}, "a malformed node entry", id="entry-not-object"),
    pytest.param({"version": 1, "nodes": [{**GOOD_ENTRY, "role": "broker"}]},
                 "a malformed node entry", id="broker-without-kafka-port"),
    pytest.param({"version": 1, "nodes": [{**GOOD_ENTRY, "role": "observer"}]},
                 "node 1 is not a loopback controller or broker", id="unknown-role"),
    pytest.param({"version": 1, "nodes": [{**GOOD_ENTRY, "host": "10.0.0.1"}]},
                 "node 1 is not a loopback controller", id="not-loopback"),
])
def test_malformed_cluster_documents(document: object, message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        nodes_from_document(document)


# --- restarting: resolve_layout -------------------------------------------------------------------


@pytest.mark.parametrize(("asked", "expected_count", "expected_ports"), [
    pytest.param({}, DEFAULT_CONTROLLERS, (DEFAULT_RAFT_PORT, DEFAULT_ADMIN_PORT), id="defaults"),
    pytest.param({"controllers": 1}, 1, (DEFAULT_RAFT_PORT, DEFAULT_ADMIN_PORT), id="one"),
    pytest.param({"controllers": 5, "raft_port": 1234, "admin_port": 5678}, 5, (1234, 5678), id="all-asked"),
])
def test_first_start_plans_what_is_asked(tmp_path: Path, asked: dict[str, int], expected_count: int,
                                         expected_ports: tuple[int, int]) -> None:
    request: dict[str, int | None] = {"controllers": None, "raft_port": None, "admin_port": None, **asked}
    raft_port, admin_port = expected_ports
    assert resolve_layout(tmp_path, **request) == plan(
        tmp_path, controllers=expected_count, raft_port=raft_port, admin_port=admin_port)


STORED = {"controllers": 3, "raft_port": 19093, "admin_port": 19080}


@pytest.mark.parametrize("asked", [
    pytest.param({}, id="nothing-asked"),
    pytest.param(STORED, id="same-shape"),
    pytest.param({"controllers": 3}, id="same-count"),
    pytest.param({"raft_port": 19093, "admin_port": 19080}, id="same-ports"),
])
def test_restart_reuses_the_stored_layout(tmp_path: Path, asked: dict[str, int]) -> None:
    nodes = plan(tmp_path, **STORED)
    write_document(tmp_path, nodes, {})
    request: dict[str, int | None] = {"controllers": None, "raft_port": None, "admin_port": None, **asked}
    assert resolve_layout(tmp_path, **request) == nodes


@pytest.mark.parametrize(("asked", "conflicts"), [
    pytest.param({"controllers": 5}, "--controllers 5 (it has 3)", id="more-controllers"),
    pytest.param({"controllers": 1}, "--controllers 1 (it has 3)", id="fewer-controllers"),
    pytest.param({"raft_port": 9093}, "--raft-port 9093 (it has 19093)", id="raft-port"),
    pytest.param({"admin_port": 9080}, "--admin-port 9080 (it has 19080)", id="admin-port"),
    pytest.param({"controllers": 3, "raft_port": 1, "admin_port": 2},
                 "--raft-port 1 (it has 19093), --admin-port 2 (it has 19080)", id="both-ports"),
])
def test_restart_with_another_shape_is_refused(tmp_path: Path, asked: dict[str, int], conflicts: str) -> None:
    write_document(tmp_path, plan(tmp_path, **STORED), {})
    request: dict[str, int | None] = {"controllers": None, "raft_port": None, "admin_port": None, **asked}
    with pytest.raises(LayoutError) as caught:
        resolve_layout(tmp_path, **request)
    assert str(caught.value) == (
        f"{tmp_path} holds an existing cluster that cannot change shape: {conflicts}. Leave these "
        "options out to restart it as it was, or use a new --data-dir.")


def test_restart_refuses_node_directories_outside_the_data_dir(tmp_path: Path) -> None:
    write_document(tmp_path, plan(tmp_path / "moved-away", controllers=1), {})
    with pytest.raises(LayoutError, match="names node directories outside"):
        resolve_layout(tmp_path, controllers=None, raft_port=None, admin_port=None)


# --- the data-dir lock ----------------------------------------------------------------------------


def test_the_lock_refuses_a_second_holder(tmp_path: Path) -> None:
    root = tmp_path / "new" / "data"
    with data_dir_lock(root):
        assert (root / LOCK_FILE).exists()
        assert mode(root) == 0o700 & ~_umask()
        with pytest.raises(LayoutError, match=f"another `tidelog up` or `down` is working on {root}"):
            with data_dir_lock(root):
                pass  # pragma: no cover - never reached
    with data_dir_lock(root):  # released on exit: the next up or down may go
        pass


def test_the_lock_is_released_when_the_body_raises(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="boom"):
        with data_dir_lock(tmp_path):
            raise ValueError("boom")
    with data_dir_lock(tmp_path):
        pass


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


# --- node_table -----------------------------------------------------------------------------------


def test_node_table() -> None:
    assert node_table(THREE_CONTROLLERS[:2], {1: 4242}, active=2) == [
        "NODE  ROLE                 HOST       RAFT  ADMIN                  PID   LOG",
        "1     controller           127.0.0.1  9093  http://127.0.0.1:9080  4242  /srv/tidelog/controller-1/node.log",
        "2     controller (active)  127.0.0.2  9093  http://127.0.0.2:9080  -     /srv/tidelog/controller-2/node.log",
    ]


# --- how LocalCluster.start uses the layout (spawning and probing faked: no process starts) -------


@pytest.fixture
def no_processes(monkeypatch: pytest.MonkeyPatch) -> list[NodeSpec]:
    """Make LocalCluster.start spawn nothing: every node 'starts' and is at once recorded as stopped."""
    spawned: list[NodeSpec] = []

    def spawn(spec: NodeSpec) -> node_process.NodeProcess:
        spawned.append(spec)
        return node_process.NodeProcess(spec, None)

    monkeypatch.setattr(node_process.NodeProcess, "spawn", staticmethod(spawn))
    monkeypatch.setattr(launcher, "check_ports_free", lambda nodes: None)
    monkeypatch.setattr(launcher.LocalCluster, "wait_ready", lambda self, *args, **kwargs: 1)
    return spawned


def test_start_writes_private_properties_once_and_keeps_an_operators_edits(
        tmp_path: Path, no_processes: list[NodeSpec], open_umask: None) -> None:
    root = tmp_path.resolve()
    cluster = launcher.LocalCluster.start(root, controllers=3, raft_port=19093, admin_port=19080)
    nodes = plan(root, controllers=3, raft_port=19093, admin_port=19080)
    assert no_processes == list(nodes)
    assert [mode(n.properties_path) for n in nodes] == [PRIVATE] * 3
    assert mode(root / PASSWORD_FILE) == PRIVATE
    edited = nodes[1].properties_path.read_text() + "broker.session.timeout.ms=1234\n"
    nodes[1].properties_path.write_text(edited)
    untouched = nodes[2].properties_path.read_bytes()
    document = read_cluster_file(root)
    assert document is not None and nodes_from_document(document) == nodes

    again = launcher.LocalCluster.start(root, extra_properties={"broker.session.timeout.ms": "1"})
    assert again.cluster_id == cluster.cluster_id == cluster_id_from_meta((root / META_FILE).read_text())
    assert nodes[1].properties_path.read_text() == edited
    assert nodes[2].properties_path.read_bytes() == untouched
    assert parse_config(load_properties(nodes[1].properties_path))["broker.session.timeout.ms"] == 1234


def test_start_refuses_another_shape_before_touching_the_data_dir(
        tmp_path: Path, no_processes: list[NodeSpec]) -> None:
    root = tmp_path.resolve()
    launcher.LocalCluster.start(root, controllers=3)
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    no_processes.clear()
    with pytest.raises(LayoutError, match=r"cannot change shape: --controllers 5 \(it has 3\)"):
        launcher.LocalCluster.start(root, controllers=5)
    assert no_processes == []
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before


# --- combined mode (process.roles=broker,controller) --------------------------------------------


def test_plan_combined_nodes_then_brokers() -> None:
    nodes = plan(ROOT, controllers=2, brokers=1, combined=True, raft_port=1, admin_port=2, kafka_port=3,
                 metrics_port=4)
    assert nodes == (
        NodeSpec(1, COMBINED, "127.0.0.1", 1, 2, ROOT / "combined-1", 3, 4),
        NodeSpec(2, COMBINED, "127.0.0.2", 1, 2, ROOT / "combined-2", 3, 4),
        NodeSpec(3, "broker", "127.0.0.3", 0, 0, ROOT / "broker-3", 3, 4),
    )
    assert nodes[0].ports == (("raft", 1), ("admin API", 2), ("Kafka listener", 3), ("metrics", 4))


def test_plan_combined_needs_four_ports() -> None:
    with pytest.raises(LayoutError, match="must all differ"):
        plan(ROOT, controllers=1, combined=True, raft_port=9093, admin_port=9080, kafka_port=9093)


def test_combined_properties_run_both_halves(tmp_path: Path) -> None:
    nodes = plan(tmp_path, controllers=1, combined=True, brokers=1)
    _, config = written_config(tmp_path / "1.properties", node_properties(nodes[0], nodes, SECRETS))
    assert config["process.roles"] == ("broker", "controller")
    quorum = QuorumSettings.from_config(config)
    assert quorum.data_dir == tmp_path / "combined-1" / "metadata" / METADATA_DIR_NAME
    from broker.broker_settings import BrokerSettings  # the broker half reads the same file
    from tidelog.combined_node import CombinedSettings

    settings = CombinedSettings.from_config(config)
    assert settings.broker == BrokerSettings.from_config(config)
    assert settings.broker.log_dirs == (tmp_path / "combined-1" / "data",)
    assert settings.broker.controller_addresses == ("127.0.0.1:9080",)
    _, broker = written_config(tmp_path / "2.properties", node_properties(nodes[1], nodes, SECRETS))
    assert broker["controller.api.voters"] == ("1@127.0.0.1:9080",)  # the separate broker follows it


def test_combined_cluster_file_round_trip_and_table(tmp_path: Path) -> None:
    nodes = plan(tmp_path, controllers=1, combined=True)
    document = cluster_document(SECRETS.cluster_id, nodes, {1: 77})
    assert document["bootstrap_servers"] == "127.0.0.1:9092" and document["admin_url"] == "http://127.0.0.1:9080"
    entry = document["nodes"][0]
    assert (entry["role"], entry["admin_url"], entry["bootstrap"], entry["pid"]) == (
        "combined", "http://127.0.0.1:9080", "127.0.0.1:9092", 77)
    assert nodes_from_document(json.loads(json.dumps(document))) == nodes
    assert node_table(nodes, {1: 77}, active=1)[1].split() == [
        "1", "combined", "(active)", "127.0.0.1", "9093", "http://127.0.0.1:9080", "PLAINTEXT://127.0.0.1:9092",
        "77", str(tmp_path / "combined-1" / "node.log")]


def test_combined_or_not_is_part_of_the_stored_shape(tmp_path: Path) -> None:
    write_atomic(tmp_path / CLUSTER_FILE, json.dumps(cluster_document(
        SECRETS.cluster_id, plan(tmp_path, controllers=1, combined=True), {})))
    assert resolve_layout(tmp_path, controllers=None, raft_port=None, admin_port=None)[0].role == COMBINED
    with pytest.raises(LayoutError, match="combined nodes; leave --combined in"):
        resolve_layout(tmp_path, controllers=None, raft_port=None, admin_port=None, combined=False)
