"""`tidelog dump-log`: print .log, .index and .timeindex files like Kafka's DumpLogSegments.

The dump functions take bytes and an `emit` callable and return whether the file was
sound; only `run` touches files and stdout. Corruption is reported where it is found and
ends the dump of that file (what follows a bad batch is what recovery would truncate);
the exit status is non-zero when any file was corrupt, unreadable or of an unknown kind.
"""

from __future__ import annotations

import argparse
import struct
import sys
from collections.abc import Callable
from pathlib import Path

from common.errors import KafkaError
from common.record_batch import (
    LENGTH_POS,
    LOG_OVERHEAD,
    NO_SEQUENCE,
    RecordBatchHeader,
    TimestampType,
    compute_crc,
    parse_header,
)
from common.records import Record, decode_records
from common.units import INT_MAX

Emit = Callable[[str], None]

# Kafka's default for --max-bytes (Integer.MAX_VALUE): in effect, the whole file.
DEFAULT_MAX_BYTES = INT_MAX
OFFSET_INDEX_ENTRY = struct.Struct(">ii")  # relative offset, position in the .log
TIME_INDEX_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
_LENGTH = struct.Struct(">i")
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_END_TXN_VALUE = struct.Struct(">hi")  # version, coordinator epoch
_END_TXN_MARKERS = {0: "ABORT", 1: "COMMIT"}
_SEQUENCE_WRAP = 1 << 31


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add dump-log's arguments to its subcommand parser."""
    parser.add_argument("files", nargs="+", metavar="FILE", help=".log, .index or .timeindex")
    parser.add_argument(
        "--print-data-log", action="store_true", help="also decode and print every record"
    )
    parser.add_argument(
        "--verify-index",
        action="store_true",
        help="check every .index entry against the sibling .log, and .timeindex ordering",
    )
    parser.add_argument(
        "--max-bytes",
        type=_positive_int,
        default=DEFAULT_MAX_BYTES,
        metavar="N",
        help="read at most N bytes of each .log file (default: the whole file)",
    )


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def run(args: argparse.Namespace) -> int:
    """Dump every file named in `args`; 0 when all were sound, 1 otherwise."""
    ok = True
    for name in args.files:
        ok = _dump_file(Path(name), args) and ok
    return 0 if ok else 1


def _dump_file(path: Path, args: argparse.Namespace) -> bool:
    kinds = (".log", ".index", ".timeindex")
    if path.suffix not in kinds:
        return _error(f"Cannot dump {path}: unknown file type, expected one of {', '.join(kinds)}")
    base_offset = int(path.stem) if path.stem.isdigit() else None
    limit = args.max_bytes if path.suffix == ".log" else None
    try:
        data, complete = _read(path, limit)
    except OSError as exc:
        return _error(f"Cannot read {path}: {exc.strerror or exc}")
    print(f"Dumping {path}")
    if path.suffix == ".log":
        if base_offset is None:
            print("Log starting offset: unknown (the file name is not a base offset)")
        else:
            print(f"Log starting offset: {base_offset}")
        return dump_log_segment(
            data, name=path.name, emit=print, print_data_log=args.print_data_log, complete=complete
        )
    if base_offset is None:
        return _error(f"Cannot dump {path}: an index file is named after its base offset")
    if path.suffix == ".timeindex":
        return dump_time_index(
            data, name=path.name, base_offset=base_offset, emit=print, verify=args.verify_index
        )
    log: bytes | None = None
    if args.verify_index:
        log_path = path.with_suffix(".log")
        try:
            log, _ = _read(log_path, None)
        except OSError as exc:
            dump_offset_index(data, name=path.name, base_offset=base_offset, emit=print)
            return _error(f"Cannot verify {path}: cannot read {log_path}: {exc.strerror or exc}")
    return dump_offset_index(data, name=path.name, base_offset=base_offset, emit=print, log=log)


def _read(path: Path, limit: int | None) -> tuple[bytes, bool]:
    """Up to `limit` bytes of `path`, and whether that is the whole file."""
    with path.open("rb") as file:
        data = file.read() if limit is None else file.read(limit)
        return data, limit is None or file.read(1) == b""


def _error(message: str) -> bool:
    print(message, file=sys.stderr)
    return False


# --- .log ------------------------------------------------------------------------------


