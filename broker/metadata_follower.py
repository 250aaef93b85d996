"""The broker's metadata follower, sans-IO: RPC replies in, images and decisions out.

A broker follows the committed metadata log as Kafka's BrokerLifecycleManager and
MetadataLoader do together:

    state = MetadataFollowerState(broker_id=4)
    state.registration_request(...)            -> the broker-registration body
    state.on_registration_reply(reply)         -> broker_epoch, or None: register again later
    state.next_fetch_offset                    -> where the next metadata-fetch starts
    state.on_fetch_reply(reply)                -> LocalReplicaChanges, or None when nothing applied
    offset_after(decode_fetch_reply(reply))    -> where the next page starts, when asked before this
                                                  one is applied (state.apply_fetch_reply)
    state.heartbeat_request()                  -> the broker-heartbeat body (applied offset inside)
    state.on_heartbeat_reply(reply)            -> HeartbeatDecision

Records are replayed through `metadata.transactions.replay` (`metadata.delta.apply`, the one
replay path, plus KIP-868 transactions: an open transaction's records are published only at its
EndTransaction, so the replica manager never sees half a large change), and a batch
applies whole or not at all. Records must continue the applied offset exactly: a gap or a
repeated offset is a MetadataFollowerError naming both offsets, and the image stays as it
was. A snapshot (sent when the asked offset is older than the controller's retained log)
replaces the image; one older than the applied image is refused (it would go back in time).

No sockets, no clocks: `now_ms` is passed in; the shell (`broker.metadata_follower_loop`)
does the I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from typing import Any, Final

from common import rpc
from common.errors import ErrorCode
from common.rpc import RpcDecodeError
from common.rpc_messages import (
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    BrokerRegistrationReply,
    BrokerRegistrationRequest,
    ListenerData,
    MetadataFetchReply,
    OfflineReplicaTopic,
    RpcStatus,
)
from metadata.codec import Listener, MetadataRecordError
from metadata.feature_support import UnsupportedLevel, describe_levels, unsupported_levels
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.local_changes import LocalReplicaChanges, changes_for_broker
from metadata.records import Record, record_from_map
from metadata.snapshot import decode_snapshot
from metadata.transactions import ReplayState, replay
from shutdown.controller_states import another_broker_shutting_down

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

NO_BROKER_EPOCH: Final = -1
DEFAULT_CHECKPOINT_INTERVAL_MS: Final = 1000  # at most one applied-offset checkpoint per second
# A checkpoint rewrites the whole image, synchronously on the event loop: ~1 s at 100,000
# partitions on a loaded machine, so a write a second left the loop no time for the changes
# themselves. The next write waits at least this many times the last one's duration, so
# checkpoints take at most 1/(1 + this) of the loop whatever the image's size; a small image
# keeps the one-second interval. (A checkpoint only shortens a restart's metadata refetch.)
CHECKPOINT_COST_FACTOR: Final = 20
# While the controller reports committed records the image does not hold yet (a burst: another
# broker's controlled shutdown, a large topic), a checkpoint waits until the follower caught up,
# at most this long after the last one: a write per burst, not one per fetched page (13 % of a
# broker's loop while it took ~3,300 roles at 10,000 partitions). It waits as well while another
# broker is in controlled shutdown: that broker leaves only once every active broker has replayed
# its batches, and the follower is caught up between two of them, when a checkpoint (the whole
# image: 0.5-1 s of the loop at 100,000 partitions) delayed the next (7.6 % of a surviving
# broker's loop in such a shutdown, py-spy).
MAX_CHECKPOINT_DEFER_MS: Final = 30_000
# Failed replicas one heartbeat reports (the first ones, sorted): the controller marks the rest at
# later heartbeats, once these are recorded (a body stays far below common.rpc.MAX_RPC_BODY_BYTES).
MAX_REPORTED_OFFLINE_REPLICAS: Final = 10_000


class MetadataFollowerError(Exception):
    """A reply the follower cannot apply: a gap, a repeated offset, a bad record or snapshot."""


class UnsupportedFeatureLevelError(MetadataFollowerError):
    """The caught-up image finalizes a feature level this build does not implement: the broker does
    not run (`refused_at_start`). An operator's matter, not a bug: its message is the whole story."""

    operator_facing = True


