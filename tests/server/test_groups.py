"""Consumer groups on the wire: the group APIs at the versions clients send, the internal
topic ``__consumer_offsets`` as clients see it, and group state across restarts."""

from __future__ import annotations

import asyncio
import struct
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.aio import AsyncBrokerConnection
from odradek.client.wire import WireClient
from odradek.coordinator import OFFSETS_TOPIC, partition_for
from odradek.testing import running_broker
from tests.server.memory_cluster import MemoryCluster, with_cluster

FAST = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 100}


def subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


def code(value) -> int:
    return int(getattr(value, "value", value))


def create_topic(c: WireClient, name: str, partitions: int) -> None:
    answer = c.request(19, 5, {"topics": [{"name": name, "num_partitions": partitions,
                                           "replication_factor": 1}], "timeout": 5000})
    assert code(answer.topics[0].error_code) == 0


def join(c: WireClient, version: int, group: str, member_id: str = "", **extra) -> object:
    return c.request(11, version, {
        "group_id": group, "session_timeout": 10_000, "rebalance_timeout": 10_000,
        "member_id": member_id, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription("t")}], **extra})


def test_a_member_joins_syncs_commits_and_leaves_over_the_wire():
    with running_broker(**FAST) as node, WireClient(node.port) as c:
        create_topic(c, "t", 2)
        # JoinGroup v4+ (KIP-394): first an id, then the join with it.
        first = join(c, 5, "g")
        assert code(first.error_code) == ErrorCode.member_id_required and first.member_id
        joined = join(c, 5, "g", first.member_id)
        assert code(joined.error_code) == 0
        assert joined.leader == joined.member_id == first.member_id
        assert joined.generation_id == 1 and joined.protocol_name == "range"
        assert [m.member_id for m in joined.members] == [joined.member_id]
        member, generation = joined.member_id, joined.generation_id

        synced = c.request(14, 3, {"group_id": "g", "generation_id": generation,
                                   "member_id": member, "assignments": [
                                       {"member_id": member, "assignment": b"mine"}]})
        assert code(synced.error_code) == 0 and synced.assignment == b"mine"
        beat = c.request(12, 3, {"group_id": "g", "generation_id": generation,
                                 "member_id": member})
        assert code(beat.error_code) == 0

        committed = c.request(8, 8, {
            "group_id": "g", "generation_id_or_member_epoch": generation, "member_id": member,
            "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": -1,
                 "committed_metadata": "meta"},
                {"partition_index": 7, "committed_offset": 1, "committed_leader_epoch": -1,
                 "committed_metadata": None}]}]})
        errors = {p.partition_index: code(p.error_code) for p in committed.topics[0].partitions}
        assert errors == {0: 0, 7: ErrorCode.unknown_topic_or_partition}

        # v8+: several groups per request; a group without offsets answers -1.
        fetched = c.request(9, 8, {"groups": [
            {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}]},
            {"group_id": "other", "topics": None}], "require_stable": False})
        g, other = fetched.groups
        assert [(p.partition_index, p.committed_offset, p.metadata)
                for p in g.topics[0].partitions] == [(0, 42, "meta"), (1, -1, "")]
        assert other.topics == ()
        # v3: the group's every offset (topics null).
        every = c.request(9, 3, {"group_id": "g", "topics": None})
        assert [(t.name, [p.committed_offset for p in t.partitions]) for t in every.topics] == [
            ("t", [42])]

        described = c.request(15, 5, {"groups": ["g"], "include_authorized_operations": False})
        [d] = described.groups
        assert (d.group_state, d.protocol_type, d.protocol_data) == ("Stable", "consumer",
                                                                     "range")
        [m] = d.members
        assert m.member_assignment == b"mine" and m.client_host == "/127.0.0.1"
        listed = c.request(16, 4, {"states_filter": ["stable"]})
        assert [(x.group_id, x.group_state) for x in listed.groups] == [("g", "Stable")]
        assert code(c.request(42, 2, {"groups_names": ["g"]}).results[0].error_code) == (
            ErrorCode.non_empty_group)

        left = c.request(13, 1, {"group_id": "g", "member_id": member})
        assert code(left.error_code) == 0
        assert code(c.request(13, 1, {"group_id": "g", "member_id": member}).error_code) == (
            ErrorCode.unknown_member_id)
        assert [x.group_state for x in c.request(16, 4, {}).groups] == ["Empty"]
        deleted = c.request(42, 1, {"groups_names": ["g"]})
        assert code(deleted.results[0].error_code) == 0
        assert c.request(16, 0, {}).groups == ()
        # DescribeGroups v6 (KIP-1043) says the group is gone; before, it is Dead.
        assert code(c.request(15, 6, {"groups": ["g"]}).groups[0].error_code) == 69
        assert c.request(15, 5, {"groups": ["g"]}).groups[0].group_state == "Dead"


