"""KIP-1331's topology descriptions with the feature on: an Apache Kafka 4.4 and an
``odradek serve`` of their own, both with ``group.streams.topology.description.plugin.
class`` naming Kafka's InMemoryTopologyDescriptionPlugin (the shared brokers of the
other oracle sequences run with it unset, Kafka's default: seq_streams_topology_
descriptions). A v1 heartbeat asks for the description, then not again (backed off);
the pushes Kafka refuses (unknown group or member, another topology epoch, an unknown
node type, a global store that is not a source and a processor); a push; the
description in StreamsGroupDescribe v1; no more asking."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from odradek.devcluster.apache_kafka import ApacheKafka
from tests.interop.conftest import BrokerProcess, start_broker
from tests.jvm import require_jars
from tests.oracle.test_differential import (
    Recorder,
    assert_answers_as_kafka_does,
    create_topic,
    find_coordinator,
    request,
)
from tests.oracle.test_differential_more import _streams_join

pytestmark = pytest.mark.oracle

PLUGIN = ("group.streams.topology.description.plugin.class",
          "org.apache.kafka.server.streams.InMemoryTopologyDescriptionPlugin")


@pytest.fixture(scope="module")
def kafka_with_plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafka]:
    require_jars()
    kafka = ApacheKafka(tmp_path_factory.mktemp("apache-kafka-kip1331"),
                        settings=dict([PLUGIN]))
    try:
        kafka.start()
    except (RuntimeError, TimeoutError) as exc:
        pytest.fail(f"Apache Kafka did not start: {exc}")
    try:
        yield kafka
    finally:
        kafka.stop()


@pytest.fixture(scope="module")
def odradek_with_plugin(tmp_path_factory: pytest.TempPathFactory
                        ) -> Iterator[BrokerProcess]:
    with start_broker(tmp_path_factory.mktemp("odradek-kip1331"),
                      "--override", "=".join(PLUGIN)) as broker:
        yield broker


def _node(name: str, kind: int, successors: list[str], **fields: Any) -> dict[str, Any]:
    return {"name": name, "node_type": kind, "source_topics": [], "sink_topic": None,
            "stores": [], "successors": successors, **fields}


def _described(d: Any) -> Any:
    if d is None:
        return None

    def node(n: Any) -> dict[str, Any]:
        return {"name": n.name, "type": n.node_type, "sources": list(n.source_topics),
                "sink": n.sink_topic, "stores": list(n.stores),
                "successors": sorted(n.successors)}

    return {"subtopologies": [(s.subtopology_id, [node(n) for n in s.nodes])
                              for s in d.subtopologies],
            "global_stores": [(node(g.source), node(g.processor)) for g in d.global_stores]}


def seq_topology_descriptions(r: Recorder, name: str) -> None:
    source, group = f"{name}-events", f"{name}-g"
    create_topic(r.c, source, partitions=2)
    topology = {"epoch": 1, "subtopologies": [
        {"subtopology_id": "0", "source_topics": [source], "source_topic_regex": [],
         "state_changelog_topics": [], "repartition_sink_topics": [],
         "repartition_source_topics": [], "copartition_groups": []}]}
    find_coordinator(r.c, group, 0)
    member = str(uuid.UUID(int=1331))
    joined = request(r.c, 88, 1, _streams_join(name, member, topology))
    r.step("join", {"error_code": joined.error_code.name,
                    "topology_description_required": joined.topology_description_required})
    again = request(r.c, 88, 1, {**_streams_join(name, member, None, None),
                                 "member_epoch": joined.member_epoch,
                                 "rebalance_timeout": -1, "active_tasks": None,
                                 "standby_tasks": None, "warmup_tasks": None,
                                 "client_tags": None})
    r.step("heartbeat (backed off)", {
        "error_code": again.error_code.name,
        "topology_description_required": again.topology_description_required})

    def describe(label: str) -> None:
        [g] = request(r.c, 89, 1, {"group_ids": [group],
                                   "include_authorized_operations": False,
                                   "include_topology_description": True}).groups
        r.step(label, {"error_code": g.error_code.name,
                       "status": g.topology_description_status,
                       "description": _described(g.topology_description)})

    describe("describe before a push")
    description = {
        "subtopologies": [{"subtopology_id": "0", "nodes": [
            _node("KSTREAM-SOURCE-0000000000", 1, ["KSTREAM-PROCESSOR-0000000001"],
                  source_topics=[source]),
            _node("KSTREAM-PROCESSOR-0000000001", 2, ["KSTREAM-SINK-0000000002"],
                  stores=["counts"]),
            _node("KSTREAM-SINK-0000000002", 3, [], sink_topic=f"{name}-out")]}],
        "global_stores": [{"source": _node("gsrc", 1, ["gproc"], source_topics=[source]),
                           "processor": _node("gproc", 2, [], stores=["g"])}]}
    bad_node = {"subtopologies": [{"subtopology_id": "0", "nodes": [
        _node("n", 7, [])]}], "global_stores": []}
    bad_store = {"subtopologies": [], "global_stores": [{
        "source": _node("a", 2, []), "processor": _node("b", 2, [])}]}
    for label, changes in [
            ("an unknown group", {"group_id": f"{name}-none"}),
            ("an unknown member", {"member_id": str(uuid.UUID(int=1332))}),
            ("an empty group id", {"group_id": ""}),
            ("another topology epoch", {"topology_epoch": 2}),
            ("an unknown node type", {"topology_description": bad_node}),
            ("a global store of two processors", {"topology_description": bad_store}),
            ("the member's", {})]:
        pushed = request(r.c, 93, 0, {"group_id": group, "member_id": member,
                                      "topology_epoch": 1,
                                      "topology_description": description, **changes})
        r.step(f"push: {label}", {"error_code": int(pushed.error_code)})
    describe("describe after the push")
    after = request(r.c, 88, 1, {**_streams_join(name, member, None, None),
                                 "member_epoch": again.member_epoch,
                                 "rebalance_timeout": -1, "active_tasks": None,
                                 "standby_tasks": None, "warmup_tasks": None,
                                 "client_tags": None})
    r.step("heartbeat after the push", {
        "error_code": after.error_code.name,
        "topology_description_required": after.topology_description_required})


def test_topology_descriptions_as_apache_kafka_keeps_them(kafka_with_plugin,
                                                          odradek_with_plugin) -> None:
    assert_answers_as_kafka_does("topology_descriptions", seq_topology_descriptions, {},
                                 "oracle-kip1331", kafka_with_plugin, odradek_with_plugin)
