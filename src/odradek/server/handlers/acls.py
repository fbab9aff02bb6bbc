"""CreateAcls, DescribeAcls and DeleteAcls (KIP-140; prefixed patterns KIP-290), as
Kafka answers them: SECURITY_DISABLED without an authorizer, CLUSTER_AUTHORIZATION_FAILED
without ALTER (create, delete) or DESCRIBE (describe) on the cluster, INVALID_REQUEST with
Kafka's reason for an ACL or filter it refuses."""

from __future__ import annotations

from itertools import groupby
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.protocol.codec import Request
from odradek.security.acls import (
    Acl,
    AclFilter,
    InvalidAcl,
    Operation,
    PatternType,
    Permission,
    ResourceType,
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

_DISABLED = "No Authorizer is configured on the broker"
_DENIED = "Cluster authorization failed."


def _refusal(broker: Broker, request: Request, operation: Operation) -> tuple[int, str] | None:
    if broker.authorizer is None:
        return ErrorCode.security_disabled, _DISABLED
    if not allowed(broker, request, operation, ResourceType.CLUSTER, CLUSTER):
        return ErrorCode.cluster_authorization_failed, _DENIED
    return None


def _filter(body: Any) -> AclFilter:
    return AclFilter(ResourceType(body.resource_type_filter), body.resource_name_filter,
                     PatternType(body.pattern_type_filter), body.principal_filter,
                     body.host_filter, Operation(body.operation),
                     Permission(body.permission_type))


async def describe_acls(broker: Broker, request: Request) -> bytes:
    body = request.body
    refused = _refusal(broker, request, Operation.DESCRIBE)
    resources: list[dict[str, Any]] = []
    if refused is None:
        assert broker.authorizer is not None
        try:
            flt = _filter(body)
            flt.validate()
        except (ValueError, InvalidAcl) as exc:
            refused = ErrorCode.invalid_request, str(exc)
        else:
            found = broker.authorizer.acls.select(flt)
            for (rtype, name, pattern), acls in groupby(
                    found, key=lambda a: (a.resource_type, a.resource_name, a.pattern_type)):
                resources.append({
                    "resource_type": int(rtype), "resource_name": name,
                    "pattern_type": int(pattern),
                    "acls": [{"principal": a.principal, "host": a.host,
                              "operation": int(a.operation),
                              "permission_type": int(a.permission)} for a in acls]})
    code, message = refused or (0, None)
    return respond(request, {"throttle_time": 0, "error_code": code, "error_message": message,
                             "resources": resources})


async def create_acls(broker: Broker, request: Request) -> bytes:
    refused = _refusal(broker, request, Operation.ALTER)
    results = []
    new: list[Acl] = []
    for creation in request.body.creations:
        if refused is not None:
            results.append({"error_code": refused[0], "error_message": refused[1]})
            continue
        try:
            acl = Acl(ResourceType(creation.resource_type), creation.resource_name,
                      PatternType(creation.resource_pattern_type),
                      creation.principal, creation.host, Operation(creation.operation),
                      Permission(creation.permission_type))
            acl.validate()
        except (ValueError, InvalidAcl) as exc:
            results.append({"error_code": ErrorCode.invalid_request, "error_message": str(exc)})
            continue
        new.append(acl)
        results.append({"error_code": 0, "error_message": None})
    if new:
        assert broker.authorizer is not None
        try:
            await broker.authorizer.create(new)
        except DocumentError as exc:  # nothing was saved
            results = [r if r["error_code"] else
                       {"error_code": ErrorCode.unknown_server_error, "error_message": str(exc)}
                       for r in results]
    return respond(request, {"throttle_time": 0, "results": results})


async def delete_acls(broker: Broker, request: Request) -> bytes:
    refused = _refusal(broker, request, Operation.ALTER)
    results = []
    for body in request.body.filters:
        if refused is not None:
            results.append({"error_code": refused[0], "error_message": refused[1],
                            "matching_acls": []})
            continue
        assert broker.authorizer is not None
        try:
            flt = _filter(body)
            flt.validate()
        except (ValueError, InvalidAcl) as exc:
            results.append({"error_code": ErrorCode.invalid_request, "error_message": str(exc),
                            "matching_acls": []})
            continue
        try:
            gone = await broker.authorizer.delete(flt)
        except DocumentError as exc:  # nothing was removed
            results.append({"error_code": ErrorCode.unknown_server_error, "error_message": str(exc),
                            "matching_acls": []})
            continue
        results.append({"error_code": 0, "error_message": None, "matching_acls": [
            {"error_code": 0, "error_message": None, "resource_type": int(a.resource_type),
             "resource_name": a.resource_name, "pattern_type": int(a.pattern_type),
             "principal": a.principal, "host": a.host, "operation": int(a.operation),
             "permission_type": int(a.permission)} for a in gone]})
    return respond(request, {"throttle_time": 0, "filter_results": results})


APIS = (
    # v1+: v0 (no pattern types) was removed in Kafka 4, as kio's schemas were.
    Api(29, "DescribeAcls", 1, 3, describe_acls),
    Api(30, "CreateAcls", 1, 3, create_acls),
    Api(31, "DeleteAcls", 1, 3, delete_acls),
)
