"""Where a broker stands: alone, or one of a replicated cluster. The broker and its
handlers ask one ``Topology`` object and never branch on which it is (Kafka's
``MetadataSupport``, split into ``ZkSupport`` and ``RaftSupport``, plays this part).

Two implementations:

- ``SingleNode`` (here): the data directory is the whole truth. Topics live in its
  ``topics.json`` (server/metadata.py), dynamic configs and the security documents in its
  files; this broker leads every partition at leader epoch 0 with an ISR of one, so
  every append is committed at once and Metadata names this broker everywhere. It
  coordinates every internal-topic partition from the start, writes transaction
  markers into its own logs, and is its own controller (``SingleNodeController``).
- ``ClusterNode`` (server/cluster/node.py): the cluster's state is in ZooKeeper; partitions
  are led where the controller put them, replicated by server/replication/.

What it answers: its lifecycle steps in the broker's start and stop (``start``,
``logs_opened``, ``start_replicas`` — where the coordinators of the internal-topic
partitions led here are elected —, ``register``, ``controlled_shutdown``,
``stop_waiting``, ``stop``), its readiness and health (``not_ready``, ``health``,
``produce_waiting``), where documents and dynamic broker configs are kept, topic
administration (create, delete, add partitions, configs, and waiting for
their effect; internal topics: ``ensure_internal_topic``, ``open_internal_topic``,
``internal_topic_partition_count``), where partitions are led (``leader_log``,
``leader_epoch``, ``wait_replicated``, ``missing_partition_error``), how transaction
markers are written (``write_txn_markers``, a coordinator's; ``append_txn_markers``,
WriteTxnMarkers') and how the cluster looks to clients (``live_brokers``,
``controller_id``, ``active_controller`` for the controller's admin requests,
``origin_replicas``, ``partition_view``, ``leader_broker``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from odradek.cluster.replication import epoch_error
from odradek.cluster.state import BrokerInfo
from odradek.coordinator import SHARE_GROUP_STATE_TOPIC, TRANSACTION_STATE_TOPIC
from odradek.server.dynamic_configs import BROKER_DOCUMENT, BrokerConfigStore
from odradek.server.features import FinalizedFeatures
from odradek.server.metadata import MetadataStore, Topic, TopicError
from odradek.server.replication.purgatory import DelayedProduce, Purgatory
from odradek.server.replication.reads import Following, PartitionResult, Refused, Wanted
from odradek.server.security.documents import Document, FileDocument

if TYPE_CHECKING:
    from odradek.coordinator.transactions import TxnMarkers
    from odradek.protocol.fetch import FetchTopic
    from odradek.server.broker import Broker
    from odradek.server.cluster.controller import Outcome
    from odradek.server.cluster.metadata import ClusterMetadata
    from odradek.server.replication.partition import Partition
    from odradek.storage import Log

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# A single node leads every partition from the start and never changes leaders: every
# batch is written with partition leader epoch 0, and every answer names epoch 0.
SINGLE_NODE_LEADER_EPOCH = 0
# Partition logs a topic change creates between two turns of the event loop.
LOGS_PER_STEP = 64


@dataclass(frozen=True, slots=True)
class PartitionView:
    """A partition as Metadata describes it: its live leader (-1: none), leader epoch,
    replicas, in-sync replicas and replicas on brokers not alive."""

    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]


class AdminController(Protocol):
    """What the controller's admin requests ask of the active controller
    (server/handlers/cluster_admin.py): a cluster's ``Controller``
    (server/cluster/controller.py), or a single node's ``SingleNodeController``."""

    async def elect_leaders(self, election_type: int, partitions: list[TopicPartition] | None
                            ) -> dict[TopicPartition, Outcome]: ...
    async def alter_reassignments(self,
                                  wanted: dict[TopicPartition, tuple[int, ...] | None]
                                  ) -> dict[TopicPartition, Outcome]: ...
    def list_reassignments(self, partitions: list[TopicPartition] | None
                           ) -> dict[TopicPartition, tuple[tuple[int, ...], tuple[int, ...],
                                                           tuple[int, ...]]]: ...


