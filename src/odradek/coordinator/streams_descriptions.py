"""KIP-1331's streams group topology descriptions: what the coordinator keeps of the
description a Kafka Streams member pushes (StreamsGroupTopologyDescriptionUpdate, key 93)
and when a heartbeat (StreamsGroupHeartbeat v1) asks for one.

Kafka 4.4 hands descriptions to a plugin (``group.streams.topology.description.plugin.
class``; unset, the default, turns the feature off: key 93 is UNSUPPORTED_VERSION, no
heartbeat asks, a describe that asks finds NOT_STORED). The plugin Kafka ships,
``org.apache.kafka.server.streams.InMemoryTopologyDescriptionPlugin``, keeps one
description per group in memory, returned only for the epoch it was stored at; it is
the one Odradek has (``IN_MEMORY_PLUGIN``), any other class name is refused at startup.
What the plugin holds is recorded in the group's metadata record (streams_records.py),
as Kafka does, so a restarted coordinator does not ask again for an epoch it stored
(and, as with Kafka's in-memory plugin after a restart, then has nothing to show).

Kafka's asking is backed off per group (StreamsGroupTopologyDescriptionBackoff): one
heartbeat asks, then none for 30 s, doubling per ask of the same epoch up to an hour,
with 20 % jitter; a successful push clears it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

IN_MEMORY_PLUGIN = "org.apache.kafka.server.streams.InMemoryTopologyDescriptionPlugin"

SOURCE, PROCESSOR, SINK = 1, 2, 3

# StreamsGroupDescribe v1's TopologyDescriptionStatus.
NOT_REQUESTED, NOT_STORED, ERROR, AVAILABLE = 0, 1, 2, 3

# StreamsGroupMetadataValue's StoredDescriptionTopologyEpoch: none, or a push under way.
NONE_STORED = -1
UNCERTAIN = -2


class InvalidDescription(Exception):
    """A pushed description Kafka's converter refuses (INVALID_REQUEST)."""


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    node_type: int
    successors: tuple[str, ...]
    source_topics: tuple[str, ...] = ()
    stores: tuple[str, ...] = ()
    sink_topic: str | None = None


@dataclass(frozen=True, slots=True)
class Description:
    subtopologies: tuple[tuple[str, tuple[Node, ...]], ...]
    global_stores: tuple[tuple[Node, Node], ...]


def _node(wire: Any) -> Node:
    """As Kafka's StreamsGroupTopologyDescriptionConverter: each kind keeps its own
    fields only; successors are a set there (first occurrence kept here)."""
    successors = tuple(dict.fromkeys(wire.successors))
    kind = int(wire.node_type)
    if kind == SOURCE:
        return Node(wire.name, kind, successors, source_topics=tuple(wire.source_topics))
    if kind == PROCESSOR:
        return Node(wire.name, kind, successors, stores=tuple(wire.stores))
    if kind == SINK:
        return Node(wire.name, kind, successors, sink_topic=wire.sink_topic)
    raise InvalidDescription(f"Unknown topology node type: {kind}")


def description_from_wire(wire: Any) -> Description:
    """Key 93's TopologyDescription; InvalidDescription for what Kafka refuses."""
    subtopologies = tuple((s.subtopology_id, tuple(_node(n) for n in s.nodes))
                          for s in wire.subtopologies)
    stores = []
    for g in wire.global_stores:
        source, processor = _node(g.source), _node(g.processor)
        if source.node_type != SOURCE or processor.node_type != PROCESSOR:
            raise InvalidDescription(
                "Global store must be composed of a source and a processor node.")
        stores.append((source, processor))
    return Description(subtopologies, tuple(stores))


def description_to_wire(d: Description) -> dict[str, Any]:
    """StreamsGroupDescribe v1's TopologyDescription (messages.build's dict shape)."""
    def node(n: Node) -> dict[str, Any]:
        return {"name": n.name, "node_type": n.node_type,
                "source_topics": list(n.source_topics), "sink_topic": n.sink_topic,
                "stores": list(n.stores), "successors": list(n.successors)}

    return {"subtopologies": [{"subtopology_id": sid, "nodes": [node(n) for n in nodes]}
                              for sid, nodes in d.subtopologies],
            "global_stores": [{"source": node(s), "processor": node(p)}
                              for s, p in d.global_stores]}


class InMemoryPlugin:
    """Kafka's InMemoryTopologyDescriptionPlugin: one description per group, given back
    only for the epoch it was stored at."""

    def __init__(self) -> None:
        self._store: dict[str, tuple[int, Description]] = {}

    def set_topology(self, group_id: str, epoch: int, description: Description) -> None:
        self._store[group_id] = (epoch, description)

    def delete_topology(self, group_id: str) -> None:
        self._store.pop(group_id, None)

    def get_topology(self, group_id: str, epoch: int) -> Description | None:
        entry = self._store.get(group_id)
        return entry[1] if entry is not None and entry[0] == epoch else None


class _Entry(NamedTuple):
    epoch: int
    attempts: int
    next_attempt_ms: int


class Backoff:
    """Kafka's StreamsGroupTopologyDescriptionBackoff (ExponentialBackoff(30 s, x2,
    1 h, jitter 0.2)), per group."""

    INITIAL_MS = 30_000
    MAX_MS = 3_600_000
    MULTIPLIER = 2
    JITTER = 0.2

    def __init__(self, rand: Callable[[float, float], float] = random.uniform) -> None:
        self._entries: dict[str, _Entry] = {}
        self._rand = rand

    def _delay(self, attempts: int) -> int:
        exp_max = math.log(self.MAX_MS / self.INITIAL_MS) / math.log(self.MULTIPLIER)
        term = self.INITIAL_MS * self.MULTIPLIER ** min(attempts, exp_max)
        value = int(self._rand(1 - self.JITTER, 1 + self.JITTER) * term)
        return min(value, self.MAX_MS)

    def _next(self, entry: _Entry | None, epoch: int, now_ms: int) -> _Entry:
        attempts = entry.attempts + 1 if entry is not None and entry.epoch == epoch else 0
        return _Entry(epoch, attempts, now_ms + self._delay(attempts))

    def arm_if_not_active(self, group_id: str, epoch: int, now_ms: int) -> bool:
        """Whether to ask now (and then not again until the back-off has passed)."""
        entry = self._entries.get(group_id)
        if entry is not None and entry.epoch == epoch and now_ms < entry.next_attempt_ms:
            return False
        self._entries[group_id] = self._next(entry, epoch, now_ms)
        return True

    def arm_or_extend(self, group_id: str, epoch: int, now_ms: int) -> None:
        entry = self._entries.get(group_id)
        if entry is not None and entry.epoch > epoch:
            return
        self._entries[group_id] = self._next(entry, epoch, now_ms)

    def clear(self, group_id: str, epoch: int) -> None:
        entry = self._entries.get(group_id)
        if entry is not None and entry.epoch == epoch:
            del self._entries[group_id]

    def clear_group(self, group_id: str) -> None:
        self._entries.pop(group_id, None)
