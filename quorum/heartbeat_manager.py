"""Broker sessions: Kafka's BrokerHeartbeatManager, the controller's soft state.

Last contact and reported metadata offset per broker live here, NOT in the metadata log:
they change on every heartbeat and a new active controller starts afresh. Time is an
argument (`now_ms`), never read from a clock. Whether a broker is fenced is read from the
image, so this never disagrees with the log.

Session rule (Kafka's hasValidSession): a session is valid while
`last_contact_ms + session_timeout_ms >= now_ms`. An unfenced broker this manager has
not heard from yet (it just became the active controller) gets a session starting now,
as Kafka's ClusterControlManager.activate() touches every broker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, TypeAlias

from common.config import default_int
from metadata.image import MetadataImage

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

DEFAULT_SESSION_TIMEOUT_MS: Final = default_int("broker.session.timeout.ms")  # ms


PartitionKey: TypeAlias = tuple[str, int]  # (topic name, partition id), as quorum.controller_result's
_UNKNOWN: Final = ("", -1)  # no leader hint: look from the first partition


@dataclass(slots=True)
class _Session:
    last_contact_ms: int
    metadata_offset: int
    controlled_shutdown_offset: int | None = None  # Kafka's controlledShutdownOffset (-1 there)
    # Where the broker's first leadership was when last looked for (broker_control._leads_partitions),
    # None once it led nothing in controlled shutdown, _UNKNOWN otherwise.
    leader_hint: PartitionKey | None = _UNKNOWN


class BrokerHeartbeatManager:
    """Tracks when each broker last heartbeated and how far it has replayed the metadata log."""

    def __init__(self, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS) -> None:
        if type(session_timeout_ms) is not int or session_timeout_ms <= 0:
            raise ValueError(f"session_timeout_ms must be a positive integer, got {session_timeout_ms!r}")
        self.session_timeout_ms = session_timeout_ms
        # One entry per broker id ever heard from; ids are operator-assigned, so this is
        # bounded by the cluster size, and unregister/re-register remove entries.
        self._sessions: dict[int, _Session] = {}
        # Brokers whose partitions are still being moved away in batches (quorum.controller_runtime):
        # at most one entry per broker id, like the sessions.
        self._leaving: set[int] = set()

    def touch(self, broker_id: int, now_ms: int, metadata_offset: int) -> None:
        """A heartbeat arrived: the session starts again from now_ms."""
        session = self._sessions.get(broker_id)
        if session is None:
            self._sessions[broker_id] = _Session(now_ms, metadata_offset)
        else:
            session.last_contact_ms, session.metadata_offset = now_ms, metadata_offset

    def controlled_shutdown_offset(self, broker_id: int) -> int | None:
        """The metadata offset every active broker must reach before this one may shut down."""
        session = self._sessions.get(broker_id)
        return None if session is None else session.controlled_shutdown_offset

    def maybe_update_controlled_shutdown_offset(self, broker_id: int, offset: int) -> None:
        """Record it unless one is already known (Kafka's maybeUpdateControlledShutdownOffset)."""
        session = self._sessions.get(broker_id)
        if session is not None and session.controlled_shutdown_offset is None:
            session.controlled_shutdown_offset = offset

    def raise_controlled_shutdown_offset(self, broker_id: int, offset: int) -> None:
        """A later batch of the broker's controlled shutdown committed up to `offset`: every active
        broker must replay that too before this one may shut down."""
        session = self._sessions.get(broker_id)
        if session is not None:
            known = session.controlled_shutdown_offset
            session.controlled_shutdown_offset = offset if known is None else max(known, offset)

    def clear_controlled_shutdown_offset(self, broker_id: int) -> None:
        """The broker is no longer in controlled shutdown (fenced, unfenced again, shut down)."""
        session = self._sessions.get(broker_id)
        if session is not None:
            session.controlled_shutdown_offset = None
            session.leader_hint = _UNKNOWN  # out of controlled shutdown it may be elected again

    def leader_hint(self, broker_id: int) -> PartitionKey | None:
        """The first partition the broker led when last looked for; None: look from the first."""
        session = self._sessions.get(broker_id)
        if session is None or session.leader_hint is None or session.leader_hint == _UNKNOWN:
            return None
        return session.leader_hint

    def led_nothing(self, broker_id: int) -> bool:
        """The broker was found leading nothing while in controlled shutdown (it stays so)."""
        session = self._sessions.get(broker_id)
        return session is not None and session.leader_hint is None

    def set_leader_hint(self, broker_id: int, first_led: PartitionKey | None) -> None:
        session = self._sessions.get(broker_id)
        if session is not None:
            session.leader_hint = first_led

    def begin_leaving(self, broker_id: int) -> None:
        """Later decisions still move this broker's partitions away: it may not be unfenced
        before they are done (it would keep leading what the rest of the batches were to move)."""
        self._leaving.add(broker_id)

    def end_leaving(self, broker_id: int) -> None:
        self._leaving.discard(broker_id)

    def is_leaving(self, broker_id: int) -> bool:
        return broker_id in self._leaving

    def remove(self, broker_id: int) -> None:
        """Forget a broker's session (unregistered, or replaced by a new incarnation)."""
        self._sessions.pop(broker_id, None)

    def last_contact_ms(self, broker_id: int) -> int | None:
        session = self._sessions.get(broker_id)
        return None if session is None else session.last_contact_ms

    def metadata_offset(self, broker_id: int) -> int | None:
        """The metadata offset the broker last reported having replayed, or None."""
        session = self._sessions.get(broker_id)
        return None if session is None else session.metadata_offset

    def has_valid_session(self, broker_id: int, now_ms: int) -> bool:
        """Heard from within the session timeout (a broker never heard from has no session)."""
        session = self._sessions.get(broker_id)
        return session is not None and session.last_contact_ms + self.session_timeout_ms >= now_ms

    def begin_sessions(self, image: MetadataImage, now_ms: int) -> None:
        """Start a session now for every unfenced broker not heard from yet (Kafka's activate())."""
        for broker_id, registration in image.cluster.brokers.items():
            if not registration.fenced and broker_id not in self._sessions:
                self._sessions[broker_id] = _Session(now_ms, -1)

    def restart_sessions(self, image: MetadataImage, now_ms: int) -> None:
        """Every unfenced broker's session starts again at now_ms (the controller itself stalled:
        silence it could not hear proves nothing about the brokers; see quorum.broker_rpc)."""
        for broker_id, registration in image.cluster.brokers.items():
            if registration.fenced:
                continue
            session = self._sessions.get(broker_id)
            if session is None:
                self._sessions[broker_id] = _Session(now_ms, -1)
            else:
                session.last_contact_ms = max(session.last_contact_ms, now_ms)

    def next_expired(self, now_ms: int, image: MetadataImage) -> int | None:
        """The unfenced broker whose session expired longest ago, or None (Kafka fences one per pass)."""
        self.begin_sessions(image, now_ms)
        oldest: tuple[int, int] | None = None
        for broker_id, registration in image.cluster.brokers.items():
            if registration.fenced:
                continue
            key = (self._sessions[broker_id].last_contact_ms, broker_id)
            if oldest is None or key < oldest:
                oldest = key
        if oldest is None or oldest[0] + self.session_timeout_ms >= now_ms:
            return None
        return oldest[1]

    def next_expiry_ms(self, image: MetadataImage) -> int | None:
        """When the earliest session of an unfenced broker expires (the fencing check's wake-up
        time, as Kafka schedules it), or None when no unfenced broker has a session."""
        expiries = [self._sessions[b].last_contact_ms + self.session_timeout_ms + 1
                    for b, registration in image.cluster.brokers.items()
                    if not registration.fenced and b in self._sessions]
        return min(expiries, default=None)

    def ages(self, now_ms: int) -> dict[int, int]:
        """Milliseconds since each tracked broker's last contact, for metrics."""
        return {broker_id: now_ms - session.last_contact_ms
                for broker_id, session in sorted(self._sessions.items())}
