"""One broker's share-group state (KIP-932): the share groups it coordinates and the share
partitions it leads, on the pure rules of `groups.share_group` and `groups.share_partition`.

    share = ShareBroker(settings, timers)
    share.apply_partition(group_id, tp, records, why)   # replay, log, re-arm the lock timer
    share.arm_session(group_id, member_id, timeout_ms, expire)   # a member's session deadline

Soft state apart (style rule 5): the members' session deadlines and the acquisition locks'
deadlines are timers of the group coordinator's `TimerService` (monotonic ms), and a lock
that runs out returns its records through the same rule a release uses
(`groups.share_partition.expire_locks`). Share sessions (KIP-932's ShareFetch sessions: which
partitions a member fetches here, and the epoch its next request must carry) are bounded by
`MAX_SHARE_SESSIONS`, the least recently used evicted first.

Durable (`store`, `broker.share.persister`): a share partition is started from the snapshot
its share group's coordinator keeps, and every change but an acquisition is written there: an
acknowledgement stays pending (the records still acquired) until a snapshot holding it done is
durable, and is rolled back when that write fails (`acknowledge`); a release or a lock timeout
is written in the background. A new leader (failover, restart) restores the snapshot; records
acquired when the old one stopped are delivered again, as Kafka's are. The membership is not
here: it is the group coordinator's image, replayed from Kafka's ShareGroup* records
(`groups.share_records`), so it survives a coordinator move; only the members' session
deadlines are kept here, as Kafka keeps them in memory.

Per group, `settings_for(group_id)` gives the broker's share settings with the group's own
share.* configs (IncrementalAlterConfigs on GROUP: `groups.group_configs.share_settings`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from broker.share.persister import ShareStore
from broker.timers import TimerService
from common.errors import ErrorCode
from common.topic_partition import TopicPartition
from groups import share_group as sg
from groups import share_partition as sp
from groups.group_configs import (
    SHARE_AUTO_OFFSET_RESET,
    SHARE_DELIVERY_COUNT_LIMIT,
    SHARE_HEARTBEAT_INTERVAL_MS,
    SHARE_PARTITION_MAX_RECORD_LOCKS,
    SHARE_RECORD_LOCK_DURATION_MS,
    SHARE_SESSION_TIMEOUT_MS,
    group_int,
)

log = logging.getLogger(__name__)

# Kafka's group.share.max.share.sessions default: share sessions one broker keeps (sessions)
MAX_SHARE_SESSIONS: Final = 2_000
SWEEP_INTERVAL_MS: Final = 10_000  # how soon share state of partitions and groups that moved away goes (ms)
RESET_EARLIEST: Final = "earliest"
RESET_LATEST: Final = "latest"


@dataclass(frozen=True, slots=True)
class ShareSettings:
    limits: sp.ShareLimits = field(default_factory=sp.ShareLimits)
    group: sg.ShareGroupConfig = field(default_factory=sg.ShareGroupConfig)
    auto_offset_reset: str = RESET_LATEST  # share.auto.offset.reset: Kafka's group config default

    @classmethod
    def from_config(cls, config: Any) -> ShareSettings:
        """From a broker's parsed config (common.config keys)."""
        def key(name: str) -> int:
            return int(config[name])

        return cls(
            sp.ShareLimits(record_lock_duration_ms=key("group.share.record.lock.duration.ms"),
                           delivery_count_limit=key("group.share.delivery.count.limit"),
                           max_in_flight_records=key("group.share.partition.max.record.locks")),
            sg.ShareGroupConfig(session_timeout_ms=key("group.share.session.timeout.ms"),
                                heartbeat_interval_ms=key("group.share.heartbeat.interval.ms"),
                                max_size=key("group.share.max.size")),
            str(config["share.auto.offset.reset"]))


