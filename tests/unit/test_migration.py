"""KIP-848's online migration as pure rules: groups/migration.py and groups/migration_members.py.

A classic group of two `consumer`-protocol members (generation 3, each holding two of topic
t's four partitions) is upgraded when a ConsumerGroupHeartbeat joins, and downgraded back when
that member leaves or its session ends; each refusal of Kafka's (policy, protocol type, group
size, malformed protocol bytes) keeps the group as it is. Classic members of the consumer
group join, sync and heartbeat through `groups/migration_members.py`.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from common.errors import ErrorCode
from groups.consumer_group import (
    ConsumerGroupConfig,
    ConsumerTimers,
    MemberState,
    MigrationPolicy,
)
from groups.consumer_heartbeat import HeartbeatRequest
from groups.consumer_records import (
    ClassicMemberMetadata,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerRecord,
    decode_record,
    encode_record,
)
from groups.group import ClassicGroup, GroupConfig, Member
from groups.image import GroupsImage
from groups.join import JoinRequest, SyncRequest
from groups.membership import LeaveResult, LeavingMember
from groups.migration import (
    downgrade_refusal,
    expire_members,
    migrating_heartbeat,
    replay_all,
    upgrade,
    upgrade_records,
    upgrade_refusal,
)
from groups.migration_members import classic_heartbeat, classic_join, classic_leave, classic_sync
from groups.migration_protocol import (
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from groups.offsets import consumer_member_error
from groups.outcome import JoinResult, SyncResult
from groups.records import CoordinatorRecord, GroupMetadataKey, OffsetCommitKey, OffsetCommitValue
from groups.state import GroupState

E = ErrorCode
NOW = 1_000_000
TOPICS = {"t": ("tid-t", 4)}
SUBSCRIPTION = encode_subscription(Subscription(1, ("t",)))
CONFIG = ConsumerGroupConfig()
CLASSIC_CONFIG = GroupConfig()


def classic_member(member_id: str, partitions: list[int]) -> Member:
    return Member(member_id, None, "client", "/127.0.0.1", 60_000, 10_000, "consumer",
                  (("range", SUBSCRIPTION), ("roundrobin", SUBSCRIPTION)),
                  encode_assignment([("t", p) for p in partitions]))


CLASSIC = ClassicGroup("g", GroupState.STABLE, NOW, 3, "consumer", "range", "a",
                       {"a": classic_member("a", [0, 1]), "b": classic_member("b", [2, 3])})
JOIN = HeartbeatRequest("g", "c", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("t",), owned=frozenset())


def upgraded():
    """The consumer group after member c's join upgraded CLASSIC, and that heartbeat's outcome."""
    out = migrating_heartbeat(CLASSIC, None, JOIN, topics=TOPICS, config=CONFIG, classic_config=CLASSIC_CONFIG,
                              now_ms=NOW)
    return replay_all(None, out.records), out


# ---- the embedded consumer protocol ---------------------------------------------------------


@pytest.mark.parametrize("sub", [
    Subscription(0, ("a", "b"), user_data=b"x"),
    Subscription(1, ("a",), owned=(("a", 0), ("a", 2))),
    Subscription(2, ("a",), owned=(("a", 1),), generation_id=7),
    Subscription(3, ("a",), generation_id=7, rack_id="r1"),
])
def test_subscription_round_trips_each_version(sub: Subscription) -> None:
    assert decode_subscription(encode_subscription(sub)) == sub


def test_assignment_round_trips_and_an_empty_one_is_nothing() -> None:
    assert decode_assignment(encode_assignment([("t", 2), ("t", 0), ("u", 1)], 3)) == (("t", 0), ("t", 2), ("u", 1))
    assert decode_assignment(b"") == ()


def test_classic_member_metadata_is_tagged_field_0_of_the_member_record() -> None:
    value = ConsumerGroupMemberMetadataValue(None, None, "c", "/h", ("t",), None, 30_000, None,
                                             ClassicMemberMetadata(10_000, (("range", b"\x00\x01"),)))
    record = ConsumerRecord(ConsumerGroupMemberMetadataKey("g", "m"), value)
    assert decode_record(*encode_record(record)) == record
    plain = replace(value, classic_member_metadata=None)
    assert decode_record(*encode_record(ConsumerRecord(ConsumerGroupMemberMetadataKey("g", "m"), plain))).value == plain


# ---- upgrade --------------------------------------------------------------------------------


def test_upgrade_tombstones_the_classic_group_and_keeps_members_at_the_generation() -> None:
    records = upgrade_records(CLASSIC, TOPICS)
    assert records[0] == CoordinatorRecord(GroupMetadataKey("g"), None)
    group = replay_all(None, records)
    assert group is not None
    assert (group.group_epoch, group.assignment_epoch) == (3, 3)
    a = group.members["a"]
    assert (a.member_epoch, a.previous_member_epoch, a.state) == (3, 3, MemberState.STABLE)
    assert a.assigned == group.target["a"] == {("tid-t", 0), ("tid-t", 1)}
    assert a.subscribed_topic_names == ("t",)
    assert a.classic == ClassicMemberMetadata(10_000, CLASSIC.members["a"].protocols)


def test_offsets_stay_through_an_upgrade() -> None:
    offset = CoordinatorRecord(OffsetCommitKey("g", "t", 0), OffsetCommitValue(42, "", NOW))
    image = GroupsImage.EMPTY.replay(offset, NOW).replay(CoordinatorRecord(GroupMetadataKey("g"),
                                                                           CLASSIC.to_record_value()), NOW)
    for record in upgrade_records(CLASSIC, TOPICS):
        image = image.replay(record, NOW)
    assert "g" not in image.groups and "g" in image.consumer_groups
    assert image.offsets["g"][("t", 0)].offset == 42


@pytest.mark.parametrize("classic, config, why", [
    (CLASSIC, replace(CONFIG, migration_policy=MigrationPolicy.DISABLED), "online upgrade is disabled"),
    (CLASSIC, replace(CONFIG, migration_policy=MigrationPolicy.DOWNGRADE), "online upgrade is disabled"),
    (replace(CLASSIC, protocol_type="connect",
             members={k: replace(m, protocol_type="connect") for k, m in CLASSIC.members.items()}),
     CONFIG, "does not use the consumer embedded protocol"),
    (CLASSIC, replace(CONFIG, max_size=1), "exceed the consumer group maximum size"),
])
def test_upgrade_refusals(classic: ClassicGroup, config: ConsumerGroupConfig, why: str) -> None:
    refused = upgrade_refusal(classic, config)
    assert refused is not None and why in refused
    out = migrating_heartbeat(classic, None, JOIN, topics=TOPICS, config=config, classic_config=CLASSIC_CONFIG,
                              now_ms=NOW)
    assert out.records == () and out.response.error is E.GROUP_ID_NOT_FOUND


def test_malformed_protocol_bytes_refuse_the_upgrade() -> None:
    bad = replace(CLASSIC, members={**CLASSIC.members, "b": replace(CLASSIC.members["b"], protocols=(("range", b"\x00"),))})
    assert "malformed" in str(upgrade(bad, CONFIG, TOPICS))


def test_only_a_joining_member_upgrades() -> None:
    out = migrating_heartbeat(CLASSIC, None, replace(JOIN, member_epoch=5), topics=TOPICS, config=CONFIG,
                              classic_config=CLASSIC_CONFIG, now_ms=NOW)
    assert out.records == () and out.response.error is E.GROUP_ID_NOT_FOUND


def test_the_joining_member_waits_for_partitions_the_classic_members_hold() -> None:
    group, out = upgraded()
    assert out.records[0] == CoordinatorRecord(GroupMetadataKey("g"), None)
    assert out.response.error is E.NONE and "upgraded to a consumer group" in out.reason
    assert group.group_epoch == 4 and group.assignment_epoch == 4
    c = group.members["c"]
    assert c.state is MemberState.UNRELEASED_PARTITIONS and c.assigned == frozenset() and group.target["c"]


# ---- classic members of a consumer group ----------------------------------------------------


def rejoin(group, member_id: str, owned: tuple[tuple[str, int], ...] = ()) -> JoinRequest:
    sub = encode_subscription(Subscription(1, ("t",), owned=owned))
    return JoinRequest("g", member_id, None, "client", "/127.0.0.1", 10_000, 60_000, "consumer",
                       (("range", sub), ("roundrobin", sub)))


def test_a_classic_member_is_told_to_rejoin_then_revokes_and_syncs_its_new_assignment() -> None:
    group, _ = upgraded()
    beat = classic_heartbeat(group, "a", None, 3, now_ms=NOW)
    assert beat.response is E.REBALANCE_IN_PROGRESS
    assert beat.timers["a"] == ConsumerTimers(NOW + 10_000, NOW + 60_000)  # the join timeout
    assert classic_heartbeat(group, "a", None, 2, now_ms=NOW).response is E.ILLEGAL_GENERATION
    # an eager member rejoins owning nothing: its revocation is done, it moves to epoch 4
    joined = classic_join(group, rejoin(group, "a"), new_member_id="x", topics=TOPICS, config=CONFIG,
                          classic_config=CLASSIC_CONFIG, now_ms=NOW)
    answer = joined.response
    assert isinstance(answer, JoinResult) and (answer.error, answer.generation_id) == (E.NONE, 4)
    assert (answer.protocol_type, answer.protocol_name, answer.leader, answer.members) == ("consumer", "range", "", ())
    group = replay_all(group, joined.records)
    a = group.members["a"]
    assert a.member_epoch == 4 and a.assigned == group.target["a"] and not a.pending_revocation
    synced = classic_sync(group, SyncRequest("g", 4, "a", None, (), "consumer", "range"), topics=TOPICS, now_ms=NOW)
    assert isinstance(synced.response, SyncResult) and synced.response.error is E.NONE
    assert {("tid-t", p) for _, p in decode_assignment(synced.response.assignment)} == a.assigned
    assert classic_sync(group, SyncRequest("g", 4, "a", None, (), "consumer", "roundrobin"), topics=TOPICS,
                        now_ms=NOW).response == SyncResult(E.INCONSISTENT_GROUP_PROTOCOL)


def test_a_consumer_protocol_member_is_unknown_to_the_classic_requests() -> None:
    group, _ = upgraded()
    assert classic_heartbeat(group, "c", None, 4, now_ms=NOW).response is E.UNKNOWN_MEMBER_ID
    left = classic_leave(group, (LeavingMember("c"), LeavingMember("a")), topics=TOPICS)
    assert isinstance(left.response, LeaveResult)
    assert [code for _, code in left.response.members] == [E.UNKNOWN_MEMBER_ID, E.NONE]
    after = replay_all(group, left.records)
    assert set(after.members) == {"b", "c"} and after.group_epoch == group.group_epoch + 1


def test_a_new_classic_member_gets_an_id_then_joins_the_consumer_group() -> None:
    group, _ = upgraded()
    first = classic_join(group, rejoin(group, ""), new_member_id="d", topics=TOPICS, config=CONFIG,
                         classic_config=CLASSIC_CONFIG, now_ms=NOW)
    assert first.response == JoinResult(E.MEMBER_ID_REQUIRED, member_id="d") and first.records == ()
    other = replace(rejoin(group, "d"), protocol_type="connect")
    assert classic_join(group, other, new_member_id="y", topics=TOPICS, config=CONFIG, classic_config=CLASSIC_CONFIG,
                        now_ms=NOW).response == JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id="d")
    joined = classic_join(group, rejoin(group, "d"), new_member_id="y", topics=TOPICS, config=CONFIG,
                          classic_config=CLASSIC_CONFIG, now_ms=NOW)
    after = replay_all(group, joined.records)
    assert after.members["d"].uses_classic_protocol and after.group_epoch == group.group_epoch + 1


# ---- downgrade ------------------------------------------------------------------------------


def test_the_last_consumer_protocol_member_leaving_downgrades_the_group() -> None:
    group, _ = upgraded()
    leave = HeartbeatRequest("g", "c", -1)
    out = migrating_heartbeat(None, group, leave, topics=TOPICS, config=CONFIG, classic_config=CLASSIC_CONFIG,
                              now_ms=NOW)
    assert out.response.error is E.NONE and out.response.member_epoch == -1
    classic = out.classic_group
    assert classic is not None and classic.state is GroupState.PREPARING_REBALANCE
    assert (classic.generation_id, classic.protocol_type, classic.protocol_name) == (4, "consumer", "range")
    assert list(classic.members) == ["a", "b"] and classic.members["a"].session_timeout_ms == 10_000
    assert out.records[-1].key == GroupMetadataKey("g")
    image = GroupsImage.EMPTY
    for record in upgrade_records(CLASSIC, TOPICS) + out.records:
        image = image.replay(record, NOW)
    assert "g" not in image.consumer_groups and image.groups["g"].generation_id == 4


@pytest.mark.parametrize("policy, max_size, why", [
    (MigrationPolicy.UPGRADE, 100, "online downgrade is disabled"),
    (MigrationPolicy.DISABLED, 100, "online downgrade is disabled"),
    (MigrationPolicy.BIDIRECTIONAL, 1, "exceed the classic group maximum size"),
])
def test_downgrade_refusals_only_fence_the_member(policy: MigrationPolicy, max_size: int, why: str) -> None:
    group, _ = upgraded()
    refused = downgrade_refusal(group, frozenset({"c"}), policy=policy, classic_max_size=max_size)
    assert refused is not None and why in refused
    out = migrating_heartbeat(None, group, HeartbeatRequest("g", "c", -1), topics=TOPICS,
                              config=replace(CONFIG, migration_policy=policy),
                              classic_config=replace(CLASSIC_CONFIG, max_size=max_size), now_ms=NOW)
    assert out.classic_group is None
    assert set(replay_all(group, out.records).members) == {"a", "b"}


def test_no_downgrade_while_a_consumer_protocol_member_stays() -> None:
    group, _ = upgraded()
    assert downgrade_refusal(group, frozenset({"a"}), policy=MigrationPolicy.BIDIRECTIONAL,
                             classic_max_size=100) == "no consumer-protocol member leaves"
    joined = migrating_heartbeat(None, group, replace(JOIN, member_id="e"), topics=TOPICS, config=CONFIG,
                                 classic_config=CLASSIC_CONFIG, now_ms=NOW)
    group = replay_all(group, joined.records)
    assert "a consumer-protocol member stays" == downgrade_refusal(
        group, frozenset({"c"}), policy=MigrationPolicy.BIDIRECTIONAL, classic_max_size=100)


def test_the_session_of_the_last_consumer_protocol_member_ending_downgrades_the_group() -> None:
    group, _ = upgraded()
    timers = {"a": ConsumerTimers(NOW + 50_000), "b": ConsumerTimers(NOW + 50_000), "c": ConsumerTimers(NOW + 10)}
    out = expire_members(group, timers, NOW + 10, topics=TOPICS, policy=MigrationPolicy.BIDIRECTIONAL,
                         classic_config=CLASSIC_CONFIG)
    assert out.classic_group is not None and set(out.classic_group.members) == {"a", "b"}
    kept = expire_members(group, timers, NOW + 10, topics=TOPICS, policy=MigrationPolicy.UPGRADE,
                          classic_config=CLASSIC_CONFIG)
    assert kept.classic_group is None and set(replay_all(group, kept.records).members) == {"a", "b"}


@pytest.mark.parametrize("policy", list(MigrationPolicy))
def test_an_empty_classic_group_is_replaced_whatever_the_policy(policy: MigrationPolicy) -> None:
    # Kafka's maybeDeleteEmptyClassicGroup: no member to migrate, so no policy to ask
    empty = replace(CLASSIC, state=GroupState.EMPTY, members={}, leader_id=None)
    out = migrating_heartbeat(empty, None, JOIN, topics=TOPICS, config=replace(CONFIG, migration_policy=policy),
                              classic_config=CLASSIC_CONFIG, now_ms=NOW)
    assert out.records[0] == CoordinatorRecord(GroupMetadataKey("g"), None) and out.response.error is E.NONE
    assert set(replay_all(None, out.records).members) == {"c"}


def consumer_only():
    """The upgraded group once its classic members a and b left (c alone, consumer protocol),
    and every record that made it."""
    group, out = upgraded()
    left = classic_leave(group, (LeavingMember("a"), LeavingMember("b")), topics=TOPICS)
    return replay_all(group, left.records), out.records + left.records


def test_a_classic_join_to_an_empty_consumer_group_makes_it_classic_whatever_the_policy() -> None:
    # Kafka's classicGroupJoinToClassicGroup deletes an empty consumer group first
    # (maybeDeleteEmptyConsumerGroup) and asks no policy: the join is as to a new group. The
    # migration policy is the consumer side's; the classic rule never reads it.
    from broker.handlers.groups import _join_rule

    group, history = consumer_only()
    left = migrating_heartbeat(None, group, HeartbeatRequest("g", "c", -1), topics=TOPICS, config=replace(
        CONFIG, migration_policy=MigrationPolicy.DISABLED), classic_config=CLASSIC_CONFIG, now_ms=NOW)
    image = GroupsImage.EMPTY
    for record in history + left.records:
        image = image.replay(record, NOW)
    assert not image.consumer_groups["g"].members and "g" not in image.groups
    join = JoinRequest("g", "", None, "client", "/127.0.0.1", 10_000, 60_000, "consumer", (("range", SUBSCRIPTION),))
    out = _join_rule(image, join, "new", NOW, SimpleNamespace(config=CLASSIC_CONFIG))  # type: ignore[arg-type]
    for record in out.records:
        image = image.replay(record, NOW)
    assert "g" not in image.consumer_groups  # tombstoned; the classic group is the join's (in memory)
    assert out.group is not None and "new" in out.group.pending_members  # a classic group, asking for its id
    assert out.response == JoinResult(E.MEMBER_ID_REQUIRED, member_id="new")


# ---- issue 31's migration gaps: Kafka's rules, each looked up in its source -------------------


def test_a_downgrade_writes_each_members_target_assignment() -> None:
    # Kafka's ClassicGroup.fromConsumerGroup serializes consumerGroup.targetAssignment()
    group, _ = upgraded()
    assert any(group.members[m].assigned != group.target[m] for m in "ab")  # a, b still revoking
    out = migrating_heartbeat(None, group, HeartbeatRequest("g", "c", -1), topics=TOPICS, config=CONFIG,
                              classic_config=CLASSIC_CONFIG, now_ms=NOW)
    assert out.classic_group is not None
    for m in "ab":
        assert {("tid-t", p) for _, p in decode_assignment(out.classic_group.members[m].assignment)} == group.target[m]


STATIC = replace(JOIN, instance_id="i")


def static_mixed():
    """A consumer group of classic members a, b and consumer-protocol static member c
    (group.instance.id i), each reconciled to the target."""
    out = migrating_heartbeat(CLASSIC, None, STATIC, topics=TOPICS, config=CONFIG, classic_config=CLASSIC_CONFIG,
                              now_ms=NOW)
    group = replay_all(None, out.records)
    for m in "ab":  # the eager classic members rejoin owning nothing: their revocations are done
        group = replay_all(group, classic_join(group, rejoin(group, m), new_member_id="x", topics=TOPICS,
                                               config=CONFIG, classic_config=CLASSIC_CONFIG, now_ms=NOW).records)
    owned = group.target["c"]
    beat = migrating_heartbeat(None, group, HeartbeatRequest("g", "c", group.group_epoch, owned=owned),
                               topics=TOPICS, config=CONFIG, classic_config=CLASSIC_CONFIG, now_ms=NOW)
    return replay_all(group, beat.records)


def static_join(member_id: str = "") -> JoinRequest:
    return replace(rejoin(None, member_id), group_instance_id="i")


def test_a_classic_static_member_replacing_the_last_consumer_protocol_member_downgrades_the_group() -> None:
    # Kafka's classicGroupJoinToConsumerGroup, step 4: validateOnlineDowngradeWithReplacedMemberId,
    # then convertToClassicGroup with the joining member in the replaced one's place
    group = static_mixed()
    assert group.members["c"].assigned == group.target["c"] != frozenset()
    out = classic_join(group, static_join(), new_member_id="c2", topics=TOPICS, config=CONFIG,
                       classic_config=CLASSIC_CONFIG, now_ms=NOW)
    answer = out.response
    assert isinstance(answer, JoinResult) and answer.error is E.NONE and answer.member_id == "c2"
    classic = out.classic_group
    assert classic is not None and set(classic.members) == {"a", "b", "c2"}
    assert classic.state is GroupState.STABLE and classic.generation_id == group.group_epoch == answer.generation_id
    assert classic.members["c2"].group_instance_id == "i"
    assert {("tid-t", p) for _, p in decode_assignment(classic.members["c2"].assignment)} == group.target["c"]
    assert all(t is None for t in out.timers.values()) and set(out.timers) == {"a", "b", "c", "c2"}
    image = GroupsImage.EMPTY
    for record in upgrade_records(CLASSIC, TOPICS) + out.records:
        image = image.replay(record, NOW)
    assert "g" not in image.consumer_groups and set(image.groups["g"].members) == {"a", "b", "c2"}


@pytest.mark.parametrize("policy, max_size", [
    (MigrationPolicy.UPGRADE, 100), (MigrationPolicy.DISABLED, 100), (MigrationPolicy.BIDIRECTIONAL, 2)])
def test_a_refused_replacement_downgrade_keeps_the_consumer_group(policy: MigrationPolicy, max_size: int) -> None:
    group = static_mixed()
    out = classic_join(group, static_join(), new_member_id="c2", topics=TOPICS,
                       config=replace(CONFIG, migration_policy=policy),
                       classic_config=replace(CLASSIC_CONFIG, max_size=max_size), now_ms=NOW)
    assert out.classic_group is None
    after = replay_all(group, out.records)
    assert set(after.members) == {"a", "b", "c2"} and after.members["c2"].uses_classic_protocol


def test_a_classic_static_member_replacing_a_classic_one_does_not_downgrade() -> None:
    group = static_mixed()
    joined = classic_join(group, replace(rejoin(group, "d"), group_instance_id="j"), new_member_id="x",
                          topics=TOPICS, config=CONFIG, classic_config=CLASSIC_CONFIG, now_ms=NOW)
    group = replay_all(group, joined.records)
    out = classic_join(group, replace(rejoin(group, ""), group_instance_id="j"), new_member_id="d2",
                       topics=TOPICS, config=CONFIG, classic_config=CLASSIC_CONFIG, now_ms=NOW)
    assert out.classic_group is None and "c" in replay_all(group, out.records).members


def test_malformed_join_group_protocol_bytes_in_a_consumer_group_are_unknown_server_error() -> None:
    # Kafka's deserializeSubscription throws IllegalStateException; the service answers it so
    group, _ = upgraded()
    bad = replace(rejoin(group, "a"), protocols=(("range", b"\x00"),))
    out = classic_join(group, bad, new_member_id="x", topics=TOPICS, config=CONFIG, classic_config=CLASSIC_CONFIG,
                       now_ms=NOW)
    assert out.response == JoinResult(E.UNKNOWN_SERVER_ERROR, member_id="a") and out.records == ()


@pytest.mark.parametrize("member_id, epoch, commit, error", [
    ("a", 3, False, E.NONE),  # a classic member at its generation
    ("a", 2, False, E.ILLEGAL_GENERATION),  # validateMemberEpoch: a classic member's stale generation
    ("a", 2, True, E.ILLEGAL_GENERATION),
    ("c", 3, False, E.STALE_MEMBER_EPOCH),  # a consumer-protocol member's stale epoch
    ("c", 3, True, E.STALE_MEMBER_EPOCH),
    ("c", 4, True, E.NONE),
    ("z", 4, False, E.UNKNOWN_MEMBER_ID),
    (None, -1, False, E.NONE),  # an admin client's fetch
    ("", -1, True, E.UNKNOWN_MEMBER_ID),  # an admin client's commit while the group has members
])
def test_offset_fetch_and_commit_check_classic_members_by_generation(
        member_id: str | None, epoch: int, commit: bool, error: ErrorCode) -> None:
    # Kafka's ConsumerGroup.validateOffsetFetch / validateOffsetCommit -> validateMemberEpoch
    group, _ = upgraded()
    assert group.members["a"].member_epoch == 3 and group.members["c"].member_epoch == 4
    assert consumer_member_error(group, member_id, epoch, commit=commit) is error


def test_an_empty_consumer_group_takes_any_commit_without_a_generation() -> None:
    group, _ = consumer_only()
    empty = replay_all(group, migrating_heartbeat(None, group, HeartbeatRequest("g", "c", -1), topics=TOPICS,
                                                  config=CONFIG, classic_config=CLASSIC_CONFIG, now_ms=NOW).records)
    assert not empty.members and consumer_member_error(empty, "gone", -1, commit=True) is E.NONE
