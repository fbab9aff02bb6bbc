"""What the console knows of a Kafka cluster, asked through Kafka's public client APIs only.

``KafkaView`` is the console's one door to the cluster: confluent-kafka's ``AdminClient``
(DescribeCluster, Metadata, ListOffsets, DescribeConfigs, IncrementalAlterConfigs,
CreateTopics, DeleteTopics, ListGroups, DescribeGroups / ConsumerGroupDescribe,
OffsetFetch, OffsetCommit through AlterConsumerGroupOffsets), DescribeLogDirs on
Odradek's own blocking Kafka client (confluent-kafka's Admin API has no call for it;
partition sizes come from there), a ``Producer`` for records
written from the page and short-lived ``Consumer``s, assigned by hand and never
committing, for the message browser. Nothing here knows it may be talking to Odradek:
the same calls work against Apache Kafka.

Every method blocks (librdkafka answers through futures and polls); the web layer runs
them on its thread pool. Failures are ``ConsoleError``s carrying the Kafka error's name,
so a page can say what the cluster answered.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from odradek.client.codec import DESCRIBE_LOG_DIRS, LIST_OFFSETS, KafkaClientError
from odradek.client.connection import BrokerConnection

log = logging.getLogger(__name__)

# How much the message browser reads at most for one page when a filter drops records:
# a filter is a scan, and a page must come back in bounded time.
MAX_SCAN = 10_000
# Offsets before the first record of a partition (no committed offset), as librdkafka
# reports them.
NO_OFFSET = -1001
# Groups that may have their offsets reset: Kafka's kafka-consumer-groups.sh refuses
# while members are in the group (their commits would overwrite the reset).
RESETTABLE_STATES = ("EMPTY", "DEAD", "UNKNOWN")


class ConsoleError(Exception):
    """The cluster refused or did not answer: ``name`` is Kafka's error name (or a short
    word of ours), ``message`` what it said; ``status`` the HTTP status to answer with."""

    def __init__(self, name: str, message: str, status: int = 502) -> None:
        super().__init__(f"{name}: {message}")
        self.name, self.message, self.status = name, message, status


# HTTP statuses for Kafka errors that are the user's doing, not the cluster's failing.
_CLIENT_ERRORS = {
    # UNKNOWN_PARTITION: librdkafka's, producing to a partition the topic does not have.
    "TOPIC_ALREADY_EXISTS": 409, "UNKNOWN_TOPIC_OR_PART": 404, "UNKNOWN_PARTITION": 404,
    "INVALID_CONFIG": 400,
    "INVALID_PARTITIONS": 400, "INVALID_REPLICATION_FACTOR": 400, "INVALID_TOPIC_EXCEPTION": 400,
    "POLICY_VIOLATION": 400, "GROUP_ID_NOT_FOUND": 404, "NON_EMPTY_GROUP": 409,
    "UNKNOWN_MEMBER_ID": 409, "INVALID_REQUEST": 400, "TOPIC_AUTHORIZATION_FAILED": 403,
    "GROUP_AUTHORIZATION_FAILED": 403, "CLUSTER_AUTHORIZATION_FAILED": 403,
    "INVALID_RECORD": 400, "MSG_SIZE_TOO_LARGE": 413, "RECORD_LIST_TOO_LARGE": 413,
}


def _error(exc: BaseException) -> ConsoleError:
    err = exc.args[0] if exc.args else None
    if isinstance(err, KafkaError):
        name = err.name().lstrip("_")
        return ConsoleError(name, err.str(), _CLIENT_ERRORS.get(name, 502))
    return ConsoleError(type(exc).__name__, str(exc))


def _wait(future: Any, timeout: float) -> Any:
    try:
        return future.result(timeout=timeout)
    except KafkaException as exc:
        raise _error(exc) from None
    except TimeoutError:
        raise ConsoleError("TIMED_OUT", f"the cluster did not answer within {timeout:g} s")\
            from None


# --- what the pages show --------------------------------------------------------------


@dataclass
class Broker:
    id: int
    host: str
    port: int
    rack: str | None
    controller: bool


@dataclass
class ClusterInfo:
    cluster_id: str | None
    brokers: list[Broker]
    topics: int
    partitions: int
    under_replicated: int
    offline: int


@dataclass
class PartitionInfo:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    start: int = 0
    end: int = 0
    error: str | None = None
    size: int | None = None  # bytes in the leader's log (None: not known)
    # Tiered storage (KIP-405): the first offset on the leader's disk and the last in
    # the remote tier (None: not asked, or -1 from the broker: nothing tiered).
    local_start: int | None = None
    tiered_end: int | None = None

    @property
    def messages(self) -> int:
        return max(0, self.end - self.start)

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)


@dataclass
class TopicInfo:
    name: str
    partitions: list[PartitionInfo]
    internal: bool = False

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    @property
    def messages(self) -> int:
        return sum(p.messages for p in self.partitions)

    @property
    def tiered(self) -> bool:
        """Whether some of its history is in a remote tier (tiered storage)."""
        return any(p.tiered_end is not None and p.tiered_end >= 0 for p in self.partitions)

    @property
    def size(self) -> int | None:
        sizes = [p.size for p in self.partitions]
        return None if None in sizes else sum(s or 0 for s in sizes)

    @property
    def end_total(self) -> int:
        return sum(p.end for p in self.partitions)

    @property
    def under_replicated(self) -> int:
        return sum(p.under_replicated for p in self.partitions)


@dataclass
class ConfigInfo:
    name: str
    value: str | None
    source: str
    default: bool
    read_only: bool
    sensitive: bool


@dataclass
class Message:
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]

    @property
    def time(self) -> str:
        if self.timestamp_ms < 0:
            return "-"
        return datetime.fromtimestamp(self.timestamp_ms / 1000, UTC).isoformat(
            timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class MemberInfo:
    member_id: str
    client_id: str
    host: str
    instance_id: str | None
    assignment: list[tuple[str, int]]


@dataclass
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    end: int
    member: str | None

    @property
    def lag(self) -> int | None:
        return None if self.committed is None else max(0, self.end - self.committed)


@dataclass
class GroupInfo:
    group_id: str
    state: str
    type: str
    protocol: str = ""
    coordinator: int | None = None
    members: list[MemberInfo] = field(default_factory=list)
    offsets: list[PartitionLag] = field(default_factory=list)

    @property
    def lag(self) -> int:
        return sum(p.lag or 0 for p in self.offsets)

    @property
    def resettable(self) -> bool:
        return self.state in RESETTABLE_STATES


def _enum_name(value: Any) -> str:
    return getattr(value, "name", None) or str(value)


# --- the view -------------------------------------------------------------------------


class KafkaView:
    """The cluster as the console sees it. ``config`` is a librdkafka configuration with
    at least ``bootstrap.servers`` (plus any security settings); ``timeout`` bounds each
    question to the cluster, in seconds."""

    def __init__(self, config: dict[str, Any], timeout: float = 10.0) -> None:
        self.config = dict(config)
        self.timeout = timeout
        # librdkafka takes a logging.Logger for "logger"; the stub allows only scalars.
        self.admin = AdminClient({**self.config, "logger": log})  # type: ignore[dict-item]
        self._producer: Producer | None = None
        self._lock = threading.Lock()
        self._addresses: dict[int, tuple[str, int]] = {}

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self.timeout)

    # cluster and topics

    def cluster(self) -> ClusterInfo:
        described = _wait(self.admin.describe_cluster(request_timeout=self.timeout),
                          self.timeout + 1)
        controller = described.controller.id if described.controller else -1
        brokers = sorted((Broker(n.id, n.host, n.port, n.rack, n.id == controller)
                          for n in described.nodes), key=lambda b: b.id)
        topics = self._metadata()
        partitions = [p for t in topics for p in t.partitions]
        return ClusterInfo(
            cluster_id=described.cluster_id, brokers=brokers, topics=len(topics),
            partitions=len(partitions),
            under_replicated=sum(p.under_replicated for p in partitions),
            offline=sum(p.leader < 0 for p in partitions))

    def _metadata(self) -> list[TopicInfo]:
        try:
            meta = self.admin.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise _error(exc) from None
        # The brokers' addresses, for the requests librdkafka has no call for (one dict
        # replaced whole: pages on other threads read it).
        # (BrokerMetadata.host: mypy infers None from its __init__; librdkafka sets a str.)
        self._addresses = {b.id: (cast(str, b.host), b.port) for b in meta.brokers.values()}
        topics = []
        for name, t in sorted(meta.topics.items()):
            if t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            partitions = [
                PartitionInfo(p.id, p.leader, list(p.replicas), list(p.isrs),
                              error=p.error.name() if p.error else None)
                for p in sorted(t.partitions.values(), key=lambda p: p.id)]
            topics.append(TopicInfo(name, partitions, internal=name.startswith("__")))
        return topics

    def _fill_offsets(self, topics: Iterable[TopicInfo]) -> None:
        """Each partition's log start and end offsets, in two ListOffsets rounds."""
        parts = {(t.name, p.partition): p for t in topics for p in t.partitions
                 if p.leader >= 0}
        if not parts:
            return
        for spec, attr in ((OffsetSpec.earliest(), "start"), (OffsetSpec.latest(), "end")):
            futures = self.admin.list_offsets(
                {TopicPartition(t, p): spec for t, p in parts}, request_timeout=self.timeout)
            for tp, future in futures.items():
                try:
                    setattr(parts[tp.topic, tp.partition], attr,
                            future.result(timeout=self.timeout + 1).offset)
                except KafkaException as exc:
                    parts[tp.topic, tp.partition].error = _error(exc).name

    def _fill_tiers(self, topic: TopicInfo) -> None:
        """Each partition's first local offset and last tiered one (ListOffsets -4 and
        -5, which confluent-kafka's Admin API does not ask) from its leader."""
        security = {k: str(v) for k, v in self.config.items()
                    if k.startswith(("security.", "ssl.", "sasl."))}
        by_leader: dict[int, list[PartitionInfo]] = {}
        for p in topic.partitions:
            if p.leader >= 0:
                by_leader.setdefault(p.leader, []).append(p)
        for leader, parts in by_leader.items():
            if leader not in self._addresses:
                continue
            try:
                conn = BrokerConnection(*self._addresses[leader], client_id="odradek-console",
                                        timeout_s=self.timeout, security=security)
                try:
                    if conn.version(LIST_OFFSETS) < 9:
                        continue  # a broker without tiered storage's specs
                    for spec, attr in ((-4, "local_start"), (-5, "tiered_end")):
                        answer = conn.request(LIST_OFFSETS, {
                            "replica_id": -1, "isolation_level": 0, "topics": [{
                                "name": topic.name, "partitions": [{
                                    "partition_index": p.partition,
                                    "current_leader_epoch": -1, "timestamp": spec}
                                    for p in parts]}]})
                        found = {x.partition_index: x for t in answer.topics
                                 for x in t.partitions}
                        for p in parts:
                            x = found.get(p.partition)
                            if x is not None and x.error_code == 0:
                                setattr(p, attr, x.offset)
                finally:
                    conn.close()
            except KafkaClientError as exc:
                log.info("no tiered offsets from broker %d: %s", leader, exc)

    def _fill_sizes(self, topics: list[TopicInfo]) -> None:
        """Each partition's size in its leader's log, from DescribeLogDirs to the leaders
        (sizes stay unknown where a broker cannot be asked: a SASL mechanism Odradek's
        client lacks, no DESCRIBE on the cluster)."""
        leaders = {p.leader for t in topics for p in t.partitions if p.leader >= 0}
        if not leaders:
            return
        addresses = self._addresses  # from the Metadata answer the topics came from
        wanted = {(t.name, p.partition): (p, p.leader) for t in topics for p in t.partitions}
        security = {k: str(v) for k, v in self.config.items()
                    if k.startswith(("security.", "ssl.", "sasl."))}
        for leader in leaders & addresses.keys():
            try:
                conn = BrokerConnection(*addresses[leader], client_id="odradek-console",
                                        timeout_s=self.timeout, security=security)
                try:
                    answer = conn.request(DESCRIBE_LOG_DIRS, {"topics": None})
                finally:
                    conn.close()
            except KafkaClientError as exc:
                log.info("no partition sizes from broker %d: %s", leader, exc)
                continue
            for result in answer.results:
                for t in result.topics:
                    for part in t.partitions:
                        found = wanted.get((t.name, part.partition_index))
                        if found and found[1] == leader and not part.is_future_key:
                            found[0].size = (found[0].size or 0) + part.partition_size

    def topics(self, internal: bool = False, sizes: bool = True) -> list[TopicInfo]:
        topics = [t for t in self._metadata() if internal or not t.internal]
        self._fill_offsets(topics)
        if sizes:
            self._fill_sizes(topics)
        return topics

    def topic(self, name: str, sizes: bool = True) -> TopicInfo:
        # Metadata for all topics, not for this one: asking by name lets a broker with
        # auto.create.topics.enable create it, and a page view must not make a topic.
        found = [t for t in self._metadata() if t.name == name]
        if not found:
            raise ConsoleError("UNKNOWN_TOPIC_OR_PART", f"no topic {name!r}", 404)
        self._fill_offsets(found)
        if sizes:
            self._fill_sizes(found)
            self._fill_tiers(found[0])
        return found[0]

    def configs(self, topic: str) -> list[ConfigInfo]:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        (future,) = self.admin.describe_configs([resource],
                                                request_timeout=self.timeout).values()
        entries = _wait(future, self.timeout + 1)
        return [ConfigInfo(e.name, e.value, _enum_name(e.source), bool(e.is_default),
                           bool(e.is_read_only), bool(e.is_sensitive))
                for e in sorted(entries.values(), key=lambda e: e.name)]

    def set_config(self, topic: str, name: str, value: str | None) -> None:
        """Set one topic setting (IncrementalAlterConfigs SET), or remove it (DELETE) so
        the broker's default applies again."""
        op = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry(name, value, incremental_operation=op)])
        (future,) = self.admin.incremental_alter_configs(
            [resource], request_timeout=self.timeout).values()
        _wait(future, self.timeout + 1)

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: dict[str, str]) -> None:
        new = NewTopic(name, num_partitions=partitions,
                       replication_factor=replication_factor, config=configs)
        (future,) = self.admin.create_topics(
            [new], request_timeout=self.timeout, operation_timeout=self.timeout).values()
        _wait(future, self.timeout + 1)

    def delete_topic(self, name: str) -> None:
        (future,) = self.admin.delete_topics(
            [name], request_timeout=self.timeout, operation_timeout=self.timeout).values()
        _wait(future, self.timeout + 1)

    # records

    def produce(self, topic: str, partition: int | None, key: bytes | None,
                value: bytes | None, headers: list[tuple[str, bytes]]) -> tuple[int, int]:
        """Write one record and wait for its acknowledgement: (partition, offset)."""
        with self._lock:  # pages are served on several threads
            if self._producer is None:
                self._producer = Producer({**self.config, "logger": log, "linger.ms": 0})
        outcome: list[Any] = []
        kwargs: dict[str, Any] = {"key": key, "value": value, "headers": headers or None,
                                  "on_delivery": lambda err, msg: outcome.append((err, msg))}
        if partition is not None:
            kwargs["partition"] = partition
        try:
            self._producer.produce(topic, **kwargs)
        except (KafkaException, BufferError) as exc:
            raise _error(exc) from None
        deadline = time.monotonic() + self.timeout
        while not outcome and time.monotonic() < deadline:
            self._producer.poll(0.1)
        if not outcome:
            raise ConsoleError("TIMED_OUT", "the record was not acknowledged within "
                               f"{self.timeout:g} s")
        err, msg = outcome[0]
        if err is not None:
            raise _error(KafkaException(err))
        return msg.partition(), msg.offset()

    def messages(self, topic: str, partition: int | None = None, *,
                 offset: int | None = None, timestamp_ms: int | None = None,
                 limit: int = 50, contains: str = "") -> tuple[list[Message], int]:
        """Records of a topic for the browser, and how many were read to find them.

        Without ``offset`` and ``timestamp_ms``: the newest ``limit`` records, newest
        first (of every partition, merged by timestamp, when ``partition`` is None). With
        one of them: ``limit`` records from that position on, oldest first. ``contains``
        keeps the records whose key or value holds that text; at most ``MAX_SCAN``
        records are read for one page.
        """
        info = self.topic(topic, sizes=False)
        chosen = [p for p in info.partitions
                  if (partition is None or p.partition == partition) and p.leader >= 0]
        if partition is not None and not chosen:
            raise ConsoleError("UNKNOWN_TOPIC_OR_PART",
                               f"topic {topic!r} has no partition {partition}", 404)
        needle = contains.encode()

        def match(m: Message) -> bool:
            return not needle or needle in (m.key or b"") or needle in (m.value or b"")

        consumer = Consumer({**self.config, "logger": log, "group.id": "odradek-console",
                             "enable.auto.commit": False, "enable.partition.eof": True,
                             "fetch.wait.max.ms": 100})
        try:
            found: list[Message] = []
            scanned = 0
            forward = offset is not None or timestamp_ms is not None
            starts = self._starts(consumer, topic, chosen, offset, timestamp_ms)
            for p in chosen:
                budget = MAX_SCAN - scanned
                if budget <= 0:
                    break
                if forward:
                    got, read = _read_forward(consumer, topic, p, starts[p.partition], limit,
                                              match, budget, self.timeout)
                else:
                    got, read = _read_back(consumer, topic, p, limit, match, budget,
                                           self.timeout)
                found.extend(got)
                scanned += read
        finally:
            consumer.close()
        if forward:
            found.sort(key=lambda m: (m.timestamp_ms, m.partition, m.offset))
        else:
            found.sort(key=lambda m: (m.timestamp_ms, m.offset), reverse=True)
        return found[:limit], scanned

    def _starts(self, consumer: Consumer, topic: str, partitions: list[PartitionInfo],
                offset: int | None, timestamp_ms: int | None) -> dict[int, int]:
        if timestamp_ms is None:
            return {p.partition: max(p.start, offset or 0) for p in partitions}
        try:
            found = consumer.offsets_for_times(
                [TopicPartition(topic, p.partition, timestamp_ms) for p in partitions],
                timeout=self.timeout)
        except KafkaException as exc:
            raise _error(exc) from None
        ends = {p.partition: p.end for p in partitions}
        # No record at or after the time: start at the end (nothing to show there).
        return {tp.partition: tp.offset if tp.offset >= 0 else ends[tp.partition]
                for tp in found}

    # groups

    def groups(self) -> list[GroupInfo]:
        listed = _wait(self.admin.list_consumer_groups(request_timeout=self.timeout),
                       self.timeout + 1)
        groups = [GroupInfo(g.group_id, _enum_name(g.state), _enum_name(g.type))
                  for g in sorted(listed.valid, key=lambda g: g.group_id)]
        for g in groups:
            g.offsets = self._committed(g.group_id)
        self._fill_ends(groups)
        return groups

    def group(self, group_id: str) -> GroupInfo:
        (future,) = self.admin.describe_consumer_groups(
            [group_id], request_timeout=self.timeout).values()
        d = _wait(future, self.timeout + 1)
        members = [
            MemberInfo(m.member_id, m.client_id, m.host, m.group_instance_id,
                       sorted((tp.topic, tp.partition)
                              for tp in (m.assignment.topic_partitions if m.assignment
                                         else [])))
            for m in d.members]
        info = GroupInfo(group_id, _enum_name(d.state), _enum_name(d.type),
                         protocol=d.partition_assignor or "",
                         coordinator=d.coordinator.id if d.coordinator else None,
                         members=sorted(members, key=lambda m: m.client_id))
        owners = {tp: m.client_id for m in members for tp in m.assignment}
        committed = {(p.topic, p.partition): p for p in self._committed(group_id)}
        for tp in owners:  # assigned partitions without a commit yet show too
            committed.setdefault(tp, PartitionLag(tp[0], tp[1], None, 0, None))
        info.offsets = sorted(committed.values(), key=lambda p: (p.topic, p.partition))
        for p in info.offsets:
            p.member = owners.get((p.topic, p.partition))
        self._fill_ends([info])
        return info

    def _committed(self, group_id: str) -> list[PartitionLag]:
        (future,) = self.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id)],
            request_timeout=self.timeout).values()
        result = _wait(future, self.timeout + 1)
        return [PartitionLag(tp.topic, tp.partition,
                             tp.offset if tp.offset >= 0 else None, 0, None)
                for tp in result.topic_partitions or []]

    def _fill_ends(self, groups: list[GroupInfo]) -> None:
        keys = {(p.topic, p.partition) for g in groups for p in g.offsets}
        if not keys:
            return
        futures = self.admin.list_offsets(
            {TopicPartition(t, p): OffsetSpec.latest() for t, p in keys},
            request_timeout=self.timeout)
        ends = {}
        for tp, future in futures.items():
            try:
                ends[tp.topic, tp.partition] = future.result(timeout=self.timeout + 1).offset
            except KafkaException:
                continue  # a deleted topic's old commits: no end, no lag
        for g in groups:
            for p in g.offsets:
                p.end = ends.get((p.topic, p.partition), p.committed or 0)

    def reset_offsets(self, group_id: str, topic: str, to: str,
                      value: int | None = None) -> list[tuple[int, int]]:
        """Move a group's committed offsets on every partition of ``topic`` to
        ``earliest``, ``latest``, an ``offset`` or the first record at or after a
        ``timestamp`` (ms), as ``kafka-consumer-groups.sh --reset-offsets`` does; only
        while the group has no members. Returns (partition, new offset) pairs."""
        group = self.group(group_id)
        if not group.resettable:
            raise ConsoleError(
                "NON_EMPTY_GROUP", f"offsets can only be reset while group {group_id!r} "
                f"is inactive, but it is {group.state.lower()} with {len(group.members)} "
                "member(s)", 409)
        info = self.topic(topic, sizes=False)
        if to == "earliest":
            targets = {p.partition: p.start for p in info.partitions}
        elif to == "latest":
            targets = {p.partition: p.end for p in info.partitions}
        elif to == "offset" and value is not None:
            # Kafka clamps an offset outside the log to its start or end.
            targets = {p.partition: min(max(value, p.start), p.end) for p in info.partitions}
        elif to == "timestamp" and value is not None:
            consumer = Consumer({**self.config, "logger": log, "group.id": group_id,
                                 "enable.auto.commit": False})
            try:
                targets = self._starts(consumer, topic, info.partitions, None, value)
            finally:
                consumer.close()
        else:
            raise ConsoleError("INVALID_REQUEST", f"cannot reset to {to!r} {value!r}", 400)
        request = ConsumerGroupTopicPartitions(
            group_id, [TopicPartition(topic, p, o) for p, o in sorted(targets.items())])
        (future,) = self.admin.alter_consumer_group_offsets(
            [request], request_timeout=self.timeout).values()
        result = _wait(future, self.timeout + 1)
        for tp in result.topic_partitions:
            if tp.error is not None:
                raise _error(KafkaException(tp.error))
        return sorted(targets.items())


