"""Consumer groups, classic protocol: JoinGroup (11), SyncGroup (14), Heartbeat (12),
LeaveGroup (13), OffsetCommit (8), OffsetFetch (9), ListGroups (16), DescribeGroups (15),
DeleteGroups (42), OffsetDelete (47).

Each handler maps its request, whatever the version, onto the coordinator's
version-agnostic arguments, has the group runtime (``server/coordinators/groups.py``) run it, and
describes the answer once for ``respond`` to fit to the version asked for.

Routing: a group is coordinated by the coordinator of its ``__consumer_offsets``
partition, which may not be on this broker (a cluster) or may have just moved: a request
about one group is answered NOT_COORDINATOR then (the client looks the coordinator up
again). Requests about several groups (OffsetFetch v8+, DescribeGroups, DeleteGroups)
answer NOT_COORDINATOR for each group not coordinated here and serve the rest;
ListGroups lists the groups of every partition coordinated here, as Kafka's brokers do
(the admin client asks each broker).

The mapping of versions, from Kafka's request schemas:

- JoinGroup v0 has no rebalance timeout (the session timeout stands in, as in Kafka);
  v4+ must rejoin with the member id it is handed (KIP-394: ``require_known_member_id``);
  v5+ static membership (KIP-345); v7+ answers the protocol type; v8+ a reason (KIP-800);
  v9+ may be told to skip the assignment (KIP-814).
- SyncGroup v3+ and Heartbeat v3+ carry ``group.instance.id``; SyncGroup v5+ the protocol
  type and name, which must match the group's.
- LeaveGroup v0-2 name one member and answer with one error; v3+ a batch of members.
- OffsetCommit v2-4 carry a retention time; v6+ leader epochs; v7+ ``group.instance.id``.
  v9 is the first version a KIP-848 consumer may send; for a classic group it is v8.
- OffsetFetch v2+ may ask for every offset of the group (topics null); v8+ ask for several
  groups at once. v9's member id and epoch belong to KIP-848 groups; a classic group has
  neither, and they are ignored.
- ListGroups v4+ filter by state, v5+ by type (``classic`` or ``consumer``, the KIP-848
  groups of ``consumer_groups.py``); DescribeGroups v6+ answers GROUP_ID_NOT_FOUND for an
  unknown group (before: Dead), and for a KIP-848 group, which it cannot describe.
- OffsetCommit v9 carries a KIP-848 member's epoch in generation_id_or_member_epoch and
  OffsetFetch v9 its member id and epoch: for a ``consumer`` group they must be current.
- OffsetCommit and OffsetFetch v10 name topics by id (KIP-848's consumers): the ids
  become names first (server/topic_ids.py), an id this broker does not know is answered
  UNKNOWN_TOPIC_ID (before authorization, as Kafka checks), and the answer names each
  topic by id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.coordinator import results as r
from odradek.protocol.codec import Request
from odradek.protocol.messages import ms
from odradek.security.acls import Operation, ResourceType
from odradek.server.coordinators.coordinator_runtime import CoordinatorUnavailable
from odradek.server.coordinators.groups import GroupRuntime
from odradek.server.handlers.base import (
    CLUSTER,
    NO_AUTHORIZED_OPERATIONS,
    Api,
    allowed,
    authorized_operations,
    respond,
)
from odradek.server.topic_ids import id_for, is_unknown, name_for

if TYPE_CHECKING:
    from odradek.server.broker import Broker
    from odradek.server.topic_ids import Metadata

CLASSIC = "classic"  # ListGroups v5 group type


def group_operations(broker: Broker, request: Request, group_id: str) -> int:
    """KIP-430: the group's operations the principal may do, when the request asks."""
    if not getattr(request.body, "include_authorized_operations", False):
        return NO_AUTHORIZED_OPERATIONS
    return authorized_operations(broker, request, ResourceType.GROUP, group_id)


def group_runtime(broker: Broker) -> GroupRuntime:
    if broker.groups is None:
        raise CoordinatorUnavailable(ErrorCode.coordinator_not_available,
                                     "the group coordinator is not running")
    return broker.groups


def _client_host(broker: Broker) -> str:
    """Kafka's client host of a member: "/" and the peer's address. Requests run on their
    connection's task, which the broker maps to the connection."""
    conn = getattr(broker, "_connections", {}).get(asyncio.current_task())
    peer = getattr(conn, "peer", "")
    host = peer.rpartition(":")[0] if ":" in peer else peer
    return "/" + host if host else ""


