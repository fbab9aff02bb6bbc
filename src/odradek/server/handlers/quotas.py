"""DescribeClientQuotas (48) and AlterClientQuotas (49), KIP-546, as Kafka answers them:
DESCRIBE_CONFIGS resp. ALTER_CONFIGS on the cluster (else CLUSTER_AUTHORIZATION_FAILED),
INVALID_REQUEST with Kafka's reason for an entity, key, value or filter it refuses. An
alteration applies the valid entities' changes in one write (``validate_only``: none) and
answers an error per refused entity."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.protocol.codec import Request
from odradek.security.acls import Operation, ResourceType
from odradek.security.quotas import (
    Entity,
    QuotaError,
    QuotaFilter,
    validate_entity,
    validate_value,
)
from odradek.server.handlers.base import (
    CLUSTER,
    Api,
    allowed,
    respond,
)
from odradek.server.security.documents import DocumentError

if TYPE_CHECKING:
    from odradek.server.broker import Broker

_DENIED = "Cluster authorization failed."


async def describe_client_quotas(broker: Broker, request: Request) -> bytes:
    body = request.body
    quotas = broker.quotas
    assert quotas is not None
    error, text, entries = 0, None, []
    if not allowed(broker, request, Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER):
        error, text = ErrorCode.cluster_authorization_failed, _DENIED
    else:
        try:
            flt = QuotaFilter.from_components(
                ((c.entity_type, c.match_type, c.match) for c in body.components),
                body.strict)
        except QuotaError as exc:
            error, text = ErrorCode.invalid_request, str(exc)
        else:
            entries = [{"entity": [{"entity_type": t, "entity_name": n} for t, n in e],
                        "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
                       for e, values in quotas.describe(flt)]
    return respond(request, {"throttle_time": 0, "error_code": error, "error_message": text,
                             "entries": entries if not error else None})


async def alter_client_quotas(broker: Broker, request: Request) -> bytes:
    body = request.body
    quotas = broker.quotas
    assert quotas is not None
    outcomes: list[tuple[Any, int, str | None]] = []  # (request entry, error, message)
    changes: list[tuple[Entity, dict[str, float | None]]] = []
    may = allowed(broker, request, Operation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER)
    for entry in body.entries:
        if not may:
            outcomes.append((entry, ErrorCode.cluster_authorization_failed, _DENIED))
            continue
        try:
            target = validate_entity((e.entity_type, e.entity_name) for e in entry.entity)
            ops: dict[str, float | None] = {}
            for op in entry.ops:
                if op.key in ops:
                    raise QuotaError(f"Duplicate quota key {op.key} not updating quota "
                                     "for entity")
                ops[op.key] = None if op.remove else validate_value(op.key, op.value)
        except QuotaError as exc:
            outcomes.append((entry, ErrorCode.invalid_request, str(exc)))
            continue
        changes.append((target, ops))
        outcomes.append((entry, 0, None))
    if changes and not body.validate_only:
        try:
            await quotas.alter(changes)
        except DocumentError as exc:
            outcomes = [(entry, code or ErrorCode.unknown_server_error, text or str(exc))
                        for entry, code, text in outcomes]
    return respond(request, {"throttle_time": 0, "entries": [
        {"error_code": code, "error_message": text,
         "entity": [{"entity_type": e.entity_type, "entity_name": e.entity_name}
                    for e in entry.entity]}
        for entry, code, text in outcomes]})


APIS = (
    Api(48, "DescribeClientQuotas", 0, 1, describe_client_quotas),
    Api(49, "AlterClientQuotas", 0, 1, alter_client_quotas),
)
