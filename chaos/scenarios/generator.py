"""A seeded random fault schedule: the same seed gives the same schedule, fault for fault.

The randomized mix draws, one after another, an action, a target selector that suits it and
a duration, leaving `gap_s` between faults so the cluster heals (Jepsen's "nemesis
schedule"). Targets stay selectors: which node they name is decided from live metadata
when the fault starts, so the replay is the same schedule, not necessarily the same nodes.
"""

from __future__ import annotations

import dataclasses
import random

from chaos.scenarios.spec import Fault, FaultAction, Scenario

TARGETS = {
    FaultAction.KILL: ("leader:{topic}:{p}", "follower:{topic}:{p}", "active-controller", "controller-follower",
                       "broker:random"),
    FaultAction.PAUSE: ("leader:{topic}:{p}", "follower:{topic}:{p}", "active-controller", "broker:random"),
    FaultAction.SHUTDOWN: ("leader:{topic}:{p}", "broker:random"),
    FaultAction.PARTITION: ("leader:{topic}:{p}", "active-controller", "minority", "follower:{topic}:{p}"),
    FaultAction.DROP: ("leader:{topic}:{p}",),
    FaultAction.NETEM: ("follower:{topic}:{p}",),
    FaultAction.DISK: ("follower:{topic}:{p}",),
    FaultAction.DELAY: ("follower:{topic}:{p}", "controller-follower"),
    FaultAction.BANDWIDTH: ("follower:{topic}:{p}",),
    FaultAction.LOSS: ("follower:{topic}:{p}",),
    FaultAction.SLOW_CLOSE: ("follower:{topic}:{p}",),
    FaultAction.REASSIGN: ("follower:{topic}:{p}",),
}


def generate(scenario: Scenario, seed: int | None = None) -> Scenario:
    """`scenario` with its faults replaced by a schedule drawn from its [generator] and `seed`."""
    spec = scenario.generator
    if spec is None:
        return scenario
    seed = spec.seed if seed is None else seed
    rng = random.Random(seed)
    topic = scenario.workload.topic
    partitions = next(t.partitions for t in scenario.topics if t.name == topic)
    faults: list[Fault] = []
    at = spec.gap_s
    for _ in range(spec.faults):
        action = rng.choice(spec.actions)
        target = rng.choice(TARGETS[action]).format(topic=topic, p=rng.randrange(partitions))
        duration = round(rng.uniform(spec.min_duration_s, spec.max_duration_s), 1)
        params: tuple[tuple[str, object], ...] = ()
        if action is FaultAction.NETEM:
            params = (("delay_ms", rng.choice((50, 200, 500))),)
        elif action is FaultAction.DELAY:
            params = (("delay_ms", rng.choice((50, 200, 500))), ("jitter_ms", 20))
        elif action is FaultAction.BANDWIDTH:
            params = (("rate_kbit", rng.choice((800, 8000))),)
        elif action is FaultAction.LOSS:
            params = (("loss_pct", rng.choice((5, 20))),)
        elif action is FaultAction.SLOW_CLOSE:
            params = (("delay_ms", 1000),)
        elif action is FaultAction.DISK:
            params = (("mode", rng.choice(("truncate-tail", "garbage", "corrupt-index"))),)
        faults.append(Fault(action, target, round(at, 1), duration, params=params))
        at += duration + spec.gap_s
    return dataclasses.replace(scenario, faults=tuple(faults), duration_s=max(scenario.duration_s, at),
                               generator=dataclasses.replace(spec, seed=seed))
