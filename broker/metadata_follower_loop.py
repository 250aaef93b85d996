"""The asyncio tasks a broker runs to follow the metadata log: the I/O shell of the follower.

    follower = MetadataFollower(settings, client, on_changes)
    task = asyncio.create_task(follower.run())   # register, heartbeat, long-poll, apply, publish
    ...
    task.cancel(); await task                    # stops cleanly, writes a last checkpoint

Two tasks share one `MetadataFollowerState`:
- heartbeats: register (again, whenever the controller forgets our broker epoch), then one
  broker-heartbeat every broker.heartbeat.interval.ms reporting the applied offset; the
  controller unfences us once that offset reaches our registration;
- the metadata log: long-poll metadata-fetch from the applied offset + 1, apply, and call
  `on_changes(changes, image)` with this broker's LocalReplicaChanges. While the controller
  reports more committed records than a reply holds (catching up, a burst), the next page is
  asked before this one is applied, so the controller reads it while the broker replays.

The applied image is checkpointed in the first log dir: `__metadata_snapshot` (the image, as
`metadata.snapshot` encodes it) and then `__metadata_offset` (its offset), each written atomically,
at most once per `checkpoint_interval_ms` and when stopping, on a thread of its own (one write at
a time; the last one, when stopping, waits for the one in flight and is written before run() ends). A restart resumes from it, first
publishing the whole local state (changes from the empty image) as Kafka's first metadata publish
does; when the offset is older than the controllers retain they answer a snapshot, which replaces
the image. An unreadable checkpoint only costs a refetch.

The heartbeat task also drives the broker's lifecycle (`shutdown.broker_lifecycle`, logged
in Kafka's words: "Transitioning from RUNNING to PENDING_CONTROLLED_SHUTDOWN."):
`request_shutdown()` (the node's SIGTERM) enters PENDING_CONTROLLED_SHUTDOWN from any state once
registered (STARTING and RECOVERY too: the controller may already count us active; an
unregistered broker goes straight to SHUTTING_DOWN), after which heartbeats carry want_shut_down, go out at once and then every 50 ms, until the
controller answers should_shut_down; `shutdown_ready` is then set (SHUTTING_DOWN) and
heartbeats stop. The lifecycle holds controlled.shutdown.timeout.ms: this task waits and calls
no longer than its deadline and fires `BrokerLifecycle.expire()`, which ends the wait dirty
(SHUTTING_DOWN too, `controlled_shutdown_timed_out`); the node only waits for `shutdown_ready`.
A heartbeat reply with shutdown_requested (an operator's POST /v1/brokers/{id}/shutdown,
relayed by the active controller) calls `on_shutdown_requested` once, by default this
process's own SIGTERM: from there it is the same controlled shutdown.

Controller failures are retried forever (each attempt bounded by the client); a reply the core
refuses (a gap, a record that does not apply) is a bug somewhere and ends `run()`. A feature level
this build does not implement (metadata.feature_support), as Kafka's brokers treat it: in the
caught-up image, before the first publish, it ends `run()` (UnsupportedFeatureLevelError: the
broker does not run); finalized once running, it is logged once and the broker goes on."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import inspect
import logging
import os
import signal
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Final, NamedTuple

from broker.applied_offset import AppliedOffsetWaiters
from broker.controller_client import ControllerClient, ControllerUnavailableError
from broker.follower_settings import FollowerSettings
from broker.metadata_checkpoint import load_checkpoint, write_checkpoint
from broker.metadata_follower import (
    HeartbeatDecision,
    MetadataFollowerState,
    UnsupportedFeatureLevelError,
    decode_fetch_reply,
    newly_unsupported,
    offset_after,
    own_registration_replayed,
    ready_to_publish,
    refused_at_start,
)
from common.errors import KafkaStorageError
from common.rpc_messages import MetadataFetchReply
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.local_changes import (
    LocalReplicaChanges,
    changes_for_broker,
    split_changes,
)
from security.rpc_auth import RpcSigner
from shutdown.broker_lifecycle import (
    BrokerLifecycle,
    BrokerState,
    LifecycleError,
    LifecycleEvent,
    Transition,
    heartbeat_early_for_shutdown,
    heartbeat_early_when_caught_up,
    stopped_uncleanly,
)

logger = logging.getLogger(__name__)

EMPTY_FETCH_PAUSE: Final = 0.01  # seconds after a fetch that replayed nothing: no spin if one answers at once
# Partitions handed to the replica manager at once (~50 ms of log creation on an idle core, a
# few times that on this shared machine): between two slices the loop serves heartbeats and requests.
PUBLISH_SLICE_PARTITIONS: Final = 128
PUBLISH_SLICE_PAUSE: Final = 0.002  # seconds of pause once the slices since the last one took PUBLISH_BUSY_S
# Slices applied back to back before that pause: what holds the loop is time, not a count. A slice
# of new logs takes longer than this alone (a pause after each, as before); a slice of role changes
# of hosted partitions (a controlled shutdown's leaderships moving: ~5 ms per 128 on this machine)
# goes on with the next. A pause after each of those made the replica fetchers (which run in
# it) send a Fetch per slice: 258 rounds per surviving broker at 100,000 partitions, each
# answered by the other survivor's fetch session, and 0.5 s of pauses on the shutdown's path.
PUBLISH_BUSY_S: Final = 0.02
# Records asked per metadata fetch. Encoding a page (controller) and decoding it (here) holds
# each side's event loop: 5,000 records (a 10,000-partition topic in two pages) held both for
# seconds on a loaded machine and heartbeats missed the session; 1,000 keep each under ~0.1 s.
FETCH_PAGE_RECORDS: Final = 1000
# Loop turns the follower yields after asking for the next page early, before applying the one
# it holds blocks the loop: aiohttp writes a request on a pooled connection in two (measured);
# a new connection takes longer, and the page is then asked once the apply is done, as before.
FETCH_AHEAD_SEND_YIELDS: Final = 4
# The cyclic GC is paused while catching up, until the first publish: the replay builds the
# whole image (~1.5 million container objects at 100,000 partitions), and the full collections
# over that growing heap were half of a snapshot's decode (1.50 -> 0.72 s measured) and a fifth
# of a log replay's. What the replay allocates is acyclic (records, images and their maps:
# refcounting frees every image it replaces); the few cycles the fetches leave wait for the
# collection broker.node runs when it freezes the start-up heap, after the first publish. A
# catch-up that lasts longer than this (a controller away) collects again.
# It is paused as well while another broker is in controlled shutdown (as its checkpoint waits:
# MetadataFollowerState.checkpoint_due): that broker leaves once every active broker replayed its
# leaderships, and at 100,000 partitions the collections meanwhile were ~10 % of a surviving
# broker's CPU (gc.callbacks: 836 young, 76 generation-1 and one full collection in 8.8 s, 0.35 s
# of CPU, freeing 6 objects). What piled up is collected once it ended (the fencing record that
# follows SHUTDOWN_NOW), off its path, and broker.startup_heap's keeper counts it towards the next
# full collection. A shutdown that lasts longer than this collects again, until the next one.
MAX_GC_PAUSE_MS: Final = 30_000
RETRY_BACKOFF: Final = 0.2  # seconds after no controller answered, or a registration to send again
MAX_FATAL_ERRORS_SHOWN: Final = 4  # errors of one group named in the fatal line

ChangesCallback = Callable[[LocalReplicaChanges, MetadataImage], Awaitable[None] | None]


class _CheckpointWritten(NamedTuple):
    """A checkpoint write's outcome, handed from its thread to the loop."""

    offset: int
    started_ms: int  # the follower's clock when it was asked for
    cost_ms: int
    error: KafkaStorageError | None


