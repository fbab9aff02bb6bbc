"""Metadata (3): brokers, cluster id and topics with their partitions.

A single node leads every partition and is its only replica. In a cluster the answer is
this broker's view of ZooKeeper (server/cluster/metadata.py): every live broker with
its rack, the controller, and per partition its leader, leader epoch, replicas, ISR and
offline replicas (replicas on brokers that are not registered); a partition without a
leader has LEADER_NOT_AVAILABLE. Unknown topics are created on request when
``auto.create.topics.enable`` is on and the client allows it (v4+), with
``num.partitions`` partitions (and ``default.replication.factor`` replicas), as Kafka
does; in a cluster such a topic is answered LEADER_NOT_AVAILABLE until the controller
has given it leaders, as Kafka answers too."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.protocol.codec import Request
from odradek.security.acls import Operation, ResourceType
from odradek.server.handlers.base import (
    CLUSTER,
    NO_AUTHORIZED_OPERATIONS,
    Api,
    allowed,
    authorized_operations,
    respond,
)
from odradek.server.metadata import Topic, TopicError, validate_topic_name

if TYPE_CHECKING:
    from uuid import UUID

    from odradek.server.broker import Broker



def topic_entry(broker: Broker, topic: Topic) -> dict[str, Any]:
    """A topic's partitions as the topology sees them: their live leaders (a partition
    without one is LEADER_NOT_AVAILABLE), epochs, replicas and ISRs."""
    view = broker.topology.partition_view
    partitions = []
    for p in range(topic.partitions):
        v = view(topic.name, p)
        partitions.append({
            "error_code": 0 if v.leader >= 0 else ErrorCode.leader_not_available,
            "partition_index": p, "leader_id": v.leader, "leader_epoch": v.leader_epoch,
            "replica_nodes": v.replicas, "isr_nodes": v.isr, "offline_replicas": v.offline,
        })
    return {"error_code": 0, "name": topic.name, "topic_id": topic.topic_id,
            "is_internal": topic.internal, "partitions": partitions,
            "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS}


def listener_name(broker: Broker, request: Request) -> str:
    """The listener a request came in on (the main one for requests made inside)."""
    listener = broker.listener_of(request)
    return listener.name if listener is not None else broker.config.listeners[0].name


def brokers(broker: Broker, request: Request) -> list[dict[str, Any]]:
    """Every live broker (just this one, on a single node), at its address for the
    listener the request came in on; a broker without that listener is left out, as
    Kafka does."""
    name = listener_name(broker, request)
    out = []
    for b in broker.topology.live_brokers():
        address = b.address(name)
        if address is not None:
            out.append({"node_id": b.node_id, "host": address[0], "port": address[1],
                        "rack": b.rack})
    return out


def controller_id(broker: Broker) -> int:
    return broker.topology.controller_id()


async def handle(broker: Broker, request: Request) -> bytes:
    body = request.body
    assert broker.metadata is not None
    requested = body.topics
    authorizer = broker.authorizer
    if requested is None or (request.api_version == 0 and not requested):
        # All topics: those the principal may describe, the others left out unsaid.
        names: list[str | None] = [
            n for n in sorted(broker.metadata.topics) if authorizer is None
            or authorizer.allows(request, Operation.DESCRIBE, ResourceType.TOPIC, n)]
    else:
        # v10+ may name a topic by id only (KIP-516): KIP-848 consumers resolve the
        # topic ids of their assignment this way.
        # (keyed by UUID | None: a request's topic without an id looks up None)
        by_id: dict[UUID | None, str] = {
            t.topic_id: t.name for t in broker.metadata.topics.values()}
        names = [t.name if t.name is not None else by_id.get(getattr(t, "topic_id", None))
                 for t in requested]
    auto_create = broker.config["auto.create.topics.enable"] and getattr(
        body, "allow_auto_topic_creation", True)
    topics: list[dict[str, Any]] = []
    for name in names:
        if name is None:  # an id we do not know
            topics.append({"error_code": 100, "name": None, "partitions": []})
            continue
        if authorizer is not None and not authorizer.allows(
                request, Operation.DESCRIBE, ResourceType.TOPIC, name):
            # Whether it exists or not: nothing is told of a topic one may not describe.
            topics.append({"error_code": ErrorCode.topic_authorization_failed, "name": name,
                           "partitions": []})
            continue
        topic = broker.topic(name)
        if topic is None:
            try:
                validate_topic_name(name)
            except TopicError:
                topics.append({"error_code": 17, "name": name, "partitions": []})
                continue
            if not auto_create:
                topics.append({"error_code": 3, "name": name, "partitions": []})
                continue
            if not (allowed(broker, request, Operation.CREATE, ResourceType.CLUSTER, CLUSTER)
                    or allowed(broker, request, Operation.CREATE, ResourceType.TOPIC, name)):
                topics.append({"error_code": ErrorCode.topic_authorization_failed, "name": name,
                               "partitions": []})
                continue
            try:
                topic = await broker.topology.create_topic(name, None, None, None)
            except TopicError as exc:
                if exc.kafka_error == "INVALID_TOPIC_EXCEPTION":
                    topics.append({"error_code": 17, "name": name, "partitions": []})
                else:
                    # TOPIC_ALREADY_EXISTS: created by another request just now; or e.g.
                    # fewer live brokers than default.replication.factor: ask again.
                    topics.append({"error_code": ErrorCode.leader_not_available, "name": name,
                                   "partitions": []})
                continue
            if broker.topology.partition_view(name, 0).leader < 0:
                # Kafka answers a topic it has just created LEADER_NOT_AVAILABLE while
                # its partitions have no leader (in a cluster, until the controller has
                # acted; a single node leads them at once).
                topics.append({"error_code": ErrorCode.leader_not_available, "name": name,
                               "topic_id": topic.topic_id, "partitions": []})
                continue
        entry = topic_entry(broker, topic)
        if getattr(body, "include_topic_authorized_operations", False):  # v8+, KIP-430
            entry["topic_authorized_operations"] = authorized_operations(
                broker, request, ResourceType.TOPIC, name)
        topics.append(entry)
    cluster_operations = NO_AUTHORIZED_OPERATIONS
    if getattr(body, "include_cluster_authorized_operations", False):  # v8-10
        cluster_operations = authorized_operations(broker, request, ResourceType.CLUSTER,
                                                   CLUSTER)
    return respond(request, {
        "throttle_time": 0,
        "brokers": brokers(broker, request),
        "cluster_id": broker.metadata.cluster_id,
        "controller_id": controller_id(broker),
        "topics": topics,
        "cluster_authorized_operations": cluster_operations,
    })


API = Api(3, "Metadata", 0, 12, handle)
