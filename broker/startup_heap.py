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
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

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


def freeze_startup_heap() -> None:
    """Collect once, then move every object still alive to the permanent generation."""
    gc.collect()
    gc.freeze()
    logger.info("Start-up heap frozen: %d objects out of the cyclic GC's sight", gc.get_freeze_count())
