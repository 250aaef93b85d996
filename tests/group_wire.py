"""The group APIs' requests as a client sends them, for tests: kio's messages of one version
(OffsetCommit v0/v1: common/protocol/offset_commit.py's), built from plain values, and the
(encode, decode) pair `tests.unit.test_request_handler.call` and `KafkaClient.call` take."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from common.protocol import messages
from common.protocol import offset_commit as oc
from common.protocol.api_keys import ApiKey

K = ApiKey
Protocols = Sequence[tuple[str, bytes]]  # (name, metadata)


def _rq(key: int, version: int, entity: str, /, **fields: Any) -> Any:
    return messages.build(getattr(messages.request_module(key, version), entity), **fields)


def codec(api: ApiKey) -> tuple[Callable[[Any, int], list[Any]], Callable[[memoryview, int], Any]]:
    """(encode_request, decode_response) for a group API, any version."""
    if api is K.OFFSET_COMMIT:
        return oc.encode_request, oc.decode_response
    return messages.encode_request, messages.response_decoder(api)


def join(version: int, group: str, session_ms: int, rebalance_ms: int, member_id: str, instance: str | None,
         protocol_type: str, protocols: Protocols, reason: str | None = None) -> Any:
    return _rq(K.JOIN_GROUP, version, "JoinGroupRequest", group_id=group, session_timeout=timedelta(milliseconds=session_ms),
               rebalance_timeout=timedelta(milliseconds=rebalance_ms), member_id=member_id,
               group_instance_id=instance, protocol_type=protocol_type, reason=reason, protocols=tuple(
                   _rq(K.JOIN_GROUP, version, "JoinGroupRequestProtocol", name=n, metadata=m) for n, m in protocols))


def sync(version: int, group: str, generation: int, member_id: str, instance: str | None,
         assignments: Sequence[tuple[str, bytes]] = (), protocol_type: str | None = None,
         protocol_name: str | None = None) -> Any:
    return _rq(K.SYNC_GROUP, version, "SyncGroupRequest", group_id=group, generation_id=generation,
               member_id=member_id, group_instance_id=instance, protocol_type=protocol_type,
               protocol_name=protocol_name, assignments=tuple(
                   _rq(K.SYNC_GROUP, version, "SyncGroupRequestAssignment", member_id=m, assignment=a)
                   for m, a in assignments))


def heartbeat(version: int, group: str, generation: int, member_id: str, instance: str | None = None) -> Any:
    return _rq(K.HEARTBEAT, version, "HeartbeatRequest", group_id=group, generation_id=generation,
               member_id=member_id, group_instance_id=instance)


def leave(version: int, group: str, *members: tuple[str, str | None, str | None]) -> Any:
    """(member_id, group_instance_id, reason) per member; v0-v2 carry the first member's id."""
    if version < 3:
        return _rq(K.LEAVE_GROUP, version, "LeaveGroupRequest", group_id=group, member_id=members[0][0])
    return _rq(K.LEAVE_GROUP, version, "LeaveGroupRequest", group_id=group, members=tuple(
        _rq(K.LEAVE_GROUP, version, "MemberIdentity", member_id=m, group_instance_id=i, reason=r)
        for m, i, r in members))


def commit(version: int, group: str, generation: int, member_id: str,
           parts: Sequence[tuple[str, int, int, int, str | None]], instance: str | None = None,
           retention_ms: int = oc.DEFAULT_RETENTION_TIME_MS) -> Any:
    """(topic, partition, offset, leader_epoch, metadata) per partition."""
    topics: dict[str, list[tuple[int, int, int, str | None]]] = {}
    for topic, partition, offset, epoch, metadata in parts:
        topics.setdefault(topic, []).append((partition, offset, epoch, metadata))
    if version < oc.FIRST_GENERATED_VERSION:
        return oc.OldCommitRequest(group, tuple(oc.OldCommitTopic(t, tuple(
            oc.OldCommitPartition(p, o, m) for p, o, _, m in ps)) for t, ps in topics.items()), generation, member_id)
    return _rq(K.OFFSET_COMMIT, version, "OffsetCommitRequest", group_id=group,
               generation_id_or_member_epoch=generation, member_id=member_id, group_instance_id=instance,
               retention_time=timedelta(milliseconds=retention_ms), topics=tuple(
                   _rq(K.OFFSET_COMMIT, version, "OffsetCommitRequestTopic", name=t, partitions=tuple(
                       _rq(K.OFFSET_COMMIT, version, "OffsetCommitRequestPartition", partition_index=p,
                           committed_offset=o, committed_leader_epoch=e, committed_metadata=m) for p, o, e, m in ps))
                   for t, ps in topics.items()))


def fetch(version: int, group: str, topics: Sequence[tuple[str, Sequence[int]]] | None,
          require_stable: bool = False) -> Any:
    """One group's offsets (v0-v7; from v8 as the request's only group)."""
    if version >= 8:
        return fetch_groups(version, require_stable, (group, topics, None, -1))
    return _rq(K.OFFSET_FETCH, version, "OffsetFetchRequest", group_id=group, require_stable=require_stable,
               topics=None if topics is None else tuple(
                   _rq(K.OFFSET_FETCH, version, "OffsetFetchRequestTopic", name=t, partition_indexes=tuple(ps))
                   for t, ps in topics))


def fetch_groups(version: int, require_stable: bool,
                 *groups: tuple[str, Sequence[tuple[str, Sequence[int]]] | None, str | None, int]) -> Any:
    """v8+: (group_id, topics or None, member_id, member_epoch) per group."""
    return _rq(K.OFFSET_FETCH, version, "OffsetFetchRequest", require_stable=require_stable, groups=tuple(
        _rq(K.OFFSET_FETCH, version, "OffsetFetchRequestGroup", group_id=g, member_id=member, member_epoch=epoch,
            topics=None if topics is None else tuple(
                _rq(K.OFFSET_FETCH, version, "OffsetFetchRequestTopics", name=t, partition_indexes=tuple(ps))
                for t, ps in topics))
        for g, topics, member, epoch in groups))


def offset_delete(version: int, group: str, topics: Sequence[tuple[str, Sequence[int]]]) -> Any:
    return _rq(K.OFFSET_DELETE, version, "OffsetDeleteRequest", group_id=group, topics=tuple(
        _rq(K.OFFSET_DELETE, version, "OffsetDeleteRequestTopic", name=t, partitions=tuple(
            _rq(K.OFFSET_DELETE, version, "OffsetDeleteRequestPartition", partition_index=p) for p in ps))
        for t, ps in topics))


def describe(version: int, groups: Sequence[str], include_authorized_operations: bool = False) -> Any:
    return _rq(K.DESCRIBE_GROUPS, version, "DescribeGroupsRequest", groups=tuple(groups),
               include_authorized_operations=include_authorized_operations)


def list_groups(version: int, states: Sequence[str] = (), types: Sequence[str] = ()) -> Any:
    return _rq(K.LIST_GROUPS, version, "ListGroupsRequest", states_filter=tuple(states), types_filter=tuple(types))


def delete(version: int, groups: Sequence[str]) -> Any:
    return _rq(K.DELETE_GROUPS, version, "DeleteGroupsRequest", groups_names=tuple(groups))
