"""commitOffsetsToGroup: a streaming query's progress, visible to Kafka's group tools.

Spark's Kafka source never commits offsets (SPARK-27549), so `kafka-consumer-groups`, lag
alerts and consoles see nothing of a Spark pipeline. With `commitOffsetsToGroup=<group>`
the stream reader commits the end offsets of each completed micro-batch to that group:
a standalone OffsetCommit (generation -1, empty member id — what Java's
`Admin.alterConsumerGroupOffsets` sends, and Kafka accepts for a group with no members),
so the pipeline never joins the group nor rebalances anyone.

The checkpoint stays the source of truth: a restarted query resumes from its checkpoint,
never from the group, and a commit that fails (coordinator moving, group in use by real
members) is a warning, retried at the next batch; it never fails the query. The group is
the pipeline's alone: a consumer that joins it makes the commits fail (Kafka answers
UNKNOWN_MEMBER_ID to a standalone commit into a group with members).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

import confluent_kafka
from confluent_kafka import ConsumerGroupTopicPartitions

from common.units import SECONDS
from spark import kafka_clients
from spark.offsets import PartitionOffsets, TopicPartition, describe_offsets
from spark.options import SourceOptions

log = logging.getLogger("tidelog.spark")

COMMIT_TIMEOUT: Final = 10 * SECONDS  # one commit, coordinator look-up included; the next batch retries
STALE_COORDINATOR_ERRORS: Final = ("NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS")


class GroupOffsetCommitter:
    """Commits offsets to one group from the driver's source process; skips a repeat."""

    def __init__(self, options: SourceOptions, group_id: str) -> None:
        self._options = options
        self.group_id = group_id
        self._admin: Any = None
        self.committed: PartitionOffsets = {}  # what the group holds from us, as far as we know

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_admin": None}  # a client does not pickle (the reader travels)

    def commit(self, offsets: Mapping[TopicPartition, int]) -> bool:
        """Commit `offsets` (the next offset to read, per partition); True when the group has them."""
        wanted = {tp: offset for tp, offset in offsets.items() if offset >= 0}
        if not wanted or wanted == self.committed:
            return True
        if self._admin is None:
            self._admin = kafka_clients.admin(self._options)
        request = [ConsumerGroupTopicPartitions(self.group_id, [
            confluent_kafka.TopicPartition(tp.topic, tp.partition, offset) for tp, offset in sorted(wanted.items())])]
        try:
            futures = self._admin.alter_consumer_group_offsets(request, request_timeout=COMMIT_TIMEOUT)
            answer = futures[self.group_id].result(timeout=COMMIT_TIMEOUT + 5)
            failed = [f"{tp.topic}-{tp.partition}: {tp.error}" for tp in answer.topic_partitions
                      if tp.error is not None]
        except Exception as exc:  # KafkaException, a timeout: the checkpoint holds progress anyway
            failed = [str(exc)]
        if any(stale in error for error in failed for stale in STALE_COORDINATOR_ERRORS):
            # librdkafka's admin client may keep sending to the coordinator it looked up before a
            # failover: the next attempt starts from a new client, which looks it up afresh
            self._admin = None
        if failed:
            log.warning("commitOffsetsToGroup: group %s did not take offsets %s (retried at the next batch): %s",
                        self.group_id, describe_offsets(wanted), "; ".join(failed))
            return False
        log.info("commitOffsetsToGroup: group %s committed %s", self.group_id, describe_offsets(wanted))
        self.committed = wanted
        return True

    def close(self) -> None:
        self._admin = None
