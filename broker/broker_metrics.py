"""The broker's GET /metrics (`metrics.listener`, tidelog's own key): Prometheus text of the
listener's counters, the replication gauges, the group coordinator's and the log cleaners'
(each a list of families; `common.prometheus.exposition` writes them).

    runner = await start_metrics(("127.0.0.1", 9101), lambda: exposition(broker_families(server.metrics, gauges)))
    ...
    await runner.cleanup()
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from broker.replica_selector import FollowerFetchStats
from broker.server import LATENCY_BUCKETS_MS, ServerMetrics
from broker.topic_metrics import BrokerTopicStats
from shutdown.broker_lifecycle import BrokerState
from common.prometheus import (
    CONTENT_TYPE,
    Metric,
    counter,
    gauge,
    histogram,
    unlabelled,
)
from common.protocol.api_keys import ApiKey

logger = logging.getLogger(__name__)

METRICS_PREFIX: Final = "tidelog_broker_"

# Kafka's BrokerState values (org.apache.kafka.metadata.BrokerState), the numbers its
# kafka.server:type=KafkaServer,name=BrokerState gauge reports. SHUTDOWN is ours (the process has
# stopped); Kafka sets NOT_RUNNING once it has shut down, so it reads 0.
KAFKA_BROKER_STATE_VALUES: Final[Mapping[BrokerState, int]] = {
    BrokerState.NOT_RUNNING: 0, BrokerState.STARTING: 1, BrokerState.RECOVERY: 2, BrokerState.RUNNING: 3,
    BrokerState.PENDING_CONTROLLED_SHUTDOWN: 6, BrokerState.SHUTTING_DOWN: 7, BrokerState.SHUTDOWN: 0}


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)


def broker_families(metrics: ServerMetrics, gauges: Mapping[str, int]) -> list[Metric]:
    """The broker's counters and replication gauges."""
    p = METRICS_PREFIX

    return [
        counter(f"{p}bytes_in_total", "Bytes read from client connections.", unlabelled(metrics.bytes_in)),
        counter(f"{p}bytes_out_total", "Bytes written to client connections.", unlabelled(metrics.bytes_out)),
        gauge(f"{p}connections", "Open client connections.", unlabelled(metrics.connections_active)),
        counter(f"{p}connections_total", "Client connections accepted.", unlabelled(metrics.connections_total)),
        counter(f"{p}connections_closed_on_error_total", "Connections closed for a protocol error.",
                unlabelled(metrics.connections_closed_on_error)),
        counter(f"{p}requests_total", "Requests answered, by API.",
                [({"api": _api_name(k)}, v) for k, v in sorted(metrics.requests_by_api.items())]),
        histogram(f"{p}request_latency_ms", "Time from a request's arrival until its response was written.",
                  LATENCY_BUCKETS_MS, metrics.latency_buckets, metrics.latency_sum_ms),
        gauge(f"{p}partitions_led", "Partitions this broker leads.", unlabelled(gauges["partitions_led"])),
        gauge(f"{p}partitions_hosted", "Partitions this broker hosts (leader or follower).",
              unlabelled(gauges["partitions_hosted"])),
        gauge(f"{p}under_replicated_partitions",
              "Partitions this broker leads whose ISR is smaller than their replica set.",
              unlabelled(gauges["under_replicated"])),
        gauge(f"{p}under_min_isr_partitions",
              "Partitions this broker leads whose ISR is smaller than min.insync.replicas.",
              unlabelled(gauges["under_min_isr"])),
        gauge(f"{p}at_min_isr_partitions", "Partitions this broker leads whose ISR is exactly min.insync.replicas.",
              unlabelled(gauges["at_min_isr"])),
        gauge(f"{p}offline_partitions", "Partitions this broker hosts that have no leader.",
              unlabelled(gauges["offline"])),
        gauge(f"{p}failed_replicas", "Replicas this broker could not create or open (offline here until restart).",
              unlabelled(gauges.get("failed_replicas", 0))),
    ]


def follower_fetch_families(stats: FollowerFetchStats, prefix: str = METRICS_PREFIX) -> list[Metric]:
    """KIP-392's counters: what this broker served consumers as a follower, and how often it
    pointed one at another replica as leader."""
    return [
        counter(f"{prefix}follower_fetch_reads_total",
                "Partition reads this broker served to consumers as a follower (KIP-392 follower fetching).",
                unlabelled(stats.follower_reads)),
        counter(f"{prefix}follower_fetch_bytes_total", "Record bytes those reads returned.",
                unlabelled(stats.follower_read_bytes)),
        counter(f"{prefix}preferred_read_replica_answers_total",
                "Consumer partition fetches this leader answered with another replica to read from.",
                unlabelled(stats.preferred_replica_answers)),
    ]


def topic_families(stats: BrokerTopicStats, prefix: str = METRICS_PREFIX) -> list[Metric]:
    """Kafka's BrokerTopicMetrics BytesOutPerSec{topic}: record bytes returned to consumers
    (not followers, KIP-153), per topic; the web console draws a topic's consume rate from it."""
    return [counter(f"{prefix}topic_bytes_out_total", "Record bytes returned to consumers' fetches, by topic.",
                    [({"topic": t}, v) for t, v in sorted(stats.bytes_out.items())])]


def broker_state_families(state: BrokerState, prefix: str = METRICS_PREFIX) -> list[Metric]:
    """Kafka's BrokerState gauge: the broker's own lifecycle state as Kafka's number, its name as a
    label (one sample: a query on the number or on the name both work); the web console shows it."""
    return [gauge(f"{prefix}state", "This broker's lifecycle state (Kafka's BrokerState: 0 NOT_RUNNING, "
                  "1 STARTING, 2 RECOVERY, 3 RUNNING, 6 PENDING_CONTROLLED_SHUTDOWN, 7 SHUTTING_DOWN).",
                  [({"state": state.value}, KAFKA_BROKER_STATE_VALUES[state])])]


async def start_metrics(address: tuple[str, int], render: Callable[[], str],
                        routes: Iterable[tuple[str, str, Any]] = ()) -> Any:
    """A small aiohttp app serving GET /metrics and `routes` ((method, path, handler): the request
    faults' control routes, broker/request_fault_hook.py); returns its runner (`cleanup()` stops it)."""
    from aiohttp import web

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=render().encode(), headers={"Content-Type": CONTENT_TYPE})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    for method, path, handler in routes:
        app.router.add_route(method, path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, address[0], address[1], reuse_address=True).start()
    logger.info("Metrics on http://%s:%d/metrics", *address)
    return runner
