"""Metadata (3): brokers, cluster id and topics with their partitions.

This node leads every partition and is its only replica. Unknown topics are created on
request when ``auto.create.topics.enable`` is on and the client allows it (v4+), with
``num.partitions`` partitions, as Kafka does."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from odradek.protocol.codec import Request
from odradek.server.handlers.base import LEADER_EPOCH, Api, respond
from odradek.server.metadata import Topic, TopicError, validate_topic_name

if TYPE_CHECKING:
    from odradek.server.broker import Broker



def topic_entry(broker: Broker, topic: Topic) -> dict[str, Any]:
    node = broker.node_id
    return {
        "error_code": 0,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": [
            {"error_code": 0, "partition_index": p, "leader_id": node,
             "leader_epoch": LEADER_EPOCH, "replica_nodes": [node], "isr_nodes": [node],
             "offline_replicas": []}
            for p in range(topic.partitions)
        ],
        "topic_authorized_operations": -2147483648,
    }


async def handle(broker: Broker, request: Request) -> bytes:
    body = request.body
    assert broker.metadata is not None
    requested = body.topics
    if requested is None or (request.api_version == 0 and not requested):
        names: list[str | None] = list(sorted(broker.metadata.topics))
    else:
        # v10+ may name a topic by id only (KIP-516): KIP-848 consumers resolve the
        # topic ids of their assignment this way.
        by_id = {t.topic_id: t.name for t in broker.metadata.topics.values()}
        names = [t.name if t.name is not None else by_id.get(getattr(t, "topic_id", None))
                 for t in requested]
    auto_create = broker.config["auto.create.topics.enable"] and getattr(
        body, "allow_auto_topic_creation", True)
    topics = []
    for name in names:
        if name is None:  # an id we do not know
            topics.append({"error_code": 100, "name": None, "partitions": []})
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
            try:
                topic = broker.create_topic(name)
            except TopicError as exc:
                topics.append({"error_code": 3 if exc.kafka_error == "TOPIC_ALREADY_EXISTS"
                               else 17, "name": name, "partitions": []})
                continue
        topics.append(topic_entry(broker, topic))
    return respond(request, {
        "throttle_time": 0,
        "brokers": [{"node_id": broker.node_id, "host": broker.advertised_host,
                     "port": broker.port, "rack": None}],
        "cluster_id": broker.metadata.cluster_id,
        "controller_id": broker.node_id,
        "topics": topics,
        "cluster_authorized_operations": -2147483648,
    })


API = Api(3, "Metadata", 0, 12, handle)
