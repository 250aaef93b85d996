"""What a group rule returns: the group after it, records to append, and answers.

The runtime applies `group`, appends `records` (acks=all) and, once they are committed,
sends `response` to the request and each parked JoinGroup/SyncGroup its answer in `joins` /
`syncs` (by member id). `park` means the request itself waits for a later answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from common.errors import ErrorCode
from groups.consumer_records import ConsumerRecord
from groups.group import ClassicGroup
from groups.records import CoordinatorRecord

NONE: Final = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    """The answer to one JoinGroup (Kafka's JoinGroupResponseData, less throttle)."""

    error: ErrorCode
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[JoinMember, ...] = ()
    skip_assignment: bool = False  # KIP-814 (JoinGroup v9+): the leader must not assign


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    group: ClassicGroup | None  # None: the group does not exist (or no longer)
    records: tuple[CoordinatorRecord | ConsumerRecord, ...] = ()  # a KIP-848 group's too (DeleteGroups)
    response: object = None  # this request's answer, unless parked
    park: bool = False
    joins: tuple[tuple[str, JoinResult], ...] = ()
    syncs: tuple[tuple[str, SyncResult], ...] = ()
    reason: str = ""  # why the state changed, for the runtime's one log line

    def then(self, later: Outcome) -> Outcome:
        """This outcome followed by `later` (computed on `later`'s group)."""
        return Outcome(later.group, self.records + later.records,
                       later.response if later.response is not None else self.response,
                       self.park or later.park, self.joins + later.joins,
                       self.syncs + later.syncs, later.reason or self.reason)
