"""``partition.metadata``: which topic a partition's log directory belongs to (KIP-516).

A directory is named ``<topic>-<partition>``, and a name outlives its topic: a topic
deleted while a broker was down and created again under the same name finds that
broker's old directory waiting for it. The topic id written beside the segments tells
the two apart. Kafka's format (``PartitionMetadataFile``)::

    version: 0
    topic_id: <16 bytes, URL-safe base64 without padding: Kafka's Uuid.toString>

Written when a log is first created for a topic with an id, and for a log from before
this file existed the first time its topic's id is known, as Kafka does when it
upgrades a log to topic ids. Written atomically (a rename) but not synced: creating
10,000 partitions must not cost 10,000 more fsyncs, and a file a machine crash loses
is written again at the next start (the log is adopted: a name deleted and created
again within that crash's window is the one case it cannot tell).
"""

from __future__ import annotations

import base64
import binascii
import os
import uuid

from odradek.storage import checkpoint

FILE_NAME = "partition.metadata"
VERSION = 0


class PartitionMetadataError(ValueError):
    """The file is there but is not Kafka's layout."""


def encode(topic_id: uuid.UUID) -> bytes:
    text = base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
    return f"version: {VERSION}\ntopic_id: {text}\n".encode()


def decode(data: bytes) -> uuid.UUID:
    fields: dict[str, str] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    if fields.get("version") != str(VERSION):
        raise PartitionMetadataError(f"version {fields.get('version')!r}, expected {VERSION}")
    text = fields.get("topic_id", "")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        return uuid.UUID(bytes=raw)
    except (binascii.Error, ValueError):
        raise PartitionMetadataError(f"topic_id {text!r} is not a base64 UUID") from None


def read(directory: str) -> uuid.UUID | None:
    """The topic id recorded in ``directory`` (None: no file yet). Raises
    PartitionMetadataError for a file that does not parse."""
    try:
        with open(os.path.join(directory, FILE_NAME), "rb") as f:
            return decode(f.read())
    except FileNotFoundError:
        return None


def write(directory: str, topic_id: uuid.UUID) -> None:
    checkpoint.write_atomically(os.path.join(directory, FILE_NAME), encode(topic_id),
                                sync=False)
