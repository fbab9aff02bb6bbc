"""Share groups on the group coordinator (coordinator/share_group.py) and the share
coordinator's state (coordinator/share_coordinator.py), as pure state machines: joins,
epochs, the simple assignor sharing partitions, sessions timing out, describe, list
and delete; state written, fenced by an older state epoch, replayed from Kafka's
records (snapshots and updates) and deleted."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from odradek.coordinator import GroupCoordinator
from odradek.coordinator import offsets_topic as ot
from odradek.coordinator.consumer_group import TopicInfo
from odradek.coordinator.share_coordinator import ShareCoordinator
from odradek.coordinator.share_group import ShareSettings, assign_simple
from odradek.coordinator.share_records import (
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
    StateBatch,
    encode_key,
    encode_value,
)

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
TOPICS = {"a": TopicInfo(T1, 2), "b": TopicInfo(T2, 3)}


def heartbeat(c: GroupCoordinator, member: str, epoch: int, topics: list[str] | None = None,
              now: int = 0, group: str = "g") -> object:
    fx = c.share_heartbeat(group, member, epoch, subscribed_topic_names=topics,
                           topics=TOPICS, token=1, now_ms=now)
    return fx.response_to(1)


def test_the_simple_assignor_shares_partitions_only_when_members_outnumber_them() -> None:
    one = assign_simple({"m1": ["a"], "m2": ["a"], "m3": ["a"]}, TOPICS)
    # Three members, two partitions: every member gets one, partition sharing.
    assert sorted(p for a in one.values() for p in a[T1]) == [0, 0, 1]
    few = assign_simple({"m1": ["b"], "m2": ["b"]}, TOPICS)
    assert sorted(p for a in few.values() for p in a[T2]) == [0, 1, 2]
    assert assign_simple({"m1": ["missing"]}, TOPICS) == {"m1": {}}


def test_members_join_are_fenced_leave_and_time_out() -> None:
    c = GroupCoordinator(share_settings=ShareSettings(session_timeout_ms=1000,
                                                      heartbeat_interval_ms=100))
    first = heartbeat(c, "m1", 0, ["a"])
    assert (first.error_code, first.member_epoch, first.assignment) == (0, 1, {T1: [0, 1]})
    second = heartbeat(c, "m2", 0, ["a"])
    assert second.member_epoch == 2
    # m1 learns the new epoch and its new share at its next heartbeat.
    again = heartbeat(c, "m1", 1)
    assert again.member_epoch == 2 and again.assignment is not None
    assert heartbeat(c, "m1", 5).error_code == ErrorCode.fenced_member_epoch
    assert heartbeat(c, "nobody", 3).error_code == ErrorCode.unknown_member_id
    assert heartbeat(c, "m3", 0).error_code == ErrorCode.invalid_request  # no topics
    assert heartbeat(c, "", 0, ["a"]).error_code == ErrorCode.invalid_request
    # A classic or consumer group's id is not a share group's.
    c.consumer_heartbeat("cg", "x", 0, rebalance_timeout_ms=1000, owned=[],
                         subscribed_topic_names=["a"], topics=TOPICS, token=2, now_ms=0)
    assert heartbeat(c, "m9", 0, ["a"], group="cg").error_code == ErrorCode.group_id_not_found
    # ... nor the other way round.
    fx = c.consumer_heartbeat("g", "x", 0, rebalance_timeout_ms=1000, owned=[],
                              subscribed_topic_names=["a"], topics=TOPICS, token=9, now_ms=0)
    assert fx.response_to(9).error_code == ErrorCode.group_id_not_found
    # m2 leaves: named so the broker releases what it holds.
    fx = c.share_heartbeat("g", "m2", -1, token=3, now_ms=10)
    assert fx.response_to(3).member_epoch == -1
    assert fx.share_members_left == [("g", "m2")]
    [described] = c.share_group_describe(["g"])
    assert (described.state, [m.member_id for m in described.members]) == ("Stable", ["m1"])
    # m1 goes silent: removed at its session's end.
    fx = c.tick(5000)
    assert fx.share_members_left == [("g", "m1")]
    [described] = c.share_group_describe(["g"])
    assert described.state == "Empty"
    assert [(g.group_id, g.group_type, g.state) for g in c.list_groups()
            if g.group_type == "share"] == [("g", "share", "Empty")]
    fx = c.delete_groups(["g"], token=4, now_ms=6000)
    assert fx.share_groups_deleted == ["g"]
    assert fx.share_states_deleted == [("g", T1, 0), ("g", T1, 1)]  # its state goes too
    assert c.share_group_describe(["g"])[0].error_code == ErrorCode.group_id_not_found


def test_a_deleted_topic_leaves_every_share_group_with_its_state() -> None:
    c = GroupCoordinator()
    heartbeat(c, "m1", 0, ["a", "b"])
    fx = c.topics_deleted({"b"}, 10)
    assert fx.share_states_deleted == [("g", T2, 0), ("g", T2, 1), ("g", T2, 2)]
    assert set(c.share_groups["g"].initialized) == {T1}
    assert [ot.decode_key(r.key).version for r in fx.records] == [15]


def test_a_share_group_is_replayed_from_its_records() -> None:
    c = GroupCoordinator()
    records = []
    for member, epoch in (("m1", 0), ("m2", 0)):
        fx = c.share_heartbeat("g", member, epoch, subscribed_topic_names=["a", "b"],
                               client_id=f"client-{member}", topics=TOPICS, token=1,
                               now_ms=0)
        records += fx.records
    records += c.share_heartbeat("g", "m2", -1, token=2, now_ms=1).records
    records += c.share_heartbeat("g", "m3", 0, subscribed_topic_names=["a"], topics=TOPICS,
                                 token=3, now_ms=2).records
    assert {ot.decode_key(r.key).version for r in records} == {10, 11, 14, 15}
    loaded = GroupCoordinator()
    for r in records:
        loaded.load(r.key, r.value)
    loaded.finish_load(10, TOPICS)
    [before], [after] = c.share_group_describe(["g"]), loaded.share_group_describe(["g"])
    assert after == before  # members, epochs and assignments alike
    assert loaded.share_groups["g"].initialized == c.share_groups["g"].initialized
    # m1 heartbeats on at the epoch it knew (behind the group's): no rejoin, it catches up.
    m1 = next(m for m in before.members if m.member_id == "m1")
    assert m1.member_epoch < before.group_epoch
    again = loaded.share_heartbeat("g", "m1", m1.member_epoch, topics=TOPICS, token=4,
                                   now_ms=20).response_to(4)
    assert (again.error_code, again.member_epoch) == (0, before.group_epoch)
    # Deleting the (empty) group tombstones it.
    for m in ("m1", "m3"):
        loaded.share_heartbeat("g", m, -1, token=5, now_ms=30)
    fx = loaded.delete_groups(["g"], token=6, now_ms=40)
    assert [r.value for r in fx.records] == [None, None]


def test_share_state_is_written_fenced_replayed_and_deleted() -> None:
    c = ShareCoordinator()
    key = ("g", T1, 0)
    assert c.read(key, token=1, now_ms=0).response_to(1).state is None
    fx = c.write(key, state_epoch=1, leader_epoch=0, start_offset=5,
                 batches=[StateBatch(7, 8, 0, 2)], token=1, now_ms=100)
    assert fx.response_to(1).error_code == 0 and len(fx.records) == 1
    stale = c.write(key, state_epoch=0, leader_epoch=0, start_offset=9, batches=[],
                    token=2, now_ms=200)
    assert stale.response_to(2).error_code == ErrorCode.fenced_state_epoch
    # A replay of those records, and of a Kafka update on top of them, gives the state.
    replayed = ShareCoordinator()
    for r in fx.records:
        replayed.load(r.key, r.value)
    update_key = encode_key(ShareUpdateKey("g", T1, 0))
    replayed.load(update_key, encode_value(ShareUpdateValue(
        1, 0, 8, (StateBatch(8, 8, 2, 2), StateBatch(9, 9, 0, 1)))))
    state = replayed.states[key]
    assert (state.start_offset, state.batches) == (8, (StateBatch(8, 8, 2, 2),
                                                       StateBatch(9, 9, 0, 1)))
    snapshot_key = encode_key(ShareSnapshotKey("g", T2, 1))
    replayed.load(snapshot_key, encode_value(ShareSnapshotValue(0, 3, 0, 11, 1, 1, ())))
    assert replayed.keys_of_group("g") == [key, ("g", T2, 1)]
    gone = replayed.delete(replayed.keys_of_group("g"), token=5, now_ms=300)
    assert [r.value for r in gone.records] == [None, None]
    assert replayed.states == {}
