"""What one broker tells the controllers about itself (id, incarnation, listeners, rack) and
the timings of its metadata follower (`broker.metadata_follower_loop`): the plain settings
`broker.node` builds from the node config, apart from the asyncio shell that uses them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from broker.metadata_follower import DEFAULT_CHECKPOINT_INTERVAL_MS
from metadata.codec import Listener
from shutdown.broker_lifecycle import (
    DEFAULT_CONTROLLED_SHUTDOWN_TIMEOUT_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
)

FETCH_MAX_WAIT_MS: Final = 1000  # one long-poll; the controllers cap it at 5000


@dataclass(frozen=True, slots=True)
class FollowerSettings:
    """What one broker tells the controllers about itself, and its follower's timings."""

    broker_id: int
    incarnation_id: str
    listeners: tuple[Listener, ...]
    log_dir: Path  # the first of log.dirs: holds the metadata checkpoint
    heartbeat_interval_ms: int = 2000  # broker.heartbeat.interval.ms
    rack: str | None = None
    cluster_id: str | None = None
    fetch_max_wait_ms: int = FETCH_MAX_WAIT_MS
    checkpoint_interval_ms: int = DEFAULT_CHECKPOINT_INTERVAL_MS
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS  # broker.session.timeout.ms (retry backoff cap)
    controlled_shutdown_timeout_ms: int = DEFAULT_CONTROLLED_SHUTDOWN_TIMEOUT_MS  # controlled.shutdown.timeout.ms
