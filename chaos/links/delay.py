"""When each chunk of a delayed byte stream may go on: delay ± jitter, never before the chunk
ahead of it (TCP's order holds), a closing FIN held `close_delay_ms` more. Time is injected.

    line = DelayLine(DelayParams(100, 10), random.Random(seed))
    line.release_at(now_ms)          # 90..110 ms later, and not before the previous chunk
    line.close_at(now_ms)            # the FIN: after every chunk, plus close_delay_ms
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from chaos.links.rules import DelayParams


@dataclass(slots=True)
class DelayLine:
    params: DelayParams
    rng: random.Random
    last_release_ms: float = field(default=float("-inf"))

    def _delay_ms(self) -> float:
        jitter = self.params.jitter_ms
        offset = self.rng.uniform(-jitter, jitter) if jitter else 0.0
        return max(0.0, self.params.delay_ms + offset)

    def release_at(self, arrival_ms: float) -> float:
        """When a chunk that arrived at `arrival_ms` is sent on."""
        release = max(arrival_ms + self._delay_ms(), self.last_release_ms)
        self.last_release_ms = release
        return release

    def close_at(self, arrival_ms: float) -> float:
        """When an end of stream that arrived at `arrival_ms` is passed on."""
        release = max(arrival_ms + self._delay_ms() + self.params.close_delay_ms, self.last_release_ms)
        self.last_release_ms = release
        return release
