"""KIP-848 consumer groups in the pure coordinator: joins, server-side assignment, the
revoke-before-assign reconciliation, fencing, sessions, leaving, static members, offsets
and how the two protocols share group ids."""

from __future__ import annotations

import random
import uuid

import pytest
from kio.schema.errors import ErrorCode

from odradek.coordinator.consumer_group import (
    TopicInfo,
    assign_range,
    assign_uniform,
)
from odradek.coordinator.results import (
    ConsumerHeartbeatResult,
    OffsetCommitRequestPartition,
)

from .harness import Harness, subscription

T = uuid.UUID(int=1)
U = uuid.UUID(int=2)
TOPICS = {"t": TopicInfo(T, 6), "u": TopicInfo(U, 3)}
SESSION_MS = 45_000


class Cluster(Harness):
    """The harness plus a view of each member as the client sees it: what it owns."""

    def __init__(self, **config) -> None:
        config.setdefault("consumer_session_timeout_ms", SESSION_MS)
        super().__init__(**config)
        self.topics = dict(TOPICS)
        self.owned: dict[str, dict[uuid.UUID, list[int]]] = {}
        self.epochs: dict[str, int] = {}

    def hb(self, member: str, epoch: int | None = None, *, group: str = "g",
           topics: list[str] | None = None, owned=..., **kw) -> ConsumerHeartbeatResult:
        if epoch is None:
            epoch = self.epochs.get(member, 0)
        if epoch == 0:
            kw.setdefault("rebalance_timeout_ms", 30_000)
            if topics is None and "subscribed_topic_regex" not in kw:
                topics = ["t"]
        if owned is ...:
            owned = [] if epoch == 0 else list(self.owned.get(member, {}).items())
        token = self.token("hb")
        self.apply(self.coordinator.consumer_heartbeat(
            group, member, epoch, subscribed_topic_names=topics, owned=owned,
            topics=self.topics, token=token, now_ms=self.now, **kw))
        result = self.answer(token)
        if result.error_code == ErrorCode.none and epoch >= 0:
            self.epochs[member] = result.member_epoch
            if result.assignment is not None:
                # The client gives up what is no longer assigned, takes what is new.
                self.owned[member] = {t: list(p) for t, p in result.assignment.items()}
        return result

    def owners(self) -> dict[tuple[uuid.UUID, int], list[str]]:
        out: dict[tuple[uuid.UUID, int], list[str]] = {}
        for member, owned in self.owned.items():
            for t, parts in owned.items():
                for p in parts:
                    out.setdefault((t, p), []).append(member)
        return out

    def settle(self, members: list[str], rounds: int = 6) -> None:
        for _ in range(rounds):
            for m in members:
                assert self.hb(m).error_code == ErrorCode.none
                self.assert_no_double_owner()

    def assert_no_double_owner(self) -> None:
        for key, holders in self.owners().items():
            assert len(holders) == 1, f"{key} owned by {holders}"


def parts(assignment: dict[uuid.UUID, list[int]] | None, topic: uuid.UUID = T) -> set[int]:
    return set((assignment or {}).get(topic, ()))


def test_first_member_joins_with_epoch_zero_and_gets_every_partition() -> None:
    c = Cluster()
    result = c.hb("m1")
    assert result.error_code == ErrorCode.none
    assert result.member_id == "m1" and result.member_epoch == 1
    assert parts(result.assignment) == set(range(6))
    assert result.heartbeat_interval_ms == 5000
    group = c.coordinator.consumer_groups["g"]
    assert (group.group_epoch, group.assignment_epoch) == (1, 1)


def test_v0_join_without_member_id_is_given_one() -> None:
    c = Cluster()
    token = c.token("hb")
    c.apply(c.coordinator.consumer_heartbeat(
        "g", "", 0, rebalance_timeout_ms=1000, subscribed_topic_names=["t"], owned=[],
        member_id_from_client=False, topics=TOPICS, token=token, now_ms=c.now))
    assert c.answer(token).error_code == ErrorCode.none
    assert c.answer(token).member_id == "u1"


def test_v1_join_without_member_id_is_invalid() -> None:
    c = Cluster()
    assert c.hb("").error_code == ErrorCode.invalid_request


