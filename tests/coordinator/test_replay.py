"""After a broker restart the coordinator is rebuilt from __consumer_offsets alone:
committed offsets, groups at rest with their members and assignments, and the members
keep working with their ids and generation."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from odradek.coordinator import GroupState

from .harness import SESSION_MS, Harness
from .replay import assert_replay_matches, replay


def test_a_stable_group_and_its_offsets_survive_a_restart():
    h = Harness()
    ids, gen = h.stable_group("c1", "c2")
    h.commit(ids["c1"], gen, [("t", 0, 10, 2, "m")])
    h.commit("", -1, [("u", 3, 99)], group="simple")
    assert_replay_matches(h.coordinator, h.records, h.now)

    restarted = replay(h.records, h.now)
    group = restarted.groups["g"]
    assert group.state is GroupState.STABLE
    assert (group.generation_id, group.leader_id) == (gen, ids["c1"])
    assert restarted.fetch_offsets("g", [("t", 0)]).partitions[0].offset == 10
    assert restarted.fetch_offsets("simple").partitions[0].offset == 99
    # The consumers carry on as if nothing happened: same ids, same generation.
    token = object()
    fx = restarted.heartbeat("g", ids["c2"], gen, None, token=token, now_ms=h.now + 1000)
    assert fx.response_to(token).error_code == ErrorCode.none
    fx = restarted.sync("g", ids["c2"], gen, None, None, None, [], token=token, now_ms=h.now)
    assert fx.response_to(token).assignment == b"assignment-of-" + ids["c2"].encode()


def test_loaded_members_get_a_fresh_session_and_then_expire_as_usual():
    h = Harness()
    ids, gen = h.stable_group("c1", "c2")
    restart_at = h.now + 25_000  # the old sessions are nearly over ...
    restarted = replay(h.records, restart_at)
    # ... but a loading coordinator cannot have seen heartbeats: a full session from now.
    assert restarted.next_deadline() == restart_at + SESSION_MS
    token = object()
    fx = restarted.heartbeat("g", ids["c1"], gen, None, token=token, now_ms=restart_at + 20_000)
    assert fx.response_to(token).error_code == ErrorCode.none
    fx = restarted.tick(restart_at + SESSION_MS)
    assert ids["c2"] not in restarted.groups["g"].members
    assert restarted.groups["g"].state is GroupState.PREPARING_REBALANCE
    assert fx.records == []


def test_a_restarted_coordinator_still_fences_a_replaced_static_member():
    h = Harness()
    ids, gen = h.stable_group("a", instances={"a": "ia"})
    new_id = h.answer(h.join(instance="ia", client="a")).member_id
    restarted = replay(h.records, h.now)
    token = object()
    fx = restarted.heartbeat("g", ids["a"], gen, "ia", token=token, now_ms=h.now)
    assert fx.response_to(token).error_code == ErrorCode.fenced_instance_id
    fx = restarted.heartbeat("g", new_id, gen, "ia", token=token, now_ms=h.now)
    assert fx.response_to(token).error_code == ErrorCode.none


def test_deleted_groups_and_offsets_stay_deleted():
    h = Harness()
    ids, gen = h.stable_group("c1")
    h.commit(ids["c1"], gen, [("t", 0, 1), ("t", 1, 2)])
    h.leave((ids["c1"], None))
    h.delete_offsets([("t", 0)])
    assert_replay_matches(h.coordinator, h.records, h.now)
    h.delete_groups("g")
    assert replay(h.records, h.now).groups == {}


def test_an_empty_group_keeps_its_emptied_time_for_offset_expiry():
    h = Harness(offsets_retention_ms=1000, offsets_retention_check_interval_ms=None)
    ids, gen = h.stable_group("c1")
    h.commit(ids["c1"], gen, [("t", 0, 1)])
    h.leave((ids["c1"], None))
    emptied = h.now
    restarted = replay(h.records, emptied + 500, offsets_retention_ms=1000)
    assert restarted.groups["g"].state_timestamp == emptied
    assert restarted.expire_offsets(emptied + 999).records == []
    assert len(restarted.expire_offsets(emptied + 1000).records) == 2


def test_a_group_mid_rebalance_replays_as_its_last_stored_generation():
    h = Harness()
    ids, gen = h.stable_group("c1", "c2")
    h.join(ids["c1"], client="c1")
    assert h.group().state is GroupState.PREPARING_REBALANCE
    restarted = replay(h.records, h.now)
    assert restarted.groups["g"].state is GroupState.STABLE
    assert restarted.groups["g"].generation_id == gen
    # The member that was waiting finds out and joins again from scratch.
    token = object()
    fx = restarted.heartbeat("g", ids["c1"], gen, None, token=token, now_ms=h.now)
    assert fx.response_to(token).error_code == ErrorCode.none
    fx = restarted.join("g", "unknown-id", None, "c", "/h", SESSION_MS, 60_000, "consumer",
                        [("range", b"")], require_known_member_id=True, token=token,
                        now_ms=h.now)
    assert fx.response_to(token).error_code == ErrorCode.unknown_member_id


def test_a_loaded_group_over_the_size_limit_rebalances():
    h = Harness()
    h.stable_group("c1", "c2", "c3")
    restarted = replay(h.records, h.now, max_group_size=2)
    assert restarted.groups["g"].state is GroupState.PREPARING_REBALANCE


def test_records_of_other_group_types_are_skipped():
    h = Harness()
    h.commit("", -1, [("t", 0, 1)], group="s")
    restarted = replay(h.records, h.now)
    restarted.load(b"\x00\x0c\x00\x01x", b"anything")  # a share group's assignment
    restarted.load(b"\x00\x12\x00\x01x", b"anything")  # Kafka 4.0's streams metadata
    assert set(restarted.groups) == {"s"}
    assert not restarted.consumer_groups
