"""ACL enforcement in dispatch: each request checked against its API's operation and resources
(common/protocol/api_table.py) before its handler runs, as Kafka's KafkaApis does.

    verdict = gate(authorizer, api_key, request, version, client)
    None            the request goes on as it is
    Refuse(resp)    answer `resp` (None: no answer, Produce acks=0); the handler never runs
    Narrow(req, f)  run the handler on `req` (the authorized part) and answer `f(response)`,
                    which adds the refused part's errors or hides what the caller may not see

The request handler calls `gate` only when an authorizer is configured (`ctx.authorizer is
not None`: one branch on the hot path otherwise). Per resource where Kafka is: a Produce to two
topics fails TOPIC_AUTHORIZATION_FAILED for the denied one only; Metadata of every topic hides
the ones the caller may not DESCRIBE, and of named ones answers TOPIC_AUTHORIZATION_FAILED for
them (and creates none it may not CREATE); "authorized operations" are the caller's.

APIs without a gate of their own are checked as a whole against their first resource (the
cluster, the group, the transactional id): every one of them has a top-level error code
(the reassignment APIs, DescribeQuorum, EndTxn, the voter APIs, ...), which a
refusal answers (tests/unit/test_acl_authorization.py holds that for every API and version);
the connection closes (`RefusedRequest`) only for an API added later without one. Either way
one INFO line names principal, API and resource. Gated APIs: Produce, Fetch, Metadata,
ListOffsets, FindCoordinator, the group APIs, OffsetCommit/Fetch, DescribeGroups, ListGroups;
in `authorization_admin`: DescribeCluster, CreateTopics, DeleteTopics, InitProducerId, the
config APIs, ListTransactions and the per-topic/per-group admin APIs; in `authorization_items`
(each refused item answered with its error): OffsetForLeaderEpoch, AddPartitionsToTxn,
DescribeTransactions, WriteTxnMarkers, the log-dir APIs, AlterUserScramCredentials,
UpdateRaftVoter, ElectLeaders, ShareGroupDescribe and Read/WriteShareGroupState; in
`authorization_share` the share-group APIs naming topics (ShareGroupHeartbeat, ShareFetch,
ShareAcknowledge, Describe/Alter/DeleteShareGroupOffsets: the group, then each topic); the ACL
APIs check themselves (broker/handlers/acls.py).
The shared pieces (the authorizer over the image, verdicts, refusal lines) are `acl_verdicts`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

from broker.handlers import authorization_admin as admin
from broker.handlers import authorization_items as items
from broker.handlers import authorization_share as share
from broker.handlers.acl_verdicts import (
    FETCH_TOPIC_IDS_VERSION,
    GROUP_DENIED,
    GROUP_OPERATIONS_VERSION,
    TOPIC_DENIED,
    TXN_DENIED,
    BrokerAuthorizer,
    Gate,
    Narrow,
    Op,
    Refuse,
    RefusedRequest,
    Res,
    Verdict,
    log_refusal,
    whole,
)
from broker.handlers.context import ApiRow, BrokerContext, ClientInfo
from broker.server import Later
from common.protocol import acls as acl_codes
from common.protocol import fetch as fetch_wire
from common.protocol import messages
from common.protocol import metadata as md
from common.protocol import produce as produce_wire
from common.protocol.api_keys import ApiKey
from common.protocol.api_table import API_SPECS
from common.protocol.messages import FIND_COORDINATOR_BATCHED_VERSION, KEY_TYPE_GROUP, build
from common.protocol.primitives import Chunk
from metadata.image import MetadataImage
from security.acl import CLUSTER_NAME, ResourceType

__all__ = ["BrokerAuthorizer", "RefusedRequest", "gate", "start_authorized"]

# ---- Produce, Fetch, ListOffsets ----------------------------------------------------------

def _produce(a: BrokerAuthorizer, req: produce_wire.ProduceRequest, version: int, client: ClientInfo,
             image: MetadataImage) -> Verdict:
    def errors(topics: Iterable[produce_wire.TopicProduceData], code: int) -> tuple[Any, ...]:
        return tuple(produce_wire.TopicProduceResponse(t.name, tuple(
            produce_wire.PartitionProduceResponse(p.index, code, -1) for p in t.partition_data)) for t in topics)

    if req.transactional_id is not None and not a.allowed(client, Op.WRITE, Res.TRANSACTIONAL_ID,
                                                          req.transactional_id):
        log_refusal(a, client, "Produce", f"transactional id {req.transactional_id}")
        return Refuse(None if req.acks == 0 else produce_wire.ProduceResponse(errors(req.topic_data, TXN_DENIED)))
    denied = [t for t in req.topic_data if not a.allowed(client, Op.WRITE, Res.TOPIC, t.name)]
    if not denied:
        return None
    log_refusal(a, client, "Produce", "topic(s) " + ", ".join(sorted({t.name for t in denied})))
    kept = tuple(t for t in req.topic_data if t not in denied)

    def finish(resp: produce_wire.ProduceResponse | None) -> produce_wire.ProduceResponse | None:
        return None if resp is None else dataclasses.replace(resp, responses=resp.responses + errors(denied,
                                                                                                      TOPIC_DENIED))
    return Narrow(dataclasses.replace(req, topic_data=kept), finish)


def _fetch(a: BrokerAuthorizer, req: fetch_wire.FetchRequest, version: int, client: ClientInfo,
           image: MetadataImage) -> Verdict:
    if req.replica_id >= 0:  # a follower: Kafka's CLUSTER_ACTION on the cluster, else every partition refused
        if a.allowed(client, Op.CLUSTER_ACTION, Res.CLUSTER, CLUSTER_NAME):
            return None
        log_refusal(a, client, "Fetch (follower)", "the cluster (CLUSTER_ACTION)")
        denied = list(req.topics)
    else:
        def name(t: fetch_wire.FetchTopic) -> str | None:
            return a.topic_name(image, t.topic_id) if version >= FETCH_TOPIC_IDS_VERSION else t.topic

        # an unknown topic id is the handler's to answer (UNKNOWN_TOPIC_ID)
        denied = [t for t in req.topics if (n := name(t)) is not None and not a.allowed(client, Op.READ, Res.TOPIC, n)]
        if not denied:
            return None
        log_refusal(a, client, "Fetch", "topic(s) " + ", ".join(sorted({str(name(t)) for t in denied})))
    refused = tuple(fetch_wire.FetchTopicResponse(t.topic, tuple(
        fetch_wire.FetchPartitionResponse(p.partition, TOPIC_DENIED, -1, None) for p in t.partitions),
        t.topic_id) for t in denied)
    return items.answer_the_rest(req, "topics", denied, "responses", refused)


def _list_offsets(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                  image: MetadataImage) -> Verdict:
    denied = [t for t in req.topics if not a.allowed(client, Op.DESCRIBE, Res.TOPIC, t.name)]
    if not denied:
        return None
    log_refusal(a, client, "ListOffsets", "topic(s) " + ", ".join(sorted({t.name for t in denied})))
    m = messages.response_module(ApiKey.LIST_OFFSETS, max(version, 1))
    refused = tuple(build(m.ListOffsetsTopicResponse, name=t.name, partitions=tuple(
        build(m.ListOffsetsPartitionResponse, partition_index=p.partition_index,
              error_code=messages.error_code(TOPIC_DENIED), timestamp=-1, offset=-1, leader_epoch=-1,
              old_style_offsets=()) for p in t.partitions)) for t in denied)
    return items.answer_the_rest(req, "topics", denied, "topics", refused)


# ---- Metadata -----------------------------------------------------------------------------

def _metadata(a: BrokerAuthorizer, req: md.MetadataRequest, version: int, client: ClientInfo,
              image: MetadataImage) -> Verdict:
    narrowed, refused = req, tuple[md.MetadataResponseTopic, ...]()
    if req.topics is not None and not req.topic_ids:
        may_create = req.allow_auto_topic_creation and a.allowed(client, Op.CREATE, Res.CLUSTER, CLUSTER_NAME)

        def ok(name: str) -> bool:
            if not a.allowed(client, Op.DESCRIBE, Res.TOPIC, name):
                return False
            return image.topic(name) is not None or not req.allow_auto_topic_creation or may_create \
                or a.allowed(client, Op.CREATE, Res.TOPIC, name)

        denied = [n for n in dict.fromkeys(req.topics) if not ok(n)]
        if denied:
            narrowed = dataclasses.replace(req, topics=tuple(n for n in req.topics if n not in denied))
            refused = tuple(md.MetadataResponseTopic(TOPIC_DENIED, n, False, ()) for n in denied)

    def finish(resp: md.MetadataResponse) -> md.MetadataResponse:
        topics = []
        for t in resp.topics:
            if t.name is None or t.error_code == TOPIC_DENIED:
                topics.append(t)
            elif not a.allowed(client, Op.DESCRIBE, Res.TOPIC, t.name):
                if req.topics is not None:  # named (or by id): refused; listing every topic: hidden
                    topics.append(md.MetadataResponseTopic(TOPIC_DENIED, t.name, t.is_internal, (),
                                                           topic_id=t.topic_id))
            elif t.topic_authorized_operations != md.AUTHORIZED_OPERATIONS_OMITTED:
                topics.append(dataclasses.replace(t, topic_authorized_operations=a.operations(
                    client, Res.TOPIC, t.name, acl_codes.TOPIC_OPERATIONS)))
            else:
                topics.append(t)
        cluster_ops = resp.cluster_authorized_operations
        if cluster_ops != md.AUTHORIZED_OPERATIONS_OMITTED:
            cluster_ops = a.operations(client, Res.CLUSTER, CLUSTER_NAME, acl_codes.CLUSTER_OPERATIONS)
        return dataclasses.replace(resp, topics=tuple(topics) + refused, cluster_authorized_operations=cluster_ops)
    return Narrow(narrowed, finish)


# ---- FindCoordinator and the group APIs ---------------------------------------------------

def _coordinator_resource(key_type: int) -> tuple[ResourceType, int]:
    return (Res.GROUP, GROUP_DENIED) if key_type == KEY_TYPE_GROUP else (Res.TRANSACTIONAL_ID, TXN_DENIED)


def _find_coordinator(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                      image: MetadataImage) -> Verdict:
    rtype, code = _coordinator_resource(req.key_type)
    m = messages.response_module(ApiKey.FIND_COORDINATOR, version)
    if version < FIND_COORDINATOR_BATCHED_VERSION:
        if a.allowed(client, Op.DESCRIBE, rtype, req.key):
            return None
        log_refusal(a, client, "FindCoordinator", f"{rtype.name} {req.key}")
        return Refuse(build(m.FindCoordinatorResponse, throttle_time=messages.NO_THROTTLE,
                            error_code=messages.error_code(code), error_message=None, node_id=-1, host="", port=-1))
    denied = [k for k in req.coordinator_keys if not a.allowed(client, Op.DESCRIBE, rtype, k)]
    if not denied:
        return None
    log_refusal(a, client, "FindCoordinator", f"{rtype.name} " + ", ".join(sorted(set(denied))))
    refused = tuple(m.Coordinator(key=k, node_id=-1, host="", port=-1, error_code=messages.error_code(code),
                                  error_message=None) for k in denied)

    def finish(resp: Any) -> Any:
        return dataclasses.replace(resp, coordinators=tuple(resp.coordinators) + refused)
    kept = tuple(k for k in req.coordinator_keys if k not in denied)
    if not kept:
        return Refuse(finish(m.FindCoordinatorResponse(throttle_time=messages.NO_THROTTLE, coordinators=())))
    return Narrow(dataclasses.replace(req, coordinator_keys=kept), finish)


def _group_member_api(api_key: ApiKey, name: str) -> Gate:
    """JoinGroup, SyncGroup, Heartbeat, LeaveGroup: READ on the group, else GROUP_AUTHORIZATION_FAILED."""
    def gate(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo, image: MetadataImage) -> Verdict:
        if a.allowed(client, Op.READ, Res.GROUP, req.group_id):
            return None
        log_refusal(a, client, name, f"group {req.group_id}")
        m = messages.response_module(api_key, version)
        cls = getattr(m, f"{name}Response")
        return Refuse(build(cls, throttle_time=messages.NO_THROTTLE, error_code=messages.error_code(GROUP_DENIED),
                            generation_id=-1, protocol_type=None, protocol_name=None if version >= 7 else "",
                            leader="", skip_assignment=False, member_id="", members=(), assignment=b""))
    return gate


def _offset_commit(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                   image: MetadataImage) -> Verdict:
    from common.protocol import offset_commit as oc  # the module whose classes carry every version

    m = messages.response_module(ApiKey.OFFSET_COMMIT, oc.schema_version(version))

    def errors(topics: Iterable[Any], code: int) -> tuple[Any, ...]:
        return tuple(m.OffsetCommitResponseTopic(name=t.name, partitions=tuple(
            m.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=messages.error_code(code))
            for p in t.partitions)) for t in topics)

    if not a.allowed(client, Op.READ, Res.GROUP, req.group_id):
        log_refusal(a, client, "OffsetCommit", f"group {req.group_id}")
        return Refuse(m.OffsetCommitResponse(throttle_time=messages.NO_THROTTLE, topics=errors(req.topics,
                                                                                              GROUP_DENIED)))
    denied = [t for t in req.topics if not a.allowed(client, Op.READ, Res.TOPIC, t.name)]
    if not denied:
        return None
    log_refusal(a, client, "OffsetCommit", "topic(s) " + ", ".join(sorted({t.name for t in denied})))

    def finish(resp: Any) -> Any:
        return dataclasses.replace(resp, topics=tuple(resp.topics) + errors(denied, TOPIC_DENIED))
    return Narrow(dataclasses.replace(req, topics=tuple(t for t in req.topics if t not in denied)), finish)


def _offset_fetch(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                  image: MetadataImage) -> Verdict:
    """DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED); committed offsets of topics the
    caller may not DESCRIBE are hidden (Kafka filters them out of the answer)."""
    batched = hasattr(req, "groups")
    groups = [g.group_id for g in req.groups] if batched else [req.group_id]
    denied = {g for g in groups if not a.allowed(client, Op.DESCRIBE, Res.GROUP, g)}
    if denied:
        log_refusal(a, client, "OffsetFetch", "group(s) " + ", ".join(sorted(denied)))
    if denied and not batched:
        m = messages.response_module(ApiKey.OFFSET_FETCH, messages.schema_version(ApiKey.OFFSET_FETCH, version))
        return Refuse(build(m.OffsetFetchResponse, throttle_time=messages.NO_THROTTLE, topics=(),
                            error_code=messages.error_code(GROUP_DENIED)))

    def visible(topics: Any) -> tuple[Any, ...]:
        return tuple(t for t in topics or () if a.allowed(client, Op.DESCRIBE, Res.TOPIC, t.name))

    def finish(resp: Any) -> Any:
        if not batched:
            return dataclasses.replace(resp, topics=visible(resp.topics))
        return dataclasses.replace(resp, groups=tuple(
            dataclasses.replace(g, topics=(), error_code=messages.error_code(GROUP_DENIED)) if g.group_id in denied
            else dataclasses.replace(g, topics=visible(g.topics)) for g in resp.groups))
    return Narrow(req, finish)


def _describe_groups(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                     image: MetadataImage) -> Verdict:
    asked_ops = version >= GROUP_OPERATIONS_VERSION and req.include_authorized_operations

    def finish(resp: Any) -> Any:
        out = []
        for g in resp.groups:
            if not a.allowed(client, Op.DESCRIBE, Res.GROUP, g.group_id):
                log_refusal(a, client, "DescribeGroups", f"group {g.group_id}")
                g = dataclasses.replace(g, error_code=messages.error_code(GROUP_DENIED), group_state="",
                                        protocol_type="", protocol_data="", members=())
            elif asked_ops:
                g = dataclasses.replace(g, authorized_operations=a.operations(
                    client, Res.GROUP, g.group_id, acl_codes.GROUP_OPERATIONS))
            out.append(g)
        return dataclasses.replace(resp, groups=tuple(out))
    return Narrow(req, finish)


def _consumer_group_heartbeat(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                              image: MetadataImage) -> Verdict:
    """KIP-848, as Kafka's KafkaApis: READ on the group, then DESCRIBE on each topic named."""
    m = messages.response_module(ApiKey.CONSUMER_GROUP_HEARTBEAT, version)

    def refuse(code: int, message: str) -> Refuse:
        return Refuse(build(m.ConsumerGroupHeartbeatResponse, throttle_time=messages.NO_THROTTLE,
                            error_code=messages.error_code(code), error_message=message, member_id=None,
                            member_epoch=-1, heartbeat_interval=messages.NO_THROTTLE, assignment=None))
    if not a.allowed(client, Op.READ, Res.GROUP, req.group_id):
        log_refusal(a, client, "ConsumerGroupHeartbeat", f"group {req.group_id}")
        return refuse(GROUP_DENIED, f"not authorized to READ group {req.group_id}")
    denied = sorted(t for t in req.subscribed_topic_names or () if not a.allowed(client, Op.DESCRIBE, Res.TOPIC, t))
    if denied:
        log_refusal(a, client, "ConsumerGroupHeartbeat", f"topics {', '.join(denied)}")
        return refuse(TOPIC_DENIED, f"not authorized to DESCRIBE topics {', '.join(denied)}")
    return None


