"""broker/log/log_validator.py: the leader's recompression (compression.type), LogAppendTime
stamping and the KIP-937 timestamp window, on batches built by common.records."""

from __future__ import annotations

import itertools

import pytest

from broker.log.log_validator import TARGET_CODECS, validate_produced
from common.compression import recompress_batch
from common.errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError, RecordTooLargeError
from common.record_batch import (
    NO_TIMESTAMP,
    CompressionType,
    TimestampType,
    parse_header,
    read_batches,
    verify_crc,
)
from common.records import build_batch, decode_records
from common.log_config import LogConfig, TimestampPolicy

NOW = 1_700_000_000_000
RECORDS = [(b"k%d" % i, b"value-%d " % i * 20) for i in range(30)]
# a timestamp delta going backwards: record 2 is older than the first record
TIMESTAMPS = [NOW - 10 + i for i in range(30)]
TIMESTAMPS[2] = NOW - 5_000
PRODUCER = {"producer_id": 7, "producer_epoch": 3, "base_sequence": 41}


def batch(codec: CompressionType = CompressionType.NONE, timestamps=TIMESTAMPS) -> bytes:
    return build_batch(RECORDS, timestamps=timestamps, compression=codec, **PRODUCER)


def run(data: bytes, config: LogConfig, now: int = NOW):
    view = memoryview(data)
    return validate_produced(view, read_batches(view), config, now_ms=now, topic_partition="t-0")


def headers_without(header, *fields):
    return {k: v for k, v in header._asdict().items() if k not in fields}


CODECS = list(CompressionType)


@pytest.mark.parametrize(("source", "target"), list(itertools.product(CODECS, TARGET_CODECS)),
                         ids=lambda v: getattr(v, "name", v))
def test_recompression_keeps_records_and_header(source, target):
    original = batch(source)
    out = run(original, LogConfig(compression_type=target))
    [(pos, header)] = out.batches
    assert header.compression is TARGET_CODECS[target]
    verify_crc(out.records, pos, header)
    before = parse_header(original)
    assert headers_without(header, "batch_length", "crc", "attributes") == \
        headers_without(before, "batch_length", "crc", "attributes")
    assert header.attributes & ~0x07 == before.attributes & ~0x07
    assert decode_records(out.records, pos, header) == decode_records(original, 0, before)
    if source is TARGET_CODECS[target]:  # already in the topic's codec: the very bytes
        assert bytes(out.records) == original
    assert out.log_append_time == NO_TIMESTAMP


def test_producer_keeps_every_codec_untouched():
    data = batch(CompressionType.GZIP) + batch(CompressionType.LZ4) + batch()
    out = run(data, LogConfig())
    assert bytes(out.records) == data


def test_only_the_batches_in_another_codec_change():
    zstd, gzip = batch(CompressionType.ZSTD), batch(CompressionType.GZIP)
    out = run(zstd + gzip, LogConfig(compression_type="zstd"))
    assert [h.compression for _, h in out.batches] == [CompressionType.ZSTD] * 2
    assert bytes(out.records[: len(zstd)]) == zstd


@pytest.mark.parametrize(("codec", "levels"), [
    (CompressionType.GZIP, {"compression_gzip_level": 1}),
    (CompressionType.ZSTD, {"compression_zstd_level": 19}),
    (CompressionType.LZ4, {"compression_lz4_level": 1}),
])
def test_codec_levels_are_used(codec, levels):
    data = batch()
    name = codec.name.lower()
    default = run(data, LogConfig(compression_type=name))
    tuned = run(data, LogConfig(compression_type=name, **levels))
    assert bytes(tuned.records) != bytes(default.records) or codec is CompressionType.LZ4
    pos, header = tuned.batches[0]
    assert decode_records(tuned.records, pos, header) == decode_records(data, 0, parse_header(data))


def test_recompress_batch_uncompressed_is_the_records_section_itself():
    plain, gzip = batch(), batch(CompressionType.GZIP)
    assert bytes(recompress_batch(gzip, 0, parse_header(gzip), CompressionType.NONE)) == plain


