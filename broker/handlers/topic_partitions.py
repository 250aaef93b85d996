"""DescribeTopicPartitions (Kafka API 75, v0; KIP-966): partitions with their ELR, from this broker's image.

Kafka's DescribeTopicPartitionsRequestHandler over its KRaftMetadataCache: the named topics, or
every topic when none is named, in name order; at most `response_partition_limit` partitions
(capped by Kafka's max.request.partition.size.limit, 2000) from the cursor on, and a next_cursor
naming where the next page starts. Each partition carries KIP-966's eligible_leader_replicas
and last_known_elr: tidelog keeps no last-known ELR (Kafka records it only once the ELR empties
while ISR is empty and min ISR is 1 at most), so that list is empty. Unknown topics answer
UNKNOWN_TOPIC_OR_PARTITION; a partition whose leader is not alive LEADER_NOT_AVAILABLE, as
Metadata does.
"""

from __future__ import annotations

from typing import Any, Final

from broker.handlers.context import BrokerContext, ClientInfo
from broker.handlers.metadata import INTERNAL_TOPICS, TOPIC_OPERATIONS_BITS
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.metadata import wire_topic_id
from metadata.image import MetadataImage, TopicImage

MAX_PARTITIONS_PER_RESPONSE: Final = 2000  # Kafka's max.request.partition.size.limit default (partitions)


async def handle_describe_topic_partitions(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's DescribeTopicPartitionsRequest of `version`."""
    m = messages.response_module(ApiKey.DESCRIBE_TOPIC_PARTITIONS, version)
    image = ctx.image()
    alive = {b for b, r in image.cluster.brokers.items() if not r.fenced}
    names = sorted({t.name for t in req.topics}) if req.topics else sorted(image.topics.by_name)
    cursor = req.cursor
    if cursor is not None:  # Kafka starts at the cursor's topic, its partition index on
        names = [n for n in names if n >= cursor.topic_name]
    budget = max(1, min(int(req.response_partition_limit), MAX_PARTITIONS_PER_RESPONSE))
    topics: list[Any] = []
    next_cursor = None
    for name in names:  # bounded by the topics named (or the image's)
        topic = image.topic(name)
        if topic is None:
            topics.append(messages.build(m.DescribeTopicPartitionsResponseTopic, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                         name=name, topic_id=None, is_internal=False, partitions=()))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        ids = [p for p in sorted(topic.partitions) if p >= first]
        if len(ids) > budget:
            next_cursor = m.Cursor(topic_name=name, partition_index=ids[budget])
            ids = ids[:budget]
        budget -= len(ids)
        topics.append(_topic(m, image, topic, ids, alive))
        if next_cursor is not None:
            break
        if budget == 0 and name != names[-1]:
            next_cursor = m.Cursor(topic_name=names[names.index(name) + 1], partition_index=0)
            break
    return messages.build(m.DescribeTopicPartitionsResponse, throttle_time=messages.NO_THROTTLE,
                          topics=tuple(topics), next_cursor=next_cursor)


def _topic(m: Any, image: MetadataImage, topic: TopicImage, ids: list[int], alive: set[int]) -> Any:
    brokers = image.cluster.brokers
    partitions = []
    for partition_id in ids:
        p = topic.partitions[partition_id]
        offline = tuple(r for r in p.replicas if r not in alive
                        or brokers[r].is_replica_offline(p.topic_id, partition_id))
        error = ErrorCode.NONE if p.has_leader and p.leader in alive else ErrorCode.LEADER_NOT_AVAILABLE
        partitions.append(messages.build(
            m.DescribeTopicPartitionsResponsePartition, error_code=error, partition_index=partition_id,
            leader_id=p.leader, leader_epoch=p.leader_epoch, replica_nodes=p.replicas, isr_nodes=p.isr,
            eligible_leader_replicas=p.elr, last_known_elr=(), offline_replicas=offline))
    return messages.build(m.DescribeTopicPartitionsResponseTopic, error_code=ErrorCode.NONE, name=topic.name,
                          topic_id=wire_topic_id(topic.topic_id), is_internal=topic.name in INTERNAL_TOPICS,
                          partitions=tuple(partitions), topic_authorized_operations=TOPIC_OPERATIONS_BITS)
