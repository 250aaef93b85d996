"""ACL gates that answer each refused item with its error, where Kafka's KafkaApis does, for the
APIs whose response has no top-level error code (or not in every version): an answer without a
per-item error would read as a success, and closing the connection would make clients retry.

    OffsetForLeaderEpoch    CLUSTER_ACTION on the cluster, else DESCRIBE per topic (KIP-320)
    AddPartitionsToTxn      v0-v3: WRITE on the transactional id (every partition fails), then
                            WRITE per topic (denied: TOPIC_AUTHORIZATION_FAILED, unknown:
                            UNKNOWN_TOPIC_OR_PARTITION, the rest OPERATION_NOT_ATTEMPTED);
                            v4+ (brokers verifying, KIP-890): CLUSTER_ACTION, top-level error
    DescribeTransactions    DESCRIBE per transactional id; topics the caller may not DESCRIBE
                            are left out of a described transaction
    WriteTxnMarkers         CLUSTER_ACTION: every partition CLUSTER_AUTHORIZATION_FAILED
    AlterReplicaLogDirs     ALTER on the cluster: every partition CLUSTER_AUTHORIZATION_FAILED
    DescribeLogDirs         DESCRIBE on the cluster: no results (v3+ also the top-level error)
    AlterUserScramCredentials  ALTER on the cluster: every user CLUSTER_AUTHORIZATION_FAILED
    UpdateRaftVoter         CLUSTER_ACTION: the top-level error, no leader known
    ElectLeaders            ALTER on the cluster: every named partition CLUSTER_AUTHORIZATION_FAILED
                            (and v1+ the top-level error)
    ShareGroupDescribe          DESCRIBE per group, in the group's row (the share APIs that name
                                topics are in authorization_share)
    Read/WriteShareGroupState   CLUSTER_ACTION (brokers): every partition CLUSTER_AUTHORIZATION_FAILED

Each refusal logs one INFO line (acl_verdicts.log_refusal); the handler never runs on what was
refused.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Sequence
from typing import Any, Final

from broker.handlers.acl_verdicts import (
    CLUSTER_DENIED,
    GROUP_DENIED,
    TOPIC_DENIED,
    TXN_DENIED,
    BrokerAuthorizer,
    Gate,
    Narrow,
    Op,
    Refuse,
    Res,
    Verdict,
    log_refusal,
)
from broker.handlers.context import ClientInfo
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol import offset_for_leader_epoch as ofle
from common.protocol.api_keys import ApiKey
from common.protocol.messages import build
from metadata.image import MetadataImage
from security.acl import CLUSTER_NAME, AclOperation

FIRST_BATCHED_ADD_PARTITIONS_VERSION: Final = 4  # AddPartitionsToTxn v4+: brokers verifying (KIP-890)
FIRST_LOG_DIRS_ERROR_VERSION: Final = 3  # DescribeLogDirs v3+ has a top-level error code
NOT_ATTEMPTED: Final = int(ErrorCode.OPERATION_NOT_ATTEMPTED)
UNKNOWN_PARTITION: Final = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
# A refused transaction's row: the schema's defaults (zeros), as the handler's error rows
_EPOCH: Final = datetime.datetime.fromtimestamp(0, datetime.timezone.utc)


def _cluster(a: BrokerAuthorizer, client: ClientInfo, operation: AclOperation) -> bool:
    return a.allowed(client, operation, Res.CLUSTER, CLUSTER_NAME)


def cluster_gate(operation: AclOperation, api_key: ApiKey, api: str,
                 refusal: Callable[[Any, Any, int], Any]) -> Gate:
    """A gate on `operation` on the cluster: allowed, the handler runs; refused, one INFO line and
    `refusal(response_module, request, version)`, the response refusing every item of the request."""
    def gate(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo, image: MetadataImage) -> Verdict:
        if _cluster(a, client, operation):
            return None
        log_refusal(a, client, api, f"the cluster ({operation.name})")
        return Refuse(refusal(messages.response_module(api_key, version), req, version))
    return gate


def answer_the_rest(req: Any, request_field: str, denied: Sequence[Any], response_field: str,
                    refused: tuple[Any, ...], empty: Callable[[], Any] | None = None) -> Verdict:
    """The handler answers the items of `req.<request_field>` not `denied`, and `refused` (the denied
    items' error rows) follow its rows in `<response_field>`, as Kafka's handlers merge the
    unauthorized items' errors into the response. When every item is denied and `empty` makes the
    response without rows, the handler does not run at all."""
    def finish(resp: Any) -> Any:
        return dataclasses.replace(resp, **{response_field: tuple(getattr(resp, response_field)) + refused})
    kept = tuple(item for item in getattr(req, request_field) if item not in denied)
    if not kept and empty is not None:
        return Refuse(finish(empty()))
    return Narrow(dataclasses.replace(req, **{request_field: kept}), finish)


def offset_for_leader_epoch(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                            image: MetadataImage) -> Verdict:
    """Kafka's handleOffsetForLeaderEpochRequest: followers hold CLUSTER_ACTION; consumers
    checking for truncation need DESCRIBE on each topic, refused ones answer
    TOPIC_AUTHORIZATION_FAILED for their partitions."""
    if _cluster(a, client, Op.CLUSTER_ACTION):  # Kafka checks this one without logging a denial
        return None
    denied = [t for t in req.topics if not a.allowed(client, Op.DESCRIBE, Res.TOPIC, t.topic)]
    if not denied:
        return None
    log_refusal(a, client, "OffsetForLeaderEpoch", "topic(s) " + ", ".join(sorted({t.topic for t in denied})))
    m = messages.response_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, ofle.schema_version(version))
    refused = tuple(m.OffsetForLeaderTopicResult(topic=t.topic, partitions=tuple(
        m.EpochEndOffset(error_code=messages.error_code(TOPIC_DENIED), partition=p.partition,
                         leader_epoch=ofle.UNDEFINED_EPOCH, end_offset=ofle.UNDEFINED_EPOCH_OFFSET)
        for p in t.partitions)) for t in denied)
    return answer_the_rest(req, "topics", denied, "topics", refused,
                           lambda: m.OffsetForLeaderEpochResponse(throttle_time=messages.NO_THROTTLE, topics=()))


def add_partitions_to_txn(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                          image: MetadataImage) -> Verdict:
    """See the module docstring; Kafka answers a client's request whole when any topic is refused
    or unknown (nothing is added), as here."""
    m = messages.response_module(ApiKey.ADD_PARTITIONS_TO_TXN, version)
    if version >= FIRST_BATCHED_ADD_PARTITIONS_VERSION:
        if _cluster(a, client, Op.CLUSTER_ACTION):
            return None
        log_refusal(a, client, "AddPartitionsToTxn (broker)", "the cluster (CLUSTER_ACTION)")
        return Refuse(build(m.AddPartitionsToTxnResponse, throttle_time=messages.NO_THROTTLE,
                            error_code=messages.error_code(CLUSTER_DENIED), results_by_transaction=()))
    topics, transactional_id = req.v3_and_below_topics, req.v3_and_below_transactional_id

    def answer(code_of: Any) -> Refuse:
        return Refuse(build(m.AddPartitionsToTxnResponse, throttle_time=messages.NO_THROTTLE,
                            results_by_topic_v3_and_below=tuple(m.AddPartitionsToTxnTopicResult(
                                name=t.name, results_by_partition=tuple(m.AddPartitionsToTxnPartitionResult(
                                    partition_index=p, partition_error_code=messages.error_code(code_of(t.name)))
                                    for p in dict.fromkeys(t.partitions))) for t in topics)))

    if not a.allowed(client, Op.WRITE, Res.TRANSACTIONAL_ID, transactional_id):
        log_refusal(a, client, "AddPartitionsToTxn", f"transactional id {transactional_id}")
        return answer(lambda name: TXN_DENIED)
    denied = {t.name for t in topics if not a.allowed(client, Op.WRITE, Res.TOPIC, t.name)}
    if not denied:
        return None
    log_refusal(a, client, "AddPartitionsToTxn", "topic(s) " + ", ".join(sorted(denied)))
    return answer(lambda name: TOPIC_DENIED if name in denied
                  else UNKNOWN_PARTITION if image.topic(name) is None else NOT_ATTEMPTED)


def describe_transactions(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                          image: MetadataImage) -> Verdict:
    m = messages.response_module(ApiKey.DESCRIBE_TRANSACTIONS, version)
    denied = [t for t in req.transactional_ids if not a.allowed(client, Op.DESCRIBE, Res.TRANSACTIONAL_ID, t)]
    if denied:
        log_refusal(a, client, "DescribeTransactions", "transactional id(s) " + ", ".join(sorted(set(denied))))
    refused = {tid: m.TransactionState(
        error_code=messages.error_code(TXN_DENIED), transactional_id=tid, transaction_state="",
        transaction_timeout=datetime.timedelta(0), transaction_start_time=_EPOCH, producer_id=0,
        producer_epoch=0, topics=()) for tid in denied}

    def visible(state: Any) -> Any:
        return dataclasses.replace(state, topics=tuple(
            t for t in state.topics if a.allowed(client, Op.DESCRIBE, Res.TOPIC, t.topic)))

    def finish(resp: Any) -> Any:  # in request order, as Kafka answers
        described = iter(resp.transaction_states)
        return dataclasses.replace(resp, transaction_states=tuple(
            refused[tid] if tid in refused else visible(next(described)) for tid in req.transactional_ids))
    kept = tuple(t for t in req.transactional_ids if t not in refused)
    if not kept:
        return Refuse(finish(build(m.DescribeTransactionsResponse, throttle_time=messages.NO_THROTTLE,
                                   transaction_states=())))
    return Narrow(dataclasses.replace(req, transactional_ids=kept), finish)


def _refuse_markers(m: Any, req: Any, version: int) -> Any:
    return m.WriteTxnMarkersResponse(markers=tuple(m.WritableTxnMarkerResult(
        producer_id=marker.producer_id, topics=tuple(m.WritableTxnMarkerTopicResult(
            name=t.name, partitions=tuple(m.WritableTxnMarkerPartitionResult(
                partition_index=p, error_code=messages.error_code(CLUSTER_DENIED)) for p in t.partition_indexes))
            for t in marker.topics)) for marker in req.markers))


def _refuse_replica_log_dirs(m: Any, req: Any, version: int) -> Any:
    by_topic: dict[str, dict[int, None]] = {}
    for directory in req.dirs:
        for t in directory.topics:
            by_topic.setdefault(t.name, {}).update(dict.fromkeys(t.partitions))
    return build(m.AlterReplicaLogDirsResponse, throttle_time=messages.NO_THROTTLE, results=tuple(
        m.AlterReplicaLogDirTopicResult(topic_name=name, partitions=tuple(m.AlterReplicaLogDirPartitionResult(
            partition_index=p, error_code=messages.error_code(CLUSTER_DENIED)) for p in parts))
        for name, parts in by_topic.items()))


def _refuse_log_dirs(m: Any, req: Any, version: int) -> Any:
    extra = {"error_code": messages.error_code(CLUSTER_DENIED)} if version >= FIRST_LOG_DIRS_ERROR_VERSION else {}
    return build(m.DescribeLogDirsResponse, throttle_time=messages.NO_THROTTLE, results=(), **extra)


def _refuse_scram_credentials(m: Any, req: Any, version: int) -> Any:
    users = dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions])
    return m.AlterUserScramCredentialsResponse(throttle_time=messages.NO_THROTTLE, results=tuple(
        m.AlterUserScramCredentialsResult(user=user, error_code=messages.error_code(CLUSTER_DENIED),
                                          error_message=None) for user in users))


def _refuse_raft_voter(m: Any, req: Any, version: int) -> Any:
    """Its response's top-level error, with the schema's "no leader" (acl_verdicts.top_level_refusal
    cannot make up current_leader's host and port)."""
    return build(m.UpdateRaftVoterResponse, throttle_time=messages.NO_THROTTLE,
                 error_code=messages.error_code(CLUSTER_DENIED), current_leader=build(m.CurrentLeader, host="", port=0))


def _refuse_elect_leaders(m: Any, req: Any, version: int) -> Any:
    denied = messages.error_code(CLUSTER_DENIED)
    extra = {} if version == 0 else {"error_code": denied}  # v0 has no top-level error code
    return build(m.ElectLeadersResponse, throttle_time=messages.NO_THROTTLE, **extra,
                 replica_election_results=tuple(m.ReplicaElectionResult(topic=t.topic, partition_result=tuple(
                     m.PartitionResult(partition_id=p, error_code=denied, error_message=None)
                     for p in dict.fromkeys(t.partitions))) for t in req.topic_partitions or ()))


write_txn_markers = cluster_gate(Op.CLUSTER_ACTION, ApiKey.WRITE_TXN_MARKERS, "WriteTxnMarkers", _refuse_markers)
alter_replica_log_dirs = cluster_gate(Op.ALTER, ApiKey.ALTER_REPLICA_LOG_DIRS, "AlterReplicaLogDirs",
                                      _refuse_replica_log_dirs)
describe_log_dirs = cluster_gate(Op.DESCRIBE, ApiKey.DESCRIBE_LOG_DIRS, "DescribeLogDirs", _refuse_log_dirs)
alter_user_scram_credentials = cluster_gate(Op.ALTER, ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                                            "AlterUserScramCredentials", _refuse_scram_credentials)
update_raft_voter = cluster_gate(Op.CLUSTER_ACTION, ApiKey.UPDATE_RAFT_VOTER, "UpdateRaftVoter", _refuse_raft_voter)
elect_leaders = cluster_gate(Op.ALTER, ApiKey.ELECT_LEADERS, "ElectLeaders", _refuse_elect_leaders)


# ---- share groups (KIP-932): the APIs whose response has no top-level error code ------------------

def share_group_describe(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                         image: MetadataImage) -> Verdict:
    """DESCRIBE per group: a refused group answers GROUP_AUTHORIZATION_FAILED in its own row."""
    denied = [g for g in req.group_ids if not a.allowed(client, Op.DESCRIBE, Res.GROUP, g)]
    if not denied:
        return None
    log_refusal(a, client, "ShareGroupDescribe", "group(s) " + ", ".join(sorted(set(denied))))
    m = messages.response_module(ApiKey.SHARE_GROUP_DESCRIBE, version)
    refused = tuple(build(m.DescribedGroup, error_code=messages.error_code(GROUP_DENIED), group_id=g, group_state="",
                          group_epoch=0, assignment_epoch=0, assignor_name="", members=()) for g in denied)
    return answer_the_rest(req, "group_ids", denied, "groups", refused,
                           lambda: build(m.ShareGroupDescribeResponse, throttle_time=messages.NO_THROTTLE, groups=()))


def _share_state(api_key: ApiKey, api: str) -> Gate:
    """Read/WriteShareGroupState (brokers only): CLUSTER_ACTION, else every partition refused."""
    def refusal(m: Any, req: Any, version: int) -> Any:
        result_type = m.ReadStateResult if api_key == ApiKey.READ_SHARE_GROUP_STATE else m.WriteStateResult
        extra = ({"state_epoch": 0, "start_offset": -1, "state_batches": ()}
                 if api_key == ApiKey.READ_SHARE_GROUP_STATE else {})
        return build(getattr(m, f"{api}Response"), results=tuple(result_type(
            topic_id=t.topic_id, partitions=tuple(build(m.PartitionResult, partition=p.partition,
                                                        error_code=messages.error_code(CLUSTER_DENIED), **extra)
                                                  for p in t.partitions)) for t in req.topics))
    return cluster_gate(Op.CLUSTER_ACTION, api_key, api, refusal)


read_share_group_state = _share_state(ApiKey.READ_SHARE_GROUP_STATE, "ReadShareGroupState")
write_share_group_state = _share_state(ApiKey.WRITE_SHARE_GROUP_STATE, "WriteShareGroupState")
