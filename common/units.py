"""Units, in one place. Sizes are in bytes. Durations have two units on purpose:

- the pure cores take `now_ms` and keep every duration as integer milliseconds (`MS`), as
  Kafka's configs and records do;
- the asyncio shells sleep and time out in float seconds (`SECONDS`), as asyncio does.

Write `5 * SECONDS` or `30 * SECOND_MS`, never a bare 5 or 30_000, so the unit shows.
"""

from __future__ import annotations

from typing import Final

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

BYTES: Final = 1
KIB: Final = 1024 * BYTES
MIB: Final = 1024 * KIB
GIB: Final = 1024 * MIB

MS: Final = 1
SECOND_MS: Final = 1000 * MS
MINUTE_MS: Final = 60 * SECOND_MS
HOUR_MS: Final = 60 * MINUTE_MS
DAY_MS: Final = 24 * HOUR_MS

SECONDS: Final = 1.0
US_PER_MS: Final = 1000  # microseconds in a millisecond: Arrow's and Spark's timestamps are in µs

INT_MAX: Final = 2**31 - 1  # Java int: the range Kafka accepts for INT configs and fields
LONG_MAX: Final = 2**63 - 1  # Java long
