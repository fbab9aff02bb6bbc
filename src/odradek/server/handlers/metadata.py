"""Metadata (3): brokers, cluster id and topics with their partitions; and
DescribeTopicPartitions (75), the same partitions a page at a time.

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

from odradek.coordinator import INTERNAL_TOPICS
from odradek.protocol.codec import Request
from odradek.protocol.messages import ZERO_UUID
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
    from odradek.server.broker import Broker


def topic_entry(broker: Broker, topic: Topic, indexes: range | None = None) -> dict[str, Any]:
    """A topic's partitions (those of ``indexes``, else all) as the topology sees them:
    their live leaders (a partition without one is LEADER_NOT_AVAILABLE), epochs,
    replicas and ISRs."""
    view = broker.topology.partition_view
    partitions = []
    for p in range(topic.partitions) if indexes is None else indexes:
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
        # topic ids of their assignment this way (the metadata store's index of ids).
        by_id = broker.metadata.names_by_id
        names = [t.name if t.name is not None
                 else by_id.get(t.topic_id) if getattr(t, "topic_id", None) is not None
                 else None for t in requested]
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
        "error_code": 0,  # v13: REBOOTSTRAP_REQUIRED (KIP-1102) is never asked of a client
        "brokers": brokers(broker, request),
        "cluster_id": broker.metadata.cluster_id,
        "controller_id": controller_id(broker),
        "topics": topics,
        "cluster_authorized_operations": cluster_operations,
    })


async def describe_topic_partitions(broker: Broker, request: Request) -> bytes:
    """DescribeTopicPartitions (75, KIP-966): Metadata's partitions, a page at a time.

    The topics named (all there are, if none is named), in name order, from the
    request's cursor on; at most ``response_partition_limit`` partitions (and at most
    ``max.request.partition.size.limit``) in one answer, and if more were left, the
    ``next_cursor`` to ask from: the topic and partition where this page stopped. As
    Kafka's: a cursor naming a topic the request does not name is INVALID_REQUEST; a
    named topic one may not describe is TOPIC_AUTHORIZATION_FAILED with the zero id
    (left out, unsaid, when all topics were asked for); a named topic that does not
    exist is UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION if its name is not
    valid), and no topic is created. Eligible leader replicas (KIP-966's ELR, KRaft's)
    are not kept by this broker: both lists are empty, as from a Kafka cluster with
    ELR off."""
    body = request.body
    assert broker.metadata is not None
    cursor = body.cursor
    after = cursor.topic_name if cursor is not None else ""
    every_topic = not body.topics
    names = set(broker.metadata.topics) if every_topic else {t.name for t in body.topics}
    names = {n for n in names if n >= after}
    if cursor is not None and not every_topic and cursor.topic_name not in names:
        # Kafka's InvalidRequestException, as its error response carries it: on every
        # topic asked for (the response has no error of its own).
        return respond(request, {"throttle_time": 0, "topics": [
            {"error_code": ErrorCode.invalid_request, "name": t.name, "topic_id": ZERO_UUID,
             "partitions": []} for t in body.topics]})
    topics: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    shown: list[str] = []
    for name in sorted(names):
        if allowed(broker, request, Operation.DESCRIBE, ResourceType.TOPIC, name):
            shown.append(name)
        elif not every_topic:
            refused.append({"error_code": ErrorCode.topic_authorization_failed,
                            "name": name, "topic_id": ZERO_UUID, "partitions": []})
    first = cursor.partition_index if cursor is not None and after in shown else 0
    remaining = min(body.response_partition_limit,
                    broker.config["max.request.partition.size.limit"])
    next_cursor = None
    for name in shown:
        if remaining <= 0:
            # Whatever the previous topic left, this one starts the next page.
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        topic = broker.topic(name)
        if topic is None:
            if not every_topic:
                try:
                    validate_topic_name(name)
                    code = ErrorCode.unknown_topic_or_partition
                except TopicError:
                    code = ErrorCode.invalid_topic_exception
                # with the operations one may do on it, as Kafka's answer has them
                topics.append({"error_code": code, "name": name, "topic_id": ZERO_UUID,
                               "is_internal": name in INTERNAL_TOPICS, "partitions": [],
                               "topic_authorized_operations": authorized_operations(
                                   broker, request, ResourceType.TOPIC, name)})
            continue
        start = first if name == after else 0
        end = min(topic.partitions, start + remaining)
        entry = topic_entry(broker, topic, range(start, end))
        for p in entry["partitions"]:
            p["eligible_leader_replicas"] = p["last_known_elr"] = []
        entry["topic_authorized_operations"] = authorized_operations(
            broker, request, ResourceType.TOPIC, name)
        topics.append(entry)
        if end < topic.partitions:
            next_cursor = {"topic_name": name, "partition_index": end}
            break
        remaining -= end - start
    return respond(request, {"throttle_time": 0, "topics": topics + refused,
                             "next_cursor": next_cursor})


API = Api(3, "Metadata", 0, 13, handle)
DESCRIBE_TOPIC_PARTITIONS = Api(75, "DescribeTopicPartitions", 0, 0, describe_topic_partitions)