def test_second_member_gets_partitions_only_after_the_first_revokes_them() -> None:
    c = Cluster()
    c.hb("m1")
    joined = c.hb("m2")
    # Everything is still m1's: m2 is at the new epoch with nothing yet.
    assert joined.member_epoch == 2 and parts(joined.assignment) == set()
    # m2 heartbeats again: still nothing, m1 has not revoked.
    assert parts(c.hb("m2").assignment) == set()
    # m1 learns what to give up; it stays at its epoch until it has.
    revoke = c.hb("m1")
    assert revoke.member_epoch == 1
    kept = parts(revoke.assignment)
    assert len(kept) == 3
    c.assert_no_double_owner()
    # m1 reports it no longer owns them: it moves to epoch 2.
    assert c.hb("m1").member_epoch == 2
    # Now m2 receives the released three.
    got = c.hb("m2")
    assert parts(got.assignment) == set(range(6)) - kept
    c.assert_no_double_owner()


def test_a_member_that_does_not_say_what_it_owns_is_assumed_to_still_own_it() -> None:
    c = Cluster()
    c.hb("m1")
    c.hb("m2")
    c.hb("m1")  # told to revoke
    # Heartbeats without owned partitions (None: unchanged) do not release anything.
    assert c.hb("m1", owned=None).member_epoch == 1
    assert parts(c.hb("m2").assignment) == set()


@pytest.mark.parametrize("seed", range(20))
def test_random_joins_and_leaves_never_give_a_partition_two_owners(seed: int) -> None:
    rng = random.Random(seed)
    c = Cluster()
    alive: list[str] = []
    for step in range(60):
        action = rng.random()
        if action < 0.2 and len(alive) < 5:
            name = f"m{step}"
            alive.append(name)
            c.hb(name, 0)
        elif action < 0.3 and len(alive) > 1:
            name = alive.pop(rng.randrange(len(alive)))
            c.hb(name, -1)
            c.owned.pop(name, None)
        elif alive:
            c.hb(rng.choice(alive))
        c.assert_no_double_owner()
    c.settle(alive)
    # Converged: every partition owned once, sizes within one.
    owners = c.owners()
    assert sorted(owners) == sorted((T, p) for p in range(6))
    sizes = [len(parts(c.owned.get(m))) for m in alive]
    assert max(sizes) - min(sizes) <= 1
    group = c.coordinator.consumer_groups["g"]
    assert group.state.value == "Stable"
    assert all(m.member_epoch == group.group_epoch for m in group.members.values())


def test_three_members_over_six_partitions_get_two_each() -> None:
    c = Cluster()
    for m in ("a", "b", "c"):
        c.hb(m)
    c.settle(["a", "b", "c"])
    assert sorted(len(parts(c.owned[m])) for m in "abc") == [2, 2, 2]


def test_silent_member_is_removed_after_the_session_timeout_and_its_partitions_move() -> None:
    c = Cluster()
    c.hb("a")
    c.hb("b")
    c.settle(["a", "b"])
    b_parts = parts(c.owned["b"])
    for _ in range(10):  # a keeps heartbeating, b is silent
        c.now += SESSION_MS // 10 + 1
        c.apply(c.coordinator.tick(c.now))
        c.hb("a")
    assert "b" not in c.coordinator.consumer_groups["g"].members
    assert parts(c.owned["a"]) == set(range(6))
    assert b_parts
    assert c.hb("b").error_code == ErrorCode.unknown_member_id


def test_member_that_does_not_revoke_within_its_rebalance_timeout_is_removed() -> None:
    c = Cluster()
    c.hb("a", 0, rebalance_timeout_ms=1000)
    c.hb("b")
    c.hb("a", owned=None)  # told to revoke, never confirms
    c.advance(1001)
    assert "a" not in c.coordinator.consumer_groups["g"].members
    assert parts(c.hb("b").assignment) == set(range(6))


def test_leaving_with_epoch_minus_one_frees_the_partitions_at_once() -> None:
    c = Cluster()
    c.hb("a")
    c.hb("b")
    c.settle(["a", "b"])
    left = c.hb("a", -1)
    assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)
    assert parts(c.hb("b").assignment) == set(range(6))


def test_epochs_from_the_future_are_fenced_and_stale_ones_too() -> None:
    c = Cluster()
    c.hb("a")
    assert c.hb("a", 5).error_code == ErrorCode.fenced_member_epoch
    c.hb("b")
    c.settle(["a", "b"])
    # The previous epoch, claiming partitions it no longer has: not a lost response.
    assert c.hb("a", 1, owned=[(T, list(range(6)))]).error_code == ErrorCode.fenced_member_epoch


