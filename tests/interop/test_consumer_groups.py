"""KIP-848 consumer groups with real librdkafka consumers (confluent-kafka,
``group.protocol=consumer``): the broker assigns, members reconcile by heartbeat.

What a user relies on: three members over six partitions own disjoint shares and read
every record once; a SIGKILLed member's partitions move to the others once its session
(``group.consumer.session.timeout.ms``) ends; committed offsets survive a broker
restart and the group resumes from them.
"""

from __future__ import annotations

from collections import Counter

import pytest

from .conftest import start_broker
from .test_groups import (
    WAIT,
    Member,
    all_partitions,
    create_topic,
    produce,
    read_everything,
    stable,
    wait_for,
)

pytestmark = pytest.mark.interop

SESSION_MS = 3000
BROKER_ARGS = ("--override", f"group.consumer.session.timeout.ms={SESSION_MS}",
               "--override", "group.consumer.heartbeat.interval.ms=500")


def member(bootstrap: str, group: str, topic: str, name: str, **settings) -> Member:
    return Member(bootstrap, group, [topic], name=name, protocol="consumer", **settings)


def test_three_members_share_six_partitions_and_take_over_from_a_killed_one(tmp_path):
    with start_broker(tmp_path / "data", *BROKER_ARGS) as broker:
        topic = group = "kip848-share"
        create_topic(broker.bootstrap, topic, 6)
        group_members = [member(broker.bootstrap, group, topic, f"m{i}") for i in range(3)]
        try:
            # Reconciliation goes through uneven steps; it ends with two each (uniform).
            wait_for("two partitions each", lambda: stable(group_members, topic, 6)() and all(
                len(m.assignment()) == 2 for m in group_members))

            values = produce(broker.bootstrap, topic, 6, 600)
            wait_for("every record", read_everything(group_members, values))
            counts = Counter(v for m in group_members for v in m.values())
            assert set(counts) == set(values) and set(counts.values()) == {1}
            for m in group_members:  # each read only what it owns
                read = {(r["t"], r["p"]) for r in m.records}
                assert read <= m.assignment(), m

            # A crash: no leave. After the session timeout the others take over.
            victim, survivors = group_members[0], group_members[1:]
            lost = victim.assignment()
            victim.kill()
            took = wait_for("the survivors to own everything",
                            stable(survivors, topic, 6), timeout=WAIT)
            assert took >= SESSION_MS / 1000 * 0.5, "moved before the session could end"
            assert lost <= set().union(*(m.assignment() for m in survivors))

            more = produce(broker.bootstrap, topic, 6, 300, start=600)
            wait_for("records after the crash", read_everything(survivors, more))
            assert all_partitions(topic, 6) == set().union(
                *(m.assignment() for m in survivors))
        finally:
            for m in group_members:
                if m.proc.poll() is None:
                    m.close()


def test_committed_offsets_resume_after_a_broker_restart(tmp_path):
    data = tmp_path / "data"
    topic = group = "kip848-restart"
    with start_broker(data, *BROKER_ARGS) as broker:
        create_topic(broker.bootstrap, topic, 3)
        first = produce(broker.bootstrap, topic, 3, 90)
        reader = member(broker.bootstrap, group, topic, "before")
        try:
            wait_for("the first records", read_everything([reader], first))
        finally:
            reader.close()  # commits and leaves (epoch -1)
    with start_broker(data, *BROKER_ARGS) as broker:
        second = produce(broker.bootstrap, topic, 3, 90, start=90)
        reader = member(broker.bootstrap, group, topic, "after")
        try:
            wait_for("the records produced after the restart",
                     read_everything([reader], second))
            assert not set(first) & set(reader.values()), "re-read committed records"
        finally:
            reader.close()


def test_a_restarted_static_member_gets_its_partitions_back_and_nobody_else_moves(tmp_path):
    with start_broker(tmp_path / "data", *BROKER_ARGS) as broker:
        topic = group = "kip848-static"
        create_topic(broker.bootstrap, topic, 4)
        first = member(broker.bootstrap, group, topic, "a", instance="instance-a")
        other = member(broker.bootstrap, group, topic, "b", instance="instance-b")
        again = None
        try:
            wait_for("two partitions each", lambda: stable([first, other], topic, 4)() and all(
                len(m.assignment()) == 2 for m in (first, other)))
            mine, theirs = first.assignment(), other.assignment()
            revocations = sum(e["e"] == "revoked" for e in other.events)
            first.close()  # leaves with member epoch -2: its partitions wait for it
            again = member(broker.bootstrap, group, topic, "a-again", instance="instance-a")
            wait_for("the same partitions back", lambda: again.assignment() == mine)
            assert other.assignment() == theirs
            assert sum(e["e"] == "revoked" for e in other.events) == revocations
        finally:
            for m in (first, other, again):
                if m is not None and m.proc.poll() is None:
                    m.close()


def test_a_regex_subscription_is_matched_by_the_broker_including_new_topics(tmp_path):
    with start_broker(tmp_path / "data", *BROKER_ARGS) as broker:
        create_topic(broker.bootstrap, "rx-orders", 2)
        create_topic(broker.bootstrap, "other", 1)
        reader = Member(broker.bootstrap, "kip848-regex", ["^rx-.*"], name="rx",
                        protocol="consumer")
        try:
            wait_for("the matching topic", lambda: reader.assignment() == {
                ("rx-orders", 0), ("rx-orders", 1)})
            create_topic(broker.bootstrap, "rx-payments", 1)
            wait_for("the new matching topic", lambda: ("rx-payments", 0) in reader.assignment())
            values = produce(broker.bootstrap, "rx-payments", 1, 10)
            wait_for("its records", read_everything([reader], values))
            assert not any(t == "other" for t, _ in reader.assignment())
        finally:
            reader.close()
