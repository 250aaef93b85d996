"""The broker's GET /metrics (`metrics.listener`, tidelog's own key): Prometheus text of the
listener's counters, the replication gauges, the group coordinator's and the log cleaners'.

    runner = await start_metrics(("127.0.0.1", 9101), lambda: render_metrics(server.metrics, gauges))
    ...
    await runner.cleanup()
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from broker.server import LATENCY_BUCKETS_MS, ServerMetrics
from common.protocol.api_keys import ApiKey

logger = logging.getLogger(__name__)

METRICS_PREFIX: Final = "tidelog_broker_"


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)


def render_metrics(metrics: ServerMetrics, gauges: Mapping[str, int]) -> str:
    """Prometheus text exposition (version 0.0.4) of the broker's counters."""
    p = METRICS_PREFIX
    lines: list[str] = []

    def sample(name: str, kind: str, doc: str, values: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {p}{name} {doc}")
        lines.append(f"# TYPE {p}{name} {kind}")
        lines.extend(f"{p}{name}{labels} {value:g}" for labels, value in values)

    sample("bytes_in_total", "counter", "Bytes read from client connections.", [("", metrics.bytes_in)])
    sample("bytes_out_total", "counter", "Bytes written to client connections.", [("", metrics.bytes_out)])
    sample("connections", "gauge", "Open client connections.", [("", metrics.connections_active)])
    sample("connections_total", "counter", "Client connections accepted.", [("", metrics.connections_total)])
    sample("connections_closed_on_error_total", "counter", "Connections closed for a protocol error.",
           [("", metrics.connections_closed_on_error)])
    sample("requests_total", "counter", "Requests answered, by API.",
           [(f'{{api="{_api_name(k)}"}}', v) for k, v in sorted(metrics.requests_by_api.items())])
    lines.append(f"# HELP {p}request_latency_ms Time from a request's arrival until its response was written.")
    lines.append(f"# TYPE {p}request_latency_ms histogram")
    cumulative = 0
    for bound, count in zip((*LATENCY_BUCKETS_MS, "+Inf"), metrics.latency_buckets):
        cumulative += count
        lines.append(f'{p}request_latency_ms_bucket{{le="{bound}"}} {cumulative}')
    lines.append(f"{p}request_latency_ms_sum {metrics.latency_sum_ms:g}")
    lines.append(f"{p}request_latency_ms_count {metrics.latency_count}")
    sample("partitions_led", "gauge", "Partitions this broker leads.", [("", gauges["partitions_led"])])
    sample("partitions_hosted", "gauge", "Partitions this broker hosts (leader or follower).",
           [("", gauges["partitions_hosted"])])
    sample("under_replicated_partitions", "gauge",
           "Partitions this broker leads whose ISR is smaller than their replica set.",
           [("", gauges["under_replicated"])])
    sample("under_min_isr_partitions", "gauge",
           "Partitions this broker leads whose ISR is smaller than min.insync.replicas.",
           [("", gauges["under_min_isr"])])
    sample("at_min_isr_partitions", "gauge",
           "Partitions this broker leads whose ISR is exactly min.insync.replicas.",
           [("", gauges["at_min_isr"])])
    sample("offline_partitions", "gauge", "Partitions this broker hosts that have no leader.",
           [("", gauges["offline"])])
    return "\n".join(lines) + "\n"


async def start_metrics(address: tuple[str, int], render: Callable[[], str]) -> Any:
    """A small aiohttp app serving GET /metrics; returns its runner (call `cleanup()` to stop)."""
    from aiohttp import web

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=render(), content_type="text/plain", charset="utf-8",
                            headers={"X-Prometheus-Format": "0.0.4"})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, address[0], address[1], reuse_address=True).start()
    logger.info("Metrics on http://%s:%d/metrics", *address)
    return runner
