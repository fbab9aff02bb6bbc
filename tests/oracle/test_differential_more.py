"""More of Apache Kafka as the oracle (the helpers, normaliser and comparison are
test_differential.py's): DescribeConfigs of topics and a broker, OffsetCommit /
OffsetFetch errors and their high versions, KIP-848 ConsumerGroupHeartbeat and
ConsumerGroupDescribe, the newest versions of Metadata / ApiVersions / ListOffsets /
Fetch / Produce that both brokers serve, the versions Kafka 4 added to Metadata,
FindCoordinator, DescribeCluster and ListTransactions, DescribeTopicPartitions and its
cursor, share groups (KIP-932), and more admin errors (DeleteRecords beyond the
high watermark, CreateTopics validate_only with a bad config, ...).

Normalised here beyond test_differential.py's rules (each where it is done, with its
reason): configs in name order without the topic configs only Kafka has; KIP-848 member
and group epochs compared by direction only; Metadata's replica lists as counts; lists
whose order is the broker's own (ListOffsets partitions, ConsumerGroupDescribe groups,
OffsetFetch's "all topics") sorted. Differences kept are in ``KNOWN_DIFFERENCES`` below
and in docs/compatibility.md.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from odradek.client.wire import WireClient
from odradek.coordinator.share_records import kafka_uuid_string
from odradek.server.handlers import HANDLERS
from tests.oracle.test_differential import (
    Recorder,
    assert_answers_as_kafka_does,
    batch,
    create_topic,
    create_topics,
    fetch_body,
    fetched,
    find_coordinator,
    init_producer,
    list_offsets,
    metadata,
    plain,
    produce_body,
    request,
    wait_for,
)

pytestmark = pytest.mark.oracle

# --- DescribeConfigs -------------------------------------------------------------------

# Topic configs Apache Kafka 4.4 describes that Odradek does not have (tiered storage's
# copy-lag bounds, compression levels, timestamp bounds, ...): left out of the
# comparison of a topic's full config list; listed in docs/compatibility.md.
KAFKA_ONLY_TOPIC_CONFIGS = frozenset({
    "compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
    "errors.deadletterqueue.group.enable",
    "max.decompressed.message.bytes", "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms", "preallocate", "remote.copy.lag.bytes",
    "remote.copy.lag.ms", "segment.jitter.ms",
})
# Kafka 4.4 reports min.insync.replicas as a static broker config (with a default
# synonym) though the oracle's server.properties does not set it: its value is compared,
# not its source or synonyms.
SOURCE_NOT_COMPARED = frozenset({"min.insync.replicas"})
# Kafka's broker settings log.retention.ms and log.roll.ms have no default (their
# *.hours forms do, which Odradek does not have): Kafka lists no broker synonym for
# retention.ms and segment.ms, Odradek lists these with their defaults. Left out.
ODRADEK_ONLY_SYNONYMS = frozenset({"log.retention.ms", "log.roll.ms"})

# The broker settings that are the defaults of topic configs (both brokers know them).
BROKER_TOPIC_DEFAULTS = [
    "log.cleanup.policy", "compression.type", "log.retention.bytes", "log.segment.bytes",
    "message.max.bytes", "min.insync.replicas", "log.message.timestamp.type",
    "log.cleaner.delete.retention.ms", "log.cleaner.min.cleanable.ratio",
    "log.cleaner.min.compaction.lag.ms", "log.index.interval.bytes",
    "log.index.size.max.bytes", "log.segment.delete.delay.ms",
    "unclean.leader.election.enable", "num.partitions", "default.replication.factor",
    "log.local.retention.bytes", "log.local.retention.ms", "remote.log.storage.system.enable",
    "remote.log.manager.task.interval.ms", "remote.log.reader.threads",
]


def _configs(skip: frozenset[str] = frozenset()) -> Callable[[dict[str, Any]], Any]:
    """DescribeConfigs results with their configs (and synonyms) in name order, without
    the names in ``skip`` (the order is the broker's), normalised as the constants above
    say."""
    def sort(data: dict[str, Any]) -> dict[str, Any]:
        for res in data["results"]:
            res["configs"] = sorted((c for c in res["configs"] if c["name"] not in skip),
                                    key=lambda c: c["name"])
            for c in res["configs"]:
                if c["name"] in SOURCE_NOT_COMPARED:
                    c.pop("config_source")
                    c.pop("synonyms", None)
                if "synonyms" in c:
                    c["synonyms"] = sorted(
                        (y for y in c["synonyms"] if y["name"] not in ODRADEK_ONLY_SYNONYMS),
                        key=lambda y: (y["source"], y["name"]))
        return data
    return sort


def describe_configs(r: Recorder, label: str, resource_type: int, name: str,
                     keys: list[str] | None, synonyms: bool = False,
                     skip: frozenset[str] = frozenset(), **kwargs: Any) -> Any:
    return r.request(label, 32, 4, {"resources": [{
        "resource_type": resource_type, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": synonyms, "include_documentation": False},
        drop=["documentation", *kwargs.pop("drop", [])], sort=_configs(skip), **kwargs)


def set_group_config(r: Recorder, label: str, group: str, config: str, value: str) -> None:
    """Set one group config (recorded), then ask until the broker describes it: Kafka
    applies it when its broker replays the controller's record, a moment after the
    alter answers (the asking is not recorded)."""
    r.request(label, 44, 1, {"resources": [{
        "resource_type": 32, "resource_name": group, "configs": [{
            "name": config, "config_operation": 0, "value": value}]}],
        "validate_only": False})

    def described() -> bool:
        (res,) = request(r.c, 32, 4, {"resources": [{
            "resource_type": 32, "resource_name": group, "configuration_keys": [config]}],
            "include_synonyms": False, "include_documentation": False}).results
        return any(c.name == config and c.value == value for c in res.configs)
    wait_for(f"{group}'s {config}={value}", described)


def seq_describe_configs(r: Recorder, name: str) -> None:
    plain_topic, tuned = f"{name}-plain", f"{name}-tuned"
    create_topic(r.c, plain_topic)
    create_topic(r.c, tuned, configs={"retention.ms": "123456", "cleanup.policy": "compact",
                                      "max.message.bytes": "2000",
                                      "message.timestamp.type": "LogAppendTime"})
    describe_configs(r, "a topic without overrides, every config", 2, plain_topic, None,
                     skip=KAFKA_ONLY_TOPIC_CONFIGS)
    describe_configs(r, "a topic with overrides, every config", 2, tuned, None,
                     skip=KAFKA_ONLY_TOPIC_CONFIGS)
    keys = ["retention.ms", "cleanup.policy", "max.message.bytes", "message.timestamp.type",
            "segment.bytes", "min.insync.replicas", "compression.type"]
    describe_configs(r, "a topic with overrides, synonyms", 2, tuned, keys, synonyms=True)
    describe_configs(r, "a topic without overrides, synonyms", 2, plain_topic, keys,
                     synonyms=True)
    describe_configs(r, "an unknown key", 2, plain_topic, ["no.such.config"])
    describe_configs(r, "a missing topic", 2, f"{name}-missing", None)
    (broker,) = metadata(r.c, []).brokers
    # read_only: Kafka marks the broker settings it can change at run time writable;
    # Odradek changes none of these at run time and marks them read-only.
    describe_configs(r, "the broker's topic defaults", 4, str(broker.node_id),
                     BROKER_TOPIC_DEFAULTS, synonyms=True, drop=["resource_name", "read_only"])
    describe_configs(r, "a broker that is not this one", 4, "1234", ["num.partitions"])


# --- OffsetCommit / OffsetFetch --------------------------------------------------------


def classic_member(c: WireClient, group: str) -> tuple[str, int]:
    """A member of a stable classic group: (member id, generation)."""
    body = {"group_id": group, "session_timeout": 30_000, "rebalance_timeout": 30_000,
            "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}]}
    first = request(c, 11, 5, body)
    joined = request(c, 11, 5, {**body, "member_id": first.member_id})
    assert joined.error_code.value == 0, joined
    synced = request(c, 14, 3, {
        "group_id": group, "generation_id": joined.generation_id,
        "member_id": joined.member_id, "group_instance_id": None,
        "assignments": [{"member_id": joined.member_id, "assignment": b""}]})
    assert synced.error_code.value == 0, synced
    return joined.member_id, joined.generation_id


def commit_body(group: str, topics: dict[str, list[int]], *, member: str = "",
                generation: int = -1, offset: int = 1) -> dict[str, Any]:
    return {"group_id": group, "generation_id_or_member_epoch": generation,
            "member_id": member, "group_instance_id": None, "topics": [
                {"name": t, "partitions": [
                    {"partition_index": p, "committed_offset": offset,
                     "committed_leader_epoch": -1, "committed_metadata": "m"}
                    for p in parts]} for t, parts in topics.items()]}


def _by_name(data: dict[str, Any]) -> dict[str, Any]:
    """OffsetFetch topics in name order (the order of "all topics" is the broker's)."""
    for holder in [data, *data.get("groups", [])]:
        if isinstance(holder.get("topics"), list):
            holder["topics"].sort(key=lambda t: t["name"])
    return data


def seq_offsets_errors(r: Recorder, name: str) -> None:
    topic, group, lone = f"{name}-t", f"{name}-g", f"{name}-lone"
    create_topic(r.c, topic, partitions=2)
    find_coordinator(r.c, group, 0)
    find_coordinator(r.c, lone, 0)
    member, generation = classic_member(r.c, group)
    for version in (8, 9):
        v = f"v{version}"
        r.request(f"{v}: commit to a missing topic", 8, version, commit_body(
            group, {f"{name}-missing": [0]}, member=member, generation=generation))
        r.request(f"{v}: commit to a missing partition", 8, version, commit_body(
            group, {topic: [0, 5]}, member=member, generation=generation))
        r.request(f"{v}: commit with a wrong generation", 8, version, commit_body(
            group, {topic: [0]}, member=member, generation=generation + 3))
        r.request(f"{v}: commit as an unknown member", 8, version, commit_body(
            group, {topic: [0]}, member="nobody", generation=generation))
        r.request(f"{v}: commit without a member (admin)", 8, version, commit_body(
            group, {topic: [1]}))
        r.request(f"{v}: commit as the member", 8, version, commit_body(
            group, {topic: [0, 1]}, member=member, generation=generation,
            offset=version))
    r.request("v9: commit to a group that does not exist, no member", 8, 9,
              commit_body(lone, {topic: [0]}, offset=7))
    r.request("v9: commit to a group that does not exist, a member", 8, 9,
              commit_body(f"{name}-nobody", {topic: [0]}, member="m", generation=1))
    r.request("v8: commit to a group that does not exist, a member", 8, 8,
              commit_body(f"{name}-nobody", {topic: [0]}, member="m", generation=1))
    r.request("v7: commit with a wrong generation", 8, 7, commit_body(
        group, {topic: [0]}, member=member, generation=generation + 3))
    fetch_group = {"member_id": None, "member_epoch": -1}
    for version in (8, 9):
        v = f"v{version}"
        extra = fetch_group if version >= 9 else {}
        r.request(f"{v}: fetch the group's offsets, all topics", 9, version, {
            "groups": [{"group_id": group, "topics": None, **extra}],
            "require_stable": True}, sort=_by_name)
        r.request(f"{v}: fetch an unknown group, all topics", 9, version, {
            "groups": [{"group_id": f"{name}-unknown", "topics": None, **extra}],
            "require_stable": True}, sort=_by_name)
        r.request(f"{v}: fetch an unknown group, a topic", 9, version, {
            "groups": [{"group_id": f"{name}-unknown", "topics": [
                {"name": topic, "partition_indexes": [0, 1]}], **extra}],
            "require_stable": False})
        r.request(f"{v}: fetch several groups, missing topic and partition", 9, version, {
            "groups": [
                {"group_id": group, "topics": [
                    {"name": topic, "partition_indexes": [0, 7]},
                    {"name": f"{name}-missing", "partition_indexes": [0]}], **extra},
                {"group_id": lone, "topics": None, **extra}],
            "require_stable": False}, sort=_by_name)
    r.request("v9: fetch as an unknown member of a classic group", 9, 9, {
        "groups": [{"group_id": group, "topics": None, "member_id": "nobody",
                    "member_epoch": 3}], "require_stable": False}, sort=_by_name)
    r.request("v7: fetch the group's offsets, all topics", 9, 7, {
        "group_id": group, "topics": None, "require_stable": False}, sort=_by_name)
    r.request("v7: fetch an unknown group", 9, 7, {
        "group_id": f"{name}-unknown", "topics": None, "require_stable": False})
    r.request("v1: fetch an unknown group, a topic", 9, 1, {
        "group_id": f"{name}-unknown", "topics": [
            {"name": topic, "partition_indexes": [0]}]})


# --- KIP-848 ---------------------------------------------------------------------------


def heartbeat_body(group: str, member: str, epoch: int, **kwargs: Any) -> dict[str, Any]:
    return {"group_id": group, "member_id": member, "member_epoch": epoch,
            "instance_id": None, "rack_id": None, "rebalance_timeout": 30_000,
            "subscribed_topic_names": None, "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": None, **kwargs}


def _epoch(got: int, sent: int) -> Any:
    """A member epoch the coordinator answered, relative to the one sent: Kafka 4.4 bumps
    the group epoch more often than Odradek (it batches target assignments, Odradek
    computes one at once), so positive epochs are compared by their direction only."""
    if got <= 0:
        return got
    return "same" if got == sent else "higher" if got > sent else "lower"


def heartbeat(r: Recorder, label: str, body: dict[str, Any]) -> Any:
    answer = request(r.c, 68, 1, body)
    data = plain(answer)
    data["member_epoch"] = _epoch(answer.member_epoch, body["member_epoch"])
    if data["assignment"]:
        for tp in data["assignment"]["topic_partitions"]:
            tp["partitions"].sort()
    r.step(label, data)
    return answer


def _described(data: dict[str, Any]) -> dict[str, Any]:
    """ConsumerGroupDescribe with its epochs as relations (see ``_epoch``), its groups
    in id order (Kafka answers them in its coordinator shards' order)."""
    data["groups"].sort(key=lambda g: g["group_id"])
    for g in data["groups"]:
        group_epoch = g.pop("group_epoch")
        g["assignment_epoch"] = g["assignment_epoch"] == group_epoch
        for m in g["members"]:
            m["member_epoch"] = m["member_epoch"] == group_epoch
    return data


def assigned(r: Recorder, group: str, member: str, answer: Any, partitions: int) -> Any:
    """Heartbeats (not recorded) after ``answer`` until the member is assigned
    ``partitions`` partitions: {"epoch": its epoch, "owned": its topic_partitions}."""
    state: dict[str, Any] = {"epoch": answer.member_epoch, "owned": []}

    def take(a: Any) -> None:
        assert a.error_code.value == 0, a
        state["epoch"] = a.member_epoch
        if a.assignment is not None:
            state["owned"] = [{"topic_id": tp.topic_id, "partitions": list(tp.partitions)}
                              for tp in a.assignment.topic_partitions]

    def probe() -> Any:
        take(request(r.c, 68, 1, heartbeat_body(group, member, state["epoch"],
                                                topic_partitions=state["owned"])))
        got = sum(len(tp["partitions"]) for tp in state["owned"])
        return state if got == partitions else None
    take(answer)
    return wait_for(f"{member} to own {partitions} partitions", probe)


def seq_consumer_group_heartbeat(r: Recorder, name: str) -> None:
    topic, group = f"{name}-t", f"{name}-g"
    create_topic(r.c, topic, partitions=3)
    find_coordinator(r.c, group, 0)
    member = str(uuid.UUID(int=848))  # v1: the client names itself
    joined = request(r.c, 68, 1, heartbeat_body(
        group, member, 0, subscribed_topic_names=[topic], server_assignor="uniform",
        topic_partitions=[]))
    # Kafka 4.4 may answer the join with no partitions yet (its assignment comes with a
    # later heartbeat); Odradek assigns at once: only the join's error and epoch compared.
    r.step("join, subscribing to the topic", {
        "error_code": joined.error_code.name, "member_epoch": _epoch(joined.member_epoch, 0),
        "heartbeat_interval": plain(joined.heartbeat_interval)})
    state = assigned(r, group, member, joined, 3)
    epoch, owned = state["epoch"], state["owned"]
    heartbeat(r, "heartbeat owning the assignment", heartbeat_body(
        group, member, epoch, topic_partitions=owned))
    # One more assignment (a partition added), so the member has a previous epoch.
    grown = request(r.c, 37, 3, {"topics": [{"name": topic, "count": 4, "assignments": None}],
                                 "timeout": 30_000, "validate_only": False})
    assert grown.results[0].error_code.value == 0, grown
    previous = epoch
    state = assigned(r, group, member, request(r.c, 68, 1, heartbeat_body(
        group, member, epoch, topic_partitions=owned)), 4)
    epoch, owned = state["epoch"], state["owned"]
    r.step("a new epoch after a partition was added", {"moved": epoch > previous})
    heartbeat(r, "a wrong (higher) member epoch", heartbeat_body(group, member, epoch + 5))
    heartbeat(r, "the previous epoch owning a subset (a lost response)", heartbeat_body(
        group, member, previous, topic_partitions=[
            {**tp, "partitions": tp["partitions"][:1]} for tp in owned]))
    heartbeat(r, "an unknown member", heartbeat_body(group, str(uuid.UUID(int=849)), epoch))
    for label, m, e in [("the member's epoch", member, epoch),
                        ("a stale (lower) epoch", member, previous),
                        ("a higher epoch", member, epoch + 1),
                        ("an unknown member", "nobody", epoch)]:
        r.request(f"OffsetCommit v9: {label}", 8, 9, commit_body(
            group, {topic: [0]}, member=m, generation=e))
        r.request(f"OffsetFetch v9: {label}", 9, 9, {"groups": [{
            "group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
            "member_id": m, "member_epoch": e}], "require_stable": False})
    heartbeat(r, "join with an invalid regex", heartbeat_body(
        f"{name}-g2", str(uuid.UUID(int=850)), 0, subscribed_topic_regex="(unclosed",
        topic_partitions=[]))
    heartbeat(r, "join with an unknown assignor", heartbeat_body(
        f"{name}-g3", str(uuid.UUID(int=851)), 0, subscribed_topic_names=[topic],
        server_assignor="no-such-assignor", topic_partitions=[]))
    heartbeat(r, "join without a subscription", heartbeat_body(
        f"{name}-g4", str(uuid.UUID(int=852)), 0, topic_partitions=[]))
    heartbeat(r, "join owning partitions", heartbeat_body(
        f"{name}-g5", str(uuid.UUID(int=853)), 0, subscribed_topic_names=[topic],
        topic_partitions=owned))
    heartbeat(r, "join with null topic partitions", heartbeat_body(
        f"{name}-g7", str(uuid.UUID(int=854)), 0, subscribed_topic_names=[topic]))
    heartbeat(r, "v1 join without a member id", heartbeat_body(
        f"{name}-g6", "", 0, subscribed_topic_names=[topic], topic_partitions=[]))
    r.request("describe the group", 69, 1, {
        "group_ids": [group, f"{name}-unknown"], "include_authorized_operations": False},
        drop=["client_host"], sort=_described)
    heartbeat(r, "leave (epoch -1)", heartbeat_body(group, member, -1))
    r.request("describe the group after the leave", 69, 1, {
        "group_ids": [group], "include_authorized_operations": False}, sort=_described)
    heartbeat(r, "leave again", heartbeat_body(group, member, -1))


# --- the newest versions both serve ----------------------------------------------------


def _metadata(data: dict[str, Any]) -> dict[str, Any]:
    """Metadata with replica and ISR lists as counts (they hold node ids, which are the
    brokers' own) and its topics in name order (Kafka lists topics asked for by an
    unknown id first)."""
    data["topics"].sort(key=lambda t: t["name"] or "")
    for t in data["topics"]:
        for p in t["partitions"]:
            for key in ("replica_nodes", "isr_nodes", "offline_replicas"):
                p[key] = len(p[key])
    return data


def seq_newest_versions(r: Recorder, name: str) -> None:
    topic = f"{name}-t"
    create_topic(r.c, topic, partitions=2)
    (t,) = metadata(r.c, [topic]).topics
    r.request("Metadata v12: a topic, a missing one", 3, 12, {
        "topics": [{"name": topic}, {"name": f"{name}-missing"}],
        "allow_auto_topic_creation": False, "include_topic_authorized_operations": False},
        sort=_metadata)
    r.request("Metadata v12: by topic id, a known and an unknown one", 3, 12, {
        "topics": [{"topic_id": t.topic_id, "name": None},
                   {"topic_id": uuid.UUID(int=77), "name": None}],
        "allow_auto_topic_creation": False, "include_topic_authorized_operations": False},
        sort=_metadata)
    # Kafka may answer NOT_LEADER_OR_FOLLOWER just after creating a topic whose leader
    # Metadata already names: retried, as a client does.
    r.step("Produce v9: two records", wait_for("the first produce", lambda: (
        lambda a: a if a.responses[0].partition_responses[0].error_code.value == 0
        else None)(request(r.c, 0, 9, produce_body(
            topic, 0, batch([b"a", b"b"], timestamp=5_000))))))
    r.request("Produce v9: a missing topic", 0, 9, produce_body(
        f"{name}-missing", 0, batch([b"a"])))
    # Kafka answers the partitions in an order of its own: compared in index order.
    list_offsets(r, "ListOffsets v11: max timestamp", topic, {0: -3, 1: -3}, version=11,
                 sort=_by_partition_index)
    list_offsets(r, "ListOffsets v11: earliest, latest", topic, {0: -2, 1: -1}, version=11,
                 sort=_by_partition_index)
    r.step("Fetch v12 of a missing topic",
           fetched(request(r.c, 1, 12, fetch_body(f"{name}-missing", 0, 0))))


def api_versions(r: Recorder, label: str, version: int) -> Any:
    """ApiVersions: the error code, and for each API Odradek serves its minimum version
    and whether the maximum reaches Odradek's (Kafka's maxima are higher for many APIs,
    and Kafka serves APIs Odradek does not: docs/compatibility.md lists both)."""
    body = {"client_software_name": "oracle", "client_software_version": "1"}
    answer = request(r.c, 18, version, body if version >= 3 else {})
    ours = {api.key: api for api in HANDLERS.values()}
    return r.step(label, {"error_code": answer.error_code.name, "apis": {
        str(k.api_key): [k.min_version, k.max_version >= ours[k.api_key].max_version]
        for k in answer.api_keys if k.api_key in ours}})


# --- admin errors ----------------------------------------------------------------------


def seq_admin_more(r: Recorder, name: str) -> None:
    topic = f"{name}-t"
    create_topic(r.c, topic, partitions=2)
    r.request("produce 3", 0, 9, produce_body(topic, 0, batch([b"a", b"b", b"c"])))
    delete = {"topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "offset": 4}, {"partition_index": 1, "offset": 1},
        {"partition_index": 9, "offset": 0}]}], "timeout": 10_000}
    for version in (0, 2):
        r.request(f"DeleteRecords v{version} beyond the high watermark", 21, version,
                  delete, sort=_by_partition_index)
    r.request("DeleteRecords of a missing topic", 21, 2, {"topics": [{
        "name": f"{name}-missing", "partitions": [{"partition_index": 0, "offset": 0}]}],
        "timeout": 10_000})
    r.request("DeleteRecords to -1 (the high watermark)", 21, 2, {"topics": [{
        "name": topic, "partitions": [{"partition_index": 0, "offset": -1}]}],
        "timeout": 10_000})
    r.request("DeleteTopics v1 of a missing topic", 20, 1, {
        "topic_names": [f"{name}-missing"], "timeout": 30_000})
    r.request("CreatePartitions v0 to fewer", 37, 0, {"topics": [
        {"name": topic, "count": 1, "assignments": None}],
        "timeout": 30_000, "validate_only": False})
    r.request("CreatePartitions to fewer, validate only", 37, 3, {"topics": [
        {"name": topic, "count": 1, "assignments": None}],
        "timeout": 30_000, "validate_only": True})
    create_topics(r, "CreateTopics validate only, an invalid config", [
        {"name": f"{name}-v1", "configs": [("retention.ms", "abc")]},
        {"name": f"{name}-v2", "configs": [("cleanup.policy", "compact")]},
        {"name": topic}], validate_only=True)
    create_topics(r, "CreateTopics v2, an invalid config", [
        {"name": f"{name}-v3", "configs": [("segment.bytes", "1")]}], version=2)
    r.step("metadata after validate only", metadata(r.c, [f"{name}-v2"]))


