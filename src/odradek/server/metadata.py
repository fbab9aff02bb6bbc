"""The single node's cluster metadata: cluster id, topics (id, partition count, config
overrides) and the producer id allocator, persisted in the data directory.

Kafka keeps this in ZooKeeper or the KRaft metadata log; a single node keeps it in one
JSON file, replaced atomically (write, fsync, rename) on every change, and a Kafka-style
``meta.properties`` naming the cluster and node.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from odradek.server.features import DEFAULT_LEVELS, FinalizedFeatures
from odradek.storage.checkpoint import write_atomically
from odradek.storage.config import LogConfig

METADATA_FILE = "odradek-metadata.json"
META_PROPERTIES = "meta.properties"
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249  # Kafka's limit (directory names get a "-<partition>" suffix)

# Producer ids are handed out from blocks reserved on disk, so an InitProducerId does not
# write the metadata file each time and ids are never reused after a restart.
PRODUCER_ID_BLOCK = 1000


class TopicError(Exception):
    """A topic request that cannot be done; ``kafka_error`` names the Kafka error."""

    def __init__(self, kafka_error: str, message: str) -> None:
        super().__init__(message)
        self.kafka_error = kafka_error


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise TopicError("INVALID_TOPIC_EXCEPTION", f"topic name {name!r} is not allowed")
    if len(name) > MAX_TOPIC_NAME:
        raise TopicError("INVALID_TOPIC_EXCEPTION",
                         f"topic name is longer than {MAX_TOPIC_NAME} characters")
    if not _LEGAL_TOPIC.match(name):
        raise TopicError("INVALID_TOPIC_EXCEPTION",
                         f"topic name {name!r} may hold only ASCII letters, digits, '.', '_' "
                         "and '-'")


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)  # overrides only
    internal: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"id": str(self.topic_id), "partitions": self.partitions,
                "configs": self.configs, "internal": self.internal}


class MetadataStore:
    """Topics and ids of one broker; every change is on disk before it returns.

    Constructing it only reads the file (the topics' configs are needed to open their
    logs, before the data directory is locked); ``persist()`` writes it, once the caller
    holds the directory's lock."""

    def __init__(self, data_dir: str, node_id: int) -> None:
        self.data_dir = data_dir
        self.node_id = node_id
        self.path = os.path.join(data_dir, METADATA_FILE)
        self.topics: dict[str, Topic] = {}
        # KIP-516: Fetch v13+ names topics by id; kept with every change to ``topics``
        self.names_by_id: dict[uuid.UUID, str] = {}
        self.cluster_id = ""
        # Finalized feature levels and their epoch (server/features.py).
        self.features = FinalizedFeatures(dict(DEFAULT_LEVELS), 0)
        self._next_producer_id = 0
        self._reserved_producer_id = 0
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            data = {}
        self.cluster_id = data.get("cluster_id") or _new_cluster_id()
        for name, t in data.get("topics", {}).items():
            self.topics[name] = Topic(name, uuid.UUID(t["id"]), int(t["partitions"]),
                                      dict(t.get("configs", {})), bool(t.get("internal")))
            self.names_by_id[self.topics[name].topic_id] = name
        if "features" in data:
            self.features = FinalizedFeatures(
                {str(k): int(v) for k, v in data["features"].items()},
                int(data.get("features_epoch", 0)))
        # Everything up to the reserved mark may have been handed out before a crash.
        self._next_producer_id = self._reserved_producer_id = int(
            data.get("reserved_producer_id", 0))

    def persist(self) -> None:
        """Write the store and meta.properties (a new cluster id is fixed from here on)."""
        self._save()
        self._write_meta_properties()

    def _save(self) -> None:
        data = {
            "cluster_id": self.cluster_id,
            "reserved_producer_id": self._reserved_producer_id,
            "topics": {name: t.to_json() for name, t in sorted(self.topics.items())},
            "features": self.features.levels,
            "features_epoch": self.features.epoch,
        }
        write_atomically(self.path, json.dumps(data, indent=1).encode())

    def set_features(self, levels: dict[str, int]) -> None:
        """Finalize these feature levels (a new epoch), on disk before it returns."""
        self.features = FinalizedFeatures(dict(levels), self.features.epoch + 1)
        self._save()

    def _write_meta_properties(self) -> None:
        path = os.path.join(self.data_dir, META_PROPERTIES)
        text = f"version=1\ncluster.id={self.cluster_id}\nnode.id={self.node_id}\n"
        try:
            with open(path, encoding="utf-8") as f:
                if f.read() == text:
                    return
        except FileNotFoundError:
            pass
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    # --- topics ------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None,
                     *, internal: bool = False, validate_only: bool = False) -> Topic:
        validate_topic_name(name)
        if name in self.topics:
            raise TopicError("TOPIC_ALREADY_EXISTS", f"topic {name!r} already exists")
        if partitions < 1:
            raise TopicError("INVALID_PARTITIONS", "a topic needs at least one partition")
        configs = {k: str(v) for k, v in (configs or {}).items()}
        self.check_configs(configs)
        topic = Topic(name, uuid.uuid4(), partitions, configs, internal)
        if not validate_only:
            self.topics[name] = topic
            self.names_by_id[topic.topic_id] = name
            self._save()
        return topic

    def delete_topic(self, name: str) -> Topic:
        topic = self.topics.pop(name, None)
        if topic is None:
            raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
        self.names_by_id.pop(topic.topic_id, None)
        self._save()
        return topic

    def add_partitions(self, name: str, count: int, *, validate_only: bool = False) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
        if count <= topic.partitions:
            raise TopicError("INVALID_PARTITIONS",
                             f"topic {name!r} has {topic.partitions} partitions; "
                             f"the new count must be larger, got {count}")
        if not validate_only:
            topic.partitions = count
            self._save()
        return topic

    def set_configs(self, name: str, configs: dict[str, str], *,
                    validate_only: bool = False) -> Topic:
        """Replace a topic's overrides (AlterConfigs' semantics)."""
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
        self.check_configs(configs)
        if not validate_only:
            topic.configs = dict(configs)
            self._save()
        return topic

    @staticmethod
    def check_configs(configs: dict[str, str]) -> None:
        try:
            LogConfig.from_kafka(configs)
        except ValueError as exc:
            raise TopicError("INVALID_CONFIG", str(exc)) from None

    # --- producer ids --------------------------------------------------------------------

    def next_producer_id(self) -> int:
        if self._next_producer_id >= self._reserved_producer_id:
            self._reserved_producer_id = self._next_producer_id + PRODUCER_ID_BLOCK
            self._save()
        pid = self._next_producer_id
        self._next_producer_id += 1
        return pid


def _new_cluster_id() -> str:
    """A Kafka-style cluster id: 16 random bytes, base64url without padding (22 chars)."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
