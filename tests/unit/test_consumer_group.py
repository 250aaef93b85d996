"""The KIP-848 consumer group core: records, assignors, reconciliation, the heartbeat rule.

A seeded simulation drives members (join, heartbeat with what they own, leave, a new topic)
through the rule and replays its records, checking after every heartbeat that no partition
is owned by two members, and at the end that every partition is owned once and all are Stable.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from common.errors import ErrorCode
from groups.assignors import RANGE, UNIFORM, UnsupportedAssignor, assign
from groups.consumer_group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupState,
    ConsumerMember,
    ConsumerTimers,
    MemberState,
    replay_consumer,
)
from groups.consumer_heartbeat import HeartbeatOutcome, HeartbeatRequest, compile_regex, expire, heartbeat
from groups.consumer_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerRecord,
    ConsumerRecordFormatError,
    decode_record,
    encode_record,
)
from groups.reconcile import reconcile

E = ErrorCode
T1 = "AAAAAAAAAAAAAAAAAAAAAQ"  # topic ids as the controller mints them (base64url of 16 bytes)
T2 = "AAAAAAAAAAAAAAAAAAAAAg"
TOPICS = {"orders": (T1, 6)}
CONFIG = ConsumerGroupConfig()
NOW = 1_000_000

# ---- records ------------------------------------------------------------------------------

RECORDS = [
    ConsumerRecord(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(7)),
    ConsumerRecord(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(7, -1234567890123)),
    ConsumerRecord(ConsumerGroupMetadataKey("g"), None),
    ConsumerRecord(ConsumerGroupMemberMetadataKey("g", "m1"), ConsumerGroupMemberMetadataValue(
        "i1", "rack-a", "client", "/127.0.0.1", ("a", "b"), None, 30000, "range")),
    ConsumerRecord(ConsumerGroupMemberMetadataKey("g", "m1"), ConsumerGroupMemberMetadataValue(
        None, None, "", "", (), "or.*", -1, None)),
    ConsumerRecord(ConsumerGroupTargetAssignmentMetadataKey("g"), ConsumerGroupTargetAssignmentMetadataValue(3)),
    ConsumerRecord(ConsumerGroupTargetAssignmentMemberKey("g", "m1"), ConsumerGroupTargetAssignmentMemberValue(
        frozenset({(T1, 0), (T1, 2), (T2, 1)}))),
    ConsumerRecord(ConsumerGroupCurrentMemberAssignmentKey("g", "m1"), ConsumerGroupCurrentMemberAssignmentValue(
        4, 3, 1, frozenset({(T1, 0)}), frozenset({(T2, 5)}))),
    ConsumerRecord(ConsumerGroupCurrentMemberAssignmentKey("g", "m1"), None),
]


@pytest.mark.parametrize("record", RECORDS)
def test_record_round_trip(record: ConsumerRecord) -> None:
    key, value = encode_record(record)
    assert decode_record(key, value) == record


def test_record_bytes_are_kafkas() -> None:
    """Key: int16 version 3 then a classic string; value: int16 0, int32 epoch, no tags."""
    key, value = encode_record(RECORDS[0])
    assert key == b"\x00\x03\x00\x01g"
    assert value == b"\x00\x00\x00\x00\x00\x07\x00"


@pytest.mark.parametrize("key, value", [
    (b"\x00\x09\x00\x01g", None),          # not a consumer group key
    (b"\x00\x03\x00\x05g", None),          # truncated
    (b"\x00\x03\x00\x01g", b"\x00\x01\x00\x00\x00\x07\x00"),  # value version 1
    (b"\x00\x03\x00\x01g", b"\x00\x00\x00\x00"),  # truncated value
])
def test_bad_records_are_refused(key: bytes, value: bytes | None) -> None:
    with pytest.raises(ConsumerRecordFormatError):
        decode_record(key, value)


# ---- assignors ----------------------------------------------------------------------------


def _subs(*members: str, topics: frozenset[str] = frozenset({T1})) -> dict[str, frozenset[str]]:
    return {m: topics for m in members}


@pytest.mark.parametrize("name", [UNIFORM, RANGE])
@pytest.mark.parametrize("members, partitions", [(1, 6), (3, 6), (4, 6), (6, 3), (5, 17)])
def test_assignors_balance_and_cover(name: str, members: int, partitions: int) -> None:
    ids = [f"m{i}" for i in range(members)]
    target = assign(name, _subs(*ids), {T1: partitions}, {})
    owned = [tp for ps in target.values() for tp in ps]
    assert sorted(owned) == [(T1, p) for p in range(partitions)]  # each partition once
    sizes = [len(ps) for ps in target.values()]
    assert max(sizes) - min(sizes) <= 1


def test_range_gives_consecutive_ranges() -> None:
    target = assign(RANGE, _subs("a", "b", "c"), {T1: 7}, {})
    assert {m: sorted(p for _, p in ps) for m, ps in target.items()} == {"a": [0, 1, 2], "b": [3, 4], "c": [5, 6]}


@pytest.mark.parametrize("name", [UNIFORM, RANGE])
def test_assignors_are_sticky(name: str) -> None:
    before = assign(name, _subs("a", "b", "c"), {T1: 6}, {})
    after = assign(name, _subs("a", "b", "c", "d"), {T1: 6}, before)
    moved = sum(len(before[m] - after[m]) for m in before)
    assert moved <= 2  # only what d needs moves


def test_uniform_heterogeneous_subscriptions() -> None:
    """A partition goes only to subscribers of its topic, and the load stays balanced."""
    members = {"a": frozenset({T1}), "b": frozenset({T1, T2}), "c": frozenset({T2})}
    target = assign(UNIFORM, members, {T1: 4, T2: 2}, {})
    assert all(t in members[m] for m, ps in target.items() for t, _ in ps)
    assert sorted(len(ps) for ps in target.values()) == [2, 2, 2]


def test_unknown_assignor() -> None:
    with pytest.raises(UnsupportedAssignor):
        assign("sticky", _subs("a"), {T1: 1}, {})


# ---- reconciliation -----------------------------------------------------------------------

A = frozenset({(T1, 0), (T1, 1)})
B = frozenset({(T1, 2)})


@pytest.mark.parametrize("member, target, owned, others, expected", [
    # stable at an older epoch, nothing to revoke: moves to the target epoch with all of it
    (ConsumerMember("m", member_epoch=1, assigned=A), A | B, A, {},
     dict(member_epoch=2, previous_member_epoch=1, state=MemberState.STABLE, assigned=A | B)),
    # must revoke (T1, 1): stays at epoch 1, keeps (T1, 0), nothing new meanwhile
    (ConsumerMember("m", member_epoch=1, assigned=A), frozenset({(T1, 0)}) | B, A, {},
     dict(member_epoch=1, state=MemberState.UNREVOKED_PARTITIONS, assigned=frozenset({(T1, 0)}),
          pending_revocation=frozenset({(T1, 1)}))),
    # a new partition still owned by another member: withheld
    (ConsumerMember("m", member_epoch=1, assigned=A), A | B, A, {(T1, 2): 1},
     dict(member_epoch=2, previous_member_epoch=1, state=MemberState.UNRELEASED_PARTITIONS, assigned=A)),
    # revocation acknowledged (owned no longer has it): on to the target epoch
    (ConsumerMember("m", member_epoch=1, state=MemberState.UNREVOKED_PARTITIONS, assigned=frozenset({(T1, 0)}),
                    pending_revocation=frozenset({(T1, 1)})), frozenset({(T1, 0)}), frozenset({(T1, 0)}), {},
     dict(member_epoch=2, previous_member_epoch=1, state=MemberState.STABLE, assigned=frozenset({(T1, 0)}),
          pending_revocation=frozenset())),
    # still owns what it must revoke: unchanged
    (ConsumerMember("m", member_epoch=1, state=MemberState.UNREVOKED_PARTITIONS, assigned=frozenset({(T1, 0)}),
                    pending_revocation=frozenset({(T1, 1)})), frozenset({(T1, 0)}), A, {}, {}),
])
def test_reconcile(member: ConsumerMember, target: frozenset[tuple[str, int]], owned: frozenset[tuple[str, int]],
                   others: dict[tuple[str, int], int], expected: dict[str, object]) -> None:
    assert reconcile(member, target_epoch=2, target=target, owned=owned, partition_epochs=others) \
        == replace(member, **expected)  # type: ignore[arg-type]


# ---- the heartbeat rule -------------------------------------------------------------------


def _join(member_id: str, **kw: object) -> HeartbeatRequest:
    fields: dict[str, object] = dict(member_epoch=0, rebalance_timeout_ms=30000, subscribed_topic_names=("orders",),
                                     owned=frozenset())
    fields.update(kw)
    return HeartbeatRequest("g", member_id, **fields)  # type: ignore[arg-type]


def _apply(group: ConsumerGroup | None, out: HeartbeatOutcome) -> ConsumerGroup | None:
    """Replay the rule's records, through their bytes (as loading reads them)."""
    for record in out.records:
        group = replay_consumer(group, decode_record(*encode_record(record)))
    return group