def _by_partition_index(data: dict[str, Any]) -> dict[str, Any]:
    for t in data["topics"]:
        t["partitions"].sort(key=lambda p: p["partition_index"])
    return data


def seq_describe_topic_partitions(r: Recorder, name: str) -> None:
    """DescribeTopicPartitions (KIP-966): pages of two partitions over two topics, each
    from the cursor the last one gave; a missing topic and an invalid name; a cursor on
    a topic not asked for."""
    first, second = f"{name}-a", f"{name}-b"
    create_topic(r.c, first, partitions=3)
    create_topic(r.c, second, partitions=2)
    asked = {"topics": [{"name": second}, {"name": first}], "response_partition_limit": 2}
    r.request("DescribeTopicPartitions: a page of 2", 75, 0, {**asked, "cursor": None},
              sort=_metadata)
    for topic, index in ((first, 2), (second, 0), (second, 1)):
        r.request(f"DescribeTopicPartitions: from {topic.removeprefix(name)} {index}", 75, 0,
                  {**asked, "cursor": {"topic_name": topic, "partition_index": index}},
                  sort=_metadata)
    r.request("DescribeTopicPartitions: a missing topic, an invalid name", 75, 0, {
        "topics": [{"name": f"{name}-missing"}, {"name": "bad name!"}],
        "response_partition_limit": 10, "cursor": None}, sort=_metadata)
    r.request("DescribeTopicPartitions: a cursor on a topic not asked for", 75, 0, {
        "topics": [{"name": first}], "response_partition_limit": 10,
        "cursor": {"topic_name": f"{name}-z", "partition_index": 0}}, sort=_metadata)


