"""The broker's start-up heap, taken out of the cyclic garbage collector's sight once it serves.

    preload = start_message_preload()   # at start: the served message classes, on a thread
    ...
    await asyncio.to_thread(preload.join)
    freeze_startup_heap()   # after the first caught-up image is published (broker/node.py)

    with collection_paused():   # the log loading at start: no collection, then frozen
        log_manager = LogManager(...)

What is alive then (modules, the first metadata image, the open logs) lives as long as the
process, yet every full (generation 2) collection walked all of it: 20-35 ms per collection,
measured with gc.callbacks during a 10k records/s acks=all run, each one a p99.9 stall of every
request in flight. After gc.freeze() a full collection walks only what was allocated since
(0.2 ms measured). A collection just before the freeze keeps garbage out of the frozen set.

kio's generated message classes (and their readers and writers) are loaded before the freeze,
the newest served version of each API: loaded lazily on each API's first request they came
after it, ~58,000 objects that every full collection walked again (p99 stalls of 45-90 ms in a
10k records/s run, against ~18 ms before they existed; measured back at 1-22 ms with them
loaded first). Loading them takes ~0.3 s of imports, so it runs on a thread from the broker's
start, while the broker waits for the controllers, not on the way to serving.

What the broker allocates once it serves (the logs and image of partitions created since) is
frozen by the same keeper, after the full collections that leave many survivors, and the full
collections are spaced by the whole heap, frozen included (broker/heap_policy.py decides; the
`HeapKeeper` below reads gc and acts):

    heap = HeapKeeper(broker_id, loop)
    heap.freeze_startup_heap()          # then: the policy's threshold, a callback per collection
    heap_families(heap.stats, prefix)   # for GET /metrics
    heap.stop()                         # on the way out: CPython's own threshold again
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from broker import heap_policy
from broker.heap_policy import HeapDecision, HeapPolicy
from common.prometheus import Metric, counter, gauge, unlabelled
from common.protocol import messages
from common.protocol.api_keys import SUPPORTED_VERSIONS

logger = logging.getLogger(__name__)


def start_message_preload() -> threading.Thread:
    """Load the newest served version's message classes, reader and writer of every API (and
    with them kio's shared machinery) on a daemon thread: 0.27 s for 43 versions, where all
    209 take 0.8 s; an older version a client asks for still loads on its first request."""
    def preload() -> None:
        started = time.monotonic()
        try:
            loaded = messages.preload({api: (high, high) for api, (_, high) in SUPPORTED_VERSIONS.items()})
        except Exception:  # noqa: BLE001 - lazily loaded then, as before: slower GC passes, nothing wrong
            logger.exception("Loading the message classes before the heap freeze failed")
            return
        logger.info("Loaded %d message versions in %.2f s", loaded, time.monotonic() - started)
    thread = threading.Thread(target=preload, name="message-preload", daemon=True)
    thread.start()
    return thread


@contextmanager
def collection_paused() -> Iterator[None]:
    """No cyclic collection while the block runs (the broker's log loading); what is alive at its
    end is frozen. Loading 100,000 logs allocates millions of objects, and each full collection
    the allocations set off walked the whole heap again, the metadata checkpoint's image included:
    a quarter to a third of the load's CPU (bench/log_close.py). The logs loaded live as long as
    the process, and `freeze_startup_heap` freezes them later anyway."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


def freeze_startup_heap() -> int:
    """Collect once, then move every object still alive to the permanent generation; how many
    objects that generation holds (counted once here: gc.get_freeze_count walks all of them)."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    logger.info("Start-up heap frozen: %d objects out of the cyclic GC's sight", frozen)
    return frozen


@dataclass(slots=True)
class HeapStats:
    """What the keeper did, for /metrics."""

    policy: HeapPolicy | None = None  # None until the start-up heap is frozen
    full_collections: int = 0  # seen since the start-up freeze
    last_survivors: int = 0
    keeper_ms: float = 0.0  # the callback's own time (counting survivors), summed
    paused_young: int = 0  # objects young collections found after pauses of the collector, summed


class HeapKeeper:
    """The one owner of the broker's collector settings once it serves: it freezes the start-up
    heap, sets threshold2 from the policy, and after each full collection counts its survivors,
    freezes them when the policy says so and sets the next threshold2. At the start of a young
    collection it counts what a pause of the collector let pile up into that threshold2.

    It acts in the collector's "stop" callback, first in `gc.callbacks` (so the collection's
    pause on /metrics, `track_gc`, includes the count): right after the collection, before any
    new garbage, and on whichever thread ran it, holding the GIL. The log line of a freeze is
    written from the event loop (`loop`), not from inside the collector."""

    def __init__(self, broker_id: int, loop: asyncio.AbstractEventLoop | None = None,
                 clock: Callable[[], float] = time.thread_time) -> None:
        self._broker_id = broker_id
        self._loop = loop
        self._clock = clock  # the keeper's own CPU
        self._threshold: tuple[int, int, int] | None = None  # CPython's, put back by stop()
        self.stats = HeapStats()

    def freeze_startup_heap(self) -> None:
        """Freeze what is alive now and hand the collector's full collections to the policy."""
        if self._threshold is not None:
            return
        frozen = freeze_startup_heap()
        self._threshold = gc.get_threshold()
        policy = heap_policy.after_startup_freeze(frozen=frozen, young_per_gen1=self._young_per_gen1())
        self.stats.policy = policy
        gc.set_threshold(self._threshold[0], self._threshold[1], policy.threshold2)
        gc.callbacks.insert(0, self._on_collection)

    def stop(self) -> None:
        """No more decisions; CPython's own thresholds again (what is frozen stays frozen)."""
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)
        if self._threshold is not None:
            gc.set_threshold(*self._threshold)
            self._threshold = None

    def _young_per_gen1(self) -> int:
        assert self._threshold is not None
        return max(1, self._threshold[0] * self._threshold[1])

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        stats = self.stats
        if stats.policy is None or self._threshold is None:
            return
        if phase == "start":
            if info.get("generation") != 2:
                self._count_young(gc.get_count()[0])
            return
        if info.get("generation") != 2:
            return
        started = self._clock()
        survivors = len(gc.get_objects(generation=2))  # O(survivors): what the collection just walked
        decision = heap_policy.after_full_collection(stats.policy, survivors=survivors,
                                                     young_per_gen1=self._young_per_gen1())
        if decision.freeze:
            gc.freeze()
        gc.set_threshold(self._threshold[0], self._threshold[1], decision.policy.threshold2)
        spent_ms = (self._clock() - started) * 1000  # CPU of this thread (the default clock)
        stats.policy = decision.policy
        stats.full_collections += 1
        stats.last_survivors = survivors
        stats.keeper_ms += spent_ms
        if decision.freeze:
            self._log_soon(decision, spent_ms, decision.policy.threshold2 * self._young_per_gen1())

    def _count_young(self, young: int) -> None:
        """A young collection starts over `young` objects: more than one generation-1 collection's
        worth only after a pause of the collector, whose growth then counts towards the next full
        collection (heap_policy.threshold2_after_young)."""
        young_per_gen1 = self._young_per_gen1()
        if young <= young_per_gen1:  # the usual young collection: a compare, nothing else
            return
        threshold = gc.get_threshold()
        gc.set_threshold(threshold[0], threshold[1],
                         heap_policy.threshold2_after_young(threshold[2], young, young_per_gen1))
        self.stats.paused_young += young

    def _log_soon(self, decision: HeapDecision, spent_ms: float, promoted: int) -> None:
        if self._loop is None or self._loop.is_closed():
            self._log_freeze(decision, spent_ms, promoted)
        else:
            self._loop.call_soon_threadsafe(self._log_freeze, decision, spent_ms, promoted)

    def _log_freeze(self, decision: HeapDecision, spent_ms: float, promoted: int) -> None:
        policy = decision.policy
        logger.info("Broker %d: froze the %d objects a full collection left (freeze %d, counted in %.1f ms of CPU); "
                    "%d objects frozen in all; the next full collection after %d generation-1 collections "
                    "(%d objects promoted at most)", self._broker_id, decision.survivors,
                    policy.freezes, spent_ms, policy.frozen, policy.threshold2, promoted)


def heap_families(stats: HeapStats, prefix: str) -> list[Metric]:
    """What the heap keeper did: its freezes, the frozen count and the full-collection threshold."""
    policy = stats.policy
    return [
        counter(f"{prefix}heap_freezes_total", "Freezes (gc.freeze) of a full collection's survivors since the "
                "start-up heap's.", unlabelled(0 if policy is None else policy.freezes)),
        gauge(f"{prefix}heap_frozen_objects", "Objects out of the cyclic collector's sight (frozen): the start-up "
              "heap's count plus each freeze's survivors, frozen objects freed since not subtracted.",
              unlabelled(0 if policy is None else policy.frozen)),
        gauge(f"{prefix}heap_full_collection_threshold", "Generation-1 collections before the next full "
              "collection (gc threshold2, set from the whole heap, frozen included).",
              unlabelled(0 if policy is None else policy.threshold2)),
        gauge(f"{prefix}heap_full_collection_survivors", "Objects the last full collection left unfrozen or "
              "froze.", unlabelled(stats.last_survivors)),
        counter(f"{prefix}heap_full_collections_total", "Full collections the heap keeper saw since the start-up "
                "freeze.", unlabelled(stats.full_collections)),
    ]
