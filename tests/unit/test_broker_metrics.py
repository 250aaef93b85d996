"""broker.broker_metrics: the Prometheus text of the broker's counters and replication gauges."""

from __future__ import annotations

from broker.broker_metrics import METRICS_PREFIX, broker_families
from broker.server import LATENCY_BUCKETS_MS, ServerMetrics
from common.prometheus import exposition, samples
from common.protocol.api_keys import ApiKey

GAUGES = {"partitions_led": 2, "partitions_hosted": 3, "under_replicated": 1, "under_min_isr": 0,
          "at_min_isr": 1, "offline": 0}


def test_counters_histogram_and_gauges() -> None:
    metrics = ServerMetrics(connections_total=5, connections_active=2, bytes_in=100, bytes_out=2048)
    metrics.observe(ApiKey.PRODUCE, 0.5)
    metrics.observe(ApiKey.FETCH, 3)
    metrics.observe(ApiKey.FETCH, 20_000)  # past the last bucket: +Inf only
    metrics.observe(999, 1)  # a key ApiKey does not name is shown by number
    text = exposition(broker_families(metrics, GAUGES))
    p = METRICS_PREFIX
    got = samples(text)
    assert got[f"{p}bytes_in_total"] == 100 and got[f"{p}bytes_out_total"] == 2048
    assert got[f"{p}connections"] == 2 and got[f"{p}connections_total"] == 5
    assert got[f'{p}requests_total{{api="PRODUCE"}}'] == 1
    assert got[f'{p}requests_total{{api="FETCH"}}'] == 2
    assert got[f'{p}requests_total{{api="999"}}'] == 1
    buckets = [got[f'{p}request_latency_ms_bucket{{le="{le}"}}'] for le in (*LATENCY_BUCKETS_MS, "+Inf")]
    assert buckets == sorted(buckets), "buckets are cumulative"
    assert (got[f'{p}request_latency_ms_bucket{{le="1"}}'], buckets[-1]) == (2, 4)
    assert got[f"{p}request_latency_ms_count"] == 4
    assert got[f"{p}request_latency_ms_sum"] == 20_004.5
    assert got[f"{p}partitions_led"] == 2 and got[f"{p}under_replicated_partitions"] == 1
    assert got[f"{p}at_min_isr_partitions"] == 1 and got[f"{p}offline_partitions"] == 0
    assert text.endswith("\n")


def test_large_counters_keep_every_digit() -> None:
    metrics = ServerMetrics(bytes_in=1_234_567_891_234, bytes_out=9_007_199_254_740_000)
    got = samples(exposition(broker_families(metrics, GAUGES)))
    assert got[f"{METRICS_PREFIX}bytes_in_total"] == 1_234_567_891_234
    assert got[f"{METRICS_PREFIX}bytes_out_total"] == 9_007_199_254_740_000


def test_every_metric_has_help_and_type() -> None:
    metrics = ServerMetrics()
    metrics.observe(ApiKey.METADATA, 1)  # requests_total has no sample before the first request
    text = exposition(broker_families(metrics, GAUGES))
    helped = {line.split()[2] for line in text.splitlines() if line.startswith("# HELP ")}
    typed = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    names = {name.split("{")[0].removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
             if name.startswith(f"{METRICS_PREFIX}request_latency_ms") else name.split("{")[0]
             for name in samples(text)}
    assert helped == typed == names
