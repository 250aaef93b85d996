"""The fetching side of an incremental fetch session (KIP-227): what each Fetch must carry.

    handler = FetchSessionHandler()
    request = handler.build(wanted, always=not_in_isr)     # session id, epoch, partitions, forgotten
    ... send; then exactly one of:
    handler.handle_response(response.error_code, response.session_id)
    handler.handle_error()                                  # connection lost / no answer

Kafka's FetchSessionHandler, without I/O. The first fetch is full (epoch 0) and asks for a
session; while the leader keeps one, each fetch names only the partitions whose request
changed (fetch offset, log start offset, leader epoch, max bytes) plus `always`, and
forgets those no longer wanted; the leader answers only partitions with news. Any session
error or lost answer falls back to a full fetch: FETCH_SESSION_ID_NOT_FOUND starts afresh,
the others close the old session as the full fetch opens a new one.

`always` is ours, not Kafka's: a follower not in a partition's ISR names that partition in
every fetch, so the leader, which reads only what a session names or saw change, still
reconsiders the ISR (Kafka reads every session partition on every fetch and so does this).
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from broker.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    next_epoch,
)
from common.topic_partition import TopicPartition
from common.errors import ErrorCode
from common.protocol.fetch import FetchPartition


@dataclass(frozen=True, slots=True)
class SessionFetch:
    """One Fetch to send: `to_send` is what the request names; `wanted` all it covers."""

    session_id: int
    epoch: int
    to_send: Mapping[TopicPartition, FetchPartition]
    to_forget: tuple[TopicPartition, ...]
    wanted: Mapping[TopicPartition, FetchPartition]

    @property
    def is_full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSessionHandler:
    """One fetcher's session with one leader."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        # What the leader's session holds for each partition (as of the last answered fetch).
        self._session: dict[TopicPartition, FetchPartition] = {}
        self._pending: SessionFetch | None = None

    def build(self, wanted: Mapping[TopicPartition, FetchPartition],
              always: AbstractSet[TopicPartition] = frozenset()) -> SessionFetch:
        if self.epoch == INITIAL_EPOCH:
            request = SessionFetch(self.session_id, self.epoch, dict(wanted), (), dict(wanted))
        else:
            session = self._session
            # Fetchers reuse an unchanged partition's request object: `is` settles most.
            to_send = {tp: p for tp, p in wanted.items()
                       if tp in always or ((held := session.get(tp)) is not p and held != p)}
            forget = tuple(tp for tp in session if tp not in wanted)
            request = SessionFetch(self.session_id, self.epoch, to_send, forget, dict(wanted))
        self._pending = request
        return request

    def handle_response(self, error_code: int, session_id: int) -> bool:
        """Take the answer to the last built fetch; False when it was a session error
        (its partitions carry nothing: fetch again, full)."""
        sent, self._pending = self._pending, None
        if error_code:
            if error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = INVALID_SESSION_ID
            self.epoch = INITIAL_EPOCH
            self._session = {}
            return error_code not in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                                      ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if sent is None:
            return True
        if session_id == INVALID_SESSION_ID:  # no session (cache full, or closed): full again
            self.session_id, self.epoch, self._session = INVALID_SESSION_ID, INITIAL_EPOCH, {}
            return True
        if sent.is_full:
            self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
        else:
            self.epoch = next_epoch(self.epoch)
        self._session = dict(sent.wanted)
        return True

    def handle_error(self) -> None:
        """No answer (connection lost, timeout): close the session, attempt a new one."""
        self._pending = None
        self.epoch = INITIAL_EPOCH
        self._session = {}
