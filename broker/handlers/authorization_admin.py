"""ACL gates of the cluster and topic admin APIs (broker/handlers/authorization.py's table):
DescribeCluster, CreateTopics, DeleteTopics, InitProducerId, the config APIs per resource (a
topic's configs need DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, a broker's on the cluster, as
Kafka's ConfigAdminManager checks), ListTransactions (only the transactional ids the caller may DESCRIBE), and per topic or group
CreatePartitions, DeleteRecords, DescribeProducers, DeleteGroups and DescribeTopicPartitions;
TxnOffsetCommit, AddOffsetsToTxn and OffsetDelete in Kafka's order (transactional id, group, topics).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Final

from broker.handlers.acl_verdicts import (
    CLUSTER_DENIED,
    GROUP_DENIED,
    TOPIC_DENIED,
    TXN_DENIED,
    BrokerAuthorizer,
    Narrow,
    Op,
    Refuse,
    Res,
    Verdict,
    log_refusal,
)
from broker.handlers.context import ClientInfo
from common.protocol import acls as acl_codes
from common.protocol import messages
from common.protocol import metadata as md
from common.protocol.api_keys import ApiKey
from common.protocol.messages import build
from metadata.image import MetadataImage
from security.acl import CLUSTER_NAME, AclOperation

# ---- cluster and topic admin ----------------------------------------------------------------

def describe_cluster(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                      image: MetadataImage) -> Verdict:
    if not a.allowed(client, Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME):
        log_refusal(a, client, "DescribeCluster", "the cluster")
        m = messages.response_module(ApiKey.DESCRIBE_CLUSTER, version)
        return Refuse(build(m.DescribeClusterResponse, throttle_time=messages.NO_THROTTLE,
                            error_code=messages.error_code(CLUSTER_DENIED), error_message=None, cluster_id="",
                            controller_id=-1, brokers=(), cluster_authorized_operations=md.AUTHORIZED_OPERATIONS_OMITTED))
    if not req.include_cluster_authorized_operations:
        return None
    return Narrow(req, lambda resp: dataclasses.replace(resp, cluster_authorized_operations=a.operations(
        client, Res.CLUSTER, CLUSTER_NAME, acl_codes.CLUSTER_OPERATIONS)))


def create_topics(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                   image: MetadataImage) -> Verdict:
    if a.allowed(client, Op.CREATE, Res.CLUSTER, CLUSTER_NAME):
        return None
    denied = [t for t in req.topics if not a.allowed(client, Op.CREATE, Res.TOPIC, t.name)]
    if not denied:
        return None
    log_refusal(a, client, "CreateTopics", "topic(s) " + ", ".join(sorted({t.name for t in denied})))
    m = messages.response_module(ApiKey.CREATE_TOPICS, version)
    refused = tuple(build(m.CreatableTopicResult, name=t.name, topic_id=md.ZERO_UUID,
                          error_code=messages.error_code(TOPIC_DENIED), error_message=None,
                          topic_config_error_code=messages.error_code(0), num_partitions=-1, replication_factor=-1,
                          configs=None) for t in denied)

    def finish(resp: Any) -> Any:
        return dataclasses.replace(resp, topics=tuple(resp.topics) + refused)
    kept = tuple(t for t in req.topics if t not in denied)
    if not kept:
        return Refuse(finish(m.CreateTopicsResponse(throttle_time=messages.NO_THROTTLE, topics=())))
    return Narrow(dataclasses.replace(req, topics=kept), finish)


def delete_topics(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                   image: MetadataImage) -> Verdict:
    m = messages.response_module(ApiKey.DELETE_TOPICS, version)
    by_state = hasattr(req, "topics")  # v6+: names or ids
    if by_state:
        def name(t: Any) -> str | None:
            return t.name if t.name else a.topic_name(image, t.topic_id)
        items = list(req.topics)
    else:
        def name(t: Any) -> str | None:
            return str(t)
        items = list(req.topic_names)
    denied = [t for t in items if (n := name(t)) is not None and not a.allowed(client, Op.DELETE, Res.TOPIC, n)]
    if not denied:
        return None
    log_refusal(a, client, "DeleteTopics", "topic(s) " + ", ".join(sorted({str(name(t)) for t in denied})))
    refused = tuple(build(m.DeletableTopicResult, name=name(t), topic_id=getattr(t, "topic_id", md.ZERO_UUID),
                          error_code=messages.error_code(TOPIC_DENIED), error_message=None) for t in denied)

    def finish(resp: Any) -> Any:
        return dataclasses.replace(resp, responses=tuple(resp.responses) + refused)
    kept = tuple(t for t in items if t not in denied)
    if not kept:
        return Refuse(finish(build(m.DeleteTopicsResponse, throttle_time=messages.NO_THROTTLE, responses=())))
    return Narrow(dataclasses.replace(req, **{"topics" if by_state else "topic_names": kept}), finish)


def init_producer_id(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                      image: MetadataImage) -> Verdict:
    if req.transactional_id is not None:
        if a.allowed(client, Op.WRITE, Res.TRANSACTIONAL_ID, req.transactional_id):
            return None
        code, what = TXN_DENIED, f"transactional id {req.transactional_id}"
    else:  # idempotent: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (KIP-679)
        if a.allowed(client, Op.IDEMPOTENT_WRITE, Res.CLUSTER, CLUSTER_NAME) \
                or a.allowed_any(client, Op.WRITE, Res.TOPIC):
            return None
        code, what = CLUSTER_DENIED, "the cluster (IDEMPOTENT_WRITE) or any topic (WRITE)"
    log_refusal(a, client, "InitProducerId", what)
    m = messages.response_module(ApiKey.INIT_PRODUCER_ID, version)
    return Refuse(build(m.InitProducerIdResponse, throttle_time=messages.NO_THROTTLE,
                        error_code=messages.error_code(code), producer_id=-1, producer_epoch=-1))




# ---- configs: per resource ------------------------------------------------------------------

CONFIG_TOPIC: Final = 2  # Kafka's ConfigResource.Type codes
CONFIG_GROUP: Final = 32


def _config_check(a: BrokerAuthorizer, client: ClientInfo, operation: AclOperation, resource_type: int,
                  name: str) -> int | None:
    """None when allowed, else the error code: TOPIC, GROUP, or (brokers, loggers) CLUSTER."""
    if resource_type == CONFIG_TOPIC:
        return None if a.allowed(client, operation, Res.TOPIC, name) else TOPIC_DENIED
    if resource_type == CONFIG_GROUP:
        return None if a.allowed(client, operation, Res.GROUP, name) else GROUP_DENIED
    return None if a.allowed(client, operation, Res.CLUSTER, CLUSTER_NAME) else CLUSTER_DENIED


def describe_configs(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                     image: MetadataImage) -> Verdict:
    """Read-only: the handler answers every resource and the refused ones are blanked."""
    def finish(resp: Any) -> Any:
        results = []
        for r in resp.results:
            code = _config_check(a, client, Op.DESCRIBE_CONFIGS, r.resource_type, r.resource_name)
            if code is not None:
                log_refusal(a, client, "DescribeConfigs", f"resource type {r.resource_type} {r.resource_name}")
                r = dataclasses.replace(r, error_code=messages.error_code(code), error_message=None, configs=())
            results.append(r)
        return dataclasses.replace(resp, results=tuple(results))
    return Narrow(req, finish)


def _alter_configs(api_key: ApiKey, name: str) -> Any:
    def gate(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo, image: MetadataImage) -> Verdict:
        denied = {i: code for i, r in enumerate(req.resources)
                  if (code := _config_check(a, client, Op.ALTER_CONFIGS, r.resource_type, r.resource_name))
                  is not None}
        if not denied:
            return None
        m = messages.response_module(api_key, version)
        refused = []
        for i, code in denied.items():
            r = req.resources[i]
            log_refusal(a, client, name, f"resource type {r.resource_type} {r.resource_name}")
            refused.append(build(m.AlterConfigsResourceResponse, error_code=messages.error_code(code),
                                 error_message=None, resource_type=r.resource_type, resource_name=r.resource_name))
        response_type = getattr(m, f"{name}Response")

        def finish(resp: Any) -> Any:
            return dataclasses.replace(resp, responses=tuple(resp.responses) + tuple(refused))
        kept = tuple(r for i, r in enumerate(req.resources) if i not in denied)
        if not kept:
            return Refuse(finish(response_type(throttle_time=messages.NO_THROTTLE, responses=())))
        return Narrow(dataclasses.replace(req, resources=kept), finish)
    return gate


alter_configs = _alter_configs(ApiKey.ALTER_CONFIGS, "AlterConfigs")
incremental_alter_configs = _alter_configs(ApiKey.INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigs")


# ---- transactions: the broker form, and listing ----------------------------------------------

def list_transactions(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                      image: MetadataImage) -> Verdict:
    """Kafka lists only the transactional ids the caller may DESCRIBE."""
    return Narrow(req, lambda resp: dataclasses.replace(resp, transaction_states=tuple(
        t for t in resp.transaction_states if a.allowed(client, Op.DESCRIBE, Res.TRANSACTIONAL_ID,
                                                        t.transactional_id))))


# ---- per-item admin APIs: the refused items answered with the resource's error ---------------

def _per_item(api_key: ApiKey, api: str, operation: AclOperation, resource_type: Any, *, items: str,
              name_of: Callable[[Any], str], results: str, refused_item: Callable[[Any, Any, int], Any]) -> Any:
    """A gate that runs the handler on the items the caller may act on and answers the others
    with `refused_item(response_module, item, code)`; all refused: the handler never runs."""
    code = TOPIC_DENIED if resource_type == Res.TOPIC else GROUP_DENIED

    def gate(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo, image: MetadataImage) -> Verdict:
        requested = tuple(getattr(req, items) or ())
        denied = [i for i in requested if not a.allowed(client, operation, resource_type, name_of(i))]
        if not denied:
            return None
        log_refusal(a, client, api, f"{resource_type.name} " + ", ".join(sorted({name_of(i) for i in denied})))
        m = messages.response_module(api_key, version)
        refused = tuple(refused_item(m, i, code) for i in denied)
        response_type = getattr(m, f"{api}Response")

        def finish(resp: Any) -> Any:
            return dataclasses.replace(resp, **{results: tuple(getattr(resp, results)) + refused})
        kept = tuple(i for i in requested if i not in denied)
        if not kept:
            return Refuse(finish(build(response_type, throttle_time=messages.NO_THROTTLE, **{results: ()})))
        return Narrow(dataclasses.replace(req, **{items: kept}), finish)
    return gate


create_partitions = _per_item(
    ApiKey.CREATE_PARTITIONS, "CreatePartitions", AclOperation.ALTER, Res.TOPIC, items="topics",
    name_of=lambda t: t.name, results="results",
    refused_item=lambda m, t, code: build(m.CreatePartitionsTopicResult, name=t.name,
                                          error_code=messages.error_code(code), error_message=None))
delete_records = _per_item(
    ApiKey.DELETE_RECORDS, "DeleteRecords", AclOperation.DELETE, Res.TOPIC, items="topics",
    name_of=lambda t: t.name, results="topics",
    refused_item=lambda m, t, code: m.DeleteRecordsTopicResult(name=t.name, partitions=tuple(
        build(m.DeleteRecordsPartitionResult, partition_index=p.partition_index, low_watermark=-1,
              error_code=messages.error_code(code)) for p in t.partitions)))
describe_producers = _per_item(
    ApiKey.DESCRIBE_PRODUCERS, "DescribeProducers", AclOperation.READ, Res.TOPIC, items="topics",
    name_of=lambda t: t.name, results="topics",
    refused_item=lambda m, t, code: m.TopicResponse(name=t.name, partitions=tuple(
        m.PartitionResponse(partition_index=p, error_code=messages.error_code(code), error_message=None,
                            active_producers=()) for p in t.partition_indexes)))
delete_groups = _per_item(
    ApiKey.DELETE_GROUPS, "DeleteGroups", AclOperation.DELETE, Res.GROUP, items="groups_names",
    name_of=str, results="results",
    refused_item=lambda m, g, code: m.DeletableGroupResult(group_id=g, error_code=messages.error_code(code)))


def describe_topic_partitions(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                              image: MetadataImage) -> Verdict:
    """Read-only, as Metadata: topics the caller may not DESCRIBE are hidden when it asked for
    every topic, refused (TOPIC_AUTHORIZATION_FAILED) when it named them; authorized
    operations are the caller's."""
    named = bool(req.topics)

    def finish(resp: Any) -> Any:
        topics = []
        for t in resp.topics:
            if t.name is None or t.error_code:
                topics.append(t)
            elif not a.allowed(client, AclOperation.DESCRIBE, Res.TOPIC, t.name):
                if named:
                    log_refusal(a, client, "DescribeTopicPartitions", f"topic {t.name}")
                    topics.append(dataclasses.replace(t, error_code=messages.error_code(TOPIC_DENIED), partitions=()))
            elif t.topic_authorized_operations != md.AUTHORIZED_OPERATIONS_OMITTED:
                topics.append(dataclasses.replace(t, topic_authorized_operations=a.operations(
                    client, Res.TOPIC, t.name, acl_codes.TOPIC_OPERATIONS)))
            else:
                topics.append(t)
        return dataclasses.replace(resp, topics=tuple(topics))
    return Narrow(req, finish)


