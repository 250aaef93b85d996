"""The transform process of the exactly-once test (tests/integration/test_transactions_eos.py),
run as its own OS process with sys.executable so that the test can SIGKILL it.

A consume-transform-produce loop, Kafka's EOS v2 (KIP-447): one transactional producer per
process with a transactional.id fixed per process instance (a replacement instance reuses the id
of the one it replaces, which aborts that one's open transaction at once), and the consumed
offsets sent into each transaction with the consumer's group metadata, so the group coordinator
fences a zombie by its generation. Each input value v is written as "out-<v>" to the same
partition of the output topic, in transactions of up to BATCH records.

It reports on stdout, one line per event, flushed at once (the test reads them to choose the
moment of its SIGKILL): "assigned <partitions>", "open <txn> <records>" once a transaction's
records are flushed and before it commits (it then holds the transaction open for --hold-s),
"committed <txn> <records>", "aborted <txn> <reason>". It runs until killed.

Usage: eos_transform.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID [--hold-s S]
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import confluent_kafka

BATCH = 50  # records per transaction
POLL_S = 0.5  # one consume() call's wait for records
CLIENT_TIMEOUT_S = 30.0  # one transactional call (init, send offsets, commit, abort)
SESSION_TIMEOUT_MS = 6_000  # the broker's group.min.session.timeout.ms: a killed member leaves fast
TRANSACTION_TIMEOUT_MS = 20_000  # the coordinator's abort if no replacement ever comes


def say(line: str) -> None:
    print(line, flush=True)


def rewind(consumer: Any) -> None:
    """After an abort: back to the group's committed offsets (the aborted records are read again)."""
    assignment = consumer.assignment()
    if not assignment:
        return
    for tp in consumer.committed(assignment, CLIENT_TIMEOUT_S):
        offset = tp.offset if tp.offset >= 0 else confluent_kafka.OFFSET_BEGINNING
        consumer.seek(confluent_kafka.TopicPartition(tp.topic, tp.partition, offset))


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "input", "output", "group", "transactional_id"):
        parser.add_argument(name)
    parser.add_argument("--hold-s", type=float, default=0.0, help="how long each transaction stays open")
    args = parser.parse_args()

    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": args.bootstrap, "group.id": args.group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
        "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 1_000, "fetch.wait.max.ms": 100})
    producer = confluent_kafka.Producer({
        "bootstrap.servers": args.bootstrap, "transactional.id": args.transactional_id,
        "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS, "linger.ms": 5})
    producer.init_transactions(CLIENT_TIMEOUT_S)

    def on_assign(c: Any, partitions: list[Any]) -> None:
        say("assigned " + ",".join(str(tp.partition) for tp in partitions))

    consumer.subscribe([args.input], on_assign=on_assign)
    txn = 0
    while True:  # until SIGKILLed by the test
        records = [m for m in consumer.consume(BATCH, POLL_S) if m.error() is None]
        if not records:
            continue
        txn += 1
        producer.begin_transaction()
        try:
            for m in records:
                partition, value = m.partition(), m.value()
                assert partition is not None and value is not None  # every input record has both
                producer.produce(args.output, b"out-" + value, partition=partition)
            producer.flush(CLIENT_TIMEOUT_S)
            say(f"open {txn} {len(records)}")
            time.sleep(args.hold_s)  # the window the test's SIGKILL aims at
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), CLIENT_TIMEOUT_S)
            producer.commit_transaction(CLIENT_TIMEOUT_S)
            say(f"committed {txn} {len(records)}")
        except confluent_kafka.KafkaException as exc:
            error = exc.args[0]
            if not error.txn_requires_abort():
                say(f"fatal {txn} {error}")
                return 1
            producer.abort_transaction(CLIENT_TIMEOUT_S)
            say(f"aborted {txn} {error}")
            rewind(consumer)


if __name__ == "__main__":
    sys.exit(main())
