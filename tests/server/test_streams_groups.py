"""Streams groups (KIP-1071) over the wire, against an in-process broker, as a Kafka
Streams application speaks the protocol: the first heartbeat's topology makes the broker
create the internal topics, the tasks come once they exist, a second instance takes half
the tasks after the first gave them up (never two owners of an active task), committed
offsets are checked against member epochs, describe and list show the group, the
protocol's errors are Kafka's, and the group (written to __consumer_offsets) outlives a
restart of its broker and, in a cluster, its coordinator's broker stopping. Kafka Streams
4.4 itself runs with
``group.protocol=streams`` in tests/interop/test_kafka_streams.py."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from odradek.client.wire import WireClient
from odradek.testing import RunningBroker, running_broker
from tests.server.test_share_groups import create_topic

GROUP = "app"
PARTITIONS = 3
# events -> re-keyed (subtopology 0) -> app-rekey -> counted (subtopology 1)
TOPOLOGY = {"epoch": 1, "subtopologies": [
    {"subtopology_id": "0", "source_topics": ["events"], "source_topic_regex": [],
     "state_changelog_topics": [], "repartition_sink_topics": ["app-rekey"],
     "repartition_source_topics": [], "copartition_groups": []},
    {"subtopology_id": "1", "source_topics": [], "source_topic_regex": [],
     "state_changelog_topics": [{"name": "app-counts-changelog", "partitions": 0,
                                 "replication_factor": 0, "topic_configs": [
                                     {"key": "cleanup.policy", "value": "compact"}]}],
     "repartition_sink_topics": [],
     "repartition_source_topics": [{"name": "app-rekey", "partitions": 0,
                                    "replication_factor": 0, "topic_configs": []}],
     "copartition_groups": []},
]}
ALL_TASKS = {("0", p) for p in range(PARTITIONS)} | {("1", p) for p in range(PARTITIONS)}


@pytest.fixture()
def broker() -> Iterator[RunningBroker]:
    with running_broker(**{"group.streams.session.timeout.ms": "1500",
                           "group.streams.heartbeat.interval.ms": "500"}) as running:
        with WireClient(running.port) as client:
            create_topic(client, "events", PARTITIONS)
        yield running


def tasks(answer_tasks: Any) -> set[tuple[str, int]] | None:
    if answer_tasks is None:
        return None
    return {(t.subtopology_id, p) for t in answer_tasks for p in t.partitions}


def task_ids(held: set[tuple[str, int]]) -> list[dict[str, Any]]:
    by: dict[str, list[int]] = {}
    for s, p in sorted(held):
        by.setdefault(s, []).append(p)
    return [{"subtopology_id": s, "partitions": ps} for s, ps in by.items()]


class Instance:
    """One Streams member (a process with one thread) speaking the protocol by hand."""

    def __init__(self, port: int, process: str | None = None) -> None:
        self.client = WireClient(port)
        self.member_id = uuid.uuid4().hex
        self.process = process or uuid.uuid4().hex
        self.epoch = 0
        self.active: set[tuple[str, int]] = set()
        self.last: Any = None

    def heartbeat(self, *, epoch: int | None = None, owned: bool = True, version: int = 0,
                  **extra: Any) -> Any:
        epoch = self.epoch if epoch is None else epoch
        joining = epoch == 0
        body: dict[str, Any] = {
            "group_id": GROUP, "member_id": self.member_id, "member_epoch": epoch,
            "endpoint_information_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout": timedelta(seconds=30 if joining else -0.001),
            "topology": TOPOLOGY if joining else None,
            "active_tasks": [] if joining else (task_ids(self.active) if owned else None),
            "standby_tasks": [] if joining else None, "warmup_tasks": [] if joining else None,
            "process_id": self.process if joining else None, "user_endpoint": None,
            "client_tags": [] if joining else None, "task_offsets": None,
            "task_end_offsets": None, "shutdown_application": False, **extra}
        answer = self.client.request(88, version, body)
        self.last = answer
        if answer.error_code == 0:
            self.epoch = answer.member_epoch
            if answer.active_tasks is not None:
                self.active = tasks(answer.active_tasks) or set()
        return answer

    def close(self) -> None:
        self.client.close()


def until(what: str, check: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def join_and_run(broker: RunningBroker) -> Instance:
    """A first instance joins, the internal topics are created, it gets every task."""
    first = Instance(broker.port)
    joined = first.heartbeat()
    assert joined.error_code == 0, joined.error_message
    assert [s.status_code for s in joined.status or ()] == [3]  # MISSING_INTERNAL_TOPICS
    assert tasks(joined.active_tasks) == set()
    until("every task", lambda: first.heartbeat() and first.active == ALL_TASKS)
    return first


def test_the_first_heartbeat_creates_the_internal_topics_and_tasks_follow(broker):
    first = join_and_run(broker)
    meta = broker.broker.metadata.topics
    assert meta["app-rekey"].partitions == PARTITIONS  # sized by events, its writer
    assert meta["app-counts-changelog"].partitions == PARTITIONS
    assert broker.broker.log_config_for("app-counts-changelog").cleanup_policy == "compact"
    assert first.last.status is None
    assert first.last.heartbeat_interval == timedelta(milliseconds=500)
    # Unchanged: no task lists in the answer.
    again = first.heartbeat()
    assert again.active_tasks is None and again.member_epoch == first.epoch


def test_a_second_instance_gets_half_the_tasks_once_the_first_gave_them_up(broker):
    first = join_and_run(broker)
    second = Instance(broker.port)
    assert second.heartbeat().error_code == 0
    assert second.active == set()  # the first still holds every task
    # The first is asked to give three up (at its epoch), keeps reporting them...
    kept = first.heartbeat(owned=True)
    revoking_epoch = first.epoch
    assert len(first.active) == 3 and first.active < ALL_TASKS
    still = ALL_TASKS - first.active
    first.active = ALL_TASKS  # it has not given them up yet
    first.heartbeat()
    assert second.heartbeat().error_code == 0 and second.active == set()
    # ...until it reports it no longer owns them; then it moves on and the second
    # instance gets them.
    first.active = ALL_TASKS - still
    first.heartbeat()
    assert first.epoch > revoking_epoch, kept
    until("the released tasks", lambda: second.heartbeat() and second.active == still)
    assert first.active.isdisjoint(second.active)
    described = first.client.request(89, 0, {"group_ids": [GROUP],
                                             "include_authorized_operations": False})
    [group] = described.groups
    assert (group.error_code, group.group_state) == (0, "Stable")
    assert {s.subtopology_id for s in group.topology.subtopologies} == {"0", "1"}
    assert {m.member_id: tasks(m.assignment.active_tasks) for m in group.members} == {
        first.member_id: first.active, second.member_id: second.active}
    listed = first.client.request(16, 5, {"states_filter": [], "types_filter": []})
    assert [(g.group_id, g.group_type, g.group_state) for g in listed.groups] == [
        (GROUP, "streams", "Stable")]


def test_a_silent_instances_tasks_go_to_the_others(broker):
    first = join_and_run(broker)
    second = Instance(broker.port)
    second.heartbeat()
    # The first never heartbeats again: after its session (1.5 s) every task is the
    # second's.
    until("the silent member's tasks", lambda: second.heartbeat() and second.active == ALL_TASKS,
          timeout=30)
    gone = first.heartbeat()
    assert gone.error_code == 25  # UNKNOWN_MEMBER_ID: it must rejoin


def test_offsets_are_committed_at_the_member_epoch(broker):
    first = join_and_run(broker)

    def commit(member_id: str, epoch: int) -> int:
        answer = first.client.request(8, 9, {
            "group_id": GROUP, "generation_id_or_member_epoch": epoch,
            "member_id": member_id, "group_instance_id": None, "topics": [{
                "name": "events", "partitions": [{"partition_index": 0,
                                                  "committed_offset": 5,
                                                  "committed_leader_epoch": -1,
                                                  "committed_metadata": None}]}]})
        return answer.topics[0].partitions[0].error_code.value

    assert commit(first.member_id, first.epoch) == 0
    assert commit(first.member_id, first.epoch - 1) == 113  # STALE_MEMBER_EPOCH
    assert commit("stranger", first.epoch) == 25  # UNKNOWN_MEMBER_ID
    assert commit("", -1) == 25  # not from outside while the group has members
    fetched = first.client.request(9, 9, {"groups": [{
        "group_id": GROUP, "member_id": first.member_id, "member_epoch": first.epoch,
        "topics": [{"name": "events", "partition_indexes": [0]}]}],
        "require_stable": False})
    assert fetched.groups[0].topics[0].partitions[0].committed_offset == 5


def test_the_protocols_errors(broker):
    first = join_and_run(broker)
    stranger = Instance(broker.port)
    assert stranger.heartbeat(epoch=3).error_code == 25  # UNKNOWN_MEMBER_ID
    fenced = first.heartbeat(epoch=first.epoch + 5)
    assert fenced.error_code == 110  # FENCED_MEMBER_EPOCH
    no_topology = Instance(broker.port).heartbeat(topology=None)
    assert (no_topology.error_code, no_topology.error_message) == (
        42, "Topology must be non-null when joining the group.")  # INVALID_REQUEST
    # As in Kafka 4.4 (the oracle tier compares), a join may leave out its process id.
    no_process = Instance(broker.port).heartbeat(process_id=None)
    assert no_process.error_code == 0, no_process.error_message
    # A consumer group's id is not a streams group's.
    with WireClient(broker.port) as client:
        consumer = client.request(68, 1, {
            "group_id": "consumers", "member_id": uuid.uuid4().hex, "member_epoch": 0,
            "instance_id": None, "rack_id": None, "rebalance_timeout": timedelta(seconds=30),
            "subscribed_topic_names": ["events"], "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": []})
        assert consumer.error_code == 0
    other = Instance(broker.port)
    answer = other.client.request(88, 0, {
        **_join_body(other), "group_id": "consumers"})
    assert (answer.error_code, answer.error_message) == (
        69, "Group consumers is not a streams group.")  # GROUP_ID_NOT_FOUND
    # Leaving: epoch -1 back; the group goes on without it.
    left = first.heartbeat(epoch=-1)
    assert (left.error_code, left.member_epoch) == (0, -1)
    [group] = first.client.request(89, 0, {"group_ids": [GROUP],
                                           "include_authorized_operations": False}).groups
    assert first.member_id not in {m.member_id for m in group.members}
    assert len(group.members) == 1  # the one that joined without a process id


def _join_body(member: Instance) -> dict[str, Any]:
    return {"group_id": GROUP, "member_id": member.member_id, "member_epoch": 0,
            "endpoint_information_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout": timedelta(seconds=30), "topology": TOPOLOGY,
            "active_tasks": [], "standby_tasks": [], "warmup_tasks": [],
            "process_id": member.process, "user_endpoint": None, "client_tags": [],
            "task_offsets": None, "task_end_offsets": None, "shutdown_application": False}


def test_streams_groups_are_off_below_streams_version_1(broker):
    with WireClient(broker.port) as client:
        down = client.request(57, 1, {"timeout": 10_000, "validate_only": False,
                                      "feature_updates": [{
                                          "feature": "streams.version",
                                          "max_version_level": 0, "upgrade_type": 2}]})
        assert down.error_code == 0, down
    answer = Instance(broker.port).heartbeat()
    assert answer.error_code == 35  # UNSUPPORTED_VERSION
    assert "streams.version" in answer.error_message


def test_the_group_outlives_a_restart_of_its_coordinator(tmp_path):
    """Its records in __consumer_offsets (Kafka's layouts): after the broker restarts, a
    member heartbeats on at its epoch with its tasks, without rejoining."""
    settings = {"group.streams.session.timeout.ms": "30000"}
    with running_broker(data_dir=str(tmp_path), **settings) as first_run:
        with WireClient(first_run.port) as client:
            create_topic(client, "events", PARTITIONS)
        member = join_and_run(first_run)
        member.close()
    with running_broker(data_dir=str(tmp_path), **settings) as second_run:
        member.client = WireClient(second_run.port)
        epoch, held = member.epoch, set(member.active)
        until("the coordinator loaded",  # COORDINATOR_LOAD_IN_PROGRESS until then
              lambda: member.heartbeat().error_code != 14)
        answer = member.last
        assert answer.error_code == 0, answer.error_message
        assert (answer.member_epoch, member.active) == (epoch, held)
        [group] = member.client.request(89, 0, {"group_ids": [GROUP],
                                                "include_authorized_operations": False}).groups
        assert (group.group_state, group.topology.epoch) == ("Stable", 1)
        assert [m.member_id for m in group.members] == [member.member_id]
        member.close()


async def _coordinator(cluster: Any) -> int:
    """The node coordinating GROUP now (FindCoordinator, asked until it names a live
    broker)."""
    from tests.server.test_share_groups_cluster import connect

    conn = await connect(cluster, next(iter(cluster.brokers)))
    try:
        for _ in range(200):
            answer = await conn.request(10, {"key_type": 0, "coordinator_keys": [GROUP]},
                                        version=4)
            c = answer.coordinators[0]
            if c.error_code == 0 and c.node_id in cluster.brokers:
                return int(c.node_id)
            await asyncio.sleep(0.05)
    finally:
        await conn.close()
    raise AssertionError("no group coordinator")


async def _group_survives_its_coordinator(cluster: Any) -> None:
    await cluster.create_topic("events", PARTITIONS, 3)
    node = await _coordinator(cluster)
    port = cluster.brokers[node].port
    member = await asyncio.to_thread(lambda: join_and_run(_Port(port)))
    epoch, held = member.epoch, set(member.active)
    member.close()
    # Its coordinator's broker goes (a controlled shutdown): another broker leads the
    # __consumer_offsets partition, replays the group and knows the member.
    await cluster.stop_broker(node)
    moved = await _coordinator(cluster)
    assert moved != node
    member.client = WireClient(cluster.brokers[moved].port)
    await asyncio.to_thread(lambda: until(  # loading / not yet the coordinator: again
        "the new coordinator", lambda: member.heartbeat().error_code not in (14, 15, 16)))
    assert member.last.error_code == 0, member.last.error_message
    assert (member.epoch, member.active) == (epoch, held)
    member.close()


class _Port:
    def __init__(self, port: int) -> None:
        self.port = port


def test_the_group_outlives_its_coordinators_broker_in_a_cluster(tmp_path):
    from tests.server.memory_cluster import with_cluster

    asyncio.run(with_cluster(tmp_path, _group_survives_its_coordinator, **{
        "group.streams.session.timeout.ms": "30000"}))


# --- KIP-1331: topology descriptions --------------------------------------------------

PLUGIN = {"group.streams.topology.description.plugin.class":
          "org.apache.kafka.server.streams.InMemoryTopologyDescriptionPlugin"}
SOURCE = {"name": "KSTREAM-SOURCE-0000000000", "node_type": 1, "source_topics": ["events"],
          "sink_topic": None, "stores": [], "successors": ["KSTREAM-SINK-0000000001"]}
SINK = {"name": "KSTREAM-SINK-0000000001", "node_type": 3, "source_topics": [],
        "sink_topic": "app-rekey", "stores": [], "successors": []}
DESCRIPTION = {"subtopologies": [{"subtopology_id": "0", "nodes": [SOURCE, SINK]}],
               "global_stores": []}


def push(member: Instance, **changes: Any) -> Any:
    return member.client.request(93, 0, {
        "group_id": GROUP, "member_id": member.member_id, "topology_epoch": 1,
        "topology_description": DESCRIPTION, **changes})


def describe_v1(client: WireClient, include: bool = True) -> Any:
    [group] = client.request(89, 1, {"group_ids": [GROUP],
                                     "include_authorized_operations": False,
                                     "include_topology_description": include}).groups
    return group


def test_without_the_plugin_no_heartbeat_asks_and_describe_finds_no_description(broker):
    """Kafka 4.4's default (no plugin configured): the v1 fields are there, the feature
    is off."""
    member = Instance(broker.port)
    joined = member.heartbeat(version=1)
    assert joined.error_code == 0, joined.error_message
    assert (joined.topology_description_required, joined.acceptable_recovery_lag) == (
        False, 10_000)
    group = describe_v1(member.client)
    assert (group.topology_description_status, group.topology_description,
            group.assignor_name) == (1, None, "sticky")  # NOT_STORED
    assert describe_v1(member.client, include=False).topology_description_status == 0
    refused = push(member)
    assert (refused.error_code, refused.error_message) == (
        35, "The broker has no streams group topology description plugin configured.")
    member.close()


def test_a_member_is_asked_for_its_description_once_and_its_push_is_described(tmp_path):
    with running_broker(data_dir=str(tmp_path), **PLUGIN) as run:
        with WireClient(run.port) as client:
            create_topic(client, "events", PARTITIONS)
        member = Instance(run.port)
        assert member.heartbeat(version=1).topology_description_required is True
        # Backed off: the next heartbeats do not ask again; v0 never does.
        assert member.heartbeat(version=1).topology_description_required is False
        assert describe_v1(member.client).topology_description_status == 1
        # Kafka's refusals.
        assert push(member, group_id="nobody").error_code == 69  # GROUP_ID_NOT_FOUND
        assert push(member, member_id="stranger").error_code == 25  # UNKNOWN_MEMBER_ID
        assert push(member, member_id="").error_message == "MemberId can't be empty."
        wrong = push(member, topology_epoch=2)
        assert (wrong.error_code, wrong.error_message) == (42, (
            "Topology epoch 2 does not match the group's current topology epoch 1."))
        bad = push(member, topology_description={
            "subtopologies": [{"subtopology_id": "0", "nodes": [{**SOURCE, "node_type": 9}]}],
            "global_stores": []})
        assert (bad.error_code, bad.error_message) == (
            42, "Unknown topology node type: 9")
        stored = push(member)
        assert (stored.error_code, stored.error_message) == (0, None)
        group = describe_v1(member.client)
        assert group.topology_description_status == 3  # AVAILABLE
        [sub] = group.topology_description.subtopologies
        assert [(n.name, n.node_type, n.sink_topic) for n in sub.nodes] == [
            (SOURCE["name"], 1, None), (SINK["name"], 3, "app-rekey")]
        assert sub.nodes[0].successors == (SINK["name"],)
        member.close()
    # The stored epoch is in the group's metadata record: after a restart the broker
    # does not ask again (and Kafka's in-memory plugin has nothing left to show).
    with running_broker(data_dir=str(tmp_path), **PLUGIN) as run:
        member.client = WireClient(run.port)
        until("the coordinator loaded",
              lambda: member.heartbeat(version=1).error_code != 14)
        assert member.last.error_code == 0, member.last.error_message
        assert member.last.topology_description_required is False
        assert describe_v1(member.client).topology_description_status == 1
        member.close()
