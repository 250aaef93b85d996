"""The cleaner over transactional logs (broker/log/cleaner_txn.py through the shell): aborted
data removed whole and kept out of the key map, committed data compacted, markers kept while
their transaction's data remains and then until their delete horizon (KIP-534), nothing
cleaned at or past the last stable offset."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.cleaner_manager import cut_offsets, last_stable_offset_of
from broker.log.txn_index import AbortedTxn
from broker.log.cleaner_snapshot import SegmentFile
from broker.log.compaction import OffsetMap
from broker.log.cleaner_swap import FAIL_POINTS
from broker.log.log_cleaner import Cleaner, PreparedClean
from broker.log.partition_log import PartitionLog
from common.control_records import decode_marker, marker_batch
from common.record_batch import CompressionType, RecordBatchHeader
from common.records import build_batch, decode_records
from common.log_config import LogConfig
from tests.log_helpers import NOW, open_log, read_all

RETENTION = 1000  # delete.retention.ms of these logs
COMPACT = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=100,
                    cleanup_policy=("compact",), delete_retention_ms=RETENTION)
P1, P2, P3, P4 = 1001, 1002, 1003, 1004


class Crash(Exception):
    """Stands in for kill -9 at a fail point."""


def put(log: PartitionLog, data: bytes) -> None:
    """Append as a replica does: the offsets the batch names (its base is the log end)."""
    log.append(data, now_ms=NOW, assign_offsets=False)
    log.update_high_watermark(log.log_end_offset)


# per log directory: the open transactions (producer id -> first offset), which the replica
# layer's producer state tracks to index an aborted transaction when its marker is appended
OPEN_TXNS: dict[Path, dict[int, int]] = {}


def data(log: PartitionLog, pairs: list[tuple[bytes, bytes | None]], *, producer_id: int = -1,
         txn: bool = False, codec: CompressionType = CompressionType.NONE) -> None:
    if txn:
        OPEN_TXNS.setdefault(log.directory, {}).setdefault(producer_id, log.log_end_offset)
    put(log, build_batch(pairs, base_offset=log.log_end_offset,  # type: ignore[arg-type]
                         timestamps=[NOW] * len(pairs), compression=codec,
                         producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                         base_sequence=0 if producer_id >= 0 else -1, is_transactional=txn))


def end(log: PartitionLog, producer_id: int, *, commit: bool) -> None:
    """A marker, indexed in the log's `.txnindex` as the replica layer does for an abort."""
    offset = log.log_end_offset
    open_txns = OPEN_TXNS.setdefault(log.directory, {})
    first = open_txns.pop(producer_id, offset)
    put(log, marker_batch(commit=commit, producer_id=producer_id, producer_epoch=0,
                          coordinator_epoch=0, timestamp_ms=NOW, base_offset=offset))
    if not commit:
        log.append_aborted_txn(AbortedTxn(producer_id, first, offset,
                                          min(open_txns.values(), default=offset + 1)))


def forget_indexes(log: PartitionLog) -> None:
    """Every segment's `.txnindex` as recovery leaves it: emptied, to be rebuilt (stale)."""
    for segment in log.segments:
        segment.txn_index.replace(())
        segment.txn_index_stale = True


def contents(log: PartitionLog) -> list[tuple[int, str]]:
    """(offset, what) of every record, and of every emptied batch (its last offset):
    `key=value`, `COMMIT(pid)` / `ABORT(pid)`, or `empty(pid)`."""
    out: list[tuple[int, str]] = []
    for header, raw in read_all(log):
        records = decode_records(raw, 0, header)
        if not records:
            out.append((header.last_offset, f"empty({header.producer_id})"))
        for r in records:
            if header.is_control:
                marker = decode_marker(r.key, r.value)
                assert marker is not None
                out.append((r.offset, f"{marker.type.name}({header.producer_id})"))
            else:
                value = "null" if r.value is None else r.value.decode()
                out.append((r.offset, f"{(r.key or b'').decode()}={value}"))
    return out