def test_a_batch_that_does_not_decompress_is_corrupt():
    data = bytearray(batch(CompressionType.GZIP))
    data[70:80] = b"\xff" * 10
    header = parse_header(data)
    with pytest.raises(CorruptRecordError):
        recompress_batch(data, 0, header, CompressionType.ZSTD)


def test_max_message_bytes_applies_to_the_batch_as_produced():
    data = batch()
    with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
        run(data, LogConfig(compression_type="zstd", max_message_bytes=len(data) - 1))


def test_log_append_time_stamps_each_batch_after_recompression():
    out = run(batch(CompressionType.SNAPPY) + batch(), LogConfig(
        compression_type="lz4", message_timestamp_type=TimestampPolicy.LOG_APPEND_TIME))
    assert out.log_append_time == NOW
    for pos, header in out.batches:
        assert (header.max_timestamp, header.timestamp_type) == (NOW, TimestampType.LOG_APPEND_TIME)
        assert header.compression is CompressionType.LZ4
        verify_crc(out.records, pos, header)


# (config, timestamps, refused): KIP-937's window around NOW
WINDOW = [
    pytest.param({}, [NOW - 10**12, NOW + 10**12], False, id="defaults-accept-anything"),
    pytest.param({"message_timestamp_after_max_ms": 1000}, [NOW, NOW + 1000], False, id="after-edge"),
    pytest.param({"message_timestamp_after_max_ms": 1000}, [NOW, NOW + 1001], True, id="after-past"),
    pytest.param({"message_timestamp_before_max_ms": 1000}, [NOW - 1000, NOW], False, id="before-edge"),
    pytest.param({"message_timestamp_before_max_ms": 1000}, [NOW - 1001, NOW], True, id="before-first"),
    pytest.param({"message_timestamp_before_max_ms": 1000}, [NOW, NOW - 1001, NOW], True,
                 id="before-later-record"),
    pytest.param({"message_timestamp_difference_max_ms": 1000}, [NOW - 1001], True,
                 id="difference-before"),
    pytest.param({"message_timestamp_difference_max_ms": 1000}, [NOW + 1001], True,
                 id="difference-after"),
    pytest.param({"message_timestamp_difference_max_ms": 1000,
                  "message_timestamp_type": TimestampPolicy.LOG_APPEND_TIME}, [NOW - 10**9], False,
                 id="log-append-time-not-checked"),
]


@pytest.mark.parametrize(("settings", "timestamps", "refused"), WINDOW)
@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD], ids=["plain", "zstd"])
def test_timestamp_window(settings, timestamps, refused, codec):
    data = build_batch([(b"k", b"v")] * len(timestamps), timestamps=timestamps, compression=codec)
    if refused:
        with pytest.raises(InvalidTimestampError, match="rejected due to invalid timestamp") as e:
            run(data, LogConfig(**settings))
        assert all("is out of range" in r.message for r in e.value.record_errors)
    else:
        assert bytes(run(data, LogConfig(**settings)).records)[:8] == data[:8]


# ---- KIP-467: which records of a rejected batch were bad --------------------------------------

