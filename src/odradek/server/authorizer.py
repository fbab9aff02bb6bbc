"""The broker's ACL authorizer (issue 18): on when ``authorizer.class.name`` is set (any
value: Kafka operators name ``org.apache.kafka.metadata.authorizer.StandardAuthorizer``
or ``kafka.security.authorizer.AclAuthorizer``; there is one authorizer here), with
``super.users`` and ``allow.everyone.if.no.acl.found``.

The rule is ``security.acls`` (Kafka's); this module binds it to requests (the principal
and client address of their session; requests made inside the broker have none and are
allowed) and keeps the ACLs in ``acls.json`` in the data directory, written whole and
atomically on every change, as the SCRAM credentials are.
"""

from __future__ import annotations

import json
import logging
import os
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
from odradek.storage.checkpoint import write_atomically

log = logging.getLogger(__name__)

ACLS_FILE = "acls.json"


class Authorizer:
    def __init__(self, config: BrokerConfig, data_dir: str) -> None:
        super_users = [u.strip() for u in str(config["super.users"]).split(";") if u.strip()]
        self.path = os.path.join(data_dir, ACLS_FILE)
        stored: list[Acl] = []
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                stored = [_from_json(item) for item in json.load(f).get("acls", [])]
        self.acls = AclSet(stored, super_users=super_users,
                           allow_if_no_acl=config["allow.everyone.if.no.acl.found"])

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

    def create(self, acls: Iterable[Acl]) -> None:
        changed = False
        for acl in acls:
            if self.acls.add(acl):
                changed = True
                log.info("ACL added: %s", describe(acl))
        if changed:
            self._save()

    def delete(self, flt: AclFilter) -> list[Acl]:
        gone = self.acls.remove(flt)
        for acl in gone:
            log.info("ACL removed: %s", describe(acl))
        if gone:
            self._save()
        return gone

    def _save(self) -> None:
        data = {"version": 1, "acls": [_to_json(a) for a in self.acls.select(AclFilter())]}
        write_atomically(self.path, json.dumps(data, indent=1).encode())


def _to_json(acl: Acl) -> dict[str, Any]:
    return {"resource_type": acl.resource_type.name, "name": acl.resource_name,
            "pattern_type": acl.pattern_type.name, "principal": acl.principal,
            "host": acl.host, "operation": acl.operation.name,
            "permission": acl.permission.name}


def _from_json(item: dict[str, Any]) -> Acl:
    return Acl(ResourceType[item["resource_type"]], item["name"],
               PatternType[item["pattern_type"]], item["principal"], item["host"],
               Operation[item["operation"]], Permission[item["permission"]])
