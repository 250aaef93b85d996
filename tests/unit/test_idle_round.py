"""broker/replication/idle_round.py: when a fetcher's last round may be sent again as it is."""

from __future__ import annotations

import pytest

from broker.replication.idle_round import IDLE_ROUND_MAX_AGE_S, IdleRound, reusable

ROUND = IdleRound(metadata_version=7, built_at=100.0, sent={}, wanted={}, not_in_isr=frozenset())


@pytest.mark.parametrize(("round_", "version", "now", "reused"), [
    pytest.param(None, 7, 100.0, False, id="no-round-yet"),
    pytest.param(ROUND, 7, 100.0, True, id="same-metadata-at-once"),
    pytest.param(ROUND, 7, 100.0 + IDLE_ROUND_MAX_AGE_S - 0.001, True, id="same-metadata-just-young-enough"),
    pytest.param(ROUND, 7, 100.0 + IDLE_ROUND_MAX_AGE_S, False, id="too-old-rebuilt"),
    pytest.param(ROUND, 8, 100.0, False, id="metadata-applied-since"),
])
def test_reusable(round_: IdleRound | None, version: int, now: float, reused: bool) -> None:
    assert (reusable(round_, metadata_version=version, now=now) is round_ is not None) is reused
