"""The pure parts of `tidelog produce` / `tidelog consume`: lines to records, records to lines,
partitioning, and Kafka's console `--property` options.

    fmt = producer_format(["parse.key=true", "key.separator=:"])   # or key_separator=":"
    fmt.parse(b"k1:hello")                  -> (b"k1", b"hello")
    consumer_format(["print.key=true"]).render(partition, record)  -> b"k1\\thello"

Names and defaults are kafka-console-producer's (LineMessageReader: parse.key,
key.separator default tab, ignore.error) and kafka-console-consumer's (DefaultMessageFormatter:
print.timestamp, print.key, print.offset, print.partition, print.headers, print.value,
key.separator, line.separator, headers.separator, null.literal).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from common.record_batch import TimestampType, iter_batches
from common.records import Record, decode_records
from common.units import MIB

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

DEFAULT_SEPARATOR: Final = "\t"  # Kafka's default key.separator for both tools
MAX_LINE_BYTES: Final = 16 * MIB  # a longer line is refused rather than buffered without end

_TRUE: Final = frozenset({"true"})
_BOOLEAN: Final = frozenset({"true", "false"})
PRODUCER_PROPERTIES: Final = frozenset({"parse.key", "key.separator", "ignore.error"})
CONSUMER_PROPERTIES: Final = frozenset({"print.timestamp", "print.key", "print.offset", "print.partition",
                                        "print.headers", "print.value", "key.separator", "line.separator",
                                        "headers.separator", "null.literal"})


class FormatError(ValueError):
    """A bad --property, or an input line the producer format cannot parse."""


def parse_properties(items: Sequence[str], allowed: frozenset[str], option: str = "--property") -> dict[str, str]:
    """`key=value` items (Kafka's --property); FormatError naming the item otherwise."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise FormatError(f"{option} {item!r} is not key=value")
        if key not in allowed:
            raise FormatError(f"{option} {key!r} is not a property of this tool (known: {', '.join(sorted(allowed))})")
        if key.startswith(("print.", "parse.", "ignore.")) and value.lower() not in _BOOLEAN:
            raise FormatError(f"{option} {key} must be true or false, got {value!r}")
        out[key] = value
    return out


def _unescape(text: str) -> str:
    """`\\t` and `\\n` as typed on a shell line (Kafka's tools take the separators literally; a tab
    is hard to type, so tidelog also reads these two escapes)."""
    return text.replace("\\t", "\t").replace("\\n", "\n")


@dataclass(frozen=True, slots=True)
class ProducerFormat:
    """How kafka-console-producer's LineMessageReader turns a line into (key, value)."""

    parse_key: bool = False
    key_separator: bytes = DEFAULT_SEPARATOR.encode()
    ignore_error: bool = False  # a keyed line without separator: the whole line is the value

    def __post_init__(self) -> None:
        if not self.key_separator:
            raise FormatError("key.separator must not be empty")

    def parse(self, line: bytes) -> tuple[bytes | None, bytes]:
        """(key, value) of one line (without its line break); FormatError when a key is expected but missing."""
        if not self.parse_key:
            return None, line
        key, sep, value = line.partition(self.key_separator)
        if sep:
            return key, value
        if self.ignore_error:
            return None, line
        raise FormatError(f"no key separator {self.key_separator.decode(errors='replace')!r} in the line "
                          f"{line[:80].decode(errors='replace')!r} (parse.key=true; ignore.error=true sends it "
                          "without a key)")


def producer_format(properties: Sequence[str], key_separator: str | None = None) -> ProducerFormat:
    """--property items and tidelog's --key-separator (which implies parse.key=true)."""
    given = parse_properties(properties, PRODUCER_PROPERTIES)
    separator = key_separator if key_separator is not None else given.get("key.separator", DEFAULT_SEPARATOR)
    parse_key = key_separator is not None or given.get("parse.key", "false").lower() in _TRUE
    return ProducerFormat(parse_key, _unescape(separator).encode(), given.get("ignore.error", "false").lower() in _TRUE)


@dataclass(frozen=True, slots=True)
class ConsumerFormat:
    """kafka-console-consumer's DefaultMessageFormatter: what to print of each record, in its order:
    timestamp, partition, offset, headers, key, value, each followed by key.separator."""

    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: str = DEFAULT_SEPARATOR
    line_separator: str = "\n"
    headers_separator: str = ","
    null_literal: str = "null"

    def render(self, partition: int, record: Record, timestamp_type: TimestampType) -> bytes:
        """One record as its output line, line separator included."""
        parts: list[bytes] = []
        if self.print_timestamp:
            kind = "LogAppendTime" if timestamp_type is TimestampType.LOG_APPEND_TIME else "CreateTime"
            parts.append(f"{kind}:{record.timestamp}".encode())
        if self.print_partition:
            parts.append(f"Partition:{partition}".encode())
        if self.print_offset:
            parts.append(f"Offset:{record.offset}".encode())
        if self.print_headers:
            headers = [h.key.encode() + b":" + self._bytes(h.value) for h in record.headers]
            parts.append(self.headers_separator.encode().join(headers) if headers else b"NO_HEADERS")
        if self.print_key:
            parts.append(self._bytes(record.key))
        if self.print_value:
            parts.append(self._bytes(record.value))
        return self.key_separator.encode().join(parts) + self.line_separator.encode()

    def _bytes(self, value: bytes | None) -> bytes:
        return self.null_literal.encode() if value is None else value


def consumer_format(properties: Sequence[str]) -> ConsumerFormat:
    given = parse_properties(properties, CONSUMER_PROPERTIES)

    def flag(name: str, default: bool = False) -> bool:
        return given.get(name, "true" if default else "false").lower() in _TRUE

    return ConsumerFormat(
        print_timestamp=flag("print.timestamp"), print_partition=flag("print.partition"),
        print_offset=flag("print.offset"), print_headers=flag("print.headers"), print_key=flag("print.key"),
        print_value=flag("print.value", True),
        key_separator=_unescape(given.get("key.separator", DEFAULT_SEPARATOR)),
        line_separator=_unescape(given.get("line.separator", "\n")),
        headers_separator=_unescape(given.get("headers.separator", ",")),
        null_literal=given.get("null.literal", "null"))


# --- reading lines -----------------------------------------------------------------------------


class LineSplitter:
    """Bytes in, whole lines out (without `\\n` or `\\r\\n`), as Java's BufferedReader.readLine."""

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._buffer = bytearray()
        self._max = max_line_bytes

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        lines: list[bytes] = []
        start = 0
        while (end := self._buffer.find(b"\n", start)) >= 0:  # bounded by the buffer's length
            lines.append(_strip_cr(bytes(self._buffer[start:end])))
            start = end + 1
        del self._buffer[:start]
        if len(self._buffer) > self._max:
            raise FormatError(f"a line is longer than {self._max} bytes")
        return lines

    def finish(self) -> list[bytes]:
        """At end of input: the last line if it had no line break."""
        rest, self._buffer = bytes(self._buffer), bytearray()
        return [_strip_cr(rest)] if rest else []


def _strip_cr(line: bytes) -> bytes:
    return line[:-1] if line.endswith(b"\r") else line


# --- fetched records ---------------------------------------------------------------------------


def decode_fetched(data: bytes | memoryview | None, position: int) -> tuple[list[tuple[Record, TimestampType]], int]:
    """The records of a Fetch answer at or after `position`, and the next position.

    Batches are CRC-checked (Kafka's check.crcs); control batches (transaction markers) are
    skipped but moved past; records before `position` (a compressed batch starts earlier)
    are dropped; a partial batch at the end (a fetch may cut one) is left for the next fetch.
    Raises common.errors.CorruptRecordError for a damaged batch.
    """
    if not data:
        return [], position
    out: list[tuple[Record, TimestampType]] = []
    for pos, header in iter_batches(data, verify=True, allow_partial_tail=True):
        if header.next_offset <= position:
            continue
        if not header.is_control:
            out.extend((record, header.timestamp_type) for record in decode_records(data, pos, header)
                       if record.offset >= position)
        position = header.next_offset
    return out, position
