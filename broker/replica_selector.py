"""KIP-392 follower fetching: which replica a consumer should read from (Kafka's ReplicaSelector).

    selector = replica_selector(config.get_optional_str("replica.selector.class"))  # None: leader only
    preferred = preferred_read_replica(partition, broker_id, selector, client_rack="eu-1a",
                                       fetch_offset=42, now_ms=now, racks=racks_of_image)
    # -1: read here (the leader); else the broker id the consumer should fetch from instead

The leader decides, per partition of a consumer's Fetch (v11+, which carries the client's
rack): like Kafka's ReplicaManager.findPreferredReadReplica, the candidates are the leader
and the followers in the ISR whose log holds the fetch offset (log start <= offset <= log
end, as the leader last saw them), and the selector picks one; the leader itself is never
sent back as "preferred". A follower that leaves the ISR stops being a candidate, so the
next fetch a consumer sends to the leader is pointed at another replica (or read there).

Selectors, as Kafka names them in `replica.selector.class`:
- org.apache.kafka.common.replica.LeaderSelector: always the leader (followers never chosen).
- org.apache.kafka.common.replica.RackAwareReplicaSelector: with a client rack, the leader
  when it is in that rack, else the most caught-up replica of that rack (highest log end
  offset, then the shortest time since it was last caught up), else the leader.
Unset (Kafka's default): no selector, every consumer reads from the leader.

Pure: no clock (`now_ms` is given), no I/O; the Fetch handler calls it only when the
request names a rack and a selector is configured (one branch on the hot path otherwise).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Protocol

from broker.replication.partition import Partition

LEADER_SELECTOR: Final = "org.apache.kafka.common.replica.LeaderSelector"
RACK_AWARE_SELECTOR: Final = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
SELECTOR_CLASSES: Final = (LEADER_SELECTOR, RACK_AWARE_SELECTOR)
NO_PREFERRED_REPLICA: Final = -1  # FetchResponse preferred_read_replica: "read from the leader"


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One candidate replica as the leader sees it (Kafka's ReplicaView)."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_last_caught_up_ms: int  # 0 for the leader


class ReplicaSelector(Protocol):
    """Kafka's ReplicaSelector.select: the replica a client should read from, or None."""

    name: str

    def select(self, client_rack: str, replicas: Iterable[ReplicaView], leader: ReplicaView) -> ReplicaView | None: ...


class LeaderSelector:
    """Always the leader (Kafka's LeaderSelector)."""

    name = LEADER_SELECTOR

    def select(self, client_rack: str, replicas: Iterable[ReplicaView], leader: ReplicaView) -> ReplicaView | None:
        return leader


class RackAwareReplicaSelector:
    """The client's rack's replica (the leader when it is there), else the leader."""

    name = RACK_AWARE_SELECTOR

    def select(self, client_rack: str, replicas: Iterable[ReplicaView], leader: ReplicaView) -> ReplicaView | None:
        if not client_rack:
            return leader
        same_rack = [r for r in replicas if r.rack == client_rack]
        if not same_rack or leader in same_rack:
            return leader
        # most caught up first: highest log end offset, then the most recently caught up;
        # the broker id last so that ties pick the same replica on every call
        return max(same_rack, key=lambda r: (r.log_end_offset, -r.time_since_last_caught_up_ms, -r.broker_id))


class ReplicaSelectorError(ValueError):
    """replica.selector.class names a class tidelog does not have."""


def replica_selector(class_name: str | None) -> ReplicaSelector | None:
    """The selector `replica.selector.class` names; None when unset (leader only)."""
    if not class_name:
        return None
    if class_name == LEADER_SELECTOR:
        return LeaderSelector()
    if class_name == RACK_AWARE_SELECTOR:
        return RackAwareReplicaSelector()
    raise ReplicaSelectorError(f"replica.selector.class {class_name!r}: must be one of {', '.join(SELECTOR_CLASSES)}")


def candidates(partition: Partition, broker_id: int, fetch_offset: int, now_ms: int,
               rack_of: Callable[[int], str | None]) -> tuple[list[ReplicaView], ReplicaView]:
    """The in-sync followers holding `fetch_offset`, and the leader (this broker)."""
    views = []
    for replica_id, state in partition.follower_states.items():
        # An out-of-sync follower may lag without bound: a consumer sent there would fall
        # behind for as long as it stays out (Kafka's comment in findPreferredReadReplica).
        if replica_id in partition.isr and state.log_start_offset <= fetch_offset <= state.log_end_offset:
            views.append(ReplicaView(replica_id, rack_of(replica_id), state.log_end_offset,
                                     now_ms - state.last_caught_up_ms))
    leader = ReplicaView(broker_id, rack_of(broker_id), partition.log.log_end_offset, 0)
    views.append(leader)
    return views, leader


def preferred_read_replica(partition: Partition, broker_id: int, selector: ReplicaSelector, *,
                           client_rack: str, fetch_offset: int, now_ms: int,
                           rack_of: Callable[[int], str | None]) -> int:
    """The replica a consumer of `partition` (led here) should read from; -1 for this leader."""
    if not partition.is_leader(broker_id):
        return NO_PREFERRED_REPLICA
    views, leader = candidates(partition, broker_id, fetch_offset, now_ms, rack_of)
    chosen = selector.select(client_rack, views, leader)
    if chosen is None or chosen.broker_id == broker_id:
        return NO_PREFERRED_REPLICA
    return chosen.broker_id


@dataclass(slots=True)
class FollowerFetchStats:
    """This broker's KIP-392 counters, for GET /metrics: consumer partition reads it served as
    a follower (and their bytes), and partition answers it sent as leader pointing a consumer
    at another replica (preferred_read_replica)."""

    follower_reads: int = 0
    follower_read_bytes: int = 0
    preferred_replica_answers: int = 0