# ---- group offsets inside transactions, and their deletion --------------------------------------

def txn_offset_commit(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                      image: MetadataImage) -> Verdict:
    """Kafka's order: WRITE on the transactional id, READ on the group (each failing every
    partition), then READ on each topic (failing that topic's partitions)."""
    m = messages.response_module(ApiKey.TXN_OFFSET_COMMIT, version)

    def errors(topics: Any, code: int) -> tuple[Any, ...]:
        return tuple(m.TxnOffsetCommitResponseTopic(name=t.name, partitions=tuple(
            m.TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=messages.error_code(code))
            for p in t.partitions)) for t in topics)

    def everything(code: int) -> Refuse:
        return Refuse(m.TxnOffsetCommitResponse(throttle_time=messages.NO_THROTTLE, topics=errors(req.topics, code)))

    if not a.allowed(client, AclOperation.WRITE, Res.TRANSACTIONAL_ID, req.transactional_id):
        log_refusal(a, client, "TxnOffsetCommit", f"transactional id {req.transactional_id}")
        return everything(TXN_DENIED)
    if not a.allowed(client, AclOperation.READ, Res.GROUP, req.group_id):
        log_refusal(a, client, "TxnOffsetCommit", f"group {req.group_id}")
        return everything(GROUP_DENIED)
    denied = [t for t in req.topics if not a.allowed(client, AclOperation.READ, Res.TOPIC, t.name)]
    if not denied:
        return None
    log_refusal(a, client, "TxnOffsetCommit", "topic(s) " + ", ".join(sorted({t.name for t in denied})))
    refused = errors(denied, TOPIC_DENIED)
    return Narrow(dataclasses.replace(req, topics=tuple(t for t in req.topics if t not in denied)),
                  lambda resp: dataclasses.replace(resp, topics=tuple(resp.topics) + refused))


