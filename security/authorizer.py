"""Kafka's StandardAuthorizer decision rules (org.apache.kafka.metadata.authorizer), pure.

    settings = AuthorizerSettings.parse("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                        super_users="User:admin", allow_everyone_if_no_acl_found=False)
    authorizer = Authorizer(settings, bindings)      # one per set of ACLs: rebuilt when they change
    authorizer.authorize("User:ANONYMOUS", "127.0.0.1", AclOperation.WRITE, ResourceType.TOPIC, "orders")

The rules, as StandardAuthorizerData.authorize applies them:
- a super user (`super.users`) is allowed everything;
- the ACLs that apply to a resource are the LITERAL ones on its name, the LITERAL ones on `*`
  and the PREFIXED ones whose name starts it; when there are none at all, the answer is
  `allow.everyone.if.no.acl.found` (false by default);
- of those, an ACL applies to a request when its principal is the caller's or `<type>:*` and
  its host is the caller's address or `*`;
- a DENY on the operation (or ALL) wins over every ALLOW;
- an ALLOW on the operation, or on ALL, or one implying it, allows: DESCRIBE is implied by
  READ, WRITE, DELETE and ALTER, DESCRIBE_CONFIGS by ALTER_CONFIGS (allows only: a DENY of READ
  does not deny DESCRIBE);
- anything else is denied.

Decisions are cached per (principal, host, operation, resource); a new set of ACLs is a new
Authorizer, so the cache never outlives the ACLs it was computed from.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from security.acl import (
    WILDCARD,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    parse_principal,
)

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)
ANONYMOUS: Final = "User:ANONYMOUS"  # Kafka's KafkaPrincipal.ANONYMOUS: every unauthenticated connection
# authorizer.class.name values that enable this authorizer: Kafka's own class, and a short name
STANDARD_AUTHORIZER_NAMES: Final = frozenset({"org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                              "StandardAuthorizer", "standard"})
MAX_CACHED_DECISIONS: Final = 65_536  # entries per set of ACLs; cleared whole when full (no LRU bookkeeping)
MAX_SUPER_USERS: Final = 1_024  # entries of super.users
PROBE_RESOURCE_NAME: Final = "hardcode"  # Kafka's authorizeByResourceType's stand-in for "some resource"

_IMPLIES_DESCRIBE: Final = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER})
_IMPLIES_DESCRIBE_CONFIGS: Final = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


class AuthorizerConfigError(ValueError):
    """authorizer.class.name or super.users cannot be used; the message names the key."""


@dataclass(frozen=True, slots=True)
class AuthorizerSettings:
    """The StandardAuthorizer's configs."""

    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False

    @classmethod
    def parse(cls, class_name: str | None, *, super_users: str | None,
              allow_everyone_if_no_acl_found: bool) -> AuthorizerSettings | None:
        """None when `authorizer.class.name` is empty (no authorizer: the ACL APIs answer
        SECURITY_DISABLED and nothing is checked); AuthorizerConfigError for an unknown class
        or a malformed super user."""
        name = (class_name or "").strip()
        if not name:
            return None
        if name not in STANDARD_AUTHORIZER_NAMES:
            raise AuthorizerConfigError(
                f"authorizer.class.name={name!r}: tidelog has one authorizer, "
                f"org.apache.kafka.metadata.authorizer.StandardAuthorizer (or 'standard')")
        return cls(parse_super_users(super_users or ""), allow_everyone_if_no_acl_found)


def parse_super_users(text: str) -> frozenset[str]:
    """Kafka's super.users: principals separated by ';' ("User:admin;User:ops")."""
    users = [u.strip() for u in text.split(";") if u.strip()]
    if len(users) > MAX_SUPER_USERS:
        raise AuthorizerConfigError(f"super.users: at most {MAX_SUPER_USERS} principals, got {len(users)}")
    for user in users:
        if parse_principal(user) is None:
            raise AuthorizerConfigError(f"super.users: {user!r} is not a principal of the form Type:name")
    return frozenset(users)


def implies(acl_operation: AclOperation, operation: AclOperation) -> bool:
    """Whether an ALLOW of `acl_operation` allows `operation`."""
    if acl_operation == AclOperation.ALL or acl_operation == operation:
        return True
    if operation == AclOperation.DESCRIBE:
        return acl_operation in _IMPLIES_DESCRIBE
    if operation == AclOperation.DESCRIBE_CONFIGS:
        return acl_operation in _IMPLIES_DESCRIBE_CONFIGS
    return False


def host_address(client_host: str) -> str:
    """The address ACL hosts are compared with: Kafka's InetAddress.getHostAddress, without the
    "/" that ClientInfo.host shows."""
    return client_host[1:] if client_host.startswith("/") else client_host


