"""`tidelog up --controllers N` on a data dir whose cluster has fewer controllers: grow the
quorum online (KIP-853), one controller at a time.

    target = growth_target(root, args.controllers)   # None: nothing to grow
    cluster = LocalCluster.start(root, ...)           # the cluster as it is
    grow(cluster, target, say=print)                  # start the new ones, add them one by one

Each new controller takes the next free node id (after every node of the data dir, brokers
included) and its loopback address, the same ports as the others, and a copy of an existing
controller's server.properties with its own node.id, listeners and metadata dir, plus
`controller.quorum.listener`: it starts as an observer. Once it answers, the active controller
is asked to add it (`POST /v1/quorum/voters`); it joins cluster.json at once, so `tidelog down`
stops it and the next `up` starts it as a voter. Fewer controllers than the cluster has is
refused: remove them online (`tidelog quorum remove-controller`), then stop them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Final

from common.properties import load_properties, set_entries
from common.units import SECONDS
from common.waiting import WaitTimeout, wait_until
from localcluster import cluster_layout as layout
from localcluster.cluster_layout import CONTROLLER, LayoutError, NodeSpec, data_dir_lock, replace_private
from localcluster.launcher import LauncherError, LocalCluster, check_ports_free
from localcluster.node_process import NodeProcess
from tidelog.admin_client import AdminClient
from tidelog.cli_common import ClusterError

JOIN_WAIT: Final = 30 * SECONDS  # a new controller's API answering
JOIN_POLL: Final = 0.2 * SECONDS


def growth_target(root: Path, controllers: int | None) -> int | None:
    """The controller count to grow to when `controllers` asks more than the data dir's cluster
    has; None when there is nothing to grow. LayoutError for fewer, or for combined nodes."""
    document = layout.read_cluster_file(root)
    if document is None or controllers is None:
        return None
    voters = [s for s in layout.nodes_from_document(document) if layout.runs_controller(s.role)]
    if controllers == len(voters):
        return None
    if controllers < len(voters):
        raise LayoutError(f"{root} runs {len(voters)} controllers; remove controllers online with `tidelog quorum "
                          "remove-controller --controller-id N`, then stop them, rather than asking for fewer")
    if voters[0].role != CONTROLLER:
        raise LayoutError(f"{root} runs combined nodes; only a cluster of separate controllers grows with "
                          "--controllers")
    if controllers > layout.MAX_CONTROLLERS:
        raise LayoutError(f"--controllers must be at most {layout.MAX_CONTROLLERS}, got {controllers}")
    return controllers


def _new_spec(cluster: LocalCluster, node_id: int) -> NodeSpec:
    base = cluster.controllers[0].spec
    return NodeSpec(node_id, CONTROLLER, f"{layout.LOOPBACK_NETWORK}{node_id}", base.raft_port, base.admin_port,
                    cluster.root / f"{CONTROLLER}-{node_id}")


def _properties(cluster: LocalCluster, spec: NodeSpec) -> str:
    base = cluster.controllers[0].spec.properties_path
    return set_entries(base.read_text(encoding="utf-8"), {
        "node.id": str(spec.node_id), "controller.listener": spec.admin_address,
        "controller.quorum.listener": spec.quorum_address, "metadata.log.dir": str(spec.directory)},
        str(spec.properties_path), "Written by `tidelog up --controllers`: this controller joined a running quorum.")


def _answers(spec: NodeSpec) -> bool:
    try:
        answer = AdminClient([spec.admin_url], timeout=JOIN_POLL * 5).request("GET", "/v1/quorum/replica")
    except ClusterError:
        return False
    return isinstance(answer, dict) and answer.get("node_id") == spec.node_id


def grow(cluster: LocalCluster, target: int, *, say: Callable[[str], None]) -> list[int]:
    """Start controllers until the cluster has `target`, adding each to the quorum before the next;
    the new node ids. LauncherError (the nodes started so far keep running, in cluster.json) when
    one does not come up or the quorum refuses it."""
    added: list[int] = []
    with data_dir_lock(cluster.root):
        token = load_properties(cluster.controllers[0].spec.properties_path).get("admin.token")
        while len(cluster.controllers) < target:  # bounded: one controller more each pass, or raise
            node_id = max(n.spec.node_id for n in cluster.nodes) + 1
            spec = _new_spec(cluster, node_id)
            check_ports_free([spec])
            spec.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            replace_private(spec.properties_path, _properties(cluster, spec))
            voters = [n.spec.admin_url for n in cluster.controllers]
            cluster.nodes.append(NodeProcess.spawn(spec))
            cluster.started += (node_id,)
            cluster.write_cluster_file()  # at once: `down` finds it even if we stop here
            try:
                wait_until(f"controller {node_id} answering on {spec.admin_url}", lambda: _answers(spec), JOIN_WAIT,
                           poll_s=JOIN_POLL)
                answer = AdminClient(voters, token=token).request(
                    "POST", "/v1/quorum/voters", {"voter_id": node_id, "api_address": spec.admin_address})
            except (WaitTimeout, ClusterError) as exc:
                raise LauncherError(f"controller {node_id} did not join the quorum: {exc}; it keeps running as an "
                                    f"observer (see {spec.log_path}); retry with tidelog quorum add-controller "
                                    f"--controller-id {node_id} --controller-api {spec.admin_address}") from None
            ids = [v.get("node_id") for v in answer.get("voters", [])] if isinstance(answer, dict) else []
            say(f"controller {node_id} joined the quorum at {spec.quorum_address}: voters {json.dumps(ids)}")
            added.append(node_id)
    return added
