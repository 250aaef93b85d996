"""ACL bindings and filters with Kafka's codes and matching rules (org.apache.kafka.common.acl,
org.apache.kafka.common.resource).

    binding = AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    creation_error(binding)              # None, or Kafka's INVALID_REQUEST message
    AclFilter.of(...).matches(binding)   # DescribeAcls / DeleteAcls: which bindings a filter selects

Pure: no I/O, no clocks. The authorizer's own matching (a request against the bindings) is in
`security.authorizer`; this module is the bindings and what admin requests select.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final

from common.protocol.acls import AclOperation
from common.protocol.api_table import ResourceType
from metadata.image import MetadataImage
from metadata.records import AccessControlEntry

__all__ = ["AclOperation", "ResourceType", "PatternType", "AclPermissionType", "AclBinding", "AclFilter",
           "CLUSTER_NAME", "WILDCARD", "creation_error", "filter_error", "parse_principal"]

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)
CLUSTER_NAME: Final = "kafka-cluster"  # Kafka's only name for the CLUSTER resource
WILDCARD: Final = "*"  # a LITERAL resource name, host or principal name matching every one


class PatternType(IntEnum):
    """Kafka's org.apache.kafka.common.resource.PatternType (KIP-290)."""

    UNKNOWN = 0
    ANY = 1  # filters only: any pattern type, names compared exactly
    MATCH = 2  # filters only: every binding that would apply to the named resource
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(IntEnum):
    """Kafka's org.apache.kafka.common.acl.AclPermissionType."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# What only a filter may hold (Kafka's isUnknown / "Invalid ..." checks on a new binding).
_FILTER_ONLY_RESOURCE: Final = frozenset({ResourceType.UNKNOWN, ResourceType.ANY})
_FILTER_ONLY_OPERATION: Final = frozenset({AclOperation.UNKNOWN, AclOperation.ANY})
_FILTER_ONLY_PERMISSION: Final = frozenset({AclPermissionType.UNKNOWN, AclPermissionType.ANY})
_BINDING_PATTERNS: Final = frozenset({PatternType.LITERAL, PatternType.PREFIXED})


def parse_principal(text: str) -> tuple[str, str] | None:
    """Kafka's SecurityUtils.parseKafkaPrincipal: "Type:name" → (type, name); None if malformed."""
    kind, sep, name = text.partition(":")
    if not sep or not kind:
        return None
    return kind, name


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry (Kafka's AclBinding)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType


def _enum_or_none(cls: type[IntEnum], code: int) -> IntEnum | None:
    try:
        return cls(code)
    except ValueError:
        return None


def _codes(resource_type: int, pattern_type: int, operation: int,
           permission_type: int) -> tuple[ResourceType, PatternType, AclOperation, AclPermissionType] | str:
    """A binding's or filter's four wire codes as enums, or the INVALID_REQUEST message naming
    the first unknown one."""
    codes = ((ResourceType, resource_type, "resourceType"), (PatternType, pattern_type, "patternType"),
             (AclOperation, operation, "operation"), (AclPermissionType, permission_type, "permissionType"))
    values = []
    for cls, code, field in codes:
        value = _enum_or_none(cls, code)
        if value is None:
            return f"Invalid {field} {code}"
        values.append(value)
    rtype, pattern, op, permission = values
    return ResourceType(rtype), PatternType(pattern), AclOperation(op), AclPermissionType(permission)


def binding_of(resource_type: int, resource_name: str, pattern_type: int, principal: str, host: str,
               operation: int, permission_type: int) -> AclBinding | str:
    """A binding from wire codes, or the INVALID_REQUEST message naming the unknown code."""
    enums = _codes(resource_type, pattern_type, operation, permission_type)
    if isinstance(enums, str):
        return enums
    rtype, pattern, op, permission = enums
    return AclBinding(rtype, resource_name, pattern, principal, host, op, permission)


def creation_error(b: AclBinding) -> str | None:
    """Why Kafka refuses to create this binding (INVALID_REQUEST), or None: AclControlManager's
    validateNewAcl and AclApis' validateAclBinding, in their order and words."""
    if b.pattern_type not in _BINDING_PATTERNS:
        return f"Invalid patternType {b.pattern_type.name}"
    if b.resource_type in _FILTER_ONLY_RESOURCE:
        return f"Invalid resourceType {b.resource_type.name}"
    if b.operation in _FILTER_ONLY_OPERATION:
        return f"Invalid operation {b.operation.name}"
    if b.permission_type in _FILTER_ONLY_PERMISSION:
        return f"Invalid permissionType {b.permission_type.name}"
    if b.resource_type == ResourceType.CLUSTER and b.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not b.resource_name:
        return "Invalid empty resource name specified"
    if parse_principal(b.principal) is None:
        return f"Could not parse principal from `{b.principal}` (no colon is found separating principal type and name)"
    if not b.host:
        return "Invalid empty host specified"
    return None


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's AclBindingFilter: None (or ANY) in a field matches every value."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, b: AclBinding) -> bool:
        """Kafka's AclBindingFilter.matches: ResourcePatternFilter and AccessControlEntryFilter."""
        return self._matches_pattern(b) and self._matches_entry(b)

    def _matches_pattern(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != b.pattern_type:
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type in (PatternType.ANY, b.pattern_type):
            return self.resource_name == b.resource_name
        # MATCH: every binding that applies to the resource this filter names
        if b.pattern_type == PatternType.LITERAL:
            return self.resource_name == b.resource_name or b.resource_name == WILDCARD
        return b.pattern_type == PatternType.PREFIXED and self.resource_name.startswith(b.resource_name)

    def _matches_entry(self, b: AclBinding) -> bool:
        return ((self.principal is None or self.principal == b.principal)
                and (self.host is None or self.host == b.host)
                and (self.operation == AclOperation.ANY or self.operation == b.operation)
                and (self.permission_type == AclPermissionType.ANY or self.permission_type == b.permission_type))


def filter_of(resource_type: int, resource_name: str | None, pattern_type: int, principal: str | None,
              host: str | None, operation: int, permission_type: int) -> AclFilter | str:
    """A filter from wire codes, or the INVALID_REQUEST message for an unknown code."""
    enums = _codes(resource_type, pattern_type, operation, permission_type)
    if isinstance(enums, str):
        return enums
    rtype, pattern, op, permission = enums
    return AclFilter(rtype, resource_name, pattern, principal, host, op, permission)


def filter_error(f: AclFilter) -> str | None:
    """Kafka's AclControlManager.validateFilter: a filter with an UNKNOWN part is refused."""
    if f.resource_type == ResourceType.UNKNOWN or f.pattern_type == PatternType.UNKNOWN:
        return "Unknown patternFilter."
    if f.operation == AclOperation.UNKNOWN or f.permission_type == AclPermissionType.UNKNOWN:
        return "Unknown entryFilter."
    return None


def from_record(r: AccessControlEntry) -> AclBinding | None:
    """The binding an AccessControlEntry record holds; None for a code this build does not know
    (replay keeps it, no decision uses it)."""
    binding = binding_of(r.resource_type, r.resource_name, r.pattern_type, r.principal, r.host, r.operation,
                         r.permission_type)
    return binding if isinstance(binding, AclBinding) else None


def to_record(b: AclBinding, acl_id: str) -> AccessControlEntry:
    return AccessControlEntry(id=acl_id, resource_type=int(b.resource_type), resource_name=b.resource_name,
                              pattern_type=int(b.pattern_type), principal=b.principal, host=b.host,
                              operation=int(b.operation), permission_type=int(b.permission_type))


def image_bindings(image: MetadataImage) -> dict[str, AclBinding]:
    """The image's ACLs as bindings, by id (records with codes this build does not know left out)."""
    out = {}
    for acl_id, record in image.acls.by_id.items():
        binding = from_record(record)
        if binding is not None:
            out[acl_id] = binding
    return out


def describe(image: MetadataImage, flt: AclFilter) -> list[AclBinding]:
    """The ACLs a DescribeAcls filter matches, sorted as kafka-acls.sh lists them (by resource)."""
    found = [b for b in image_bindings(image).values() if flt.matches(b)]
    return sorted(found, key=lambda b: (b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host,
                                        b.operation, b.permission_type))


def to_json(b: AclBinding) -> dict[str, Any]:
    """The admin API's form of a binding: Kafka's enum names."""
    return {"resource_type": b.resource_type.name, "resource_name": b.resource_name,
            "pattern_type": b.pattern_type.name, "principal": b.principal, "host": b.host,
            "operation": b.operation.name, "permission_type": b.permission_type.name}
