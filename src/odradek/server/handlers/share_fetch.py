"""ShareFetch (78) and ShareAcknowledge (79) requests (KIP-932): a member's share
session, its acknowledgements and its acquisitions (``server/share/fetching.py``), and
the answers.

The flow of one ShareFetch, as Kafka's SharePartitionManager runs it:

1. the session: epoch 0 opens one (acknowledgements are not allowed in it), -1 closes
   it (acknowledgements only, then the member's records are released), any other epoch
   continues one (``server/share/sessions.py``); the request's topics join the session
   and its forgotten topics leave it;
2. the acknowledgements, per partition;
3. acquisition from every partition of the session;
4. nothing acquired and MaxWait > 0: the request waits (woken by an append to, or a
   release in, one of its partitions) and tries once more, then answers.

A NOT_LEADER_OR_FOLLOWER partition carries its current leader and the answer the
leaders' endpoints (KIP-951), as Fetch's do.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.protocol.codec import Request
from odradek.protocol.messages import ms
from odradek.security.acls import Operation, ResourceType
from odradek.server.handlers.base import Api, allowed, respond
from odradek.server.handlers.hints import AnswerNames
from odradek.server.share.fetching import (
    SHARE_GROUPS_DISABLED,
    Acks,
    PartitionAnswer,
    ShareFetcher,
    Tp,
    share_level,
)
from odradek.server.share.sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    ShareSessionError,
)
from odradek.server.topic_ids import is_unknown, name_for

if TYPE_CHECKING:
    from odradek.server.broker import Broker


class _Woken:
    """A purgatory waiter that sets an event."""

    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def try_complete(self, tp: Tp) -> None:
        self.event.set()



def _acks(batches: Iterable[Any]) -> Acks:
    return [(b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in batches]


def _leader(names: AnswerNames, out: PartitionAnswer) -> dict[str, int]:
    leader, epoch = names.current_leader(out.topic, out.partition)
    return {"leader_id": leader, "leader_epoch": epoch}


def _answer(request: Request, broker: Broker, outs: Iterable[PartitionAnswer], lock_ms: int,
            *, fetch: bool, error: int = 0, message: str | None = None) -> bytes:
    names = AnswerNames(broker, request)
    topics: dict[uuid.UUID, list[dict[str, Any]]] = {}
    leaders: set[int] = set()
    for out in outs:
        entry: dict[str, Any] = {
            "partition_index": out.partition, "error_code": out.error,
            "error_message": out.message, "current_leader": _leader(names, out)}
        if out.error == ErrorCode.not_leader_or_follower:
            leaders.add(entry["current_leader"]["leader_id"])
        if fetch:
            entry.update({
                "acknowledge_error_code": out.ack_error,
                "acknowledge_error_message": out.ack_message,
                # Not nullable from v1: an empty section.
                "records": out.records or b"",
                "acquired_records": [{"first_offset": r.first_offset,
                                      "last_offset": r.last_offset,
                                      "delivery_count": r.delivery_count}
                                     for r in out.acquired]})
        else:
            entry["error_code"] = out.ack_error or out.error
            entry["error_message"] = out.ack_message or out.message
        topics.setdefault(out.topic_id, []).append(entry)
    return respond(request, {
        "throttle_time": 0, "error_code": error, "error_message": message,
        "acquisition_lock_timeout": lock_ms,
        "responses": [{"topic_id": tid, "partitions": parts} for tid, parts in topics.items()],
        "node_endpoints": names.endpoints(leaders - {-1}) if leaders else []})


def _refuse(request: Request, broker: Broker, code: int, message: str, *, fetch: bool
            ) -> bytes:
    return _answer(request, broker, [], 0, fetch=fetch, error=code, message=message)


def _refused(broker: Broker, request: Request, *, fetch: bool) -> bytes | None:
    """The answer to a request refused as a whole (share groups off, the group not
    allowed, no group or member id), else None."""
    body = request.body
    if share_level(broker) < 1:
        return _refuse(request, broker, ErrorCode.unsupported_version,
                       SHARE_GROUPS_DISABLED, fetch=fetch)
    if not allowed(broker, request, Operation.READ, ResourceType.GROUP, body.group_id or ""):
        return _refuse(request, broker, ErrorCode.group_authorization_failed,
                       "Group authorization failed.", fetch=fetch)
    if not body.group_id or not body.member_id:
        return _refuse(request, broker, ErrorCode.invalid_request,
                       "GroupId and MemberId must be set.", fetch=fetch)
    return None


async def share_fetch(broker: Broker, request: Request) -> bytes:
    body = request.body
    refused = _refused(broker, request, fetch=True)
    if refused is not None:
        return refused
    group_id, member_id, epoch = body.group_id, body.member_id, body.share_session_epoch
    fetcher = ShareFetcher(broker, group_id)
    metadata = broker.metadata
    assert metadata is not None
    outs: dict[Tp, PartitionAnswer] = {}
    acks: list[tuple[PartitionAnswer, Acks]] = []
    wanted: list[PartitionAnswer] = []
    for t in body.topics:
        name = name_for(metadata, t.topic_id)
        for p in t.partitions:
            out = PartitionAnswer(name, t.topic_id, p.partition_index)
            outs[(name, p.partition_index)] = out
            wanted.append(out)
            if p.acknowledgement_batches:
                acks.append((out, _acks(p.acknowledgement_batches)))
    denied = {o.topic for o in wanted if not is_unknown(o.topic) and not allowed(
        broker, request, Operation.READ, ResourceType.TOPIC, o.topic)}
    for o in wanted:
        if o.topic in denied:
            o.error, o.message = ErrorCode.topic_authorization_failed, None
    sessions = broker.share_sessions
    try:
        if epoch == INITIAL_EPOCH:
            if acks:
                return _refuse(request, broker, ErrorCode.invalid_request,
                               "Acknowledge data present on initial ShareFetch.", fetch=True)
            session = sessions.open(group_id, member_id, request.session)
        elif epoch == FINAL_EPOCH:
            session = sessions.get_final(group_id, member_id)
        else:
            session = sessions.get(group_id, member_id, epoch)
            session.next_epoch()
    except ShareSessionError as exc:
        return _refuse(request, broker, exc.error_code, str(exc), fetch=True)
    lock_ms = broker.share_partitions.lock_ms(group_id)
    for out, batch in acks:
        if out.error == ErrorCode.none:
            await fetcher.acknowledge(group_id, member_id, out, batch)
        else:
            out.ack_error = out.error
    if epoch == FINAL_EPOCH:
        sessions.close(group_id, member_id)
        broker.share_partitions.release_member(group_id, member_id)
        return _answer(request, broker, outs.values(), lock_ms, fetch=True)
    for f in body.forgotten_topics_data:
        name = name_for(metadata, f.topic_id)
        for p in f.partitions:
            session.partitions.pop((name, p), None)
    for out in wanted:
        if out.error == ErrorCode.none:
            session.partitions[(out.topic, out.partition)] = out.topic_id
    max_records = body.max_records if body.max_records > 0 else 500
    record_limit = getattr(body, "share_acquire_mode", 0) == 1
    taken = await fetcher.acquire(session, max_records, body.max_bytes, record_limit, outs)
    wait_ms = ms(body.max_wait, 0)
    if not taken and wait_ms > 0 and session.partitions:
        waiter = _Woken()
        tps = list(session.partitions)
        broker.purgatory.watch(tps, waiter)
        try:
            async with asyncio.timeout(wait_ms / 1000):
                await waiter.event.wait()
        except TimeoutError:
            pass
        finally:
            broker.purgatory.unwatch(tps, waiter)
        if broker.share_sessions.sessions.get((group_id, member_id)) is session:
            await fetcher.acquire(session, max_records, body.max_bytes, record_limit, outs)
    return _answer(request, broker, outs.values(), lock_ms, fetch=True)


async def share_acknowledge(broker: Broker, request: Request) -> bytes:
    body = request.body
    refused = _refused(broker, request, fetch=False)
    if refused is not None:
        return refused
    group_id, member_id, epoch = body.group_id, body.member_id, body.share_session_epoch
    sessions = broker.share_sessions
    try:
        if epoch == INITIAL_EPOCH:
            return _refuse(request, broker, ErrorCode.invalid_share_session_epoch,
                           "ShareAcknowledge cannot open a share session.", fetch=False)
        if epoch == FINAL_EPOCH:
            sessions.get_final(group_id, member_id)
        else:
            sessions.get(group_id, member_id, epoch).next_epoch()
    except ShareSessionError as exc:
        return _refuse(request, broker, exc.error_code, str(exc), fetch=False)
    fetcher = ShareFetcher(broker, group_id)
    metadata = broker.metadata
    assert metadata is not None
    outs = []
    for t in body.topics:
        name = name_for(metadata, t.topic_id)
        for p in t.partitions:
            out = PartitionAnswer(name, t.topic_id, p.partition_index)
            outs.append(out)
            if not is_unknown(name) and not allowed(broker, request, Operation.READ,
                                                    ResourceType.TOPIC, name):
                out.error = ErrorCode.topic_authorization_failed
                continue
            await fetcher.acknowledge(group_id, member_id, out,
                                      _acks(p.acknowledgement_batches))
    if epoch == FINAL_EPOCH:
        sessions.close(group_id, member_id)
        broker.share_partitions.release_member(group_id, member_id)
    return _answer(request, broker, outs, broker.share_partitions.lock_ms(group_id),
                   fetch=False)


SHARE_FETCH = Api(78, "ShareFetch", 1, 2, share_fetch)
SHARE_ACKNOWLEDGE = Api(79, "ShareAcknowledge", 1, 2, share_acknowledge)
