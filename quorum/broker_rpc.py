"""Broker RPCs under /rpc/ (msgpack bodies) and the active controller's broker-liveness duties.

    POST /rpc/broker-registration   -> broker_epoch (the offset of its RegisterBroker record)
    POST /rpc/broker-heartbeat      -> is_caught_up, is_fenced, should_shut_down, shutdown_requested
    POST /rpc/alter-partition       -> per-partition results, as Kafka's AlterPartitionResponse
    POST /rpc/allocate-producer-ids -> producer_id_start, producer_id_len
    POST /rpc/metadata-fetch        -> committed records from `offset` (long-poll), or a snapshot

Field names are Kafka's request/response fields in snake_case; every answer carries
`error_code` (Kafka's code, 0 for none) and `error_message`. Writes are answered by the
active controller only: any other controller answers NOT_CONTROLLER (41) with
`controller_id` and `controller_address` of the active one, as Kafka's controllers do, and
the broker retries there (redirect, not forward: a broker's session belongs to one
controller). MetadataFetch is answered by every controller from its committed log.

An undecodable or ill-typed body answers HTTP 400 with INVALID_REQUEST (42) naming the field.

Liveness: the active controller keeps sessions in a `BrokerHeartbeatManager`, new for
each epoch it is active in (sessions start "now", Kafka's activate()), and fences at most
one expired broker every broker.heartbeat.interval.ms / 2. `shutdown_requested` (not in
Kafka) relays an operator's POST /v1/brokers/{id}/shutdown: see `shutdown.controller_states`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import msgpack
from aiohttp import web

from common.errors import ErrorCode
from metadata.codec import MetadataRecordError
from metadata.image import MetadataImage
from metadata.partition_change import IsrMember
from metadata.records import Listener, record_to_map
from metadata.snapshot import encode_snapshot
from quorum import admin_api as api
from quorum.active_controller import (
    ActiveController,
    ControllerBusyError,
    NotActiveControllerError,
)
from quorum.admin_api import ApiSettings
from quorum.broker_control import (
    check_broker_epoch,
    fence_broker,
    process_heartbeat,
    register_broker,
)
from quorum.controller_result import ControllerApiError, ControllerResult
from quorum.heartbeat_manager import BrokerHeartbeatManager
from quorum.log_state import AppendOutcome, OutcomeKind, RecordTooLargeError
from quorum.producer_ids import PRODUCER_ID_BLOCK_SIZE, allocate_producer_ids
from quorum.replication_control import handle_alter_partition
from shutdown.controller_states import ShutdownRequestOutcome, shutdown_request_outcome

if TYPE_CHECKING:
    from quorum.metadata_log import MetadataLog

logger = logging.getLogger(__name__)

MSGPACK: Final = "application/x-msgpack"
# Kafka error codes this module answers with that the rules never raise.
REQUEST_TIMED_OUT: Final = 7
THROTTLING_QUOTA_EXCEEDED: Final = 89
INCONSISTENT_CLUSTER_ID: Final = 104
INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class NotCommittedError(Exception):
    """A decision's records were appended but not committed: FENCED, REJECTED or UNKNOWN."""

    def __init__(self, outcome: AppendOutcome) -> None:
        partial = f" (offsets {outcome.first_offset}..{outcome.last_offset} did commit)" \
            if outcome.first_offset is not None else ""
        super().__init__(f"the records were {outcome.kind.value}: {outcome.reason}{partial}")
        self.outcome = outcome
        self.unknown = outcome.kind is OutcomeKind.UNKNOWN
        # FENCED/REJECTED before any chunk committed: safe to send again (to the active controller)
        self.applied_nothing = not self.unknown and outcome.first_offset is None


async def decide_result(controller: ActiveController, fn: Callable[[MetadataImage], ControllerResult[Any]],
                        timeout_s: float) -> tuple[Any, AppendOutcome | None]:
    """Run a rule through `controller.decide`: (its response, the committed outcome or None).

    Records that fit one chunk (`quorum.log_state.MAX_CHUNK_BYTES`, ~100 partition records)
    commit atomically. A longer list of a result that is not `atomic` (a topic with many
    partitions, fencing a broker that leads hundreds) is appended chunk by chunk, in order, and
    a failover can stop it between
    two chunks: NotCommittedError then says which offsets did commit. Raises what `decide`
    raises (nothing appended) and the rule's own ControllerApiError (nothing appended).
    """
    responses: list[Any] = []

    def decision(image: MetadataImage) -> ControllerResult[Any]:
        result = fn(image)
        responses.append(result.response)
        return result  # its `atomic` decides how the records are appended

    outcome = await controller.decide(decision, timeout_s)
    if outcome is not None and not outcome.committed:
        raise NotCommittedError(outcome)
    return responses[-1], outcome