class HeartbeatDecision(Enum):
    """What the shell does after a heartbeat reply."""

    CONTINUE = "continue"  # beat again after the interval
    RETRY = "retry"  # the controller could not answer now (timeout, busy, moving): beat again
    REREGISTER = "reregister"  # the controller no longer knows this broker epoch: register again


_HEARTBEAT_ERRORS: Final[Mapping[int, HeartbeatDecision]] = {
    ErrorCode.REQUEST_TIMED_OUT: HeartbeatDecision.RETRY,
    ErrorCode.NOT_CONTROLLER: HeartbeatDecision.RETRY,
    ErrorCode.THROTTLING_QUOTA_EXCEEDED: HeartbeatDecision.RETRY,
    ErrorCode.STALE_BROKER_EPOCH: HeartbeatDecision.REREGISTER,
    ErrorCode.BROKER_ID_NOT_REGISTERED: HeartbeatDecision.REREGISTER,
}


_REGISTRATION_RETRIABLE: Final = frozenset({ErrorCode.REQUEST_TIMED_OUT, ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                                           ErrorCode.DUPLICATE_BROKER_REGISTRATION})


def has_changes(changes: LocalReplicaChanges) -> bool:
    """Whether any partition of this broker changed."""
    return bool(changes.deletes or changes.leaders or changes.followers)


def _decode(kind: type[Any], reply: Any, what: str) -> tuple[RpcStatus, Any]:
    """(envelope, reply) through the one codec, `common.rpc`; a malformed reply is an error here."""
    try:
        return rpc.decode_reply(kind, reply)
    except RpcDecodeError as exc:
        raise MetadataFollowerError(f"{what} reply: {exc}") from None


