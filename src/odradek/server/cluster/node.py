"""A broker's membership of a replicated cluster coordinated by ZooKeeper.

Created by the broker when ``zookeeper.connect`` is set; without it the broker is the
single node it always was and none of this runs. ``ClusterNode`` owns, for one broker:

- the ZooKeeper session (``server/cluster/zookeeper.py``; reconnects, and a broker whose
  ZooKeeper is unreachable at start says so and retries), the cluster id
  (``/cluster/id``, created by the first broker, checked against the data directory's
  ``meta.properties``), and the broker's registration (the ephemeral
  ``/brokers/ids/N``: refused when another live broker holds the id);
- the metadata cache (``server/cluster/metadata.py``), the controller role
  (``server/cluster/controller.py``) and the replica manager (``server/replication/``);
- what any broker may write to the store for a client: topic creation, deletion,
  partition additions and config changes (CreateTopics, DeleteTopics,
  CreatePartitions, AlterConfigs), and producer id blocks (``/latest_producer_id_block``,
  Kafka's ZooKeeper-era ProducerIdManager);
- transaction markers for partitions led elsewhere (WriteTxnMarkers to their leaders);
- controlled shutdown: before the broker stops, the controller moves its leadership.

Losing the ZooKeeper session (it expired: this broker was paused or cut off for longer
than ``zookeeper.session.timeout.ms``) ends every leadership here at once — the
controller has elected others meanwhile — until the broker has registered again and the
controller has elected it anew. A broker merely disconnected (ZooKeeper down, session
alive) keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.client.aio import AsyncBrokerConnection, KafkaClientError
from odradek.client.codec import WRITE_TXN_MARKERS
from odradek.cluster import state as zk
from odradek.cluster.placement import PlacementError, assign_replicas, check_assignment
from odradek.cluster.state import BrokerInfo, TopicAssignment
from odradek.coordinator import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from odradek.server.cluster.controller import Controller
from odradek.server.cluster.metadata import ClusterMetadata
from odradek.server.cluster.store import (
    BadVersionError,
    CoordinationStore,
    NodeExistsError,
    NoNodeError,
    Op,
    SessionState,
    StoreError,
    StoreUnavailableError,
)
from odradek.server.config import SETTINGS, BrokerConfig
from odradek.server.errors import error_code
from odradek.server.metadata import META_PROPERTIES, Topic, TopicError, validate_topic_name
from odradek.server.network.inter_broker import inter_broker_client
from odradek.server.replication.replica_manager import ReplicaManager
from odradek.server.security.documents import Document, StoreDocument
from odradek.server.tasks import TaskSet
from odradek.server.topology import PartitionView
from odradek.storage.config import LogConfig

if TYPE_CHECKING:
    from odradek.coordinator.transactions import TxnMarkers
    from odradek.server.broker import Broker
    from odradek.server.replication.partition import Partition
    from odradek.storage import Log

log = logging.getLogger(__name__)

# Producer ids are reserved from ZooKeeper this many at a time (Kafka's block size).
PRODUCER_ID_BLOCK = 1000
# How often a broker retries reserving producer ids while the last block's znode does
# not parse: a few ERROR lines a minute, not one per second.
PRODUCER_ID_FORMAT_RETRY_S = 15.0
# How long a broker waits for another broker's registration of its node.id to go away
# (a previous run of itself, killed less than a session timeout ago) beyond the session
# timeout, before it concludes that a live broker holds the id.
REGISTRATION_GRACE_S = 5.0
# Between attempts to reach ZooKeeper at start.
CONNECT_RETRY_S = 2.0
# How long a broker that has handed its leadership over keeps answering (with
# NOT_LEADER_OR_FOLLOWER) before it closes its connections (see controlled_shutdown).
CONTROLLED_SHUTDOWN_LINGER_S = 0.3
# Retries of a marker write whose partition leader cannot take it yet.
MARKER_RETRY_S = 0.2
# A marker's answers after which it is not sent again: written, or never to be (the
# partition is gone, or a newer producer or coordinator epoch already ended this
# transaction there, as Kafka's TransactionMarkerRequestCompletionHandler decides).
MARKER_DONE = frozenset({ErrorCode.none, ErrorCode.unknown_topic_or_partition,
                         ErrorCode.invalid_producer_epoch,
                         ErrorCode.transaction_coordinator_fenced})


class ClusterStartupError(Exception):
    """The broker cannot join the cluster (the message says why)."""


class ProducerIdsUnavailable(Exception):
    """No producer id block is reserved right now (ZooKeeper unreachable): retriable."""

    kafka_error = "COORDINATOR_LOAD_IN_PROGRESS"


class ClusterNode:
    """One broker's part in a ZooKeeper-coordinated cluster."""

    def __init__(self, broker: Broker, store: CoordinationStore) -> None:
        self.broker = broker
        self.config: BrokerConfig = broker.config
        self.node_id: int = broker.node_id
        self.store = store
        # How this broker connects to the others (inter-broker listener's TLS and SASL).
        self.inter_broker = inter_broker_client(self.config)
        self.connect_string: str = self.config["zookeeper.connect"]
        self.cluster_id = ""
        self.metadata: ClusterMetadata = None  # type: ignore[assignment]  # from start()
        self.controller: Controller = None  # type: ignore[assignment]  # from start()
        self.replicas: ReplicaManager = None  # type: ignore[assignment]  # from start()
        self.broker_epoch = -1  # the session id our registration belongs to
        self.registered = asyncio.Event()
        self._tasks = TaskSet("cluster node")
        self._pid_block: tuple[int, int] | None = None  # [next, end]
        self._next_block: tuple[int, int] | None = None
        self._pid_fetch: asyncio.Task[None] | None = None
        self._marker_conns: dict[int, AsyncBrokerConnection] = {}
        self._marker_lock = asyncio.Lock()
        self.stopping = False
        self._session_lost = False

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect (retrying while ZooKeeper is unreachable), agree on the cluster id,
        load the metadata, take up replica roles. Registration comes later
        (``register``), once the listener's port is known."""
        await self._connect()
        self.store.on_session(self._on_session)
        for path in zk.PERSISTENT_PATHS:
            await self.store.ensure_path(path)
        self.cluster_id = await self._cluster_id()
        self._check_data_dir()
        self.metadata = ClusterMetadata(self.store, self.cluster_id, self.node_id)
        self.metadata.next_producer_id = self.next_producer_id
        self.controller = Controller(self)
        self.replicas = ReplicaManager(self)
        self.metadata.listeners = [self.replicas, self.controller]
        await self.metadata.start(timeout_s=60)
        try:
            self._pid_block = await self._reserve_block()
        except zk.ZnodeFormatError as exc:
            # Serve without producer ids (InitProducerId answers "retry") rather than
            # not at all; the background reservation keeps trying.
            log.error("cannot reserve producer ids: %s: %s", zk.PRODUCER_ID_BLOCK_PATH, exc)
            self._prefetch_block()

    def start_replicas(self) -> None:
        """Take up the roles the store gives (after the coordinator runtimes exist)."""
        self.replicas.start()

    async def register(self) -> None:
        """Register this broker (ephemeral /brokers/ids/N), then join controller elections."""
        await self._register()
        self.controller.start()

    async def _connect(self) -> None:
        timeout_s = self.config["zookeeper.connection.timeout.ms"] / 1000
        while True:
            try:
                await self.store.start(timeout_s)
                return
            except StoreUnavailableError as exc:
                log.warning("ZooKeeper at %s is unreachable (%s); retrying every %.0f s",
                            self.connect_string, exc, CONNECT_RETRY_S)
                await asyncio.sleep(CONNECT_RETRY_S)

    async def _cluster_id(self) -> str:
        while True:
            try:
                data, _ = await self.store.get(zk.CLUSTER_ID_PATH)
                return zk.cluster_id_from_json(data)
            except NoNodeError:
                pass
            except zk.ZnodeFormatError as exc:
                # Kafka's broker does not start either: which cluster this data belongs
                # to is unknown, and writing a new id would split the cluster in two.
                raise ClusterStartupError(f"{zk.CLUSTER_ID_PATH} is corrupt: {exc}") from None
            # Another broker may be first: then its id is read on the next round.
            with contextlib.suppress(NodeExistsError):
                await self.store.create(zk.CLUSTER_ID_PATH,
                                        zk.cluster_id_to_json(_new_cluster_id()), makepath=True)

    def _check_data_dir(self) -> None:
        """Kafka's meta.properties check: a data directory belongs to one cluster and
        one node id; starting it in another is refused (InconsistentClusterIdException),
        since its logs would be taken for replicas of unrelated partitions."""
        path = os.path.join(self.broker.config.data_dir, META_PROPERTIES)
        found: dict[str, str] = {}
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    key, sep, value = line.strip().partition("=")
                    if sep:
                        found[key] = value
        except FileNotFoundError:
            pass
        if found.get("cluster.id") and found["cluster.id"] != self.cluster_id:
            raise ClusterStartupError(
                f"the data directory {self.broker.config.data_dir} belongs to cluster "
                f"{found['cluster.id']}, but ZooKeeper at {self.connect_string} holds cluster "
                f"{self.cluster_id}")
        if found.get("node.id") and found["node.id"] != str(self.node_id):
            raise ClusterStartupError(
                f"the data directory {self.broker.config.data_dir} belongs to node.id "
                f"{found['node.id']}, not {self.node_id}")

    def logs_opened(self) -> None:
        """Write meta.properties (once the log manager holds the directory's lock)."""
        path = os.path.join(self.broker.config.data_dir, META_PROPERTIES)
        text = f"version=1\ncluster.id={self.cluster_id}\nnode.id={self.node_id}\n"
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    async def document(self, name: str, mode: int = 0o644) -> Document:
        """A security document kept in ZooKeeper (followed from now on: every broker
        applies a change at once)."""
        document = StoreDocument(self.store, name)
        await document.start(self.config["zookeeper.connection.timeout.ms"] / 1000)
        return document

    def stop_waiting(self) -> None:
        """The broker is stopping: acks=all appends waiting here answer now."""
        if self.replicas is not None:
            self.replicas.stop_waiting()

    # --- where partitions are led, and how the cluster looks to clients -------------------

    def leader_log(self, topic: str, partition: int) -> Log | None:
        """The log of a partition this broker leads (clients use no other here)."""
        part = self.replicas.leaders.get((topic, partition))
        return part.log if part is not None else None

    def missing_partition_error(self, topic: str, partition: int) -> int:
        """Why ``leader_log`` gave None: NOT_LEADER_OR_FOLLOWER for a partition that
        exists but is led elsewhere (or by nobody), else UNKNOWN_TOPIC_OR_PARTITION."""
        if self.metadata.partition_exists(topic, partition):
            return ErrorCode.not_leader_or_follower
        return ErrorCode.unknown_topic_or_partition

    def live_brokers(self) -> list[BrokerInfo]:
        return sorted(self.metadata.brokers.values(), key=lambda b: b.node_id)

    def controller_id(self) -> int:
        return self.metadata.controller_id

    def partition_view(self, topic: str, partition: int) -> PartitionView:
        md = self.metadata
        live = md.brokers
        replicas = list(md.replicas(topic, partition))
        state = md.states.get((topic, partition))
        leader = state.leader if state is not None and state.leader in live else -1
        return PartitionView(leader, state.leader_epoch if state is not None else -1, replicas,
                             list(state.isr) if state is not None else [],
                             [r for r in replicas if r not in live])

    def leader_broker(self, topic: str, partition: int) -> BrokerInfo | None:
        return self.metadata.leader(topic, partition)

    def replication_factor(self, topic: str) -> int:
        return len(self.metadata.replicas(topic, 0))

    def _info(self) -> BrokerInfo:
        """This broker's registration: every listener's advertised address, host/port
        those of the inter-broker listener (what other brokers connect to)."""
        endpoints = self.broker.endpoints()
        host, port = endpoints[self.config.inter_broker_listener]
        rack = self.config["broker.rack"] or None
        listeners = tuple((lst.name, lst.protocol, *endpoints[lst.name])
                          for lst in self.config.listeners)
        return BrokerInfo(self.node_id, host, port, rack, listeners=listeners)

    async def _register(self) -> None:
        path = zk.broker_path(self.node_id)
        data = self._info().to_json(_now_ms())
        deadline = time.monotonic() + (self.config["zookeeper.session.timeout.ms"] / 1000
                                       + REGISTRATION_GRACE_S)
        told = False
        while True:
            try:
                await self.store.create(path, data, ephemeral=True)
                break
            except NodeExistsError:
                pass
            try:
                owner = await self.store.ephemeral_owner(path)
                holder, _ = await self.store.get(path)
            except NoNodeError:
                continue
            if owner == self.store.session_id:
                break  # ours already (a retried create whose answer was lost)
            try:
                other = BrokerInfo.from_json(self.node_id, holder)
                who = f"{other.host}:{other.port}"
            except zk.ZnodeFormatError:
                who = "an unknown address"
            if time.monotonic() > deadline:
                raise ClusterStartupError(
                    f"node.id {self.node_id} is already registered in ZooKeeper by another "
                    f"broker ({who}); each broker needs its own node.id")
            if not told:
                log.warning("node.id %d is registered by %s (a previous run of this broker "
                            "whose session has not expired yet?); waiting for it to go",
                            self.node_id, who)
                told = True
            await asyncio.sleep(0.25)
        self.broker_epoch = self.store.session_id or -1
        self._session_lost = False
        self.registered.set()
        log.info("registered as broker %d (broker epoch %d) in cluster %s", self.node_id,
                 self.broker_epoch, self.cluster_id)
        self.replicas.apply_all()  # states naming this registration may be waiting

    def is_current_registration(self, broker_epoch: int) -> bool:
        return (not self._session_lost and self.broker_epoch != -1
                and broker_epoch == self.broker_epoch)

    def _on_session(self, state: SessionState) -> None:
        if state is SessionState.LOST:
            log.warning("the ZooKeeper session expired: leadership here ends until the "
                        "controller elects this broker again")
            self._session_lost = True
            self.broker_epoch = -1
            self.registered.clear()
            self.replicas.session_lost()
            self.controller.session_lost()
        elif state is SessionState.SUSPENDED:
            log.warning("lost the connection to ZooKeeper; serving on while it comes back")
        elif state is SessionState.CONNECTED and self._session_lost and not self.stopping:
            self._tasks.spawn(self._reregister(), name="reregister")

    async def _reregister(self) -> None:
        while not self.stopping:
            try:
                await self._register()
                return
            except StoreError as exc:
                log.info("registering again: %s; retrying", exc)
                await asyncio.sleep(1)
            except ClusterStartupError as exc:
                log.error("%s", exc)
                return

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move leadership off this broker and wait until it has
        (or the wait is up): Kafka's controlled shutdown, so producers see a short
        NOT_LEADER_OR_FOLLOWER rather than a leader that vanishes."""
        if not self.config["controlled.shutdown.enable"] or self.broker_epoch == -1:
            return
        path = f"{zk.CONTROLLED_SHUTDOWN_PATH}/{self.node_id}"
        try:
            await self.store.create(path, b"", ephemeral=True)
        except NodeExistsError:
            pass
        except StoreError as exc:
            log.warning("controlled shutdown: cannot reach ZooKeeper (%s); stopping anyway", exc)
            return

        def movable_leaderships() -> list[tuple[str, int]]:
            # Partitions led here with an ISR member that can take over: alive, and not
            # shutting down itself (brokers stopped together would wait for each other).
            md = self.metadata
            return [tp for tp, st in md.states.items()
                    if st.leader == self.node_id
                    and any(r != self.node_id and r in md.brokers
                            and r not in md.shutting_down for r in st.isr)]

        timeout_s = (self.config["controlled.shutdown.max.retries"]
                     * self.config["controlled.shutdown.retry.backoff.ms"] / 1000)
        moved = await self.metadata.wait_for(lambda: not movable_leaderships(), timeout_s)
        if moved:
            log.info("controlled shutdown: leadership moved off this broker")
            # Still serving a moment: a producer's next request gets NOT_LEADER_OR_FOLLOWER
            # and refreshes its metadata at once. Closing its connection instead left
            # librdkafka waiting for its once-a-second topic scan (measured: ~1 s without
            # acknowledgements in 2 of 3 SIGTERMs, cluster_bench --only failover).
            # Kafka closes at once; this is a deliberate departure.
            await asyncio.sleep(CONTROLLED_SHUTDOWN_LINGER_S)
        else:
            log.warning("controlled shutdown: %d partition(s) still led here after %.0f s; "
                        "stopping anyway", len(movable_leaderships()), timeout_s)

    async def stop(self) -> None:
        self.stopping = True
        await self._tasks.close(self._pid_fetch)
        if self.controller is not None:
            await self.controller.stop()
        if self.replicas is not None:
            await self.replicas.stop()
        if self.metadata is not None:
            await self.metadata.stop()
        for conn in self._marker_conns.values():
            await conn.close()
        await self.store.close()

    # --- settings -------------------------------------------------------------------------------

    def unclean_election(self, topic: str) -> bool:
        return self.broker.log_config_for(topic).unclean_leader_election_enable

    # --- topics (any broker writes them; the controller acts on them) ---------------------------

    def live_racks(self) -> dict[int, str | None]:
        return {b: info.rack for b, info in self.metadata.brokers.items()}

    async def create_topic(self, name: str, partitions: int | None, replication_factor: int | None,
                           configs: Mapping[str, str] | None = None, *,
                           assignment: Mapping[int, Sequence[int]] | None = None,
                           validate_only: bool = False) -> Topic:
        validate_topic_name(name)
        if name in self.metadata.assignments:
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
                      name in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC))
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
        """Create ``__consumer_offsets`` or ``__transaction_state`` if it does not exist
        (Kafka creates them at the first FindCoordinator that needs them), with its
        settings: compacted, ``*.num.partitions`` partitions, ``*.replication.factor``
        replicas — refused, as in Kafka, while fewer brokers are alive — and for
        transactions ``min.insync.replicas`` = ``transaction.state.log.min.isr``."""
        if name in self.metadata.assignments:
            return
        cfg = self.config
        configs = {"cleanup.policy": "compact", "compression.type": "producer"}
        if name == OFFSETS_TOPIC:
            partitions = cfg["offsets.topic.num.partitions"]
            configs["segment.bytes"] = str(cfg["offsets.topic.segment.bytes"])
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
        return self.config["default.replication.factor"]

    async def wait_for_leaders(self, counts: Mapping[str, int], timeout_s: float) -> bool:
        """Until each of these topics has (at least) its number of partitions here and
        every one of them a leader (what a client that creates a topic, or adds
        partitions, and then produces to it needs), or time runs out."""
        md = self.metadata

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
        topic = self.metadata.topics.get(name)
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
            assignments = self.metadata.assignments
            return {n for n, topic_id in topics.items()
                    if n in assignments and assignments[n].topic_id == topic_id}

        await self.metadata.wait_for(lambda: not left(), timeout_s)
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
                          dict(self.metadata.configs.get(name, {})), False)
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
        topic = self.metadata.topics.get(name)
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
            self.metadata.configs[name] = dict(configs)
            self.metadata._refresh_topic(name)
            self.replicas.configs_changed(name)
        return Topic(name, topic.topic_id, topic.partitions, dict(configs), topic.internal)

    # --- health (metrics, /readyz) ---------------------------------------------------------------

    def health(self) -> dict[str, int]:
        """ReplicaManager's and the controller's partition counts, as Kafka's metrics
        name them (server.metrics); the offline count only on the controller, as Kafka."""
        replicas = self.replicas
        leaders = [(p, p.repl) for p in replicas.leaders.values() if p.repl is not None]
        md = self.metadata
        controller = md.controller_id == self.node_id
        return {
            "partitions": len(replicas.partitions),
            "leaders": len(leaders),
            "under_replicated": sum(1 for p, repl in leaders
                                    if len(repl.isr) < len(p.replicas)),
            "under_min_isr": sum(1 for p, repl in leaders if len(repl.isr)
                                 < p.log.config.min_insync_replicas),
            "active_controller": int(controller),
            "offline": sum(1 for s in md.states.values() if s.leader not in md.brokers)
            if controller else 0,
        }

    def not_ready(self) -> str | None:
        """Why this broker should not take traffic yet (None: it may): not registered,
        or out of the ISR of partitions it holds (catching up)."""
        if not self.registered.is_set():
            return "not registered in the cluster yet"
        md = self.metadata
        behind = sum(1 for tp in self.replicas.partitions
                     if (state := md.states.get(tp)) is not None
                     and self.node_id not in state.isr)
        if behind:
            return f"catching up: not in the ISR of {behind} partition(s)"
        return None

    # --- dynamic broker configs ----------------------------------------------------------------

    def dynamic_setting(self, name: str) -> tuple[str, str] | None:
        """The value of a dynamic broker config set for this broker ("broker") or for
        the cluster ("default"), with where it comes from; None: not set dynamically."""
        for key, source in ((str(self.node_id), "broker"), (zk.DEFAULT_BROKER, "default")):
            value = self.metadata.broker_configs.get(key, {}).get(name)
            if value is not None:
                return value, source
        return None

    def setting(self, name: str) -> Any:
        """A broker setting as it applies now: dynamic (this broker's, then the cluster
        default), else static (command line, environment, file, default)."""
        dynamic = self.dynamic_setting(name)
        if dynamic is None:
            return self.config[name]
        return SETTINGS[name].parse(name, dynamic[0])

    def broker_configs(self, resource: str) -> dict[str, str]:
        """The dynamic configs stored for a broker resource ("" is the cluster default)."""
        return dict(self.metadata.broker_configs.get(resource or zk.DEFAULT_BROKER, {}))

    async def set_broker_configs(self, resource: str, configs: Mapping[str, str]) -> None:
        """Replace the dynamic configs of broker ``resource`` ("" for the cluster
        default): /config/brokers/N or /config/brokers/<default>, as Kafka stores them.
        Every broker watches its own and the default, and applies them at once. The
        caller has validated them (``Broker.set_broker_configs``)."""
        key = resource or zk.DEFAULT_BROKER
        path = zk.broker_config_path(key)
        data = zk.config_to_json(configs)
        try:
            try:
                await self.store.set(path, data)
            except NoNodeError:
                await self.store.create(path, data)
        except StoreError as exc:
            raise TopicError("REQUEST_TIMED_OUT", f"ZooKeeper: {exc}") from None
        if key in (str(self.node_id), zk.DEFAULT_BROKER):
            # As for topic configs: in force here before the answer, not a watch later.
            self.metadata.broker_configs[key] = dict(configs)
            self.replicas.broker_configs_changed()

    # --- producer ids ----------------------------------------------------------------------------

    async def _reserve_block(self) -> tuple[int, int]:
        """Kafka's ZooKeeper-era ProducerIdManager: read the last block handed out, write
        the next one conditionally on the version read; the winner of a race keeps it."""
        while True:
            try:
                data, version = await self.store.get(zk.PRODUCER_ID_BLOCK_PATH)
            except NoNodeError:
                data, version = b"", -1
            last = zk.producer_id_block_from_json(data)
            start = 0 if last is None else last[1] + 1
            end = start + PRODUCER_ID_BLOCK - 1
            block = zk.producer_id_block_to_json(self.node_id, start, end)
            try:
                if version < 0:
                    await self.store.create(zk.PRODUCER_ID_BLOCK_PATH, block)
                else:
                    await self.store.set(zk.PRODUCER_ID_BLOCK_PATH, block, version)
            except (BadVersionError, NodeExistsError):
                continue
            return start, end

    def next_producer_id(self) -> int:
        """A producer id never handed out by any broker. The next block is reserved in
        the background when half of this one is used."""
        block = self._pid_block
        if block is None or block[0] > block[1]:
            block = self._pid_block = self._next_block
            self._next_block = None
            if block is None:
                self._prefetch_block()
                raise ProducerIdsUnavailable("no producer ids reserved yet; retry")
        pid = block[0]
        self._pid_block = (pid + 1, block[1])
        if self._next_block is None and block[1] - pid < PRODUCER_ID_BLOCK // 2:
            self._prefetch_block()
        return pid

    def _prefetch_block(self) -> None:
        if self._pid_fetch is not None and not self._pid_fetch.done():
            return

        async def fetch() -> None:
            while self._next_block is None and not self.stopping:
                try:
                    self._next_block = await self._reserve_block()
                except StoreError as exc:
                    log.warning("cannot reserve producer ids: %s; retrying", exc)
                    await asyncio.sleep(1)
                except zk.ZnodeFormatError as exc:
                    # Handing out ids without knowing the last block could reuse some:
                    # wait for an operator to fix the znode, one ERROR line a while.
                    log.error("cannot reserve producer ids: %s: %s; retrying in %.0f s",
                              zk.PRODUCER_ID_BLOCK_PATH, exc, PRODUCER_ID_FORMAT_RETRY_S)
                    await asyncio.sleep(PRODUCER_ID_FORMAT_RETRY_S)

        self._pid_fetch = asyncio.get_running_loop().create_task(fetch())

    # --- hooks of the coordinator runtimes -----------------------------------------------------

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self.replicas.leader_epoch(topic, partition)

    def wait_replicated(self, topic: str, partition: int, end: int) -> Awaitable[int] | None:
        return self.replicas.wait_replicated(topic, partition, end)

    async def write_txn_markers(self, markers: TxnMarkers) -> None:
        """Write one COMMIT/ABORT marker in every partition of a transaction, each on its
        partition's leader (locally, or with WriteTxnMarkers), retrying until each is
        written or its partition is gone (Kafka's TransactionMarkerChannelManager)."""
        pending = set(markers.partitions)
        while pending:
            if self.stopping:
                raise RuntimeError(f"the broker is stopping; markers for producer "
                                   f"{markers.producer_id} not written to {sorted(pending)}")
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for tp in sorted(pending):
                if not self.metadata.partition_exists(*tp):
                    log.info("no marker for %s-%d: the partition no longer exists", *tp)
                    pending.discard(tp)
                    continue
                state = self.metadata.states.get(tp)
                leader = state.leader if state is not None else -1
                by_leader.setdefault(leader, []).append(tp)
            results = await asyncio.gather(*(
                self._markers_to(leader, tps, markers) for leader, tps in by_leader.items()))
            for done in results:
                pending -= done
            if pending:
                await asyncio.sleep(MARKER_RETRY_S)

    async def _markers_to(self, leader: int, tps: list[tuple[str, int]],
                          markers: TxnMarkers) -> set[tuple[str, int]]:
        """The partitions of ``tps`` whose marker ``leader`` wrote."""
        if leader < 0:
            return set()
        if leader == self.node_id:
            codes = await self.write_markers_locally(
                markers.producer_id, markers.producer_epoch, markers.commit,
                markers.coordinator_epoch, tps)
            return {tp for tp, code in codes.items() if code in MARKER_DONE}
        info = self.metadata.brokers.get(leader)
        if info is None:
            return set()
        try:
            conn = await self._marker_connection(leader, info)
            topics: dict[str, list[int]] = {}
            for t, p in tps:
                topics.setdefault(t, []).append(p)
            answer = await conn.request(WRITE_TXN_MARKERS, {"markers": [{
                "producer_id": markers.producer_id, "producer_epoch": markers.producer_epoch,
                "transaction_result": markers.commit,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
                "coordinator_epoch": markers.coordinator_epoch}]})
        except KafkaClientError as exc:
            log.info("WriteTxnMarkers to broker %d: %s", leader, exc)
            stale = self._marker_conns.pop(leader, None)
            if stale is not None:
                await stale.close()
            return set()
        return {(topic.name, p.partition_index) for result in answer.markers
                for topic in result.topics for p in topic.partitions
                if p.error_code in MARKER_DONE}

    async def _marker_connection(self, leader: int, info: BrokerInfo) -> AsyncBrokerConnection:
        async with self._marker_lock:
            conn = self._marker_conns.get(leader)
            if conn is not None and not conn.closed:
                return conn
            conn = await self.inter_broker.open(
                info.host, info.port, client_id=f"broker-{self.node_id}-txn-markers",
                timeout_s=self.config["replica.socket.timeout.ms"] / 1000)
            self._marker_conns[leader] = conn
            return conn

    async def write_markers_locally(self, producer_id: int, producer_epoch: int, commit: bool,
                                    coordinator_epoch: int, tps: Sequence[tuple[str, int]]
                                    ) -> dict[tuple[str, int], int]:
        """Append the markers to these partitions where this broker leads them and wait
        until they are replicated (WriteTxnMarkers appends with acks=all); the Kafka
        error code of each partition."""
        codes: dict[tuple[str, int], int] = {}
        waits: list[tuple[Partition, int]] = []
        for tp in tps:
            part = self.replicas.leaders.get(tp)
            if part is None:
                codes[tp] = self.broker.missing_partition_error(*tp)
                continue
            try:
                info = part.append_marker_as_leader(producer_id, producer_epoch, commit,
                                                    coordinator_epoch)
            except Exception as exc:
                log.warning("marker for producer %d epoch %d not written to %s-%d: %s",
                            producer_id, producer_epoch, tp[0], tp[1], exc)
                codes[tp] = error_code(exc)
                continue
            if tp[0] == OFFSETS_TOPIC and self.broker.groups is not None:
                self.broker.groups.txn_marker_written(tp[1], producer_id, commit)
            waits.append((part, info.last_offset + 1))
        if waits:
            # Without a timeout, as WriteTxnMarkers' appends in Kafka: the coordinator
            # retries what is not answered; a leadership lost answers at once.
            for (part, _), code in zip(waits, await self.replicas.delay_produce(waits, None),
                                       strict=True):
                codes[part.tp] = code
        return codes


def _new_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


