"""The exactly-once sink (`transactional=true` or `kafka.transactional.id=<prefix>`): tasks
prepare transactions, the driver commits them when Spark commits the batch.

What PySpark's Python data source API allows. A writer's `write(rows)` runs in each task
(an executor's Python worker) and returns a commit message; `commit(messages[, batchId])`
then runs once on the driver (for a stream, in a Python process the driver starts for each
batch; it builds the writer again from the data source) after every task succeeded, and
`abort` when the job failed. Nothing runs in a task after the driver decides, and a task
cannot wait for it. So a task-side commit (each task commits its own transaction before
returning) would make a task's rows visible before Spark knows the batch succeeded: a batch
failing in another task leaves them there. This sink instead splits Kafka's transaction in
two, as Flink's two-phase-commit Kafka sink does:

- **Prepare (each task).** The task's producer takes the transactional.id
  `<prefix>-<query id>-<partition id>` (a batch write: `<prefix>-<write id>-<partition id>`;
  the query id is the one Spark keeps in the checkpoint, so it survives restarts). The same
  id for every attempt of the task and every replay of the batch: `init_transactions`
  fences any older producer of that id (its epoch is bumped) and aborts its open
  transaction, or waits until its commit completes. The task then reads its id's last
  committed batch id from the commit log (below); a replayed batch at or below it writes
  nothing. Otherwise it writes its rows and one commit-log record (key: the transactional
  id, value: the batch id) in one transaction, flushes, and returns the transaction's
  producer id and epoch (`PreparedTransaction`) WITHOUT committing: the producer is
  released without `close()` (which would abort), so the transaction stays open on the
  coordinator.
- **Commit (the driver).** `commit(messages, batchId)` sends EndTxn(commit) for every
  prepared transaction to its coordinator, with the producer id and epoch the task
  reported, and retries until the coordinator answers; `abort` sends EndTxn(abort). Only
  after `commit` returns does Spark write the batch to its own commit log.

Why a batch is written once, whatever dies when:
- a task dies, or is retried: its attempt's transaction is open; the next attempt's
  `init_transactions` aborts it (the fenced attempt can write nothing more);
- the driver dies before commit: the transactions stay open (read_committed readers of
  those partitions wait at the LSO) until the restarted query replays the batch, whose
  tasks fence and abort them and write the rows again, or until transaction.timeout.ms
  (then the coordinator aborts them);
- the driver dies after committing some or all transactions, before Spark's commit log has
  the batch: the restarted query replays the same batch id over the same input (Spark
  wrote its offsets before running it). Each task finds its commit-log record for that
  batch id, committed in the same transaction as its rows, and writes nothing; tasks whose
  transactions were not committed write theirs. So every row is committed exactly once,
  though a batch cut by a crash mid-commit is visible partly until the replay completes it;
- a transaction times out or is fenced before the driver commits it: EndTxn answers
  INVALID_PRODUCER_EPOCH / PRODUCER_FENCED / INVALID_TXN_STATE, `commit` raises, the query
  fails and its replay writes the batch again (its commit-log record was aborted with it).

What it assumes: a replay reads the same rows into the same partitions (Spark's Kafka and
tidelog sources do: each batch's offsets are in the checkpoint before it runs), and at most
one running query per checkpoint (Spark's rule). With spark.speculation on, a speculative
attempt fences the first one; if Spark keeps the fenced attempt's message, its EndTxn is
refused and the batch fails and is replayed (never written twice). The commit log is a compacted topic
(`commitLogTopic`, created on first use), read with raw read_uncommitted Fetch requests and
resolved per producer by its markers (`txn_protocol.CommitLogScan` says why), through
tidelog's own client with the sink's security settings (TLS and SASL from the kafka.* options,
as the producers use them; `security.sasl_client`). Readers see the rows only with
kafka.isolation.level=read_committed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import confluent_kafka
import pyarrow as pa
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql.datasource import WriterCommitMessage

from common.errors import ErrorCode
from common.kafka_client import KafkaClient
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.units import MIB, SECONDS
from spark import kafka_clients
from spark.fetch_client import EARLIEST, LATEST, BrokerUnavailable, PartitionClient, bootstrap_addresses
from security.sasl_client import client_security
from spark.options import SinkOptions
from spark.txn_protocol import (
    CommitLogScan,
    EndTxnOutcome,
    commit_log_partition,
    commit_record,
    end_txn_outcome,
    producer_identity,
    should_skip,
)

log = logging.getLogger("tidelog.spark")

INIT_TIMEOUT: Final = 60 * SECONDS  # init_transactions waits for a predecessor's commit to complete
STATS_INTERVAL_MS: Final = 100  # librdkafka's statistics carry the producer id and epoch
IDENTITY_TIMEOUT: Final = 10 * SECONDS
END_TXN_TIMEOUT: Final = 120 * SECONDS  # per transaction, retries included
END_TXN_BACKOFF: Final = 0.1 * SECONDS
COMMIT_LOG_PARTITIONS: Final = 1  # one record per task and batch: small; one partition keeps it simple
COMMIT_LOG_MAX_REPLICATION: Final = 3
COMMIT_LOG_CREATE_TIMEOUT: Final = 30 * SECONDS
COMMIT_LOG_WINDOW: Final = 4_096  # records read back from the end first; grows x4 until found
COMMIT_LOG_FETCH_BYTES: Final = 1 * MIB
FIND_COORDINATOR_VERSION: Final = 2  # key and key type, before KIP-699's batching
END_TXN_VERSION: Final = 3
TASK_QUERY_ID: Final = "sql.streaming.queryId"  # Spark's local properties (StreamExecution)
TASK_BATCH_ID: Final = "streaming.sql.batchId"


class TransactionLost(RuntimeError):
    """A prepared transaction the coordinator no longer holds open (timed out, fenced): the
    batch is not committed; the query's replay writes it again."""


