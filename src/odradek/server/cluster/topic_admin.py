"""What any broker of a cluster writes to ZooKeeper for a client about topics: topic
creation, deletion, partition additions and config changes (CreateTopics, DeleteTopics,
CreatePartitions, AlterConfigs), the internal topics at the first FindCoordinator that
needs them (``ensure_internal_topic``), and the waits for their effect
(``wait_for_leaders``, ``wait_deleted``). The controller acts on what is written
(``server/cluster/controller.py``); every broker's metadata cache follows it by watches.

Owned by the broker's ``ClusterNode`` (``node.topics``), which answers the ``Topology``
protocol's topic questions by asking this.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from odradek.cluster import state as zk
from odradek.cluster.placement import PlacementError, assign_replicas, check_assignment
from odradek.cluster.state import TopicAssignment
from odradek.coordinator import (
    INTERNAL_TOPICS,
    OFFSETS_TOPIC,
    SHARE_GROUP_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC,
)
from odradek.server.cluster.store import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    Op,
    StoreError,
)
from odradek.server.coordinators.coordinator_runtime import INTERNAL_TOPIC_CONFIG
from odradek.server.metadata import Topic, TopicError, validate_topic_name
from odradek.storage.config import LogConfig

if TYPE_CHECKING:
    from odradek.server.cluster.node import ClusterNode

log = logging.getLogger(__name__)


class TopicAdmin:
    """A cluster node's topic writes (any broker makes them; the controller acts on them)."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node
        self.config = node.config
        self.store = node.store

    def live_racks(self) -> dict[int, str | None]:
        return {b: info.rack for b, info in self.node.metadata.brokers.items()}

    async def create_topic(self, name: str, partitions: int | None, replication_factor: int | None,
                           configs: Mapping[str, str] | None = None, *,
                           assignment: Mapping[int, Sequence[int]] | None = None,
                           validate_only: bool = False) -> Topic:
        validate_topic_name(name)
        if name in self.node.metadata.assignments:
            raise TopicError("TOPIC_ALREADY_EXISTS", f"topic {name!r} already exists")
        configs = {k: str(v) for k, v in (configs or {}).items()}
        try:
            LogConfig.from_kafka(configs)
        except ValueError as exc:
            raise TopicError("INVALID_CONFIG", str(exc)) from None
        live = self.live_racks()
        try:
            if assignment:
                check_assignment(assignment, list(live))
                replicas = {p: list(r) for p, r in assignment.items()}
            else:
                count = self.config["num.partitions"] if partitions is None or partitions < 0 \
                    else partitions
                rf = self._default_rf(name) if replication_factor is None or \
                    replication_factor < 0 else replication_factor
                replicas = assign_replicas(live, count, rf)
        except PlacementError as exc:
            raise TopicError(exc.kafka_error, str(exc)) from None
        if sorted(replicas) != list(range(len(replicas))):
            raise TopicError("INVALID_REPLICA_ASSIGNMENT",
                             "partitions must be numbered from 0 without gaps")
        topic_assignment = TopicAssignment(
            name, uuid.uuid4(), tuple(tuple(replicas[p]) for p in range(len(replicas))))
        topic = Topic(name, topic_assignment.topic_id, topic_assignment.partitions, configs,
                      name in INTERNAL_TOPICS)
        if validate_only:
            return topic
        marker = zk.delete_marker_path(name)
        try:
            await self.store.multi([
                # Not while a deletion of the name is asked and unfinished (Kafka's
                # "marked for deletion"): creating the marker and deleting it again in
                # the same transaction is ZooKeeper's only "absent" check.
                Op.create(marker), Op.delete(marker),
                Op.create(zk.config_path(name), zk.config_to_json(configs)),
                Op.create(zk.topic_path(name), topic_assignment.to_json()),
            ])
        except NodeExistsError as exc:
            if exc.at(marker):
                raise TopicError("TOPIC_ALREADY_EXISTS",
                                 f"topic {name!r} is marked for deletion") from None
            raise TopicError("TOPIC_ALREADY_EXISTS", f"topic {name!r} already exists") from None
        except StoreError as exc:
            raise TopicError("REQUEST_TIMED_OUT", f"ZooKeeper: {exc}") from None
        log.info("created topic %s: %d partition(s), replicas %s", name,
                 topic_assignment.partitions, [list(r) for r in topic_assignment.replicas])
        return topic

    async def ensure_internal_topic(self, name: str) -> None:
        """Create ``__consumer_offsets``, ``__transaction_state`` or
        ``__share_group_state`` if it does not exist (Kafka creates them at the first
        FindCoordinator that needs them), with its settings: compacted,
        ``*.num.partitions`` partitions, ``*.replication.factor`` replicas — refused, as
        in Kafka, while fewer brokers are alive — and for transactions and share state
        ``min.insync.replicas`` = ``transaction.state.log.min.isr`` /
        ``share.coordinator.state.topic.min.isr``."""
        if name in self.node.metadata.assignments:
            return
        cfg = self.config
        configs = dict(INTERNAL_TOPIC_CONFIG)
        if name == OFFSETS_TOPIC:
            partitions = cfg["offsets.topic.num.partitions"]
            configs["segment.bytes"] = str(cfg["offsets.topic.segment.bytes"])
        elif name == SHARE_GROUP_STATE_TOPIC:
            partitions = cfg["share.coordinator.state.topic.num.partitions"]
            configs["segment.bytes"] = str(cfg["share.coordinator.state.topic.segment.bytes"])
            configs["min.insync.replicas"] = str(cfg["share.coordinator.state.topic.min.isr"])
        else:
            partitions = cfg["transaction.state.log.num.partitions"]
            configs["segment.bytes"] = str(cfg["transaction.state.log.segment.bytes"])
            configs["min.insync.replicas"] = str(cfg["transaction.state.log.min.isr"])
        try:
            await self.create_topic(name, partitions, None, configs)
        except TopicError as exc:
            if exc.kafka_error != "TOPIC_ALREADY_EXISTS":
                log.warning("cannot create %s yet: %s", name, exc)

    def _default_rf(self, name: str) -> int:
        if name == OFFSETS_TOPIC:
            return self.config["offsets.topic.replication.factor"]
        if name == TRANSACTION_STATE_TOPIC:
            return self.config["transaction.state.log.replication.factor"]
        if name == SHARE_GROUP_STATE_TOPIC:
            return self.config["share.coordinator.state.topic.replication.factor"]
        return self.config["default.replication.factor"]

    async def wait_for_leaders(self, counts: Mapping[str, int], timeout_s: float) -> bool:
        """Until each of these topics has (at least) its number of partitions here and
        every one of them a leader (what a client that creates a topic, or adds
        partitions, and then produces to it needs), or time runs out."""
        md = self.node.metadata

        def ready() -> bool:
            for name, count in counts.items():
                assignment = md.assignments.get(name)
                if assignment is None or assignment.partitions < count:
                    return False
                for p in range(assignment.partitions):
                    state = md.states.get((name, p))
                    if state is None or state.leader < 0:
                        return False
            return True

        return await md.wait_for(ready, timeout_s)

    async def delete_topic(self, name: str) -> Topic:
        topic = self.node.metadata.topics.get(name)
        if topic is None:
            raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
        try:
            await self.store.create(zk.delete_marker_path(name), b"")
        except NodeExistsError:
            pass  # already marked for deletion
        except StoreError as exc:
            raise TopicError("REQUEST_TIMED_OUT", f"ZooKeeper: {exc}") from None
        return topic

    async def wait_deleted(self, topics: Mapping[str, uuid.UUID], timeout_s: float
                           ) -> set[str]:
        """Wait until these topics (name -> topic id) are gone from this broker's
        metadata (the controller has deleted them; a topic of the same name created
        since is another one), or time runs out; the names of those still there."""
        def left() -> set[str]:
            assignments = self.node.metadata.assignments
            return {n for n, topic_id in topics.items()
                    if n in assignments and assignments[n].topic_id == topic_id}

        await self.node.metadata.wait_for(lambda: not left(), timeout_s)
        return left()

    async def add_partitions(self, name: str, count: int,
                             assignment: Sequence[Sequence[int]] | None = None, *,
                             validate_only: bool = False) -> Topic:
        for _ in range(5):
            try:
                data, version = await self.store.get(zk.topic_path(name))
            except NoNodeError:
                raise TopicError("UNKNOWN_TOPIC_OR_PARTITION",
                                 f"topic {name!r} does not exist") from None
            try:
                current = TopicAssignment.from_json(name, data)
            except zk.ZnodeFormatError as exc:
                log.error("cannot add partitions to %s: %s: %s", name, zk.topic_path(name), exc)
                raise TopicError("UNKNOWN_SERVER_ERROR",
                                 f"{zk.topic_path(name)} is corrupt: {exc}") from None
            if count <= current.partitions:
                raise TopicError("INVALID_PARTITIONS",
                                 f"topic {name!r} has {current.partitions} partitions; the new "
                                 f"count must be larger, got {count}")
            added = count - current.partitions
            rf = len(current.replicas[0]) if current.replicas else 1
            try:
                if assignment:
                    if len(assignment) != added:
                        raise PlacementError(
                            f"{len(assignment)} assignments for {added} new partitions")
                    new = {current.partitions + i: list(r) for i, r in enumerate(assignment)}
                    check_assignment(new, list(self.live_racks()))
                else:
                    new = assign_replicas(self.live_racks(), added, rf,
                                          first_partition=current.partitions)
            except PlacementError as exc:
                raise TopicError(exc.kafka_error, str(exc)) from None
            grown = TopicAssignment(name, current.topic_id, current.replicas + tuple(
                tuple(new[p]) for p in sorted(new)), current.adding, current.removing)
            topic = Topic(name, grown.topic_id, grown.partitions,
                          dict(self.node.metadata.configs.get(name, {})), False)
            if validate_only:
                return topic
            try:
                await self.store.set(zk.topic_path(name), grown.to_json(), version)
            except BadVersionError:
                continue
            except StoreError as exc:
                raise TopicError("REQUEST_TIMED_OUT", f"ZooKeeper: {exc}") from None
            return topic
        raise TopicError("REQUEST_TIMED_OUT", f"topic {name!r} kept changing; try again")

    async def set_configs(self, name: str, configs: Mapping[str, str], *,
                          validate_only: bool = False) -> Topic:
        topic = self.node.metadata.topics.get(name)
        if topic is None:
            raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
        try:
            LogConfig.from_kafka(configs)
        except ValueError as exc:
            raise TopicError("INVALID_CONFIG", str(exc)) from None
        if not validate_only:
            data = zk.config_to_json(configs)
            # Only while the topic exists: a config written for a topic deleted meanwhile
            # would keep its name from being created again.
            exists = Op.check(zk.topic_path(name), -1)
            try:
                try:
                    await self.store.multi([exists, Op.set(zk.config_path(name), data)])
                except NoNodeError as exc:
                    if not exc.at(zk.config_path(name)):
                        raise
                    await self.store.multi([exists, Op.create(zk.config_path(name), data)])
            except NoNodeError:
                raise TopicError("UNKNOWN_TOPIC_OR_PARTITION",
                                 f"topic {name!r} does not exist") from None
            except StoreError as exc:
                raise TopicError("REQUEST_TIMED_OUT", f"ZooKeeper: {exc}") from None
            # The watch brings it to every broker; this one applies it now, so that a
            # DescribeConfigs right after the answer sees it.
            self.node.metadata.configs[name] = dict(configs)
            self.node.metadata._refresh_topic(name)
            self.node.replicas.configs_changed(name)
        return Topic(name, topic.topic_id, topic.partitions, dict(configs), topic.internal)