@pytest.mark.parametrize("request_, error", [
    (_join("m", member_epoch=0, rebalance_timeout_ms=-1), E.INVALID_REQUEST),
    (_join("m", owned=frozenset({(T1, 0)})), E.INVALID_REQUEST),
    (_join("m", subscribed_topic_names=None), E.INVALID_REQUEST),
    (_join(""), E.INVALID_REQUEST),
    (_join("m", server_assignor="sticky"), E.UNSUPPORTED_ASSIGNOR),
    (_join("m", subscribed_topic_names=None, subscribed_topic_regex="(or"), E.INVALID_REGULAR_EXPRESSION),
    (_join("m", subscribed_topic_names=None, subscribed_topic_regex="(?=or).*"), E.INVALID_REGULAR_EXPRESSION),
    (_join("m", subscribed_topic_names=None, subscribed_topic_regex=r"(a)\1"), E.INVALID_REGULAR_EXPRESSION),
    (HeartbeatRequest("g", "m", 3, owned=frozenset()), E.GROUP_ID_NOT_FOUND),
    (HeartbeatRequest("g", "m", -3), E.INVALID_REQUEST),
])
def test_refused_heartbeats(request_: HeartbeatRequest, error: ErrorCode) -> None:
    out = heartbeat(None, request_, topics=TOPICS, config=CONFIG, now_ms=NOW)
    assert out.response.error is error and out.records == () and out.response.message