def seq_kafka_4_versions(r: Recorder, name: str) -> None:
    """The versions Kafka 4 added to APIs Odradek served before (issue 32): Metadata v13's
    top-level error code, Fetch v13-v18 (topics by id, an unknown id), Produce v10-v13
    (topics by id, an unknown id, TRANSACTION_ABORTABLE from v11), KIP-890 part 1's
    versions of the transaction APIs, FindCoordinator
    v5, DescribeCluster v2 with fenced brokers asked for, ListTransactions v2's
    transactional id pattern (the whole id must match; one that does not compile is
    INVALID_REGULAR_EXPRESSION)."""
    topic = f"{name}-t"
    create_topic(r.c, topic)
    r.request("Metadata v13: a topic, a missing one", 3, 13, {
        "topics": [{"name": topic}, {"name": f"{name}-missing"}],
        "allow_auto_topic_creation": False, "include_topic_authorized_operations": False},
        sort=_metadata)
    (t,) = metadata(r.c, [topic]).topics
    r.step("Produce v9: two records", wait_for("the first produce", lambda: (
        lambda a: a if a.responses[0].partition_responses[0].error_code.value == 0
        else None)(request(r.c, 0, 9, produce_body(
            topic, 0, batch([b"a", b"b"], timestamp=5_000))))))
    for version in (13, 15, 16, 18):  # topics by id (KIP-516)
        body = fetch_body(t.topic_id, 0, 0)
        if version >= 15:
            del body["replica_id"]  # a tagged ReplicaState, which consumers leave out
        r.step(f"Fetch v{version} by topic id", fetched(request(r.c, 1, version, body)))
    r.step("Fetch v13 of an unknown topic id", fetched(request(
        r.c, 1, 13, fetch_body(uuid.UUID(int=1313), 0, 0))))
    for version in (10, 11, 12):
        r.request(f"Produce v{version}", 0, version, produce_body(
            topic, 0, batch([f"v{version}".encode()], timestamp=6_000)))

    def by_id(topic_id: uuid.UUID, partition: int) -> dict[str, Any]:
        body = produce_body(topic, partition, batch([b"by-id"], timestamp=7_000))
        body["topic_data"][0] = {"topic_id": topic_id,
                                 "partition_data": body["topic_data"][0]["partition_data"]}
        return body

    r.request("Produce v13 by topic id", 0, 13, by_id(t.topic_id, 0))
    r.request("Produce v13: a partition the topic lacks", 0, 13, by_id(t.topic_id, 7))
    r.request("Produce v13: an unknown topic id", 0, 13, by_id(uuid.UUID(int=1313), 0))
    r.step("Fetch v13 after Produce v10-v13", fetched(request(
        r.c, 1, 13, fetch_body(t.topic_id, 0, 2))))
    # A transactional batch for a partition not in its transaction: KIP-890's answer
    # from Produce v11, what older clients know before.
    tid = f"{name}-tx-unadded"
    find_coordinator(r.c, tid, 1)
    pid = init_producer(r, "InitProducerId (unadded)", tid)
    for version in (10, 11):
        r.request(f"Produce v{version}: a transactional batch not added", 0, version,
                  produce_body(topic, 0, batch(
                      [b"t"], base_sequence=0, producer_id=pid.producer_id,
                      producer_epoch=pid.producer_epoch, transactional=True),
                      transactional_id=tid))
    # The brokers' form (v4-5, KIP-890): verify that the transaction holds a partition,
    # add it as a broker does for a transaction version 2 client, verify again.
    def for_brokers(verify_only: bool, epoch: int = pid.producer_epoch,
                    producer_id: int = pid.producer_id) -> dict[str, Any]:
        return {"transactions": [{
            "transactional_id": tid, "producer_id": producer_id, "producer_epoch": epoch,
            "verify_only": verify_only, "topics": [{"name": topic, "partitions": [0]}]}]}

    for version in (4, 5):
        r.request(f"AddPartitionsToTxn v{version} verify only: not added", 24, version,
                  for_brokers(True))
    r.request("AddPartitionsToTxn v5 verify only: another epoch", 24, 5,
              for_brokers(True, epoch=pid.producer_epoch + 1))
    r.request("AddPartitionsToTxn v5 verify only: another producer id", 24, 5,
              for_brokers(True, producer_id=pid.producer_id + 1000), drop=["producer_id"])
    r.request("AddPartitionsToTxn v5: added by a broker", 24, 5, for_brokers(False))
    r.request("AddPartitionsToTxn v5 verify only: added", 24, 5, for_brokers(True))
    # KIP-890 part 1's versions of the other transaction APIs: offsets of a group not
    # in the transaction (TRANSACTION_ABORTABLE from TxnOffsetCommit v4), then the
    # usual steps at the new versions.
    group = f"{name}-txn-group"
    find_coordinator(r.c, group, 0)
    ids = {"transactional_id": tid, "producer_id": pid.producer_id,
           "producer_epoch": pid.producer_epoch}
    offsets = {**ids, "group_id": group, "generation_id": -1, "member_id": "",
               "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                   {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                    "committed_metadata": ""}]}]}
    for version in (3, 4):
        r.request(f"TxnOffsetCommit v{version}: a group not added", 28, version, offsets)
    r.request("AddOffsetsToTxn v4", 25, 4, {**ids, "group_id": group})
    r.request("TxnOffsetCommit v4 after AddOffsetsToTxn", 28, 4, offsets)
    r.request("EndTxn v4: abort", 26, 4, {**ids, "committed": False})
    # Kafka answers CONCURRENT_TRANSACTIONS until its markers are written: wait for that.
    wait_for(f"{tid} to complete its abort", lambda: request(r.c, 65, 0, {
        "transactional_ids": [tid]}).transaction_states[0].transaction_state
        in ("CompleteAbort", "Empty"))
    r.request("InitProducerId v5: fencing the producer", 22, 5, {
        "transactional_id": tid, "transaction_timeout": 60_000, **{
            k: v for k, v in ids.items() if k != "transactional_id"}},
        drop=["producer_epoch"])
    find_coordinator(r.c, f"{name}-group", 0)
    for version in (5, 6):
        r.request(f"FindCoordinator v{version}: a group", 10, version, {
            "key_type": 0, "coordinator_keys": [f"{name}-group"]})
    r.request("FindCoordinator v6: a share-group key (KIP-932)", 10, 6, {
        "key_type": 2, "coordinator_keys": [f"{name}-share:{t.topic_id}:0"]},
        drop=["key"])  # it holds the topic's id, each broker's own
    r.request("DescribeCluster v2: fenced brokers too", 60, 2, {
        "include_cluster_authorized_operations": False, "endpoint_type": 1,
        "include_fenced_brokers": True}, drop=["broker_id"])
    for suffix in ("a", "b"):
        find_coordinator(r.c, f"{name}-tx-{suffix}", 1)
        init_producer(r, f"InitProducerId {suffix}", f"{name}-tx-{suffix}")
    for label, pattern in (("one id", f"{name}-tx-a"), ("a prefix only", f"{name}-tx"),
                           ("both ids", f"{name}-tx-.*"), ("not a pattern", "(")):
        # Kafka lists them in an order of its own: compared by id.
        r.request(f"ListTransactions v2: {label}", 66, 2, {
            "state_filters": [], "producer_id_filters": [], "duration_filter": -1,
            "transactional_id_pattern": pattern}, drop=["producer_id"],
            sort=lambda d: {**d, "transaction_states": sorted(
                d["transaction_states"], key=lambda t: t["transactional_id"])})


def _ids_as_labels(answer: Any, labels: dict[uuid.UUID, str]) -> dict[str, Any]:
    """An OffsetCommit or OffsetFetch v10 answer as plain data with each topic's id as a
    label (ids are each broker's own, and the comparison leaves ids out), topics in
    label order (the order of "all topics" is the broker's)."""
    data = plain(answer)
    holders = [(data, answer)] if hasattr(answer, "topics") else list(
        zip(data["groups"], answer.groups, strict=True))
    for held, kio_held in holders:
        for topic, kio_topic in zip(held["topics"], kio_held.topics, strict=True):
            topic["label"] = labels.get(kio_topic.topic_id, "zero id"
                                        if kio_topic.topic_id is None else "another id")
        held["topics"].sort(key=lambda t: t["label"])
    return data


def seq_offsets_by_topic_id(r: Recorder, name: str) -> None:
    """OffsetCommit and OffsetFetch v10 (topics by id, as KIP-848 consumers send them): a
    known topic's partitions, one it lacks, an unknown id; fetched by id, all topics, and
    by name at v9; then the topic deleted: its committed offsets fetched again."""
    topic, other = f"{name}-t", f"{name}-u"
    group = f"{name}-g"
    create_topic(r.c, topic, partitions=2)
    create_topic(r.c, other)
    known = {t.name: t.topic_id for t in metadata(r.c, [topic, other]).topics}
    stranger = uuid.UUID(int=1010)
    labels = {known[topic]: "t", known[other]: "u", stranger: "unknown id"}
    find_coordinator(r.c, group, 0)

    def partitions(*indexes: int) -> list[dict[str, Any]]:
        return [{"partition_index": p, "committed_offset": 5 + p, "committed_leader_epoch": -1,
                 "committed_metadata": f"m{p}"} for p in indexes]

    r.step("OffsetCommit v10: by id, a missing partition, an unknown id", _ids_as_labels(
        request(r.c, 8, 10, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "topics": [
                {"topic_id": known[topic], "partitions": partitions(0, 1, 7)},
                {"topic_id": stranger, "partitions": partitions(0)},
                {"topic_id": known[other], "partitions": partitions(0)}]}), labels))

    def fetch(label: str, topics: list[dict[str, Any]] | None) -> None:
        r.step(label, _ids_as_labels(request(r.c, 9, 10, {"groups": [{
            "group_id": group, "member_id": None, "member_epoch": -1, "topics": topics}],
            "require_stable": False}), labels))

    fetch("OffsetFetch v10: by id, a missing partition, an unknown id", [
        {"topic_id": known[topic], "partition_indexes": [0, 1, 7]},
        {"topic_id": stranger, "partition_indexes": [0]}])
    fetch("OffsetFetch v10: all topics", None)
    r.request("OffsetFetch v9: the same offsets by name", 9, 9, {"groups": [{
        "group_id": group, "member_id": None, "member_epoch": -1,
        "topics": [{"name": topic, "partition_indexes": [0, 1]}]}],
        "require_stable": False})
    deleted = request(r.c, 20, 6, {"topics": [{"name": other, "topic_id": None}],
                                   "timeout": 30_000})
    r.step("DeleteTopics u", deleted, drop=["name"])

    def offsets_dropped() -> bool:  # Kafka drops them at its next metadata image
        answer = request(r.c, 9, 10, {"groups": [{
            "group_id": group, "member_id": None, "member_epoch": -1, "topics": None}],
            "require_stable": False})
        return all(t.topic_id != known[other] for g in answer.groups for t in g.topics)
    wait_for("the deleted topic's offsets to go", offsets_dropped)
    fetch("OffsetFetch v10: all topics, u deleted", None)
    fetch("OffsetFetch v10: u's old id", [{"topic_id": known[other], "partition_indexes": [0]}])


