"""The admin API's transaction endpoints (KIP-664, kafka-transactions.sh's commands): the
controller asks the brokers in Kafka's protocol, driving `common.transaction_admin`'s steps.

    GET  /v1/transactions[?duration_filter=MS]         list (ListTransactions on every broker)
    GET  /v1/transactions/{id}                         describe (at the id's coordinator)
    GET  /v1/topics/{name}/partitions/{partition}/producers[?broker_id=B]
                                                       describe-producers (leader, or replica B)
    POST /v1/topics/{name}/partitions/{partition}/abort-transaction
                                                       {"start_offset": N} (or "producer_id",
                                                       "producer_epoch", "coordinator_epoch")
    GET  /v1/hanging-transactions?topic=T[&partition=P]|broker_id=B[&max_transaction_timeout=15]
                                                       find-hanging (minutes, Kafka's default 15)

Transactions live in the brokers (their coordinators and partition leaders), not in the
metadata log: each call opens one short connection to the broker it asks, bounded by
`timeout_s`. Kafka error names and 4xx/5xx statuses as the rest of the admin API; a bad
parameter answers 400 naming it in `field`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Final

from aiohttp import web

from common import transaction_admin as ta
from common.limits import ADMIN_BROKER_CALL_TIMEOUT, CLIENT_RETRY_BACKOFF, MAX_ADMIN_BROKER_ANSWER_BYTES
from common.protocol.frame import ClientFraming, strip_response_header
from common.protocol.primitives import ProtocolError
from common.topic_partition import TopicPartition
from common.units import MINUTE_MS
from metadata.image import MetadataImage
from quorum import admin_api as api
from quorum.admin_api import AdminError

CLIENT_ID: Final = "tidelog-admin-api"
MAX_TIMEOUT_MINUTES: Final = 7 * 24 * 60  # a week: far above transaction.max.timeout.ms's 15-minute default
ABORT_FIELDS: Final = ("start_offset", "producer_id", "producer_epoch", "coordinator_epoch")
HANGING_PARAMS: Final = ("topic", "partition", "broker_id", "max_transaction_timeout")
PRODUCERS_PARAMS: Final = ("broker_id",)
LIST_PARAMS: Final = ("duration_filter",)
_STATUS: Final = {"UNKNOWN_TOPIC_OR_PARTITION": 404, "TRANSACTIONAL_ID_NOT_FOUND": 404,
                  "BROKER_NOT_AVAILABLE": 503, "LEADER_NOT_AVAILABLE": 503, "NOT_LEADER_OR_FOLLOWER": 503,
                  "COORDINATOR_NOT_AVAILABLE": 503, "COORDINATOR_LOAD_IN_PROGRESS": 503, "NOT_COORDINATOR": 503,
                  "UNSUPPORTED_VERSION": 501, "CLUSTER_AUTHORIZATION_FAILED": 403,
                  "TRANSACTION_COORDINATOR_FENCED": 409, "UNKNOWN_SERVER_ERROR": 502}


def _refused(e: ta.TransactionToolError) -> AdminError:
    return AdminError(e.error, e.message, e.field, status=_STATUS.get(e.error, 400))


def listing_json(x: ta.TransactionListing) -> dict[str, Any]:
    return {"transactional_id": x.transactional_id, "coordinator": x.coordinator, "producer_id": x.producer_id,
            "state": x.state}


def description_json(d: ta.TransactionDescription, now_ms: int) -> dict[str, Any]:
    start = d.transaction_start_time_ms
    return {"coordinator_id": d.coordinator_id, "transactional_id": d.transactional_id,
            "producer_id": d.producer_id, "producer_epoch": d.producer_epoch, "state": d.state,
            "transaction_timeout_ms": d.transaction_timeout_ms, "transaction_start_time_ms": start,
            "transaction_duration_ms": None if start is None else now_ms - start,
            "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in d.partitions]}


def producer_json(p: ta.ProducerState) -> dict[str, Any]:
    return {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
            "coordinator_epoch": p.coordinator_epoch, "last_sequence": p.last_sequence,
            "last_timestamp": p.last_timestamp, "current_transaction_start_offset": p.current_transaction_start_offset}


def hanging_json(t: ta.OpenTransaction, now_ms: int) -> dict[str, Any]:
    return {"topic": t.tp.topic, "partition": t.tp.partition, **producer_json(t.producer),
            "duration_minutes": (now_ms - t.producer.last_timestamp) // MINUTE_MS}


def _int_param(query: Any, name: str, low: int, high: int) -> int | None:
    text = query.get(name)
    if text is None:
        return None
    if not text.isascii() or not text.lstrip("-").isdigit() or len(text) > 20:
        raise api.invalid(f"{name} must be an integer, got {text!r}", name)
    return api.check_int(int(text), name, low, high)


def _known_params(query: Any, allowed: tuple[str, ...]) -> None:
    for key in query:
        if key not in allowed:
            raise api.invalid(f"unknown parameter {key!r} (expected {', '.join(allowed)})", key)


def parse_partition(text: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 10 or int(text) > 2**31 - 1:
        raise api.invalid(f"partition must be a non-negative 32-bit integer, got {text!r}", "partition")
    return int(text)


def parse_hanging(query: Any) -> dict[str, Any]:
    """find-hanging's parameters: Kafka's scope rules, each error naming its parameter."""
    _known_params(query, HANGING_PARAMS)
    topic = query.get("topic")
    if topic is not None:
        api.check_topic_name(topic, "topic")
    out = {"topic": topic, "partition": _int_param(query, "partition", 0, 2**31 - 1),
           "broker_id": _int_param(query, "broker_id", 0, 2**31 - 1)}
    if out["topic"] is None and out["broker_id"] is None:
        raise api.invalid("give topic or broker_id to limit the scope of the search", "topic")
    if out["partition"] is not None and out["topic"] is None:
        raise api.invalid("partition requires topic", "partition")
    minutes = _int_param(query, "max_transaction_timeout", 0, MAX_TIMEOUT_MINUTES)
    out["max_transaction_timeout_ms"] = (ta.DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES if minutes is None
                                         else minutes) * MINUTE_MS
    return out


def parse_abort(body: Any, tp: TopicPartition) -> int | ta.AbortSpec:
    """{"start_offset": N}, or the older brokers' explicit producer (Kafka's abort options)."""
    body = api.check_object(body, ABORT_FIELDS)
    if "start_offset" in body:
        if len(body) > 1:
            raise api.invalid("give start_offset alone, or producer_id, producer_epoch and coordinator_epoch",
                              sorted(set(body) - {"start_offset"})[0])
        return api.check_int(body["start_offset"], "start_offset", 0, 2**63 - 1)
    for name in ("producer_id", "producer_epoch", "coordinator_epoch"):
        if name not in body:
            raise api.invalid(f"missing field {name!r} (or give start_offset)",
                              "start_offset" if not body else name)
    return ta.AbortSpec(tp, api.check_int(body["producer_id"], "producer_id", 0, 2**63 - 1),
                        api.check_int(body["producer_epoch"], "producer_epoch", 0, 2**15 - 1),
                        max(api.check_int(body["coordinator_epoch"], "coordinator_epoch", -1, 2**31 - 1), 0))


class TransactionApi:
    def __init__(self, image: Callable[[], MetadataImage], authorize: Callable[[web.Request], None], *,
                 timeout_s: float = ADMIN_BROKER_CALL_TIMEOUT) -> None:
        self._image, self._authorize, self.timeout_s = image, authorize, timeout_s

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/v1/transactions", self._list), web.get("/v1/transactions/{id}", self._describe),
                web.get("/v1/topics/{name}/partitions/{partition}/producers", self._producers),
                web.post("/v1/topics/{name}/partitions/{partition}/abort-transaction", self._abort),
                web.get("/v1/hanging-transactions", self._hanging)]

    # ---- the shell ------------------------------------------------------------------------

    def _addresses(self) -> dict[int, tuple[str, int]]:
        return {broker_id: (b.listeners[0].host, b.listeners[0].port)
                for broker_id, b in sorted(self._image().cluster.brokers.items()) if not b.fenced and b.listeners}

    def _cluster(self) -> ta.Cluster:
        image = self._image()
        partitions = {TopicPartition(t.name, p): ta.PartitionView(r.leader, tuple(r.replicas))
                      for t in image.topics.by_id.values() for p, r in t.partitions.items()}
        return ta.Cluster(tuple(self._addresses()), partitions, frozenset(image.topics.by_name))

    async def _send(self, call: ta.Call) -> Any:
        addresses = self._addresses()
        targets = list(addresses) if call.broker_id == ta.ANY_BROKER else [call.broker_id]
        reasons = []
        for broker_id in targets:  # bounded: each unfenced broker once
            address = addresses.get(broker_id)
            if address is None:
                reasons.append(f"broker {broker_id} is not unfenced")
                continue
            try:
                return await self._call(address, call)
            except (OSError, TimeoutError, EOFError, ProtocolError, asyncio.IncompleteReadError) as e:
                reasons.append(f"broker {broker_id}: {e or type(e).__name__}")
        return ta.Unreachable("; ".join(reasons) or "no unfenced broker")

    async def _call(self, address: tuple[str, int], call: ta.Call) -> Any:
        framing = ClientFraming(CLIENT_ID, MAX_ADMIN_BROKER_ANSWER_BYTES)
        writer = None
        try:
            async with asyncio.timeout(self.timeout_s):
                reader, writer = await asyncio.open_connection(*address)
                writer.write(framing.request(call.api_key, call.version, call.encode_body()))
                await writer.drain()
                head = await reader.readexactly(ClientFraming.HEAD_BYTES)
                body = await reader.readexactly(framing.body_size(head))
            return call.decode_body(strip_response_header(call.api_key, call.version, memoryview(body)))
        finally:
            if writer is not None:
                writer.close()

    async def _run(self, steps: ta.Steps) -> Any:
        try:
            step = next(steps)
            while True:  # bounded: every step function has a bounded number of calls
                if isinstance(step, ta.Backoff):
                    await asyncio.sleep(CLIENT_RETRY_BACKOFF)
                    step = steps.send(None)
                else:
                    step = steps.send(await self._send(step))
        except StopIteration as done:
            return done.value
        except ta.TransactionToolError as e:
            raise _refused(e) from None

    def _partition(self, request: web.Request) -> TopicPartition:
        topic = api.known_topic(self._image(), request.match_info["name"])
        partition = parse_partition(request.match_info["partition"])
        if partition not in topic.partitions:
            raise AdminError("UNKNOWN_TOPIC_OR_PARTITION", f"{topic.name}-{partition} does not exist", "partition")
        return TopicPartition(topic.name, partition)

    # ---- handlers ------------------------------------------------------------------------

    async def _list(self, request: web.Request) -> web.Response:
        _known_params(request.query, LIST_PARAMS)
        duration = _int_param(request.query, "duration_filter", -(2**63), 2**63 - 1)
        listings = await self._run(ta.list_transactions(self._cluster(), duration_filter_ms=duration))
        return web.json_response([listing_json(x) for _, xs in sorted(listings.items()) for x in xs])

    async def _describe(self, request: web.Request) -> web.Response:
        description = await self._run(ta.describe_transaction(request.match_info["id"]))
        return web.json_response(description_json(description, int(time.time() * 1000)))

    async def _producers(self, request: web.Request) -> web.Response:
        _known_params(request.query, PRODUCERS_PARAMS)
        tp = self._partition(request)
        broker_id = _int_param(request.query, "broker_id", 0, 2**31 - 1)
        producers = await self._run(ta.describe_producers(self._cluster(), tp, broker_id))
        return web.json_response({"topic": tp.topic, "partition": tp.partition, "broker_id": broker_id,
                                  "producers": [producer_json(p) for p in producers]})

    async def _abort(self, request: web.Request) -> web.Response:
        self._authorize(request)
        tp = self._partition(request)
        try:
            body = await request.json()
        except ValueError:
            raise api.invalid("the request body is not JSON", None) from None
        what = parse_abort(body, tp)
        if isinstance(what, ta.AbortSpec):
            spec = await self._run(ta.write_abort_marker(self._cluster(), what))
        else:
            spec = await self._run(ta.abort_transaction(self._cluster(), tp, what))
        return web.json_response({"topic": tp.topic, "partition": tp.partition, "producer_id": spec.producer_id,
                                  "producer_epoch": spec.producer_epoch, "coordinator_epoch": spec.coordinator_epoch,
                                  "aborted": True})

    async def _hanging(self, request: web.Request) -> web.Response:
        options = parse_hanging(request.query)
        now_ms = int(time.time() * 1000)
        found = await self._run(ta.find_hanging(self._cluster(), now_ms=now_ms, **options))
        return web.json_response([hanging_json(t, now_ms) for t in found])
