"""One table from API key to its request decoder and response encoder.

`IMPLEMENTED_VERSIONS` are design.md's ranges for the APIs that have codecs here;
`ADVERTISED_VERSIONS` is what a server announces in ApiVersions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from common.protocol import (
    admin,
    api_versions,
    describe_configs,
    fetch,
    find_coordinator,
    group_admin,
    group_membership,
    init_producer_id,
    join_group,
    list_offsets,
    metadata,
    offset_commit,
    offset_for_leader_epoch,
    produce,
)
from common.protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from common.protocol.frame import RequestHeader
from common.protocol.primitives import Chunk, ProtocolError

Decoder = Callable[[memoryview, int], Any]
Encoder = Callable[[Any, int], list[Chunk]]

CODECS: dict[ApiKey, tuple[Decoder, Encoder]] = {
    ApiKey.API_VERSIONS: (api_versions.decode_api_versions_request,
                          api_versions.encode_api_versions_response),
    ApiKey.METADATA: (metadata.decode_metadata_request, metadata.encode_metadata_response),
    ApiKey.PRODUCE: (produce.decode_produce_request, produce.encode_produce_response),
    ApiKey.FETCH: (fetch.decode_fetch_request, fetch.encode_fetch_response),
    ApiKey.LIST_OFFSETS: (list_offsets.decode_list_offsets_request,
                          list_offsets.encode_list_offsets_response),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (
        offset_for_leader_epoch.decode_offset_for_leader_epoch_request,
        offset_for_leader_epoch.encode_offset_for_leader_epoch_response),
    ApiKey.INIT_PRODUCER_ID: (init_producer_id.decode_init_producer_id_request,
                              init_producer_id.encode_init_producer_id_response),
    ApiKey.FIND_COORDINATOR: (find_coordinator.decode_find_coordinator_request,
                              find_coordinator.encode_find_coordinator_response),
    ApiKey.CREATE_TOPICS: (admin.decode_create_topics_request,
                           admin.encode_create_topics_response),
    ApiKey.DELETE_TOPICS: (admin.decode_delete_topics_request,
                           admin.encode_delete_topics_response),
    ApiKey.CREATE_PARTITIONS: (admin.decode_create_partitions_request,
                               admin.encode_create_partitions_response),
    ApiKey.DESCRIBE_CONFIGS: (describe_configs.decode_describe_configs_request,
                              describe_configs.encode_describe_configs_response),
    # --- consumer groups (issue 12; handlers in broker/group_coordinator/handlers.py) ---
    ApiKey.JOIN_GROUP: (join_group.decode_join_group_request, join_group.encode_join_group_response),
    ApiKey.SYNC_GROUP: (join_group.decode_sync_group_request, join_group.encode_sync_group_response),
    ApiKey.HEARTBEAT: (group_membership.decode_heartbeat_request,
                       group_membership.encode_heartbeat_response),
    ApiKey.LEAVE_GROUP: (group_membership.decode_leave_group_request,
                         group_membership.encode_leave_group_response),
    ApiKey.OFFSET_COMMIT: (offset_commit.decode_offset_commit_request,
                           offset_commit.encode_offset_commit_response),
    ApiKey.OFFSET_FETCH: (offset_commit.decode_offset_fetch_request,
                          offset_commit.encode_offset_fetch_response),
    ApiKey.OFFSET_DELETE: (offset_commit.decode_offset_delete_request,
                           offset_commit.encode_offset_delete_response),
    ApiKey.DESCRIBE_GROUPS: (group_admin.decode_describe_groups_request,
                             group_admin.encode_describe_groups_response),
    ApiKey.LIST_GROUPS: (group_admin.decode_list_groups_request,
                         group_admin.encode_list_groups_response),
    ApiKey.DELETE_GROUPS: (group_admin.decode_delete_groups_request,
                           group_admin.encode_delete_groups_response),
}

IMPLEMENTED_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    key: SUPPORTED_VERSIONS[key] for key in sorted(CODECS)}

# What ApiVersions advertises. Produce is announced from v0 although v0-v2 are refused when
# sent: librdkafka before 2.10 (kcat on Debian 12 has 2.0.2) silently stops compressing
# with gzip, snappy and lz4 unless the broker's Produce range starts at 0 (librdkafka
# issue 4956); Kafka 4.0 does the same (KAFKA-18659). Every client that matters sends v3+.
ADVERTISED_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    **IMPLEMENTED_VERSIONS, ApiKey.PRODUCE: (0, IMPLEMENTED_VERSIONS[ApiKey.PRODUCE][1])}


def decode_request(header: RequestHeader, body: memoryview) -> Any:
    """The request dataclass for this header's API and version; ProtocolError otherwise.

    ApiVersions at an unsupported version is not an error: see `api_versions.answer_api_versions`.
    """
    try:
        api_key = ApiKey(header.request_api_key)
        decoder = CODECS[api_key][0]
    except (ValueError, KeyError):
        raise ProtocolError(f"unsupported API key {header.request_api_key}") from None
    return decoder(body, header.request_api_version)


def encode_response(api_key: ApiKey, response: Any, version: int) -> list[Chunk]:
    """The response body chunks (frame them with `frame.frame_response`)."""
    return CODECS[api_key][1](response, version)