def _consumer_group_describe(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                             image: MetadataImage) -> Verdict:
    """DESCRIBE on each group: the others answer GROUP_AUTHORIZATION_FAILED."""
    def finish(resp: Any) -> Any:
        out = []
        for g in resp.groups:
            if not a.allowed(client, Op.DESCRIBE, Res.GROUP, g.group_id):
                log_refusal(a, client, "ConsumerGroupDescribe", f"group {g.group_id}")
                g = dataclasses.replace(g, error_code=messages.error_code(GROUP_DENIED), members=())
            elif req.include_authorized_operations:
                g = dataclasses.replace(g, authorized_operations=a.operations(
                    client, Res.GROUP, g.group_id, acl_codes.GROUP_OPERATIONS))
            out.append(g)
        return dataclasses.replace(resp, groups=tuple(out))
    return Narrow(req, finish)


def _list_groups(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                 image: MetadataImage) -> Verdict:
    if a.allowed(client, Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME):
        return None
    return Narrow(req, lambda resp: dataclasses.replace(resp, groups=tuple(
        g for g in resp.groups if a.allowed(client, Op.DESCRIBE, Res.GROUP, g.group_id))))


_GATES: Final[dict[ApiKey, Gate]] = {
    ApiKey.OFFSET_FOR_LEADER_EPOCH: items.offset_for_leader_epoch,
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.LIST_OFFSETS: _list_offsets,
    ApiKey.METADATA: _metadata,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.JOIN_GROUP: _group_member_api(ApiKey.JOIN_GROUP, "JoinGroup"),
    ApiKey.SYNC_GROUP: _group_member_api(ApiKey.SYNC_GROUP, "SyncGroup"),
    ApiKey.HEARTBEAT: _group_member_api(ApiKey.HEARTBEAT, "Heartbeat"),
    ApiKey.LEAVE_GROUP: _group_member_api(ApiKey.LEAVE_GROUP, "LeaveGroup"),
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.DESCRIBE_GROUPS: _describe_groups,
    ApiKey.LIST_GROUPS: _list_groups,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _consumer_group_heartbeat,
    ApiKey.CONSUMER_GROUP_DESCRIBE: _consumer_group_describe,
    ApiKey.DESCRIBE_CLUSTER: admin.describe_cluster,
    ApiKey.CREATE_TOPICS: admin.create_topics,
    ApiKey.DELETE_TOPICS: admin.delete_topics,
    ApiKey.INIT_PRODUCER_ID: admin.init_producer_id,
    ApiKey.DESCRIBE_CONFIGS: admin.describe_configs,
    ApiKey.ALTER_CONFIGS: admin.alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: admin.incremental_alter_configs,
    ApiKey.ADD_PARTITIONS_TO_TXN: items.add_partitions_to_txn,
    ApiKey.DESCRIBE_TRANSACTIONS: items.describe_transactions,
    ApiKey.WRITE_TXN_MARKERS: items.write_txn_markers,
    ApiKey.ALTER_REPLICA_LOG_DIRS: items.alter_replica_log_dirs,
    ApiKey.DESCRIBE_LOG_DIRS: items.describe_log_dirs,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: items.alter_user_scram_credentials,
    ApiKey.UPDATE_RAFT_VOTER: items.update_raft_voter,
    ApiKey.ELECT_LEADERS: items.elect_leaders,
    ApiKey.SHARE_GROUP_DESCRIBE: items.share_group_describe,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: share.describe_share_group_offsets,
    ApiKey.SHARE_GROUP_HEARTBEAT: share.share_group_heartbeat,
    ApiKey.SHARE_FETCH: share.share_fetch,
    ApiKey.SHARE_ACKNOWLEDGE: share.share_acknowledge,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: share.alter_share_group_offsets,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: share.delete_share_group_offsets,
    ApiKey.READ_SHARE_GROUP_STATE: items.read_share_group_state,
    ApiKey.WRITE_SHARE_GROUP_STATE: items.write_share_group_state,
    ApiKey.LIST_TRANSACTIONS: admin.list_transactions,
    ApiKey.CREATE_PARTITIONS: admin.create_partitions,
    ApiKey.DELETE_RECORDS: admin.delete_records,
    ApiKey.DESCRIBE_PRODUCERS: admin.describe_producers,
    ApiKey.DELETE_GROUPS: admin.delete_groups,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: admin.describe_topic_partitions,
    ApiKey.TXN_OFFSET_COMMIT: admin.txn_offset_commit,
    ApiKey.ADD_OFFSETS_TO_TXN: admin.add_offsets_to_txn,
    ApiKey.OFFSET_DELETE: admin.offset_delete,
}
# The ACL APIs check themselves (broker/handlers/acls.py): their refusals are per creation/filter.
_SELF_CHECKED: Final = frozenset({ApiKey.DESCRIBE_ACLS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS})
for _key, _spec in API_SPECS.items():
    if _key not in _GATES and _key not in _SELF_CHECKED and _spec.acl is not None:
        _GATES[_key] = whole(_key)