def _text(value: str | None) -> str:
    return value or ""


# --- JoinGroup, SyncGroup, Heartbeat, LeaveGroup -------------------------------------------


def _group_refused(broker: Broker, request: Request) -> bytes | None:
    """With the authorizer: the answer of a JoinGroup, SyncGroup, Heartbeat or LeaveGroup
    whose principal may not READ the group (GROUP_AUTHORIZATION_FAILED), else None."""
    body = request.body
    if allowed(broker, request, Operation.READ, ResourceType.GROUP, body.group_id):
        return None
    return respond(request, {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed,
                             "generation_id": -1,
                             "member_id": getattr(body, "member_id", "") or ""})


def _topics_refused(broker: Broker, request: Request, names: Iterable[str],
                    operation: Operation) -> set[str]:
    """The topics among ``names`` the principal may not ``operation``."""
    if broker.authorizer is None:
        return set()
    return {n for n in set(names) if not is_unknown(n)
            and not allowed(broker, request, operation, ResourceType.TOPIC, n)}


TOPIC_IDS_FROM = 10  # OffsetCommit and OffsetFetch name topics by id (KIP-848's)


class _Named:
    """A v10 request's topic entry with its id resolved: ``name`` is the topic's, or an
    unknown id's stand-in; every other field is the entry's own."""

    __slots__ = ("entry", "name")

    def __init__(self, entry: Any, name: str) -> None:
        self.entry = entry
        self.name = name

    def __getattr__(self, field: str) -> Any:
        return getattr(self.entry, field)


def _named(broker: Broker, request: Request, topics: Any) -> Any:
    """A request's topic entries, by name whatever the version (None stays None)."""
    if topics is None or request.api_version < TOPIC_IDS_FROM:
        return topics
    return by_name(broker, topics)


def by_name(broker: Broker, topics: Any) -> list[Any]:
    """Topic entries that name their topics by id, with ``name`` resolved (an unknown
    id's stand-in name: see topic_ids)."""
    metadata = broker.metadata
    assert metadata is not None
    return [_Named(t, name_for(metadata, t.topic_id)) for t in topics]


def _answer_ids(broker: Broker, request: Request) -> Metadata | None:
    """Where an answer's topic ids come from, for a version that names topics by id."""
    return broker.metadata if request.api_version >= TOPIC_IDS_FROM else None


async def join_group(broker: Broker, request: Request) -> bytes:
    if (refused := _group_refused(broker, request)) is not None:
        return refused
    body = request.body
    v = request.api_version
    session = ms(body.session_timeout)
    rebalance = ms(getattr(body, "rebalance_timeout", None), session)
    try:
        runtime = group_runtime(broker)
        result: r.JoinResult = await runtime.call(
            body.group_id, lambda coordinator, token, now: coordinator.join(
                body.group_id, body.member_id, getattr(body, "group_instance_id", None),
                request.client_id or "", _client_host(broker), session, rebalance,
                body.protocol_type, [(p.name, p.metadata) for p in body.protocols],
                require_known_member_id=v >= 4, supports_skip_assignment=v >= 9,
                reason=getattr(body, "reason", None), token=token, now_ms=now))
    except CoordinatorUnavailable as exc:
        result = r.JoinResult(exc.error_code, member_id=body.member_id)
    # Before v7 the protocol name is not nullable.
    name = result.protocol_name if v >= 7 else _text(result.protocol_name)
    return respond(request, {
        "throttle_time": 0, "error_code": result.error_code,
        "generation_id": result.generation_id, "protocol_type": result.protocol_type,
        "protocol_name": name, "leader": result.leader, "skip_assignment":
        result.skip_assignment, "member_id": result.member_id,
        "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                     "metadata": m.metadata} for m in result.members],
    })


async def sync_group(broker: Broker, request: Request) -> bytes:
    if (refused := _group_refused(broker, request)) is not None:
        return refused
    body = request.body
    try:
        runtime = group_runtime(broker)
        result: r.SyncResult = await runtime.call(
            body.group_id, lambda coordinator, token, now: coordinator.sync(
                body.group_id, body.member_id, body.generation_id,
                getattr(body, "group_instance_id", None), getattr(body, "protocol_type", None),
                getattr(body, "protocol_name", None),
                [(a.member_id, a.assignment) for a in body.assignments],
                token=token, now_ms=now))
    except CoordinatorUnavailable as exc:
        result = r.SyncResult(exc.error_code)
    return respond(request, {"throttle_time": 0, "error_code": result.error_code,
                             "protocol_type": result.protocol_type,
                             "protocol_name": result.protocol_name,
                             "assignment": result.assignment})


