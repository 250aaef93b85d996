"""The fetching side of an incremental fetch session (KIP-227): what each Fetch must carry.

    handler = FetchSessionHandler()
    handler.set(tp, entry) / handler.remove(tp)             # as partitions change, one at a time
    request = handler.build(always=not_in_isr)              # session id, epoch, partitions, forgotten
    ... send; then exactly one of:
    handler.handle_response(response.error_code, response.session_id)
    handler.handle_error()                                  # connection lost / no answer

Kafka's FetchSessionHandler, without I/O. The first fetch is full (epoch 0) and asks for a
session; while the leader keeps one, each fetch names only the partitions whose request
changed (fetch offset, log start offset, leader epoch, max bytes) plus `always`, and
forgets those no longer wanted; the leader answers only partitions with news. Any session
error or lost answer falls back to a full fetch: FETCH_SESSION_ID_NOT_FOUND starts afresh,
the others close the old session as the full fetch opens a new one.

Unlike Kafka's, whose builder is handed every partition on every fetch and diffs them all,
the wanted set lives here and is edited one partition at a time: an incremental fetch costs
what changed since the last one, not every partition of the session (issue 35: a follower of
100,000 partitions built each Fetch by walking them all). Only a full fetch copies the set.

`always` is ours, not Kafka's: a follower not in a partition's ISR names that partition in
every fetch, so the leader, which reads only what a session names or saw change, still
reconsiders the ISR (Kafka reads every session partition on every fetch and so does this).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from broker.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    next_epoch,
)
from common.topic_partition import TopicPartition
from common.errors import ErrorCode
from common.protocol.fetch import FetchPartition

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)


class SessionFetch(NamedTuple):
    """One Fetch to send: `to_send` is what the request names, `to_forget` what it drops.

    A tuple, not a frozen dataclass: one is built per fetch round, and a frozen __init__ (an
    object.__setattr__ per field) was ~45 of a follower's ~3,900 opcodes per round (issue 35)."""

    session_id: int
    epoch: int
    to_send: Mapping[TopicPartition, FetchPartition]
    to_forget: tuple[TopicPartition, ...]

    @property
    def is_full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSessionHandler:
    """One fetcher's session with one leader."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        # Every partition the next fetch covers, with its request (edited through set/remove).
        self.wanted: dict[TopicPartition, FetchPartition] = {}
        # What the leader's session holds for each partition (as of the last answered fetch).
        self._session: dict[TopicPartition, FetchPartition] = {}
        # Partitions set or removed since the last build: only these can differ from _session
        # (a dict for its order: requests list partitions the same way on every run).
        self._changed: dict[TopicPartition, None] = {}
        self._pending: SessionFetch | None = None

    def set(self, tp: TopicPartition, entry: FetchPartition) -> None:
        """The next fetch covers `tp` with `entry` (the fetcher keeps an unchanged partition's
        entry object, so `is` settles most comparisons)."""
        if self.wanted.get(tp) is not entry:
            self.wanted[tp] = entry
            self._changed[tp] = None

    def remove(self, tp: TopicPartition) -> None:
        """The next fetch no longer covers `tp` (the leader's session forgets it)."""
        if self.wanted.pop(tp, None) is not None:
            self._changed[tp] = None

    def build(self, always: Iterable[TopicPartition] = ()) -> SessionFetch:
        changed, self._changed = self._changed, {}
        wanted = self.wanted
        if self.epoch == INITIAL_EPOCH:
            request = tuple.__new__(SessionFetch, (self.session_id, self.epoch, dict(wanted), ()))
        else:
            session = self._session
            to_send: dict[TopicPartition, FetchPartition] = {}
            forget: list[TopicPartition] = []
            for tp in changed:
                entry = wanted.get(tp)
                if entry is None:
                    if tp in session:
                        forget.append(tp)
                elif (held := session.get(tp)) is None or held.fetch_offset != entry.fetch_offset \
                        or (held is not entry and held != entry):  # (the offset first: it moves most)
                    to_send[tp] = entry
            for tp in always:
                entry = wanted.get(tp)
                if entry is not None:
                    to_send[tp] = entry
            # tuple.__new__ (C), not the NamedTuple's own __new__ (a Python frame): one per round
            request = tuple.__new__(SessionFetch, (self.session_id, self.epoch, to_send, tuple(forget)))
        self._pending = request
        return request

    def handle_response(self, error_code: int, session_id: int) -> bool:
        """Take the answer to the last built fetch; False when it was a session error
        (its partitions carry nothing: fetch again, full)."""
        sent, self._pending = self._pending, None
        if error_code:
            if error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = INVALID_SESSION_ID
            self._restart()
            return error_code not in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                                      ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if sent is None:
            return True
        if session_id == INVALID_SESSION_ID:  # no session (cache full, or closed): full again
            self.session_id = INVALID_SESSION_ID
            self._restart()
            return True
        if sent.is_full:
            self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
            self._session = dict(sent.to_send)  # a full fetch names every partition it covers
        else:
            self.epoch = next_epoch(self.epoch)
            session = self._session
            session.update(sent.to_send)
            for tp in sent.to_forget:
                session.pop(tp, None)
        return True

    def handle_error(self) -> None:
        """No answer (connection lost, timeout): close the session, attempt a new one."""
        self._pending = None
        self._restart()

    def _restart(self) -> None:
        # The next fetch is full and names all of `wanted`: what changed before it is moot.
        self.epoch = INITIAL_EPOCH
        self._session = {}
        self._changed = {}
