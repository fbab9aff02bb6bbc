"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37).

Internal topics (``__consumer_offsets``) cannot be deleted or grow partitions:
INVALID_TOPIC_EXCEPTION, the error Kafka gives a client that produces to one. Creating one
is TOPIC_ALREADY_EXISTS, as it is created at startup.

One node: a replication factor above 1 is INVALID_REPLICATION_FACTOR, as Kafka answers
when there are fewer brokers than replicas; explicit replica assignments may name only
this node. In a cluster any broker writes the new assignment to ZooKeeper (placed over
the live brokers as Kafka's AdminUtils does, rack-aware with ``broker.rack``), and the
answer waits, up to the request's timeout, until the controller has given every new
partition a leader (or, for DeleteTopics, until the topic is gone): a client that
produces right after CreateTopics finds its leaders."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.protocol.codec import Request
from odradek.protocol.messages import ms
from odradek.security.acls import Operation, ResourceType
from odradek.server.handlers.base import (
    CLUSTER,
    Api,
    allowed,
    respond,
)
from odradek.server.metadata import TopicError
from odradek.server.tiered import check_topic_configs

if TYPE_CHECKING:
    import uuid

    from odradek.server.broker import Broker


# Kafka's controller refuses an operation that would write more than this many metadata
# records at once (QuorumController.MAX_RECORDS_PER_USER_OP: a topic is one, each of its
# partitions one) with POLICY_VIOLATION for the whole request. Here it also bounds what
# one request can make the broker create (each partition is a log: files, descriptors).
MAX_RECORDS_PER_USER_OP = 10_000
TOO_LARGE = "Unable to perform excessively large batch operation."


def _too_large(request: Request, entries: list[dict[str, Any]]) -> bytes:
    """The answer refusing every topic of an operation over MAX_RECORDS_PER_USER_OP."""
    for entry in entries:
        entry.update(error_code=ErrorCode.policy_violation, error_message=TOO_LARGE)
    key = "topics" if request.api_key == 19 else "results"
    return respond(request, {"throttle_time": 0, key: entries})


def _code(name: str) -> int:
    return ErrorCode[name.lower()].value


async def create_topics(broker: Broker, request: Request) -> bytes:
    body = request.body
    validate_only = getattr(body, "validate_only", False)
    results = []
    created: dict[str, int] = {}  # name -> partitions
    names = [t.name for t in body.topics]
    duplicated = {name for name in names if names.count(name) > 1}
    for name in sorted(duplicated):  # as Kafka: one INVALID_REQUEST entry per name
        results.append({"name": name, "error_code": ErrorCode.invalid_request,
                        "error_message": "Duplicate topic name.", "num_partitions": -1,
                        "replication_factor": -1, "configs": None})
    default = broker.config["num.partitions"]
    records = sum(1 + (len(t.assignments) if t.assignments else
                       default if t.num_partitions == -1 else max(t.num_partitions, 0))
                  for t in body.topics)
    if records > MAX_RECORDS_PER_USER_OP:
        return _too_large(request, [
            {"name": t.name, "num_partitions": -1, "replication_factor": -1, "configs": None}
            for t in body.topics])
    for t in body.topics:
        if t.name in duplicated:
            continue
        entry: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None,
                                 "num_partitions": -1, "replication_factor": -1,
                                 "configs": None}
        if not (allowed(broker, request, Operation.CREATE, ResourceType.CLUSTER, CLUSTER)
                or allowed(broker, request, Operation.CREATE, ResourceType.TOPIC, t.name)):
            entry.update(error_code=ErrorCode.topic_authorization_failed,
                         error_message="Authorization failed.")
            results.append(entry)
            continue
        configs = {c.name: c.value for c in t.configs}
        partitions = t.num_partitions
        assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments} or None
        if assignment:
            partitions = len(assignment)
        elif t.replication_factor == 0 or t.replication_factor < -1:
            # Kafka's controller: -1 is "the default", anything else must be positive.
            entry.update(error_code=ErrorCode.invalid_replication_factor, error_message=(
                "Replication factor must be larger than 0, or -1 to use the default value."))
            results.append(entry)
            continue
        elif t.num_partitions < -1:
            entry.update(error_code=ErrorCode.invalid_partitions, error_message=(
                "Number of partitions was set to an invalid non-positive value."))
            results.append(entry)
            continue
        try:
            check_topic_configs(broker, configs)
            topic = await broker.topology.create_topic(
                t.name, partitions, t.replication_factor, configs, assignment=assignment,
                validate_only=validate_only)
        except TopicError as exc:
            entry.update(error_code=_code(exc.kafka_error), error_message=str(exc))
        else:
            created[t.name] = topic.partitions
            rf = (broker.topology.replication_factor(t.name) if not validate_only
                  else max(t.replication_factor, 1))
            entry.update(topic_id=topic.topic_id, num_partitions=topic.partitions,
                         replication_factor=rf, configs=[
                             {"name": k, "value": v, "read_only": False, "config_source": 1,
                              "is_sensitive": False}
                             for k, v in broker.log_config_for(t.name).to_kafka().items()
                         ] if not validate_only else [])
        results.append(entry)
    if created and not validate_only:
        await broker.topology.wait_for_leaders(created, ms(body.timeout) / 1000)
    _topics_changed(broker)
    return respond(request, {"throttle_time": 0, "topics": results})


