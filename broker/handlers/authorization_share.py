"""ACL gates of the share-group APIs (KIP-932) that name topics: the group first, as every group
API (`acl_verdicts.whole`: the API's operation on the group, else GROUP_AUTHORIZATION_FAILED
for the whole request), then each topic, as Kafka's KafkaApis does:

    ShareGroupHeartbeat        READ on every subscribed topic, else the whole heartbeat answers
                               TOPIC_AUTHORIZATION_FAILED (the member does not join on a subset)
    ShareFetch                 READ per topic: a refused topic's partitions answer
    ShareAcknowledge           TOPIC_AUTHORIZATION_FAILED (and no acknowledgement is applied)
    AlterShareGroupOffsets     READ per topic: its partitions TOPIC_AUTHORIZATION_FAILED
    DeleteShareGroupOffsets    READ per topic: its row TOPIC_AUTHORIZATION_FAILED
    DescribeShareGroupOffsets  DESCRIBE per group (in the group's row), then DESCRIBE per named
                               topic (its partitions TOPIC_AUTHORIZATION_FAILED); with no topics
                               named (all of them), the ones the caller may not DESCRIBE are left out

The handler runs on the authorized rest (acl_verdicts.Narrow) and never sees a refused topic;
each refusal logs one INFO line naming principal, API and topics.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from broker.handlers.acl_verdicts import (
    GROUP_DENIED,
    TOPIC_DENIED,
    BrokerAuthorizer,
    Gate,
    Narrow,
    Op,
    Refuse,
    Res,
    Verdict,
    log_refusal,
    whole,
)
from broker.handlers.authorization_items import answer_the_rest
from broker.handlers.context import ClientInfo
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.messages import build
from common.protocol.metadata import wire_topic_id
from metadata.image import MetadataImage
from security.acl import AclOperation

NO_LEADER = {"leader_id": -1, "leader_epoch": -1}  # a refused partition's current_leader, as Kafka's


def _after_group(api_key: ApiKey, topics: Gate) -> Gate:
    """The group check every group API gets (`whole`), then `topics` on what it let through."""
    group = whole(api_key)

    def gate(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo, image: MetadataImage) -> Verdict:
        return group(a, req, version, client, image) or topics(a, req, version, client, image)
    return gate


def _denied_names(a: BrokerAuthorizer, client: ClientInfo, operation: AclOperation, names: Any) -> list[str]:
    return sorted({n for n in names if not a.allowed(client, operation, Res.TOPIC, n)})


def _topic_id(image: MetadataImage, name: str) -> Any:
    topic = image.topic(name)
    return None if topic is None else wire_topic_id(topic.topic_id)


def _heartbeat_topics(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                      image: MetadataImage) -> Verdict:
    denied = _denied_names(a, client, Op.READ, req.subscribed_topic_names or ())
    if not denied:
        return None
    log_refusal(a, client, "ShareGroupHeartbeat", "topic(s) " + ", ".join(denied))
    m = messages.response_module(ApiKey.SHARE_GROUP_HEARTBEAT, version)
    return Refuse(build(m.ShareGroupHeartbeatResponse, throttle_time=messages.NO_THROTTLE,
                        error_code=messages.error_code(TOPIC_DENIED),
                        error_message=f"Not authorized to read the subscribed topic(s) {', '.join(denied)}.",
                        member_id=req.member_id, member_epoch=0, heartbeat_interval=timedelta(0), assignment=None))


def _by_topic_id(api_key: ApiKey, api: str, partition: Callable[[Any, int, bool], Any],
                 topic_row: str) -> Gate:
    """ShareFetch / ShareAcknowledge: READ per topic id (an unknown id is the handler's to answer,
    UNKNOWN_TOPIC_ID); a refused topic answers `partition(m, index, acknowledged)` per partition."""
    def gate(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo, image: MetadataImage) -> Verdict:
        names = {t.topic_id: a.topic_name(image, t.topic_id) for t in req.topics}
        denied = [t for t in req.topics if (n := names[t.topic_id]) is not None
                  and not a.allowed(client, Op.READ, Res.TOPIC, n)]
        if not denied:
            return None
        log_refusal(a, client, api, "topic(s) " + ", ".join(sorted({str(names[t.topic_id]) for t in denied})))
        m = messages.response_module(api_key, version)
        refused = tuple(getattr(m, topic_row)(topic_id=t.topic_id, partitions=tuple(
            partition(m, p.partition_index, bool(p.acknowledgement_batches)) for p in t.partitions)) for t in denied)
        return answer_the_rest(req, "topics", denied, "responses", refused)
    return gate


def _fetch_partition(m: Any, index: int, acknowledged: bool) -> Any:
    return build(m.PartitionData, partition_index=index, error_code=messages.error_code(TOPIC_DENIED),
                 acknowledge_error_code=int(TOPIC_DENIED) if acknowledged else 0,  # an i16, not the enum
                 current_leader=m.LeaderIdAndEpoch(**NO_LEADER), records=b"", acquired_records=())  # records: not nullable


def _acknowledge_partition(m: Any, index: int, acknowledged: bool) -> Any:
    return build(m.PartitionData, partition_index=index, error_code=messages.error_code(TOPIC_DENIED),
                 current_leader=m.LeaderIdAndEpoch(**NO_LEADER))


def _alter_offsets_topics(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                          image: MetadataImage) -> Verdict:
    denied = [t for t in req.topics if not a.allowed(client, Op.READ, Res.TOPIC, t.topic_name)]
    if not denied:
        return None
    log_refusal(a, client, "AlterShareGroupOffsets", "topic(s) " + ", ".join(sorted({t.topic_name for t in denied})))
    m = messages.response_module(ApiKey.ALTER_SHARE_GROUP_OFFSETS, version)
    refused = tuple(build(m.AlterShareGroupOffsetsResponseTopic, topic_name=t.topic_name,
                          topic_id=_topic_id(image, t.topic_name), partitions=tuple(
                              build(m.AlterShareGroupOffsetsResponsePartition, partition_index=p.partition_index,
                                    error_code=messages.error_code(TOPIC_DENIED), error_message=None)
                              for p in t.partitions)) for t in denied)
    return answer_the_rest(req, "topics", denied, "responses", refused, lambda: build(
        m.AlterShareGroupOffsetsResponse, throttle_time=messages.NO_THROTTLE, error_code=messages.error_code(0), error_message=None,
        responses=()))


def _delete_offsets_topics(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                           image: MetadataImage) -> Verdict:
    denied = [t for t in req.topics if not a.allowed(client, Op.READ, Res.TOPIC, t.topic_name)]
    if not denied:
        return None
    log_refusal(a, client, "DeleteShareGroupOffsets", "topic(s) " + ", ".join(sorted({t.topic_name for t in denied})))
    m = messages.response_module(ApiKey.DELETE_SHARE_GROUP_OFFSETS, version)
    refused = tuple(build(m.DeleteShareGroupOffsetsResponseTopic, topic_name=t.topic_name,
                          topic_id=_topic_id(image, t.topic_name), error_code=messages.error_code(TOPIC_DENIED),
                          error_message=None) for t in denied)
    return answer_the_rest(req, "topics", denied, "responses", refused, lambda: build(
        m.DeleteShareGroupOffsetsResponse, throttle_time=messages.NO_THROTTLE, error_code=messages.error_code(0), error_message=None,
        responses=()))


def describe_share_group_offsets(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                                 image: MetadataImage) -> Verdict:
    """DESCRIBE per group: a refused group answers GROUP_AUTHORIZATION_FAILED in its own row;
    then DESCRIBE per topic of each group the caller may describe."""
    m = messages.response_module(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, version)
    denied_groups = [g for g in req.groups if not a.allowed(client, Op.DESCRIBE, Res.GROUP, g.group_id)]
    if denied_groups:
        log_refusal(a, client, "DescribeShareGroupOffsets",
                    "group(s) " + ", ".join(sorted({g.group_id for g in denied_groups})))
    refused_topics: dict[str, tuple[Any, ...]] = {}  # group id -> its refused topics' rows
    kept = []
    for g in req.groups:
        if g in denied_groups:
            continue
        denied = [t for t in g.topics or () if not a.allowed(client, Op.DESCRIBE, Res.TOPIC, t.topic_name)]
        if denied:
            log_refusal(a, client, "DescribeShareGroupOffsets",
                        f"topic(s) {', '.join(sorted({t.topic_name for t in denied}))} of group {g.group_id}")
            refused_topics[g.group_id] = tuple(build(
                m.DescribeShareGroupOffsetsResponseTopic, topic_name=t.topic_name,
                topic_id=_topic_id(image, t.topic_name), partitions=tuple(build(
                    m.DescribeShareGroupOffsetsResponsePartition, partition_index=p, start_offset=-1,
                    leader_epoch=-1, error_code=messages.error_code(TOPIC_DENIED), error_message=None)
                    for p in t.partitions)) for t in denied)
            g = dataclasses.replace(g, topics=tuple(t for t in g.topics if t not in denied))
        kept.append(g)
    every_topic = any(g.topics is None for g in kept)
    if not denied_groups and not refused_topics and not every_topic:
        return None
    refused_groups = tuple(build(m.DescribeShareGroupOffsetsResponseGroup, group_id=g.group_id, topics=(),
                                 error_code=messages.error_code(GROUP_DENIED)) for g in denied_groups)

    def visible(row: Any) -> bool:  # a group asked for all its topics: only those the caller may DESCRIBE
        return a.allowed(client, Op.DESCRIBE, Res.TOPIC, row.topic_name)

    def finish(resp: Any) -> Any:
        groups = tuple(dataclasses.replace(g, topics=tuple(t for t in g.topics if visible(t))
                                           + refused_topics.get(g.group_id, ())) for g in resp.groups)
        return dataclasses.replace(resp, groups=groups + refused_groups)
    if not kept:
        return Refuse(finish(build(m.DescribeShareGroupOffsetsResponse, throttle_time=messages.NO_THROTTLE,
                                   groups=())))
    return Narrow(dataclasses.replace(req, groups=tuple(kept)), finish)


share_group_heartbeat = _after_group(ApiKey.SHARE_GROUP_HEARTBEAT, _heartbeat_topics)
share_fetch = _after_group(ApiKey.SHARE_FETCH, _by_topic_id(ApiKey.SHARE_FETCH, "ShareFetch", _fetch_partition,
                                                             "ShareFetchableTopicResponse"))
share_acknowledge = _after_group(ApiKey.SHARE_ACKNOWLEDGE, _by_topic_id(
    ApiKey.SHARE_ACKNOWLEDGE, "ShareAcknowledge", _acknowledge_partition, "ShareAcknowledgeTopicResponse"))
alter_share_group_offsets = _after_group(ApiKey.ALTER_SHARE_GROUP_OFFSETS, _alter_offsets_topics)
delete_share_group_offsets = _after_group(ApiKey.DELETE_SHARE_GROUP_OFFSETS, _delete_offsets_topics)
