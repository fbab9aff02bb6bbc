"""The cluster's shared state as it lives in the coordination store, and its znode layout.

Kafka's ZooKeeper-era layout (``kafka.zk.ZkData``), so an operator who knows Kafka's
znodes finds them here, with two additions named where they are defined:

    /cluster/id                                   {"version":"1","id":CLUSTER_ID}
    /controller                                   ephemeral: {"version":1,"brokerid":N,...}
    /controller_epoch                             "N": bumped by every new controller
    /brokers/ids/N                                ephemeral: endpoints and rack of broker N
    /brokers/topics/T                             the replicas of each partition, topic id
    /brokers/topics/T/partitions/P/state          leader, leader epoch, ISR
    /config/topics/T                              the topic's config overrides
    /config/brokers/N, /config/brokers/<default>  dynamic broker configs (throttle rates)
    /admin/delete_topics/T                        a deletion the controller carries out
    /admin/controlled_shutdown/N                  (ours) broker N asks to shed leadership
    /latest_producer_id_block                     the last block of producer ids handed out

Everything here is pure: dataclasses, JSON (de)serialisation and paths; no I/O.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

CLUSTER_ID_PATH = "/cluster/id"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
BROKER_IDS_PATH = "/brokers/ids"
TOPICS_PATH = "/brokers/topics"
CONFIG_TOPICS_PATH = "/config/topics"
CONFIG_BROKERS_PATH = "/config/brokers"
# Kafka's name for the cluster-wide dynamic broker defaults.
DEFAULT_BROKER = "<default>"
DELETE_TOPICS_PATH = "/admin/delete_topics"
# Kafka's controlled shutdown is a request to the controller (ControlledShutdown, API 7),
# which Kafka 4 removed with ZooKeeper and which kio therefore does not know. Here the
# shutting-down broker writes this (ephemeral) znode and the controller, which watches
# its parent, moves the broker's leadership away; the broker watches its partitions'
# states to see it done.
CONTROLLED_SHUTDOWN_PATH = "/admin/controlled_shutdown"
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
# Paths that must exist before watches are set on them.
PERSISTENT_PATHS = (BROKER_IDS_PATH, TOPICS_PATH, CONFIG_TOPICS_PATH, DELETE_TOPICS_PATH,
                    CONTROLLED_SHUTDOWN_PATH, CONFIG_BROKERS_PATH)

NO_LEADER = -1
TopicPartition = tuple[str, int]


def broker_path(node_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{node_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}"


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}/state"


def config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS_PATH}/{topic}"


def broker_config_path(broker: str) -> str:
    """/config/brokers/N, or /config/brokers/<default> for ``DEFAULT_BROKER``."""
    return f"{CONFIG_BROKERS_PATH}/{broker}"


def _dumps(data: Mapping[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


def _loads(raw: bytes) -> dict[str, Any]:
    value = json.loads(raw.decode())
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {raw[:80]!r}")
    return value


# --- brokers ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A registered broker: where clients and other brokers reach it, and its rack."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    # Which registration this is (Kafka's broker epoch, KIP-380): a broker that restarts,
    # or whose ZooKeeper session expired and registered again, has a new one, so the
    # controller can tell a bounce from a broker that stayed up. Kafka uses the
    # registration znode's czxid; here it is the ZooKeeper session id that owns it.
    epoch: int = -1
    # Every listener's advertised address: (listener name, security protocol, host,
    # port); host/port above are the inter-broker listener's. Empty: one PLAINTEXT.
    listeners: tuple[tuple[str, str, str, int], ...] = ()

    def address(self, listener: str | None) -> tuple[str, int] | None:
        """Where this broker is reached through ``listener`` (None: the inter-broker
        listener); None if it has no such listener (Kafka leaves it out of Metadata)."""
        if listener is None or not self.listeners:
            return self.host, self.port
        for name, _, host, port in self.listeners:
            if name == listener:
                return host, port
        return None

    def to_json(self, timestamp_ms: int) -> bytes:
        listeners = self.listeners or (("PLAINTEXT", "PLAINTEXT", self.host, self.port),)
        return _dumps({
            "version": 5, "host": self.host, "port": self.port, "rack": self.rack,
            "endpoints": [f"{name}://{host}:{port}" for name, _, host, port in listeners],
            "listener_security_protocol_map": {name: proto for name, proto, _, _ in listeners},
            "jmx_port": -1, "timestamp": str(timestamp_ms), "features": {},
        })

    @classmethod
    def from_json(cls, node_id: int, raw: bytes, epoch: int = -1) -> BrokerInfo:
        data = _loads(raw)
        protocols = data.get("listener_security_protocol_map") or {}
        listeners = []
        for endpoint in data.get("endpoints") or ():
            name, _, hostport = endpoint.partition("://")
            ep_host, _, ep_port = hostport.rpartition(":")
            listeners.append((name, protocols.get(name, name), ep_host, int(ep_port)))
        host, port = data.get("host"), data.get("port")
        if not host or port in (None, -1):
            # Kafka writes host/port only for PLAINTEXT; endpoints always.
            _, _, host, port = listeners[0]
        return cls(node_id, str(host), int(port), data.get("rack"), epoch, tuple(listeners))


# --- topics ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """/brokers/topics/T: the replicas of every partition (the first is the preferred
    leader), the topic id (KIP-516), and the reassignments in progress (KIP-455).

    While a partition is reassigned its replicas are the full set, target first
    (Kafka's RS = TRS + ORS), ``adding`` those joining and ``removing`` those leaving;
    the controller finishes by writing the target alone. Kept in this znode, as Kafka
    keeps it, so a new controller resumes a reassignment its predecessor began."""

    name: str
    topic_id: uuid.UUID
    replicas: tuple[tuple[int, ...], ...]  # index = partition
    adding: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing: Mapping[int, tuple[int, ...]] = field(default_factory=dict)

    @property
    def partitions(self) -> int:
        return len(self.replicas)

    def reassigning(self, partition: int) -> bool:
        return bool(self.adding.get(partition) or self.removing.get(partition))

    def origin(self, partition: int) -> tuple[int, ...]:
        """The replicas before the reassignment in progress (all of them if none)."""
        adding = self.adding.get(partition, ())
        return tuple(r for r in self.replicas[partition] if r not in adding)

    def target(self, partition: int) -> tuple[int, ...]:
        """The replicas the reassignment in progress ends with (all of them if none)."""
        removing = self.removing.get(partition, ())
        return tuple(r for r in self.replicas[partition] if r not in removing)

    def with_partition(self, partition: int, replicas: tuple[int, ...],
                       adding: tuple[int, ...] = (), removing: tuple[int, ...] = ()
                       ) -> TopicAssignment:
        parts = list(self.replicas)
        parts[partition] = tuple(replicas)
        add = {p: r for p, r in self.adding.items() if p != partition}
        rem = {p: r for p, r in self.removing.items() if p != partition}
        if adding:
            add[partition] = tuple(adding)
        if removing:
            rem[partition] = tuple(removing)
        return TopicAssignment(self.name, self.topic_id, tuple(parts), add, rem)

    def to_json(self) -> bytes:
        return _dumps({
            "version": 3,
            "topic_id": base64.urlsafe_b64encode(self.topic_id.bytes).decode().rstrip("="),
            "partitions": {str(p): list(r) for p, r in enumerate(self.replicas)},
            "adding_replicas": {str(p): list(r) for p, r in self.adding.items() if r},
            "removing_replicas": {str(p): list(r) for p, r in self.removing.items() if r},
        })

    @classmethod
    def from_json(cls, name: str, raw: bytes) -> TopicAssignment:
        data = _loads(raw)
        text = data.get("topic_id")
        if text:
            topic_id = uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        else:
            # A topic written without an id (Kafka before 2.8): derive a stable one.
            topic_id = uuid.uuid5(uuid.NAMESPACE_URL, f"odradek-topic:{name}")
        parts = data.get("partitions", {})
        replicas = tuple(tuple(int(b) for b in parts[str(p)]) for p in range(len(parts)))

        def per_partition(key: str) -> dict[int, tuple[int, ...]]:
            return {int(p): tuple(int(b) for b in r)
                    for p, r in (data.get(key) or {}).items() if r}

        return cls(name, topic_id, replicas, per_partition("adding_replicas"),
                   per_partition("removing_replicas"))


def config_to_json(configs: Mapping[str, str]) -> bytes:
    return _dumps({"version": 1, "config": {k: str(v) for k, v in configs.items()}})


def config_from_json(raw: bytes | None) -> dict[str, str]:
    if not raw:
        return {}
    return {str(k): str(v) for k, v in _loads(raw).get("config", {}).items()}


# --- partition state --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionState:
    """/brokers/topics/T/partitions/P/state (Kafka's LeaderIsrAndControllerEpoch).

    ``version`` is the znode's version (Kafka's zkVersion, the "partition epoch"): every
    write is conditional on it, so the controller and the leader, who both write it,
    never overwrite each other's change unseen. The controller bumps ``leader_epoch``
    with every change it makes; a leader changing its ISR keeps it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    # The registration (BrokerInfo.epoch) of the leader this state was written for: a
    # leader that restarted, or lost its session, finds a stale value here and does not
    # act as leader until the controller has elected it again (our addition to the
    # znode; Kafka carries the broker epoch in its LeaderAndIsr requests instead).
    leader_broker_epoch: int = -1
    version: int = -1  # znode version; not part of the JSON

    def to_json(self) -> bytes:
        return _dumps({"version": 1, "leader": self.leader, "leader_epoch": self.leader_epoch,
                       "isr": list(self.isr), "controller_epoch": self.controller_epoch,
                       "leader_broker_epoch": self.leader_broker_epoch})

    @classmethod
    def from_json(cls, raw: bytes, version: int) -> PartitionState:
        data = _loads(raw)
        return cls(int(data["leader"]), int(data["leader_epoch"]),
                   tuple(int(b) for b in data["isr"]), int(data.get("controller_epoch", 0)),
                   int(data.get("leader_broker_epoch", -1)), version)

    def changed(self, **changes: Any) -> PartitionState:
        return replace(self, **changes)


def producer_id_block_to_json(broker: int, start: int, end: int) -> bytes:
    """Kafka's ProducerIdBlockZNode: the block [start, end] belongs to ``broker``."""
    return _dumps({"version": 1, "broker": broker, "block_start": str(start),
                   "block_end": str(end)})


def producer_id_block_from_json(raw: bytes | None) -> tuple[int, int] | None:
    if not raw:
        return None
    data = _loads(raw)
    return int(data["block_start"]), int(data["block_end"])


def cluster_id_to_json(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


def cluster_id_from_json(raw: bytes) -> str:
    return str(_loads(raw)["id"])


def controller_to_json(node_id: int, timestamp_ms: int) -> bytes:
    return _dumps({"version": 1, "brokerid": node_id, "timestamp": str(timestamp_ms)})


def controller_from_json(raw: bytes | None) -> int:
    if not raw:
        return -1
    return int(_loads(raw)["brokerid"])
