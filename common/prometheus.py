"""Prometheus text exposition for every /metrics tidelog serves: metric families described here
and written by prometheus_client (its escaping, value formatting and histogram layout), so the
broker, its log cleaners, its group coordinator and the controller share one writer.

    text = exposition([
        counter("tidelog_broker_requests_total", "Requests answered, by API.",
                [({"api": "PRODUCE"}, 12), ({"api": "FETCH"}, 40)]),
        gauge("tidelog_broker_connections", "Open client connections.", [({}, 3)]),
    ])
    samples(text)["tidelog_broker_requests_total{api=\"FETCH\"}"]  # 40.0
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "Labels", "Metric", "Sample", "counter", "exposition", "gauge", "histogram",
           "labelled_histogram", "sample_key", "samples", "unlabelled"]

# What generate_latest writes: the text format 0.0.4.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = Mapping[str, object]
Sample = tuple[Labels, float]


def unlabelled(value: float) -> list[Sample]:
    """The samples of a family that is one number."""
    return [({}, value)]


def _label_names(samples: Sequence[Sample]) -> list[str]:
    names = list(samples[0][0]) if samples else []
    for labels, _ in samples:
        if list(labels) != names:
            raise ValueError(f"every sample of a family has the same labels: {names} vs {list(labels)}")
    return names


def _family(metric: GaugeMetricFamily | CounterMetricFamily, samples: Sequence[Sample]) -> Metric:
    for labels, value in samples:
        metric.add_metric([str(v) for v in labels.values()], value)
    return metric


def gauge(name: str, help_text: str, samples: Iterable[Sample]) -> Metric:
    """A gauge family (no samples: still named, with its HELP and TYPE)."""
    listed = list(samples)
    return _family(GaugeMetricFamily(name, help_text, labels=_label_names(listed)), listed)


def counter(name: str, help_text: str, samples: Iterable[Sample]) -> Metric:
    """A counter family; `name` ends in _total, as the format wants."""
    if not name.endswith("_total"):
        raise ValueError(f"a counter's name ends in _total: {name}")
    listed = list(samples)
    return _family(CounterMetricFamily(name, help_text, labels=_label_names(listed)), listed)


def _cumulative(name: str, bounds: Sequence[float], counts: Sequence[int]) -> list[tuple[str, float]]:
    """Per-bucket counts (one more than `bounds`: the +Inf bucket) as the format's cumulative buckets."""
    if len(counts) != len(bounds) + 1:
        raise ValueError(f"{name}: {len(counts)} bucket counts for {len(bounds)} bounds and +Inf")
    cumulative: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip((*bounds, math.inf), counts):
        running += count
        cumulative.append(("+Inf" if bound == math.inf else f"{bound:g}", running))
    return cumulative


def histogram(name: str, help_text: str, bounds: Sequence[float], counts: Sequence[int],
              total: float) -> Metric:
    """A histogram from per-bucket counts (`counts` has one entry more than `bounds`: the +Inf
    bucket); the family carries cumulative buckets, as the format wants."""
    return HistogramMetricFamily(name, help_text, buckets=_cumulative(name, bounds, counts), sum_value=total)


def labelled_histogram(name: str, help_text: str, label: str, bounds: Sequence[float],
                       series: Iterable[tuple[str, Sequence[int], float]]) -> Metric:
    """One histogram per value of `label`: `series` holds (label value, per-bucket counts, sum)."""
    family = HistogramMetricFamily(name, help_text, labels=[label])
    for value, counts, total in series:
        family.add_metric([value], _cumulative(name, bounds, counts), total)
    return family


class _Families(Collector):
    """The collector generate_latest reads: the families of one scrape."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def exposition(families: Iterable[Metric]) -> str:
    """The text a scrape gets."""
    return generate_latest(_Families(families)).decode()


def sample_key(name: str, labels: Labels) -> str:
    """How `samples` names one sample: `name` or `name{k="v",...}`, labels sorted by name (as
    prometheus_client writes them)."""
    if not labels:
        return name
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def samples(text: str) -> dict[str, float]:
    """Every sample of a scrape, read by prometheus_client's parser (histogram buckets, _sum and
    _count included), by `sample_key`: what tests, benches and the CLI read a /metrics with."""
    return {sample_key(s.name, s.labels): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}