def _features(answer: Any) -> dict[str, Any]:
    """An ApiVersions answer's transaction.version: supported range, finalized level
    (Kafka lists more features; their epochs are each broker's own)."""
    supported = {f.name: [f.min_version, f.max_version] for f in answer.supported_features}
    finalized = {f.name: [f.min_version_level, f.max_version_level]
                 for f in answer.finalized_features}
    return {"supported": supported.get("transaction.version"),
            "finalized": finalized.get("transaction.version"),
            "epoch set": answer.finalized_features_epoch >= 0}


def seq_features_and_transactions_v2(r: Recorder, name: str) -> None:
    """Feature versioning (KIP-584) for transaction.version: ApiVersions lists it,
    UpdateFeatures refuses a downgrade without a downgrade type, an unknown feature, a
    level out of range (v2: the request's error only), takes a safe downgrade and the
    upgrade back. Then transaction version 2 (KIP-890 part 2): Produce v12 adds its
    partition, EndTxn v5 bumps the epoch (a retry with the old one is answered alike),
    TxnOffsetCommit v5 adds the group's partition, an abort with nothing open."""
    api = {"client_software_name": "oracle", "client_software_version": "1"}
    for version in (3, 4):
        r.step(f"ApiVersions v{version}: transaction.version",
               _features(request(r.c, 18, version, api)))

    def update(label: str, version: int, feature: str, level: int, upgrade_type: int = 1,
               validate_only: bool = False) -> None:
        key: dict[str, Any] = {"feature": feature, "max_version_level": level}
        if version >= 1:
            key["upgrade_type"] = upgrade_type
        else:
            key["allow_downgrade"] = upgrade_type != 1
        r.request(label, 57, version, {"timeout": 30_000, "feature_updates": [key],
                                       "validate_only": validate_only},
                  drop=["error_message"])

    update("UpdateFeatures v1: downgrade as an upgrade", 1, "transaction.version", 1)
    update("UpdateFeatures v1: an unknown feature", 1, "no.such.version", 1)
    update("UpdateFeatures v1: a level out of range", 1, "transaction.version", 9)
    update("UpdateFeatures v2: a level out of range", 2, "transaction.version", 9)
    update("UpdateFeatures v1: safe downgrade, validate only", 1, "transaction.version", 1,
           upgrade_type=2, validate_only=True)
    def finalized_at(level: int) -> dict[str, Any]:
        # Kafka applies an update when its broker replays the controller's record, a
        # moment after UpdateFeatures answers: ask until the level shows (not recorded).
        def shown() -> dict[str, Any] | None:
            features = _features(request(r.c, 18, 3, api))
            return features if features["finalized"] == [level, level] else None
        return wait_for(f"transaction.version {level}", shown)

    update("UpdateFeatures v1: safe downgrade to 1", 1, "transaction.version", 1,
           upgrade_type=2)
    r.step("ApiVersions v3 after the downgrade", finalized_at(1))
    update("UpdateFeatures v1: back to 2", 1, "transaction.version", 2)
    r.step("ApiVersions v3 after the upgrade", finalized_at(2))

    topic, group, tid = f"{name}-t", f"{name}-g", f"{name}-tx"
    create_topic(r.c, topic)
    find_coordinator(r.c, tid, 1)
    find_coordinator(r.c, group, 0)
    pid = init_producer(r, "InitProducerId", tid)
    p, e = pid.producer_id, pid.producer_epoch

    def produce(label: str, epoch: int, seq: int) -> None:
        r.request(label, 0, 12, produce_body(topic, 0, batch(
            [label.encode()], base_sequence=seq, producer_id=p, producer_epoch=epoch,
            transactional=True), transactional_id=tid))

    def end(label: str, epoch: int, commit: bool) -> Any:
        answer = request(r.c, 26, 5, {"transactional_id": tid, "producer_id": p,
                                      "producer_epoch": epoch, "committed": commit})
        r.step(label, {"error_code": answer.error_code.name,
                       "same producer id": answer.producer_id == p,
                       "epoch": answer.producer_epoch - e})
        return answer

    produce("Produce v12: a transaction's first batch", e, 0)
    r.request("TxnOffsetCommit v5: offsets of a group not added", 28, 5, {
        "transactional_id": tid, "group_id": group, "producer_id": p, "producer_epoch": e,
        "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                            "committed_leader_epoch": -1,
                                            "committed_metadata": ""}]}]})
    end("EndTxn v5: commit", e, True)
    wait_for(f"{tid} to complete its commit", lambda: request(r.c, 65, 0, {
        "transactional_ids": [tid]}).transaction_states[0].transaction_state
        == "CompleteCommit")
    end("EndTxn v5: the commit again with the old epoch", e, True)
    end("EndTxn v5: an abort with the old epoch", e, False)
    produce("Produce v12: the old epoch", e, 1)
    produce("Produce v12: the next transaction", e + 1, 0)
    end("EndTxn v5: abort", e + 1, False)
    wait_for(f"{tid} to complete its abort", lambda: request(r.c, 65, 0, {
        "transactional_ids": [tid]}).transaction_states[0].transaction_state
        == "CompleteAbort")
    end("EndTxn v5: an abort with nothing open", e + 2, False)
    # (Kafka completes even an end with no markers a moment later.)
    wait_for(f"{tid} to complete that abort", lambda: (lambda t: t.transaction_state
             == "CompleteAbort" and t.producer_epoch == e + 3)(request(r.c, 65, 0, {
                 "transactional_ids": [tid]}).transaction_states[0]))
    end("EndTxn v5: a commit with nothing open", e + 3, True)
    fresh = f"{name}-fresh"
    find_coordinator(r.c, fresh, 1)
    f = init_producer(r, "InitProducerId: a new id", fresh)
    answer = request(r.c, 26, 5, {"transactional_id": fresh, "producer_id": f.producer_id,
                                  "producer_epoch": f.producer_epoch, "committed": False})
    r.step("EndTxn v5: a new id's abort with nothing open", {
        "error_code": answer.error_code.name,
        "epoch": answer.producer_epoch - f.producer_epoch})
    list_offsets(r, "read_committed end", topic, {0: -1}, isolation=1)


