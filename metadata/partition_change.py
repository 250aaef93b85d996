"""Pure election and ISR rules: each returns one PartitionChange record, or None for no-op.

Kafka's PartitionChangeBuilder as plain functions. A rule never changes state; the record
goes through the metadata log and `metadata.delta` applies it (bumping partition_epoch,
and leader_epoch because the record names a new leader). The shared core `_build`
follows PartitionChangeBuilder.build():

0. complete a running reassignment (KIP-455) when the target ISR allows it
   (`metadata.reassignment_replicas.maybe_complete`): replicas = target, ISR without the
   removing replicas;
1. with ELR enabled, recompute the ELR (KIP-966) from the target ISR and min.insync.replicas;
2. elect a leader (`_elect`), keeping a valid current leader; an ELR leader gets ISR =
   [leader]; an unclean one gets ISR = [leader] and leader_recovery_state RECOVERING;
3. set the ISR if it changed, except that without ELR an empty target ISR leaves the ISR
   as it is (KIP-841: the last ISR member stays and the partition goes leaderless);
4. when replicas leave the assignment and the leader stays, name it again so the leader
   epoch bumps (Kafka's triggerLeaderEpochBumpForReplicaReassignmentIfNeeded): a removed
   replica can no longer fetch at the new epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from common.errors import ErrorCode
from metadata.image import BrokerRegistration, PartitionRegistration
from metadata.reassignment_replicas import maybe_complete
from metadata.records import NO_LEADER, LeaderRecoveryState, PartitionChange, new_partition_change

IsAcceptable = Callable[[int], bool]


class Election(Enum):
    """PartitionChangeBuilder.Election: how far an election may go to keep a partition online."""

    PREFERRED = "preferred"  # the first replica if it is acceptable and in the ISR; never unclean
    ONLINE = "online"  # any acceptable ISR member; unclean only when the topic allows it
    UNCLEAN = "unclean"  # operator-requested: unclean if no acceptable ISR member remains


@dataclass(frozen=True, slots=True)
class AlterPartitionRejected:
    """An AlterPartition request refused: the error code and why, in words."""

    error: ErrorCode
    message: str


@dataclass(frozen=True, slots=True)
class IsrMember:
    """One proposed ISR member (AlterPartitionRequest NewIsrWithEpochs); epoch -1 skips the check."""

    broker_id: int
    broker_epoch: int = -1


def _elect(partition: PartitionRegistration, replicas: Sequence[int], isr: Sequence[int], elr: Sequence[int],
           is_acceptable: IsAcceptable, election: Election, unclean_allowed: bool) -> tuple[int, bool]:
    """(new leader, unclean?) in Kafka's order; NO_LEADER when nobody qualifies."""

    def valid(replica: int) -> bool:
        # In the ISR, or in the ELR when the ISR is empty (KIP-966), and acceptable.
        return (replica in isr or (not isr and replica in elr)) and is_acceptable(replica)

    if election is Election.PREFERRED:
        if valid(replicas[0]):
            return replicas[0], False
        if valid(partition.leader):
            return partition.leader, False
        candidates = replicas[1:]
    else:
        if partition.leader in replicas and valid(partition.leader):
            return partition.leader, False
        candidates = replicas
    for replica in candidates:
        if valid(replica):
            return replica, False
    if election is Election.UNCLEAN or (election is Election.ONLINE and unclean_allowed):
        for replica in replicas:
            if is_acceptable(replica):
                return replica, True
    return NO_LEADER, False


def _target_elr(partition: PartitionRegistration, replicas: Sequence[int], isr: Sequence[int],
                elr_enabled: bool, min_insync_replicas: int) -> tuple[int, ...]:
    """KIP-966: below min ISR, replicas leaving the ISR join the ELR; at or above it, no ELR."""
    if not elr_enabled or len(isr) >= min_insync_replicas:
        return ()
    candidates = set(partition.elr) | set(partition.isr)
    return tuple(r for r in replicas if r in candidates and r not in isr)