@dataclass
class PreparedTransaction(WriterCommitMessage):
    """A task's rows written in an open transaction: the driver commits or aborts it."""
    transactional_id: str
    producer_id: int
    producer_epoch: int
    batch_id: int | None
    records: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.records.values())


@dataclass
class AlreadyCommitted(WriterCommitMessage):
    """A replayed batch this transactional id had committed: nothing written this time."""
    transactional_id: str
    batch_id: int
    total: int = 0


ProduceRows = Callable[[Any, pa.RecordBatch, dict[str, int], list[str]], None]


# --- the task side ------------------------------------------------------------------------


def prepare(batches: Iterator[pa.RecordBatch], options: SinkOptions, tid: str, batch_id: int | None,
            produce_rows: ProduceRows) -> PreparedTransaction | AlreadyCommitted:
    """Write the rows of `batches` in a transaction of `tid` and leave it open (see above).
    `batch_id` None: a batch write, which has no replays to detect."""
    failures: list[str] = []
    identity: list[tuple[int, int]] = []

    def on_error(err: Any, msg: Any) -> None:
        failures.append(f"{msg.topic()}-{msg.partition()}: {err}")

    def on_stats(stats: str) -> None:
        found = producer_identity(stats)
        if found is not None:
            identity.append(found)

    producer = kafka_clients.transactional_producer(options, tid, on_error, on_stats, STATS_INTERVAL_MS)
    try:
        producer.init_transactions(INIT_TIMEOUT)
        commit_partition = None
        if batch_id is not None:  # a stream's batch may be a replay: look for its commit
            commit_partition = commit_log_partition(tid, _commit_log_partitions(producer, options))
            last = last_committed_batch(options, tid, commit_partition)
            if should_skip(last, batch_id):
                log.info("%s: batch %d already committed (last committed batch %s): nothing written", tid,
                         batch_id, last)
                producer.close()  # no transaction open: nothing to abort
                return AlreadyCommitted(tid, batch_id)
        producer.begin_transaction()
        records: dict[str, int] = {}
        for batch in batches:
            produce_rows(producer, batch, records, failures)
        if batch_id is not None and commit_partition is not None:
            key, value = commit_record(tid, batch_id, sum(records.values()))
            producer.produce(options.commit_log_topic, value, key, commit_partition)
        left = producer.flush(INIT_TIMEOUT)
        if failures or left:
            raise RuntimeError(f"{len(failures)} record(s) not written ({'; '.join(failures[:3])})"
                               + (f", {left} unacknowledged" if left else ""))
        pid, epoch = _identity(producer, identity)
    except BaseException:
        _abort_quietly(producer, tid)
        raise
    log.info("%s: prepared batch %s (%d records, producer id %d epoch %d), left open for the driver's commit",
             tid, batch_id, sum(records.values()), pid, epoch)
    # Released without close(): confluent-kafka's close() aborts an open transaction, while
    # librdkafka's destroy (the producer's deallocation) leaves it to the driver's EndTxn.
    del producer
    return PreparedTransaction(tid, pid, epoch, batch_id, records)


def _identity(producer: Any, identity: list[tuple[int, int]]) -> tuple[int, int]:
    """The producer id and epoch of the open transaction (from librdkafka's statistics)."""
    deadline = time.monotonic() + IDENTITY_TIMEOUT
    while not identity:  # bounded by the deadline; statistics come every STATS_INTERVAL_MS
        if time.monotonic() > deadline:
            raise RuntimeError(f"librdkafka reported no producer id within {IDENTITY_TIMEOUT:.0f} s")
        producer.poll(STATS_INTERVAL_MS / 1000)
    return identity[-1]


