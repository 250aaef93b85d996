"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455): forwarded to the
controllers (`broker.partition_reassignments`), answered per partition as Kafka does."""

from __future__ import annotations

import logging

from broker.handlers.context import BrokerContext, ClientInfo
from common.errors import ErrorCode
from common.protocol import reassignments as ra

log = logging.getLogger(__name__)


def _alter_failed(req: ra.AlterPartitionReassignmentsRequest, code: int,
                  message: str | None) -> ra.AlterPartitionReassignmentsResponse:
    """Kafka's AlterPartitionReassignmentsRequest.getErrorResponse: the error at the top and on
    every partition."""
    return ra.AlterPartitionReassignmentsResponse(tuple(
        ra.ReassignableTopicResponse(t.name, tuple(ra.ReassignablePartitionResponse(p.partition_index, code, message)
                                                   for p in t.partitions)) for t in req.topics), code, message)


async def handle_alter_partition_reassignments(ctx: BrokerContext, req: ra.AlterPartitionReassignmentsRequest,
                                               version: int, client: ClientInfo,
                                               ) -> ra.AlterPartitionReassignmentsResponse:
    if ctx.reassignments is None:
        return _alter_failed(req, int(ErrorCode.UNKNOWN_SERVER_ERROR), "this broker has no controller")
    targets = [(t.name, p.partition_index, p.replicas) for t in req.topics for p in t.partitions]
    if not targets:
        return ra.AlterPartitionReassignmentsResponse(())
    outcome = await ctx.reassignments.alter(targets)
    if outcome.error_code:
        log.warning("AlterPartitionReassignments from %s failed: error %d: %s", client.client_id,
                    outcome.error_code, outcome.error_message)
        return _alter_failed(req, outcome.error_code, outcome.error_message)
    log.info("AlterPartitionReassignments from %s: %s", client.client_id, ", ".join(
        f"{t}-{p} -> {'cancel' if r is None else list(r)}" for t, p, r in targets[:20]))
    missing = (int(ErrorCode.UNKNOWN_SERVER_ERROR), "the controller did not answer for this partition")
    return ra.AlterPartitionReassignmentsResponse(tuple(
        ra.ReassignableTopicResponse(t.name, tuple(
            ra.ReassignablePartitionResponse(p.partition_index,
                                             *outcome.results.get((t.name, p.partition_index), missing))
            for p in t.partitions)) for t in req.topics))


async def handle_list_partition_reassignments(ctx: BrokerContext, req: ra.ListPartitionReassignmentsRequest,
                                              version: int, client: ClientInfo,
                                              ) -> ra.ListPartitionReassignmentsResponse:
    if ctx.reassignments is None:
        return ra.ListPartitionReassignmentsResponse((), int(ErrorCode.UNKNOWN_SERVER_ERROR),
                                                     "this broker has no controller")
    outcome = await ctx.reassignments.list()
    if outcome.error_code:
        return ra.ListPartitionReassignmentsResponse((), outcome.error_code, outcome.error_message)
    wanted = None if req.topics is None else {(t.name, p) for t in req.topics for p in t.partition_indexes}
    by_topic: dict[str, list[ra.OngoingPartitionReassignment]] = {}
    for topic, partition, replicas, adding, removing in outcome.ongoing:
        if wanted is None or (topic, partition) in wanted:
            by_topic.setdefault(topic, []).append(ra.OngoingPartitionReassignment(partition, replicas, adding,
                                                                                  removing))
    return ra.ListPartitionReassignmentsResponse(tuple(ra.OngoingTopicReassignment(t, tuple(ps))
                                                       for t, ps in by_topic.items()))
