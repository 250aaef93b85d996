"""A consumer group in the workload: N confluent-kafka members subscribe, poll and commit.

    group = GroupConsumers(bootstrap, "chaos", partitions, members=2, history=history, bounce_every_s=7)
    group.start()                  # members m0, m1 join GROUP_ID and poll until stop(); m0 leaves and
                                   # rejoins every 7 s, a rebalance each time
    ...
    group.catch_up(timeout_s=30)   # after the final heal: until the group read every high watermark
    group.stop()

Each member records `group-assign` (its partitions and its generation), `group-read` (member,
generation, partition, offset, value) for every record polled and `group-commit` for every
offset the coordinator acknowledged, and a `note` (group-member-bounce) when m0 leaves to rejoin.
Between its last commit and its leaving m0 may have polled more: whoever gets the partition
resumes at the committed offset and polls those again, Kafka's at-least-once. The generation is the member's own count of assignments:
with the classic eager protocol every rebalance revokes and reassigns every member, so it
changes exactly when the member's group generation does (librdkafka does not expose the id).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, Final

from chaos.engine.workload import CLIENT_LOG, JOIN_S, PLAINTEXT
from chaos.history import History
from common.limits import CHAOS_POLL_S

GROUP_ID: Final = "chaos-group"
CATCH_UP_POLL_S: Final = 0.2
SESSION_TIMEOUT_MS: Final = 6000  # a member lost with its broker connection is replaced within seconds


class GroupConsumers:
    """`members` consumers of one group, each a thread: subscribe, consume, commit asynchronously."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, members: int, history: History,
                 bounce_every_s: float | None = None, security: Mapping[str, str] = PLAINTEXT) -> None:
        self.bootstrap, self.topic, self.partitions, self.history = bootstrap, topic, partitions, history
        self.security = security  # the scenario's [cluster] security settings (workload.PLAINTEXT: none)
        self.bounce_every_s = bounce_every_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        # the next offset the group has polled per partition, whichever member polled it
        self.position: dict[int, int] = {}
        self._generation: dict[str, int] = {}  # per member, written and read by its own thread only
        self._threads = [threading.Thread(target=self._run, args=(f"m{i}",), name=f"chaos-group-{i}", daemon=True)
                         for i in range(members)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _run(self, member: str) -> None:
        from confluent_kafka import Consumer

        self._generation[member] = 0

        def on_assign(consumer: Any, assigned: list[Any]) -> None:
            # called from within consume(): the records of that same call belong to the new generation
            self._generation[member] += 1
            self.history.record("group-assign", member=member, generation=self._generation[member],
                                partitions=sorted(tp.partition for tp in assigned))

        def on_commit(error: Any, committed: list[Any]) -> None:
            if error is not None:
                self.history.record("note", what="group-commit-failed", member=member, error=error.name())
                return
            for tp in committed:
                if tp.error is None and tp.offset >= 0:
                    self.history.record("group-commit", member=member, partition=tp.partition, offset=tp.offset)

        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "group.id": GROUP_ID, "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "session.timeout.ms": SESSION_TIMEOUT_MS,
                                  "heartbeat.interval.ms": 500, "fetch.wait.max.ms": 100,
                                  "topic.metadata.refresh.interval.ms": 1000, "on_commit": on_commit,
                                  "logger": CLIENT_LOG, **self.security}
        bounces = member == "m0" and self.bounce_every_s is not None
        while not self._stop.is_set():  # one incarnation per pass: only m0 bounces, every bounce_every_s
            consumer = Consumer(config)
            leave_at = time.monotonic() + self.bounce_every_s if bounces and self.bounce_every_s else None
            try:
                consumer.subscribe([self.topic], on_assign=on_assign)
                while not self._stop.is_set() and (leave_at is None or time.monotonic() < leave_at):
                    self._poll(consumer, member)
            finally:
                consumer.close()  # leaves the group: the others rebalance at once
            if not self._stop.is_set():
                self.history.record("note", what="group-member-bounce", member=member,
                                    generation=self._generation[member])

    def _poll(self, consumer: Any, member: str) -> None:
        """One consume call: every record recorded, then an asynchronous commit of what was polled."""
        from confluent_kafka import KafkaException

        messages: list[Any] = consumer.consume(500, CHAOS_POLL_S)
        polled = False
        for message in messages:
            if message.error() is not None:
                self.history.record("note", what="group-consumer-error", member=member, error=message.error().name())
                continue
            polled = True
            partition, offset = message.partition(), message.offset()
            self.history.record("group-read", member=member, generation=self._generation[member], partition=partition,
                                offset=offset, value=message.value().decode())
            with self._lock:
                self.position[partition] = max(self.position.get(partition, 0), offset + 1)
        if polled:
            try:  # the outcome arrives in on_commit; a coordinator moving fails it, the next one retries
                consumer.commit(asynchronous=True)
            except KafkaException as exc:
                self.history.record("note", what="group-commit-failed", member=member, error=exc.args[0].name())

    def catch_up(self, timeout_s: float) -> bool:
        """Wait (bounded) until the group polled up to every partition's high watermark; False on timeout."""
        deadline = time.monotonic() + timeout_s
        ends = high_watermarks(self.bootstrap, self.topic, self.partitions, self.security, deadline)
        caught_up = False
        while len(ends) == self.partitions and time.monotonic() < deadline:  # bounded by the deadline
            with self._lock:
                behind = {p: end for p, end in ends.items() if self.position.get(p, 0) < end}
            if not behind:
                caught_up = True
                break
            time.sleep(CATCH_UP_POLL_S)
        with self._lock:
            positions = {str(p): n for p, n in sorted(self.position.items())}
        self.history.record("note", what="group-catch-up", ok=caught_up,
                            ends={str(p): e for p, e in sorted(ends.items())}, positions=positions)
        return caught_up

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(JOIN_S)


def high_watermarks(bootstrap: str, topic: str, partitions: int, security: Mapping[str, str],
                    deadline: float) -> dict[int, int]:
    """Each partition's high watermark, asked until `deadline` (time.monotonic()) while leaders
    move; the partitions not answered by then are left out."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{GROUP_ID}-probe", "logger": CLIENT_LOG,
                      **security})
    ends: dict[int, int] = {}
    try:
        for p in range(partitions):
            while p not in ends and time.monotonic() < deadline:  # bounded by the deadline
                try:
                    ends[p] = probe.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)[1]
                except KafkaException:
                    time.sleep(CATCH_UP_POLL_S)  # a leader still moving
    finally:
        probe.close()
    return ends