def share_settings(broker: ShareSettings, overrides: Mapping[str, str]) -> ShareSettings:
    """A share group's settings: the broker's, with the group's own share.* configs (Kafka's
    GroupConfig keys; the controller checked each against Kafka's bounds). A heartbeat interval
    not below the session timeout leaves the broker's pair, as for consumer groups."""
    if not overrides:
        return broker
    limits, group = broker.limits, broker.group
    session = group_int(overrides, SHARE_SESSION_TIMEOUT_MS, group.session_timeout_ms)
    heartbeat = group_int(overrides, SHARE_HEARTBEAT_INTERVAL_MS, group.heartbeat_interval_ms)
    if heartbeat < session:
        group = replace(group, session_timeout_ms=session, heartbeat_interval_ms=heartbeat)
    limits = sp.ShareLimits(
        record_lock_duration_ms=group_int(overrides, SHARE_RECORD_LOCK_DURATION_MS, limits.record_lock_duration_ms),
        delivery_count_limit=group_int(overrides, SHARE_DELIVERY_COUNT_LIMIT, limits.delivery_count_limit),
        max_in_flight_records=group_int(overrides, SHARE_PARTITION_MAX_RECORD_LOCKS, limits.max_in_flight_records))
    reset = overrides.get(SHARE_AUTO_OFFSET_RESET, broker.auto_offset_reset).lower()
    return ShareSettings(limits, group, reset if reset in (RESET_EARLIEST, RESET_LATEST) else broker.auto_offset_reset)


@dataclass(slots=True)
class ShareSession:
    """A member's share session on this broker: the partitions it fetches here and the epoch its
    next ShareFetch/ShareAcknowledge must carry."""

    next_epoch: int = 1
    partitions: dict[TopicPartition, Any] = field(default_factory=dict)  # tp -> wire topic id


@dataclass(slots=True)
class HeldPartition:
    state: sp.SharePartitionState
    leader_epoch: int  # the leader epoch it was started in: a new epoch starts it again
    state_epoch: int = 0  # its durable snapshot's: an admin's AlterShareGroupOffsets makes a newer one


