"""One transactional client of the chaos workload, in a process of its own so a fault can
SIGSTOP or SIGKILL it (a zombie producer is a paused process, not a paused thread).

    python -m chaos.engine.txn_client producer --name tp0 --incarnation 0 --bootstrap HOST:PORT \
        --topics txn-a,txn-b --partitions 3 --timeout-ms 6000 --interval-ms 50
    python -m chaos.engine.txn_client transform --name tt0 ... --input txn-a --output txn-out

Roles, both confluent-kafka with `transactional.id` = `chaos-txn-<name>` (Kafka's contract):
- producer: each transaction writes one value to every partition of every topic and commits
  an offset for its own group (`send_offsets_to_transaction`), so it spans partitions, topics
  and the group coordinator.
- transform: consume-transform-produce from `--input` (read_committed, group
  `chaos-transform`) to `--output`: each polled batch's values are written to the output and
  its offsets committed in the same transaction; after an abort the consumer is replaced, so
  it resumes at the last committed offsets.

Every event is one JSON line on stdout with `mono` (time.monotonic(): the system-wide clock
the harness's history shares) and the history fields (chaos.checkers.transactions names
them). An error that requires an abort is answered with `abort_transaction()` (outcome
fail); any other error mid-transaction leaves the outcome unknown (info) and the producer is
replaced: `init_transactions()` of the new instance fences the old and ends its transaction.
So does a `send_offsets_to_transaction()` that hangs in librdkafka past SEND_OFFSETS_BOUND_S
(its timeout is not enforced: librdkafka #5456, #5511) and cannot be aborted.
SIGTERM ends the loop after the current transaction.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

API_TIMEOUT_S: Final = 10.0  # one transactional call (init, send offsets, commit, abort)
COMMIT_ATTEMPTS: Final = 3   # a retriable commit error: librdkafka asks the caller to commit again
# a transaction this long is most likely stuck in the client library (a healthy one takes
# milliseconds; a commit retried through a coordinator move a few seconds): the stacks of every
# thread go to the client's log, to say where. A slow one that ends after the dump is harmless.
STUCK_S: Final = 2 * API_TIMEOUT_S
# librdkafka does not enforce send_offsets_to_transaction's timeout (confluentinc/librdkafka#5456:
# a coordinator request's deadline is never checked) and waits for ever on a group coordinator it
# cached before that broker was decommissioned (#5511: gone from Metadata while fenced, killed and
# back). The call runs in a thread waited for this long; past it the transaction is given up.
SEND_OFFSETS_BOUND_S: Final = API_TIMEOUT_S + 5.0
# librdkafka debug contexts for every client of a run (e.g. "eos,protocol,cgrp"), to see what a
# stuck transactional call waits for; unset, the clients log only librdkafka's warnings
DEBUG_ENV: Final = "TIDELOG_CHAOS_RDKAFKA_DEBUG"
CONSUME_BATCH: Final = 50
CONSUME_WAIT_S: Final = 0.5
TRANSFORM_GROUP: Final = "chaos-transform"


def transactional_id(name: str) -> str:
    return f"chaos-txn-{name}"


class CallHung(Exception):
    """A client library call still running past its bound (it goes on in its own thread)."""


def bounded(call: Callable[[], None], bound_s: float, what: str) -> None:
    """`call()` in a daemon thread, waited for `bound_s`: its exception is raised here, CallHung
    when it has not returned by then. A hung call's thread is left to the library: it returns
    when the library gets round to it (a fenced producer's request then fails) or never."""
    raised: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the waiting thread
            raised.append(exc)
        finally:
            done.set()
    threading.Thread(target=run, name=f"chaos-txn-{what}", daemon=True).start()
    if not done.wait(bound_s):
        raise CallHung(f"{what} still running after {bound_s:g} s")
    if raised:
        raise raised[0]


class Emitter:
    """JSON lines on stdout, whole lines only (delivery callbacks and the loop share it)."""

    def __init__(self, out: Any = sys.stdout) -> None:
        self._out, self._lock = out, threading.Lock()

    def __call__(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"mono": time.monotonic(), "kind": kind, **fields}, separators=(",", ":"))
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


