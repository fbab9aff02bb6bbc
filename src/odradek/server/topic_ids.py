"""Topic ids in requests (KIP-516): the one place a request's topic id becomes the name
the rest of the broker works with, and a name becomes the id an answer gives back.

Fetch v13+ names topics by id only. Every id the broker knows maps to its topic's name
(``names_by_id`` of the single node's ``MetadataStore`` or the cluster's
``ClusterMetadata``, kept with every topic made, deleted or re-made); an id it does not
know (a topic deleted, or re-made under the same name with a new id) becomes a name no
topic can have (``?`` is not allowed in one), so that it travels through fetch sessions
like any other partition, as Kafka keeps "unresolved" partitions in its sessions
(KAFKA-13111), and is answered UNKNOWN_TOPIC_ID wherever it is read.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from odradek.protocol.messages import ZERO_UUID

if TYPE_CHECKING:
    from odradek.server.cluster.metadata import ClusterMetadata
    from odradek.server.metadata import MetadataStore

    Metadata = MetadataStore | ClusterMetadata

UNKNOWN = "?"  # the mark of an unknown id's stand-in name: no topic name holds it


def name_for(metadata: Metadata, topic_id: uuid.UUID | None) -> str:
    """The topic's name, or the stand-in of an id this broker does not know."""
    name = metadata.names_by_id.get(topic_id) if topic_id is not None else None
    return name if name is not None else f"{UNKNOWN}{topic_id or ZERO_UUID}"


def is_unknown(name: str) -> bool:
    return name.startswith(UNKNOWN)


def id_for(metadata: Metadata, name: str) -> uuid.UUID:
    """The id to answer under: a stand-in's own, a topic's, or the zero id for a name
    no longer known (deleted since the request named it)."""
    if is_unknown(name):
        return uuid.UUID(name[len(UNKNOWN):])
    topic = metadata.topics.get(name)
    return topic.topic_id if topic is not None else ZERO_UUID
