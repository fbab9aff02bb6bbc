"""Fetch (1): whole record batches from each partition, sent with ``sendfile``.

- Limits as Kafka applies them: ``max_bytes`` for the response, ``partition_max_bytes``
  per partition, and the first partition with data may exceed both by one batch so that a
  consumer never gets stuck behind a batch larger than its limits (v3+ semantics).
- Long poll: with less than ``min_bytes`` to return, the fetch waits in the purgatory
  until an append to one of its partitions or ``max_wait`` (woken by appends, which read
  for it at once; a loop timer only for ``max_wait``).
- Incremental fetch sessions (KIP-227, v7+): a session remembers the partitions and
  offsets of a consumer; later requests send only what changed, and responses leave out
  partitions with nothing new.
- The response is encoded here by hand, not through kio, because its record sections are
  file regions: the header bytes are built in Python and each partition's records go from
  the segment file to the socket without passing through Python.
- In a cluster the leader serves a partition; consumers read up to the high watermark
  (read_committed up to the last stable offset, which is never above it), and a fetch
  naming a leader epoch (v9+, KIP-320) other than the leader's gets FENCED_LEADER_EPOCH
  (older) or UNKNOWN_LEADER_EPOCH (newer). A fetch with a replica id is a follower's: it
  must come from a registered broker holding a replica; it reads up to the log end, and
  the offset it fetches from is that follower's log end, which moves the high watermark
  (server/replication/replica_manager.py).
- Fetch from follower (KIP-392), for consumer fetches of v11+ (they carry the client's
  rack; older ones are served by the leader only, as in Kafka): with
  ``replica.selector.class`` set, the leader answers a partition whose chosen replica
  (cluster/replica_selector.py) is another broker with that broker's id as
  ``preferred_read_replica``, no records, at once. A follower serves consumers too, up
  to the high watermark it has from the leader (read_committed: its last stable
  offset), its known leader epoch checked as the leader's is; a waiting fetch there
  wakes when that high watermark moves. Elsewhere NOT_LEADER_OR_FOLLOWER. Nothing of
  this runs on a single node or for a fetch without a rack but a None check.
- Topic ids (v13+, KIP-516): the request's ids become names first (server/topic_ids.py),
  so sessions, reads and quotas go on by name; an id the broker does not know is
  answered UNKNOWN_TOPIC_ID, and the answer names each topic by the id asked for. From
  v16 a NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH partition carries the current
  leader and its epoch, and the answer the leaders' endpoints (KIP-951), so a client
  moves to the new leader without asking Metadata first.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.cluster.replica_selector import NO_SELECTOR
from odradek.protocol.codec import Request
from odradek.protocol.fetch import (
    TOPIC_IDS_FROM,
    FetchRequestBody,
    FetchTopic,
    ForgottenTopic,
)
from odradek.protocol.framing import encode_uvarint
from odradek.protocol.messages import ms
from odradek.security.acls import Operation, ResourceType
from odradek.server.errors import error_code
from odradek.server.fetch_sessions import FINAL_EPOCH, FetchSession, SessionError
from odradek.server.handlers.base import (
    CLUSTER,
    Api,
    allowed,
    throttle,
)
from odradek.server.handlers.hints import (
    AnswerNames,
    current_leader_field,
    node_endpoints_section,
)
from odradek.server.replication.reads import (
    Following,
    PartitionResult,
    Preferred,
    ReadForFollower,
    Refused,
    Wanted,
)
from odradek.server.tiered import read_remote
from odradek.server.topic_ids import is_unknown, name_for
from odradek.storage.errors import (
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
)
from odradek.storage.log import BytesRegion, FileRegion
from odradek.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from odradek.server.broker import Broker
    from odradek.server.metrics import BrokerStats
    from odradek.server.security.quotas import ClientQuotas

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_V4 = struct.Struct(">ihqq")  # index, error, high watermark, last stable offset
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")  # producer id, first offset

TopicPartition = tuple[str, int]
ReadResult = tuple[list[PartitionResult], int]
# A loop timer may fire up to the clock's resolution before its time: a follower
# session's timer counts a fetch due within this much as due (else it sets itself again).
EXPIRY_SLACK_S = 0.001


def _read_refusals(broker: Broker, request: Request, wanted: list[Wanted],
                   refused: Refused | None) -> Refused | None:
    """The partitions of topics the principal may not READ, refused with
    TOPIC_AUTHORIZATION_FAILED (whether they exist or not), added to ``refused``."""
    # An unknown topic id's stand-in is answered UNKNOWN_TOPIC_ID, as Kafka answers it
    # before any authorization: there is no name to authorize.
    denied = {topic for topic, _, _, _ in wanted if not is_unknown(topic) and not allowed(
        broker, request, Operation.READ, ResourceType.TOPIC, topic)}
    if not denied:
        return refused
    out = dict(refused or {})
    for topic, partition, _, _ in wanted:
        if topic in denied:
            out[(topic, partition)] = ErrorCode.topic_authorization_failed
    return out


def _read(broker: Broker, wanted: list[Wanted], max_bytes: int,
          read_committed: bool, refused: Refused | None = None,
          preferred: Preferred | None = None, following: Following | None = None
          ) -> tuple[list[PartitionResult], int]:
    """A consumer's read: from the logs this broker leads, and with ``following`` (a
    v11+ fetch in a cluster) also from those it follows, each up to its high watermark
    (the follower's is the leader's as last heard, never above its own log end)."""
    results = []
    total = 0
    get_log = broker.get_log
    for topic, partition, fetch_offset, partition_max_bytes in wanted:
        lg = get_log(topic, partition)
        if lg is None and following is not None:
            # Looked up at every read, not once: a parked fetch must not go on reading
            # a replica this broker stopped following meanwhile.
            followed = following(topic, partition)
            if followed is not None:
                lg = followed.log
        if preferred and (topic, partition) in preferred and lg is not None:
            # No records: the offsets the leader has now, and where to fetch instead.
            hw = lg.high_watermark
            results.append(PartitionResult(
                topic, partition, 0, hw, min(lg.last_stable_offset, hw),
                lg.log_start_offset, None, None, preferred[(topic, partition)]))
            continue
        if lg is None or (refused and (topic, partition) in refused):
            code = (refused[(topic, partition)] if refused and (topic, partition) in refused
                    else ErrorCode.unknown_topic_id if is_unknown(topic)
                    else broker.missing_partition_error(topic, partition))
            # Kafka answers an unknown partition with an empty (not null) list of
            # aborted transactions (seen by the oracle tier, tests/oracle).
            results.append(PartitionResult(topic, partition, code, -1, -1, -1, None,
                                           [] if lg is None else None))
            continue
        budget = max_bytes - total
        if partition_max_bytes < budget:
            budget = partition_max_bytes
        region: FileRegion | BytesRegion | None = None
        aborted: list[AbortedTxn] | None = [] if read_committed else None
        try:
            if (budget > 0 or total == 0) and read_committed:
                # Only below the last stable offset, with the aborted transactions of
                # the range, so the client can drop their records (KIP-98).
                committed = lg.read_committed(fetch_offset, max(budget, 0),
                                              min_one=total == 0)
                read = committed.result
                region, aborted = read.region, committed.aborted
                # A replicated log's (a leader's or a follower's) high watermark is not
                # its log end.
                hw = lg.high_watermark if lg.replicated else read.log_end_offset
                start, lso = read.log_start_offset, committed.last_stable_offset
            elif budget > 0 or total == 0:
                # A replicated log is read up to its high watermark; a single node's
                # commits what it appends (its high watermark is its log end).
                limit = lg.high_watermark if lg.replicated else None
                read = lg.read(fetch_offset, max(budget, 0), max_offset=limit,
                               min_one=total == 0)
                region = read.region
                # Read after the batches: an append in between may have moved it past
                # the high watermark this answer names.
                hw = read.log_end_offset if limit is None else limit
                start, lso = read.log_start_offset, min(lg.last_stable_offset, hw)
            else:
                hw, start = lg.high_watermark, lg.log_start_offset
                lso = min(lg.last_stable_offset, hw)
            error = 0
        except OffsetMovedToTieredStorageError:
            # Only in the remote tier (KIP-405): from its reader's cache, or pending
            # (no records, no error: the fetch waits and the chunk's arrival wakes it).
            remote = read_remote(broker, topic, partition, fetch_offset, max(budget, 0),
                                 min_one=total == 0, read_committed=read_committed)
            region = None if remote.data is None else BytesRegion(remote.data)
            aborted = remote.aborted if read_committed else None
            error = remote.error
            hw = lg.high_watermark
            start, lso = lg.log_start_offset, min(lg.last_stable_offset, hw)
        except OffsetOutOfRangeError as exc:
            # As Kafka's ReplicaManager: an out-of-range read names no offsets (-1); a
            # consumer resets with ListOffsets (found by the oracle tier, tests/oracle).
            error, hw, start, lso, aborted = error_code(exc), -1, -1, -1, None
        if region is not None:
            total += region.length
        results.append(PartitionResult(topic, partition, error, hw, lso, start, region,
                                       aborted))
    return results, total


def handle_now(broker: Broker, request: Request
               ) -> list[bytes | FileRegion] | _DelayedFetch:
    """The answer, if it can be given at once (enough bytes, an error, no wait asked or
    the broker stopping); else the delayed fetch, an awaitable of the answer.

    Split so that the connection can answer most fetches synchronously, while the bytes
    arrive, without a task step, future and coroutine per request; ``handle`` is the same
    for callers that await."""
    # The body is protocol.fetch's FetchRequestBody (every version served is read by
    # hand), so its fields are plain attributes and max_wait is in milliseconds.
    body = request.body
    version = request.api_version
    if version >= TOPIC_IDS_FROM:
        body = _named(broker, body)
    session: FetchSession | None = None
    incremental = False
    follower = body.replica_id >= 0
    if version < 7 or (body.session_id == 0 and body.session_epoch == FINAL_EPOCH):
        # No session (every librdkafka fetch): the partitions as asked, nothing kept.
        wanted = [(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
                  for t in body.topics for p in t.partitions]
    else:
        try:
            session, incremental, requested = broker.fetch_sessions.begin(body,
                                                                          follower=follower)
        except SessionError as exc:
            return _error_response(request, exc.code)
        if session is not None and not (
                session.follower and incremental
                and time.monotonic() - session.swept_at < broker.fetch_sweep_s):
            # Every partition of the session; a follower's session otherwise reads what
            # the request names and (at each read) what changed.
            requested = list(session.partitions.items())
            session.swept_at = time.monotonic()
        wanted = [(tp[0], tp[1], state.fetch_offset, state.max_bytes)
                  for tp, state in requested]

    max_bytes = body.max_bytes
    min_bytes = body.min_bytes
    read: Callable[[], tuple[list[PartitionResult], int]]
    preferred: Preferred | None = None
    quota_wait: list[float] | None = None
    quotas = broker.quotas
    if quotas is not None and (not quotas.active or body.replica_id >= 0):
        quotas = None  # follower fetches are not client fetches: no consumer quota
    stats = broker.stats if body.replica_id < 0 else None  # consumers' (metrics.listen)
    if quotas is not None and (cap := quotas.fetch_max_bytes(request)) is not None:
        max_bytes = min(max_bytes, cap)  # no more than the quota allows over its window
    topology = broker.topology
    if body.replica_id >= 0:
        epochs = {(t.topic, p.partition): p.current_leader_epoch
                  for t in body.topics for p in t.partitions}
        log_starts = {(t.topic, p.partition): p.log_start_offset
                      for t in body.topics for p in t.partitions}
        replica = body.replica_id
        # Set when the leader's replication quota held a partition back: the fetch then
        # waits only until the quota frees (not replica.fetch.wait.max.ms, which would
        # hold a throttled move far below its throttle).
        quota_wait = [0.0]

        if not allowed(broker, request, Operation.CLUSTER_ACTION, ResourceType.CLUSTER,
                       CLUSTER):
            # Only brokers replicate: Kafka refuses every partition of such a fetch.
            return _answer(broker, request, [
                PartitionResult(t, p, ErrorCode.topic_authorization_failed, -1, -1, -1, None)
                for t, p, _, _ in wanted], session, incremental)

        read_for_follower = topology.read_for_follower
        if session is not None and session.follower:
            read = _follower_session_read(read_for_follower, session, replica, wanted,
                                          max_bytes, epochs, log_starts, quota_wait)
        else:
            def read() -> tuple[list[PartitionResult], int]:
                return read_for_follower(replica, wanted, max_bytes, epochs, log_starts,
                                         quota_wait)
    else:
        read_committed = body.isolation_level == 1
        # KIP-392: a v11+ consumer fetch may be served by a follower (Kafka's
        # FetchParams.fetchOnlyLeader is false once the client sends its metadata).
        following = topology.following if version >= 11 else None
        refused = topology.epoch_refusals(body.topics, following is not None)
        if broker.authorizer is not None:
            refused = _read_refusals(broker, request, wanted, refused)
        if (following is not None and body.rack_id
                and broker.config["replica.selector.class"] != NO_SELECTOR):
            preferred = topology.preferred_read_replicas(wanted, body.rack_id, refused)

        def read() -> tuple[list[PartitionResult], int]:
            return _read(broker, wanted, max_bytes, read_committed, refused, preferred,
                         following)
    results, total = read()
    # A preferred read replica is answered at once (Kafka's fetchMessages): the client
    # is to go elsewhere, not to wait here.
    if (total < min_bytes and not broker.stopping and not preferred
            and not any(r.error for r in results)):
        max_wait_s = ms(body.max_wait) / 1000
        if quota_wait is not None and quota_wait[0] > 0:
            max_wait_s = min(max_wait_s, quota_wait[0])
        if max_wait_s > 0:
            return _DelayedFetch(broker, request, wanted, read, min_bytes, max_wait_s,
                                 results, session, incremental, quotas, stats)
    return _answer(broker, request, results, session, incremental, quotas, stats)


def _follower_session_read(read_for_follower: ReadForFollower, session: FetchSession,
                           replica: int, listed: list[Wanted], max_bytes: int,
                           epochs: dict[TopicPartition, int],
                           log_starts: dict[TopicPartition, int],
                           quota_wait: list[float]) -> Callable[[], ReadResult]:
    """A follower session's read: first the partitions ``listed`` (the request's) and
    those changed since the session's last answer (``FetchSession.changed``); then, at
    each wake-up of the parked fetch, only those changed since the read before
    (``FetchSession.fresh``), their results replacing the earlier ones. A high-watermark
    move does not wake a parked follower fetch (it gives it no records to send); the
    partition, marked fresh, is reread with whatever wakes the fetch next."""
    names = {(w[0], w[1]) for w in listed}
    partitions = session.partitions
    results: dict[TopicPartition, PartitionResult] = {}
    unread: set[TopicPartition] = set()
    first = [True]

    def read() -> ReadResult:
        if first[0]:
            first[0] = False
            wanted = listed + [(tp[0], tp[1], state.fetch_offset, state.max_bytes)
                               for tp in session.changed if tp not in names
                               and (state := partitions.get(tp)) is not None]
        else:
            wanted = [(tp[0], tp[1], state.fetch_offset, state.max_bytes)
                      for tp in session.fresh if (state := partitions.get(tp)) is not None]
        session.fresh = {}
        total = sum(r.region.length for r in results.values() if r.region is not None)
        if wanted:
            left: list[TopicPartition] = []
            fresh, more = read_for_follower(replica, wanted, max_bytes - total, epochs,
                                            log_starts, quota_wait, left)
            for r in fresh:
                tp = (r.topic, r.partition)
                old = results.get(tp)
                if old is not None and old.region is not None:
                    total -= old.region.length
                results[tp] = r
                unread.discard(tp)
            total += more
            unread.update(left)
            session.unread = list(unread)
        return list(results.values()), total

    return read


async def handle(broker: Broker, request: Request) -> list[bytes | FileRegion] | None:
    response = handle_now(broker, request)
    if isinstance(response, list):
        return response
    return await response


class _DelayedFetch:
    """A fetch waiting in the purgatory (Kafka's DelayedFetch): awaitable for its
    response. An append to one of its partitions reads again (``try_complete``, at the
    purgatory's next wake-up; a follower session's fetch through its session, which
    follows all the session's partitions); ``max_wait`` runs out on a loop timer (a
    follower session's fetches on the session's one timer: ``_expire_with_session``). Either way
    the response is made there and, if the connection that parked it gave a ``sender``,
    sent from there too; else whoever awaits gets it on the next loop step. No
    coroutine, timeout scope or future per wake-up: at moderate rates every fetch of a
    consumer that keeps up parks here, so this is per-request cost."""

    __slots__ = ("broker", "deadline", "future", "incremental", "min_bytes", "on_done",
                 "partitions", "quotas", "read", "request", "results", "sender", "session",
                 "stats", "timer")

    def __init__(self, broker: Broker, request: Request, wanted: list[Wanted],
                 read: Callable[[], tuple[list[PartitionResult], int]], min_bytes: int,
                 max_wait_s: float, results: list[PartitionResult],
                 session: FetchSession | None, incremental: bool,
                 quotas: ClientQuotas | None, stats: BrokerStats | None) -> None:
        self.broker = broker
        self.quotas = quotas
        self.stats = stats
        self.request = request
        self.read = read  # the consumer's or the follower's read, again
        self.min_bytes = min_bytes
        self.results = results  # the last read: answered if the wait runs out
        self.session = session
        self.incremental = incremental
        self.partitions = [(w[0], w[1]) for w in wanted]
        # Set by a connection that parks this fetch (Connection._send_parked): the answer
        # goes out from the completing call, and the awaited result is None.
        self.sender: Callable[[list[bytes | FileRegion]], bool] | None = None
        # Set with it: told once the future is done, and whether ``sender`` sent it.
        self.on_done: Callable[[bool], None] | None = None
        loop = asyncio.get_running_loop()
        self.future: asyncio.Future[list[bytes | FileRegion] | None] = loop.create_future()
        self.deadline = loop.time() + max_wait_s
        self.timer: asyncio.TimerHandle | None = None
        if session is not None and session.follower:
            _expire_with_session(session, loop, self.deadline)
        else:
            self.timer = loop.call_at(self.deadline, self._expire)
        self._watch()

    def __await__(self) -> Generator[Any, None, list[bytes | FileRegion] | None]:
        return self.future.__await__()

    def try_complete(self, tp: TopicPartition) -> None:
        """After an append to a watched partition: answer if there is enough now."""
        self._read_and_answer(expired=False)

    def _expire(self) -> None:
        self._read_and_answer(expired=True)

    def _read_and_answer(self, *, expired: bool) -> None:
        if self.future.done():  # whoever awaited it is gone
            self._forget()
            return
        try:
            self.results, total = self.read()
            if (not expired and total < self.min_bytes and not self.broker.stopping
                    and not any(r.error for r in self.results)):
                self._watch()  # wait on
                return
            self._forget()
            response = _answer(self.broker, self.request, self.results, self.session,
                               self.incremental, self.quotas, self.stats)
        except Exception as exc:  # never into the waker's call: this fetch fails
            self._forget()
            self.future.set_exception(exc)
            self._done(False)
            return
        sender = self.sender
        sent = sender is not None and sender(response)
        self.future.set_result(None if sent else response)
        self._done(sent)

    def _done(self, sent: bool) -> None:
        on_done, self.on_done = self.on_done, None
        if on_done is not None:
            on_done(sent)

    def _watch(self) -> None:
        session = self.session
        if session is not None and session.follower:
            # Woken through the session, which follows all its partitions (not only
            # those this request names), so nothing to watch one by one.
            session.parked = self
        else:
            self.broker.purgatory.watch(self.partitions, self)

    def _forget(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        session = self.session
        if session is not None and session.follower:
            if session.parked is self:
                session.parked = None
        else:
            self.broker.purgatory.unwatch(self.partitions, self)

    def close(self) -> None:
        """Never to be awaited (its connection ended): out of the purgatory now."""
        self._forget()
        if not self.future.done():
            self.future.cancel()


def _expire_with_session(session: FetchSession, loop: asyncio.AbstractEventLoop,
                         deadline: float) -> None:
    """Have the fetch ``session`` parks expire at ``deadline`` on the session's one loop
    timer. A follower parks a fetch for every replicated produce, and a timer made and
    cancelled each time (a heap push and pop of a TimerHandle) was ~45 of the leader's
    ~1,000 Python calls per acks=all request; the session's timer is set again only
    when it fires before the fetch parked then is due (at most every
    replica.fetch.wait.max.ms of an idle follower)."""
    if session.expiry is not None:
        if session.expires_at <= deadline:
            return  # fires first, and sets itself again for what is parked then
        session.expiry.cancel()
    session.expires_at = deadline
    session.expiry = loop.call_at(deadline, _session_timer, session, loop)


def _session_timer(session: FetchSession, loop: asyncio.AbstractEventLoop) -> None:
    session.expiry = None
    parked = session.parked
    if not isinstance(parked, _DelayedFetch):
        return  # answered meanwhile: the next fetch sets the timer itself
    if parked.deadline <= loop.time() + EXPIRY_SLACK_S:
        parked._expire()
    else:
        _expire_with_session(session, loop, parked.deadline)


def _named(broker: Broker, body: FetchRequestBody) -> FetchRequestBody:
    """A v13+ request with its topic ids turned into names (or stand-ins). Built field
    by field: NamedTuple._replace cost ~2 us per fetch here, more than the rest of what
    topic ids add (bench/ab_bench.py --count --fetch-version 16)."""
    metadata = broker.metadata
    assert metadata is not None
    names = metadata.names_by_id
    topics = [FetchTopic(names.get(t.topic_id) or name_for(metadata, t.topic_id),  # type: ignore[arg-type]
                         t.partitions, t.topic_id) for t in body.topics]
    forgotten = body.forgotten_topics_data
    if forgotten:
        forgotten = [ForgottenTopic(name_for(metadata, f.topic_id), f.partitions, f.topic_id)
                     for f in forgotten]
    return FetchRequestBody(body.replica_id, body.max_wait, body.min_bytes, body.max_bytes,
                            body.isolation_level, body.session_id, body.session_epoch,
                            topics, forgotten, body.rack_id, body.replica_epoch)


def _answer(broker: Broker, request: Request, results: list[PartitionResult],
            session: FetchSession | None, incremental: bool,
            quotas: ClientQuotas | None = None,
            stats: BrokerStats | None = None) -> list[bytes | FileRegion]:
    throttle_ms = 0
    throttled = False
    if quotas is not None:
        # consumer_byte_rate: over it, the answer carries no records (Kafka's throttled
        # response: the client fetches them again once its throttle has passed).
        size = sum(r.region.length for r in results if r.region is not None)
        throttle_ms = throttle(request, quotas.fetch(request, size))
        throttled = bool(throttle_ms and size)
    elif request.session is not None:
        throttle_ms = request.session.throttle_ms  # a request quota's, if any
    if stats is not None:  # BrokerTopicMetrics, per partition read as Kafka counts them
        topics = stats.topics
        by_id = request.api_version >= TOPIC_IDS_FROM  # only then can a stand-in come
        for r in results:
            if by_id and is_unknown(r.topic):
                continue  # no topic to count under (and no series per garbage id)
            tstats = topics.get(r.topic) or stats.topic(r.topic)
            tstats.fetches += 1
            if r.error:
                tstats.failed_fetch += 1
            elif r.region is not None and not throttled:
                tstats.bytes_out += r.region.length
    if throttled:
        return encode_fetch_response(request, [],
                                     session.session_id if session is not None else 0,
                                     throttle_ms=throttle_ms)
    if session is not None:
        if session.follower:
            session.answered()
        partitions = session.partitions
        if incremental:
            kept = []
            for r in results:
                state = partitions[(r.topic, r.partition)]
                if (r.region is not None or r.error or r.preferred_replica >= 0 or
                        r.high_watermark != state.sent_high_watermark or
                        r.last_stable_offset != state.sent_last_stable or
                        r.log_start_offset != state.sent_log_start):
                    kept.append(r)
            results = kept
        for r in results:
            pstate = partitions.get((r.topic, r.partition))
            if pstate is not None:
                pstate.sent_high_watermark = r.high_watermark
                pstate.sent_log_start = r.log_start_offset
                pstate.sent_last_stable = r.last_stable_offset
    return encode_fetch_response(request, results,
                                 session.session_id if session is not None else 0,
                                 throttle_ms=throttle_ms,
                                 names=AnswerNames(broker, request)
                                 if request.api_version >= TOPIC_IDS_FROM else None)


def _error_response(request: Request, code: int) -> list[bytes | FileRegion]:
    return encode_fetch_response(request, [], 0, error=code)


# --- the response, by hand ---------------------------------------------------------------
# Fixed layouts per version, built once: the response header and top-level fields, and
# a partition's fields before and after its aborted transactions.
_TOP_V4 = struct.Struct(">iii")  # size, correlation id, throttle time ms
_TOP_V7 = struct.Struct(">iiihi")  # ... error code, session id
_TOP_V12 = struct.Struct(">iibihi")  # size, correlation id, header tagged fields (none), ...
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... and log start offset
_PARTITION_HEAD = {v: _PARTITION_V4 if v == 4 else _PARTITION_V5 for v in range(4, 19)}
_CURRENT_LEADER_TAG = 1  # KIP-951's CurrentLeader, v16+ (tag 0 is DivergingEpoch)
_LEADER_ERRORS = frozenset({ErrorCode.not_leader_or_follower.value,
                            ErrorCode.fenced_leader_epoch.value})
_NULL_I32 = _I32.pack(-1)
_NO_REPLICA = _I32.pack(-1)  # preferred read replica (v11+): none
_UVARINT = [encode_uvarint(n) for n in range(128)]


def _uvarint(value: int) -> bytes:
    return _UVARINT[value] if value < 128 else encode_uvarint(value)


def encode_fetch_response(request: Request, results: list[PartitionResult], session_id: int,
                          error: int = 0, throttle_ms: int = 0,
                          names: AnswerNames | None = None) -> list[bytes | FileRegion]:
    """Fetch response v4..18 as parts: bytes, and file regions for record sections;
    ``names`` (v13+, where there are results) says each topic's id and, from v16,
    where a partition's leader is now."""
    version = request.api_version
    flexible = version >= 12
    hints = version >= 16
    leaders: set[int] = set()
    head = _PARTITION_HEAD[version]
    v5 = version >= 5
    v11 = version >= 11
    parts: list[bytes | FileRegion] = []
    out: list[bytes] = []  # bytes since the last region
    size = 0  # of the parts before ``out``
    topic_count = 0
    if results:
        # Partitions of a topic go together: most fetches name one topic, in order.
        first_topic = results[0].topic
        if any(r.topic != first_topic for r in results):
            by_topic: dict[str, list[PartitionResult]] = {}
            for r in results:
                by_topic.setdefault(r.topic, []).append(r)
            grouped = list(by_topic.items())
        else:
            grouped = [(first_topic, results)]
        topic_count = len(grouped)
    else:
        grouped = []
    out.append(_uvarint(topic_count + 1) if flexible else _I32.pack(topic_count))
    for topic, partitions in grouped:
        if names is not None:  # v13+: the topic's id, 16 bytes
            out.append(names.topic_id(topic))
            out.append(_uvarint(len(partitions) + 1))
        elif flexible:
            name = topic.encode()
            out.append(_uvarint(len(name) + 1))
            out.append(name)
            out.append(_uvarint(len(partitions) + 1))
        else:
            name = topic.encode()
            out.append(_I16.pack(len(name)))
            out.append(name)
            out.append(_I32.pack(len(partitions)))
        for r in partitions:
            if v5:
                out.append(head.pack(r.partition, r.error, r.high_watermark,
                                     r.last_stable_offset, r.log_start_offset))
            else:
                out.append(head.pack(r.partition, r.error, r.high_watermark,
                                     r.last_stable_offset))
            # aborted transactions: null for read_uncommitted (and errors), else the
            # (producer id, first offset) of each aborted transaction in the range
            aborted = r.aborted
            if aborted is None:
                out.append(b"\x00" if flexible else _NULL_I32)
            else:
                out.append(_uvarint(len(aborted) + 1) if flexible
                           else _I32.pack(len(aborted)))
                for txn in aborted:
                    out.append(_ABORTED.pack(txn.producer_id, txn.first_offset))
                    if flexible:
                        out.append(b"\x00")
            if v11:
                preferred = r.preferred_replica
                out.append(_NO_REPLICA if preferred < 0 else _I32.pack(preferred))
            region = r.region
            if region is None:
                out.append(b"\x01" if flexible else b"\x00\x00\x00\x00")
            else:
                out.append(_uvarint(region.length + 1) if flexible
                           else _I32.pack(region.length))
                if isinstance(region, BytesRegion):  # from the remote tier: bytes in hand
                    out.append(region.data)
                else:  # a file region, sent with sendfile
                    chunk = b"".join(out)
                    parts.append(chunk)
                    parts.append(region)
                    size += len(chunk) + region.length
                    out = []
            if hints and r.error in _LEADER_ERRORS and names is not None:
                leader, epoch = names.current_leader(topic, r.partition)
                out.append(current_leader_field(_CURRENT_LEADER_TAG, leader, epoch))
                if leader >= 0:
                    leaders.add(leader)
            elif flexible:
                out.append(b"\x00")  # partition tagged fields
        if flexible:
            out.append(b"\x00")  # topic tagged fields
    if leaders and names is not None:
        out.append(node_endpoints_section(names.endpoints(leaders)))
    elif flexible:
        out.append(b"\x00")  # response tagged fields
    tail = b"".join(out)
    parts.append(tail)
    size += len(tail)
    # The frame's size counts everything after itself: the header and top-level fields
    # (packed now that the size is known) go in front of the first part.
    correlation_id = request.correlation_id
    if flexible:
        top = _TOP_V12.pack(size + _TOP_V12.size - 4, correlation_id, 0, throttle_ms, error,
                            session_id)
    elif version >= 7:
        top = _TOP_V7.pack(size + _TOP_V7.size - 4, correlation_id, throttle_ms, error,
                           session_id)
    else:
        top = _TOP_V4.pack(size + _TOP_V4.size - 4, correlation_id, throttle_ms)
    first = parts[0]
    parts[0] = top + first  # type: ignore[operator]  # parts[0] is always bytes
    return parts


API = Api(1, "Fetch", 4, 18, handle, handle_now)