WINDOW_1S = {"message_timestamp_before_max_ms": 1000, "message_timestamp_after_max_ms": 1000}
RANGE_1S = f"[{NOW - 1000}, {NOW + 1000}]"
RECORD_ERRORS = [  # (config, records as (key, timestamp), Kafka's error, [(index, message)])
    pytest.param(WINDOW_1S, [(b"a", NOW), (b"b", NOW - 1001), (b"c", NOW), (b"d", NOW + 1001)],
                 InvalidTimestampError,
                 [(1, f"Timestamp {NOW - 1001} of message with offset 1 is out of range. The timestamp "
                      f"should be within {RANGE_1S}"),
                  (3, f"Timestamp {NOW + 1001} of message with offset 3 is out of range. The timestamp "
                      f"should be within {RANGE_1S}")], id="timestamps"),
    pytest.param({"message_timestamp_after_max_ms": 1000}, [(b"a", NOW + 5000), (b"b", NOW)],
                 InvalidTimestampError,
                 [(0, f"Timestamp {NOW + 5000} of message with offset 0 is out of range. The timestamp "
                      f"should be within [-inf, {NOW + 1000}]")], id="after-only"),
    # Kafka checks a record's key first; any timestamp error makes the batch INVALID_TIMESTAMP
    pytest.param({**WINDOW_1S, "cleanup_policy": ("compact",)}, [(None, NOW), (b"b", NOW - 1001), (None, NOW - 9999)],
                 InvalidTimestampError,
                 [(0, "Compacted topic cannot accept message without key in topic partition t-0"),
                  (1, f"Timestamp {NOW - 1001} of message with offset 1 is out of range. The timestamp "
                      f"should be within {RANGE_1S}"),
                  (2, "Compacted topic cannot accept message without key in topic partition t-0")],
                 id="keys-and-timestamps"),
]


@pytest.mark.parametrize(("settings", "records", "error", "expected"), RECORD_ERRORS)
@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4], ids=["plain", "lz4"])
def test_record_errors_name_each_bad_record(settings, records, error, expected, codec):
    data = build_batch([(key, b"v") for key, _ in records], timestamps=[ts for _, ts in records],
                       compression=codec)
    with pytest.raises(error) as e:
        run(data, LogConfig(**settings))
    assert [(r.batch_index, r.message) for r in e.value.record_errors] == expected
    assert str(e.value) == "One or more records have been rejected due to invalid timestamp"


def test_keyless_records_of_a_compacted_topic_are_listed_with_kafkas_message(tmp_path):
    from tests.log_helpers import open_log

    log = open_log(tmp_path, LogConfig(cleanup_policy=("compact",)))
    keys = [b"a", None, b"c", None, None, None]
    with pytest.raises(InvalidRecordError) as e:
        log.append(build_batch([(k, b"v") for k in keys]), now_ms=NOW)
    assert [r.batch_index for r in e.value.record_errors] == [1, 3, 4, 5]
    first = "RecordError(batchIndex={}, message='Compacted topic cannot accept message without key in " \
            "topic partition {}')"
    assert str(e.value) == (
        "One or more records have been rejected due to 4 record errors in total, and only showing the "
        f"first three errors at most: [{', '.join(first.format(i, log.topic_partition) for i in (1, 3, 4))}]")
    assert log.log_end_offset == 0  # the good records of the batch are not appended either


# ---- wired into the leader's append ---------------------------------------------------------


def test_leader_append_stores_the_topic_codec_and_a_follower_copies_the_bytes(tmp_path):
    from tests.log_helpers import open_log, read_all

    leader = open_log(tmp_path / "leader", LogConfig(compression_type="gzip"))
    info = leader.append(batch(CompressionType.SNAPPY) + batch(), now_ms=NOW)
    assert (info.first_offset, info.last_offset, info.batch_count) == (0, 59, 2)
    stored = read_all(leader)
    assert [h.compression for h, _ in stored] == [CompressionType.GZIP] * 2
    assert [h.base_offset for h, _ in stored] == [0, 30]
    values = [r.value for h, data in stored for r in decode_records(data, 0, h)]
    assert values == [v for _, v in RECORDS] * 2
    follower = open_log(tmp_path / "follower", LogConfig(compression_type="zstd"))
    fetched = leader.read(0, 1 << 20).read_bytes()
    follower.append(fetched, now_ms=NOW, assign_offsets=False)
    assert follower.read(0, 1 << 20).read_bytes() == fetched


def test_leader_append_refuses_a_timestamp_outside_the_window_and_stores_nothing(tmp_path):
    from tests.log_helpers import open_log

    log = open_log(tmp_path, LogConfig(message_timestamp_before_max_ms=1000))
    with pytest.raises(InvalidTimestampError):
        log.append(batch(), now_ms=NOW)
    assert log.log_end_offset == 0
