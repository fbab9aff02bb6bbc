"""KIP-848 consumer groups on the wire: ConsumerGroupHeartbeat (68) and
ConsumerGroupDescribe (69) at the versions served, topic ids resolved by Metadata,
offsets checked against member epochs, and the other group APIs' view of such a group."""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from odradek.client.wire import WireClient
from odradek.testing import running_broker

from .test_groups import code, create_topic

FAST = {"group.consumer.heartbeat.interval.ms": 200, "group.consumer.session.timeout.ms": 500}


def heartbeat(c: WireClient, version: int, member: str, epoch: int, *, group: str = "g",
              topics: list[str] | None = None, owned=..., **extra):
    if owned is ...:  # a join owns nothing (an empty list: Kafka refuses a null one)
        owned = [] if epoch == 0 else None
    return c.request(68, version, {
        "group_id": group, "member_id": member, "member_epoch": epoch,
        "instance_id": None, "rack_id": None,
        "rebalance_timeout": 30_000 if epoch == 0 else -1,
        "subscribed_topic_names": topics, "server_assignor": None,
        "topic_partitions": owned, **extra})


def assigned(response) -> dict:
    if response.assignment is None:
        return {}
    return {tp.topic_id: sorted(tp.partitions) for tp in response.assignment.topic_partitions}


def test_api_versions_advertise_both_apis():
    with running_broker() as node, WireClient(node.port) as c:
        versions = {k.api_key: (k.min_version, k.max_version)
                    for k in c.request(18, 3, {"client_software_name": "t",
                                               "client_software_version": "1"}).api_keys}
        assert versions[68] == (0, 1) and versions[69] == (0, 1)


def test_two_members_share_partitions_revoking_before_assigning():
    with running_broker(**FAST) as node, WireClient(node.port) as c:
        create_topic(c, "t", 4)
        first = heartbeat(c, 1, "m1", 0, topics=["t"], owned=[])
        assert code(first.error_code) == 0 and first.member_epoch == 1
        assert first.heartbeat_interval.total_seconds() == 0.2
        [(topic_id, parts)] = assigned(first).items()
        assert parts == [0, 1, 2, 3]
        # Metadata resolves the topic id of the assignment (how librdkafka learns the name).
        meta = c.request(3, 12, {"topics": [{"topic_id": topic_id, "name": None}],
                                 "allow_auto_topic_creation": False,
                                 "include_topic_authorized_operations": False})
        assert meta.topics[0].name == "t" and code(meta.topics[0].error_code) == 0

        second = heartbeat(c, 1, "m2", 0, topics=["t"], owned=[])
        assert second.member_epoch == 2 and assigned(second) == {}
        revoke = heartbeat(c, 1, "m1", 1, owned=[{"topic_id": topic_id,
                                                  "partitions": [0, 1, 2, 3]}])
        kept = assigned(revoke)[topic_id]
        assert revoke.member_epoch == 1 and len(kept) == 2
        done = heartbeat(c, 1, "m1", 1, owned=[{"topic_id": topic_id, "partitions": kept}])
        assert done.member_epoch == 2
        got = heartbeat(c, 1, "m2", 2, owned=[])
        assert sorted(assigned(got)[topic_id] + kept) == [0, 1, 2, 3]

        described = c.request(69, 0, {"group_ids": ["g", "none"],
                                      "include_authorized_operations": False})
        g, none = described.groups
        assert (g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name) == (
            "Stable", 2, 2, "uniform")
        assert sorted(m.member_id for m in g.members) == ["m1", "m2"]
        assert {tp.topic_name for m in g.members for tp in m.assignment.topic_partitions} == {
            "t"}
        assert code(none.error_code) == ErrorCode.group_id_not_found

        listed = c.request(16, 5, {"states_filter": [], "types_filter": ["consumer"]})
        assert [(x.group_id, x.group_type, x.group_state) for x in listed.groups] == [
            ("g", "consumer", "Stable")]
        # DescribeGroups cannot describe it, as in Kafka.
        assert code(c.request(15, 6, {"groups": ["g"]}).groups[0].error_code) == (
            ErrorCode.group_id_not_found)

        # Offsets: OffsetCommit v9 carries the member epoch; OffsetFetch v9 id and epoch.
        def commit(member: str, epoch: int) -> int:
            answer = c.request(8, 9, {
                "group_id": "g", "generation_id_or_member_epoch": epoch, "member_id": member,
                "group_instance_id": None, "topics": [{"name": "t", "partitions": [
                    {"partition_index": kept[0], "committed_offset": 5,
                     "committed_leader_epoch": -1, "committed_metadata": None}]}]})
            return code(answer.topics[0].partitions[0].error_code)

        assert commit("m1", 2) == 0
        assert commit("m1", 1) == ErrorCode.stale_member_epoch
        assert commit("m1", 3) == ErrorCode.stale_member_epoch  # a newer epoch too, as Kafka 4.4
        fetched = c.request(9, 9, {"groups": [{
            "group_id": "g", "member_id": "m1", "member_epoch": 2,
            "topics": [{"name": "t", "partition_indexes": [kept[0]]}]}],
            "require_stable": True})
        assert fetched.groups[0].topics[0].partitions[0].committed_offset == 5

        # A classic member cannot join the live group.
        joined = c.request(11, 5, {"group_id": "g", "session_timeout": 10_000,
                                   "rebalance_timeout": 10_000, "member_id": "",
                                   "protocol_type": "consumer", "protocols": [
                                       {"name": "range", "metadata": b""}]})
        assert code(joined.error_code) == ErrorCode.group_id_not_found

        left = heartbeat(c, 1, "m1", -1)
        assert code(left.error_code) == 0 and left.member_epoch == -1