def test_join_then_wrong_epochs() -> None:
    first = heartbeat(None, _join("m1"), topics=TOPICS, config=CONFIG, now_ms=NOW)
    group = _apply(None, first)
    assert group is not None and first.response.member_epoch == 1 == group.group_epoch == group.assignment_epoch
    assert first.response.assignment == frozenset((T1, p) for p in range(6))
    assert first.response.heartbeat_interval_ms == CONFIG.heartbeat_interval_ms
    assert first.timers["m1"] == ConsumerTimers(NOW + CONFIG.session_timeout_ms, -1)
    assert group.state is ConsumerGroupState.STABLE
    for epoch, error in [(2, E.FENCED_MEMBER_EPOCH), (1, E.NONE)]:
        out = heartbeat(group, HeartbeatRequest("g", "m1", epoch), topics=TOPICS, config=CONFIG, now_ms=NOW)
        assert out.response.error is error
    unknown = heartbeat(group, HeartbeatRequest("g", "m9", 1), topics=TOPICS, config=CONFIG, now_ms=NOW)
    assert unknown.response.error is E.UNKNOWN_MEMBER_ID


def test_regex_picks_up_a_new_topic() -> None:
    group = _apply(None, heartbeat(None, _join("m1", subscribed_topic_names=None, subscribed_topic_regex="ord.*"),
                                   topics=TOPICS, config=CONFIG, now_ms=NOW))
    assert group is not None
    grown = {**TOPICS, "ordinals": (T2, 2), "__consumer_offsets": ("AAAAAAAAAAAAAAAAAAAACQ", 50)}
    out = heartbeat(group, HeartbeatRequest("g", "m1", 1, owned=None), topics=grown, config=CONFIG, now_ms=NOW)
    assert out.response.member_epoch == 2
    assert out.response.assignment == frozenset((T1, p) for p in range(6)) | {(T2, 0), (T2, 1)}


