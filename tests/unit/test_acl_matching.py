"""security.acl and security.authorizer: Kafka's StandardAuthorizer rules, as tables, and the
indexed authorizer against a naive reading of the same rules (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from security.acl import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    binding_of,
    creation_error,
    filter_error,
    filter_of,
)
from security.authorizer import (
    MAX_CACHED_DECISIONS,
    Authorizer,
    AuthorizerConfigError,
    AuthorizerSettings,
    host_address,
    implies,
    parse_super_users,
)

Op, Res, Pat, Perm = AclOperation, ResourceType, PatternType, AclPermissionType
ALICE, BOB, ANON = "User:alice", "User:bob", "User:ANONYMOUS"
HOST = "10.0.0.1"


def acl(name: str, op: AclOperation, perm: AclPermissionType = Perm.ALLOW, *, who: str = ALICE,
        pattern: PatternType = Pat.LITERAL, host: str = "*", rtype: ResourceType = Res.TOPIC) -> AclBinding:
    return AclBinding(rtype, name, pattern, who, host, op, perm)


STRICT = AuthorizerSettings()
OPEN = AuthorizerSettings(allow_everyone_if_no_acl_found=True)

# (acls, principal, host, operation, topic, allowed)
CASES = [
    # no ACL on the resource: allow.everyone.if.no.acl.found=false denies
    ((), ALICE, HOST, Op.READ, "t", False),
    ((acl("t", Op.READ),), ALICE, HOST, Op.READ, "t", True),
    ((acl("t", Op.READ),), ALICE, HOST, Op.WRITE, "t", False),
    ((acl("t", Op.READ),), BOB, HOST, Op.READ, "t", False),
    ((acl("t", Op.READ),), ALICE, HOST, Op.READ, "u", False),
    # wildcard resource and principal
    ((acl("*", Op.WRITE),), ALICE, HOST, Op.WRITE, "anything", True),
    ((acl("t", Op.READ, who="User:*"),), BOB, HOST, Op.READ, "t", True),
    ((acl("t", Op.READ, who="User:*"),), "Group:x", HOST, Op.READ, "t", False),
    # prefixed (KIP-290)
    ((acl("pay", Op.READ, pattern=Pat.PREFIXED),), ALICE, HOST, Op.READ, "payments", True),
    ((acl("pay", Op.READ, pattern=Pat.PREFIXED),), ALICE, HOST, Op.READ, "pay", True),
    ((acl("pay", Op.READ, pattern=Pat.PREFIXED),), ALICE, HOST, Op.READ, "pa", False),
    ((acl("pay", Op.READ),), ALICE, HOST, Op.READ, "payments", False),  # LITERAL is not a prefix
    # DENY wins over ALLOW, wherever it comes from
    ((acl("t", Op.READ), acl("t", Op.READ, Perm.DENY)), ALICE, HOST, Op.READ, "t", False),
    ((acl("t", Op.ALL), acl("*", Op.READ, Perm.DENY)), ALICE, HOST, Op.READ, "t", False),
    ((acl("t", Op.READ), acl("t", Op.ALL, Perm.DENY, who="User:*")), ALICE, HOST, Op.READ, "t", False),
    ((acl("t", Op.READ), acl("t", Op.READ, Perm.DENY, pattern=Pat.PREFIXED)), ALICE, HOST, Op.READ, "t", False),
    ((acl("t", Op.READ), acl("t", Op.READ, Perm.DENY, who=BOB)), ALICE, HOST, Op.READ, "t", True),
    ((acl("t", Op.ALL), acl("t", Op.WRITE, Perm.DENY)), ALICE, HOST, Op.READ, "t", True),
    # implied operations: only through ALLOW
    ((acl("t", Op.READ),), ALICE, HOST, Op.DESCRIBE, "t", True),
    ((acl("t", Op.WRITE),), ALICE, HOST, Op.DESCRIBE, "t", True),
    ((acl("t", Op.DELETE),), ALICE, HOST, Op.DESCRIBE, "t", True),
    ((acl("t", Op.ALTER),), ALICE, HOST, Op.DESCRIBE, "t", True),
    ((acl("t", Op.CREATE),), ALICE, HOST, Op.DESCRIBE, "t", False),
    ((acl("t", Op.ALTER_CONFIGS),), ALICE, HOST, Op.DESCRIBE_CONFIGS, "t", True),
    ((acl("t", Op.DESCRIBE),), ALICE, HOST, Op.READ, "t", False),
    ((acl("t", Op.ALL), acl("t", Op.READ, Perm.DENY)), ALICE, HOST, Op.DESCRIBE, "t", True),
    # hosts
    ((acl("t", Op.READ, host=HOST),), ALICE, HOST, Op.READ, "t", True),
    ((acl("t", Op.READ, host="10.0.0.2"),), ALICE, HOST, Op.READ, "t", False),
    ((acl("t", Op.READ), acl("t", Op.READ, Perm.DENY, host="10.0.0.2")), ALICE, HOST, Op.READ, "t", True),
    # an ACL of another principal still makes the resource "have ACLs"
    ((acl("t", Op.READ, who=BOB),), ALICE, HOST, Op.READ, "t", False),
]


@pytest.mark.parametrize(("acls", "principal", "host", "operation", "topic", "allowed"), CASES)
def test_authorize(acls: tuple[AclBinding, ...], principal: str, host: str, operation: AclOperation,
                   topic: str, allowed: bool) -> None:
    assert Authorizer(STRICT, acls).authorize(principal, host, operation, Res.TOPIC, topic) is allowed
    assert naive(STRICT, acls, principal, host, operation, Res.TOPIC, topic) is allowed


def test_allow_everyone_if_no_acl_found_only_where_there_is_none() -> None:
    authorizer = Authorizer(OPEN, (acl("t", Op.READ, who=BOB),))
    assert authorizer.authorize(ALICE, HOST, Op.WRITE, Res.TOPIC, "other")
    assert not authorizer.authorize(ALICE, HOST, Op.WRITE, Res.TOPIC, "t")
    assert authorizer.authorize(ALICE, HOST, Op.READ, Res.GROUP, "t")  # the ACL is a topic's


def test_resource_types_are_apart() -> None:
    authorizer = Authorizer(STRICT, (acl("g", Op.READ, rtype=Res.GROUP),))
    assert authorizer.authorize(ALICE, HOST, Op.READ, Res.GROUP, "g")
    assert not authorizer.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "g")


def test_super_users_bypass_every_deny() -> None:
    settings_ = AuthorizerSettings(super_users=parse_super_users("User:root; User:ANONYMOUS"))
    authorizer = Authorizer(settings_, (acl("*", Op.ALL, Perm.DENY, who="User:*"),))
    assert authorizer.authorize(ANON, HOST, Op.WRITE, Res.TOPIC, "t")
    assert authorizer.authorize("User:root", HOST, Op.ALTER, Res.CLUSTER, "kafka-cluster")
    assert not authorizer.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")


def test_cache_is_bounded_and_answers_alike() -> None:
    authorizer = Authorizer(STRICT, (acl("t", Op.READ),))
    for i in range(MAX_CACHED_DECISIONS + 5):
        assert not authorizer.authorize(f"User:u{i}", HOST, Op.READ, Res.TOPIC, "t")
    assert len(authorizer._cache) <= MAX_CACHED_DECISIONS
    assert authorizer.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")
    assert authorizer.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")  # from the cache


def test_authorized_operations() -> None:
    authorizer = Authorizer(STRICT, (acl("t", Op.WRITE), acl("t", Op.DELETE, Perm.DENY)))
    ops = authorizer.authorized_operations(ALICE, HOST, Res.TOPIC, "t", (Op.READ, Op.WRITE, Op.DESCRIBE, Op.DELETE))
    assert ops == {Op.WRITE, Op.DESCRIBE}


@pytest.mark.parametrize(("acls", "allowed"), [
    ((), False),
    ((acl("t", Op.WRITE),), True),
    ((acl("p", Op.WRITE, pattern=Pat.PREFIXED),), True),
    ((acl("t", Op.WRITE), acl("*", Op.WRITE, Perm.DENY)), False),
    ((acl("t", Op.WRITE), acl("t", Op.ALL, Perm.DENY)), False),
    ((acl("t", Op.WRITE), acl("u", Op.WRITE, Perm.DENY)), True),
    ((acl("tx", Op.WRITE), acl("t", Op.WRITE, Perm.DENY, pattern=Pat.PREFIXED)), False),
    ((acl("t", Op.READ),), False),
])
def test_authorize_any(acls: tuple[AclBinding, ...], allowed: bool) -> None:
    assert Authorizer(STRICT, acls).authorize_any(ALICE, HOST, Op.WRITE, Res.TOPIC) is allowed


@pytest.mark.parametrize(("acls", "allowed"), [
    ((), True),  # no ACL at all: everyone
    ((acl("t", Op.READ),), True),  # some other topic has none
    ((acl("*", Op.READ),), False),  # every topic has one, and none allows WRITE
    ((acl("*", Op.READ), acl("t", Op.WRITE)), True),
])
def test_authorize_any_with_allow_everyone_if_no_acl_found(acls: tuple[AclBinding, ...], allowed: bool) -> None:
    assert Authorizer(OPEN, acls).authorize_any(ALICE, HOST, Op.WRITE, Res.TOPIC) is allowed


def test_implies() -> None:
    for op in Op:
        assert implies(Op.ALL, op)
        assert implies(op, op)
    assert {op for op in Op if implies(op, Op.DESCRIBE)} == {Op.ALL, Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE,
                                                             Op.ALTER}
    assert {op for op in Op if implies(op, Op.DESCRIBE_CONFIGS)} == {Op.ALL, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
    assert {op for op in Op if implies(op, Op.READ)} == {Op.ALL, Op.READ}


def test_settings() -> None:
    assert AuthorizerSettings.parse("", super_users="User:a", allow_everyone_if_no_acl_found=False) is None
    assert AuthorizerSettings.parse(None, super_users=None, allow_everyone_if_no_acl_found=True) is None
    for name in ("org.apache.kafka.metadata.authorizer.StandardAuthorizer", "standard"):
        parsed = AuthorizerSettings.parse(name, super_users="User:a;User:b", allow_everyone_if_no_acl_found=True)
        assert parsed == AuthorizerSettings(frozenset({"User:a", "User:b"}), True)
    with pytest.raises(AuthorizerConfigError, match="authorizer.class.name"):
        AuthorizerSettings.parse("kafka.security.authorizer.AclAuthorizer", super_users=None,
                                 allow_everyone_if_no_acl_found=False)
    with pytest.raises(AuthorizerConfigError, match="super.users"):
        parse_super_users("admin")
    assert host_address("/127.0.0.1") == "127.0.0.1" and host_address("::1") == "::1"


# ---- bindings and filters (CreateAcls / DescribeAcls / DeleteAcls) ------------------------

@pytest.mark.parametrize(("binding", "error"), [
    (acl("t", Op.READ), None),
    (acl("p", Op.READ, pattern=Pat.PREFIXED), None),
    (acl("kafka-cluster", Op.ALTER, rtype=Res.CLUSTER), None),
    (acl("t", Op.READ, pattern=Pat.MATCH), "Invalid patternType MATCH"),
    (acl("t", Op.READ, pattern=Pat.ANY), "Invalid patternType ANY"),
    (acl("t", Op.READ, rtype=Res.ANY), "Invalid resourceType ANY"),
    (acl("t", Op.ANY), "Invalid operation ANY"),
    (acl("t", Op.UNKNOWN), "Invalid operation UNKNOWN"),
    (acl("t", Op.READ, Perm.ANY), "Invalid permissionType ANY"),
    (acl("c", Op.ALTER, rtype=Res.CLUSTER), "The only valid name for the CLUSTER resource is kafka-cluster"),
    (acl("", Op.READ), "Invalid empty resource name specified"),
    (acl("t", Op.READ, who="alice"), "Could not parse principal"),
    (acl("t", Op.READ, host=""), "Invalid empty host specified"),
])
def test_creation_error(binding: AclBinding, error: str | None) -> None:
    found = creation_error(binding)
    assert found == error if error is None else (found is not None and found.startswith(error))


def test_unknown_codes() -> None:
    assert binding_of(2, "t", 3, ALICE, "*", 99, 3) == "Invalid operation 99"
    assert binding_of(2, "t", 9, ALICE, "*", 3, 3) == "Invalid patternType 9"
    assert filter_of(42, None, 1, None, None, 1, 1) == "Invalid resourceType 42"
    assert binding_of(2, "t", 3, ALICE, "*", 3, 3) == acl("t", Op.READ)


LIT_T, LIT_STAR, PRE_T = acl("t", Op.READ), acl("*", Op.READ), acl("t", Op.READ, pattern=Pat.PREFIXED)


@pytest.mark.parametrize(("flt", "matched"), [
    (AclFilter(), {LIT_T, LIT_STAR, PRE_T}),
    (AclFilter(resource_name="t"), {LIT_T, PRE_T}),  # ANY: the name exactly, any pattern
    (AclFilter(resource_name="t", pattern_type=Pat.LITERAL), {LIT_T}),
    (AclFilter(resource_name="t", pattern_type=Pat.PREFIXED), {PRE_T}),
    (AclFilter(resource_name="topic", pattern_type=Pat.MATCH), {LIT_STAR, PRE_T}),
    (AclFilter(resource_name="t", pattern_type=Pat.MATCH), {LIT_T, LIT_STAR, PRE_T}),
    (AclFilter(pattern_type=Pat.PREFIXED), {PRE_T}),
    (AclFilter(resource_type=Res.GROUP), set()),
    (AclFilter(principal=BOB), set()),
    (AclFilter(principal=ALICE, host="*", operation=Op.READ, permission_type=Perm.ALLOW), {LIT_T, LIT_STAR, PRE_T}),
    (AclFilter(operation=Op.WRITE), set()),
    (AclFilter(permission_type=Perm.DENY), set()),
])
def test_filter_matches(flt: AclFilter, matched: set[AclBinding]) -> None:
    assert {b for b in (LIT_T, LIT_STAR, PRE_T) if flt.matches(b)} == matched


@pytest.mark.parametrize(("flt", "error"), [
    (AclFilter(), None),
    (AclFilter(resource_type=Res.UNKNOWN), "Unknown patternFilter."),
    (AclFilter(pattern_type=Pat.UNKNOWN), "Unknown patternFilter."),
    (AclFilter(operation=Op.UNKNOWN), "Unknown entryFilter."),
    (AclFilter(permission_type=Perm.UNKNOWN), "Unknown entryFilter."),
])
def test_filter_error(flt: AclFilter, error: str | None) -> None:
    assert filter_error(flt) == error


# ---- the indexed authorizer against a naive reading of the rules --------------------------

def naive(settings_: AuthorizerSettings, acls: tuple[AclBinding, ...], principal: str, host: str,
          operation: AclOperation, rtype: ResourceType, name: str) -> bool:
    if principal in settings_.super_users:
        return True

    def on_resource(a: AclBinding) -> bool:
        if a.resource_type != rtype:
            return False
        if a.pattern_type == Pat.LITERAL:
            return a.resource_name in (name, "*")
        return name.startswith(a.resource_name)

    relevant = [a for a in acls if on_resource(a)]
    if not relevant:
        return settings_.allow_everyone_if_no_acl_found
    mine = [a for a in relevant if a.principal in (principal, principal.split(":")[0] + ":*")
            and a.host in ("*", host)]
    if any(a.permission_type == Perm.DENY and a.operation in (Op.ALL, operation) for a in mine):
        return False
    implied = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}, Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS}}
    return any(a.permission_type == Perm.ALLOW
               and (a.operation in (Op.ALL, operation) or a.operation in implied.get(operation, ()))
               for a in mine)


NAMES = st.sampled_from(["*", "a", "ab", "abc", "b", "ba"])
REAL_OPS = [op for op in Op if op not in (Op.UNKNOWN, Op.ANY)]
BINDINGS = st.builds(AclBinding, st.sampled_from([Res.TOPIC, Res.GROUP]), NAMES,
                     st.sampled_from([Pat.LITERAL, Pat.PREFIXED]), st.sampled_from([ALICE, BOB, "User:*"]),
                     st.sampled_from(["*", HOST, "10.0.0.2"]), st.sampled_from(REAL_OPS),
                     st.sampled_from([Perm.ALLOW, Perm.DENY]))


@settings(max_examples=300, deadline=None)
@given(acls=st.lists(BINDINGS, max_size=8).map(tuple), principal=st.sampled_from([ALICE, BOB]),
       host=st.sampled_from([HOST, "10.0.0.2"]), operation=st.sampled_from(REAL_OPS),
       rtype=st.sampled_from([Res.TOPIC, Res.GROUP]), name=NAMES, allow_everyone=st.booleans())
def test_authorizer_agrees_with_the_rules(acls: tuple[AclBinding, ...], principal: str, host: str,
                                          operation: AclOperation, rtype: ResourceType, name: str,
                                          allow_everyone: bool) -> None:
    settings_ = AuthorizerSettings(allow_everyone_if_no_acl_found=allow_everyone)
    authorizer = Authorizer(settings_, acls)
    expected = naive(settings_, acls, principal, host, operation, rtype, name)
    assert authorizer.authorize(principal, host, operation, rtype, name) is expected
    assert authorizer.authorize(principal, host, operation, rtype, name) is expected  # cached