# --- reading a partition ----------------------------------------------------------------


def _to_message(msg: Any) -> Message:
    _, ts = msg.timestamp()
    headers = [(k, v) for k, v in (msg.headers() or [])]
    return Message(msg.partition(), msg.offset(), ts, msg.key(), msg.value(), headers)


def _read_range(consumer: Consumer, topic: str, partition: int, start: int, stop: int,
                want: int, timeout: float) -> list[Message]:
    """Records from ``start`` up to (not including) ``stop``, at most ``want``."""
    consumer.assign([TopicPartition(topic, partition, start)])
    out: list[Message] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < want and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=min(500, want - len(out)),
                                        timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return out
                    raise _error(KafkaException(err))
                offset = msg.offset()
                assert offset is not None  # a consumed record (no error) has its offset
                if offset >= stop:
                    return out
                out.append(_to_message(msg))
                if len(out) >= want:
                    break
    finally:
        consumer.unassign()
    return out


def _read_back(consumer: Consumer, topic: str, p: PartitionInfo, limit: int,
               match: Callable[[Message], bool], budget: int,
               timeout: float) -> tuple[list[Message], int]:
    """The newest ``limit`` matching records of a partition, newest first, reading
    backwards in windows; and how many records were read."""
    found: list[Message] = []
    scanned = 0
    high = p.end
    window = max(limit, 100)
    while high > p.start and len(found) < limit and scanned < budget:
        start = max(p.start, high - min(window, budget - scanned))
        got = _read_range(consumer, topic, p.partition, start, high, high - start, timeout)
        scanned += high - start
        found.extend(m for m in reversed(got) if match(m))
        high = start
        window = min(window * 4, MAX_SCAN)
    return found[:limit], scanned


