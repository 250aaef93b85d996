"""Tagged fields we send or read (KIP-482), for the structs whose tags carry data: Produce
v10's and Fetch v12+'s KIP-951 CurrentLeader and NodeEndpoints, Fetch's ClusterId,
ReplicaState, ReplicaDirectoryId, DivergingEpoch and SnapshotId, CreateTopics v5's
TopicConfigErrorCode. The one helper API for tags: structs without data tags use
`Reader.tagged_fields` / `Writer.tagged_fields`.

A tagged field is written only when it differs from its default, as Kafka's generated
code does, so a response without them is byte-identical to one from a codec that knows no
tags. Reading keeps the tags asked for and skips the rest with the same bounds as
`Reader.skip_tagged_fields`.

    write_tagged_fields(w, {0: encode_tagged(lambda t: write_leader(t, leader))})  # None: omitted
    tags = read_tagged_fields(r, wanted={0})                       # {tag: Reader over its bytes}
    leader = decode_tagged(tags, 0, read_leader, UNKNOWN_LEADER)
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import TypeVar

from common.protocol.primitives import ProtocolError, Reader, Writer

T = TypeVar("T")


def write_tagged_fields(w: Writer, fields: Mapping[int, bytes | None]) -> None:
    """A struct's tagged-field section holding the given (already encoded) fields, in tag
    order; None means "at its default": not written. Classic writers write nothing."""
    if not w.flexible:
        return
    present = sorted((tag, data) for tag, data in fields.items() if data is not None)
    w.uvarint(len(present))
    for tag, data in present:
        w.uvarint(tag)
        w.uvarint(len(data))
        w.raw(data)


def encode_tagged(encode: Callable[[Writer], None]) -> bytes:
    """One tagged field's value: a flexible (compact) encoding of whatever `encode` writes."""
    w = Writer(flexible=True)
    encode(w)
    return w.to_bytes()


def read_tagged_fields(r: Reader, wanted: Collection[int]) -> dict[int, Reader]:
    """The tagged-field section of a struct: a Reader over each wanted tag's bytes (flexible),
    the others skipped. Classic readers read nothing."""
    if not r.flexible:
        return {}
    found: dict[int, Reader] = {}
    for tag, data in r.tagged_field_items():
        if tag in wanted:
            found[tag] = Reader(data, flexible=True)
    return found


def decode_tagged(found: Mapping[int, Reader], tag: int, decode: Callable[[Reader], T], default: T) -> T:
    """One tagged field's value, or its default when absent; its bytes must be used up."""
    r = found.get(tag)
    if r is None:
        return default
    value = decode(r)
    if r.remaining:
        raise ProtocolError(f"tagged field {tag} has {r.remaining} bytes past its value")
    return value
