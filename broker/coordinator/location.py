"""Where a coordinator key (a group, a transactional id) is served: FindCoordinator's answer
for one key, as each internal topic's owner finds it."""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class Found:
    """One key's FindCoordinator answer: the leader of its internal-topic partition, or why
    there is none (`error`, `message`)."""

    error: ErrorCode
    node_id: int = -1
    host: str = ""
    port: int = -1
    message: str | None = None
