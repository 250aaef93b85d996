"""A voter whose own tick ran long does not mistake that for the leader's silence (issue 35).

Three real pysyncobj voters (quorum.metadata_log.MetadataLog) in this process, real TCP on
127.0.0.1-3. A follower's tick thread is held outside its poll (a tick call that sleeps, as a
long fold slice or a starved thread would) for longer than pysyncobj's longest election timeout
and shorter than its connection timeout, while the leader keeps sending AppendEntries into the
follower's socket. Before the fix the follower looked at its expired timer before reading them:
with pre-vote it asked for pre-votes for the leader's term + 1, without it it stood at once and
deposed the leader; and a pre-vote request read in the same poll as those AppendEntries was
granted if it came first. Now the timer waits for one poll, and pre-votes are answered after it.
The leader's tick held the same way, past the followers' timeouts, no longer costs it the
leadership while they stay connected to it (quorum.prevote.CONNECTED_LEADER_WINDOW).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from common.waiting import wait_until
from quorum.metadata_log import MetadataLog
from quorum.prevote import LEADER_CONTACT_WINDOW, PRE_VOTE_REQUEST
from tests.integration.test_quorum_fsync_ordering import WAIT_S, three_voters

T = TypeVar("T")
# past pysyncobj's longest election timeout (1.4 s), short of its connection timeout (3.5 s):
# the timer has surely expired, and the connections (with the leader's messages in them) stay up
STALL_S = 2.0
# past LEADER_CONTACT_WINDOW: a voter judging the leader's silence before its poll would grant
PRE_VOTE_STALL_S = 3 * LEADER_CONTACT_WINDOW
# past every follower's election timeout (at most 1.4 s after the AppendEntries before it, sent
# every 0.1 s), short of CONNECTED_LEADER_WINDOW
LEADER_STALL_S = 1.6


@pytest.fixture(params=[True, False], ids=["prevote", "no-prevote"])
def voters(request: pytest.FixtureRequest) -> Iterator[list[MetadataLog]]:
    yield from three_voters(fsync=False, prevote=request.param)


@pytest.fixture
def prevote_voters() -> Iterator[list[MetadataLog]]:
    yield from three_voters(fsync=False)


def on_tick(log: MetadataLog, fn: Callable[[], T]) -> T:
    """`fn` run on `log`'s tick thread, where pysyncobj's state lives."""
    return asyncio.run(log.on_tick(fn))


def settled(voters: list[MetadataLog]) -> tuple[MetadataLog, int]:
    """The leader once every voter is in its term (the first election may take two)."""
    def one() -> tuple[MetadataLog, int] | None:
        leaders = [log for log in voters if log.leadership()[0]]
        if len(leaders) != 1:
            return None
        term = leaders[0].leadership()[1]
        return (leaders[0], term) if all(log.leadership()[1] == term for log in voters) else None
    return wait_until("one leader, one term", one, WAIT_S)


def lines_of(caplog: pytest.LogCaptureFixture, thread: int, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.thread == thread and text in r.getMessage()]


def test_a_follower_busy_past_its_election_timeout_reads_before_standing(
        voters: list[MetadataLog], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="quorum.metadata_log")
    leader, term = settled(voters)
    follower = next(log for log in voters if log is not leader)
    ident = on_tick(follower, threading.get_ident)
    on_tick(follower, lambda: time.sleep(STALL_S))  # the fault itself is a span of time
    on_tick(follower, lambda: None)  # returns at the next tick: the busy one has run its election check
    assert follower.leadership() == (False, term), "the busy follower stood for election"
    assert lines_of(caplog, ident, f"asking for pre-votes for term {term + 1}") == []
    assert leader.leadership() == (True, term)


def test_a_pre_vote_is_judged_after_the_poll_that_read_it(
        prevote_voters: list[MetadataLog], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="quorum.metadata_log")
    leader, term = settled(prevote_voters)
    busy, asker = (log for log in prevote_voters if log is not leader)
    ident = on_tick(busy, threading.get_ident)
    node = next(n for n in getattr(busy, "_SyncObj__otherNodes") if n.address == asker.raft_address)

    def stalled_then_asked() -> None:
        # the leader's AppendEntries pile up in the socket meanwhile; the request is handed over
        # as the transport would, in the middle of the poll that reads them
        time.sleep(PRE_VOTE_STALL_S)
        view = busy._raft_view()
        request: dict[str, Any] = {"type": PRE_VOTE_REQUEST, "proposed_term": term + 1,
                                   "last_log_term": view.last_log_term, "last_log_index": view.last_log_index}
        busy._observe_message(node, request, lambda *_: None)

    on_tick(busy, stalled_then_asked)
    on_tick(busy, lambda: None)  # the next tick: the busy one's poll and its answers are done
    assert lines_of(caplog, ident, f"a pre-vote for term {term + 1}") == [
        f"Refused {asker.raft_address} a pre-vote for term {term + 1}: refused: heard from a live leader"]
    assert leader.leadership() == (True, term)


def test_a_connected_leader_busy_past_the_election_timeout_is_not_deposed(
        prevote_voters: list[MetadataLog], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="quorum.metadata_log")
    leader, term = settled(prevote_voters)
    followers = [log for log in prevote_voters if log is not leader]
    # every follower's timer expires while the leader sends nothing, and they keep listening:
    # before, the first to ask got the other's pre-vote (silent past LEADER_CONTACT_WINDOW)
    on_tick(leader, lambda: time.sleep(LEADER_STALL_S))
    for follower in followers:
        on_tick(follower, lambda: None)  # a tick after the leader's first AppendEntries since
    assert [log.leadership() for log in prevote_voters] == [(log is leader, term) for log in prevote_voters]
    assert not any(f"Pre-vote for term {term + 1} won" in r.getMessage() for r in caplog.records)
