"""KIP-951 on the broker: the leader a partition answer names, and how clients reach it.

Produce (v10+, on NOT_LEADER_OR_FOLLOWER) and Fetch (v16+, also on FENCED_LEADER_EPOCH) both
answer a misdirected client with the partition's current leader and epoch from this broker's
metadata image, and list the endpoints of those leaders on the listener the client used, as
Kafka's KafkaApis does for both. The one lookup lives here so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from broker.handlers.context import BrokerContext
from broker.handlers.metadata import broker_endpoint
from common.protocol.leader_discovery import LeaderIdAndEpoch, NodeEndpoint
from metadata.image import MetadataImage


@dataclass(frozen=True, slots=True)
class LeaderHint:
    """A partition's leader as the image knows it, and its endpoint: None when the leader is
    unknown (-1), unregistered or fenced, so the client learns the epoch but no address."""

    leader: LeaderIdAndEpoch
    endpoint: NodeEndpoint | None


def lookup_leader(ctx: BrokerContext, image: MetadataImage, topic: str, partition: int) -> LeaderHint | None:
    """The leader hint for `topic`/`partition`; None when the image has no such partition."""
    topic_image = image.topic(topic)
    registration = None if topic_image is None else topic_image.partitions.get(partition)
    if registration is None:
        return None
    leader = LeaderIdAndEpoch(registration.leader, registration.leader_epoch)
    return LeaderHint(leader, _endpoint(ctx, image, registration.leader))


def _endpoint(ctx: BrokerContext, image: MetadataImage, broker_id: int) -> NodeEndpoint | None:
    if broker_id < 0:
        return None
    address = broker_endpoint(ctx, image, broker_id)
    registration = image.broker(broker_id)
    if address is None or registration is None:
        return None
    return NodeEndpoint(broker_id, address[0], address[1], registration.rack)


def node_endpoints(hints: Iterable[LeaderHint]) -> tuple[NodeEndpoint, ...]:
    """The response's NodeEndpoints: each reachable leader once, by node id."""
    endpoints = {h.endpoint.node_id: h.endpoint for h in hints if h.endpoint is not None}
    return tuple(endpoints[node_id] for node_id in sorted(endpoints))