# --- share groups (KIP-932) ----------------------------------------------------------

ACCEPT, RELEASE, REJECT = 1, 2, 3


def _share_heartbeat(c: WireClient, group: str, member: str, epoch: int,
                     topics: list[str] | None = None) -> Any:
    return request(c, 76, 1, {"group_id": group, "member_id": member, "member_epoch": epoch,
                              "rack_id": None, "subscribed_topic_names": topics})


def _share_fetch_body(group: str, member: str, epoch: int, topic_id: uuid.UUID | None,
                      acks: list[tuple[int, int, int]] | None = None, *,
                      max_wait: int = 0) -> dict[str, Any]:
    topics = [] if topic_id is None else [{"topic_id": topic_id, "partitions": [
        {"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": f, "last_offset": last, "acknowledge_types": [t]}
            for f, last, t in acks or []]}]}]
    return {"group_id": group, "member_id": member, "share_session_epoch": epoch,
            "max_wait": max_wait, "min_bytes": 1, "max_bytes": 1 << 20,
            "max_records": 100, "batch_size": 100, "topics": topics,
            "forgotten_topics_data": []}


def _share_answer(answer: Any) -> dict[str, Any]:
    """A ShareFetch/ShareAcknowledge answer without what is each broker's own (leader ids,
    endpoints, the record bytes and messages): errors and acquired ranges."""
    data = plain(answer)
    for t in data.get("responses", []):
        for p in t["partitions"]:
            for key in ("current_leader", "records", "acknowledge_error_message"):
                p.pop(key, None)
    data.pop("node_endpoints", None)
    return data


