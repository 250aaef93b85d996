"""quorum.prevote's rules: who grants a pre-vote, who ignores a real vote request, when a round wins."""

from __future__ import annotations

import pytest

from quorum.prevote import (
    CONNECTED_LEADER_WINDOW,
    LEADER_CONTACT_WINDOW,
    PreVoteAnswer,
    PreVoteRound,
    VoterView,
    adopts_higher_term,
    decide_pre_vote,
    heard_everything_since,
    ignores_vote_request,
    log_up_to_date,
    stands_in_this_tick,
    tells_leader_of_higher_term,
)

LEADERLESS = VoterView(current_term=5, last_log_term=5, last_log_index=100, is_leader=False,
                       since_leader_contact_s=None)


def view(**changes: object) -> VoterView:
    fields = {"current_term": 5, "last_log_term": 5, "last_log_index": 100, "is_leader": False,
              "since_leader_contact_s": None, **changes}
    return VoterView(**fields)  # type: ignore[arg-type]


def pre_vote(v: VoterView, *, proposed: int = 6, last_term: int = 5, last_index: int = 100) -> PreVoteAnswer:
    return decide_pre_vote(proposed_term=proposed, candidate_last_term=last_term, candidate_last_index=last_index,
                           view=v)


def test_a_leaderless_voter_grants_an_up_to_date_candidate() -> None:
    assert pre_vote(LEADERLESS) is PreVoteAnswer.GRANTED
    assert pre_vote(LEADERLESS, last_index=200) is PreVoteAnswer.GRANTED
    assert pre_vote(LEADERLESS, last_term=6, last_index=1) is PreVoteAnswer.GRANTED  # later term wins


def test_a_voter_that_heard_from_the_leader_within_the_window_refuses() -> None:
    assert pre_vote(view(since_leader_contact_s=0.05)) is PreVoteAnswer.HAS_LEADER
    assert pre_vote(view(since_leader_contact_s=LEADER_CONTACT_WINDOW - 0.001)) is PreVoteAnswer.HAS_LEADER
    # once the leader has been silent for the window, the voter would vote again (a failover)
    assert pre_vote(view(since_leader_contact_s=LEADER_CONTACT_WINDOW)) is PreVoteAnswer.GRANTED
    assert pre_vote(view(since_leader_contact_s=3.0)) is PreVoteAnswer.GRANTED


def test_the_leader_refuses() -> None:
    assert pre_vote(view(is_leader=True)) is PreVoteAnswer.IS_LEADER


def test_a_candidate_behind_in_log_or_term_is_refused() -> None:
    assert pre_vote(LEADERLESS, last_index=99) is PreVoteAnswer.STALE_LOG
    assert pre_vote(LEADERLESS, last_term=4, last_index=500) is PreVoteAnswer.STALE_LOG
    assert pre_vote(LEADERLESS, proposed=4) is PreVoteAnswer.STALE_TERM
    # a proposed term equal to the voter's (the candidate is one term behind) can still be granted:
    # the real election then runs at a higher term after it learns the current one
    assert pre_vote(LEADERLESS, proposed=5) is PreVoteAnswer.GRANTED


def test_log_up_to_date_is_raft_5_4_1() -> None:
    v = view(last_log_term=3, last_log_index=10)
    assert log_up_to_date(candidate_last_term=3, candidate_last_index=10, view=v)
    assert not log_up_to_date(candidate_last_term=3, candidate_last_index=9, view=v)
    assert log_up_to_date(candidate_last_term=4, candidate_last_index=0, view=v)
    assert not log_up_to_date(candidate_last_term=2, candidate_last_index=99, view=v)


def test_a_voter_with_a_live_leader_ignores_a_higher_term_vote_request() -> None:
    assert ignores_vote_request(request_term=6, view=view(since_leader_contact_s=0.1))
    assert ignores_vote_request(request_term=9, view=view(is_leader=True))
    # not a higher term: pysyncobj's own handling changes nothing, let it through
    assert not ignores_vote_request(request_term=5, view=view(is_leader=True))
    # no live leader: a real election goes ahead (failover)
    assert not ignores_vote_request(request_term=6, view=LEADERLESS)
    assert not ignores_vote_request(request_term=6, view=view(since_leader_contact_s=LEADER_CONTACT_WINDOW))


def test_a_round_needs_a_majority_counting_the_candidate() -> None:
    three = PreVoteRound(proposed_term=6, voters=3)
    assert not three.won
    assert not three.on_answer("b", 6, False, "has leader")
    assert three.on_answer("c", 6, True)
    assert three.refused == {"b": "has leader"}

    five = PreVoteRound(proposed_term=6, voters=5)
    assert not five.on_answer("b", 6, True)
    assert not five.on_answer("b", 6, True)  # the same voter twice counts once
    assert five.on_answer("c", 6, True)


