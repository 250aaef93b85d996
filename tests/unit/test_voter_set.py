"""quorum.voter_set: the voter set and KIP-853's rules for changing it, as tables."""

from __future__ import annotations

import pytest

from quorum.voter_changes import membership_request, start_voters, static_voters
from quorum.voter_set import (
    ADD,
    OBSERVER_SESSION_TIMEOUT,
    REMOVE,
    ZERO_DIRECTORY_ID,
    LeaderView,
    VoterChangeError,
    VoterEntry,
    VoterSet,
    apply_membership,
    caught_up,
    check_add,
    check_identity,
    check_remove,
    directory_id_bytes,
    directory_id_from_bytes,
    forgets_observer,
    parse_membership,
)

DIR_A = directory_id_from_bytes(bytes(range(16)))
DIR_B = directory_id_from_bytes(bytes(range(1, 17)))
V1 = VoterEntry(1, ZERO_DIRECTORY_ID, "127.0.0.1:9093")
V2 = VoterEntry(2, ZERO_DIRECTORY_ID, "127.0.0.2:9093")
V3 = VoterEntry(3, ZERO_DIRECTORY_ID, "127.0.0.3:9093")
V4 = VoterEntry(4, DIR_A, "127.0.0.4:9093", "127.0.0.4:9080")
THREE = VoterSet.of([V1, V2, V3])
FOUR = VoterSet.of([V1, V2, V3, V4])
LEADER = LeaderView(is_leader=True, committed_in_term=True, pending_change=False, leader_id=1)


def test_directory_ids_are_kafka_uuids() -> None:
    assert len(DIR_A) == 22 and directory_id_bytes(DIR_A) == bytes(range(16))
    assert directory_id_from_bytes(bytes(16)) == ZERO_DIRECTORY_ID


@pytest.mark.parametrize("kwargs, field", [
    ({"node_id": -1}, "voter_id"),
    ({"directory_id": "short"}, "directory_id"),
    ({"raft_address": "no-port"}, "raft_address"),
    ({"raft_address": "h:70000"}, "raft_address"),
    ({"api_address": "h:"}, "api_address"),
])
def test_an_entry_is_validated_at_construction(kwargs: dict[str, object], field: str) -> None:
    fields: dict[str, object] = {"node_id": 4, "directory_id": DIR_A, "raft_address": "h:1", "api_address": None}
    with pytest.raises(VoterChangeError) as refused:
        VoterEntry(**{**fields, **kwargs})  # type: ignore[arg-type]
    assert (refused.value.error, refused.value.field) == ("INVALID_REQUEST", field)


def test_entries_and_sets_round_trip_through_maps() -> None:
    assert VoterEntry.from_map(V4.to_map()) == V4
    assert VoterSet.from_list(FOUR.to_list()) == FOUR
    with pytest.raises(ValueError):
        VoterEntry.from_map({**V4.to_map(), "extra": 1})
    with pytest.raises(ValueError):
        VoterSet.of([V1, VoterEntry(9, DIR_A, V1.raft_address)])  # one address, two ids


@pytest.mark.parametrize("given, kind, address, entry, reverse, expected", [
    (THREE, ADD, V4.raft_address, V4, False, FOUR),
    (FOUR, ADD, V4.raft_address, V4, False, FOUR),  # replayed: no change
    (FOUR, ADD, V4.raft_address, V4, True, THREE),  # a truncated add undone
    (FOUR, REMOVE, V4.raft_address, V4, False, THREE),
    (THREE, REMOVE, V4.raft_address, V4, False, THREE),  # replayed: no change
    (THREE, REMOVE, V4.raft_address, V4, True, FOUR),  # a truncated remove undone
    (THREE, REMOVE, V2.raft_address, None, False, VoterSet.of([V1, V3])),  # by address alone
    (THREE, ADD, V4.raft_address, None, False, THREE),  # pysyncobj's own add: no identity, ignored
])
def test_membership_entries(given: VoterSet, kind: str, address: str, entry: VoterEntry | None, reverse: bool,
                            expected: VoterSet) -> None:
    assert apply_membership(given, kind, address, entry, reverse=reverse) == expected


def test_parse_membership_reads_pysyncobj_requests_with_our_entry() -> None:
    assert parse_membership([ADD, V4.raft_address, object(), V4.to_map()]) == (ADD, V4.raft_address, V4)
    assert parse_membership([REMOVE, V4.raft_address]) == (REMOVE, V4.raft_address, None)
    assert parse_membership(["other", "x"]) is None and parse_membership(b"bytes") is None


def test_start_voters_replays_the_journal_over_the_dump_or_the_static_config() -> None:
    from pysyncobj import pickle
    from pysyncobj.node import TCPNode

    def entry(kind: str, voter: VoterEntry) -> tuple[bytes, int, int]:
        command = bytes([2]) + pickle.dumps([kind, voter.raft_address, TCPNode(voter.raft_address), voter.to_map()])
        return command, 1, 1

    static = static_voters({1: V1.raft_address, 2: V2.raft_address, 3: V3.raft_address})
    assert static == THREE
    assert membership_request(entry(ADD, V4)[0])[0] == ADD and membership_request(b"\x00junk") is None
    journal = [entry(ADD, V4), (b"\x00regular", 2, 1), entry(REMOVE, V2)]
    assert start_voters(static, None, journal) == VoterSet.of([V1, V3, V4])
    assert start_voters(static, FOUR, [entry(ADD, V4)]) == FOUR  # the dump covered it already
    assert start_voters(static, FOUR, []) == FOUR


