"""Manual replica assignments in CreateTopics and CreatePartitions, checked as Kafka's
ReplicationControlManager checks them (`validateManualPartitionAssignment` and its callers).

Kafka's rules, kept exactly:

- a manual assignment excludes `num_partitions` and `replication_factor` (both must be -1,
  else INVALID_REQUEST);
- each partition's replica list is non-empty, names only registered brokers, none twice, and
  has as many replicas as the partitions before it (INVALID_REPLICA_ASSIGNMENT);
- at least one replica of each partition is active (unfenced, not shutting down): fenced
  brokers may be named, but a partition needs a live first leader (INVALID_REPLICA_ASSIGNMENT);
- CreateTopics' partition ids are 0..n-1, each once; CreatePartitions gives exactly one list
  per new partition, at the topic's current replication factor.

The order is kept: the first replica is the preferred leader. Pure: image in, assignments or
a `ControllerApiError` out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from common.errors import ErrorCode
from metadata.image import MetadataImage
from quorum.controller_result import ControllerApiError

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

UNSET: Final = -1  # Kafka's "not given" for num_partitions and replication_factor
FIELD: Final = "assignments"
Assignments = dict[int, tuple[int, ...]]  # partition id -> replicas, preferred leader first


def _invalid(message: str) -> ControllerApiError:
    return ControllerApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message, field=FIELD)


def check_partition_replicas(image: MetadataImage, replicas: Sequence[int],
                             replication_factor: int | None) -> tuple[int, ...]:
    """One partition's replicas: non-empty, registered, distinct, of `replication_factor` (if known)."""
    if not replicas:
        raise _invalid("The manual partition assignment includes an empty replica list.")
    previous: int | None = None
    for broker_id in sorted(replicas):  # sorted as Kafka does: its messages name the lowest culprit
        if image.broker(broker_id) is None:
            raise _invalid(f"The manual partition assignment includes broker {broker_id}, but no such "
                           "broker is registered.")
        if broker_id == previous:
            raise _invalid(f"The manual partition assignment includes the broker {broker_id} more than once.")
        previous = broker_id
    if replication_factor is not None and len(replicas) != replication_factor:
        raise _invalid(f"The manual partition assignment includes a partition with {len(replicas)} "
                       f"replica(s), but this is not consistent with previous partitions, which have "
                       f"{replication_factor} replica(s).")
    return tuple(replicas)


def _require_active_replica(image: MetadataImage, partition_id: int, replicas: Sequence[int]) -> None:
    if not any((b := image.broker(r)) is not None and b.is_active for r in replicas):
        raise _invalid(f"All brokers specified in the manual partition assignment for partition "
                       f"{partition_id} are fenced or in controlled shutdown.")


def topic_assignments(image: MetadataImage, assignments: Sequence[tuple[int, Sequence[int]]], *,
                      num_partitions: int, replication_factor: int) -> Assignments:
    """CreateTopics' manual assignments, as (partition index, broker ids) in request order."""
    if replication_factor != UNSET:
        raise ControllerApiError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, "
                                 "but replication factor was not set to -1.", field="replication_factor")
    if num_partitions != UNSET:
        raise ControllerApiError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, "
                                 "but numPartitions was not set to -1.", field="partitions")
    out: Assignments = {}
    rf: int | None = None
    for partition_id, replicas in assignments:
        if partition_id in out:
            raise _invalid(f"Found multiple manual partition assignments for partition {partition_id}")
        out[partition_id] = check_partition_replicas(image, replicas, rf)
        rf = len(replicas)
        _require_active_replica(image, partition_id, replicas)
    if any(p not in out for p in range(len(out))):
        raise _invalid("partitions should be a consecutive 0-based integer sequence")
    return out


def new_partition_assignments(image: MetadataImage, assignments: Sequence[Sequence[int]], *,
                              start_partition_id: int, additional: int, replication_factor: int) -> Assignments:
    """CreatePartitions' manual assignments: one replica list per new partition, in order."""
    if len(assignments) != additional:
        raise _invalid(f"Attempted to add {additional} additional partition(s), but only "
                       f"{len(assignments)} assignment(s) were specified.")
    out: Assignments = {}
    for i, replicas in enumerate(assignments):
        partition_id = start_partition_id + i
        out[partition_id] = check_partition_replicas(image, replicas, replication_factor)
        _require_active_replica(image, partition_id, replicas)
    return out
