"""Fencing a broker that leads 30,000 partitions stalls no controller and fences no live broker
(issue 36: the active controller once wrote such a fence as ONE decision and stalled 6.6 s).

Three real controller processes; broker 4 leads all 30,000 partitions (RF=3, brokers 5 and 6
in every ISR) and stops heartbeating; brokers 5 and 6 keep heartbeating. The brokers are
lightweight doubles that speak the controllers' real broker RPCs through the broker's own
ControllerClient (`tidelog.testing.fencing_scale`): real broker processes hosting 30,000
replicas each would take minutes of CPU to create their logs on a 2-core test machine, and
what is tested happens in the controllers alone, driven only by those RPCs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.testing.fencing_scale import FencingFigures, FencingScale

PARTITIONS = 30_000
FAILOVER_PARTITIONS = 10_000  # ten batches: the active controller dies after the first
MAX_STALL_MS = 1_000  # the bound: no controller stall over 1 s while fencing

# 30,000 partitions: a scale run (~2 min in all), under make test-long
pytestmark = [pytest.mark.timeout(300), pytest.mark.long]


def assert_bounded_and_live_brokers_kept(figures: FencingFigures, what: str) -> None:
    """What issue 36 asks of a large fence or controlled shutdown: batches, no controller stall
    over MAX_STALL_MS, and every live broker kept (unfenced, its heartbeats answered)."""
    assert figures.batched, f"{what} was not split into batches"
    assert figures.longest_stall_ms < MAX_STALL_MS, figures.stalls
    assert figures.live_brokers_fenced == []
    assert figures.live_heartbeat_errors == []

def test_fencing_a_broker_of_30000_partitions_in_bounded_batches(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with FencingScale.start(tmp_path, partitions=PARTITIONS) as run:
        assert run.partitions_of(4) == (PARTITIONS, PARTITIONS)  # broker 4 leads every partition
        figures = run.fence(4)
    with capsys.disabled():
        print(f"\n[fencing scale] {PARTITIONS} partitions created in {run.create_s:.1f} s; broker 4 fenced "
              f"{figures.detect_s:.1f} s after its last heartbeat, out of every ISR after {figures.fence_s:.1f} s; "
              f"longest controller stall {figures.longest_stall_ms} ms; slowest live heartbeat "
              f"{figures.live_heartbeat_max_ms:.0f} ms; slow decisions: {figures.slow_decisions}")
    assert_bounded_and_live_brokers_kept(figures, "the fence")


def test_a_new_active_controller_finishes_a_fencing_cut_short(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The active controller is SIGKILLed as soon as its first fencing batch committed (the broker
    fenced, most partitions still led by it): the next active controller finds the broker left
    behind and moves the rest."""
    with FencingScale.start(tmp_path, partitions=FAILOVER_PARTITIONS) as run:
        figures = run.fence(4, fail_over=True)
        text = "".join(n.spec.log_path.read_text(errors="replace") for n in run.cluster.controllers)
    with capsys.disabled():
        print(f"\n[fencing scale] failover mid-fencing: broker 4 out of every ISR {figures.fence_s:.1f} s after "
              f"its last heartbeat; longest stall {figures.longest_stall_ms} ms")
    assert "a failover cut their moves short" in text  # the new active controller did the rest
    assert figures.live_brokers_fenced == []


def test_a_controlled_shutdown_of_a_broker_of_30000_partitions_in_bounded_batches(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Broker 4 heartbeats want_shut_down (as after a SIGTERM): its leaderships move in batches,
    it is told to shut down only after the last one, and nothing stalls meanwhile."""
    with FencingScale.start(tmp_path, partitions=PARTITIONS) as run:
        figures = run.shut_down(4)
    with capsys.disabled():
        print(f"\n[fencing scale] controlled shutdown of a broker leading {PARTITIONS}: told to shut down after "
              f"{figures.detect_s:.1f} s, out of every ISR after {figures.fence_s:.1f} s; longest controller stall "
              f"{figures.longest_stall_ms} ms; slowest live heartbeat {figures.live_heartbeat_max_ms:.0f} ms")
    assert_bounded_and_live_brokers_kept(figures, "the controlled shutdown")
