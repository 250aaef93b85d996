"""Incremental reconciliation of one member towards the target (Kafka's CurrentAssignmentBuilder).

    member = reconcile(member, target_epoch=5, target=group.target[member_id], owned=owned,
                       partition_epochs=group.partition_epochs(excluding=member_id))

The rule KIP-848 rests on: a partition is never owned by two members at once. A member first
revokes what the target took from it (UNREVOKED_PARTITIONS, at its old epoch, nothing new
given meanwhile); once a heartbeat shows it no longer owns them it moves to the assignment
epoch and receives the new partitions that are free; a partition another member still holds
(assigned or pending its revocation) is withheld (UNRELEASED_PARTITIONS) until its owner lets
it go, and handed over at a later heartbeat.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from groups.consumer_group import ConsumerMember, MemberState
from groups.consumer_records import NO_PARTITIONS, Assignment, TopicIdPartition


def reconcile(member: ConsumerMember, *, target_epoch: int, target: Assignment, owned: Assignment | None,
              partition_epochs: Mapping[TopicIdPartition, int]) -> ConsumerMember:
    """The member after this heartbeat; `owned` is what the heartbeat says the member owns (None:
    unchanged since its last full heartbeat), `partition_epochs` who else owns what."""
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if owned is None or owned & member.pending_revocation:
            return member  # still revoking: nothing moves until the member lets them go
        return _next(member, target_epoch, target, partition_epochs, owned)
    if member.state is MemberState.UNRELEASED_PARTITIONS or member.member_epoch != target_epoch:
        return _next(member, target_epoch, target, partition_epochs, owned)
    return member


def _next(member: ConsumerMember, target_epoch: int, target: Assignment,
          partition_epochs: Mapping[TopicIdPartition, int], owned: Assignment | None) -> ConsumerMember:
    """Kafka's computeNextAssignment. A member whose request shows it no longer owns the
    partitions to revoke (Kafka's ownsRevokedPartitions: a classic member rejoining after an
    eager revocation) needs no revocation step."""
    kept = member.assigned & target
    revoking = member.assigned - target
    if revoking and (owned is None or owned & revoking):
        # stays at its epoch; what it still holds is what it keeps
        return replace(member, state=MemberState.UNREVOKED_PARTITIONS, assigned=kept, pending_revocation=revoking)
    wanted = target - member.assigned
    free = frozenset(tp for tp in wanted if tp not in partition_epochs)
    previous = member.member_epoch if member.member_epoch != target_epoch else member.previous_member_epoch
    state = MemberState.UNRELEASED_PARTITIONS if wanted - free else MemberState.STABLE
    return replace(member, member_epoch=target_epoch, previous_member_epoch=previous, state=state,
                   assigned=kept | free, pending_revocation=NO_PARTITIONS)
