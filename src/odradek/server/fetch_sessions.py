"""Incremental fetch sessions (KIP-227): what a broker remembers of a fetcher between
its requests, so that later requests name only what changed.

A session holds the partitions a fetcher reads with their fetch offsets (and what the
last answer told it of each, so answers leave out partitions with nothing new). The
cache keeps ``MAX_SESSIONS`` of them, the least recently used evicted first.

A follower's session (a fetch with a replica id) also keeps a standing interest in its
partitions with the fetch purgatory (``Purgatory.follow``): every change to one of them
(an append, a high-watermark move, a leadership change) marks it in ``changed`` as it
happens. The leader then reads, for each of the follower's fetches, the partitions the
request names (their offsets moved) and those marked, not every partition the follower
replicates: with a thousand partitions a fetch answering for two of them costs two
partition reads. What no change marks (the log start moving under retention) and the
followers' caught-up times in the ISR rule (``LeaderReplication.update_follower``) are
kept current by a full read of the session every ``sweep_s`` (``sweep_interval_s``).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from asyncio import TimerHandle

    from odradek.server.replication.purgatory import Purgatory, Waiter

FINAL_EPOCH = -1
INITIAL_EPOCH = 0
# Kafka's max.incremental.fetch.session.cache.slots: sessions kept at once (the least
# recently used one is evicted), so memory stays bounded whatever clients do.
MAX_SESSIONS = 1000

TopicPartition = tuple[str, int]


def sweep_interval_s(replica_lag_time_max_ms: int) -> float:
    """How often a follower's session is read whole: a tenth of the ISR's lag limit (so
    an idle partition's follower never looks lagging), at most once a second."""
    return min(1.0, replica_lag_time_max_ms / 10_000)


class SessionError(Exception):
    """The request's session cannot be used: answered with ``code`` as a whole."""

    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


@dataclass(slots=True)
class PartitionFetch:
    fetch_offset: int
    max_bytes: int
    # What the last response told the client, for incremental responses.
    sent_high_watermark: int = -1
    sent_log_start: int = -1
    sent_last_stable: int = -1


class FetchSession:
    """One fetcher's session; a follower's is a purgatory ``Interest``."""

    __slots__ = ("changed", "epoch", "expires_at", "expiry", "follower", "fresh", "parked",
                 "partitions", "session_id", "swept_at", "unread")

    def __init__(self, session_id: int, *, follower: bool = False) -> None:
        self.session_id = session_id
        self.epoch = 1  # the epoch the next request must carry
        self.partitions: dict[TopicPartition, PartitionFetch] = {}
        self.follower = follower
        # A follower's: partitions changed since the last answer (in order), and since
        # the last read (a parked fetch reads only those again), those the last answer
        # leaves unread for want of room (still to send), the fetch parked now, and
        # when the session was last read whole.
        self.changed: dict[TopicPartition, None] = {}
        self.fresh: dict[TopicPartition, None] = {}
        self.unread: list[TopicPartition] = []
        self.parked: Waiter | None = None
        self.swept_at = 0.0
        # The one loop timer its parked fetches expire on (handlers/fetch.py), and when.
        self.expiry: TimerHandle | None = None
        self.expires_at = 0.0

    @property
    def waiting(self) -> bool:
        return self.parked is not None

    def touch(self, tp: TopicPartition) -> None:
        self.changed[tp] = None
        self.fresh[tp] = None

    def try_complete(self, tp: TopicPartition) -> None:
        parked = self.parked
        if parked is not None:
            parked.try_complete(tp)

    def answered(self) -> None:
        """An answer is going out: what it covered is no longer changed for this
        follower, except what did not fit (read again next time)."""
        self.changed = dict.fromkeys(self.unread)
        self.fresh = {}
        self.unread = []


class FetchSessionCache:
    """The broker's sessions; followers' ones registered with ``purgatory``."""

    def __init__(self, purgatory: Purgatory | None = None) -> None:
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._ids = itertools.count()
        self._purgatory = purgatory

    def create(self, *, follower: bool = False) -> FetchSession:
        # Ids are positive int32s; 0 means "no session" on the wire.
        session = FetchSession(next(self._ids) % 0x7FFFFFFF + 1,
                               follower=follower and self._purgatory is not None)
        self.sessions[session.session_id] = session
        while len(self.sessions) > MAX_SESSIONS:
            self._dropped(self.sessions.popitem(last=False)[1])
        return session

    def get(self, session_id: int) -> FetchSession | None:
        session = self.sessions.get(session_id)
        if session is not None:
            self.sessions.move_to_end(session_id)
        return session

    def close(self, session_id: int) -> None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            self._dropped(session)

    def _dropped(self, session: FetchSession) -> None:
        if session.follower and self._purgatory is not None:
            self._purgatory.unfollow(session.partitions, session)

    def begin(self, body: Any, *, follower: bool
              ) -> tuple[FetchSession | None, bool, list[tuple[TopicPartition, PartitionFetch]]]:
        """The session a v7+ fetch (with a session id or epoch) uses, whether it is
        incremental, and the partitions the request names; SessionError when the
        session is unknown or out of step (Kafka's FetchManager.newContext)."""
        session_id = body.session_id
        epoch = body.session_epoch
        requested = [
            ((t.topic, p.partition), PartitionFetch(p.fetch_offset, p.partition_max_bytes))
            for t in body.topics for p in t.partitions
        ]
        if epoch == INITIAL_EPOCH:
            # A full fetch closes the session it names (franz-go resets a session this
            # way, keeping its id, after a fetch was cut off) and opens a new one.
            if session_id != 0:
                self.close(session_id)
            session = self.create(follower=follower)
            self._add(session, requested)
            return session, False, requested
        if session_id == 0:
            raise SessionError(ErrorCode.invalid_fetch_session_epoch)
        if epoch == FINAL_EPOCH:
            self.close(session_id)
            return None, False, requested
        found = self.get(session_id)
        if found is None:
            raise SessionError(ErrorCode.fetch_session_id_not_found)
        session = found
        if epoch != session.epoch:
            raise SessionError(ErrorCode.invalid_fetch_session_epoch)
        session.epoch += 1
        gone = [(forgotten.topic, p) for forgotten in body.forgotten_topics_data
                for p in forgotten.partitions]
        for tp in gone:
            session.partitions.pop(tp, None)
            session.changed.pop(tp, None)
        if session.follower and gone and self._purgatory is not None:
            self._purgatory.unfollow(gone, session)
        for tp, state in requested:
            old = session.partitions.get(tp)
            if old is not None:
                state.sent_high_watermark = old.sent_high_watermark
                state.sent_log_start = old.sent_log_start
                state.sent_last_stable = old.sent_last_stable
        self._add(session, requested)
        return session, True, requested

    def _add(self, session: FetchSession, items: list[tuple[TopicPartition, PartitionFetch]]
             ) -> None:
        partitions = session.partitions
        if session.follower and self._purgatory is not None:
            self._purgatory.follow([tp for tp, _ in items if tp not in partitions], session)
        partitions.update(items)
