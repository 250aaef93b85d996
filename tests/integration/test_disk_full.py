"""A real write failure: a child process appends under RLIMIT_FSIZE until the kernel refuses
a write (EFBIG, with SIGXFSZ ignored), the way a full disk refuses one mid-batch. The log
must answer KafkaStorageError and keep no partial batch; after an unclean reopen every
acknowledged batch is readable and the log accepts appends again."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from broker.log.partition_log import PartitionLog
from common.record_batch import iter_batches
from common.records import decode_records
from common.log_config import LogConfig

NOW = 1_700_000_000_000
CHILD_TIMEOUT_S = 60
MAX_APPENDS = 10_000  # the child's loop bound: far more than any limit below allows
CONFIG = LogConfig()  # one 1 GiB segment: the file size limit is what stops the appends


def make_batch(i: int, value_size: int) -> bytes:
    """Batch i: one record whose value starts with i; every batch of a size is as long.

    Self-contained: the child process gets this function's source.
    """
    from common.records import build_batch

    value = (b"value-%06d-" % i).ljust(value_size, b"x")
    return build_batch([(b"key-%06d" % i, value)], timestamps=[1_700_000_000_000 + i])


def expected_value(i: int, value_size: int) -> bytes:
    """The value `make_batch(i, value_size)` holds."""
    return (b"value-%06d-" % i).ljust(value_size, b"x")


CHILD_BODY = """
import json, resource, signal, sys
from pathlib import Path

from common.errors import KafkaStorageError
from common.topic_config import LogConfig
from broker.log.partition_log import PartitionLog

directory, limit, value_size, per_append, max_appends = sys.argv[1:]
limit, value_size, per_append, max_appends = map(int, (limit, value_size, per_append,
                                                       max_appends))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG from write(), not a killed process
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
log = PartitionLog(Path(directory) / "topic-0", LogConfig(), now_ms=1_700_000_000_000)
acked_batches, acked_bytes, last_offset, error = 0, 0, -1, None
for _ in range(max_appends):
    batches = [make_batch(acked_batches + j, value_size) for j in range(per_append)]
    try:
        info = log.append(b"".join(batches), now_ms=1_700_000_000_000, leader_epoch=1)
    except KafkaStorageError as e:
        error = str(e)
        break
    acked_batches += per_append
    acked_bytes += sum(map(len, batches))
    last_offset = info.last_offset
print(json.dumps({"acked_batches": acked_batches, "acked_bytes": acked_bytes,
                  "last_offset": last_offset, "error": error}))
"""


def run_child(directory: Path, limit: int, value_size: int, per_append: int) -> dict:
    script = textwrap.dedent(inspect.getsource(make_batch)) + CHILD_BODY
    result = subprocess.run(
        [sys.executable, "-c", script, str(directory), str(limit), str(value_size),
         str(per_append), str(MAX_APPENDS)],
        capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def read_values(partition_log: PartitionLog) -> list[tuple[int, bytes | None]]:
    out = []
    offset = partition_log.log_start_offset
    while offset < partition_log.log_end_offset:
        data = partition_log.read(offset, 1 << 20).read_bytes()
        for pos, header in iter_batches(data):
            out += [(r.offset, r.value) for r in decode_records(data, pos, header)]
            offset = header.next_offset
    return out


CASES = [
    # (value size, batches per append, appends that fit before the failing one)
    # One small batch per append: a single write() cut short, then EFBIG.
    pytest.param(1_000, 1, 40, id="single-write"),
    # Appends over 64 KiB go out through writev, which the limit also cuts mid-batch.
    pytest.param(4_000, 20, 3, id="writev"),
]


@pytest.mark.parametrize(("value_size", "per_append", "appends_that_fit"), CASES)
def test_append_after_disk_full_keeps_only_acknowledged_batches(
        tmp_path: Path, value_size: int, per_append: int, appends_that_fit: int) -> None:
    batch_size = len(make_batch(0, value_size))
    append_size = batch_size * per_append
    # The limit falls in the middle of a batch of the first append that does not fit.
    limit = appends_that_fit * append_size + append_size // 2 + batch_size // 3

    outcome = run_child(tmp_path, limit, value_size, per_append)

    acked = outcome["acked_batches"]
    assert outcome["error"] is not None, "the file size limit was never hit"
    assert "failed" in outcome["error"]
    assert acked == appends_that_fit * per_append
    assert outcome["last_offset"] == acked - 1
    expected_bytes = sum(len(make_batch(i, value_size)) for i in range(acked))
    assert outcome["acked_bytes"] == expected_bytes
    segment_path = tmp_path / "topic-0" / f"{0:020d}.log"
    assert sorted((tmp_path / "topic-0").glob("*.log")) == [segment_path]
    # The failed append was undone in the child: no partial batch before any recovery.
    assert segment_path.stat().st_size == expected_bytes

    reopened = PartitionLog(tmp_path / "topic-0", CONFIG, now_ms=NOW, recovery_point=0,
                            had_clean_shutdown=False)
    try:
        assert reopened.log_end_offset == acked
        assert segment_path.stat().st_size == expected_bytes
        assert read_values(reopened) == [(i, expected_value(i, value_size))
                                         for i in range(acked)]
        info = reopened.append(make_batch(acked, value_size), now_ms=NOW, leader_epoch=1)
        assert info.first_offset == acked
        assert read_values(reopened)[-1] == (acked, expected_value(acked, value_size))
        assert reopened.leader_epoch_cache.latest_epoch == 1
    finally:
        reopened.close()