class MetadataFollowerState:
    """One broker's view of the metadata log: image, broker epoch, fenced and caught-up flags.

    Soft state only the shell's clock drives (when the applied offset was last checkpointed) is
    kept here too, as plain millisecond numbers; heartbeat pacing is the lifecycle's.
    """

    def __init__(self, broker_id: int, *, image: MetadataImage = EMPTY_IMAGE,
                 checkpoint_interval_ms: int = DEFAULT_CHECKPOINT_INTERVAL_MS) -> None:
        if type(broker_id) is not int or broker_id < 0:
            raise ValueError(f"broker_id must be a non-negative integer, got {broker_id!r}")
        if checkpoint_interval_ms < 0:
            raise ValueError("checkpoint_interval_ms must not be negative")
        self.broker_id = broker_id
        self._image = image  # the published image: never holds part of an open metadata transaction
        self._replay = ReplayState(image)  # image + the open transaction's records, if any
        self.broker_epoch = NO_BROKER_EPOCH
        self.fenced = True  # Kafka: a broker starts fenced and stays so until the controller says otherwise
        self.caught_up = False  # the controller's is_caught_up: applied offset reached our registration
        self.should_shut_down = False
        self.controller_last_offset = -1  # the last committed offset a controller reported
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self._checkpointed_offset = image.offset
        self._last_checkpoint_ms: int | None = None
        self._last_checkpoint_cost_ms = 0  # how long the last write took

    @property
    def image(self) -> MetadataImage:
        """The published image: never holds part of an open metadata transaction."""
        return self._image

    @image.setter
    def image(self, image: MetadataImage) -> None:
        # The shell sets it to the checkpoint it loaded at a start: the replay, and so the next
        # fetch, resumes there. The replay was left at the empty image before, so a restarted
        # broker fetched from offset 0, and once the controller had folded its log it was sent a
        # snapshot older than its checkpoint: a fatal error (issue 35, a 30,000-partition restart).
        self._image = image
        if self._replay.last_offset < image.offset:
            self._replay = ReplayState(image)

    # -- offsets -----------------------------------------------------------------------

    @property
    def applied_offset(self) -> int:
        """The offset of the last record in the image (-1: nothing applied)."""
        return self.image.offset

    @property
    def registered(self) -> bool:
        return self.broker_epoch != NO_BROKER_EPOCH

    @property
    def another_broker_shutting_down(self) -> bool:
        """Whether the image has another broker in controlled shutdown: its leaderships are moving,
        and it leaves only once every active broker replayed them."""
        return another_broker_shutting_down(self.image.cluster.brokers.values(), own_broker_id=self.broker_id)

    @property
    def lag(self) -> int:
        """Committed records the controller reported that the image does not hold yet."""
        return max(0, self.controller_last_offset - self.applied_offset)

    # -- registration ------------------------------------------------------------------

    def registration_request(self, *, incarnation_id: str, listeners: Iterable[Listener],
                             rack: str | None = None, cluster_id: str | None = None) -> dict[str, Any]:
        return rpc.encode(BrokerRegistrationRequest(
            self.broker_id, incarnation_id, tuple(ListenerData(li.name, li.host, li.port) for li in listeners),
            rack, cluster_id))

    def on_registration_reply(self, reply: Mapping[str, Any]) -> int | None:
        """The new broker epoch; None when the registration should be sent again later.

        Retried: a timeout, a busy controller, and DUPLICATE_BROKER_REGISTRATION (the old
        incarnation's session has not expired yet, as after a quick restart). Any other
        refusal raises MetadataFollowerError.
        """
        status, registered = _decode(BrokerRegistrationReply, reply, "broker-registration")
        if status.error_code in _REGISTRATION_RETRIABLE:
            return None
        if status.error_code != ErrorCode.NONE:
            raise MetadataFollowerError(f"broker {self.broker_id} registration refused with error "
                                        f"{status.error_code}: {status.error_message}")
        epoch: int = registered.broker_epoch
        self.broker_epoch = epoch
        self.fenced, self.caught_up, self.should_shut_down = True, False, False
        return epoch

    # -- heartbeats --------------------------------------------------------------------

    def heartbeat_request(self, *, want_fence: bool = False, want_shut_down: bool = False,
                          offline_replicas: Sequence[tuple[str, int]] = ()) -> dict[str, Any]:
        """The broker-heartbeat body, reporting the applied offset and the (topic_id, partition)
        replicas that failed here. (When to send it is the lifecycle's business:
        `shutdown.broker_lifecycle.BrokerLifecycle`.)"""
        if not self.registered:
            raise MetadataFollowerError(f"broker {self.broker_id} cannot heartbeat before it registered")
        body = rpc.encode(BrokerHeartbeatRequest(
            self.broker_id, self.broker_epoch, self.applied_offset, want_fence=want_fence,
            want_shut_down=want_shut_down, offline_replicas=offline_replica_topics(offline_replicas)))
        if not body["offline_replicas"]:
            del body["offline_replicas"]  # the usual case, and the body controllers before it accept
        return body

    def on_heartbeat_reply(self, reply: Mapping[str, Any]) -> HeartbeatDecision:
        status, beat = _decode(BrokerHeartbeatReply, reply, "broker-heartbeat")
        code = status.error_code
        if code == ErrorCode.NONE:
            self.caught_up, self.fenced, self.should_shut_down = beat.is_caught_up, beat.is_fenced, \
                beat.should_shut_down
            return HeartbeatDecision.CONTINUE
        decision = _HEARTBEAT_ERRORS.get(code)
        if decision is None:
            raise MetadataFollowerError(f"broker {self.broker_id} heartbeat refused with error {code}: "
                                        f"{status.error_message}")
        if decision is HeartbeatDecision.REREGISTER:
            self.broker_epoch = NO_BROKER_EPOCH
            self.fenced, self.caught_up = True, False
        return decision

    # -- the metadata log --------------------------------------------------------------

    @property
    def next_fetch_offset(self) -> int:
        """The offset the next metadata-fetch asks from: after the last record replayed (past the
        applied offset while a metadata transaction is open, KIP-868)."""
        return self._replay.last_offset + 1

    def on_fetch_reply(self, reply: Mapping[str, Any]) -> LocalReplicaChanges | None:
        """Apply a metadata-fetch reply: this broker's changes, or None if the image did not move.

        Raises MetadataFollowerError (image unchanged) for an error reply, a gap, a repeated
        offset, an undecodable record or snapshot, or a snapshot older than the image.
        """
        return self.apply_fetch_reply(decode_fetch_reply(reply))

    def apply_fetch_reply(self, fetched: MetadataFetchReply) -> LocalReplicaChanges | None:
        """`on_fetch_reply` for a reply `decode_fetch_reply` decoded already."""
        replayed_from = self._replay.image
        if fetched.snapshot is not None:
            new, changed = self._snapshot_image(fetched), None  # a snapshot says nothing of what changed
        else:
            new = self._apply_records(fetched.records)
            changed = self._replay.changed_partitions
        self.controller_last_offset = max(self.controller_last_offset, fetched.last_offset, new.offset)
        if new is self.image:
            return None
        old, self.image = self.image, new
        # What the replay changed is relative to the image it started from: the published one,
        # unless the shell set an older image (the full comparison then).
        return changes_for_broker(old, new, self.broker_id, changed if replayed_from is old else None)

    def _snapshot_image(self, reply: MetadataFetchReply) -> MetadataImage:
        assert reply.snapshot is not None
        try:
            image = decode_snapshot(reply.snapshot)
        except MetadataRecordError as exc:
            raise MetadataFollowerError(f"metadata-fetch reply: {exc}") from None
        declared = reply.snapshot_offset
        if declared is not None and declared != image.offset:
            raise MetadataFollowerError(f"metadata-fetch reply: snapshot_offset {declared} but the snapshot "
                                        f"holds offset {image.offset}")
        if image.offset < self.applied_offset:
            raise MetadataFollowerError(f"snapshot at offset {image.offset} is older than the applied "
                                        f"offset {self.applied_offset}")
        image = self.image if image.offset == self.applied_offset else image
        self._replay = ReplayState(image)  # a snapshot holds no open transaction: fetch on from it
        return image

    def _apply_records(self, records: tuple[tuple[int, Mapping[str, Any]], ...]) -> MetadataImage:
        if not records:
            return self.image
        pairs: list[tuple[int, Record]] = []
        expected = self._replay.last_offset + 1
        for item in records:  # shapes checked by common.rpc; offsets and records here
            offset = item[0]
            if offset != expected:
                kind = "a gap" if offset > expected else "a repeated offset"
                raise MetadataFollowerError(f"metadata-fetch reply has {kind}: record at offset {offset} where "
                                            f"offset {expected} was expected (applied offset "
                                            f"{self.applied_offset}, replayed offset {expected - 1})")
            try:
                pairs.append((offset, record_from_map(item[1])))
            except MetadataRecordError as exc:
                raise MetadataFollowerError(f"metadata-fetch reply: offset {offset}: {exc}") from None
            expected += 1
        try:
            self._replay = replay(self._replay, pairs)
        except MetadataRecordError as exc:
            raise MetadataFollowerError(f"cannot apply the fetched records: {exc}") from None
        return self._replay.image

    # -- checkpoints of the applied offset ---------------------------------------------

    def checkpoint_due(self, now_ms: int, *, force: bool = False) -> bool:
        """Whether the applied image moved since the last checkpoint and one may be written now
        (`force`: whatever the interval, as when stopping). Behind the controller, or while
        another broker is in controlled shutdown, it waits (MAX_CHECKPOINT_DEFER_MS at most)."""
        if self.image.offset == self._checkpointed_offset:
            return False
        if force or self._last_checkpoint_ms is None:
            return True
        since = now_ms - self._last_checkpoint_ms
        if since < MAX_CHECKPOINT_DEFER_MS and (self.lag > 0 or self.another_broker_shutting_down):
            return False
        return since >= max(self.checkpoint_interval_ms, CHECKPOINT_COST_FACTOR * self._last_checkpoint_cost_ms)

    def on_checkpointed(self, offset: int, now_ms: int, cost_ms: int = 0) -> None:
        """The image at `offset` was written, starting at `now_ms` and taking `cost_ms`."""
        self._checkpointed_offset, self._last_checkpoint_ms = offset, now_ms
        self._last_checkpoint_cost_ms = max(0, cost_ms)


