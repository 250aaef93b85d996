"""OffsetCommit (key 8) v0–v9: kio's generated messages from v2, v0 and v1 by hand.

Kafka 3.9's OffsetCommitRequest.json: v0 carries only the group id and the offsets, v1 adds
generation_id, member_id and a per-partition commit_timestamp, v2–v4 retention_time_ms
instead, v3+ throttle_time_ms in the response, v6+ committed_leader_epoch, v7+
group_instance_id, v8 is flexible, v9 is v8's layout with KIP-848's answers (an unknown
group committing with a generation is GROUP_ID_NOT_FOUND, not ILLEGAL_GENERATION).

kio (Kafka 4's schemas, KIP-896) has no v0 or v1. Their requests cannot ride on v2's classes
(v1's commit_timestamp has no place there), so they read into the small dataclasses below,
whose field names are kio's: a handler reads either alike, with `getattr` defaults for the
fields a version lacks. Their responses are v2's bytes (the response changed first in v3),
written from kio's v2 classes.
"""

from __future__ import annotations

from common.limits import MIN_CLASSIC_TOPIC_BYTES
from dataclasses import dataclass
from typing import Any, Final

from common.protocol import messages
from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.dispatch import Codec
from common.protocol.primitives import Chunk, Reader, Writer

DEFAULT_RETENTION_TIME_MS: Final = -1  # "the broker's offsets.retention.minutes"
DEFAULT_COMMIT_TIMESTAMP: Final = -1  # v1: "use the broker's time"
NO_GENERATION: Final = -1  # v0: no group membership, as Kafka's defaults
FIRST_GENERATED_VERSION: Final = 2
MIN_PARTITION_BYTES: Final = 14  # v0: partition, offset, null metadata


def schema_version(version: int) -> int:
    """The version whose kio classes carry `version`'s response (and request, from v2)."""
    return max(version, FIRST_GENERATED_VERSION)


@dataclass(frozen=True, slots=True)
class OldCommitPartition:
    """A partition of a v0/v1 request (kio's field names)."""

    partition_index: int
    committed_offset: int
    committed_metadata: str | None
    commit_timestamp: int = DEFAULT_COMMIT_TIMESTAMP  # v1 only


@dataclass(frozen=True, slots=True)
class OldCommitTopic:
    name: str
    partitions: tuple[OldCommitPartition, ...]


@dataclass(frozen=True, slots=True)
class OldCommitRequest:
    """A v0/v1 request (kio's field names)."""

    group_id: str
    topics: tuple[OldCommitTopic, ...]
    generation_id_or_member_epoch: int = NO_GENERATION  # v1
    member_id: str = ""  # v1


def _decode_old_request(body: memoryview, version: int) -> OldCommitRequest:
    check_version(ApiKey.OFFSET_COMMIT, version)
    r = reader_for(ApiKey.OFFSET_COMMIT, version, body)
    group_id = r.string()
    generation, member_id = (r.int32(), r.string()) if version >= 1 else (NO_GENERATION, "")

    def partition(r: Reader) -> OldCommitPartition:
        index, offset = r.int32(), r.int64()
        stamp = r.int64() if version == 1 else DEFAULT_COMMIT_TIMESTAMP
        return OldCommitPartition(index, offset, r.nullable_string(), stamp)

    def topic(r: Reader) -> OldCommitTopic:
        return OldCommitTopic(r.string(), r.array(partition, MIN_PARTITION_BYTES))

    return OldCommitRequest(group_id, r.array(topic, MIN_CLASSIC_TOPIC_BYTES), generation, member_id)


def _encode_old_request(req: OldCommitRequest, version: int) -> list[Chunk]:
    check_version(ApiKey.OFFSET_COMMIT, version)
    w = writer_for(ApiKey.OFFSET_COMMIT, version)
    w.string(req.group_id)
    if version >= 1:
        w.int32(req.generation_id_or_member_epoch)
        w.string(req.member_id)

    def partition(w: Writer, p: OldCommitPartition) -> None:
        w.int32(p.partition_index)
        w.int64(p.committed_offset)
        if version == 1:
            w.int64(p.commit_timestamp)
        w.nullable_string(p.committed_metadata)

    def topic(w: Writer, t: OldCommitTopic) -> None:
        w.string(t.name)
        w.array(t.partitions, partition)

    w.array(req.topics, topic)
    return w.chunks()


# ---- the codecs: kio from v2, v0 and v1 above ----------------------------------------------

_GENERATED: Final = messages.kio_codec(ApiKey.OFFSET_COMMIT)


def _decode_body(body: memoryview, version: int) -> Any:
    if version < FIRST_GENERATED_VERSION:
        return _decode_old_request(body, version)
    return _GENERATED.decode(body, version)


def _encode_body(response: Any, version: int) -> list[Chunk]:
    if version < FIRST_GENERATED_VERSION:
        check_version(ApiKey.OFFSET_COMMIT, version)
        return _GENERATED.encode(response, FIRST_GENERATED_VERSION)  # v2's bytes
    return _GENERATED.encode(response, version)


CODEC: Final = Codec(_decode_body, _encode_body)  # the broker's (api_table)


def encode_request(req: Any, version: int) -> list[Chunk]:
    """Client side: an OldCommitRequest at v0/v1, else kio's request of `version`."""
    if version < FIRST_GENERATED_VERSION:
        if not isinstance(req, OldCommitRequest):
            raise ValueError(f"{type(req).__name__} is not an OffsetCommit v{version} request")
        return _encode_old_request(req, version)
    return messages.encode_request(req, version)


def decode_response(body: bytes | bytearray | memoryview, version: int) -> Any:
    """Client side: kio's response of `schema_version(version)`."""
    check_version(ApiKey.OFFSET_COMMIT, version)
    return messages.decode_response(ApiKey.OFFSET_COMMIT, schema_version(version), body)
