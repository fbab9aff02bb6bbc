"""A test driver for the group coordinator: an injected clock, tokens handed out per
request, every record kept (as the runtime would append them) and every response filed
under its token — each token must be answered at most once."""

from __future__ import annotations

import itertools
import struct
from typing import Any

from odradek.coordinator import GroupCoordinator
from odradek.coordinator.results import Effects, Record

SESSION_MS = 30_000
REBALANCE_MS = 60_000


def subscription(*topics: str, user_data: bytes | None = None) -> bytes:
    """A consumer-protocol Subscription v0 (what Kafka clients put in JoinGroup)."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    if user_data is None:
        return out + struct.pack(">i", -1)
    return out + struct.pack(">i", len(user_data)) + user_data


class Harness:
    def __init__(self, *, now: int = 1_000_000, **config: Any) -> None:
        ids = itertools.count(1)
        config.setdefault("new_uuid", lambda: f"u{next(ids)}")
        self.coordinator = GroupCoordinator(**config)
        self.now = now
        self.records: list[Record] = []
        self.responses: dict[Any, Any] = {}
        self._tokens = itertools.count(1)

    # --- plumbing --------------------------------------------------------------------

    def apply(self, fx: Effects) -> Effects:
        self.records += fx.records
        for token, response in fx.responses:
            assert token not in self.responses, f"token {token} answered twice"
            self.responses[token] = response
        return fx

    def token(self, label: str) -> str:
        return f"{label}#{next(self._tokens)}"

    def answer(self, token: str) -> Any:
        return self.responses.get(token)

    def advance(self, ms: int) -> Effects:
        self.now += ms
        return self.apply(self.coordinator.tick(self.now))

    def advance_to(self, when: int) -> Effects:
        return self.advance(when - self.now)

    def group(self, group_id: str = "g"):
        return self.coordinator.groups[group_id]

    # --- requests --------------------------------------------------------------------

    def join(
        self,
        member_id: str = "",
        *,
        group: str = "g",
        instance: str | None = None,
        client: str = "client",
        protocols: list[tuple[str, bytes]] | None = None,
        protocol_type: str = "consumer",
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        require_known: bool = True,
        skip_assignment: bool = False,
    ) -> str:
        token = self.token(f"join:{member_id or client}")
        if protocols is None:
            protocols = [("range", subscription("t"))]
        self.apply(
            self.coordinator.join(
                group, member_id, instance, client, "/10.0.0.1", session_ms, rebalance_ms,
                protocol_type, protocols, require_known_member_id=require_known,
                supports_skip_assignment=skip_assignment, token=token, now_ms=self.now,
            )
        )
        return token

    def join_new(self, client: str, **kw: Any) -> str:
        """KIP-394's two steps: get a member id, join with it. Returns the parked token."""
        first = self.join(client=client, **kw)
        answer = self.answer(first)
        assert answer.error_code == 79, answer  # MEMBER_ID_REQUIRED
        return self.join(answer.member_id, client=client, **kw)

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        group: str = "g",
        instance: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> str:
        token = self.token(f"sync:{member_id}")
        self.apply(
            self.coordinator.sync(
                group, member_id, generation, instance, protocol_type, protocol_name,
                list((assignments or {}).items()), token=token, now_ms=self.now,
            )
        )
        return token

    def heartbeat(
        self, member_id: str, generation: int, *, group: str = "g", instance: str | None = None
    ) -> int:
        token = self.token(f"hb:{member_id}")
        self.apply(
            self.coordinator.heartbeat(
                group, member_id, generation, instance, token=token, now_ms=self.now
            )
        )
        return self.answer(token).error_code

    def leave(self, *members: tuple[str, str | None], group: str = "g") -> Any:
        token = self.token("leave")
        self.apply(self.coordinator.leave(group, list(members), token=token, now_ms=self.now))
        return self.answer(token)

    def commit(
        self,
        member_id: str,
        generation: int,
        offsets: list[tuple],
        *,
        group: str = "g",
        instance: str | None = None,
        retention_ms: int | None = None,
    ) -> dict[tuple[str, int], int]:
        token = self.token("commit")
        self.apply(
            self.coordinator.commit_offsets(
                group, member_id, generation, instance, offsets, retention_ms=retention_ms,
                token=token, now_ms=self.now,
            )
        )
        return {(p.topic, p.partition): p.error_code for p in self.answer(token).partitions}

    def delete_offsets(self, partitions: list[tuple[str, int]], *, group: str = "g") -> Any:
        token = self.token("offset-delete")
        self.apply(
            self.coordinator.delete_offsets(group, partitions, token=token, now_ms=self.now)
        )
        return self.answer(token)

    def delete_groups(self, *group_ids: str) -> dict[str, int]:
        token = self.token("delete-groups")
        self.apply(self.coordinator.delete_groups(group_ids, token=token, now_ms=self.now))
        return {g.group_id: g.error_code for g in self.answer(token).groups}

    # --- whole stories ---------------------------------------------------------------

    def stable_group(
        self, *clients: str, group: str = "g", instances: dict[str, str] | None = None,
        protocols: dict[str, list[tuple[str, bytes]]] | None = None, **join: Any,
    ) -> tuple[dict[str, str], int]:
        """Bring ``clients`` into a Stable group; returns ({client: member id}, generation)."""
        instances = instances or {}
        protocols = protocols or {}
        tokens = {}
        for client in clients:
            instance = instances.get(client)
            kw = dict(join, group=group, protocols=protocols.get(client))
            if instance is None:
                tokens[client] = self.join_new(client, **kw)
            else:
                tokens[client] = self.join(client=client, instance=instance, **kw)
        while any(self.answer(t) is None for t in tokens.values()):
            deadline = self.coordinator.next_deadline()
            assert deadline is not None
            self.advance_to(deadline)
        answers = {c: self.answer(t) for c, t in tokens.items()}
        assert all(a.error_code == 0 for a in answers.values()), answers
        generation = next(iter(answers.values())).generation_id
        leader = next(a for a in answers.values() if a.members)
        ids = {c: a.member_id for c, a in answers.items()}
        syncs = {c: self.sync(ids[c], generation, group=group, instance=instances.get(c))
                 for c in clients if ids[c] != leader.member_id}
        leader_client = next(c for c in clients if ids[c] == leader.member_id)
        syncs[leader_client] = self.sync(
            leader.member_id, generation,
            {m.member_id: f"assignment-of-{m.member_id}".encode() for m in leader.members},
            group=group, instance=instances.get(leader_client),
        )
        assert all(self.answer(t).error_code == 0 for t in syncs.values())
        return ids, generation
