"""common.prometheus: families written by prometheus_client and read back by its parser."""

from __future__ import annotations

import pytest

from common.prometheus import counter, exposition, gauge, histogram, samples


def test_values_labels_and_escapes_round_trip() -> None:
    text = exposition([
        counter("t_requests_total", "Requests.", [({"api": "PRODUCE"}, 3), ({"api": 'odd "name"\\\n'}, 2**53)]),
        gauge("t_ratio", "A share.", [({"topic": "a", "partition": 0}, 0.125)]),
    ])
    assert samples(text) == {'t_requests_total{api="PRODUCE"}': 3, 't_requests_total{api="odd "name"\\\n"}': 2**53,
                             't_ratio{partition="0",topic="a"}': 0.125}
    assert "# TYPE t_requests_total counter" in text and "# TYPE t_ratio gauge" in text


def test_a_family_without_samples_is_still_named() -> None:
    text = exposition([gauge("t_empty", "Nothing yet.", [])])
    assert text.splitlines() == ["# HELP t_empty Nothing yet.", "# TYPE t_empty gauge"]
    assert samples(text) == {}


def test_histogram_buckets_are_cumulative() -> None:
    got = samples(exposition([histogram("t_latency_ms", "Latency.", (1, 2.5, 10), [4, 0, 3, 1], 31.5)]))
    assert got == {'t_latency_ms_bucket{le="1"}': 4, 't_latency_ms_bucket{le="2.5"}': 4,
                   't_latency_ms_bucket{le="10"}': 7, 't_latency_ms_bucket{le="+Inf"}': 8,
                   "t_latency_ms_count": 8, "t_latency_ms_sum": 31.5}


@pytest.mark.parametrize("build, message", [
    (lambda: counter("t_requests", "No suffix.", []), "ends in _total"),
    (lambda: gauge("t_g", "Mixed labels.", [({"a": 1}, 1), ({"b": 1}, 2)]), "same labels"),
    (lambda: histogram("t_h", "Short.", (1, 2), [1, 2], 0), "bucket counts"),
])
def test_malformed_families_are_refused(build, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        build()
