"""A broker's view of the cluster, kept current from the coordination store by watches.

What Kafka's brokers learn from the controller's UpdateMetadata and LeaderAndIsr
requests, every broker here reads from ZooKeeper itself: the live brokers (with their
registrations, so a bounce is visible), the controller, every topic's assignment and
config overrides, and every partition's state (leader, leader epoch, ISR). This is a
departure from Kafka's ZooKeeper-era design, which had the controller push those
requests (API keys 4, 5 and 6) to every broker: Kafka 4 removed them and kio does not
know them, and a watch per partition state gives each broker the same information with
no second channel to keep consistent (docs/architecture.md, "The cluster").

Every change is applied on the event loop (the store delivers callbacks there) and then
reported to the listener, which reacts (the replica manager changes roles, the
controller re-decides).

A znode whose bytes do not parse (``ZnodeFormatError``: another broker's bug, a hand
with zkCli) is logged as one ERROR line naming its path and treated as absent: a new
topic or state is not taken up, one known before keeps its last good value (dropping it
would have the replica manager delete the partition's log), and everything else is
served as before. ``topics`` holds the same ``Topic`` objects as the single
node's ``MetadataStore``, so handlers read either the same way.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Protocol

from odradek.cluster import state as zk
from odradek.cluster.state import BrokerInfo, PartitionState, TopicAssignment, TopicPartition
from odradek.coordinator import INTERNAL_TOPICS
from odradek.server.cluster.store import CoordinationStore, NoNodeError, StoreError, Watch
from odradek.server.features import DEFAULT_LEVELS, FinalizedFeatures
from odradek.server.metadata import Topic
from odradek.server.tasks import TaskSet

log = logging.getLogger(__name__)



class MetadataListener(Protocol):
    def partitions_changed(self, partitions: list[TopicPartition]) -> None:
        """Assignment or state of these partitions changed (or they were removed)."""

    def brokers_changed(self) -> None:
        """The set of live brokers (or a registration) changed."""

    def topic_removed(self, topic: str, partitions: int) -> None:
        """A topic's assignment znode went away (the topic was deleted), or now holds
        another topic of the same name (deleted and created again between two readings
        of its watch)."""

    def topic_unusable(self, topic: str) -> None:
        """A topic's znode exists but is empty or does not parse."""

    def configs_changed(self, topic: str) -> None:
        """A topic's config overrides changed."""

    def broker_configs_changed(self) -> None:
        """This broker's dynamic configs (or the cluster-wide defaults) changed."""