def test_answers_for_another_round_do_not_count() -> None:
    round_ = PreVoteRound(proposed_term=7, voters=3)
    assert not round_.on_answer("b", 6, True)
    assert round_.granted == set()


def test_a_quorum_of_one_wins_at_once_and_a_quorum_has_a_voter() -> None:
    assert PreVoteRound(proposed_term=1, voters=1).won
    with pytest.raises(ValueError):
        PreVoteRound(proposed_term=1, voters=0)


def test_a_round_counts_only_while_the_term_is_the_one_it_asked_from() -> None:
    round_ = PreVoteRound(proposed_term=1, voters=3)
    assert round_.is_for(0)
    # the voter adopted a candidate's term 1 mid-round: standing now would mean term 2, never pre-voted
    assert not round_.is_for(1)
    assert not round_.is_for(2)


@pytest.mark.parametrize("leader_term, current_term, tells", [
    (1, 2, True),  # a voter that got ahead (a race at the first election, or pre-vote off on it)
    (2, 2, False),  # its own leader
    (3, 2, False),  # a new leader: pysyncobj adopts that term itself
])
def test_a_voter_ahead_in_term_tells_the_leader(leader_term: int, current_term: int, tells: bool) -> None:
    assert tells_leader_of_higher_term(leader_term=leader_term, current_term=current_term) is tells


@pytest.mark.parametrize("notice_term, current_term, adopts", [(3, 2, True), (2, 2, False), (1, 2, False)])
def test_only_a_higher_term_notice_is_adopted(notice_term: int, current_term: int, adopts: bool) -> None:
    assert adopts_higher_term(notice_term=notice_term, current_term=current_term) is adopts


@pytest.mark.parametrize(("deadline", "listened_at", "fires"), [
    (10.0, 10.5, True),   # a poll ended after the timer expired and reset nothing: the leader is silent
    (10.0, 10.0, True),
    (10.0, 9.5, False),   # expired while the voter was busy outside its poll: read the socket first
    (0.0, 0.0, True),     # a handover's TimeoutNow (deadline 0) fires at once
])
def test_an_expired_timer_fires_only_after_a_poll_past_it(deadline: float, listened_at: float,
                                                          fires: bool) -> None:
    assert heard_everything_since(deadline=deadline, listened_at=listened_at) is fires


@pytest.mark.parametrize(("since", "connected", "answer"), [
    (LEADER_CONTACT_WINDOW + 0.1, False, PreVoteAnswer.GRANTED),   # gone: its connection closed
    (LEADER_CONTACT_WINDOW + 0.1, True, PreVoteAnswer.HAS_LEADER),  # connected: busy, not gone
    (CONNECTED_LEADER_WINDOW - 0.01, True, PreVoteAnswer.HAS_LEADER),
    (CONNECTED_LEADER_WINDOW, True, PreVoteAnswer.GRANTED),         # silent that long: replaced all the same
])
def test_a_leader_still_connected_gets_the_longer_window(since: float, connected: bool,
                                                         answer: PreVoteAnswer) -> None:
    v = view(since_leader_contact_s=since, leader_connected=connected)
    assert pre_vote(v) is answer
    assert ignores_vote_request(request_term=6, view=v) is (answer is PreVoteAnswer.HAS_LEADER)


@pytest.mark.parametrize(("is_voter", "prevote", "expired", "cleared", "transfer", "stands"), [
    # with pre-vote only a won round stands, whatever the timer says: a timer that expires while
    # pysyncobj's tick runs (its meta write's fsync held 1.6 s, issue 35) must not stand at term + 1
    (True, True, True, False, False, False),
    (True, True, False, False, False, False),
    (True, True, False, True, False, True),
    (True, True, True, True, False, True),
    # a handover's TimeoutNow stands with or without pre-vote (the thesis skips pre-vote for it)
    (True, True, False, False, True, True),
    (True, False, False, False, True, True),
    # without pre-vote, an expired timer the voter listened past stands; one not expired waits
    (True, False, True, False, False, True),
    (True, False, False, False, False, False),
    # an observer never stands (KIP-853), whatever else holds
    (False, True, True, True, True, False),
    (False, False, True, False, False, False),
])
def test_pysyncobj_stands_only_when_the_rules_say_so(is_voter: bool, prevote: bool, expired: bool, cleared: bool,
                                                     transfer: bool, stands: bool) -> None:
    assert stands_in_this_tick(is_voter=is_voter, prevote=prevote, expired=expired, cleared=cleared,
                               transfer=transfer) is stands
