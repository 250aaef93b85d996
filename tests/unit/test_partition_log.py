"""PartitionLog: append, read, roll, truncation, timestamps, retention and flushing."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from broker.log.partition_log import PartitionLog
from common.protocol.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from common.errors import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    RecordListTooLargeError,
    RecordTooLargeError,
    UnsupportedMessageFormatError,
)
from common.record_batch import (
    CRC_POS,
    TimestampType,
    iter_batches,
    parse_header,
    verify_crc,
)
from common.records import build_batch, decode_records
from common.log_config import LogConfig, TimestampPolicy
from tests.log_helpers import NOW, batch, open_log, read_all, values

SMALL = LogConfig(segment_bytes=1000, index_interval_bytes=100)


def fill(log: PartitionLog, batches: int, per_batch: int = 3, *, epoch: int = 0,
         ts: int = NOW) -> list[int]:
    """Append `batches` batches; return their first offsets."""
    firsts = []
    for i in range(batches):
        info = log.append(batch(per_batch, ts=ts + 10 * i, tag=f"b{i}"), now_ms=NOW,
                          leader_epoch=epoch)
        firsts.append(info.first_offset)
    return firsts


# ---- append ------------------------------------------------------------------------------


def test_append_assigns_consecutive_offsets_and_stamps_the_leader_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = log.append(batch(3), now_ms=NOW, leader_epoch=7)
    second = log.append(batch(2) + batch(4), now_ms=NOW, leader_epoch=7)
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset, second.batch_count) == (3, 8, 2)
    assert first.log_append_time == -1 and first.max_timestamp == NOW + 2
    assert log.log_end_offset == 9
    stored = read_all(log)
    assert [(h.base_offset, h.last_offset, h.partition_leader_epoch) for h, _ in stored] == [
        (0, 2, 7), (3, 4, 7), (5, 8, 7)]
    for header, data in stored:  # offset and epoch are outside the CRC
        verify_crc(data, 0, header)
    assert values(log)[-1] == (8, b"v-3")


def test_append_rejects_the_whole_request_when_any_batch_is_bad(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    corrupt = bytearray(batch(2))
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append(batch(1) + bytes(corrupt), now_ms=NOW)
    assert log.log_end_offset == 0 and log.active_segment.size == 0


@pytest.mark.parametrize(
    ("records", "error"),
    [
        (b"", InvalidRecordError),
        (batch(1)[:-3], CorruptRecordError),  # runs past the buffer
        (batch(1)[:16] + b"\x01" + batch(1)[17:], UnsupportedMessageFormatError),
        (build_batch([(b"k", b"v")])[:57] + (2).to_bytes(4, "big") + build_batch([(b"k", b"v")])[61:],
         CorruptRecordError),  # count changed: the CRC catches it first
    ],
)
def test_append_rejects_malformed_input(tmp_path: Path, records: bytes, error: type) -> None:
    log = open_log(tmp_path)
    with pytest.raises(error):
        log.append(records, now_ms=NOW)
    assert log.log_end_offset == 0


def test_append_rejects_a_count_that_disagrees_with_the_offset_range(tmp_path: Path) -> None:
    data = bytearray(batch(2))
    data[57:61] = (3).to_bytes(4, "big")
    header = parse_header(data)
    from common.record_batch import compute_crc
    data[CRC_POS:CRC_POS + 4] = compute_crc(data, 0, header).to_bytes(4, "big")
    with pytest.raises(InvalidRecordError, match="count"):
        open_log(tmp_path).append(bytes(data), now_ms=NOW)


def test_append_enforces_size_limits(tmp_path: Path) -> None:
    big = batch(50)
    log = open_log(tmp_path, LogConfig(max_message_bytes=len(big) - 1))
    with pytest.raises(RecordTooLargeError):
        log.append(big, now_ms=NOW)
    log = open_log(tmp_path / "b", LogConfig(segment_bytes=len(big) - 1))
    with pytest.raises(RecordListTooLargeError):
        log.append(big, now_ms=NOW)


def test_log_append_time_rewrites_max_timestamp_and_re_signs_the_crc(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(message_timestamp_type=TimestampPolicy.LOG_APPEND_TIME))
    info = log.append(batch(3, ts=5), now_ms=NOW + 99)
    assert info.log_append_time == NOW + 99
    [(header, data)] = read_all(log)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == NOW + 99
    verify_crc(data, 0, header)
    assert {r.timestamp for r in decode_records(data, 0, header)} == {NOW + 99}


def test_replica_append_keeps_the_leaders_offsets_and_epochs(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    leader.append(batch(2), now_ms=NOW, leader_epoch=1)
    leader.append(batch(3), now_ms=NOW, leader_epoch=4)
    follower = open_log(tmp_path / "follower")
    fetched = leader.read(0, 1 << 20).read_bytes()
    follower.append(fetched, now_ms=NOW, assign_offsets=False)
    assert follower.log_end_offset == 5
    assert follower.read(0, 1 << 20).read_bytes() == fetched
    assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries == [
        (1, 0), (4, 2)]
    with pytest.raises(OffsetsOutOfOrderError):
        follower.append(fetched, now_ms=NOW, assign_offsets=False)
    # one fetch holding a batch of the epoch the follower has and one of a new epoch after it
    leader.append(batch(1), now_ms=NOW, leader_epoch=4)
    leader.append(batch(2), now_ms=NOW, leader_epoch=6)
    follower.append(leader.read(5, 1 << 20).read_bytes(), now_ms=NOW, assign_offsets=False)
    assert follower.leader_epoch_cache.entries == [(1, 0), (4, 2), (6, 6)]
    assert follower.leader_epoch_cache.latest_epoch == 6


# ---- read --------------------------------------------------------------------------------


def test_read_starts_at_the_batch_holding_any_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    firsts = fill(log, 30)
    assert len(log.segments) > 3
    for offset in range(log.log_end_offset):
        header = parse_header(log.read(offset, 10_000).read_bytes(), require_body=False)
        assert header.base_offset == max(f for f in firsts if f <= offset)


def test_read_bounds(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    fill(log, 10)
    assert log.read(log.log_end_offset, 100).length == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(log.log_end_offset + 1, 100)
    one = read_all(log)[0][0].size
    assert log.read(0, 10).length == one  # min_one_batch: the first batch whole
    assert log.read(0, 10, min_one_batch=False).length == 10
    cut = log.read(0, one + 5).read_bytes()  # ends in a partial batch, as Kafka's does
    assert len(cut) == one + 5
    assert [h.base_offset for _, h in iter_batches(cut, allow_partial_tail=True)] == [0]


def test_read_never_passes_max_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    fill(log, 20)
    for hw in (0, 3, 9, 27, 30, 60):
        got = read_all(log, max_offset=hw)
        assert [h.base_offset for h, _ in got] == list(range(0, hw, 3))
        assert log.read(hw, 1000, max_offset=hw).length == 0


def test_read_below_log_start_is_out_of_range(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    fill(log, 20)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(9)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(8, 100)
    assert read_all(log)[0][0].base_offset == 9


# ---- roll --------------------------------------------------------------------------------


def test_roll_by_size_keeps_segments_under_segment_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    fill(log, 40)
    assert all(s.size <= SMALL.segment_bytes for s in log.segments)
    assert [s.base_offset for s in log.segments] == sorted({s.base_offset for s in log.segments})
    names = sorted(p.name for p in (tmp_path / "topic-0").glob("*.log"))
    assert names == [f"{s.base_offset:020d}.log" for s in log.segments]
    for segment in log.segments[:-1]:  # rolled segments are flushed with their indexes
        assert segment.offset_index.path.exists() and segment.time_index.path.exists()
    assert log.recovery_point == log.active_segment.base_offset


def test_rolls_counts_the_segments_the_log_rolled(tmp_path: Path) -> None:
    """What an append's caller compares to learn that it rolled (replica_appends snapshots the
    producer state there): every new segment counts, a roll of an empty active segment at its own
    base makes none, and a reopened log counts from 0."""
    log = open_log(tmp_path, SMALL)
    assert log.rolls == 0
    fill(log, 40)
    assert log.rolls == len(log.segments) - 1 > 2
    before = log.rolls
    log.roll(NOW)                     # a new, empty active segment
    log.roll(NOW)                     # nothing to roll: it is empty at the log end
    assert log.rolls == before + 1 and log.active_segment.size == 0
    log.close()
    reopened = open_log(tmp_path, SMALL)
    assert reopened.rolls == 0 and len(reopened.segments) == before + 2
    reopened.close()


def test_roll_by_message_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_ms=1000))
    log.append(batch(1, ts=NOW), now_ms=NOW)
    log.append(batch(1, ts=NOW + 1000), now_ms=NOW)
    assert len(log.segments) == 1
    log.append(batch(1, ts=NOW + 1001), now_ms=NOW)
    assert [s.base_offset for s in log.segments] == [0, 2]


@pytest.mark.parametrize("jitter", [1, 400, 1000, 5000])
def test_segment_jitter_rolls_each_segment_somewhat_before_segment_ms(tmp_path: Path, jitter: int) -> None:
    """Kafka's segment.jitter.ms: a segment rolls at an age in (segment.ms - min(jitter,
    segment.ms), segment.ms]; segments of one log get different shares."""
    log = open_log(tmp_path, LogConfig(segment_ms=1000, segment_jitter_ms=jitter))
    ages = []
    ts = NOW
    for _ in range(8):  # one segment per round: append 1 ms apart until it rolls
        first = ts
        log.append(batch(1, ts=ts), now_ms=NOW)
        rolled = len(log.segments)
        while len(log.segments) == rolled:
            ts += 1
            log.append(batch(1, ts=ts), now_ms=NOW)
            assert ts - first <= 1001, "never rolled"
        ages.append(ts - first)
    assert all(1000 - min(jitter, 1000) < age <= 1001 for age in ages), ages
    assert jitter == 1 or len(set(ages)) > 1, ages


def test_roll_by_wall_clock_when_batches_carry_no_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_ms=1000))
    log.append(batch(1, ts=-1), now_ms=NOW)
    log.append(batch(1, ts=-1), now_ms=NOW + 1000)
    assert len(log.segments) == 1
    log.append(batch(1, ts=-1), now_ms=NOW + 1001)
    assert len(log.segments) == 2


def test_roll_when_the_index_is_full(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_index_bytes=16, index_interval_bytes=0))
    fill(log, 6)
    assert all(len(s.offset_index) <= 2 for s in log.segments)
    assert len(log.segments) >= 2
    assert [v for _, v in values(log)][-1] == b"b5-2"


# ---- truncation --------------------------------------------------------------------------


@pytest.mark.parametrize(("target", "expected_end"), [
    (30, 30), (29, 27), (27, 27), (15, 15), (16, 15), (1, 0), (0, 0)])
def test_truncate_to_removes_whole_batches(tmp_path: Path, target: int, expected_end: int) -> None:
    log = open_log(tmp_path, SMALL)
    fill(log, 5, epoch=1)
    fill(log, 5, epoch=2)
    log.update_high_watermark(30)
    log.truncate_to(target)
    assert log.log_end_offset == expected_end
    assert log.high_watermark == expected_end
    assert log.recovery_point <= expected_end
    assert [o for o, _ in values(log)] == list(range(expected_end))
    assert all(start < expected_end for _, start in log.leader_epoch_cache.entries)
    info = log.append(batch(1), now_ms=NOW, leader_epoch=3)
    assert info.first_offset == expected_end
    assert log.end_offset_for_epoch(3) == (3, expected_end + 1)


def test_truncate_below_the_first_segment_empties_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    fill(log, 20)
    log.update_high_watermark(60)
    log.delete_old_segments(NOW)
    log.maybe_increment_log_start_offset(30)
    log.delete_old_segments(NOW)
    first_base = log.segments[0].base_offset
    assert log.truncate_to(first_base - 1)
    assert (log.log_start_offset, log.log_end_offset) == (first_base - 1, first_base - 1)
    assert log.leader_epoch_cache.entries == []


def test_truncate_beyond_the_end_is_a_no_op(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 2)
    assert not log.truncate_to(6)
    assert log.log_end_offset == 6


def test_truncate_at_or_beyond_the_end_drops_an_epoch_entry_with_nothing_after_it(tmp_path: Path) -> None:
    # A leader of epoch 1 became leader of epoch 2 (assigned at its log end, nothing appended)
    # and then follows a leader of epoch 3: Kafka's truncateTo trims the cache even when no
    # offset goes, so this log no longer claims epoch 2 for its log end.
    log = open_log(tmp_path)
    fill(log, 2, epoch=1)
    log.leader_epoch_cache.assign(2, log.log_end_offset, write=False)
    assert not log.truncate_to(log.log_end_offset)
    assert log.leader_epoch_cache.entries == [(1, 0)]
    assert not log.leader_epoch_cache.owes_write
    assert log.end_offset_for_epoch(2) == (-1, -1)  # an epoch later than any it has: undefined, as Kafka
    reopened = open_log(tmp_path)
    assert reopened.leader_epoch_cache.entries == [(1, 0)]


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    fill(log, 20)
    log.truncate_fully_and_start_at(1000, now_ms=NOW)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (1000, 1000, 1000)
    assert log.append(batch(1), now_ms=NOW).first_offset == 1000
    log.reap_deleted_segments(NOW)
    assert sorted(p.name for p in (tmp_path / "topic-0").glob("*.log*")) == [
        f"{1000:020d}.log"]


# ---- timestamps and epochs ---------------------------------------------------------------


def test_offset_for_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    fill(log, 20, ts=NOW)  # batch i holds timestamps NOW+10i .. NOW+10i+2
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP).offset == 0
    assert log.offset_for_timestamp(LATEST_TIMESTAMP).offset == 60
    assert log.offset_for_timestamp(MAX_TIMESTAMP)[:2] == (NOW + 192, 59)
    for i in range(20):
        assert log.offset_for_timestamp(NOW + 10 * i)[:2] == (NOW + 10 * i, 3 * i)
        assert log.offset_for_timestamp(NOW + 10 * i + 1)[:2] == (NOW + 10 * i + 1, 3 * i + 1)
        after_batch = log.offset_for_timestamp(NOW + 10 * i + 3)
        if i < 19:  # between batches: the next batch's first record
            assert after_batch[:2] == (NOW + 10 * i + 10, 3 * i + 3)
        else:
            assert after_batch is None
    assert log.offset_for_timestamp(0)[:2] == (NOW, 0)


def test_end_offset_for_epoch_follows_the_cache(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 2, epoch=1)
    fill(log, 2, epoch=3)
    assert log.end_offset_for_epoch(1) == (1, 6)
    assert log.end_offset_for_epoch(2) == (1, 6)
    assert log.end_offset_for_epoch(3) == (3, 12)
    assert log.end_offset_for_epoch(0) == (0, 0)
    assert log.end_offset_for_epoch(4) == (-1, -1)


# ---- retention ---------------------------------------------------------------------------


def test_time_retention_deletes_old_segments_below_the_high_watermark(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL.replace(retention_ms=1000, file_delete_delay_ms=500))
    fill(log, 10, ts=NOW)
    fill(log, 10, ts=NOW + 5000)
    old = [s for s in log.segments if s.max_timestamp < NOW + 5000]
    assert log.delete_old_segments(NOW + 5500) == 0  # high watermark is 0
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments(NOW + 5500) == len(old)
    assert log.log_start_offset == log.segments[0].base_offset > 0
    partition = tmp_path / "topic-0"
    assert len(list(partition.glob("*.deleted"))) == 3 * len(old)
    log.reap_deleted_segments(NOW + 5500 + 500)
    assert not list(partition.glob("*.deleted"))
    assert log.delete_old_segments(NOW + 10**9) == len(log.segments) - 1  # never the active one
    assert len(log.segments) == 1


def test_size_retention_keeps_at_most_retention_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL.replace(retention_bytes=2500))
    fill(log, 40)
    log.update_high_watermark(log.log_end_offset)
    log.delete_old_segments(NOW)
    assert log.size_in_bytes <= 2500 + SMALL.segment_bytes
    assert sum(s.size for s in log.segments[1:]) <= 2500
    assert values(log)[0][0] == log.log_start_offset


def test_retention_moves_the_epoch_cache_start(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL.replace(retention_bytes=0))
    fill(log, 10, epoch=1)
    fill(log, 10, epoch=2)
    log.update_high_watermark(log.log_end_offset)
    log.delete_old_segments(NOW)
    assert log.leader_epoch_cache.entries[0][1] == log.log_start_offset


# ---- durability --------------------------------------------------------------------------


def test_flush_messages_moves_the_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(flush_messages=5))
    log.append(batch(3), now_ms=NOW)
    assert log.recovery_point == 0
    log.append(batch(3), now_ms=NOW)
    assert log.recovery_point == 6


def test_a_flush_makes_an_owed_epoch_rewrite_durable_before_the_data(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # recovery cuts batches of an epoch the checkpoint lacks: synced data needs its epoch entry
    log = open_log(tmp_path, LogConfig())
    fill(log, 1, epoch=4)
    assert log.leader_epoch_cache.needs_sync
    order: list[str] = []
    sync_epochs, flush_segment = log.leader_epoch_cache.sync, type(log._segments[0]).flush
    monkeypatch.setattr(log.leader_epoch_cache, "sync", lambda: (order.append("epochs"), sync_epochs())[1])
    monkeypatch.setattr(type(log._segments[0]), "flush",
                        lambda segment: (order.append("segment"), flush_segment(segment))[1])
    log.flush()
    assert order[:2] == ["epochs", "segment"] and not log.leader_epoch_cache.needs_sync
    assert log.recovery_point == 3


def test_flush_ms(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(flush_ms=1000))
    log.append(batch(3), now_ms=NOW)
    assert not log.flush_if_due(NOW + 999)
    assert log.flush_if_due(NOW + 1000)
    assert log.recovery_point == 3


def test_clean_reopen_serves_the_same_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    fill(log, 25, epoch=2)
    before = read_all(log)
    log.close()
    again = open_log(tmp_path, SMALL, recovery_point=75, had_clean_shutdown=True)
    assert again.log_end_offset == 75
    assert read_all(again) == before
    assert again.leader_epoch_cache.entries == [(2, 0)]
    assert again.append(batch(1), now_ms=NOW).first_offset == 75


def test_random_operations_match_a_model(tmp_path: Path) -> None:
    """Appends, reads, truncations, rolls and reopens against a list of expected batches."""
    rng = random.Random(1234)
    log = open_log(tmp_path, SMALL)
    model: list[tuple[int, bytes]] = []  # (base offset, value tag) per batch, in order
    for step in range(300):
        op = rng.random()
        if op < 0.6:
            count = rng.randint(1, 5)
            info = log.append(batch(count, tag=f"s{step}"), now_ms=NOW, leader_epoch=step // 50)
            model.append((info.first_offset, f"s{step}".encode()))
        elif op < 0.7 and model:
            target = rng.randint(0, log.log_end_offset)
            log.truncate_to(target)
            model = [(base, tag) for base, tag in model if base < log.log_end_offset]
        elif op < 0.75:
            log.roll(NOW)
        elif op < 0.8:
            log.close()
            log = open_log(tmp_path, SMALL, recovery_point=log.recovery_point,
                           had_clean_shutdown=True)
        got = [(h.base_offset, decode_records(d, 0, h)[0].value.split(b"-")[0])
               for h, d in read_all(log)]
        assert got == model, f"step {step}"
    log.close()


@pytest.mark.parametrize("new", [False, True])
def test_files_are_kafkas(tmp_path: Path, new: bool) -> None:
    log = open_log(tmp_path, SMALL, new=new)
    fill(log, 12)
    log.close()
    names = sorted(os.listdir(tmp_path / "topic-0"))
    assert "leader-epoch-checkpoint" in names
    assert {n.rsplit(".", 1)[1] for n in names if "." in n} == {"log", "index", "timeindex"}
    assert (tmp_path / "topic-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"


def test_topic_overrides_parse_kafka_names() -> None:
    from common.config_schema import ConfigError
    from common.topic_config import with_topic_overrides

    config = with_topic_overrides(LogConfig(), {"cleanup.policy": "delete", "retention.ms": "5",
                                                "message.timestamp.type": "LogAppendTime"})
    assert (config.cleanup_policy, config.retention_ms) == (("delete",), 5)
    assert config.message_timestamp_type is TimestampPolicy.LOG_APPEND_TIME
    with pytest.raises(ConfigError, match="cleanup.policy"):
        with_topic_overrides(LogConfig(), {"cleanup.policy": "compacted"})
    with pytest.raises(ConfigError, match="did you mean 'retention.ms'"):
        with_topic_overrides(LogConfig(), {"retention.mss": "5"})


def test_loading_a_log_cuts_an_epoch_entry_at_its_end_without_rewriting_the_checkpoint(tmp_path: Path) -> None:
    """A leader of an empty log holds (epoch, 0); every load cuts it at log end offset 0 in
    memory and leaves the file as it is (writing it was two fsyncs per log at each restart)."""
    log = open_log(tmp_path)
    log.leader_epoch_cache.assign(3, 0)
    log.close()
    checkpoint = log.directory / "leader-epoch-checkpoint"
    written = checkpoint.stat().st_mtime_ns, checkpoint.read_bytes()
    for _ in range(2):  # and again from the same file: the same cut
        reopened = open_log(tmp_path)
        assert reopened.leader_epoch_cache.entries == []
        assert (checkpoint.stat().st_mtime_ns, checkpoint.read_bytes()) == written
        reopened.close()


# ---- a new log's segment file, created at its first use ----------------------------------


SEGMENT_FILE = f"{0:020d}.log"


def test_a_new_log_creates_its_segment_file_at_its_first_append(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A new log's directory holds no file until data comes (one inode per new log, not two);
    until then it reads, truncates and closes as an empty log does, and its segment's time is
    its creation's (ListOffsets v0 asks it). Once it holds data, a clean close writes its
    indexes (none indexed yet) and the next clean open trusts them."""
    log = open_log(tmp_path, new=True)
    segment_file = log.directory / SEGMENT_FILE
    assert os.listdir(log.directory) == [] and not log.active_segment.has_file
    assert not {"offset_index", "time_index", "txn_index"} & vars(log.active_segment).keys()  # nor indexes
    assert log.read(0, 1000).length == 0 and not log.truncate_to(0)
    assert log.active_segment.modified_ms() == NOW and log.active_segment.largest_timestamp == NOW
    log.flush()
    assert not segment_file.exists()
    fill(log, 2)
    assert segment_file.exists() and log.active_segment.has_file
    log.close()  # before any read: appends below index.interval.bytes index nothing
    assert {f"{0:020d}.index", f"{0:020d}.timeindex"} <= set(os.listdir(log.directory))
    with caplog.at_level("WARNING"):
        reopened = open_log(tmp_path, had_clean_shutdown=True)
    assert not [r for r in caplog.records if "Rebuilding" in r.getMessage()]
    assert values(reopened) == [(0, b"b0-0"), (1, b"b0-1"), (2, b"b0-2"), (3, b"b1-0"), (4, b"b1-1"), (5, b"b1-2")]