def test_previous_epoch_with_a_subset_of_the_assignment_is_a_lost_response() -> None:
    c = Cluster()
    c.hb("a")
    c.hb("b")
    c.settle(["a", "b"])
    member = c.coordinator.consumer_groups["g"].members["a"]
    previous = member.previous_member_epoch
    assert c.hb("a", previous).error_code == ErrorCode.none


def test_rejoin_with_epoch_zero_after_fencing_gets_partitions_again() -> None:
    c = Cluster()
    c.hb("a")
    assert c.hb("a", 7).error_code == ErrorCode.fenced_member_epoch
    c.owned.pop("a")
    result = c.hb("a", 0)
    assert result.error_code == ErrorCode.none and parts(result.assignment) == set(range(6))


def test_unknown_assignor_is_refused_and_range_can_be_chosen() -> None:
    c = Cluster()
    assert c.hb("a", 0, server_assignor="sticky").error_code == ErrorCode.unsupported_assignor
    c.hb("a", 0, server_assignor="range")
    c.hb("b", 0, server_assignor="range")
    c.settle(["a", "b"])
    assert parts(c.owned["a"]) == {0, 1, 2} and parts(c.owned["b"]) == {3, 4, 5}
    assert c.coordinator.consumer_groups["g"].assignor_name == "range"


def test_regex_subscription_picks_up_matching_topics() -> None:
    c = Cluster()
    result = c.hb("a", 0, subscribed_topic_regex="t|u")
    assert parts(result.assignment, T) == set(range(6))
    assert parts(result.assignment, U) == {0, 1, 2}


def test_new_partitions_trigger_a_new_target_assignment() -> None:
    c = Cluster()
    c.hb("a")
    c.topics["t"] = TopicInfo(T, 8)
    assert parts(c.hb("a").assignment) == set(range(8))
    c.topics["t"] = TopicInfo(T, 10)
    c.apply(c.coordinator.consumer_topics_changed(c.topics, c.now))
    assert c.coordinator.consumer_groups["g"].target["a"][T] == set(range(10))


def test_static_member_leaving_with_minus_two_gets_its_partitions_back_under_a_new_id() -> None:
    c = Cluster()
    c.hb("a1", 0, instance_id="A")
    c.hb("b", 0, instance_id="B")
    c.settle(["a1", "b"])
    a_parts = parts(c.owned["a1"])
    left = c.hb("a1", -2, instance_id="A")
    assert (left.error_code, left.member_epoch) == (ErrorCode.none, -2)
    # While it is away nobody takes its partitions, and no new epoch starts.
    epoch = c.coordinator.consumer_groups["g"].group_epoch
    c.hb("b")
    assert c.coordinator.consumer_groups["g"].group_epoch == epoch
    back = c.hb("a2", 0, instance_id="A")
    assert back.error_code == ErrorCode.none and parts(back.assignment) == a_parts
    group = c.coordinator.consumer_groups["g"]
    assert group.target["a2"] == {T: a_parts} and "a1" not in group.target
    assert group.group_epoch == epoch
    assert c.hb("a1", instance_id="A").error_code in (ErrorCode.unknown_member_id,)


def test_second_instance_with_a_live_static_id_is_refused() -> None:
    c = Cluster()
    c.hb("a1", 0, instance_id="A")
    assert c.hb("a2", 0, instance_id="A").error_code == ErrorCode.unreleased_instance_id


def test_offset_commits_need_the_current_member_epoch() -> None:
    c = Cluster()
    c.hb("a")

    def commit(member: str, epoch: int) -> int:
        token = c.token("commit")
        c.apply(c.coordinator.commit_offsets(
            "g", member, epoch, None, [OffsetCommitRequestPartition("t", 0, 42)],
            token=token, now_ms=c.now))
        return c.answer(token).partitions[0].error_code

    assert commit("a", 1) == ErrorCode.none
    assert commit("a", 0) == ErrorCode.stale_member_epoch
    assert commit("a", 2) == ErrorCode.stale_member_epoch  # a newer epoch too, as Kafka 4.4
    assert commit("x", 1) == ErrorCode.unknown_member_id
    assert commit("", -1) == ErrorCode.unknown_member_id  # tools may commit only to an empty group
    fetched = c.coordinator.fetch_offsets("g", [("t", 0)], member_id="a", member_epoch=1)
    assert fetched.partitions[0].offset == 42
    assert c.coordinator.fetch_offsets("g", [("t", 0)], member_id="a",
                                       member_epoch=0).error_code == ErrorCode.stale_member_epoch
    c.hb("a", -1)
    assert commit("", -1) == ErrorCode.none


