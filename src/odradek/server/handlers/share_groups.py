"""Share groups (KIP-932, "queues for Kafka"): ShareGroupHeartbeat (76) and
ShareGroupDescribe (77) on the group coordinator (coordinator/share_group.py), and
ShareFetch (78) and ShareAcknowledge (79) on the partition leaders (``share_fetch.py``),
and the share group offsets' admin APIs (90-92, on the group coordinator:
``share_offsets.py``).

Versions as Kafka 4.4 serves them: ShareGroupHeartbeat and ShareGroupDescribe v1 (v0 was
Kafka 4.0's early access, removed in 4.1), ShareFetch and ShareAcknowledge v1-v2 (v2:
KIP-1206's acquire mode and KIP-1222's RENEW acknowledgements).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from odradek.coordinator import results as r
from odradek.coordinator.share_group import ShareGroupDescription
from odradek.protocol.codec import Request
from odradek.security.acls import Operation, ResourceType
from odradek.server.coordinators.coordinator_runtime import CoordinatorUnavailable
from odradek.server.coordinators.groups import topic_metadata
from odradek.server.handlers.base import Api, allowed, respond
from odradek.server.handlers.consumer_groups import heartbeat_answer, heartbeat_refusal
from odradek.server.handlers.groups import _client_host, group_operations, group_runtime
from odradek.server.handlers.share_fetch import SHARE_ACKNOWLEDGE, SHARE_FETCH
from odradek.server.handlers.share_offsets import (
    alter_share_group_offsets,
    delete_share_group_offsets,
    describe_share_group_offsets,
)
from odradek.server.share.fetching import SHARE_GROUPS_DISABLED, share_level

if TYPE_CHECKING:
    from odradek.server.broker import Broker


async def share_group_heartbeat(broker: Broker, request: Request) -> bytes:
    body = request.body
    if share_level(broker) < 1:
        return heartbeat_refusal(request, ErrorCode.unsupported_version,
                                 SHARE_GROUPS_DISABLED)
    if not allowed(broker, request, Operation.READ, ResourceType.GROUP, body.group_id):
        return heartbeat_refusal(request, ErrorCode.group_authorization_failed,
                                 "Group authorization failed.")
    names = body.subscribed_topic_names
    if any(not allowed(broker, request, Operation.DESCRIBE, ResourceType.TOPIC, t)
           for t in names or ()):
        return heartbeat_refusal(request, ErrorCode.topic_authorization_failed,
                                 "Topic authorization failed.")
    try:
        result: r.ConsumerHeartbeatResult = await group_runtime(broker).call(
            body.group_id, lambda coordinator, token, now: coordinator.share_heartbeat(
                body.group_id, body.member_id, body.member_epoch, rack_id=body.rack_id,
                subscribed_topic_names=names, client_id=request.client_id or "",
                client_host=_client_host(broker), topics=topic_metadata(broker),
                token=token, now_ms=now))
    except CoordinatorUnavailable as exc:
        result = r.ConsumerHeartbeatResult(exc.error_code, str(exc))
    return heartbeat_answer(request, result)


def _describe(broker: Broker, group_id: str) -> ShareGroupDescription:
    try:
        [described] = group_runtime(broker).coordinator_for(group_id).share_group_describe(
            [group_id])
    except CoordinatorUnavailable as exc:
        return ShareGroupDescription(exc.error_code, group_id, str(exc))
    return described


async def share_group_describe(broker: Broker, request: Request) -> bytes:
    if share_level(broker) < 1:
        return respond(request, {"throttle_time": 0, "groups": [
            {"error_code": ErrorCode.unsupported_version, "error_message":
             SHARE_GROUPS_DISABLED, "group_id": g, "group_state": "", "group_epoch": 0,
             "assignment_epoch": 0, "assignor_name": "", "members": []}
            for g in request.body.group_ids]})
    found = [_describe(broker, g)
             if allowed(broker, request, Operation.DESCRIBE, ResourceType.GROUP, g)
             else ShareGroupDescription(ErrorCode.group_authorization_failed, g,
                                        "Group authorization failed.")
             for g in request.body.group_ids]
    return respond(request, {"throttle_time": 0, "groups": [
        {"error_code": d.error_code, "error_message": d.error_message,
         "group_id": d.group_id, "group_state": d.state, "group_epoch": d.group_epoch,
         "assignment_epoch": d.assignment_epoch, "assignor_name": d.assignor_name,
         "authorized_operations": group_operations(broker, request, d.group_id),
         "members": [{
             "member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
             "client_id": m.client_id, "client_host": m.client_host,
             "subscribed_topic_names": m.subscribed_topic_names,
             "assignment": {"topic_partitions": [
                 {"topic_id": p.topic_id, "topic_name": p.topic_name,
                  "partitions": p.partitions} for p in m.assignment]},
         } for m in d.members]}
        for d in found]})


SHARE_GROUP_HEARTBEAT = Api(76, "ShareGroupHeartbeat", 1, 1, share_group_heartbeat)
SHARE_GROUP_DESCRIBE = Api(77, "ShareGroupDescribe", 1, 1, share_group_describe)

DESCRIBE_SHARE_GROUP_OFFSETS = Api(90, "DescribeShareGroupOffsets", 0, 1,
                                   describe_share_group_offsets)
ALTER_SHARE_GROUP_OFFSETS = Api(91, "AlterShareGroupOffsets", 0, 0, alter_share_group_offsets)
DELETE_SHARE_GROUP_OFFSETS = Api(92, "DeleteShareGroupOffsets", 0, 0,
                                 delete_share_group_offsets)

APIS = (SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE, SHARE_FETCH, SHARE_ACKNOWLEDGE,
        DESCRIBE_SHARE_GROUP_OFFSETS, ALTER_SHARE_GROUP_OFFSETS, DELETE_SHARE_GROUP_OFFSETS)
