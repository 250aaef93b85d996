"""One simulation: the nodes, the clock, the schedule, the invariants; `run()` for a verdict.

    result = Simulation(generate(seed, 200, random.Random), random.Random).run()
    result.violation        # None, or the invariant that failed and why

The loop pops one event (a step), applies the faults due before it, hands the event to its
node, then checks the invariants. After the last step every fault heals (restarts, resumes,
links repaired), producers stop, and the liveness bound runs: every partition with a running
ISR member must get a leader serving every acknowledged write within LIVENESS_MS.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from chaos.sim.broker import TICK_MS, SimBroker
from chaos.sim.controller import SimController
from chaos.sim.events import Event, EventQueue
from chaos.sim.invariants import Invariants, Violation
from chaos.sim.network import LinkFault, Network
from chaos.sim.producer import SimProducer
from chaos.sim.quorum import WRITEBACK_INTERVAL_MS, MetadataQuorum
from chaos.sim.schedule import BROKERS, CONTROLLERS, Fault, RngFactory, SimOptions
from common.topic_config import MIN_INSYNC_REPLICAS, UNCLEAN_LEADER_ELECTION_ENABLE
from shutdown.broker_lifecycle import BrokerState, Transition

logger = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_MS = 100
SESSION_TIMEOUT_MS = 400
CONTROLLED_SHUTDOWN_TIMEOUT_MS = 1500
REPLICA_LAG_TIME_MAX_MS = 250
WORLD_TICK_MS = 25  # produce one record; every other tick: Raft elections, fencing passes
LIVENESS_MS = 5000
BOOTSTRAP_MS = 3000
LIVENESS_CHECK_MS = 100
TRACE_KEEP = 60


@dataclass(frozen=True, slots=True)
class SimResult:
    seed: int
    steps: int  # events processed within the schedule
    events: int  # all events, the liveness phase included
    virtual_ms: int
    violation: Violation | None
    acked: int
    trace: tuple[str, ...]


class Simulation:
    def __init__(self, options: SimOptions, rngs: RngFactory) -> None:
        self.options = options
        seed = options.seed
        self.queue = EventQueue()
        self.network = Network(rngs(f"net-{seed}"), self.queue)
        self.invariants = Invariants()
        self.quorum = MetadataQuorum(CONTROLLERS, self.network, rngs(f"raft-{seed}"), self.invariants.on_commit,
                                     fsync=options.quorum_fsync, on_elected=self.invariants.on_elected)
        self.controllers = {c: SimController(c, self.quorum, self.network, session_timeout_ms=SESSION_TIMEOUT_MS,
                                             bugs=options.bugs) for c in CONTROLLERS}
        self.brokers = {b: SimBroker(int(b[1:]), self.network, CONTROLLERS, bugs=options.bugs,
                                     heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS, session_timeout_ms=SESSION_TIMEOUT_MS,
                                     controlled_shutdown_timeout_ms=CONTROLLED_SHUTDOWN_TIMEOUT_MS,
                                     replica_lag_time_max_ms=REPLICA_LAG_TIME_MAX_MS,
                                     on_transition=self._on_transition,
                                     on_applied=self.invariants.on_metadata_applied) for b in BROKERS}
        self.producer = SimProducer("p0", self.network, rngs(f"producer-{seed}"), self._views)
        self._topic_rng = rngs(f"topics-{seed}")
        self.paused_until: dict[str, int] = {}
        self.crashed: set[str] = set()
        self._beats: dict[str, int] = {}
        self._producing = True
        self._topics_created = False
        self._next_writeback_ms = WRITEBACK_INTERVAL_MS
        self.trace: list[str] = []
        self.events = 0

    # ---- set-up ---------------------------------------------------------------------------

    def _views(self) -> list:
        return [b.image for b in self.brokers.values() if b.running and b.image.topics.by_id]

    def _on_transition(self, broker_id: int, transition: Transition) -> None:
        self.invariants.on_transition(broker_id, transition)
        if self.options.trace:
            self._note(f"broker {broker_id}: {transition.message}")

    def _note(self, line: str) -> None:
        self.trace.append(f"{self.queue.now_ms:>6} ms  {line}")
        if len(self.trace) > 4 * TRACE_KEEP:
            del self.trace[:-TRACE_KEEP]

    def _tick(self, target: str, incarnation: int, count: int) -> None:
        self.queue.after(TICK_MS if target in self.brokers else WORLD_TICK_MS, "timer", target, (incarnation, count))

    def _start_broker(self, name: str) -> None:
        b = self.brokers[name]
        b.start(self.queue.now_ms)
        self._tick(name, b.incarnation, 1)
        self._beats.pop(name, None)

    def _create_topics(self) -> None:
        active = self.quorum.leader
        image = self.quorum.image
        if active is None or sum(1 for r in image.cluster.brokers.values() if r.is_active) < len(BROKERS):
            return
        controller = self.controllers[active]
        done = not self.options.safe_topic or image.topic("safe") is not None or controller.create_topic(
            "safe", replication_factor=3, rng=self._topic_rng,
            configs={MIN_INSYNC_REPLICAS: "2", UNCLEAN_LEADER_ELECTION_ENABLE: "false"})
        second = self.options.second_topic
        if done and second is not None and self.quorum.image.topic(second) is None:
            unclean = "true" if second == "unclean" else "false"
            done = controller.create_topic(second, replication_factor=3, rng=self._topic_rng,
                                           configs={MIN_INSYNC_REPLICAS: "1", UNCLEAN_LEADER_ELECTION_ENABLE: unclean})
        self._topics_created = done

    # ---- faults -----------------------------------------------------------------------------

    def _apply(self, fault: Fault) -> None:
        now = self.queue.now_ms
        if self.options.trace:
            self._note(f"FAULT {fault}")
        if fault.kind == "power" and fault.target not in self.brokers:
            self._controllers_lose_power(fault.target.split("+"))
        elif fault.kind in ("crash", "shutdown", "pause", "power") and (fault.target in self.crashed
                                                                         or fault.target in self.paused_until):
            return
        elif fault.kind in ("crash", "power"):
            self.crashed.add(fault.target)
            if fault.target in self.brokers:
                self.brokers[fault.target].crash()
                if fault.kind == "power":
                    self.invariants.power_lost(self.brokers[fault.target])
            else:
                self.quorum.up.discard(fault.target)
        elif fault.kind == "shutdown":
            self.crashed.add(fault.target)  # restarted after duration_ms, whatever the outcome
            self.brokers[fault.target].request_shutdown(now)
        elif fault.kind == "pause":
            self.paused_until[fault.target] = now + fault.duration_ms
            self.quorum.up.discard(fault.target)
        elif fault.kind == "partition":
            self.network.partition([fault.target], BROKERS + CONTROLLERS + ("p0",))
        else:
            a, b = fault.target.split("|")
            self.network.degrade(a, b, LinkFault(fault.drop, fault.duplicate, fault.extra_delay_ms))
        self.queue.after(fault.duration_ms, "heal", fault.target, fault.kind)

    def _controllers_lose_power(self, targets: list[str]) -> None:
        """Their machines lose power at once: crashed or paused (SIGSTOP) processes too, since
        what they wrote is in the same page cache; each restarts when this fault heals (or
        an earlier crash's heal restarts it first)."""
        for target in targets:
            self.paused_until.pop(target, None)
            self.crashed.add(target)
            lost, forgotten = self.quorum.lose_power(target)
            if self.options.trace:
                self._note(f"{target} lost power: {lost} log entries and {forgotten} terms not on disk")

    def _heal(self, target: str, kind: str) -> None:
        if self.options.trace:
            self._note(f"HEAL {kind} {target}")
        if kind in ("crash", "shutdown", "power"):
            for one in target.split("+"):
                self._restart(one)
        elif kind == "pause":
            self.paused_until.pop(target, None)
            if target in self.controllers and target not in self.crashed:
                self.quorum.up.add(target)
        else:
            self.network.heal()

    def _restart(self, target: str) -> None:
        if target not in self.crashed:
            return
        self.crashed.discard(target)
        if target in self.brokers:
            b = self.brokers[target]
            if b.running:  # a controlled shutdown still under way: SIGKILL first
                b.crash()
            self._start_broker(target)
        elif target not in self.paused_until:
            self.quorum.up.add(target)

    # ---- the loop -------------------------------------------------------------------------------

    def _dispatch(self, event: Event) -> None:
        target, now = event.target, self.queue.now_ms
        resume = self.paused_until.get(target)
        if resume is not None and event.kind in ("msg", "timer", "beat"):
            self.queue.at(resume, event.kind, target, event.payload)  # SIGSTOP: runs after SIGCONT
            return
        if event.kind == "heal":
            self._heal(target, event.payload)
        elif event.kind == "msg":
            src, message = event.payload
            if target in self.crashed and target not in self.brokers:
                return
            if target in self.controllers:
                self.controllers[target].handle(src, message, now)
            elif target in self.brokers:
                self.brokers[target].handle(src, message, now)
            else:
                self.producer.handle(src, message, now)
        elif event.kind == "beat":
            b = self.brokers[target]
            due = b.next_beat_ms()
            if b.running and b.incarnation == event.payload and due is not None and due <= now:
                b.tick(now)
        else:
            self._timer(target, event.payload)
        if target in self.brokers:
            self._arm_beat(target)

    def _arm_beat(self, name: str) -> None:
        b = self.brokers[name]
        due = b.next_beat_ms() if b.running else None
        if due is not None and self._beats.get(name) != due:
            self._beats[name] = due
            self.queue.at(due, "beat", name, b.incarnation)

    def _timer(self, target: str, payload: tuple[int, int]) -> None:
        incarnation, count = payload
        now = self.queue.now_ms
        if target == "world":
            if count % 2 == 0:
                elected = self.quorum.tick(now)
                if elected and self.options.trace:
                    self._note(f"{elected} is the active controller (epoch {self.quorum.epoch})")
                if not self._topics_created:
                    self._create_topics()
                for c in sorted(self.controllers):
                    if c not in self.crashed:
                        self.controllers[c].fence_expired(now)
            if now >= self._next_writeback_ms:  # each machine's kernel writes its dirty pages back
                self.quorum.write_back()
                self._next_writeback_ms = now + WRITEBACK_INTERVAL_MS
            if self._producing:
                self.producer.produce()
            self._tick(target, 0, count + 1)
            return
        b = self.brokers[target]
        if not b.running or b.incarnation != incarnation:
            return  # the process that armed this timer is gone
        b.on_tick(now, count)
        self._tick(target, incarnation, count + 1)

    def _step(self) -> None:
        self.events += 1
        event = self.queue.pop()
        if self.options.trace and event.kind in ("msg", "heal"):
            self._note(f"{event.kind} -> {event.target}: {event.payload!r}"[:240])
        self._dispatch(event)
        self.invariants.after_event(list(self.brokers.values()), self.producer)

    def _live(self) -> str | None:
        """Why the cluster is not live yet, or None."""
        active = self.quorum.leader
        if active is None or not self.quorum.can_commit(active):  # e.g. the active controller lost power
            return f"no active controller that can commit (last: {active}, term {self.quorum.epoch})"
        image = self.quorum.image
        for topic in image.topics.by_id.values():
            for pid, p in topic.partitions.items():
                key = (topic.topic_id, pid)
                if not any(self.brokers[f"b{r}"].running for r in p.isr):
                    continue
                if p.leader < 0:
                    return f"{topic.name}-{pid} has no leader (ISR {list(p.isr)})"
                leader = self.brokers[f"b{p.leader}"]
                local = leader.replicas.partitions.get(key)
                if local is None or not local.is_leader(leader.broker_id) or local.leader_epoch != p.leader_epoch:
                    return f"{topic.name}-{pid}: broker {p.leader} does not lead leader epoch {p.leader_epoch} yet"
                if key in self.invariants.safe and key not in self.invariants.unclean | self.invariants.power_failed:
                    hw = local.log.high_watermark
                    unread = [o for (k, o) in self.producer.acked if k == key and o >= hw]
                    if unread:
                        return f"{topic.name}-{pid}: acknowledged offset {min(unread)} is above HW {hw}"
        return None

    def run(self) -> SimResult:
        self._tick("world", 0, 0)
        self.quorum.tick(0)
        for b in BROKERS:
            self._start_broker(b)
        faults = list(self.options.faults)
        steps = 0
        violation = None
        try:
            self._bootstrap()
            while steps < self.options.steps:
                while faults and faults[0].step <= steps:
                    self._apply(faults.pop(0))
                self._step()
                steps += 1
            violation = self._liveness()
        except Violation as exc:
            violation = exc
        if violation is not None and self.options.trace:
            self._note(f"VIOLATION {violation}")
        return SimResult(self.options.seed, steps, self.events, self.queue.now_ms, violation, len(self.producer.acked),
                         tuple(self.trace[-TRACE_KEEP:]))

    def _bootstrap(self) -> None:
        """Until the topics exist and every broker runs and leads or follows them (not counted
        as steps: the schedule starts on a settled cluster)."""
        deadline = self.queue.now_ms + BOOTSTRAP_MS
        while self.queue.now_ms < deadline:  # bounded by virtual time
            if self._topics_created and self._live() is None and all(
                    b.lifecycle.state is BrokerState.RUNNING and len(b.replicas.partitions) == len(
                        self.quorum.image.topics.by_id) for b in self.brokers.values()):
                return
            self._step()
        raise Violation("liveness", f"the cluster did not start within {BOOTSTRAP_MS} ms")

    def _liveness(self) -> Violation | None:
        self._producing = False
        self.network.heal()
        self.paused_until.clear()
        for target in sorted(self.crashed):
            self._restart(target)
        self.quorum.up.update(CONTROLLERS)
        deadline = self.queue.now_ms + LIVENESS_MS
        next_check = self.queue.now_ms
        why = "not checked"
        while self.queue.now_ms < deadline:  # bounded by virtual time
            if self.queue.now_ms >= next_check:
                why = self._live() or ""
                if not why:
                    return None
                next_check = self.queue.now_ms + LIVENESS_CHECK_MS
            self._step()
        return Violation("liveness", f"{LIVENESS_MS} ms after every fault healed: {why}")
