"""Plain aligned text tables for the CLI: pure, no terminal codes, no dependency.

    render(("TOPIC", "PARTITIONS"), [("orders", 3), ("audit", None)], right={1})
    ->  ["TOPIC   PARTITIONS",
         "orders           3",
         "audit            -"]

Columns are separated by two spaces and padded to their widest cell; the last column is
not padded (a long path or message does not push trailing blanks). None prints as "-",
booleans as yes/no, everything else with str(). Output that scripts parse should use
the admin API's JSON instead; these tables are for people (and for grep/awk: one row a line,
no cell ever holds a newline).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Final

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

SEPARATOR: Final = "  "
MISSING: Final = "-"


def cell(value: object) -> str:
    """One cell's text: None as '-', booleans as yes/no, newlines and tabs as spaces."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = str(value)
    return text.replace("\r", " ").replace("\n", " ").replace("\t", " ")


def render(header: Sequence[str], rows: Iterable[Sequence[object]], *, right: Collection[int] = ()) -> list[str]:
    """The header and every row as aligned lines; `right`: indexes of right-aligned (numeric) columns."""
    table = [[cell(value) for value in header]]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a row has {len(row)} cells, the header {len(header)}: {row!r:.200}")
        table.append([cell(value) for value in row])
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    last = len(header) - 1
    lines = []
    for line in table:
        cells = []
        for i, text in enumerate(line):
            if i in right:
                cells.append(text.rjust(widths[i]))
            elif i == last:
                cells.append(text)
            else:
                cells.append(text.ljust(widths[i]))
        lines.append(SEPARATOR.join(cells).rstrip())
    return lines
