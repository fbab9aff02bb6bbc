"""The broker's ACL authorizer (issue 18): on when ``authorizer.class.name`` is set (any
value: Kafka operators name ``org.apache.kafka.metadata.authorizer.StandardAuthorizer``
or ``kafka.security.authorizer.AclAuthorizer``; there is one authorizer here), with
``super.users`` and ``allow.everyone.if.no.acl.found``.

The rule is ``security.acls`` (Kafka's); this module binds it to requests (the principal
and client address of their session; requests made inside the broker have none and are
allowed) and keeps the ACLs in the ``acls`` document (server.security.documents: ``acls.json`` in
the data directory, or the cluster's znode, which every broker follows).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from odradek.security.acls import (
    Acl,
    AclFilter,
    AclSet,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    describe,
)
from odradek.server.config import BrokerConfig
from odradek.server.security.documents import Document

log = logging.getLogger(__name__)

DOCUMENT = "acls"


class Authorizer:
    def __init__(self, config: BrokerConfig, document: Document) -> None:
        super_users = [u.strip() for u in str(config["super.users"]).split(";") if u.strip()]
        self.document = document
        self.acls = AclSet([], super_users=super_users,
                           allow_if_no_acl=config["allow.everyone.if.no.acl.found"])
        document.on_change = self._load
        self._load(document.value)

    def _load(self, value: dict[str, Any]) -> None:
        self.acls.replace(_from_json(item) for item in value.get("acls", []))

    def allows(self, request: Any, operation: Operation, resource_type: ResourceType,
               name: str) -> bool:
        session = request.session
        if session is None:
            return True  # made inside the broker
        decision = self.acls.authorize(session.principal, session.client_host, operation,
                                       resource_type, name)
        if not decision.allowed and log.isEnabledFor(logging.DEBUG):
            log.debug("%s from %s denied %s on %s:%s (%s)", session.principal,
                      session.client_host, operation.name, resource_type.name, name,
                      decision.reason)
        return decision.allowed

    def allows_any(self, request: Any, operation: Operation,
                   resource_type: ResourceType) -> bool:
        session = request.session
        return session is None or self.acls.allows_any(
            session.principal, session.client_host, operation, resource_type)

    async def create(self, acls: Iterable[Acl]) -> None:
        """Add ACLs (those already there are left as they are), in one save."""
        added: list[Acl] = []

        def change(value: dict[str, Any]) -> dict[str, Any]:
            current = AclSet(_from_json(item) for item in value.get("acls", []))
            added[:] = [acl for acl in acls if current.add(acl)]
            return _document(current)

        await self.document.update(change)
        for acl in added:
            log.info("ACL added: %s", describe(acl))

    async def delete(self, flt: AclFilter) -> list[Acl]:
        """Remove the ACLs matching ``flt``, in one save; returns them."""
        gone: list[Acl] = []

        def change(value: dict[str, Any]) -> dict[str, Any]:
            current = AclSet(_from_json(item) for item in value.get("acls", []))
            gone[:] = current.remove(flt)
            return _document(current)

        if self.acls.select(flt):
            await self.document.update(change)
        for acl in gone:
            log.info("ACL removed: %s", describe(acl))
        return gone


def _document(acls: AclSet) -> dict[str, Any]:
    return {"version": 1, "acls": [_to_json(a) for a in acls.select(AclFilter())]}


def _to_json(acl: Acl) -> dict[str, Any]:
    return {"resource_type": acl.resource_type.name, "name": acl.resource_name,
            "pattern_type": acl.pattern_type.name, "principal": acl.principal,
            "host": acl.host, "operation": acl.operation.name,
            "permission": acl.permission.name}


def _from_json(item: dict[str, Any]) -> Acl:
    return Acl(ResourceType[item["resource_type"]], item["name"],
               PatternType[item["pattern_type"]], item["principal"], item["host"],
               Operation[item["operation"]], Permission[item["permission"]])
