"""KIP-890 part 1: a partition leader verifies a transactional write with the transaction
coordinator before it lets the batch start a transaction on the partition.

    if needs_verification(partition, producer_id, producer_epoch):             # the rule
        guard = start_verification(partition, producer_id, producer_epoch)
        codes = await verifier.verify(image, transactional_id, producer_id, producer_epoch, tps)
        code = finish_verification(partition, producer_id, guard, codes[tp])     # the guard

Kafka 3.6+ (ReplicaManager.appendRecords -> AddPartitionsToTxnManager, UnifiedLog's
VerificationGuard): a Produce carrying a transactional id whose transactional batch would open a
new transaction for its producer on this partition first asks the coordinator - the leader of
`__transaction_state` partition abs(javaHashCode(transactional_id)) % its partition count - with
AddPartitionsToTxn v4 `verify_only=true` whether the partition is in the producer's ongoing
transaction. A partition the coordinator does not list is refused with INVALID_TXN_STATE: this
is what stops a late or retried Produce from landing after its transaction ended (the hanging
transactions Jepsen found). A verified (producer id, epoch) is remembered per partition
(`Partition.verified_txns`, Kafka's VerificationStateEntry) until a marker ends that producer's
transaction or leadership moves; its guard is made before the question, so a marker written
while the request waited for the coordinator refuses the batch.

KIP-890 part 2: a Produce v12+ comes from a transactions v2 client, which sends no
AddPartitionsToTxn; the leader's request is then AddPartitionsToTxn v5 `verify_only=false`,
which adds the partition (starting the transaction), as Kafka's `addPartition` operation.

Coordinator errors map as Kafka's AddPartitionsToTxnManager maps them: an unreachable, moving or
loading coordinator (and CONCURRENT_TRANSACTIONS) answers NOT_ENOUGH_REPLICAS, which producers
retry; PRODUCER_FENCED answers INVALID_PRODUCER_EPOCH. `transaction.partition.verification.enable`
(default true) turns it off.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Final

from broker.broker_connections import BrokerConnections, Endpoint
from broker.replication.kafka_connection import BrokerConnectionError, KafkaConnection
from broker.replication.partition import Partition, VerificationGuard
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.record_batch import HEADER_SIZE, NO_PRODUCER_ID, parse_header
from common.topic_partition import TopicPartition
from common.units import SECOND_MS
from metadata.image import MetadataImage
from transactions.partitioner import TRANSACTION_STATE_TOPIC_NAME, partition_for

log = logging.getLogger(__name__)

VERIFY_VERSION: Final = 4  # AddPartitionsToTxn's batched broker form, verify_only from v4
# KIP-890 part 2: for a transactions v2 client (Produce v12+) the leader adds the partition to
# the transaction (verify_only=false, AddPartitionsToTxn v5) instead of only checking it
ADD_VERSION: Final = 5
TV2_PRODUCE_VERSION: Final = 12  # a Java client sends Produce v12+ only with transaction.version 2
VERIFY_TIMEOUT_MS: Final = 30 * SECOND_MS  # Kafka's request.timeout.ms for the broker's request
VERIFICATION_ENABLE: Final = "transaction.partition.verification.enable"
# Coordinator answers the producer should retry (Kafka maps them to NOT_ENOUGH_REPLICAS).
_RETRY: Final = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                           ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS})


# ---- the rule and the guard (pure) ----------------------------------------------------------


def transactional_producer(records: bytes | memoryview | None) -> tuple[int, int] | None:
    """(producer id, epoch) when the first batch of a partition's records is a transactional
    data batch (a Produce holds one producer's batches); None otherwise. Reads 61 bytes."""
    if records is None or len(records) < HEADER_SIZE:
        return None
    try:
        header = parse_header(records, 0, require_body=False)
    except Exception:  # noqa: BLE001 - a malformed batch is the append's to refuse
        return None
    if not header.is_transactional or header.is_control or header.producer_id == NO_PRODUCER_ID:
        return None
    return header.producer_id, header.producer_epoch


def needs_verification(partition: Partition, producer_id: int, producer_epoch: int) -> bool:
    """Whether this batch would start a transaction here that the coordinator has not vouched for."""
    if producer_id in partition.producer_state.ongoing:
        return False
    guard = partition.verified_txns.get(producer_id)
    return guard is None or not guard.verified or guard.producer_epoch != producer_epoch


def start_verification(partition: Partition, producer_id: int, producer_epoch: int) -> VerificationGuard:
    """The guard of a verification about to be asked (one per producer and epoch: concurrent
    requests of one producer share it, as Kafka's VerificationStateEntry)."""
    guard = partition.verified_txns.get(producer_id)
    if guard is None or guard.producer_epoch != producer_epoch:
        guard = partition.verified_txns[producer_id] = VerificationGuard(producer_epoch)
    return guard


def finish_verification(partition: Partition, producer_id: int, guard: VerificationGuard,
                        answer: ErrorCode) -> ErrorCode:
    """The partition's answer once the coordinator answered `answer`: a yes holds only if no
    marker ended the producer's transaction meanwhile (the guard is still the partition's)."""
    current = partition.verified_txns.get(producer_id)
    if answer is not ErrorCode.NONE:
        if current is guard and not guard.verified:
            del partition.verified_txns[producer_id]
        return answer
    if current is not guard:
        return ErrorCode.INVALID_TXN_STATE
    guard.verified = True
    return ErrorCode.NONE


def append_error(code: int) -> ErrorCode:
    """The Produce answer for a coordinator's code (AddPartitionsToTxnManager's mapping)."""
    error = ErrorCode(code)
    if error in _RETRY:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    if error is ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def coordinator_of(image: MetadataImage, transactional_id: str) -> int | None:
    """The broker leading the transactional id's `__transaction_state` partition; None if none."""
    topic = image.topic(TRANSACTION_STATE_TOPIC_NAME)
    if topic is None or not topic.partitions:
        return None
    registration = topic.partitions.get(partition_for(transactional_id, len(topic.partitions)))
    if registration is None or registration.leader < 0:
        return None
    return registration.leader


# ---- the broker-to-broker request (shell) -----------------------------------------------------


class TxnVerifier:
    """AddPartitionsToTxn verify_only requests to the coordinators, one connection per broker
    (one request in flight on it at a time)."""

    def __init__(self, endpoint: Endpoint, *, client_id: str) -> None:
        self.client_id = client_id
        self._coordinators = BrokerConnections(endpoint, self._open)
        self.requests_total = 0

    async def verify(self, image: MetadataImage, transactional_id: str, producer_id: int,
                     producer_epoch: int, partitions: Iterable[TopicPartition],
                     *, add: bool = False) -> dict[TopicPartition, ErrorCode]:
        """Each partition's answer: NONE (in the ongoing transaction), INVALID_TXN_STATE, or the
        error a producer gets for the coordinator's failure. `add` (a transactions v2 client):
        the coordinator adds the partitions, starting the transaction if none is open."""
        tps = sorted(set(partitions))
        coordinator = coordinator_of(image, transactional_id)
        if coordinator is None:
            return dict.fromkeys(tps, ErrorCode.NOT_ENOUGH_REPLICAS)
        version = ADD_VERSION if add else VERIFY_VERSION
        m = messages.request_module(ApiKey.ADD_PARTITIONS_TO_TXN, version)
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = m.AddPartitionsToTxnRequest(transactions=(m.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=not add, topics=tuple(m.AddPartitionsToTxnTopic(name=t, partitions=tuple(ps))
                                           for t, ps in by_topic.items())),))
        self.requests_total += 1
        try:
            response = await self._coordinators.request(image, coordinator, ApiKey.ADD_PARTITIONS_TO_TXN, version,
                                                        request)
        except (BrokerConnectionError, OSError) as e:
            log.info("Verifying transactional id %s with coordinator %d failed: %s", transactional_id,
                     coordinator, e)
            return dict.fromkeys(tps, ErrorCode.NOT_ENOUGH_REPLICAS)
        if response.error_code:
            return dict.fromkeys(tps, append_error(int(response.error_code)))
        answers: dict[TopicPartition, ErrorCode] = {}
        for result in response.results_by_transaction:
            for topic in result.topic_results:
                for p in topic.results_by_partition:
                    answers[TopicPartition(topic.name, p.partition_index)] = append_error(int(p.partition_error_code))
        # a partition the coordinator left out is not known to be in the transaction
        return {tp: answers.get(tp, ErrorCode.INVALID_TXN_STATE) for tp in tps}

    async def _open(self, host: str, port: int) -> KafkaConnection:
        return await KafkaConnection.open(host, port, client_id=self.client_id, timeout_s=VERIFY_TIMEOUT_MS / SECOND_MS)

    async def close(self) -> None:
        self._coordinators.close()