def test_protocols_do_not_share_a_live_group() -> None:
    c = Cluster()
    c.hb("a")
    token = c.token("join")
    c.apply(c.coordinator.join(
        "g", "", None, "client", "/h", 10_000, 10_000, "consumer",
        [("range", subscription("t"))], require_known_member_id=True, token=token,
        now_ms=c.now))
    assert c.answer(token).error_code == ErrorCode.group_id_not_found
    # And a live classic group refuses KIP-848 members.
    token = c.token("join")
    c.apply(c.coordinator.join(
        "classic", "", None, "client", "/h", 10_000, 10_000, "consumer",
        [("range", subscription("t"))], require_known_member_id=False, token=token,
        now_ms=c.now))
    assert c.hb("x", 0, group="classic").error_code == ErrorCode.group_id_not_found
    kinds = {(o.group_id, o.group_type) for o in c.coordinator.list_groups()}
    assert kinds == {("g", "consumer"), ("classic", "classic")}
    assert c.coordinator.describe_groups(["g"], not_found_error=True)[0].error_code == (
        ErrorCode.group_id_not_found)


def test_offsets_of_a_classic_group_carry_over_when_it_becomes_a_consumer_group() -> None:
    c = Cluster()
    token = c.token("commit")
    c.apply(c.coordinator.commit_offsets(
        "g", "", -1, None, [OffsetCommitRequestPartition("t", 3, 7)], token=token,
        now_ms=c.now))
    c.hb("a")
    assert "g" not in c.coordinator.groups
    assert c.coordinator.fetch_offsets("g", [("t", 3)]).partitions[0].offset == 7


def test_delete_a_consumer_group_only_when_empty() -> None:
    c = Cluster()
    c.hb("a")
    token = c.token("delete")
    c.apply(c.coordinator.delete_groups(["g"], token=token, now_ms=c.now))
    assert c.answer(token).groups[0].error_code == ErrorCode.non_empty_group
    c.hb("a", -1)
    token = c.token("delete")
    c.apply(c.coordinator.delete_groups(["g"], token=token, now_ms=c.now))
    assert c.answer(token).groups[0].error_code == ErrorCode.none
    assert "g" not in c.coordinator.consumer_groups


def test_describe_names_topics_and_epochs() -> None:
    c = Cluster()
    c.hb("a")
    (d,) = c.coordinator.consumer_group_describe(["g"])
    assert (d.error_code, d.state, d.group_epoch, d.assignment_epoch) == (
        ErrorCode.none, "Stable", 1, 1)
    (m,) = d.members
    assert m.assignment[0].topic_name == "t" and m.assignment[0].partitions == list(range(6))
    assert c.coordinator.consumer_group_describe(["nope"])[0].error_code == \
        ErrorCode.group_id_not_found


def test_uniform_assignor_is_sticky_and_balanced() -> None:
    topics = {"t": TopicInfo(T, 7)}
    first = assign_uniform({"a": {"t"}, "b": {"t"}}, topics, {})
    second = assign_uniform({"a": {"t"}, "b": {"t"}, "c": {"t"}}, topics, first)
    assert sorted(len(second[m][T]) for m in "abc") == [2, 2, 3]
    for m in "ab":
        assert second[m][T] <= first[m][T]  # nothing moved between a and b


def test_range_assignor_gives_consecutive_ranges() -> None:
    topics = {"t": TopicInfo(T, 5)}
    result = assign_range({"a": {"t"}, "b": {"t"}}, topics, {})
    assert result["a"][T] == {0, 1, 2} and result["b"][T] == {3, 4}


# --- persistence: Kafka's KIP-848 records in __consumer_offsets ---------------------------


