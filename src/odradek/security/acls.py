"""Kafka's ACL model and its authorization rule, with no I/O: what an ACL is, which ACLs
match a request for (principal, host, operation, resource), and which match a filter of
DescribeAcls/DeleteAcls.

The rule is Kafka's ``StandardAuthorizer`` (and ``AclAuthorizer`` before it):

- a super user may do anything;
- a DENY ACL that matches the principal (or ``User:*``), the host (or ``*``) and the
  operation (or ALL) wins over every ALLOW;
- otherwise an ALLOW ACL for the operation, for ALL, or for an operation that implies it
  (DESCRIBE is implied by READ, WRITE, DELETE and ALTER; DESCRIBE_CONFIGS by
  ALTER_CONFIGS) allows;
- a resource with no ACL at all that could match it is allowed only when
  ``allow.everyone.if.no.acl.found`` is true.

An ACL's resource pattern matches a resource when it is LITERAL with the same name or
the wildcard ``*``, or PREFIXED with a prefix of the name. The numeric codes are Kafka's
(``org.apache.kafka.common.acl`` / ``resource``), as they travel in CreateAcls et al.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

WILDCARD = "*"  # a LITERAL resource name, a principal's name, a host: matches any
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only: any pattern type, name compared exactly
    MATCH = 2  # filters only: every pattern that would match the name
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# An ALLOW of any of these grants the key too (Kafka's AclEntry implied operations).
IMPLIED_BY = {
    Operation.DESCRIBE: frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE,
                                   Operation.DELETE, Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS,
                                           Operation.ALTER_CONFIGS}),
}


class InvalidAcl(ValueError):
    """An ACL CreateAcls must refuse (Kafka: INVALID_REQUEST with this message)."""


@dataclass(frozen=True, slots=True)
class Acl:
    """One ACL binding: a resource pattern and an access control entry."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str  # "User:alice" or "User:*"
    host: str  # "*" or an address
    operation: Operation
    permission: Permission

    def validate(self) -> None:
        """Refuse what Kafka's CreateAcls refuses."""
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise InvalidAcl(f"invalid resource type {self.resource_type.name}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAcl(f"invalid pattern type {self.pattern_type.name}: only "
                             "LITERAL and PREFIXED ACLs can be created")
        if self.operation in (Operation.ANY, Operation.UNKNOWN):
            raise InvalidAcl(f"invalid operation {self.operation.name}")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise InvalidAcl(f"invalid permission type {self.permission.name}")
        if not self.resource_name:
            raise InvalidAcl("the resource name must not be empty")
        if self.resource_type is ResourceType.CLUSTER and (
                self.resource_name != CLUSTER_NAME
                or self.pattern_type is not PatternType.LITERAL):
            raise InvalidAcl(f"the CLUSTER resource is the LITERAL {CLUSTER_NAME!r}")
        if (self.pattern_type is PatternType.PREFIXED and self.resource_name == WILDCARD):
            raise InvalidAcl("a PREFIXED pattern cannot be the wildcard '*'")
        kind, sep, name = self.principal.partition(":")
        if not sep or not kind or not name:
            raise InvalidAcl(f"the principal must be TYPE:NAME, got {self.principal!r}")
        if not self.host:
            raise InvalidAcl("the host must not be empty ('*' for any)")

    def pattern_matches(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this ACL's resource pattern covers the resource ``name``."""
        if self.resource_type is not resource_type:
            return False
        if self.pattern_type is PatternType.LITERAL:
            return self.resource_name == name or self.resource_name == WILDCARD
        return self.pattern_type is PatternType.PREFIXED and name.startswith(
            self.resource_name)


@dataclass(frozen=True, slots=True)
class AclFilter:
    """What DescribeAcls and DeleteAcls select: None (or ANY) fields match everything."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def validate(self) -> None:
        for field, value in (("resource type", self.resource_type),
                             ("pattern type", self.pattern_type),
                             ("operation", self.operation),
                             ("permission type", self.permission)):
            if value == 0:  # UNKNOWN in every enum
                raise InvalidAcl(f"the filter's {field} is UNKNOWN")

    def matches(self, acl: Acl) -> bool:
        if self.resource_type is not ResourceType.ANY and acl.resource_type is not (
                self.resource_type):
            return False
        if not self._pattern_matches(acl):
            return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation is not Operation.ANY and acl.operation is not self.operation:
            return False
        return self.permission is Permission.ANY or acl.permission is self.permission

    def _pattern_matches(self, acl: Acl) -> bool:
        pt, name = self.pattern_type, self.resource_name
        if pt is PatternType.MATCH:
            if name is None:
                return True
            # Every ACL that would apply to a resource of that name.
            if acl.pattern_type is PatternType.LITERAL:
                return acl.resource_name in (name, WILDCARD)
            return name.startswith(acl.resource_name)
        if pt is not PatternType.ANY and acl.pattern_type is not pt:
            return False
        return name is None or acl.resource_name == name


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str  # for the authorizer's log: "super user", "denied by ACL ...", ...


class AclSet:
    """The broker's ACLs, indexed by resource type, and Kafka's authorization rule.

    ``super_users``: principals (``User:admin``) allowed everything;
    ``allow_if_no_acl``: ``allow.everyone.if.no.acl.found``."""

    def __init__(self, acls: Iterable[Acl] = (), *, super_users: Iterable[str] = (),
                 allow_if_no_acl: bool = False) -> None:
        self._by_type: dict[ResourceType, set[Acl]] = {}
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        for acl in acls:
            self.add(acl)

    # --- contents -------------------------------------------------------------------

    def __iter__(self) -> Iterator[Acl]:
        for acls in self._by_type.values():
            yield from acls

    def __len__(self) -> int:
        return sum(len(acls) for acls in self._by_type.values())

    def add(self, acl: Acl) -> bool:
        """Add one ACL (validated); False if it was there already."""
        acl.validate()
        bucket = self._by_type.setdefault(acl.resource_type, set())
        if acl in bucket:
            return False
        bucket.add(acl)
        return True

    def replace(self, acls: Iterable[Acl]) -> None:
        """Make the set exactly ``acls`` (swapped in whole: a check never sees half)."""
        fresh = AclSet(acls)
        self._by_type = fresh._by_type

    def select(self, flt: AclFilter) -> list[Acl]:
        return sorted((acl for acl in self if flt.matches(acl)), key=_order)

    def remove(self, flt: AclFilter) -> list[Acl]:
        """Remove and return every ACL the filter matches."""
        gone = self.select(flt)
        for acl in gone:
            self._by_type[acl.resource_type].discard(acl)
        return gone

    # --- the rule -------------------------------------------------------------------

    def authorize(self, principal: str, host: str, operation: Operation,
                  resource_type: ResourceType, name: str) -> Decision:
        if principal in self.super_users:
            return Decision(True, "super user")
        matching = [acl for acl in self._by_type.get(resource_type, ())
                    if acl.pattern_matches(resource_type, name)]
        if not matching:
            return Decision(self.allow_if_no_acl,
                            "no ACL for the resource; allow.everyone.if.no.acl.found="
                            f"{str(self.allow_if_no_acl).lower()}")
        who = (principal, WILDCARD_PRINCIPAL)
        where = (host, WILDCARD)
        applies = [acl for acl in matching if acl.principal in who and acl.host in where]
        for acl in applies:
            if acl.permission is Permission.DENY and acl.operation in (operation,
                                                                         Operation.ALL):
                return Decision(False, f"denied by {describe(acl)}")
        granting = IMPLIED_BY.get(operation, frozenset({operation}))
        for acl in applies:
            if acl.permission is Permission.ALLOW and (acl.operation is Operation.ALL
                                                       or acl.operation in granting):
                return Decision(True, f"allowed by {describe(acl)}")
        return Decision(False, "no ALLOW ACL matched")

    def allows_any(self, principal: str, host: str, operation: Operation,
                   resource_type: ResourceType) -> bool:
        """Whether the principal may ``operation`` some resource of the type (Kafka's
        authorizeByResourceType, as InitProducerId asks "WRITE on any topic"): a super
        user, or an ALLOW ACL for it that no DENY of the wildcard resource overrides;
        with no ACL of that type at all, allow.everyone.if.no.acl.found decides."""
        if principal in self.super_users:
            return True
        acls = self._by_type.get(resource_type, ())
        if not acls:
            return self.allow_if_no_acl
        who, where = (principal, WILDCARD_PRINCIPAL), (host, WILDCARD)
        applies = [a for a in acls if a.principal in who and a.host in where
                   and a.operation in (operation, Operation.ALL)]
        if any(a.permission is Permission.DENY and a.pattern_type is PatternType.LITERAL
               and a.resource_name == WILDCARD for a in applies):
            return False
        return any(a.permission is Permission.ALLOW for a in applies)

    def allowed(self, principal: str, host: str, operation: Operation,
                resource_type: ResourceType, name: str) -> bool:
        return self.authorize(principal, host, operation, resource_type, name).allowed


def _order(acl: Acl) -> tuple[int, str, int, str, str, int, int]:
    return (acl.resource_type, acl.resource_name, acl.pattern_type, acl.principal, acl.host,
            acl.operation, acl.permission)


def describe(acl: Acl) -> str:
    """One line as kafka-acls.sh prints an ACL."""
    return (f"(principal={acl.principal}, host={acl.host}, operation={acl.operation.name}, "
            f"permissionType={acl.permission.name}) on {acl.resource_type.name}:"
            f"{acl.pattern_type.name}:{acl.resource_name}")
