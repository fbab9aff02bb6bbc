"""ApiVersions (18): the versions of every API this broker serves.

Clients pick their versions from this answer (librdkafka picks the v2 record format only
if Produce >= 3 and Fetch >= 4 are listed). An ApiVersions version we do not know is
answered by the connection with a v0 UNSUPPORTED_VERSION response (see broker).

v5 (KIP-1242, Kafka 4.4) lets a client say which broker of which cluster it means to
reach (ClusterId and NodeId, from its metadata), so that one whose address now leads
elsewhere (a replaced broker, DNS or a load balancer) finds out at once: as Kafka 4.4's
KafkaApis, naming one without the other is INVALID_REQUEST, naming another cluster or
another node is REBOOTSTRAP_REQUIRED (the client forgets the brokers it knows and starts
again from its bootstrap servers), and either answer lists no APIs. From v3 (KIP-511)
the client's software name and version must match Kafka's pattern (letters, digits,
'-' and '.', starting and ending with a letter or digit), else INVALID_REQUEST, as
Kafka's ApiVersionsRequest.isValid."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.protocol.codec import Request
from odradek.server.features import SUPPORTED
from odradek.server.handlers.base import Api, respond

if TYPE_CHECKING:
    from odradek.server.broker import Broker

NO_NODE = -1  # NodeId's default: the client names no node
# Kafka's ApiVersionsRequest.SOFTWARE_NAME_VERSION_PATTERN.
SOFTWARE_NAME_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def refusal(broker: Broker, body: Any, version: int) -> ErrorCode | None:
    """Kafka 4.4's checks (ApiVersionsRequest.isValid, then KafkaApis'
    clusterIdOrNodeIdIsInvalid): v3+'s software name and version; v5's ClusterId and
    NodeId both or neither, and if both, ours."""
    if version >= 3 and not all(
            SOFTWARE_NAME_VERSION.fullmatch(text)
            for text in (body.client_software_name, body.client_software_version)):
        return ErrorCode.invalid_request
    if version < 5:
        return None
    cluster_id, node_id = body.cluster_id, body.node_id
    if (cluster_id is None) != (node_id == NO_NODE):
        return ErrorCode.invalid_request
    metadata = broker.metadata
    assert metadata is not None  # set before the broker takes requests
    if cluster_id is not None and (cluster_id != metadata.cluster_id
                                   or node_id != broker.node_id):
        return ErrorCode.rebootstrap_required
    return None


async def handle(broker: Broker, request: Request) -> bytes:
    refused = refusal(broker, request.body, request.api_version)
    if refused is not None:
        # Kafka's getErrorResponse: the error and the throttle time, nothing else.
        return respond(request, {"error_code": refused, "api_keys": [], "throttle_time": 0,
                                 "finalized_features_epoch": -1})
    # v3+: the features this broker supports and the levels the cluster has finalized
    # (server/features.py); a client reads transaction.version there (KIP-890).
    finalized = broker.topology.features()
    return respond(request, {
        "error_code": 0,
        "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                     for k, (lo, hi) in sorted(broker.supported.items())],
        "throttle_time": 0,
        # v3 cannot say a minimum of 0 (KAFKA-17011): Kafka leaves those features out.
        "supported_features": [{"name": name, "min_version": lo, "max_version": hi}
                               for name, (lo, hi) in sorted(SUPPORTED.items())
                               if lo > 0 or request.api_version >= 4],
        "finalized_features_epoch": finalized.epoch,
        "finalized_features": [{"name": name, "max_version_level": level,
                                "min_version_level": level}
                               for name, level in sorted(finalized.levels.items())],
    })


API = Api(18, "ApiVersions", 0, 5, handle)