@pytest.mark.parametrize("clean", [True, False])
def test_a_log_never_written_reopens_without_creating_its_file(tmp_path: Path, clean: bool) -> None:
    """A directory without a segment file (a log never written, after a clean stop or a crash)
    loads as one empty segment whose file still waits for the first append."""
    log = open_log(tmp_path, new=True)
    if clean:
        log.close()
    reopened = open_log(tmp_path, had_clean_shutdown=clean)
    assert reopened.log_end_offset == 0 and not (reopened.directory / SEGMENT_FILE).exists()
    fill(reopened, 1)
    assert (reopened.directory / SEGMENT_FILE).exists() and values(reopened)[-1] == (2, b"b0-2")


def test_a_new_log_truncated_fully_before_any_append(tmp_path: Path) -> None:
    """A follower of a leader whose log starts later restarts its empty log there: the segment
    whose file was never created is deleted without one."""
    log = open_log(tmp_path, new=True)
    log.truncate_fully_and_start_at(40)
    assert (log.log_start_offset, log.log_end_offset) == (40, 40)
    assert not [n for n in os.listdir(log.directory) if n.endswith(".deleted")]  # nothing to rename
    fill(log, 1)
    assert values(log) == [(40, b"b0-0"), (41, b"b0-1"), (42, b"b0-2")]
    log.delete_old_segments(NOW)
    log.reap_deleted_segments(NOW + 10**9)
    assert sorted(n for n in os.listdir(log.directory) if n.endswith(".log")) == [f"{40:020d}.log"]


