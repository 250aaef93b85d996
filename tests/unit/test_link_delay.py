"""chaos.links.delay: each chunk's release time is delay ± jitter after its arrival, never before
the chunk ahead of it, and a FIN waits close_delay_ms more (a seeded table, time injected)."""

from __future__ import annotations

import random

import pytest

from chaos.links.delay import DelayLine
from chaos.links.rules import DelayParams


@pytest.mark.parametrize("params, arrivals, expected", [
    (DelayParams(100), [0, 10, 10, 500], [100, 110, 110, 600]),
    (DelayParams(0), [5, 6], [5, 6]),
])
def test_a_fixed_delay_shifts_every_chunk(params: DelayParams, arrivals: list[float], expected: list[float]) -> None:
    line = DelayLine(params, random.Random(1))
    assert [line.release_at(a) for a in arrivals] == expected


@pytest.mark.parametrize("seed", range(20))
def test_jitter_stays_in_bounds_and_keeps_order(seed: int) -> None:
    line = DelayLine(DelayParams(100, 40), random.Random(seed))
    releases = []
    for n in range(200):
        arrival = n * 3.0
        release = line.release_at(arrival)
        assert release >= arrival + 60 and (release <= arrival + 140 or release == releases[-1])
        releases.append(release)
    assert releases == sorted(releases)  # TCP's order: never before the chunk ahead


def test_the_same_seed_gives_the_same_releases() -> None:
    a, b = (DelayLine(DelayParams(50, 25), random.Random(9)) for _ in range(2))
    assert [a.release_at(n) for n in range(50)] == [b.release_at(n) for n in range(50)]


def test_a_fin_waits_for_every_chunk_and_the_close_delay() -> None:
    line = DelayLine(DelayParams(100, 0, 300), random.Random(1))
    assert line.release_at(0) == 100
    assert line.close_at(1) == 401
    early = DelayLine(DelayParams(0, 0, 0), random.Random(1))
    early.release_at(50)
    assert early.close_at(10) == 50  # never ahead of the data
