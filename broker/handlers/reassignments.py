"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455): forwarded to the
controllers (`broker.partition_reassignments`), answered per partition as Kafka does.

Both are served on kio's generated messages (v0, flexible): the handlers read the request
dataclass and answer with the response dataclass of the version sent.
"""

from __future__ import annotations

import logging
from typing import Any

from broker.handlers.context import BrokerContext, ClientInfo
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey

log = logging.getLogger(__name__)

NO_CONTROLLER = "this broker has no controller"


def _alter_failed(m: Any, req: Any, code: ErrorCode, message: str | None) -> Any:
    """Kafka's AlterPartitionReassignmentsRequest.getErrorResponse: the error at the top and on
    every partition."""
    return m.AlterPartitionReassignmentsResponse(
        throttle_time=messages.NO_THROTTLE, error_code=code, error_message=message, responses=tuple(
            m.ReassignableTopicResponse(name=t.name, partitions=tuple(
                m.ReassignablePartitionResponse(partition_index=p.partition_index, error_code=code,
                                                error_message=message)
                for p in t.partitions)) for t in req.topics))


async def handle_alter_partition_reassignments(ctx: BrokerContext, req: Any, version: int,
                                               client: ClientInfo) -> Any:
    """`req` is kio's AlterPartitionReassignmentsRequest of `version`."""
    m = messages.response_module(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version)
    if ctx.reassignments is None:
        return _alter_failed(m, req, ErrorCode.UNKNOWN_SERVER_ERROR, NO_CONTROLLER)
    targets = [(t.name, p.partition_index, p.replicas) for t in req.topics for p in t.partitions]
    if not targets:
        return m.AlterPartitionReassignmentsResponse(throttle_time=messages.NO_THROTTLE, error_code=ErrorCode.NONE,
                                                     error_message=None, responses=())
    outcome = await ctx.reassignments.alter(targets)
    if outcome.error_code:
        log.warning("AlterPartitionReassignments from %s failed: error %d: %s", client.client_id,
                    outcome.error_code, outcome.error_message)
        return _alter_failed(m, req, messages.error_code(outcome.error_code), outcome.error_message)
    log.info("AlterPartitionReassignments from %s: %s", client.client_id, ", ".join(
        f"{t}-{p} -> {'cancel' if r is None else list(r)}" for t, p, r in targets[:20]))
    missing = (int(ErrorCode.UNKNOWN_SERVER_ERROR), "the controller did not answer for this partition")

    def result(topic: str, partition: int) -> Any:
        code, message = outcome.results.get((topic, partition), missing)
        return m.ReassignablePartitionResponse(partition_index=partition, error_code=messages.error_code(code),
                                               error_message=message)
    return m.AlterPartitionReassignmentsResponse(
        throttle_time=messages.NO_THROTTLE, error_code=ErrorCode.NONE, error_message=None, responses=tuple(
            m.ReassignableTopicResponse(name=t.name, partitions=tuple(
                result(t.name, p.partition_index) for p in t.partitions)) for t in req.topics))


async def handle_list_partition_reassignments(ctx: BrokerContext, req: Any, version: int,
                                              client: ClientInfo) -> Any:
    """`req` is kio's ListPartitionReassignmentsRequest of `version`."""
    m = messages.response_module(ApiKey.LIST_PARTITION_REASSIGNMENTS, version)

    def failed(code: ErrorCode, message: str | None) -> Any:
        return m.ListPartitionReassignmentsResponse(throttle_time=messages.NO_THROTTLE, error_code=code,
                                                    error_message=message, topics=())
    if ctx.reassignments is None:
        return failed(ErrorCode.UNKNOWN_SERVER_ERROR, NO_CONTROLLER)
    outcome = await ctx.reassignments.list()
    if outcome.error_code:
        return failed(messages.error_code(outcome.error_code), outcome.error_message)
    wanted = None if req.topics is None else {(t.name, p) for t in req.topics for p in t.partition_indexes}
    by_topic: dict[str, list[Any]] = {}
    for topic, partition, replicas, adding, removing in outcome.ongoing:
        if wanted is None or (topic, partition) in wanted:
            by_topic.setdefault(topic, []).append(m.OngoingPartitionReassignment(
                partition_index=partition, replicas=tuple(replicas), adding_replicas=tuple(adding),
                removing_replicas=tuple(removing)))
    return m.ListPartitionReassignmentsResponse(
        throttle_time=messages.NO_THROTTLE, error_code=ErrorCode.NONE, error_message=None,
        topics=tuple(m.OngoingTopicReassignment(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()))