def header_at(log: PartitionLog, offset: int) -> RecordBatchHeader:
    return next(h for h, _ in read_all(log) if h.base_offset <= offset <= h.last_offset)


def clean(log: PartitionLog, now: int, *, first_dirty: int = 0,
          first_uncleanable: int | None = None) -> PreparedClean | None:
    uncleanable = log.active_segment.base_offset if first_uncleanable is None else first_uncleanable
    return Cleaner(OffsetMap(1000)).clean(
        log, first_dirty=first_dirty, first_uncleanable=uncleanable, now_ms=now,
        tombstones_due=first_dirty >= uncleanable)


def interleaved_log(tmp_path: Path, codec: CompressionType) -> PartitionLog:
    log = open_log(tmp_path, COMPACT)
    data(log, [(b"a", b"v0"), (b"b", b"v0")])                        # 0-1
    data(log, [(b"a", b"aborted")], producer_id=P1, txn=True, codec=codec)  # 2
    data(log, [(b"b", b"c2"), (b"c", b"c2")], producer_id=P2, txn=True, codec=codec)  # 3-4
    end(log, P1, commit=False)                                       # 5
    end(log, P2, commit=True)                                        # 6
    data(log, [(b"d", b"c3")], producer_id=P3, txn=True, codec=codec)  # 7
    end(log, P3, commit=True)                                        # 8
    data(log, [(b"d", b"v9")])                                       # 9
    data(log, [(b"e", b"c3b")], producer_id=P3, txn=True, codec=codec)  # 10
    end(log, P3, commit=True)                                        # 11
    log.roll(NOW)
    data(log, [(b"z", b"1")])                                        # 12, the active segment
    return log


@pytest.mark.parametrize(("codec", "stale"), [(CompressionType.NONE, False),
                                              (CompressionType.LZ4, False),
                                              (CompressionType.NONE, True)])
