"""DescribeQuorum (Kafka API 55) through a broker: asked of the active controller, as Kafka's
brokers forward it to theirs (issue 28).

tidelog's controllers speak HTTP, not the Kafka protocol, so the broker asks the active one
with the `describe-quorum` RPC (`quorum/quorum_routes.py`, which `GET /v1/quorum` shares) and
answers on kio's messages of the version sent. As Kafka's KafkaRaftClient, a request for any
partition but `__cluster_metadata`-0 gets UNKNOWN_TOPIC_OR_PARTITION on each partition it
named; a broker that cannot reach an active controller answers NOT_CONTROLLER at the top
(retriable for Kafka's admin client).
"""

from __future__ import annotations

import base64
import logging
import uuid
from typing import Any, Final

from broker.controller_client import ControllerUnavailableError
from broker.handlers.context import BrokerContext, ClientInfo
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from metadata.quorum_description import METADATA_PARTITION, METADATA_TOPIC, QuorumDescription, ReplicaState

log = logging.getLogger(__name__)

RPC_NAME: Final = "describe-quorum"
NO_DIRECTORY_ID: Final = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: a broker's, or a static voter's (KIP-853)
UNKNOWN_LEADER: Final = -1


async def handle_describe_quorum(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's DescribeQuorumRequest of `version`."""
    m = messages.response_module(ApiKey.DESCRIBE_QUORUM, version)
    asked = [(t.topic_name, p.partition_index) for t in req.topics for p in t.partitions]
    if asked != [(METADATA_TOPIC, METADATA_PARTITION)]:
        return _unknown_partitions(m, req)
    if ctx.controller_client is None:
        return _top_error(m, ErrorCode.UNKNOWN_SERVER_ERROR, "this broker has no controller")
    try:
        reply = await ctx.controller_client.call(RPC_NAME, {})
        if reply.get("error_code"):
            return _top_error(m, messages.error_code(reply["error_code"]), reply.get("error_message"))
        quorum = QuorumDescription.from_map(reply)
    except (ControllerUnavailableError, ValueError) as exc:
        log.warning("DescribeQuorum from %s: no answer from the controllers: %s", client.client_id, exc)
        return _top_error(m, ErrorCode.NOT_CONTROLLER, f"no active controller answered: {exc}")

    def replica(r: ReplicaState) -> Any:
        return messages.build(m.ReplicaState, replica_id=r.replica_id, replica_directory_id=_directory(r.directory_id),
                              log_end_offset=r.log_end_offset, last_fetch_timestamp=r.last_fetch_timestamp,
                              last_caught_up_timestamp=r.last_caught_up_timestamp)

    partition = messages.build(
        m.PartitionData, partition_index=METADATA_PARTITION, error_code=ErrorCode.NONE, error_message=None,
        leader_id=quorum.leader_id, leader_epoch=quorum.leader_epoch, high_watermark=quorum.high_watermark,
        current_voters=tuple(replica(r) for r in quorum.voters),
        observers=tuple(replica(r) for r in quorum.observers))
    return messages.build(m.DescribeQuorumResponse, error_code=ErrorCode.NONE, error_message=None,
                          topics=(m.TopicData(topic_name=METADATA_TOPIC, partitions=(partition,)),), nodes=())


def _directory(directory_id: str | None) -> uuid.UUID:
    """Kafka's Uuid from its base64 form (as the controller answers it); zero when unknown."""
    try:
        raw = base64.urlsafe_b64decode((directory_id or "") + "==")
    except ValueError:
        return NO_DIRECTORY_ID
    return uuid.UUID(bytes=raw) if len(raw) == 16 else NO_DIRECTORY_ID


def _top_error(m: Any, code: ErrorCode, message: str | None) -> Any:
    return messages.build(m.DescribeQuorumResponse, error_code=code, error_message=message, topics=(), nodes=())


def _unknown_partitions(m: Any, req: Any) -> Any:
    """Kafka's DescribeQuorumRequest.getPartitionLevelErrorResponse."""
    topics = tuple(m.TopicData(topic_name=t.topic_name, partitions=tuple(
        messages.build(m.PartitionData, partition_index=p.partition_index,
                       error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=None,
                       leader_id=UNKNOWN_LEADER, leader_epoch=-1, high_watermark=-1, current_voters=(),
                       observers=()) for p in t.partitions)) for t in req.topics)
    return messages.build(m.DescribeQuorumResponse, error_code=ErrorCode.NONE, error_message=None,
                          topics=topics, nodes=())
