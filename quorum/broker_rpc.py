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

Authentication (issue 29, `security.rpc_auth`): with `controller.rpc.secret.file` set, every
/rpc/ request (these and the other routes under /rpc/) must carry a proof signed with the key
of the node it names (derived from the cluster's secret, so a broker holding only its own key
cannot sign as another): without one, with a wrong or replayed one, the middleware answers HTTP 401
with CLUSTER_AUTHORIZATION_FAILED (31) before any handler runs. A request that speaks for
broker B (every RPC here names its broker_id) must be signed as B: HTTP 403, nothing changed,
one line naming the claimed and the proven id.

Sessions, shutdown requests, fencing and every decision belong to the controller runtime
(`quorum.controller_runtime`); this module decodes, calls it, and encodes (`common.rpc`).
`shutdown_requested` (not in Kafka) relays an operator's POST /v1/brokers/{id}/shutdown: see
`shutdown.controller_states`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

import msgpack
from aiohttp import web

from common import rpc, rpc_messages
from common.errors import ErrorCode
from common.rpc import RpcDecodeError
from common.rpc_messages import RpcStatus
from metadata.codec import MetadataRecordError
from metadata.image import MetadataImage
from metadata.partition_change import IsrMember
from metadata.records import Listener
from quorum import admin_api as api
from quorum.active_controller import (
    ControllerBusyError,
    NotActiveControllerError,
)
from quorum.admin_api import ApiSettings
from quorum.broker_control import (
    check_broker_epoch,
    process_heartbeat,
    register_broker,
)
from quorum.controller_result import ControllerApiError, ControllerResult
from quorum.controller_runtime import ControllerRuntime, NotCommittedError
from quorum.log_state import AppendOutcome, RecordTooLargeError
from quorum.producer_ids import PRODUCER_ID_BLOCK_SIZE, allocate_producer_ids
from quorum.replica_failure import failed_isr_members, handle_offline_replicas, news
from quorum.replication_control import alter_partition_batches, handle_alter_partition, merged_alter_partition_replies
from security.rpc_auth import RpcAuthError, RpcVerifier, check_speaks_for

if TYPE_CHECKING:
    from quorum.metadata_log import MetadataLog

logger = logging.getLogger(__name__)

MSGPACK: Final = "application/x-msgpack"
# Kafka error codes this module answers with that the rules never raise.
REQUEST_TIMED_OUT: Final = 7
THROTTLING_QUOTA_EXCEEDED: Final = 89
INCONSISTENT_CLUSTER_ID: Final = 104
CLUSTER_AUTHORIZATION_FAILED: Final = 31  # Kafka's answer to a caller that may not act on the cluster
PROVEN_NODE: Final = "tidelog.rpc_node_id"  # the request key holding the node id a valid proof names
REFUSAL_LOG_INTERVAL_S: Final = 1.0  # at most one line per this many seconds about refused proofs


class RpcError(Exception):
    """An RPC answered with a Kafka error code (HTTP 200 unless the body itself was bad)."""

    def __init__(self, code: int, message: str, field: str | None = None, *, http_status: int = 200,
                 controller_id: int | None = None, controller_address: str | None = None) -> None:
        super().__init__(message)
        self.reply = rpc.encode_reply(None, RpcStatus(int(code), message, field, controller_id, controller_address))
        self.http_status = http_status


def _bad(message: str, field: str | None) -> RpcError:
    return RpcError(ErrorCode.INVALID_REQUEST, message, field, http_status=400)


# --- The server side.

Handler = Callable[[Any], Awaitable[Any]]  # a decoded request in, a reply message out


def _claimed_broker(request: Any) -> int | None:
    """The broker a decoded request speaks for (None: none; a metadata fetch may name none)."""
    broker_id = getattr(request, "broker_id", None)
    return broker_id if isinstance(broker_id, int) and broker_id >= 0 else None


