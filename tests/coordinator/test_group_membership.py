"""The life of a consumer group: members join, one leads and assigns, sessions end,
members leave, static members restart — all on an injected clock, so a 30 s session
timeout runs in microseconds."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from odradek.coordinator import GroupState
from odradek.coordinator import offsets_topic as ot
from odradek.coordinator.results import (
    MemberIdentity,
)

from .harness import REBALANCE_MS, Harness, subscription


def test_three_consumers_form_one_generation_after_the_initial_delay():
    h = Harness()
    start = h.now
    tokens = [h.join_new("c1")]
    h.advance(100)
    tokens.append(h.join_new("c2"))
    h.advance(100)
    tokens.append(h.join_new("c3"))
    assert h.group().state is GroupState.PREPARING_REBALANCE
    # group.initial.rebalance.delay.ms: nobody is answered in the first 3 s ...
    assert h.coordinator.next_deadline() == start + 3000
    h.advance_to(start + 2999)
    assert all(h.answer(t) is None for t in tokens)
    # ... and members kept arriving during it, so Kafka waits one more delay.
    h.advance_to(start + 3000)
    assert all(h.answer(t) is None for t in tokens)
    assert h.coordinator.next_deadline() == start + 6000
    h.advance_to(start + 6000)
    answers = [h.answer(t) for t in tokens]
    assert [a.error_code for a in answers] == [ErrorCode.none] * 3
    assert {a.generation_id for a in answers} == {1}
    assert {a.leader for a in answers} == {answers[0].member_id}
    assert {a.protocol_name for a in answers} == {"range"}
    assert [a.member_id for a in answers] == ["c1-u1", "c2-u2", "c3-u3"]
    leader, *followers = answers
    assert [m.member_id for m in leader.members] == [a.member_id for a in answers]
    assert all(m.metadata == subscription("t") for m in leader.members)
    assert all(f.members == [] for f in followers)
    assert h.group().state is GroupState.COMPLETING_REBALANCE

    # Followers that sync first wait for the leader's assignment.
    f1 = h.sync(followers[0].member_id, 1)
    f2 = h.sync(followers[1].member_id, 1)
    assert h.answer(f1) is None and h.answer(f2) is None
    records_before = len(h.records)
    assignment = {a.member_id: a.member_id.encode() + b"-parts" for a in answers}
    lead = h.sync(leader.member_id, 1, assignment)
    for token, answer in ((f1, followers[0]), (f2, followers[1]), (lead, leader)):
        result = h.answer(token)
        assert result.error_code == ErrorCode.none
        assert result.assignment == assignment[answer.member_id]
        assert result.protocol_name == "range"
    assert h.group().state is GroupState.STABLE

    # The assignment is persisted with the group, as Kafka stores it at SyncGroup.
    (record,) = h.records[records_before:]
    assert ot.decode_key(record.key) == ot.GroupMetadataKey("g")
    value = ot.decode_group_metadata_value(record.value)
    assert (value.generation, value.protocol, value.leader) == (1, "range", leader.member_id)
    assert [(m.member_id, m.assignment) for m in value.members] == list(assignment.items())


def test_without_kip394_a_first_join_is_admitted_at_once():
    h = Harness()
    token = h.join(client="old", require_known=False)
    h.advance(3000)
    answer = h.answer(token)
    assert answer.error_code == ErrorCode.none and answer.member_id == "old-u1"
    assert answer.leader == "old-u1"


def test_the_initial_delay_stops_growing_at_the_rebalance_timeout():
    h = Harness(initial_rebalance_delay_ms=3000)
    start = h.now
    tokens = [h.join_new("c0", rebalance_ms=7000)]
    for i in range(1, 7):
        h.advance(1000)
        tokens.append(h.join_new(f"c{i}", rebalance_ms=7000))
    # Delays of 3000, 3000, then the 1000 left of the 7000 ms rebalance timeout.
    h.advance_to(start + 6999)
    assert h.answer(tokens[0]) is None
    h.advance_to(start + 7000)
    assert all(h.answer(t).generation_id == 1 for t in tokens)


def test_a_member_whose_session_expires_is_removed_and_the_others_rebalance():
    h = Harness()
    ids, gen = h.stable_group("c1", "c2", "c3")
    assert h.group().generation_id == gen == 1
    # c1 and c2 heartbeat every 10 s; c3 has crashed.
    for _ in range(2):
        h.advance(10_000)
        assert h.heartbeat(ids["c1"], gen) == ErrorCode.none
        assert h.heartbeat(ids["c2"], gen) == ErrorCode.none
    assert h.group().state is GroupState.STABLE
    h.advance(10_000)  # 30 s since c3's last sign of life
    assert ids["c3"] not in h.group().members
    assert h.group().state is GroupState.PREPARING_REBALANCE
    # The survivors learn of the rebalance from their next heartbeat, and rejoin.
    assert h.heartbeat(ids["c1"], gen) == ErrorCode.rebalance_in_progress
    t1 = h.join(ids["c1"], client="c1")
    assert h.answer(t1) is None
    t2 = h.join(ids["c2"], client="c2")
    # Every remaining member rejoined: no need to wait for the rebalance timeout.
    a1, a2 = h.answer(t1), h.answer(t2)
    assert (a1.generation_id, a2.generation_id) == (2, 2)
    assert sorted(m.member_id for m in a1.members) == sorted([ids["c1"], ids["c2"]])
    # The old generation is over for everyone.
    assert h.heartbeat(ids["c1"], gen) == ErrorCode.illegal_generation
    assert h.heartbeat(ids["c3"], 2) == ErrorCode.unknown_member_id


def test_a_member_that_does_not_rejoin_in_time_is_dropped_from_the_next_generation():
    h = Harness()
    ids, gen = h.stable_group("c1", "c2")
    # The leader rejoining forces a rebalance (how it reacts to metadata changes).
    t1 = h.join(ids["c1"], client="c1")
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert h.answer(t1) is None
    # c2 keeps heartbeating but never rejoins: the rebalance timeout decides.
    for _ in range(5):
        h.advance(10_000)
        assert h.heartbeat(ids["c2"], gen) == ErrorCode.rebalance_in_progress
    h.advance(REBALANCE_MS - 50_000)
    answer = h.answer(t1)
    assert answer.generation_id == gen + 1
    assert [m.member_id for m in answer.members] == [ids["c1"]]
    assert h.heartbeat(ids["c2"], gen) == ErrorCode.unknown_member_id


def test_cooperative_rebalances_keep_members_that_rejoin():
    # librdkafka's cooperative-sticky rejoins right after its first sync to revoke, and
    # its members keep their member ids across generations.
    h = Harness()
    protocols = [("cooperative-sticky", subscription("t")), ("range", subscription("t"))]
    tokens = [h.join_new(c, protocols=protocols) for c in ("a", "b")]
    h.advance(6000)
    answers = [h.answer(t) for t in tokens]
    assert {a.protocol_name for a in answers} == {"cooperative-sticky"}
    ids = [a.member_id for a in answers]
    h.sync(ids[1], 1)
    h.sync(ids[0], 1, {ids[0]: b"p0,p1", ids[1]: b"p2"})
    # A new member arrives: every known member must rejoin.
    newcomer = h.join_new("c", protocols=protocols)
    rejoin = [h.join(m, client=c, protocols=protocols) for m, c in zip(ids, "ab", strict=True)]
    answers = [h.answer(t) for t in [*rejoin, newcomer]]
    assert all(a is not None and a.generation_id == 2 for a in answers)
    assert [a.member_id for a in answers[:2]] == ids


def test_leaving_triggers_a_rebalance_and_the_last_one_out_empties_the_group():
    h = Harness()
    ids, gen = h.stable_group("c1", "c2")
    result = h.leave((ids["c2"], None))
    assert result.error_code == ErrorCode.none
    assert result.members[0].error_code == ErrorCode.none
    assert h.group().state is GroupState.PREPARING_REBALANCE
    t1 = h.join(ids["c1"], client="c1")
    assert h.answer(t1).generation_id == gen + 1
    h.sync(ids["c1"], gen + 1, {ids["c1"]: b"all"})
    records = len(h.records)
    h.leave((ids["c1"], None))
    group = h.group()
    assert group.state is GroupState.EMPTY
    assert group.generation_id == gen + 2
    value = ot.decode_group_metadata_value(h.records[records].value)
    assert (value.generation, value.protocol, value.leader, value.members) == (
        gen + 2, None, None, [],
    )
    assert value.current_state_timestamp == h.now
    # A member that is gone cannot leave twice.
    assert h.leave((ids["c1"], None)).members[0].error_code == ErrorCode.unknown_member_id


def test_a_member_leaving_during_a_rebalance_gets_its_parked_join_answered():
    h = Harness()
    ids, gen = h.stable_group("c1", "c2")
    t1 = h.join(ids["c1"], client="c1")
    assert h.answer(t1) is None
    h.leave((ids["c2"], None))  # the last member the rebalance waited for
    assert h.answer(t1).generation_id == gen + 1


def test_leave_by_group_instance_id_removes_a_static_member():
    h = Harness()
    ids, _ = h.stable_group("a", "b", instances={"a": "ia", "b": "ib"})
    result = h.leave(MemberIdentity("", "ib"), MemberIdentity("", "nobody"))
    assert [m.error_code for m in result.members] == [ErrorCode.none, ErrorCode.unknown_member_id]
    assert ids["b"] not in h.group().members
    # Naming a static member with the wrong member id is fenced.
    result = h.leave((ids["b"], "ia"))
    assert result.members[0].error_code == ErrorCode.fenced_instance_id


def test_a_static_member_restart_fences_the_old_id_and_keeps_the_generation():
    h = Harness()
    ids, gen = h.stable_group("a", "b", instances={"a": "ia", "b": "ib"})
    assert ids["b"] == "ib-u2"
    records = len(h.records)
    # b's process restarts: it knows its group.instance.id but not its member id.
    token = h.join(instance="ib", client="b")
    answer = h.answer(token)
    assert answer.error_code == ErrorCode.none
    assert answer.generation_id == gen  # no rebalance
    assert answer.member_id not in ids.values()
    assert answer.leader == ids["a"] and answer.members == []
    assert h.group().state is GroupState.STABLE
    # The new id is persisted, so even a coordinator restart keeps the old one fenced.
    value = ot.decode_group_metadata_value(h.records[records].value)
    assert [m.member_id for m in value.members] == [ids["a"], answer.member_id]
    assert value.members[1].assignment == b"assignment-of-" + ids["b"].encode()
    # The old incarnation is fenced; the new one syncs and gets the old assignment.
    assert h.heartbeat(ids["b"], gen, instance="ib") == ErrorCode.fenced_instance_id
    sync = h.answer(h.sync(answer.member_id, gen, instance="ib"))
    assert sync.assignment == b"assignment-of-" + ids["b"].encode()
    assert h.heartbeat(answer.member_id, gen, instance="ib") == ErrorCode.none


def test_a_restarted_static_leader_is_told_to_skip_the_assignment():
    h = Harness()
    ids, gen = h.stable_group("a", "b", instances={"a": "ia", "b": "ib"})
    # Before JoinGroup v9 the answer names the old leader id, so it does not assign.
    old = h.answer(h.join(instance="ia", client="a"))
    assert (old.leader, old.members, old.skip_assignment) == (ids["a"], [], False)
    # v9+ (KIP-814): it learns it leads, with the members, but must not reassign.
    new = h.answer(h.join(instance="ia", client="a", skip_assignment=True))
    assert new.leader == new.member_id
    assert new.skip_assignment is True
    assert [m.member_id for m in new.members] == [new.member_id, ids["b"]]
    assert h.group().generation_id == gen


def test_a_static_member_restarting_with_new_protocols_triggers_a_rebalance():
    range_first = [("range", subscription("t")), ("roundrobin", subscription("t"))]
    rr_first = [("roundrobin", subscription("t")), ("range", subscription("t"))]
    h = Harness()
    instances = {"a": "ia", "b": "ib", "c": "ic"}
    protocols = {"a": range_first, "b": rr_first, "c": range_first}
    ids, gen = h.stable_group("a", "b", "c", instances=instances, protocols=protocols)
    assert h.group().protocol_name == "range"  # two votes to one
    # Nothing in common with the others: refused, and the old incarnation stays.
    token = h.join(instance="ic", client="c", protocols=[("sticky", subscription("t"))])
    assert h.answer(token).error_code == 23  # INCONSISTENT_GROUP_PROTOCOL
    assert h.group().state is GroupState.STABLE
    # c comes back preferring roundrobin: the vote flips, so the group must rebalance.
    token = h.join(instance="ic", client="c", protocols=rr_first)
    assert h.answer(token) is None
    assert h.group().state is GroupState.PREPARING_REBALANCE
    tokens = [h.join(ids[c], instance=instances[c], client=c, protocols=protocols[c])
              for c in ("a", "b")]
    answers = [h.answer(t) for t in [*tokens, token]]
    assert {a.protocol_name for a in answers} == {"roundrobin"}
    assert {a.generation_id for a in answers} == {gen + 1}


def test_a_static_member_restarting_mid_rebalance_fences_its_parked_join():
    h = Harness()
    ids, gen = h.stable_group("a", "b", instances={"a": "ia", "b": "ib"})
    ta = h.join(ids["a"], instance="ia", client="a")  # leader asks for a rebalance
    tb = h.join(ids["b"], instance="ib", client="b")
    assert h.answer(ta).generation_id == gen + 1
    # b's JoinGroup answer was lost and b restarted; the sync of the old id is fenced.
    t_new = h.join(instance="ib", client="b")
    assert h.group().state is GroupState.PREPARING_REBALANCE  # restarted mid-assignment
    assert h.answer(h.sync(h.answer(tb).member_id, gen + 1, instance="ib")).error_code in (
        ErrorCode.fenced_instance_id,
    )
    ta2 = h.join(ids["a"], instance="ia", client="a")
    assert h.answer(t_new).generation_id == gen + 2
    assert h.answer(ta2).generation_id == gen + 2


def test_static_members_that_miss_a_rebalance_stay_in_the_group():
    h = Harness()
    # Static members usually run with long sessions, to ride out a restart.
    ids, gen = h.stable_group("a", "b", instances={"a": "ia", "b": "ib"}, session_ms=120_000)
    ta = h.join(ids["a"], instance="ia", client="a", session_ms=120_000)
    # b is restarting (a static member's point): it does not rejoin in time.
    h.advance(REBALANCE_MS)
    answer = h.answer(ta)
    assert answer.generation_id == gen + 1
    assert sorted(m.member_id for m in answer.members) == sorted(ids.values())
    h.sync(ids["a"], gen + 1, {ids["a"]: b"1", ids["b"]: b"2"})
    # ... it comes back with a new member id and takes its place without a rebalance.
    back = h.answer(h.join(instance="ib", client="b", session_ms=120_000))
    assert back.generation_id == gen + 1
    assert h.answer(h.sync(back.member_id, gen + 1, instance="ib")).assignment == b"2"


def test_a_pending_member_that_never_returns_stops_holding_the_rebalance():
    h = Harness()
    ids, gen = h.stable_group("c1")
    first = h.answer(h.join(client="c2", session_ms=10_000))
    assert first.error_code == 79
    assert h.group().state is GroupState.STABLE  # a pending member is not a member yet
    t1 = h.join(ids["c1"], client="c1")
    assert h.answer(t1) is None  # waiting for the pending member
    h.advance(10_000)
    assert h.answer(t1).generation_id == gen + 1
    # Its id is no longer good.
    assert h.answer(h.join(first.member_id, client="c2")).error_code == ErrorCode.unknown_member_id


def test_a_follower_that_never_syncs_is_removed_after_the_rebalance_timeout():
    h = Harness()
    tokens = [h.join_new(c) for c in ("c1", "c2")]
    h.advance(6000)
    leader, follower = (h.answer(t) for t in tokens)
    h.sync(leader.member_id, 1, {leader.member_id: b"x", follower.member_id: b"y"})
    assert h.group().state is GroupState.STABLE
    # c2 got its JoinGroup answer but died before syncing; the leader stays healthy.
    for _ in range(6):
        h.advance(REBALANCE_MS // 6)
        h.heartbeat(leader.member_id, 1)
    assert follower.member_id not in h.group().members
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(leader.member_id, 1) == ErrorCode.rebalance_in_progress


def test_a_rejoin_while_completing_with_the_same_metadata_gets_the_same_answer():
    h = Harness()
    tokens = [h.join_new(c) for c in ("c1", "c2")]
    h.advance(6000)
    leader, follower = (h.answer(t) for t in tokens)
    again = h.answer(h.join(follower.member_id, client="c2"))
    assert (again.generation_id, again.leader, again.members) == (1, leader.member_id, [])
    again = h.answer(h.join(leader.member_id, client="c1"))
    assert len(again.members) == 2
    assert h.group().state is GroupState.COMPLETING_REBALANCE
    # Different metadata, though, means a new rebalance; waiting syncs are told so.
    parked = h.sync(follower.member_id, 1)
    h.join(follower.member_id, client="c2", protocols=[("range", subscription("t", "u"))])
    assert h.answer(parked).error_code == ErrorCode.rebalance_in_progress
    assert h.group().state is GroupState.PREPARING_REBALANCE


def test_a_stable_follower_rejoining_unchanged_keeps_the_generation():
    h = Harness()
    ids, gen = h.stable_group("c1", "c2")
    answer = h.answer(h.join(ids["c2"], client="c2"))
    assert (answer.generation_id, answer.members) == (gen, [])
    assert h.group().state is GroupState.STABLE


def test_a_new_member_that_goes_away_cannot_hold_a_long_rebalance():
    h = Harness()
    ten_minutes = 600_000
    t1 = h.join(client="c1", rebalance_ms=ten_minutes, require_known=False)
    h.advance(3000)
    c1 = h.answer(t1).member_id
    h.sync(c1, 1, {c1: b"all"})
    # An old client joins without KIP-394 and its connection dies; c1 stays alive but
    # is slow to rejoin.
    t2 = h.join(client="c2", require_known=False)
    for _ in range(30):
        h.advance(10_000)
        h.heartbeat(c1, 1)
    # After the new-member join timeout (5 min) the newcomer is dropped, well before
    # the 10-minute rebalance timeout.
    assert h.answer(t2).error_code == ErrorCode.unknown_member_id
    assert len(h.group().members) == 1
    t1 = h.join(c1, client="c1", rebalance_ms=ten_minutes)
    assert h.answer(t1).generation_id == 2


def test_a_superseded_parked_request_is_answered_so_no_token_waits_forever():
    h = Harness()
    ids, gen = h.stable_group("c1", "c2")
    first = h.join(ids["c1"], client="c1")
    retry = h.join(ids["c1"], client="c1")
    assert h.answer(first).error_code == ErrorCode.rebalance_in_progress
    assert h.answer(retry) is None
    h.join(ids["c2"], client="c2")
    assert h.answer(retry).generation_id == gen + 1
