"""Committed offsets: who may commit, what a fetch answers, deleting them, and their
expiry (offsets.retention.minutes) — with the __consumer_offsets records each writes."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from odradek.coordinator import GroupState
from odradek.coordinator import offsets_topic as ot
from odradek.coordinator.results import (
    FetchedOffset,
)

from .harness import Harness

DAY = 24 * 60 * 60 * 1000
WEEK = 7 * DAY


def offsets_of(h: Harness, group: str = "g", partitions=None):
    return h.coordinator.fetch_offsets(group, partitions).partitions


def test_members_commit_and_a_fetch_returns_what_they_committed():
    h = Harness()
    ids, gen = h.stable_group("c1", "c2")
    records = len(h.records)
    errors = h.commit(ids["c1"], gen, [("t", 0, 42, 3, "meta"), ("t", 1, 7, -1, None)])
    assert errors == {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none}
    # One record per partition, in Kafka's layout, for the runtime to append first.
    new = h.records[records:]
    assert [ot.decode_key(r.key) for r in new] == [
        ot.OffsetCommitKey("g", "t", 0), ot.OffsetCommitKey("g", "t", 1),
    ]
    assert ot.decode_offset_commit_value(new[0].value) == ot.OffsetCommitValue(
        42, 3, "meta", h.now
    )
    assert all(r.group_id == "g" for r in new)
    assert offsets_of(h, partitions=[("t", 0), ("t", 1), ("t", 2)]) == [
        FetchedOffset("t", 0, 42, 3, "meta"),
        FetchedOffset("t", 1, 7, -1, ""),
        FetchedOffset("t", 2, -1, -1, ""),  # never committed
    ]
    assert [o.partition for o in offsets_of(h)] == [0, 1]  # all of the group's


def test_a_fetch_for_an_unknown_group_finds_nothing():
    h = Harness()
    assert offsets_of(h, "nobody") == []
    assert offsets_of(h, "nobody", [("t", 0)]) == [FetchedOffset("t", 0, -1, -1, "")]


def test_an_admin_commit_creates_a_simple_group():
    # Generation -1 and no member id: a tool, or a consumer using assign(), stores offsets.
    h = Harness()
    assert h.commit("", -1, [("t", 0, 5)], group="simple") == {("t", 0): ErrorCode.none}
    group = h.group("simple")
    assert group.state is GroupState.EMPTY and group.protocol_type is None
    assert offsets_of(h, "simple")[0].offset == 5
    # A commit that claims a generation of a group that does not exist is stale.
    assert h.commit("m", 3, [("t", 0, 5)], group="ghost") == {
        ("t", 0): ErrorCode.illegal_generation}
    assert "ghost" not in h.coordinator.groups


def test_only_members_commit_to_a_group_with_members():
    h = Harness()
    ids, gen = h.stable_group("c1", instances={"c1": "i1"})
    assert h.commit("", -1, [("t", 0, 1)]) == {("t", 0): ErrorCode.unknown_member_id}
    assert h.commit("stranger", gen, [("t", 0, 1)]) == {("t", 0): ErrorCode.unknown_member_id}
    assert h.commit(ids["c1"], gen - 1, [("t", 0, 1)], instance="i1") == {
        ("t", 0): ErrorCode.illegal_generation
    }
    assert h.commit("old-id", gen, [("t", 0, 1)], instance="i1") == {
        ("t", 0): ErrorCode.fenced_instance_id
    }
    assert offsets_of(h) == []


def test_commits_wait_for_the_assignment_but_not_for_a_rebalance():
    h = Harness()
    ids, gen = h.stable_group("c1", "c2")
    # PreparingRebalance: still allowed (members commit before they rejoin).
    h.join(ids["c1"], client="c1")
    assert h.commit(ids["c2"], gen, [("t", 0, 1)]) == {("t", 0): ErrorCode.none}
    h.join(ids["c2"], client="c2")
    # CompletingRebalance: the member has the new generation but no assignment yet.
    assert h.group().state is GroupState.COMPLETING_REBALANCE
    assert h.commit(ids["c2"], gen + 1, [("t", 0, 2)]) == {
        ("t", 0): ErrorCode.rebalance_in_progress}


def test_a_commit_counts_as_a_heartbeat():
    h = Harness()
    ids, gen = h.stable_group("c1")
    for _ in range(10):
        h.advance(20_000)
        h.commit(ids["c1"], gen, [("t", 0, 1)])
    assert ids["c1"] in h.group().members


def test_metadata_over_offset_metadata_max_bytes_is_refused_per_partition():
    h = Harness(offset_metadata_max_bytes=10)
    ids, gen = h.stable_group("c1")
    records = len(h.records)
    errors = h.commit(ids["c1"], gen, [("t", 0, 1, -1, "x" * 11), ("t", 1, 1, -1, "x" * 10)])
    assert errors == {("t", 0): ErrorCode.offset_metadata_too_large, ("t", 1): ErrorCode.none}
    assert len(h.records) == records + 1
    assert [o.partition for o in offsets_of(h)] == [1]


def test_offset_delete_on_an_empty_group_removes_the_offsets_and_then_the_group():
    h = Harness()
    ids, gen = h.stable_group("c1")
    h.commit(ids["c1"], gen, [("t", 0, 1), ("u", 0, 2)])
    h.leave((ids["c1"], None))
    assert h.group().state is GroupState.EMPTY
    records = len(h.records)
    result = h.delete_offsets([("t", 0), ("t", 9)])
    assert result.error_code == ErrorCode.none
    assert [(p.topic, p.partition, p.error_code) for p in result.partitions] == [
        ("t", 0, ErrorCode.none), ("t", 9, ErrorCode.none),
    ]
    assert h.records[records:] == [h.records[records]]  # one tombstone: ("t", 9) had none
    assert h.records[records].value is None
    result = h.delete_offsets([("u", 0)])
    # The group had nothing left: it is gone, and so is its metadata record.
    assert "g" not in h.coordinator.groups
    assert ot.decode_key(h.records[-1].key) == ot.GroupMetadataKey("g")
    assert h.records[-1].value is None


def test_offset_delete_spares_topics_an_active_consumer_group_subscribes_to():
    h = Harness()
    ids, gen = h.stable_group("c1")  # subscribed to "t"
    h.commit(ids["c1"], gen, [("t", 0, 1), ("old", 0, 2)])
    result = h.delete_offsets([("t", 0), ("old", 0)])
    assert [(p.topic, p.error_code) for p in result.partitions] == [
        ("t", ErrorCode.group_subscribed_to_topic), ("old", ErrorCode.none),
    ]
    assert [o.topic for o in offsets_of(h)] == ["t"]


def test_offset_delete_errors():
    h = Harness()
    assert h.delete_offsets([("t", 0)], group="").error_code == ErrorCode.invalid_group_id
    assert h.delete_offsets([("t", 0)], group="nobody").error_code == ErrorCode.group_id_not_found
    _ids, _gen = h.stable_group(
        "w", protocol_type="connect", protocols={"w": [("default", b"\x00")]}
    )
    result = h.delete_offsets([("t", 0)])
    assert (result.error_code, result.partitions) == (ErrorCode.non_empty_group, [])


def test_a_deleted_topics_offsets_go_from_every_group_and_an_emptied_group_goes_too():
    h = Harness()
    ids, gen = h.stable_group("c1")  # a stable group, subscribed to "t"
    h.commit(ids["c1"], gen, [("t", 0, 1), ("gone", 0, 2), ("gone", 1, 3)])
    h.commit("", -1, [("gone", 0, 4)], group="only-gone")  # a simple group
    records = len(h.records)
    h.apply(h.coordinator.topics_deleted(["gone"], h.now))
    # A tombstone per offset, and one for the simple group left empty without offsets
    # (Kafka's onPartitionsDeleted); the stable group keeps its members and "t".
    assert [(ot.decode_key(r.key), r.value) for r in h.records[records:]] == [
        (ot.OffsetCommitKey("g", "gone", 0), None), (ot.OffsetCommitKey("g", "gone", 1), None),
        (ot.OffsetCommitKey("only-gone", "gone", 0), None),
    ]
    assert [(o.topic, o.offset) for o in offsets_of(h)] == [("t", 1)]
    assert "only-gone" not in h.coordinator.groups
    # A topic made again under the name starts with no committed offset.
    assert offsets_of(h, partitions=[("gone", 0)]) == [FetchedOffset("gone", 0, -1, -1, "")]
    records = len(h.records)
    h.apply(h.coordinator.topics_deleted(["never-committed"], h.now))
    assert len(h.records) == records  # nothing to forget, nothing written


def test_delete_groups_only_deletes_empty_groups():
    h = Harness()
    ids, _gen = h.stable_group("c1", group="busy")
    h.commit("", -1, [("t", 0, 1)], group="idle")
    assert h.delete_groups("busy", "idle", "nobody") == {
        "busy": ErrorCode.non_empty_group, "idle": ErrorCode.none,
        "nobody": ErrorCode.group_id_not_found,
    }
    assert "idle" not in h.coordinator.groups
    # The offsets' tombstone; no group tombstone: "idle" never had a metadata record.
    assert [(ot.decode_key(r.key), r.value) for r in h.records[-1:]] == [
        (ot.OffsetCommitKey("idle", "t", 0), None)
    ]
    h.leave((ids["c1"], None), group="busy")
    assert h.delete_groups("busy") == {"busy": ErrorCode.none}
    assert (ot.decode_key(h.records[-1].key), h.records[-1].value) == (
        ot.GroupMetadataKey("busy"), None,
    )


def test_offsets_of_an_empty_group_expire_a_retention_after_it_became_empty():
    # Sessions of days, so that the member can sit out days without heartbeats.
    h = Harness(offsets_retention_check_interval_ms=None, max_session_timeout_ms=30 * DAY)
    ids, gen = h.stable_group("c1", session_ms=20 * DAY)
    h.commit(ids["c1"], gen, [("t", 0, 1)])
    h.advance(8 * DAY)  # long after the commit, the member is still there ...
    assert h.apply(h.coordinator.expire_offsets(h.now)).records == []
    h.leave((ids["c1"], None))
    emptied = h.now
    h.advance(WEEK - 1)
    assert h.apply(h.coordinator.expire_offsets(h.now)).records == []
    h.advance(1)
    fx = h.apply(h.coordinator.expire_offsets(h.now))
    assert [(ot.decode_key(r.key), r.value) for r in fx.records] == [
        (ot.OffsetCommitKey("g", "t", 0), None), (ot.GroupMetadataKey("g"), None),
    ]
    assert h.now - emptied == WEEK
    assert "g" not in h.coordinator.groups


def test_a_stable_consumer_group_keeps_offsets_of_topics_it_subscribes_to():
    h = Harness(offsets_retention_check_interval_ms=None, max_session_timeout_ms=30 * DAY)
    ids, gen = h.stable_group("c1", session_ms=20 * DAY)  # subscribes to "t"
    h.commit(ids["c1"], gen, [("t", 0, 1), ("gone", 0, 1)])
    h.advance(WEEK)
    fx = h.apply(h.coordinator.expire_offsets(h.now))
    assert [ot.decode_key(r.key) for r in fx.records] == [ot.OffsetCommitKey("g", "gone", 0)]
    assert [o.topic for o in offsets_of(h)] == ["t"]


def test_offsets_of_a_simple_group_expire_from_their_commit():
    h = Harness(offsets_retention_check_interval_ms=None)
    h.commit("", -1, [("t", 0, 1)], group="s")
    h.advance(DAY)
    h.commit("", -1, [("t", 1, 1)], group="s")
    h.advance(WEEK - DAY)
    h.apply(h.coordinator.expire_offsets(h.now))
    assert [o.partition for o in offsets_of(h, "s")] == [1]
    h.advance(DAY)
    fx = h.apply(h.coordinator.expire_offsets(h.now))
    assert "s" not in h.coordinator.groups
    assert len(fx.records) == 1  # generation 0: no group metadata record to tombstone


def test_an_explicit_retention_from_old_clients_is_honoured():
    # OffsetCommit v2-v4 carry retention_time_ms; Kafka then writes value version 1.
    h = Harness(offsets_retention_check_interval_ms=None)
    h.commit("", -1, [("t", 0, 1)], group="s", retention_ms=1000)
    assert ot.decode_offset_commit_value(h.records[-1].value).expire_timestamp == h.now + 1000
    h.advance(999)
    h.apply(h.coordinator.expire_offsets(h.now))
    assert offsets_of(h, "s") != []
    h.advance(1)
    h.apply(h.coordinator.expire_offsets(h.now))
    assert "s" not in h.coordinator.groups


def test_tick_runs_the_expiry_every_check_interval():
    h = Harness(offsets_retention_ms=1000, offsets_retention_check_interval_ms=600_000)
    h.commit("", -1, [("t", 0, 1)], group="s")
    assert h.coordinator.next_deadline() == h.now + 600_000
    fx = h.advance(600_000)
    assert [r.value for r in fx.records] == [None]
    assert "s" not in h.coordinator.groups
    assert h.coordinator.next_deadline() == h.now + 600_000


def test_an_empty_group_without_offsets_is_cleaned_up():
    h = Harness(offsets_retention_check_interval_ms=None)
    ids, _gen = h.stable_group("c1")
    h.leave((ids["c1"], None))
    fx = h.apply(h.coordinator.expire_offsets(h.now))
    assert [(ot.decode_key(r.key), r.value) for r in fx.records] == [
        (ot.GroupMetadataKey("g"), None)
    ]


def test_subscription_parsing_tolerates_garbage():
    h = Harness()
    ids, gen = h.stable_group("c1", protocols={"c1": [("range", b"\x00\x00\xff")]})
    h.commit(ids["c1"], gen, [("t", 0, 1)])
    # Unknown subscriptions count as "subscribed to everything", as in Kafka.
    result = h.delete_offsets([("t", 0)])
    assert result.partitions[0].error_code == ErrorCode.group_subscribed_to_topic
    assert h.group().subscribed is None