def test_join_group_versions_before_kip_394_join_at_once():
    with running_broker(**FAST) as node, WireClient(node.port) as c:
        for version in (0, 1, 2, 3):
            answer = join(c, version, f"g{version}")
            assert code(answer.error_code) == 0, version
            assert answer.member_id.startswith("wire-test-")


def test_committed_offsets_and_groups_survive_a_restart(tmp_path):
    data = str(tmp_path / "data")
    with running_broker(data, **FAST) as node, WireClient(node.port) as c:
        create_topic(c, "t", 1)
        member = join(c, 5, "g").member_id
        generation = join(c, 5, "g", member).generation_id
        c.request(14, 3, {"group_id": "g", "generation_id": generation, "member_id": member,
                          "assignments": [{"member_id": member, "assignment": b"a"}]})
        c.request(8, 8, {"group_id": "g", "generation_id_or_member_epoch": generation,
                         "member_id": member, "topics": [{"name": "t", "partitions": [
                             {"partition_index": 0, "committed_offset": 7}]}]})
        # The records went where Kafka would put them.
        stored = node.broker.logs.get_log(OFFSETS_TOPIC, partition_for("g", 4))
        assert stored.log_end_offset >= 2
    with running_broker(data, **FAST) as node, WireClient(node.port) as c:
        fetched = c.request(9, 5, {"group_id": "g", "topics": None})
        assert [p.committed_offset for p in fetched.topics[0].partitions] == [7]
        [d] = c.request(15, 5, {"groups": ["g"]}).groups
        # The member is back with a fresh session (it may still be alive).
        assert d.group_state == "Stable" and [m.member_id for m in d.members] == [member]
        beat = c.request(12, 3, {"group_id": "g", "generation_id": generation,
                                 "member_id": member})
        assert code(beat.error_code) == 0


def test_clients_cannot_write_or_delete_the_offsets_topic():
    with running_broker() as node, WireClient(node.port) as c:
        meta = c.request(3, 9, {"topics": [{"name": OFFSETS_TOPIC}]})
        [topic] = meta.topics
        assert topic.is_internal and len(topic.partitions) == 4
        from odradek.records.builder import build_simple

        produced = c.request(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [
            {"name": OFFSETS_TOPIC, "partition_data": [
                {"index": 0, "records": build_simple([b"x"], keys=[b"k"])}]}]})
        assert code(produced.responses[0].partition_responses[0].error_code) == (
            ErrorCode.invalid_topic_exception)
        deleted = c.request(20, 4, {"topic_names": [OFFSETS_TOPIC], "timeout": 5000})
        assert code(deleted.responses[0].error_code) == ErrorCode.invalid_topic_exception
        grown = c.request(37, 1, {"topics": [{"name": OFFSETS_TOPIC, "count": 8,
                                              "assignments": None}], "timeout": 5000,
                                  "validate_only": False})
        assert code(grown.results[0].error_code) == ErrorCode.invalid_topic_exception
        created = c.request(19, 5, {"topics": [{"name": OFFSETS_TOPIC, "num_partitions": 1,
                                                "replication_factor": 1}], "timeout": 5000})
        assert code(created.topics[0].error_code) == ErrorCode.topic_already_exists
        # Reading it is allowed (tools that inspect group state do).
        assert node.broker.get_log(OFFSETS_TOPIC, 0).log_end_offset == 0