def consumer_view(coordinator) -> dict:
    """What of a KIP-848 group the log must reproduce."""
    view = {}
    for gid, g in coordinator.consumer_groups.items():
        view[gid] = (
            g.group_epoch, g.assignment_epoch,
            {mid: (m.instance_id, m.client_id, m.subscribed_topic_names,
                   m.subscribed_topic_regex, m.rebalance_timeout_ms, m.server_assignor,
                   m.member_epoch, m.previous_member_epoch, m.state, m.assigned,
                   m.pending_revocation)
             for mid, m in g.members.items()},
            g.target, {k: o.offset for k, o in g.offsets.items()},
        )
    return view


def test_replay_rebuilds_members_epochs_and_assignments() -> None:
    from .replay import replay

    c = Cluster()
    for m in ("a", "b", "c"):
        c.hb(m, 0, instance_id="I" + m if m == "c" else None, server_assignor="uniform")
    c.hb("a")  # a is told to revoke: mid-reconciliation state is persisted too
    token = c.token("commit")
    c.apply(c.coordinator.commit_offsets(
        "g", "a", c.epochs["a"], None, [OffsetCommitRequestPartition("t", 1, 9)],
        token=token, now_ms=c.now))
    c.hb("c", -2, instance_id="Ic")
    restarted = replay(c.records, c.now, consumer_session_timeout_ms=SESSION_MS)
    assert consumer_view(restarted) == consumer_view(c.coordinator)
    # The members carry on where they were, without rejoining.
    c.coordinator = restarted
    c.settle(["a", "b"])
    c.assert_no_double_owner()
    # And the static member comes back to its partitions.
    assert c.hb("c2", 0, instance_id="Ic").error_code == ErrorCode.none


@pytest.mark.parametrize("seed", range(10))
def test_random_lives_replay_to_the_live_state(seed: int) -> None:
    from .replay import replay

    rng = random.Random(seed)
    c = Cluster()
    alive: list[str] = []
    for step in range(50):
        roll = rng.random()
        if roll < 0.2 and len(alive) < 4:
            alive.append(f"m{step}")
            c.hb(alive[-1], 0, topics=rng.choice([["t"], ["t", "u"]]))
        elif roll < 0.3 and alive:
            c.hb(alive.pop(rng.randrange(len(alive))), -1)
        elif roll < 0.35:
            c.advance(SESSION_MS + 1)  # everyone's session ends
            alive = []
        elif alive:
            c.hb(rng.choice(alive))
        restarted = replay(c.records, c.now, consumer_session_timeout_ms=SESSION_MS)
        assert consumer_view(restarted) == consumer_view(c.coordinator), step


def test_a_deleted_group_stays_deleted_after_replay() -> None:
    from .replay import replay

    c = Cluster()
    c.hb("a")
    c.hb("a", -1)
    token = c.token("delete")
    c.apply(c.coordinator.delete_groups(["g"], token=token, now_ms=c.now))
    restarted = replay(c.records, c.now)
    assert not restarted.consumer_groups and not restarted.groups


def test_kip848_value_layouts() -> None:
    from odradek.coordinator import consumer_records as cr
    from odradek.coordinator import offsets_topic as ot

    # Keys: int16 version, then classic strings.
    assert ot.encode_consumer_group_key(8, "g", "m") == b"\x00\x08\x00\x01g\x00\x01m"
    assert ot.decode_key(b"\x00\x05\x00\x01g\x00\x01m") == ot.ConsumerGroupRecordKey(5, "g", "m")
    # Values: version 0, flexible: compact lengths, tagged fields after each struct.
    assert cr.encode_group_metadata(7) == b"\x00\x00\x00\x00\x00\x07\x00"
    assert cr.encode_target_assignment_member({T: {1, 0}}) == (
        b"\x00\x00" + b"\x02" + T.bytes + b"\x03" + b"\x00\x00\x00\x00\x00\x00\x00\x01"
        + b"\x00" + b"\x00")
    # Tagged fields Kafka 4.x writes (the metadata hash, tag 0) are skipped.
    assert cr.decode_group_metadata(b"\x00\x00\x00\x00\x00\x07\x01\x00\x08" + bytes(8)) == 7
    meta = cr.MemberMetadata("i", None, "client", "/h", ("t", "u"), None, 30000, "range")
    assert cr.decode_member_metadata(cr.encode_member_metadata(meta)) == meta
    current = cr.CurrentAssignment(3, 2, cr.STATE_UNREVOKED_PARTITIONS, {T: {0}}, {U: {1, 2}})
    assert cr.decode_current_assignment(cr.encode_current_assignment(current)) == current
