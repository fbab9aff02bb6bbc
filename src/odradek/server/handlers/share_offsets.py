"""A share group's offsets for operators (KIP-932): DescribeShareGroupOffsets (90),
AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92), what Kafka's
``kafka-share-groups.sh --describe / --reset-offsets / --delete-offsets`` and the Admin
client's list/alter/deleteShareGroupOffsets send to the group's coordinator.

The coordinator (coordinator/share_group.py) says which share partitions a group has
state for and whether it may be changed (only while the group has no members:
NON_EMPTY_GROUP otherwise, as Kafka); the states themselves are the share coordinator's
(``server/coordinators/share_state.py``):

- describe: each partition's start offset (-1 when no state has been written yet, which
  the Java Admin shows as no offset) and, from v1, its lag: the records from the start
  offset to the high watermark not yet acknowledged or archived (-1 when the partition
  is not led here, so its high watermark is not known);
- alter: a new state at the given start offset, in a new state epoch, so that a leader
  still holding the old state is fenced at its next write and reloads;
- delete: the states go; the group starts again from ``share.auto.offset.reset`` at its
  next fetch.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.coordinator.consumer_records import InitializedTopics
from odradek.coordinator.share_group import ShareOffsetsCheck
from odradek.coordinator.share_partition import ACKNOWLEDGED, ARCHIVED
from odradek.protocol.codec import Request
from odradek.security.acls import Operation, ResourceType
from odradek.server.coordinators.coordinator_runtime import CoordinatorUnavailable
from odradek.server.handlers.base import allowed, respond
from odradek.server.handlers.groups import group_runtime
from odradek.server.share.fetching import SHARE_GROUPS_DISABLED, share_level

if TYPE_CHECKING:
    from odradek.coordinator.share_coordinator import ShareState
    from odradek.server.broker import Broker

_NO_ID = uuid.UUID(int=0)


def _topic_id(broker: Broker, name: str) -> uuid.UUID | None:
    assert broker.metadata is not None
    topic = broker.metadata.topics.get(name)
    return None if topic is None or topic.internal else topic.topic_id


def _lag(broker: Broker, topic: str, partition: int, state: ShareState) -> int:
    lg = broker.get_log(topic, partition)
    if lg is None:
        return -1
    done = sum(b.last_offset - max(b.first_offset, state.start_offset) + 1
               for b in state.batches
               if b.delivery_state in (ACKNOWLEDGED, ARCHIVED)
               and b.last_offset >= state.start_offset)
    return max(0, lg.high_watermark - state.start_offset - done)


async def _describe_group(broker: Broker, request: Request, group: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"group_id": group.group_id, "topics": [], "error_code": 0,
                           "error_message": None}
    if not allowed(broker, request, Operation.DESCRIBE, ResourceType.GROUP, group.group_id):
        out.update(error_code=ErrorCode.group_authorization_failed,
                   error_message="Group authorization failed.")
        return out
    try:
        check: ShareOffsetsCheck = group_runtime(broker).coordinator_for(
            group.group_id).share_state_partitions(group.group_id)
    except CoordinatorUnavailable as exc:
        out.update(error_code=exc.error_code, error_message=str(exc))
        return out
    if check.error_code:
        out.update(error_code=check.error_code, error_message=check.error_message)
        return out
    names = {tid: name for tid, (name, _) in check.partitions.items()}
    if group.topics is None:
        wanted = [(name, sorted(parts)) for _, (name, parts) in
                  sorted(check.partitions.items(), key=lambda kv: kv[1][0])]
    else:
        wanted = [(t.topic_name, list(t.partitions)) for t in group.topics]
    runtime = broker.share_state
    assert runtime is not None
    for name, partitions in wanted:
        tid = _topic_id(broker, name)
        entry: dict[str, Any] = {"topic_name": name, "topic_id": tid or _NO_ID,
                                 "partitions": []}
        out["topics"].append(entry)
        denied = not allowed(broker, request, Operation.DESCRIBE, ResourceType.TOPIC, name)
        for p in partitions:
            part: dict[str, Any] = {"partition_index": p, "start_offset": -1,
                                    "leader_epoch": -1, "lag": -1, "error_code": 0,
                                    "error_message": None}
            entry["partitions"].append(part)
            if denied:
                part["error_code"] = ErrorCode.topic_authorization_failed
                continue
            if tid is None:
                part["error_code"] = ErrorCode.unknown_topic_or_partition
                continue
            if tid not in names:
                continue  # never assigned: no state
            try:
                state = await runtime.read((group.group_id, tid, p))
            except CoordinatorUnavailable as exc:
                part.update(error_code=exc.error_code, error_message=str(exc))
                continue
            if state is not None:
                part.update(start_offset=state.start_offset, leader_epoch=state.leader_epoch,
                            lag=_lag(broker, name, p, state))
    return out


async def describe_share_group_offsets(broker: Broker, request: Request) -> bytes:
    if share_level(broker) < 1:
        return respond(request, {"throttle_time": 0, "groups": [
            {"group_id": g.group_id, "topics": [],
             "error_code": ErrorCode.unsupported_version,
             "error_message": SHARE_GROUPS_DISABLED} for g in request.body.groups]})
    groups = [await _describe_group(broker, request, g) for g in request.body.groups]
    return respond(request, {"throttle_time": 0, "groups": groups})


def _refused(code: int, message: str | None) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "error_message": message,
            "responses": []}


def _group_refusal(broker: Broker, request: Request, operation: Operation
                   ) -> dict[str, Any] | None:
    """An alter or delete refused as a whole (share groups off, the group not allowed)."""
    if share_level(broker) < 1:
        return _refused(ErrorCode.unsupported_version, SHARE_GROUPS_DISABLED)
    if not allowed(broker, request, operation, ResourceType.GROUP, request.body.group_id):
        return _refused(ErrorCode.group_authorization_failed, "Group authorization failed.")
    return None


async def _group_check(broker: Broker, group_id: str, operation: Callable[[Any, int, int], Any]
                       ) -> ShareOffsetsCheck:
    """The group coordinator's check of an alter or delete (its own errors, or
    NOT_COORDINATOR and the like when it cannot be asked)."""
    try:
        check: ShareOffsetsCheck = await group_runtime(broker).call(group_id, operation)
    except CoordinatorUnavailable as exc:
        return ShareOffsetsCheck(exc.error_code, str(exc), {})
    return check


def _topic_check(broker: Broker, request: Request, name: str
                 ) -> tuple[uuid.UUID | None, int]:
    """A named topic's id (None if it does not exist) and the error for it: READ not
    allowed, or unknown."""
    tid = _topic_id(broker, name)
    if not allowed(broker, request, Operation.READ, ResourceType.TOPIC, name):
        return tid, ErrorCode.topic_authorization_failed
    return tid, ErrorCode.unknown_topic_or_partition if tid is None else 0


async def alter_share_group_offsets(broker: Broker, request: Request) -> bytes:
    body = request.body
    group_id = body.group_id
    refused = _group_refusal(broker, request, Operation.READ)
    if refused is not None:
        return respond(request, refused)
    responses: list[dict[str, Any]] = []
    wanted: InitializedTopics = {}
    starts: dict[tuple[uuid.UUID, int], int] = {}
    for t in body.topics:
        tid, code = _topic_check(broker, request, t.topic_name)
        responses.append({"topic_name": t.topic_name, "topic_id": tid or _NO_ID,
                          "partitions": [{"partition_index": p.partition_index,
                                          "error_code": code, "error_message": None}
                                         for p in t.partitions]})
        if code or tid is None:
            continue
        wanted[tid] = (t.topic_name, frozenset(p.partition_index for p in t.partitions))
        for p in t.partitions:
            starts[(tid, p.partition_index)] = p.start_offset
    check = await _group_check(broker, group_id, lambda c, token, now: c.share_alter_offsets(
        group_id, wanted, token=token, now_ms=now))
    if check.error_code:
        return respond(request, _refused(check.error_code, check.error_message))
    runtime = broker.share_state
    assert runtime is not None
    results: dict[tuple[uuid.UUID, int], tuple[int, str | None]] = {}
    for (tid, partition), start in starts.items():
        key = (group_id, tid, partition)
        try:
            kept = await runtime.read(key)
            written = await runtime.write(
                key, state_epoch=(kept.state_epoch + 1) if kept is not None else 0,
                leader_epoch=kept.leader_epoch if kept is not None else 0,
                start_offset=start, batches=())
            results[(tid, partition)] = (written.error_code, written.error_message)
        except CoordinatorUnavailable as exc:
            results[(tid, partition)] = (exc.error_code, str(exc))
        broker.share_partitions.forget(key)
    for topic in responses:
        for p in topic["partitions"]:
            found = results.get((topic["topic_id"], p["partition_index"]))
            if found is not None:
                p["error_code"], p["error_message"] = found
    return respond(request, {"throttle_time": 0, "error_code": 0, "error_message": None,
                             "responses": responses})


async def delete_share_group_offsets(broker: Broker, request: Request) -> bytes:
    body = request.body
    group_id = body.group_id
    refused = _group_refusal(broker, request, Operation.DELETE)
    if refused is not None:
        return respond(request, refused)
    responses: list[dict[str, Any]] = []
    ids = []
    for t in body.topics:
        tid, code = _topic_check(broker, request, t.topic_name)
        responses.append({"topic_name": t.topic_name, "topic_id": tid or _NO_ID,
                          "error_code": code, "error_message": None})
        if not code and tid is not None:
            ids.append(tid)
    check = await _group_check(broker, group_id, lambda c, token, now: c.share_delete_offsets(
        group_id, ids, token=token, now_ms=now))
    if check.error_code:
        return respond(request, _refused(check.error_code, check.error_message))
    runtime = broker.share_state
    assert runtime is not None
    keys = [(group_id, tid, p) for tid, (_, parts) in check.partitions.items()
            for p in sorted(parts)]
    failed: dict[uuid.UUID, tuple[int, str]] = {}
    for key in keys:
        try:
            await runtime.delete([key])
        except CoordinatorUnavailable as exc:
            failed[key[1]] = (exc.error_code, str(exc))
        broker.share_partitions.forget(key)
    for topic in responses:
        if topic["topic_id"] in failed:
            topic["error_code"], topic["error_message"] = failed[topic["topic_id"]]
    return respond(request, {"throttle_time": 0, "error_code": 0, "error_message": None,
                             "responses": responses})
