"""A streams group's topology configured against the broker's topics
(coordinator/streams_topology.py) and the sticky task assignor
(coordinator/streams_assignor.py), as units: the shapes Kafka Streams sends (a
repartition before a windowed aggregation, a KStream-KTable join), Kafka's rules for
partition counts and copartitioning, and an assignment that is balanced, sticky and keeps
standbys off their active's instance."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.coordinator.streams_assignor import MemberSpec, assign
from odradek.coordinator.streams_topology import (
    INCORRECTLY_PARTITIONED_TOPICS,
    MISSING_INTERNAL_TOPICS,
    MISSING_SOURCE_TOPICS,
    CopartitionGroup,
    InternalTopic,
    Subtopology,
    Topology,
    TopologyError,
    configure,
)

# The StreamsApp of tests/interop: events re-keyed into a repartition topic (subtopology
# 0), joined with the users table and counted in windows (subtopology 1).
APP = Topology(1, (
    Subtopology("0", source_topics=("events",), repartition_sink_topics=("app-rekey",)),
    Subtopology("1", source_topics=("users",),
                repartition_source_topics=(InternalTopic("app-rekey", configs=(
                    ("cleanup.policy", "delete"),)),),
                changelog_topics=(InternalTopic("app-users-changelog"),
                                  InternalTopic("app-counts-changelog")),
                copartition_groups=(CopartitionGroup(source_topics=(0,),
                                                     repartition_source_topics=(0,)),)),
))


def test_internal_topics_take_their_partitions_from_what_feeds_them():
    """Without the join, the repartition topic is sized by what writes it (events, 4)."""
    alone = Topology(1, (APP.subtopologies[0], Subtopology(
        "1", repartition_source_topics=(InternalTopic("app-rekey"),),
        changelog_topics=(InternalTopic("app-counts-changelog"),))))
    configured = configure(alone, {"events": 4})
    assert [s.code for s in configured.statuses] == [MISSING_INTERNAL_TOPICS]
    assert {n: t.partitions for n, t in configured.to_create.items()} == {
        "app-rekey": 4, "app-counts-changelog": 4}


def test_a_copartitioned_repartition_topic_takes_the_tables_partition_count():
    configured = configure(APP, {"events": 4, "users": 3})
    assert configured.to_create["app-rekey"].partitions == 3
    assert configured.to_create["app-rekey"].configs == (("cleanup.policy", "delete"),)
    assert configured.to_create["app-counts-changelog"].partitions == 3
    assert not configured.ready and configured.tasks == {}
    ready = configure(APP, {"events": 4, "users": 3, "app-rekey": 3,
                            "app-users-changelog": 3, "app-counts-changelog": 3})
    assert ready.ready and ready.tasks == {"0": 4, "1": 3} and not ready.to_create


def test_missing_source_topics_and_wrongly_partitioned_ones_are_statuses():
    missing = configure(APP, {"events": 3})
    assert [(s.code, s.detail) for s in missing.statuses] == [
        (MISSING_SOURCE_TOPICS, "Source topics users are missing.")]
    wrong = configure(APP, {"events": 3, "users": 3, "app-rekey": 3,
                            "app-users-changelog": 2, "app-counts-changelog": 3})
    assert [s.code for s in wrong.statuses] == [INCORRECTLY_PARTITIONED_TOPICS]
    assert "app-users-changelog" in wrong.statuses[0].detail
    join = Topology(1, (Subtopology("0", source_topics=("a", "b"), copartition_groups=(
        CopartitionGroup(source_topics=(0, 1)),)),))
    assert [s.code for s in configure(join, {"a": 2, "b": 3}).statuses] == [
        INCORRECTLY_PARTITIONED_TOPICS]


def test_a_repartition_topic_without_writers_or_copartitioning_cannot_be_sized():
    orphan = Topology(1, (Subtopology("0", repartition_source_topics=(
        InternalTopic("app-orphan"),)),))
    with pytest.raises(TopologyError, match="app-orphan"):
        configure(orphan, {})


def test_a_copartition_group_naming_a_topic_index_the_subtopology_lacks_is_invalid():
    """Found by the fuzz tier: an index past the subtopology's lists was an IndexError
    that closed the connection; it is the client's invalid topology."""
    for group in (CopartitionGroup(source_topics=(0, 7)),
                  CopartitionGroup(repartition_source_topics=(3,)),
                  CopartitionGroup(source_topics=(-1,))):
        bad = Topology(1, (Subtopology("0", source_topics=("a", "b"),
                                       copartition_groups=(group,)),))
        with pytest.raises(TopologyError, match="which it does not have"):
            configure(bad, {"a": 2, "b": 2})