async def heartbeat(broker: Broker, request: Request) -> bytes:
    if (refused := _group_refused(broker, request)) is not None:
        return refused
    body = request.body
    try:
        runtime = group_runtime(broker)
        result: r.HeartbeatResult = await runtime.call(
            body.group_id, lambda coordinator, token, now: coordinator.heartbeat(
                body.group_id, body.member_id, body.generation_id,
                getattr(body, "group_instance_id", None), token=token, now_ms=now))
        error = result.error_code
    except CoordinatorUnavailable as exc:
        error = exc.error_code
    return respond(request, {"throttle_time": 0, "error_code": error})


async def leave_group(broker: Broker, request: Request) -> bytes:
    if (refused := _group_refused(broker, request)) is not None:
        return refused
    body = request.body
    if hasattr(body, "members"):  # v3+
        members = [r.MemberIdentity(m.member_id, m.group_instance_id,
                                    getattr(m, "reason", None)) for m in body.members]
    else:
        members = [r.MemberIdentity(body.member_id)]
    try:
        runtime = group_runtime(broker)
        result: r.LeaveResult = await runtime.call(
            body.group_id, lambda coordinator, token, now: coordinator.leave(
                body.group_id, members, token=token, now_ms=now))
    except CoordinatorUnavailable as exc:
        result = r.LeaveResult(exc.error_code)
    error = result.error_code
    if request.api_version < 3 and not error and result.members:
        error = result.members[0].error_code  # one member, one error
    return respond(request, {
        "throttle_time": 0, "error_code": error,
        "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                     "error_code": m.error_code} for m in result.members],
    })


# --- offsets -------------------------------------------------------------------------------


def _by_topic(entries: Iterable[Any], partition: Callable[[Any], dict[str, Any]],
              by_id: Metadata | None = None) -> list[dict[str, Any]]:
    """Per-partition entries (with .topic) grouped into the protocol's topic list, in
    order; ``by_id``: each topic named by its id as well (v10)."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        topics.setdefault(entry.topic, []).append(partition(entry))
    if by_id is not None:
        return [{"name": name, "topic_id": id_for(by_id, name), "partitions": parts}
                for name, parts in topics.items()]
    return [{"name": name, "partitions": parts} for name, parts in topics.items()]


def _commit_partition(p: r.PartitionResult) -> dict[str, Any]:
    return {"partition_index": p.partition, "error_code": p.error_code}


def offsets_to_commit(broker: Broker, topics: Any, refused: set[str] | None = None
                      ) -> tuple[list[r.OffsetCommitRequestPartition], list[r.PartitionResult]]:
    """The partitions of an OffsetCommit or TxnOffsetCommit request: those to commit, and
    answers for the rest: UNKNOWN_TOPIC_ID for an unknown id's (v10), then
    TOPIC_AUTHORIZATION_FAILED for the ``refused`` topics (the principal may not READ
    them), UNKNOWN_TOPIC_OR_PARTITION for partitions that do not exist (Kafka commits
    only for partitions that exist)."""
    offsets: list[r.OffsetCommitRequestPartition] = []
    unknown: list[r.PartitionResult] = []
    for t in topics:
        topic = broker.topic(t.name)
        for p in t.partitions:
            if is_unknown(t.name):
                unknown.append(r.PartitionResult(t.name, p.partition_index,
                                                 ErrorCode.unknown_topic_id))
                continue
            if refused and t.name in refused:
                unknown.append(r.PartitionResult(t.name, p.partition_index,
                                                 ErrorCode.topic_authorization_failed))
                continue
            if topic is None or not 0 <= p.partition_index < topic.partitions:
                unknown.append(r.PartitionResult(t.name, p.partition_index,
                                                 ErrorCode.unknown_topic_or_partition))
                continue
            offsets.append(r.OffsetCommitRequestPartition(
                t.name, p.partition_index, p.committed_offset,
                getattr(p, "committed_leader_epoch", -1), p.committed_metadata))
    return offsets, unknown


def commit_response(request: Request, results: Iterable[r.PartitionResult],
                    by_id: Metadata | None = None) -> bytes:
    """An OffsetCommit or TxnOffsetCommit answer: the partitions' errors by topic."""
    return respond(request, {"throttle_time": 0,
                             "topics": _by_topic(results, _commit_partition, by_id)})