@dataclass(slots=True)
class _ByType:
    literal: dict[str, list[AclBinding]] = field(default_factory=dict)
    prefixed: dict[str, list[AclBinding]] = field(default_factory=dict)
    longest_prefix: int = 0


class Authorizer:
    """The decisions of one set of ACLs (one metadata image's), cached."""

    def __init__(self, settings: AuthorizerSettings, bindings: Iterable[AclBinding]) -> None:
        self.settings = settings
        self._by_type: dict[ResourceType, _ByType] = {}
        for b in bindings:
            index = self._by_type.setdefault(b.resource_type, _ByType())
            if b.pattern_type == PatternType.PREFIXED:
                index.prefixed.setdefault(b.resource_name, []).append(b)
                index.longest_prefix = max(index.longest_prefix, len(b.resource_name))
            else:
                index.literal.setdefault(b.resource_name, []).append(b)
        self._cache: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}

    def applicable(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """Every ACL whose resource pattern covers this resource (any principal, host, operation)."""
        index = self._by_type.get(resource_type)
        if index is None:
            return []
        out = list(index.literal.get(name, ()))
        if name != WILDCARD:
            out.extend(index.literal.get(WILDCARD, ()))
        if index.prefixed:  # one lookup per prefix length: no scan of every prefixed ACL
            for end in range(1, min(len(name), index.longest_prefix) + 1):
                out.extend(index.prefixed.get(name[:end], ()))
        return out

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        """Whether `principal` connecting from `host` (an address) may do `operation` on the resource."""
        if principal in self.settings.super_users:
            return True
        key = (principal, host, operation, resource_type, name)
        decision = self._cache.get(key)
        if decision is None:
            decision = self._decide(principal, host, operation, resource_type, name)
            if len(self._cache) >= MAX_CACHED_DECISIONS:
                self._cache.clear()
            self._cache[key] = decision
        return decision

    def _decide(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                name: str) -> bool:
        acls = self.applicable(resource_type, name)
        if not acls:
            return self.settings.allow_everyone_if_no_acl_found
        parsed = parse_principal(principal)
        principals = {principal, f"{parsed[0]}:{WILDCARD}"} if parsed is not None else {principal}
        allowed = False
        for acl in acls:
            if acl.principal not in principals or (acl.host != WILDCARD and acl.host != host):
                continue
            if acl.permission_type == AclPermissionType.DENY:
                if acl.operation == AclOperation.ALL or acl.operation == operation:
                    return False  # DENY wins: no need to look further
            elif not allowed and implies(acl.operation, operation):
                allowed = True
        return allowed

    def authorize_any(self, principal: str, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """Kafka's authorizeByResourceType, simplified: whether some resource of the type allows
        the operation (an ALLOW for the caller on a pattern no DENY of the caller covers whole;
        a LITERAL `*` DENY denies every one). InitProducerId without a transactional id asks it
        of topics (any topic WRITE)."""
        if principal in self.settings.super_users:
            return True
        # Kafka's Authorizer.authorizeByResourceType first asks about a made-up name: with
        # allow.everyone.if.no.acl.found, a resource no ACL names is allowed, so some resource is
        if self._decide(principal, host, operation, resource_type, PROBE_RESOURCE_NAME):
            return True
        index = self._by_type.get(resource_type)
        if index is None:
            return False
        parsed = parse_principal(principal)
        principals = {principal, f"{parsed[0]}:{WILDCARD}"} if parsed is not None else {principal}

        def applies(acl: AclBinding) -> bool:
            return acl.principal in principals and acl.host in (WILDCARD, host)

        every = [acl for group in (*index.literal.values(), *index.prefixed.values()) for acl in group]
        denied = [acl for acl in every if applies(acl) and acl.permission_type == AclPermissionType.DENY
                  and acl.operation in (AclOperation.ALL, operation)]
        if any(acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD for acl in denied):
            return False
        for acl in every:
            if not applies(acl) or acl.permission_type != AclPermissionType.ALLOW \
                    or not implies(acl.operation, operation):
                continue
            if not any(_covers(deny, acl) for deny in denied):
                return True
        return False

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str,
                              supported: Iterable[AclOperation]) -> frozenset[AclOperation]:
        """The supported operations this caller may do on the resource (Kafka's authorizedOperations)."""
        return frozenset(op for op in supported if self.authorize(principal, host, op, resource_type, name))


def _covers(deny: AclBinding, allow: AclBinding) -> bool:
    """Whether a DENY's pattern covers every resource an ALLOW's pattern does."""
    if deny.pattern_type == PatternType.LITERAL:
        return deny.resource_name == WILDCARD or (allow.pattern_type == PatternType.LITERAL
                                                  and allow.resource_name == deny.resource_name)
    return allow.resource_name.startswith(deny.resource_name)
