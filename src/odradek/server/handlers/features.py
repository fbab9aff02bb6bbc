"""UpdateFeatures (57): finalize feature levels (``kafka-features.sh upgrade``,
``downgrade``; Admin.updateFeatures), all or none, as Kafka's controller does. ALTER on
the cluster. The rules of a change are server/features.py's; the levels are stored with
the cluster's metadata (``Topology.set_features``) and listed in ApiVersions.

Versions: v0 says "downgrade allowed" with a boolean (a safe downgrade), v1 an upgrade
type. A refusal is the request's error (the first refused update's), with no results, as
Kafka 4.4 answers every version; a success lists each feature (v2 has no list).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.protocol.codec import Request
from odradek.security.acls import Operation, ResourceType
from odradek.server.features import SAFE_DOWNGRADE, UPGRADE, check_update, updated
from odradek.server.handlers.base import CLUSTER, Api, allowed, respond
from odradek.server.metadata import TopicError

if TYPE_CHECKING:
    from odradek.server.broker import Broker


async def handle(broker: Broker, request: Request) -> bytes:
    body = request.body

    def answer(code: int, message: str | None, results: list[dict[str, Any]]) -> bytes:
        return respond(request, {"throttle_time": 0, "error_code": code,
                                 "error_message": message, "results": results})

    if not allowed(broker, request, Operation.ALTER, ResourceType.CLUSTER, CLUSTER):
        return answer(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.",
                      [])
    current = broker.topology.features().levels
    changes: dict[str, int] = {}
    results = []
    refusal: tuple[int, str | None] = (0, None)
    for u in body.feature_updates:
        code: int
        message: str | None
        if u.feature in changes:
            code, message = (ErrorCode.invalid_request,
                             f"the feature {u.feature!r} is updated twice")
        else:
            upgrade_type = getattr(u, "upgrade_type", None)
            if upgrade_type is None:  # v0
                upgrade_type = SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE
            code, message = check_update(current, u.feature, u.max_version_level,
                                         upgrade_type)
            changes[u.feature] = u.max_version_level
        results.append({"feature": u.feature, "error_code": code, "error_message": message})
        if code and not refusal[0]:
            refusal = (code, message)
    if refusal[0]:
        return answer(*refusal, [])  # all or none: nothing is changed
    if not getattr(body, "validate_only", False) and changes:  # v1+
        try:
            await broker.topology.set_features(updated(current, changes))
        except TopicError as exc:
            return answer(ErrorCode.request_timed_out, str(exc), [])
    return answer(0, None, results)


API = Api(57, "UpdateFeatures", 0, 2, handle)