def seq_share_groups(r: Recorder, name: str) -> None:
    """Share groups (KIP-932) as a share consumer speaks them: a join (the assignment may
    come at a later heartbeat on Kafka), share fetches in a share session acquiring all
    five records, acknowledgements (accept, release, reject) and the released record
    coming back with delivery count 2, the session and acknowledgement errors, describe,
    the offsets' describe / alter / delete on the empty group, heartbeat errors."""
    topic, group = f"{name}-t", f"{name}-g"
    create_topic(r.c, topic)
    r.request("produce 5", 0, 9, produce_body(topic, 0, batch([b"a", b"b", b"c", b"d",
                                                               b"e"])))
    set_group_config(r, "group config share.auto.offset.reset=earliest", group,
                     "share.auto.offset.reset", "earliest")
    find_coordinator(r.c, group, 0)
    (t,) = metadata(r.c, [topic]).topics
    topic_id = t.topic_id
    member = str(uuid.UUID(int=932))
    joined = _share_heartbeat(r.c, group, member, 0, [topic])
    r.step("join", {"error_code": joined.error_code.name,
                    "member_epoch": _epoch(joined.member_epoch, 0),
                    "heartbeat_interval": plain(joined.heartbeat_interval)})
    state = {"epoch": joined.member_epoch,
             "assigned": joined.assignment is not None and bool(
                 joined.assignment.topic_partitions)}

    def assigned() -> bool:
        if not state["assigned"]:
            a = _share_heartbeat(r.c, group, member, state["epoch"])
            assert a.error_code.value == 0, a
            state["epoch"] = a.member_epoch
            state["assigned"] = a.assignment is not None and bool(
                a.assignment.topic_partitions)
        return state["assigned"]

    wait_for("the share group's assignment", assigned, timeout=60.0)
    # The first fetch opens the session; Kafka may need more than one to initialize the
    # share partition: fetched until records come (only that answer is recorded).
    session = {"epoch": 0, "answer": None}

    def fetched() -> Any:
        answer = request(r.c, 78, 1, _share_fetch_body(
            group, member, session["epoch"], topic_id if session["epoch"] == 0 else None,
            max_wait=1000))
        assert answer.error_code.value == 0, answer
        session["epoch"] += 1
        got = [a for t in answer.responses for p in t.partitions for a in p.acquired_records]
        session["answer"] = answer if got else None
        return got

    wait_for("records acquired", fetched, timeout=60.0)
    r.step("ShareFetch v1: five records acquired", _share_answer(session["answer"]))
    r.request("ShareFetch v1: a wrong session epoch", 78, 1, _share_fetch_body(
        group, member, 99, None), drop=["error_message"])
    other = str(uuid.UUID(int=933))
    r.request("ShareFetch v1: acknowledgements in the opening request", 78, 1,
              _share_fetch_body(group, other, 0, topic_id, [(0, 0, ACCEPT)]),
              drop=["error_message"])
    r.request("ShareAcknowledge v1: no session", 79, 1, {
        "group_id": group, "member_id": other, "share_session_epoch": 1, "topics": []},
        drop=["error_message"])
    acks = request(r.c, 79, 1, {
        "group_id": group, "member_id": member, "share_session_epoch": session["epoch"],
        "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0,
                    "acknowledgement_batches": [
                        {"first_offset": 0, "last_offset": 1, "acknowledge_types": [ACCEPT]},
                        {"first_offset": 2, "last_offset": 2, "acknowledge_types": [RELEASE]},
                        {"first_offset": 3, "last_offset": 4,
                         "acknowledge_types": [REJECT]}]}]}]})
    session["epoch"] += 1
    r.step("ShareAcknowledge v1: accept 0-1, release 2, reject 3-4", _share_answer(acks))
    again = request(r.c, 78, 1, _share_fetch_body(group, member, session["epoch"], None,
                                                  max_wait=1000))
    session["epoch"] += 1
    r.step("ShareFetch v1: the released record again", _share_answer(again))
    twice = request(r.c, 79, 1, {
        "group_id": group, "member_id": member, "share_session_epoch": session["epoch"],
        "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0,
                    "acknowledgement_batches": [{"first_offset": 3, "last_offset": 3,
                                                 "acknowledge_types": [ACCEPT]}]}]}]})
    session["epoch"] += 1
    r.step("ShareAcknowledge v1: a rejected record again", _share_answer(twice))
    closing = request(r.c, 79, 1, {
        "group_id": group, "member_id": member, "share_session_epoch": -1,
        "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0,
                    "acknowledgement_batches": [{"first_offset": 2, "last_offset": 2,
                                                 "acknowledge_types": [ACCEPT]}]}]}]})
    r.step("ShareAcknowledge v1: accept 2 and close the session", _share_answer(closing))
    described = request(r.c, 77, 1, {"group_ids": [group, f"{name}-unknown"],
                                      "include_authorized_operations": False})
    groups = sorted(plain(described)["groups"], key=lambda g: g["group_id"])
    for g in groups:
        for key in ("group_epoch", "assignment_epoch"):
            g[key] = g[key] > 0
        for m in g["members"]:
            m["member_epoch"] = m["member_epoch"] > 0
            m.pop("client_host")
    r.step("ShareGroupDescribe v1", groups)
    r.request("DescribeShareGroupOffsets v1 of an active group", 90, 1, {"groups": [
        {"group_id": group, "topics": [{"topic_name": topic, "partitions": [0]}]}]})
    r.request("AlterShareGroupOffsets of an active group", 91, 0, {
        "group_id": group, "topics": [{"topic_name": topic, "partitions": [
            {"partition_index": 0, "start_offset": 0}]}]},
        drop=["error_message"])
    left = _share_heartbeat(r.c, group, member, -1)
    r.step("leave", {"error_code": left.error_code.name, "member_epoch": left.member_epoch})
    r.request("AlterShareGroupOffsets to 1 of the empty group", 91, 0, {
        "group_id": group, "topics": [{"topic_name": topic, "partitions": [
            {"partition_index": 0, "start_offset": 1}]}]}, drop=["error_message"])
    r.request("DescribeShareGroupOffsets v1 after the alter", 90, 1, {"groups": [
        {"group_id": group, "topics": [{"topic_name": topic, "partitions": [0]}]}]})
    r.request("DeleteShareGroupOffsets", 92, 0, {"group_id": group, "topics": [
        {"topic_name": topic}, {"topic_name": f"{name}-missing"}]},
        drop=["error_message"])
    r.request("DescribeShareGroupOffsets v1 after the delete", 90, 1, {"groups": [
        {"group_id": group, "topics": None}]})
    # Brokers look share coordinators up (FindCoordinator v6, key type 2): the key names
    # the share partition, its topic id in Kafka's base64 form.
    share_key = f"{group}:{kafka_uuid_string(topic_id)}:0"
    r.request("FindCoordinator v6: a share partition's coordinator", 10, 6, {
        "key_type": 2, "coordinator_keys": [share_key]}, drop=["key"])
    for label, group_id, m, epoch, topics in [
            ("an unknown member", group, str(uuid.UUID(int=934)), 5, None),
            ("a join without topics", f"{name}-g2", str(uuid.UUID(int=935)), 0, None),
            ("a join without a member id", f"{name}-g3", "", 0, [topic]),
            ("an epoch below -1", group, member, -2, None)]:
        a = _share_heartbeat(r.c, group_id, m, epoch, topics)
        r.step(f"ShareGroupHeartbeat: {label}", {"error_code": a.error_code.name,
                                                 "member_epoch": a.member_epoch})


def seq_delegation_tokens(r: Recorder, name: str) -> None:
    """Delegation tokens (KIP-48) over PLAINTEXT, the only listener the oracle's brokers
    share: every version of the four APIs is refused with DELEGATION_TOKEN_REQUEST_NOT_
    ALLOWED before anything else is looked at (the owner ANONYMOUS, the timestamps -1
    where the answer has them; the rest of the rules: tests/server/
    test_delegation_tokens.py and the Java tier)."""
    renewers = [{"principal_type": "User", "principal_name": f"{name}-bob"}]
    for version in (1, 2, 3):
        body: dict[str, Any] = {"renewers": renewers, "max_lifetime": -1}
        if version >= 3:
            body.update(owner_principal_type="User", owner_principal_name=f"{name}-alice")
        r.request(f"CreateDelegationToken v{version}", 38, version, body)
        r.request(f"DescribeDelegationToken v{version}", 41, version, {"owners": None})
    for version in (1, 2):
        r.request(f"RenewDelegationToken v{version}", 39, version,
                  {"hmac": b"no-such-token", "renew_period": 60_000})
        r.request(f"ExpireDelegationToken v{version}", 40, version,
                  {"hmac": b"no-such-token", "expiry_time_period": -1})


def _streams_join(name: str, member: str, topology: dict[str, Any] | None,
                  process: str | None = "process-1", **extra: Any) -> dict[str, Any]:
    return {"group_id": f"{name}-g", "member_id": member, "member_epoch": 0,
            "endpoint_information_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout": 30_000, "topology": topology, "active_tasks": [],
            "standby_tasks": [], "warmup_tasks": [], "process_id": process,
            "user_endpoint": None, "client_tags": [], "task_offsets": None,
            "task_end_offsets": None, "shutdown_application": False, **extra}


def _streams_answer(answer: Any, sent_epoch: int) -> dict[str, Any]:
    """A StreamsGroupHeartbeat answer: the error, the epoch by direction, the statuses'
    codes, the tasks (sorted), the intervals."""
    def tasks(items: Any) -> Any:
        return None if items is None else sorted(
            (t.subtopology_id, sorted(t.partitions)) for t in items)
    return {"error_code": answer.error_code.name, "member_epoch": _epoch(
                answer.member_epoch, sent_epoch),
            "status": sorted(s.status_code for s in answer.status or ()),
            "active": tasks(answer.active_tasks), "standby": tasks(answer.standby_tasks),
            "warmup": tasks(answer.warmup_tasks),
            "heartbeat_interval": plain(answer.heartbeat_interval),
            "acceptable_recovery_lag": answer.acceptable_recovery_lag,
            "task_offset_interval": plain(answer.task_offset_interval)}


def seq_streams_groups(r: Recorder, name: str) -> None:
    """Streams groups (KIP-1071) as Kafka Streams speaks them: a join whose topology
    needs a repartition and a changelog topic (MISSING_INTERNAL_TOPICS, then both
    created by the broker, then every task), describe, the protocol's refusals, a
    consumer group's id, leaving."""
    source = f"{name}-events"
    create_topic(r.c, source, partitions=2)
    rekey, changelog = f"{name}-g-rekey-repartition", f"{name}-g-counts-changelog"
    topology = {"epoch": 1, "subtopologies": [
        {"subtopology_id": "0", "source_topics": [source], "source_topic_regex": [],
         "state_changelog_topics": [], "repartition_sink_topics": [rekey],
         "repartition_source_topics": [], "copartition_groups": []},
        {"subtopology_id": "1", "source_topics": [], "source_topic_regex": [],
         "state_changelog_topics": [{"name": changelog, "partitions": 0,
                                     "replication_factor": 0, "topic_configs": [
                                         {"key": "cleanup.policy", "value": "compact"}]}],
         "repartition_sink_topics": [],
         "repartition_source_topics": [{"name": rekey, "partitions": 0,
                                        "replication_factor": 0, "topic_configs": []}],
         "copartition_groups": []}]}
    # Kafka's group coordinator learns of a new topic from its metadata image a moment
    # after the topic is created (and led): a probe group reading only the source topic
    # (no internal topics to create) joins until it no longer reports it missing, so
    # that the recorded join meets a coordinator that knows it (not recorded).
    probe, probe_member = f"{name}-probe", str(uuid.UUID(int=1070))
    find_coordinator(r.c, f"{probe}-g", 0)

    def source_known() -> bool:
        answer = request(r.c, 88, 0, _streams_join(probe, probe_member, {
            "epoch": 1, "subtopologies": [{**topology["subtopologies"][0],
                                           "repartition_sink_topics": []}]}))
        request(r.c, 88, 0, {**_streams_join(probe, probe_member, None),
                             "member_epoch": -1})
        return answer.error_code.value == 0 and all(
            st.status_code != 1 for st in answer.status or ())  # MISSING_SOURCE_TOPICS
    wait_for(f"Kafka's group coordinator to know {source}", source_known)
    find_coordinator(r.c, f"{name}-g", 0)
    member = str(uuid.UUID(int=1071))
    joined = request(r.c, 88, 0, _streams_join(name, member, topology))
    r.step("join", _streams_answer(joined, 0))
    state = {"epoch": joined.member_epoch, "answer": None}

    def assigned() -> bool:
        answer = request(r.c, 88, 0, {**_streams_join(name, member, None, None),
                                      "member_epoch": state["epoch"],
                                      "rebalance_timeout": -1, "active_tasks": None,
                                      "standby_tasks": None, "warmup_tasks": None,
                                      "client_tags": None})
        assert answer.error_code.value == 0, answer
        state["epoch"] = answer.member_epoch
        if answer.active_tasks:
            state["answer"] = answer
        return bool(answer.active_tasks)

    wait_for("the streams group's tasks", assigned, timeout=60.0)
    r.step("tasks once the internal topics exist", _streams_answer(state["answer"],
                                                                   joined.member_epoch))
    (rk, cl) = metadata(r.c, [rekey, changelog]).topics
    r.step("the internal topics", {"partitions": [len(rk.partitions), len(cl.partitions)]})
    described = request(r.c, 89, 0, {"group_ids": [f"{name}-g", f"{name}-none"],
                                     "include_authorized_operations": False})
    r.step("StreamsGroupDescribe", [{
        "error_code": g.error_code.name, "state": g.group_state,
        "members": len(g.members), "subtopologies": sorted(
            s.subtopology_id for s in (g.topology.subtopologies if g.topology else ())),
        "active": sorted((t.subtopology_id, sorted(t.partitions))
                         for m in g.members for t in m.assignment.active_tasks)}
        for g in described.groups])
    other = str(uuid.UUID(int=1072))
    for label, body in [
            ("an unknown member", {**_streams_join(name, other, None), "member_epoch": 3}),
            ("a join without a topology", _streams_join(name, other, None)),
            ("a join without a process id", _streams_join(name, other, topology, None)),
            ("a join without a rebalance timeout", {**_streams_join(
                name, str(uuid.UUID(int=1073)), topology), "rebalance_timeout": -1}),
            ("a join owning tasks", {**_streams_join(
                name, str(uuid.UUID(int=1074)), topology), "active_tasks": [
                    {"subtopology_id": "0", "partitions": [0]}]}),
            ("a fenced epoch", {**_streams_join(name, member, None), "member_epoch":
                                state["epoch"] + 7}),
            ("an empty group id", {**_streams_join(name, other, topology), "group_id": ""})]:
        answer = request(r.c, 88, 0, body)
        r.step(f"StreamsGroupHeartbeat: {label}", {"error_code": answer.error_code.name,
                                                   "member_epoch": answer.member_epoch})
    consumer = request(r.c, 68, 1, {
        "group_id": f"{name}-c", "member_id": other, "member_epoch": 0,
        "instance_id": None, "rack_id": None, "rebalance_timeout": 30_000,
        "subscribed_topic_names": [source], "subscribed_topic_regex": None,
        "server_assignor": None, "topic_partitions": []})
    assert consumer.error_code.value == 0, consumer
    answer = request(r.c, 88, 0, {**_streams_join(name, other, topology),
                                  "group_id": f"{name}-c"})
    r.step("StreamsGroupHeartbeat: a consumer group's id", {
        "error_code": answer.error_code.name, "error_message": answer.error_message})
    left = request(r.c, 88, 0, {**_streams_join(name, member, None), "member_epoch": -1})
    r.step("leave", {"error_code": left.error_code.name, "member_epoch": left.member_epoch})


