"""The marker sender: WriteTxnMarkers to the partitions' leaders until each one answered.

    sender = MarkerSender(coordinator, endpoint, client_id="broker-1-txn-markers")
    coordinator.markers = sender      # the coordinator hands it every committed PrepareCommit/PrepareAbort
    await sender.close()

Kafka's TransactionMarkerChannelManager: once a transaction's PrepareCommit (or
PrepareAbort) record commits, a COMMIT (or ABORT) marker goes to the leader of each of its
partitions, found in the metadata image, batched per broker (one WriteTxnMarkers v1 request
per broker per round, carrying the markers of every transaction bound there). A partition
answered NONE is done; retriable errors and leader changes keep it for the next round, after
RETRY_BACKOFF_MS; a partition whose topic was deleted is dropped (Kafka: "partition no longer
exists"); INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED stop the transaction's
markers (a newer coordinator or epoch owns it now). When every partition answered, the
coordinator writes CompleteCommit/CompleteAbort; if that write fails while this broker still
coordinates the partition, it is tried again.

Rounds are sequential (one in flight), the brokers of a round in parallel: a transaction's
markers wait at most one round behind another's. One connection per broker, opened on first
use and after any failure.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from broker.broker_connections import BrokerConnections, Connect
from broker.replication.kafka_connection import BrokerConnectionError, KafkaConnection
from common.errors import ErrorCode
from common.limits import CLIENT_REQUEST_TIMEOUT
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.topic_partition import TopicPartition
from common.units import SECOND_MS
from metadata.image import MetadataImage
from transactions.partitioner import TRANSACTION_STATE_TOPIC_NAME
from transactions.records import TransactionMetadata
from transactions.state import TransactionState

log = logging.getLogger(__name__)

E = ErrorCode
WRITE_TXN_MARKERS_VERSION: Final = 1  # Kafka 3.9 answers 0-1, 4.x 1-2: v1 speaks to both
RETRY_BACKOFF_MS: Final = 100  # between rounds with partitions left (Kafka: retry.backoff.ms)
MAX_ABANDONED: Final = 10_000  # fenced transactions remembered (not resent by the coordinator's sweep)
# Retried as Kafka's TransactionMarkerRequestCompletionHandler retries them.
RETRIABLE: Final = frozenset({
    E.UNKNOWN_TOPIC_OR_PARTITION, E.NOT_LEADER_OR_FOLLOWER, E.NOT_ENOUGH_REPLICAS,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.REQUEST_TIMED_OUT, E.KAFKA_STORAGE_ERROR,
    E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR})
FENCED: Final = frozenset({E.INVALID_PRODUCER_EPOCH, E.TRANSACTION_COORDINATOR_FENCED, E.PRODUCER_FENCED})
# Partitions whose log cannot take a marker at all: Kafka counts them as written.
DONE_ANYWAY: Final = frozenset({E.UNSUPPORTED_FOR_MESSAGE_FORMAT, E.UNSUPPORTED_VERSION})


class Completer(Protocol):
    broker_id: int

    def image(self) -> MetadataImage: ...

    def leader_epoch(self, partition: int) -> int | None: ...

    def complete(self, partition: int, coordinator_epoch: int, m: TransactionMetadata) -> asyncio.Future[Any]: ...


@dataclass(slots=True)
class _Job:
    partition: int  # of __transaction_state
    coordinator_epoch: int
    metadata: TransactionMetadata
    pending: set[TopicPartition] = field(default_factory=set)
    completing: bool = False

    @property
    def commit(self) -> bool:
        return self.metadata.state is TransactionState.PREPARE_COMMIT


class MarkerSender:
    def __init__(self, coordinator: Completer, endpoint: Callable[[MetadataImage, int], tuple[str, int] | None],
                 *, client_id: str, connect: Connect | None = None, retry_backoff_ms: int = RETRY_BACKOFF_MS) -> None:
        self.coordinator = coordinator
        self._endpoint = endpoint
        self.client_id = client_id
        self.retry_backoff_ms = retry_backoff_ms
        self._jobs: dict[str, _Job] = {}  # by transactional id: one transaction's markers at a time
        # (transactional id, producer id, epoch) whose markers a leader fenced: not sent again
        self.abandoned: set[tuple[str, int, int]] = set()
        self._brokers = BrokerConnections(endpoint, connect or self._open)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._no_local_host = False  # the advertised address could not be bound: connect from any
        self.rounds_total = 0
        self.markers_written_total = 0

    async def _open(self, host: str, port: int) -> KafkaConnection:
        """Connect from this broker's own advertised address when it is a local IP (as the replica
        fetchers leave from the listener's address), so chaos can cut this broker's links."""
        timeout_s = CLIENT_REQUEST_TIMEOUT  # one WriteTxnMarkers (Kafka: request.timeout.ms)
        local_host = self._local_host()
        if local_host is not None:
            try:
                return await KafkaConnection.open(host, port, client_id=self.client_id, timeout_s=timeout_s,
                                                  local_host=local_host)
            except BrokerConnectionError as e:
                if not isinstance(e.__cause__, OSError) or e.__cause__.errno != errno.EADDRNOTAVAIL:
                    raise
                log.info("The marker sender cannot leave from %s (not a local address); it connects from "
                         "any address from now on", local_host)
                self._no_local_host = True
        return await KafkaConnection.open(host, port, client_id=self.client_id, timeout_s=timeout_s)

    def _local_host(self) -> str | None:
        if self._no_local_host:
            return None
        own = self._endpoint(self.coordinator.image(), self.coordinator.broker_id)
        if own is None:
            return None
        try:
            address = ipaddress.ip_address(own[0])
        except ValueError:  # a host name: let the kernel choose
            return None
        return None if address.is_unspecified else own[0]

    # ---- the coordinator's side ----------------------------------------------------------

    def send(self, partition: int, coordinator_epoch: int, m: TransactionMetadata) -> None:
        """Write `m`'s markers (its PrepareCommit/PrepareAbort committed)."""
        self._jobs[m.transactional_id] = _Job(partition, coordinator_epoch, m,
                                              {TopicPartition(t, p) for t, p in m.partitions})
        log.debug("Transactional id %s producer id %d epoch %d: %s markers for %d partition(s)", m.transactional_id,
                  m.producer_id, m.producer_epoch, "COMMIT" if m.state is TransactionState.PREPARE_COMMIT
                  else "ABORT", len(m.partitions))
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="txn-marker-sender")

    def forget(self, partition: int) -> None:
        """This broker stopped coordinating `partition`: its markers are the next one's."""
        for tid in [t for t, job in self._jobs.items() if job.partition == partition]:
            del self._jobs[tid]

    def pending(self) -> dict[str, set[TopicPartition]]:
        return {tid: set(job.pending) for tid, job in self._jobs.items()}

    def handles(self, m: TransactionMetadata) -> bool:
        """Whether `m`'s markers are being sent, or were given up on (fenced)."""
        job = self._jobs.get(m.transactional_id)
        return (job is not None and job.metadata.producer_id == m.producer_id
                and job.metadata.producer_epoch == m.producer_epoch) \
            or (m.transactional_id, m.producer_id, m.producer_epoch) in self.abandoned

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._brokers.close()
        self._jobs.clear()

    # ---- rounds --------------------------------------------------------------------------

    async def _run(self) -> None:
        while self._jobs:  # each pass is one round; it ends when no transaction is left
            self._wake.clear()
            try:
                progressed = await self._round()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a bug in one round must not stop the markers
                log.exception("A round of transaction markers failed")
                progressed = False
            if self._jobs and not progressed:
                try:
                    await asyncio.wait_for(self._wake.wait(), self.retry_backoff_ms / SECOND_MS)
                except TimeoutError:
                    pass

    async def _round(self) -> bool:
        """Send what can be sent now; True when some partition or transaction finished."""
        self.rounds_total += 1
        image = self.coordinator.image()
        by_broker: dict[int, list[tuple[_Job, list[TopicPartition]]]] = {}
        progressed = False
        for job in list(self._jobs.values()):
            if self.coordinator.leader_epoch(job.partition) != job.coordinator_epoch:
                self._jobs.pop(job.metadata.transactional_id, None)  # moved: the new coordinator resends
                continue
            targets: dict[int, list[TopicPartition]] = {}
            for tp in sorted(job.pending):
                topic = image.topic(tp.topic)
                partition = None if topic is None else topic.partitions.get(tp.partition)
                if partition is None:
                    log.info("Transactional id %s: dropped the marker for %s, whose topic no longer exists",
                             job.metadata.transactional_id, tp)
                    job.pending.discard(tp)
                    progressed = True
                elif partition.leader >= 0:
                    targets.setdefault(partition.leader, []).append(tp)
            for broker, tps in targets.items():
                by_broker.setdefault(broker, []).append((job, tps))
        await asyncio.gather(*(self._send(image, broker, work) for broker, work in sorted(by_broker.items())))
        for job in list(self._jobs.values()):
            if not job.pending and not job.completing:
                progressed = True
                self._complete(job)
        return progressed

    async def _send(self, image: MetadataImage, broker: int, work: list[tuple[_Job, list[TopicPartition]]]) -> None:
        m = messages.request_module(ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION)
        markers = []
        for job, tps in work:
            topics: dict[str, list[int]] = {}
            for tp in tps:
                topics.setdefault(tp.topic, []).append(tp.partition)
            markers.append(m.WritableTxnMarker(
                producer_id=job.metadata.producer_id, producer_epoch=job.metadata.producer_epoch,
                transaction_result=job.commit, coordinator_epoch=job.coordinator_epoch,
                topics=tuple(m.WritableTxnMarkerTopic(name=t, partition_indexes=tuple(p)) for t, p in topics.items())))
        request = m.WriteTxnMarkersRequest(markers=tuple(markers))
        try:
            response = await self._brokers.request(image, broker, ApiKey.WRITE_TXN_MARKERS,
                                                   WRITE_TXN_MARKERS_VERSION, request)
        except (BrokerConnectionError, OSError) as e:
            log.info("WriteTxnMarkers to broker %d failed, retrying: %s", broker, e)
            return
        jobs = {job.metadata.producer_id: job for job, _ in work}
        for result in response.markers:
            answered = jobs.get(result.producer_id)
            if answered is None:
                continue
            for topic in result.topics:
                for p in topic.partitions:
                    self._answered(answered, TopicPartition(topic.name, p.partition_index),
                                   messages.error_code(int(p.error_code)))

    def _answered(self, job: _Job, tp: TopicPartition, error: ErrorCode) -> None:
        tid = job.metadata.transactional_id
        if error is E.NONE or error in DONE_ANYWAY:
            job.pending.discard(tp)
            self.markers_written_total += 1
        elif error in FENCED:
            log.warning("Transactional id %s producer id %d epoch %d: %s answered %s to its marker; its markers "
                        "stop here", tid, job.metadata.producer_id, job.metadata.producer_epoch, tp, error.name)
            if self._jobs.get(tid) is job:
                del self._jobs[tid]
                if len(self.abandoned) < MAX_ABANDONED:
                    self.abandoned.add((tid, job.metadata.producer_id, job.metadata.producer_epoch))
        elif error not in RETRIABLE:
            log.error("Transactional id %s: %s answered %s to its marker; retrying", tid, tp, error.name)

    def _complete(self, job: _Job) -> None:
        job.completing = True
        m = job.metadata
        future = self.coordinator.complete(job.partition, job.coordinator_epoch, m)

        def done(f: asyncio.Future[Any]) -> None:
            if self._jobs.get(m.transactional_id) is not job:
                return
            error = f.result().error if not f.cancelled() and f.exception() is None else E.UNKNOWN_SERVER_ERROR
            if error in (E.COORDINATOR_NOT_AVAILABLE, E.UNKNOWN_SERVER_ERROR) \
                    and self.coordinator.leader_epoch(job.partition) == job.coordinator_epoch:
                log.warning("Transactional id %s: writing its completion to %s-%d failed (%s); retrying",
                            m.transactional_id, TRANSACTION_STATE_TOPIC_NAME, job.partition, error.name)
                job.completing = False
                self._wake.set()
                if self._task is None or self._task.done():
                    self._task = asyncio.get_running_loop().create_task(self._run(), name="txn-marker-sender")
                return
            del self._jobs[m.transactional_id]

        future.add_done_callback(done)
