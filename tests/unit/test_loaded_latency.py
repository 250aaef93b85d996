"""bench/loaded_latency.py: the canary leader's loop CPU per Produce it answered, and each
follower's per fetch round, from a window's /proc loop CPU and /metrics request rates."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import loaded_latency  # noqa: E402


def loop_rows(**cpu_ms_s: float) -> list[dict[str, Any]]:
    """os_rows as the bench builds them; only each broker's loop CPU matters here."""
    return [{"broker": int(name.removeprefix("b")), "main_cpu_ms_s": ms} for name, ms in cpu_ms_s.items()]


LEADER = 2

# (loop CPU ms/s per broker, the leader's requests/s by API, expected figures)
CASES = [
    # alone at SCHED_FIFO as last session measured it: 850 ms/s of loop for ~800 Produce/s,
    # two follower fetches each; each follower 360 ms/s for its ~800 rounds a second
    (loop_rows(b2=850.0, b3=360.0, b4=360.0), {2: {"PRODUCE": 800.0, "FETCH": 1600.0, "METADATA": 1.0}},
     {"produce_s": 800.0, "fetch_s": 1600.0, "leader_loop_ms_per_produce": 850.0 / 800,
      "fetches_per_produce": 2.0, "follower_loop_ms_per_fetch": 360.0 / 800}),
    # followers unequal: their mean loop over the even split of the leader's Fetch answers
    (loop_rows(b2=500.0, b3=100.0, b4=300.0), {2: {"PRODUCE": 250.0, "FETCH": 400.0}},
     {"produce_s": 250.0, "fetch_s": 400.0, "leader_loop_ms_per_produce": 2.0,
      "fetches_per_produce": 1.6, "follower_loop_ms_per_fetch": 200.0 / 200}),
    # a leader that answered nothing (no /metrics counts yet): no figures, no division by zero
    (loop_rows(b2=50.0, b3=10.0, b4=10.0), {2: {}},
     {"produce_s": 0.0, "fetch_s": 0.0, "leader_loop_ms_per_produce": None,
      "fetches_per_produce": None, "follower_loop_ms_per_fetch": None}),
    # other brokers' requests are not the leader's
    (loop_rows(b2=400.0, b3=100.0, b4=100.0), {2: {"PRODUCE": 400.0}, 3: {"PRODUCE": 900.0, "FETCH": 900.0}},
     {"produce_s": 400.0, "fetch_s": 0.0, "leader_loop_ms_per_produce": 1.0,
      "fetches_per_produce": 0.0, "follower_loop_ms_per_fetch": None}),
]


@pytest.mark.parametrize(("rows", "rates", "expected"), CASES)
def test_leader_cost(rows: list[dict[str, Any]], rates: dict[int, dict[str, float]], expected: dict[str, Any]) -> None:
    got = loaded_latency.leader_cost(rows, rates, LEADER)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == (value if value is None else pytest.approx(value)), key


def test_the_figures_print_with_dashes_for_what_is_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    loaded_latency.print_leader_cost(loaded_latency.leader_cost(*CASES[0][:2], LEADER), LEADER)
    loaded_latency.print_leader_cost(loaded_latency.leader_cost(*CASES[2][:2], LEADER), LEADER)
    first, second = capsys.readouterr().out.splitlines()
    assert "800 Produce/s" in first and "1.06 ms per Produce with 2.00 Fetch answers" in first
    assert "0.45 ms per fetch round" in first
    assert "loop - ms per Produce with - Fetch answers" in second and "- ms per fetch round" in second
