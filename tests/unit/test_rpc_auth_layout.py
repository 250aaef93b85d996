"""The local cluster's RPC secret (issue 29): every node's server.properties names the data dir's
secret file, new ones and, once, the ones of a data dir made before RPC authentication."""

from __future__ import annotations

from pathlib import Path

from common.config import parse_config
from common.properties import parse_properties
from localcluster.cluster_layout import BROKER, CONTROLLER, RPC_SECRET_FILE, ClusterSecrets, NodeSpec
from localcluster.server_properties import node_properties, properties_files
from security.rpc_auth import SECRET_FILE_KEY

SECRETS = ClusterSecrets(cluster_id="MkU3OEVBNTcwNTJENDM2Qg", password="s3cret-quorum-password-0123456789")
KEY = SECRET_FILE_KEY


def nodes(root: Path) -> tuple[NodeSpec, ...]:
    return (NodeSpec(1, CONTROLLER, "127.0.0.1", 9093, 9080, root / "controller-1"),
            NodeSpec(2, BROKER, "127.0.0.2", 0, 0, root / "broker-2", 9092, 9100))


def written(files: dict[int, str], node_id: int) -> dict[str, str]:
    return parse_properties(files[node_id], f"node {node_id}")


def test_new_nodes_name_the_secret_file(tmp_path: Path) -> None:
    secret = tmp_path / RPC_SECRET_FILE
    files = properties_files(nodes(tmp_path), SECRETS, None, {}, {}, secret)
    assert written(files, 1)[KEY] == written(files, 2)[KEY] == str(secret)
    for node_id in files:  # each parses as its node will
        assert parse_config(written(files, node_id))[KEY] == str(secret)


def test_a_test_may_turn_it_off_with_an_empty_value(tmp_path: Path) -> None:
    files = properties_files(nodes(tmp_path), SECRETS, {KEY: ""}, {}, {}, tmp_path / RPC_SECRET_FILE)
    assert written(files, 1)[KEY] == written(files, 2)[KEY] == ""


def test_a_data_dir_made_before_gets_the_key_once(tmp_path: Path) -> None:
    specs, secret = nodes(tmp_path), tmp_path / RPC_SECRET_FILE
    for node in specs:  # server.properties written before issue 29, with an operator's edit
        node.directory.mkdir()
        old = node_properties(node, specs, SECRETS)
        assert KEY not in old
        node.properties_path.write_text(old + "num.partitions=3\n")
    files = properties_files(specs, SECRETS, None, {}, {}, secret)
    assert sorted(files) == [1, 2]
    for node_id in files:
        assert written(files, node_id)[KEY] == str(secret)
        assert written(files, node_id)["num.partitions"] == "3"  # the operator's edit stays
    for node in specs:
        node.properties_path.write_text(files[node.node_id])
    assert properties_files(specs, SECRETS, None, {}, {}, secret) == {}  # the next start changes nothing


def test_without_a_secret_file_nothing_names_one(tmp_path: Path) -> None:
    files = properties_files(nodes(tmp_path), SECRETS, None, {}, {})
    assert KEY not in written(files, 1) and KEY not in written(files, 2)