class Client:
    def __init__(self, args: argparse.Namespace, emit: Emitter) -> None:
        self.args, self.emit = args, emit
        self.stopping = threading.Event()
        self.number = 0
        self.log = logging.getLogger(f"chaos.txn.{args.name}")
        # a secured cluster's client settings (`tidelog up --security`'s client.properties), on every client
        self.security: dict[str, str] = {}
        if getattr(args, "security_dir", None):  # callers that predate secured clusters pass none
            from localcluster.security_setup import read_client_config
            self.security = read_client_config(Path(args.security_dir))
            del self.security["bootstrap.servers"]  # --bootstrap names the secured listeners already

    def producer(self) -> Any:
        from confluent_kafka import Producer

        config: dict[str, Any] = {"bootstrap.servers": self.args.bootstrap,
                                  "transactional.id": transactional_id(self.args.name),
                                  "transaction.timeout.ms": self.args.timeout_ms, "linger.ms": 5,
                                  "topic.metadata.refresh.interval.ms": 1000, "logger": self.log, **self.security}
        if os.environ.get(DEBUG_ENV):  # straight to stderr from librdkafka's threads: a Python logger
            # only gets its lines when the application polls, never while a call hangs
            config["debug"] = os.environ[DEBUG_ENV]
            del config["logger"]
        if self.args.request_timeout_ms:  # a held request times out soon and is retried on a new connection
            config.update({"socket.timeout.ms": self.args.request_timeout_ms,
                           "request.timeout.ms": self.args.request_timeout_ms})
        producer = Producer(config)
        producer.init_transactions(API_TIMEOUT_S * 3)
        self.emit("note", what="txn-producer-ready", process=self.args.name, incarnation=self.args.incarnation)
        return producer

    def txn_id(self) -> str:
        self.number += 1
        return f"{self.args.name}-{self.args.incarnation}-{self.number}"

    def run_one(self, producer: Any, txn: str, writes: list[tuple[str, int, str]], consumed: list[dict[str, Any]],
                offsets: Callable[[], tuple[list[Any], Any]]) -> tuple[str, Any]:
        """One transaction; its outcome ("ok" | "fail" | "info") and the error, recorded."""
        from confluent_kafka import KafkaException

        name = self.args.name
        self.emit("txn-invoke", process=name, txn=txn, consumed=consumed,
                  writes=[{"topic": t, "partition": p, "value": v} for t, p, v in writes])

        def delivered(error: Any, message: Any) -> None:
            if error is None:
                self.emit("txn-write", process=name, txn=txn, topic=message.topic(), partition=message.partition(),
                          offset=message.offset(), value=message.value().decode())

        committing = False
        step = ["begin_transaction"]
        faulthandler.dump_traceback_later(STUCK_S, file=sys.stderr)
        watchdog = threading.Timer(STUCK_S, lambda: self.emit("note", what="txn-client-stuck", process=name, txn=txn,
                                                              call=step[0], after_s=STUCK_S))
        watchdog.daemon = True
        watchdog.start()
        try:
            producer.begin_transaction()
            step[0] = "produce"
            for topic, partition, value in writes:
                producer.produce(topic, value=value.encode(), partition=partition, on_delivery=delivered)
            positions, group = offsets()
            step[0] = "send_offsets_to_transaction"
            bounded(lambda: producer.send_offsets_to_transaction(positions, group, API_TIMEOUT_S),
                    SEND_OFFSETS_BOUND_S, step[0])
            committing = True
            step[0] = "commit_transaction"
            self.emit("txn-commit-invoke", process=name, txn=txn)
            for attempt in range(COMMIT_ATTEMPTS):  # bounded: a retriable commit is retried a few times
                try:
                    producer.commit_transaction(API_TIMEOUT_S)
                    break
                except KafkaException as exc:
                    if not exc.args[0].retriable() or attempt == COMMIT_ATTEMPTS - 1:
                        raise
            self.emit("txn-ok", process=name, txn=txn)
            return "ok", None
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort():
                try:
                    producer.abort_transaction(API_TIMEOUT_S)
                    self.emit("txn-fail", process=name, txn=txn, error=error.name(), committing=committing)
                    return "fail", error
                except KafkaException as abort_error:
                    error = abort_error.args[0]
            self.emit("txn-info", process=name, txn=txn, error=error.name(), fatal=error.fatal(),
                      committing=committing)
            return "info", error
        except CallHung as exc:
            return self.hung(producer, txn, exc)
        except BufferError as exc:  # the local queue is full: nothing of this one was sent
            producer.abort_transaction(API_TIMEOUT_S)
            self.emit("txn-fail", process=name, txn=txn, error=str(exc), committing=False)
            return "fail", None
        finally:
            watchdog.cancel()
            faulthandler.cancel_dump_traceback_later()

    def hung(self, producer: Any, txn: str, exc: CallHung) -> tuple[str, Any]:
        """send_offsets_to_transaction hung in librdkafka: abort if the library lets us (it
        refuses a second transactional call while one runs: _CONFLICT), else the outcome is
        unknown (info) and the caller replaces the producer, whose successor's
        init_transactions fences this one and aborts its transaction."""
        from confluent_kafka import KafkaException

        name = self.args.name
        self.emit("note", what="txn-call-hung", process=name, txn=txn, call="send_offsets_to_transaction",
                  after_s=SEND_OFFSETS_BOUND_S)
        try:
            bounded(lambda: producer.abort_transaction(API_TIMEOUT_S), SEND_OFFSETS_BOUND_S, "abort_transaction")
            self.emit("txn-fail", process=name, txn=txn, error=str(exc), committing=False)
            return "fail", None
        except (KafkaException, CallHung) as abort_error:
            self.emit("txn-info", process=name, txn=txn, error=f"{exc}; abort_transaction: {abort_error}",
                      fatal=False, committing=False)
            return "info", abort_error.args[0] if isinstance(abort_error, KafkaException) else None

    def replace(self, producer: Any, why: str) -> Any:
        """A producer that failed mid-transaction: a new one (the same transactional.id) fences it."""
        self.emit("note", what="txn-producer-replaced", process=self.args.name, error=why)
        try:
            producer.flush(1.0)
        except Exception as exc:  # a fatal producer may refuse anything; it is dropped either way
            self.log.info("flush of a replaced producer: %s", exc)
        while not self.stopping.is_set():  # bounded by stop(): init retries while the coordinator moves
            try:
                return self.producer()
            except Exception as exc:  # KafkaException from init_transactions: coordinator not there yet
                self.emit("note", what="txn-init-failed", process=self.args.name, error=str(exc))
                time.sleep(1.0)
        return None

    def run_producer(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        topics = self.args.topics.split(",")
        group = Consumer({"bootstrap.servers": self.args.bootstrap, "group.id": transactional_id(self.args.name),
                          "logger": self.log, **self.security})
        producer = self.producer()
        try:
            while producer is not None and not self.stopping.is_set():  # until SIGTERM
                txn = self.txn_id()
                writes = [(t, p, f"{txn}-{p}") for t in topics for p in range(self.args.partitions)]

                def offsets() -> tuple[list[Any], Any]:
                    return [TopicPartition(topics[0], 0, self.number)], group.consumer_group_metadata()

                outcome, error = self.run_one(producer, txn, writes, [], offsets)
                if outcome == "info":
                    producer = self.replace(producer, getattr(error, "name", lambda: "?")())
                time.sleep(self.args.interval_ms / 1000)
        finally:
            group.close()
            if producer is not None:
                producer.flush(API_TIMEOUT_S)

    def consumer(self) -> Any:
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": self.args.bootstrap, "group.id": TRANSFORM_GROUP,
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                             "topic.metadata.refresh.interval.ms": 1000, "logger": self.log, **self.security})
        consumer.subscribe([self.args.input])
        return consumer

    def run_transform(self) -> None:
        from confluent_kafka import TopicPartition

        consumer, producer = self.consumer(), self.producer()
        try:
            while producer is not None and not self.stopping.is_set():  # until SIGTERM
                messages = [m for m in consumer.consume(CONSUME_BATCH, CONSUME_WAIT_S) if m.error() is None]
                if not messages:
                    continue
                txn = self.txn_id()
                consumed = [{"topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
                             "value": m.value().decode()} for m in messages]
                writes = [(self.args.output, m.partition() % self.args.partitions, m.value().decode())
                          for m in messages]
                nexts: dict[int, int] = {}
                for m in messages:
                    nexts[m.partition()] = max(nexts.get(m.partition(), 0), m.offset() + 1)

                def offsets() -> tuple[list[Any], Any]:
                    return ([TopicPartition(self.args.input, p, o) for p, o in sorted(nexts.items())],
                            consumer.consumer_group_metadata())

                outcome, error = self.run_one(producer, txn, writes, consumed, offsets)
                if outcome != "ok":  # resume from the committed offsets: a new member of the group
                    consumer.close()
                    consumer = self.consumer()
                if outcome == "info":
                    producer = self.replace(producer, getattr(error, "name", lambda: "?")())
        finally:
            consumer.close()
            if producer is not None:
                producer.flush(API_TIMEOUT_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="chaos.engine.txn_client")
    parser.add_argument("role", choices=["producer", "transform"])
    parser.add_argument("--name", required=True)
    parser.add_argument("--incarnation", type=int, default=0)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topics", default="")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--timeout-ms", type=int, default=10_000)
    parser.add_argument("--interval-ms", type=int, default=50)
    parser.add_argument("--request-timeout-ms", type=int, default=0)
    parser.add_argument("--input", default="")
    parser.add_argument("--output", default="")
    parser.add_argument("--security-dir", default="", help="a secured cluster's data dir (its client.properties)")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    client = Client(args, Emitter())
    signal.signal(signal.SIGTERM, lambda *_: client.stopping.set())
    if args.role == "producer":
        client.run_producer()
    else:
        client.run_transform()
    return 0


if __name__ == "__main__":
    sys.exit(main())
