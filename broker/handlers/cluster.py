"""DescribeCluster and ElectLeaders: the cluster as a client sees it, and operator-requested
leader elections (forwarded to the controllers, as `POST /v1/elections`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final

from broker.handlers.context import BrokerContext, ClientInfo
from broker.handlers.metadata import alive_brokers, controller_id_for_clients
from common.errors import ErrorCode
from common.protocol import acls
from common.protocol import describe_cluster as dc
from common.protocol import elect_leaders as el

log = logging.getLogger(__name__)

ALL_CLUSTER_OPERATIONS_BITS: Final = acls.operations_bitfield(acls.CLUSTER_OPERATIONS)
_ENDPOINT_NAMES: Final = {dc.ENDPOINT_TYPE_BROKER: "BROKER", dc.ENDPOINT_TYPE_CONTROLLER: "CONTROLLER"}
# Kafka's Errors messages, which its controller's ApiError carries for these codes.
_ELECTION_MESSAGES: Final[Mapping[int, str]] = {
    ErrorCode.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader was not available.",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "Eligible topic partition leaders are not available.",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
}
_ELECTIONS: Final = {el.ElectionType.PREFERRED: "preferred", el.ElectionType.UNCLEAN: "unclean"}


async def handle_describe_cluster(ctx: BrokerContext, req: dc.DescribeClusterRequest, version: int,
                                  client: ClientInfo) -> dc.DescribeClusterResponse:
    image = ctx.image()
    brokers = alive_brokers(ctx, image)
    if req.endpoint_type != dc.ENDPOINT_TYPE_BROKER:  # KIP-919: controllers answer those
        wanted = _ENDPOINT_NAMES.get(req.endpoint_type, str(req.endpoint_type))
        return dc.DescribeClusterResponse(
            int(ErrorCode.MISMATCHED_ENDPOINT_TYPE),
            f"The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type {wanted}",
            ctx.cluster_id or "", -1, ())
    operations = ALL_CLUSTER_OPERATIONS_BITS if req.include_cluster_authorized_operations \
        else dc.AUTHORIZED_OPERATIONS_OMITTED
    return dc.DescribeClusterResponse(
        0, None, ctx.cluster_id or "", controller_id_for_clients(ctx, {b.node_id for b in brokers}),
        tuple(dc.DescribeClusterBroker(b.node_id, b.host, b.port, b.rack) for b in brokers), operations)


async def handle_elect_leaders(ctx: BrokerContext, req: el.ElectLeadersRequest, version: int,
                               client: ClientInfo) -> el.ElectLeadersResponse:
    wanted = None if req.topic_partitions is None else list(dict.fromkeys(
        (t.topic, p) for t in req.topic_partitions for p in t.partitions))
    election = _ELECTIONS.get(el.ElectionType(req.election_type)) \
        if req.election_type in _ELECTIONS else None
    if election is None:
        return _failed(wanted, int(ErrorCode.INVALID_REQUEST), f"Unknown election type {req.election_type}")
    if ctx.elections is None:
        return _failed(wanted, int(ErrorCode.UNKNOWN_SERVER_ERROR), "this broker has no controller")
    if wanted == []:
        return el.ElectLeadersResponse(())
    outcome = await ctx.elections.elect(election, wanted)
    if outcome.error_code:
        log.warning("ElectLeaders (%s) from %s failed: error %d: %s", election, client.client_id,
                    outcome.error_code, outcome.error_message)
        return _failed(wanted, outcome.error_code, outcome.error_message)
    log.info("ElectLeaders (%s) from %s: %d partitions answered", election, client.client_id,
             len(outcome.results))
    by_topic: dict[str, list[el.PartitionResult]] = {}
    for (topic, partition), code in outcome.results.items():
        by_topic.setdefault(topic, []).append(el.PartitionResult(partition, code, _ELECTION_MESSAGES.get(code)))
    return el.ElectLeadersResponse(tuple(el.ReplicaElectionResult(t, tuple(ps)) for t, ps in by_topic.items()))


def _failed(wanted: list[tuple[str, int]] | None, code: int, message: str | None) -> el.ElectLeadersResponse:
    """Kafka's ElectLeadersRequest.getErrorResponse: the error at the top (v1+) and on every
    partition asked for (the only place v0 has for it)."""
    by_topic: dict[str, list[el.PartitionResult]] = {}
    for topic, partition in wanted or ():
        by_topic.setdefault(topic, []).append(el.PartitionResult(partition, code, message))
    return el.ElectLeadersResponse(
        tuple(el.ReplicaElectionResult(t, tuple(ps)) for t, ps in by_topic.items()), code)