def decode_fetch_reply(reply: Mapping[str, Any]) -> MetadataFetchReply:
    """A metadata-fetch reply's fields; MetadataFollowerError for a malformed or refused one."""
    status, fetched = _decode(MetadataFetchReply, reply, "metadata-fetch")
    if status.error_code != ErrorCode.NONE:
        raise MetadataFollowerError(f"metadata-fetch refused with error {status.error_code}: "
                                    f"{status.error_message}")
    return fetched


def offset_after(fetched: MetadataFetchReply) -> int | None:
    """Where the fetch after this reply starts when the controller said it holds committed records
    past it, else None: the shell asks for that page while it applies this one, as Kafka's
    KafkaRaftClient fetches on while its MetadataLoader replays. (A page of 1,000 records costs
    the controller about as much to read and send as it costs the broker to apply; one after the
    other, a new broker's catch-up at 100,000 partitions was both sums.)"""
    if fetched.snapshot is not None:
        end = fetched.snapshot_offset
    elif fetched.records:
        end = fetched.records[-1][0]
    else:
        return None
    return end + 1 if end is not None and fetched.last_offset > end else None


def offline_replica_topics(replicas: Sequence[tuple[str, int]]) -> tuple[OfflineReplicaTopic, ...]:
    """(topic_id, partition) pairs grouped by topic as the heartbeat carries them, sorted, at most
    MAX_REPORTED_OFFLINE_REPLICAS of them."""
    by_topic: dict[str, list[int]] = {}
    for topic_id, partition in sorted(set(replicas))[:MAX_REPORTED_OFFLINE_REPLICAS]:
        by_topic.setdefault(topic_id, []).append(partition)
    return tuple(OfflineReplicaTopic(topic_id, tuple(parts)) for topic_id, parts in by_topic.items())


