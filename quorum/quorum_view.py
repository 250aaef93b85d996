"""Whom a controller names as the active controller when it is not active itself (pure).

`GET /v1/cluster` and every NOT_CONTROLLER redirect say who is active. The Raft leader a voter
last heard of is not enough: pysyncobj starts no election while a voter is connected to
nobody, so a voter left alone keeps naming its last leader, dead or not (issue 20, point 4).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

PARTNER_CONNECTED: Final = 2  # pysyncobj's CONNECTION_STATE.CONNECTED in getStatus()


def named_leader(me: int, quorum_ids: Mapping[str, int], leader_address: str | None,
                 raft: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """Whom a controller that is not active itself may name as active: the Raft leader, but only
    while this voter reaches a majority and the leader. pysyncobj starts no election while it is
    connected to nobody, so a voter left alone keeps naming its last leader, dead or not.
    Returns (node id, None) or (None, the reason there is none)."""
    needed = len(quorum_ids) // 2 + 1
    connected = {address for address in quorum_ids
                 if raft.get(f"partner_node_status_server_{address}") == PARTNER_CONNECTED}
    reachable = 1 + len(connected - {a for a, i in quorum_ids.items() if i == me})
    if reachable < needed:
        return None, (f"the quorum has no majority from controller {me}: {reachable} of {len(quorum_ids)} "
                      f"voters reachable, {needed} needed")
    node = quorum_ids.get(leader_address or "")
    if node is None:
        return None, "an election is in progress: no Raft leader is known"
    if node != me and leader_address not in connected:
        return None, f"the last known Raft leader, controller {node}, is not reachable from controller {me}"
    if node == me:
        return None, f"controller {me} is the Raft leader but has not begun its epoch yet"
    return node, None
