"""KIP-1331's topology descriptions on the coordinator (no network): when a heartbeat
asks for the description (the plugin configured, nothing stored for the topology's
epoch, backed off per group as Kafka's StreamsGroupTopologyDescriptionBackoff), what a
push is checked for and records, what describe returns, and that a deleted group's
description goes with it. Over the wire and against Kafka 4.4: tests/server/
test_streams_groups.py, tests/oracle/test_topology_descriptions.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from odradek.coordinator import offsets_topic as ot
from odradek.coordinator import streams_descriptions as sd
from odradek.coordinator import streams_records as sr
from odradek.coordinator.streams_state import StreamsSettings
from odradek.protocol.extra_schemas import load_request_schema
from odradek.protocol.messages import build
from tests.coordinator.harness import Harness
from tests.coordinator.replay import replay

TOPOLOGY = {"epoch": 1, "subtopologies": [
    {"subtopology_id": "0", "source_topics": ["in"], "source_topic_regex": [],
     "state_changelog_topics": [], "repartition_sink_topics": [],
     "repartition_source_topics": [], "copartition_groups": []}]}
NODE = {"name": "src", "node_type": 1, "source_topics": ["in"], "sink_topic": None,
        "stores": [], "successors": []}
DESCRIPTION = {"subtopologies": [{"subtopology_id": "0", "nodes": [NODE]}],
               "global_stores": []}


def harness(plugin: bool = True) -> Harness:
    h = Harness(streams_settings=StreamsSettings(
        topology_description_plugin=sd.IN_MEMORY_PLUGIN if plugin else ""))
    h.coordinator.streams_topics = {"in": 2}
    return h


def heartbeat(h: Harness, member: str, epoch: int, version: int = 1) -> Any:
    joining = epoch == 0
    body = build(load_request_schema(88, version), {
        "group_id": "g", "member_id": member, "member_epoch": epoch,
        "endpoint_information_epoch": 0, "rebalance_timeout": 30_000 if joining else -1,
        "topology": TOPOLOGY if joining else None, "active_tasks": [] if joining else None,
        "standby_tasks": [] if joining else None, "warmup_tasks": [] if joining else None,
        "process_id": "p" if joining else None, "client_tags": [] if joining else None})
    token = h.token("hb")
    h.apply(h.coordinator.streams_heartbeat(body, topics={"in": 2}, token=token,
                                            now_ms=h.now, api_version=version))
    return h.answer(token)


def push(h: Harness, member: str, **changes: Any) -> tuple[int, str | None]:
    body = build(load_request_schema(93, 0), {
        "group_id": "g", "member_id": member, "topology_epoch": 1,
        "topology_description": DESCRIPTION, **changes})
    token = h.token("push")
    h.apply(h.coordinator.streams_topology_description_update(body, token=token,
                                                              now_ms=h.now))
    return h.answer(token)


def described(h: Harness) -> Any:
    [d] = h.coordinator.streams_group_describe(["g"], include_description=True)
    return d


def metadata_records(h: Harness) -> list[sr.GroupMetadata]:
    key = ot.encode_consumer_group_key(ot.STREAMS_GROUP_METADATA_KEY, "g")
    return [sr.decode_group_metadata(r.value) for r in h.records
            if r.key == key and r.value is not None]


def test_the_first_v1_heartbeat_asks_then_the_back_off_holds_until_it_has_passed():
    h = harness()
    joined = heartbeat(h, "m", 0)
    assert joined.topology_description_required
    epoch = joined.member_epoch
    assert not heartbeat(h, "m", epoch).topology_description_required
    h.advance(36_001)  # past 30 s and its most jitter (+20 %)
    assert heartbeat(h, "m", epoch).topology_description_required
    h.advance(36_001)  # the second wait is twice as long: 48-72 s
    assert not heartbeat(h, "m", epoch).topology_description_required


def test_v0_heartbeats_and_brokers_without_the_plugin_never_ask():
    assert not heartbeat(harness(), "m", 0, version=0).topology_description_required
    assert not heartbeat(harness(plugin=False), "m", 0).topology_description_required


def test_a_push_is_checked_stored_recorded_and_described():
    h = harness()
    epoch = heartbeat(h, "m", 0).member_epoch
    assert described(h).description_status == sd.NOT_STORED
    assert push(h, "m", group_id="other") == (69, "Group other not found.")
    assert push(h, "x") == (25, "Member x is not a member of group g.")
    assert push(h, "m", topology_epoch=0) == (42, (
        "Topology epoch 0 does not match the group's current topology epoch 1."))
    assert push(h, "m", topology_description={"subtopologies": [], "global_stores": [
        {"source": NODE, "processor": NODE}]}) == (
        42, "Global store must be composed of a source and a processor node.")
    before = len(metadata_records(h))
    assert push(h, "m") == (0, None)
    # As Kafka: the stored epoch is marked uncertain (-2), then set.
    assert [m.stored_description_epoch for m in metadata_records(h)[before:]] == [-2, 1]
    d = described(h)
    assert d.description_status == sd.AVAILABLE
    assert d.description.subtopologies[0][1][0].source_topics == ("in",)
    # Stored: no more asking, even once the back-off has passed.
    h.advance(4_000_000)
    assert not heartbeat(h, "m", epoch).topology_description_required


def test_the_stored_epoch_is_replayed_from_the_metadata_record():
    h = harness()
    heartbeat(h, "m", 0)
    push(h, "m")
    restarted = replay(h.records, h.now, streams_settings=StreamsSettings(
        topology_description_plugin=sd.IN_MEMORY_PLUGIN))
    group = restarted.streams_groups["g"]
    assert (group.stored_description_epoch, group.failed_description_epoch) == (1, -1)


def test_a_deleted_groups_description_goes_with_it():
    h = harness()
    heartbeat(h, "m", 0)
    assert push(h, "m") == (0, None)
    heartbeat(h, "m", -1)
    assert h.delete_groups("g") == {"g": 0}
    assert "g" not in h.coordinator.streams_groups
    heartbeat(h, "m2", 0)
    # The same topology epoch again, but the plugin no longer has it.
    assert described(h).description_status == sd.NOT_STORED


def test_descriptions_convert_as_kafkas_converter_does():
    node = SimpleNamespace(name="p", node_type=2, source_topics=("ignored",),
                           sink_topic="ignored", stores=("s",), successors=("a", "a", "b"))
    [(_, [converted])] = sd.description_from_wire(SimpleNamespace(
        subtopologies=[SimpleNamespace(subtopology_id="0", nodes=[node])],
        global_stores=[])).subtopologies
    assert converted == sd.Node("p", 2, ("a", "b"), stores=("s",))
    with pytest.raises(sd.InvalidDescription, match="Unknown topology node type: 0"):
        sd.description_from_wire(SimpleNamespace(subtopologies=[SimpleNamespace(
            subtopology_id="0", nodes=[SimpleNamespace(**{**vars(node), "node_type": 0})])],
            global_stores=[]))


def test_the_back_off_doubles_per_ask_of_one_epoch_up_to_an_hour():
    backoff = sd.Backoff(rand=lambda low, high: 1.0)  # no jitter
    asks = []
    now = 0
    for _ in range(10):
        assert backoff.arm_if_not_active("g", 1, now)
        assert not backoff.arm_if_not_active("g", 1, now + 1)
        entry = backoff._entries["g"]
        asks.append(entry.next_attempt_ms - now)
        now = entry.next_attempt_ms
    assert asks == [30_000, 60_000, 120_000, 240_000, 480_000, 960_000, 1_920_000,
                    3_600_000, 3_600_000, 3_600_000]
    assert backoff.arm_if_not_active("g", 2, now - 1)  # another epoch: asks at once
    backoff.clear("g", 2)
    assert backoff.arm_if_not_active("g", 2, now)
