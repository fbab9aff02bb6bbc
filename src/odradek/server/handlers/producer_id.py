"""InitProducerId (22): ids for idempotent producers (kafka-python 3 and the Java client
ask for one before their first produce; librdkafka when enable.idempotence is set).

A producer that already has an id and epoch (v3+, KIP-360) gets its epoch bumped, which
resets its sequences. Transactional ids need the transaction coordinator, which is not
here yet: they are refused with a message saying so."""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.protocol.codec import Request
from odradek.server.handlers.base import Api, respond

if TYPE_CHECKING:
    from odradek.server.broker import Broker

MAX_EPOCH = 32767
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


async def handle(broker: Broker, request: Request) -> bytes:
    body = request.body
    assert broker.metadata is not None
    if body.transactional_id is not None:
        return respond(request, {"throttle_time": 0,
                                 "error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                 "producer_id": -1, "producer_epoch": -1})
    pid = getattr(body, "producer_id", -1)
    epoch = getattr(body, "producer_epoch", -1)
    if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        new_pid, new_epoch = pid, epoch + 1
    else:
        new_pid, new_epoch = broker.metadata.next_producer_id(), 0
    return respond(request, {"throttle_time": 0, "error_code": 0, "producer_id": new_pid,
                             "producer_epoch": new_epoch})


API = Api(22, "InitProducerId", 0, 4, handle)