def gate(a: BrokerAuthorizer, api_key: ApiKey, request: Any, version: int, client: ClientInfo,
         image: MetadataImage) -> Verdict:
    """What the authorizer makes of one request (see the module docstring)."""
    check = _GATES.get(api_key)
    return None if check is None else check(a, request, version, client, image)


async def _then(pending: Awaitable[Any], finish: Callable[[Any], Any]) -> Any:
    return finish(await pending)


def start_authorized(ctx: BrokerContext, row: ApiRow, request: Any, version: int, client: ClientInfo,
                     answer: Callable[[ApiRow, Awaitable[Any], int], Awaitable[list[Chunk] | None]]
                     ) -> list[Chunk] | None | Later[list[Chunk] | None]:
    """`RequestHandler.start` past decoding, with `ctx.authorizer` set: the gate's verdict first.
    RefusedRequest (a ProtocolError) closes the connection."""
    verdict = gate(ctx.authorizer, row.api_key, request, version, client, ctx.image())
    if isinstance(verdict, Refuse):
        return None if verdict.response is None else row.codec.encode(verdict.response, version)
    finish: Callable[[Any], Any] | None = None
    if isinstance(verdict, Narrow):
        request, finish = verdict.request, verdict.finish
    if row.now is None:
        pending = row.handler(ctx, request, version, client)
        return Later(answer(row, pending if finish is None else _then(pending, finish), version))
    response = row.now(ctx, request, version, client)
    if isinstance(response, Later):
        return Later(answer(row, response.answer if finish is None else _then(response.answer, finish), version))
    if finish is not None:
        response = finish(response)
    return None if response is None else row.codec.encode(response, version)
