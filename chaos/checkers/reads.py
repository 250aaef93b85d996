"""Per-consumer order: each consumer's polls of a partition go offset by offset, never back.

A consumer reading by assignment sees offsets n, n+1, n+2, ... (no transactions or compaction
here, so offsets are dense). A poll below the previous one is non-monotonic; one more than a
step ahead skipped records. After an unclean election a consumer past the new leader's log
end is reset (OFFSET_OUT_OF_RANGE): such a rewind is reported apart, as explained, when an
unclean election of that partition came before it.
"""

from __future__ import annotations

from collections.abc import Sequence

from chaos.checkers.result import CheckResult, examples
from chaos.history import Event


def check_read_order(events: Sequence[Event], *, unclean_at: dict[int, float] | None = None
                     ) -> tuple[CheckResult, CheckResult]:
    """(non-monotonic, skipped) over every `read` event, per (consumer, partition)."""
    unclean_at = unclean_at or {}
    last: dict[tuple[str, int], int] = {}
    back: list[str] = []
    skipped: list[str] = []
    explained = 0
    for e in events:
        if e["kind"] != "read":
            continue
        key = (str(e["consumer"]), e["partition"])
        offset = e["offset"]
        previous = last.get(key)
        last[key] = offset
        if previous is None or offset == previous + 1:
            continue
        where = f"consumer {key[0]} partition {key[1]}: offset {previous} then {offset} (t={e['t']:.3f} s)"
        if offset <= previous:
            if unclean_at.get(key[1], float("inf")) <= e["t"]:
                explained += 1
            else:
                back.append(where)
        else:
            skipped.append(where)
    return (CheckResult("non-monotonic", len(back), f"{len(back)} polls went back ({explained} more after an "
                        "unclean election, explained)", examples(back)),
            CheckResult("skipped", len(skipped), f"{len(skipped)} polls skipped offsets", examples(skipped)))
