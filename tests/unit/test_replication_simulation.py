"""KIP-101's classic failures as scripted schedules of the control-plane simulator (chaos.sim).

The simulator runs the real controller rules, broker lifecycle and replication/truncation
rules; these schedules (found by the simulator with the `truncate_to_hw` bug planted, then
shrunk) must fail when a new follower truncates to its high watermark, and pass as built
(truncation by leader epoch, KIP-101/279).
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from chaos.sim.schedule import Fault, SimOptions
from chaos.sim.seams import BUGS
from chaos.sim.world import Simulation

# Broker 0 stalls past its session and is fenced (ISR {1, 2}); broker 2 crashes and comes
# back before the controller notices, reloading a stale HW checkpoint; truncating to that HW
# drops acknowledged records that broker 2, soon the only in-sync follower, then lacks.
DATA_LOSS = SimOptions(seed=360, steps=102, unclean_topic=True, faults=(
    Fault(step=62, kind="pause", target="b0", duration_ms=803),
    Fault(step=73, kind="crash", target="b2", duration_ms=183),
))
SCENARIOS = {"data-loss": (DATA_LOSS, "acked-write-kept")}


def run(options: SimOptions) -> Simulation:
    sim = Simulation(options, random.Random)
    sim.result = sim.run()  # type: ignore[attr-defined]
    return sim


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_truncating_to_the_high_watermark_fails(name: str) -> None:
    options, invariant = SCENARIOS[name]
    result = run(dataclasses.replace(options, bugs=BUGS["truncate-to-hw"])).result  # type: ignore[attr-defined]
    assert result.violation is not None and result.violation.invariant == invariant, result.violation


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_truncating_by_leader_epoch_keeps_every_acknowledged_write(name: str) -> None:
    options, _ = SCENARIOS[name]
    sim = run(options)
    assert sim.result.violation is None, f"{name}: {sim.result.violation}"  # type: ignore[attr-defined]
    assert sim.producer.acked, "the schedule acknowledged no write: it tests nothing"
    # liveness held: every partition leads from a broker holding every acknowledged write
    for (key, offset), value in sim.producer.acked.items():
        if key in sim.invariants.safe:
            partition = sim.quorum.image.partition(*key)
            assert partition is not None
            leader = partition.leader
            assert sim.brokers[f"b{leader}"].logs[key].entries[offset][1] == value
