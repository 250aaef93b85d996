"""The console's aiohttp routes on a controller's admin server.

    controller_server.EXTENSIONS.append(ConsoleRoutes)   # tidelog.cli does, for every controller process

    GET /console/                           the single page (console/static/index.html)
    GET /console/static/{file}              its CSS and JS
    GET /console/api/overview               brokers (state, epoch, heartbeat age, rack, partitions led,
                                            bytes in/out per second) and the history strip
    GET /console/api/topics?q=&page=&size=  one page of topics with the cluster's health counts
    GET /console/api/topics/{name}?page=    a page of partitions with log start/end and size; configs with source
    GET /console/api/topics/{name}/records?partition=&offset=|timestamp=&limit=&format=
    GET /console/api/share-groups/{id}      a share group's partitions: start offset (SPSO), log end, lag

Everything here reads; the page's actions call the admin API's own write endpoints. The views are
`console.views` (pure); Kafka reads go to the brokers in a worker thread (`console.kafka_reads`).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import aiohttp
from aiohttp import web

from console import kafka_reads, views
from console.chaos_routes import ChaosRoutes
from metadata.image import MetadataImage
from metadata.records import NO_LEADER
from quorum import admin_api as api
from quorum import admin_views
from security.controller_tls import controller_url
from security.controller_tls_context import client_context_of

if TYPE_CHECKING:
    from quorum.controller_server import ControllerServer

STATIC: Final = Path(__file__).resolve().parent / "static"
STATIC_FILES: Final = {"index.html": "text/html", "console.js": "application/javascript",
                       "console.css": "text/css"}
METRICS_TIMEOUT: Final = 1.0  # seconds: one broker's /metrics; a slow one shows no rate this poll
MAX_METRICS_BYTES: Final = 1024 * 1024
HISTORY_SCAN_RECORDS: Final = 20_000  # metadata records read back for the history strip


def is_public(path: str) -> bool:
    """The page and its static files hold no cluster data: a browser loads them without a token
    (beyond loopback every /console/api/ read still needs one, as the admin API's)."""
    return path in ("/console", "/console/") or path.startswith("/console/static/")


def _get(summary: str, media: str = "application/json") -> dict[str, Any]:
    return {"get": {"summary": summary, "responses": {"200": {"description": "OK", "content": {
        media: {"schema": {"type": "object" if media == "application/json" else "string"}}}}}}}


# The console's part of GET /openapi.json (quorum.openapi describes the admin API itself).
OPENAPI_PATHS: Final = {
    "/console": {"get": {"summary": "Redirects to /console/.", "responses": {"302": {"description": "/console/"}}}},
    "/console/": _get("The web console's page (no token needed: it holds no data).", "text/html"),
    "/console/static/{file}": _get("The console's CSS and JS.", "text/plain"),
    "/console/api/overview": _get("Brokers with lifecycle state, partitions led and bytes in/out per second "
                                  "(from their /metrics), and the history strip of the metadata log."),
    "/console/api/topics": _get("One page of topics (q: name contains, page, size <= 500) and the cluster's "
                                "offline, under-replicated and under-min-ISR counts."),
    "/console/api/topics/{name}": _get("A page of partitions (page, size <= 1000) with log start/end offsets and "
                                       "size, configs with their source (asked of the brokers)."),
    "/console/api/topics/{name}/records": _get(
        "Up to `limit` (<= 500) records of one partition, at most 1 MiB fetched: from `offset`, from `timestamp`, "
        "or the last ones; key, value and headers as text, json or hex."),
    "/console/api/share-groups/{id}": _get("A KIP-932 share group's partitions: start offset (SPSO), log end "
                                           "offset and the records past the start (as `tidelog groups describe`)."),
    "/console/api/chaos/reports": _get("The chaos reports in console.chaos.reports.dir."),
    "/console/api/chaos/reports/{name}": _get("A run's live summary: phase, faults, acks and latency per second, "
                                              "verdicts once decided."),
    "/console/api/chaos/reports/{name}/{file}": _get("report.html, results.json, scenario.toml or history.jsonl.",
                                                     "text/plain"),
}


class ConsoleRoutes:
    def __init__(self, server: ControllerServer) -> None:
        self._server = server
        self._rows: tuple[int, tuple[views.TopicRow, ...]] | None = None  # (image offset, rows)
        self._led: tuple[int, dict[int, int]] | None = None
        self._strip: tuple[int, list[dict[str, Any]]] | None = None  # (image offset, history strip)
        self._samples: dict[int, tuple[float, Mapping[str, float]]] = {}  # broker -> last /metrics sample
        self._session: aiohttp.ClientSession | None = None
        self._tls: ssl.SSLContext | None = None  # the other controllers' listener: https when configured
        settings = server.settings
        self._metrics_port = settings.console_metrics_port
        self.chaos = ChaosRoutes(Path(settings.console_reports_dir) if settings.console_reports_dir else None)

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/console", self._redirect), web.get("/console/", self._index),
                web.get("/console/static/{file}", self._static),
                web.get("/console/api/overview", self._overview),
                web.get("/console/api/topics", self._topics),
                web.get("/console/api/topics/{name}", self._topic),
                web.get("/console/api/topics/{name}/records", self._records),
                web.get("/console/api/share-groups/{id}", self._share_group),
                *self.chaos.routes()]

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def is_public(self, path: str) -> bool:
        return is_public(path)

    def openapi_paths(self) -> dict[str, Any]:
        return dict(OPENAPI_PATHS)

    # -- the page ----------------------------------------------------------------------

    async def _redirect(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/console/")

    async def _index(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Content-Type": "text/html",
                                                                "Cache-Control": "no-cache"})

    async def _static(self, request: web.Request) -> web.FileResponse:
        name = request.match_info["file"]
        if name not in STATIC_FILES:
            raise web.HTTPNotFound()
        return web.FileResponse(STATIC / name, headers={"Content-Type": STATIC_FILES[name],
                                                        "Cache-Control": "no-cache"})

    # -- reads -------------------------------------------------------------------------

    async def _image(self) -> MetadataImage:
        await self._server.router.caught_up()  # as every admin read: never a stale image after a restart
        return self._server.image()

    def _topic_rows(self, image: MetadataImage) -> tuple[views.TopicRow, ...]:
        if self._rows is None or self._rows[0] != image.offset:
            self._rows = (image.offset, views.topic_rows(image, self._server.settings.min_insync_replicas))
        return self._rows[1]

    def _partitions_led(self, image: MetadataImage) -> dict[int, int]:
        if self._led is None or self._led[0] != image.offset:
            led: dict[int, int] = {}
            for t in image.topics.by_id.values():
                for p in t.partitions.values():
                    if p.leader != NO_LEADER:
                        led[p.leader] = led.get(p.leader, 0) + 1
            self._led = (image.offset, led)
        return self._led[1]

    @staticmethod
    def _brokers(image: MetadataImage) -> dict[int, tuple[str, int]]:
        return {b: (r.listeners[0].host, r.listeners[0].port) for b, r in sorted(image.cluster.brokers.items())
                if not r.fenced and r.listeners}

    async def _from_active(self, request: web.Request, path: str) -> Any:
        """GET `path` of the active controller's admin API (heartbeat ages and Raft match indexes
        are its soft state); None when this is it or it does not answer."""
        node, address = self._server.active_api()
        if node is None or address is None or node == self._server.settings.node_id:
            return None
        headers = {k: v for k, v in request.headers.items() if k.lower() == "authorization"}
        session = self._http()  # made first: it reads the controllers' TLS settings
        try:
            async with session.get(controller_url(address, self._tls) + path, headers=headers) as answer:
                return await answer.json() if answer.status == 200 else None
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
            return None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._tls = client_context_of(self._server.settings.tls)
            self._session = aiohttp.ClientSession(  # https to the active controller when configured (issue 29)
                timeout=aiohttp.ClientTimeout(total=METRICS_TIMEOUT),
                connector=aiohttp.TCPConnector(ssl=self._tls if self._tls is not None else True))
        return self._session

    async def _overview(self, request: web.Request) -> web.Response:
        image = await self._image()
        active_cluster, active_brokers = await asyncio.gather(self._from_active(request, "/v1/cluster"),
                                                              self._from_active(request, "/v1/brokers"))
        ages = self._server.runtime.heartbeat_ages()
        if isinstance(active_brokers, list):
            ages = {b["broker_id"]: b["heartbeat_age_ms"] for b in active_brokers
                    if isinstance(b, dict) and isinstance(b.get("heartbeat_age_ms"), int)}
        led = self._partitions_led(image)
        registrations = image.cluster.brokers
        rates = await asyncio.gather(*(self._rates(b, registrations[b].listeners[0].host)
                                       for b in sorted(registrations) if registrations[b].listeners))
        by_broker = dict(zip((b for b in sorted(registrations) if registrations[b].listeners), rates))
        session_ms = self._server.settings.session_timeout_ms
        brokers = []
        for b in sorted(registrations):
            view = admin_views.broker_view(registrations[b], ages.get(b))
            sample = by_broker.get(b, {"bytes_in_per_s": None, "bytes_out_per_s": None, "reported_state": None})
            reported = sample.pop("reported_state")
            brokers.append({**view, "lifecycle": views.lifecycle_state(view, session_ms, reported),
                            # the broker's own state (its /metrics answered) or the controller's guess
                            "lifecycle_source": "controller" if reported is None else "broker",
                            "partitions_led": led.get(b, 0), **sample})
        return web.json_response({"brokers": brokers, "history": self._history(image),
                                  "active_cluster": active_cluster, "metrics_port": self._metrics_port or None})

    def _history(self, image: MetadataImage) -> list[dict[str, Any]]:
        if self._strip is None or self._strip[0] != image.offset:
            self._strip = (image.offset, self._scan_history(image))
        return self._strip[1]

    def _scan_history(self, image: MetadataImage) -> list[dict[str, Any]]:
        log = self._server._log  # noqa: SLF001 (the server's own log: records_from is a read)
        start = max(log.status().log_start_offset, image.offset - HISTORY_SCAN_RECORDS + 1, 1)
        records: list[tuple[int, Any]] = []
        try:
            while start <= image.offset:  # bounded: HISTORY_SCAN_RECORDS
                chunk = log.records_from(start, 5000)
                if not chunk:
                    break
                records.extend(chunk)
                start = chunk[-1][0] + 1
        except IndexError:  # that part of the log is only in the snapshot now
            pass
        return views.history(records, image)

    async def _metrics_text(self, host: str) -> str | None:
        """A broker's /metrics text (the first MAX_METRICS_BYTES); None without a metrics port
        or an answer within METRICS_TIMEOUT."""
        if not self._metrics_port:
            return None
        try:
            async with self._http().get(f"http://{host}:{self._metrics_port}/metrics") as answer:
                return (await answer.content.read(MAX_METRICS_BYTES)).decode("utf-8", "replace")
        except (aiohttp.ClientError, TimeoutError, OSError):
            return None

    async def _rates(self, broker_id: int, host: str) -> dict[str, Any]:
        """A broker's byte rates and its own lifecycle state ("reported_state"), None each when its
        /metrics did not answer."""
        text = await self._metrics_text(host)
        if text is None:
            return {"bytes_in_per_s": None, "bytes_out_per_s": None, "reported_state": None}
        state = views.broker_state(text)
        sample = (time.monotonic(), views.metric_values(text, (views.BYTES_IN, views.BYTES_OUT)))
        before = self._samples.get(broker_id)
        if before is not None and sample[0] - before[0] < 0.5:  # two tabs polling: keep the longer interval
            return {**views.rates(None, sample), "reported_state": state}
        self._samples[broker_id] = sample
        return {**views.rates(before, sample), "reported_state": state}

    async def _topics(self, request: web.Request) -> web.Response:
        query, page, size = views.parse_topic_query(request.query)
        image = await self._image()
        return web.json_response(views.topic_page(self._topic_rows(image), query=query, page=page, size=size))

    async def _consumer_bytes(self, brokers: Mapping[int, tuple[str, int]], topic: str) -> float | None:
        """Record bytes consumers have fetched from `topic`, summed over the brokers' counters
        (Kafka's BytesOutPerSec{topic}, followers' fetches excluded); the page turns successive
        sums into a rate. None when no broker's /metrics answered."""
        texts = await asyncio.gather(*(self._metrics_text(host) for host, _ in brokers.values()))
        answered = [t for t in texts if t is not None]
        if not answered:
            return None
        return sum(views.topic_sample(t, views.TOPIC_BYTES_OUT, topic) or 0.0 for t in answered)

    async def _topic(self, request: web.Request) -> web.Response:
        image = await self._image()
        topic = api.known_topic(image, request.match_info["name"])
        page, size, ids = views.parse_partition_page(request.query, len(topic.partitions))
        brokers = self._brokers(image)
        offsets, sizes, configs, consumed = await asyncio.gather(
            asyncio.to_thread(kafka_reads.log_offsets, brokers, topic, ids),
            asyncio.to_thread(kafka_reads.log_sizes, brokers, topic, ids),
            asyncio.to_thread(kafka_reads.topic_configs, brokers, topic.name),
            self._consumer_bytes(brokers, topic.name), return_exceptions=True)
        row = views.topic_row(image, topic, self._server.settings.min_insync_replicas)
        return web.json_response({
            **row.view(), "min_insync_replicas": views.min_isr(image, topic.name,
                                                               self._server.settings.min_insync_replicas),
            "partition_count": len(topic.partitions), "page": page, "size": size,
            "pages": max(1, -(-len(topic.partitions) // size)),
            "partitions": views.partitions_view(topic, offsets if isinstance(offsets, dict) else {},
                                                sizes if isinstance(sizes, dict) else {}, ids),
            "configs": configs if isinstance(configs, list) else [],
            "consumer_bytes_total": consumed if isinstance(consumed, float) else None,
            "configs_error": None if isinstance(configs, list) else str(getattr(configs, "message", configs)),
        })

    async def _records(self, request: web.Request) -> web.Response:
        want = views.parse_browse(request.query)
        image = await self._image()
        topic = api.known_topic(image, request.match_info["name"])
        return web.json_response(await asyncio.to_thread(kafka_reads.browse, self._brokers(image), topic, want))

    async def _share_group(self, request: web.Request) -> web.Response:
        group_id = request.match_info["id"]
        image = await self._image()
        starts, ends = await asyncio.to_thread(kafka_reads.share_offsets, self._brokers(image), group_id)
        return web.json_response({"group_id": group_id, "partitions": views.share_partitions(starts, ends)})
