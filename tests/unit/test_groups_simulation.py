"""A seeded simulation of one classic group: random members join (v3 and v4, static or not),
sync, heartbeat, leave, commit and go silent while a fake clock moves; the pure rules run as
the coordinator runs them, and invariants are checked after every event. A failure prints
its seed; `pytest -k "seed-17"` replays it."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from common.errors import ErrorCode as E
from groups.group import ClassicGroup, GroupConfig
from groups.join import JoinRequest, SyncRequest, join_group, sync_group
from groups.membership import (
    LeavingMember,
    expire,
    heartbeat,
    leave_group,
    next_deadline,
)
from groups.offsets import CommitPartition, CommitRequest, commit_offsets
from groups.outcome import JoinResult, Outcome
from groups.records import GroupMetadataValue, decode_record, encode_record
from groups.state import GroupState as S

SEEDS = range(300)
STEPS = 250
CONFIG = GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=100)


@dataclass
class Client:
    """What one consumer process knows: its member id and generation."""
    name: str
    instance: str | None
    member_id: str = ""
    generation: int = -1
    assignment: bytes | None = None


@dataclass
class World:
    rng: random.Random
    now: int = 1_000_000
    group: ClassicGroup | None = None
    clients: list[Client] = field(default_factory=list)
    max_generation: int = 0
    ids: int = 0
    log: list[str] = field(default_factory=list)


def check(w: World, out: Outcome, what: str) -> None:
    w.log.append(what)
    g = out.group
    for record in out.records:  # every record is Kafka-encodable and reads back the same
        key, value = encode_record(record)
        assert decode_record(key, value) == record
        if isinstance(record.value, GroupMetadataValue):
            assert {m.member_id for m in record.value.members} == set(g.members) if g else True
    completions = [r for _, r in out.joins if r.error is E.NONE]
    if completions:
        assert len({(r.generation_id, r.leader, r.protocol_name) for r in completions}) == 1
        leaders = [r for r in completions if r.member_id == r.leader]
        assert all(len(r.members) == len(g.members) for r in leaders)  # the leader learns every member
    if g is None:
        return
    assert g.generation_id >= w.max_generation, "generation went back"
    w.max_generation = g.generation_id
    assert not set(g.pending_members) & set(g.members)
    if g.state is S.EMPTY:
        assert not g.members
    if g.state in (S.STABLE, S.COMPLETING_REBALANCE):
        assert g.leader_id in g.members and g.protocol_name is not None
        assert not any(m.awaiting_join for m in g.members.values())
    if g.state is S.STABLE:
        assert not any(m.awaiting_sync for m in g.members.values())
    for m in g.members.values():
        assert not (m.awaiting_join and m.awaiting_sync)
    statics = [m.group_instance_id for m in g.members.values() if m.group_instance_id]
    assert len(statics) == len(set(statics)), "two members hold one instance id"


def apply(w: World, out: Outcome) -> None:
    w.group = out.group if out.group is None or out.group.state is not S.DEAD else None
    for member_id, result in out.joins:
        for c in w.clients:
            if c.member_id == member_id and result.error is E.NONE:
                c.generation = result.generation_id
    for member_id, result in out.syncs:
        for c in w.clients:
            if c.member_id == member_id and result.error is E.NONE:
                c.assignment = result.assignment


def step(w: World) -> None:
    rng, c = w.rng, w.rng.choice(w.clients)
    action = rng.choices(["join", "sync", "heartbeat", "leave", "commit", "tick"], [4, 3, 3, 1, 2, 3])[0]
    if action == "join":
        w.ids += 1
        protocols = (("range", c.name.encode()),) if rng.random() < 0.9 else (("sticky", b""), ("range", b""))
        req = JoinRequest("g", c.member_id, c.instance, c.name, "/h", rng.choice((1000, 3000)), 2000, "consumer",
                          protocols, rng.random() < 0.7)
        out = join_group(w.group, req, new_member_id=f"{c.name}-{w.ids}", now_ms=w.now, config=CONFIG)
        if isinstance(out.response, JoinResult) and out.response.member_id:
            if out.response.error in (E.NONE, E.MEMBER_ID_REQUIRED):
                c.member_id = out.response.member_id
            if out.response.error is E.NONE:
                c.generation = out.response.generation_id
        elif out.park and not c.member_id:
            c.member_id = f"{c.name}-{w.ids}"
    elif action == "sync":
        assignments = tuple((m, f"{m}@{c.generation}".encode()) for m in (w.group.members if w.group else ()))
        out = sync_group(w.group, SyncRequest("g", c.generation, c.member_id, c.instance, assignments), w.now)
    elif action == "heartbeat":
        out = heartbeat(w.group, "g", c.member_id, c.instance, c.generation, w.now)
        if out.response is E.UNKNOWN_MEMBER_ID:
            c.member_id, c.generation = "", -1
    elif action == "leave":
        out = leave_group(w.group, "g", (LeavingMember(c.member_id, c.instance),), w.now, CONFIG)
        c.member_id, c.generation = "", -1
    elif action == "commit":
        req = CommitRequest("g", c.generation, c.member_id, c.instance, (CommitPartition("t", 0, rng.randrange(99), -1, ""),))
        out = commit_offsets(w.group, req, now_ms=w.now, config=CONFIG, partition_exists=lambda t, p: True)
    else:
        w.now += rng.choice((10, 200, 1500, 4000))
        out = expire(w.group, w.now, CONFIG) if w.group is not None else Outcome(None)
    check(w, out, f"{action} by {c.name} ({c.member_id}, gen {c.generation}) at {w.now}")
    apply(w, out)


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed-{s}")
def test_random_group_life_keeps_the_invariants(seed: int) -> None:
    w = World(random.Random(seed))
    w.clients = [Client(f"c{i}", f"inst-{i}" if i % 3 == 0 else None) for i in range(5)]
    try:
        for _ in range(STEPS):
            step(w)
        if w.group is not None:  # quiet for long enough, every group empties and stays consistent
            for _ in range(50):  # bounded: each pass drops a member or completes a phase
                if w.group is None or next_deadline(w.group) < 0:
                    break
                w.now = max(w.now, next_deadline(w.group))  # nobody heartbeats any more
                out = expire(w.group, w.now, CONFIG)
                check(w, out, f"final expiry at {w.now}")
                apply(w, out)
            assert w.group is None or w.group.state is S.EMPTY, w.group
    except AssertionError as e:
        raise AssertionError(f"seed {seed}: {e}\nlast events:\n  " + "\n  ".join(w.log[-12:])) from e
