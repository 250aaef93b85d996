"""KIP-951 leader discovery: the CurrentLeader and NodeEndpoints structs that Produce (v10+)
and Fetch (v12+ CurrentLeader, v16+ NodeEndpoints) answer with, and their codecs.

Both APIs carry the same two structs in tagged fields (Kafka's generated LeaderIdAndEpoch and
NodeEndpoint); only the tag numbers differ, so those stay with each API's codec. A broker fills
them on NOT_LEADER_OR_FOLLOWER (and, for Fetch, FENCED_LEADER_EPOCH) so the client can retry on
the new leader without a Metadata round trip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from common.protocol.primitives import Reader, Writer

# The smallest flexible NodeEndpoint: node id 4, empty host 1, port 4, null rack 1, no tags 1;
# `Reader.array` checks a count against it before allocating anything.
_MIN_ENDPOINT_BYTES: Final = 11


@dataclass(frozen=True, slots=True)
class LeaderIdAndEpoch:
    """CurrentLeader: the partition's leader as the answering broker knows it (-1: unknown)."""

    leader_id: int = -1
    leader_epoch: int = -1


UNKNOWN_LEADER: Final[LeaderIdAndEpoch] = LeaderIdAndEpoch()  # Produce's default: the tagged field is not sent


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    """NodeEndpoints: where a leader named in a CurrentLeader is reached."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


def write_leader(w: Writer, leader: LeaderIdAndEpoch) -> None:
    w.int32(leader.leader_id)
    w.int32(leader.leader_epoch)
    w.tagged_fields()


def read_leader(r: Reader) -> LeaderIdAndEpoch:
    leader = LeaderIdAndEpoch(r.int32(), r.int32())
    r.tagged_fields()
    return leader


def write_node_endpoint(w: Writer, e: NodeEndpoint) -> None:
    w.int32(e.node_id)
    w.string(e.host)
    w.int32(e.port)
    w.nullable_string(e.rack)
    w.tagged_fields()


def read_node_endpoint(r: Reader) -> NodeEndpoint:
    endpoint = NodeEndpoint(r.int32(), r.string(), r.int32(), r.nullable_string())
    r.tagged_fields()
    return endpoint


def write_node_endpoints(w: Writer, endpoints: tuple[NodeEndpoint, ...]) -> None:
    w.array(endpoints, write_node_endpoint)


def read_node_endpoints(r: Reader) -> tuple[NodeEndpoint, ...]:
    return r.array(read_node_endpoint, _MIN_ENDPOINT_BYTES)
