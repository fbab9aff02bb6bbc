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

A znode is written by other brokers (or other tools, or a hand with zkCli), so its
bytes are input like a request's: every parser here refuses what is not the layout
above with one error type, ``ZnodeFormatError``, naming what was wrong, and callers
treat the entry as absent (docs/operations.md, "Robustness"). The fuzz tier feeds them
arbitrary bytes (tests/fuzz/atheris_targets.py, ``znodes``).
"""

from __future__ import annotations

import base64
import binascii
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


def partitions_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}"


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}/state"


def config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS_PATH}/{topic}"


def delete_marker_path(topic: str) -> str:
    """/admin/delete_topics/T: the topic's deletion, asked and not yet finished."""
    return f"{DELETE_TOPICS_PATH}/{topic}"


def broker_config_path(broker: str) -> str:
    """/config/brokers/N, or /config/brokers/<default> for ``DEFAULT_BROKER``."""
    return f"{CONFIG_BROKERS_PATH}/{broker}"


def _dumps(data: Mapping[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


class ZnodeFormatError(ValueError):
    """A znode's bytes are not the layout Kafka (and Odradek) write there. The message
    names the field and what was wrong with it; the caller names the znode's path."""


# Value ranges of the fields, Kafka's types: a broker id, epoch or partition count is an
# int32 there and goes into int32 fields of responses here; producer ids and broker
# epochs (ZooKeeper session ids) are int64. Out of range is refused on reading, not
# left to fail (OverflowError) in a response encoder later.
INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)
PORT = (0, 65535)


def _loads(raw: bytes) -> dict[str, Any]:
    """A znode's bytes as a JSON object (Kafka's are UTF-8 JSON objects)."""
    if not isinstance(raw, bytes | bytearray):
        raise ZnodeFormatError(f"expected bytes, got {type(raw).__name__}")
    try:
        value = json.loads(bytes(raw).decode())
    except UnicodeDecodeError as exc:
        raise ZnodeFormatError(f"not UTF-8: {exc.reason} at byte {exc.start}") from None
    except ValueError as exc:  # JSONDecodeError; an integer of too many digits
        raise ZnodeFormatError(f"not JSON: {exc}") from None
    except RecursionError:
        raise ZnodeFormatError("not JSON: nested too deeply") from None
    if not isinstance(value, dict):
        raise ZnodeFormatError(f"expected a JSON object, got {raw[:80]!r}")
    return value


def _int(value: Any, what: str, bounds: tuple[int, int] = INT32) -> int:
    """An integer field: a JSON number without a fraction, or a string of one (Kafka
    writes some, e.g. the producer id block's, as strings), within ``bounds``."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ZnodeFormatError(f"{what}: expected an integer, got {_show(value)}")
    try:
        number = int(value)
    except ValueError:
        raise ZnodeFormatError(f"{what}: expected an integer, got {_show(value)}") from None
    if not bounds[0] <= number <= bounds[1]:
        raise ZnodeFormatError(f"{what}: {number} is outside [{bounds[0]}, {bounds[1]}]")
    return number


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ZnodeFormatError(f"{what}: expected a string, got {_show(value)}")
    return value


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ZnodeFormatError(f"{what}: expected a JSON object, got {_show(value)}")
    return value


def _ints(value: Any, what: str) -> tuple[int, ...]:
    """A list of broker ids."""
    if not isinstance(value, list):
        raise ZnodeFormatError(f"{what}: expected a list of broker ids, got {_show(value)}")
    return tuple(_int(b, what) for b in value)


def _field(data: Mapping[str, Any], key: str) -> Any:
    if key not in data:
        raise ZnodeFormatError(f"no {key!r} field")
    return data[key]


def _show(value: Any) -> str:
    """A field's value for an error message, cut short (a znode may hold 1 MB)."""
    try:
        text = json.dumps(value)
    except (RecursionError, ValueError, TypeError):  # nested deeper than dumps goes
        text = type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def broker_id(name: str) -> int | None:
    """The broker id a child of /brokers/ids or /admin/controlled_shutdown names, None
    if it names none. ASCII digits only: ``str.isdigit`` also holds for "²", which
    ``int`` refuses."""
    if not (name.isascii() and name.isdigit()) or len(name) > 10:
        return None
    number = int(name)
    return number if number <= INT32[1] else None


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
        """Kafka's BrokerIdZNode (versions 1-5); ZnodeFormatError if it is not one."""
        data = _loads(raw)
        protocols = _object(data.get("listener_security_protocol_map") or {},
                            "listener_security_protocol_map")
        endpoints = data.get("endpoints") or []
        if not isinstance(endpoints, list):
            raise ZnodeFormatError(f"endpoints: expected a list, got {_show(endpoints)}")
        listeners = []
        for endpoint in endpoints:
            # NAME://host:port, the host maybe empty or a bracketed IPv6 address.
            name, sep, hostport = _str(endpoint, "endpoints").partition("://")
            ep_host, colon, ep_port = hostport.rpartition(":")
            if not sep or not colon or not name:
                raise ZnodeFormatError(f"endpoints: {_show(endpoint)} is not NAME://host:port")
            proto = _str(protocols.get(name, name), f"listener_security_protocol_map.{name}")
            listeners.append((name, proto, ep_host, _int(ep_port, "endpoints port", PORT)))
        host, port = data.get("host"), data.get("port")
        if not host or port in (None, -1):
            # Kafka writes host/port only for PLAINTEXT; endpoints always.
            if not listeners:
                raise ZnodeFormatError("neither host and port nor endpoints")
            _, _, host, port = listeners[0]
        rack = data.get("rack")
        return cls(node_id, _str(host, "host"), _int(port, "port", PORT),
                   None if rack is None else _str(rack, "rack"), epoch, tuple(listeners))


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
        """Kafka's TopicZNode (versions 1-3); ZnodeFormatError if it is not one."""
        data = _loads(raw)
        text = data.get("topic_id")
        if text:
            # Kafka's Uuid.toString: 16 bytes, URL-safe base64 without padding.
            try:
                topic_id = uuid.UUID(bytes=base64.urlsafe_b64decode(
                    _str(text, "topic_id") + "=" * (-len(text) % 4)))
            except (ValueError, binascii.Error):
                raise ZnodeFormatError(f"topic_id: {_show(text)} is not a base64 UUID") from None
        else:
            # A topic written without an id (Kafka before 2.8): derive a stable one.
            topic_id = uuid.uuid5(uuid.NAMESPACE_URL, f"odradek-topic:{name}")
        parts = _object(data.get("partitions", {}), "partitions")
        if set(parts) != {str(p) for p in range(len(parts))}:
            raise ZnodeFormatError(f"partitions: the keys {_show(sorted(parts)[:8])} are not "
                                   f"0..{len(parts) - 1}")
        replicas = tuple(_ints(parts[str(p)], f"partitions.{p}") for p in range(len(parts)))

        def per_partition(key: str) -> dict[int, tuple[int, ...]]:
            out = {}
            for p, r in _object(data.get(key) or {}, key).items():
                partition = _int(p, key, (0, len(replicas) - 1))
                if r:
                    out[partition] = _ints(r, f"{key}.{p}")
            return out

        return cls(name, topic_id, replicas, per_partition("adding_replicas"),
                   per_partition("removing_replicas"))


def config_to_json(configs: Mapping[str, str]) -> bytes:
    return _dumps({"version": 1, "config": {k: str(v) for k, v in configs.items()}})


def config_from_json(raw: bytes | None) -> dict[str, str]:
    """Kafka's ConfigEntityZNode (a topic's or a broker's overrides); none if empty.
    Values are strings in Kafka's; other JSON scalars are taken as their text, as before."""
    if not raw:
        return {}
    out = {}
    for key, value in _object(_loads(raw).get("config", {}), "config").items():
        if isinstance(value, dict | list):
            raise ZnodeFormatError(f"config.{key}: expected a string, got {_show(value)}")
        out[str(key)] = str(value)
    return out


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
        """Kafka's TopicPartitionStateZNode; ZnodeFormatError if it is not one."""
        data = _loads(raw)
        return cls(_int(_field(data, "leader"), "leader"),
                   _int(_field(data, "leader_epoch"), "leader_epoch"),
                   _ints(_field(data, "isr"), "isr"),
                   _int(data.get("controller_epoch", 0), "controller_epoch"),
                   _int(data.get("leader_broker_epoch", -1), "leader_broker_epoch", INT64),
                   version)

    def changed(self, **changes: Any) -> PartitionState:
        return replace(self, **changes)


def producer_id_block_to_json(broker: int, start: int, end: int) -> bytes:
    """Kafka's ProducerIdBlockZNode: the block [start, end] belongs to ``broker``."""
    return _dumps({"version": 1, "broker": broker, "block_start": str(start),
                   "block_end": str(end)})


def producer_id_block_from_json(raw: bytes | None) -> tuple[int, int] | None:
    """Kafka's ProducerIdBlockZNode: (first, last) of the block, None if empty."""
    if not raw:
        return None
    data = _loads(raw)
    start = _int(_field(data, "block_start"), "block_start", INT64)
    end = _int(_field(data, "block_end"), "block_end", INT64)
    if not 0 <= start <= end:
        raise ZnodeFormatError(f"block [{start}, {end}] is not a block of producer ids")
    return start, end


def cluster_id_to_json(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


def cluster_id_from_json(raw: bytes) -> str:
    """Kafka's ClusterIdZNode."""
    cluster_id = _str(_field(_loads(raw), "id"), "id")
    if not cluster_id:
        raise ZnodeFormatError("id: empty")
    return cluster_id


def controller_to_json(node_id: int, timestamp_ms: int) -> bytes:
    return _dumps({"version": 1, "brokerid": node_id, "timestamp": str(timestamp_ms)})


def controller_from_json(raw: bytes | None) -> int:
    """Kafka's ControllerZNode: the controller's broker id, -1 if there is none."""
    if not raw:
        return -1
    return _int(_field(_loads(raw), "brokerid"), "brokerid")


def controller_epoch_to_json(epoch: int) -> bytes:
    return str(epoch).encode()


def controller_epoch_from_json(raw: bytes) -> int:
    """Kafka's ControllerEpochZNode: the epoch as decimal text (not JSON), at least 0
    and below int32's end, so that the next controller's epoch is an int32 too."""
    if not isinstance(raw, bytes | bytearray):
        raise ZnodeFormatError(f"expected bytes, got {type(raw).__name__}")
    try:
        text = bytes(raw).decode("ascii").strip()
    except UnicodeDecodeError:
        raise ZnodeFormatError(f"controller epoch {bytes(raw)[:40]!r} is not ASCII") from None
    if not text.isdigit() or len(text) > 10:
        raise ZnodeFormatError(f"controller epoch {text[:40]!r} is not a number")
    return _int(text, "controller epoch", (0, INT32[1] - 1))


# --- /feature (Kafka's FeatureZNode) ----------------------------------------------------

FEATURE_PATH = "/feature"
FEATURE_ZNODE_VERSION = 2  # FeatureZNode's version with the status field
FEATURE_ENABLED = 1  # its status: the features are in force


def features_from_json(raw: bytes | None) -> dict[str, int] | None:
    """The finalized feature levels of a FeatureZNode (each feature's max_version_level);
    None for no znode (the cluster never changed its features)."""
    if raw is None:
        return None
    data = _loads(raw)
    out = {}
    for name, levels in _object(data.get("features", {}), "features").items():
        level = _object(levels, f"features.{name}").get("max_version_level")
        if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level < 1 << 15:
            raise ZnodeFormatError(f"features.{name}.max_version_level: expected an int16, "
                                   f"got {_show(level)}")
        out[str(name)] = level
    return out


def features_to_json(levels: Mapping[str, int]) -> bytes:
    return json.dumps({
        "version": FEATURE_ZNODE_VERSION, "status": FEATURE_ENABLED,
        "features": {name: {"min_version_level": 1, "max_version_level": level}
                     for name, level in sorted(levels.items())}},
        separators=(",", ":")).encode()