def _build(partition: PartitionRegistration, *, target_isr: Sequence[int], is_acceptable: IsAcceptable,
           election: Election = Election.ONLINE, unclean_allowed: bool = False,
           elr_enabled: bool = False, min_insync_replicas: int = 1,
           target_leader_recovery_state: LeaderRecoveryState | None = None,
           target_replicas: Sequence[int] | None = None, target_adding: Sequence[int] | None = None,
           target_removing: Sequence[int] | None = None) -> PartitionChange | None:
    isr = tuple(target_isr)
    replicas = partition.replicas if target_replicas is None else tuple(target_replicas)
    adding = partition.adding_replicas if target_adding is None else tuple(target_adding)
    removing = partition.removing_replicas if target_removing is None else tuple(target_removing)
    completed = maybe_complete(replicas, adding, removing, isr, min_insync_replicas)
    if completed is not None:
        (replicas, isr), adding, removing = completed, (), ()
    elr = _target_elr(partition, replicas, isr, elr_enabled, min_insync_replicas)
    change: dict[str, Any] = {}
    leader, unclean = _elect(partition, replicas, isr, elr, is_acceptable, election, unclean_allowed)
    if leader != partition.leader:
        change["leader"] = leader
        if unclean:
            # Forcibly shrink the ISR to the new leader: this can lose data.
            change["isr"] = (leader,)
            if partition.leader_recovery_state is not LeaderRecoveryState.RECOVERING:
                change["leader_recovery_state"] = LeaderRecoveryState.RECOVERING
        elif leader in elr:
            isr = (leader,)
            # KIP-966 keeps the ELR empty while the ISR is at min.insync.replicas; Kafka's
            # builder only notices on its next run, we keep the invariant in this record.
            elr = () if len(isr) >= min_insync_replicas else tuple(r for r in elr if r != leader)
    if "isr" in change or not elr_enabled:  # an unclean election, as Kafka tells it
        elr = ()
    if elr != partition.elr:
        change["elr"] = elr
    if "isr" not in change and (isr or elr_enabled) and isr != partition.isr:
        change["isr"] = isr
    wanted = target_leader_recovery_state
    if wanted is not None and wanted != partition.leader_recovery_state:
        change["leader_recovery_state"] = wanted
    if "leader" not in change and not set(partition.replicas) <= set(replicas):
        change["leader"] = leader  # the same leader: only its epoch bumps
    if replicas != partition.replicas:
        change["replicas"] = replicas
    if adding != partition.adding_replicas:
        change["adding_replicas"] = adding
    if removing != partition.removing_replicas:
        change["removing_replicas"] = removing
    if not change:
        return None
    return new_partition_change(partition.topic_id, partition.partition_id, **change)


def elect_leader(partition: PartitionRegistration, *, is_acceptable: IsAcceptable,
                 unclean_allowed: bool = False, election: Election = Election.ONLINE,
                 elr_enabled: bool = False, min_insync_replicas: int = 1) -> PartitionChange | None:
    """Re-elect a leader if needed (or the preferred one); None when the leader stays."""
    return _build(partition, target_isr=partition.isr, is_acceptable=is_acceptable, election=election,
                  unclean_allowed=unclean_allowed, elr_enabled=elr_enabled,
                  min_insync_replicas=min_insync_replicas)


def remove_from_isr(partition: PartitionRegistration, broker_id: int, *, is_acceptable: IsAcceptable,
                    unclean_allowed: bool = False, elr_enabled: bool = False,
                    min_insync_replicas: int = 1) -> PartitionChange | None:
    """A broker is fenced or shutting down: drop it from the ISR (not the last member) and leadership."""
    return _build(partition, target_isr=[r for r in partition.isr if r != broker_id],
                  # Never re-elect the broker being removed, even by an unclean election.
                  is_acceptable=lambda r: r != broker_id and is_acceptable(r),
                  unclean_allowed=unclean_allowed, elr_enabled=elr_enabled,
                  min_insync_replicas=min_insync_replicas)


def _ineligible(member: IsrMember, registration: BrokerRegistration | None) -> str | None:
    """Why a proposed ISR member cannot join (Kafka's ineligibleReplicasForIsr), or None."""
    if registration is None:
        return "not registered"
    if registration.in_controlled_shutdown:
        return "shutting down"
    if registration.fenced:
        return "fenced"
    if member.broker_epoch != -1 and member.broker_epoch != registration.broker_epoch:
        return (f"broker epoch mismatch: requested={member.broker_epoch} "
                f"vs expected={registration.broker_epoch}")
    return None