def add_offsets_to_txn(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                       image: MetadataImage) -> Verdict:
    """WRITE on the transactional id, then READ on the group: the one error code says which."""
    if not a.allowed(client, AclOperation.WRITE, Res.TRANSACTIONAL_ID, req.transactional_id):
        code, what = TXN_DENIED, f"transactional id {req.transactional_id}"
    elif not a.allowed(client, AclOperation.READ, Res.GROUP, req.group_id):
        code, what = GROUP_DENIED, f"group {req.group_id}"
    else:
        return None
    log_refusal(a, client, "AddOffsetsToTxn", what)
    m = messages.response_module(ApiKey.ADD_OFFSETS_TO_TXN, version)
    return Refuse(m.AddOffsetsToTxnResponse(throttle_time=messages.NO_THROTTLE, error_code=messages.error_code(code)))


def offset_delete(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo,
                  image: MetadataImage) -> Verdict:
    """DELETE on the group (GROUP_AUTHORIZATION_FAILED for the request), READ on each topic."""
    m = messages.response_module(ApiKey.OFFSET_DELETE, version)
    if not a.allowed(client, AclOperation.DELETE, Res.GROUP, req.group_id):
        log_refusal(a, client, "OffsetDelete", f"group {req.group_id}")
        return Refuse(m.OffsetDeleteResponse(error_code=messages.error_code(GROUP_DENIED),
                                             throttle_time=messages.NO_THROTTLE, topics=()))
    denied = [t for t in req.topics if not a.allowed(client, AclOperation.READ, Res.TOPIC, t.name)]
    if not denied:
        return None
    log_refusal(a, client, "OffsetDelete", "topic(s) " + ", ".join(sorted({t.name for t in denied})))
    refused = tuple(m.OffsetDeleteResponseTopic(name=t.name, partitions=tuple(
        m.OffsetDeleteResponsePartition(partition_index=p.partition_index, error_code=messages.error_code(TOPIC_DENIED))
        for p in t.partitions)) for t in denied)
    return Narrow(dataclasses.replace(req, topics=tuple(t for t in req.topics if t not in denied)),
                  lambda resp: dataclasses.replace(resp, topics=tuple(resp.topics) + refused))