def seq_list_config_resources(r: Recorder, name: str) -> None:
    """ListConfigResources (KIP-1142): per resource type asked, the error and whether
    this sequence's topic and group are listed, and how many brokers (each broker's own
    topics and groups from other sequences differ, so only these are compared)."""
    topic, group = f"{name}-t", f"{name}-g"
    create_topic(r.c, topic)
    set_group_config(r, "a group config", group, "share.auto.offset.reset", "earliest")
    for label, version, types in [("all types", 1, []), ("topics", 1, [2]),
                                  ("brokers", 1, [4]), ("broker loggers", 1, [8]),
                                  ("client metrics", 1, [16]), ("groups", 1, [32]),
                                  ("topics and groups", 1, [2, 32]),
                                  ("an unknown type", 1, [99]), ("v0", 0, None)]:
        answer = request(r.c, 74, version, {} if types is None else {"resource_types": types})
        listed = [(c.resource_name, getattr(c, "resource_type", 16))
                  for c in answer.config_resources]
        r.step(f"ListConfigResources v{version}: {label}", {
            "error_code": answer.error_code.name,
            "topic": (topic, 2) in listed, "group": (group, 32) in listed,
            "brokers": sum(1 for _, t in listed if t == 4),
            "broker loggers": sum(1 for _, t in listed if t == 8),
            "types": sorted({t for _, t in listed})})


def seq_api_versions(r: Recorder, name: str) -> None:
    api_versions(r, "ApiVersions v3", 3)
    api_versions(r, "ApiVersions v0", 0)
    # KIP-511's pattern for the client's software name and version (v3+).
    for label, software, version in (("a space in the name", "my client", "1.0"),
                                     ("a name ending in '-'", "client-", "1.0"),
                                     ("an empty version", "client", ""),
                                     ("a version with '+'", "client", "1.0+local"),
                                     ("dots and dashes", "a.b-c", "1.0-rc.1")):
        for v in (3, 4):
            answer = request(r.c, 18, v, {"client_software_name": software,
                                          "client_software_version": version})
            r.step(f"ApiVersions v{v}: {label}", {"error_code": answer.error_code.name,
                                                  "apis listed": len(answer.api_keys) > 0})


def seq_kafka44_versions(r: Recorder, name: str) -> None:
    """The three Kafka 4.4 versions kio 0.6.5 has no schema for (Odradek's own:
    protocol/extra_schemas.py). ApiVersions v5 (KIP-1242): naming no broker, this one,
    another node, another cluster, half of the pair. TxnOffsetCommit v6 (KIP-1319):
    topics by id, a missing partition, an unknown id; a generation of a group that does
    not exist and a KIP-848 member at another epoch (GROUP_ID_NOT_FOUND and
    STALE_MEMBER_EPOCH, ILLEGAL_GENERATION at v5); a commit from outside a group that
    does not exist. DeleteGroups v3: its per-group error message (null or not; the text
    is each broker's own)."""
    api_versions(r, "ApiVersions v5: naming no broker", 5)
    hello = {"client_software_name": "oracle", "client_software_version": "1"}
    described = metadata(r.c, [])
    cluster_id, node_id = described.cluster_id, described.brokers[0].node_id
    for label, named in (("this broker", {"cluster_id": cluster_id, "node_id": node_id}),
                         ("another node", {"cluster_id": cluster_id, "node_id": node_id + 7}),
                         ("another cluster", {"cluster_id": "AAAAAAAAAAAAAAAAAAAAAA",
                                              "node_id": node_id}),
                         ("a cluster only", {"cluster_id": cluster_id}),
                         ("a node only", {"node_id": node_id})):
        answer = request(r.c, 18, 5, {**hello, **named})
        r.step(f"ApiVersions v5: {label}", {
            "error_code": answer.error_code.name, "apis listed": len(answer.api_keys) > 0,
            "features listed": len(answer.supported_features) > 0,
            "finalized listed": len(answer.finalized_features) > 0,
            "epoch set": answer.finalized_features_epoch >= 0})

    topic, group, tid = f"{name}-t", f"{name}-g", f"{name}-tx"
    modern, nobody = f"{name}-modern", f"{name}-nobody"
    create_topic(r.c, topic)
    topic_id = metadata(r.c, [topic]).topics[0].topic_id
    stranger = uuid.UUID(int=1919)
    labels = {topic_id: "t", stranger: "unknown id"}
    for key, key_type in ((tid, 1), (group, 0), (modern, 0), (nobody, 0)):
        find_coordinator(r.c, key, key_type)
    pid = init_producer(r, "InitProducerId", tid)
    ids = {"transactional_id": tid, "producer_id": pid.producer_id,
           "producer_epoch": pid.producer_epoch}
    r.request("Produce v12: the transaction's first batch", 0, 12, produce_body(
        topic, 0, batch([b"t"], base_sequence=0, producer_id=pid.producer_id,
                        producer_epoch=pid.producer_epoch, transactional=True),
        transactional_id=tid))

    def offsets(version: int, to: str, *, generation: int = -1, member: str = "",
                topics: list[tuple[Any, list[int]]] | None = None) -> Any:
        by = "topic_id" if version >= 6 else "name"
        answer = request(r.c, 28, version, {
            **ids, "group_id": to, "generation_id": generation, "member_id": member,
            "group_instance_id": None, "topics": [
                {by: t, "partitions": [{"partition_index": p, "committed_offset": 3,
                                        "committed_leader_epoch": -1,
                                        "committed_metadata": ""} for p in parts]}
                for t, parts in topics or [(topic_id if version >= 6 else topic, [0])]]})
        return _ids_as_labels(answer, labels) if version >= 6 else answer

    r.step("TxnOffsetCommit v6: by id, a missing partition, an unknown id", offsets(
        6, group, topics=[(topic_id, [0, 7]), (stranger, [0])]))
    r.step("TxnOffsetCommit v6: a generation of a group that does not exist",
           offsets(6, nobody, generation=2, member="someone"))
    r.step("TxnOffsetCommit v5: a generation of a group that does not exist",
           offsets(5, nobody, generation=2, member="someone"))
    r.step("TxnOffsetCommit v6: a member id, no generation, of a group that does not exist",
           offsets(6, nobody, member="someone"))
    member = str(uuid.UUID(int=4242))
    joined = request(r.c, 68, 1, heartbeat_body(
        modern, member, 0, subscribed_topic_names=[topic], server_assignor="uniform",
        topic_partitions=[]))
    r.step("ConsumerGroupHeartbeat: a member joins", {  # (as seq_consumer_group_heartbeat)
        "error_code": joined.error_code.name, "member_epoch": _epoch(joined.member_epoch, 0)})
    ahead = joined.member_epoch + 1
    r.step("TxnOffsetCommit v6: a member at a later epoch",
           offsets(6, modern, generation=ahead, member=member))
    r.step("TxnOffsetCommit v5: a member at a later epoch",
           offsets(5, modern, generation=ahead, member=member))
    r.step("TxnOffsetCommit v6: a member unknown", offsets(
        6, modern, generation=joined.member_epoch, member="stranger"))
    r.request("EndTxn v5: abort", 26, 5, {**ids, "committed": False},
              drop=["producer_epoch"])

    # DeleteGroups v3: an empty group with offsets, a group with a member, none.
    idle, busy = f"{name}-idle", f"{name}-busy"
    for g in (idle, busy):
        find_coordinator(r.c, g, 0)
    r.request("OffsetCommit v8: the idle group's offset", 8, 8, commit_body(idle, {topic: [0]}))
    classic_member(r.c, busy)
    for version in (2, 3):
        answer = request(r.c, 42, version, {
            "groups_names": [busy, f"{name}-never"] + ([idle] if version == 3 else [])})
        r.step(f"DeleteGroups v{version}", {"results": sorted(
            [{"group": x.group_id.removeprefix(name), "error_code": x.error_code.name,
              "message": getattr(x, "error_message", None) is not None}
             for x in answer.results], key=lambda x: x["group"])})


