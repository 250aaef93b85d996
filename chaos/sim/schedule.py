"""Fault schedules as data: one seed -> the options of one simulation.

A fault fires before a given step (event number), so a schedule can be shrunk by dropping
faults or cutting steps and replayed exactly. Kinds (issue 15): crash (and restart after
`duration_ms`) of a broker or controller, pause (SIGSTOP) shorter or longer than the broker
session, network partition of one node from all others, a degraded link (drop, duplicate,
delay, hence reordering), a controlled shutdown (SIGTERM, restart after `duration_ms`), and a
power failure (a crash that also loses what was not yet on disk): of a broker (its log tail
not yet written back) or of controllers (their unsynced Raft entries, term and vote,
chaos.sim.voter_storage): one (with three voters also the largest minority), a majority, or
all of them at once; a group target is "c0+c1".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chaos.sim.seams import NO_BUGS, PlantedBugs

if TYPE_CHECKING:  # the caller owns the generator: no global random here
    from random import Random

RngFactory = Callable[[str], "Random"]  # seeded generators by name: `random.Random` itself

BROKERS = ("b0", "b1", "b2")
CONTROLLERS = ("c0", "c1", "c2")
KINDS = ("crash", "pause", "partition", "degrade", "shutdown", "power")
WEIGHTS = (3, 2, 3, 2, 2, 1)
WARMUP_STEPS = 20  # no fault before the cluster had a few events to settle
# power failures of controllers: each one alone, each majority, and all at once
CONTROLLER_POWER_TARGETS = CONTROLLERS + ("c0+c1", "c0+c2", "c1+c2", "c0+c1+c2")


@dataclass(frozen=True, slots=True)
class Fault:
    step: int
    kind: str
    target: str  # a node, or "a|b" for a degraded link
    duration_ms: int
    drop: float = 0.0
    duplicate: float = 0.0
    extra_delay_ms: int = 0

    def __str__(self) -> str:
        link = f" drop={self.drop:.2f} dup={self.duplicate:.2f} delay<={self.extra_delay_ms}ms" \
            if self.kind == "degrade" else ""
        return f"step {self.step}: {self.kind} {self.target} for {self.duration_ms} ms{link}"


@dataclass(frozen=True, slots=True)
class SimOptions:
    seed: int
    steps: int
    faults: tuple[Fault, ...]
    # a second topic beside "safe" (min.insync.replicas 2, unclean off): None, "unclean"
    # (unclean.leader.election.enable=true, min ISR 1) or "min-isr-1" (unclean off, min ISR 1)
    second_topic: str | None
    bugs: PlantedBugs = NO_BUGS
    trace: bool = False
    safe_topic: bool = True  # False: only the second topic (a scripted schedule about it alone)
    # controller.quorum.fsync: False acknowledges Raft entries and votes before they are durable
    quorum_fsync: bool = True


def _fault(rng: Random, step: int, power: bool) -> Fault:
    kind = rng.choices(KINDS, WEIGHTS)[0]
    if kind == "power" and not power:
        kind = "crash"
    if kind == "power":  # a broker's unflushed log tail, or controllers' unsynced Raft state, is lost
        return Fault(step, kind, rng.choice(BROKERS + CONTROLLER_POWER_TARGETS), rng.randint(50, 600))
    if kind == "crash":
        return Fault(step, kind, rng.choice(BROKERS + CONTROLLERS), rng.randint(50, 1200))
    if kind == "pause":  # shorter or longer than the 400 ms session
        return Fault(step, kind, rng.choice(BROKERS + CONTROLLERS), rng.choice((rng.randint(50, 300),
                                                                                rng.randint(450, 1200))))
    if kind == "partition":
        return Fault(step, kind, rng.choice(BROKERS + CONTROLLERS), rng.randint(100, 1200))
    if kind == "degrade":
        a, b = sorted(rng.sample(BROKERS + CONTROLLERS, 2))
        return Fault(step, kind, f"{a}|{b}", rng.randint(100, 1200), drop=rng.choice((0.0, 0.2, 0.5, 1.0)),
                     duplicate=rng.choice((0.0, 0.2)), extra_delay_ms=rng.choice((0, 20, 150)))
    return Fault(step, kind, rng.choice(BROKERS), rng.randint(100, 800))


def generate(seed: int, steps: int, rngs: RngFactory, bugs: PlantedBugs = NO_BUGS,
             trace: bool = False, power: bool = False, quorum_fsync: bool = True) -> SimOptions:
    """The options of `seed`: about one fault per 25 steps, at seeded steps. Power failures
    only with `power`, so that every seed of the default mix replays as it always did; a
    broker's power failure may lose acknowledged writes it hit (tidelog, like Kafka, relies on
    replication, not fsync), a controller's must lose nothing committed while `quorum_fsync`."""
    rng = rngs(f"schedule-{seed}")
    count = rng.randint(1, max(1, steps // 25))
    last = max(WARMUP_STEPS + 1, steps - 10)
    faults = sorted((_fault(rng, rng.randint(WARMUP_STEPS, last), power) for _ in range(count)),
                    key=lambda f: f.step)
    second = rng.choice((None, None, "unclean", "min-isr-1"))
    return SimOptions(seed, steps, tuple(faults), second_topic=second, bugs=bugs, trace=trace,
                      quorum_fsync=quorum_fsync)
