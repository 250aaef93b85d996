"""Which RPC key file each node of a local cluster reads, and writing a broker's (issue 29).

    rpc_key_file(spec, root / "rpc.secret")   # what its controller.rpc.secret.file names
    write_node_key(spec, root / "rpc.secret")  # before the node starts: a broker's own key

Controllers and combined nodes read the data dir's master secret; a broker reads only its own
key (`security.rpc_auth.broker_key`) from its node directory, so a broker cannot sign for
another (`security.rpc_auth`'s docstring says why).
"""

from __future__ import annotations

from pathlib import Path

from localcluster.cluster_layout import BROKER, NodeSpec, replace_private
from security.rpc_secret import BROKER_KEY_FILE, broker_key_text, load_secret


def rpc_key_file(node: NodeSpec, rpc_secret_file: Path) -> Path:
    """The file a node's controller.rpc.secret.file names: a broker's own key in its directory,
    the master secret for the others."""
    return node.directory / BROKER_KEY_FILE if node.role == BROKER else rpc_secret_file


def write_node_key(node: NodeSpec, rpc_secret_file: Path) -> None:
    """Write a broker's key file (0600, all at once) from the master, in its directory (made if
    missing), unless it already holds that key; the other roles read the master itself, so
    nothing is written for them."""
    if node.role != BROKER:
        return
    node.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path, text = rpc_key_file(node, rpc_secret_file), broker_key_text(load_secret(rpc_secret_file), node.node_id)
    try:
        if path.read_text(encoding="ascii") == text:
            return
    except (OSError, UnicodeDecodeError):
        pass  # missing or unreadable: written below
    replace_private(path, text)
