"""The broker's start-up heap, taken out of the cyclic garbage collector's sight once it serves.

    freeze_startup_heap()   # after the first caught-up image is published (broker/node.py)

What is alive then (modules, the first metadata image, the open logs) lives as long as the
process, yet every full (generation 2) collection walked all of it: 20-35 ms per collection,
measured with gc.callbacks during a 10k records/s acks=all run, each one a p99.9 stall of every
request in flight. After gc.freeze() a full collection walks only what was allocated since
(0.2 ms measured). A collection just before the freeze keeps garbage out of the frozen set.
"""

from __future__ import annotations

import gc
import logging

logger = logging.getLogger(__name__)


def freeze_startup_heap() -> None:
    """Collect once, then move every object still alive to the permanent generation."""
    gc.collect()
    gc.freeze()
    logger.info("Start-up heap frozen: %d objects out of the cyclic GC's sight", gc.get_freeze_count())
