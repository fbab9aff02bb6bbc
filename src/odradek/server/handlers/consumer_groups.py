"""Consumer groups of the next-generation protocol (KIP-848): ConsumerGroupHeartbeat (68)
and ConsumerGroupDescribe (69), for clients that opt in (librdkafka
``group.protocol=consumer``, the Java client's ``group.protocol=consumer``).

The assignment is computed by the coordinator (``coordinator/consumer_protocol.py``)
from the broker's topic metadata, handed over with every heartbeat: a topic created or
given partitions is seen at the members' next heartbeat. Partitions travel by topic id,
so a client resolves them with Metadata by topic id (served by the Metadata handler).

A group is served by the coordinator of its ``__consumer_offsets`` partition: a heartbeat
of a group whose partition is not coordinated here is answered NOT_COORDINATOR, and so is
each such group of a ConsumerGroupDescribe.

Versions: ConsumerGroupHeartbeat v0 (the coordinator names a joining member) and v1
(the client names itself, and may subscribe by regular expression); ConsumerGroupDescribe
v0-v1 (v1 adds nothing this broker fills: member type).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.coordinator import results as r
from odradek.protocol.codec import Request
from odradek.protocol.messages import ms
from odradek.security.acls import Operation, ResourceType
from odradek.server.coordinators.coordinator_runtime import CoordinatorUnavailable
from odradek.server.coordinators.groups import topic_metadata
from odradek.server.handlers.base import Api, allowed, respond
from odradek.server.handlers.groups import _client_host, group_operations, group_runtime

if TYPE_CHECKING:
    from odradek.server.broker import Broker


def heartbeat_answer(request: Request, result: r.ConsumerHeartbeatResult) -> bytes:
    """A ConsumerGroupHeartbeat or ShareGroupHeartbeat answer (the same fields)."""
    assignment = None
    if result.assignment is not None:
        assignment = {"topic_partitions": [
            {"topic_id": tid, "partitions": parts} for tid, parts in result.assignment.items()]}
    return respond(request, {
        "throttle_time": 0, "error_code": result.error_code,
        "error_message": result.error_message, "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval": result.heartbeat_interval_ms, "assignment": assignment,
    })


def heartbeat_refusal(request: Request, code: int, message: str) -> bytes:
    """A heartbeat refused before the coordinator sees it (epoch -1, no assignment)."""
    return heartbeat_answer(request, r.ConsumerHeartbeatResult(
        code, message, request.body.member_id, -1))


async def consumer_group_heartbeat(broker: Broker, request: Request) -> bytes:
    body = request.body
    if not allowed(broker, request, Operation.READ, ResourceType.GROUP, body.group_id):
        return heartbeat_refusal(request, ErrorCode.group_authorization_failed,
                                 "Group authorization failed.")
    owned = None if body.topic_partitions is None else [
        (tp.topic_id, list(tp.partitions)) for tp in body.topic_partitions]
    timeout = body.rebalance_timeout
    rebalance_ms = -1 if timeout is None else ms(timeout, -1)
    try:
        runtime = group_runtime(broker)
        topics = topic_metadata(broker)
        result: r.ConsumerHeartbeatResult = await runtime.call(
            body.group_id, lambda coordinator, token, now: coordinator.consumer_heartbeat(
                body.group_id, body.member_id, body.member_epoch,
                instance_id=body.instance_id, rack_id=body.rack_id,
                rebalance_timeout_ms=rebalance_ms,
                subscribed_topic_names=body.subscribed_topic_names,
                subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
                server_assignor=body.server_assignor, owned=owned,
                client_id=request.client_id or "", client_host=_client_host(broker),
                member_id_from_client=request.api_version >= 1, topics=topics,
                token=token, now_ms=now))
    except CoordinatorUnavailable as exc:
        result = r.ConsumerHeartbeatResult(exc.error_code, str(exc))
    return heartbeat_answer(request, result)


def _partitions(described: list[r.DescribedPartitions]) -> dict[str, Any]:
    return {"topic_partitions": [
        {"topic_id": d.topic_id, "topic_name": d.topic_name, "partitions": d.partitions}
        for d in described]}


def _describe(broker: Broker, group_id: str) -> r.ConsumerGroupDescription:
    """One group, by the coordinator of its partition (NOT_COORDINATOR if elsewhere)."""
    try:
        [described] = group_runtime(broker).coordinator_for(group_id).consumer_group_describe(
            [group_id])
    except CoordinatorUnavailable as exc:
        return r.ConsumerGroupDescription(exc.error_code, group_id, str(exc))
    return described


async def consumer_group_describe(broker: Broker, request: Request) -> bytes:
    found = [_describe(broker, g)
             if allowed(broker, request, Operation.DESCRIBE, ResourceType.GROUP, g)
             else r.ConsumerGroupDescription(ErrorCode.group_authorization_failed, g,
                                             "Group authorization failed.")
             for g in request.body.group_ids]
    return respond(request, {"throttle_time": 0, "groups": [
        {"error_code": d.error_code, "error_message": d.error_message,
         "group_id": d.group_id, "group_state": d.state, "group_epoch": d.group_epoch,
         "assignment_epoch": d.assignment_epoch, "assignor_name": d.assignor_name,
         "authorized_operations": group_operations(broker, request, d.group_id),
         "members": [{
             "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
             "member_epoch": m.member_epoch, "client_id": m.client_id,
             "client_host": m.client_host, "subscribed_topic_names": m.subscribed_topic_names,
             # Kafka's members hold "" when they subscribe by names.
             "subscribed_topic_regex": m.subscribed_topic_regex or "",
             "assignment": _partitions(m.assignment),
             "target_assignment": _partitions(m.target_assignment),
             "member_type": 1,  # v1: 1 = consumer protocol member (0 would be classic)
         } for m in d.members]}
        for d in found]})


CONSUMER_GROUP_HEARTBEAT = Api(68, "ConsumerGroupHeartbeat", 0, 1, consumer_group_heartbeat)
CONSUMER_GROUP_DESCRIBE = Api(69, "ConsumerGroupDescribe", 0, 1, consumer_group_describe)

APIS = (CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE)
