"""The broker's tail sources (issue 35): the stall probe sees a callback that holds the loop,
collections are timed by generation, and /metrics carries both as histograms."""

from __future__ import annotations

import asyncio
import gc
import time

from broker.loop_stalls import (PAUSE_BUCKETS_MS, STALL_PROBE_PERIOD_S, PauseHistogram, TailSources, stall_observer,
                                tail_families, track_gc)
from common.prometheus import exposition, samples
from common.stall_probe import StallProbe


def test_a_pause_lands_in_its_bucket_and_the_longest_is_kept() -> None:
    h = PauseHistogram()
    for ms in (0.3, 7.0, 30.0, 2000.0):
        h.observe(ms)
    assert h.counts[0] == 1 and h.counts[PAUSE_BUCKETS_MS.index(10)] == 1
    assert h.counts[PAUSE_BUCKETS_MS.index(50)] == 1 and h.counts[-1] == 1
    assert h.longest_ms == 2000.0 and h.total_ms == 2037.3


async def test_the_probe_sees_a_callback_that_holds_the_loop() -> None:
    sources = TailSources()
    probe = StallProbe(asyncio.get_running_loop(), STALL_PROBE_PERIOD_S, stall_observer(sources, 4))
    probe.start()
    try:
        await asyncio.sleep(0.05)
        time.sleep(0.12)  # holds the loop, as a long synchronous callback would
        await asyncio.sleep(0.05)
    finally:
        probe.stop()
    assert sources.stalls.longest_ms >= 100
    assert sum(sources.stalls.counts[PAUSE_BUCKETS_MS.index(250):]) >= 1  # 100-250 ms bucket or above
    observed = sum(sources.stalls.counts)
    assert observed >= 2  # it rearms itself: timers before and after the stall fired
    await asyncio.sleep(0.05)
    assert sum(sources.stalls.counts) == observed  # stopped: no timer fires any more


def test_collections_are_timed_by_generation_until_untracked() -> None:
    sources = TailSources()
    ticks = iter([1.0, 1.004, 2.0, 2.030])
    was_enabled = gc.isenabled()
    gc.disable()  # only the explicit collections below run, so each takes its two ticks
    untrack = track_gc(sources, clock=lambda: next(ticks))
    try:
        gc.collect(0)
        gc.collect(2)
    finally:
        untrack()
        if was_enabled:
            gc.enable()
    assert round(sources.gc_pauses[0].longest_ms, 6) == 4.0 and sum(sources.gc_pauses[0].counts) == 1
    assert round(sources.gc_pauses[2].longest_ms, 6) == 30.0 and sum(sources.gc_pauses[2].counts) == 1
    gc.collect(0)  # no longer tracked: the exhausted clock is not called again
    assert sum(sources.gc_pauses[0].counts) == 1


def test_metrics_carry_both_histograms() -> None:
    sources = TailSources()
    sources.stalls.observe(12.0)
    sources.gc_pauses[2].observe(3.0)
    text = exposition(tail_families(sources, "tidelog_broker_"))
    found = samples(text)
    assert found['tidelog_broker_event_loop_stall_ms_bucket{le="25"}'] == 1.0
    assert found['tidelog_broker_event_loop_stall_ms_bucket{le="10"}'] == 0.0
    assert found['tidelog_broker_gc_pause_ms_bucket{generation="2",le="5"}'] == 1.0
    assert found['tidelog_broker_gc_pause_ms_count{generation="0"}'] == 0.0


def test_metrics_carry_the_purgatory_and_follower_fetch_waits() -> None:
    produce, follower = PauseHistogram(), PauseHistogram()
    produce.observe(7.0)
    follower.observe(120.0)
    found = samples(exposition(tail_families(TailSources(), "tidelog_broker_", purgatory_waits={"Produce": produce},
                                             follower_fetch_wait=follower)))
    assert found['tidelog_broker_purgatory_wait_ms_bucket{le="10",purgatory="Produce"}'] == 1.0
    assert found['tidelog_broker_purgatory_wait_ms_bucket{le="5",purgatory="Produce"}'] == 0.0
    assert found['tidelog_broker_follower_fetch_wait_ms_bucket{le="250"}'] == 1.0
    assert found['tidelog_broker_follower_fetch_wait_ms_bucket{le="100"}'] == 0.0
