"""Shared fixtures of the groups/ unit tests: requests and groups built in one line."""

from __future__ import annotations

from dataclasses import replace

from groups.group import ClassicGroup, GroupConfig
from groups.join import JoinRequest, SyncRequest, join_group, sync_group
from groups.offsets import CommitPartition
from groups.outcome import Outcome
from groups.state import GroupState

NOW = 1_700_000_000_000
CONFIG = GroupConfig(initial_rebalance_delay_ms=0)
RANGE = (("range", b"range-meta"),)


def join_req(member_id: str = "", *, group_id: str = "g", instance: str | None = None,
             protocols: tuple[tuple[str, bytes], ...] = RANGE, session: int = 10_000,
             rebalance: int = 30_000, protocol_type: str = "consumer", v4: bool = True,
             client_id: str = "client") -> JoinRequest:
    return JoinRequest(group_id, member_id, instance, client_id, "/127.0.0.1", session, rebalance,
                       protocol_type, protocols, v4)


def join(group: ClassicGroup | None, member_id: str = "", *, new: str = "m-new", now: int = NOW,
         config: GroupConfig = CONFIG, **kw: object) -> Outcome:
    return join_group(group, join_req(member_id, **kw), new_member_id=new, now_ms=now, config=config)  # type: ignore[arg-type]


def stable_group(*member_ids: str, now: int = NOW, instances: dict[str, str] | None = None) -> ClassicGroup:
    """A Stable group of generation 1 with these members (the first leads), via the rules."""
    group: ClassicGroup | None = None
    instances = instances or {}
    for mid in member_ids:
        out = join(group, new=mid, now=now, v4=False, instance=instances.get(mid))
        group = out.group
    assert group is not None
    # every member rejoins so the rebalance completes with all of them
    for mid in member_ids:
        out = join(group, mid, now=now, instance=instances.get(mid))
        group = out.group
        assert group is not None
    out = sync_group(group, SyncRequest("g", group.generation_id, member_ids[0], instances.get(member_ids[0]),
                                        tuple((m, f"assign-{m}".encode()) for m in member_ids)), now)
    assert out.group is not None and out.group.state.value == "Stable", out
    group = out.group
    for mid in member_ids[1:]:  # the followers sync too: nobody is left pending (KIP-814)
        out = sync_group(group, SyncRequest("g", group.generation_id, mid, instances.get(mid), ()), now)
        assert out.group is not None
        group = out.group
    assert not group.pending_sync
    return group


def with_deadline(group: ClassicGroup, member_id: str, deadline: int) -> ClassicGroup:
    return group.with_member(replace(group.members[member_id], session_deadline_ms=deadline))


# The groups a commit is checked against (plain OffsetCommit and TxnOffsetCommit alike).
STABLE = stable_group("a", "b")
GEN = STABLE.generation_id
STATIC = stable_group("a", "b", instances={"a": "inst-a", "b": "inst-b"})
COMPLETING = join(join(STABLE, "a").group, "b").group
EMPTY = replace(STABLE, state=GroupState.EMPTY, members={}, state_timestamp_ms=NOW)
P0 = CommitPartition("orders", 0, 42, 3, "meta")
