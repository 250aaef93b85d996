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

# Broker 1 crashes; back, it is cut off from everyone and fenced; broker 0 then shuts down
# (controlled), so broker 1 restarts following with a stale HW checkpoint. Truncating to that
# HW drops acknowledged records it then lacks when it is the only one left to lead.
DATA_LOSS = SimOptions(seed=73, steps=148, second_topic=None, faults=(
    Fault(step=50, kind="crash", target="b1", duration_ms=510),
    Fault(step=73, kind="partition", target="b1", duration_ms=557),
    Fault(step=137, kind="shutdown", target="b0", duration_ms=395),
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