def test_aborted_data_goes_and_markers_stay_until_their_horizon(
        tmp_path: Path, codec: CompressionType, stale: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    log = interleaved_log(tmp_path, codec)
    if stale:  # the aborted transactions come from the log's markers instead
        forget_indexes(log)
    else:  # from the .txnindex entries: no marker is read ahead

        def unread(*_: object) -> None:
            raise AssertionError("a marker was read ahead although the indexes are whole")
        monkeypatch.setattr(SegmentFile, "marker", unread)
    prepared = clean(log, NOW)
    assert prepared is not None
    assert contents(log) == [
        (0, "a=v0"),  # the aborted a at 2 never entered the map: it shadows nothing
        (2, f"empty({P1})"),  # P1's aborted batch: its records gone, its header (P1's last) kept
        (3, "b=c2"), (4, "c=c2"),
        (5, f"ABORT({P1})"),  # data of its transaction remains before it (the empty batch)
        (6, f"COMMIT({P2})"),
        (8, f"COMMIT({P3})"),  # its batch at 7 was read in this cleaning: kept, unstamped
        (9, "d=v9"), (10, "e=c3b"), (11, f"COMMIT({P3})"), (12, "z=1")]
    # the cleaned segment keeps P1's aborted transaction in its .txnindex (LSO: P2's open
    # transaction at 3 when the marker was written)
    assert [g.aborted for g in prepared.groups] == [(AbortedTxn(P1, 2, 5, 3),)]
    assert log.segments[0].txn_index.entries == [AbortedTxn(P1, 2, 5, 3)]
    assert log.segments[0].txn_index.path.exists()
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [AbortedTxn(P1, 2, 5, 3)]
    assert header_at(log, 2).is_transactional and header_at(log, 2).producer_id == P1
    assert not header_at(log, 8).has_delete_horizon

    # no batch of P3's first transaction is left: its marker is stamped, not yet removed
    second = clean(log, NOW + 10, first_dirty=12)
    assert second is not None and second.earliest_delete_horizon == NOW + 10 + RETENTION
    stamped = header_at(log, 8)
    assert stamped.has_delete_horizon and stamped.base_timestamp == NOW + 10 + RETENTION
    assert (8, f"COMMIT({P3})") in contents(log)
    assert (5, f"ABORT({P1})") in contents(log)

    clean(log, NOW + 10 + RETENTION - 1, first_dirty=12)  # before the horizon: still there
    assert (8, f"COMMIT({P3})") in contents(log)
    clean(log, NOW + 10 + RETENTION, first_dirty=12)  # at it: gone
    leo = log.log_end_offset
    log.close()
    # reopened after a clean shutdown: the cleaned segment's .txnindex loads as written
    log = open_log(tmp_path, COMPACT, recovery_point=leo, high_watermark=leo,
                   had_clean_shutdown=True, cleaned_below=leo)
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [AbortedTxn(P1, 2, 5, 3)]
    assert contents(log) == [
        (0, "a=v0"), (2, f"empty({P1})"), (3, "b=c2"), (4, "c=c2"), (5, f"ABORT({P1})"),
        (6, f"COMMIT({P2})"), (9, "d=v9"), (10, "e=c3b"), (11, f"COMMIT({P3})"), (12, "z=1")]


def test_an_aborted_transaction_of_a_producer_that_wrote_on_goes_with_its_marker(
        tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    data(log, [(b"a", b"x"), (b"b", b"x")], producer_id=P1, txn=True)  # 0-1
    end(log, P1, commit=False)                                        # 2
    data(log, [(b"c", b"y")], producer_id=P1, txn=True)               # 3
    end(log, P1, commit=True)                                         # 4
    log.roll(NOW)
    data(log, [(b"z", b"1")])                                         # 5
    first = clean(log, NOW)
    assert first is not None
    # the aborted batch is not P1's last: deleted; its marker stays this time (the batch
    # was read before it), so does its .txnindex entry
    assert contents(log) == [(2, f"ABORT({P1})"), (3, "c=y"), (4, f"COMMIT({P1})"), (5, "z=1")]
    assert [g.aborted for g in first.groups] == [(AbortedTxn(P1, 0, 2, 3),)]
    assert log.segments[0].txn_index.entries == [AbortedTxn(P1, 0, 2, 3)]
    second = clean(log, NOW + 5, first_dirty=5)
    assert second is not None and [g.aborted for g in second.groups] == [()]
    # no data of it is left: the cleaned segment's .txnindex no longer holds it (no file)
    assert log.segments[0].txn_index.entries == []
    assert not log.segments[0].txn_index.path.exists()
    assert header_at(log, 2).base_timestamp == NOW + 5 + RETENTION  # stamped
    clean(log, NOW + 5 + RETENTION, first_dirty=5)
    assert contents(log) == [(3, "c=y"), (4, f"COMMIT({P1})"), (5, "z=1")]


def test_one_marker_past_its_horizon_goes_while_a_younger_one_stays(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    end(log, P1, commit=True)  # 0: a marker whose transaction left no data here
    data(log, [(b"p1", b"x")], producer_id=P1)  # 1: P1's last data (idempotent)
    log.roll(NOW)
    data(log, [(b"a", b"1")])  # 2
    clean(log, NOW)  # stamps the first marker: horizon NOW + RETENTION
    assert header_at(log, 0).base_timestamp == NOW + RETENTION
    end(log, P2, commit=False)  # 3: another, found removable half a retention later
    data(log, [(b"p2", b"y")], producer_id=P2)  # 4
    log.roll(NOW)
    data(log, [(b"b", b"1")])  # 5
    clean(log, NOW + RETENTION // 2, first_dirty=2)
    assert header_at(log, 3).base_timestamp == NOW + RETENTION // 2 + RETENTION
    assert (0, f"COMMIT({P1})") in contents(log)
    clean(log, NOW + RETENTION, first_dirty=5)
    assert contents(log) == [(1, "p1=x"), (2, "a=1"), (3, f"ABORT({P2})"), (4, "p2=y"),
                             (5, "b=1")]


def test_the_last_marker_of_a_producer_without_data_stays_as_an_empty_header(
        tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    data(log, [(b"a", b"x")], producer_id=P1, txn=True)  # 0
    end(log, P1, commit=True)                            # 1
    data(log, [(b"a", b"y")])                            # 2
    log.roll(NOW)
    data(log, [(b"z", b"1")])                            # 3
    clean(log, NOW)  # P1's batch is its last data batch: kept empty, the marker too
    assert contents(log) == [(0, f"empty({P1})"), (1, f"COMMIT({P1})"), (2, "a=y"), (3, "z=1")]
    # the empty batch was read: the marker stays; P1 keeps its empty batch for its sequence
    clean(log, NOW + 2 * RETENTION, first_dirty=3)
    assert contents(log) == [(0, f"empty({P1})"), (1, f"COMMIT({P1})"), (2, "a=y"), (3, "z=1")]


def test_nothing_at_or_past_the_last_stable_offset_is_cleaned(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    data(log, [(b"a", b"v0")])                                # 0
    data(log, [(b"b", b"open")], producer_id=P4, txn=True)    # 1: a transaction still open
    data(log, [(b"a", b"v2")])                                # 2
    log.roll(NOW)
    data(log, [(b"z", b"1")])                                 # 3
    ltc = cut_offsets(log, None, NOW, None, last_stable_offset=1)
    assert ltc.first_uncleanable == 1
    assert cut_offsets(log, None, NOW, None).first_uncleanable == 3
    clean(log, NOW, first_uncleanable=ltc.first_uncleanable)
    # a=v2 lies past the LSO: not mapped, so a=v0 stays; the open transaction is untouched
    assert contents(log) == [(0, "a=v0"), (1, "b=open"), (2, "a=v2"), (3, "z=1")]
    end(log, P4, commit=False)  # 4: aborted; the LSO moves past it
    log.roll(NOW)
    data(log, [(b"y", b"1")])   # 5
    clean(log, NOW, first_dirty=1)
    assert contents(log) == [(1, f"empty({P4})"), (2, "a=v2"), (3, "z=1"),
                             (4, f"ABORT({P4})"), (5, "y=1")]


class _Partition:
    last_stable_offset = 7


def test_the_broker_gives_the_cleaner_each_open_partitions_last_stable_offset() -> None:
    from common.topic_partition import TopicPartition

    hosted = {TopicPartition("t", 0): _Partition()}

    class Replicas:
        def get_partition(self, tp: TopicPartition) -> _Partition | None:
            return hosted.get(tp)

    assert last_stable_offset_of(Replicas(), TopicPartition("t", 0)) == 7
    assert last_stable_offset_of(Replicas(), TopicPartition("t", 1)) == 0  # not open: not cleaned


@pytest.mark.parametrize("step", FAIL_POINTS)
def test_a_crash_at_each_swap_step_keeps_the_old_or_the_new_transactional_log(
        tmp_path: Path, step: str) -> None:
    reference = interleaved_log(tmp_path / "ref", CompressionType.NONE)
    pre = contents(reference)
    clean(reference, NOW)
    post = contents(reference)
    log = interleaved_log(tmp_path / "crash", CompressionType.NONE)
    log.flush()

    def fail(at: str) -> None:
        if at == step:
            raise Crash(at)

    with pytest.raises(Crash):
        Cleaner(OffsetMap(1000), fail_point=fail).clean(
            log, first_dirty=0, first_uncleanable=log.active_segment.base_offset, now_ms=NOW)
    recovered = PartitionLog(log.directory, COMPACT, now_ms=NOW, recovery_point=0,
                             had_clean_shutdown=False)
    assert contents(recovered) == (pre if step == "after_cleaned" else post)
    assert not [p.name for p in recovered.directory.iterdir()
                if p.name.endswith((".cleaned", ".swap", ".deleted"))]
    # recovery left the .txnindex to be rebuilt: the cleaner reads the markers instead
    assert all(s.txn_index_stale for s in recovered.segments)
    prepared = clean(recovered, NOW)
    assert contents(recovered) == post
    assert prepared is not None and [g.aborted for g in prepared.groups] == [
        (AbortedTxn(P1, 2, 5, 3),)]
