"""metadata/partition_change.py: every branch of the election and ISR rules, as tables."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import ErrorCode
from metadata.delta import merge_partition_change
from metadata.image import BrokerRegistration, PartitionRegistration
from metadata.partition_change import (
    AlterPartitionRejected,
    Election,
    IsrMember,
    alter_partition,
    elect_leader,
    remove_from_isr,
)
from metadata.records import NO_LEADER, LeaderRecoveryState, PartitionChange

T = "TOPIC-id"
RECOVERING, RECOVERED = LeaderRecoveryState.RECOVERING, LeaderRecoveryState.RECOVERED
ALL = frozenset({1, 2, 3})


def part(isr, leader, *, replicas=(1, 2, 3), elr=(), state=RECOVERED) -> PartitionRegistration:
    return PartitionRegistration(T, 0, replicas, isr, elr, leader=leader, leader_epoch=5,
                                 partition_epoch=7, leader_recovery_state=state)


def change(**fields) -> PartitionChange:
    return PartitionChange(T, 0, **fields)


HEALTHY = part((1, 2, 3), 1)
LED_BY_2 = part((1, 2, 3), 2)  # the preferred replica 1 is in the ISR but does not lead
ISR_1_2 = part((1, 2), 1)
ISR_2_3 = part((2, 3), 2)  # the preferred replica 1 fell out of the ISR
ONLY_3 = part((3,), 3)
OFFLINE = part((1,), NO_LEADER)  # KIP-841: the last ISR member stayed, nobody leads
OFFLINE_RECOVERING = part((2,), NO_LEADER, state=RECOVERING)
ISR_EMPTY_ELR_2_3 = part((), NO_LEADER, elr=(2, 3))  # KIP-966 with ELR enabled
BELOW_MIN_ISR = part((1,), 1, elr=(2,))  # min.insync.replicas 2: 2 waits in the ELR
STALE_ELR = part((1, 2), 1, elr=(3,))
SINGLE_REPLICA = part((3,), 3, replicas=(3,))

# (partition, acceptable brokers, keyword arguments, expected record or None)
ELECT_LEADER = [
    pytest.param(HEALTHY, ALL, {}, None, id="keeps-a-valid-current-leader"),
    pytest.param(LED_BY_2, ALL, {}, None, id="online-does-not-move-to-the-preferred-replica"),
    pytest.param(HEALTHY, {2, 3}, {}, change(leader=2), id="dead-leader-first-isr-in-assignment-order"),
    pytest.param(HEALTHY, {3}, {}, change(leader=3), id="dead-leader-skips-dead-isr-members"),
    pytest.param(ONLY_3, {1, 2}, {}, change(leader=NO_LEADER), id="no-acceptable-isr-member-goes-offline"),
    pytest.param(OFFLINE, {2, 3}, {}, None, id="offline-stays-offline-without-unclean"),
    pytest.param(OFFLINE, {1}, {}, change(leader=1), id="offline-isr-member-comes-back"),
    pytest.param(OFFLINE, {3, 2}, {"unclean_allowed": True},
                 change(leader=2, isr=(2,), leader_recovery_state=RECOVERING),
                 id="unclean-first-acceptable-replica-isr-is-leader-recovering"),
    pytest.param(OFFLINE_RECOVERING, {3}, {"unclean_allowed": True}, change(leader=3, isr=(3,)),
                 id="unclean-while-already-recovering"),
    pytest.param(ONLY_3, set(), {"unclean_allowed": True}, change(leader=NO_LEADER),
                 id="unclean-allowed-but-nobody-acceptable"),
    pytest.param(OFFLINE, {3}, {"election": Election.UNCLEAN},
                 change(leader=3, isr=(3,), leader_recovery_state=RECOVERING),
                 id="unclean-election-overrides-the-topic-config"),
    pytest.param(LED_BY_2, ALL, {"election": Election.PREFERRED}, change(leader=1),
                 id="preferred-moves-to-the-preferred-replica"),
    pytest.param(HEALTHY, ALL, {"election": Election.PREFERRED}, None, id="preferred-already-leads"),
    pytest.param(ISR_2_3, ALL, {"election": Election.PREFERRED}, None,
                 id="preferred-not-in-isr-keeps-a-valid-leader"),
    pytest.param(LED_BY_2, {3}, {"election": Election.PREFERRED}, change(leader=3),
                 id="preferred-and-leader-dead-next-replica"),
    pytest.param(ONLY_3, {1, 2}, {"election": Election.PREFERRED, "unclean_allowed": True},
                 change(leader=NO_LEADER), id="preferred-is-never-unclean"),
    pytest.param(ISR_EMPTY_ELR_2_3, {3}, {"elr_enabled": True, "min_insync_replicas": 2},
                 change(leader=3, isr=(3,), elr=(2,)), id="elr-member-leads-when-isr-is-empty"),
    pytest.param(ISR_EMPTY_ELR_2_3, {3}, {"elr_enabled": True, "min_insync_replicas": 1},
                 change(leader=3, isr=(3,), elr=()), id="elr-leader-restores-min-isr-elr-cleared"),
    pytest.param(ISR_EMPTY_ELR_2_3, {3}, {}, change(elr=()), id="elr-disabled-clears-the-elr"),
    pytest.param(BELOW_MIN_ISR, {3}, {"elr_enabled": True, "min_insync_replicas": 2, "unclean_allowed": True},
                 change(leader=3, isr=(3,), elr=(), leader_recovery_state=RECOVERING),
                 id="unclean-election-clears-the-elr"),
    pytest.param(BELOW_MIN_ISR, ALL, {"elr_enabled": True, "min_insync_replicas": 2}, None,
                 id="elr-enabled-and-stable"),
]


@pytest.mark.parametrize(("partition", "acceptable", "kwargs", "expected"), ELECT_LEADER)
def test_elect_leader(partition, acceptable, kwargs, expected):
    assert elect_leader(partition, is_acceptable=acceptable.__contains__, **kwargs) == expected


# (partition, broker being fenced or shut down, acceptable brokers, keyword arguments, expected)
REMOVE_FROM_ISR = [
    pytest.param(HEALTHY, 3, ALL, {}, change(isr=(1, 2)), id="follower-leaves-the-isr"),
    pytest.param(HEALTHY, 1, ALL, {}, change(leader=2, isr=(2, 3)), id="leader-leaves-isr-and-leadership"),
    pytest.param(ISR_2_3, 1, ALL, {}, None, id="neither-in-isr-nor-leader"),
    pytest.param(ONLY_3, 3, ALL, {}, change(leader=NO_LEADER), id="kip-841-last-isr-member-stays-offline"),
    pytest.param(ONLY_3, 3, ALL, {"unclean_allowed": True},
                 change(leader=1, isr=(1,), leader_recovery_state=RECOVERING),
                 id="last-isr-member-leaves-unclean-elects-another"),
    pytest.param(SINGLE_REPLICA, 3, ALL, {"unclean_allowed": True}, change(leader=NO_LEADER),
                 id="the-removed-broker-is-never-re-elected"),
    pytest.param(ISR_1_2, 1, {3}, {}, change(leader=NO_LEADER, isr=(2,)),
                 id="remaining-isr-member-not-acceptable"),
    pytest.param(ISR_1_2, 2, ALL, {"elr_enabled": True, "min_insync_replicas": 2}, change(isr=(1,), elr=(2,)),
                 id="elr-below-min-isr-the-leaver-joins-the-elr"),
    pytest.param(ONLY_3, 3, ALL, {"elr_enabled": True, "min_insync_replicas": 2},
                 change(leader=NO_LEADER, isr=(), elr=(3,)), id="elr-lets-the-isr-become-empty"),
    pytest.param(STALE_ELR, 2, ALL, {"elr_enabled": True, "min_insync_replicas": 1}, change(isr=(1,), elr=()),
                 id="elr-cleared-at-min-isr"),
    pytest.param(STALE_ELR, 2, ALL, {}, change(isr=(1,), elr=()), id="elr-disabled-clears-a-stale-elr"),
]


@pytest.mark.parametrize(("partition", "broker", "acceptable", "kwargs", "expected"), REMOVE_FROM_ISR)
def test_remove_from_isr(partition, broker, acceptable, kwargs, expected):
    assert remove_from_isr(partition, broker, is_acceptable=acceptable.__contains__, **kwargs) == expected


def _broker(broker_id: int, **state) -> BrokerRegistration:
    return BrokerRegistration(broker_id, broker_id * 10, f"inc-{broker_id}", (), None, **state)


# Broker 6 is not registered; epochs are broker_id * 10.
BROKERS = {1: _broker(1, fenced=False), 2: _broker(2, fenced=False), 3: _broker(3, fenced=False),
           4: _broker(4, fenced=True), 5: _broker(5, fenced=False, in_controlled_shutdown=True)}
WIDE = part((1, 2), 1, replicas=(1, 2, 3, 4, 5, 6))
WIDE_RECOVERING = part((1,), 1, replicas=(1, 2, 3, 4, 5, 6), state=RECOVERING)
LED_BY_FENCED = part((4, 1), 4, replicas=(4, 1))
INVALID = ErrorCode.INVALID_REQUEST
INELIGIBLE = ErrorCode.INELIGIBLE_REPLICA

# (partition, request fields over the valid default, expected record / None / (error, message))
ALTER_PARTITION = [
    pytest.param(WIDE, {"new_isr": [1, 2, 3]}, change(isr=(1, 2, 3)), id="isr-expands"),
    pytest.param(WIDE, {"new_isr": [1]}, change(isr=(1,)), id="isr-shrinks-leader-stays"),
    pytest.param(WIDE, {"new_isr": [1, 2]}, None, id="nothing-changes"),
    pytest.param(WIDE, {"new_isr": [IsrMember(1, 10), IsrMember(3, 30), IsrMember(2)]}, change(isr=(1, 3, 2)),
                 id="matching-broker-epochs-or-minus-one"),
    pytest.param(WIDE, {"leader_epoch": 6}, (ErrorCode.NOT_CONTROLLER, "leader epoch 6 is newer"),
                 id="newer-leader-epoch-not-controller"),
    pytest.param(WIDE, {"partition_epoch": 8}, (ErrorCode.NOT_CONTROLLER, "partition epoch 8 is newer"),
                 id="newer-partition-epoch-not-controller"),
    pytest.param(WIDE, {"leader_epoch": 4, "leader_id": 2},
                 (ErrorCode.FENCED_LEADER_EPOCH, "leader epoch 4 is stale, the current one is 5"),
                 id="stale-leader-epoch-fenced"),
    pytest.param(WIDE, {"leader_id": 2}, (INVALID, "the current leader is 1"), id="not-the-leader"),
    pytest.param(WIDE, {"partition_epoch": 6},
                 (ErrorCode.INVALID_UPDATE_VERSION, "partition epoch 6 is stale"),
                 id="stale-partition-epoch"),
    pytest.param(WIDE, {"new_isr": [1, 1, 2]}, (INVALID, "has duplicates or non-replicas"), id="duplicate-in-isr"),
    pytest.param(WIDE, {"new_isr": [1, 7]}, (INVALID, "has duplicates or non-replicas"), id="non-replica-in-isr"),
    pytest.param(WIDE, {"new_isr": [2, 3]}, (INVALID, "does not include the leader"), id="isr-without-leader"),
    pytest.param(WIDE, {"new_isr": [1, 2], "leader_recovery_state": RECOVERING},
                 (INVALID, "more than the leader while the leader is recovering"), id="recovering-with-followers"),
    pytest.param(WIDE, {"new_isr": [1], "leader_recovery_state": RECOVERING},
                 (INVALID, "cannot change from RECOVERED to RECOVERING"), id="recovered-back-to-recovering"),
    pytest.param(WIDE_RECOVERING, {"new_isr": [1, 2]},
                 (INVALID, "more than the leader while the leader is recovering"),
                 id="recovered-only-with-isr-equal-to-leader"),
    pytest.param(WIDE_RECOVERING, {"new_isr": [1]}, change(leader_recovery_state=RECOVERED),
                 id="leader-recovered"),
    pytest.param(WIDE_RECOVERING, {"new_isr": [1], "leader_recovery_state": 0},
                 change(leader_recovery_state=RECOVERED), id="leader-recovered-as-wire-int"),
    pytest.param(WIDE, {"leader_recovery_state": 7}, (INVALID, "unknown leader_recovery_state 7"),
                 id="unknown-leader-recovery-state"),
    pytest.param(WIDE_RECOVERING, {"new_isr": [1], "leader_recovery_state": RECOVERING}, None,
                 id="still-recovering"),
    pytest.param(WIDE, {"new_isr": [1, 6]}, (INELIGIBLE, "ineligible replicas 6 (not registered)"),
                 id="unknown-broker"),
    pytest.param(WIDE, {"new_isr": [1, 4]}, (INELIGIBLE, "ineligible replicas 4 (fenced)"), id="fenced-broker"),
    pytest.param(WIDE, {"new_isr": [1, 5]}, (INELIGIBLE, "ineligible replicas 5 (shutting down)"),
                 id="broker-in-controlled-shutdown"),
    pytest.param(WIDE, {"new_isr": [1, IsrMember(2, 19)]},
                 (INELIGIBLE, "2 (broker epoch mismatch: requested=19 vs expected=20)"), id="kip-841-stale-epoch"),
    pytest.param(WIDE, {"new_isr": [1, 4, 6]}, (INELIGIBLE, "4 (fenced), 6 (not registered)"),
                 id="every-ineligible-replica-is-named"),
    pytest.param(LED_BY_FENCED, {"leader_id": 4, "new_isr": [4, 1]}, (INELIGIBLE, "4 (fenced)"),
                 id="fenced-leader-itself"),
    pytest.param(WIDE, {"new_isr": [1], "elr_enabled": True, "min_insync_replicas": 2},
                 change(isr=(1,), elr=(2,)), id="elr-shrink-below-min-isr"),
]


@pytest.mark.parametrize(("partition", "request_fields", "expected"), ALTER_PARTITION)
def test_alter_partition(partition, request_fields, expected):
    request = {"leader_id": partition.leader, "leader_epoch": 5, "partition_epoch": 7,
               "new_isr": list(partition.isr), "broker_lookup": BROKERS.get, **request_fields}
    result = alter_partition(partition, **request)
    if isinstance(expected, tuple):
        assert isinstance(result, AlterPartitionRejected), result
        assert result.error is expected[0]
        assert expected[1] in result.message
        assert f"for {T}-0" in result.message
    else:
        assert result == expected


@st.composite
def partitions(draw):
    replicas = tuple(draw(st.permutations(range(1, 6)))[: draw(st.integers(1, 4))])
    isr = tuple(r for r in replicas if draw(st.booleans()))
    elr = tuple(r for r in replicas if r not in isr and draw(st.booleans()))
    leader = draw(st.sampled_from((NO_LEADER, *isr)))
    state = draw(st.sampled_from(LeaderRecoveryState))
    return PartitionRegistration(T, 0, replicas, isr, elr, leader=leader, leader_recovery_state=state)


options = st.fixed_dictionaries({
    "unclean_allowed": st.booleans(), "elr_enabled": st.booleans(), "min_insync_replicas": st.integers(1, 3)})


@settings(max_examples=400, deadline=None)
@given(partitions(), st.sets(st.integers(1, 5)), st.sampled_from(Election), options)
def test_elect_leader_is_sound_and_idempotent(partition, acceptable, election, kwargs):
    record = elect_leader(partition, is_acceptable=acceptable.__contains__, election=election, **kwargs)
    after = partition if record is None else merge_partition_change(partition, record)
    if record is not None and record.leader != -2:
        assert after.leader == NO_LEADER or after.leader in acceptable
        assert after.leader == NO_LEADER or after.leader in after.isr
    again = elect_leader(after, is_acceptable=acceptable.__contains__, election=election, **kwargs)
    assert again is None, "a rule applied to its own result changes nothing"


@settings(max_examples=400, deadline=None)
@given(partitions(), st.integers(1, 5), st.sets(st.integers(1, 5)), options)
def test_remove_from_isr_never_keeps_the_broker_unless_last(partition, broker, acceptable, kwargs):
    record = remove_from_isr(partition, broker, is_acceptable=acceptable.__contains__, **kwargs)
    after = partition if record is None else merge_partition_change(partition, record)
    assert after.leader != broker
    if broker in after.isr:
        # KIP-841: only as the last ISR member, with ELR off, and then nobody else leads cleanly.
        assert after.isr == (broker,) and not kwargs["elr_enabled"]
    assert dataclasses.replace(after) == after  # still a valid registration