def test_stopping_broker_answers_a_waiting_join_at_once():
    """A JoinGroup parked for a rebalance must not hold the broker's shutdown up."""
    settings = {"group.initial.rebalance.delay.ms": 60_000}
    answers = []
    with running_broker(**settings) as node:
        c = WireClient(node.port, timeout=30)

        def parked_join():
            answers.append(join(c, 3, "slow"))

        waiter = threading.Thread(target=parked_join)
        waiter.start()
        with WireClient(node.port) as admin:  # wait until the join is parked
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and [
                    g.group_state for g in admin.request(16, 4, {}).groups] != [
                    "PreparingRebalance"]:
                time.sleep(0.02)
        started = time.monotonic()
    stopped_in = time.monotonic() - started
    waiter.join(10)
    c.close()
    assert stopped_in < 5
    assert [code(a.error_code) for a in answers] == [ErrorCode.not_coordinator]


@pytest.mark.parametrize(("api", "low", "high"), [
    (11, 0, 9), (14, 0, 5), (12, 0, 4), (13, 0, 5), (8, 2, 10), (9, 1, 10), (16, 0, 5),
    (15, 0, 6), (42, 0, 3), (47, 0, 0)])
def test_group_apis_are_advertised(api, low, high):
    with running_broker() as node, WireClient(node.port) as c:
        versions = {k.api_key: (k.min_version, k.max_version)
                    for k in c.request(18, 3, {"client_software_name": "t",
                                               "client_software_version": "1"}).api_keys}
        assert versions[api] == (low, high)


