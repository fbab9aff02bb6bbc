"""WriteTxnMarkers (27): a transaction coordinator on another broker asks this one to end
a transaction in the partitions it leads (KIP-98).

Each marker is a COMMIT or ABORT control batch appended at the log end of each named
partition, then replicated before the answer (Kafka appends markers with acks=all),
so that once the coordinator records the transaction complete, every in-sync replica
has its markers. A marker to ``__consumer_offsets`` also settles the transaction's
offset commits in this broker's group coordinator. Only brokers send this request, and
only in a cluster: a single node writes its markers itself and refuses it (the
topology's ``append_txn_markers``, server/topology.py). Versions 1-2 (Kafka 4 removed
v0); v2's transaction version of each marker (KIP-890) is read and not needed: a
partition takes a marker at its producer's epoch or a later one (transaction version
2's bumped epoch), and this broker's own markers go out as v1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.protocol.codec import Request
from odradek.security.acls import Operation, ResourceType
from odradek.server.handlers.base import (
    CLUSTER,
    Api,
    allowed,
    respond,
)

if TYPE_CHECKING:
    from odradek.server.broker import Broker


async def handle(broker: Broker, request: Request) -> bytes:
    markers = []
    for marker in request.body.markers:
        tps = [(t.name, p) for t in marker.topics for p in t.partition_indexes]
        codes: dict[tuple[str, int], int]
        if not allowed(broker, request, Operation.CLUSTER_ACTION, ResourceType.CLUSTER,
                       CLUSTER):
            codes = dict.fromkeys(tps, ErrorCode.cluster_authorization_failed)  # brokers only
        else:  # (a single node refuses: no cluster needs this request)
            codes = await broker.topology.append_txn_markers(
                marker.producer_id, marker.producer_epoch, marker.transaction_result,
                marker.coordinator_epoch, tps)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), code in codes.items():
            by_topic.setdefault(topic, []).append({"partition_index": partition,
                                                   "error_code": code})
        markers.append({"producer_id": marker.producer_id,
                        "topics": [{"name": t, "partitions": ps}
                                   for t, ps in by_topic.items()]})
    return respond(request, {"markers": markers})


API = Api(27, "WriteTxnMarkers", 1, 2, handle)