class Topology(Protocol):
    """What the broker asks of where it stands (see the module docstring)."""

    @property
    def metadata(self) -> MetadataStore | ClusterMetadata: ...

    # --- the broker's start and stop, in order --------------------------------------------
    async def start(self) -> None: ...
    def logs_opened(self) -> None: ...
    async def document(self, name: str, mode: int = 0o644) -> Document: ...
    def start_replicas(self) -> None: ...
    async def register(self) -> None: ...
    async def controlled_shutdown(self) -> None: ...
    def stop_waiting(self) -> None: ...
    async def stop(self) -> None: ...
    def not_ready(self) -> str | None: ...
    def health(self) -> dict[str, int] | None: ...
    def produce_waiting(self) -> int: ...

    # --- dynamic broker configs -------------------------------------------------------------
    def broker_configs(self, resource: str) -> dict[str, str]: ...
    async def set_broker_configs(self, resource: str, configs: Mapping[str, str]) -> None: ...

    # --- topics -----------------------------------------------------------------------------
    async def create_topic(self, name: str, partitions: int | None,
                           replication_factor: int | None, configs: Mapping[str, str] | None,
                           *, assignment: Mapping[int, list[int]] | None = None,
                           validate_only: bool = False) -> Topic: ...
    async def delete_topic(self, name: str) -> Topic: ...
    async def add_partitions(self, name: str, count: int,
                             assignment: list[list[int]] | None = None, *,
                             validate_only: bool = False) -> Topic: ...
    async def set_configs(self, name: str, configs: Mapping[str, str], *,
                          validate_only: bool = False) -> Topic: ...
    async def wait_for_leaders(self, counts: Mapping[str, int], timeout_s: float) -> bool: ...
    async def wait_deleted(self, topics: Mapping[str, uuid.UUID], timeout_s: float
                           ) -> set[str]: ...
    async def ensure_internal_topic(self, name: str) -> None: ...
    def open_internal_topic(self, name: str) -> None: ...
    def internal_topic_partition_count(self, name: str) -> int | None: ...
    def replication_factor(self, topic: str) -> int: ...

    # --- partitions -------------------------------------------------------------------------
    @property
    def leaders(self) -> Mapping[tuple[str, int], Partition]:
        """The partitions this broker may append to as leader (Produce's lookup)."""
    def lead(self, topic: str, partition: int) -> Partition | None:
        """A partition missing from ``leaders`` that this broker leads after all (a
        single node's, on first use), or None."""
    def delay_produce(self, waits: Sequence[tuple[Partition, int]], timeout_ms: int | None
                      ) -> DelayedProduce: ...
    def leader_log(self, topic: str, partition: int) -> Log | None: ...
    def replace_log(self, topic: str, partition: int, lg: Log) -> None:
        """The partition's log moved to another log directory (server/log_dirs.py):
        its ``Partition`` appends to and reads ``lg`` from now on."""
    # Fetch: a replica's reads, and the epoch checks and replica choices of a consumer's
    # (the replica manager's in a cluster).
    def read_for_follower(self, replica: int, wanted: list[Wanted], max_bytes: int,
                          asked_epochs: dict[TopicPartition, int],
                          log_starts: dict[TopicPartition, int],
                          quota_wait: list[float] | None = None,
                          unread: list[TopicPartition] | None = None
                          ) -> tuple[list[PartitionResult], int]: ...
    @property
    def following(self) -> Following | None:
        """The lookup of partitions this broker follows, for consumers' follower reads
        (KIP-392); None where it follows nothing."""
    def epoch_refusals(self, topics: Iterable[FetchTopic], follower_reads: bool
                       ) -> Refused | None: ...
    def preferred_read_replicas(self, wanted: list[Wanted], client_rack: str,
                                refused: Refused | None) -> dict[TopicPartition, int]: ...
    def missing_partition_error(self, topic: str, partition: int) -> int: ...
    def leader_epoch(self, topic: str, partition: int) -> int: ...
    def wait_replicated(self, topic: str, partition: int, end: int
                        ) -> Awaitable[int] | None: ...

    # --- transaction markers --------------------------------------------------------------
    def write_txn_markers(self, markers: TxnMarkers) -> Callable[[], Awaitable[None]] | None: ...
    async def append_txn_markers(self, producer_id: int, producer_epoch: int, commit: bool,
                                 coordinator_epoch: int, partitions: Sequence[TopicPartition]
                                 ) -> dict[TopicPartition, int]: ...
    async def ask_transaction_coordinator(
            self, transactional_id: str, producer_id: int, producer_epoch: int,
            partitions: Sequence[TopicPartition], *, add: bool) -> dict[TopicPartition, int]:
        """KIP-890: ask the coordinator of a transactional id this broker does not
        coordinate whether the producer's transaction holds these partitions (or, with
        ``add``, to add them); its code for each (``TxnRuntime.check_transaction``)."""

    # --- feature levels (server/features.py) -------------------------------------------------
    def features(self) -> FinalizedFeatures:
        """The cluster's finalized feature levels and their epoch."""
    async def set_features(self, levels: dict[str, int]) -> None:
        """Finalize these levels (all of them: the new list), in force here before it
        returns; a cluster's other brokers see them at their watch."""

    # --- as clients see it ------------------------------------------------------------------
    def live_brokers(self) -> list[BrokerInfo]: ...
    def controller_id(self) -> int: ...
    def active_controller(self) -> AdminController | None: ...
    def origin_replicas(self, topic: str, partition: int) -> tuple[int, ...] | None: ...
    def partition_view(self, topic: str, partition: int) -> PartitionView: ...
    def leader_broker(self, topic: str, partition: int) -> BrokerInfo | None: ...


