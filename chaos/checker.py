"""Checkers: did the cluster keep what it promised? Pure functions over recorded histories.

Each returns a list of problems (empty when the history is fine), worded for a test failure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)


def check_acked_read_once(acked: Iterable[tuple[int, int, bytes]],
                          read: Iterable[tuple[int, int, bytes]]) -> list[str]:
    """Every acknowledged (partition, offset, value) was read back, at that offset, exactly once;
    no value appears twice in the log (idempotence)."""
    problems: list[str] = []
    read = list(read)
    at = {(p, o): v for p, o, v in read}
    counts = Counter(v for _, _, v in read)
    for partition, offset, value in acked:
        found = at.get((partition, offset))
        if found != value:
            problems.append(f"acknowledged {value!r} at {partition}/{offset} but read {found!r} there")
        elif counts[value] != 1:
            problems.append(f"acknowledged {value!r} read {counts[value]} times")
    duplicates = sorted(v for v, n in counts.items() if n > 1)
    if duplicates:
        problems.append(f"{len(duplicates)} values appear more than once, e.g. {duplicates[:5]}")
    return problems


def check_offsets_dense(read: Iterable[tuple[int, int, bytes]]) -> list[str]:
    """Offsets of each partition run 0, 1, 2, ... without gaps or repeats."""
    by_partition: dict[int, list[int]] = {}
    for partition, offset, _ in read:
        by_partition.setdefault(partition, []).append(offset)
    return [f"partition {p}: offsets are not 0..{len(o) - 1} in order"
            for p, o in sorted(by_partition.items()) if o != list(range(len(o)))]


def check_monotonic(samples: Sequence[tuple[int, int]]) -> list[str]:
    """No (partition, value) sample is smaller than an earlier one of the same partition."""
    highest: dict[int, int] = {}
    problems = []
    for index, (partition, value) in enumerate(samples):
        if value < highest.get(partition, -1):
            problems.append(f"sample {index}: partition {partition} went back from "
                            f"{highest[partition]} to {value}")
        highest[partition] = max(value, highest.get(partition, -1))
    return problems


def check_identical(replicas: Mapping[int, bytes], what: str) -> list[str]:
    """Every replica's bytes are the same (e.g. the concatenated segments of one partition)."""
    if len(set(replicas.values())) <= 1:
        return []
    sizes = ", ".join(f"broker {b}: {len(data)} bytes" for b, data in sorted(replicas.items()))
    return [f"{what}: replicas differ ({sizes})"]