def dump_log_segment(
    data: bytes, *, name: str, emit: Emit, print_data_log: bool = False, complete: bool = True
) -> bool:
    """Emit one line per batch (and per record with `print_data_log`); False on corruption.

    With `complete` False the data was cut at --max-bytes, so a batch running past the
    end is where reading stopped, not corruption (as in Kafka).
    """
    pos = 0
    # Bounded: every pass advances by a whole batch (at least 61 bytes) or returns.
    while pos < len(data):
        try:
            header = parse_header(data, pos)
        except KafkaError as exc:
            if not complete and _runs_past_end(data, pos):
                return True
            return _invalid_tail(emit, name, data, pos, str(exc))
        actual_crc = compute_crc(data, pos, header)
        codec = _codec_name(header)
        emit(_batch_line(header, pos, codec, valid=actual_crc == header.crc))
        if actual_crc != header.crc:
            reason = (
                f"record batch at position {pos}: stored CRC {header.crc} != computed {actual_crc}"
            )
            return _invalid_tail(emit, name, data, pos, reason)
        if print_data_log:
            try:
                records = decode_records(data, pos, header)
            except KafkaError as exc:
                emit(f"Cannot decode the records of the batch at position {pos}: {exc}")
                return False
            for record in records:
                emit(_record_line(header, record, pos, codec))
        elif codec.startswith("unknown"):
            emit(f"Batch at position {pos} names unknown compression codec: {codec}")
            return False
        pos += header.size
    return True


def _runs_past_end(data: bytes, pos: int) -> bool:
    remaining = len(data) - pos
    if remaining < LOG_OVERHEAD:
        return True
    (length,) = _LENGTH.unpack_from(data, pos + LENGTH_POS)
    return bool(length + LOG_OVERHEAD > remaining)


def _invalid_tail(emit: Emit, name: str, data: bytes, pos: int, reason: str) -> bool:
    if not any(data[pos:]):
        # A zero-filled tail (preallocated space, or a write the disk lost) would otherwise
        # be reported as a baffling "magic 0" or "batchLength 0".
        reason = f"the bytes from position {pos} are all zero (preallocated or never written)"
    emit(f"Invalid batch: {reason}")
    emit(f"Found {len(data) - pos} invalid bytes at the end of {name}")
    return False


def _codec_name(header: RecordBatchHeader) -> str:
    try:
        return header.compression.name
    except KafkaError:
        return f"unknown({header.attributes & 0x07})"


def _timestamp_name(header: RecordBatchHeader) -> str:
    if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
        return "LogAppendTime"
    return "CreateTime"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _batch_line(header: RecordBatchHeader, pos: int, codec: str, *, valid: bool) -> str:
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.record_count} baseSequence: {header.base_sequence} "
        f"lastSequence: {header.last_sequence} producerId: {header.producer_id} "
        f"producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} "
        f"isTransactional: {_bool(header.is_transactional)} "
        f"isControl: {_bool(header.is_control)} position: {pos} "
        f"{_timestamp_name(header)}: {header.max_timestamp} size: {header.size} "
        f"magic: {header.magic} compresscodec: {codec} crc: {header.crc} "
        f"isvalid: {_bool(valid)}"
    )


def _record_line(header: RecordBatchHeader, record: Record, pos: int, codec: str) -> str:
    """One record; `position` is its batch's, as records inside a batch have none."""
    if header.base_sequence == NO_SEQUENCE:
        sequence = NO_SEQUENCE
    else:
        sequence = (header.base_sequence + record.offset - header.base_offset) % _SEQUENCE_WRAP
    header_keys = ",".join(h.key for h in record.headers)
    line = (
        f"| offset: {record.offset} position: {pos} "
        f"{_timestamp_name(header)}: {record.timestamp} isvalid: true "
        f"keysize: {_size(record.key)} valuesize: {_size(record.value)} "
        f"magic: {header.magic} compresscodec: {codec} producerId: {header.producer_id} "
        f"producerEpoch: {header.producer_epoch} sequence: {sequence} "
        f"headerKeys: [{header_keys}] "
    )
    control = _control_text(record) if header.is_control else None
    if control is not None:
        return line + control
    return line + f"key: {_text(record.key)} payload: {_text(record.value)}"


def _control_text(record: Record) -> str | None:
    """Kafka's rendering of a transaction marker, or None for other control records."""
    if record.key is None or len(record.key) != _CONTROL_KEY.size:
        return None
    _, kind = _CONTROL_KEY.unpack(record.key)
    if kind not in _END_TXN_MARKERS or record.value is None:
        return None
    if len(record.value) < _END_TXN_VALUE.size:
        return None
    _, coordinator_epoch = _END_TXN_VALUE.unpack_from(record.value)
    return f"endTxnMarker: {_END_TXN_MARKERS[kind]} coordinatorEpoch: {coordinator_epoch}"


def _size(value: bytes | None) -> int:
    return -1 if value is None else len(value)


def _text(value: bytes | None) -> str:
    return "null" if value is None else value.decode("utf-8", errors="replace")