def _abort_quietly(producer: Any, tid: str) -> None:
    try:
        producer.abort_transaction(INIT_TIMEOUT)
    except confluent_kafka.KafkaException as exc:  # none open, or fenced: the next attempt aborts it
        log.info("%s: abort after a failed write: %s", tid, exc)
    finally:
        producer.purge(in_queue=True, in_flight=False)
        producer.close()


def _commit_log_partitions(producer: Any, options: SinkOptions) -> int:
    """The commit log's partition count, creating the topic (compacted) when it is missing."""
    topic = options.commit_log_topic
    deadline = time.monotonic() + COMMIT_LOG_CREATE_TIMEOUT
    created = False
    while True:  # bounded by the deadline
        found = producer.list_topics(topic, timeout=COMMIT_LOG_CREATE_TIMEOUT).topics.get(topic)
        if found is not None and found.error is None and found.partitions:
            return len(found.partitions)
        if time.monotonic() > deadline:
            raise RuntimeError(f"the sink's commit log topic {topic!r} did not appear within "
                               f"{COMMIT_LOG_CREATE_TIMEOUT:.0f} s")
        if not created:
            _create_commit_log(options, len(producer.list_topics(timeout=COMMIT_LOG_CREATE_TIMEOUT).brokers))
            created = True
        time.sleep(END_TXN_BACKOFF)


def _create_commit_log(options: SinkOptions, brokers: int) -> None:
    admin = AdminClient({**kafka_clients.ADMIN_DEFAULTS, **connection_settings(options)})
    topic = NewTopic(options.commit_log_topic, COMMIT_LOG_PARTITIONS,
                     max(1, min(COMMIT_LOG_MAX_REPLICATION, brokers)), config={"cleanup.policy": "compact"})
    for future in admin.create_topics([topic], operation_timeout=COMMIT_LOG_CREATE_TIMEOUT).values():
        try:
            future.result(COMMIT_LOG_CREATE_TIMEOUT)
            log.info("created the exactly-once sink's commit log topic %s", options.commit_log_topic)
        except confluent_kafka.KafkaException as exc:
            if exc.args[0].code() != confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:  # another task won
                raise


def connection_settings(options: SinkOptions) -> dict[str, str]:
    """The kafka.* options that say where and how to connect (bootstrap servers, TLS, SASL), for
    a client that must not get the producers' other settings."""
    return {key: value for key, value in options.kafka.items()
            if key in ("bootstrap.servers", "security.protocol") or key.startswith(("ssl.", "sasl."))}


def last_committed_batch(options: SinkOptions, tid: str, partition: int) -> int | None:
    """The batch id `tid`'s latest committed transaction wrote to the commit log (None:
    never). Reads back from the end, a growing window at a time, up to the high watermark:
    `init_transactions` returned, so our own last transaction has its marker below it."""
    kafka = options.kafka
    client = PartitionClient(bootstrap_addresses(kafka.get("bootstrap.servers", "")), options.commit_log_topic,
                             partition, kafka.get("client.id", "tidelog-spark-sink"), security=client_security(kafka))
    with client:
        low, high = client.list_offset(EARLIEST, 0), client.list_offset(LATEST, 0)
        window = COMMIT_LOG_WINDOW
        while True:  # bounded: the window grows until it covers the whole log
            start = max(low, high - window)
            scan = CommitLogScan(tid, start)
            while scan.next_offset < high:  # bounded: every answer moves next_offset, or we stop below
                answer = client.fetch(scan.next_offset, isolation_level=0, max_bytes=COMMIT_LOG_FETCH_BYTES,
                                      max_wait_ms=0)
                if answer.error_code != ErrorCode.NONE:
                    raise BrokerUnavailable(f"reading the commit log {options.commit_log_topic}-{partition}: "
                                            f"{ErrorCode(answer.error_code).name}")
                records = answer.records if isinstance(answer.records, (bytes, memoryview)) else None
                if not records:
                    break  # nothing more below the high watermark
                before = scan.next_offset
                if scan.feed(records) == before:
                    # not one whole batch: only a foreign writer makes one this large; guessing
                    # "never committed" here could write a batch twice
                    raise RuntimeError(f"the commit log {options.commit_log_topic}-{partition} holds a batch "
                                       f"larger than {COMMIT_LOG_FETCH_BYTES} bytes at offset {scan.next_offset}")
            if scan.last_committed is not None or start == low:
                return scan.last_committed
            window *= 4


# --- the driver side ----------------------------------------------------------------------