def test_source_topic_regexes_match_existing_topics():
    regex = Topology(1, (Subtopology("0", source_topic_regex=("logs-.*",),
                                     changelog_topics=(InternalTopic("app-c"),)),))
    assert configure(regex, {"other": 1}).statuses[0].code == MISSING_SOURCE_TOPICS
    configured = configure(regex, {"logs-a": 2, "logs-b": 5})
    assert configured.to_create["app-c"].partitions == 5
    assert configured.source_topics["0"] == ("logs-a", "logs-b")


def active(a) -> set[tuple[str, int]]:  # type: ignore[no-untyped-def]
    return {(s, p) for s, ps in a.active.items() for p in ps}


def test_tasks_are_spread_evenly_and_stay_with_their_owner():
    tasks = {"0": 4, "1": 3}
    first = assign(tasks, [MemberSpec("a", "p1"), MemberSpec("b", "p2")], 0)
    assert sorted(len(active(a)) for a in first.values()) == [3, 4]
    assert active(first["a"]) | active(first["b"]) == {
        (s, p) for s, n in tasks.items() for p in range(n)}
    # A third member takes some; the others keep what they had otherwise.
    held = {m: {s: set(ps) for s, ps in a.active.items()} for m, a in first.items()}
    second = assign(tasks, [MemberSpec("a", "p1", held["a"]), MemberSpec("b", "p2", held["b"]),
                            MemberSpec("c", "p3")], 0)
    assert sorted(len(active(a)) for a in second.values()) == [2, 2, 3]
    assert active(second["a"]) <= active(first["a"])
    assert active(second["b"]) <= active(first["b"])


def test_every_instance_gets_some_of_every_subtopology():
    """Kafka Streams' stages are subtopologies: a second instance joining a first that
    runs all six tasks takes half of each stage, not one whole stage (which would leave
    the first with none of the other's work)."""
    tasks = {"0": 3, "1": 3}
    alone = assign(tasks, [MemberSpec("a", "p1")], 0)
    held = {s: set(ps) for s, ps in alone["a"].active.items()}
    both = assign(tasks, [MemberSpec("a", "p1", held), MemberSpec("b", "p2")], 0)
    for member in ("a", "b"):
        assert set(both[member].active) == {"0", "1"}, both
    fresh = assign(tasks, [MemberSpec("a", "p1"), MemberSpec("b", "p2")], 0)
    assert all(set(a.active) == {"0", "1"} for a in fresh.values()), fresh


def test_standbys_go_to_other_instances_than_the_active():
    tasks = {"0": 3}
    out = assign(tasks, [MemberSpec("a1", "A"), MemberSpec("a2", "A"), MemberSpec("b1", "B")],
                 1)
    process = {"a1": "A", "a2": "A", "b1": "B"}
    for member, a in out.items():
        for s, ps in a.standby.items():
            for p in ps:
                owner = next(m for m, x in out.items() if p in x.active.get(s, ()))
                assert process[owner] != process[member], (member, owner, p)
    # One instance only: no standby anywhere (it would be useless).
    alone = assign(tasks, [MemberSpec("a1", "A"), MemberSpec("a2", "A")], 1)
    assert all(not a.standby for a in alone.values())


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from("abc"), st.integers(0, 6), max_size=3),
       st.lists(st.sampled_from(["p1", "p2", "p3"]), min_size=1, max_size=6))
def test_every_task_has_exactly_one_owner_and_loads_differ_by_at_most_one(tasks, processes):
    members = [MemberSpec(f"m{i}", p) for i, p in enumerate(processes)]
    out = assign(tasks, members, 1)
    owners: dict[tuple[str, int], int] = {}
    for a in out.values():
        for task in active(a):
            owners[task] = owners.get(task, 0) + 1
    assert owners == {(s, p): 1 for s, n in tasks.items() for p in range(n)}
    loads = [len(active(a)) for a in out.values()]
    assert max(loads) - min(loads) <= 1
