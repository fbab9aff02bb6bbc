"""InitProducerId (22): ids for idempotent and transactional producers (kafka-python 3
and the Java client ask for one before their first produce; librdkafka when
enable.idempotence or transactional.id is set).

A transactional id goes to the transaction coordinator of its ``__transaction_state``
partition (``handlers/transactions.py``; NOT_COORDINATOR if that partition is not
coordinated here): the id's producer id with its epoch bumped, fencing any older
producer of the same id (an open transaction of it is aborted first). Without one, a
producer that already has an id and epoch (v3+, KIP-360) gets its epoch bumped, which
resets its sequences; otherwise a fresh id, epoch 0, from the broker's allocator, which
the transaction coordinators share (an allocator that has no id to give right now, a
cluster's before its next block is reserved, answers its retriable error)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from odradek.protocol.codec import Request
from odradek.security.acls import Operation, ResourceType
from odradek.server.errors import error_code
from odradek.server.handlers import transactions
from odradek.server.handlers.base import (
    CLUSTER,
    Api,
    respond,
)

if TYPE_CHECKING:
    from odradek.server.broker import Broker

MAX_EPOCH = 32767


async def handle(broker: Broker, request: Request) -> bytes:
    body = request.body
    assert broker.metadata is not None
    if body.transactional_id is not None:
        return await transactions.init_producer_id(broker, request)
    authorizer = broker.authorizer
    if authorizer is not None and not (
            authorizer.allows(request, Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER,
                              CLUSTER)
            or authorizer.allows_any(request, Operation.WRITE, ResourceType.TOPIC)):
        # Kafka: an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE
        # on some topic (KIP-679).
        return respond(request, {"throttle_time": 0,
                                 "error_code": ErrorCode.cluster_authorization_failed,
                                 "producer_id": -1, "producer_epoch": -1})
    pid = getattr(body, "producer_id", -1)
    epoch = getattr(body, "producer_epoch", -1)
    if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        new_pid, new_epoch = pid, epoch + 1
    else:
        allocate = broker.metadata.next_producer_id
        # A cluster's allocator is set by ClusterNode.start, before the broker serves.
        assert allocate is not None
        try:
            new_pid, new_epoch = allocate(), 0
        except Exception as exc:
            if getattr(exc, "kafka_error", None) is None:
                raise
            return respond(request, {"throttle_time": 0, "error_code": error_code(exc),
                                     "producer_id": -1, "producer_epoch": -1})
    return respond(request, {"throttle_time": 0, "error_code": 0, "producer_id": new_pid,
                             "producer_epoch": new_epoch})


API = Api(22, "InitProducerId", 0, 5, handle)
