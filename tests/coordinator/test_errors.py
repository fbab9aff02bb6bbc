"""Each way a group request can be refused, with the error code Kafka clients expect
(they act on the code: rejoin, reset the member id, give up)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from odradek.coordinator import GroupState

from .harness import Harness, subscription

# --- JoinGroup -----------------------------------------------------------------------


def test_join_needs_a_group_id():
    h = Harness()
    assert h.answer(h.join(group="")).error_code == ErrorCode.invalid_group_id


@pytest.mark.parametrize(("session_ms", "error"), [
    (5999, ErrorCode.invalid_session_timeout), (6000, ErrorCode.member_id_required),
    (1_800_000, ErrorCode.member_id_required), (1_800_001, ErrorCode.invalid_session_timeout),
])
def test_session_timeout_must_be_within_the_brokers_bounds(session_ms, error):
    h = Harness()
    assert h.answer(h.join(session_ms=session_ms)).error_code == error


def test_session_timeout_bounds_are_configurable():
    h = Harness(min_session_timeout_ms=100, max_session_timeout_ms=200)
    assert h.answer(h.join(session_ms=300)).error_code == ErrorCode.invalid_session_timeout
    assert h.answer(h.join(session_ms=150)).error_code == ErrorCode.member_id_required


def test_a_member_id_the_coordinator_never_gave_is_unknown():
    h = Harness()
    answer = h.answer(h.join("made-up"))
    assert (answer.error_code, answer.member_id) == (ErrorCode.unknown_member_id, "made-up")
    assert "g" not in h.coordinator.groups  # no group is created for it
    h.stable_group("c1")
    assert h.answer(h.join("made-up")).error_code == ErrorCode.unknown_member_id


def test_a_member_must_share_the_groups_protocol_type():
    h = Harness()
    h.stable_group("c1")
    answer = h.answer(h.join(protocol_type="connect"))
    assert (answer.error_code, answer.member_id) == (ErrorCode.inconsistent_group_protocol, "")


def test_a_member_must_support_a_protocol_every_member_supports():
    h = Harness()
    h.stable_group("c1")
    token = h.join(protocols=[("roundrobin", subscription("t"))])
    assert h.answer(token).error_code == ErrorCode.inconsistent_group_protocol


def test_the_first_member_must_offer_a_protocol_type_and_a_protocol():
    h = Harness()
    assert h.answer(h.join(protocols=[])).error_code == ErrorCode.inconsistent_group_protocol
    assert h.answer(h.join(protocol_type="")).error_code == ErrorCode.inconsistent_group_protocol


def test_group_max_size_turns_away_new_members():
    h = Harness(max_group_size=2)
    ids, _gen = h.stable_group("c1", "c2")
    answer = h.answer(h.join(client="c3"))
    assert (answer.error_code, answer.member_id) == (ErrorCode.group_max_size_reached, "")
    # Members already in are welcome to rejoin.
    assert h.answer(h.join(ids["c2"], client="c2")).error_code == ErrorCode.none


def test_group_max_size_counts_members_awaiting_join_during_a_rebalance():
    h = Harness(max_group_size=2)
    ids, _gen = h.stable_group("c1", "c2")
    h.join(ids["c1"], client="c1")  # a rebalance begins; c1 waits
    newcomer = h.join_new("c3")  # the second awaiting member: accepted
    assert h.answer(newcomer) is None
    late = h.answer(h.join(ids["c2"], client="c2"))  # a third awaiting one is not
    assert late.error_code == ErrorCode.group_max_size_reached
    assert ids["c2"] not in h.group().members


# --- SyncGroup -----------------------------------------------------------------------


def test_sync_errors():
    h = Harness()
    ids, gen = h.stable_group("c1", "c2")
    c1 = ids["c1"]
    assert h.answer(h.sync(c1, gen, group="")).error_code == ErrorCode.invalid_group_id
    assert h.answer(h.sync(c1, gen, group="other")).error_code == ErrorCode.unknown_member_id
    assert h.answer(h.sync("stranger", gen)).error_code == ErrorCode.unknown_member_id
    assert h.answer(h.sync(c1, gen + 1)).error_code == ErrorCode.illegal_generation
    # SyncGroup v5 names the protocol it thinks the group uses.
    bad_type = h.sync(c1, gen, protocol_type="connect")
    assert h.answer(bad_type).error_code == ErrorCode.inconsistent_group_protocol
    bad_name = h.sync(c1, gen, protocol_type="consumer", protocol_name="roundrobin")
    assert h.answer(bad_name).error_code == ErrorCode.inconsistent_group_protocol
    good = h.answer(h.sync(c1, gen, protocol_type="consumer", protocol_name="range"))
    assert (good.error_code, good.protocol_type, good.protocol_name) == (
        ErrorCode.none, "consumer", "range")
    h.join(c1, client="c1")  # the leader starts a rebalance
    assert h.answer(h.sync(ids["c2"], gen)).error_code == ErrorCode.rebalance_in_progress


def test_a_sync_with_a_static_members_old_id_is_fenced():
    h = Harness()
    ids, gen = h.stable_group("a", instances={"a": "ia"})
    h.join(instance="ia", client="a")
    assert h.answer(h.sync(ids["a"], gen, instance="ia")).error_code == ErrorCode.fenced_instance_id


# --- Heartbeat -----------------------------------------------------------------------


def test_heartbeat_errors():
    h = Harness()
    ids, gen = h.stable_group("a", "b", instances={"a": "ia"})
    assert h.heartbeat(ids["a"], gen, group="") == ErrorCode.invalid_group_id
    assert h.heartbeat(ids["a"], gen, group="other") == ErrorCode.unknown_member_id
    assert h.heartbeat("stranger", gen) == ErrorCode.unknown_member_id
    assert h.heartbeat(ids["a"], gen - 1, instance="ia") == ErrorCode.illegal_generation
    assert h.heartbeat(ids["b"], gen, instance="ia") == ErrorCode.fenced_instance_id
    assert h.heartbeat(ids["b"], gen, instance="nobody") == ErrorCode.unknown_member_id
    assert h.heartbeat(ids["a"], gen, instance="ia") == ErrorCode.none
    h.join(ids["a"], instance="ia", client="a")
    assert h.heartbeat(ids["b"], gen) == ErrorCode.rebalance_in_progress


def test_a_heartbeat_during_completing_rebalance_is_fine():
    # Clients may heartbeat between their JoinGroup answer and their SyncGroup.
    h = Harness()
    tokens = [h.join_new(c) for c in ("c1", "c2")]
    h.advance(6000)
    follower = h.answer(tokens[1])
    assert h.group().state is GroupState.COMPLETING_REBALANCE
    assert h.heartbeat(follower.member_id, 1) == ErrorCode.none


# --- LeaveGroup ----------------------------------------------------------------------


def test_leave_errors():
    h = Harness()
    token = h.token("leave")
    h.apply(h.coordinator.leave("", [("m", None)], token=token, now_ms=h.now))
    assert h.answer(token).error_code == ErrorCode.invalid_group_id
    result = h.leave(("m", None), ("n", "i"), group="nowhere")
    assert result.error_code == ErrorCode.none
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in result.members] == [
        ("m", None, ErrorCode.unknown_member_id), ("n", "i", ErrorCode.unknown_member_id),
    ]


def test_a_pending_member_may_leave():
    h = Harness()
    ids, gen = h.stable_group("c1")
    pending = h.answer(h.join(client="c2")).member_id
    t1 = h.join(ids["c1"], client="c1")
    assert h.answer(t1) is None  # the rebalance waits for the pending member ...
    assert h.leave((pending, None)).members[0].error_code == ErrorCode.none
    assert h.answer(t1).generation_id == gen + 1  # ... until it leaves
