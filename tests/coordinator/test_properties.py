"""Random lives of consumer groups, checking what must always hold: every request is
answered exactly once (or is visibly parked), generations only grow, a Stable group's
members all have their assignment, the timers that must exist do, and replaying the
records written so far rebuilds the state at rest.

Clients behave like Kafka's: alive ones heartbeat every 3 s, sync after a JoinGroup
answer, rejoin when told to. The random part is what happens to them: they start, crash
(no LeaveGroup), leave, restart (static ones with a new member id), change protocols,
send stale requests; admins commit, delete offsets and groups; time passes."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from odradek.coordinator import GroupState
from odradek.coordinator.results import (
    HeartbeatResult,
    JoinMember,
    JoinResult,
    SyncResult,
)

from .harness import Harness, subscription
from .replay import assert_replay_matches

CLIENTS = ["a", "b", "c", "s"]  # "s" is a static member (group.instance.id "is")
GROUPS = ["g", "h"]
PROTOCOLS = [
    [("range", subscription("t"))],
    [("range", subscription("t", "u")), ("roundrobin", subscription("t"))],
    [("roundrobin", subscription("t")), ("range", subscription("t"))],
]
HEARTBEAT_MS = 3000
# Short timeouts, so that a few random steps see sessions end and rebalances time out.
SESSION_MS = 10_000
REBALANCE_MS = 15_000


@dataclass
class Client:
    alive: bool = False
    member_id: str = ""
    generation: int = -1
    members: list[JoinMember] = field(default_factory=list)
    protocols: int = 0


client = st.sampled_from(CLIENTS)
group = st.sampled_from(["g", "g", "g", "h"])
partition = st.integers(0, 2)
protocols = st.integers(0, len(PROTOCOLS) - 1)
start = st.tuples(st.just("start"), client, group, protocols, st.booleans())
advance = st.tuples(st.just("advance"), st.integers(0, 40_000))
# Starts and the passing of time are what move groups along: they come up more often.
operation = st.one_of(
    start, start, start, advance, advance, advance, advance,
    st.tuples(st.just("crash"), client, group),
    st.tuples(st.just("leave"), client, group),
    st.tuples(st.just("rejoin"), client, group, protocols),
    st.tuples(st.just("stale-sync"), client, group),
    st.tuples(st.just("stale-heartbeat"), client, group),
    st.tuples(st.just("commit"), client, group, partition, st.integers(0, 1000)),
    st.tuples(st.just("admin-commit"), group, partition, st.integers(0, 1000)),
    st.tuples(st.just("delete-offsets"), group, partition),
    st.tuples(st.just("delete-group"), group),
    st.tuples(st.just("expire")),
)


class Life:
    def __init__(self) -> None:
        self.h = Harness(
            offsets_retention_ms=120_000, offsets_retention_check_interval_ms=90_000,
            max_group_size=3,
        )
        self.clients = {(c, g): Client() for c in CLIENTS for g in GROUPS}
        self.issued: dict[str, tuple[str, str]] = {}  # token -> (client, group)
        self.seen: set[str] = set()
        self.generations: dict[str, tuple[object, int]] = {}
        self.stable_seen = 0

    @staticmethod
    def instance(name: str) -> str | None:
        return "is" if name == "s" else None

    # --- requests --------------------------------------------------------------------

    def join(self, name: str, g: str, member_id: str, require_known: bool = True) -> None:
        me = self.clients[name, g]
        token = self.h.join(
            member_id, group=g, client=name, instance=self.instance(name),
            protocols=PROTOCOLS[me.protocols], require_known=require_known,
            session_ms=SESSION_MS, rebalance_ms=REBALANCE_MS,
        )
        self.issued[token] = (name, g)

    def sync(self, name: str, g: str) -> None:
        me = self.clients[name, g]
        # A leader assigns something to every member it was told about.
        assignment = {m.member_id: b"p-" + m.member_id.encode() for m in me.members}
        token = self.h.sync(me.member_id, me.generation, assignment, group=g,
                            instance=self.instance(name))
        self.issued[token] = (name, g)

    def heartbeat(self, name: str, g: str) -> None:
        me = self.clients[name, g]
        token = self.h.token("hb")
        self.h.apply(self.h.coordinator.heartbeat(
            g, me.member_id, me.generation, self.instance(name), token=token, now_ms=self.h.now,
        ))
        self.issued[token] = (name, g)

    def run(self, op: tuple) -> None:
        h, kind = self.h, op[0]
        if kind == "advance":
            remaining = op[1]
            while remaining > 0:
                step = min(HEARTBEAT_MS, remaining)
                h.advance(step)
                remaining -= step
                self.react()
                for (name, g), me in self.clients.items():
                    if me.alive and me.member_id and me.generation >= 0:
                        self.heartbeat(name, g)
                self.react()
                self.check()
            return
        if kind == "admin-commit":
            h.commit("", -1, [("t", op[2], op[3])], group=op[1])
        elif kind == "delete-offsets":
            h.delete_offsets([("t", op[2])], group=op[1])
        elif kind == "delete-group":
            h.delete_groups(op[1])
        elif kind == "expire":
            h.apply(h.coordinator.expire_offsets(h.now))
        else:
            name, g = op[1], op[2]
            me = self.clients[name, g]
            if kind == "start":
                me.alive, me.protocols = True, op[3]
                me.member_id, me.generation, me.members = "", -1, []
                self.join(name, g, "", require_known=op[4])
            elif kind == "crash":
                me.alive = False
            elif kind == "leave":
                h.leave((me.member_id, self.instance(name)), group=g)
                me.alive = False
            elif kind == "rejoin":
                me.protocols = op[3]
                self.join(name, g, me.member_id)
            elif kind == "stale-sync":
                self.sync(name, g)
            elif kind == "stale-heartbeat":
                self.heartbeat(name, g)
            else:
                h.commit(me.member_id, me.generation, [("t", op[3], op[4])], group=g,
                         instance=self.instance(name))
        self.react()
        self.check()

    def react(self) -> None:
        """Clients act on their answers, as Kafka clients do (a bounded number of rounds:
        a reaction may be answered at once and cause another)."""
        for _ in range(10):
            fresh = [t for t in self.issued if t not in self.seen and t in self.h.responses]
            if not fresh:
                return
            for token in fresh:
                self.seen.add(token)
                self.act_on(*self.issued[token], self.h.responses[token])

    def act_on(self, name: str, g: str, answer: object) -> None:
        me = self.clients[name, g]
        error = getattr(answer, "error_code", ErrorCode.none)
        if isinstance(answer, JoinResult):
            if error == ErrorCode.none:
                me.member_id, me.generation = answer.member_id, answer.generation_id
                me.members = answer.members
                if me.alive:
                    self.sync(name, g)
                return
            if error == ErrorCode.member_id_required:
                me.member_id = answer.member_id
                if me.alive:
                    self.join(name, g, me.member_id)
                return
        if error in (ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id):
            me.member_id, me.generation, me.members = "", -1, []
            if me.alive and not isinstance(answer, JoinResult):
                self.join(name, g, "")
        elif (
            error in (ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation)
            and isinstance(answer, SyncResult | HeartbeatResult)
            and me.alive
            and me.member_id
        ):
            self.join(name, g, me.member_id)

    # --- invariants ------------------------------------------------------------------

    def check(self) -> None:
        c = self.h.coordinator
        parked = set()
        for group_id, g in c.groups.items():
            known = self.generations.get(group_id)
            if known is not None and known[0] is g:
                assert g.generation_id >= known[1], "generation went back"
            self.generations[group_id] = (g, g.generation_id)
            if g.members:
                assert g.leader_id in g.members
            assert {m.group_instance_id: mid for mid, m in g.members.items()
                    if m.group_instance_id} == g.static_members
            assert len(g.members) <= 3 or not g.is_(GroupState.STABLE)
            if g.is_(GroupState.PREPARING_REBALANCE):
                assert g.join_deadline is not None, "a rebalance that can never end"
            if g.is_(GroupState.STABLE):
                self.stable_seen += 1
                assert all(m.assignment for m in g.members.values()), "member left unassigned"
            if g.is_(GroupState.EMPTY):
                assert not g.members
            if g.pending_sync and not g.is_(GroupState.PREPARING_REBALANCE):
                assert g.sync_deadline is not None
            for m in g.members.values():
                if m.join is None and m.sync is None:
                    assert m.heartbeat_deadline is not None, f"{m} can never expire"
                parked |= {w.token for w in (m.join, m.sync) if w is not None}
        outstanding = set(self.issued) - set(self.h.responses)
        assert outstanding == parked, "a request was lost, or answered while still parked"
        assert_replay_matches(c, self.h.records, self.h.now)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, min_size=10, max_size=60))
def test_random_group_lives_keep_the_coordinator_consistent(ops):
    life = Life()
    for op in ops:
        life.run(op)
    # Everyone goes away without a word: parked requests get answers, sessions end.
    for me in life.clients.values():
        me.alive = False
    for _ in range(4):
        life.run(("advance", 100_000))
    assert set(life.issued) <= set(life.h.responses)
    assert all(not g.members for g in life.h.coordinator.groups.values())
