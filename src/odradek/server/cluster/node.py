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
- controlled shutdown: before the broker stops, the controller moves its leadership;
- the answers to the broker's ``Topology`` questions (``server/topology.py``): its start
  and stop steps, where partitions are led and how the cluster looks to clients, and
  its health and readiness (metrics, ``/readyz``).

The rest it does through parts of its own, one module each, and forwards to them what
the ``Topology`` protocol and other code ask of the node:

- ``TopicAdmin`` (``server/cluster/topic_admin.py``, ``node.topics``): what any broker
  may write to the store for a client about topics: creation, deletion, partition
  additions and config changes (CreateTopics, DeleteTopics, CreatePartitions,
  AlterConfigs), and the internal topics;
- ``ProducerIds`` (``server/cluster/producer_ids.py``, ``node.producer_ids``): producer
  id blocks (``/latest_producer_id_block``, Kafka's ZooKeeper-era ProducerIdManager);
- ``TxnMarkerWriter`` (``server/cluster/txn_markers.py``, ``node.markers``):
  transaction markers, for partitions led elsewhere (WriteTxnMarkers to their leaders)
  and here;
- ``DynamicBrokerConfigs`` (``server/cluster/broker_configs.py``,
  ``node.dynamic_configs``): dynamic broker configs in ZooKeeper.

Losing the ZooKeeper session (it expired: this broker was paused or cut off for longer
than ``zookeeper.session.timeout.ms``) ends every leadership here at once — the
controller has elected others meanwhile — until the broker has registered again and the
controller has elected it anew. A broker merely disconnected (ZooKeeper down, session
alive) keeps serving.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.cluster import state as zk
from odradek.cluster.state import BrokerInfo, TopicPartition
from odradek.server.cluster.broker_configs import DynamicBrokerConfigs
from odradek.server.cluster.controller import Controller
from odradek.server.cluster.metadata import ClusterMetadata
from odradek.server.cluster.producer_ids import ProducerIds
from odradek.server.cluster.share_state_client import ShareStateClient
from odradek.server.cluster.store import (
    CoordinationStore,
    NodeExistsError,
    NoNodeError,
    SessionState,
    StoreError,
    StoreUnavailableError,
)
from odradek.server.cluster.topic_admin import TopicAdmin
from odradek.server.cluster.txn_markers import TxnMarkerWriter
from odradek.server.cluster.txn_verification import TxnVerifier
from odradek.server.config import BrokerConfig
from odradek.server.features import FinalizedFeatures
from odradek.server.metadata import META_PROPERTIES, Topic, TopicError
from odradek.server.network.inter_broker import inter_broker_client
from odradek.server.replication.reads import Following, PartitionResult, Refused, Wanted
from odradek.server.replication.replica_manager import ReplicaManager
from odradek.server.security.documents import Document, StoreDocument
from odradek.server.tasks import TaskSet
from odradek.server.topology import PartitionView

if TYPE_CHECKING:
    from odradek.coordinator.transactions import TxnMarkers
    from odradek.protocol.fetch import FetchTopic
    from odradek.server.broker import Broker
    from odradek.server.replication.partition import Partition
    from odradek.server.replication.purgatory import DelayedProduce
    from odradek.storage import Log

log = logging.getLogger(__name__)

# How long a broker waits for another broker's registration of its node.id to go away
# (a previous run of itself, killed less than a session timeout ago) beyond the session
# timeout, before it concludes that a live broker holds the id.
REGISTRATION_GRACE_S = 5.0
# Between attempts to reach ZooKeeper at start.
CONNECT_RETRY_S = 2.0
# How long a broker that has handed its leadership over keeps answering (with
# NOT_LEADER_OR_FOLLOWER) before it closes its connections (see controlled_shutdown).
CONTROLLED_SHUTDOWN_LINGER_S = 0.3


class ClusterStartupError(Exception):
    """The broker cannot join the cluster (the message says why)."""


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
        self.stopping = False
        self._session_lost = False
        # What the node does through parts of its own (each module says what it owns).
        self.topics = TopicAdmin(self)
        self.dynamic_configs = DynamicBrokerConfigs(self)
        self.producer_ids = ProducerIds(self)
        self.markers = TxnMarkerWriter(self)
        self.verifier = TxnVerifier(self)
        self.share_state = ShareStateClient(self)  # share coordinators elsewhere

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
        self.metadata.next_producer_id = self.producer_ids.next_producer_id
        self.controller = Controller(self)
        self.replicas = ReplicaManager(self)
        self.metadata.listeners = [self.replicas, self.controller,
                                   _DeletedTopicsOffsets(self.broker)]
        await self.metadata.start(timeout_s=60)
        await self.producer_ids.start()

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

    def replace_log(self, topic: str, partition: int, lg: Log) -> None:
        part = self.replicas.partitions.get((topic, partition))
        if part is not None:  # the same object as in ``leaders`` while it leads
            part.log = lg

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

    def active_controller(self) -> Controller | None:
        """The controller role here while it is the cluster's active controller; None
        otherwise (admin clients are answered NOT_CONTROLLER, and find the active one
        in Metadata: Kafka's ``controller.isActive`` check)."""
        controller = self.controller
        return controller if controller is not None and controller.active else None

    def origin_replicas(self, topic: str, partition: int) -> tuple[int, ...] | None:
        """The partition's replicas before any reassignment in progress (Kafka's
        originReplicas), as this broker's metadata has them; None if it does not exist."""
        assignment = self.metadata.assignments.get(topic)
        if assignment is None or partition >= assignment.partitions:
            return None
        return assignment.origin(partition)

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
        await self._tasks.close(self.producer_ids.fetching)
        if self.controller is not None:
            await self.controller.stop()
        if self.replicas is not None:
            await self.replicas.stop()
        if self.metadata is not None:
            await self.metadata.stop()
        await self.markers.close()
        await self.verifier.close()
        await self.share_state.close()
        await self.store.close()

    # --- settings -------------------------------------------------------------------------------

    def unclean_election(self, topic: str) -> bool:
        return self.broker.log_config_for(topic).unclean_leader_election_enable

    # --- topics (TopicAdmin: any broker writes them; the controller acts on them) ---------------

    async def create_topic(self, name: str, partitions: int | None, replication_factor: int | None,
                           configs: Mapping[str, str] | None = None, *,
                           assignment: Mapping[int, Sequence[int]] | None = None,
                           validate_only: bool = False) -> Topic:
        return await self.topics.create_topic(name, partitions, replication_factor, configs,
                                              assignment=assignment, validate_only=validate_only)

    async def ensure_internal_topic(self, name: str) -> None:
        await self.topics.ensure_internal_topic(name)

    def open_internal_topic(self, name: str) -> None:
        """Nothing at once: internal topics are created through ZooKeeper at the first
        FindCoordinator that needs them (``ensure_internal_topic``, as Kafka does) and
        the replica manager opens the logs of the partitions this broker holds; an
        InitProducerId for a partition not led here is answered NOT_COORDINATOR, as
        Kafka answers it."""

    def internal_topic_partition_count(self, name: str) -> int | None:
        """The count the internal topic has in the cluster's metadata, once it exists
        (as Kafka's coordinators read it from ZooKeeper), whatever this broker's setting
        says: every broker must route a key to the same partition. None until then."""
        topic = self.metadata.topics.get(name)
        return topic.partitions if topic is not None else None

    async def wait_for_leaders(self, counts: Mapping[str, int], timeout_s: float) -> bool:
        return await self.topics.wait_for_leaders(counts, timeout_s)

    async def delete_topic(self, name: str) -> Topic:
        return await self.topics.delete_topic(name)

    async def wait_deleted(self, topics: Mapping[str, uuid.UUID], timeout_s: float
                           ) -> set[str]:
        return await self.topics.wait_deleted(topics, timeout_s)

    async def add_partitions(self, name: str, count: int,
                             assignment: Sequence[Sequence[int]] | None = None, *,
                             validate_only: bool = False) -> Topic:
        return await self.topics.add_partitions(name, count, assignment,
                                                validate_only=validate_only)

    async def set_configs(self, name: str, configs: Mapping[str, str], *,
                          validate_only: bool = False) -> Topic:
        return await self.topics.set_configs(name, configs, validate_only=validate_only)

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

    @property
    def leaders(self) -> dict[tuple[str, int], Partition]:
        return self.replicas.leaders

    def read_for_follower(self, replica: int, wanted: list[Wanted], max_bytes: int,
                          asked_epochs: dict[TopicPartition, int],
                          log_starts: dict[TopicPartition, int],
                          quota_wait: list[float] | None = None,
                          unread: list[TopicPartition] | None = None
                          ) -> tuple[list[PartitionResult], int]:
        return self.replicas.read_for_follower(replica, wanted, max_bytes, asked_epochs,
                                               log_starts, quota_wait, unread)

    @property
    def following(self) -> Following:
        return self.replicas.following

    def epoch_refusals(self, topics: Iterable[FetchTopic], follower_reads: bool
                       ) -> Refused:
        return self.replicas.epoch_refusals(topics, follower_reads)

    def preferred_read_replicas(self, wanted: list[Wanted], client_rack: str,
                                refused: Refused | None) -> dict[TopicPartition, int]:
        return self.replicas.preferred_read_replicas(wanted, client_rack, refused)

    def lead(self, topic: str, partition: int) -> Partition | None:
        """None: a cluster's leaders are made by the replica manager as the controller
        elects them, all of them in ``leaders``."""
        return None

    def delay_produce(self, waits: Sequence[tuple[Partition, int]], timeout_ms: int | None
                      ) -> DelayedProduce:
        return self.replicas.delay_produce(waits, timeout_ms)

    def produce_waiting(self) -> int:
        """acks=all appends waiting for their followers (the produce purgatory's size)."""
        return self.replicas.produce_purgatory.size() if self.replicas is not None else 0

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

    # --- dynamic broker configs (DynamicBrokerConfigs) -------------------------------------------

    def setting(self, name: str) -> Any:
        """A broker setting as it applies now (dynamic, else static)."""
        return self.dynamic_configs.setting(name)

    def broker_configs(self, resource: str) -> dict[str, str]:
        return self.dynamic_configs.broker_configs(resource)

    async def set_broker_configs(self, resource: str, configs: Mapping[str, str]) -> None:
        await self.dynamic_configs.set_broker_configs(resource, configs)

    # --- hooks of the coordinator runtimes -----------------------------------------------------

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self.replicas.leader_epoch(topic, partition)

    def wait_replicated(self, topic: str, partition: int, end: int) -> Awaitable[int] | None:
        return self.replicas.wait_replicated(topic, partition, end)

    def features(self) -> FinalizedFeatures:
        return self.metadata.features

    async def set_features(self, levels: dict[str, int]) -> None:
        """/feature, Kafka's FeatureZNode (every broker watches it)."""
        data = zk.features_to_json(levels)
        try:
            try:
                version = await self.store.set(zk.FEATURE_PATH, data)
            except NoNodeError:
                await self.store.create(zk.FEATURE_PATH, data)
                version = 0
        except StoreError as exc:
            raise TopicError("REQUEST_TIMED_OUT", f"ZooKeeper: {exc}") from None
        self.metadata.record_features(dict(levels), version)

    async def ask_transaction_coordinator(
            self, transactional_id: str, producer_id: int, producer_epoch: int,
            partitions: Sequence[TopicPartition], *, add: bool) -> dict[TopicPartition, int]:
        return await self.verifier.ask(transactional_id, producer_id, producer_epoch,
                                       partitions, add=add)

    # --- transaction markers (TxnMarkerWriter) -------------------------------------------------

    def write_txn_markers(self, markers: TxnMarkers) -> Callable[[], Awaitable[None]]:
        """How a transaction's markers are written on its partitions' leaders, here or on
        other brokers (WriteTxnMarkers): a send the transaction runtime awaits on a task
        of its own, and again after a failure (as Kafka's TransactionMarkerChannelManager
        retries). A call rather than a coroutine, so that a task cancelled before it
        starts leaves no coroutine never awaited."""
        return functools.partial(self.markers.write_txn_markers, markers)

    async def append_txn_markers(self, producer_id: int, producer_epoch: int, commit: bool,
                                 coordinator_epoch: int, partitions: Sequence[TopicPartition]
                                 ) -> dict[TopicPartition, int]:
        """WriteTxnMarkers from a coordinator (on this broker or another): the markers
        appended in the partitions led here and replicated; each one's Kafka error
        code."""
        return await self.markers.write_markers_locally(
            producer_id, producer_epoch, commit, coordinator_epoch, partitions)


def _new_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _DeletedTopicsOffsets:
    """A metadata listener: a topic deleted (by any broker's DeleteTopics) takes its
    committed offsets from the groups coordinated here, as Kafka's
    GroupCoordinator.onPartitionsDeleted does on every broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def topic_removed(self, topic: str, partitions: int) -> None:
        if self.broker.groups is not None:
            self.broker.groups.topics_deleted([topic])

    def partitions_changed(self, partitions: list[TopicPartition]) -> None:
        pass

    def brokers_changed(self) -> None:
        pass

    def topic_unusable(self, topic: str) -> None:
        pass

    def configs_changed(self, topic: str) -> None:
        pass

    def broker_configs_changed(self) -> None:
        pass
