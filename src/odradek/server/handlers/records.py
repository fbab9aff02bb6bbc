"""DeleteRecords (21) and OffsetForLeaderEpoch (23): requests about a partition's
offsets rather than its records.

DeleteRecords moves a partition's log start offset forward (whole segments below it are
deleted; the rest stay but are no longer served), and the new start is checkpointed at
once so it survives a restart.

OffsetForLeaderEpoch (KIP-101, KIP-320) tells a client or follower where an epoch of
leadership ended, so it can detect a log that diverged under it: Kafka's
``LeaderEpochFileCache.endOffsetFor`` over the partition's leader epoch cache
(``storage/leader_epoch.py``). A single node is leader from the start and never changes
(every batch is written with partitionLeaderEpoch 0): its cache has one entry. In a
cluster only the leader answers, and a request naming another current leader epoch gets
FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.cluster.replication import epoch_error
from odradek.protocol.codec import Request
from odradek.security.acls import Operation, ResourceType
from odradek.server.errors import error_code
from odradek.server.handlers.base import (
    CLUSTER,
    Api,
    allowed,
    respond,
)
from odradek.storage.errors import StorageError

if TYPE_CHECKING:
    from odradek.server.broker import Broker


HIGH_WATERMARK = -1  # DeleteRecords' "up to the high watermark"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


def delete_before(broker: Broker, topic: str, partition: int, offset: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"partition_index": partition, "low_watermark": -1,
                             "error_code": 0}
    lg = broker.get_log(topic, partition)
    if lg is None:
        entry["error_code"] = broker.missing_partition_error(topic, partition)
        return entry
    if not lg.config.deletes:
        # Kafka refuses to cut a compact-only log: its retention is by key, not offset.
        entry["error_code"] = ErrorCode.policy_violation
        return entry
    # Only what is committed may be deleted (on a single node: everything appended).
    if offset == HIGH_WATERMARK:
        offset = lg.high_watermark
    if offset < 0 or offset > lg.high_watermark:
        entry["error_code"] = ErrorCode.offset_out_of_range
        return entry
    try:
        entry["low_watermark"] = lg.delete_records_before(offset)
    except (StorageError, OSError) as exc:
        entry["error_code"] = error_code(exc)
    return entry


async def delete_records(broker: Broker, request: Request) -> bytes:
    assert broker.logs is not None
    topics = []
    for t in request.body.topics:
        if not allowed(broker, request, Operation.DELETE, ResourceType.TOPIC, t.name):
            topics.append({"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "low_watermark": -1,
                 "error_code": ErrorCode.topic_authorization_failed} for p in t.partitions]})
            continue
        topics.append({
            "name": t.name,
            "partitions": [delete_before(broker, t.name, p.partition_index, p.offset)
                           for p in t.partitions],
        })
    # The new log start offsets must survive a crash, not only a clean stop.
    if any(p["error_code"] == 0 for t in topics for p in t["partitions"]):
        broker.logs.write_checkpoints()
    return respond(request, {"throttle_time": 0, "topics": topics})


def epoch_end(broker: Broker, topic: str, p: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"partition": p.partition, "error_code": 0,
                             "leader_epoch": UNDEFINED_EPOCH,
                             "end_offset": UNDEFINED_EPOCH_OFFSET}
    lg = broker.get_log(topic, p.partition)
    if lg is None:
        entry["error_code"] = broker.missing_partition_error(topic, p.partition)
        return entry
    # current_leader_epoch (KIP-320): the epoch the client believes the leader has; -1
    # means it does not say.
    current = broker.topology.leader_epoch(topic, p.partition)
    entry["error_code"] = epoch_error(getattr(p, "current_leader_epoch", -1), current)
    if not entry["error_code"]:
        epoch, end = lg.end_offset_for_epoch(p.leader_epoch)
        entry.update(leader_epoch=epoch, end_offset=end)
    return entry


async def offset_for_leader_epoch(broker: Broker, request: Request) -> bytes:
    topics = []
    follower = getattr(request.body, "replica_id", -1) >= 0
    for t in request.body.topics:
        # Kafka: a follower's request needs CLUSTER_ACTION, a client's DESCRIBE on the topic.
        if not (allowed(broker, request, Operation.CLUSTER_ACTION, ResourceType.CLUSTER,
                        CLUSTER) if follower else
                allowed(broker, request, Operation.DESCRIBE, ResourceType.TOPIC, t.topic)):
            topics.append({"topic": t.topic, "partitions": [
                {"partition": p.partition, "error_code": ErrorCode.topic_authorization_failed,
                 "leader_epoch": UNDEFINED_EPOCH, "end_offset": UNDEFINED_EPOCH_OFFSET}
                for p in t.partitions]})
            continue
        topics.append({"topic": t.topic,
                       "partitions": [epoch_end(broker, t.topic, p) for p in t.partitions]})
    return respond(request, {"throttle_time": 0, "topics": topics})


DELETE_RECORDS = Api(21, "DeleteRecords", 0, 2, delete_records)
OFFSET_FOR_LEADER_EPOCH = Api(23, "OffsetForLeaderEpoch", 2, 4, offset_for_leader_epoch)