async def offset_commit(broker: Broker, request: Request) -> bytes:
    body = request.body
    v = request.api_version
    topics = _named(broker, request, body.topics)
    by_id = _answer_ids(broker, request)
    if not allowed(broker, request, Operation.READ, ResourceType.GROUP, body.group_id):
        return commit_response(request, [
            r.PartitionResult(t.name, p.partition_index, ErrorCode.group_authorization_failed)
            for t in topics for p in t.partitions], by_id)
    offsets, unknown = offsets_to_commit(
        broker, topics, _topics_refused(broker, request, (t.name for t in topics),
                                        Operation.READ))
    retention = getattr(body, "retention_time", None)  # v2-v4
    retention_ms = ms(retention, -1) if retention is not None else None
    try:
        runtime = group_runtime(broker)
        result: r.OffsetCommitResult = await runtime.call(
            body.group_id, lambda coordinator, token, now: coordinator.commit_offsets(
                body.group_id, body.member_id, body.generation_id_or_member_epoch,
                getattr(body, "group_instance_id", None) if v >= 7 else None, offsets,
                retention_ms=retention_ms, group_not_found=v >= 9, token=token, now_ms=now))
        answered = result.partitions
    except CoordinatorUnavailable as exc:
        answered = [r.PartitionResult(p.topic, p.partition, exc.error_code) for p in offsets]
    # Unknown partitions first, as Kafka's handleOffsetCommitRequest lists them.
    return commit_response(request, [*unknown, *answered], by_id)


def _fetched(p: r.FetchedOffset) -> dict[str, Any]:
    return {"partition_index": p.partition, "committed_offset": p.offset,
            "committed_leader_epoch": p.leader_epoch, "metadata": p.metadata,
            "error_code": p.error_code}