class ClusterMetadata:
    """Brokers, controller, topics and partition states as the store says, by watches."""

    def __init__(self, store: CoordinationStore, cluster_id: str, node_id: int = -1) -> None:
        self.store = store
        self.cluster_id = cluster_id
        self.node_id = node_id
        # Dynamic broker configs: this broker's ("N") and the cluster default's.
        self.broker_configs: dict[str, dict[str, str]] = {}
        self.brokers: dict[int, BrokerInfo] = {}  # live, registered brokers
        self.shutting_down: frozenset[int] = frozenset()  # in controlled shutdown
        self.controller_id = -1
        self.assignments: dict[str, TopicAssignment] = {}
        self.topics: dict[str, Topic] = {}
        # KIP-516: Fetch v13+ names topics by id; kept with every change to ``topics``
        self.names_by_id: dict[uuid.UUID, str] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self.states: dict[TopicPartition, PartitionState] = {}
        self.listeners: list[MetadataListener] = []
        # Finalized feature levels (/feature; none there: a new cluster's defaults).
        self.features = FinalizedFeatures(dict(DEFAULT_LEVELS), 0)
        self._topic_watches: dict[str, list[Watch]] = {}
        self._state_watches: dict[TopicPartition, Watch] = {}
        self._watches: list[Watch] = []
        self._brokers_lock = asyncio.Lock()
        self._broker_children: list[str] = []
        self._pending_first: set[object] = set()  # watches that have not fired yet
        self._loaded = asyncio.Event()
        self._tasks = TaskSet("metadata cache")
        self._changed = asyncio.Event()  # set after every change, for waiters
        self.next_producer_id: Callable[[], int] | None = None  # set by ClusterNode

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self, timeout_s: float) -> None:
        """Set every watch and wait until each has delivered the current state once."""
        self._expect("brokers")
        self._expect("topics")
        self._expect("controller")
        self._watches.append(self.store.watch_children(zk.BROKER_IDS_PATH, self._on_brokers))
        self._watches.append(self.store.watch_children(zk.TOPICS_PATH, self._on_topics))
        self._watches.append(self.store.watch_data(zk.CONTROLLER_PATH, self._on_controller))
        self._watches.append(self.store.watch_children(zk.CONTROLLED_SHUTDOWN_PATH,
                                                       self._on_shutdowns))
        self._expect("feature")
        self._watches.append(self.store.watch_data(zk.FEATURE_PATH, self._on_features))
        for name in (str(self.node_id), zk.DEFAULT_BROKER):
            self._expect(("broker config", name))

            def on_broker_config(data: bytes | None, _v: int, name: str = name) -> None:
                self._on_broker_config(name, data)

            self._watches.append(self.store.watch_data(zk.broker_config_path(name),
                                                       on_broker_config))
        async with asyncio.timeout(timeout_s):
            await self._loaded.wait()

    async def stop(self) -> None:
        for watch in self._watches:
            watch.cancel()
        for watches in self._topic_watches.values():
            for watch in watches:
                watch.cancel()
        for watch in self._state_watches.values():
            watch.cancel()
        self._watches.clear()
        self._topic_watches.clear()
        self._state_watches.clear()
        await self._tasks.close()

    def _expect(self, key: object) -> None:
        self._pending_first.add(key)
        self._loaded.clear()

    def _fired(self, key: object) -> None:
        self._pending_first.discard(key)
        if not self._pending_first:
            self._loaded.set()

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``predicate()`` holds after some change (True) or time runs out."""
        try:
            async with asyncio.timeout(timeout_s):
                while not predicate():
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            return predicate()
        return True

    def _notify_changed(self) -> None:
        self._changed.set()

    # --- brokers and controller ---------------------------------------------------------

    def _on_brokers(self, children: list[str]) -> None:
        self._broker_children = children
        self._tasks.spawn(self._read_brokers())

    async def _read_brokers(self) -> None:
        # One reader at a time; the last children list wins (later events re-read).
        async with self._brokers_lock:
            children = self._broker_children
            brokers: dict[int, BrokerInfo] = {}
            for child in children:
                node = zk.broker_id(child)
                if node is None:
                    continue
                path = zk.broker_path(node)
                try:
                    data, _ = await self.store.get(path)
                    owner = await self.store.ephemeral_owner(path)
                except NoNodeError:
                    continue  # gone again meanwhile; a later event says so
                except StoreError as exc:
                    log.warning("cannot read broker registration %s: %s", path, exc)
                    continue
                try:
                    brokers[node] = BrokerInfo.from_json(node, data, owner or -1)
                except zk.ZnodeFormatError as exc:
                    log.error("ignoring broker registration %s: %s", path, exc)
            if children is not self._broker_children:
                return  # a newer event is queued behind the lock; it reads again
            if brokers != self.brokers:
                self.brokers = brokers
                for listener in self.listeners:
                    listener.brokers_changed()
                self._notify_changed()
            self._fired("brokers")

    def _on_shutdowns(self, children: list[str]) -> None:
        self.shutting_down = frozenset(b for b in map(zk.broker_id, children) if b is not None)
        self._notify_changed()

    def _on_broker_config(self, name: str, data: bytes | None) -> None:
        self._fired(("broker config", name))
        try:
            configs = zk.config_from_json(data)
        except zk.ZnodeFormatError as exc:
            log.error("ignoring the dynamic broker configs in %s: %s",
                      zk.broker_config_path(name), exc)
            return
        if self.broker_configs.get(name, {}) != configs:
            self.broker_configs[name] = configs
            for listener in self.listeners:
                listener.broker_configs_changed()
            self._notify_changed()

    def _on_features(self, data: bytes | None, version: int) -> None:
        self._fired("feature")
        try:
            levels = zk.features_from_json(data)
        except zk.ZnodeFormatError as exc:
            log.error("ignoring %s: %s", zk.FEATURE_PATH, exc)
            return
        self.record_features(levels, version)

    def record_features(self, levels: dict[str, int] | None, version: int) -> None:
        """The levels of /feature at this znode version (None: no znode); the epoch
        clients see is the version + 1 (0: the defaults, never changed)."""
        if levels is None:
            self.features = FinalizedFeatures(dict(DEFAULT_LEVELS), 0)
        elif version + 1 > self.features.epoch:
            self.features = FinalizedFeatures(levels, version + 1)

    def _on_controller(self, data: bytes | None, _version: int) -> None:
        try:
            self.controller_id = zk.controller_from_json(data)
        except zk.ZnodeFormatError as exc:
            log.error("ignoring %s: %s", zk.CONTROLLER_PATH, exc)
            self.controller_id = -1
        self._notify_changed()
        self._fired("controller")

    # --- topics and partitions ----------------------------------------------------------

    def _on_topics(self, children: list[str]) -> None:
        names = set(children)
        for name in list(self._topic_watches):
            if name not in names:
                self._drop_topic(name)
        for name in sorted(names - set(self._topic_watches)):
            self._watch_topic(name)
        self._fired("topics")

    def _watch_topic(self, name: str) -> None:
        self._expect(("topic", name))
        self._expect(("config", name))

        def on_topic(data: bytes | None, v: int, n: str = name) -> None:
            self._on_topic(n, data)

        def on_config(data: bytes | None, v: int, n: str = name) -> None:
            self._on_config(n, data)

        self._topic_watches[name] = [
            self.store.watch_data(zk.topic_path(name), on_topic),
            self.store.watch_data(zk.config_path(name), on_config),
        ]

    def _on_topic(self, name: str, data: bytes | None) -> None:
        self._fired(("topic", name))
        if data is None:
            if name in self.assignments:
                self._drop_topic(name)
            return
        if not data:
            # No broker writes a topic without data: ZooKeeper made this znode as the
            # parent of another (a deletion that did not finish, in versions before
            # the controller's writes were made conditional). The controller removes it.
            log.info("topic %s: %s is empty, no topic; the controller removes it", name,
                     zk.topic_path(name))
            self._unusable(name)
            return
        try:
            assignment = TopicAssignment.from_json(name, data)
        except zk.ZnodeFormatError as exc:
            log.error("ignoring topic %s: %s: %s", name, zk.topic_path(name), exc)
            self._unusable(name)
            return
        old = self.assignments.get(name)
        if old is not None and old.topic_id != assignment.topic_id:
            # Deleted and created again between two readings of this watch: the old
            # topic goes first, everywhere (its replicas' logs must not be served as the
            # new topic's, and its partitions' cached states are not the new ones'),
            # then the name is watched afresh and its first reading is the new topic.
            log.info("topic %s was deleted and created again (topic id %s -> %s)", name,
                     old.topic_id, assignment.topic_id)
            self._drop_topic(name)
            self._watch_topic(name)
            return
        self.assignments[name] = assignment
        self._refresh_topic(name)
        changed = [(name, p) for p in range(assignment.partitions)
                   if old is None or p >= old.partitions
                   or old.replicas[p] != assignment.replicas[p]]
        for p in range(assignment.partitions):
            tp = (name, p)
            if tp not in self._state_watches:
                self._expect(("state", tp))

                def on_state(data: bytes | None, version: int,
                             tp: TopicPartition = tp) -> None:
                    self._on_state(tp, data, version)

                self._state_watches[tp] = self.store.watch_data(zk.state_path(name, p),
                                                                on_state)
        if changed:
            self._partitions_changed(changed)

    def _on_config(self, name: str, data: bytes | None) -> None:
        self._fired(("config", name))
        try:
            configs = zk.config_from_json(data)
        except zk.ZnodeFormatError as exc:
            log.error("ignoring the config of topic %s: %s: %s", name, zk.config_path(name),
                      exc)
            return
        if name not in self._topic_watches:
            return
        self.configs[name] = configs
        self._refresh_topic(name)
        for listener in self.listeners:
            listener.configs_changed(name)
        self._notify_changed()

    def _refresh_topic(self, name: str) -> None:
        assignment = self.assignments.get(name)
        if assignment is None:
            return
        old = self.topics.get(name)
        if old is not None and old.topic_id != assignment.topic_id:
            self.names_by_id.pop(old.topic_id, None)  # re-created under the same name
        self.topics[name] = Topic(name, assignment.topic_id, assignment.partitions,
                                  dict(self.configs.get(name, {})), name in INTERNAL_TOPICS)
        self.names_by_id[assignment.topic_id] = name

    def _on_state(self, tp: TopicPartition, data: bytes | None, version: int) -> None:
        self._fired(("state", tp))
        if data is None:
            if self.states.pop(tp, None) is not None:
                self._partitions_changed([tp])
            return
        try:
            state = PartitionState.from_json(data, version)
        except zk.ZnodeFormatError as exc:
            log.error("ignoring the state of %s-%d: %s: %s", tp[0], tp[1],
                      zk.state_path(*tp), exc)
            return
        old = self.states.get(tp)
        if old is not None and old.version >= version and old.leader_epoch >= state.leader_epoch:
            return  # an older read arriving late (our own write is recorded first)
        self.states[tp] = state
        self._partitions_changed([tp])

    def record_state(self, tp: TopicPartition, state: PartitionState) -> None:
        """A state this broker wrote itself (a leader's ISR change), known before the
        watch reports it."""
        old = self.states.get(tp)
        if old is None or state.version > old.version:
            self.states[tp] = state
            self._partitions_changed([tp])

    def record_topic(self, name: str, data: bytes) -> None:
        """A topic assignment this broker wrote itself (the controller's reassignment
        steps), known before the watch reports it: ListPartitionReassignments right
        after a move finished must not show it still running."""
        if name in self._topic_watches:
            self._on_topic(name, data)

    def _drop_topic(self, name: str) -> None:
        for watch in self._topic_watches.pop(name, []):
            watch.cancel()
        assignment = self.assignments.pop(name, None)
        topic = self.topics.pop(name, None)
        if topic is not None:
            self.names_by_id.pop(topic.topic_id, None)
        self.configs.pop(name, None)
        partitions = assignment.partitions if assignment is not None else 0
        for tp in [tp for tp in self._state_watches if tp[0] == name]:
            self._state_watches.pop(tp).cancel()
            self.states.pop(tp, None)
            self._fired(("state", tp))
        self._fired(("topic", name))
        self._fired(("config", name))
        for listener in self.listeners:
            listener.topic_removed(name, partitions)
        self._notify_changed()

    def _unusable(self, name: str) -> None:
        for listener in self.listeners:
            listener.topic_unusable(name)

    def _partitions_changed(self, tps: list[TopicPartition]) -> None:
        for listener in self.listeners:
            listener.partitions_changed(tps)
        self._notify_changed()

    # --- queries -------------------------------------------------------------------------

    def replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        assignment = self.assignments.get(topic)
        if assignment is None or not 0 <= partition < assignment.partitions:
            return ()
        return assignment.replicas[partition]

    def leader(self, topic: str, partition: int) -> BrokerInfo | None:
        """The live leader of a partition, as the store says (None: none, or unknown)."""
        state = self.states.get((topic, partition))
        if state is None or state.leader < 0:
            return None
        return self.brokers.get(state.leader)

    def partition_exists(self, topic: str, partition: int) -> bool:
        assignment = self.assignments.get(topic)
        return assignment is not None and 0 <= partition < assignment.partitions
