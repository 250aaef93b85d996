"""CreateAcls and DeleteAcls on the controller: Kafka's AclControlManager, as pure rules.

    result = create_acls(image, bindings, new_ids)     # ControllerResult[list[AclOutcome]]
    result = delete_acls(image, filters)               # ControllerResult[list[DeleteOutcome]]

Each creation and each filter is answered on its own, as Kafka answers them: a binding that
cannot be an ACL (security.acl.creation_error) gets INVALID_REQUEST and the rest go on; a
binding equal to an existing ACL (or to one earlier in the same request) succeeds without a
new record. A filter removes every ACL it matches that an earlier filter of the request did
not, and lists them. The ids of new ACLs come from the shell (`new_ids`: random UUIDs there),
so the rule stays deterministic.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from common.errors import ErrorCode
from metadata.image import MetadataImage
from metadata.records import Record, RemoveAccessControlEntry
from quorum.controller_result import ControllerResult
from security.acl import AclBinding, AclFilter, creation_error, describe, filter_error, to_record
from security.acl import image_bindings as acl_bindings

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

# Kafka bounds neither; ours keep one request's records within one metadata transaction of
# reasonable size (each ACL record is ~100 bytes).
MAX_ACLS_PER_REQUEST: Final = 1_000  # creations, or filters, in one CreateAcls / DeleteAcls


@dataclass(frozen=True, slots=True)
class AclOutcome:
    """One creation's answer: error None when created (or already there)."""

    error: ErrorCode | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteOutcome:
    """One filter's answer: the ACLs it removed, or why it was refused."""

    deleted: tuple[AclBinding, ...] = ()
    error: ErrorCode | None = None
    message: str | None = None


def create_acls(image: MetadataImage, bindings: Sequence[AclBinding],
                new_ids: Iterator[str]) -> ControllerResult[list[AclOutcome]]:
    """Kafka's AclControlManager.createAcls."""
    existing = set(acl_bindings(image).values())
    records: list[Record] = []
    outcomes = []
    for binding in bindings:
        error = creation_error(binding)
        if error is not None:
            outcomes.append(AclOutcome(ErrorCode.INVALID_REQUEST, error))
            continue
        if binding not in existing:
            acl_id = next(new_ids)
            if acl_id in image.acls.by_id:  # a UUID collision: refuse rather than replace an ACL
                outcomes.append(AclOutcome(ErrorCode.UNKNOWN_SERVER_ERROR, f"ACL id {acl_id} is in use"))
                continue
            records.append(to_record(binding, acl_id))
            existing.add(binding)
        outcomes.append(AclOutcome())
    return ControllerResult(records, outcomes, atomic=True)


def delete_acls(image: MetadataImage, filters: Sequence[AclFilter]) -> ControllerResult[list[DeleteOutcome]]:
    """Kafka's AclControlManager.deleteAcls: in id order, so answers are deterministic."""
    bindings = acl_bindings(image)
    deleted: set[str] = set()
    records: list[Record] = []
    outcomes = []
    for flt in filters:
        error = filter_error(flt)
        if error is not None:
            outcomes.append(DeleteOutcome(error=ErrorCode.INVALID_REQUEST, message=error))
            continue
        matched = []
        for acl_id in sorted(bindings):
            if acl_id not in deleted and flt.matches(bindings[acl_id]):
                deleted.add(acl_id)
                records.append(RemoveAccessControlEntry(acl_id))
                matched.append(bindings[acl_id])
        outcomes.append(DeleteOutcome(tuple(matched)))
    return ControllerResult(records, outcomes, atomic=True)


def describe_acls(image: MetadataImage, flt: AclFilter) -> list[AclBinding]:
    """DescribeAcls on the controller's image (security.acl.describe)."""
    return describe(image, flt)
