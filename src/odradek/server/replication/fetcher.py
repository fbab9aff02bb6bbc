"""Follower fetchers: a follower copies its partitions' logs from their leaders.

Kafka's ``ReplicaFetcherThread`` as an asyncio task: one per (leader broker, fetcher
index) — ``num.replica.fetchers`` spreads a leader's partitions over that many — each
with its own connection, sending one Fetch (as replica: ``replica_id`` = this broker's
node id) for all its partitions at a time, long-polling ``replica.fetch.wait.max.ms``.
The batches arrive as the leader wrote them, offsets and partition leader epochs set,
and are appended as they are (``Log.append(assign_offsets=False)``); the follower's high
watermark is the leader's, capped at its own log end.

Before a partition is fetched under a new leader epoch it is truncated to where its log
and the leader's diverge (KIP-101, KIP-279): OffsetForLeaderEpoch for the follower's
latest epoch answers where that epoch ends on the leader; the follower cuts its log
there (and asks again when the leader's answer names an epoch it does not have). So a
follower never keeps records a new leader does not have, and never fetches past a gap.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.client.aio import DEFAULT_VERSIONS, AsyncBrokerConnection, KafkaClientError
from odradek.client.codec import FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH
from odradek.cluster.replication import truncation_point
from odradek.cluster.state import TopicPartition
from odradek.protocol import replica_fetch
from odradek.protocol.fetch import FetchPartition, FetchRequestBody, FetchTopic, ForgottenTopic
from odradek.records.errors import RecordError
from odradek.storage import partition_metadata
from odradek.storage.errors import InvalidOffsetError, RemoteStorageError
from odradek.storage.producer_state import SNAPSHOT_SUFFIX

if TYPE_CHECKING:
    from odradek.server.replication.partition import Partition
    from odradek.server.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

INITIAL_SESSION_EPOCH = 0  # a request with it (and session id 0) opens a fetch session


def _next_session_epoch(epoch: int) -> int:
    """KIP-227: epochs count up and wrap from int32's max to 1 (0 opens a session)."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1
# A leader that does not know yet that it leads at the epoch we follow (its watch of the
# partition's state fires a moment after ours): asked again this soon, not after
# replica.fetch.backoff.ms (1 s by default), which would hold acks=all writes of a new
# partition or a new leader that long. Our own view being the stale one ends as soon
# as our watch fires (a new state re-adds the partition).
LEADER_BEHIND_BACKOFF_S = 0.05
_LEADER_BEHIND = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.unknown_leader_epoch})
# Errors after which a partition waits for news (a new state from the store) or for
# replica.fetch.backoff.ms, whichever comes first, before it is fetched again.
_WAIT_ERRORS = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch, ErrorCode.unknown_topic_or_partition,
    ErrorCode.kafka_storage_error, ErrorCode.replica_not_available,
    ErrorCode.leader_not_available,
    # The follower's metadata has another incarnation of the topic than the leader's
    # (deleted and re-created): it catches up with the store's next event.
    ErrorCode.unknown_topic_id, ErrorCode.inconsistent_topic_id,
})


EARLIEST_LOCAL = -4  # ListOffsets' spec of a log's first local offset (KIP-405)
LIST_OFFSETS_EARLIEST_LOCAL = 9  # the first version with it (and the leader epoch)


@dataclass(slots=True)
class FetchState:
    leader_epoch: int
    truncating: bool = True  # OffsetForLeaderEpoch first, then fetch
    not_before: float = 0.0  # monotonic time before which it is not fetched (backoff)


# The Fetch versions a follower speaks: v13's topic ids by hand (protocol/replica_fetch.py)
# with a leader that serves them, older ones by name through kio.
FOLLOWER_VERSIONS = {**DEFAULT_VERSIONS, FETCH: (DEFAULT_VERSIONS[FETCH][0],
                                                 replica_fetch.VERSION)}