def check_login(options: SinkOptions) -> None:
    """SaslRefused, with the broker's message, when the cluster refuses the sink's credentials:
    checked once on the driver before any task runs, since a task's transactional producer
    would only time out in init_transactions (librdkafka retries a refused login until then).
    A cluster that does not answer now is left to the tasks' producers, which retry."""
    with KafkaClient(bootstrap_addresses(options.kafka["bootstrap.servers"]),
                     client_id=options.kafka.get("client.id", "tidelog-spark-sink"),
                     security=client_security(options.kafka)) as client:
        try:
            client.metadata([])
        except BrokerUnavailable as exc:
            log.info("exactly-once sink: no broker answered the login check (%s); the tasks retry", exc)


def end_transactions(options: SinkOptions, prepared: list[PreparedTransaction], *, commit: bool) -> None:
    """EndTxn(commit or abort) for every prepared transaction. Commit: TransactionLost when
    one of them is no longer open (the others are committed; the replay redoes the lost
    one). Abort: a lost one is already aborted."""
    if not prepared:
        return
    lost: list[str] = []
    with KafkaClient(bootstrap_addresses(options.kafka["bootstrap.servers"]),
                     client_id=options.kafka.get("client.id", "tidelog-spark-sink"),
                     security=client_security(options.kafka)) as client:
        client.metadata([])
        for txn in sorted(prepared, key=lambda t: t.transactional_id):
            if not _end_one(client, txn, commit):
                lost.append(txn.transactional_id)
    if lost and commit:
        raise TransactionLost(f"{len(lost)} of {len(prepared)} transactions of batch {prepared[0].batch_id} were "
                              f"no longer open (timed out after transaction.timeout.ms, or fenced): "
                              f"{', '.join(lost[:5])}; the batch is written again when the query restarts")


def _end_one(client: KafkaClient, txn: PreparedTransaction, commit: bool) -> bool:
    """True when the transaction ended as asked; False when it was no longer open."""
    what = "commit" if commit else "abort"
    deadline = time.monotonic() + END_TXN_TIMEOUT
    coordinator: int | None = None
    attempt = 0
    while True:  # bounded by the deadline
        attempt += 1
        if time.monotonic() > deadline:
            raise TimeoutError(f"{txn.transactional_id}: EndTxn({what}) not answered within {END_TXN_TIMEOUT:.0f} s")
        try:
            if coordinator is None:
                coordinator = _find_coordinator(client, txn.transactional_id, attempt)
                if coordinator is None:
                    time.sleep(END_TXN_BACKOFF)
                    continue
            request = messages.build(messages.request_type(ApiKey.END_TXN, END_TXN_VERSION),
                                     transactional_id=txn.transactional_id, producer_id=txn.producer_id,
                                     producer_epoch=txn.producer_epoch, committed=commit)
            answer = client.call(coordinator, ApiKey.END_TXN, END_TXN_VERSION, request, messages.encode_request,
                                 messages.response_decoder(ApiKey.END_TXN))
        except BrokerUnavailable as exc:
            log.info("%s: EndTxn(%s): %s (retrying)", txn.transactional_id, what, exc)
            coordinator = None
            time.sleep(END_TXN_BACKOFF)
            try:
                client.metadata([])  # brokers may have moved
            except BrokerUnavailable as again:
                log.info("%s: metadata: %s (retrying)", txn.transactional_id, again)
            continue
        outcome = end_txn_outcome(int(answer.error_code))
        if outcome is EndTxnOutcome.DONE:
            log.info("%s: %s of batch %s (producer id %d epoch %d, %d records)", txn.transactional_id,
                     "committed" if commit else "aborted", txn.batch_id, txn.producer_id, txn.producer_epoch,
                     txn.total)
            return True
        if outcome is EndTxnOutcome.LOST:
            log.warning("%s: EndTxn(%s) of batch %s: %s (producer id %d epoch %d)", txn.transactional_id, what,
                        txn.batch_id, ErrorCode(int(answer.error_code)).name, txn.producer_id, txn.producer_epoch)
            return False
        if outcome is EndTxnOutcome.FIND_COORDINATOR:
            coordinator = None
        time.sleep(END_TXN_BACKOFF)


def _find_coordinator(client: KafkaClient, tid: str, attempt: int) -> int | None:
    """The broker coordinating `tid`, or None while none is (retriable). Each attempt asks
    the next known broker, so one that is down does not stop the commit."""
    request = messages.build(messages.request_type(ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION),
                             key=tid, key_type=messages.KEY_TYPE_TRANSACTION)
    brokers = sorted(client.brokers)
    asked = brokers[attempt % len(brokers)] if brokers else None  # None: the first bootstrap server
    answer = client.call(asked, ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION, request, messages.encode_request,
                         messages.response_decoder(ApiKey.FIND_COORDINATOR))
    if answer.error_code != ErrorCode.NONE:
        log.info("%s: FindCoordinator: %s (retrying)", tid, ErrorCode(int(answer.error_code)).name)
        return None
    client.brokers.setdefault(int(answer.node_id), (answer.host, int(answer.port)))
    return int(answer.node_id)
