"""The keep/drop rule of log compaction (broker/log/compaction.py): tables, the batch
rewrite, and a property test over random keyed writes and cleaning schedules."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.compaction import (
    BatchFilterResult,
    BatchRetention,
    RETENTION_OF_CODE,
    OffsetMap,
    batch_retention,
    batch_retentions,
    filter_batch,
    last_batch_of_producers,
    map_batch,
    rebuild_batch,
)
from broker.log.record_scan import scan_batch
from common.record_batch import (
    CompressionType,
    TimestampType,
    parse_header,
    read_batches,
)
from common.records import Record, build_batch, decode_records

NOW = 1_000_000
DAY = 86_400_000
T0 = NOW - 10_000  # record time, older than any lag below


def rec(offset: int, key: bytes | None, value: bytes | None, ts: int = T0) -> Record:
    return Record(offset=offset, timestamp=ts, key=key, value=value)


def batch(records: list[Record], **kw: object) -> tuple[bytes, object]:
    data = build_batch(records, base_offset=records[0].offset if records else 0, **kw)  # type: ignore[arg-type]
    return data, parse_header(data)


def decide(records: list[Record], mapped: dict[bytes, int], *, map_end: int = 100,
           now: int = NOW, lag_horizon: int = NOW, producers: dict[int, int] | None = None,
           aborted: bool = False, **kw: object) -> BatchFilterResult:
    data, header = batch(records, **kw)
    offset_map = OffsetMap(1000)
    for key, offset in mapped.items():
        offset_map.put(key, offset)
    return filter_batch(header, scan_batch(data, header).records, offset_map=offset_map,  # type: ignore[arg-type]
                        map_end_offset=map_end, now_ms=now, delete_retention_ms=DAY,
                        lag_horizon_ms=lag_horizon, last_offsets_of_producers=producers or {},
                        aborted=aborted)


def offsets(result: BatchFilterResult) -> list[int]:
    return [r.offset for r in result.kept]


# (name, records, key map, extra arguments, expected retention, expected kept offsets)
CASES = [
    ("latest of each key stays whole", [rec(0, b"a", b"1"), rec(1, b"b", b"1")],
     {b"a": 0, b"b": 1}, {}, BatchRetention.KEEP, [0, 1]),
    ("superseded record drops", [rec(0, b"a", b"1"), rec(1, b"b", b"1")],
     {b"a": 5, b"b": 1}, {}, BatchRetention.REWRITE, [1]),
    ("duplicates inside one batch: the last stays", [rec(0, b"a", b"1"), rec(1, b"a", b"2")],
     {b"a": 1}, {}, BatchRetention.REWRITE, [1]),
    ("every record superseded: batch deleted", [rec(0, b"a", b"1"), rec(1, b"a", b"2")],
     {b"a": 9}, {}, BatchRetention.DELETE, []),
    ("record past the map's end stays", [rec(0, b"a", b"1"), rec(1, b"a", b"2")],
     {b"a": 0}, {"map_end": 1}, BatchRetention.KEEP, [0, 1]),
    ("unmapped key before the map end stays", [rec(0, b"z", b"1")],
     {b"a": 9}, {}, BatchRetention.KEEP, [0]),
    ("keyless record drops", [rec(0, None, b"1"), rec(1, b"a", b"1")],
     {b"a": 1}, {}, BatchRetention.REWRITE, [1]),
    ("tombstone, first cleaning: kept, horizon stamped", [rec(0, b"a", None)],
     {b"a": 0}, {}, BatchRetention.REWRITE, [0]),
    ("superseded tombstone drops", [rec(0, b"a", None), rec(1, b"b", b"1")],
     {b"a": 4, b"b": 1}, {}, BatchRetention.REWRITE, [1]),
    ("record younger than min.compaction.lag stays",
     [rec(0, b"a", b"1", ts=NOW - 10), rec(1, b"b", b"1")],
     {b"a": 9, b"b": 9}, {"lag_horizon": NOW - 100}, BatchRetention.REWRITE, [0]),
    ("producer's last batch stays, empty", [rec(0, b"a", b"1")],
     {b"a": 9}, {"producer_id": 7, "producer_epoch": 0, "base_sequence": 0,
                 "producers": {7: 0}}, BatchRetention.RETAIN_EMPTY, []),
    ("producer's earlier batch may go", [rec(0, b"a", b"1")],
     {b"a": 9}, {"producer_id": 7, "producer_epoch": 0, "base_sequence": 0,
                 "producers": {7: 50}}, BatchRetention.DELETE, []),
    ("committed transactional data is compacted as any", [rec(0, b"a", b"1"), rec(1, b"b", b"1")],
     {b"a": 9, b"b": 1}, {"producer_id": 7, "producer_epoch": 0, "base_sequence": 0,
                          "is_transactional": True}, BatchRetention.REWRITE, [1]),
    ("aborted transactional data keeps nothing", [rec(0, b"a", b"1")],
     {b"a": 0}, {"producer_id": 7, "producer_epoch": 0, "base_sequence": 0,
                 "is_transactional": True, "aborted": True}, BatchRetention.DELETE, []),
    ("aborted last batch of its producer: an empty header", [rec(0, b"a", b"1")],
     {b"a": 0}, {"producer_id": 7, "producer_epoch": 0, "base_sequence": 0,
                 "is_transactional": True, "aborted": True, "producers": {7: 0}},
     BatchRetention.RETAIN_EMPTY, []),
    ("control batch left alone", [rec(0, None, b"\x00\x00\x00\x00")],
     {}, {"producer_id": 7, "producer_epoch": 0, "is_control": True,
          "is_transactional": True}, BatchRetention.KEEP, []),
]


@pytest.mark.parametrize(("records", "mapped", "extra", "retention", "kept"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_keep_drop_rule(records: list[Record], mapped: dict[bytes, int], extra: dict[str, object],
                        retention: BatchRetention, kept: list[int]) -> None:
    result = decide(records, mapped, **extra)  # type: ignore[arg-type]
    assert result.retention is retention
    if retention is not BatchRetention.KEEP or kept:
        assert offsets(result) == kept


def test_tombstone_horizon_is_stamped_then_honoured() -> None:
    first = decide([rec(0, b"a", None)], {b"a": 0})
    assert first.delete_horizon_ms == NOW + DAY
    data, header = batch([rec(0, b"a", None)])
    stamped = rebuild_batch(header, data, scan_batch(data, header), first.kept,  # type: ignore[arg-type]
                            first.delete_horizon_ms)
    stamped_header = parse_header(stamped)
    assert stamped_header.has_delete_horizon and stamped_header.base_timestamp == NOW + DAY
    assert [r.timestamp for r in decode_records(stamped, 0, stamped_header)] == [T0]
    offset_map = OffsetMap(10)
    offset_map.put(b"a", 0)

    def again(now: int) -> BatchFilterResult:
        return filter_batch(stamped_header, scan_batch(stamped, stamped_header).records,
                            offset_map=offset_map, map_end_offset=1, now_ms=now,
                            delete_retention_ms=DAY, lag_horizon_ms=now,
                            last_offsets_of_producers={})

    assert again(NOW + DAY - 1).retention is BatchRetention.KEEP  # before the horizon
    assert again(NOW + DAY).retention is BatchRetention.DELETE  # at/after it


@pytest.mark.parametrize("codec", list(CompressionType))
@pytest.mark.parametrize("timestamp_type", list(TimestampType))
def test_rebuilt_batch_keeps_offsets_producer_fields_and_codec(
        codec: CompressionType, timestamp_type: TimestampType) -> None:
    records = [rec(10 + i, b"k%d" % (i % 2), b"v%d" % i, ts=T0 + i) for i in range(4)]
    data = build_batch(records, base_offset=10, compression=codec, producer_id=3,
                       producer_epoch=2, base_sequence=40, partition_leader_epoch=5,
                       timestamp_type=timestamp_type)
    header = parse_header(data)
    scanned = scan_batch(data, header)
    rebuilt = rebuild_batch(header, data, scanned, scanned.records[2:], None)
    (_, new), = read_batches(rebuilt)  # the CRC checks
    assert (new.base_offset, new.last_offset_delta, new.record_count) == (10, 3, 2)
    assert (new.producer_id, new.producer_epoch, new.base_sequence) == (3, 2, 40)
    assert new.last_sequence == header.last_sequence
    assert (new.partition_leader_epoch, new.compression, new.timestamp_type) == (5, codec, timestamp_type)
    got = decode_records(rebuilt, 0, new)
    assert [(r.offset, r.key, r.value) for r in got] == [(12, b"k0", b"v2"), (13, b"k1", b"v3")]
    if timestamp_type is TimestampType.CREATE_TIME:
        assert [r.timestamp for r in got] == [T0 + 2, T0 + 3]
    else:
        assert new.max_timestamp == header.max_timestamp


def test_empty_batch_keeps_the_producer_state() -> None:
    data = build_batch([(b"a", b"1"), (b"b", b"2")], base_offset=7, producer_id=9,
                       producer_epoch=1, base_sequence=3, compression=CompressionType.LZ4)
    header = parse_header(data)
    empty = rebuild_batch(header, data, scan_batch(data, header), [], None)
    (_, new), = read_batches(empty)
    assert (new.record_count, new.base_offset, new.last_offset, new.last_sequence) == (0, 7, 8, 4)
    assert new.compression is CompressionType.NONE and new.max_timestamp == header.max_timestamp
    assert decode_records(empty, 0, new) == []


def test_offset_map_bound_and_sizing() -> None:
    assert OffsetMap.for_buffer(24_000, load_factor=1.0).capacity == 1000
    assert OffsetMap.for_buffer(24_000, threads=2, load_factor=1.0).capacity == 500
    offset_map = OffsetMap(2)
    offset_map.put(b"a", 3)
    offset_map.put(b"a", 5)
    assert not offset_map.is_full and offset_map.room_for(1) and not offset_map.room_for(2)
    offset_map.put(b"b", 4)
    assert offset_map.is_full and offset_map.latest_offset == 5 and offset_map.get(b"a") == 5
    with pytest.raises(ValueError):
        OffsetMap(0)


def test_last_batch_of_each_producer() -> None:
    headers = [parse_header(build_batch([(b"a", b"1")], base_offset=o, producer_id=p,
                                        producer_epoch=0, base_sequence=0))
               for o, p in ((0, 1), (1, 2), (2, 1), (3, -1))]
    assert last_batch_of_producers(headers) == {1: 2, 2: 1}


# ---- property: any writes, any cleaning schedule -> the latest value of every key ----------

def _clean(log: list[tuple[bytes, object]], upto: int, now: int, capacity: int) -> list[tuple[bytes, object]]:
    """One cleaner pass over the batches holding offsets below `upto`, map bounded by
    `capacity`, as the shell does it (map the dirty section, then filter)."""
    offset_map = OffsetMap(capacity)
    map_end = 0
    for data, header in log:
        if header.base_offset >= upto:  # type: ignore[attr-defined]
            break
        records = scan_batch(data, header).records  # type: ignore[arg-type]
        if not offset_map.room_for(len(records)):
            break
        map_batch(offset_map, header, records)  # type: ignore[arg-type]
        map_end = header.next_offset  # type: ignore[attr-defined]
    producers = last_batch_of_producers(h for _, h in log)  # type: ignore[misc]
    out = []
    for data, header in log:
        if header.base_offset >= map_end:  # type: ignore[attr-defined]
            out.append((data, header))
            continue
        scanned = scan_batch(data, header)  # type: ignore[arg-type]
        result = filter_batch(header, scanned.records, offset_map=offset_map,  # type: ignore[arg-type]
                              map_end_offset=map_end, now_ms=now, delete_retention_ms=DAY,
                              lag_horizon_ms=now, last_offsets_of_producers=producers)
        if result.retention is BatchRetention.KEEP:
            out.append((data, header))
        elif result.retention is not BatchRetention.DELETE:
            new = rebuild_batch(header, data, scanned, result.kept, result.delete_horizon_ms)  # type: ignore[arg-type]
            out.append((new, parse_header(new)))
    return out


WRITES = st.lists(st.tuples(st.integers(0, 5), st.one_of(st.none(), st.binary(max_size=3))),
                  min_size=1, max_size=40)
SCHEDULE = st.lists(st.tuples(st.integers(0, 45), st.integers(0, 3 * DAY), st.integers(1, 8)),
                    max_size=5)


@settings(max_examples=300, deadline=None)
@given(writes=WRITES, batch_size=st.integers(1, 4), schedule=SCHEDULE,
       codec=st.sampled_from([CompressionType.NONE, CompressionType.LZ4]))
def test_compacted_log_reads_the_latest_value_of_every_key(
        writes: list[tuple[int, bytes | None]], batch_size: int,
        schedule: list[tuple[int, int, int]], codec: CompressionType) -> None:
    log = []
    for start in range(0, len(writes), batch_size):
        chunk = [rec(start + i, b"k%d" % k, v) for i, (k, v) in enumerate(writes[start:start + batch_size])]
        data = build_batch(chunk, base_offset=start, compression=codec)
        log.append((data, parse_header(data)))
    now = NOW
    for upto, advance, capacity in sorted(schedule, key=lambda s: s[1]):
        now = NOW + advance
        log = _clean(log, upto, now, capacity)
    read = [r for data, header in log for r in decode_records(data, 0, header)]  # type: ignore[arg-type]
    assert [r.offset for r in read] == sorted({r.offset for r in read})  # offset order, no repeats
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, (k, v) in enumerate(writes):
        latest[b"k%d" % k] = (offset, v)
    survivors: dict[bytes, tuple[int, bytes | None]] = {}
    for r in read:
        assert r.key is not None
        survivors[r.key] = (r.offset, r.value)  # the last read wins, as for a consumer
    for key, (offset, value) in latest.items():
        if key in survivors:
            assert survivors[key] == (offset, value), key  # never an older value
        else:
            # gone only if its latest write was a tombstone cleaned past its horizon
            assert value is None, key
    for data, header in log:  # everything stays a valid batch
        read_batches(data)


@pytest.mark.parametrize("codec", list(CompressionType))
def test_scan_agrees_with_the_full_decoder(codec: CompressionType) -> None:
    records = [Record(offset=5 + i * 2, timestamp=T0 - 7 * i, key=None if i == 1 else b"k%d" % i,
                      value=None if i == 2 else b"x" * (i * 70), headers=())
               for i in range(6)]
    data = build_batch(records, base_offset=5, compression=codec, headers=None)
    header = parse_header(data)
    scanned = scan_batch(data, header)
    full = decode_records(data, 0, header)
    assert [(r.offset, r.timestamp, r.key, r.is_tombstone) for r in scanned.records] == [
        (r.offset, r.timestamp, r.key, r.value is None) for r in full]


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_scan_rejects_damaged_records(cut: int) -> None:
    from common.errors import CorruptRecordError
    from common.record_batch import HEADER_SIZE

    data = bytearray(build_batch([(b"key", b"value"), (b"k2", b"v2")]))
    header = parse_header(data)
    damaged = data[: HEADER_SIZE] + data[HEADER_SIZE + cut :]
    with pytest.raises(CorruptRecordError):
        scan_batch(damaged + bytes(cut), header)


# (records, kept, kept tombstone, horizon, producer's last) -> (fate, horizon after)
BATCH_FATES = [
    ((5, 5, False, None, False), (BatchRetention.KEEP, None)),
    ((5, 5, False, NOW - 1, False), (BatchRetention.KEEP, NOW - 1)),
    ((5, 5, True, None, False), (BatchRetention.REWRITE, NOW + DAY)),  # stamped
    ((5, 5, True, NOW + 7, False), (BatchRetention.KEEP, NOW + 7)),
    ((5, 2, False, None, False), (BatchRetention.REWRITE, None)),
    ((5, 2, True, None, True), (BatchRetention.REWRITE, NOW + DAY)),
    ((5, 2, False, NOW + 7, False), (BatchRetention.REWRITE, NOW + 7)),
    ((5, 0, False, None, False), (BatchRetention.DELETE, None)),
    ((5, 0, False, NOW + 7, False), (BatchRetention.DELETE, None)),
    ((5, 0, False, None, True), (BatchRetention.RETAIN_EMPTY, None)),
]


def test_batch_fates_one_by_one_and_all_at_once() -> None:
    for (records, kept, tombstone, horizon, last), expected in BATCH_FATES:
        assert batch_retention(records=records, kept=kept, kept_tombstone=tombstone,
                               horizon=horizon, is_producer_last=last, now_ms=NOW,
                               delete_retention_ms=DAY) == expected
    given_ = list(zip(*(row for row, _ in BATCH_FATES)))
    codes, has, horizons = batch_retentions(
        records=np.array(given_[0]), kept=np.array(given_[1]),
        kept_tombstone=np.array(given_[2]),
        has_horizon=np.array([h is not None for h in given_[3]]),
        horizon=np.array([-1 if h is None else h for h in given_[3]]),
        is_producer_last=np.array(given_[4]), now_ms=NOW, delete_retention_ms=DAY)
    got = [(RETENTION_OF_CODE[c], int(t) if h else None)
           for c, h, t in zip(codes.tolist(), has.tolist(), horizons.tolist())]
    assert got == [expected for _, expected in BATCH_FATES]