# --- .index and .timeindex -------------------------------------------------------------


def dump_offset_index(
    data: bytes, *, name: str, base_offset: int, emit: Emit, log: bytes | None = None
) -> bool:
    """Emit `offset: O position: P` per entry; with `log` (the sibling .log's bytes) also
    check every entry names a batch's last offset and start. False on any problem."""
    entries = [
        (base_offset + relative, position)
        for relative, position in _entries(data, OFFSET_INDEX_ENTRY)
    ]
    used = _used_entries(entries, (base_offset, 0))
    for offset, position in entries[:used]:
        emit(f"offset: {offset} position: {position}")
    ok = _report_tail(emit, name, data, OFFSET_INDEX_ENTRY.size, len(entries) - used)
    if log is not None:
        ok = _verify_offset_index(entries[:used], base_offset, log, emit) and ok
    return ok


def _verify_offset_index(
    entries: list[tuple[int, int]], base_offset: int, log: bytes, emit: Emit
) -> bool:
    batches, valid_bytes = _valid_batches(log)
    ok = True
    previous: tuple[int, int] | None = None
    for offset, position in entries:
        where = f"Index offset {offset} points to position {position}"
        if offset < base_offset:
            ok = _mismatch(emit, f"{where}, below the segment's base offset {base_offset}")
        if previous is not None and (offset <= previous[0] or position <= previous[1]):
            ok = _mismatch(
                emit,
                f"{where}, not above the previous entry (offset {previous[0]} "
                f"position {previous[1]}): entries must strictly increase",
            )
        previous = (offset, position)
        batch = batches.get(position)
        if batch is None:
            if position >= valid_bytes:
                reason = f"past the end of the log's {valid_bytes} valid bytes"
            else:
                reason = "which is not the start of a batch"
            ok = _mismatch(emit, f"{where}, {reason}")
        elif batch.last_offset != offset:
            ok = _mismatch(
                emit,
                f"{where}, but the batch there is baseOffset: {batch.base_offset} "
                f"lastOffset: {batch.last_offset}",
            )
    return ok


def _valid_batches(log: bytes) -> tuple[dict[int, RecordBatchHeader], int]:
    """Batches by start position up to the first bad one, and the bytes they cover."""
    batches: dict[int, RecordBatchHeader] = {}
    pos = 0
    while pos < len(log):
        try:
            header = parse_header(log, pos)
        except KafkaError:
            break
        if compute_crc(log, pos, header) != header.crc:
            break
        batches[pos] = header
        pos += header.size
    return batches, pos


def dump_time_index(
    data: bytes, *, name: str, base_offset: int, emit: Emit, verify: bool = False
) -> bool:
    """Emit `timestamp: T offset: O` per entry; with `verify` also check the ordering."""
    entries = [
        (timestamp, base_offset + relative)
        for timestamp, relative in _entries(data, TIME_INDEX_ENTRY)
    ]
    used = _used_entries(entries, (0, base_offset))
    for timestamp, offset in entries[:used]:
        emit(f"timestamp: {timestamp} offset: {offset}")
    ok = _report_tail(emit, name, data, TIME_INDEX_ENTRY.size, len(entries) - used)
    if verify:
        for (ts_before, offset_before), (timestamp, offset) in zip(entries, entries[1:used]):
            if timestamp <= ts_before or offset < offset_before:
                ok = _mismatch(
                    emit,
                    f"Time index entry timestamp: {timestamp} offset: {offset} is out of order "
                    f"after timestamp: {ts_before} offset: {offset_before}",
                )
    return ok


def _entries(data: bytes, entry: struct.Struct) -> list[tuple[int, int]]:
    whole = len(data) - len(data) % entry.size
    return [entry.unpack_from(data, pos) for pos in range(0, whole, entry.size)]


def _used_entries(entries: list[tuple[int, int]], zero: tuple[int, int]) -> int:
    """How many entries precede the zero-filled tail of a preallocated index file.

    The first entry is always kept: (base offset, position 0) is a valid first entry.
    """
    used = len(entries)
    while used > 1 and entries[used - 1] == zero:
        used -= 1
    return used


def _report_tail(emit: Emit, name: str, data: bytes, entry_size: int, zero_entries: int) -> bool:
    if zero_entries:
        emit(f"Ignored {zero_entries} zero-filled entries at the end of {name} (preallocated)")
    partial = len(data) % entry_size
    if partial:
        emit(
            f"Found {partial} invalid bytes at the end of {name}: "
            f"not a whole {entry_size}-byte entry"
        )
        return False
    return True


def _mismatch(emit: Emit, message: str) -> bool:
    emit(message)
    return False