def test_the_batch_just_appended_is_found_without_reading_the_file(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A follower's fetch (or a consumer's at the high watermark) asks for the batch just
    appended: no header read from the last index entry on (one pread per batch after it)."""
    log = open_log(tmp_path, LogConfig(index_interval_bytes=4096))
    fill(log, 20, epoch=2)
    first = log.append(batch(3), now_ms=NOW, leader_epoch=5).first_offset
    segment = log.segments[-1]
    reads: list[int] = []
    real_pread = os.pread

    def counted(fd: int, length: int, position: int) -> bytes:
        reads.append(position)
        return real_pread(fd, length, position)

    monkeypatch.setattr(os, "pread", counted)
    found = [segment.translate_offset(offset) for offset in range(first, first + 3)]
    assert reads == [] and segment.translate_offset(first + 3) is None
    monkeypatch.undo()
    position, header = found[0] or (-1, None)
    assert found == [(position, header)] * 3
    assert header == parse_header(os.pread(segment.file().fd, 61, position), require_body=False)
    assert header is not None and (header.base_offset, header.partition_leader_epoch) == (first, 5)
    log.truncate_to(first)  # the batch before it is the last one again, as the file says
    before = segment.translate_offset(first - 1)
    assert before is not None and before[1].last_offset == first - 1
    assert segment.translate_offset(first) is None
    log.close()
    reopened = open_log(tmp_path, LogConfig(index_interval_bytes=4096), recovery_point=0)
    assert reopened.segments[-1].translate_offset(first - 1) == before  # recovered, as stored
    reopened.close()