class RpcError(Exception):
    """An RPC answered with a Kafka error code (HTTP 200 unless the body itself was bad)."""

    def __init__(self, code: int, message: str, field: str | None = None, *, http_status: int = 200,
                 extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.reply = {"error_code": int(code), "error_message": message, "field": field, **(extra or {})}
        self.http_status = http_status


# --- Decoding: a msgpack map in, checked values out; RpcError(INVALID_REQUEST) naming the field.


def _bad(message: str, field: str | None) -> RpcError:
    return RpcError(ErrorCode.INVALID_REQUEST, message, field, http_status=400)


def _map(body: Any, required: tuple[str, ...], optional: tuple[str, ...] = (), where: str = "") -> dict[str, Any]:
    if not isinstance(body, dict):
        what = where.rstrip(".") or "the request body"
        raise _bad(f"{what} must be a map, got {type(body).__name__}", where.rstrip(".") or None)
    for key in body:
        if key not in required and key not in optional:
            raise _bad(f"unknown field {key!r}", where + str(key))
    for key in required:
        if key not in body:
            raise _bad(f"missing field {key!r}", where + key)
    return body


def _int(body: dict[str, Any], key: str, low: int, high: int, where: str = "", default: int | None = None) -> int:
    value = body.get(key, default)
    if type(value) is not int or not low <= value <= high:
        raise _bad(f"{where}{key} must be an integer in [{low}, {high}], got {value!r:.40}", where + key)
    return value


def _str(body: dict[str, Any], key: str, where: str = "", *, nullable: bool = False) -> str | None:
    value = body.get(key)
    if (value is None and nullable) or (isinstance(value, str) and 0 < len(value) <= api.MAX_RPC_STRING_CHARS):
        return value
    raise _bad(f"{where}{key} must be a non-empty string{' or nil' if nullable else ''}", where + key)


def _bool(body: dict[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if type(value) is not bool:
        raise _bad(f"{key} must be a boolean, got {value!r:.40}", key)
    return value


def _list(body: dict[str, Any], key: str, where: str = "", limit: int = api.MAX_RPC_ARRAY_ITEMS) -> list[Any]:
    value = body.get(key)
    if not isinstance(value, list) or len(value) > limit:
        raise _bad(f"{where}{key} must be an array of at most {limit} items", where + key)
    return value


@dataclass(frozen=True, slots=True)
class AlterPartitionData:
    partition_index: int
    leader_epoch: int
    partition_epoch: int
    leader_recovery_state: int
    new_isr: tuple[IsrMember, ...]


def decode_registration(body: Any) -> dict[str, Any]:
    m = _map(body, ("broker_id", "incarnation_id", "listeners"), ("rack", "cluster_id"))
    listeners = []
    for i, item in enumerate(_list(m, "listeners", limit=api.MAX_RPC_LISTENERS)):
        at = f"listeners[{i}]."
        lm = _map(item, ("name", "host", "port"), (), at)
        listeners.append(Listener(_str(lm, "name", at), _str(lm, "host", at), _int(lm, "port", 1, 65535, at)))
    return {"broker_id": _int(m, "broker_id", 0, INT32_MAX), "incarnation_id": _str(m, "incarnation_id"),
            "listeners": tuple(listeners), "rack": _str(m, "rack", nullable=True),
            "cluster_id": _str(m, "cluster_id", nullable=True)}


def decode_heartbeat(body: Any) -> dict[str, Any]:
    m = _map(body, ("broker_id", "broker_epoch", "current_metadata_offset"), ("want_fence", "want_shut_down"))
    return {"broker_id": _int(m, "broker_id", 0, INT32_MAX), "broker_epoch": _int(m, "broker_epoch", -1, INT64_MAX),
            "metadata_offset": _int(m, "current_metadata_offset", -1, INT64_MAX),
            "want_fence": _bool(m, "want_fence"), "want_shutdown": _bool(m, "want_shut_down")}


def decode_broker(body: Any) -> dict[str, Any]:
    m = _map(body, ("broker_id", "broker_epoch"))
    return {"broker_id": _int(m, "broker_id", 0, INT32_MAX), "broker_epoch": _int(m, "broker_epoch", -1, INT64_MAX)}


def decode_alter_partition(body: Any) -> dict[str, Any]:
    m = _map(body, ("broker_id", "broker_epoch", "topics"))
    topics: list[tuple[str, tuple[AlterPartitionData, ...]]] = []
    seen: set[tuple[str, int]] = set()
    for i, item in enumerate(_list(m, "topics")):
        at = f"topics[{i}]."
        tm = _map(item, ("topic_id", "partitions"), (), at)
        topic_id, parts = _str(tm, "topic_id", at), []
        for j, p in enumerate(_list(tm, "partitions", at)):
            pat = f"{at}partitions[{j}]."
            pm = _map(p, ("partition_index", "leader_epoch", "partition_epoch", "new_isr_with_epochs"),
                      ("leader_recovery_state",), pat)
            index = _int(pm, "partition_index", 0, INT32_MAX, pat)
            if (topic_id, index) in seen:  # two changes from one image would contradict each other
                raise _bad(f"partition {index} of topic id {topic_id} appears twice", pat + "partition_index")
            seen.add((str(topic_id), index))
            isr = [_map(e, ("broker_id", "broker_epoch"), (), f"{pat}new_isr_with_epochs[{k}].")
                   for k, e in enumerate(_list(pm, "new_isr_with_epochs", pat, limit=api.MAX_RPC_ISR))]
            parts.append(AlterPartitionData(
                index, _int(pm, "leader_epoch", 0, INT32_MAX, pat), _int(pm, "partition_epoch", 0, INT32_MAX, pat),
                _int(pm, "leader_recovery_state", 0, 1, pat, default=0),
                tuple(IsrMember(_int(e, "broker_id", 0, INT32_MAX, pat), _int(e, "broker_epoch", -1, INT64_MAX, pat))
                      for e in isr)))
        topics.append((str(topic_id), tuple(parts)))
    return {**decode_broker({"broker_id": m["broker_id"], "broker_epoch": m["broker_epoch"]}), "topics": topics}


def decode_fetch(body: Any) -> dict[str, Any]:
    m = _map(body, ("offset",), ("max_wait_ms", "max_records", "broker_id"))
    _int(m, "broker_id", -1, INT32_MAX, default=-1)  # who asks, for nobody but the reader of a capture
    return {"offset": _int(m, "offset", 0, INT64_MAX),
            "max_wait_ms": _int(m, "max_wait_ms", 0, api.LONG_POLL_MAX_WAIT_MS, default=0),
            "max_records": _int(m, "max_records", 1, api.MAX_FETCH_RECORDS, default=api.MAX_FETCH_RECORDS)}


# --- The server side.

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class BrokerRpc:
    """The /rpc/ routes, the broker sessions of the active controller and its fencing task."""

    def __init__(self, log: MetadataLog, controller: ActiveController, settings: ApiSettings, *,
                 active_api: Callable[[], tuple[int | None, str | None]],
                 clock: Callable[[], int] = monotonic_ms) -> None:
        self._log, self._controller, self._settings = log, controller, settings
        self._active_api, self._clock = active_api, clock
        self._sessions = BrokerHeartbeatManager(settings.session_timeout_ms)
        self._sessions_epoch: int | None = None
        # broker id -> the broker epoch an operator asked to shut down (POST /v1/brokers/{id}/shutdown);
        # soft state of this active epoch, like the sessions; at most one entry per registered broker
        self._shutdown_requests: dict[int, int] = {}
        # A heartbeat waits in the decision queue for less than the broker waits for its answer
        # (half its session, KAFKA-14392), so the broker hears REQUEST_TIMED_OUT and beats again.
        self._heartbeat_timeout_s = min(api.WRITE_TIMEOUT, settings.session_timeout_ms / 4000)
        self._offset_changed = asyncio.Event()
        self._long_polls = 0
        self._tasks: list[asyncio.Task[None]] = []

    def routes(self) -> list[web.RouteDef]:
        return [self._route("/rpc/broker-registration", decode_registration, self._register),
                self._route("/rpc/broker-heartbeat", decode_heartbeat, self._heartbeat),
                self._route("/rpc/alter-partition", decode_alter_partition, self._alter_partition),
                self._route("/rpc/allocate-producer-ids", decode_broker, self._allocate_producer_ids),
                self._route("/rpc/metadata-fetch", decode_fetch, self._fetch)]

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._fence_expired(), name="fence-expired-brokers"),
                       asyncio.create_task(self._watch_offset(), name="metadata-offset-watch")]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def sessions(self) -> BrokerHeartbeatManager:
        """This epoch's sessions; a controller that (re)becomes active starts them afresh."""
        epoch = self._controller.epoch
        if epoch != self._sessions_epoch:
            self._sessions_epoch = epoch
            self._sessions = BrokerHeartbeatManager(self._settings.session_timeout_ms)
            self._shutdown_requests = {}
            if epoch is not None:
                self._sessions.begin_sessions(self._log.image(), self._clock())
        return self._sessions

    def heartbeat_ages(self) -> dict[int, int]:
        """Milliseconds since each broker's last heartbeat; empty unless active."""
        return self.sessions().ages(self._clock()) if self._controller.is_active else {}

    def _route(self, path: str, decode: Callable[[Any], dict[str, Any]], serve: Handler) -> web.RouteDef:
        async def handler(request: web.Request) -> web.Response:
            try:
                reply = {"error_code": 0, "error_message": None, **await serve(decode(await _read(request)))}
                status = 200
            except RpcError as exc:
                reply, status = exc.reply, exc.http_status
            except Exception as exc:  # one translation, in one place
                reply = self._error_reply(exc, path)
                status = 500 if reply["error_code"] == ErrorCode.UNKNOWN_SERVER_ERROR else 200
            return web.Response(body=msgpack.packb(reply, use_bin_type=True), status=status,
                                content_type=MSGPACK)
        return web.post(path, handler)

    def _error_reply(self, exc: Exception, path: str) -> dict[str, Any]:
        if isinstance(exc, ControllerApiError):
            return RpcError(exc.code, exc.message, exc.field).reply
        if isinstance(exc, NotActiveControllerError) or (
                isinstance(exc, NotCommittedError) and exc.applied_nothing):
            node, address = self._active_api()
            return RpcError(ErrorCode.NOT_CONTROLLER, f"controller {self._settings.node_id} is not the "
                            f"active controller: {exc}", extra={"controller_id": node,
                                                               "controller_address": address}).reply
        if isinstance(exc, (RecordTooLargeError, MetadataRecordError)):  # nothing appended
            return RpcError(ErrorCode.INVALID_REQUEST, str(exc)).reply
        if isinstance(exc, ControllerBusyError):
            return RpcError(THROTTLING_QUOTA_EXCEEDED, str(exc)).reply
        if isinstance(exc, (TimeoutError, NotCommittedError)):
            return RpcError(REQUEST_TIMED_OUT, f"no committed outcome in time: {exc}").reply
        logger.exception("%s failed", path, exc_info=exc)
        return RpcError(ErrorCode.UNKNOWN_SERVER_ERROR, "internal error; see the controller's log").reply

    async def _decide(self, fn: Callable[[MetadataImage], ControllerResult[Any]],
                      timeout_s: float = api.WRITE_TIMEOUT) -> tuple[Any, AppendOutcome | None]:
        return await decide_result(self._controller, fn, timeout_s)

    # -- the RPCs --------------------------------------------------------------------

    async def _register(self, req: dict[str, Any]) -> dict[str, Any]:
        cluster_id = req.pop("cluster_id")
        if cluster_id is not None and cluster_id != self._settings.cluster_id:
            raise RpcError(INCONSISTENT_CLUSTER_ID, f"the broker's cluster id {cluster_id} is not this "
                           f"cluster's {self._settings.cluster_id}", "cluster_id")
        _, outcome = await self._decide(lambda image: register_broker(
            image, **req, now_ms=self._clock(), heartbeats=self.sessions()))
        assert outcome is not None, "a registration always appends its RegisterBroker record"
        logger.info("Registered broker %d (incarnation %s) with broker epoch %d",
                    req["broker_id"], req["incarnation_id"], outcome.first_offset)
        return {"broker_epoch": outcome.first_offset}  # RegisterBroker is its first record

    async def _heartbeat(self, req: dict[str, Any]) -> dict[str, Any]:
        self._touch_on_arrival(req)
        reply, _ = await self._decide(lambda image: process_heartbeat(
            image, **req, now_ms=self._clock(), heartbeats=self.sessions()), self._heartbeat_timeout_s)
        return {"is_caught_up": reply.is_caught_up, "is_fenced": reply.is_fenced,
                "should_shut_down": reply.should_shut_down,
                "shutdown_requested": self._shutdown_requested(req)}

    def _touch_on_arrival(self, req: dict[str, Any]) -> None:
        """A heartbeat from a registered incarnation renews its session when it arrives, not when
        its turn in the decision queue comes (Kafka's BrokerHeartbeatTracker.updateContactTime):
        a queue backed up behind a slow append must not get a live broker fenced."""
        if not self._controller.is_active:
            return
        registration = self._log.image().broker(req["broker_id"])
        if registration is not None and registration.broker_epoch == req["broker_epoch"]:
            self.sessions().touch(req["broker_id"], self._clock(), req["metadata_offset"])

    def request_shutdown(self, broker_id: int, broker_epoch: int) -> None:
        """An operator asks this incarnation of the broker to shut down (active controller only):
        its next heartbeats answer shutdown_requested until it heartbeats want_shut_down."""
        self.sessions()  # a new active epoch starts from no requests; this one belongs to it
        self._shutdown_requests[broker_id] = broker_epoch
        logger.info("Operator requested the controlled shutdown of broker %d (broker epoch %d); "
                    "telling it on its next heartbeat", broker_id, broker_epoch)

    def _shutdown_requested(self, req: dict[str, Any]) -> bool:
        broker_id = req["broker_id"]
        requested = self._shutdown_requests.get(broker_id)
        if requested is None:
            return False
        outcome = shutdown_request_outcome(requested_epoch=requested, broker_epoch=req["broker_epoch"],
                                           want_shutdown=req["want_shutdown"])
        if not outcome.shutdown_requested:  # obeyed or stale: forget the request
            del self._shutdown_requests[broker_id]
            reason = ("it began its controlled shutdown" if outcome is ShutdownRequestOutcome.OBEYED
                      else f"it runs as broker epoch {req['broker_epoch']} now")
            logger.info("Shutdown request for broker %d (broker epoch %d) is done: %s", broker_id, requested, reason)
        return outcome.shutdown_requested

    async def _allocate_producer_ids(self, req: dict[str, Any]) -> dict[str, Any]:
        block, _ = await self._decide(lambda image: allocate_producer_ids(
            image, **req, block_size=PRODUCER_ID_BLOCK_SIZE))
        return {"producer_id_start": block.first_producer_id, "producer_id_len": block.size}

    async def _alter_partition(self, req: dict[str, Any]) -> dict[str, Any]:
        def decide(image: MetadataImage) -> ControllerResult[dict[str, Any]]:
            check_broker_epoch(image, req["broker_id"], req["broker_epoch"])  # a top-level error
            records: list[Any] = []
            topics = []
            for topic_id, partitions in req["topics"]:
                answers = []
                for p in partitions:
                    try:
                        result = handle_alter_partition(
                            image, broker_id=req["broker_id"], broker_epoch=req["broker_epoch"],
                            topic_id=topic_id, partition_id=p.partition_index, leader_epoch=p.leader_epoch,
                            partition_epoch=p.partition_epoch, new_isr=p.new_isr,
                            leader_recovery_state=p.leader_recovery_state)
                    except ControllerApiError as exc:  # per partition, as Kafka answers
                        answers.append({"partition_index": p.partition_index, "error_code": int(exc.code),
                                        "error_message": exc.message})
                        continue
                    records.extend(result.records)
                    r = result.response
                    answers.append({"partition_index": r.partition_id, "error_code": 0, "error_message": None,
                                    "leader_id": r.leader_id, "leader_epoch": r.leader_epoch,
                                    "isr": list(r.isr), "partition_epoch": r.partition_epoch,
                                    "leader_recovery_state": int(r.leader_recovery_state)})
                topics.append({"topic_id": topic_id, "partitions": answers})
            return ControllerResult(records, {"topics": topics})

        reply, _ = await self._decide(decide)
        return reply

    async def _fetch(self, req: dict[str, Any]) -> dict[str, Any]:
        """Committed records from `offset`: every controller answers, from its own committed log."""
        offset = req["offset"]
        if (req["max_wait_ms"] > 0 and self._log.image().offset < offset
                and self._long_polls < api.MAX_LONG_POLLS):  # beyond that many: answer at once
            self._long_polls += 1
            try:
                async with asyncio.timeout(req["max_wait_ms"] / 1000):
                    while self._log.image().offset < offset:  # bounded by the timeout
                        await self._offset_changed.wait()
            except TimeoutError:
                pass
            finally:
                self._long_polls -= 1
        status = self._log.status()
        # Brokers learn the active controller from the quorum they follow, as Kafka's brokers
        # learn the Raft leader from their fetches; the term orders answers from different voters.
        node, address = self._active_api()
        leader = {"controller_id": node, "controller_address": address, "raft_term": status.term}
        try:
            pairs = self._log.records_from(offset, req["max_records"])
        except IndexError:  # folded into the snapshot: send the whole image instead
            image = self._log.image()
            return {"records": [], "last_offset": image.offset, "log_start_offset": status.log_start_offset,
                    "snapshot": encode_snapshot(image), "snapshot_offset": image.offset, **leader}
        last = max(status.last_offset, pairs[-1][0] if pairs else -1)
        return {"records": [[at, record_to_map(r)] for at, r in pairs], "last_offset": last,
                "log_start_offset": status.log_start_offset, "snapshot": None, "snapshot_offset": None, **leader}

    # -- background tasks ------------------------------------------------------------

    async def _watch_offset(self) -> None:
        """Wake long-polls when the committed offset moves (pysyncobj applies on its own thread)."""
        last = self._log.image().offset
        while True:  # until stop() cancels it
            await asyncio.sleep(api.OFFSET_POLL_INTERVAL)
            if self._long_polls == 0:
                continue
            now = self._log.image().offset
            if now != last:
                last = now
                self._offset_changed.set()
                self._offset_changed = asyncio.Event()

    async def _fence_expired(self) -> None:
        """On the active controller: fence at most one broker whose session expired, per pass.

        A pass runs when the earliest session expires (at most every half heartbeat interval
        otherwise), so a dead broker is fenced within a millisecond or so of its timeout.
        """
        period = self._settings.heartbeat_interval_ms / 2000
        stall_ms = max(self._settings.heartbeat_interval_ms, self._settings.session_timeout_ms // 4)
        wait = period
        while True:  # until stop() cancels it
            due = self._clock() + round(wait * 1000)
            await asyncio.sleep(wait)
            wait = period
            if not self._controller.is_active:
                continue
            sessions = self.sessions()
            late_ms = self._clock() - due
            if late_ms > stall_ms:
                # This controller did not run (SIGSTOP, a paused VM, a long GC) and may be deposed
                # without knowing it yet: the brokers' silence was its own. Judge from now on.
                logger.warning("Controller %d was stalled for %d ms; broker sessions start again now",
                               self._settings.node_id, late_ms)
                sessions.restart_sessions(self._log.image(), self._clock())
                continue
            expiry = sessions.next_expiry_ms(self._log.image())
            if expiry is not None:
                wait = min(period, max(expiry - self._clock(), 1) / 1000)
            broker_id = sessions.next_expired(self._clock(), self._log.image())
            if broker_id is None:
                continue

            def fence(image: MetadataImage, broker_id: int = broker_id) -> ControllerResult[None]:
                registration = image.broker(broker_id)
                if registration is None or registration.fenced or sessions.has_valid_session(broker_id,
                                                                                             self._clock()):
                    return ControllerResult((), None)  # it heartbeated, or is gone, meanwhile
                age = self._clock() - (sessions.last_contact_ms(broker_id) or 0)
                return fence_broker(image, broker_id, reason=f"no heartbeat for {age} ms, session timeout "
                                                             f"{self._settings.session_timeout_ms} ms")
            try:
                await self._decide(fence, api.FENCE_TIMEOUT)
            except Exception as exc:  # noqa: BLE001 - the next pass tries again
                logger.warning("Could not fence broker %d: %s", broker_id, exc)
                wait = period  # not at once: a fast failure would repeat a thousand times a second


async def _read(request: web.Request) -> Any:
    """The msgpack body: 413 before reading when too large, 400 when not msgpack."""
    if (request.content_length or 0) > api.MAX_RPC_BODY_BYTES:
        raise RpcError(ErrorCode.INVALID_REQUEST, f"body larger than {api.MAX_RPC_BODY_BYTES} bytes",
                       http_status=413)
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise RpcError(ErrorCode.INVALID_REQUEST, f"body larger than {api.MAX_RPC_BODY_BYTES} bytes",
                       http_status=413) from None
    try:
        return msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise _bad(f"the body is not one msgpack value ({type(exc).__name__})", None) from None