class ShareBroker:
    """The share groups coordinated here and the share partitions led here (one event loop)."""

    def __init__(self, settings: ShareSettings, timers: TimerService, store: ShareStore | None = None) -> None:
        self.settings = settings
        self.timers = timers
        self.store = store  # None: nothing durable (tests of the rules' shell)
        self.settings_for: Callable[[str], ShareSettings] = lambda group_id: self.settings
        self.member_sessions: set[tuple[str, str]] = set()  # (group, member) with a session timer here
        self.partitions: dict[tuple[str, TopicPartition], HeldPartition] = {}
        self.sessions: OrderedDict[tuple[str, str], ShareSession] = OrderedDict()
        # durability: a change count per share partition, the count its last durable snapshot
        # holds, and one lock per partition so that snapshots are written (and loads made) in order
        self.versions: dict[tuple[str, TopicPartition], int] = {}
        self.persisted: dict[tuple[str, TopicPartition], int] = {}
        self._locks: dict[tuple[str, TopicPartition], asyncio.Lock] = {}
        self._writes: set[asyncio.Task[ErrorCode]] = set()

    def now_ms(self) -> int:
        return self.timers.now_ms()

    # ---- share partitions (this broker leads them) ------------------------------------------

    def partition(self, group_id: str, tp: TopicPartition, *, leader_epoch: int, log_start_offset: int,
                  high_watermark: int) -> sp.SharePartitionState:
        """The share partition, started (or started again after a leader change) from
        share.auto.offset.reset, and moved past a log start offset that passed its SPSO."""
        key = (group_id, tp)
        held = self.partitions.get(key)
        if held is None or held.leader_epoch != leader_epoch:
            reset = self.settings_for(group_id).auto_offset_reset
            start = log_start_offset if reset == RESET_EARLIEST else high_watermark
            state = sp.replay(sp.EMPTY, sp.Initialized(start))
            self.partitions[key] = HeldPartition(state, leader_epoch)
            log.info("Share partition %s of group %s started at SPSO %d (share.auto.offset.reset=%s), "
                     "leader epoch %d%s", tp, group_id, start, reset, leader_epoch,
                     "" if held is None else f" (was leader epoch {held.leader_epoch}: in-flight state dropped)")
            return state
        moved = sp.move_start(held.state, log_start_offset=log_start_offset)
        if moved:
            self.apply_partition(group_id, tp, moved, f"the log start offset moved to {log_start_offset}")
        return self.partitions[key].state

    async def load(self, group_id: str, tp: TopicPartition, *, leader_epoch: int, log_start_offset: int,
                   high_watermark: int, refresh: bool = False) -> ErrorCode:
        """Start the share partition from its durable snapshot (a new leader, or a restart), or
        from share.auto.offset.reset when it has none, writing that start at once; then as
        `partition`. `refresh` (a member opens a share session): read the snapshot again even
        when the partition is held, and start again if an admin altered (a newer state epoch) or
        deleted it meanwhile. The error of the coordinator's answer when it cannot be read."""
        key = (group_id, tp)
        held = self.partitions.get(key)
        if self.store is None or (not refresh and held is not None and held.leader_epoch == leader_epoch):
            self.partition(group_id, tp, leader_epoch=leader_epoch, log_start_offset=log_start_offset,
                           high_watermark=high_watermark)
            return ErrorCode.NONE
        async with self._locks.setdefault(key, asyncio.Lock()):
            held = self.partitions.get(key)
            if not refresh and held is not None and held.leader_epoch == leader_epoch:  # loaded meanwhile
                return ErrorCode.NONE
            code, snapshot = await self.store.read(group_id, tp, leader_epoch=leader_epoch)
            if code is not ErrorCode.NONE:
                return code
            current = held is not None and held.leader_epoch == leader_epoch
            if current and snapshot is not None and held is not None and snapshot.state_epoch == held.state_epoch:
                return ErrorCode.NONE  # nothing changed behind this leader's back
            if current:
                log.info("Share partition %s of group %s: its state was %s by an admin; started again",
                         tp, group_id, "deleted" if snapshot is None else "altered")
            if snapshot is None:
                self.partitions.pop(key, None)
                self.partition(group_id, tp, leader_epoch=leader_epoch, log_start_offset=log_start_offset,
                               high_watermark=high_watermark)
            else:
                state = sp.replay(sp.EMPTY, sp.Restored(snapshot.start_offset, snapshot.batches))
                self.partitions[key] = HeldPartition(state, leader_epoch, snapshot.state_epoch)
                log.info("Share partition %s of group %s restored from its snapshot at SPSO %d, SPEO %d "
                         "(%d state batch(es)), leader epoch %d", tp, group_id, state.start_offset, state.end_offset,
                         len(snapshot.batches), leader_epoch)
            self.versions[key] = self.versions.get(key, 0) + 1
        return await self.persist(group_id, tp)

    async def persist(self, group_id: str, tp: TopicPartition) -> ErrorCode:
        """Make the share partition's current state durable (a snapshot at its coordinator); NONE
        at once when a snapshot written since holds every change made so far."""
        key = (group_id, tp)
        wanted = self.versions.get(key, 0)
        if self.store is None:
            return ErrorCode.NONE
        async with self._locks.setdefault(key, asyncio.Lock()):
            held = self.partitions.get(key)
            if held is None or self.persisted.get(key, -1) >= wanted:
                return ErrorCode.NONE
            return await self._write(self.store, group_id, tp, held, held.state)

    async def acknowledge(self, group_id: str, tp: TopicPartition, started: tuple[sp.TransitionStarted, ...],
                          member_id: str) -> ErrorCode:
        """A member's acknowledgement, replayed as pending (`sp.acknowledge`): write the snapshot
        with it done, then commit it; a failed write rolls it back, so the records stay the
        member's until their lock expires and are then delivered again (Kafka's
        SharePartition.rollbackOrProcessStateUpdates). The write's error, which the member gets."""
        key = (group_id, tp)
        code = ErrorCode.NONE
        if self.store is not None and started:
            async with self._locks.setdefault(key, asyncio.Lock()):
                held = self.partitions.get(key)
                if held is None:  # forgotten meanwhile (no longer led here): its pending records with it
                    return ErrorCode.NOT_LEADER_OR_FOLLOWER
                done = sp.replay_all(held.state, sp.complete(started, commit=True))
                code = await self._write(self.store, group_id, tp, held, done)
        committed = code is ErrorCode.NONE
        why = (f"member {member_id} acknowledged" if committed else
               f"acknowledgement of {_count(started)} record(s) by member {member_id} rolled back (its state write "
               f"failed with {code.name}): they stay acquired until their lock expires")
        self.apply_partition(group_id, tp, sp.complete(started, commit=committed), why, quiet=committed)
        return code

    async def _write(self, store: ShareStore, group_id: str, tp: TopicPartition, held: HeldPartition,
                     state: sp.SharePartitionState) -> ErrorCode:
        """Write `state` as `held`'s snapshot (under the partition's lock); record what it made durable."""
        key = (group_id, tp)
        version = self.versions.get(key, 0)
        code = await store.write(group_id, tp, leader_epoch=held.leader_epoch, state_epoch=held.state_epoch,
                                      start_offset=state.start_offset, batches=sp.snapshot_batches(state))
        if code is ErrorCode.NONE:
            self.persisted[key] = max(self.persisted.get(key, -1), version)
        elif code in (ErrorCode.FENCED_STATE_EPOCH, ErrorCode.FENCED_LEADER_EPOCH):
            if self.partitions.get(key) is held:  # superseded: the next fetch starts it from the snapshot
                del self.partitions[key]
            log.info("Share partition %s of group %s dropped: its snapshot write was refused with %s",
                     tp, group_id, code.name)
        else:
            log.warning("Share partition %s of group %s: its state was not made durable: %s", tp, group_id,
                        code.name)
        return code

    def _persist_soon(self, group_id: str, tp: TopicPartition) -> None:
        """A change nobody waits for (a release, a lock timeout, SPSO moving): written in the background."""
        if self.store is None:
            return
        task = asyncio.get_running_loop().create_task(self.persist(group_id, tp))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    def apply_partition(self, group_id: str, tp: TopicPartition, records: Iterable[sp.ShareRecord],
                        why: str, *, quiet: bool = False) -> None:
        """Replay `records` on the share partition, log what an operator needs (`quiet`: the
        steady acquisitions and acknowledgements, logged only when they archive), re-arm its
        lock timer."""
        records = tuple(records)
        held = self.partitions.get((group_id, tp))
        if held is None or not records:
            return
        before = held.state
        held.state = sp.replay_all(before, records)
        # acquisitions are not made durable (Kafka's); an acknowledgement's transitions are written
        # by `acknowledge` before they commit, and a rolled back one changes nothing durable
        if any(isinstance(r, (sp.Transitioned, sp.StartMoved)) for r in records):
            self.versions[(group_id, tp)] = self.versions.get((group_id, tp), 0) + 1
            if not quiet:
                self._persist_soon(group_id, tp)
        archived = _archived(before, records)
        if not quiet or archived:
            log.info("Share partition %s of group %s: %s; SPSO %d -> %d, SPEO %d -> %d, %d archived",
                     tp, group_id, why, before.start_offset, held.state.start_offset, before.end_offset,
                     held.state.end_offset, archived)
        self._arm_locks(group_id, tp)

    def _arm_locks(self, group_id: str, tp: TopicPartition) -> None:
        key = ("share-locks", group_id, tp)
        held = self.partitions.get((group_id, tp))
        deadline = None if held is None else sp.next_lock_deadline(held.state)
        if deadline is None:
            self.timers.cancel(key)
            return

        def expire(now_ms: int) -> None:
            current = self.partitions.get((group_id, tp))
            if current is None:
                return
            limits = self.settings_for(group_id).limits
            records = sp.expire_locks(current.state, now_ms=now_ms, limits=limits)
            self.apply_partition(group_id, tp, records, f"acquisition locks of {_count(records)} record(s) expired "
                                 f"after {limits.record_lock_duration_ms} ms")

        self.timers.schedule(key, deadline, expire)

    def release_member(self, group_id: str, member_id: str, tps: Iterable[TopicPartition], why: str) -> None:
        """Every record `member_id` holds on `tps` goes back (its share session closed)."""
        for tp in tps:
            held = self.partitions.get((group_id, tp))
            if held is not None:
                records = sp.release_member(held.state, member_id=member_id, limits=self.settings_for(group_id).limits)
                if records:
                    self.apply_partition(group_id, tp, records,
                                         f"{_count(records)} record(s) of member {member_id} released: {why}")

    def sweep(self, *, leads: Callable[[TopicPartition], bool], coordinates: Callable[[str], bool]) -> None:
        """Forget what moved away: the share partitions of partitions this broker no longer leads
        (their new leader starts them again) and the session timers of members of share groups
        it no longer coordinates (their new coordinator loaded them and keeps their sessions)."""
        for group_id, tp in [k for k in self.partitions if not leads(k[1])]:
            del self.partitions[(group_id, tp)]
            self.timers.cancel(("share-locks", group_id, tp))
            log.info("Share partition %s of group %s forgotten: this broker no longer leads it", tp, group_id)
        moved = sorted({g for g, _ in self.member_sessions if not coordinates(g)})
        for group_id in moved:
            members = sorted(m for g, m in self.member_sessions if g == group_id)
            for member_id in members:
                self.forget_session(group_id, member_id)
            log.info("Share group %s: %d member session(s) forgotten: this broker no longer coordinates it",
                     group_id, len(members))

    # ---- share sessions ---------------------------------------------------------------------

    def session(self, group_id: str, member_id: str) -> ShareSession | None:
        session = self.sessions.get((group_id, member_id))
        if session is not None:
            self.sessions.move_to_end((group_id, member_id))
        return session

    def open_session(self, group_id: str, member_id: str) -> ShareSession:
        """A new share session (ShareFetch epoch 0); one the member had is replaced and its
        records released, as a client starting over no longer knows what it held."""
        old = self.sessions.pop((group_id, member_id), None)
        if old is not None:
            self.release_member(group_id, member_id, old.partitions, "its share session was opened again")
        while len(self.sessions) >= MAX_SHARE_SESSIONS:
            (evicted_group, evicted_member), evicted = self.sessions.popitem(last=False)
            log.warning("Share session of member %s of group %s evicted: %d sessions (the most kept)",
                        evicted_member, evicted_group, MAX_SHARE_SESSIONS)
            self.release_member(evicted_group, evicted_member, evicted.partitions, "its share session was evicted")
        session = ShareSession()
        self.sessions[(group_id, member_id)] = session
        return session

    def close_session(self, group_id: str, member_id: str) -> None:
        session = self.sessions.pop((group_id, member_id), None)
        if session is not None:
            self.release_member(group_id, member_id, session.partitions, "its share session closed")

    # ---- share groups (this broker coordinates them) -----------------------------------------

    def arm_session(self, group_id: str, member_id: str, timeout_ms: int, expire: Callable[[int], None]) -> None:
        """The member's session deadline, `timeout_ms` from now (each heartbeat moves it): `expire`
        runs when it passes."""
        self.member_sessions.add((group_id, member_id))
        self.timers.schedule_in(("share-session", group_id, member_id), timeout_ms, expire)

    def has_session(self, group_id: str, member_id: str) -> bool:
        return (group_id, member_id) in self.member_sessions

    def forget_session(self, group_id: str, member_id: str) -> None:
        self.member_sessions.discard((group_id, member_id))
        self.timers.cancel(("share-session", group_id, member_id))


def _count(records: Iterable[sp.ShareRecord]) -> int:
    return sum(r.last - r.first + 1 for r in records if isinstance(
        r, (sp.Transitioned, sp.Acquired, sp.TransitionStarted, sp.TransitionCompleted)))


def _archived(before: sp.SharePartitionState, records: Iterable[sp.ShareRecord]) -> int:
    """How many offsets `records` archive (replayed on `before`): released at the delivery limit,
    rejected, or a committed acknowledgement whose target is ARCHIVED."""
    out = 0
    for r in records:
        if isinstance(r, sp.Transitioned) and r.state is sp.RecordState.ARCHIVED:
            out += r.last - r.first + 1
        elif isinstance(r, sp.TransitionCompleted) and r.commit:
            out += sum(1 for o in range(r.first, r.last + 1)
                       if (f := before.in_flight.get(o)) is not None and f.pending is sp.RecordState.ARCHIVED)
    return out
