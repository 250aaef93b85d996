"""The local cluster's RPC secret (issue 29): every controller's server.properties names the data
dir's secret file and every broker's its own key file, new ones and, once, the ones of a data dir
made before RPC authentication; the launcher writes a broker's key before it starts."""

from __future__ import annotations

from pathlib import Path

from common.config import parse_config
from common.properties import parse_properties
from localcluster.cluster_layout import BROKER, CONTROLLER, RPC_SECRET_FILE, ClusterSecrets, NodeSpec
from localcluster.rpc_keys import write_node_key
from localcluster.server_properties import node_properties, properties_files
from security.rpc_auth import SECRET_FILE_KEY, broker_key
from security.rpc_secret import BROKER_KEY_FILE, load_node_key, load_or_create_secret

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
    assert written(files, 1)[KEY] == str(secret)
    assert written(files, 2)[KEY] == str(tmp_path / "broker-2" / BROKER_KEY_FILE)  # never the master
    for node_id in files:  # each parses as its node will
        assert parse_config(written(files, node_id))[KEY] == written(files, node_id)[KEY]


def test_a_broker_gets_its_own_key_and_a_controller_nothing(tmp_path: Path) -> None:
    secret = tmp_path / RPC_SECRET_FILE
    master = load_or_create_secret(secret)[0]
    controller, broker = nodes(tmp_path)
    write_node_key(controller, secret)
    write_node_key(broker, secret)
    assert not controller.directory.exists()  # it reads the master itself
    key_file = broker.directory / BROKER_KEY_FILE
    assert load_node_key(key_file, 2) == broker_key(master, 2)
    assert master.hex() not in key_file.read_text() and key_file.stat().st_mode & 0o777 == 0o600
    write_node_key(broker, secret)  # a restart: the same key, nothing else in the directory
    assert sorted(p.name for p in broker.directory.iterdir()) == [BROKER_KEY_FILE]


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
    assert written(files, 1)[KEY] == str(secret)
    assert written(files, 2)[KEY] == str(tmp_path / "broker-2" / BROKER_KEY_FILE)
    for node_id in files:
        assert written(files, node_id)["num.partitions"] == "3"  # the operator's edit stays
    for node in specs:
        node.properties_path.write_text(files[node.node_id])
    assert properties_files(specs, SECRETS, None, {}, {}, secret) == {}  # the next start changes nothing


def test_without_a_secret_file_nothing_names_one(tmp_path: Path) -> None:
    files = properties_files(nodes(tmp_path), SECRETS, None, {}, {})
    assert KEY not in written(files, 1) and KEY not in written(files, 2)
