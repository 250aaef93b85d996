"""Java .properties files, the subset Kafka users write in server.properties.

`parse_properties` is pure (text in, entries out); `load_properties` is the one file reader.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

from common.config_schema import ConfigError

_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # Java's line terminators, not str.splitlines()'s
_BLANK = " \t\f"
_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def properties_line(key: str, value: str) -> str:
    """`key=value` escaped so that `load_properties` reads back exactly `value`."""
    escaped = (value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
               .replace("\t", "\\t").replace("\f", "\\f"))
    return f"{key}={escaped}"


def load_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a Java .properties file; a malformed line is a ConfigError naming file and line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read config file '{os.fspath(path)}': {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{os.fspath(path)}: not UTF-8 text (byte {e.start})") from e
    return parse_properties(text, os.fspath(path))


def parse_properties(text: str, source: str) -> dict[str, str]:
    """Entries of .properties text: `=`/`:`/blank separators, `#`/`!` comments, `\\` joins lines.

    A repeated key: last wins, as in Java. `source` names the text in errors.
    """
    entries: dict[str, str] = {}
    for number, _, line in _logical_lines(_LINE_BREAK.split(text)):
        key, value = _split_entry(line, f"{source}:{number}")
        entries[key] = value
    return entries


def set_entries(text: str, entries: Mapping[str, str], source: str, comment: str) -> str:
    """`text` with every entry of `entries` set: earlier lines for those keys removed (all of
    them, continuations included), the new ones appended after `comment`. Other lines, comments
    and blank lines stay as the operator wrote them."""
    if not entries:
        return text
    lines = _LINE_BREAK.split(text)
    dropped: set[int] = set()
    for first, last, line in _logical_lines(lines):
        if _split_entry(line, f"{source}:{first}")[0] in entries:
            dropped.update(range(first, last + 1))
    kept = [line for number, line in enumerate(lines, start=1) if number not in dropped]
    while kept and not kept[-1].strip():
        kept.pop()
    kept += [f"# {comment}", *(properties_line(key, value) for key, value in entries.items())]
    return "\n".join(kept) + "\n"


def _logical_lines(lines: list[str]) -> Iterator[tuple[int, int, str]]:
    """(first line number, last line number, text) of each entry, continuation lines joined as
    Java joins them."""
    parts: list[str] = []
    start = 0
    for number, line in enumerate(lines, start=1):
        line = line.lstrip(_BLANK)
        if not parts:
            if not line or line[0] in "#!":  # inside a continuation, '#' is just text
                continue
            start = number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # an odd count: the last backslash escapes the line break
            parts.append(line[:-1])
            continue
        parts.append(line)
        yield start, number, "".join(parts)
        parts = []
    if parts:  # a continuation at end of file just ends, as in Java
        yield start, len(lines), "".join(parts)


def _split_entry(line: str, where: str) -> tuple[str, str]:
    """Split at the first unescaped `=`, `:` or blank; ConfigError if there is no value part."""
    end = 0
    while end < len(line) and line[end] not in "=:" + _BLANK:
        end += 2 if line[end] == "\\" else 1
    end = min(end, len(line))
    key, rest = line[:end], line[end:].lstrip(_BLANK)
    if rest[:1] in ("=", ":"):
        rest = rest[1:]
    elif not rest:
        raise ConfigError(f"{where}: malformed line {line!r}: expected 'key=value' or 'key: value'")
    if not key:
        raise ConfigError(f"{where}: malformed line {line!r}: empty key")
    return _unescape(key, where), _unescape(rest, where).strip()


def _unescape(text: str, where: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\" or i + 1 == len(text):
            out.append(char if char != "\\" else "")
            i += 1
        elif text[i + 1] == "u":
            digits = text[i + 2 : i + 6]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise ConfigError(f"{where}: malformed \\uxxxx escape in {text!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:  # Java: \t \n \r \f are control characters, any other escaped char is itself
            out.append(_ESCAPES.get(text[i + 1], text[i + 1]))
            i += 2
    return "".join(out)