async def delete_topics(broker: Broker, request: Request) -> bytes:
    body = request.body
    if hasattr(body, "topics"):  # v6+: by name or by id
        wanted = [(t.name, t.topic_id) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    assert broker.metadata is not None
    by_id = broker.metadata.names_by_id
    results = []
    deleted: dict[str, uuid.UUID] = {}  # name -> topic id
    for name, topic_id in wanted:
        if name is None and topic_id is not None:
            name = by_id.get(topic_id)
            if name is None:
                results.append({"name": None, "topic_id": topic_id,
                                "error_code": ErrorCode.unknown_topic_id,
                                "error_message": f"no topic has id {topic_id}"})
                continue
        entry: dict[str, Any] = {"name": name, "topic_id": topic_id, "error_code": 0,
                                 "error_message": None}
        topic = broker.topic(name)
        if not allowed(broker, request, Operation.DELETE, ResourceType.TOPIC, name):
            entry.update(error_code=ErrorCode.topic_authorization_failed,
                         error_message="Authorization failed.")
        elif not broker.config["delete.topic.enable"]:
            entry.update(error_code=ErrorCode.topic_deletion_disabled,
                         error_message="delete.topic.enable is false")
        elif topic is not None and topic.internal:
            entry.update(error_code=ErrorCode.invalid_topic_exception,
                         error_message=f"{name} is an internal topic: deleting it would lose "
                         "every consumer group's state")
        else:
            try:
                topic = await broker.topology.delete_topic(name)
                entry["topic_id"] = deleted[name] = topic.topic_id
            except TopicError as exc:
                entry.update(error_code=_code(exc.kafka_error), error_message=str(exc))
        results.append(entry)
    timeout_ms = ms(body.timeout)
    if deleted and timeout_ms > 0:
        # Kafka's DelayedDeleteTopics: a deletion not finished within the request's
        # timeout answers REQUEST_TIMED_OUT (a cluster's goes on: its marker is in
        # ZooKeeper). A timeout of 0 asks only that the deletion be recorded, and it is.
        pending = await broker.topology.wait_deleted(deleted, timeout_ms / 1000)
        for entry in results:
            if entry["name"] in pending and entry["error_code"] == 0:
                entry.update(error_code=ErrorCode.request_timed_out, error_message=(
                    f"the deletion of {entry['name']} did not finish within {timeout_ms} "
                    "ms; it goes on"))
    _topics_changed(broker)
    return respond(request, {"throttle_time": 0, "responses": results})


async def create_partitions(broker: Broker, request: Request) -> bytes:
    body = request.body
    results = []
    grown: dict[str, int] = {}  # name -> partitions
    added = sum(max(t.count - (topic.partitions if (topic := broker.topic(t.name)) else 0), 0)
                for t in body.topics)
    if added > MAX_RECORDS_PER_USER_OP:
        return _too_large(request, [{"name": t.name} for t in body.topics])
    for t in body.topics:
        entry: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None}
        if not allowed(broker, request, Operation.ALTER, ResourceType.TOPIC, t.name):
            entry.update(error_code=ErrorCode.topic_authorization_failed,
                         error_message="Authorization failed.")
            results.append(entry)
            continue
        try:
            topic = broker.topic(t.name)
            if topic is not None and topic.internal:
                # Groups are placed by hashing over the partition count: it may not change.
                raise TopicError("INVALID_TOPIC_EXCEPTION",
                                 f"{t.name} is an internal topic; its partition count is fixed")
            assignment = [list(a.broker_ids) for a in t.assignments or ()] or None
            await broker.topology.add_partitions(t.name, t.count, assignment,
                                                 validate_only=body.validate_only)
            grown[t.name] = t.count
        except TopicError as exc:
            entry.update(error_code=_code(exc.kafka_error), error_message=str(exc))
        results.append(entry)
    if grown and not body.validate_only:
        await broker.topology.wait_for_leaders(grown, ms(body.timeout) / 1000)
    _topics_changed(broker)
    return respond(request, {"throttle_time": 0, "results": results})


def _topics_changed(broker: Broker) -> None:
    """KIP-848 groups assign from topic metadata: tell them it may have changed."""
    if broker.groups is not None:
        broker.groups.topics_changed()


CREATE_TOPICS = Api(19, "CreateTopics", 2, 7, create_topics)
DELETE_TOPICS = Api(20, "DeleteTopics", 1, 6, delete_topics)
CREATE_PARTITIONS = Api(37, "CreatePartitions", 0, 3, create_partitions)
