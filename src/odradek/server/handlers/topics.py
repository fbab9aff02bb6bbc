"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37).

Internal topics (``__consumer_offsets``) cannot be deleted or grow partitions:
INVALID_TOPIC_EXCEPTION, the error Kafka gives a client that produces to one. Creating one
is TOPIC_ALREADY_EXISTS, as it is created at startup.

One node: a replication factor above 1 is INVALID_REPLICATION_FACTOR, as Kafka answers
when there are fewer brokers than replicas; explicit replica assignments may name only
this node."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from odradek.protocol.codec import Request
from odradek.server.handlers.base import Api, respond
from odradek.server.metadata import TopicError

if TYPE_CHECKING:
    from odradek.server.broker import Broker

INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
TOPIC_DELETION_DISABLED = 73
UNKNOWN_TOPIC_ID = 100
INVALID_TOPIC_EXCEPTION = 17


def _code(name: str) -> int:
    from kio.schema.errors import ErrorCode

    return ErrorCode[name.lower()].value


async def create_topics(broker: Broker, request: Request) -> bytes:
    body = request.body
    validate_only = getattr(body, "validate_only", False)
    results = []
    for t in body.topics:
        entry: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None,
                                 "num_partitions": -1, "replication_factor": -1,
                                 "configs": None}
        configs = {c.name: c.value for c in t.configs}
        partitions = t.num_partitions
        if t.assignments:
            partitions = len(t.assignments)
        try:
            if t.replication_factor > 1:
                raise TopicError("INVALID_REPLICATION_FACTOR",
                                 f"replication factor {t.replication_factor} is larger than "
                                 "the 1 broker available")
            for a in t.assignments:
                if list(a.broker_ids) != [broker.node_id]:
                    raise TopicError("INVALID_REPLICA_ASSIGNMENT",
                                     f"partition {a.partition_index} assigned to brokers "
                                     f"{list(a.broker_ids)}; only {broker.node_id} exists")
            topic = broker.create_topic(t.name, partitions, configs,
                                        validate_only=validate_only)
        except TopicError as exc:
            entry.update(error_code=_code(exc.kafka_error), error_message=str(exc))
        else:
            entry.update(topic_id=topic.topic_id, num_partitions=topic.partitions,
                         replication_factor=1, configs=[
                             {"name": k, "value": v, "read_only": False, "config_source": 1,
                              "is_sensitive": False}
                             for k, v in broker.log_config_for(t.name).to_kafka().items()
                         ] if not validate_only else [])
        results.append(entry)
    _topics_changed(broker)
    return respond(request, {"throttle_time": 0, "topics": results})


async def delete_topics(broker: Broker, request: Request) -> bytes:
    body = request.body
    if hasattr(body, "topics"):  # v6+: by name or by id
        wanted = [(t.name, t.topic_id) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    assert broker.metadata is not None
    by_id = {t.topic_id: t.name for t in broker.metadata.topics.values()}
    results = []
    for name, topic_id in wanted:
        if name is None and topic_id is not None:
            name = by_id.get(topic_id)
            if name is None:
                results.append({"name": None, "topic_id": topic_id,
                                "error_code": UNKNOWN_TOPIC_ID,
                                "error_message": f"no topic has id {topic_id}"})
                continue
        entry: dict[str, Any] = {"name": name, "topic_id": topic_id, "error_code": 0,
                                 "error_message": None}
        topic = broker.topic(name)
        if not broker.config["delete.topic.enable"]:
            entry.update(error_code=TOPIC_DELETION_DISABLED,
                         error_message="delete.topic.enable is false")
        elif topic is not None and topic.internal:
            entry.update(error_code=INVALID_TOPIC_EXCEPTION,
                         error_message=f"{name} is an internal topic: deleting it would lose "
                         "every consumer group's state")
        else:
            try:
                topic = broker.delete_topic(name)
                entry["topic_id"] = topic.topic_id
            except TopicError as exc:
                entry.update(error_code=_code(exc.kafka_error), error_message=str(exc))
        results.append(entry)
    _topics_changed(broker)
    return respond(request, {"throttle_time": 0, "responses": results})


async def create_partitions(broker: Broker, request: Request) -> bytes:
    body = request.body
    results = []
    for t in body.topics:
        entry: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None}
        try:
            topic = broker.topic(t.name)
            if topic is not None and topic.internal:
                # Groups are placed by hashing over the partition count: it may not change.
                raise TopicError("INVALID_TOPIC_EXCEPTION",
                                 f"{t.name} is an internal topic; its partition count is fixed")
            if t.assignments:
                for a in t.assignments:
                    if list(a.broker_ids) != [broker.node_id]:
                        raise TopicError("INVALID_REPLICA_ASSIGNMENT",
                                         f"only broker {broker.node_id} exists")
            broker.add_partitions(t.name, t.count, validate_only=body.validate_only)
        except TopicError as exc:
            entry.update(error_code=_code(exc.kafka_error), error_message=str(exc))
        results.append(entry)
    _topics_changed(broker)
    return respond(request, {"throttle_time": 0, "results": results})


def _topics_changed(broker: Broker) -> None:
    """KIP-848 groups assign from topic metadata: tell them it may have changed."""
    if broker.groups is not None:
        broker.groups.topics_changed()


CREATE_TOPICS = Api(19, "CreateTopics", 2, 7, create_topics)
DELETE_TOPICS = Api(20, "DeleteTopics", 1, 6, delete_topics)
CREATE_PARTITIONS = Api(37, "CreatePartitions", 0, 3, create_partitions)