class RpcAuthGate:
    """The aiohttp middleware proving every /rpc/ request (`security.rpc_auth`); the shell of
    RpcVerifier: it reads the header and the body, and the wall clock (proofs are compared with
    other hosts' clocks, so not a monotonic one)."""

    def __init__(self, verifier: RpcVerifier | None, node_id: int) -> None:
        self._verifier, self._node_id = verifier, node_id
        self._last_logged = 0.0
        self._unlogged = 0

    @property
    def enabled(self) -> bool:
        return self._verifier is not None

    @web.middleware
    async def middleware(self, request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if self._verifier is None or not request.path.startswith("/rpc/"):
            return await handler(request)
        now_ms = int(time.time() * 1000)
        header = request.headers.get("Authorization")
        try:
            self._verifier.check_header(header, now_ms=now_ms)  # before reading a stranger's body
            body = await _read_raw(request)
            request[PROVEN_NODE] = self._verifier.verify(header, request.method, request.host, request.path, body,
                                                         now_ms=now_ms)
        except RpcAuthError as exc:
            self._log_refusal(request, str(exc))
            return _reply(RpcError(CLUSTER_AUTHORIZATION_FAILED, str(exc), "Authorization",
                                   http_status=exc.status))
        except RpcError as exc:
            return _reply(exc)
        return await handler(request)

    def _log_refusal(self, request: web.Request, why: str) -> None:
        """One line per refusal, at most one a second (a stranger retrying must not flood the log)."""
        now = time.monotonic()
        if now - self._last_logged < REFUSAL_LOG_INTERVAL_S:
            self._unlogged += 1
            return
        more = f" ({self._unlogged} more refused since the last line)" if self._unlogged else ""
        self._last_logged, self._unlogged = now, 0
        logger.warning("Controller %d refused %s %s from %s: %s%s", self._node_id, request.method, request.path,
                       request.remote, why, more)


def _reply(error: RpcError) -> web.Response:
    return web.Response(body=msgpack.packb(error.reply, use_bin_type=True), status=error.http_status,
                        content_type=MSGPACK)


class BrokerRpc:
    """The /rpc/ routes: decode, call the controller runtime, encode."""

    def __init__(self, log: MetadataLog, runtime: ControllerRuntime, settings: ApiSettings, *,
                 active_api: Callable[[], tuple[int | None, str | None]]) -> None:
        self._log, self._runtime, self._settings = log, runtime, settings
        self._active_api = active_api
        # A heartbeat waits in the decision queue for less than the broker waits for its answer
        # (half its session, KAFKA-14392), so the broker hears REQUEST_TIMED_OUT and beats again.
        self._heartbeat_timeout_s = min(api.WRITE_TIMEOUT, settings.session_timeout_ms / 4000)
        self._offset_changed = asyncio.Event()
        self._long_polls = 0
        self._on_applied: Callable[[], None] | None = None

    def routes(self) -> list[web.RouteDef]:
        return [self._route("/rpc/broker-registration", rpc.decode_registration_request, self._register),
                self._route("/rpc/broker-heartbeat", rpc.decode_heartbeat_request, self._heartbeat),
                self._route("/rpc/alter-partition", rpc.decode_alter_partition_request, self._alter_partition),
                self._route("/rpc/allocate-producer-ids", rpc.decode_broker_id_and_epoch,
                            self._allocate_producer_ids),
                self._route("/rpc/metadata-fetch", rpc.decode_fetch_request, self._fetch)]

    async def start(self) -> None:
        loop = asyncio.get_running_loop()

        def applied() -> None:  # on pysyncobj's tick thread: wake the long-polls on the loop
            try:
                loop.call_soon_threadsafe(self._offset_moved)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass

        self._on_applied = applied
        self._log.add_apply_listener(applied)

    async def stop(self) -> None:
        if self._on_applied is not None:
            self._log.remove_apply_listener(self._on_applied)
            self._on_applied = None

    def _route(self, path: str, decode: Callable[[Any], Any], serve: Handler) -> web.RouteDef:
        async def handler(request: web.Request) -> web.Response:
            try:
                try:
                    decoded = decode(await _read(request))
                except RpcDecodeError as exc:
                    raise _bad(str(exc), exc.field) from None
                self._check_identity(request, path, decoded)
                reply, status = rpc.encode_reply(await serve(decoded)), 200
            except RpcError as exc:
                reply, status = exc.reply, exc.http_status
            except Exception as exc:  # one translation, in one place
                reply = self._error_reply(exc, path)
                status = 500 if reply["error_code"] == ErrorCode.UNKNOWN_SERVER_ERROR else 200
            return web.Response(body=msgpack.packb(reply, use_bin_type=True), status=status,
                                content_type=MSGPACK)
        return web.post(path, handler)

    def _check_identity(self, request: web.Request, path: str, decoded: Any) -> None:
        """A proven request speaking for broker B must be signed as B: 403 and one line otherwise."""
        proven, claimed = request.get(PROVEN_NODE), _claimed_broker(decoded)
        if proven is None or claimed is None:
            return  # authentication off (no secret), or a request naming no broker
        try:
            check_speaks_for(proven, claimed, path)
        except RpcAuthError as exc:
            logger.warning("Controller %d refused %s from %s: it speaks for broker %d but is signed as node %d",
                           self._settings.node_id, path, request.remote, claimed, proven)
            raise RpcError(CLUSTER_AUTHORIZATION_FAILED, str(exc), "broker_id", http_status=exc.status) from None

    def _error_reply(self, exc: Exception, path: str) -> dict[str, Any]:
        if isinstance(exc, ControllerApiError):
            return RpcError(exc.code, exc.message, exc.field).reply
        if isinstance(exc, NotActiveControllerError) or (
                isinstance(exc, NotCommittedError) and exc.applied_nothing):
            node, address = self._active_api()
            return RpcError(ErrorCode.NOT_CONTROLLER, f"controller {self._settings.node_id} is not the "
                            f"active controller: {exc}", controller_id=node, controller_address=address).reply
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
        return await self._runtime.decide(fn, timeout_s)

    # -- the RPCs --------------------------------------------------------------------

    async def _register(self, req: rpc_messages.BrokerRegistrationRequest) -> rpc_messages.BrokerRegistrationReply:
        if req.cluster_id is not None and req.cluster_id != self._settings.cluster_id:
            raise RpcError(INCONSISTENT_CLUSTER_ID, f"the broker's cluster id {req.cluster_id} is not this "
                           f"cluster's {self._settings.cluster_id}", "cluster_id")
        listeners = tuple(Listener(li.name, li.host, li.port) for li in req.listeners)
        _, outcome = await self._decide(lambda image: register_broker(
            image, broker_id=req.broker_id, incarnation_id=req.incarnation_id, listeners=listeners, rack=req.rack,
            now_ms=self._runtime.now_ms(), heartbeats=self._runtime.sessions()))
        assert outcome is not None and outcome.first_offset is not None, "a registration appends its RegisterBroker"
        logger.info("Registered broker %d (incarnation %s) with broker epoch %d",
                    req.broker_id, req.incarnation_id, outcome.first_offset)
        return rpc_messages.BrokerRegistrationReply(outcome.first_offset)  # RegisterBroker is its first record

    async def _heartbeat(self, req: rpc_messages.BrokerHeartbeatRequest) -> rpc_messages.BrokerHeartbeatReply:
        runtime = self._runtime
        runtime.touch_on_arrival(req.broker_id, req.broker_epoch, req.current_metadata_offset)
        reply, _ = await self._decide(lambda image: process_heartbeat(
            image, broker_id=req.broker_id, broker_epoch=req.broker_epoch,
            metadata_offset=req.current_metadata_offset, want_fence=req.want_fence,
            want_shutdown=req.want_shut_down, now_ms=runtime.now_ms(), heartbeats=runtime.sessions()),
            self._heartbeat_timeout_s)
        if req.offline_replicas:
            await self._offline_replicas(req)
        return rpc_messages.BrokerHeartbeatReply(reply.is_caught_up, reply.is_fenced, reply.should_shut_down,
                                        runtime.shutdown_requested(req.broker_id, req.broker_epoch,
                                                                   req.want_shut_down))

    async def _offline_replicas(self, req: rpc_messages.BrokerHeartbeatRequest) -> None:
        """A heartbeat naming replicas the broker could not open: mark the new ones offline and
        move them out of their ISR and leadership (`quorum.replica_failure`), as a decision of its
        own after the heartbeat's. A failure here is only logged: the broker repeats its offline
        replicas in every heartbeat, so the next one tries again."""
        reported = [(topic.topic_id, p) for topic in req.offline_replicas for p in topic.partitions]
        if not news(self._log.image(), req.broker_id, req.broker_epoch, reported):
            return  # already recorded (the common case: every heartbeat repeats them)
        try:
            marked, _ = await self._decide(lambda image: handle_offline_replicas(
                image, broker_id=req.broker_id, broker_epoch=req.broker_epoch, reported=reported),
                self._heartbeat_timeout_s)
        except Exception as exc:  # noqa: BLE001 - the heartbeat's own answer must still go out
            logger.warning("Broker %d (broker epoch %d) reported %d offline replica(s) that could not be "
                           "marked offline this time (the next heartbeat retries): %s",
                           req.broker_id, req.broker_epoch, len(reported), exc)
            return
        if marked.replicas:
            shown = ", ".join(f"{name}-{p}" for name, p in marked.replicas[:10])
            more = f" and {len(marked.replicas) - 10} more" if len(marked.replicas) > 10 else ""
            logger.warning("Broker %d (broker epoch %d) reported offline replica(s) %s%s: removed from their "
                           "ISR; %d of them it led went to another leader", req.broker_id, req.broker_epoch, shown,
                           more, marked.leaders_moved)

    async def _allocate_producer_ids(self, req: rpc_messages.BrokerIdAndEpoch) -> rpc_messages.AllocateProducerIdsReply:
        block, _ = await self._decide(lambda image: allocate_producer_ids(
            image, broker_id=req.broker_id, broker_epoch=req.broker_epoch, block_size=PRODUCER_ID_BLOCK_SIZE))
        return rpc_messages.AllocateProducerIdsReply(block.first_producer_id, block.size)

    async def _alter_partition(self, request: rpc_messages.AlterPartitionRequest) -> rpc_messages.AlterPartitionReply:
        # one decision per batch of partitions, each committed before the next is queued, so
        # heartbeats and other brokers' requests are decided in between (alter_partition_batches)
        replies = []
        for batch in alter_partition_batches(request):  # bounded by the request's partitions
            replies.append(await self._alter_partition_batch(batch))
        return merged_alter_partition_replies(replies)

    async def _alter_partition_batch(self, req: rpc_messages.AlterPartitionRequest) -> rpc_messages.AlterPartitionReply:
        def decide(image: MetadataImage) -> ControllerResult[rpc_messages.AlterPartitionReply]:
            check_broker_epoch(image, req.broker_id, req.broker_epoch)  # a top-level error
            records: list[Any] = []
            topics = []
            for topic in req.topics:
                answers = []
                for p in topic.partitions:
                    failed = failed_isr_members(image, topic.topic_id, p.partition_index,
                                                (m.broker_id for m in p.new_isr_with_epochs))
                    if failed:  # issue 36: a replica that failed on its broker never rejoins the ISR
                        answers.append(rpc_messages.AlterPartitionPartitionReply(
                            p.partition_index, int(ErrorCode.INELIGIBLE_REPLICA),
                            f"replica(s) {failed} of partition {p.partition_index} failed on their broker"))
                        continue
                    try:
                        result = handle_alter_partition(
                            image, broker_id=req.broker_id, broker_epoch=req.broker_epoch,
                            topic_id=topic.topic_id, partition_id=p.partition_index, leader_epoch=p.leader_epoch,
                            partition_epoch=p.partition_epoch,
                            new_isr=tuple(IsrMember(m.broker_id, m.broker_epoch) for m in p.new_isr_with_epochs),
                            leader_recovery_state=p.leader_recovery_state)
                    except ControllerApiError as exc:  # per partition, as Kafka answers
                        answers.append(rpc_messages.AlterPartitionPartitionReply(p.partition_index, int(exc.code),
                                                                        exc.message))
                        continue
                    records.extend(result.records)
                    r = result.response
                    answers.append(rpc_messages.AlterPartitionPartitionReply(
                        r.partition_id, 0, None, r.leader_id, r.leader_epoch, tuple(r.isr), r.partition_epoch,
                        int(r.leader_recovery_state)))
                topics.append(rpc_messages.AlterPartitionTopicReply(topic.topic_id, tuple(answers)))
            return ControllerResult(records, rpc_messages.AlterPartitionReply(tuple(topics)))

        reply, _ = await self._decide(decide)
        return reply

    async def _fetch(self, req: rpc_messages.MetadataFetchRequest) -> rpc_messages.MetadataFetchReply:
        """Committed records from `offset`: every controller answers, from its own committed log."""
        offset = req.offset
        if (req.max_wait_ms > 0 and self._log.image().offset < offset
                and self._long_polls < api.MAX_LONG_POLLS):  # beyond that many: answer at once
            self._long_polls += 1
            try:
                async with asyncio.timeout(req.max_wait_ms / 1000):
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
        # KIP-853: brokers learn the voters from the quorum (quorum_ids and api_voters read the
        # voter set live: quorum.live_voters)
        voters = set(self._settings.quorum_ids.values())
        apis = tuple(sorted(a for i, a in self._settings.api_voters.items() if i in voters))
        try:
            pairs = self._log.record_maps_from(offset, req.max_records)
        except IndexError:
            # Folded into the base snapshot: send it as the fold encoded it, and the broker fetches
            # the records after it next, as Kafka's FetchSnapshot. Encoding the current image
            # instead cost this loop 0.3 s per fetch at 100,000 partitions on a quiet box (and up
            # to 30 s under load, issue 35), for every broker restarting behind the log start.
            snapshot_offset, snapshot = self._log.base_snapshot()
            return rpc_messages.MetadataFetchReply((), max(status.last_offset, snapshot_offset),
                                                   status.log_start_offset, snapshot, snapshot_offset,
                                                   node, address, status.term, apis)
        last = max(status.last_offset, pairs[-1][0] if pairs else -1)
        return rpc_messages.MetadataFetchReply(tuple(pairs), last,
                                      status.log_start_offset, None, None, node, address, status.term, apis)

    # -- background tasks ------------------------------------------------------------

    def _offset_moved(self) -> None:
        """Wake every long-poll waiting now (each looks at the image again and waits anew)."""
        self._offset_changed.set()
        self._offset_changed = asyncio.Event()


async def _read_raw(request: web.Request) -> bytes:
    """The body's bytes: 413 before reading when too large (aiohttp caches them for `_read`)."""
    if (request.content_length or 0) > rpc.MAX_RPC_BODY_BYTES:
        raise RpcError(ErrorCode.INVALID_REQUEST, f"body larger than {rpc.MAX_RPC_BODY_BYTES} bytes",
                       http_status=413)
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise RpcError(ErrorCode.INVALID_REQUEST, f"body larger than {rpc.MAX_RPC_BODY_BYTES} bytes",
                       http_status=413) from None


async def _read(request: web.Request) -> Any:
    """The msgpack body: 413 before reading when too large, 400 when not msgpack."""
    if (request.content_length or 0) > rpc.MAX_RPC_BODY_BYTES:
        raise RpcError(ErrorCode.INVALID_REQUEST, f"body larger than {rpc.MAX_RPC_BODY_BYTES} bytes",
                       http_status=413)
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise RpcError(ErrorCode.INVALID_REQUEST, f"body larger than {rpc.MAX_RPC_BODY_BYTES} bytes",
                       http_status=413) from None
    try:
        return msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise _bad(f"the body is not one msgpack value ({type(exc).__name__})", None) from None
