"""FindCoordinator (10): this node coordinates every group and transactional id.

A single node is trivially the coordinator of every key (v0-3 one key, v4 a batch of
``coordinator_keys``; key type 0 groups, 1 transactional ids). Groups are loaded from
``__consumer_offsets`` and transactions from ``__transaction_state`` before the broker
listens (``server/groups.py``, ``server/transactions.py``), so there is no loading phase
to answer COORDINATOR_NOT_AVAILABLE for; the first lookup of a transaction coordinator
creates ``__transaction_state``, as in Kafka. Serving this API matters beyond
groups too: librdkafka enables LZ4 only when the broker lists FindCoordinator in
ApiVersions (it reads that as "a 0.9+ broker")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.protocol.codec import Request
from odradek.server.handlers.base import Api, respond

if TYPE_CHECKING:
    from odradek.server.broker import Broker

GROUP, TRANSACTION = 0, 1
INVALID_REQUEST = 42


async def handle(broker: Broker, request: Request) -> bytes:
    body = request.body
    key_type = getattr(body, "key_type", GROUP)
    error = 0 if key_type in (GROUP, TRANSACTION) else INVALID_REQUEST
    if key_type == TRANSACTION and broker.transactions is not None:
        # Kafka creates __transaction_state when a transaction coordinator is first
        # looked for; its partitions are then loaded before the answer (they are empty).
        broker.transactions.ensure_topic()
    message = None if not error else f"unknown coordinator key type {key_type}"
    node = {"node_id": broker.node_id if not error else -1,
            "host": broker.advertised_host if not error else "",
            "port": broker.port if not error else -1,
            "error_code": error, "error_message": message}
    keys = getattr(body, "coordinator_keys", None)
    return respond(request, {
        "throttle_time": 0, **node,
        "coordinators": [{"key": key, **node} for key in keys or ()],
    })


API = Api(10, "FindCoordinator", 0, 4, handle)
