"""What every handler module shares: the API table entry and response encoding."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.protocol.codec import Request, encode_response, response_schema
from odradek.protocol.messages import build
from odradek.security.acls import Operation, ResourceType

if TYPE_CHECKING:
    from odradek.server.broker import Broker
    from odradek.server.network.connection import Response


@dataclass(frozen=True, slots=True)
class Api:
    """One API this broker serves, at versions min..max, and its handler."""

    key: int
    name: str
    min_version: int
    max_version: int
    handle: Callable[[Broker, Request], Coroutine[Any, Any, Response]]
    # Optional: the same answer without a coroutine when it needs no wait (the response),
    # else an awaitable giving it. The connection calls it for a request that arrives
    # while nothing else is in progress, and answers at once (see server.network.connection).
    handle_now: Callable[[Broker, Request], Response | Awaitable[Response]] | None = None


CLUSTER = "kafka-cluster"  # the name of the one CLUSTER resource


def allowed(broker: Broker, request: Request, operation: Operation,
            resource_type: ResourceType, name: str) -> bool:
    """Whether the request's principal may do ``operation`` on the resource (always,
    without an authorizer)."""
    authorizer = broker.authorizer
    return authorizer is None or authorizer.allows(request, operation, resource_type, name)


# KIP-430: the AclOperation codes a resource type supports, reported as a bit field of
# those the principal may do when a client asks for authorized operations (Kafka's
# AclEntry.supportedOperations; all of them without an authorizer).
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (3, 4, 5, 6, 7, 8, 10, 11),  # READ, WRITE, CREATE, DELETE, ALTER,
    # DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
    ResourceType.GROUP: (3, 6, 8),  # READ, DELETE, DESCRIBE
    ResourceType.CLUSTER: (5, 7, 8, 9, 10, 11, 12),  # CREATE, ALTER, DESCRIBE,
    # CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE
}
NO_AUTHORIZED_OPERATIONS = -(2**31)  # the field's value when they were not asked for


def authorized_operations(broker: Broker, request: Request, resource_type: ResourceType,
                          name: str) -> int:
    """The bit field of the operations ``request``'s principal may do on a resource."""
    return sum(1 << op for op in SUPPORTED_OPERATIONS[resource_type]
               if allowed(broker, request, Operation(op), resource_type, name))


def throttle(request: Request, ms: int) -> int:
    """Note that ``request``'s client is to be throttled for ``ms`` (client quotas: the
    connection is muted that long once the response is sent); returns the throttle its
    response carries, the larger of this and one already noted (the request quota's)."""
    session = request.session
    if session is None:
        return 0
    if ms > session.throttle_ms:
        session.throttle_ms = ms
    return session.throttle_ms


def respond(request: Request, data: Mapping[str, Any]) -> bytes:
    """Encode a response for ``request`` from version-agnostic data (with the throttle
    time its client earned, where the response has one)."""
    session = request.session
    if session is not None and session.throttle_ms and "throttle_time" in data:
        data = {**data, "throttle_time": session.throttle_ms}
    cls = response_schema(request.api_key, request.api_version)
    return encode_response(request.api_key, request.api_version, request.correlation_id,
                           build(cls, data))
