"""DescribeCluster and ElectLeaders: the cluster as a client sees it, and operator-requested
leader elections (forwarded to the controllers, as `POST /v1/elections`).

Both are served on kio's generated messages: the handlers read the request dataclass and
answer with the response dataclass of the version sent (`messages.build` drops what an
older version lacks: ElectLeaders' top-level error code before v1).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from broker.handlers.context import BrokerContext, ClientInfo
from broker.handlers.metadata import alive_brokers, controller_id_for_clients
from common.errors import ErrorCode
from common.protocol import acls, messages
from common.protocol.api_keys import ApiKey
from common.protocol.metadata import AUTHORIZED_OPERATIONS_OMITTED

log = logging.getLogger(__name__)

ALL_CLUSTER_OPERATIONS_BITS: Final = acls.operations_bitfield(acls.CLUSTER_OPERATIONS)
ENDPOINT_TYPE_BROKER: Final = 1  # KIP-919's EndpointType
ENDPOINT_TYPE_CONTROLLER: Final = 2
_ENDPOINT_NAMES: Final = {ENDPOINT_TYPE_BROKER: "BROKER", ENDPOINT_TYPE_CONTROLLER: "CONTROLLER"}
# Kafka's org.apache.kafka.common.ElectionType ids; v0 requests are always preferred.
ELECTION_PREFERRED: Final = 0
ELECTION_UNCLEAN: Final = 1
# Kafka's Errors messages, which its controller's ApiError carries for these codes.
_ELECTION_MESSAGES: Final[Mapping[int, str]] = {
    ErrorCode.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader was not available.",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "Eligible topic partition leaders are not available.",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
}
_ELECTIONS: Final = {ELECTION_PREFERRED: "preferred", ELECTION_UNCLEAN: "unclean"}


async def handle_describe_cluster(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's DescribeClusterRequest of `version` (v0 has no endpoint type: a broker's)."""
    m = messages.response_module(ApiKey.DESCRIBE_CLUSTER, version)
    image = ctx.image()
    brokers = alive_brokers(ctx, image)
    endpoint_type = getattr(req, "endpoint_type", ENDPOINT_TYPE_BROKER)
    if endpoint_type != ENDPOINT_TYPE_BROKER:  # KIP-919: controllers answer those
        wanted = _ENDPOINT_NAMES.get(endpoint_type, str(endpoint_type))
        return messages.build(
            m.DescribeClusterResponse, throttle_time=messages.NO_THROTTLE,
            error_code=ErrorCode.MISMATCHED_ENDPOINT_TYPE,
            error_message=f"The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type {wanted}",
            cluster_id=ctx.cluster_id or "", controller_id=-1, brokers=(),
            cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
    operations = ALL_CLUSTER_OPERATIONS_BITS if req.include_cluster_authorized_operations \
        else AUTHORIZED_OPERATIONS_OMITTED
    return messages.build(
        m.DescribeClusterResponse, throttle_time=messages.NO_THROTTLE, error_code=ErrorCode.NONE,
        error_message=None, cluster_id=ctx.cluster_id or "",
        controller_id=controller_id_for_clients(ctx, {b.node_id for b in brokers}),
        brokers=tuple(m.DescribeClusterBroker(broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
                      for b in brokers),
        cluster_authorized_operations=operations)


async def handle_elect_leaders(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's ElectLeadersRequest of `version`."""
    m = messages.response_module(ApiKey.ELECT_LEADERS, version)
    wanted = None if req.topic_partitions is None else list(dict.fromkeys(
        (t.topic, p) for t in req.topic_partitions for p in t.partitions))
    election_type = getattr(req, "election_type", ELECTION_PREFERRED)
    election = _ELECTIONS.get(election_type)
    if election is None:
        return _failed(m, wanted, ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}")
    if ctx.elections is None:
        return _failed(m, wanted, ErrorCode.UNKNOWN_SERVER_ERROR, "this broker has no controller")
    if wanted == []:
        return messages.build(m.ElectLeadersResponse, throttle_time=messages.NO_THROTTLE,
                              error_code=ErrorCode.NONE, replica_election_results=())
    outcome = await ctx.elections.elect(election, wanted)
    if outcome.error_code:
        log.warning("ElectLeaders (%s) from %s failed: error %d: %s", election, client.client_id,
                    outcome.error_code, outcome.error_message)
        return _failed(m, wanted, messages.error_code(outcome.error_code), outcome.error_message)
    log.info("ElectLeaders (%s) from %s: %d partitions answered", election, client.client_id,
             len(outcome.results))
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), code in outcome.results.items():
        by_topic.setdefault(topic, []).append(m.PartitionResult(
            partition_id=partition, error_code=messages.error_code(code), error_message=_ELECTION_MESSAGES.get(code)))
    return messages.build(m.ElectLeadersResponse, throttle_time=messages.NO_THROTTLE, error_code=ErrorCode.NONE,
                          replica_election_results=tuple(
                              m.ReplicaElectionResult(topic=t, partition_result=tuple(ps)) for t, ps in by_topic.items()))


def _failed(m: Any, wanted: list[tuple[str, int]] | None, code: ErrorCode, message: str | None) -> Any:
    """Kafka's ElectLeadersRequest.getErrorResponse: the error at the top (v1+) and on every
    partition asked for (the only place v0 has for it)."""
    by_topic: dict[str, list[Any]] = {}
    for topic, partition in wanted or ():
        by_topic.setdefault(topic, []).append(m.PartitionResult(partition_id=partition, error_code=code,
                                                                error_message=message))
    return messages.build(m.ElectLeadersResponse, throttle_time=messages.NO_THROTTLE, error_code=code,
                          replica_election_results=tuple(
                              m.ReplicaElectionResult(topic=t, partition_result=tuple(ps)) for t, ps in by_topic.items()))
