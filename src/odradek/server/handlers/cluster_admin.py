"""The admin requests a cluster's controller answers: ElectLeaders (43, KIP-460),
AlterPartitionReassignments (45) and ListPartitionReassignments (46, KIP-455).

Admin clients send them to the controller (the ``controller_id`` of a Metadata answer);
another broker answers NOT_CONTROLLER, which makes them refresh metadata and retry, as
Kafka's ZooKeeper-era brokers do. Which controller answers is the topology's
(``active_controller``): a cluster's while it is active (server/cluster/controller.py);
a single node, which has no replicas to elect or move, is always its own and answers as
Kafka does for a partition with one replica (``SingleNodeController``,
server/topology.py: ELECTION_NOT_NEEDED; a reassignment to anything but itself is
refused). The decisions are the controller's; this module only translates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.cluster.state import TopicPartition
from odradek.protocol.codec import Request
from odradek.security.acls import Operation, ResourceType
from odradek.server.cluster.controller import PREFERRED, NotController, Outcome
from odradek.server.handlers.base import (
    CLUSTER,
    Api,
    allowed,
    respond,
)

if TYPE_CHECKING:
    from odradek.server.broker import Broker


def _code(name: str | None) -> int:
    return 0 if name is None else ErrorCode[name.lower()].value


def _by_topic(outcomes: dict[TopicPartition, Outcome], partition_key: str,
              make: Any) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, p), (error, message) in outcomes.items():
        topics.setdefault(topic, []).append(
            {partition_key: p, "error_code": _code(error), "error_message": message})
    return [make(t, ps) for t, ps in topics.items()]


async def _run(broker: Broker, request: Request, timeout_ms: int, work: Any
               ) -> tuple[int, str | None, Any]:
    """Await the controller's ``work``: (top-level error code, message, result)."""
    controller = broker.topology.active_controller()
    if controller is None:
        return ErrorCode.not_controller, "this broker is not the controller", None
    try:
        async with asyncio.timeout(max(timeout_ms, 1) / 1000):
            return 0, None, await work(controller)
    except NotController:
        return ErrorCode.not_controller, "this broker stopped being the controller", None
    except TimeoutError:
        return ErrorCode.request_timed_out, "the controller did not finish in time", None


def _timeout_ms(body: Any) -> int:
    timeout = getattr(body, "timeout", None)
    return int(timeout.total_seconds() * 1000) if timeout is not None else 30_000


# --- ElectLeaders --------------------------------------------------------------------------


def _wanted(topics: Iterable[Any] | None, partitions_of: Any) -> list[TopicPartition] | None:
    if topics is None:
        return None
    return [(t.name if hasattr(t, "name") else t.topic, p) for t in topics
            for p in partitions_of(t)]


async def elect_leaders(broker: Broker, request: Request) -> bytes:
    body = request.body
    election_type = getattr(body, "election_type", PREFERRED)
    wanted = _wanted(body.topic_partitions, lambda t: t.partitions)
    code: int
    message: str | None
    outcomes: dict[TopicPartition, Outcome]
    if not allowed(broker, request, Operation.ALTER, ResourceType.CLUSTER, CLUSTER):
        code, message = ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
        outcomes = {tp: ("CLUSTER_AUTHORIZATION_FAILED", message) for tp in wanted or []}
    else:
        code, message, outcomes = await _run(
            broker, request, _timeout_ms(body),
            lambda c: c.elect_leaders(election_type, wanted))
        if code:
            outcomes = {tp: (ErrorCode(code).name.upper(), message) for tp in wanted or []}
    return respond(request, {
        "throttle_time": 0, "error_code": code,
        "replica_election_results": _by_topic(
            outcomes, "partition_id",
            lambda t, ps: {"topic": t, "partition_result": ps})})


# --- reassignments -----------------------------------------------------------------------------


async def alter_reassignments(broker: Broker, request: Request) -> bytes:
    body = request.body
    if not allowed(broker, request, Operation.ALTER, ResourceType.CLUSTER, CLUSTER):
        return respond(request, {"throttle_time": 0,
                                 "error_code": ErrorCode.cluster_authorization_failed,
                                 "error_message": "Cluster authorization failed.",
                                 "responses": []})
    allow_rf_change = getattr(body, "allow_replication_factor_change", True)
    wanted: dict[TopicPartition, tuple[int, ...] | None] = {}
    refused: dict[TopicPartition, Outcome] = {}
    for topic in body.topics:
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            replicas = tuple(p.replicas) if p.replicas is not None else None
            if replicas is not None and not allow_rf_change:
                current = broker.topology.origin_replicas(*tp)
                if current is not None and len(current) != len(replicas):
                    refused[tp] = ("INVALID_REPLICA_ASSIGNMENT",
                                   f"{tp[0]}-{tp[1]} has {len(current)} replicas; the "
                                   f"request would make it {len(replicas)}")
                    continue
            wanted[tp] = replicas
    code, message, outcomes = await _run(broker, request, _timeout_ms(body),
                                         lambda c: c.alter_reassignments(wanted))
    if code:
        return respond(request, {"throttle_time": 0, "error_code": code,
                                 "error_message": message, "responses": []})
    outcomes = {**outcomes, **refused}
    return respond(request, {
        "throttle_time": 0, "error_code": 0, "error_message": None,
        "allow_replication_factor_change": allow_rf_change,
        "responses": _by_topic(outcomes, "partition_index",
                               lambda t, ps: {"name": t, "partitions": ps})})


async def list_reassignments(broker: Broker, request: Request) -> bytes:
    body = request.body
    wanted = _wanted(body.topics, lambda t: t.partition_indexes)
    code, message, ongoing = 0, None, {}
    if not allowed(broker, request, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER):
        code, message = ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
    else:
        controller = broker.topology.active_controller()
        if controller is None:
            code, message = ErrorCode.not_controller, "this broker is not the controller"
        else:
            ongoing = controller.list_reassignments(wanted)
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, p), (replicas, adding, removing) in sorted((ongoing or {}).items()):
        topics.setdefault(topic, []).append({
            "partition_index": p, "replicas": list(replicas),
            "adding_replicas": list(adding), "removing_replicas": list(removing)})
    return respond(request, {
        "throttle_time": 0, "error_code": code, "error_message": message,
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})


ELECT_LEADERS = Api(43, "ElectLeaders", 0, 2, elect_leaders)
ALTER_PARTITION_REASSIGNMENTS = Api(45, "AlterPartitionReassignments", 0, 1,
                                    alter_reassignments)
LIST_PARTITION_REASSIGNMENTS = Api(46, "ListPartitionReassignments", 0, 0, list_reassignments)
APIS = (ELECT_LEADERS, ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS)