def test_delete_groups_v3_answers_an_error_message_per_group():
    """DeleteGroups v3 (Kafka 4.4; Odradek's schema, as kio 0.6.5 stops at v2): each
    result carries error_message, null for a group's own outcome as in Kafka 4.4 (its
    group coordinator sets only the code; a message comes only with a coordinator's
    failure)."""
    with running_broker(**FAST) as node, WireClient(node.port) as c:
        create_topic(c, "t", 1)
        first = join(c, 5, "busy")
        assert code(join(c, 5, "busy", first.member_id).error_code) == 0
        committed = c.request(8, 2, {
            "group_id": "idle", "generation_id_or_member_epoch": -1, "member_id": "",
            "retention_time": -1, "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}]})
        assert code(committed.topics[0].partitions[0].error_code) == 0
        deleted = c.request(42, 3, {"groups_names": ["idle", "busy", "never"]})
        assert [(x.group_id, code(x.error_code), x.error_message) for x in deleted.results] == [
            ("idle", 0, None), ("busy", ErrorCode.non_empty_group, None),
            ("never", ErrorCode.group_id_not_found, None)]


def _commit_v10(c: WireClient, group: str, topics: list) -> dict:
    """OffsetCommit v10 (topics by id): each partition's error by (topic id, index)."""
    answer = c.request(8, 10, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [
            {"topic_id": topic_id, "partitions": [
                {"partition_index": p, "committed_offset": 10 + p,
                 "committed_leader_epoch": -1, "committed_metadata": ""} for p in parts]}
            for topic_id, parts in topics]})
    return {(t.topic_id, p.partition_index): code(p.error_code)
            for t in answer.topics for p in t.partitions}


def _fetch_v10(c: WireClient, group: str, topics: list | None) -> dict:
    """OffsetFetch v10: (offset, error) by (topic id, index)."""
    answer = c.request(9, 10, {"groups": [{
        "group_id": group, "member_id": None, "member_epoch": -1,
        "topics": None if topics is None else [
            {"topic_id": t, "partition_indexes": parts} for t, parts in topics]}],
        "require_stable": False})
    (g,) = answer.groups
    return {(t.topic_id, p.partition_index): (p.committed_offset, code(p.error_code))
            for t in g.topics for p in t.partitions}


def test_offsets_are_committed_and_fetched_by_topic_id_and_go_with_their_topic():
    """OffsetCommit and OffsetFetch v10 (KIP-848 consumers name topics by id); a deleted
    topic's offsets go with it, so the topic made again under its name starts without
    any (Kafka's onPartitionsDeleted)."""
    with running_broker(**FAST) as node, WireClient(node.port) as c:
        create_topic(c, "t", 2)
        (t,) = c.request(3, 12, {"topics": [{"name": "t", "topic_id": None}],
                                 "allow_auto_topic_creation": False,
                                 "include_topic_authorized_operations": False}).topics
        stranger = uuid.uuid4()
        assert _commit_v10(c, "by-id", [(t.topic_id, [0, 1, 5]), (stranger, [0])]) == {
            (t.topic_id, 0): 0, (t.topic_id, 1): 0,
            (t.topic_id, 5): ErrorCode.unknown_topic_or_partition,
            (stranger, 0): ErrorCode.unknown_topic_id}
        assert _fetch_v10(c, "by-id", [(t.topic_id, [0, 1]), (stranger, [0])]) == {
            (t.topic_id, 0): (10, 0), (t.topic_id, 1): (11, 0),
            (stranger, 0): (-1, ErrorCode.unknown_topic_id)}
        assert _fetch_v10(c, "by-id", None) == {(t.topic_id, 0): (10, 0),
                                                (t.topic_id, 1): (11, 0)}
        # The same offsets by name, at v9.
        named = c.request(9, 9, {"groups": [{"group_id": "by-id", "member_id": None,
                                             "member_epoch": -1, "topics": None}],
                                 "require_stable": False})
        assert [(t.name, p.committed_offset) for t in named.groups[0].topics
                for p in t.partitions] == [("t", 10), ("t", 11)]

        deleted = c.request(20, 6, {"topics": [{"name": "t", "topic_id": None}],
                                    "timeout": 10_000})
        assert code(deleted.responses[0].error_code) == 0
        create_topic(c, "t", 2)
        fresh = c.request(9, 9, {"groups": [{"group_id": "by-id", "member_id": None,
                                             "member_epoch": -1, "topics": [
                                                 {"name": "t", "partition_indexes": [0]}]}],
                                 "require_stable": False})
        assert fresh.groups[0].topics[0].partitions[0].committed_offset == -1
        assert _fetch_v10(c, "by-id", [(t.topic_id, [0])]) == {
            (t.topic_id, 0): (-1, ErrorCode.unknown_topic_id)}  # the old id is unknown


def test_offsets_of_an_empty_group_can_be_deleted_and_listing_filters_by_type():
    with running_broker(**FAST) as node, WireClient(node.port) as c:
        create_topic(c, "t", 2)
        # A commit from outside group management (generation -1), as tools make; v2 with
        # a retention time of its own (KIP-211 removed it from v5).
        committed = c.request(8, 2, {
            "group_id": "tool", "generation_id_or_member_epoch": -1, "member_id": "",
            "retention_time": 60_000, "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 3, "committed_metadata": ""},
                {"partition_index": 1, "committed_offset": 4, "committed_metadata": ""}]}]})
        assert [code(p.error_code) for p in committed.topics[0].partitions] == [0, 0]
        # ListGroups v5 (KIP-848's type filter): every group here is a classic group.
        assert [g.group_type for g in c.request(16, 5, {"types_filter": ["Classic"]}).groups
                ] == ["classic"]
        assert c.request(16, 5, {"types_filter": ["consumer"]}).groups == ()

        deleted = c.request(47, 0, {"group_id": "tool", "topics": [
            {"name": "t", "partitions": [{"partition_index": 0}]}]})
        assert code(deleted.error_code) == 0
        assert [code(p.error_code) for p in deleted.topics[0].partitions] == [0]
        left = c.request(9, 5, {"group_id": "tool", "topics": None})
        assert [(p.partition_index, p.committed_offset) for p in left.topics[0].partitions] == [
            (1, 4)]
        assert code(c.request(47, 0, {"group_id": "nobody", "topics": []}).error_code) == 69


