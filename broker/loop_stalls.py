"""Where a broker's latency tail comes from: event-loop stalls and garbage-collector pauses (issue 35).

Every request a broker answers waits for its one event loop; whatever holds the loop (a long
callback, a synchronous file operation, a collection of the cyclic garbage collector) delays
every request in flight by as long. The request latency histogram shows that the tail exists;
these two say where it comes from:

    pauses = TailSources()
    probe = StallProbe(loop, STALL_PROBE_PERIOD_S, stall_observer(pauses, broker_id))
    probe.start()                                                   # broker/node.py stops it
    untrack = track_gc(pauses)                                      # gc.callbacks; untrack() on stop
    families = tail_families(pauses, METRICS_PREFIX)                # for GET /metrics

`tidelog_broker_event_loop_stall_ms` is how late the probe's timer fired, observed every
`STALL_PROBE_PERIOD_S`: a stall of X ms means a callback held the loop for about X ms, so any
request that arrived meanwhile waited as long. `tidelog_broker_gc_pause_ms{generation}` is each
collection's duration, on whichever thread ran it (the GIL stops every other thread meanwhile).
Two more say where an acks=all produce's wait goes: `tidelog_broker_purgatory_wait_ms{purgatory}`
(from `broker.purgatory`: how long watched requests waited) and
`tidelog_broker_follower_fetch_wait_ms` (from `broker.fetch_sessions`: how long a change waited
for a follower's next fetch). bench/loaded_latency.py reads them all around its canary producer.
"""

from __future__ import annotations

import gc
import logging
import time
from bisect import bisect_left
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from common.limits import STALL_LOG_MS
from common.prometheus import Metric, histogram, labelled_histogram

logger = logging.getLogger(__name__)

# the probe's timer (common/stall_probe.py): 100 wake-ups/s, ~0.12 ms of CPU each on a loaded 2-core box
STALL_PROBE_PERIOD_S: Final = 0.01
PAUSE_BUCKETS_MS: Final = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000)
GC_GENERATIONS: Final = (0, 1, 2)


@dataclass(slots=True)
class PauseHistogram:
    """Counts of pauses by bucket (`PAUSE_BUCKETS_MS` and +Inf), their sum and the longest."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(PAUSE_BUCKETS_MS) + 1))
    total_ms: float = 0.0
    longest_ms: float = 0.0

    def observe(self, ms: float) -> None:
        self.counts[bisect_left(PAUSE_BUCKETS_MS, ms)] += 1
        self.total_ms += ms
        if ms > self.longest_ms:  # not max(): a C call per observation (5 per acks=all produce at the leader)
            self.longest_ms = ms


@dataclass(slots=True)
class TailSources:
    """The broker's event-loop stalls and its collections' pauses by generation."""

    stalls: PauseHistogram = field(default_factory=PauseHistogram)
    gc_pauses: dict[int, PauseHistogram] = field(default_factory=lambda: {g: PauseHistogram() for g in GC_GENERATIONS})


def stall_observer(sources: TailSources, broker_id: int) -> Callable[[float], None]:
    """What the broker's `StallProbe` (common/stall_probe.py) does with each lateness: into the
    stall histogram, and a warning for a stall of STALL_LOG_MS or more."""
    stalls = sources.stalls

    def observe(stalled_ms: float) -> None:
        stalls.observe(stalled_ms)
        if stalled_ms >= STALL_LOG_MS:
            logger.warning("Broker %d: its event loop was stalled for %d ms (the longest so far: %d ms)",
                           broker_id, stalled_ms, stalls.longest_ms)
    return observe


def track_gc(sources: TailSources, clock: Callable[[], float] = time.perf_counter) -> Callable[[], None]:
    """Time every collection into `sources.gc_pauses`; returns the function that stops it.

    A collection runs on one thread at a time and holds the GIL throughout, so the start time
    kept between the "start" and "stop" callbacks is never another collection's."""
    started: list[float] = [0.0]

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = clock()
        else:
            pauses = sources.gc_pauses.get(info.get("generation", 2))
            if pauses is not None:
                pauses.observe((clock() - started[0]) * 1000)

    gc.callbacks.append(callback)

    def untrack() -> None:
        if callback in gc.callbacks:
            gc.callbacks.remove(callback)

    return untrack


def tail_families(sources: TailSources, prefix: str, *, purgatory_waits: Mapping[str, PauseHistogram] | None = None,
                  follower_fetch_wait: PauseHistogram | None = None) -> list[Metric]:
    """The histograms for /metrics: stalls and collections, and where a waiting request's
    time goes: each purgatory's waits (`broker.purgatory`; the Produce one is acks=all
    waiting for the ISR) and how long a change waited for a follower's fetch to read it
    (`broker.fetch_sessions`)."""
    waits = [] if purgatory_waits is None else [labelled_histogram(
        f"{prefix}purgatory_wait_ms", "How long each request that had to wait in a purgatory waited until it "
        "completed or expired (Produce: an acks=all produce waiting for its in-sync replicas).",
        "purgatory", PAUSE_BUCKETS_MS, [(name, h.counts, h.total_ms) for name, h in sorted(purgatory_waits.items())])]
    if follower_fetch_wait is not None:
        waits.append(histogram(
            f"{prefix}follower_fetch_wait_ms", "How long a change on a partition this broker leads (an append, a "
            "high watermark move) waited for a follower's next fetch to read it.",
            PAUSE_BUCKETS_MS, follower_fetch_wait.counts, follower_fetch_wait.total_ms))
    return [
        *waits,
        histogram(f"{prefix}event_loop_stall_ms",
                  f"How late the event loop's {STALL_PROBE_PERIOD_S * 1000:g} ms probe timer fired: how long "
                  "something held the loop that every request waited for.",
                  PAUSE_BUCKETS_MS, sources.stalls.counts, sources.stalls.total_ms),
        labelled_histogram(f"{prefix}gc_pause_ms", "Duration of each cyclic garbage collection, by generation.",
                           "generation", PAUSE_BUCKETS_MS,
                           [(str(g), h.counts, h.total_ms) for g, h in sorted(sources.gc_pauses.items())]),
    ]