async def _send_fetch(conn: AsyncBrokerConnection, body: FetchRequestBody, *,
                      timeout_s: float, names: Mapping[uuid.UUID, str] | None = None
                      ) -> Any:
    """A follower's Fetch: encoded and its answer read by hand at v13, topics by id
    (what Odradek brokers serve each other: protocol/replica_fetch.py; ``names`` names
    the ids of the answer), else by name through kio."""
    version = conn.version(FETCH)
    if version == replica_fetch.VERSION:
        client_id = conn.client_id
        return await conn.call_encoded(
            FETCH, version,
            lambda correlation: replica_fetch.encode_fetch_request(correlation, client_id,
                                                                   body),
            lambda payload, correlation: replica_fetch.decode_fetch_response(
                payload, correlation, names), timeout_s=timeout_s)
    data = body._asdict()
    data["topics"] = [{"topic": t.topic, "partitions": [p._asdict() for p in t.partitions]}
                      for t in body.topics]
    data["forgotten_topics_data"] = [f._asdict() for f in body.forgotten_topics_data]
    return await conn.request(FETCH, data, timeout_s=timeout_s)


class ReplicaFetcher:
    """Fetches a set of partitions from one leader broker, for as long as it has any."""

    def __init__(self, manager: ReplicaManager, leader_id: int, index: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.index = index
        self.partitions: dict[TopicPartition, FetchState] = {}
        self._wake = asyncio.Event()
        self._conn: AsyncBrokerConnection | None = None
        self._endpoint: tuple[str, int] | None = None
        # The fetch session with the leader (KIP-227): its id (0: none yet), the epoch the
        # next request carries, and what the leader's session holds for each partition.
        self._session_id = 0
        self._session_epoch = INITIAL_SESSION_EPOCH
        self._in_session: dict[TopicPartition, tuple[int, int]] = {}
        # What keeps a fetch from reading every partition's state each time: the
        # partitions whose entry in the session may be out of date (added, removed,
        # appended to, truncated, their back-off begun or ended), those truncating,
        # and those backing off.
        self._changed: set[TopicPartition] = set()
        self._truncating: set[TopicPartition] = set()
        self._backing_off: set[TopicPartition] = set()
        # Tiered partitions whose fetch offset is only in the leader's remote tier
        # (OFFSET_MOVED_TO_TIERED_STORAGE) -> the leader's log start: they start over at
        # the leader's local log start, asked with ListOffsets.
        self._moved: dict[TopicPartition, int] = {}
        self._task: asyncio.Task[None] | None = None
        cfg = manager.config
        self.max_wait_ms: int = cfg["replica.fetch.wait.max.ms"]
        self.min_bytes: int = cfg["replica.fetch.min.bytes"]
        self.max_bytes: int = cfg["replica.fetch.response.max.bytes"]
        self.partition_max_bytes: int = cfg["replica.fetch.max.bytes"]
        self.backoff_s: float = cfg["replica.fetch.backoff.ms"] / 1000
        self.socket_timeout_s: float = cfg["replica.socket.timeout.ms"] / 1000

    # --- membership ------------------------------------------------------------------------

    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        """Follow ``tp`` at ``leader_epoch`` (again: a new epoch truncates first)."""
        self.partitions[tp] = FetchState(leader_epoch)
        self._changed.add(tp)
        self._truncating.add(tp)
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"replica-fetcher-{self.leader_id}-{self.index}")

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)
        self._changed.add(tp)
        self._truncating.discard(tp)
        self._moved.pop(tp, None)
        self._backing_off.discard(tp)
        self._wake.set()

    def endpoint_changed(self) -> None:
        """The leader broker registered again (maybe elsewhere): reconnect."""
        self._wake.set()

    async def stop(self) -> None:
        self.partitions.clear()
        self._changed.clear()
        self._truncating.clear()
        self._backing_off.clear()
        self._moved.clear()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self._close()

    async def _close(self) -> None:
        self._reset_session()  # a session belongs to one connection's history
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    # --- the loop ------------------------------------------------------------------------------

    async def _run(self) -> None:
        while self.partitions:
            self._wake.clear()
            try:
                conn = await self._connection()
                if conn is None:
                    await self._sleep(self.backoff_s)
                    continue
                now = time.monotonic()
                self._end_backoffs(now)
                truncating = [tp for tp in self._truncating
                              if (st := self.partitions.get(tp)) and st.not_before <= now]
                if truncating:
                    await self._truncate(conn, truncating)
                    continue
                if self._moved:
                    await self._start_at_local_log(conn)
                    continue
                if not await self._fetch(conn, now):
                    waits = [st.not_before - now for tp in self._backing_off
                             if (st := self.partitions.get(tp)) is not None]
                    await self._sleep(max(0.0, min(waits, default=self.backoff_s)))
            except KafkaClientError as exc:
                log.info("replica fetcher for broker %d: %s", self.leader_id, exc)
                await self._close()
                await self._sleep(self.backoff_s)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("replica fetcher for broker %d failed; starting over",
                              self.leader_id)
                await self._close()
                await self._sleep(self.backoff_s)
        await self._close()

    def _end_backoffs(self, now: float) -> None:
        backing_off = self._backing_off
        if backing_off:
            ended = [tp for tp in backing_off
                     if (st := self.partitions.get(tp)) is None or st.not_before <= now]
            backing_off.difference_update(ended)
            self._changed.update(ended)

    def _back_off(self, tp: TopicPartition, st: FetchState, until: float) -> None:
        """Leave ``tp`` out of fetches (and truncation) until ``until``."""
        st.not_before = until
        self._backing_off.add(tp)
        self._changed.add(tp)

    def _set_truncating(self, tp: TopicPartition, st: FetchState, truncating: bool) -> None:
        st.truncating = truncating
        if truncating:
            self._truncating.add(tp)
        else:
            self._truncating.discard(tp)
        self._changed.add(tp)

    async def _sleep(self, seconds: float) -> None:
        try:
            async with asyncio.timeout(seconds):
                await self._wake.wait()
        except TimeoutError:
            pass

    async def _connection(self) -> AsyncBrokerConnection | None:
        info = self.manager.metadata.brokers.get(self.leader_id)
        if info is None:
            await self._close()
            return None  # not registered (yet): its partitions' states will change
        endpoint = (info.host, info.port)
        if self._conn is not None and (self._conn.closed or endpoint != self._endpoint):
            await self._close()
        if self._conn is None:
            self._conn = await self.manager.node.inter_broker.open(
                info.host, info.port, client_id=f"broker-{self.manager.me}-fetcher-{self.index}",
                timeout_s=self.socket_timeout_s, versions=FOLLOWER_VERSIONS)
            self._endpoint = endpoint
        return self._conn

    # --- truncation (KIP-101, KIP-279) ---------------------------------------------------------

    async def _truncate(self, conn: AsyncBrokerConnection, tps: list[TopicPartition]) -> None:
        manager = self.manager
        asked: dict[TopicPartition, tuple[int, int]] = {}  # tp -> (leader epoch, our latest)
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp in tps:
            part = manager.following(*tp)
            st = self.partitions[tp]
            if part is None:
                self.remove(tp)
                continue
            latest = part.log.latest_epoch
            if latest < 0:
                # No epoch history (an empty log): nothing that could diverge.
                self._set_truncating(tp, st, False)
                continue
            asked[tp] = (st.leader_epoch, latest)
            topics.setdefault(tp[0], []).append({
                "partition": tp[1], "current_leader_epoch": st.leader_epoch,
                "leader_epoch": latest})
        if not topics:
            return
        answer = await conn.request(OFFSET_FOR_LEADER_EPOCH, {
            "replica_id": manager.me,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]})
        for topic in answer.topics:
            for p in topic.partitions:
                tp = (topic.topic, p.partition)
                state = self.partitions.get(tp)
                if state is None or tp not in asked or state.leader_epoch != asked[tp][0]:
                    continue  # removed or re-added meanwhile: its answer is stale
                if p.error_code != ErrorCode.none:
                    self._wait(tp, state, p.error_code)
                    continue
                part = manager.following(*tp)
                if part is None:
                    continue
                self._set_truncating(tp, state, not self._truncate_to_leader(
                    part, p.leader_epoch, p.end_offset))
        manager.checkpoint_truncations()

    async def _start_at_local_log(self, conn: AsyncBrokerConnection) -> None:
        """Tiered partitions this follower lacks below the leader's local log start
        (KIP-405: a new replica, or one far behind): the leader's local log start, asked
        with ListOffsets (-4, earliest local), becomes this log's start and fetch offset;
        what lies below stays in the remote tier, which this follower's log start still
        covers. Only the local tail is copied from the leader, not the whole history."""
        manager = self.manager
        moved = dict(self._moved)
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp in moved:
            st = self.partitions.get(tp)
            if st is None:
                self._moved.pop(tp, None)
                continue
            topics.setdefault(tp[0], []).append({
                "partition_index": tp[1], "current_leader_epoch": st.leader_epoch,
                "timestamp": EARLIEST_LOCAL})
        if not topics:
            return
        answer = await conn.request(LIST_OFFSETS, {
            "replica_id": manager.me, "isolation_level": 0,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
            version=LIST_OFFSETS_EARLIEST_LOCAL)
        for topic in answer.topics:
            for p in topic.partitions:
                tp = (topic.name, p.partition_index)
                state = self.partitions.get(tp)
                leader_start = self._moved.pop(tp, None)
                if state is None or leader_start is None:
                    continue
                part = manager.following(*tp)
                if part is None:
                    continue
                if p.error_code != ErrorCode.none or p.offset < 0:
                    state.truncating = False
                    self._wait(tp, state, p.error_code or ErrorCode.unknown_server_error)
                    continue
                local_start = p.offset
                snapshot = await self._producer_snapshot(tp, part, local_start)
                if self.partitions.get(tp) is not state or manager.following(*tp) is not part:
                    continue  # no longer followed, or under another epoch, meanwhile
                lg = part.log
                log.info("%s-%d: below leader %d's local log start %d (the rest is in the "
                         "remote tier): starting there%s", tp[0], tp[1], self.leader_id,
                         local_start, ", with the producer state from the remote tier"
                         if snapshot is not None else "")
                manager.truncate_fully(part, local_start)
                with lg.lock:
                    if lg.tiered and 0 <= leader_start < local_start:
                        lg.log_start_offset = leader_start
                    lg.highest_remote_offset = max(lg.highest_remote_offset,
                                                   local_start - 1)
                    if snapshot is not None:
                        # As Kafka's follower builds its auxiliary state: an idempotent or
                        # transactional producer idle since before this offset is known
                        # here when this replica leads.
                        lg.producer_state.write_snapshot(lg.directory, local_start, snapshot)
                        lg.producer_state.load_snapshot(os.path.join(
                            lg.directory, f"{local_start:020d}{SNAPSHOT_SUFFIX}"))
                state.truncating = False
                self._changed.add(tp)
        manager.checkpoint_truncations()

    async def _producer_snapshot(self, tp: TopicPartition, part: Partition,
                                 offset: int) -> bytes | None:
        """The producer state at ``offset`` from the remote tier (None: none there, or
        the store failed: the follower goes on without, as before)."""
        tiered = self.manager.broker.tiered
        if tiered is None or not part.log.tiered:
            return None
        topic_id = partition_metadata.read(part.log.directory)
        try:
            return await asyncio.get_running_loop().run_in_executor(
                None, tiered.manager.producer_snapshot_at, tp[0], topic_id, tp[1], offset)
        except RemoteStorageError as exc:
            log.warning("%s-%d: no producer state from the remote tier: %s", tp[0], tp[1],
                        exc)
            return None

    def _truncate_to_leader(self, part: Partition, leader_epoch: int, leader_end: int
                            ) -> bool:
        """Cut the log where it diverges from the leader's (cluster/replication.py's
        ``truncation_point``); True when that is final."""
        lg = part.log
        end = lg.log_end_offset
        follower_epoch, follower_end = lg.end_offset_for_epoch(leader_epoch)
        target, done = truncation_point(end, lg.high_watermark, leader_epoch, leader_end,
                                        follower_epoch, follower_end)
        if target < end:
            log.info("%s-%d: truncating from %d to %d to match leader %d (epoch %d ends at "
                     "%d there)", part.tp[0], part.tp[1], end, target, self.leader_id,
                     leader_epoch, leader_end)
            self.manager.truncate(part, target)
        return done

    # --- fetching ---------------------------------------------------------------------------

    async def _fetch(self, conn: AsyncBrokerConnection, now: float) -> bool:
        """One Fetch in this fetcher's session (KIP-227, as Kafka's followers use it): the
        first names every partition; later ones only those whose fetch offset or leader
        epoch changed since (and forget those no longer fetched), and the leader answers
        only partitions with records, an error or a new high watermark or log start. On
        an idle follower most partitions have nothing new: without the session every
        round trip listed them all both ways, which was most of the replication's CPU on
        both brokers with a few dozen partitions (the internal topics' among them).

        What this side looks at per fetch is as narrow: the partitions marked changed
        (``_changed``), not every partition it follows. False when there is nothing to
        fetch (every partition truncating or backing off)."""
        manager = self.manager
        quota = manager.follower_quota
        in_session = self._in_session
        full = self._session_id == 0
        if full:
            candidates: Iterable[TopicPartition] = list(self.partitions)
            self._changed.clear()
        else:
            candidates, self._changed = self._changed, set()
        throttled: set[TopicPartition] = set()
        max_wait_ms = self.max_wait_ms
        if not quota.unlimited:
            # Throttled replicas (a reassignment's new ones) wait while the follower
            # quota is spent (cluster/quota.py), left out of the fetch as Kafka leaves
            # them out; the others are fetched meanwhile, but the leader is not to hold
            # that fetch past the moment the quota frees.
            throttled = {tp for tp in self.partitions if manager.follower_throttled(tp)}
            if throttled and quota.exceeded(now):
                wait_s = quota.wait_s(now)
                for tp in throttled:
                    self._back_off(tp, self.partitions[tp], now + wait_s)
                throttled = set()
                max_wait_ms = min(max_wait_ms, max(1, int(wait_s * 1000)))
                candidates = set(candidates) | self._changed
                self._changed = set()
        send: dict[TopicPartition, tuple[int, int]] = {}  # tp -> (epoch, fetch offset)
        forgotten: list[TopicPartition] = []
        parts: dict[TopicPartition, Partition] = {}
        for tp in candidates:
            st = self.partitions.get(tp)
            part = None
            if st is not None and not st.truncating and st.not_before <= now:
                part = manager.following(*tp)
                if part is None:
                    self.remove(tp)
            if part is None:
                if tp in in_session:
                    forgotten.append(tp)
                continue
            assert st is not None
            parts[tp] = part
            entry = (st.leader_epoch, part.log.log_end_offset)
            if full or in_session.get(tp) != entry:
                send[tp] = entry
        if full:
            forgotten = []
        if not send and not forgotten and (full or not in_session):
            return False
        topics: dict[str, list[FetchPartition]] = {}
        for tp, (epoch, offset) in send.items():
            lg = parts[tp].log
            topics.setdefault(tp[0], []).append(FetchPartition(
                tp[1], epoch, offset, lg.latest_epoch, lg.log_start_offset,
                self.partition_max_bytes))
        gone: dict[str, list[int]] = {}
        for t, p in forgotten:
            gone.setdefault(t, []).append(p)
        # Topics by id as well (v13): the ids this broker's metadata has for the names.
        assignments = manager.metadata.assignments

        def topic_id(name: str) -> uuid.UUID | None:
            found = assignments.get(name)
            return found.topic_id if found is not None else None

        body = FetchRequestBody(
            manager.me, max_wait_ms, self.min_bytes, self.max_bytes, 0, self._session_id,
            INITIAL_SESSION_EPOCH if full else self._session_epoch,
            [FetchTopic(t, ps, topic_id(t)) for t, ps in topics.items()],
            [ForgottenTopic(t, ps, topic_id(t)) for t, ps in gone.items()], "")
        try:
            answer = await _send_fetch(conn, body,
                                       timeout_s=max_wait_ms / 1000 + self.socket_timeout_s,
                                       names=manager.metadata.names_by_id)
        except BaseException:
            # Not sent, or its answer lost: the session starts over with a full fetch
            # (the connection is closed on the way out), which looks at everything.
            self._reset_session()
            raise
        if answer.error_code in (ErrorCode.fetch_session_id_not_found,
                                 ErrorCode.invalid_fetch_session_epoch):
            # The leader evicted our session or restarted: start a new one.
            self._reset_session()
            return True
        if answer.error_code != ErrorCode.none:
            self._reset_session()
            raise KafkaClientError(f"broker {self.leader_id} refused the fetch: "
                                   f"{answer.error_code.name}")
        if full:
            self._session_id = answer.session_id
            self._session_epoch = 1
            in_session.clear()
            in_session.update(send)
        else:
            self._session_epoch = _next_session_epoch(self._session_epoch)
            in_session.update(send)
            for tp in forgotten:
                del in_session[tp]
        if self._session_id == 0:
            self._reset_session()  # the leader made no session: every fetch is full
        changed = self._changed
        for topic in answer.responses:
            for p in topic.partitions:
                tp = (topic.topic, p.partition_index)
                state = self.partitions.get(tp)
                asked = in_session.get(tp)
                if state is None or asked is None or state.leader_epoch != asked[0]:
                    continue  # no longer fetched, or under another epoch now
                changed.add(tp)  # its log end moves, or its state does
                if p.error_code == ErrorCode.offset_out_of_range:
                    self._out_of_range(tp, state, p.log_start_offset)
                    continue
                if p.error_code == ErrorCode.offset_moved_to_tiered_storage:
                    # Out of the fetches until it starts over at the leader's local log.
                    state.truncating = True
                    self._moved[tp] = p.log_start_offset
                    continue
                if p.error_code != ErrorCode.none:
                    self._wait(tp, state, p.error_code)
                    continue
                if tp in throttled and p.records:
                    quota.record(len(p.records), time.monotonic())
                part = parts.get(tp) or manager.following(*tp)
                if part is None:
                    continue
                try:
                    part.append_as_follower(asked[1], p.records, p.high_watermark,
                                            p.log_start_offset)
                except (RecordError, InvalidOffsetError) as exc:
                    # Batches this follower cannot take (corrupt, or not continuing its
                    # log): nothing of them was written. As Kafka's fetcher does with a
                    # CorruptRecordException: one line, this partition backs off, the
                    # others in the answer are appended and the session goes on (before,
                    # the whole answer was dropped and the connection reopened, with a
                    # traceback each time).
                    log.error("%s-%d: cannot append what leader %d sent at offset %d: %s",
                              tp[0], tp[1], self.leader_id, asked[1], exc)
                    self._back_off(tp, state, time.monotonic() + self.backoff_s)
        return True

    def _reset_session(self) -> None:
        self._session_id = 0
        self._session_epoch = INITIAL_SESSION_EPOCH
        self._in_session = {}

    def _out_of_range(self, tp: TopicPartition, st: FetchState, leader_start: int) -> None:
        part = self.manager.following(*tp)
        if part is None:
            return
        if part.log.log_end_offset < leader_start:
            # The leader deleted (retention, DeleteRecords) what we still lack: start
            # over at its log start (Kafka's handleOffsetOutOfRange, the low case).
            log.info("%s-%d: behind the leader's log start %d; starting over there", tp[0],
                     tp[1], leader_start)
            self.manager.truncate_fully(part, leader_start)
            self.manager.checkpoint_truncations()
        else:
            # Our log end is past the leader's (an unclean election): find where we
            # diverge the way a new follower does.
            self._set_truncating(tp, st, True)

    def _wait(self, tp: TopicPartition, st: FetchState, error: ErrorCode) -> None:
        if error not in _WAIT_ERRORS:
            log.warning("%s-%d: leader %d answered %s", tp[0], tp[1], self.leader_id,
                        error.name)
        backoff = (min(self.backoff_s, LEADER_BEHIND_BACKOFF_S) if error in _LEADER_BEHIND
                   else self.backoff_s)
        self._back_off(tp, st, time.monotonic() + backoff)