class SingleNode:
    """A broker alone: its data directory holds everything (see the module docstring)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.config = broker.config
        self.node_id: int = broker.node_id
        self.metadata: MetadataStore = None  # type: ignore[assignment]  # from start()
        self._broker_configs: BrokerConfigStore | None = None
        self.produces = Purgatory()  # stays empty: every append is committed at once
        # Every partition here as a sole-leader ``Partition``, made with its log (``_host``;
        # ``lead`` makes any other on first use): a plain dict, Produce's lookup.
        self.leaders: dict[TopicPartition, Partition] = {}
        self._controller = SingleNodeController(self)

    # --- the broker's start and stop ---------------------------------------------------------

    async def start(self) -> None:
        data_dir = self.config.data_dir
        # Before the logs open: they start from the dynamic topic-config defaults.
        self._broker_configs = BrokerConfigStore(FileDocument(data_dir, BROKER_DOCUMENT))
        # Read first: every log opens (and recovers) with its topic's own settings.
        self.metadata = MetadataStore(os.path.abspath(data_dir), self.node_id)

    def logs_opened(self) -> None:
        """The logs are open: the directory is ours now; every topic gets its logs."""
        logs = self.broker.logs
        assert logs is not None
        self.metadata.persist()
        for topic in self.metadata.topics.values():
            for partition in range(topic.partitions):
                self._host(topic.name, partition, topic.topic_id)

    async def document(self, name: str, mode: int = 0o644) -> Document:
        return FileDocument(self.config.data_dir, name, mode=mode)

    def start_replicas(self) -> None:
        """This broker leads everything from the start, so its coordinator runtimes
        coordinate every partition of their internal topics now, before it listens
        (where a cluster's replica manager elects those it leads, as Kafka's
        onLeadershipChange calls onElection): groups first, so that the markers of
        prepared transactions written at the transactions' load find the offsets they
        settle."""
        groups, transactions = self.broker.groups, self.broker.transactions
        assert groups is not None and transactions is not None
        groups.elect_all()
        transactions.elect_all()
        if self.broker.share_state is not None:
            self.broker.share_state.elect_all()

    async def register(self) -> None:
        """Nobody to tell."""

    async def controlled_shutdown(self) -> None:
        """No leadership to move."""

    def stop_waiting(self) -> None:
        """No append waits for replicas here."""

    async def stop(self) -> None:
        """Nothing of its own to stop."""

    def not_ready(self) -> str | None:
        return None

    def health(self) -> dict[str, int] | None:
        """No replica-manager or controller metrics: nothing is replicated here."""
        return None

    def produce_waiting(self) -> int:
        return 0  # every append is committed at once

    # --- dynamic broker configs ------------------------------------------------------------

    def broker_configs(self, resource: str) -> dict[str, str]:
        return self._broker_configs.get(resource) if self._broker_configs else {}

    async def set_broker_configs(self, resource: str, configs: Mapping[str, str]) -> None:
        assert self._broker_configs is not None
        await self._broker_configs.set(resource, dict(configs))
        self.broker.dynamic_configs_changed()

    # --- topics ------------------------------------------------------------------------------

    def _check_replicas(self, replicas: list[int], what: str) -> None:
        if list(replicas) != [self.node_id]:
            raise TopicError("INVALID_REPLICA_ASSIGNMENT",
                             f"{what} assigned to brokers {list(replicas)}; "
                             f"only {self.node_id} exists")

    async def create_topic(self, name: str, partitions: int | None,
                           replication_factor: int | None, configs: Mapping[str, str] | None,
                           *, assignment: Mapping[int, list[int]] | None = None,
                           validate_only: bool = False) -> Topic:
        if replication_factor is not None and replication_factor > 1:
            raise TopicError("INVALID_REPLICATION_FACTOR",
                             f"replication factor {replication_factor} is larger than the "
                             "1 broker available")
        for p, replicas in (assignment or {}).items():
            self._check_replicas(replicas, f"partition {p}")
        topic = self._register(name, partitions, configs, validate_only)
        if not validate_only:
            await self._open_logs(name, topic.partitions)
            log.info("created topic %s with %d partition(s)", name, topic.partitions)
        return topic

    def create_topic_now(self, name: str, partitions: int | None = None,
                         configs: Mapping[str, str] | None = None) -> Topic:
        """Create a topic and its logs in one step (tests and tools; CreateTopics goes
        through ``create_topic``, which yields while it makes many logs)."""
        topic = self._register(name, partitions, configs, False)
        for partition in range(topic.partitions):
            self._host(name, partition, topic.topic_id)
        log.info("created topic %s with %d partition(s)", name, topic.partitions)
        return topic

    def _register(self, name: str, partitions: int | None,
                  configs: Mapping[str, str] | None, validate_only: bool) -> Topic:
        count = self.config["num.partitions"] if partitions is None or partitions < 0 else (
            partitions)
        return self.metadata.create_topic(name, count, dict(configs) if configs else None,
                                          validate_only=validate_only)

    async def _open_logs(self, name: str, partitions: int) -> None:
        """Create (or open) a topic's partition logs, letting the event loop serve others
        every ``LOGS_PER_STEP``: a new log costs about a millisecond of file work, and a
        request for thousands of partitions must not hold every client for seconds (the
        fuzz tier's finding). A topic deleted or recreated meanwhile ends it."""
        logs = self.broker.logs
        assert logs is not None
        topic = self.metadata.topics.get(name)
        for partition in range(partitions):
            if partition and partition % LOGS_PER_STEP == 0:
                await asyncio.sleep(0)
                if self.metadata.topics.get(name) is not topic:
                    return
            self._host(name, partition, topic.topic_id if topic else None)

    async def delete_topic(self, name: str) -> Topic:
        logs = self.broker.logs
        assert logs is not None
        topic = self.metadata.delete_topic(name)
        if self.broker.groups is not None:  # its committed offsets go too (Kafka's)
            self.broker.groups.topics_deleted([name])
        for partition in range(topic.partitions):
            self.leaders.pop((name, partition), None)
        tiered = self.broker.tiered
        for partition in range(topic.partitions):
            lg = logs.get_log(name, partition)
            logs.delete_log(name, partition)
            if tiered is not None and lg is not None and lg.tiered:
                tiered.manager.delete_partition(name, partition, topic.topic_id)
        log.info("deleted topic %s", name)
        return topic

    async def add_partitions(self, name: str, count: int,
                             assignment: list[list[int]] | None = None, *,
                             validate_only: bool = False) -> Topic:
        for replicas in assignment or []:
            self._check_replicas(replicas, "a new partition")
        topic = self.metadata.add_partitions(name, count, validate_only=validate_only)
        if not validate_only:
            await self._open_logs(name, topic.partitions)
        return topic

    async def set_configs(self, name: str, configs: Mapping[str, str], *,
                          validate_only: bool = False) -> Topic:
        logs = self.broker.logs
        assert logs is not None
        topic = self.metadata.set_configs(name, dict(configs), validate_only=validate_only)
        if not validate_only:
            logs.update_config(name, self.broker.log_config_for(name))
        return topic

    async def wait_for_leaders(self, counts: Mapping[str, int], timeout_s: float) -> bool:
        return True  # this broker leads a topic's partitions from its creation

    async def wait_deleted(self, topics: Mapping[str, uuid.UUID], timeout_s: float
                           ) -> set[str]:
        return set()  # deleted when the request was answered

    async def ensure_internal_topic(self, name: str) -> None:
        """__consumer_offsets exists from the start (the group runtime creates it);
        __transaction_state is created at its first FindCoordinator, as Kafka does."""
        self.open_internal_topic(name)

    def open_internal_topic(self, name: str) -> None:
        """Created here and now if missing, with its logs (by the runtime that owns it):
        __transaction_state at its first use (FindCoordinator, or an InitProducerId with
        a transactional id, whose record goes to it), __share_group_state at a share
        group's first."""
        transactions, share_state = self.broker.transactions, self.broker.share_state
        if name == TRANSACTION_STATE_TOPIC and transactions is not None:
            transactions.ensure_topic()
        elif name == SHARE_GROUP_STATE_TOPIC and share_state is not None:
            share_state.ensure_topic()

    def internal_topic_partition_count(self, name: str) -> int | None:
        """None: the coordinator runtime's own count stands. It fixes the count itself,
        when it creates or opens the topic here (``_create_topic``), and nothing changes
        it after (an internal topic's partitions cannot be added)."""
        return None

    def replication_factor(self, topic: str) -> int:
        return 1

    # --- partitions --------------------------------------------------------------------------

    def delay_produce(self, waits: Sequence[tuple[Partition, int]], timeout_ms: int | None
                      ) -> DelayedProduce:
        return DelayedProduce(self.produces, waits, None)  # settled at once

    def _host(self, topic: str, partition: int, topic_id: uuid.UUID | None) -> None:
        """Open (or create) a partition's log and lead it: its ``Partition`` is made with
        the topic, as Kafka's are, not at its first produce."""
        logs = self.broker.logs
        assert logs is not None
        lg = logs.get_or_create_log(topic, partition, topic_id=topic_id)
        part = self.leaders.get((topic, partition))
        if part is None or part.log is not lg:
            self.lead(topic, partition)

    def lead(self, topic: str, partition: int) -> Partition | None:
        """The partition as this broker's to append to, made on first use from its log
        (None if there is no such log yet): this broker its only replica and leader at
        epoch 0 for good, an ISR of one."""
        logs = self.broker.logs
        assert logs is not None
        lg = logs.get_log(topic, partition)
        if lg is None:
            return None
        from odradek.server.replication.partition import Partition

        tp = (topic, partition)
        part = self.leaders[tp] = Partition.sole_leader(
            tp, lg, self.node_id, SINGLE_NODE_LEADER_EPOCH,
            fetches=self.broker.purgatory, produces=self.produces)
        return part

    def replace_log(self, topic: str, partition: int, lg: Log) -> None:
        part = self.leaders.get((topic, partition))
        if part is not None:
            part.log = lg

    def leader_log(self, topic: str, partition: int) -> Log | None:
        logs = self.broker.logs
        assert logs is not None
        return logs.get_log(topic, partition)

    def missing_partition_error(self, topic: str, partition: int) -> int:
        return ErrorCode.unknown_topic_or_partition

    def read_for_follower(self, replica: int, wanted: list[Wanted], max_bytes: int,
                          asked_epochs: dict[TopicPartition, int],
                          log_starts: dict[TopicPartition, int],
                          quota_wait: list[float] | None = None,
                          unread: list[TopicPartition] | None = None
                          ) -> tuple[list[PartitionResult], int]:
        """No broker replicates a single node's partitions: a replica's fetch gets
        REPLICA_NOT_AVAILABLE for each partition there is (a cluster's leader answers a
        broker that holds no replica so), UNKNOWN_TOPIC_OR_PARTITION for the rest."""
        logs = self.broker.logs
        assert logs is not None
        return [PartitionResult(topic, partition,
                                ErrorCode.replica_not_available
                                if logs.get_log(topic, partition) is not None
                                else ErrorCode.unknown_topic_or_partition, -1, -1, -1, None)
                for topic, partition, _, _ in wanted], 0

    following = None  # nothing to follow: every partition is led here

    def epoch_refusals(self, topics: Iterable[FetchTopic], follower_reads: bool
                       ) -> Refused | None:
        """KIP-320 for a consumer's fetch: a current leader epoch other than epoch 0
        (or -1, none given) is refused, for partitions there are."""
        refused: Refused | None = None
        for t in topics:
            for p in t.partitions:
                asked = p.current_leader_epoch
                if asked == SINGLE_NODE_LEADER_EPOCH or not (
                        code := epoch_error(asked, SINGLE_NODE_LEADER_EPOCH)):
                    continue
                logs = self.broker.logs
                assert logs is not None
                if logs.get_log(t.topic, p.partition) is not None:
                    if refused is None:
                        refused = {}
                    refused[(t.topic, p.partition)] = code
        return refused

    def preferred_read_replicas(self, wanted: list[Wanted], client_rack: str,
                                refused: Refused | None) -> dict[TopicPartition, int]:
        return {}  # the only replica is here

    def leader_epoch(self, topic: str, partition: int) -> int:
        return SINGLE_NODE_LEADER_EPOCH

    def wait_replicated(self, topic: str, partition: int, end: int) -> Awaitable[int] | None:
        return None  # an ISR of one: committed once appended

    async def ask_transaction_coordinator(
            self, transactional_id: str, producer_id: int, producer_epoch: int,
            partitions: Sequence[TopicPartition], *, add: bool) -> dict[TopicPartition, int]:
        """A single node coordinates every transactional id: asked only while its
        coordinators load, which the client retries."""
        return dict.fromkeys(partitions, ErrorCode.coordinator_load_in_progress)

    def features(self) -> FinalizedFeatures:
        return self.metadata.features

    async def set_features(self, levels: dict[str, int]) -> None:
        self.metadata.set_features(levels)

    # --- transaction markers -----------------------------------------------------------------

    def write_txn_markers(self, markers: TxnMarkers) -> Callable[[], Awaitable[None]] | None:
        """Written here and now (None: nothing to send). This broker leads every
        partition of the transaction, so its transaction runtime appends the markers to
        its own logs in the step that decided them (what Kafka's marker channel sends
        as WriteTxnMarkers), and a committed transaction is readable once EndTxn is
        answered."""
        transactions = self.broker.transactions
        assert transactions is not None  # it decided them
        transactions.write_markers_locally(markers)
        return None

    async def append_txn_markers(self, producer_id: int, producer_epoch: int, commit: bool,
                                 coordinator_epoch: int, partitions: Sequence[TopicPartition]
                                 ) -> dict[TopicPartition, int]:
        """WriteTxnMarkers from another broker's coordinator, where there is none:
        UNSUPPORTED_VERSION for every partition, Kafka's answer where no cluster needs
        this request (this broker's coordinator writes its own: ``write_txn_markers``)."""
        return dict.fromkeys(partitions, ErrorCode.unsupported_version)

    # --- as clients see it -----------------------------------------------------------------

    def _info(self) -> BrokerInfo:
        broker = self.broker
        host, port = broker.advertised_endpoint
        listeners = tuple((lst.name, lst.protocol, *broker.endpoint(lst.name))
                          for lst in self.config.listeners)
        # No rack: a single node names none in Metadata (nothing to spread over).
        return BrokerInfo(self.node_id, host, port, None, listeners=listeners)

    def live_brokers(self) -> list[BrokerInfo]:
        return [self._info()]

    def controller_id(self) -> int:
        return self.node_id

    def active_controller(self) -> SingleNodeController:
        """Always this broker's: Metadata names it the controller."""
        return self._controller

    def origin_replicas(self, topic: str, partition: int) -> tuple[int, ...] | None:
        """This broker, for a partition that exists: it holds every replica, and nothing
        is ever reassigned."""
        found = self.broker.topic(topic)
        return (self.node_id,) if found is not None and partition < found.partitions else None

    def partition_view(self, topic: str, partition: int) -> PartitionView:
        me = [self.node_id]
        return PartitionView(self.node_id, SINGLE_NODE_LEADER_EPOCH, me, me, [])

    def leader_broker(self, topic: str, partition: int) -> BrokerInfo | None:
        return self._info()


class SingleNodeController:
    """A single node is its own controller, and answers the controller's admin requests
    as Kafka does for partitions of one replica: that replica leads already, and there
    is nowhere to move it."""

    def __init__(self, node: SingleNode) -> None:
        self.node = node

    async def elect_leaders(self, election_type: int, partitions: list[TopicPartition] | None
                            ) -> dict[TopicPartition, Outcome]:
        """ELECTION_NOT_NEEDED for every partition named that exists (none named: none
        elected, so none reported, as Kafka reports only elections that ran)."""
        out: dict[TopicPartition, Outcome] = {}
        for topic, p in partitions or []:
            known = p >= 0 and self.node.origin_replicas(topic, p) is not None
            out[(topic, p)] = (("ELECTION_NOT_NEEDED", "a single node leads every "
                                "partition") if known else
                               ("UNKNOWN_TOPIC_OR_PARTITION", f"{topic}-{p} does not exist"))
        return out

    async def alter_reassignments(self, wanted: dict[TopicPartition, tuple[int, ...] | None]
                                  ) -> dict[TopicPartition, Outcome]:
        """Only a "reassignment" to this broker alone is accepted (it changes nothing);
        a cancellation finds nothing in progress."""
        return {tp: self._reassignment(tp, replicas) for tp, replicas in wanted.items()}

    def _reassignment(self, tp: TopicPartition, replicas: tuple[int, ...] | None) -> Outcome:
        node_id = self.node.node_id
        if self.node.origin_replicas(*tp) is None:
            return "UNKNOWN_TOPIC_OR_PARTITION", f"{tp[0]}-{tp[1]} does not exist"
        if replicas is None:
            return "NO_REASSIGNMENT_IN_PROGRESS", f"{tp[0]}-{tp[1]} is not being reassigned"
        if replicas != (node_id,):
            return ("INVALID_REPLICA_ASSIGNMENT",
                    f"a single node (broker {node_id}) holds every replica")
        return None, None

    def list_reassignments(self, partitions: list[TopicPartition] | None
                           ) -> dict[TopicPartition, tuple[tuple[int, ...], tuple[int, ...],
                                                           tuple[int, ...]]]:
        return {}  # nothing is ever being reassigned
