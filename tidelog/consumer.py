"""The console consumer's fetch loop: positions per partition, fetched from their leaders.

    consumer = Consumer(client, "demo", [0, 1, 2], StartOffset(named="earliest"), fmt, sys.stdout.buffer,
                        reset="earliest")
    while ...: consumer.poll(limit)        # one round of Fetch requests; records written to `out`

Named start positions are looked up with ListOffsets; a consumer never reads past the high
watermark (the broker's Fetch stops there); leadership moves, offline partitions and brokers
that go away are followed through fresh metadata (and every METADATA_MAX_AGE anyway);
OFFSET_OUT_OF_RANGE resets to `reset` as Kafka's auto.offset.reset. Other errors raise
ClusterError with Kafka's error name.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO, Final

from common.errors import CorruptRecordError, ErrorCode
from common.limits import CLIENT_RETRY_BACKOFF
from common.protocol.primitives import RecordsPlaceholder
from common.units import SECONDS
from tidelog.cli_common import ClusterError
from tidelog.console_records import ConsumerFormat, decode_fetched
from common.broker_connection import BrokerUnavailable
from common.kafka_client import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    NO_LEADER,
    RETRIABLE,
    KafkaClient,
    TopicInfo,
    error_name,
)

FETCH_MAX_WAIT_MS: Final = 500  # one long-poll (Kafka's fetch.max.wait.ms), shared by the leaders polled in turn
MIN_FETCH_WAIT_MS: Final = 20
METADATA_MAX_AGE: Final = 5 * SECONDS  # refresh even without errors, to find new leaders of offline partitions
STARTUP_TIMEOUT: Final = 30 * SECONDS  # metadata of the topic when starting
EARLIEST: Final = "earliest"
LATEST: Final = "latest"


@dataclass(frozen=True, slots=True)
class StartOffset:
    """Where a partition starts: a named position (earliest/latest) or an offset."""

    named: str | None = None
    offset: int | None = None


class Consumer:
    """Positions per partition, fetched from their leaders until stopped."""

    def __init__(self, client: KafkaClient, topic: str, partitions: list[int], start: StartOffset,
                 fmt: ConsumerFormat, out: BinaryIO, *, reset: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client, self.topic, self.fmt, self.out, self._clock = client, topic, fmt, out, clock
        self.reset = reset  # auto.offset.reset after OFFSET_OUT_OF_RANGE
        self.positions: dict[int, int | None] = {p: start.offset for p in partitions}  # None: to be looked up
        self.lookup = {p: start.named or LATEST for p in partitions}
        self.count = 0
        self._topic: TopicInfo | None = None
        self._fetched_at = float("-inf")

    def metadata(self) -> TopicInfo | None:
        if self._topic is not None and self._clock() - self._fetched_at < METADATA_MAX_AGE:
            return self._topic
        try:
            topic = self.client.metadata([self.topic]).topics.get(self.topic)
        except BrokerUnavailable:
            return None
        self._fetched_at = self._clock()
        if topic is None or topic.error_code not in (0, *RETRIABLE):
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if topic is None else topic.error_code
            raise ClusterError(error_name(code), f"topic {self.topic!r}")
        self._topic = topic if topic.error_code == 0 else None
        return self._topic

    def _stale(self) -> None:
        self._topic = None

    def _resolve(self, topic: TopicInfo) -> None:
        """ListOffsets for every partition whose position is still a name (earliest/latest)."""
        groups: dict[int, dict[int, int]] = {}
        for p, position in self.positions.items():
            leader = topic.partitions[p].leader
            if position is None and leader != NO_LEADER:
                timestamp = EARLIEST_TIMESTAMP if self.lookup[p] == EARLIEST else LATEST_TIMESTAMP
                groups.setdefault(leader, {})[p] = timestamp
        for leader, timestamps in groups.items():
            try:
                answers = self.client.list_offsets(leader, self.topic, timestamps)
            except BrokerUnavailable:
                self._stale()
                continue
            for p, answer in answers.items():
                if answer.error_code == 0:
                    self.positions[p] = answer.offset
                elif answer.error_code in RETRIABLE:
                    self._stale()
                else:
                    raise ClusterError(error_name(answer.error_code), f"ListOffsets of {self.topic}-{p}")

    def poll(self, limit: int | None) -> int:
        """One round of fetches over every leader; the number of records written."""
        topic = self.metadata()
        if topic is None:
            time.sleep(CLIENT_RETRY_BACKOFF)
            return 0
        self._resolve(topic)
        by_leader: dict[int, dict[int, int]] = {}
        for p, position in self.positions.items():
            leader = topic.partitions[p].leader
            if position is not None and leader != NO_LEADER:
                by_leader.setdefault(leader, {})[p] = position
        if not by_leader:
            time.sleep(CLIENT_RETRY_BACKOFF)
            return 0
        wait = max(MIN_FETCH_WAIT_MS, FETCH_MAX_WAIT_MS // len(by_leader))
        written = 0
        for leader, positions in sorted(by_leader.items()):
            try:
                answers = self.client.fetch(leader, self.topic, positions, max_wait_ms=wait)
            except BrokerUnavailable:
                self._stale()
                continue
            for p, answer in sorted(answers.items()):
                records = answer.records
                assert not isinstance(records, RecordsPlaceholder), "a decoded response holds bytes"
                written += self._take(p, answer.error_code, records, limit, written)
                if limit is not None and self.count >= limit:
                    return written
        return written

    def _take(self, p: int, code: int, records: bytes | memoryview | None, limit: int | None, written: int) -> int:
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            print(f"tidelog consume: offset {self.positions[p]} of {self.topic}-{p} is out of range; "
                  f"resetting to the {self.reset} offset", file=sys.stderr)
            self.positions[p], self.lookup[p] = None, self.reset
            return 0
        if code in RETRIABLE:
            self._stale()
            return 0
        if code != 0:
            raise ClusterError(error_name(code), f"Fetch of {self.topic}-{p}")
        position = self.positions[p]
        assert position is not None
        try:
            fetched, next_position = decode_fetched(records, position)
        except CorruptRecordError as exc:
            raise ClusterError("CORRUPT_MESSAGE", f"{self.topic}-{p} at offset {position}: {exc}") from None
        taken = 0
        for record, timestamp_type in fetched:
            if limit is not None and self.count >= limit:
                self.positions[p] = record.offset
                return taken
            self.out.write(self.fmt.render(p, record, timestamp_type))
            self.count += 1
            taken += 1
        self.positions[p] = next_position
        return taken


def existing_topic(client: KafkaClient, name: str, timeout: float = STARTUP_TIMEOUT) -> TopicInfo:
    """The topic's metadata at start: an unknown topic is an error at once (nothing is auto-created);
    brokers that cannot be reached, or a topic still being created, are waited for up to `timeout`."""
    deadline = time.monotonic() + timeout
    while True:  # bounded by the deadline
        try:
            topic = client.metadata([name]).topics.get(name)
        except BrokerUnavailable as exc:
            last = f"NETWORK_EXCEPTION: {exc}"
        else:
            if topic is None or topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise ClusterError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
            if topic.error_code == 0 and topic.partitions:
                return topic
            if topic.error_code not in RETRIABLE:
                raise ClusterError(error_name(topic.error_code), f"topic {name!r}")
            last = f"{error_name(topic.error_code)} for topic {name!r}"
        if time.monotonic() >= deadline:
            raise ClusterError("REQUEST_TIMED_OUT", f"no usable metadata for topic {name!r} in {timeout:.0f} s "
                               f"(last: {last})")
        time.sleep(CLIENT_RETRY_BACKOFF)
