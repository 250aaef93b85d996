"""ListOffsets MAX_TIMESTAMP (KIP-734, KAFKA-16310): the offset of the record that carries the
largest timestamp, not the last offset of its batch — compressed or not, after a roll, a
restart (clean or with indexes rebuilt), and on a follower's copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.partition_log import PartitionLog
from common.protocol.list_offsets import MAX_TIMESTAMP
from common.record_batch import CompressionType
from common.records import build_batch
from common.log_config import LogConfig, TimestampPolicy
from tests.log_helpers import NOW, batch, open_log

BASE = NOW
SMALL = LogConfig(segment_bytes=600, index_interval_bytes=100)
CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY,
          CompressionType.LZ4, CompressionType.ZSTD]


def peak_batch(compression: CompressionType = CompressionType.NONE) -> bytes:
    """Three records whose middle one (offset 1 of the batch) has the largest timestamp."""
    return build_batch([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")],
                       timestamps=[BASE + 100, BASE + 400, BASE + 200], compression=compression)


def max_timestamp(log: PartitionLog) -> tuple[int, int]:
    found = log.offset_for_timestamp(MAX_TIMESTAMP)
    assert found is not None
    return found.timestamp, found.offset


@pytest.mark.parametrize("compression", CODECS, ids=lambda c: c.name)
def test_names_the_record_with_the_largest_timestamp(tmp_path: Path,
                                                     compression: CompressionType) -> None:
    log = open_log(tmp_path)
    log.append(peak_batch(compression), now_ms=NOW)
    assert max_timestamp(log) == (BASE + 400, 1)


def test_first_record_wins_a_tie(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(build_batch([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")],
                           timestamps=[BASE + 5, BASE + 9, BASE + 9]), now_ms=NOW)
    log.append(build_batch([(b"d", b"4")], timestamps=[BASE + 9]), now_ms=NOW)
    assert max_timestamp(log) == (BASE + 9, 1)


def test_after_segment_rolls_and_a_restart(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    log.append(batch(3, ts=BASE), now_ms=NOW)  # offsets 0-2
    log.append(peak_batch(CompressionType.LZ4), now_ms=NOW)  # offsets 3-5, peak at 4
    for _ in range(12):  # later, older-stamped batches in later segments
        log.append(batch(3, ts=BASE + 10), now_ms=NOW)
    assert len(list(tmp_path.glob("topic-0/*.log"))) > 2
    assert max_timestamp(log) == (BASE + 400, 4)
    log.close()
    assert max_timestamp(open_log(tmp_path, SMALL, had_clean_shutdown=True)) == (BASE + 400, 4)


def test_after_indexes_are_rebuilt(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    log.append(batch(2, ts=BASE), now_ms=NOW)
    log.append(peak_batch(CompressionType.ZSTD), now_ms=NOW)  # offsets 2-4, peak at 3
    log.close()
    for index in tmp_path.glob("topic-0/*index"):
        index.unlink()
    assert max_timestamp(open_log(tmp_path, SMALL)) == (BASE + 400, 3)


def test_on_a_followers_copy(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    leader.append(batch(4, ts=BASE), now_ms=NOW)
    leader.append(peak_batch(CompressionType.GZIP), now_ms=NOW)  # offsets 4-6, peak at 5
    copied = leader.read(0, 1 << 20).read_bytes()
    follower = open_log(tmp_path / "follower")
    follower.append(copied, now_ms=NOW, assign_offsets=False)
    assert max_timestamp(follower) == max_timestamp(leader) == (BASE + 400, 5)


def test_log_append_time_names_the_batchs_first_record(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(message_timestamp_type=TimestampPolicy.LOG_APPEND_TIME))
    log.append(batch(2), now_ms=NOW + 1)
    log.append(peak_batch(), now_ms=NOW + 7)  # offsets 2-4, all stamped NOW + 7
    assert max_timestamp(log) == (NOW + 7, 2)


def test_empty_log_has_no_answer(tmp_path: Path) -> None:
    assert open_log(tmp_path).offset_for_timestamp(MAX_TIMESTAMP) is None