def _read_forward(consumer: Consumer, topic: str, p: PartitionInfo, start: int, limit: int,
                  match: Callable[[Message], bool], budget: int,
                  timeout: float) -> tuple[list[Message], int]:
    found: list[Message] = []
    scanned = 0
    position = start
    while position < p.end and len(found) < limit and scanned < budget:
        want = min(max(limit, 100), budget - scanned)
        got = _read_range(consumer, topic, p.partition, position, p.end, want, timeout)
        if not got:
            break
        scanned += len(got)
        found.extend(m for m in got if match(m))
        position = got[-1].offset + 1
    return found[:limit], scanned


# --- showing bytes ---------------------------------------------------------------------


def render_bytes(data: bytes | None, mode: str = "auto") -> tuple[str, str]:
    """How the browser shows a key or value: (kind, text) with kind ``null``, ``json``
    (pretty-printed), ``text`` or ``hex``. ``auto`` and ``json`` pick JSON for a JSON
    object or array, then text for printable UTF-8, else hex; ``hex`` is always hex."""
    if data is None:
        return "null", "null"
    if mode == "hex":
        return "hex", data.hex(" ")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "hex", data.hex(" ")
    if mode in ("auto", "json") and text.lstrip()[:1] in ("{", "["):
        try:
            return "json", json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pass
    if _printable(text):
        return "text", text
    return "hex", data.hex(" ")


def _printable(text: str) -> bool:
    return all(c.isprintable() or c in "\n\r\t" for c in text)
