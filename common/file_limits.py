"""The open-file limit (RLIMIT_NOFILE) of a node: raised to the hard limit at start, and the
share of it a broker gives to segment files.

    limit = raise_open_file_limit("Broker 1")                  # once, at start; one log line
    max_open = segment_files_allowed(configured=10_000, limit=limit)
    warning = open_files_warning(partitions=5_000, configured=10_000, limit=1_024)

Linux gives a login shell or a CI container a soft limit of 1,024 and a much larger hard one
(524,288 under systemd): a process may raise its soft limit up to the hard limit itself, as
the JVM does at start (-XX:+MaxFDLimit). The arithmetic is pure; only
`raise_open_file_limit` and `current_open_file_limit` touch the process.
"""

from __future__ import annotations

import logging
import resource
from typing import Final

log = logging.getLogger(__name__)

UNLIMITED: Final = resource.RLIM_INFINITY
# With an unlimited hard limit (macOS, some containers) the soft limit is raised to this
# many descriptors: Linux's default fs.nr_open, beyond which setrlimit fails.
UNLIMITED_TARGET_FILES: Final = 1_048_576
# Segment files may use at most 1/SEGMENT_FILES_DIVISOR of the limit: the rest is for client
# and replication sockets, checkpoint writes, the cleaner's reads and the process's own files.
SEGMENT_FILES_DIVISOR: Final = 2


def target_soft_limit(soft: int, hard: int) -> int:
    """The soft limit a node runs with: its hard limit (never lower than it was)."""
    target = UNLIMITED_TARGET_FILES if hard == UNLIMITED else hard
    if soft == UNLIMITED:
        return soft
    return max(soft, target)


def segment_files_allowed(*, configured: int, limit: int) -> int:
    """How many segment files a broker keeps open: `log.open.files.max`, capped by its share
    of the open-file limit (at least one: the active segment of the log being written)."""
    if limit == UNLIMITED:
        return configured
    return max(1, min(configured, limit // SEGMENT_FILES_DIVISOR))


def limit_for_segment_files(files: int) -> int:
    """The open-file limit under which `files` segment files fit in their share."""
    return files * SEGMENT_FILES_DIVISOR


def open_files_warning(*, partitions: int, configured: int, limit: int) -> str | None:
    """Why a broker hosting `partitions` logs cannot keep every active segment open, and the
    fix, or None when it can. The broker still serves them all: the least recently used
    files are closed and reopened on use, which costs two system calls per reopen."""
    allowed = segment_files_allowed(configured=configured, limit=limit)
    if partitions <= allowed:
        return None
    if allowed < configured:
        fix = (f"raise the hard open-file limit (ulimit -Hn, LimitNOFILE) to at least "
               f"{limit_for_segment_files(partitions)}")
    else:
        fix = f"raise log.open.files.max to at least {partitions}"
    return (f"hosts {partitions} partitions but keeps at most {allowed} segment files open "
            f"(log.open.files.max {configured}, open-file limit {_shown(limit)}): the least "
            f"recently used are closed and reopened on use; {fix}")


def _shown(limit: int) -> str:
    return "unlimited" if limit == UNLIMITED else str(limit)


def current_open_file_limit() -> int:
    """The process's soft RLIMIT_NOFILE now."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def raise_open_file_limit(name: str) -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; log the limit the node runs with in
    one line (`name`: "Broker 1", "Controller 3"); return it. A refused raise keeps the old
    limit (logged as a WARNING): the node still starts."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = target_soft_limit(soft, hard)
    if target != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as e:
            log.warning("%s: cannot raise the open-file limit from %s to %s (hard limit %s): %s; "
                        "running with %s", name, _shown(soft), _shown(target), _shown(hard), e,
                        _shown(soft))
            return soft
        log.info("%s: raised the open-file limit (RLIMIT_NOFILE) from %s to %s (the hard limit)",
                 name, _shown(soft), _shown(target))
        return target
    log.info("%s: open-file limit (RLIMIT_NOFILE) %s, hard limit %s", name, _shown(soft),
             _shown(hard))
    return soft
