"""One broker node: lifecycle, registration, heartbeats, the metadata follower, replicas.

The lifecycle is `shutdown.broker_lifecycle.BrokerLifecycle` (the real table and timers):
the simulation only sends what it says to send and feeds it the replies. The metadata
follower replays committed records through `metadata.delta.apply` and hands
`changes_for_broker` to the replicas, as `broker.metadata_follower` and the replica manager
do. A crash keeps only what the real broker persists: the logs, their epoch caches and the
checkpointed HW; a restart is a new incarnation that registers again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from broker.metadata_follower import own_registration_replayed, ready_to_publish
from chaos.sim import messages as m
from chaos.sim.network import Network
from chaos.sim.replica_log import SimLog
from chaos.sim.replicas import REQUEST_TIMEOUT_MS, Replicas
from chaos.sim.seams import PlantedBugs
from common.errors import ErrorCode
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.local_changes import changes_for_broker
from metadata.records import Record
from shutdown.broker_lifecycle import (
    BrokerLifecycle,
    BrokerState,
    LifecycleEvent,
    Transition,
    heartbeat_early_for_shutdown,
    heartbeat_early_when_caught_up,
)

logger = logging.getLogger(__name__)

# One timer per broker: every TICK_MS it fetches; every few ticks it polls the metadata,
# checks request timeouts and ISRs, and checkpoints the HW (fewer events, same periods).
TICK_MS = 25
METADATA_POLL_TICKS = 2  # 50 ms
HOUSEKEEPING_TICKS = 4  # 100 ms: request timeouts, isr-expiration, produce timeouts
CHECKPOINT_TICKS = 10  # 250 ms: replication-offset-checkpoint
Schedule = Callable[[str, int, int], None]  # (node, delay_ms, payload token)


class SimBroker:
    def __init__(self, broker_id: int, network: Network, controllers: tuple[str, ...], *, bugs: PlantedBugs,
                 heartbeat_interval_ms: int, session_timeout_ms: int, controlled_shutdown_timeout_ms: int,
                 replica_lag_time_max_ms: int, on_transition: Callable[[int, Transition], None],
                 on_applied: Callable[[int, Sequence[tuple[int, Record]]], None] | None = None) -> None:
        self.broker_id = broker_id
        self.name = f"b{broker_id}"
        self._network = network
        self._controllers = controllers
        self._bugs = bugs
        self._settings = (heartbeat_interval_ms, session_timeout_ms, controlled_shutdown_timeout_ms)
        self._lag_ms = replica_lag_time_max_ms
        self._on_transition = on_transition
        self._on_applied = on_applied  # the invariants see each applied metadata batch
        self.logs: dict[m.PartitionKey, SimLog] = {}  # what survives a crash
        self.incarnation = 0
        self.running = False
        self._start_soft_state()

    def _start_soft_state(self) -> None:
        hb, session, shutdown = self._settings
        self.lifecycle = BrokerLifecycle(heartbeat_interval_ms=hb, session_timeout_ms=session,
                                         controlled_shutdown_timeout_ms=shutdown)
        self.broker_epoch = -1
        self.image: MetadataImage = EMPTY_IMAGE
        self.published = False  # the replicas act on the image only once it caught up (first publish)
        self.reported_offset = -1
        self.replicas = Replicas(self.broker_id, self.logs, self._send, self._send_controller,
                                 replica_lag_time_max_ms=self._lag_ms, bugs=self._bugs,
                                 broker_epoch=lambda: self.broker_epoch)
        self._controller_index = 0
        self._next_request = 0
        self._in_flight: tuple[int, int] | None = None  # (request id, sent ms) of a register/heartbeat
        self._next_beat_ms: int | None = None

    # ---- process lifetime -----------------------------------------------------------------

    def start(self, now_ms: int) -> None:
        self.incarnation += 1
        self._start_soft_state()
        for log in self.logs.values():
            log.recover()
        self.running = True
        self._transition(self.lifecycle.start(now_ms))
        self._register(now_ms)

    def crash(self) -> None:
        """SIGKILL: soft state gone; logs and checkpoints stay."""
        self.running = False

    def request_shutdown(self, now_ms: int) -> None:
        """SIGTERM: a controlled shutdown if RUNNING, else straight to SHUTTING_DOWN."""
        if self.running:
            self._transition(self.lifecycle.handle(LifecycleEvent.SHUTDOWN_REQUESTED, now_ms))
            self._after_state_change(now_ms)

    def _transition(self, transition: Transition | None) -> None:
        if transition is not None and transition.old is not transition.new:
            logger.debug("broker %d: %s", self.broker_id, transition.message)
            self._on_transition(self.broker_id, transition)

    def _after_state_change(self, now_ms: int) -> None:
        if self.lifecycle.state is BrokerState.SHUTTING_DOWN:
            for log in self.logs.values():
                log.checkpoint()  # flushed and closed: the HW checkpoint is current
            self._transition(self.lifecycle.handle(LifecycleEvent.STOPPED, now_ms))
            self.running = False
        elif self.lifecycle.state is BrokerState.STARTING and self.broker_epoch < 0:
            self._register(now_ms)

    # ---- messages out ---------------------------------------------------------------------

    def _request_id(self) -> int:
        self._next_request += 1
        return self._next_request

    def _send(self, dst: str, message: object) -> None:
        self._network.send(self.name, dst, message)

    def _controller(self) -> str:
        return self._controllers[self._controller_index % len(self._controllers)]

    def _send_controller(self, message: object) -> None:
        self._send(self._controller(), message)

    def _register(self, now_ms: int) -> None:
        request_id = self._request_id()
        self._in_flight = (request_id, now_ms)
        self._send_controller(m.RegisterRequest(self.broker_id, f"b{self.broker_id}-{self.incarnation}", request_id))

    def _heartbeat(self, now_ms: int) -> None:
        flags = self.lifecycle.heartbeat_flags()
        request_id = self._request_id()
        self._in_flight = (request_id, now_ms)
        self._next_beat_ms = None
        self.reported_offset = self.image.offset
        self._send_controller(m.HeartbeatRequest(self.broker_id, self.broker_epoch, self.image.offset,
                                                 flags.want_fence, flags.want_shutdown, request_id))

    # ---- timers -----------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """The broker's timers, run on every housekeeping tick of the world."""
        if not self.running:
            return
        if self._in_flight is not None and now_ms - self._in_flight[1] >= REQUEST_TIMEOUT_MS:
            self._in_flight = None
            self._controller_index += 1  # try another controller, as the client's rediscovery
            if self.broker_epoch < 0:
                self._register(now_ms)
            else:
                self._transition(self.lifecycle.on_heartbeat_failed(now_ms))
                self._schedule_beat(now_ms)
        self._transition(self.lifecycle.expire(now_ms))
        self._after_state_change(now_ms)
        if not self.running:
            return
        if self._in_flight is None and self._next_beat_ms is not None and now_ms >= self._next_beat_ms:
            self._heartbeat(now_ms)

    def on_tick(self, now_ms: int, count: int) -> None:
        """The broker's periodic work; `count` numbers the ticks of this incarnation."""
        if not self.running:
            return
        self.replicas.fetch_tick(now_ms)
        if count % METADATA_POLL_TICKS == 0:
            self.poll_metadata()
        if count % HOUSEKEEPING_TICKS == 0:
            self.replicas.shrink_isrs(now_ms)
            self.replicas.expire_produces(now_ms)
            self.replicas.expire_alters(now_ms)
            self.tick(now_ms)
        if count % CHECKPOINT_TICKS == 0 and self.running:
            for log in self.logs.values():
                log.checkpoint()

    def _schedule_beat(self, now_ms: int) -> None:
        delay = self.lifecycle.next_heartbeat_delay_ms(now_ms)
        self._next_beat_ms = None if delay is None else now_ms + delay

    def next_beat_ms(self) -> int | None:
        return self._next_beat_ms

    def poll_metadata(self) -> None:
        if self.running:
            self._send(self._controllers[self.broker_id % len(self._controllers)]
                       if self._controller_index == 0 else self._controller(),
                       m.MetadataFetchRequest(self.broker_id, self.image.offset + 1))

    # ---- messages in ------------------------------------------------------------------------

    def handle(self, src: str, message: object, now_ms: int) -> None:
        if not self.running:
            return
        r = self.replicas
        if isinstance(message, m.FetchRequest):
            r.handle_fetch(src, message, now_ms)
        elif isinstance(message, m.FetchResponse):
            r.on_fetch_response(message)
        elif isinstance(message, m.EpochRequest):
            r.handle_epoch(src, message)
        elif isinstance(message, m.EpochResponse):
            r.on_epoch_response(message)
        elif isinstance(message, m.ProduceRequest):
            r.handle_produce(src, message, now_ms)
        elif isinstance(message, m.MetadataFetchResponse):
            self._on_metadata(message, now_ms)
        elif isinstance(message, m.HeartbeatResponse):
            self._on_heartbeat(message, now_ms)
        elif isinstance(message, m.RegisterResponse):
            self._on_register(message, now_ms)
        elif isinstance(message, m.AlterPartitionResponse):
            r.on_alter_response(message)
        else:
            raise TypeError(f"broker {self.broker_id} got {message!r}")

    def _answer_to(self, request_id: int) -> bool:
        if self._in_flight is None or self._in_flight[0] != request_id:
            return False  # late or duplicated
        self._in_flight = None
        return True

    def _on_register(self, resp: m.RegisterResponse, now_ms: int) -> None:
        if not self._answer_to(resp.request_id) or self.lifecycle.state is not BrokerState.STARTING:
            return
        if resp.error is not ErrorCode.NONE:
            self._controller_index += int(resp.error is ErrorCode.NOT_CONTROLLER)
            return  # retried by the timeout path on the next tick
        self.broker_epoch = resp.broker_epoch
        self._transition(self.lifecycle.handle(LifecycleEvent.REGISTERED, now_ms))
        self._schedule_beat(now_ms)

    def _on_heartbeat(self, resp: m.HeartbeatResponse, now_ms: int) -> None:
        if not self._answer_to(resp.request_id):
            return
        if resp.error in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
            self.broker_epoch = -1
            self._transition(self.lifecycle.handle(LifecycleEvent.REGISTRATION_LOST, now_ms))
            self._after_state_change(now_ms)
            return
        if resp.error is not ErrorCode.NONE:
            self._controller_index += int(resp.error is ErrorCode.NOT_CONTROLLER)
            self._transition(self.lifecycle.on_heartbeat_failed(now_ms))
        else:
            self._transition(self.lifecycle.on_heartbeat_reply(
                is_caught_up=resp.is_caught_up, is_fenced=resp.is_fenced,
                should_shut_down=resp.should_shut_down, now_ms=now_ms))
        self._after_state_change(now_ms)
        if self.running:
            self._schedule_beat(now_ms)

    def _on_metadata(self, resp: m.MetadataFetchResponse, now_ms: int) -> None:
        if resp.active_controller is not None and resp.active_controller in self._controllers:
            self._controller_index = self._controllers.index(resp.active_controller)
        fresh = [(o, r) for o, r in resp.records if o > self.image.offset]
        if fresh and fresh[0][0] == self.image.offset + 1:
            old, self.image = self.image, apply(self.image, fresh)
            if self._on_applied is not None:
                self._on_applied(self.broker_id, fresh)
        else:
            old = self.image
        if not ready_to_publish(published=self.published, applied_offset=self.image.offset,
                                controller_last_offset=resp.last_offset,
                                registration_replayed=own_registration_replayed(
                                    self.image, self.broker_id, self.broker_epoch)):
            return
        if not self.published:  # as the real follower loop: the whole local state, then ready to unfence
            old, self.published = EMPTY_IMAGE, True
            self.lifecycle.set_ready_to_unfence()
        elif old is self.image:
            return
        self.replicas.apply_changes(changes_for_broker(old, self.image, self.broker_id), self.image, now_ms)
        early = heartbeat_early_when_caught_up(
            state=self.lifecycle.state, broker_epoch=self.broker_epoch, applied_offset=self.image.offset,
            reported_offset=self.reported_offset) or heartbeat_early_for_shutdown(
            self.image.cluster.brokers.values(), broker_id=self.broker_id, state=self.lifecycle.state,
            applied_offset=self.image.offset, reported_offset=self.reported_offset)
        if early and self._in_flight is None and self.broker_epoch >= 0:
            self._heartbeat(now_ms)