@pytest.mark.parametrize("voters, new, leader, error, field", [
    (THREE, V4, LeaderView(False, False, False, leader_id=2), "NOT_LEADER_OR_FOLLOWER", None),
    (THREE, V4, LeaderView(True, False, False), "REQUEST_TIMED_OUT", None),  # its term not committed yet
    (THREE, V4, LeaderView(True, True, True), "REQUEST_TIMED_OUT", None),  # one change at a time
    (FOUR, V4, LEADER, "DUPLICATE_VOTER", "voter_id"),
    (FOUR, VoterEntry(4, DIR_B, "127.0.0.9:9093"), LEADER, "DUPLICATE_VOTER", "voter_id"),  # id reused, other dir
    (THREE, VoterEntry(4, ZERO_DIRECTORY_ID, "127.0.0.4:9093"), LEADER, "INVALID_REQUEST", "directory_id"),
    (THREE, VoterEntry(4, DIR_A, V3.raft_address), LEADER, "INVALID_REQUEST", "raft_address"),
])
def test_check_add_refuses_with_kafkas_errors(voters: VoterSet, new: VoterEntry, leader: LeaderView, error: str,
                                              field: str | None) -> None:
    with pytest.raises(VoterChangeError) as refused:
        check_add(voters, new, leader)
    assert (refused.value.error, refused.value.field) == (error, field)


def test_check_add_accepts_a_new_voter() -> None:
    check_add(THREE, V4, LEADER)


@pytest.mark.parametrize("answered_id, answered_dir, field", [(4, DIR_B, "directory_id"), (5, DIR_A, "voter_id")])
def test_the_new_voter_must_answer_as_itself(answered_id: int, answered_dir: str, field: str) -> None:
    check_identity(V4, 4, DIR_A)
    with pytest.raises(VoterChangeError) as refused:
        check_identity(V4, answered_id, answered_dir)
    assert (refused.value.error, refused.value.field) == ("REQUEST_TIMED_OUT", field)


@pytest.mark.parametrize("match, end, expected", [(10, 10, True), (11, 10, True), (9, 10, False), (0, 1, False)])
def test_caught_up(match: int, end: int, expected: bool) -> None:
    assert caught_up(match, end) is expected


@pytest.mark.parametrize("voters, node_id, directory_id, live, error, field", [
    (THREE, 9, ZERO_DIRECTORY_ID, {1, 2, 3}, "VOTER_NOT_FOUND", "voter_id"),
    (FOUR, 4, DIR_B, {1, 2, 3, 4}, "VOTER_NOT_FOUND", "directory_id"),  # id with another directory id
    (FOUR, 4, ZERO_DIRECTORY_ID, {1, 2, 3, 4}, "VOTER_NOT_FOUND", "directory_id"),
    (VoterSet.of([V1]), 1, ZERO_DIRECTORY_ID, {1}, "VOTER_NOT_FOUND", "voter_id"),  # the last voter
    (THREE, 2, ZERO_DIRECTORY_ID, {1}, "REQUEST_TIMED_OUT", "voter_id"),  # 1 and 3 left, 3 unreachable
    (FOUR, 4, DIR_A, {1, 4}, "REQUEST_TIMED_OUT", "voter_id"),  # 1 of 3 reachable
])
def test_check_remove_refuses_with_kafkas_errors(voters: VoterSet, node_id: int, directory_id: str, live: set[int],
                                                 error: str, field: str) -> None:
    with pytest.raises(VoterChangeError) as refused:
        check_remove(voters, node_id, directory_id, LEADER, live=live)
    assert (refused.value.error, refused.value.field) == (error, field)


@pytest.mark.parametrize("voters, node_id, directory_id, live", [
    (FOUR, 4, DIR_A, {1, 2, 3}),  # the removed voter need not be reachable
    (THREE, 2, DIR_B, {1, 3}),  # a static voter has no recorded directory id: any matches
    (THREE, 1, ZERO_DIRECTORY_ID, {1, 2, 3}),  # the leader itself (the shell hands over first)
])
def test_check_remove_accepts(voters: VoterSet, node_id: int, directory_id: str, live: set[int]) -> None:
    assert check_remove(voters, node_id, directory_id, LEADER, live=live).node_id == node_id


NOW = 10_000.0  # seconds on the leader's monotonic clock


@pytest.mark.parametrize("adding, last_answer, forgotten", [
    (True, None, False),  # an add is catching it up: its own deadline bounds that
    (True, NOW - 2 * OBSERVER_SESSION_TIMEOUT, False),
    (False, None, True),  # its add ended and it never answered: Kafka's leader never knew it
    (False, NOW, False),  # answering: an observer still (an add that timed out on a slow one)
    (False, NOW - OBSERVER_SESSION_TIMEOUT + 1, False),
    (False, NOW - OBSERVER_SESSION_TIMEOUT, True),  # silent for the session timeout: forgotten
    (False, NOW - 2 * OBSERVER_SESSION_TIMEOUT, True),
])
def test_the_leader_forgets_an_observer_by_kafkas_rule(adding: bool, last_answer: float | None,
                                                      forgotten: bool) -> None:
    why = forgets_observer(adding=adding, last_answer_s=last_answer, now_s=NOW)
    assert (why is not None) is forgotten


def test_the_observer_session_timeout_is_kafkas_and_can_be_shortened() -> None:
    assert OBSERVER_SESSION_TIMEOUT == 300.0  # LeaderState.OBSERVER_SESSION_TIMEOUT_MS
    assert forgets_observer(adding=False, last_answer_s=NOW - 2.0, now_s=NOW, timeout_s=2.0) == \
        "no answer for 2 s (observer session timeout 2 s)"
    assert forgets_observer(adding=False, last_answer_s=NOW - 1.9, now_s=NOW, timeout_s=2.0) is None
