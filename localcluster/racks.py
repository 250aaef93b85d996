"""Racks for a local cluster (`tidelog up --racks N`, the pytest plugin's `racks=N`): which
`broker.rack` each broker gets, written into the server.properties of new nodes.

    racks = broker_racks(specs, 3)            # {4: "rack-1", 5: "rack-2", 6: "rack-3", 7: "rack-1"}
    files = with_racks(files, specs, racks)   # new brokers' server.properties carry broker.rack

Brokers (and combined nodes) in node id order take racks rack-1..rack-N round-robin, so any
N consecutive brokers span every rack and a replication factor of N puts one replica on each
(metadata.placement). Controllers have no rack (Kafka's controllers register none). A node
whose server.properties already exists keeps what it says: its rack was set when it was made,
and an operator's edit wins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from common.properties import set_entries
from localcluster.cluster_layout import LayoutError, NodeSpec, runs_broker

RACK_KEY: Final = "broker.rack"
RACK_PREFIX: Final = "rack-"
MAX_RACKS: Final = 64  # more racks than a loopback cluster could have brokers is a typo


class RackError(LayoutError):
    """A rack count that cannot be used (`tidelog up` prints it as any layout error)."""


def rack_name(index: int) -> str:
    """The rack of the index-th broker (0-based) of a cluster with racks."""
    return f"{RACK_PREFIX}{index + 1}"


def broker_racks(nodes: Sequence[NodeSpec], racks: int) -> dict[int, str]:
    """broker.rack of every broker by node id; {} without racks (0)."""
    if racks < 0 or racks > MAX_RACKS:
        raise RackError(f"--racks must be between 0 and {MAX_RACKS}, got {racks}")
    if racks == 0:
        return {}
    brokers = sorted(n.node_id for n in nodes if runs_broker(n.role))
    if racks > len(brokers):
        raise RackError(f"--racks {racks} is more than the {len(brokers)} broker(s): a rack would be empty")
    return {node_id: rack_name(i % racks) for i, node_id in enumerate(brokers)}


def with_racks(files: Mapping[int, str], nodes: Sequence[NodeSpec], racks: Mapping[int, str]) -> dict[int, str]:
    """`files` (new server.properties texts by node id) with each new broker's broker.rack set."""
    out = dict(files)
    for node in nodes:
        rack = racks.get(node.node_id)
        if rack is None or node.node_id not in out or node.properties_path.exists():
            continue
        out[node.node_id] = set_entries(out[node.node_id], {RACK_KEY: rack}, str(node.properties_path),
                                        "Set by `tidelog up --racks`: KIP-36 placement, KIP-392 follower fetching.")
    return out
