"""Share sessions (KIP-932's ShareSessionCache): what a member's ShareFetch requests
fetch from this broker, kept between requests so that each one names only what changed.

A session is keyed by (group id, member id). ``ShareSessionEpoch`` 0 opens one (a
member's earlier session is replaced), -1 closes it, any other value must be the
session's next epoch: INVALID_SHARE_SESSION_EPOCH otherwise, SHARE_SESSION_NOT_FOUND if
there is no session. A session belongs to the connection that opened it: when that
connection closes the session goes, and the broker releases the records its member
still holds (Kafka 4.x does the same), so a killed consumer's records are redelivered
at once rather than after their lock times out. At most
``group.share.max.share.sessions`` sessions are kept (SHARE_SESSION_LIMIT_REACHED).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1

SessionKey = tuple[str, str]  # group id, member id
# A share partition in a session: topic name, partition (its topic id the value).
SessionPartition = tuple[str, int]


class ShareSessionError(Exception):
    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    connection: object  # the connection that opened it
    epoch: int = 1  # the next request's epoch
    partitions: dict[SessionPartition, uuid.UUID] = field(default_factory=dict)  # -> topic id

    def next_epoch(self) -> None:
        self.epoch = 1 if self.epoch >= _MAX_EPOCH else self.epoch + 1


class ShareSessionCache:
    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[SessionKey, ShareSession] = {}
        self._by_connection: dict[int, set[SessionKey]] = {}

    def open(self, group_id: str, member_id: str, connection: object) -> ShareSession:
        key = (group_id, member_id)
        old = self.sessions.pop(key, None)
        if old is not None:
            self._forget_connection(old, key)
        if len(self.sessions) >= self.max_sessions:
            raise ShareSessionError(ErrorCode.share_session_limit_reached,
                                    "The share session cache is full.")
        session = self.sessions[key] = ShareSession(group_id, member_id, connection)
        self._by_connection.setdefault(id(connection), set()).add(key)
        return session

    def get(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """The session a request of ``epoch`` (neither 0 nor -1) continues."""
        session = self.sessions.get((group_id, member_id))
        if session is None:
            raise ShareSessionError(ErrorCode.share_session_not_found,
                                    "The share session was not found.")
        if epoch != session.epoch:
            raise ShareSessionError(ErrorCode.invalid_share_session_epoch,
                                    f"The share session epoch is {session.epoch}, "
                                    f"not {epoch}.")
        return session

    def get_final(self, group_id: str, member_id: str) -> ShareSession:
        """The session a closing request (epoch -1) ends."""
        session = self.sessions.get((group_id, member_id))
        if session is None:
            raise ShareSessionError(ErrorCode.share_session_not_found,
                                    "The share session was not found.")
        return session

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        key = (group_id, member_id)
        session = self.sessions.pop(key, None)
        if session is not None:
            self._forget_connection(session, key)
        return session

    def closed_connection(self, connection: object) -> list[ShareSession]:
        """The sessions of a connection that closed (removed)."""
        keys = self._by_connection.pop(id(connection), set())
        return [s for s in (self.sessions.pop(k, None) for k in keys) if s is not None]

    def _forget_connection(self, session: ShareSession, key: SessionKey) -> None:
        keys = self._by_connection.get(id(session.connection))
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_connection[id(session.connection)]
