"""What DescribeQuorum (Kafka API 55) answers, as plain data the controllers send and the
brokers read (issue 28): `quorum.quorum_describe` computes it, `broker.handlers.describe_quorum`
and `tidelog quorum describe` present it. Offsets are metadata record offsets, timestamps
wall-clock milliseconds, -1 when unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

METADATA_TOPIC: Final = "__cluster_metadata"  # Kafka's name; partition 0
METADATA_PARTITION: Final = 0
UNKNOWN: Final = -1


@dataclass(frozen=True, slots=True)
class ReplicaState:
    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int = UNKNOWN
    last_caught_up_timestamp: int = UNKNOWN
    directory_id: str | None = None  # Kafka's Uuid in base64 (KIP-853); None: not known (a broker)


@dataclass(frozen=True, slots=True)
class QuorumDescription:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaState, ...]
    observers: tuple[ReplicaState, ...]

    def to_map(self) -> dict[str, Any]:
        def replica(r: ReplicaState) -> dict[str, Any]:
            m: dict[str, Any] = {"replica_id": r.replica_id, "log_end_offset": r.log_end_offset,
                                 "last_fetch_timestamp": r.last_fetch_timestamp,
                                 "last_caught_up_timestamp": r.last_caught_up_timestamp}
            if r.directory_id is not None:
                m["directory_id"] = r.directory_id
            return m
        return {"topic": METADATA_TOPIC, "partition": METADATA_PARTITION, "leader_id": self.leader_id,
                "leader_epoch": self.leader_epoch, "high_watermark": self.high_watermark,
                "voters": [replica(r) for r in self.voters], "observers": [replica(r) for r in self.observers]}

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> QuorumDescription:
        """The inverse of `to_map`; ValueError for anything else (it crosses the network)."""
        def integer(d: Mapping[str, Any], key: str) -> int:
            value = d.get(key)
            if type(value) is not int:
                raise ValueError(f"quorum description: {key} is not an integer: {value!r:.40}")
            return value

        def replicas(key: str) -> tuple[ReplicaState, ...]:
            items = m.get(key)
            if not isinstance(items, list) or not all(isinstance(r, dict) for r in items):
                raise ValueError(f"quorum description: {key} is not a list of maps")
            return tuple(ReplicaState(integer(r, "replica_id"), integer(r, "log_end_offset"),
                                      integer(r, "last_fetch_timestamp"), integer(r, "last_caught_up_timestamp"),
                                      directory(r)) for r in items)

        def directory(d: Mapping[str, Any]) -> str | None:
            value = d.get("directory_id")
            if value is not None and not isinstance(value, str):
                raise ValueError(f"quorum description: directory_id is not a string: {value!r:.40}")
            return value
        return cls(integer(m, "leader_id"), integer(m, "leader_epoch"), integer(m, "high_watermark"),
                   replicas("voters"), replicas("observers"))
