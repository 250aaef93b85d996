"""A chunk through the cleaner in bulk (broker/log/cleaner_chunk.py) writes exactly what
the per-batch keep/drop rule (`compaction.filter_batch` + `rebuild_batch`) writes, and maps
exactly the batches Kafka's buildOffsetMap would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.cleaner_chunk import filter_chunk, map_chunk
from broker.log.compaction import (
    BatchRetention,
    OffsetMap,
    filter_batch,
    last_batch_of_producers,
    map_batch,
    rebuild_batch,
)
from broker.log.record_columns import NARROW
from broker.log.record_scan import scan_batch
from common.record_batch import CompressionType, read_batches
from common.records import Record, build_batch

NOW = 1_000_000
DAY = 86_400_000

WRITE = st.tuples(st.integers(0, 6), st.one_of(st.none(), st.binary(max_size=4)),
                  st.integers(-2000, 10))  # key, value, timestamp offset from NOW
BATCHES = st.lists(st.tuples(st.lists(WRITE, min_size=1, max_size=5),
                             st.sampled_from([CompressionType.NONE, CompressionType.LZ4]),
                             st.sampled_from([-1, 7, 8]), st.booleans()),
                   min_size=1, max_size=2 * NARROW + 3)


def build_log(batches: list[tuple[list[tuple[int, bytes | None, int]], CompressionType, int, bool]]
              ) -> bytes:
    out, offset, sequences = [], 0, {7: 0, 8: 0}
    for writes, codec, producer, horizon in batches:
        recs = [Record(offset=offset + i, timestamp=NOW + ts, key=b"k%d" % k, value=v)
                for i, (k, v, ts) in enumerate(writes)]
        kw: dict[str, object] = {}
        if producer >= 0:
            kw = {"producer_id": producer, "producer_epoch": 0,
                  "base_sequence": sequences[producer]}
            sequences[producer] += len(recs)
        data = bytearray(build_batch(recs, base_offset=offset, compression=codec, **kw))  # type: ignore[arg-type]
        if horizon and any(v is None for _, v, _ in writes):  # a batch cleaned before
            from broker.log.compaction import rebuild_batch as rebuild
            from common.record_batch import parse_header
            header = parse_header(data)
            scanned = scan_batch(data, header)
            data = bytearray(rebuild(header, data, scanned, scanned.records, NOW - 5))
        out.append(bytes(data))
        offset += len(writes) + 1  # a gap, as after an earlier cleaning
    return b"".join(out)


@settings(max_examples=150, deadline=None)
@given(batches=BATCHES, capacity=st.integers(1, 12), first_dirty=st.integers(0, 10),
       lag=st.integers(-500, 500), group_end=st.booleans())
def test_bulk_cleaning_writes_what_the_per_batch_rule_writes(
        batches: list[tuple[list[tuple[int, bytes | None, int]], CompressionType, int, bool]],
        capacity: int, first_dirty: int, lag: int, group_end: bool) -> None:
    chunk = build_log(batches)
    headers = read_batches(chunk)
    uncleanable = headers[-1][1].next_offset
    # map: in bulk, and batch by batch as the reference
    bulk_map, reference_map = OffsetMap(capacity), OffsetMap(capacity)
    mapped = map_chunk(bulk_map, chunk, headers, first_dirty=first_dirty,
                       first_uncleanable=uncleanable)
    end = None
    for pos, header in headers:
        if header.last_offset < first_dirty:
            continue
        if not reference_map.room_for(header.record_count):
            break
        map_batch(reference_map, header, scan_batch(chunk[pos : pos + header.size], header).records)
        end = header.next_offset
    assert mapped.end_offset == end
    assert len(bulk_map) == len(reference_map)
    map_end = end if end is not None else first_dirty
    producers = last_batch_of_producers(h for _, h in headers)
    group_next = uncleanable if group_end else None
    result = filter_chunk(chunk, headers, offset_map=bulk_map, map_end_offset=map_end,
                          now_ms=NOW, delete_retention_ms=DAY, lag_horizon_ms=NOW + lag,
                          last_offsets_of_producers=producers, group_next_offset=group_next)
    expected = []
    for pos, header in headers:
        data = chunk[pos : pos + header.size]
        scanned = scan_batch(data, header)
        decision = filter_batch(header, scanned.records, offset_map=reference_map,
                                map_end_offset=map_end, now_ms=NOW, delete_retention_ms=DAY,
                                lag_horizon_ms=NOW + lag, last_offsets_of_producers=producers)
        retention = decision.retention
        if (retention is BatchRetention.DELETE and group_next is not None
                and header.next_offset >= group_next):
            retention = BatchRetention.RETAIN_EMPTY
        if retention is BatchRetention.KEEP:
            expected.append(data)
        elif retention is not BatchRetention.DELETE:
            expected.append(rebuild_batch(header, data, scanned, decision.kept,
                                          decision.delete_horizon_ms))
    assert b"".join(bytes(p) for p in result.pieces) == b"".join(expected)
    # the filter pass reading the map at the slots the map pass put the keys writes the same
    with_slots = filter_chunk(chunk, headers, offset_map=bulk_map, map_end_offset=map_end,
                              now_ms=NOW, delete_retention_ms=DAY, lag_horizon_ms=NOW + lag,
                              last_offsets_of_producers=producers,
                              group_next_offset=group_next, scan=mapped.scan)
    assert b"".join(bytes(p) for p in with_slots.pieces) == b"".join(expected)


def test_slots_of_a_chunk_mapped_before_the_map_grew_are_not_trusted() -> None:
    # chunk 1 is mapped into a small table; chunk 2's keys make it grow (a rehash moves
    # every key), so chunk 1's filter must look its keys up again
    def chunk_of(first_key: int, base: int) -> bytes:
        return b"".join(build_batch(
            [Record(offset=base + 10 * b + i, timestamp=NOW, key=b"k%d" % (first_key + 10 * b + i),
                    value=b"v") for i in range(10)], base_offset=base + 10 * b)
            for b in range(60))
    chunks = [chunk_of(0, 0), chunk_of(300, 600)]
    offset_map = OffsetMap(100_000)
    scans = []
    for data in chunks:
        mapped = map_chunk(offset_map, data, read_batches(data), first_dirty=0,
                           first_uncleanable=10_000)
        scans.append(mapped.scan)
    assert scans[0] is not None and scans[1] is not None
    assert scans[0].layout != offset_map.layout == scans[1].layout
    for data, scan in zip(chunks, scans):
        kwargs = dict(offset_map=offset_map, map_end_offset=1200, now_ms=NOW,
                      delete_retention_ms=DAY, lag_horizon_ms=NOW,
                      last_offsets_of_producers={}, group_next_offset=None)
        looked_up = filter_chunk(data, read_batches(data), **kwargs)  # type: ignore[arg-type]
        read_at_slots = filter_chunk(data, read_batches(data), scan=scan, **kwargs)  # type: ignore[arg-type]
        assert [bytes(p) for p in read_at_slots.pieces] == [bytes(p) for p in looked_up.pieces]
        # keys 300..599 are written in both chunks: chunk 1 keeps only keys 0..299
        assert read_at_slots.records_kept == (300 if scan is scans[0] else 600)
