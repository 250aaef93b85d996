"""Topic creations under faults: acknowledged means whole; nothing half-made, ever.

Kafka commits a topic and all its partitions in one atomic batch of records (the
controller's CreateTopics result is one record list). So after the heal: every `admin-ok`
topic exists with every partition led and fully replicated; an `admin-info` (unknown
outcome) topic exists whole or not at all; an `admin-fail` topic does not exist.
"""

from __future__ import annotations

from collections.abc import Sequence

from chaos.checkers.result import CheckResult, examples
from chaos.history import Event


def check_topic_creations(events: Sequence[Event], *, partitions: int) -> CheckResult:
    outcome = {e["topic"]: e["kind"] for e in events if e["kind"] in ("admin-ok", "admin-fail", "admin-info")}
    final = {e["topic"]: e for e in events if e["kind"] == "admin-final"}
    problems: list[str] = []
    for topic, kind in sorted(outcome.items()):
        seen = final.get(topic)
        if seen is None:
            continue  # never checked (the run ended before the heal)
        whole = seen["exists"] and seen["partitions"] == partitions and seen["whole"] == partitions
        if seen["exists"] and not whole:
            problems.append(f"{topic}: half-made ({seen['whole']} of {partitions} partitions whole), {kind}")
        elif kind == "admin-ok" and not seen["exists"]:
            problems.append(f"{topic}: creation acknowledged, topic missing")
        elif kind == "admin-fail" and seen["exists"]:
            problems.append(f"{topic}: creation refused, topic exists")
    counts = {k: sum(1 for v in outcome.values() if v == k) for k in ("admin-ok", "admin-fail", "admin-info")}
    return CheckResult("topic-creations", len(problems),
                       f"{len(outcome)} creations ({counts['admin-ok']} acknowledged, {counts['admin-fail']} refused, "
                       f"{counts['admin-info']} unknown), {len(final)} checked after the heal: {len(problems)} wrong",
                       examples(problems), counts)
