"""Replica placement for new topics and partitions: Kafka's classic assignment.

Rack-unaware (Kafka's AdminUtils.assignReplicasToBrokersRackUnaware): brokers sorted by
id; partition p's first replica (its preferred leader) is broker (p + start) mod n, so
leaders go round-robin; follower j sits at first + 1 + (shift + j) mod (n - 1), and the
shift grows by one each time the partition id wraps around the broker list, so followers
of consecutive rounds land on different brokers.

Rack-aware (assignReplicasToBrokersRackAware), used when some eligible broker has a rack:
the same walk over a rack-alternated broker list (rack1's first, rack2's first, ...),
skipping a broker whose rack already holds a replica while some rack holds none, and a
broker already chosen while some broker is unchosen. Brokers without a rack count as one
rack of their own, as KRaft's StripedReplicaPlacer keys racks by Optional<String> (the
ZooKeeper-era AdminUtils refused a mix, or fell back to rack-unaware placement): a mix of
racked and unracked brokers is not an error, and each replica still lands on a different
rack when there are enough of them.

Only active brokers (unfenced, not in controlled shutdown) are eligible. Randomness comes
from the caller's `random.Random`: the start index and then the shift are drawn from it,
in that order, exactly once per call.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Final, Protocol

if TYPE_CHECKING:  # the caller owns the generator: no global random here
    from random import Random


NO_RACK: Final = ""  # the rack of the brokers without broker.rack (sorts first, as Optional.empty does)


class PlacementError(Exception):
    """Replicas cannot be placed as asked (bad counts, or too few eligible brokers)."""


class PlaceableBroker(Protocol):
    """What placement reads of a broker (a `metadata.image.BrokerRegistration` fits)."""

    @property
    def broker_id(self) -> int: ...
    @property
    def rack(self) -> str | None: ...
    @property
    def fenced(self) -> bool: ...
    @property
    def in_controlled_shutdown(self) -> bool: ...


def eligible_brokers(brokers: Iterable[PlaceableBroker]) -> list[PlaceableBroker]:
    """Unfenced brokers not in controlled shutdown, sorted by broker id."""
    return sorted((b for b in brokers if not b.fenced and not b.in_controlled_shutdown),
                  key=lambda b: b.broker_id)


def place_replicas(brokers: Iterable[PlaceableBroker], *, partitions: int, replication_factor: int,
                   rng: Random, start_partition_id: int = 0,
                   fixed_start_index: int | None = None) -> dict[int, tuple[int, ...]]:
    """Replicas for partitions start_partition_id.. (+partitions), first replica = preferred leader."""
    if partitions <= 0:
        raise PlacementError(f"number of partitions must be larger than 0, got {partitions}")
    if replication_factor <= 0:
        raise PlacementError(f"replication factor must be larger than 0, got {replication_factor}")
    if start_partition_id < 0:
        raise PlacementError(f"start partition id must not be negative, got {start_partition_id}")
    eligible = eligible_brokers(brokers)
    if replication_factor > len(eligible):
        raise PlacementError(
            f"replication factor {replication_factor} is larger than the {len(eligible)} eligible "
            f"(unfenced, not shutting down) broker(s) {[b.broker_id for b in eligible]}")
    n = len(eligible)
    if fixed_start_index is None:
        start_index, shift = rng.randrange(n), rng.randrange(n)
    else:
        start_index = shift = fixed_start_index
    if any(b.rack for b in eligible):
        racks = {b.broker_id: b.rack or NO_RACK for b in eligible}
        return _rack_aware(racks, partitions, replication_factor, start_index, shift, start_partition_id)
    ids = [b.broker_id for b in eligible]
    return _rack_unaware(ids, partitions, replication_factor, start_index, shift, start_partition_id)


def _follower_index(first: int, shift: int, j: int, n: int) -> int:
    # Offsets 1..n-1 from the first replica: never the first replica itself.
    return (first + 1 + (shift + j) % (n - 1)) % n


def _rack_unaware(ids: list[int], partitions: int, replication_factor: int, start_index: int,
                  shift: int, start_partition_id: int) -> dict[int, tuple[int, ...]]:
    n = len(ids)
    out: dict[int, tuple[int, ...]] = {}
    for partition_id in range(start_partition_id, start_partition_id + partitions):
        if partition_id > 0 and partition_id % n == 0:
            shift += 1
        first = (partition_id + start_index) % n
        followers = [ids[_follower_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        out[partition_id] = (ids[first], *followers)
    return out


def rack_alternated(racks: dict[int, str]) -> list[int]:
    """Broker ids taking one from each rack in turn (racks and ids in sorted order)."""
    by_rack: dict[str, list[int]] = {}
    for broker_id in sorted(racks):
        by_rack.setdefault(racks[broker_id], []).append(broker_id)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    depth = max(len(c) for c in columns)
    return [c[i] for i in range(depth) for c in columns if i < len(c)]


def _rack_aware(racks: dict[int, str], partitions: int, replication_factor: int, start_index: int,
                shift: int, start_partition_id: int) -> dict[int, tuple[int, ...]]:
    arranged = rack_alternated(racks)
    n, rack_count = len(arranged), len(set(racks.values()))
    out: dict[int, tuple[int, ...]] = {}
    for partition_id in range(start_partition_id, start_partition_id + partitions):
        if partition_id > 0 and partition_id % n == 0:
            shift += 1
        first = (partition_id + start_index) % n
        chosen = [arranged[first]]
        used_racks = {racks[arranged[first]]}
        k = 0
        for _ in range(replication_factor - 1):
            # n - 1 consecutive k visit every other broker once, and one of them always
            # fits (an unused rack has an unused broker), so this loop is bounded by n.
            for _attempt in range(n):
                broker = arranged[_follower_index(first, shift * rack_count, k, n)]
                k += 1
                rack = racks[broker]
                if ((rack not in used_racks or len(used_racks) == rack_count)
                        and (broker not in chosen or len(chosen) == n)):
                    chosen.append(broker)
                    used_racks.add(rack)
                    break
            else:  # pragma: no cover - unreachable, see above
                raise PlacementError(f"no broker fits replica {len(chosen)} of partition {partition_id}")
        out[partition_id] = tuple(chosen)
    return out