def raise_sigterm() -> None:
    """An operator's shutdown request by default: this process's own SIGTERM (controlled shutdown)."""
    os.kill(os.getpid(), signal.SIGTERM)


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


async def publish_in_slices(changes: LocalReplicaChanges, image: MetadataImage, on_changes: ChangesCallback, *,
                            clock: Callable[[], float] = time.monotonic) -> None:
    """Hand `changes` to `on_changes` in slices of PUBLISH_SLICE_PARTITIONS, pausing the loop
    whenever the slices since the last pause took PUBLISH_BUSY_S (and after the last one).

    A large change set (a 10,000-partition topic, a broker's leaderships moving) is applied with
    the event loop running between slices: heartbeats go out on time instead of the session
    expiring while the replica manager creates thousands of logs."""
    busy_since = clock()
    pieces = split_changes(changes, PUBLISH_SLICE_PARTITIONS)
    for i, piece in enumerate(pieces):  # bounded by the change set
        result = on_changes(piece, image)
        if inspect.isawaitable(result):
            await result
        if i == len(pieces) - 1 or clock() - busy_since >= PUBLISH_BUSY_S:
            # A real pause, not sleep(0): a heartbeat round trip needs several loop iterations
            # (write, read headers, read body), and one iteration per slice was too few.
            await asyncio.sleep(PUBLISH_SLICE_PAUSE)
            busy_since = clock()


