"""What admin tools see: ListGroups with its state filter, DescribeGroups (members and
their assignments once the group is Stable), and when the coordinator wants a tick."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from odradek.coordinator import GroupCoordinator
from odradek.coordinator.results import GroupOverview

from .harness import Harness, subscription


def test_list_groups_filters_by_state_ignoring_case():
    h = Harness()
    h.stable_group("c1", group="busy")
    h.commit("", -1, [("t", 0, 1)], group="simple")
    h.join_new("c2", group="starting")
    assert sorted(h.coordinator.list_groups()) == [
        GroupOverview("busy", "consumer", "Stable"),
        GroupOverview("simple", "", "Empty"),
        GroupOverview("starting", "consumer", "PreparingRebalance"),
    ]
    assert h.coordinator.list_groups(["stable", "EMPTY"]) == [
        GroupOverview("busy", "consumer", "Stable"), GroupOverview("simple", "", "Empty"),
    ]
    assert h.coordinator.list_groups([]) == h.coordinator.list_groups()


def test_describe_a_stable_group_shows_members_metadata_and_assignments():
    h = Harness()
    ids, _ = h.stable_group("c1", "c2", instances={"c2": "i2"})
    (d,) = h.coordinator.describe_groups(["g"])
    assert (d.error_code, d.state, d.protocol_type, d.protocol_name) == (
        ErrorCode.none, "Stable", "consumer", "range",
    )
    assert [(m.member_id, m.group_instance_id, m.client_id, m.client_host) for m in d.members] == [
        (ids["c1"], None, "c1", "/10.0.0.1"), (ids["c2"], "i2", "c2", "/10.0.0.1"),
    ]
    assert d.members[0].metadata == subscription("t")
    assert d.members[1].assignment == b"assignment-of-" + ids["c2"].encode()


def test_describe_a_rebalancing_group_hides_metadata_and_assignments():
    h = Harness()
    h.stable_group("c1")
    h.join_new("c2")
    (d,) = h.coordinator.describe_groups(["g"])
    assert (d.state, d.protocol_name) == ("PreparingRebalance", "")
    assert all(m.metadata == b"" and m.assignment == b"" for m in d.members)


def test_describe_an_unknown_group():
    h = Harness()
    (old,) = h.coordinator.describe_groups(["nope"])
    assert (old.error_code, old.state, old.members) == (ErrorCode.none, "Dead", [])
    # DescribeGroups v6+ says so with an error instead.
    (new,) = h.coordinator.describe_groups(["nope"], not_found_error=True)
    assert new.error_code == ErrorCode.group_id_not_found


def test_an_idle_coordinator_needs_no_tick():
    coordinator = GroupCoordinator(offsets_retention_check_interval_ms=None)
    assert coordinator.next_deadline() is None
    assert coordinator.tick(10**12).records == []


def test_next_deadline_follows_the_earliest_timer():
    h = Harness(offsets_retention_check_interval_ms=None)
    ids, gen = h.stable_group("c1")
    assert h.coordinator.next_deadline() == h.now + 30_000  # c1's session
    h.advance(10_000)
    h.heartbeat(ids["c1"], gen)
    # The old deadline is stale now; the new one counts.
    assert h.coordinator.next_deadline() == h.now + 30_000


def test_a_late_tick_does_what_punctual_ticks_would_have_done():
    punctual, late = Harness(), Harness()
    for c in ("c1", "c2"):
        punctual.join_new(c)
    tokens = [late.join_new(c) for c in ("c1", "c2")]
    # Punctual: at 3000 (more members came: wait again) and at 6000.
    punctual.advance(3000)
    punctual.advance(3000)
    # Late: once, at 7000. The re-armed delay (3000 -> 6000) still fires within it.
    fx = late.advance(7000)
    assert len(fx.responses) == 2
    assert [late.answer(t).generation_id for t in tokens] == [1, 1]
    assert late.group().state_timestamp == punctual.group().state_timestamp
