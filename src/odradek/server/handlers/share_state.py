"""The share coordinator's inter-broker APIs (KIP-932): ReadShareGroupState (84),
WriteShareGroupState (85) and DeleteShareGroupState (86), which the leader of a share
partition on another broker sends to the broker coordinating that share partition's
``__share_group_state`` partition (server/cluster/share_state_client.py). Brokers only:
CLUSTER_ACTION on the cluster, as Kafka asks. A share partition whose state partition is
not coordinated here is NOT_COORDINATOR; a write in an older state epoch
FENCED_STATE_EPOCH (an operator altered the offsets meanwhile).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.coordinator.share_coordinator import ShareKey
from odradek.coordinator.share_records import StateBatch
from odradek.protocol.codec import Request
from odradek.security.acls import Operation, ResourceType
from odradek.server.coordinators.coordinator_runtime import CoordinatorUnavailable
from odradek.server.handlers.base import CLUSTER, Api, allowed, respond

if TYPE_CHECKING:
    from odradek.server.broker import Broker

Partition = dict[str, Any]


async def _each(broker: Broker, request: Request, empty: Partition,
                run: Callable[[ShareKey, Any], Awaitable[Partition]]) -> bytes:
    """Answer every partition of the request: ``run``'s fields, or an error."""
    body = request.body
    allowed_here = allowed(broker, request, Operation.CLUSTER_ACTION, ResourceType.CLUSTER,
                           CLUSTER)
    results = []
    for t in body.topics:
        partitions = []
        for p in t.partitions:
            out: Partition = {"partition": p.partition, "error_code": 0,
                              "error_message": None, **empty}
            if not allowed_here:
                out["error_code"] = ErrorCode.cluster_authorization_failed
            elif broker.share_state is None:
                out["error_code"] = ErrorCode.coordinator_not_available
            else:
                try:
                    out.update(await run((body.group_id, t.topic_id, p.partition), p))
                except CoordinatorUnavailable as exc:
                    out.update(error_code=exc.error_code, error_message=str(exc))
            partitions.append(out)
        results.append({"topic_id": t.topic_id, "partitions": partitions})
    return respond(request, {"results": results})


async def read_share_group_state(broker: Broker, request: Request) -> bytes:
    async def run(key: ShareKey, p: Any) -> Partition:
        assert broker.share_state is not None
        state = await broker.share_state.local_read(key)
        if state is None:
            return {}
        return {"state_epoch": state.state_epoch, "start_offset": state.start_offset,
                "state_batches": [b._asdict() for b in state.batches]}

    return await _each(broker, request, {"state_epoch": -1, "start_offset": -1,
                                         "state_batches": []}, run)


async def write_share_group_state(broker: Broker, request: Request) -> bytes:
    async def run(key: ShareKey, p: Any) -> Partition:
        assert broker.share_state is not None
        written = await broker.share_state.local_write(
            key, state_epoch=p.state_epoch, leader_epoch=p.leader_epoch,
            start_offset=p.start_offset,
            batches=[StateBatch(b.first_offset, b.last_offset, b.delivery_state,
                                b.delivery_count) for b in p.state_batches])
        return {"error_code": written.error_code, "error_message": written.error_message}

    return await _each(broker, request, {}, run)


async def delete_share_group_state(broker: Broker, request: Request) -> bytes:
    async def run(key: ShareKey, p: Any) -> Partition:
        assert broker.share_state is not None
        await broker.share_state.local_delete(key)
        return {}

    return await _each(broker, request, {}, run)


READ_SHARE_GROUP_STATE = Api(84, "ReadShareGroupState", 0, 0, read_share_group_state)
WRITE_SHARE_GROUP_STATE = Api(85, "WriteShareGroupState", 0, 1, write_share_group_state)
DELETE_SHARE_GROUP_STATE = Api(86, "DeleteShareGroupState", 0, 0, delete_share_group_state)

APIS = (READ_SHARE_GROUP_STATE, WRITE_SHARE_GROUP_STATE, DELETE_SHARE_GROUP_STATE)