def own_registration_replayed(image: MetadataImage, broker_id: int, broker_epoch: int) -> bool:
    """The image holds this incarnation's registration (the RegisterBroker of `broker_epoch`)."""
    registration = image.broker(broker_id)
    return broker_epoch != NO_BROKER_EPOCH and registration is not None and registration.broker_epoch == broker_epoch


def refused_at_start(image: MetadataImage, broker_id: int) -> str | None:
    """Why this broker must not run on the caught-up `image`, or None: a finalized feature level this
    build does not implement (metadata.feature_support). Kafka's controller refuses such a broker's
    registration and the broker shuts down; tidelog's registrations carry no supported ranges, so
    the broker checks before its first publish, when its image is the controller's committed end
    (a level finalized and lowered again before it caught up does not stop it)."""
    refused = unsupported_levels(image.features.levels)
    if not refused:
        return None
    return (f"Broker {broker_id} cannot run: the metadata log (applied up to offset {image.offset}) finalizes "
            f"{describe_levels(refused)}. A controller of a newer build finalized it: run this broker on a build "
            "that supports it, or lower it first (tidelog features downgrade --feature NAME=LEVEL)")


def newly_unsupported(old: MetadataImage, new: MetadataImage) -> tuple[UnsupportedLevel, ...]:
    """Finalized levels `new` holds that this build does not implement and `old` did not hold: a
    running broker logs them and goes on, as a Kafka broker's metadata loader does (not fatal
    outside a controller process). Free when no feature changed (the image shares its features)."""
    if new.features is old.features:
        return ()
    before = set(unsupported_levels(old.features.levels))
    return tuple(u for u in unsupported_levels(new.features.levels) if u not in before)


def ready_to_publish(*, published: bool, applied_offset: int, controller_last_offset: int,
                     registration_replayed: bool) -> bool:
    """Whether the image may be handed to the replica manager: always after the first publish.

    The first waits until the image reached the answering controller's committed end (Kafka's
    MetadataLoader publishes nothing before catching up), so a restarted broker never acts on
    leaderships from its checkpoint or a partial replay; and until it holds this incarnation's
    registration. Without the second condition a broker restarted within its session (the
    controller refuses the new registration as a duplicate until the old session expires) finds
    itself leader of the CURRENT leader epoch and leads it again, with a log that may have lost
    its unflushed tail in a power failure: the followers keep other records of the same epoch
    at those offsets, which truncation by leader epoch cannot see (found by chaos.sim). The
    registration batch moves every leadership and ISR seat of the old incarnation away and bumps
    the leader epochs, so what is published after it is safe to act on."""
    return published or (applied_offset >= controller_last_offset and registration_replayed)