def test_an_admin_removes_a_static_member_by_its_instance_id():
    with running_broker(**FAST) as node, WireClient(node.port) as c:
        joined = join(c, 5, "static", group_instance_id="host-1")
        assert code(joined.error_code) == 0  # static members join at once (no KIP-394 step)
        assert joined.member_id.startswith("host-1-")
        # LeaveGroup v3+ (KIP-345): a batch, by instance id with member id "".
        left = c.request(13, 4, {"group_id": "static", "members": [
            {"member_id": "", "group_instance_id": "host-1"},
            {"member_id": "", "group_instance_id": "host-2"}]})
        assert code(left.error_code) == 0
        assert [(m.group_instance_id, code(m.error_code)) for m in left.members] == [
            ("host-1", 0), ("host-2", ErrorCode.unknown_member_id)]
        [d] = c.request(15, 5, {"groups": ["static"]}).groups
        assert d.group_state == "Empty" and d.members == ()


def test_a_member_that_stops_heartbeating_is_removed_when_its_session_ends():
    """The runtime's timer fires the coordinator's session deadline on its own."""
    with running_broker(**FAST) as node, WireClient(node.port) as c:
        answer = c.request(11, 3, {
            "group_id": "quiet", "session_timeout": 300, "rebalance_timeout": 300,
            "member_id": "", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription("t")}]})
        assert code(answer.error_code) == 0
        c.request(14, 3, {"group_id": "quiet", "generation_id": answer.generation_id,
                          "member_id": answer.member_id, "assignments": []})

        def state() -> str:
            return c.request(15, 5, {"groups": ["quiet"]}).groups[0].group_state

        deadline = time.monotonic() + 10
        while state() != "Empty" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert state() == "Empty"
        beat = c.request(12, 3, {"group_id": "quiet", "generation_id": answer.generation_id,
                                 "member_id": answer.member_id})
        assert code(beat.error_code) == ErrorCode.unknown_member_id


def test_a_failed_append_answers_coordinator_not_available(monkeypatch):
    """Decide, then act: if the group's records cannot be stored, nobody is told they
    were."""
    from odradek.server.coordinators.groups import GroupRuntime

    def broken(self, fx):
        raise OSError("disk on fire")

    with running_broker(**FAST) as node, WireClient(node.port) as c:
        create_topic(c, "t", 1)
        monkeypatch.setattr(GroupRuntime, "_append", broken)
        committed = c.request(8, 5, {
            "group_id": "unlucky", "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 3, "committed_metadata": ""}]}]})
        assert [code(p.error_code) for p in committed.topics[0].partitions] == [15]
        monkeypatch.undo()


def test_compacted_offsets_topic_replays_to_the_latest_state(tmp_path):
    """Compaction keeps the last record per key (and tombstones): replaying what is left
    gives the same groups and offsets as replaying everything."""
    data = str(tmp_path / "data")
    settings = dict(FAST, **{"offsets.topic.num.partitions": 1,
                             "offsets.topic.segment.bytes": 2048})
    with running_broker(data, **settings) as node, WireClient(node.port) as c:
        create_topic(c, "t", 2)
        for i in range(200):
            c.request(8, 5, {"group_id": "busy" if i % 2 else "gone",
                             "generation_id_or_member_epoch": -1, "member_id": "",
                             "topics": [{"name": "t", "partitions": [
                                 {"partition_index": p, "committed_offset": i + p,
                                  "committed_metadata": ""} for p in (0, 1)]}]})
        assert code(c.request(42, 2, {"groups_names": ["gone"]}).results[0].error_code) == 0
        log = node.broker.logs.get_log(OFFSETS_TOPIC, 0)
        before = log.size_bytes
        node.broker.logs.clean()
        assert log.size_bytes < before / 4
    with running_broker(data, **settings) as node, WireClient(node.port) as c:
        fetched = c.request(9, 5, {"group_id": "busy", "topics": None})
        assert [(p.partition_index, p.committed_offset)
                for p in fetched.topics[0].partitions] == [(0, 199), (1, 200)]
        assert [g.group_id for g in c.request(16, 4, {}).groups] == ["busy"]


def test_a_consumer_carries_on_through_a_broker_restart(tmp_path):
    """The group is replayed with its members, who get a fresh session: a consumer that
    reconnects carries on as the same member of a Stable group, reading from where it
    was."""

    from confluent_kafka import Consumer, Producer

    from odradek.devcluster import free_port
    from odradek.server.config import load_config
    from odradek.server.run import BrokerThread

    port = free_port()
    config = load_config(listen=f"127.0.0.1:{port}", data_dir=str(tmp_path / "data"),
                         overrides=dict(FAST, **{"offsets.topic.num.partitions": 2}),
                         environ={})
    bootstrap = f"127.0.0.1:{port}"

    def read(c, count):
        got = []
        deadline = time.monotonic() + 20
        while len(got) < count and time.monotonic() < deadline:
            msg = c.poll(0.1)
            if msg is not None and not msg.error():
                got.append(msg.value())
        return got

    def produce(values):
        p = Producer({"bootstrap.servers": bootstrap})
        for v in values:
            p.produce("t", value=v)
        assert p.flush(10) == 0

    def describe():
        with WireClient(port) as c:
            [d] = c.request(15, 5, {"groups": ["steady"]}).groups
            return d.group_state, [m.member_id for m in d.members]

    broker = BrokerThread(config)
    broker.start()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "steady",
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 200, "log_level": 0})
    try:
        with WireClient(port) as c:
            create_topic(c, "t", 1)
        produce([b"a", b"b"])
        consumer.subscribe(["t"])
        assert read(consumer, 2) == [b"a", b"b"]
        before = describe()
        broker.stop()
        broker = BrokerThread(config)
        broker.start()
        produce([b"c"])
        assert read(consumer, 1) == [b"c"]
        time.sleep(0.5)  # a few heartbeats against the restarted broker
        assert describe() == before == ("Stable", before[1])
    finally:
        consumer.close()
        broker.stop()