def test_v0_join_is_given_a_member_id_and_v1_must_bring_one():
    with running_broker(**FAST) as node, WireClient(node.port) as c:
        create_topic(c, "t", 1)
        v0 = heartbeat(c, 0, "", 0, topics=["t"], owned=[])
        assert code(v0.error_code) == 0 and v0.member_id
        v1 = heartbeat(c, 1, "", 0, topics=["t"], owned=[])
        assert code(v1.error_code) == ErrorCode.invalid_request and v1.error_message


def test_a_silent_member_is_removed_when_its_session_ends():
    with running_broker(**FAST) as node, WireClient(node.port) as c:
        create_topic(c, "t", 2)
        heartbeat(c, 1, "quiet", 0, topics=["t"], owned=[])
        time.sleep(1.0)  # > group.consumer.session.timeout.ms (500 ms)
        gone = heartbeat(c, 1, "quiet", 1, owned=[])
        assert code(gone.error_code) == ErrorCode.unknown_member_id


def test_members_carry_on_through_a_broker_restart(tmp_path):
    data = str(tmp_path / "data")
    settings = {"group.consumer.session.timeout.ms": 30_000}
    with running_broker(data, **settings) as node, WireClient(node.port) as c:
        create_topic(c, "t", 4)
        a = heartbeat(c, 1, "a", 0, topics=["t"], owned=[])
        [(topic_id, _)] = assigned(a).items()
        heartbeat(c, 1, "b", 0, topics=["t"], owned=[])
        revoke = heartbeat(c, 1, "a", 1, owned=[{"topic_id": topic_id,
                                                 "partitions": [0, 1, 2, 3]}])
        kept = assigned(revoke)[topic_id]
        heartbeat(c, 1, "a", 1, owned=[{"topic_id": topic_id, "partitions": kept}])
        b = heartbeat(c, 1, "b", 2, owned=[])
        b_parts = assigned(b)[topic_id]
        before = c.request(69, 0, {"group_ids": ["g"], "include_authorized_operations": False})
    with running_broker(data, **settings) as node, WireClient(node.port) as c:
        # Same members, same epochs, same partitions: no rejoin needed.
        beat = heartbeat(c, 1, "b", 2, owned=[{"topic_id": topic_id, "partitions": b_parts}])
        assert code(beat.error_code) == 0 and beat.member_epoch == 2
        after = c.request(69, 0, {"group_ids": ["g"], "include_authorized_operations": False})
        view = [(g.group_epoch, g.assignment_epoch, g.group_state,
                 sorted((m.member_id, m.member_epoch,
                         [tuple(tp.partitions) for tp in m.assignment.topic_partitions])
                        for m in g.members)) for g in (before.groups[0], after.groups[0])]
        assert view[0] == view[1]
        assert [x.group_type for x in c.request(16, 5, {}).groups] == ["consumer"]


def test_new_partitions_get_a_new_target_assignment_at_once():
    with running_broker(**FAST) as node, WireClient(node.port) as c:
        create_topic(c, "t", 2)
        heartbeat(c, 1, "m", 0, topics=["t"], owned=[])
        grown = c.request(37, 1, {"topics": [{"name": "t", "count": 3, "assignments": None}],
                                  "timeout": 5000, "validate_only": False})
        assert code(grown.results[0].error_code) == 0
        # Before any heartbeat: a new group epoch and a target with the third partition.
        (g,) = c.request(69, 0, {"group_ids": ["g"],
                                 "include_authorized_operations": False}).groups
        assert (g.group_epoch, g.assignment_epoch) == (2, 2)
        (m,) = g.members
        assert [list(tp.partitions) for tp in m.target_assignment.topic_partitions] == [
            [0, 1, 2]]
        # The member gets it at its next heartbeat.
        beat = heartbeat(c, 1, "m", 1, owned=None)
        assert beat.member_epoch == 2 and sorted(
            p for tp in beat.assignment.topic_partitions for p in tp.partitions) == [0, 1, 2]
