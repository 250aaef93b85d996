"""One member of a Kafka 4 group in the chaos workload, in a process of its own so that a fault
can SIGKILL it or SIGSTOP it past its session or its acquisition locks (a thread can be neither).

    python -m chaos.engine.member_client consumer --name c0 --incarnation 0 --bootstrap HOST:PORT \
        --topic chaos --group chaos-cgroup
    python -m chaos.engine.member_client share --name s0 ... --group chaos-share --release-every 50

Roles, both confluent-kafka:
- consumer: a KIP-848 member (`group.protocol=consumer`): subscribe, consume, commit each polled
  batch asynchronously. Its assignment changes arrive incrementally (on_assign: partitions
  added; on_revoke / on_lost: partitions taken away), each one an event, so the checker
  (chaos.checkers.consumer_protocol) knows which partitions each member held when it polled.
  librdkafka does not expose the member epoch; `epoch` in the events is the member's own count
  of assignment changes in this incarnation, for reading the history only.
- share: a KIP-932 `ShareConsumer` with explicit acknowledgement: each polled record is
  acknowledged ACCEPT, except a value divisible by `--release-every`, which is RELEASEd every
  time it comes (a poison message: it must be archived once its delivery count reaches
  `group.share.delivery.count.limit`), after holding the batch `--process-ms` (its work);
  `commit_sync` sends the batch's acknowledgements and
  answers per partition, so each acknowledgement is recorded as it is sent (pending) and then
  with its outcome: ok true
  (the partition's leader took it), false (refused with an error from the leader, e.g. the lock
  had run out: Kafka rolls a refused acknowledgement back) or null (unknown: the connection
  broke or the call timed out).

Every event is one JSON line on stdout (chaos.engine.txn_client.Emitter: `mono` on the clock
the harness's history shares). SIGTERM ends the loop and closes the consumer (a consumer
member leaves the group; a share member's unacknowledged records go back at once).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Final

from chaos.engine.txn_client import Emitter

POLL_S: Final = 0.2  # one consume or share poll call
CONSUME_BATCH: Final = 500
ACK_TIMEOUT_S: Final = 10.0  # commit_sync of one batch's acknowledgements (a leader moving: a few seconds)
# errors after which the leader may or may not have taken the acknowledgements (the connection
# broke or the answer never came): their outcome is unknown, not refused
UNKNOWN_OUTCOME: Final = frozenset({"_TRANSPORT", "_TIMED_OUT", "_MSG_TIMED_OUT", "REQUEST_TIMED_OUT",
                                    "NETWORK_EXCEPTION", "_DESTROY"})


def security_config(security_dir: str) -> dict[str, str]:
    """A secured cluster's client settings (its client.properties), without bootstrap.servers
    (--bootstrap names the secured listeners already); none for a PLAINTEXT run."""
    if not security_dir:
        return {}
    from localcluster.security_setup import read_client_config

    config = dict(read_client_config(Path(security_dir)))
    config.pop("bootstrap.servers", None)
    return config


class Member:
    def __init__(self, args: argparse.Namespace, emit: Emitter) -> None:
        self.args, self.emit = args, emit
        self.stopping = threading.Event()
        self.epoch = 0
        self.log = logging.getLogger(f"chaos.member.{args.name}")
        self.security = security_config(args.security_dir)

    def fields(self) -> dict[str, Any]:
        return {"member": self.args.name, "incarnation": self.args.incarnation}

    def run_consumer(self) -> None:
        from confluent_kafka import Consumer, KafkaException

        def changed(kind: str, partitions: list[Any], **extra: Any) -> None:
            self.epoch += 1
            self.emit(kind, **self.fields(), epoch=self.epoch, partitions=sorted(tp.partition for tp in partitions),
                      **extra)

        def on_commit(error: Any, committed: list[Any]) -> None:
            if error is not None:
                self.emit("note", what="cgroup-commit-failed", **self.fields(), error=error.name())
                return
            for tp in committed:
                if tp.error is None and tp.offset >= 0:
                    self.emit("cgroup-commit", **self.fields(), partition=tp.partition, offset=tp.offset)

        # KIP-848: the session and heartbeat interval are the broker's (group.consumer.*); the client
        # may not set session.timeout.ms or heartbeat.interval.ms with this protocol
        consumer = Consumer({"bootstrap.servers": self.args.bootstrap, "group.id": self.args.group,
                             "group.protocol": "consumer", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
                             "topic.metadata.refresh.interval.ms": 1000, "on_commit": on_commit,
                             "logger": self.log, **self.security})
        try:
            consumer.subscribe([self.args.topic],
                               on_assign=lambda _c, parts: changed("cgroup-assign", parts),
                               on_revoke=lambda _c, parts: changed("cgroup-revoke", parts, lost=False),
                               on_lost=lambda _c, parts: changed("cgroup-revoke", parts, lost=True))
            while not self.stopping.is_set():  # until SIGTERM
                polled = False
                messages: list[Any] = consumer.consume(CONSUME_BATCH, POLL_S)
                for m in messages:
                    if m.error() is not None:
                        self.emit("note", what="cgroup-consumer-error", **self.fields(), error=m.error().name())
                        continue
                    polled = True
                    self.emit("cgroup-read", **self.fields(), epoch=self.epoch, partition=m.partition(),
                              offset=m.offset(), value=m.value().decode())
                if polled:
                    try:  # the outcome arrives in on_commit; a moving coordinator fails it, the next batch retries
                        consumer.commit(asynchronous=True)
                    except KafkaException as exc:
                        self.emit("note", what="cgroup-commit-failed", **self.fields(), error=exc.args[0].name())
        finally:
            consumer.close()  # revokes (on_revoke) and leaves: the others get its partitions at once

    def run_share(self) -> None:
        from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer

        consumer = ShareConsumer({"bootstrap.servers": self.args.bootstrap, "group.id": self.args.group,
                                  "share.acknowledgement.mode": "explicit", **self.security})
        try:
            consumer.subscribe([self.args.topic])
            while not self.stopping.is_set():  # until SIGTERM
                acks: list[tuple[int, int, str]] = []
                messages: list[Any] = list(consumer.poll(POLL_S))
                for m in messages:
                    if m.error() is not None:
                        self.emit("note", what="share-consumer-error", **self.fields(), error=m.error().name())
                        continue
                    value = m.value().decode()
                    self.emit("share-read", **self.fields(), partition=m.partition(), offset=m.offset(), value=value,
                              delivery_count=m.delivery_count())
                    every = self.args.release_every
                    release = every > 0 and value.isdigit() and int(value) % every == 0
                    consumer.acknowledge(m, AcknowledgeType.RELEASE if release else AcknowledgeType.ACCEPT)
                    acks.append((m.partition(), m.offset(), "release" if release else "accept"))
                if acks:
                    # the member "works" on its records while it holds them: a pause or a kill then most
                    # likely catches it holding some, whose locks must run out
                    time.sleep(self.args.process_ms / 1000)
                    self._commit_acks(consumer, acks, KafkaException)
        finally:
            consumer.close()

    def _commit_acks(self, consumer: Any, acks: list[tuple[int, int, str]], error_type: type[Exception]) -> None:
        """commit_sync the batch; each acknowledgement recorded before it is sent (`pending`: a member
        killed during the call never learns whether the leader took it), then with its partition's
        answer."""
        for partition, offset, ack in acks:
            self.emit("share-ack", **self.fields(), partition=partition, offset=offset, type=ack, ok=None, error=None,
                      pending=True)
        outcome: dict[int, tuple[bool | None, str | None]] = {}
        try:
            for tp, error in consumer.commit_sync(ACK_TIMEOUT_S).items():
                name = None if error is None else _error_name(error)
                outcome[tp.partition] = (True, None) if name is None else (None if name in UNKNOWN_OUTCOME else False,
                                                                           name)
        except error_type as exc:  # the whole call failed: whether the leader took them is unknown
            self.emit("note", what="share-commit-failed", **self.fields(), error=_error_name(exc))
        for partition, offset, ack in acks:
            ok, error = outcome.get(partition, (None, None))
            self.emit("share-ack", **self.fields(), partition=partition, offset=offset, type=ack, ok=ok, error=error)


def _error_name(error: Any) -> str:
    """A KafkaException's KafkaError name, or the exception's text."""
    first = error.args[0] if getattr(error, "args", None) else error
    name = getattr(first, "name", None)
    return str(name()) if callable(name) else str(first)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="chaos.engine.member_client")
    parser.add_argument("role", choices=["consumer", "share"])
    parser.add_argument("--name", required=True)
    parser.add_argument("--incarnation", type=int, default=0)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--release-every", type=int, default=0, help="share: RELEASE every value divisible by this")
    parser.add_argument("--process-ms", type=int, default=0, help="share: hold each polled batch this long")
    parser.add_argument("--security-dir", default="", help="a secured cluster's data dir (its client.properties)")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    member = Member(args, Emitter())
    signal.signal(signal.SIGTERM, lambda *_: member.stopping.set())
    if args.role == "consumer":
        member.run_consumer()
    else:
        member.run_share()
    return 0


if __name__ == "__main__":
    sys.exit(main())
