"""ApiVersions (18): the versions of every API this broker serves.

Clients pick their versions from this answer (librdkafka picks the v2 record format only
if Produce >= 3 and Fetch >= 4 are listed). An ApiVersions version we do not know is
answered by the connection with a v0 UNSUPPORTED_VERSION response (see broker)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.protocol.codec import Request
from odradek.server.features import SUPPORTED
from odradek.server.handlers.base import Api, respond

if TYPE_CHECKING:
    from odradek.server.broker import Broker


async def handle(broker: Broker, request: Request) -> bytes:
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


API = Api(18, "ApiVersions", 0, 4, handle)