def test_regex_is_a_full_match() -> None:
    assert compile_regex("ord").fullmatch("orders") is None


def test_static_member_comes_back_with_its_assignment() -> None:
    group = _apply(None, heartbeat(None, _join("m1", instance_id="i1"), topics=TOPICS, config=CONFIG, now_ms=NOW))
    assert group is not None
    busy = heartbeat(group, _join("m2", instance_id="i1"), topics=TOPICS, config=CONFIG, now_ms=NOW)
    assert busy.response.error is E.UNRELEASED_INSTANCE_ID
    group = _apply(group, heartbeat(group, HeartbeatRequest("g", "m1", -2, instance_id="i1"),
                                    topics=TOPICS, config=CONFIG, now_ms=NOW))
    assert group is not None and group.members["m1"].member_epoch == -2
    back = heartbeat(group, _join("m2", instance_id="i1"), topics=TOPICS, config=CONFIG, now_ms=NOW)
    group = _apply(group, back)
    assert group is not None and set(group.members) == {"m2"} and group.group_epoch == 1
    assert back.response.assignment == frozenset((T1, p) for p in range(6)) and back.timers["m1"] is None


def test_session_expiry_fences() -> None:
    out = heartbeat(None, _join("m1"), topics=TOPICS, config=CONFIG, now_ms=NOW)
    group = _apply(None, out)
    assert group is not None
    timers = {k: v for k, v in out.timers.items() if v is not None}
    assert expire(group, timers, NOW + CONFIG.session_timeout_ms - 1).records == ()
    expired = expire(group, timers, NOW + CONFIG.session_timeout_ms)
    group = _apply(group, expired)
    assert group is not None and not group.members and group.group_epoch == 2 and expired.timers == {"m1": None}
    assert group.state is ConsumerGroupState.EMPTY


def test_config_limits() -> None:
    with pytest.raises(ValueError, match="group.consumer.session.timeout.ms"):
        ConsumerGroupConfig(session_timeout_ms=1000)
    with pytest.raises(ValueError, match="group.consumer.heartbeat.interval.ms"):
        ConsumerGroupConfig(heartbeat_interval_ms=20_000)


# ---- simulation ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("assignor", [UNIFORM, RANGE])
def test_simulation_never_owns_a_partition_twice(seed: int, assignor: str) -> None:
    rng = random.Random(seed)
    topics = dict(TOPICS)
    group: ConsumerGroup | None = None
    clients: dict[str, tuple[int, frozenset[tuple[str, int]]]] = {}  # member id -> (epoch, owned)
    next_id = 0

    def beat(member_id: str, request: HeartbeatRequest) -> None:
        nonlocal group
        out = heartbeat(group, request, topics=topics, config=CONFIG, now_ms=NOW)
        assert out.response.error is E.NONE, (seed, out.response)
        group = _apply(group, out)
        if request.member_epoch < 0:
            clients.pop(member_id)
            return
        epoch, owned = clients.get(member_id, (0, frozenset()))
        clients[member_id] = (out.response.member_epoch,
                              owned if out.response.assignment is None else out.response.assignment)
        seen: set[tuple[str, int]] = set()
        for _, (_, held) in clients.items():  # the clients' own view: never two owners
            assert not seen & held, (seed, clients)
            seen |= held

    for step in range(120):
        action = rng.random()
        if (action < 0.15 and len(clients) < 5) or not clients:
            member_id, next_id = f"m{next_id}", next_id + 1
            beat(member_id, _join(member_id, server_assignor=assignor, subscribed_topic_names=None,
                                  subscribed_topic_regex="ord.*"))
        elif action < 0.22 and len(clients) > 1:
            member_id = rng.choice(sorted(clients))
            beat(member_id, HeartbeatRequest("g", member_id, -1))
        elif action < 0.25 and "ordinals" not in topics:
            topics["ordinals"] = (T2, 3)
        else:
            member_id = rng.choice(sorted(clients))
            epoch, owned = clients[member_id]
            beat(member_id, HeartbeatRequest("g", member_id, epoch, owned=owned))
    for _ in range(4 * len(clients)):  # quiet: everyone heartbeats until it settles
        for member_id in sorted(clients):
            epoch, owned = clients[member_id]
            beat(member_id, HeartbeatRequest("g", member_id, epoch, owned=owned))
    assert group is not None and group.state is ConsumerGroupState.STABLE, seed
    every = sorted(tp for _, (_, owned) in clients.items() for tp in owned)
    assert every == sorted((tid, p) for tid, count in topics.values() for p in range(count)), seed


