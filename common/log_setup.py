"""Process-wide logging: one stream handler on the root logger, one line per event.

    2026-11-21 12:00:00,123 INFO [broker-1] broker.log.partition_log: Rolled new segment ...

The `[role-node]` tag comes from the handler's formatter, so every record that reaches
the root logger carries it, third-party loggers (aiohttp, pysyncobj) included.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Final, TextIO

LEVEL_ENV: Final = "TIDELOG_LOG_LEVEL"
DEFAULT_LEVEL: Final = "INFO"
LINE_FORMAT: Final = "%(asctime)s %(levelname)s [%(node)s] %(name)s: %(message)s"

# Kafka operators write log4j level names; map the ones Python lacks.
_LEVELS: Final = {
    "TRACE": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "CRITICAL": logging.CRITICAL,
}


class _TidelogHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the handler we own, so a second setup replaces it instead of adding another."""


def node_label(node_id: int | None, role: str) -> str:
    """The bracketed tag of every line: `broker-1`, or just the role before the id is known."""
    return role if node_id is None else f"{role}-{node_id}"


def resolve_level(level: str | None) -> int:
    """The numeric level: `level` if given, else $TIDELOG_LOG_LEVEL, else INFO."""
    source = "level" if level is not None else LEVEL_ENV
    name = level if level is not None else os.environ.get(LEVEL_ENV) or DEFAULT_LEVEL
    number = _LEVELS.get(name.strip().upper())
    if number is None:
        known = ", ".join(_LEVELS)
        raise ValueError(f"unknown log level {name!r} (from {source}); expected one of {known}")
    return number


def setup_logging(
    node_id: int | None,
    role: str,
    level: str | None = None,
    stream: TextIO | None = None,
) -> None:
    """Send all logging to `stream` (default stderr) as one tagged line per record.

    Idempotent: a second call replaces the handler the first one installed (e.g. once the
    node id is known) and never adds another. An explicit `level` wins over $TIDELOG_LOG_LEVEL.
    """
    numeric_level = resolve_level(level)
    # Resolve stderr at call time, not import time, so a test's or daemon's swap is honoured.
    handler = _TidelogHandler(stream if stream is not None else sys.stderr)
    # A formatter default, not a filter: it applies to every record this handler formats,
    # whichever logger emitted it, and needs no per-record work elsewhere.
    tag = node_label(node_id, role)
    handler.setFormatter(logging.Formatter(LINE_FORMAT, defaults={"node": tag}))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _TidelogHandler)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(numeric_level)
