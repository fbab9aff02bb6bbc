"""Streams groups (KIP-1071, Kafka Streams' ``group.protocol=streams``):
StreamsGroupHeartbeat (88) and StreamsGroupDescribe (89) v0-1 and KIP-1331's
StreamsGroupTopologyDescriptionUpdate (93) v0, on the group coordinator
(coordinator/streams_group.py; the topology descriptions: streams_descriptions.py).

The heartbeat also creates the internal topics (repartition and changelog topics) the
coordinator finds missing, with the partition counts it decided and the configs the
application asked for, as Kafka's KafkaApis does after the coordinator answers; the
members get their tasks once the topics are there (a later heartbeat). Without CREATE
on the cluster or the topic, a topic is not created and the group stays not ready.

Off (UNSUPPORTED_VERSION) while the finalized ``streams.version`` is 0.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.coordinator import streams_descriptions as sd
from odradek.coordinator.streams_state import (
    StreamsGroupDescription,
    StreamsHeartbeatResult,
)
from odradek.coordinator.streams_topology import InternalTopic, Topology
from odradek.protocol.codec import Request
from odradek.security.acls import Operation, ResourceType
from odradek.server.coordinators.coordinator_runtime import CoordinatorUnavailable
from odradek.server.features import STREAMS_VERSION
from odradek.server.handlers.base import CLUSTER, Api, allowed, respond
from odradek.server.handlers.groups import _client_host, group_operations, group_runtime
from odradek.server.metadata import TopicError

if TYPE_CHECKING:
    from odradek.server.broker import Broker

log = logging.getLogger(__name__)

STREAMS_GROUPS_DISABLED = ("Streams groups are not enabled: the finalized streams.version "
                           "is 0 (kafka-features.sh upgrade --feature streams.version=1)")


def streams_level(broker: Broker) -> int:
    return broker.topology.features().levels.get(STREAMS_VERSION, 0)


def _task_ids(tasks: Mapping[str, set[int]] | None) -> list[dict[str, Any]] | None:
    if tasks is None:
        return None
    return [{"subtopology_id": s, "partitions": sorted(p)} for s, p in sorted(tasks.items())]


def _answer(request: Request, result: StreamsHeartbeatResult) -> bytes:
    v1 = request.api_version >= 1
    return respond(request, {
        "throttle_time": 0, "error_code": result.error_code,
        "error_message": result.error_message, "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval": result.heartbeat_interval_ms,
        # v0's AcceptableRecoveryLagLegacy: Kafka 4.4 answers 0 (warm-up tasks, which it
        # is about, are not made here either); v1's int64 is the broker's
        # group.streams.acceptable.recovery.lag, as Kafka's (-1 on errors and leaves).
        "acceptable_recovery_lag": result.acceptable_recovery_lag if v1 else 0,
        **({"topology_description_required": result.topology_description_required}
           if v1 else {}),
        "task_offset_interval": result.task_offset_interval_ms,
        "status": [{"status_code": s.code, "status_detail": s.detail}
                   for s in result.statuses] if result.statuses else None,
        "active_tasks": _task_ids(result.active), "standby_tasks": _task_ids(result.standby),
        "warmup_tasks": _task_ids(result.warmup), "endpoint_information_epoch": 0,
        "partitions_by_user_endpoint": None})


def _refusal(request: Request, code: int, message: str) -> bytes:
    return _answer(request, StreamsHeartbeatResult(code, message, request.body.member_id,
                                                   -1))


def topic_partitions(broker: Broker) -> dict[str, int]:
    """What a topology is configured against: every topic but the internal ones."""
    assert broker.metadata is not None
    return {name: t.partitions for name, t in broker.metadata.topics.items()
            if not t.internal}


async def streams_group_heartbeat(broker: Broker, request: Request) -> bytes:
    body = request.body
    if streams_level(broker) < 1:
        return _refusal(request, ErrorCode.unsupported_version, STREAMS_GROUPS_DISABLED)
    if not allowed(broker, request, Operation.READ, ResourceType.GROUP, body.group_id):
        return _refusal(request, ErrorCode.group_authorization_failed,
                        "Group authorization failed.")
    try:
        result: StreamsHeartbeatResult = await group_runtime(broker).call(
            body.group_id, lambda coordinator, token, now: coordinator.streams_heartbeat(
                body, client_id=request.client_id or "", client_host=_client_host(broker),
                topics=topic_partitions(broker), token=token, now_ms=now,
                api_version=request.api_version))
    except CoordinatorUnavailable as exc:
        return _refusal(request, exc.error_code, str(exc))
    if result.create:
        await _create_internal_topics(broker, request, result.create)
    return _answer(request, result)


async def _create_internal_topics(broker: Broker, request: Request,
                                  topics: Mapping[str, InternalTopic]) -> None:
    for name, topic in topics.items():
        if not (allowed(broker, request, Operation.CREATE, ResourceType.CLUSTER, CLUSTER)
                or allowed(broker, request, Operation.CREATE, ResourceType.TOPIC, name)):
            log.warning("streams group internal topic %s not created: the member may not "
                        "CREATE it", name)
            continue
        try:
            await broker.topology.create_topic(
                name, topic.partitions, topic.replication_factor or None,
                dict(topic.configs))
            log.info("created streams internal topic %s (%d partitions)", name,
                     topic.partitions)
        except TopicError as exc:  # made by another member's heartbeat just now, or bad
            if exc.kafka_error != "TOPIC_ALREADY_EXISTS":
                log.warning("streams group internal topic %s not created: %s", name, exc)


def _topology(topology: Topology | None, configured: Mapping[str, int]) -> Any:
    if topology is None:
        return None

    def info(t: InternalTopic, partitions: int) -> dict[str, Any]:
        return {"name": t.name, "partitions": partitions,
                "replication_factor": t.replication_factor,
                "topic_configs": [{"key": k, "value": v} for k, v in t.configs]}

    return {"epoch": topology.epoch, "subtopologies": [{
        "subtopology_id": s.subtopology_id, "source_topics": list(s.source_topics),
        "repartition_sink_topics": list(s.repartition_sink_topics),
        "state_changelog_topics": [info(t, configured.get(t.name, t.partitions))
                                   for t in s.changelog_topics],
        "repartition_source_topics": [info(t, configured.get(t.name, t.partitions))
                                      for t in s.repartition_source_topics],
    } for s in topology.subtopologies]}


def _assignment(tasks: tuple[Mapping[str, set[int]], ...]) -> dict[str, Any]:
    active, standby, warmup = tasks
    return {"active_tasks": _task_ids(active), "standby_tasks": _task_ids(standby),
            "warmup_tasks": _task_ids(warmup)}


def _describe(broker: Broker, group_id: str, include_description: bool
              ) -> StreamsGroupDescription:
    try:
        [described] = group_runtime(broker).coordinator_for(group_id).streams_group_describe(
            [group_id], include_description)
    except CoordinatorUnavailable as exc:
        return StreamsGroupDescription(exc.error_code, group_id, str(exc))
    return described


async def streams_group_describe(broker: Broker, request: Request) -> bytes:
    def refused(group_id: str, code: int, message: str) -> dict[str, Any]:
        return {"error_code": code, "error_message": message, "group_id": group_id,
                "group_state": "", "group_epoch": 0, "assignment_epoch": 0,
                "topology": None, "members": []}

    include = bool(getattr(request.body, "include_topology_description", False))

    if streams_level(broker) < 1:
        return respond(request, {"throttle_time": 0, "groups": [
            refused(g, ErrorCode.unsupported_version, STREAMS_GROUPS_DISABLED)
            for g in request.body.group_ids]})
    groups = []
    partitions = topic_partitions(broker)
    for group_id in request.body.group_ids:
        if not allowed(broker, request, Operation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(refused(group_id, ErrorCode.group_authorization_failed,
                                  "Group authorization failed."))
            continue
        d = _describe(broker, group_id, include)
        if d.error_code:
            groups.append(refused(group_id, d.error_code, d.error_message or ""))
            continue
        groups.append({
            "error_code": 0, "error_message": None, "group_id": group_id,
            "group_state": d.state, "group_epoch": d.group_epoch,
            "assignment_epoch": d.assignment_epoch,
            "topology": _topology(d.topology, partitions),
            "authorized_operations": group_operations(broker, request, group_id),
            "members": [{
                "member_id": m.member_id, "member_epoch": m.member_epoch,
                "instance_id": m.instance_id, "rack_id": m.rack_id,
                "client_id": m.client_id, "client_host": m.client_host,
                "topology_epoch": m.topology_epoch, "process_id": m.process_id,
                "user_endpoint": (None if m.user_endpoint is None else
                                  {"host": m.user_endpoint[0], "port": m.user_endpoint[1]}),
                "client_tags": [{"key": k, "value": v} for k, v in m.client_tags.items()],
                "task_offsets": [], "task_end_offsets": [],
                "assignment": _assignment(m.assignment),
                "target_assignment": _assignment(m.target), "is_classic": False,
            } for m in d.members],
            # v1 (KIP-1331, KIP-1357); v0's writer leaves them out.
            **({"topology_description": None if d.description is None
                else sd.description_to_wire(d.description),
                "topology_description_status": d.description_status,
                "assignor_name": d.assignor_name} if request.api_version >= 1 else {})})
    return respond(request, {"throttle_time": 0, "groups": groups})


def _update_answer(request: Request, code: int, message: str | None) -> bytes:
    return respond(request, {"throttle_time": 0, "error_code": code,
                             "error_message": message})


async def streams_group_topology_description_update(broker: Broker, request: Request
                                                    ) -> bytes:
    """KIP-1331: a member pushes its topology's description, asked for by a v1
    heartbeat. Kafka's order: streams groups off, then READ on the group, then (the
    coordinator service's pre-checks) no plugin configured, empty ids, then the
    coordinator's checks (``streams_topology_description_update``)."""
    body = request.body
    if streams_level(broker) < 1:
        return _update_answer(request, ErrorCode.unsupported_version, STREAMS_GROUPS_DISABLED)
    if not allowed(broker, request, Operation.READ, ResourceType.GROUP, body.group_id):
        return _update_answer(request, ErrorCode.group_authorization_failed,
                              "Group authorization failed.")
    if not broker.config["group.streams.topology.description.plugin.class"]:
        return _update_answer(request, ErrorCode.unsupported_version, "The broker has no "
                              "streams group topology description plugin configured.")
    if not body.member_id:
        return _update_answer(request, ErrorCode.invalid_request, "MemberId can't be empty.")
    if not body.group_id:
        return _update_answer(request, ErrorCode.invalid_request, "GroupId can't be empty.")
    try:
        code, message = await group_runtime(broker).call(
            body.group_id, lambda c, token, now: c.streams_topology_description_update(
                body, token=token, now_ms=now))
    except CoordinatorUnavailable as exc:
        return _update_answer(request, exc.error_code, str(exc))
    return _update_answer(request, code, message)


APIS = (
    Api(88, "StreamsGroupHeartbeat", 0, 1, streams_group_heartbeat),
    Api(89, "StreamsGroupDescribe", 0, 1, streams_group_describe),
    Api(93, "StreamsGroupTopologyDescriptionUpdate", 0, 0,
        streams_group_topology_description_update),
)