# ---- rack awareness ------------------------------------------------------------------------

RACKS = {(T1, 0): frozenset({"a"}), (T1, 1): frozenset({"a"}), (T1, 2): frozenset({"b"}), (T1, 3): frozenset({"b"})}


def test_uniform_prefers_the_replicas_rack_within_the_balance() -> None:
    target = assign(UNIFORM, _subs("x", "y"), {T1: 4}, {}, member_racks={"x": "b", "y": "a"}, partition_racks=RACKS)
    assert target == {"x": frozenset({(T1, 2), (T1, 3)}), "y": frozenset({(T1, 0), (T1, 1)})}
    crowded = assign(UNIFORM, _subs("x", "y"), {T1: 4}, {}, member_racks={"x": "a", "y": "a"}, partition_racks=RACKS)
    assert sorted(len(ps) for ps in crowded.values()) == [2, 2]  # the balance first


def test_the_heartbeat_hands_the_racks_to_the_assignor() -> None:
    topics = {"orders": (T1, 4)}
    group = _apply(None, heartbeat(None, _join("x", rack_id="b"), topics=topics, config=CONFIG, now_ms=NOW,
                                   partition_racks=RACKS))
    out = heartbeat(group, _join("y", rack_id="a"), topics=topics, config=CONFIG, now_ms=NOW, partition_racks=RACKS)
    group = _apply(group, out)
    assert group is not None and group.target == {"x": frozenset({(T1, 2), (T1, 3)}),
                                                  "y": frozenset({(T1, 0), (T1, 1)})}


def test_a_member_that_never_revokes_is_fenced_at_its_first_rebalance_deadline() -> None:
    from groups.image import GroupsImage

    image = GroupsImage.EMPTY

    def run(request: HeartbeatRequest, now_ms: int) -> HeartbeatOutcome:
        nonlocal image
        out = heartbeat(image.consumer_groups.get("g"), request, topics=TOPICS, config=CONFIG, now_ms=now_ms)
        for record in out.records:
            image = image.replay(record, now_ms)
        image = image.with_consumer_timers("g", out.timers)
        return out

    everything = frozenset((T1, p) for p in range(6))
    run(_join("a"), NOW)
    run(_join("b"), NOW)
    assert run(HeartbeatRequest("g", "a", 1, owned=everything), NOW).response.member_epoch == 1  # must revoke
    assert image.consumer_timers["g"]["a"].rebalance_deadline_ms == NOW + 30_000
    run(HeartbeatRequest("g", "a", 1, owned=everything), NOW + 10_000)  # still holding them: no extension
    timers = image.consumer_timers["g"]
    assert timers["a"] == ConsumerTimers(NOW + 10_000 + CONFIG.session_timeout_ms, NOW + 30_000)
    fenced = expire(image.consumer_groups["g"], timers, NOW + 30_000)
    assert fenced.timers == {"a": None} and "rebalance timeout" in fenced.reason