# --- the follower ---------------------------------------------------------------------------


class MetadataFollower:
    """Runs the heartbeat and metadata-fetch tasks of one broker until cancelled."""

    def __init__(self, settings: FollowerSettings, client: ControllerClient, on_changes: ChangesCallback, *,
                 clock: Callable[[], int] = monotonic_ms,
                 on_shutdown_requested: Callable[[], None] = raise_sigterm,
                 checkpoint: MetadataImage | None = None,
                 failed_replicas: Callable[[], Sequence[tuple[str, int]]] = lambda: (),
                 unfence_on_publish: bool = True) -> None:
        self.settings, self.client, self._on_changes, self._clock = settings, client, on_changes, clock
        # False: the node calls ready_to_serve() once it answers clients, as Kafka's BrokerServer
        # enables request processing before setReadyToUnfence; an unfenced broker that still
        # closes every connection sends clients that trust the metadata elsewhere for nothing
        self._unfence_on_publish = unfence_on_publish
        # (topic_id, partition) of the replicas that failed here: every heartbeat reports them
        # (the replica manager's `failed_replicas`), as Kafka's heartbeats carry OfflineLogDirs.
        self._failed_replicas = failed_replicas
        self._reported_failed = 0  # how many the last answered heartbeat reported
        self._checkpoint_image = checkpoint  # already loaded by the node (None: run() loads it)
        # The checkpoint's own thread, made at the first write, and the write in flight on it: the
        # image's encoding and its four fsyncs (~12 ms each on this VM's disk; ~0.3 s of encoding
        # at 100,000 partitions) held the event loop, and every request on it, whenever metadata
        # moved. Kafka's brokers write snapshots off the request path too.
        self._checkpoint_thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._checkpoint_write: concurrent.futures.Future[_CheckpointWritten] | None = None
        self._on_shutdown_requested = on_shutdown_requested  # POST /v1/brokers/{id}/shutdown arrived
        self._shutdown_request_seen = False  # obeyed once; the node then calls request_shutdown()
        self.state = MetadataFollowerState(settings.broker_id, checkpoint_interval_ms=settings.checkpoint_interval_ms)
        self.heartbeats_ok = 0  # answered heartbeats, for operators and tests
        self.heartbeat_targets: list[str] = []  # the controller each answered heartbeat went to (last few)
        # The lifecycle alone paces heartbeats and holds the controlled-shutdown deadline. While
        # STARTING it beats at the interval, not Kafka's 10 ms: `_maybe_report_early` beats the
        # moment the applied offset reaches the registration, which is what 10 ms polls wait for.
        self.lifecycle = BrokerLifecycle(heartbeat_interval_ms=settings.heartbeat_interval_ms,
                                         session_timeout_ms=settings.session_timeout_ms,
                                         controlled_shutdown_timeout_ms=settings.controlled_shutdown_timeout_ms,
                                         starting_heartbeat_ms=settings.heartbeat_interval_ms)
        self.shutdown_ready = asyncio.Event()  # set on entering SHUTTING_DOWN
        self._wake = asyncio.Event()  # cuts a heartbeat wait short (a shutdown request)
        self._beat_now = False  # the next heartbeat goes out without waiting an interval
        self._reported_offset = -1  # the metadata offset the last answered heartbeat reported
        self._published = False  # the first publish waits until caught up with the controller
        self._gc_paused_at: int | None = None  # when the follower paused the cyclic GC (MAX_GC_PAUSE_MS)
        self._gc_pause_spent = False  # this controlled shutdown of another broker paused it MAX_GC_PAUSE_MS already
        # Set at the first publish: from then on the image is the controllers' (not an empty or
        # checkpointed one) and the node may answer clients from it.
        self.published = asyncio.Event()
        # Topic writes wait here for this broker's image to hold them (woken after each publish).
        self.applied_offsets = AppliedOffsetWaiters(lambda: self.state.applied_offset if self._published else -1)

    # -- the lifecycle ---------------------------------------------------------------------

    def _lifecycle(self, event: LifecycleEvent) -> None:
        """Feed one event to the lifecycle; an event the table refuses here changes nothing."""
        self._lifecycle_call(lambda: self._log_transition(self.lifecycle.handle(event, self._clock())))

    def _log_transition(self, transition: Transition | None) -> None:
        if transition is None or transition.old is transition.new:
            return
        logger.info("Broker %d (broker epoch %d): %s", self.settings.broker_id, self.state.broker_epoch,
                    transition.message)
        if transition.new is BrokerState.SHUTTING_DOWN:
            self.shutdown_ready.set()

    def request_shutdown(self) -> None:
        """SIGTERM: a registered broker enters PENDING_CONTROLLED_SHUTDOWN (heartbeat at once),
        an unregistered one goes straight to SHUTTING_DOWN; again: no change."""
        self._lifecycle(LifecycleEvent.SHUTDOWN_REQUESTED)
        self._wake.set()

    def _expire(self) -> None:
        """controlled.shutdown.timeout.ms passed while pending: SHUTTING_DOWN, dirty."""
        transition = self.lifecycle.expire(self._clock())
        if transition is not None:
            logger.warning("Broker %d: controlled shutdown did not complete within controlled.shutdown.timeout.ms="
                           "%d ms; shutting down without waiting further (partitions it still leads move when "
                           "its session expires)", self.settings.broker_id,
                           self.lifecycle.controlled_shutdown_timeout_ms)
            self._log_transition(transition)

    def stopped(self) -> None:
        """Logs flushed and closed: SHUTTING_DOWN -> SHUTDOWN, or from any other state when the
        follower ended on its own (said once, as a warning: no controlled shutdown happened)."""
        def stop() -> None:
            transition = self.lifecycle.stopped(self._clock())
            if stopped_uncleanly(transition):
                logger.warning("Broker %d: stopped in state %s without a controlled shutdown (broker epoch %d); "
                               "the partitions it led move when its session expires",
                               self.settings.broker_id, transition.old.name, self.state.broker_epoch)
            self._log_transition(transition)
        self._lifecycle_call(stop)

    async def run(self) -> None:
        """Register, heartbeat and follow the log until cancelled (or a fatal error)."""
        log_dir, broker = self.settings.log_dir, self.settings.broker_id
        log_dir.mkdir(parents=True, exist_ok=True)
        image = self._checkpoint_image if self._checkpoint_image is not None else load_checkpoint(log_dir)
        self._checkpoint_image = None
        self.state.image = image
        self.state.on_checkpointed(image.offset, self._clock())
        logger.info("Broker %d follows the metadata log from offset %d", broker, image.offset + 1)
        if self.lifecycle.state is BrokerState.NOT_RUNNING:
            self._log_transition(self.lifecycle.start(self._clock()))
        try:
            # Nothing is published from the checkpoint alone: an image from before a crash
            # may name this broker leader of an epoch long gone, and acting on it would serve
            # stale data. `_follow_log` publishes once caught up (Kafka's MetadataLoader).
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(self._heartbeats(), name=f"broker-{broker}-heartbeats")
                tasks.create_task(self._follow_log(), name=f"broker-{broker}-metadata-fetch")
        finally:  # cancelled or failed: keep what was applied (waited for, so a cancel cannot cut it)
            self._checkpoint(force=True)
            if self._checkpoint_thread is not None:
                self._checkpoint_thread.shutdown(wait=True)
                self._checkpoint_thread = None

    async def _publish(self, changes: LocalReplicaChanges) -> None:
        await publish_in_slices(changes, self.state.image, self._on_changes)

    def _checkpoint(self, *, force: bool = False) -> None:
        """Write the checkpoint on its thread when due, unless a write is still in flight (two
        writers never share a .tmp file). `force` (stopping) waits for the one in flight, then
        for its own. A large image's write is spaced by its own cost (CHECKPOINT_COST_FACTOR)."""
        began = time.monotonic()
        if not self._checkpoint_settled(wait=force):
            return
        now = self._clock()
        state = self.state
        if not state.checkpoint_due(now, force=force):
            return
        if self._checkpoint_thread is None:
            self._checkpoint_thread = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"broker-{self.settings.broker_id}-metadata-checkpoint")
        self._checkpoint_write = self._checkpoint_thread.submit(self._write_checkpoint, state.image, now)
        if force:
            self._checkpoint_settled(wait=True)
            if not state.checkpoint_due(now, force=True):  # written (a failed write logged its warning)
                # its own line: a stop waits for it, the whole image encoded (~1 s at 100,000
                # partitions), between "Stopping broker" and the logs' close
                logger.info("Broker %d: wrote the metadata checkpoint at offset %d before stopping in %d ms",
                            self.settings.broker_id, state.image.offset, round((time.monotonic() - began) * 1000))

    def _write_checkpoint(self, image: MetadataImage, started_ms: int) -> _CheckpointWritten:
        """On the checkpoint thread (the image is immutable): the write, and how long it took."""
        began = time.monotonic_ns()
        try:
            write_checkpoint(self.settings.log_dir, image)
        except KafkaStorageError as exc:
            return _CheckpointWritten(image.offset, started_ms, 0, exc)
        return _CheckpointWritten(image.offset, started_ms, (time.monotonic_ns() - began) // 1_000_000, None)

    def _checkpoint_settled(self, *, wait: bool) -> bool:
        """Whether no checkpoint write is in flight (`wait`: after waiting for it); a finished
        write is recorded in the state here, on the loop."""
        writing = self._checkpoint_write
        if writing is None:
            return True
        if not writing.done():
            if not wait:
                return False
            concurrent.futures.wait((writing,))
        self._checkpoint_write = None
        written = writing.result()
        if written.error is not None:
            logger.warning("Broker %d: could not checkpoint the metadata offset %d: %s", self.settings.broker_id,
                           written.offset, written.error)
        else:
            self.state.on_checkpointed(written.offset, written.started_ms, cost_ms=written.cost_ms)
        return True

    async def _fetch(self, offset: int) -> dict[str, Any] | None:
        """One metadata-fetch from `offset` (bounded by the client's timeout); None, after a
        warning and RETRY_BACKOFF, when no controller answered."""
        settings = self.settings
        try:
            return await self.client.fetch_metadata(offset, settings.fetch_max_wait_ms if self._published else 0,
                                                    broker_id=settings.broker_id, max_records=FETCH_PAGE_RECORDS)
        except ControllerUnavailableError as exc:
            logger.warning("Broker %d: metadata fetch failed: %s", settings.broker_id, exc)
            await asyncio.sleep(RETRY_BACKOFF)
            return None

    def _pause_gc(self) -> None:
        """Pause the cyclic GC (MAX_GC_PAUSE_MS at most), unless it is off already."""
        if gc.isenabled():
            gc.disable()
            self._gc_paused_at = self._clock()

    def _resume_gc(self, *, now: bool = False) -> bool:
        """Collect again: `now`, or once the pause has lasted MAX_GC_PAUSE_MS; whether it did."""
        paused_at = self._gc_paused_at
        if paused_at is None or not (now or self._clock() - paused_at >= MAX_GC_PAUSE_MS):
            return False
        gc.enable()
        self._gc_paused_at = None
        if self._published:  # (the catch-up's resume is said by its "caught up" line; a freeze follows it)
            grown = gc.get_count()[0]
            # What the pause left young (the moved partitions' new state, ~0.5 million objects at
            # 100,000 partitions) walked once now by a generation-1 collection, where a young one
            # and then a generation-1 one would each walk it (bench/shutdown_replay_gc.py --two-walks).
            gc.collect(1)
            logger.info("Broker %d: the cyclic GC collects again after %d ms paused while another broker was in "
                        "controlled shutdown (%d container objects more allocated than freed meanwhile)",
                        self.settings.broker_id, self._clock() - paused_at, grown)
        return True

    def _steer_gc(self) -> None:
        """Before each fetch: paused while catching up (from `_follow_log`'s start) and while
        another broker is in controlled shutdown, MAX_GC_PAUSE_MS at most each time."""
        if not self._published:
            self._resume_gc()
            return
        shutting_down = self.state.another_broker_shutting_down
        if self._gc_paused_at is not None:
            if self._resume_gc(now=not shutting_down) and shutting_down:
                self._gc_pause_spent = True  # not again until this shutdown ends
        elif not shutting_down:
            self._gc_pause_spent = False
        elif not self._gc_pause_spent and gc.isenabled():
            logger.info("Broker %d: another broker is in controlled shutdown: the cyclic GC pauses while its "
                        "leaderships move (at most %d ms)", self.settings.broker_id, MAX_GC_PAUSE_MS)
            self._pause_gc()

    async def _follow_log(self) -> None:
        ahead: tuple[int, asyncio.Task[dict[str, Any] | None]] | None = None  # the next page, asked early
        if not self._published:  # the catch-up
            self._pause_gc()
        try:
            while True:  # until cancelled; each fetch is bounded by the client's timeout
                self._steer_gc()
                offset = self.state.next_fetch_offset
                if ahead is not None and ahead[0] == offset:
                    reply = await ahead[1]
                else:
                    if ahead is not None:  # not where the applied reply ended (never expected): ask anew
                        ahead[1].cancel()
                    reply = await self._fetch(offset)
                ahead = None
                if reply is None:
                    continue
                fetched = decode_fetch_reply(reply)  # MetadataFollowerError: fatal, ends run()
                after = offset_after(fetched)
                if after is not None:
                    ahead = (after, asyncio.create_task(self._fetch(after), name=f"metadata-fetch-{after}"))
                    for _ in range(FETCH_AHEAD_SEND_YIELDS):  # the request leaves before the loop blocks
                        await asyncio.sleep(0)
                await self._apply(fetched)
        finally:
            if ahead is not None:
                ahead[1].cancel()
            self._resume_gc(now=True)

    async def _apply(self, fetched: MetadataFetchReply) -> None:
        """Apply one fetched reply, publish what changed here, checkpoint when due."""
        state, settings = self.state, self.settings
        before, replayed, old_image = state.applied_offset, state.next_fetch_offset, state.image
        changes = state.apply_fetch_reply(fetched)  # MetadataFollowerError: fatal, ends run()
        # Records of an open metadata transaction (KIP-868) are replayed but publish nothing until
        # its End: such a page moved the replay on, and the next one is asked at once. Pausing
        # after each (as after a fetch that applied nothing) held a surviving broker 10 ms per
        # 16 KiB chunk of another broker's controlled shutdown: ~130 chunks at 100,000 partitions.
        idle = changes is None and state.next_fetch_offset <= replayed
        if not self._published:
            if not ready_to_publish(published=False, applied_offset=state.applied_offset,
                                    controller_last_offset=fetched.last_offset,
                                    registration_replayed=own_registration_replayed(
                                        state.image, settings.broker_id, state.broker_epoch)):
                self._checkpoint()
                if idle:  # nothing replayed (a controller behind?): do not spin
                    await asyncio.sleep(EMPTY_FETCH_PAUSE)
                return  # still catching up: the next fetch goes out at once
            refused = refused_at_start(state.image, settings.broker_id)
            if refused is not None:  # metadata.feature_support: a broker does not run at such levels
                raise UnsupportedFeatureLevelError(refused)
            logger.info("Broker %d caught up with the metadata log at offset %d; publishing its "
                        "partitions", settings.broker_id, state.applied_offset)
            self._resume_gc(now=True)  # publishing creates logs and serves: collect as always
            await self._publish(changes_for_broker(EMPTY_IMAGE, state.image, settings.broker_id))
            self._published = True
            self.published.set()
            self.applied_offsets.advanced(state.applied_offset)
            if self._unfence_on_publish:
                self.ready_to_serve()
            self._checkpoint()
            return
        for level in newly_unsupported(old_image, state.image):  # running: said, not fatal (Kafka's)
            logger.error("Broker %d: the metadata log finalized %s (applied up to offset %d), a level this broker "
                         "does not implement; it keeps running, as a Kafka broker does, but may not behave as that "
                         "level requires: upgrade it to a build that supports the level, or lower the feature",
                         settings.broker_id, level, state.applied_offset)
        if changes is None:
            # A checkpoint the interval held back is written once due, not only at the next
            # change: the logs load with the checkpointed topic configs after a crash.
            self._checkpoint()
            if idle:
                await asyncio.sleep(EMPTY_FETCH_PAUSE)
            return
        if fetched.snapshot is not None:
            logger.info("Broker %d loaded a metadata snapshot at offset %d (was at %d)",
                        settings.broker_id, state.applied_offset, before)
        await self._publish(changes)
        self.applied_offsets.advanced(state.applied_offset)
        self._checkpoint()
        self._maybe_report_early()

    def _maybe_report_early(self) -> None:
        """Heartbeat now rather than at the next interval when the applied offset just became
        news the controller waits for: this broker caught up with its registration (it is then
        unfenced), or another broker's controlled shutdown waits for every active broker to
        report these records (`shutdown.broker_lifecycle`), or a replica just failed here (the
        controller moves its leadership away only once told)."""
        state, lifecycle = self.state, self.lifecycle
        if len(self._failed_replicas()) != self._reported_failed or heartbeat_early_when_caught_up(state=lifecycle.state, broker_epoch=state.broker_epoch,
                                          applied_offset=state.applied_offset,
                                          reported_offset=self._reported_offset) or \
                heartbeat_early_for_shutdown(state.image.cluster.brokers.values(), broker_id=self.settings.broker_id,
                                             state=lifecycle.state, applied_offset=state.applied_offset,
                                             reported_offset=self._reported_offset):
            self._beat_now = True
            self._wake.set()

    def ready_to_serve(self) -> None:
        """Kafka's setReadyToUnfence: only a broker hosting what the metadata says (the node
        recovered its logs before starting us) and answering clients asks to be unfenced; the
        next heartbeat says so at once."""
        self.lifecycle.set_ready_to_unfence()
        self._beat_now = True
        self._wake.set()

    async def _register(self) -> None:
        settings, state = self.settings, self.state
        while not state.registered:  # until registered or cancelled; each attempt bounded by the client
            body = state.registration_request(incarnation_id=settings.incarnation_id, listeners=settings.listeners,
                                              rack=settings.rack, cluster_id=settings.cluster_id)
            try:
                reply = await self.client.register(body)
            except ControllerUnavailableError as exc:
                logger.warning("Broker %d: registration failed: %s", settings.broker_id, exc)
                await asyncio.sleep(RETRY_BACKOFF)
                continue
            epoch = state.on_registration_reply(reply)
            if epoch is None:
                logger.info("Broker %d: registration not accepted yet (error %d: %s); retrying",
                            settings.broker_id, reply["error_code"], reply.get("error_message"))
                await asyncio.sleep(RETRY_BACKOFF)
                continue
            logger.info("Broker %d registered with broker epoch %d", settings.broker_id, epoch)
            if self.lifecycle.state is BrokerState.STARTING:
                self._lifecycle(LifecycleEvent.REGISTERED)

    async def _heartbeats(self) -> None:
        state, lifecycle = self.state, self.lifecycle
        while True:  # until cancelled or shutting down; each wait and heartbeat bounded
            self._expire()
            if lifecycle.state in (BrokerState.SHUTTING_DOWN, BrokerState.SHUTDOWN):
                return  # heartbeats are over; the metadata fetch goes on until the node stops
            if not state.registered:
                await self._register()
                continue
            delay_ms = self._heartbeat_delay_ms()
            if delay_ms > 0:
                self._wake.clear()
                try:
                    async with asyncio.timeout(delay_ms / 1000):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                continue  # state may have changed while waiting: decide again
            await self._beat()

    async def _beat(self) -> None:
        state, broker, lifecycle = self.state, self.settings.broker_id, self.lifecycle
        was_fenced = state.fenced
        self._beat_now = False
        flags = lifecycle.heartbeat_flags()
        failed = self._failed_replicas()
        body = state.heartbeat_request(want_fence=flags.want_fence, want_shut_down=flags.want_shutdown,
                                       offline_replicas=failed)
        remaining = lifecycle.controlled_shutdown_remaining_ms(self._clock())
        try:
            # while pending, the controlled-shutdown deadline bounds the call too
            async with asyncio.timeout(None if remaining is None else remaining / 1000):
                reply = await self.client.heartbeat(body)
        except (ControllerUnavailableError, TimeoutError) as exc:
            logger.warning("Broker %d: heartbeat failed: %s", broker, exc or "the controlled-shutdown deadline")
            self._heartbeat_failed()
            return  # the next one after the lifecycle's backoff
        decision = state.on_heartbeat_reply(reply)  # an unexpected refusal: fatal, ends run()
        if decision is HeartbeatDecision.CONTINUE:
            self._reported_offset = body["current_metadata_offset"]
            self._reported_failed = len(failed)
            transition = lifecycle.on_heartbeat_reply(
                is_caught_up=state.caught_up, is_fenced=state.fenced,
                should_shut_down=state.should_shut_down, now_ms=self._clock())
            self._log_transition(transition)
            # The reply that caught us up often unfences us too, but the lifecycle takes one
            # step per reply: beat again at once rather than stay in RECOVERY for an interval
            # while the controller already counts us active and may make us a leader.
            # (or it was set while this beat was in flight: report the newer offset at once)
            self._beat_now = self._beat_now or (transition is not None and transition.new is BrokerState.RECOVERY
                                                and not state.fenced)
            self.heartbeats_ok += 1
            if self.heartbeat_targets and self.heartbeat_targets[-1] != self.client.target:
                logger.info("Broker %d: heartbeats are answered by controller %s now (were by %s)",
                            broker, self.client.target, self.heartbeat_targets[-1])
            self.heartbeat_targets = [*self.heartbeat_targets[-9:], self.client.target]
            self._maybe_obey_shutdown_request(reply)
            if was_fenced and not state.fenced:
                logger.info("Broker %d is unfenced (metadata offset %d)", broker, state.applied_offset)
            elif not was_fenced and state.fenced:
                logger.warning("Broker %d was fenced by the controller", broker)
        elif decision is HeartbeatDecision.RETRY:
            self._heartbeat_failed()
        elif decision is HeartbeatDecision.REREGISTER:
            self._lifecycle(LifecycleEvent.REGISTRATION_LOST)
            logger.warning("Broker %d: the controller no longer knows broker epoch %d (error %d); "
                           "registering again", broker, body["broker_epoch"], reply["error_code"])

    def _maybe_obey_shutdown_request(self, reply: dict[str, object]) -> None:
        """An operator's POST /v1/brokers/{id}/shutdown, relayed by the controller (which repeats
        the flag until we ask to shut down): start the shutdown once, the way SIGTERM does."""
        requested = reply.get("shutdown_requested") is True
        if self._shutdown_request_seen or not self.lifecycle.obeys_shutdown_request(requested):
            return
        self._shutdown_request_seen = True
        logger.info("Broker %d: the controller relays an operator's shutdown request (broker epoch %d, "
                    "state %s); shutting down as on SIGTERM", self.settings.broker_id, self.state.broker_epoch,
                    self.lifecycle.state.name)
        self._on_shutdown_requested()

    def _heartbeat_delay_ms(self) -> int:
        """The lifecycle's pace (the interval; while pending a controlled shutdown at once, then
        every 50 ms; backing off on failures), at once when the metadata fetch made news
        (`_maybe_report_early`), and never past the controlled-shutdown deadline."""
        now = self._clock()
        if self._beat_now:
            return 0
        delay = self.lifecycle.next_heartbeat_delay_ms(now)
        if delay is None:  # registered but not scheduled yet: the lifecycle schedules at REGISTERED
            delay = self.settings.heartbeat_interval_ms
        remaining = self.lifecycle.controlled_shutdown_remaining_ms(now)
        return delay if remaining is None else min(delay, remaining)

    def _heartbeat_failed(self) -> None:
        self._lifecycle_call(lambda: self.lifecycle.on_heartbeat_failed(self._clock()))

    def _lifecycle_call(self, call: Callable[[], object]) -> None:
        try:
            call()
        except LifecycleError as exc:  # the table's own definition of a bug: say so loudly
            logger.error("Broker %d: %s", self.settings.broker_id, exc)


def _leaf_errors(exc: BaseException) -> list[BaseException]:
    """Every leaf error of an ExceptionGroup (the TaskGroup wraps them), at most MAX_FATAL_ERRORS_SHOWN."""
    leaves: list[BaseException] = []
    pending = [exc]
    while pending and len(leaves) < MAX_FATAL_ERRORS_SHOWN:  # a group is finite; shown errors are bounded
        current = pending.pop(0)
        if isinstance(current, BaseExceptionGroup):
            pending[:0] = list(current.exceptions)
        else:
            leaves.append(current)
    return leaves


def _operator_facing(exc: BaseException) -> bool:
    return bool(getattr(exc, "operator_facing", False))


def is_operator_matter(exc: BaseException | None) -> bool:
    """Whether what ended the follower is the operator's to fix (a setting, a log written by a
    newer build), not a bug: every leaf error says so."""
    return exc is not None and all(map(_operator_facing, _leaf_errors(exc)))


def fatal_error_summary(exc: BaseException | None) -> str:
    """One line for the operator about what ended the follower: every leaf error of an
    ExceptionGroup (the TaskGroup wraps them) as `Type: message (at module:line)`, not the group's repr."""
    if exc is None:
        return "it returned without an error"
    parts = []
    for leaf in _leaf_errors(exc):
        frames = traceback.extract_tb(leaf.__traceback__)
        where = f" (at {Path(frames[-1].filename).stem}:{frames[-1].lineno})" if frames else ""
        if _operator_facing(leaf):  # the operator's matter, not a bug: no code location
            where = ""
        parts.append(f"{type(leaf).__name__}: {leaf}{where}")
    return "; ".join(parts)


async def run_metadata_follower(settings: FollowerSettings, addresses: Sequence[str],
                                on_changes: ChangesCallback, signer: RpcSigner | None = None) -> None:
    """A MetadataFollower with its own ControllerClient, closed when the follower stops; `signer`
    proves its RPCs where the controllers require it (controller.rpc.secret.file, issue 29)."""
    async with ControllerClient(addresses, liveness_timeout=settings.session_timeout_ms / 2000,
                                name=f"Broker {settings.broker_id}", signer=signer) as client:
        await MetadataFollower(settings, client, on_changes).run()