def seq_log_dirs(r: Recorder, name: str) -> None:
    """AlterReplicaLogDirs (each broker has one log directory, found with DescribeLogDirs
    first): to the directory the log is in (nothing to move), to a path that is not a
    log directory, a partition or topic that does not exist; DescribeLogDirs of a topic."""
    topic = f"{name}-t"
    create_topic(r.c, topic, partitions=1)
    (own,) = [res.log_dir for res in request(r.c, 35, 4, {"topics": None}).results]

    def by_topic(data: dict[str, Any]) -> dict[str, Any]:
        data["results"].sort(key=lambda t: t["topic_name"])
        for t in data["results"]:
            t["partitions"].sort(key=lambda p: p["partition_index"])
        return data

    for version in (1, 2):
        r.request(f"AlterReplicaLogDirs v{version}", 34, version, {"dirs": [
            {"path": own, "topics": [{"name": topic, "partitions": [0, 4]},
                                     {"name": f"{name}-missing", "partitions": [0]}]},
            {"path": own + "-not-a-log-dir", "topics": [
                {"name": f"{name}-elsewhere", "partitions": [0]}]}]}, sort=by_topic)
    r.request("DescribeLogDirs v4 of the topic", 35, 4, {
        "topics": [{"topic": topic, "partitions": [0, 3]}]},
        drop=["log_dir", "total_bytes", "usable_bytes"])


def seq_streams_topology_descriptions(r: Recorder, name: str) -> None:
    """KIP-1331's versions as both brokers run by default (no topology description
    plugin configured: Kafka 4.4's feature is off): StreamsGroupHeartbeat v1 never asks
    for the description and carries v1's AcceptableRecoveryLag; StreamsGroupDescribe v1
    finds no description when asked (NOT_STORED) and names the assignor;
    StreamsGroupTopologyDescriptionUpdate is UNSUPPORTED_VERSION before any other
    check."""
    source = f"{name}-events"
    create_topic(r.c, source, partitions=2)
    topology = {"epoch": 1, "subtopologies": [
        {"subtopology_id": "0", "source_topics": [source], "source_topic_regex": [],
         "state_changelog_topics": [], "repartition_sink_topics": [],
         "repartition_source_topics": [], "copartition_groups": []}]}
    find_coordinator(r.c, f"{name}-g", 0)
    member = str(uuid.UUID(int=1331))
    joined = request(r.c, 88, 1, _streams_join(name, member, topology))
    r.step("StreamsGroupHeartbeat v1: join", {
        "error_code": joined.error_code.name,
        "topology_description_required": joined.topology_description_required,
        "acceptable_recovery_lag": joined.acceptable_recovery_lag,
        "heartbeat_interval": plain(joined.heartbeat_interval),
        "task_offset_interval": plain(joined.task_offset_interval)})
    again = request(r.c, 88, 1, {**_streams_join(name, member, None, None),
                                 "member_epoch": joined.member_epoch,
                                 "rebalance_timeout": -1, "active_tasks": None,
                                 "standby_tasks": None, "warmup_tasks": None,
                                 "client_tags": None})
    r.step("StreamsGroupHeartbeat v1: again", {
        "error_code": again.error_code.name,
        "topology_description_required": again.topology_description_required})
    for include in (True, False):
        described = request(r.c, 89, 1, {"group_ids": [f"{name}-g", f"{name}-none"],
                                         "include_authorized_operations": False,
                                         "include_topology_description": include})
        r.step(f"StreamsGroupDescribe v1, description asked for: {include}", [{
            "error_code": g.error_code.name, "status": g.topology_description_status,
            "description": g.topology_description, "assignor": g.assignor_name}
            # Kafka 4.4 answers groups on different coordinator partitions in any order.
            for g in sorted(described.groups, key=lambda g: g.group_id)])
    description = {"subtopologies": [{"subtopology_id": "0", "nodes": [
        {"name": "KSTREAM-SOURCE-0000000000", "node_type": 1, "source_topics": [source],
         "sink_topic": None, "stores": [], "successors": []}]}], "global_stores": []}
    for label, body in [
            ("the member's", {}), ("an unknown group's", {"group_id": f"{name}-none"}),
            ("an empty member id", {"member_id": ""})]:
        pushed = request(r.c, 93, 0, {"group_id": f"{name}-g", "member_id": member,
                                      "topology_epoch": 1,
                                      "topology_description": description, **body})
        r.step(f"StreamsGroupTopologyDescriptionUpdate: {label}",
               {"error_code": int(pushed.error_code)})
    stranger = request(r.c, 88, 1, {**_streams_join(name, str(uuid.UUID(int=1332)), None),
                                    "member_epoch": 3})
    r.step("StreamsGroupHeartbeat v1: an unknown member", {
        "error_code": stranger.error_code.name,
        "acceptable_recovery_lag": stranger.acceptable_recovery_lag})
    left = request(r.c, 88, 1, {**_streams_join(name, member, None),
                                "member_epoch": -1})
    r.step("leave", {"error_code": left.error_code.name, "member_epoch": left.member_epoch,
                     "acceptable_recovery_lag": left.acceptable_recovery_lag,
                     "topology_description_required": left.topology_description_required})


SEQUENCES: dict[str, Callable[[Recorder, str], None]] = {
    name.removeprefix("seq_"): fn for name, fn in globals().items()
    if name.startswith("seq_") and callable(fn)}

# sequence -> {"step/field path": (Apache Kafka's value, Odradek's value)}
KNOWN_DIFFERENCES: dict[str, dict[str, tuple[Any, Any]]] = {
    "streams_groups": {
        # Kafka 4.4 delays a new target assignment (batching joins) and says so with
        # ASSIGNMENT_DELAYED (5); Odradek assigns at once, as for consumer groups.
        "join/status.#": (2, 1),
        "join/status[1]": (5, "<absent>"),
    },
    "share_groups": {
        # Every record is done (accepted or rejected): Kafka 4.4 moves the stored start
        # offset past the last ones acknowledged at the share partition's next
        # acquisition; Odradek at the acknowledgement. The lag is 0 in both.
        "DescribeShareGroupOffsets v1 of an active group/groups[0].topics[0].partitions[0]"
        ".start_offset": (2, 5),
    },
    "consumer_group_heartbeat": {
        # Kafka 4.4 keeps the epoch each partition was assigned in and takes a commit
        # from an older member epoch for partitions assigned at or before it; Odradek
        # takes only the member's current epoch (as Kafka 4.0 did).
        "OffsetCommit v9: a stale (lower) epoch/topics[0].partitions[0].error_code":
            ("none", "stale_member_epoch"),
    },
}


@pytest.mark.parametrize("sequence", sorted(SEQUENCES))
def test_odradek_answers_as_apache_kafka_does(sequence: str, apache_kafka, odradek) -> None:
    assert_answers_as_kafka_does(sequence, SEQUENCES[sequence],
                                 KNOWN_DIFFERENCES.get(sequence, {}),
                                 f"oracle-more-{sequence.replace('_', '-')}", apache_kafka,
                                 odradek)


COMPATIBILITY = Path(__file__).parents[2] / "docs" / "compatibility.md"
ABSENT_HEADING = "### What Kafka 4.4 serves that Odradek does not"
EN_DASH, EM_DASH = "\u2013", "\u2014"  # the docs' version ranges and "none"


def _versions(text: str) -> tuple[int, int] | None:
    """The docs' ``0<en dash>5`` -> (0, 5), ``3`` -> (3, 3), an em dash -> None."""
    text = text.strip()
    if text == EM_DASH:
        return None
    low, _, high = text.partition(EN_DASH)
    return int(low), int(high or low)


def listed_absences() -> dict[int, tuple[tuple[int, int], tuple[int, int] | None]]:
    """docs/compatibility.md's table of what Kafka 4.4 serves and Odradek does not:
    key -> (Kafka's versions, Odradek's or None)."""
    section = COMPATIBILITY.read_text().split(ABSENT_HEADING, 1)[1].split("\n#", 1)[0]
    rows: dict[int, tuple[tuple[int, int], tuple[int, int] | None]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[1].isdigit():
            kafka = _versions(cells[2])
            assert kafka is not None, line
            rows[int(cells[1])] = (kafka, _versions(cells[3]))
    return rows


def test_every_api_kafka_serves_is_served_or_listed_here(apache_kafka) -> None:
    """Each API and version Apache Kafka 4.4 lists in ApiVersions is served by Odradek
    with the same minimum, or is in docs/compatibility.md's table of what is not (with
    both brokers' versions as they are): the table can neither miss a gap nor keep one
    that was closed."""
    with WireClient(apache_kafka.port) as c:
        answer = request(c, 18, 3, {"client_software_name": "oracle",
                                    "client_software_version": "1"})
    served = {api.key: (api.min_version, api.max_version) for api in HANDLERS.values()}
    gaps = {}
    for api in answer.api_keys:
        ours = served.get(api.api_key)
        if ours is not None:
            assert ours[0] == api.min_version, (api, ours)
        if ours is None or ours[1] < api.max_version:
            gaps[api.api_key] = ((api.min_version, api.max_version), ours)
    assert gaps == listed_absences()

