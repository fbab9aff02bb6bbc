"""A cluster's state as one Metadata answer tells it: the live brokers with their racks,
the controller, and per partition its leader, leader epoch, replicas, ISR and offline
replicas, with the two health questions operators ask of it (kafka-topics.sh's
``--under-replicated-partitions`` and ``--unavailable-partitions``).

On this package's blocking client rather than librdkafka: librdkafka's metadata does not
carry the leader epoch (Metadata v7+) or the offline replicas (v5+)."""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from odradek.client.codec import METADATA
from odradek.client.connection import Cluster, KafkaClientError

__all__ = ["BrokerNode", "ClusterMetadata", "KafkaClientError", "PartitionState",
           "TopicState", "fetch_metadata"]


@dataclass(frozen=True)
class BrokerNode:
    node_id: int
    host: str
    port: int
    rack: str | None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    leader: int  # -1: none
    leader_epoch: int  # -1: not known (a broker answering Metadata below v7)
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    error: str | None  # Kafka's name of the partition's error code, e.g. LEADER_NOT_AVAILABLE

    @property
    def under_replicated(self) -> bool:
        """Fewer in-sync replicas than replicas (kafka-topics.sh's definition)."""
        return len(self.isr) < len(self.replicas)

    def unavailable(self, live: set[int] | frozenset[int]) -> bool:
        """No leader, or a leader that is not a live broker."""
        return self.leader < 0 or self.leader not in live


@dataclass(frozen=True)
class TopicState:
    name: str
    internal: bool
    error: str | None
    partitions: tuple[PartitionState, ...]


@dataclass(frozen=True)
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int  # -1: none known
    brokers: dict[int, BrokerNode]  # the live ones, by node id
    topics: dict[str, TopicState]  # topics that exist (an unknown name is left out)
    answered_by: str  # the bootstrap server that answered

    def partitions(self) -> list[PartitionState]:
        return [p for name in sorted(self.topics) for p in self.topics[name].partitions]

    def under_replicated(self) -> list[PartitionState]:
        return [p for p in self.partitions() if p.under_replicated]

    def unavailable(self) -> list[PartitionState]:
        live = frozenset(self.brokers)
        return [p for p in self.partitions() if p.unavailable(live)]


def _error(code: int | None) -> str | None:
    if code in (None, ErrorCode.none, 0):
        return None
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"ERROR_{code}"


def fetch_metadata(bootstrap: str, *, topics: list[str] | None = None,
                   timeout_s: float = 30.0, client_id: str = "odradek-cli",
                   ) -> ClusterMetadata:
    """Ask the first bootstrap server that answers for ``topics`` (None: every topic).
    KafkaClientError if none answers. Topics that do not exist are not in the result."""
    cluster = Cluster(bootstrap, client_id=client_id, timeout_s=timeout_s)
    try:
        conn = cluster.any_broker()
        answer = conn.request(METADATA, {
            "topics": None if topics is None else [{"name": name} for name in topics],
            "allow_auto_topic_creation": False})
        address = conn.address
    finally:
        cluster.close()
    found: dict[str, TopicState] = {}
    for topic in answer.topics:
        error = _error(topic.error_code)
        if topic.name is None or error in ("UNKNOWN_TOPIC_OR_PARTITION", "INVALID_TOPIC_EXCEPTION"):
            continue
        partitions = tuple(sorted((PartitionState(
            topic=topic.name, partition=int(p.partition_index), leader=int(p.leader_id),
            leader_epoch=int(getattr(p, "leader_epoch", -1)),
            replicas=tuple(int(r) for r in p.replica_nodes),
            isr=tuple(int(r) for r in p.isr_nodes),
            offline_replicas=tuple(int(r) for r in getattr(p, "offline_replicas", ())),
            error=_error(p.error_code)) for p in topic.partitions),
            key=lambda p: p.partition))
        found[topic.name] = TopicState(topic.name, bool(getattr(topic, "is_internal", False)),
                                       error, partitions)
    brokers = {int(b.node_id): BrokerNode(int(b.node_id), b.host, int(b.port),
                                          getattr(b, "rack", None))
               for b in answer.brokers}
    return ClusterMetadata(getattr(answer, "cluster_id", None),
                           int(getattr(answer, "controller_id", -1)), brokers, found, address)
