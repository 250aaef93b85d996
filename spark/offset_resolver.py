"""The driver's view of the topics: which partitions a subscription covers and their offsets.

One AdminClient: Metadata for the partitions, ListOffsets (earliest, latest = high
watermark, or by timestamp) batched per leader. A look-up that fails is retried
`fetchOffset.numRetries` times, `fetchOffset.retryIntervalMs` apart (Spark's options), which
rides out a leader moving during a controlled shutdown.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any, Final

import confluent_kafka
from confluent_kafka.admin import OffsetSpec

from common.units import SECONDS
from spark import kafka_clients
from spark.offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartition
from spark.options import ASSIGN, OffsetBound, SourceOptions

log = logging.getLogger("tidelog.spark")

METADATA_TIMEOUT: Final = 30 * SECONDS
LIST_OFFSETS_TIMEOUT: Final = 30 * SECONDS
# Errors of a ListOffsets sent to a leader that is no longer one (librdkafka's names)
STALE_LEADER_ERRORS: Final = ("FENCED_LEADER_EPOCH", "NOT_LEADER", "UNKNOWN_LEADER_EPOCH", "LEADER_NOT_AVAILABLE")


class OffsetLookupError(RuntimeError):
    """Offsets or partitions that could not be looked up, after every retry."""


class OffsetResolver:
    """Partitions and offsets of one subscription, looked up on the driver."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._admin = kafka_clients.admin(options)
        isolation = options.kafka.get("isolation.level", "read_uncommitted").strip().lower()
        self._isolation = (confluent_kafka.IsolationLevel.READ_COMMITTED if isolation == "read_committed"
                           else confluent_kafka.IsolationLevel.READ_UNCOMMITTED)
        # Subscribed topics the last `partitions()` saw with a transient error: not listed, not gone.
        self.uncertain_topics: set[str] = set()

    def partitions(self) -> list[TopicPartition]:
        """The topic-partitions the subscription covers now (assign: exactly those listed)."""
        subscription = self._options.subscription
        if subscription.kind == ASSIGN:
            return list(subscription.partitions)
        try:
            metadata = self._admin.list_topics(timeout=METADATA_TIMEOUT)
        except confluent_kafka.KafkaException as exc:
            raise OffsetLookupError(f"cannot read the topics' metadata: {exc}") from None
        found: list[TopicPartition] = []
        self.uncertain_topics.clear()
        for name, topic in metadata.topics.items():
            if not subscription.wants_topic(name):
                continue
            if topic.error is None:
                found.extend(TopicPartition(name, number) for number in topic.partitions)
            elif topic.error.code() != confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART:
                self.uncertain_topics.add(name)  # a transient error (leader moving): not "deleted"
        return sorted(found)

    def list_offsets(self, specs: Mapping[TopicPartition, Any], *, lenient: bool = False) -> PartitionOffsets:
        """ListOffsets for each partition (OffsetSpec values), retried; lenient: skip what keeps failing."""
        pending = dict(specs)
        found: PartitionOffsets = {}
        errors: dict[TopicPartition, str] = {}
        for attempt in range(self._options.fetch_offset_num_retries + 1):  # bounded by the retry option
            if not pending:
                break
            if attempt:
                time.sleep(self._options.fetch_offset_retry_interval_ms / 1000)
                if any(stale in error for error in errors.values() for stale in STALE_LEADER_ERRORS):
                    # librdkafka's admin client keeps asking the leader (and epoch) it has cached,
                    # which answers FENCED_LEADER_EPOCH / NOT_LEADER until its metadata refreshes
                    # (minutes): a new client looks the partitions' leaders up afresh
                    log.info("offset look-up retried with fresh metadata after: %s", "; ".join(
                        f"{tp}: {error}" for tp, error in sorted(errors.items())))
                    self._admin = kafka_clients.admin(self._options)
            errors = {}
            request = {confluent_kafka.TopicPartition(tp.topic, tp.partition): spec for tp, spec in pending.items()}
            try:
                futures = self._admin.list_offsets(request, isolation_level=self._isolation,
                                                   request_timeout=LIST_OFFSETS_TIMEOUT)
            except confluent_kafka.KafkaException as exc:
                errors = {tp: str(exc) for tp in pending}
                continue
            for ctp, future in futures.items():
                tp = TopicPartition(ctp.topic, ctp.partition)
                try:
                    found[tp] = future.result(timeout=LIST_OFFSETS_TIMEOUT + 5).offset
                    pending.pop(tp, None)
                except Exception as exc:  # KafkaException, or a timeout: retried either way
                    errors[tp] = str(exc)
        if pending:
            listed = "; ".join(f"{tp}: {errors.get(tp, 'no answer')}" for tp in sorted(pending))
            if not lenient:
                raise OffsetLookupError(f"cannot look up offsets after {self._options.fetch_offset_num_retries} "
                                        f"retries: {listed}")
            log.warning("offsets not available now, left for the next trigger: %s", listed)
        return found

    def earliest(self, tps: Iterable[TopicPartition], *, lenient: bool = False) -> PartitionOffsets:
        return self.list_offsets({tp: OffsetSpec.earliest() for tp in tps}, lenient=lenient)

    def latest(self, tps: Iterable[TopicPartition], *, lenient: bool = False) -> PartitionOffsets:
        """High watermarks (the last stable offsets with kafka.isolation.level=read_committed)."""
        return self.list_offsets({tp: OffsetSpec.latest() for tp in tps}, lenient=lenient)

    def resolve(self, bound: OffsetBound, tps: list[TopicPartition], *, is_start: bool) -> PartitionOffsets:
        """Concrete offsets for `bound` over `tps`; an error names the option when they do not fit."""
        if bound.kind == "earliest":
            return self.earliest(tps)
        if bound.kind == "latest":
            return self.latest(tps)
        wanted = bound.per_partition if bound.kind != "timestamp" else dict.fromkeys(tps, bound.timestamp_ms or 0)
        if set(wanted) != set(tps):
            missing, extra = sorted(set(tps) - set(wanted)), sorted(set(wanted) - set(tps))
            raise OffsetLookupError(
                f"option '{bound.option}' must give every partition the query reads, and only those: "
                f"missing {', '.join(map(str, missing)) or 'none'}; not read or not existing "
                f"{', '.join(map(str, extra)) or 'none'}")
        if bound.kind == "offsets":
            earliest = self.earliest([tp for tp, o in wanted.items() if o == EARLIEST])
            latest = self.latest([tp for tp, o in wanted.items() if o == LATEST])
            return {tp: earliest[tp] if o == EARLIEST else latest[tp] if o == LATEST else o
                    for tp, o in wanted.items()}
        found = self.list_offsets({tp: OffsetSpec.for_timestamp(stamp) for tp, stamp in wanted.items()})
        unmatched = [tp for tp, offset in found.items() if offset < 0]
        if unmatched and is_start and not self._options.no_match_latest:
            raise OffsetLookupError(
                f"option '{bound.option}': no record at or after the timestamp in "
                f"{', '.join(map(str, sorted(unmatched)))}; set startingOffsetsByTimestampStrategy=latest "
                "to start those at the latest offset instead")
        latest = self.latest(unmatched)
        return {tp: latest[tp] if offset < 0 else offset for tp, offset in found.items()}