async def _offsets_go_with_a_topic_deleted_elsewhere(cluster: MemoryCluster) -> None:
    await cluster.create_topic("gone", replication_factor=1)
    brokers = cluster.brokers
    versions = {8: (9, 9), 10: (4, 4)}

    async def until_answered(node: int, api_key: int, body: dict, error: Callable) -> Any:
        """Ask ``node`` until the coordinator is there (the offsets topic is made at the
        first FindCoordinator, its coordinators loaded after)."""
        conn = await AsyncBrokerConnection.open(*cluster.address(node), client_id="test",
                                                timeout_s=30, versions=versions)
        try:
            for _ in range(200):
                answer = await conn.request(api_key, body)
                if code(error(answer)) == 0:
                    return answer
                await asyncio.sleep(0.05)
        finally:
            await conn.close()
        raise AssertionError(f"no answer without an error from broker {node}: {answer}")

    found = await until_answered(1, 10, {"key_type": 0, "coordinator_keys": ["g"]},
                                 lambda a: a.coordinators[0].error_code)
    coordinator = found.coordinators[0].node_id
    await until_answered(coordinator, 8, {
        "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": "gone", "partitions": [
            {"partition_index": 0, "committed_offset": 7, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]}, lambda a: a.topics[0].partitions[0].error_code)
    group = brokers[coordinator].groups
    assert group is not None
    assert group.coordinator_for("g").fetch_offsets("g", None).partitions
    # Deleted through another broker: the coordinator hears of it from the metadata.
    other = next(n for n in brokers if n != coordinator)
    await brokers[other].topology.delete_topic("gone")
    await cluster.wait_for(
        lambda: not group.coordinator_for("g").fetch_offsets("g", None).partitions,
        "the deleted topic's offsets to go")


def test_a_topic_deleted_through_any_broker_takes_its_offsets_from_every_group(tmp_path):
    asyncio.run(with_cluster(tmp_path, _offsets_go_with_a_topic_deleted_elsewhere))