def _fetch_group(broker: Broker, request: Request, group_id: str, topics: Any,
                 member_id: str | None = None, member_epoch: int = -1,
                 require_stable: bool = False) -> tuple[int, list[dict[str, Any]]]:
    if not allowed(broker, request, Operation.DESCRIBE, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed, []
    topics = _named(broker, request, topics)
    by_id = _answer_ids(broker, request)
    refused = _topics_refused(broker, request, (t.name for t in topics or ()),
                              Operation.DESCRIBE)
    unknown = [t for t in topics or () if is_unknown(t.name)]
    wanted = None if topics is None else [
        (t.name, p) for t in topics if t.name not in refused and not is_unknown(t.name)
        for p in t.partition_indexes]
    try:
        result = group_runtime(broker).coordinator_for(group_id).fetch_offsets(
            group_id, wanted, member_id=member_id, member_epoch=member_epoch,
            require_stable=require_stable)
    except CoordinatorUnavailable as exc:
        return exc.error_code, []
    partitions = result.partitions
    if topics is None and broker.authorizer is not None:  # all topics: those one may see
        hidden = _topics_refused(broker, request, (p.topic for p in partitions),
                                 Operation.DESCRIBE)
        partitions = [p for p in partitions if p.topic not in hidden]
    answer = _by_topic(partitions, _fetched, by_id)

    def failed(t: Any, code: int) -> dict[str, Any]:
        return {"name": t.name, "topic_id": getattr(t, "topic_id", None), "partitions": [
            {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
             "metadata": "", "error_code": code} for p in t.partition_indexes]}

    answer += [failed(t, ErrorCode.topic_authorization_failed)
               for t in topics or () if t.name in refused]
    answer += [failed(t, ErrorCode.unknown_topic_id) for t in unknown]
    return result.error_code, answer


async def offset_fetch(broker: Broker, request: Request) -> bytes:
    body = request.body
    # v7+ (KIP-447): read_committed consumers ask for stable offsets, and a partition
    # whose offset is pending in an open transaction answers UNSTABLE_OFFSET_COMMIT (the
    # consumer retries) rather than an offset that transaction is about to replace.
    stable = bool(getattr(body, "require_stable", False))
    if hasattr(body, "groups"):  # v8+: several groups in one request
        groups = []
        for g in body.groups:
            error, topics = _fetch_group(broker, request, g.group_id, g.topics,
                                         getattr(g, "member_id", None),  # v9+
                                         getattr(g, "member_epoch", -1), stable)
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": error})
        return respond(request, {"throttle_time": 0, "groups": groups})
    error, topics = _fetch_group(broker, request, body.group_id, body.topics,
                                 require_stable=stable)
    if request.api_version < 2 and error:
        # v0-1 have no top-level error: every partition carries it.
        for t in topics:
            for p in t["partitions"]:
                p["error_code"] = error
    return respond(request, {"throttle_time": 0, "topics": topics, "error_code": error})


async def offset_delete(broker: Broker, request: Request) -> bytes:
    body = request.body
    if not allowed(broker, request, Operation.DELETE, ResourceType.GROUP, body.group_id):
        return respond(request, {"throttle_time": 0,
                                 "error_code": ErrorCode.group_authorization_failed,
                                 "topics": []})
    refused = _topics_refused(broker, request, (t.name for t in body.topics), Operation.READ)
    wanted = [(t.name, p.partition_index) for t in body.topics if t.name not in refused
              for p in t.partitions]
    try:
        runtime = group_runtime(broker)
        result: r.OffsetDeleteResult = await runtime.call(
            body.group_id, lambda coordinator, token, now: coordinator.delete_offsets(
                body.group_id, wanted, token=token, now_ms=now))
    except CoordinatorUnavailable as exc:
        result = r.OffsetDeleteResult(exc.error_code)
    denied = [r.PartitionResult(t.name, p.partition_index, ErrorCode.topic_authorization_failed)
              for t in body.topics if t.name in refused for p in t.partitions]
    return respond(request, {"throttle_time": 0, "error_code": result.error_code,
                             "topics": _by_topic([*result.partitions, *denied],
                                                 _commit_partition)})


# --- admin ---------------------------------------------------------------------------------


async def list_groups(broker: Broker, request: Request) -> bytes:
    """ListGroups: the groups of every ``__consumer_offsets`` partition coordinated here
    (Kafka's admin client asks every broker and merges the answers)."""
    body = request.body
    types = {t.lower() for t in getattr(body, "types_filter", ()) or ()}
    states = getattr(body, "states_filter", None) or None
    try:
        runtime = group_runtime(broker)
        overviews = [g for _, coordinator in sorted(runtime.coordinators.items())
                     for g in coordinator.list_groups(states)]
        error = 0
    except CoordinatorUnavailable as exc:
        overviews, error = [], exc.error_code
    if types:
        overviews = [g for g in overviews if g.group_type in types]
    if not allowed(broker, request, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER):
        # As Kafka: the groups one may describe, unless one may describe the cluster.
        overviews = [g for g in overviews if allowed(
            broker, request, Operation.DESCRIBE, ResourceType.GROUP, g.group_id)]
    return respond(request, {
        "throttle_time": 0, "error_code": error,
        "groups": [{"group_id": g.group_id, "protocol_type": g.protocol_type,
                    "group_state": g.state, "group_type": g.group_type}
                   for g in overviews],
    })


def _describe_group(broker: Broker, group_id: str, not_found_error: bool
                    ) -> tuple[r.GroupDescription, str | None]:
    """One group's description and its error message: NOT_COORDINATOR if its partition
    is not coordinated here."""
    try:
        coordinator = group_runtime(broker).coordinator_for(group_id)
    except CoordinatorUnavailable as exc:
        return r.GroupDescription(exc.error_code, group_id, "", "", ""), str(exc)
    [d] = coordinator.describe_groups([group_id], not_found_error=not_found_error)
    if not d.error_code:
        return d, None
    if group_id in coordinator.consumer_groups:
        return d, f"Group {group_id} is not a classic group."  # Kafka's words
    return d, f"group {group_id} not found"


async def describe_groups(broker: Broker, request: Request) -> bytes:
    found = [_describe_group(broker, g, request.api_version >= 6)
             if allowed(broker, request, Operation.DESCRIBE, ResourceType.GROUP, g)
             else (r.GroupDescription(ErrorCode.group_authorization_failed, g, "", "", ""),
                   "Group authorization failed.")
             for g in request.body.groups]
    return respond(request, {"throttle_time": 0, "groups": [
        {"error_code": d.error_code, "error_message": message,
         "group_id": d.group_id, "group_state": d.state, "protocol_type": d.protocol_type,
         "protocol_data": d.protocol_name,
         "authorized_operations": group_operations(broker, request, d.group_id),
         "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                      "client_id": m.client_id, "client_host": m.client_host,
                      "member_metadata": m.metadata, "member_assignment": m.assignment}
                     for m in d.members]}
        for d, message in found]})


