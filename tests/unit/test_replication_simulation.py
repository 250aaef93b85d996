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
# KIP-101's second case, on a topic with min.insync.replicas 1 (the HW may advance with the
# leader alone): brokers cut off and crashed in turn leave a follower whose HW is behind its
# log; truncating to it, then leading, it writes a new epoch's record where another replica
# keeps the old one, and both HWs pass that offset: the logs diverge below the HW.
DIVERGENCE = SimOptions(seed=755, steps=282, second_topic="min-isr-1", safe_topic=False, faults=(
    Fault(step=28, kind="partition", target="b2", duration_ms=1007),
    Fault(step=42, kind="partition", target="c2", duration_ms=639),
    Fault(step=99, kind="crash", target="b0", duration_ms=379),
    Fault(step=125, kind="crash", target="b1", duration_ms=837),
    Fault(step=149, kind="crash", target="c0", duration_ms=972),
))
SCENARIOS = {"data-loss": (DATA_LOSS, "acked-write-kept"), "divergence": (DIVERGENCE, "replicas-agree")}


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
    # agreed: below its own HW (and the leader's) every replica holds the leader's records
    for topic in sim.quorum.image.topics.by_id.values():
        for partition_id, partition in topic.partitions.items():
            key = (topic.topic_id, partition_id)
            leader_log = sim.brokers[f"b{partition.leader}"].logs[key]
            for broker in sim.brokers.values():
                upto = min(leader_log.high_watermark, broker.logs[key].high_watermark)
                assert broker.logs[key].entries[:upto] == leader_log.entries[:upto]
    # liveness held: every partition leads from a broker holding every acknowledged write
    for (key, offset), value in sim.producer.acked.items():
        if key in sim.invariants.safe:
            registration = sim.quorum.image.partition(*key)
            assert registration is not None
            leader = registration.leader
            assert sim.brokers[f"b{leader}"].logs[key].entries[offset][1] == value