def _validate_alter(partition: PartitionRegistration, leader_id: int, leader_epoch: int,
                    partition_epoch: int, members: Sequence[IsrMember],
                    leader_recovery_state: LeaderRecoveryState,
                    broker_lookup: Callable[[int], BrokerRegistration | None],
                    ) -> AlterPartitionRejected | None:
    """ReplicationControlManager.validateAlterPartitionData, in Kafka's order."""
    err = ErrorCode
    where = f"AlterPartition from broker {leader_id} for {partition.topic_id}-{partition.partition_id}"
    isr = [m.broker_id for m in members]
    checks = [
        # A newer epoch than ours means we are a stale controller: let the leader find the new one.
        (leader_epoch > partition.leader_epoch, err.NOT_CONTROLLER,
         f"leader epoch {leader_epoch} is newer than this controller's {partition.leader_epoch}"),
        (partition_epoch > partition.partition_epoch, err.NOT_CONTROLLER,
         f"partition epoch {partition_epoch} is newer than this controller's {partition.partition_epoch}"),
        (leader_epoch < partition.leader_epoch, err.FENCED_LEADER_EPOCH,
         f"leader epoch {leader_epoch} is stale, the current one is {partition.leader_epoch}"),
        (leader_id != partition.leader, err.INVALID_REQUEST,
         f"the current leader is {partition.leader}"),
        (partition_epoch < partition.partition_epoch, err.INVALID_UPDATE_VERSION,
         f"partition epoch {partition_epoch} is stale, the current one is {partition.partition_epoch}"),
        (len(set(isr)) != len(isr) or not set(isr) <= set(partition.replicas), err.INVALID_REQUEST,
         f"ISR {isr} has duplicates or non-replicas (replicas {list(partition.replicas)})"),
        (partition.leader not in isr, err.INVALID_REQUEST, f"ISR {isr} does not include the leader"),
        # Kafka checks the requested state; tidelog also keeps the ISR at [leader] until the
        # leader has recovered, so RECOVERING -> RECOVERED needs ISR = [leader] too.
        ((leader_recovery_state is LeaderRecoveryState.RECOVERING
          or partition.leader_recovery_state is LeaderRecoveryState.RECOVERING) and len(isr) > 1,
         err.INVALID_REQUEST, f"ISR {isr} has more than the leader while the leader is recovering"),
        (partition.leader_recovery_state is LeaderRecoveryState.RECOVERED
         and leader_recovery_state is LeaderRecoveryState.RECOVERING, err.INVALID_REQUEST,
         "leader_recovery_state cannot change from RECOVERED to RECOVERING"),
    ]
    for failed, error, reason in checks:
        if failed:
            return AlterPartitionRejected(error, f"{where}: {reason}")
    reasons = [(m.broker_id, _ineligible(m, broker_lookup(m.broker_id))) for m in members]
    ineligible = [f"{broker_id} ({why})" for broker_id, why in reasons if why is not None]
    if ineligible:
        return AlterPartitionRejected(err.INELIGIBLE_REPLICA,
                                      f"{where}: ineligible replicas {', '.join(ineligible)} in ISR {isr}")
    return None


def alter_partition(partition: PartitionRegistration, *, leader_id: int, leader_epoch: int,
                    partition_epoch: int, new_isr: Sequence[IsrMember | int],
                    broker_lookup: Callable[[int], BrokerRegistration | None],
                    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED,
                    elr_enabled: bool = False, min_insync_replicas: int = 1,
                    ) -> AlterPartitionRejected | PartitionChange | None:
    """A leader's AlterPartition: rejected, or the record (None when nothing changes)."""
    members = [m if isinstance(m, IsrMember) else IsrMember(m) for m in new_isr]
    try:  # the request carries an int8; an unknown value is the requester's mistake
        leader_recovery_state = LeaderRecoveryState(leader_recovery_state)
    except ValueError:
        return AlterPartitionRejected(ErrorCode.INVALID_REQUEST,
                                      f"AlterPartition from broker {leader_id} for {partition.topic_id}-"
                                      f"{partition.partition_id}: unknown leader_recovery_state "
                                      f"{leader_recovery_state!r}")
    rejected = _validate_alter(partition, leader_id, leader_epoch, partition_epoch, members,
                               leader_recovery_state, broker_lookup)
    if rejected is not None:
        return rejected

    def is_acceptable(broker_id: int) -> bool:
        registration = broker_lookup(broker_id)
        return registration is not None and registration.is_active

    # Every member was just checked active, the leader among them, so the election keeps it.
    return _build(partition, target_isr=[m.broker_id for m in members], is_acceptable=is_acceptable,
                  elr_enabled=elr_enabled, min_insync_replicas=min_insync_replicas,
                  target_leader_recovery_state=leader_recovery_state)