async def _delete_in_partition(runtime: GroupRuntime, names: list[str],
                               messages: dict[str, str]) -> list[r.DeletedGroup]:
    """DeleteGroups for groups of one ``__consumer_offsets`` partition; a coordinator's
    failure is noted in ``messages`` for each of them (v3's error_message)."""
    try:
        result: r.DeleteGroupsResult = await runtime.call(
            names[0], lambda coordinator, token, now: coordinator.delete_groups(
                names, token=token, now_ms=now))
        return result.groups
    except CoordinatorUnavailable as exc:
        messages.update(dict.fromkeys(names, str(exc)))
        return [r.DeletedGroup(g, exc.error_code) for g in names]


async def delete_groups(broker: Broker, request: Request) -> bytes:
    """DeleteGroups: each group by the coordinator of its partition (one operation per
    partition), NOT_COORDINATOR for those whose partition is not coordinated here.
    v3's error_message: Kafka 4.4 gives none for a group's own outcome (deleted, not
    empty, not found, refused), only the exception's message when its coordinator
    failed."""
    asked = list(request.body.groups_names)
    names = [g for g in asked
             if allowed(broker, request, Operation.DELETE, ResourceType.GROUP, g)]
    refused = [r.DeletedGroup(g, ErrorCode.group_authorization_failed)
               for g in asked if g not in names]
    messages: dict[str, str] = {}
    try:
        runtime = group_runtime(broker)
    except CoordinatorUnavailable as exc:
        deleted = [r.DeletedGroup(g, exc.error_code) for g in names]
        messages.update(dict.fromkeys(names, str(exc)))
    else:
        partitions = [runtime.partition_for(g) for g in names]
        by_partition: dict[int, list[str]] = {}
        for name, partition in zip(names, partitions, strict=True):
            by_partition.setdefault(partition, []).append(name)
        answers = await asyncio.gather(*(_delete_in_partition(runtime, part, messages)
                                         for part in by_partition.values()))
        # Each partition answers its groups in the order asked: back to request order.
        results = {p: iter(a) for p, a in zip(by_partition, answers, strict=True)}
        deleted = [next(results[p]) for p in partitions]
    return respond(request, {"throttle_time": 0, "results": [
        {"group_id": g.group_id, "error_code": g.error_code,
         "error_message": messages.get(g.group_id) if g.error_code else None}
        for g in [*refused, *deleted]]})


# Version ranges: what kio knows of Kafka's schemas, less what needs KIP-848 (see above).
# What clients send (docs/compatibility.md): confluent-kafka 2.16 JoinGroup 5, SyncGroup 3,
# OffsetCommit 9, OffsetFetch 9; kafka-python 3 JoinGroup 7, SyncGroup 5, LeaveGroup 5,
# OffsetCommit 8, OffsetFetch 8, DescribeGroups 6; aiokafka JoinGroup 5, OffsetCommit 3;
# kafkajs JoinGroup 5, OffsetCommit 5, OffsetFetch 4.
JOIN_GROUP = Api(11, "JoinGroup", 0, 9, join_group)
SYNC_GROUP = Api(14, "SyncGroup", 0, 5, sync_group)
HEARTBEAT = Api(12, "Heartbeat", 0, 4, heartbeat)
LEAVE_GROUP = Api(13, "LeaveGroup", 0, 5, leave_group)
OFFSET_COMMIT = Api(8, "OffsetCommit", 2, 10, offset_commit)
OFFSET_FETCH = Api(9, "OffsetFetch", 1, 10, offset_fetch)
LIST_GROUPS = Api(16, "ListGroups", 0, 5, list_groups)
DESCRIBE_GROUPS = Api(15, "DescribeGroups", 0, 6, describe_groups)
DELETE_GROUPS = Api(42, "DeleteGroups", 0, 3, delete_groups)
OFFSET_DELETE = Api(47, "OffsetDelete", 0, 0, offset_delete)

APIS = (JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP, OFFSET_COMMIT, OFFSET_FETCH,
        LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS, OFFSET_DELETE)
