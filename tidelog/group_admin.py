"""Consumer-group administration over the Kafka protocol, as Kafka's AdminClient does it.

    with KafkaClient(bootstrap) as client:
        admin = GroupAdmin(client)
        admin.list_groups()                       # ListGroups on every broker
        admin.describe("app")                     # state, members, offsets, log end offsets, lag
        admin.reset_offsets("app", "demo", plan)  # OffsetCommit with generation -1 (empty group only)

The coordinator comes from FindCoordinator (retried while COORDINATOR_NOT_AVAILABLE or
COORDINATOR_LOAD_IN_PROGRESS, bounded); errors are ClusterError with Kafka's names.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from common.errors import ErrorCode
from common.limits import CLIENT_RETRY_BACKOFF
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.primitives import Chunk
from common.units import SECONDS
from groups.offset_reset import assigned_partitions
from tidelog.cli_common import ClusterError
from common.kafka_client import LATEST_TIMESTAMP, KafkaClient, error_name

RETRY_FOR: Final = 10 * SECONDS
FIND_COORDINATOR_VERSION: Final = 2  # key and key type, before KIP-699's batching
_RETRY: Final = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                           ErrorCode.NOT_COORDINATOR})

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    current_offset: int | None  # None: nothing committed
    log_end_offset: int | None
    member: Any | None  # kio's DescribeGroups v4 DescribedGroupMember

    @property
    def lag(self) -> int | None:
        if self.current_offset is None or self.log_end_offset is None:
            return None
        return max(self.log_end_offset - self.current_offset, 0)


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    coordinator: int
    members: tuple[Any, ...]  # kio's DescribeGroups v4 DescribedGroupMember
    partitions: tuple[PartitionLag, ...]


class GroupAdmin:
    def __init__(self, client: KafkaClient) -> None:
        self.client = client

    def coordinator(self, group_id: str) -> int:
        deadline = time.monotonic() + RETRY_FOR
        while True:  # bounded by RETRY_FOR
            request = messages.request_module(ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION).FindCoordinatorRequest(
                key=group_id, key_type=messages.KEY_TYPE_GROUP)
            response = self.client.call(None, ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION, request,
                                        messages.encode_request, messages.response_decoder(ApiKey.FIND_COORDINATOR))
            if response.error_code == 0:
                self.client.brokers.setdefault(response.node_id, (response.host, response.port))
                return int(response.node_id)
            if response.error_code not in _RETRY or time.monotonic() > deadline:
                raise ClusterError(error_name(response.error_code), response.error_message or "no coordinator")
            time.sleep(CLIENT_RETRY_BACKOFF)

    def _at_coordinator(self, group_id: str, api: ApiKey, version: int, request: object,
                        encode: Callable[[Any, int], list[Chunk]], decode: Callable[[memoryview, int], R],
                        error_of: Callable[[R], int]) -> R:
        deadline = time.monotonic() + RETRY_FOR
        while True:  # bounded by RETRY_FOR
            response: R = self.client.call(self.coordinator(group_id), api, version, request, encode, decode)
            code = error_of(response)
            if code not in _RETRY or time.monotonic() > deadline:
                return response
            time.sleep(CLIENT_RETRY_BACKOFF)

    def list_groups(self) -> list[Any]:
        """kio's ListGroups v2 ListedGroup (group_id, protocol_type) of every broker's groups."""
        self.client.metadata([])
        groups: dict[str, Any] = {}
        request = messages.request_module(ApiKey.LIST_GROUPS, 2).ListGroupsRequest()
        for broker_id in sorted(self.client.brokers):
            response = self.client.call(broker_id, ApiKey.LIST_GROUPS, 2, request, messages.encode_request,
                                        messages.response_decoder(ApiKey.LIST_GROUPS))
            if response.error_code:
                raise ClusterError(error_name(response.error_code), f"broker {broker_id} could not list its groups")
            for g in response.groups:
                groups[g.group_id] = g
        return [groups[k] for k in sorted(groups)]

    def committed(self, group_id: str) -> dict[tuple[str, int], int]:
        request = messages.request_module(ApiKey.OFFSET_FETCH, 5).OffsetFetchRequest(group_id=group_id, topics=None)
        response = self._at_coordinator(group_id, ApiKey.OFFSET_FETCH, 5, request, messages.encode_request,
                                        messages.response_decoder(ApiKey.OFFSET_FETCH), lambda r: r.error_code)
        if response.error_code:
            raise ClusterError(error_name(response.error_code), f"cannot fetch the offsets of {group_id}")
        return {(t.name, p.partition_index): p.committed_offset for t in response.topics
                for p in t.partitions if p.committed_offset >= 0}

    def describe(self, group_id: str) -> GroupDescription:
        coordinator = self.coordinator(group_id)
        request = messages.request_module(ApiKey.DESCRIBE_GROUPS, 4).DescribeGroupsRequest(
            groups=(group_id,), include_authorized_operations=False)
        response = self._at_coordinator(group_id, ApiKey.DESCRIBE_GROUPS, 4, request, messages.encode_request,
                                        messages.response_decoder(ApiKey.DESCRIBE_GROUPS),
                                        lambda r: r.groups[0].error_code)
        group = response.groups[0]
        if group.error_code:
            raise ClusterError(error_name(group.error_code), f"cannot describe {group_id}")
        owners = {tp: m for m in group.members for tp in assigned_partitions(m.member_assignment)}
        committed = self.committed(group_id)
        keys = sorted(set(committed) | set(owners))
        ends = self.log_end_offsets(sorted({t for t, _ in keys}))
        lags = tuple(PartitionLag(t, p, committed.get((t, p)), ends.get((t, p)), owners.get((t, p))) for t, p in keys)
        return GroupDescription(group_id, group.group_state, group.protocol_type, group.protocol_data,
                                coordinator, group.members, lags)

    def log_end_offsets(self, topics: list[str], timestamp: int = LATEST_TIMESTAMP) -> dict[tuple[str, int], int]:
        if not topics:
            return {}
        info = self.client.metadata(topics)
        out: dict[tuple[str, int], int] = {}
        for name in topics:
            topic = info.topics.get(name)
            if topic is None:
                continue
            by_leader: dict[int, dict[int, int]] = {}
            for p, part in topic.partitions.items():
                by_leader.setdefault(part.leader, {})[p] = timestamp
            for leader, asked in by_leader.items():
                if leader < 0:
                    continue
                for p, r in self.client.list_offsets(leader, name, asked).items():
                    if r.error_code == 0 and r.offset >= 0:
                        out[(name, p)] = r.offset
        return out

    def delete(self, group_id: str) -> None:
        request = messages.request_module(ApiKey.DELETE_GROUPS, 1).DeleteGroupsRequest(groups_names=(group_id,))
        response = self._at_coordinator(group_id, ApiKey.DELETE_GROUPS, 1, request, messages.encode_request,
                                        messages.response_decoder(ApiKey.DELETE_GROUPS),
                                        lambda r: r.results[0].error_code)
        code = response.results[0].error_code
        if code:
            raise ClusterError(error_name(code), f"cannot delete group {group_id}")

    def commit(self, group_id: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """A standalone commit (generation -1, no member): Kafka accepts it for an empty group."""
        m = messages.request_module(ApiKey.OFFSET_COMMIT, 7)
        topics: dict[str, list[Any]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            topics.setdefault(topic, []).append(m.OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""))
        request = m.OffsetCommitRequest(group_id=group_id, generation_id_or_member_epoch=-1, member_id="",
                                        group_instance_id=None, topics=tuple(
                                            m.OffsetCommitRequestTopic(name=t, partitions=tuple(ps))
                                            for t, ps in topics.items()))
        response = self._at_coordinator(group_id, ApiKey.OFFSET_COMMIT, 7, request, messages.encode_request,
                                        messages.response_decoder(ApiKey.OFFSET_COMMIT),
                                        lambda r: max((p.error_code for t in r.topics for p in t.partitions), default=0))
        for t in response.topics:
            for p in t.partitions:
                if p.error_code:
                    raise ClusterError(error_name(p.error_code), f"cannot commit {t.name}-{p.partition_index}")
