"""Kafka's offset checkpoint files: ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint`` and ``cleaner-offset-checkpoint``.

Format (Kafka's CheckpointFile): a version line (0), a count line, then one line
``<topic> <partition> <offset>`` per partition. Written whole to a temporary file,
fsynced and renamed over the old one, so a crash leaves either the old or the new file.
"""

from __future__ import annotations

import os

VERSION = 0

TopicPartition = tuple[str, int]


def write_checkpoint(path: str, offsets: dict[TopicPartition, int]) -> None:
    lines = [str(VERSION), str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in
              sorted(offsets.items())]
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, ("\n".join(lines) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def read_checkpoint(path: str) -> dict[TopicPartition, int]:
    """Offsets from a checkpoint file; {} when it does not exist. A malformed file is an
    error: silently ignoring it would lose the recovery point."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return {}
    if len(lines) < 2 or lines[0].strip() != str(VERSION):
        raise ValueError(f"{path}: not a version {VERSION} offset checkpoint")
    count = int(lines[1])
    entries = lines[2 : 2 + count]
    if len(entries) != count:
        raise ValueError(f"{path}: says {count} entries but has {len(entries)}")
    out = {}
    for line in entries:
        topic, partition, offset = line.rsplit(" ", 2)
        out[(topic, int(partition))] = int(offset)
    return out


def fsync_dir(path: str) -> None:
    """Make a rename or a new file in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
