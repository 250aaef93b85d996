"""common/file_limits.py: the soft limit a node raises to, the share of it segment files get,
the warning a broker logs when its partitions outnumber the files it keeps open, and the
raise itself (in a child process started with a low soft limit)."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from common.file_limits import (
    UNLIMITED,
    UNLIMITED_TARGET_FILES,
    limit_for_segment_files,
    open_files_warning,
    segment_files_allowed,
    target_soft_limit,
)


@pytest.mark.parametrize(("soft", "hard", "expected"), [
    (1024, 524_288, 524_288),  # a login shell under systemd
    (1024, 1024, 1024),  # nothing to raise
    (1024, UNLIMITED, UNLIMITED_TARGET_FILES),
    (UNLIMITED, UNLIMITED, UNLIMITED),
    (4096, 4096, 4096),
])
def test_target_soft_limit(soft: int, hard: int, expected: int) -> None:
    assert target_soft_limit(soft, hard) == expected


@pytest.mark.parametrize(("configured", "limit", "expected"), [
    (10_000, 1024, 512),  # half the limit: the rest is for sockets
    (10_000, 524_288, 10_000),
    (100, 1024, 100),
    (10_000, UNLIMITED, 10_000),
    (10_000, 1, 1),  # always room for the segment being written
])
def test_segment_files_allowed(configured: int, limit: int, expected: int) -> None:
    assert segment_files_allowed(configured=configured, limit=limit) == expected


def test_limit_for_segment_files_is_the_inverse() -> None:
    assert segment_files_allowed(configured=10**9, limit=limit_for_segment_files(5000)) == 5000


@pytest.mark.parametrize(("partitions", "configured", "limit", "expected"), [
    (500, 10_000, 1024, None),
    (512, 10_000, 1024, None),
    (5000, 10_000, 1024,
     "hosts 5000 partitions but keeps at most 512 segment files open (log.open.files.max 10000, "
     "open-file limit 1024): the least recently used are closed and reopened on use; raise the "
     "hard open-file limit (ulimit -Hn, LimitNOFILE) to at least 10000"),
    (20_000, 10_000, 524_288,
     "hosts 20000 partitions but keeps at most 10000 segment files open (log.open.files.max 10000, "
     "open-file limit 524288): the least recently used are closed and reopened on use; raise "
     "log.open.files.max to at least 20000"),
    (20_000, 10_000, UNLIMITED,
     "hosts 20000 partitions but keeps at most 10000 segment files open (log.open.files.max 10000, "
     "open-file limit unlimited): the least recently used are closed and reopened on use; raise "
     "log.open.files.max to at least 20000"),
])
def test_open_files_warning(partitions: int, configured: int, limit: int, expected: str | None) -> None:
    assert open_files_warning(partitions=partitions, configured=configured, limit=limit) == expected


_CHILD = """
import logging, resource, sys
from common.file_limits import raise_open_file_limit
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", stream=sys.stdout)
got = raise_open_file_limit("Broker 7")
print("limit", got, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


@pytest.mark.parametrize("soft", [256, None])
def test_a_node_raises_its_soft_limit_to_the_hard_limit(soft: int | None) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    start = hard if soft is None else min(soft, hard)

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (start, hard))

    out = subprocess.run([sys.executable, "-c", _CHILD], preexec_fn=lower, capture_output=True,
                         text=True, timeout=60, check=True).stdout.splitlines()
    target = target_soft_limit(start, hard)
    assert out[-1] == f"limit {target} {target}"
    if target != start:
        assert out[0] == (f"INFO Broker 7: raised the open-file limit (RLIMIT_NOFILE) from {start} to "
                          f"{target} (the hard limit)")
    else:
        assert out[0] == f"INFO Broker 7: open-file limit (RLIMIT_NOFILE) {start}, hard limit {hard}"
