"""Kafka's ACL model and authorization rule (odradek.security.acls), case by case as
Kafka's StandardAuthorizerTest states them: deny wins, implied DESCRIBE only from ALLOW,
prefixed and wildcard patterns, super users, allow.everyone.if.no.acl.found, and the
filters of DescribeAcls/DeleteAcls."""

from __future__ import annotations

import pytest

from odradek.security.acls import (
    Acl,
    AclFilter,
    AclSet,
    InvalidAcl,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

T, G, C, X = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
              ResourceType.TRANSACTIONAL_ID)
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
Op = Operation


def acl(rtype: ResourceType, name: str, op: Operation, perm: Permission = ALLOW, *,
        principal: str = "User:alice", host: str = "*", pattern: PatternType = LIT) -> Acl:
    return Acl(rtype, name, pattern, principal, host, op, perm)


def can(acls: AclSet, op: Operation, name: str = "orders", rtype: ResourceType = T, *,
        principal: str = "User:alice", host: str = "10.0.0.1") -> bool:
    return acls.allowed(principal, host, op, rtype, name)


def test_an_allow_acl_grants_its_operation_to_its_principal_only():
    acls = AclSet([acl(T, "orders", Op.READ)])
    assert can(acls, Op.READ)
    assert not can(acls, Op.WRITE)
    assert not can(acls, Op.READ, principal="User:bob")
    assert not can(acls, Op.READ, "payments")  # has no ACL: the default (deny) applies


def test_deny_wins_over_allow_whatever_the_order():
    for order in (1, -1):
        acls = AclSet([acl(T, "orders", Op.ALL), acl(T, "orders", Op.READ, DENY)][::order])
        assert not can(acls, Op.READ)
        assert can(acls, Op.WRITE)


def test_read_write_delete_alter_imply_describe_but_only_when_allowed():
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE):
        assert can(AclSet([acl(T, "orders", op)]), Op.DESCRIBE)
    assert not can(AclSet([acl(T, "orders", Op.CREATE)]), Op.DESCRIBE)
    assert can(AclSet([acl(T, "orders", Op.ALTER_CONFIGS)]), Op.DESCRIBE_CONFIGS)
    assert not can(AclSet([acl(T, "orders", Op.DESCRIBE_CONFIGS)]), Op.ALTER_CONFIGS)
    # A DENY of READ does not deny DESCRIBE (Kafka: implication is for ALLOW only).
    acls = AclSet([acl(T, "orders", Op.ALL), acl(T, "orders", Op.READ, DENY)])
    assert can(acls, Op.DESCRIBE)


def test_all_allows_and_denies_every_operation():
    assert all(can(AclSet([acl(G, "g", Op.ALL)]), op, "g", G)
               for op in (Op.READ, Op.DESCRIBE, Op.DELETE))
    acls = AclSet([acl(G, "g", Op.READ), acl(G, "g", Op.ALL, DENY)])
    assert not can(acls, Op.READ, "g", G)


def test_prefixed_acls_match_names_that_start_with_the_prefix():
    acls = AclSet([acl(T, "orders-", Op.WRITE, pattern=PRE)])
    assert can(acls, Op.WRITE, "orders-eu")
    assert can(acls, Op.WRITE, "orders-")
    assert not can(acls, Op.WRITE, "orders")
    assert not can(acls, Op.WRITE, "my-orders-eu")


def test_literal_acls_match_the_exact_name_and_the_wildcard_matches_all():
    acls = AclSet([acl(T, "orders", Op.READ)])
    assert not can(acls, Op.READ, "orders-eu")  # a literal is not a prefix
    wild = AclSet([acl(T, "*", Op.READ)])
    assert can(wild, Op.READ, "anything")
    assert not can(wild, Op.READ, "anything", G)  # another resource type


def test_a_prefixed_deny_beats_a_literal_allow():
    acls = AclSet([acl(T, "orders-eu", Op.READ), acl(T, "orders", Op.READ, DENY, pattern=PRE)])
    assert not can(acls, Op.READ, "orders-eu")


def test_wildcard_principal_and_host():
    acls = AclSet([acl(T, "orders", Op.READ, principal="User:*")])
    assert can(acls, Op.READ, principal="User:bob")
    by_host = AclSet([acl(T, "orders", Op.READ, host="10.0.0.1")])
    assert can(by_host, Op.READ, host="10.0.0.1")
    assert not can(by_host, Op.READ, host="10.0.0.2")
    denied_everyone = AclSet([acl(T, "orders", Op.ALL),
                              acl(T, "orders", Op.READ, DENY, principal="User:*")])
    assert not can(denied_everyone, Op.READ)


def test_super_users_bypass_every_acl():
    acls = AclSet([acl(T, "orders", Op.ALL, DENY, principal="User:admin")],
                  super_users=["User:admin"])
    assert can(acls, Op.READ, principal="User:admin")
    assert can(acls, Op.ALTER, "kafka-cluster", C, principal="User:admin")


def test_allow_everyone_if_no_acl_found_applies_to_resources_without_acls_only():
    acls = AclSet([acl(T, "orders", Op.READ, principal="User:bob")], allow_if_no_acl=True)
    assert can(acls, Op.WRITE, "payments")  # no ACL names it: allowed
    assert not can(acls, Op.WRITE, "orders")  # it has ACLs, none for alice: denied
    decision = acls.authorize("User:alice", "h", Op.WRITE, T, "orders")
    assert decision.reason == "no ALLOW ACL matched"


@pytest.mark.parametrize("bad", [
    acl(ResourceType.ANY, "x", Op.READ),
    acl(T, "x", Op.ANY),
    acl(T, "x", Op.READ, Permission.ANY),
    Acl(T, "x", PatternType.MATCH, "User:a", "*", Op.READ, ALLOW),
    acl(T, "", Op.READ),
    acl(T, "*", Op.READ, pattern=PRE),
    acl(C, "other-cluster", Op.ALTER),
    acl(T, "x", Op.READ, principal="alice"),
])
def test_create_refuses_what_kafka_refuses(bad: Acl):
    with pytest.raises(InvalidAcl):
        AclSet([bad])


def test_filters_select_and_delete_like_describe_and_delete_acls():
    acls = AclSet([
        acl(T, "orders", Op.READ),
        acl(T, "orders-", Op.WRITE, pattern=PRE),
        acl(T, "*", Op.DESCRIBE, principal="User:bob"),
        acl(G, "orders", Op.READ),
        acl(X, "tx-1", Op.WRITE, DENY),
    ])
    assert len(acls.select(AclFilter())) == 5
    assert len(acls.select(AclFilter(resource_type=T))) == 3
    # MATCH: every ACL that would apply to topic "orders-eu".
    match = acls.select(AclFilter(T, "orders-eu", PatternType.MATCH))
    assert {(a.resource_name, a.pattern_type) for a in match} == {("orders-", PRE),
                                                                    ("*", LIT)}
    # ANY pattern type: the exact name, any pattern.
    assert [a.resource_name for a in acls.select(AclFilter(T, "orders-"))] == ["orders-"]
    assert len(acls.select(AclFilter(principal="User:bob"))) == 1
    assert len(acls.select(AclFilter(permission=DENY))) == 1
    gone = acls.remove(AclFilter(resource_name="orders"))
    assert {a.resource_type for a in gone} == {T, G}
    assert len(acls) == 3
    assert not acls.add(acl(T, "*", Op.DESCRIBE, principal="User:bob"))  # already there
